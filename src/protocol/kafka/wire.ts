/**
 * Primitive readers and writers of Kafka's non-flexible wire format (docs/kafka.md "Framing"),
 * as Kafka's message JSON definitions use them before KIP-482 flexible versions:
 *
 * ```
 * int8 / int16 / int32 / int64   big-endian two's complement
 * boolean                        int8, 0 = false
 * string                         int16 byte length, then UTF-8; −1 = null (nullable strings only)
 * bytes                          int32 byte length, then the bytes; −1 = null (nullable bytes only)
 * [T]                            int32 count, then the elements; −1 = null (nullable arrays only)
 * ```
 *
 * {@link KafkaReader} never reads past the bytes it was given and never allocates a length or a
 * count the peer claims: a length is checked against the bytes present, and an array count
 * against the bytes left divided by the smallest element. int64 values are JS numbers and must be
 * safe integers (docs/decisions.md §6); anything else is refused. Every failure throws a
 * {@link KafkaDecodeError} naming the field.
 */
import { ByteReader, ByteWriter } from "../byte-buffers.ts";

/**
 * A request that does not follow Kafka's grammar. The listener cannot trust the rest of such a
 * connection's bytes and closes it (as Kafka's brokers do).
 */
export class KafkaDecodeError extends Error {
  override name = "KafkaDecodeError";
  /**
   * @param field the grammar field that failed, e.g. `"topics[0].name"`.
   * @param message names the failed action first, then the detail after a colon.
   */
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

const encoder = new TextEncoder();

/** Reads Kafka fields in order from one request body. Positions are relative to its start. */
export class KafkaReader extends ByteReader {
  protected shortField(field: string, bytes: number): Error {
    return this.#error(field, `needs ${bytes} bytes but only ${this.remainingBytes} remain`);
  }

  protected invalidUtf8(field: string): Error {
    return this.#error(field, "is not valid UTF-8");
  }

  #error(field: string, detail: string): KafkaDecodeError {
    return new KafkaDecodeError(field, `Cannot decode ${this.context}: field "${field}" ${detail}`);
  }

  /** Throws a {@link KafkaDecodeError} for `field` with `detail`. */
  fail(field: string, detail: string): never {
    throw this.#error(field, detail);
  }

  int8(field: string): number {
    return this.view.getInt8(this.need(field, 1));
  }

  int16(field: string): number {
    return this.view.getInt16(this.need(field, 2));
  }

  int32(field: string): number {
    return this.view.getInt32(this.need(field, 4));
  }

  /** An int64 as a JS number. @throws KafkaDecodeError if it is not a safe integer. */
  int64(field: string): number {
    const at = this.need(field, 8);
    const hi = this.view.getInt32(at);
    const lo = this.view.getUint32(at + 4);
    // hi in [−2^21, 2^21) keeps hi·2^32 + lo within ±2^53 exactly.
    if (hi < -0x20_0000 || hi > 0x1f_ffff) this.fail(field, "is outside ±(2^53 - 1)");
    const value = hi * 0x1_0000_0000 + lo;
    if (!Number.isSafeInteger(value)) this.fail(field, "is outside ±(2^53 - 1)");
    return value;
  }

  boolean(field: string): boolean {
    return this.int8(field) !== 0;
  }

  /** A non-null string. @throws KafkaDecodeError for null, short or invalid UTF-8. */
  string(field: string): string {
    const s = this.nullableString(field);
    if (s === null) this.fail(field, "is null, which this field does not allow");
    return s;
  }

  /** A nullable string. */
  nullableString(field: string): string | null {
    const length = this.int16(`${field}.length`);
    if (length === -1) return null;
    if (length < 0) this.fail(field, `has length ${length}`);
    return this.utf8(field, length);
  }

  /** Nullable bytes as a view (no copy). */
  nullableBytes(field: string): Uint8Array | null {
    const length = this.int32(`${field}.length`);
    if (length === -1) return null;
    if (length < 0) this.fail(field, `has length ${length}`);
    return this.take(field, length);
  }

  /** Non-null bytes as a view. */
  bytes(field: string): Uint8Array {
    const b = this.nullableBytes(field);
    if (b === null) this.fail(field, "is null, which this field does not allow");
    return b;
  }

  /**
   * An array count, checked against the bytes left: each element takes at least
   * `elementBytesMin` bytes, so a count the rest of the body cannot hold is refused before any
   * array of it is made. −1 (null) is returned as −1 only if `nullable`.
   */
  count(field: string, elementBytesMin: number, nullable = false): number {
    const n = this.int32(`${field}.count`);
    if (n === -1 && nullable) return -1;
    if (n < 0) this.fail(field, `has count ${n}`);
    if (n * elementBytesMin > this.remainingBytes)
      this.fail(
        field,
        `claims ${n} elements, more than the ${this.remainingBytes} bytes left can hold`,
      );
    return n;
  }

  /** Reads a non-null array of `read` results. */
  array<T>(field: string, elementBytesMin: number, read: (index: number) => T): T[] {
    const n = this.count(field, elementBytesMin);
    const out: T[] = [];
    for (let i = 0; i < n; i++) out.push(read(i));
    return out;
  }

  /** Reads a nullable array: null for count −1. */
  nullableArray<T>(field: string, elementBytesMin: number, read: (index: number) => T): T[] | null {
    const n = this.count(field, elementBytesMin, true);
    if (n === -1) return null;
    const out: T[] = [];
    for (let i = 0; i < n; i++) out.push(read(i));
    return out;
  }

  /** Checks that the body was read to its end. */
  end(): void {
    if (this.remainingBytes !== 0)
      throw new KafkaDecodeError(
        "",
        `Cannot decode ${this.context}: ${this.remainingBytes} unexpected bytes after its last field`,
      );
  }
}

/**
 * Writes Kafka fields into a buffer that grows by doubling. Out-of-range values are programmer
 * errors (asserted by the DataView setters' wrapping being checked where it matters).
 */
export class KafkaWriter extends ByteWriter {
  /** Bytes written so far. */
  get length(): number {
    return this.pos;
  }

  int8(v: number): this {
    const at = this.reserve(1);
    this.view.setInt8(this.base + at, v);
    return this;
  }

  int16(v: number): this {
    const at = this.reserve(2);
    this.view.setInt16(this.base + at, v);
    return this;
  }

  int32(v: number): this {
    const at = this.reserve(4);
    this.view.setInt32(this.base + at, v);
    return this;
  }

  /** Writes a safe integer as int64. */
  int64(v: number): this {
    const at = this.reserve(8);
    // The view is read after #reserve, which may have replaced the buffer.
    this.view.setBigInt64(this.base + at, BigInt(v));
    return this;
  }

  boolean(v: boolean): this {
    return this.int8(v ? 1 : 0);
  }

  /** A string; null writes length −1. */
  string(v: string | null): this {
    if (v === null) return this.int16(-1);
    const b = encoder.encode(v);
    this.int16(b.length);
    return this.raw(b);
  }

  /** Bytes with an int32 length; null writes −1. */
  bytes(v: Uint8Array | null): this {
    if (v === null) return this.int32(-1);
    this.int32(v.length);
    return this.raw(v);
  }

  /** Bytes with no length. */
  raw(v: Uint8Array): this {
    return this.copyIn(v);
  }

  /** An int32 count and then each element written by `write`. */
  array<T>(items: readonly T[], write: (item: T) => void): this {
    this.int32(items.length);
    for (const item of items) write(item);
    return this;
  }

  /** Overwrites an int32 at `position` (a size field written before its contents were known). */
  patchInt32(position: number, v: number): this {
    this.view.setInt32(this.base + position, v);
    return this;
  }
}
