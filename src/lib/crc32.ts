/**
 * CRC-32 (IEEE 802.3, the zlib polynomial) over a byte range. Storage computes every record CRC
 * through {@link crc32}; the runtime layer may install a faster native implementation with
 * {@link setCrc32Implementation} (same values: `crc32("123456789") === 0xcbf43926`).
 */
import * as CRC32 from "crc-32";

/** Computes the CRC-32 of `bytes`, as an unsigned 32-bit number. */
export type Crc32Function = (bytes: Uint8Array) => number;

// Deno cannot detect the named exports of crc-32's UMD wrapper and exposes them only as
// `default` (module.exports); Node, Bun and esbuild see them as named exports.
const crcModule = CRC32 as typeof CRC32 & { default?: typeof CRC32 };
const crcBuf = typeof crcModule.buf === "function" ? crcModule.buf : crcModule.default!.buf;

/** The portable implementation (npm `crc-32`); it stays available whatever {@link setCrc32Implementation} installs. */
export const crc32Portable: Crc32Function = (bytes) => crcBuf(bytes, 0) >>> 0;

let current: Crc32Function = crc32Portable;

/** Returns the unsigned CRC-32 of `bytes[start, end)`. */
export function crc32(bytes: Uint8Array, start = 0, end = bytes.length): number {
  return current(start === 0 && end === bytes.length ? bytes : bytes.subarray(start, end));
}

/**
 * Replaces the implementation (for a runtime's native crc32). It is checked against the portable
 * one on a fixed vector first; a mismatch throws and leaves the portable one in place.
 */
export function setCrc32Implementation(fn: Crc32Function): void {
  const probe = new TextEncoder().encode("123456789");
  if (fn(probe) >>> 0 !== 0xcbf43926) throw new Error("crc32 implementation gives wrong values");
  current = (bytes) => fn(bytes) >>> 0;
}

/**
 * Continues a CRC-32 over `bytes` from `previous` (the CRC of the bytes before them; 0 to start):
 * `crc32Continue(crc32Continue(0, a), b) === crc32(a ++ b)`. Portable implementation (≈ 2 GB/s),
 * for checksums of objects read in chunks.
 */
export function crc32Continue(previous: number, bytes: Uint8Array): number {
  return crcBuf(bytes, previous | 0) >>> 0;
}
