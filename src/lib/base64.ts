/**
 * Strict base64 (RFC 4648 section 4: the standard alphabet `A–Z a–z 0–9 + /`, padding required),
 * the only base64 the broker accepts (docs/decisions.md §10).
 *
 * The decoder accepts exactly the strings the encoder can produce and nothing else:
 *
 * | input                                          | result                     |
 * |------------------------------------------------|----------------------------|
 * | length not a multiple of 4 (missing padding)    | rejected                   |
 * | a character outside the alphabet (`-`, `_`, whitespace, line breaks, `%`…) | rejected |
 * | `=` anywhere but the last one or two places     | rejected                   |
 * | non-zero bits below the last byte (`QR==`, `QUJ=`: non-canonical) | rejected  |
 * | the empty string                                | zero bytes                 |
 *
 * Rejecting the non-canonical forms matters: otherwise two different strings decode to the same
 * bytes, and a key sent as base64 could be compared or logged in a form the broker never echoes.
 * Pure: no `node:*`, no Buffer, so it runs unchanged on Node, Deno and Bun.
 */

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const padCode = 0x3d; // "="

/** 6-bit value of each character code below 128, or −1 for a character outside the alphabet. */
const sextetByCode: Int8Array = (() => {
  const table = new Int8Array(128).fill(-1);
  for (let i = 0; i < alphabet.length; i++) table[alphabet.charCodeAt(i)] = i;
  return table;
})();

/** Thrown by {@link decodeBase64} for any input that is not canonical, padded, standard base64. */
export class Base64Error extends Error {
  override name = "Base64Error";
  /**
   * @param message what is wrong, naming the character position where there is one.
   * @param position 0-based index of the offending character, or −1 when it concerns the length.
   */
  constructor(
    message: string,
    readonly position: number,
  ) {
    super(message);
  }
}

/** Number of bytes {@link decodeBase64} would return for a valid string of `text.length` characters. */
function decodedLength(text: string): number {
  let padding = 0;
  if (text.length > 0 && text.charCodeAt(text.length - 1) === padCode) padding++;
  if (text.length > 1 && text.charCodeAt(text.length - 2) === padCode) padding++;
  return (text.length / 4) * 3 - padding;
}

function sextetAt(text: string, position: number): number {
  const code = text.charCodeAt(position);
  const value = code < 128 ? sextetByCode[code] : -1;
  if (value < 0) {
    const shown = code === padCode ? 'padding "="' : `character ${JSON.stringify(text[position])}`;
    const where =
      code === padCode
        ? "is only allowed as the last one or two characters"
        : "is not in the standard base64 alphabet";
    throw new Base64Error(`${shown} at position ${position} ${where}`, position);
  }
  return value;
}

/**
 * Decodes strict RFC 4648 base64 (standard alphabet, padding required, canonical trailing bits).
 * @returns a new array with the decoded bytes (empty for the empty string).
 * @throws Base64Error naming the position and the reason for anything else.
 */
export function decodeBase64(text: string): Uint8Array {
  if (text.length % 4 !== 0) {
    throw new Base64Error(
      `length ${text.length} is not a multiple of 4: padding "=" is required`,
      -1,
    );
  }
  const out = new Uint8Array(decodedLength(text));
  const last = text.length - 4;
  let o = 0;
  // Every quantum but the last is four alphabet characters.
  for (let i = 0; i < last; i += 4) {
    const bits =
      (sextetAt(text, i) << 18) |
      (sextetAt(text, i + 1) << 12) |
      (sextetAt(text, i + 2) << 6) |
      sextetAt(text, i + 3);
    out[o++] = bits >>> 16;
    out[o++] = (bits >>> 8) & 0xff;
    out[o++] = bits & 0xff;
  }
  if (text.length === 0) return out;
  // The last quantum: "xxxx", "xxx=" or "xx==".
  const a = sextetAt(text, last);
  const b = sextetAt(text, last + 1);
  const thirdIsPad = text.charCodeAt(last + 2) === padCode;
  const fourthIsPad = text.charCodeAt(last + 3) === padCode;
  if (thirdIsPad && !fourthIsPad) {
    throw new Base64Error(
      `padding "=" at position ${last + 2} is only allowed as the last one or two characters`,
      last + 2,
    );
  }
  if (thirdIsPad) {
    if ((b & 0x0f) !== 0)
      throw new Base64Error(
        `character ${JSON.stringify(text[last + 1])} at position ${last + 1} has non-zero trailing bits (non-canonical encoding)`,
        last + 1,
      );
    out[o++] = (a << 2) | (b >>> 4);
    return out;
  }
  const c = sextetAt(text, last + 2);
  if (fourthIsPad) {
    if ((c & 0x03) !== 0)
      throw new Base64Error(
        `character ${JSON.stringify(text[last + 2])} at position ${last + 2} has non-zero trailing bits (non-canonical encoding)`,
        last + 2,
      );
    out[o++] = (a << 2) | (b >>> 4);
    out[o++] = ((b & 0x0f) << 4) | (c >>> 2);
    return out;
  }
  const d = sextetAt(text, last + 3);
  out[o++] = (a << 2) | (b >>> 4);
  out[o++] = ((b & 0x0f) << 4) | (c >>> 2);
  out[o++] = ((c & 0x03) << 6) | d;
  return out;
}

/**
 * Encodes bytes as standard, padded base64 (RFC 4648 section 4); the result always decodes with
 * {@link decodeBase64} back to the same bytes.
 */
export function encodeBase64(bytes: Uint8Array): string {
  // Build in chunks so a large value does not become one huge argument list or many tiny strings.
  const chunkChars = 32 * 1024;
  const parts: string[] = [];
  let chunk = "";
  const whole = bytes.length - (bytes.length % 3);
  for (let i = 0; i < whole; i += 3) {
    const bits = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    chunk +=
      alphabet[bits >>> 18] +
      alphabet[(bits >>> 12) & 63] +
      alphabet[(bits >>> 6) & 63] +
      alphabet[bits & 63];
    if (chunk.length >= chunkChars) {
      parts.push(chunk);
      chunk = "";
    }
  }
  const rest = bytes.length - whole;
  if (rest === 1) {
    const bits = bytes[whole] << 16;
    chunk += `${alphabet[bits >>> 18] + alphabet[(bits >>> 12) & 63]}==`;
  } else if (rest === 2) {
    const bits = (bytes[whole] << 16) | (bytes[whole + 1] << 8);
    chunk += `${alphabet[bits >>> 18] + alphabet[(bits >>> 12) & 63] + alphabet[(bits >>> 6) & 63]}=`;
  }
  parts.push(chunk);
  return parts.join("");
}
