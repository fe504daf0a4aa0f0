/**
 * JSON mode of the Durable Streams protocol (protocol §9.1) over records.
 *
 * An append to an `application/json` stream is one JSON value; an array is flattened one level
 * into its elements, anything else is one message. The append becomes *one record* whose value is
 * its messages' exact bytes (whitespace around each trimmed) joined by `,` — so a record written
 * by a one-message append is that JSON value itself, readable as such by every other front door,
 * and a read answers `[` + the values of its records joined by `,` + `]`. Keeping the bytes (rather
 * than re-serializing) keeps numbers beyond 2^53, key order and escapes exactly as sent.
 *
 * Records that other front doors write into a JSON stream's topic are spliced in verbatim: they
 * must be JSON values (or comma-separated values) for reads to stay valid JSON. Empty values
 * (tombstones) carry no message and are skipped.
 */
import { BrokerError, Errors } from "../errors.ts";
import { streamAppendMessagesMax } from "../../lib/limits.ts";

// ignoreBOM keeps a leading byte-order mark in the text, where JSON.parse refuses it: stripped
// here, it would pass the check while the stored bytes (which keep it) are no JSON text.
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** True for the JSON whitespace bytes (space, tab, LF, CR). */
function isSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
}

/**
 * End (exclusive) of the JSON value that starts at `pos` in bytes already known to be valid JSON:
 * strings are skipped with their escapes, brackets and braces are counted.
 */
function valueEnd(bytes: Uint8Array, pos: number, end: number): number {
  let depth = 0;
  let i = pos;
  while (i < end) {
    const b = bytes[i];
    if (b === 0x22) {
      i++;
      while (i < end && bytes[i] !== 0x22) i += bytes[i] === 0x5c ? 2 : 1;
      i++;
      if (depth === 0) return i;
      continue;
    }
    if (b === 0x5b || b === 0x7b) depth++;
    else if (b === 0x5d || b === 0x7d) {
      depth--;
      if (depth === 0) return i + 1;
      if (depth < 0) return i;
    } else if (depth === 0 && (b === 0x2c || isSpace(b))) return i;
    i++;
  }
  return i;
}

/** The byte ranges of the elements of the array that spans `[start, end)` (valid JSON). */
function arrayElements(bytes: Uint8Array, start: number, end: number): [number, number][] {
  const out: [number, number][] = [];
  let i = start + 1;
  for (;;) {
    while (i < end && (isSpace(bytes[i]) || bytes[i] === 0x2c)) i++;
    if (i >= end || bytes[i] === 0x5d) return out;
    const e = valueEnd(bytes, i, end);
    out.push([i, e]);
    i = e;
  }
}

/**
 * True when `bytes` (any bytes: checked before they are parsed) is an array, its first non-space
 * byte `[`, with more than `elementsMax` elements: found at the `elementsMax`-th comma outside
 * strings at depth 1, so the scan stops there and never walks the rest. Constant memory: only the
 * depth is kept, whatever the nesting.
 */
function outerArrayHoldsMore(bytes: Uint8Array, elementsMax: number): boolean {
  let i = 0;
  while (i < bytes.length && isSpace(bytes[i])) i++;
  if (bytes[i] !== 0x5b) return false;
  let depth = 0;
  let commas = 0;
  for (; i < bytes.length; i++) {
    const b = bytes[i];
    if (b === 0x22) {
      // A string: to its closing quote, escapes skipped.
      for (i++; i < bytes.length && bytes[i] !== 0x22; i++) if (bytes[i] === 0x5c) i++;
    } else if (b === 0x5b || b === 0x7b) depth++;
    else if (b === 0x5d || b === 0x7d) {
      if (--depth === 0) return false;
    } else if (b === 0x2c && depth === 1 && ++commas >= elementsMax) return true;
  }
  return false;
}

/** `[start, end)` of `bytes` without the JSON whitespace around it. */
function trim(bytes: Uint8Array, start: number, end: number): [number, number] {
  while (start < end && isSpace(bytes[start])) start++;
  while (end > start && isSpace(bytes[end - 1])) end--;
  return [start, end];
}

/** Joins byte ranges of `bytes` with `,`. */
function join(bytes: Uint8Array, ranges: readonly [number, number][]): Uint8Array {
  let size = Math.max(0, ranges.length - 1);
  for (const [s, e] of ranges) size += e - s;
  const out = new Uint8Array(size);
  let at = 0;
  ranges.forEach(([s, e], i) => {
    if (i > 0) out[at++] = 0x2c;
    out.set(bytes.subarray(s, e), at);
    at += e - s;
  });
  return out;
}

/**
 * The record value of a JSON append (the module comment): its messages joined by `,`, and how
 * many there are. An empty array gives zero messages (an empty value).
 * @param action names the failed action first in an error ("Cannot append to stream \"a\"").
 * @throws BrokerError invalid_request if the body is not UTF-8 or not one JSON value, or is an
 *   array of more than {@link streamAppendMessagesMax} messages (found before it is parsed).
 */
export function jsonAppendValue(
  body: Uint8Array,
  action: string,
): { value: Uint8Array; messages: number } {
  if (outerArrayHoldsMore(body, streamAppendMessagesMax))
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: the append holds more than ${streamAppendMessagesMax} messages (send them in several appends)`,
      { limit_messages: streamAppendMessagesMax },
    );
  let text: string;
  try {
    text = strictUtf8.decode(body);
  } catch {
    throw new BrokerError(Errors.invalidRequest, `${action}: the body is not valid UTF-8`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: the body is not valid JSON: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  const [start, end] = trim(body, 0, body.length);
  if (!Array.isArray(parsed)) return { value: body.subarray(start, end), messages: 1 };
  const elements = arrayElements(body, start, end).map(([s, e]) => trim(body, s, e));
  return { value: join(body, elements), messages: elements.length };
}

/**
 * The messages of a stored JSON record value (`v1,v2,…`), as byte ranges of it. The value is
 * read as the array `[value]`; a value that is not valid JSON counts as one message, verbatim.
 */
export function jsonRecordMessages(value: Uint8Array): [number, number][] {
  if (value.length === 0) return [];
  const wrapped = new Uint8Array(value.length + 2);
  wrapped[0] = 0x5b;
  wrapped.set(value, 1);
  wrapped[wrapped.length - 1] = 0x5d;
  try {
    JSON.parse(strictUtf8.decode(wrapped));
  } catch {
    return [[0, value.length]];
  }
  return arrayElements(wrapped, 0, wrapped.length).map(([s, e]) => {
    const [ts, te] = trim(wrapped, s, e);
    return [ts - 1, te - 1];
  });
}

/** The first `count` messages of a stored JSON record value, as a record value. */
export function jsonValuePrefix(value: Uint8Array, count: number): Uint8Array {
  return join(value, jsonRecordMessages(value).slice(0, count));
}
