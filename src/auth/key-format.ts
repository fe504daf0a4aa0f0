/**
 * The text of an API key (`docs/security.md`):
 *
 * ```
 * esb_<id>_<secret>
 *   id      16 lower-case hex characters: 64 random bits, not secret; names the key in logs and
 *           is how the broker finds its entry in api_keys.json
 *   secret  43 base64url characters (RFC 4648 §5, no padding): 256 random bits
 * ```
 *
 * 64 characters in all. The broker stores only `sha256:<hex>` of the whole text ({@link keyHash});
 * the text itself is shown once, when the key is made, and never again.
 */
import { apiKeyIdBytes, apiKeySecretBytes } from "../lib/limits.ts";
import { utf8 } from "../lib/bytes.ts";
import { type KeyCrypto, toBase64Url, toHex } from "./crypto.ts";

/** Every key starts with this, so a leaked key is easy to recognise (and to scan for). */
export const apiKeyPrefix = "esb_";
/** Characters of the id part. */
export const apiKeyIdChars = apiKeyIdBytes * 2;
/** Characters of the secret part (base64url of {@link apiKeySecretBytes} bytes, unpadded). */
export const apiKeySecretChars = Math.ceil((apiKeySecretBytes * 8) / 6);
/** Characters of a whole key. */
export const apiKeyChars = apiKeyPrefix.length + apiKeyIdChars + 1 + apiKeySecretChars;

const keyPattern = new RegExp(
  `^${apiKeyPrefix}([0-9a-f]{${apiKeyIdChars}})_[A-Za-z0-9_-]{${apiKeySecretChars}}$`,
);

/** A freshly made key: its text (the secret, shown once) and its id. */
export interface NewApiKey {
  /** The whole key, `esb_<id>_<secret>`. Never logged, never stored. */
  text: string;
  /** The id part (not secret). */
  id: string;
}

/** Makes a new key from {@link apiKeyIdBytes} + {@link apiKeySecretBytes} random bytes. */
export function generateApiKey(crypto: KeyCrypto): NewApiKey {
  const id = toHex(crypto.randomBytes(apiKeyIdBytes));
  const secret = toBase64Url(crypto.randomBytes(apiKeySecretBytes));
  return { text: `${apiKeyPrefix}${id}_${secret}`, id };
}

/**
 * The id of a well-formed key text, or null when `text` is not one (wrong length, prefix or
 * alphabet). The length is checked before anything else, so a huge input costs nothing.
 */
export function parseApiKeyId(text: string): string | null {
  if (text.length !== apiKeyChars) return null;
  const m = keyPattern.exec(text);
  return m === null ? null : m[1];
}

/** What `api_keys.json` stores for a key: `sha256:` and the hex digest of the key's UTF-8 text. */
export function keyHash(crypto: KeyCrypto, text: string): string {
  return `sha256:${toHex(crypto.sha256(utf8(text)))}`;
}
