/**
 * Primitive readers and writers for the TCP wire format (grammar: `envelope.ts` and `apis/*.ts`),
 * and the field checks the api codecs share. Every integer is big-endian; `str16` is a u16 byte
 * length followed by that many bytes of UTF-8.
 *
 * {@link WireReader} never reads past the bytes it was given and never allocates a length the
 * peer claims: every length is checked against the bytes actually present first. Every failure
 * throws a {@link ProtocolError} naming the field.
 */
import { BrokerError, Errors, type ErrorKind } from "../broker/errors.ts";
import { errorMessage } from "../lib/errors.ts";
import { formatJsonPath, jsonNestingFault } from "../lib/json-nesting.ts";
import { foreignMessageCharsMax, jsonNestingDepthMax, offsetMax } from "../lib/limits.ts";
import { clip, quote } from "../lib/quote.ts";
import { ByteReader, ByteWriter } from "./byte-buffers.ts";
import { i32At, u16At, u32At } from "../lib/bytes.ts";

/**
 * A request or response that does not follow the wire grammar. It is a {@link BrokerError}, so the
 * transport answers it through the error table like any other: `invalid_request` (a field short,
 * long or out of range), `unsupported` (a u64 above 2^53 − 1), `unsupported_api` (unknown api or
 * version) or `request_too_large` (a frame over the cap).
 */
export class ProtocolError extends BrokerError {
  override name = "ProtocolError";
  /**
   * @param kind the row of the error table.
   * @param field the grammar field that failed (e.g. `"produce.topic"`), or `""` for the frame.
   * @param message names the failed action first, then the detail after a colon.
   */
  constructor(
    kind: ErrorKind,
    readonly field: string,
    message: string,
  ) {
    super(kind, message);
  }
}

const encoder = new TextEncoder();

/** Largest byte length of a `str16`. */
export const str16BytesMax = 0xffff;

/** How many recent strings {@link WireReader.str16Recent} remembers. */
const recentStringsMax = 8;
/** Longest string it remembers, in bytes (topic names are at most 249). */
const recentStringBytesMax = 255;
/** Strings read by {@link WireReader.str16Recent}, with their bytes (copies), oldest replaced first. */
const recentStrings: { bytes: Uint8Array; text: string }[] = [];
let recentNext = 0;

/**
 * Reads fields in order from a byte range. Each method takes the field's grammar name for its
 * error message. Positions are relative to the start of `bytes`.
 */
export class WireReader extends ByteReader {
  protected shortField(field: string, bytes: number): Error {
    return new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${this.context}: field "${field}" needs ${bytes} bytes but only ${this.remainingBytes} remain`,
    );
  }

  protected invalidUtf8(field: string): Error {
    return new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${this.context}: field "${field}" is not valid UTF-8`,
    );
  }

  /** Reads a u8. */
  u8(field: string): number {
    return this.bytesRead[this.need(field, 1)];
  }

  /** Reads a big-endian u16. */
  u16(field: string): number {
    return u16At(this.bytesRead, this.need(field, 2));
  }

  /** Reads a big-endian u32. */
  u32(field: string): number {
    return u32At(this.bytesRead, this.need(field, 4));
  }

  /** Reads a big-endian two's-complement i32. */
  i32(field: string): number {
    return i32At(this.bytesRead, this.need(field, 4));
  }

  /**
   * Reads a big-endian u64 as a JS number.
   * @throws ProtocolError `unsupported` if the value is above 2^53 − 1 (docs/decisions.md §6).
   */
  u64(field: string): number {
    const at = this.need(field, 8);
    const hi = u32At(this.bytesRead, at);
    const lo = u32At(this.bytesRead, at + 4);
    // hi ≤ 0x1fffff keeps hi * 2^32 + lo ≤ 2^53 − 1 exactly.
    if (hi > 0x1f_ffff) {
      throw new ProtocolError(
        Errors.unsupported,
        field,
        `Cannot decode ${this.context}: field "${field}" is 0x${hi.toString(16).padStart(8, "0")}${lo.toString(16).padStart(8, "0")}, above 2^53 - 1`,
      );
    }
    return hi * 0x1_0000_0000 + lo;
  }

  /** Reads `length` bytes as a view (no copy). */
  bytes(field: string, length: number): Uint8Array {
    return this.take(field, length);
  }

  /** Reads every byte left as a view (no copy). */
  rest(): Uint8Array {
    const at = this.pos;
    this.pos = this.bytesRead.length;
    return this.bytesRead.subarray(at);
  }

  /**
   * Reads a `str16`: u16 byte length, then strict UTF-8.
   * @throws ProtocolError `invalid_request` if short or not valid UTF-8.
   */
  str16(field: string): string {
    const length = this.u16(`${field}.length`);
    return this.utf8(field, length);
  }

  /**
   * Reads a `str16` that is usually one of a few recent values (a Produce or Fetch request's
   * topic): when its bytes equal one of the last {@link recentStringsMax} read this way, that
   * string is returned without decoding; otherwise as {@link str16}.
   * @throws ProtocolError `invalid_request` if short or not valid UTF-8.
   */
  str16Recent(field: string): string {
    const length = this.u16(`${field}.length`);
    if (length <= recentStringBytesMax) {
      const at = this.pos;
      const bytes = this.bytesRead;
      if (this.remainingBytes >= length) {
        for (let i = 0; i < recentStrings.length; i++) {
          const recent = recentStrings[i];
          if (recent.bytes.length !== length) continue;
          let same = true;
          for (let j = 0; j < length; j++)
            if (recent.bytes[j] !== bytes[at + j]) {
              same = false;
              break;
            }
          if (same) {
            this.pos = at + length;
            return recent.text;
          }
        }
      }
      const text = this.utf8(field, length);
      recentStrings[recentNext] = { bytes: bytes.slice(at, at + length), text };
      recentNext = (recentNext + 1) % recentStringsMax;
      return text;
    }
    return this.utf8(field, length);
  }

  /**
   * Reads a `u32 length | UTF-8` string (messages, JSON documents).
   * @throws ProtocolError `invalid_request` if short or not valid UTF-8.
   */
  str32(field: string, lengthField: string): string {
    const length = this.u32(lengthField);
    return this.utf8(field, length);
  }

  /**
   * Checks that every byte was read.
   * @throws ProtocolError `invalid_request` naming the last field if bytes are left over.
   */
  end(lastField: string): void {
    if (this.remainingBytes !== 0) {
      throw new ProtocolError(
        Errors.invalidRequest,
        lastField,
        `Cannot decode ${this.context}: ${this.remainingBytes} unexpected bytes after field "${lastField}"`,
      );
    }
  }
}

/**
 * Writes fields into a buffer that grows by doubling. Values are asserted to fit their width:
 * writing an out-of-range value is a programmer error, not a wire condition.
 */
export class WireWriter extends ByteWriter {
  /** Writes a u8. */
  u8(value: number): this {
    checkInt(value, 0, 0xff, "u8");
    const at = this.reserve(1);
    this.view.setUint8(this.base + at, value);
    return this;
  }

  /** Writes a big-endian u16. */
  u16(value: number): this {
    checkInt(value, 0, 0xffff, "u16");
    const at = this.reserve(2);
    this.view.setUint16(this.base + at, value);
    return this;
  }

  /** Writes a big-endian u32. */
  u32(value: number): this {
    checkInt(value, 0, 0xffff_ffff, "u32");
    const at = this.reserve(4);
    this.view.setUint32(this.base + at, value);
    return this;
  }

  /** Writes a big-endian i32. */
  i32(value: number): this {
    checkInt(value, -0x8000_0000, 0x7fff_ffff, "i32");
    const at = this.reserve(4);
    this.view.setInt32(this.base + at, value);
    return this;
  }

  /** Writes a non-negative safe integer as a big-endian u64. */
  u64(value: number): this {
    checkInt(value, 0, offsetMax, "u64");
    const at = this.reserve(8);
    this.view.setUint32(this.base + at, Math.floor(value / 0x1_0000_0000));
    this.view.setUint32(this.base + at + 4, value >>> 0);
    return this;
  }

  /** Copies bytes in. */
  bytes(bytes: Uint8Array): this {
    return this.copyIn(bytes);
  }

  /**
   * Writes a `str16`.
   * @throws RangeError if the UTF-8 form is over 65 535 bytes (callers check user input first).
   */
  str16(text: string): this {
    const bytes = encoder.encode(text);
    if (bytes.length > str16BytesMax)
      throw new RangeError(`string of ${bytes.length} UTF-8 bytes does not fit a str16`);
    return this.u16(bytes.length).bytes(bytes);
  }

  /** Writes `u32 length | UTF-8`. */
  str32(text: string): this {
    const bytes = encoder.encode(text);
    return this.u32(bytes.length).bytes(bytes);
  }

  /** Overwrites a u32 already reserved at `position` (frame lengths). */
  patchU32(position: number, value: number): this {
    checkInt(value, 0, 0xffff_ffff, "u32");
    if (position + 4 > this.pos)
      throw new RangeError(`patch at ${position} is past the written bytes`);
    this.view.setUint32(this.base + position, value);
    return this;
  }
}

// ---------------------------------------------------------------------------------------------
// Field checks shared by the api codecs (`apis/*.ts`)

/**
 * UTF-8 of a caller's string field (topic, group, member or producer id), checked to fit a str16.
 * @throws ProtocolError `invalid_request` naming `field` if it is not a string or is too long.
 */
export function strBytes(value: string, field: string): Uint8Array {
  if (typeof value !== "string")
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot encode request: field "${field}" must be a string`,
    );
  const bytes = encoder.encode(value);
  if (bytes.length > str16BytesMax) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot encode request: field "${field}" is ${bytes.length} UTF-8 bytes, over ${str16BytesMax}`,
    );
  }
  return bytes;
}

/**
 * Checks a caller's value for an integer field before it is written.
 * @throws ProtocolError `invalid_request` naming `field` if it is not an integer in [min, max].
 */
export function requireInt(value: number, min: number, max: number, field: string): void {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot encode request: field "${field}" is ${value}, must be an integer in [${min}, ${max}]`,
    );
  }
}

/**
 * Refuses a repeat count that cannot fit the bytes left (each element needs at least
 * `elementBytesMin`), before any loop or array grows on the peer's word.
 * @throws ProtocolError `invalid_request` naming `field`.
 */
export function checkRepeat(
  r: WireReader,
  count: number,
  elementBytesMin: number,
  field: string,
): void {
  if (count * elementBytesMin > r.remainingBytes) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${r.context}: field "${field}" is ${count}, but only ${r.remainingBytes} bytes remain (at least ${elementBytesMin} per element)`,
    );
  }
}

/** Reads a u8 flag. @throws ProtocolError `invalid_request` unless it is 0 or 1. */
export function readFlag(r: WireReader, field: string): boolean {
  const v = r.u8(field);
  if (v > 1)
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${r.context}: field "${field}" is ${v}, must be 0 or 1`,
    );
  return v === 1;
}

/**
 * Parses a JSON-object field (a config, error details), at most `jsonNestingDepthMax` levels deep
 * (checked on the text first, before anything recurses over it). A value nested deeper is refused
 * with `nestedKind` (CreateTopic: `invalid_config`, as a config key's value is never an array or
 * object), naming the key path.
 * @throws ProtocolError `invalid_request` naming `field` if it is not JSON or not an object.
 */
export function parseJsonObject(
  text: string,
  context: string,
  field: string,
  nestedKind: ErrorKind = Errors.invalidRequest,
): Record<string, unknown> {
  const fault = jsonNestingFault(text);
  if (fault !== null) {
    const path = formatJsonPath([field, ...fault.path]);
    throw new ProtocolError(
      nestedKind,
      field,
      `Cannot decode ${context}: field ${quote(path)} nests arrays or objects deeper than ${jsonNestingDepthMax} levels`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${context}: field "${field}" is not valid JSON: ${clip(errorMessage(error), foreignMessageCharsMax)}`,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${context}: field "${field}" must be a JSON object`,
    );
  }
  return value as Record<string, unknown>;
}

function checkInt(value: number, min: number, max: number, width: string): void {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`value ${value} does not fit ${width}`);
  }
}
