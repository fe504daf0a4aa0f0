/**
 * Durable Stream paths and the names of the topics that hold them (docs/durable-streams.md
 * "Stream paths and topic names").
 *
 * A stream path is the percent-decoded part of the URL after `/v1/stream/`: Unicode segments
 * separated by `/`. A topic name is 1–249 characters of `[A-Za-z0-9._-]`. The mapping, character
 * by character over the path's UTF-8 bytes:
 *
 * | path                            | topic name                                   |
 * |---------------------------------|----------------------------------------------|
 * | `A`–`Z`, `a`–`z`, `0`–`9`, `-`  | itself                                       |
 * | `/`                             | `.`                                          |
 * | any other byte (`.`, `_`, …)    | `_` and the byte as two upper-case hex digits |
 *
 * so `chat/room-1` is the topic `chat.room-1`, `a.b` is `a_2Eb`, `café` is `caf_C3_A9`. The
 * mapping is reversible ({@link streamPathFromTopicName}) and never yields `.` or `..`. A path whose
 * name would pass 249 characters gets a *hashed name*: the first 200 characters of the mapping (cut
 * before an escape, never inside one), `_h`, and the 32 hex digits of MurmurHash3 x86_128 of the
 * path's UTF-8 bytes. `_h` never occurs in an unhashed name (an escape is `_` and two upper-case
 * hex digits), so the two kinds cannot collide; the full path of every stream is also kept in its
 * topic's `topic.json` and compared on every lookup, so even a hash collision (≈ n²/2^129) is
 * refused rather than served.
 */
import { streamPathBytesMax, topicNameCharsMax } from "../../lib/limits.ts";
import { murmur3x86_128 } from "../../lib/murmur3.ts";
import { BrokerError, Errors } from "../errors.ts";

const encoder = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Characters of the unhashed prefix of a hashed name. */
const hashedPrefixChars = 200;
/** Marks a hashed name; an escape is `_` + two upper-case hex digits, so this never occurs otherwise. */
const hashMarker = "_h";

function isPlain(byte: number): boolean {
  return (
    (byte >= 0x30 && byte <= 0x39) ||
    (byte >= 0x41 && byte <= 0x5a) ||
    (byte >= 0x61 && byte <= 0x7a) ||
    byte === 0x2d
  );
}

const hex = "0123456789ABCDEF";

/**
 * Checks a decoded stream path: 1 to {@link streamPathBytesMax} UTF-8 bytes, segments separated
 * by `/` that are neither empty nor `.` or `..`, no control characters (U+0000–U+001F, U+007F).
 * @throws BrokerError invalid_request naming what is wrong.
 */
export function validateStreamPath(path: string): string {
  const refuse = (why: string): never => {
    const shown = path.length > 64 ? `${path.slice(0, 64)}…` : path;
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid stream path ${JSON.stringify(shown)}: ${why}`,
      { parameter: "path" },
    );
  };
  if (path.length === 0) refuse("it is empty");
  const bytes = encoder.encode(path).length;
  if (bytes > streamPathBytesMax)
    refuse(`it is ${bytes} bytes of UTF-8, over the limit of ${streamPathBytesMax}`);
  for (let i = 0; i < path.length; i++) {
    const code = path.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) refuse("it contains a control character");
  }
  for (const segment of path.split("/")) {
    if (segment === "") refuse("it has an empty segment (a leading, trailing or doubled '/')");
    if (segment === "." || segment === "..") refuse(`a segment is ${JSON.stringify(segment)}`);
  }
  if (path.split("/")[0] === "__ds")
    refuse('"__ds" is reserved for the protocol\'s control APIs, which es-broker does not serve');
  return path;
}

/** The escaped form of a path (the table of the module comment), before any length limit. */
function escapeStreamPath(path: string): string {
  let out = "";
  for (const byte of encoder.encode(path)) {
    if (isPlain(byte)) out += String.fromCharCode(byte);
    else if (byte === 0x2f) out += ".";
    else out += `_${hex[byte >> 4]}${hex[byte & 15]}`;
  }
  return out;
}

/**
 * The name of the topic that holds the stream at `path` (validated with
 * {@link validateStreamPath}): its escaped form, or a hashed name when that is over 249 characters.
 */
export function streamTopicName(path: string): string {
  const escaped = escapeStreamPath(path);
  if (escaped.length <= topicNameCharsMax) return escaped;
  let cut = hashedPrefixChars;
  // Never cut inside an escape ("_XX"): back up to before its underscore.
  const underscore = escaped.lastIndexOf("_", cut - 1);
  if (underscore >= 0 && underscore > cut - 3) cut = underscore;
  const digest = new Uint32Array(4);
  const bytes = encoder.encode(path);
  murmur3x86_128(bytes, { start: 0, end: bytes.length }, digest);
  let hash = "";
  for (const word of digest) hash += word.toString(16).padStart(8, "0");
  return `${escaped.slice(0, cut)}${hashMarker}${hash}`;
}

/**
 * The stream path a topic name stands for, inverting {@link streamTopicName}; null for a hashed
 * name (its path is in the topic's `topic.json`) or a name that is not a valid escaping.
 */
export function streamPathFromTopicName(name: string): string | null {
  const bytes: number[] = [];
  for (let i = 0; i < name.length; i++) {
    const ch = name[i];
    if (ch === ".") bytes.push(0x2f);
    else if (ch === "_") {
      const pair = name.slice(i + 1, i + 3);
      if (!/^[0-9A-F]{2}$/.test(pair)) return null;
      bytes.push(Number.parseInt(pair, 16));
      i += 2;
    } else {
      const code = ch.charCodeAt(0);
      if (!isPlain(code)) return null;
      bytes.push(code);
    }
  }
  try {
    return strictUtf8.decode(new Uint8Array(bytes));
  } catch {
    return null;
  }
}
