/**
 * A strict HTTP/1.1 request-head parser for the raw produce path (`raw-connection.ts`,
 * docs/http-api.md "How requests are served"). It accepts only a narrow, unambiguous subset of
 * RFC 9112 that `node:http` parses the same way, and refuses everything else, so that whatever it
 * refuses can be handed, bytes untouched, to `node:http`, which then answers it as it always has.
 * It never answers anything itself.
 *
 * Accepted: the request line `POST <target> HTTP/1.1` with a target of `/` followed by
 * {@link targetByte}s; then field lines `name: value` with a token name, the colon right after it,
 * optional spaces or tabs, a value of visible ASCII, spaces and tabs (trimmed), each line ended by
 * CRLF; then an empty line (CRLF). Refused (handed over): any other method or version, leading empty
 * lines, bare CR or LF, obs-fold (a line starting with a space or tab), bytes outside ASCII, a
 * repeated field name, `Transfer-Encoding`, `Expect`, `Upgrade`, a `Connection` other than
 * `keep-alive`, a `Content-Length` other than one canonical decimal (`0` or no leading zero, at most
 * 15 digits), no `Host`, more than {@link headFieldLinesMax} field lines, and a head over
 * {@link headBytesMax} bytes (half of `node:http`'s 16 KiB, so a head accepted here is never one it
 * refuses for size).
 */

/** Longest head (request line through the empty line) accepted, in bytes. */
export const headBytesMax = 8 * 1024;
/** Most field lines accepted. */
export const headFieldLinesMax = 64;

/** A head {@link parseRequestHead} accepted. */
export interface RequestHead {
  /** Always `POST` (the only method accepted). */
  method: string;
  /** The request target as sent (`/v1/topics/t/records?partition=1`). */
  target: string;
  /** Field names in lower case, in the order sent (no repeats). */
  names: string[];
  /** Field values, trimmed of spaces and tabs, parallel to `names`. */
  values: string[];
  /** The body's length from `Content-Length`, or −1 when there is none. */
  contentLength: number;
  /** Bytes of the head, request line through the empty line. */
  headBytes: number;
}

/** What {@link parseRequestHead} found: a head, `incomplete` (more bytes may make one), or `refused`. */
export type HeadParse = RequestHead | "incomplete" | "refused";

const CR = 0x0d;
const LF = 0x0a;
const SP = 0x20;
const HTAB = 0x09;
const COLON = 0x3a;

/** tchar of RFC 9110 (5.6.2): the bytes of a field name. */
const tokenByte = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
  tokenByte[c.charCodeAt(0)] = 1;

/**
 * Bytes of a request target after its leading `/`: unreserved, `/`, `?`, `=`, `&`, `%`, `:`, `@`,
 * `+`, `,`, `;`. Narrower than what `node:http` takes (the produce route needs only these).
 */
const targetByte = new Uint8Array(256);
for (const c of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/?=&%:@+,;")
  targetByte[c.charCodeAt(0)] = 1;

/** Field-value bytes: visible ASCII, space and tab. */
function isValueByte(b: number): boolean {
  return (b >= SP && b < 0x7f) || b === HTAB;
}

/** `POST ` */
const post = [0x50, 0x4f, 0x53, 0x54, SP];
/** ` HTTP/1.1\r\n` */
const version = [SP, 0x48, 0x54, 0x54, 0x50, 0x2f, 0x31, 0x2e, 0x31, CR, LF];

const latin1 = new TextDecoder("latin1");

/**
 * Field names met on most requests, as the parser returns them (lower case): a line with one of
 * these names gets this very string, not a new one, and its value is compared with the last value
 * of that name and given the same string when equal (a client sends the same head again and
 * again). Letters and `-` only, so a byte matches a name's byte `c` iff `byte | 0x20` is `c`.
 */
const knownNames = [
  "host",
  "content-length",
  "content-type",
  "connection",
  "transfer-encoding",
  "expect",
  "upgrade",
  "authorization",
  "origin",
  "sec-fetch-site",
  "producer-id",
  "producer-epoch",
  "producer-seq",
  "user-agent",
  "accept",
];
const knownNameCodes = knownNames.map((name) => Array.from(name, (c) => c.charCodeAt(0)));
/** The last value seen per known name, same index. */
const knownValues: string[] = knownNames.map(() => "");
/** The last request target seen. */
let lastTarget = "";

/** The index in {@link knownNames} of the name `bytes[start, end)` (any case), or −1. */
function knownName(bytes: Uint8Array, start: number, end: number): number {
  const length = end - start;
  for (let k = 0; k < knownNameCodes.length; k++) {
    const codes = knownNameCodes[k];
    if (codes.length !== length) continue;
    let i = 0;
    while (i < length && (bytes[start + i] | 0x20) === codes[i]) i++;
    if (i === length) return k;
  }
  return -1;
}

/** Whether `text` is the ASCII `bytes[start, end)`. */
function sameText(text: string, bytes: Uint8Array, start: number, end: number): boolean {
  if (text.length !== end - start) return false;
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) !== bytes[start + i]) return false;
  return true;
}

/** The ASCII `bytes[start, end)` as a string: `last` itself when equal. */
function textOf(bytes: Uint8Array, start: number, end: number, last: string): string {
  return sameText(last, bytes, start, end) ? last : latin1.decode(bytes.subarray(start, end));
}

/** `keep-alive`, for the `Connection` check (any case). */
const keepAlive = Array.from("keep-alive", (c) => c.charCodeAt(0));

/** Field-line offsets of the head being parsed: [nameStart, colon, valueStart, valueEnd] per line. */
const marks = new Int32Array(headFieldLinesMax * 4);

/**
 * Parses the request head starting at `bytes[start]` (module comment for what is accepted).
 * Bytes past `end` are not looked at. Never throws; allocates nothing before the head is whole.
 * @returns the head; `incomplete` if `bytes[start..end)` is a prefix of a head it would accept
 *   and shorter than {@link headBytesMax}; else `refused`.
 */
export function parseRequestHead(bytes: Uint8Array, start: number, end: number): HeadParse {
  const limit = Math.min(end, start + headBytesMax);
  let i = start;
  // Request line.
  for (const b of post) {
    if (i >= limit) return incomplete(end, start);
    if (bytes[i++] !== b) return "refused";
  }
  const targetStart = i;
  if (i >= limit) return incomplete(end, start);
  if (bytes[i++] !== 0x2f) return "refused";
  while (i < limit && targetByte[bytes[i]] === 1) i++;
  const targetEnd = i;
  for (const b of version) {
    if (i >= limit) return incomplete(end, start);
    if (bytes[i++] !== b) return "refused";
  }
  // Field lines, checked before any string is made.
  let lines = 0;
  for (;;) {
    if (i >= limit) return incomplete(end, start);
    const first = bytes[i];
    if (first === CR) {
      if (i + 1 >= limit) return incomplete(end, start);
      if (bytes[i + 1] !== LF) return "refused";
      i += 2;
      break;
    }
    if (tokenByte[first] !== 1) return "refused"; // obs-fold, bare LF, a bad name byte
    const nameStart = i;
    while (i < limit && tokenByte[bytes[i]] === 1) i++;
    if (i >= limit) return incomplete(end, start);
    if (bytes[i] !== COLON) return "refused";
    const colon = i++;
    while (i < limit && (bytes[i] === SP || bytes[i] === HTAB)) i++;
    const valueStart = i;
    while (i < limit && isValueByte(bytes[i])) i++;
    if (i >= limit) return incomplete(end, start);
    if (bytes[i] !== CR) return "refused";
    if (i + 1 >= limit) return incomplete(end, start);
    if (bytes[i + 1] !== LF) return "refused";
    let valueEnd = i;
    while (valueEnd > valueStart && (bytes[valueEnd - 1] === SP || bytes[valueEnd - 1] === HTAB))
      valueEnd--;
    i += 2;
    if (lines >= headFieldLinesMax) return "refused";
    const m = lines++ * 4;
    marks[m] = nameStart;
    marks[m + 1] = colon;
    marks[m + 2] = valueStart;
    marks[m + 3] = valueEnd;
  }
  // The head is whole and ASCII: its strings, sliced by byte offsets.
  const names: string[] = [];
  const values: string[] = [];
  let contentLength = -1;
  let host = false;
  for (let m = 0; m < lines * 4; m += 4) {
    const valueStart = marks[m + 2];
    const valueEnd = marks[m + 3];
    const known = knownName(bytes, marks[m], marks[m + 1]);
    let name: string;
    let value: string;
    if (known >= 0) {
      name = knownNames[known];
      value = textOf(bytes, valueStart, valueEnd, knownValues[known]);
      knownValues[known] = value;
    } else {
      name = latin1.decode(bytes.subarray(marks[m], marks[m + 1])).toLowerCase();
      value = latin1.decode(bytes.subarray(valueStart, valueEnd));
    }
    if (names.includes(name)) return "refused";
    switch (name) {
      case "content-length":
        contentLength = decimal(bytes, valueStart, valueEnd);
        if (contentLength < 0) return "refused";
        break;
      case "host":
        host = true;
        break;
      case "connection":
        if (!isKeepAlive(bytes, valueStart, valueEnd)) return "refused";
        break;
      case "transfer-encoding":
      case "expect":
      case "upgrade":
        return "refused";
    }
    names.push(name);
    values.push(value);
  }
  if (!host) return "refused";
  const target = textOf(bytes, targetStart, targetEnd, lastTarget);
  lastTarget = target;
  return {
    method: "POST",
    target,
    names,
    values,
    contentLength,
    headBytes: i - start,
  };
}

/** The canonical decimal `bytes[start, end)` (`0`, or 1–15 digits without a leading zero), or −1. */
function decimal(bytes: Uint8Array, start: number, end: number): number {
  const length = end - start;
  if (length < 1 || length > 15 || (bytes[start] === 0x30 && length > 1)) return -1;
  let n = 0;
  for (let i = start; i < end; i++) {
    const d = bytes[i] - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/** Whether `bytes[start, end)` is `keep-alive` in any case. */
function isKeepAlive(bytes: Uint8Array, start: number, end: number): boolean {
  if (end - start !== keepAlive.length) return false;
  for (let i = 0; i < keepAlive.length; i++)
    if ((bytes[start + i] | 0x20) !== keepAlive[i]) return false;
  return true;
}

/** `incomplete`, unless the bytes so far already reach the head's size limit. */
function incomplete(end: number, start: number): HeadParse {
  return end - start >= headBytesMax ? "refused" : "incomplete";
}
