/**
 * Randomness and hashing for API keys, as an interface: `auth/` never imports `node:*`, so keys
 * can be made and checked in simulations with a seeded generator. The runtime's implementation is
 * `src/runtime/crypto.ts` (`node:crypto`, the same on Node, Deno and Bun).
 */

/** What the key store needs from a cryptography library. */
export interface KeyCrypto {
  /**
   * `count` bytes from a cryptographically secure generator (the runtime's CSPRNG). A test may
   * hand in a seeded one; a production broker never does.
   */
  randomBytes(count: number): Uint8Array;
  /** The SHA-256 digest of `bytes` (32 bytes). Synchronous: authentication runs inside one frame's turn. */
  sha256(bytes: Uint8Array): Uint8Array;
}

/**
 * True when `a` and `b` hold the same bytes, taking the same time whichever bytes differ: every
 * byte is compared and the differences are OR-ed together, with no early exit (a short-circuit
 * comparison leaks how long a guessed prefix is). Lengths are not secret here (both are digests),
 * so a length mismatch returns at once.
 */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

const hexDigits = "0123456789abcdef";

/** Lower-case hexadecimal of `bytes`. */
export function toHex(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += hexDigits[b >> 4] + hexDigits[b & 15];
  return text;
}

/**
 * The bytes of a lower-case hex string of even length.
 * @throws RangeError for anything else.
 */
export function fromHex(text: string): Uint8Array {
  if (text.length % 2 !== 0 || !/^[0-9a-f]*$/.test(text))
    throw new RangeError("not a lower-case hex string of even length");
  const bytes = new Uint8Array(text.length / 2);
  for (let i = 0; i < bytes.length; i++)
    bytes[i] = Number.parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

const base64UrlAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** Base64url of `bytes` without padding (RFC 4648 §5): the alphabet of a key's secret part. */
export function toBase64Url(bytes: Uint8Array): string {
  let text = "";
  let i = 0;
  for (; i + 3 <= bytes.length; i += 3) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    text +=
      base64UrlAlphabet[(n >> 18) & 63] +
      base64UrlAlphabet[(n >> 12) & 63] +
      base64UrlAlphabet[(n >> 6) & 63] +
      base64UrlAlphabet[n & 63];
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i] << 16;
    text += base64UrlAlphabet[(n >> 18) & 63] + base64UrlAlphabet[(n >> 12) & 63];
  } else if (rest === 2) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8);
    text +=
      base64UrlAlphabet[(n >> 18) & 63] +
      base64UrlAlphabet[(n >> 12) & 63] +
      base64UrlAlphabet[(n >> 6) & 63];
  }
  return text;
}
