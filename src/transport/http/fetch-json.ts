/**
 * The fetch answer (`GET /v1/topics/{topic}/partitions/{p}/records`) written as JSON bytes into
 * one buffer, record by record from the stored bytes, instead of building an object per record
 * and a string per key and value and then `JSON.stringify`-ing them all. The bytes are exactly
 * those of `JSON.stringify(fetchJson(result, encoding))` (`encode.ts`; checked against it by
 * `test/unit/http-fetch-json.test.ts`):
 *
 * - base64: written straight from the stored bytes (RFC 4648, padded, as `encodeBase64`);
 * - utf8: a key or value of printable ASCII other than `"` and `\` is copied as it is; any other
 *   goes through `fromUtf8` and `JSON.stringify` (escapes, U+FFFD for invalid UTF-8) as before.
 *
 * Every record is decoded by the same cursor as `forEachRecord`. Its CRC is not checked again
 * here: every read that makes a {@link FetchResult} has checked the CRC of each record it hands
 * out (`Segment.read`, the cold tier's read; docs/storage.md "Records"), moments before, in
 * memory. The NDJSON answer ({@link fetchNdjsonBytes}) writes the same record objects, one per
 * line.
 *
 * An answer can be written into a buffer kept from an earlier answer ({@link AnswerBuffers}):
 * a consumer's steady fetches then allocate no new ~0.3–1.5 MB buffer per answer, which V8 counts
 * as external memory and answers with a mark-compact every few dozen answers
 * (docs/benchmarks.md, "Fetch answers without a new buffer each").
 *
 * The fetch route writes an answer a slice at a time ({@link FetchAnswer}, about
 * {@link answerSliceBytes} each), serving other connections between two, and a larger answer
 * into more buffers of {@link answerChunkBytes} rather than one buffer grown and copied
 * (docs/http-api.md "Large answers are written a slice at a time").
 */
import { AssertionError } from "../../lib/assert.ts";
import { fromUtf8, viewOf } from "../../lib/bytes.ts";
import type { FetchResult } from "../../broker/types.ts";
import { DecodeStatus, RecordCursor } from "../../storage/record.ts";
import type { ValueEncoding } from "./encode.ts";

const base64Codes: Uint8Array = new TextEncoder().encode(
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
);
/** The two base64 characters of every 12 bits, as the two bytes they are written as. */
const base64Pairs: Uint8Array = (() => {
  const pairs = new Uint8Array(8192);
  for (let i = 0; i < 4096; i++) {
    pairs[2 * i] = base64Codes[i >>> 6];
    pairs[2 * i + 1] = base64Codes[i & 63];
  }
  return pairs;
})();
const pad = 0x3d;
const utf8Encoder = new TextEncoder();
/** 1 for the bytes a JSON string may hold as they are (printable ASCII but `"` and `\`), else 0. */
const plainJsonByte: Uint8Array = (() => {
  const plain = new Uint8Array(256);
  for (let b = 0x20; b <= 0x7e; b++) plain[b] = b === 0x22 || b === 0x5c ? 0 : 1;
  return plain;
})();

/**
 * Buffers of finished answers, kept to write later answers into (module comment). Holds at most
 * {@link answerBuffersKept} buffers of at most {@link answerBufferBytesMax} bytes each; a buffer
 * taken is not zeroed (an answer is `buf.subarray(0, pos)`, every byte of it written). A buffer
 * must be given back only once nothing reads it any more (its answer is written whole).
 */
export class AnswerBuffers {
  readonly #free: Uint8Array<ArrayBuffer>[] = [];

  /** A kept buffer of at least `bytes` bytes, else a new one of `bytes`. */
  take(bytes: number): Uint8Array<ArrayBuffer> {
    const free = this.#free;
    for (let i = 0; i < free.length; i++) {
      const buffer = free[i];
      if (buffer.length >= bytes) {
        free[i] = free[free.length - 1];
        free.pop();
        return buffer;
      }
    }
    return new Uint8Array(bytes);
  }

  /** Keeps the buffer under `bytes` (any view of it) for a later answer, if there is room. */
  give(bytes: Uint8Array<ArrayBuffer>): void {
    const buffer = bytes.buffer;
    if (buffer.byteLength > answerBufferBytesMax) return;
    const free = this.#free;
    if (free.length < answerBuffersKept) {
      free.push(new Uint8Array(buffer));
      return;
    }
    // Full: keep the larger buffers (they fit more answers).
    let smallest = 0;
    for (let i = 1; i < free.length; i++) if (free[i].length < free[smallest].length) smallest = i;
    if (free[smallest].length < buffer.byteLength) free[smallest] = new Uint8Array(buffer);
  }
}

/** Most buffers an {@link AnswerBuffers} keeps: one consumer one fetch ahead has two answers out. */
export const answerBuffersKept = 4;
/** Largest buffer an {@link AnswerBuffers} keeps: an answer to the default `max_bytes` (1 MiB) fits. */
export const answerBufferBytesMax = 2 * 1024 * 1024;

/**
 * Bytes of one buffer of an answer at most, unless one write needs more: a buffer is doubled (and
 * copied) up to this size, and a larger answer goes on in further buffers of this size, so that
 * no slice of a large answer copies what the slices before it wrote.
 */
export const answerChunkBytes = 4 * 1024 * 1024;

/** A growing output: one buffer up to {@link answerChunkBytes}, then more of that size. */
class Out {
  buf: Uint8Array<ArrayBuffer>;
  pos = 0;
  /** The full buffers before `buf`, each cut to what was written, and their bytes together. */
  readonly sealed: Uint8Array<ArrayBuffer>[] = [];
  sealedBytes = 0;
  readonly #buffers: AnswerBuffers | undefined;

  constructor(bytes: number, buffers?: AnswerBuffers) {
    this.#buffers = buffers;
    const first = Math.min(bytes, answerChunkBytes);
    this.buf = buffers === undefined ? new Uint8Array(first) : buffers.take(first);
  }

  /** Bytes written in all. */
  get size(): number {
    return this.sealedBytes + this.pos;
  }

  /** Makes room for `bytes` more. */
  room(bytes: number): void {
    if (this.pos + bytes <= this.buf.length) return;
    if (this.buf.length >= answerChunkBytes) {
      this.sealed.push(this.buf.subarray(0, this.pos));
      this.sealedBytes += this.pos;
      this.buf = new Uint8Array(Math.max(answerChunkBytes, bytes));
      this.pos = 0;
      return;
    }
    const size = Math.max(Math.min(this.buf.length * 2, answerChunkBytes), this.pos + bytes);
    const grown = this.#buffers === undefined ? new Uint8Array(size) : this.#buffers.take(size);
    grown.set(this.buf.subarray(0, this.pos));
    this.#buffers?.give(this.buf);
    this.buf = grown;
  }

  /** Writes ASCII text (field names, numbers). */
  ascii(text: string): void {
    this.room(text.length);
    const buf = this.buf;
    let p = this.pos;
    for (let i = 0; i < text.length; i++) buf[p++] = text.charCodeAt(i);
    this.pos = p;
  }

  /** Writes bytes (room made first). */
  bytes(bytes: Uint8Array): void {
    const n = bytes.length;
    const buf = this.buf;
    let p = this.pos;
    for (let i = 0; i < n; i++) buf[p++] = bytes[i];
    this.pos = p;
  }

  /** Writes a non-negative safe integer in decimal (room made first: 16 bytes). */
  integer(value: number): void {
    if (value < 0x8000_0000) {
      this.#smallInteger(value);
      return;
    }
    // Two parts below 2^31 each, so that the digits come from integer division.
    const high = Math.floor(value / 1e8);
    this.#smallInteger(high);
    const buf = this.buf;
    let p = this.pos + 8;
    this.pos = p;
    let rest = value - high * 1e8;
    for (let k = 0; k < 8; k++) {
      const next = (rest / 10) | 0;
      buf[--p] = 0x30 + (rest - next * 10);
      rest = next;
    }
  }

  /**
   * Writes a non-negative safe integer as {@link integer} does (room made first: 16 bytes), from
   * the digits of `last` where `value` is `last.value` or one more (then `last` is `value`'s).
   */
  integerAfter(value: number, last: LastNumber): void {
    const digits = last.digits;
    let length = last.length;
    if (value === last.value + 1) {
      let i = length - 1;
      while (i >= 0 && digits[i] === 0x39) digits[i--] = 0x30;
      if (i >= 0) digits[i]++;
      else length = 0; // 9…9 + 1 has one digit more: written afresh below
    } else if (value !== last.value) length = 0;
    const buf = this.buf;
    let p = this.pos;
    if (length > 0) {
      for (let i = 0; i < length; i++) buf[p++] = digits[i];
      this.pos = p;
    } else {
      this.integer(value);
      length = this.pos - p;
      for (let i = 0; i < length; i++) digits[i] = buf[p + i];
    }
    last.value = value;
    last.length = length;
  }

  /** Writes an integer in [0, 2^31) in decimal. */
  #smallInteger(value: number): void {
    let digits = 1;
    for (let rest = value; rest >= 10; rest = (rest / 10) | 0) digits++;
    const buf = this.buf;
    let p = this.pos + digits;
    this.pos = p;
    let rest = value;
    do {
      const next = (rest / 10) | 0;
      buf[--p] = 0x30 + (rest - next * 10);
      rest = next;
    } while (rest > 0);
  }

  /**
   * Writes any text as UTF-8, reserving a byte per character first and more only for what does
   * not fit (non-ASCII text), rather than three bytes per character up front.
   */
  text(text: string): void {
    let rest = text;
    this.room(rest.length);
    for (;;) {
      const done = utf8Encoder.encodeInto(rest, this.buf.subarray(this.pos));
      this.pos += done.written;
      if (done.read === rest.length) return;
      rest = rest.slice(done.read);
      this.room(rest.length * 3);
    }
  }

  /**
   * Writes the ASCII bytes `bytes[start, end)` (all below 0x80) as a quoted JSON string, escaped
   * as `JSON.stringify` escapes them (`\"`, `\\`, `\b \f \n \r \t`, `\u00xx` for the other
   * control bytes), straight from the bytes: no string of the value, and room for exactly what
   * it becomes.
   */
  asciiEscaped(bytes: Uint8Array, start: number, end: number): void {
    this.room(1);
    this.buf[this.pos++] = 0x22;
    this.asciiEscapedBody(bytes, start, end);
    this.room(1);
    this.buf[this.pos++] = 0x22;
  }

  /** Writes the ASCII bytes `bytes[start, end)` escaped as {@link asciiEscaped} does, without quotes. */
  asciiEscapedBody(bytes: Uint8Array, start: number, end: number): void {
    let bytesOut = 0;
    for (let i = start; i < end; i++) bytesOut += escapedAsciiBytes[bytes[i]];
    this.room(bytesOut);
    const buf = this.buf;
    let p = this.pos;
    for (let i = start; i < end; i++) {
      const b = bytes[i];
      const size = escapedAsciiBytes[b];
      if (size === 1) buf[p++] = b;
      else if (size === 2) {
        buf[p++] = 0x5c;
        buf[p++] = shortEscapes[b];
      } else {
        buf[p++] = 0x5c;
        buf[p++] = 0x75; // u
        buf[p++] = 0x30;
        buf[p++] = 0x30;
        buf[p++] = hexDigits[b >>> 4];
        buf[p++] = hexDigits[b & 15];
      }
    }
    this.pos = p;
  }

  /** Writes `bytes` as a quoted base64 string. */
  base64(bytes: Uint8Array): void {
    this.room(((bytes.length + 2) / 3) * 4 + 2);
    this.buf[this.pos++] = 0x22;
    this.base64Body(bytes);
    this.buf[this.pos++] = 0x22;
  }

  /**
   * Writes `bytes` in base64 without quotes (room made first: 4 bytes for every 3 or part). Of a
   * multiple of 3 bytes, the text is the base64 of the whole's part: pieces can be written one
   * after the other.
   */
  base64Body(bytes: Uint8Array): void {
    const n = bytes.length;
    const buf = this.buf;
    const pairs = base64Pairs;
    let p = this.pos;
    const whole = n - (n % 3);
    let i = 0;
    for (; i < whole; i += 3) {
      const bits = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
      const high = (bits >>> 12) << 1;
      const low = (bits & 4095) << 1;
      buf[p] = pairs[high];
      buf[p + 1] = pairs[high + 1];
      buf[p + 2] = pairs[low];
      buf[p + 3] = pairs[low + 1];
      p += 4;
    }
    if (n - whole === 1) {
      const bits = bytes[i] << 16;
      buf[p++] = base64Codes[bits >>> 18];
      buf[p++] = base64Codes[(bits >>> 12) & 63];
      buf[p++] = pad;
      buf[p++] = pad;
    } else if (n - whole === 2) {
      const bits = (bytes[i] << 16) | (bytes[i + 1] << 8);
      buf[p++] = base64Codes[bits >>> 18];
      buf[p++] = base64Codes[(bits >>> 12) & 63];
      buf[p++] = base64Codes[(bits >>> 6) & 63];
      buf[p++] = pad;
    }
    this.pos = p;
  }

  /**
   * Writes `bytes[start, end)` (`view` views `bytes`) as the JSON string of their UTF-8 text
   * (what `JSON.stringify(fromUtf8(…))` gives).
   */
  utf8String(bytes: Uint8Array, view: DataView, start: number, end: number): void {
    if (!plainJson(bytes, view, start, end)) {
      if (isAscii(bytes, start, end)) this.asciiEscaped(bytes, start, end);
      else this.text(JSON.stringify(fromUtf8(bytes.subarray(start, end))));
      return;
    }
    const n = end - start;
    this.room(n + 2);
    const buf = this.buf;
    buf[this.pos++] = 0x22;
    if (n < 64) {
      let p = this.pos;
      for (let i = start; i < end; i++) buf[p++] = bytes[i];
    } else buf.set(bytes.subarray(start, end), this.pos);
    this.pos += n;
    buf[this.pos++] = 0x22;
  }
}

/**
 * The decimal digits of the last offset (or timestamp) an answer wrote: the next offset is one
 * more and the next timestamp often the same (the records of one produce share it), so
 * {@link Out.integerAfter} copies or increments them instead of dividing them out again.
 */
class LastNumber {
  readonly digits = new Uint8Array(16);
  length = 0;
  /** The number `digits` spell; −2 before the first (no offset or timestamp is −2 or −1 more). */
  value = -2;
}

/** The bytes `JSON.stringify` writes for each ASCII byte inside a string: 1, 2 (`\n`) or 6 (`\u0001`). */
const escapedAsciiBytes: Uint8Array = (() => {
  const sizes = new Uint8Array(128);
  for (let b = 0; b < 128; b++) sizes[b] = b < 0x20 ? 6 : b === 0x22 || b === 0x5c ? 2 : 1;
  for (const b of [0x08, 0x09, 0x0a, 0x0c, 0x0d]) sizes[b] = 2;
  return sizes;
})();
/** The letter after the backslash of the two-byte escapes. */
const shortEscapes: Uint8Array = (() => {
  const letters = new Uint8Array(128);
  const pairs: [number, string][] = [
    [0x08, "b"],
    [0x09, "t"],
    [0x0a, "n"],
    [0x0c, "f"],
    [0x0d, "r"],
    [0x22, '"'],
    [0x5c, "\\"],
  ];
  for (const [b, letter] of pairs) letters[b] = letter.charCodeAt(0);
  return letters;
})();
const hexDigits: Uint8Array = new TextEncoder().encode("0123456789abcdef");

/** Whether every byte of `bytes[start, end)` is below 0x80. */
function isAscii(bytes: Uint8Array, start: number, end: number): boolean {
  for (let i = start; i < end; i++) if (bytes[i] >= 0x80) return false;
  return true;
}

/**
 * Whether every byte of `bytes[start, end)` may stand in a JSON string as it is: printable ASCII
 * but `"` and `\`. Four bytes at a time (`view` views `bytes`), with the word tests of "Bit
 * Twiddling Hacks" (a byte below 0x20, above 0x7e, equal to 0x22 or 0x5c), which are exact as
 * yes/no answers.
 */
function plainJson(bytes: Uint8Array, view: DataView, start: number, end: number): boolean {
  let i = start;
  for (; i + 4 <= end; i += 4) {
    const w = view.getUint32(i, true) | 0;
    const quote = w ^ 0x2222_2222;
    const backslash = w ^ 0x5c5c_5c5c;
    const flagged =
      ((w - 0x2020_2020) & ~w) |
      (w + 0x0101_0101) |
      w |
      ((quote - 0x0101_0101) & ~quote) |
      ((backslash - 0x0101_0101) & ~backslash);
    if ((flagged & 0x8080_8080) !== 0) return false;
  }
  const plain = plainJsonByte;
  for (; i < end; i++) if (plain[bytes[i]] === 0) return false;
  return true;
}

const ascii = (text: string): Uint8Array => new TextEncoder().encode(text);
const offsetField = ascii('{"offset":');
const timestampField = ascii(',"timestamp":');
const keyField = ascii(',"key":');
const nullKey = ascii("null");
const valueField = ascii(',"value":');
/** Bytes of the field names and punctuation of one record object, and of its two numbers at most. */
const recordFramingBytesMax =
  offsetField.length +
  timestampField.length +
  keyField.length +
  valueField.length +
  nullKey.length +
  2 * 16 +
  8;

/** Bytes to reserve for the answer to `result`: base64 is 4/3 of the bytes and each record adds ~70 bytes of names and numbers; utf8 grows as needed. */
function answerBytesGuess(result: FetchResult): number {
  return Math.ceil(result.records.bytes.length * 1.4) + result.records.count * 48 + 128;
}

/**
 * How far past the fetch's `max_bytes` (of stored records) an answer may grow before it stops
 * adding records: base64 and the JSON around each record stay below 2× for records of 100 bytes
 * or more, so mostly values that are escapes (`\u0001` is 6 bytes for 1) or tiny records are
 * cut short (`next_offset` names the rest), and one fetch cannot build an answer six times
 * `max_bytes` (docs/http-api.md, the fetch section).
 */
export const answerBytesPerFetchByte = 2;

/**
 * Bytes an answer grows by in one {@link FetchAnswer.writeSlice} of the fetch route, about (a
 * slice ends at the first record or piece that takes it past this): the route lets the event loop
 * serve other connections between two slices, so a fetch of 64 MiB of control bytes (an answer
 * of 128 MiB) holds the loop a few milliseconds at a time, not seconds (docs/http-api.md
 * "Large answers are written a slice at a time"). An answer to the default `max_bytes` of
 * ordinary records is one or two slices.
 */
export const answerSliceBytes = 1024 * 1024;

/**
 * Key or value bytes written at once when a key or value is larger than this: it is written in
 * pieces of this many (a multiple of 3, so that the base64 of the pieces one after the other is
 * the base64 of the whole), and a slice can end between two, so that one 8 MiB record does not
 * make a slice of 48 MiB.
 */
export const fieldPieceBytes = 48 * 1024;

/** Decodes a piece of a key or value after its first: a BOM there is text, not a mark to drop. */
const pieceDecoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** Whether `b` is a UTF-8 continuation byte (0b10xxxxxx). */
const isContinuation = (b: number): boolean => (b & 0xc0) === 0x80;

/**
 * Where to end a piece of UTF-8 bytes near `end` (`start < end - 3`) so that decoding the pieces
 * one after the other gives the text of the whole: before a byte that is not a continuation
 * (there the whole's decoder starts afresh, after ending the sequence before as the piece's
 * decoder ends it: one U+FFFD if it was cut short), or after three continuation bytes in a row
 * (no sequence has more, so the whole's decoder is between sequences there too).
 */
function utf8PieceEnd(bytes: Uint8Array, end: number): number {
  let at = end;
  while (at > end - 3 && isContinuation(bytes[at])) at--;
  return isContinuation(bytes[at]) ? end : at;
}

/** Where a {@link FetchAnswer} is within the record it writes. */
const Stage = {
  /** Before the record: its separator, offset and timestamp are next. */
  Head: 0,
  /** The key is next, or is being written in pieces. */
  Key: 1,
  /** The value is next, or is being written in pieces. */
  Value: 2,
} as const;

/** What a {@link FetchAnswer} writes: the JSON answer or the NDJSON one. */
export type FetchAnswerForm = "json" | "ndjson";

/**
 * The body of a fetch answer (module comment), written a slice at a time: the fetch route calls
 * {@link writeSlice} until it returns true, letting other connections be served between two
 * calls; the bytes are the same however they are sliced. The JSON answer is
 * `{"records":[…],"next_offset":…,"high_watermark":…,"log_start_offset":…}`; the NDJSON one
 * ({@link fetchNdjsonBytes}) the same record objects one per line. Records stop once the answer
 * passes `answerBytesMax` (at least one is written); {@link nextOffset} then names the first left
 * out. With `buffers`, the answer is written into one of their buffers (give {@link bytes} back
 * once written).
 */
export class FetchAnswer {
  readonly #out: Out;
  readonly #result: FetchResult;
  readonly #base64: boolean;
  readonly #json: boolean;
  readonly #answerBytesMax: number;
  readonly #stored: Uint8Array;
  readonly #view: DataView;
  readonly #cursor = new RecordCursor();
  readonly #lastOffset = new LastNumber();
  readonly #lastTimestamp = new LastNumber();
  readonly #separator: Uint8Array;
  readonly #terminator: Uint8Array;
  /** Index of the record being written, and where it starts in the stored bytes. */
  #index = 0;
  #at = 0;
  #stage: number = Stage.Head;
  /** In a key or value written in pieces: the stored byte the next piece starts at; else −1. */
  #pieceAt = -1;
  #nextOffset = -1;
  #slices = 0;

  constructor(
    result: FetchResult,
    encoding: ValueEncoding,
    form: FetchAnswerForm,
    answerBytesMax = Number.POSITIVE_INFINITY,
    buffers?: AnswerBuffers,
  ) {
    this.#result = result;
    this.#base64 = encoding === "base64";
    this.#json = form === "json";
    this.#answerBytesMax = answerBytesMax;
    this.#stored = result.records.bytes;
    this.#view = viewOf(this.#stored);
    this.#cursor.reset(this.#stored);
    // The read that made `result` checked every CRC (module comment).
    this.#cursor.checkCrc = false;
    this.#separator = this.#json ? comma : empty;
    this.#terminator = this.#json ? closeBrace : closeBraceNewline;
    this.#out = new Out(answerBytesGuess(result), buffers);
    if (this.#json) this.#out.ascii('{"records":[');
  }

  /**
   * Writes about `sliceBytes` more of the answer (up to the end of the record, or of the piece of
   * a large key or value, that takes it past them). Returns true once the answer is whole.
   * @throws AssertionError if the stored bytes do not decode as exactly `records.count` whole
   *   records (as `forEachRecord`).
   */
  writeSlice(sliceBytes: number = Number.POSITIVE_INFINITY): boolean {
    if (this.#nextOffset >= 0) return true;
    this.#slices++;
    const out = this.#out;
    const sliceEnd = out.size + sliceBytes;
    const count = this.#result.records.count;
    while (this.#index < count) {
      if (!this.#writeRecord(sliceEnd)) return false;
      this.#index++;
      if (out.size >= this.#answerBytesMax && this.#index < count) {
        this.#finish(this.#cursor.offset + 1);
        return true;
      }
      if (out.size >= sliceEnd && this.#index < count) return false;
    }
    if (this.#at !== this.#stored.length)
      throw new AssertionError(
        `assertion failed: ${this.#stored.length - this.#at} bytes left after ${count} fetched records`,
      );
    this.#finish(this.#result.nextOffset);
    return true;
  }

  /**
   * The answer's bytes, in one or more buffers one after the other (more than one for an answer
   * past {@link answerChunkBytes}); whole once {@link writeSlice} returned true. Only a single
   * buffer can have come from the `buffers` given (give it back once written).
   */
  get chunks(): Uint8Array<ArrayBuffer>[] {
    const out = this.#out;
    return [...out.sealed, out.buf.subarray(0, out.pos)];
  }

  /** The answer's bytes in one buffer (the {@link chunks} copied into one if there are more). */
  get bytes(): Uint8Array<ArrayBuffer> {
    const chunks = this.chunks;
    if (chunks.length === 1) return chunks[0];
    const all = new Uint8Array(this.#out.size);
    let at = 0;
    for (const chunk of chunks) {
      all.set(chunk, at);
      at += chunk.length;
    }
    return all;
  }

  /** Bytes of the answer so far (all of it once {@link writeSlice} returned true). */
  get size(): number {
    return this.#out.size;
  }

  /** The offset to fetch next (the answer's `next_offset`); −1 until the answer is whole. */
  get nextOffset(): number {
    return this.#nextOffset;
  }

  /** How many calls of {@link writeSlice} wrote part of the answer. */
  get slices(): number {
    return this.#slices;
  }

  #finish(nextOffset: number): void {
    this.#nextOffset = nextOffset;
    if (!this.#json) return;
    const result = this.#result;
    this.#out.ascii(
      `],"next_offset":${nextOffset},"high_watermark":${result.highWatermark},"log_start_offset":${result.logStartOffset}}`,
    );
  }

  /**
   * Writes record `#index` (at `#at`), from where the last slice left it; false if this slice
   * ends inside its key or value (past `sliceEnd`), true once it is written (`#at` then past it).
   */
  #writeRecord(sliceEnd: number): boolean {
    const out = this.#out;
    const cursor = this.#cursor;
    const stored = this.#stored;
    const status = cursor.decode(this.#at, stored.length);
    if (status !== DecodeStatus.Ok) {
      throw new AssertionError(
        `assertion failed: fetched record ${this.#index} of ${this.#result.records.count} does not decode: ${cursor.reason}`,
      );
    }
    if (this.#stage === Stage.Head) {
      out.room(recordFramingBytesMax + 4);
      if (this.#index > 0) out.bytes(this.#separator);
      out.bytes(offsetField);
      out.integerAfter(cursor.offset, this.#lastOffset);
      out.bytes(timestampField);
      // A timestamp before 1970 is negative (the JSON answer writes it as it is).
      if (cursor.timestampMs >= 0) out.integerAfter(cursor.timestampMs, this.#lastTimestamp);
      else out.ascii(String(cursor.timestampMs));
      out.bytes(keyField);
      this.#stage = Stage.Key;
    }
    if (this.#stage === Stage.Key) {
      if (cursor.keyLen < 0) out.bytes(nullKey);
      else if (!this.#string(cursor.keyStart, cursor.keyStart + cursor.keyLen, sliceEnd))
        return false;
      out.room(valueField.length);
      out.bytes(valueField);
      this.#stage = Stage.Value;
    }
    if (!this.#string(cursor.valueStart, cursor.valueStart + cursor.valueLen, sliceEnd))
      return false;
    out.room(4);
    out.bytes(this.#terminator);
    this.#stage = Stage.Head;
    this.#at += cursor.sizeBytes;
    return true;
  }

  /**
   * Writes `stored[start, end)` as a JSON string (base64 or UTF-8 text), whole if it is at most
   * {@link fieldPieceBytes}, else a piece at a time from `#pieceAt`: false if the slice ends
   * (past `sliceEnd`) before the last piece.
   */
  #string(start: number, end: number, sliceEnd: number): boolean {
    const out = this.#out;
    const stored = this.#stored;
    if (this.#pieceAt < 0) {
      if (end - start <= fieldPieceBytes) {
        if (this.#base64) out.base64(stored.subarray(start, end));
        else out.utf8String(stored, this.#view, start, end);
        return true;
      }
      out.room(1);
      out.buf[out.pos++] = 0x22;
      this.#pieceAt = start;
    }
    for (;;) {
      const at = this.#pieceAt;
      let pieceEnd = Math.min(end, at + fieldPieceBytes);
      if (this.#base64) {
        out.room(((pieceEnd - at + 2) / 3) * 4);
        out.base64Body(stored.subarray(at, pieceEnd));
      } else {
        if (pieceEnd < end) pieceEnd = utf8PieceEnd(stored, pieceEnd);
        this.#utf8Piece(at, pieceEnd, at === start);
      }
      this.#pieceAt = pieceEnd;
      if (pieceEnd === end) {
        out.room(1);
        out.buf[out.pos++] = 0x22;
        this.#pieceAt = -1;
        return true;
      }
      if (out.size >= sliceEnd) return false;
    }
  }

  /**
   * Writes the text of `stored[start, end)` escaped as in a JSON string, without quotes: the
   * pieces of a key or value one after the other are then `JSON.stringify` of its whole text.
   */
  #utf8Piece(start: number, end: number, first: boolean): void {
    const out = this.#out;
    const stored = this.#stored;
    if (plainJson(stored, this.#view, start, end)) {
      out.room(end - start);
      out.buf.set(stored.subarray(start, end), out.pos);
      out.pos += end - start;
    } else if (isAscii(stored, start, end)) out.asciiEscapedBody(stored, start, end);
    else {
      const piece = stored.subarray(start, end);
      // Only the whole's first piece may begin with a BOM that the decoder drops (as `fromUtf8`).
      const text = JSON.stringify(first ? fromUtf8(piece) : pieceDecoder.decode(piece));
      out.text(text.slice(1, -1));
    }
  }
}

const comma = ascii(",");
const empty = new Uint8Array(0);
const closeBrace = ascii("}");
const closeBraceNewline = ascii("}\n");

/**
 * The JSON body of a fetch answer as UTF-8 bytes (module comment), written in one go
 * ({@link FetchAnswer}, whose slices the fetch route writes one per event-loop turn). Records stop
 * once the answer passes `answerBytesMax` (at least one is written); `next_offset` then names the
 * first left out. With `buffers`, the answer is written into one of their buffers (give it back
 * once written).
 * @throws AssertionError if the stored bytes do not decode as exactly `records.count` whole
 *   records (as `forEachRecord`).
 */
export function fetchJsonBytes(
  result: FetchResult,
  encoding: ValueEncoding,
  answerBytesMax = Number.POSITIVE_INFINITY,
  buffers?: AnswerBuffers,
): Uint8Array<ArrayBuffer> {
  const answer = new FetchAnswer(result, encoding, "json", answerBytesMax, buffers);
  answer.writeSlice();
  return answer.bytes;
}

/**
 * The NDJSON body of a fetch answer (`Accept: application/x-ndjson`, docs/http-api.md "`GET /v1/topics/{topic}/partitions/{p}/records` — fetch"):
 * one record per line, each line the JSON object the JSON answer has in `records` (the same
 * bytes), every line ending in `\n`; no records, no bytes. The partition's bounds go in the
 * answer's headers instead, so a reader can ask for the next records as soon as the head arrives,
 * and can split the body at `\n` bytes (JSON never has a raw newline inside a string) and parse
 * each line alone, or only the lines it needs.
 * Records stop once the body passes `answerBytesMax`, as in {@link fetchJsonBytes}: the returned
 * `nextOffset` (the `Next-Offset` header) names the first left out. `buffers` as in
 * {@link fetchJsonBytes}. Written in one go, as {@link fetchJsonBytes}.
 * @throws AssertionError as {@link fetchJsonBytes}.
 */
export function fetchNdjsonBytes(
  result: FetchResult,
  encoding: ValueEncoding,
  answerBytesMax = Number.POSITIVE_INFINITY,
  buffers?: AnswerBuffers,
): { bytes: Uint8Array<ArrayBuffer>; nextOffset: number } {
  const answer = new FetchAnswer(result, encoding, "ndjson", answerBytesMax, buffers);
  answer.writeSlice();
  return { bytes: answer.bytes, nextOffset: answer.nextOffset };
}
