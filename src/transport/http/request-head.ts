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
  // Field lines: [nameStart, colon, valueStart, valueEnd) per line, checked before any string is made.
  const marks: number[] = [];
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
    if (marks.length >= headFieldLinesMax * 4) return "refused";
    marks.push(nameStart, colon, valueStart, valueEnd);
  }
  // The head is whole and ASCII: one string, sliced by byte offsets.
  const text = latin1.decode(bytes.subarray(start, i));
  const names: string[] = [];
  const values: string[] = [];
  let contentLength = -1;
  let host = false;
  for (let m = 0; m < marks.length; m += 4) {
    const name = text.slice(marks[m] - start, marks[m + 1] - start).toLowerCase();
    const value = text.slice(marks[m + 2] - start, marks[m + 3] - start);
    if (names.includes(name)) return "refused";
    switch (name) {
      case "content-length":
        if (!/^(?:0|[1-9][0-9]{0,14})$/.test(value)) return "refused";
        contentLength = Number(value);
        break;
      case "host":
        host = true;
        break;
      case "connection":
        if (value.toLowerCase() !== "keep-alive") return "refused";
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
  return {
    method: "POST",
    target: text.slice(targetStart - start, targetEnd - start),
    names,
    values,
    contentLength,
    headBytes: i - start,
  };
}

/** `incomplete`, unless the bytes so far already reach the head's size limit. */
function incomplete(end: number, start: number): HeadParse {
  return end - start >= headBytesMax ? "refused" : "incomplete";
}
