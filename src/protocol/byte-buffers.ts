/**
 * The byte cursors both binary protocols' codecs build on: the TCP protocol's
 * {@link WireReader}/{@link WireWriter} (`wire.ts`) and the Kafka listener's
 * `KafkaReader`/`KafkaWriter` (`kafka/wire.ts`). A reader never reads past the bytes it was given
 * and checks every length against the bytes present before using it; each protocol says what a
 * short or malformed field throws ({@link ByteReader.shortField}). A writer grows its buffer by
 * doubling.
 */

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Reads fields in order from one byte range; positions are relative to its start. */
export abstract class ByteReader {
  protected readonly bytesRead: Uint8Array;
  #view: DataView | null = null;
  protected pos = 0;

  /**
   * @param bytes the range to read (a view; not copied).
   * @param context what is decoded, for messages, e.g. `"Produce request"`.
   */
  constructor(
    bytes: Uint8Array,
    readonly context: string,
  ) {
    this.bytesRead = bytes;
  }

  /**
   * A DataView over the bytes read, made on first use: a reader of a small request (a Produce
   * of one record) reads its integers from the bytes and never pays for one.
   */
  protected get view(): DataView {
    this.#view ??= new DataView(
      this.bytesRead.buffer,
      this.bytesRead.byteOffset,
      this.bytesRead.byteLength,
    );
    return this.#view;
  }

  /** Bytes not yet read. */
  get remainingBytes(): number {
    return this.bytesRead.length - this.pos;
  }

  /** Bytes read so far. */
  get position(): number {
    return this.pos;
  }

  /** The protocol's error for `field` that needs `bytes` bytes where fewer remain. */
  protected abstract shortField(field: string, bytes: number): Error;

  /** The protocol's error for `field` that is not valid UTF-8. */
  protected abstract invalidUtf8(field: string): Error;

  /** Consumes `bytes` bytes of `field` and returns where they start. @throws {@link shortField} if fewer remain. */
  protected need(field: string, bytes: number): number {
    if (this.remainingBytes < bytes) throw this.shortField(field, bytes);
    const at = this.pos;
    this.pos = at + bytes;
    return at;
  }

  /** Consumes `length` bytes of `field` as a view (no copy). */
  protected take(field: string, length: number): Uint8Array {
    const at = this.need(field, length);
    return this.bytesRead.subarray(at, at + length);
  }

  /** Consumes `length` bytes of `field` as strict UTF-8. */
  protected utf8(field: string, length: number): string {
    const bytes = this.take(field, length);
    try {
      return strictUtf8.decode(bytes);
    } catch {
      throw this.invalidUtf8(field);
    }
  }
}

/**
 * Writers of at most this many bytes take their buffer from a shared slab instead of a buffer
 * of their own: one allocation per {@link slabBytes} of small frames (a Produce answer, a
 * one-record request) instead of one per frame. Every slice is handed out once and never
 * reused; a slab is freed once no frame cut from it is alive.
 */
const slabbedBytesMax = 1024;
/** Size of one slab. */
const slabBytes = 16 * 1024;
let slab = new ArrayBuffer(slabBytes);
let slabView = new DataView(slab);
let slabUsed = 0;

/**
 * Writes fields into a buffer that grows by doubling. `view` covers more than `buf`: the field at
 * `buf[at]` is at `view` offset `base + at`.
 */
export class ByteWriter {
  protected buf: Uint8Array;
  protected view: DataView;
  /** Offset of `buf[0]` in `view`. */
  protected base: number;
  protected pos = 0;

  /** @param capacityBytes initial size; pass the exact size when it is known to avoid copies. */
  constructor(capacityBytes = 256) {
    const capacity = Math.max(16, capacityBytes);
    if (capacity <= slabbedBytesMax) {
      if (slabUsed + capacity > slabBytes) {
        slab = new ArrayBuffer(slabBytes);
        slabView = new DataView(slab);
        slabUsed = 0;
      }
      this.buf = new Uint8Array(slab, slabUsed, capacity);
      this.view = slabView;
      this.base = slabUsed;
      slabUsed += (capacity + 7) & ~7;
    } else {
      this.buf = new Uint8Array(capacity);
      this.view = new DataView(this.buf.buffer);
      this.base = 0;
    }
  }

  /** Bytes written so far. */
  get position(): number {
    return this.pos;
  }

  /**
   * Makes room for `bytes` more and returns where they go in `buf` (at `base +` that in `view`).
   * It may replace `buf`, `view` and `base`: callers read those only after it returns
   * (`this.view.setX(this.base + this.reserve(n), …)` would take the old ones before the call).
   */
  protected reserve(bytes: number): number {
    const at = this.pos;
    if (at + bytes > this.buf.length) {
      let capacity = this.buf.length * 2;
      while (capacity < at + bytes) capacity *= 2;
      const next = new Uint8Array(capacity);
      next.set(this.buf.subarray(0, at));
      this.buf = next;
      this.view = new DataView(next.buffer);
      this.base = 0;
    }
    this.pos = at + bytes;
    return at;
  }

  /** Copies `bytes` in, with no length. */
  protected copyIn(bytes: Uint8Array): this {
    const at = this.reserve(bytes.length);
    this.buf.set(bytes, at);
    return this;
  }

  /**
   * The bytes written: a view of the internal buffer, which may be a slice of a shared slab
   * (so its `byteOffset` need not be 0). Write nothing more after taking it.
   */
  finish(): Uint8Array {
    // Sized exactly (a Produce answer, a request of known size): the buffer itself, no new view.
    return this.pos === this.buf.length ? this.buf : this.buf.subarray(0, this.pos);
  }
}
