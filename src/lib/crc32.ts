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
let native = false;

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
  native = fn !== crc32Portable;
}

/**
 * Continues a CRC-32 over `bytes` from `previous` (the CRC of the bytes before them; 0 to start):
 * `crc32Continue(crc32Continue(0, a), b) === crc32(a ++ b)`. Portable implementation (≈ 2 GB/s),
 * for checksums of objects read in chunks.
 */
export function crc32Continue(previous: number, bytes: Uint8Array): number {
  return crcBuf(bytes, previous | 0) >>> 0;
}

/** The CRC-32 polynomial, reflected (zlib's `POLY`). */
const polynomial = 0xedb88320;

/** a·b modulo the polynomial, both as reflected 32-bit polynomials (zlib's `multmodp`). */
function multiplyModP(a: number, b: number): number {
  let m = 0x80000000;
  let p = 0;
  for (;;) {
    if ((a & m) !== 0) {
      p ^= b;
      if ((a & (m - 1)) === 0) break;
    }
    m >>>= 1;
    b = (b & 1) !== 0 ? (b >>> 1) ^ polynomial : b >>> 1;
  }
  return p >>> 0;
}

/** x^(2^k) modulo the polynomial, k = 0…31 (zlib's `x2n_table`). */
const xToTwoToThe: Uint32Array = (() => {
  const table = new Uint32Array(32);
  let p = 0x40000000; // x^1
  table[0] = p;
  for (let k = 1; k < 32; k++) table[k] = p = multiplyModP(p, p);
  return table;
})();

/** x^(8·bytes) modulo the polynomial: what shifting a CRC over `bytes` zero bytes multiplies it by. */
function xToBytes(bytes: number): number {
  let p = 0x80000000; // x^0
  let k = 3;
  for (let n = bytes; n > 0; n = Math.floor(n / 2), k++)
    if (n % 2 === 1) p = multiplyModP(xToTwoToThe[k & 31], p);
  return p;
}

/** Bits of the byte count each level of shift tables covers: 4 levels cover counts below 2^24. */
const shiftDigitBits = 6;
const shiftLevels = 4;
const shiftDigits = 1 << shiftDigitBits;
/** Above this many bytes {@link crc32Shift} multiplies bit by bit instead of by table. */
const shiftTableBytesMax = 2 ** (shiftDigitBits * shiftLevels) - 1;

/**
 * Multiplication tables for x^(8·d·64^level), built when first needed (4 KiB each, at most
 * 4 × 63 of them, 1 MiB): multiplying a CRC by one is four lookups, where multiplying bit by bit
 * takes up to 32 steps.
 */
const shiftTables: (Int32Array | undefined)[] = new Array(shiftLevels * shiftDigits);

function shiftTable(level: number, digit: number): Int32Array {
  const slot = level * shiftDigits + digit;
  let table = shiftTables[slot];
  if (table !== undefined) return table;
  const factor = xToBytes(digit * 2 ** (shiftDigitBits * level));
  table = new Int32Array(1024);
  // The product is linear in the CRC: each byte's table from the products of its 8 bits.
  for (let part = 0; part < 4; part++) {
    const base = part * 256;
    for (let bit = 0; bit < 8; bit++) {
      const one = multiplyModP(factor, (1 << (part * 8 + bit)) >>> 0) | 0;
      const step = 1 << bit;
      for (let i = 0; i < step; i++) table[base + step + i] = table[base + i] ^ one;
    }
  }
  shiftTables[slot] = table;
  return table;
}

/**
 * The CRC-32 of `A ++ B` from `crcA` when `B` is `bytes` zero bytes and the CRC of `B` alone is
 * taken as 0 — that is, what {@link crc32Combine} needs: `crc32Combine(a, b, n) ===
 * crc32Shift(a, n) ^ b`. A few table lookups for up to 16 MiB.
 */
export function crc32Shift(crc: number, bytes: number): number {
  if (bytes > shiftTableBytesMax) return multiplyModP(xToBytes(bytes), crc >>> 0);
  let c = crc | 0;
  for (let level = 0, n = bytes; n > 0; level++, n >>>= shiftDigitBits) {
    const digit = n & (shiftDigits - 1);
    if (digit === 0) continue;
    const t = shiftTable(level, digit);
    c = t[c & 255] ^ t[256 + ((c >>> 8) & 255)] ^ t[512 + ((c >>> 16) & 255)] ^ t[768 + (c >>> 24)];
  }
  return c >>> 0;
}

/**
 * The CRC-32 of `A ++ B` from the CRC of `A`, the CRC of `B` and the length of `B` (zlib's
 * `crc32_combine`), without reading either.
 */
export function crc32Combine(crcA: number, crcB: number, bytesB: number): number {
  return (crc32Shift(crcA, bytesB) ^ crcB) >>> 0;
}

/** Whether a runtime's own CRC-32 was installed ({@link setCrc32Implementation}). */
export function crc32IsNative(): boolean {
  return native;
}

/** The byte-at-a-time table of the reflected polynomial. */
const byteTable: Int32Array = (() => {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = (c & 1) !== 0 ? (c >>> 1) ^ polynomial : c >>> 1;
    table[n] = c;
  }
  return table;
})();

/**
 * Continues a CRC-32 over `bytes[start, end)` from `previous` (as {@link crc32Continue}), a byte
 * at a time with no allocation: for a few bytes between ranges whose CRCs are combined.
 */
export function crc32ContinueRange(
  previous: number,
  bytes: Uint8Array,
  start: number,
  end: number,
): number {
  let c = ~previous;
  for (let i = start; i < end; i++) c = byteTable[(c ^ bytes[i]) & 255] ^ (c >>> 8);
  return ~c >>> 0;
}
