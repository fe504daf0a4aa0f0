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
 * Every record is decoded (and its CRC checked) by the same cursor as `forEachRecord`. The NDJSON
 * answer ({@link fetchNdjsonBytes}) writes the same record objects, one per line.
 */
import { AssertionError } from "../../lib/assert.ts";
import { fromUtf8 } from "../../lib/bytes.ts";
import type { FetchResult } from "../../broker/types.ts";
import { DecodeStatus, RecordCursor } from "../../storage/record.ts";
import type { ValueEncoding } from "./encode.ts";

const base64Codes: Uint8Array = new TextEncoder().encode(
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
);
const pad = 0x3d;
const utf8Encoder = new TextEncoder();

/** A growing output buffer. */
class Out {
  buf: Uint8Array<ArrayBuffer>;
  pos = 0;

  constructor(bytes: number) {
    this.buf = new Uint8Array(bytes);
  }

  /** Makes room for `bytes` more. */
  room(bytes: number): void {
    if (this.pos + bytes <= this.buf.length) return;
    const grown = new Uint8Array(Math.max(this.buf.length * 2, this.pos + bytes));
    grown.set(this.buf.subarray(0, this.pos));
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

  /** Writes any text as UTF-8. */
  text(text: string): void {
    this.room(text.length * 3);
    this.pos += utf8Encoder.encodeInto(text, this.buf.subarray(this.pos)).written;
  }

  /** Writes `bytes` as a quoted base64 string. */
  base64(bytes: Uint8Array): void {
    const n = bytes.length;
    this.room(((n + 2) / 3) * 4 + 2);
    const buf = this.buf;
    let p = this.pos;
    buf[p++] = 0x22;
    const whole = n - (n % 3);
    let i = 0;
    for (; i < whole; i += 3) {
      const bits = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
      buf[p++] = base64Codes[bits >>> 18];
      buf[p++] = base64Codes[(bits >>> 12) & 63];
      buf[p++] = base64Codes[(bits >>> 6) & 63];
      buf[p++] = base64Codes[bits & 63];
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
    buf[p++] = 0x22;
    this.pos = p;
  }

  /** Writes `bytes` as the JSON string of their UTF-8 text (what `JSON.stringify(fromUtf8(bytes))` gives). */
  utf8String(bytes: Uint8Array): void {
    const n = bytes.length;
    for (let i = 0; i < n; i++) {
      const b = bytes[i];
      if (b < 0x20 || b > 0x7e || b === 0x22 || b === 0x5c) {
        this.text(JSON.stringify(fromUtf8(bytes)));
        return;
      }
    }
    this.room(n + 2);
    const buf = this.buf;
    buf[this.pos++] = 0x22;
    buf.set(bytes, this.pos);
    this.pos += n;
    buf[this.pos++] = 0x22;
  }
}

/**
 * Writes the records of `result` as `{"offset":…,"timestamp":…,"key":…,"value":…}` objects,
 * `separator` between two (`,` in the JSON answer) and `terminator` after each (`\n` in NDJSON).
 * @throws AssertionError as {@link fetchJsonBytes}.
 */
function writeRecords(
  out: Out,
  result: FetchResult,
  encoding: ValueEncoding,
  separator: string,
  terminator: string,
): void {
  const stored = result.records.bytes;
  const cursor = new RecordCursor().reset(stored);
  const end = stored.length;
  const base64 = encoding === "base64";
  let pos = 0;
  for (let i = 0; i < result.records.count; i++) {
    const status = cursor.decode(pos, end);
    if (status !== DecodeStatus.Ok) {
      throw new AssertionError(
        `assertion failed: fetched record ${i} of ${result.records.count} does not decode: ${cursor.reason}`,
      );
    }
    out.ascii(
      `${i === 0 ? "" : separator}{"offset":${cursor.offset},"timestamp":${cursor.timestampMs},"key":`,
    );
    const key = cursor.key();
    if (key === null) out.ascii("null");
    else if (base64) out.base64(key);
    else out.utf8String(key);
    out.ascii(',"value":');
    if (base64) out.base64(cursor.value());
    else out.utf8String(cursor.value());
    out.ascii(terminator);
    pos += cursor.sizeBytes;
  }
  if (pos !== end)
    throw new AssertionError(
      `assertion failed: ${end - pos} bytes left after ${result.records.count} fetched records`,
    );
}

/** Bytes to reserve for the answer to `result`: base64 is 4/3 of the bytes and each record adds ~70 bytes of names and numbers; utf8 grows as needed. */
function answerBytesGuess(result: FetchResult): number {
  return Math.ceil(result.records.bytes.length * 1.4) + result.records.count * 48 + 128;
}

/**
 * The JSON body of a fetch answer as UTF-8 bytes (module comment).
 * @throws AssertionError if the stored bytes do not decode as exactly `records.count` whole
 *   records (as `forEachRecord`).
 */
export function fetchJsonBytes(
  result: FetchResult,
  encoding: ValueEncoding,
): Uint8Array<ArrayBuffer> {
  const out = new Out(answerBytesGuess(result));
  out.ascii('{"records":[');
  writeRecords(out, result, encoding, ",", "}");
  out.ascii(
    `],"next_offset":${result.nextOffset},"high_watermark":${result.highWatermark},"log_start_offset":${result.logStartOffset}}`,
  );
  return out.buf.subarray(0, out.pos);
}

/**
 * The NDJSON body of a fetch answer (`Accept: application/x-ndjson`, docs/http-api.md "`GET /v1/topics/{topic}/partitions/{p}/records` — fetch"):
 * one record per line, each line the JSON object the JSON answer has in `records` (the same
 * bytes), every line ending in `\n`; no records, no bytes. The partition's bounds go in the
 * answer's headers instead, so a reader can ask for the next records as soon as the head arrives,
 * and can split the body at `\n` bytes (JSON never has a raw newline inside a string) and parse
 * each line alone, or only the lines it needs.
 * @throws AssertionError as {@link fetchJsonBytes}.
 */
export function fetchNdjsonBytes(
  result: FetchResult,
  encoding: ValueEncoding,
): Uint8Array<ArrayBuffer> {
  const out = new Out(answerBytesGuess(result));
  writeRecords(out, result, encoding, "", "}\n");
  return out.buf.subarray(0, out.pos);
}
