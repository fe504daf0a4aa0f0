/**
 * The runtime's {@link KeyCrypto}: `node:crypto`'s CSPRNG and SHA-256, which behave the same on
 * Node, Deno and Bun (and in the compiled binary).
 */
import { createHash, randomBytes } from "node:crypto";
import type { KeyCrypto } from "../auth/crypto.ts";

/** Random bytes from the operating system's CSPRNG; SHA-256 from the runtime's OpenSSL/BoringSSL. */
export const systemKeyCrypto: KeyCrypto = {
  randomBytes(count: number): Uint8Array {
    const bytes = randomBytes(count);
    return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  },
  sha256(bytes: Uint8Array): Uint8Array {
    const digest = createHash("sha256").update(bytes).digest();
    return new Uint8Array(digest.buffer, digest.byteOffset, digest.byteLength);
  },
};
