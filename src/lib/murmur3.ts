/**
 * MurmurHash3 x86_128 (Austin Appleby's public-domain algorithm, the `MurmurHash3_x86_128`
 * variant of SMHasher), over a range of a byte array, written into a caller's `Uint32Array` so
 * that hashing allocates nothing. Compaction uses it as a 128-bit digest of a record key: it keeps
 * one fixed-size digest per key in memory instead of the key itself.
 *
 * Blocks are read little-endian, as the reference code does on x86, so the output words equal
 * the reference's `out[0..3]` on every platform. Not a cryptographic hash: a digest collision
 * between two different keys is possible in principle (about n²/2^129 for n keys, ~3·10^-27 for a
 * billion keys) and would make compaction treat them as one key.
 */

const c1 = 0x239b961b;
const c2 = 0xab0e9789;
const c3 = 0x38b34ae5;
const c4 = 0xa1e38b93;

function rotl(x: number, r: number): number {
  return (x << r) | (x >>> (32 - r));
}

function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function block(bytes: Uint8Array, p: number): number {
  return bytes[p] | (bytes[p + 1] << 8) | (bytes[p + 2] << 16) | (bytes[p + 3] << 24);
}

/**
 * Hashes `bytes[start, end)` with `seed` and writes the four 32-bit words of the 128-bit digest
 * to `out[0..3]` (as unsigned integers).
 * @param out at least 4 words long.
 */
export function murmur3x86_128(
  bytes: Uint8Array,
  range: { start: number; end: number; seed?: number },
  out: Uint32Array,
): void {
  const { start, end } = range;
  const seed = (range.seed ?? 0) >>> 0;
  const len = end - start;
  let h1 = seed;
  let h2 = seed;
  let h3 = seed;
  let h4 = seed;
  const blocksEnd = start + (len - (len & 15));
  for (let p = start; p < blocksEnd; p += 16) {
    let k1 = block(bytes, p);
    let k2 = block(bytes, p + 4);
    let k3 = block(bytes, p + 8);
    let k4 = block(bytes, p + 12);

    k1 = Math.imul(k1, c1);
    k1 = rotl(k1, 15);
    k1 = Math.imul(k1, c2);
    h1 ^= k1;
    h1 = rotl(h1, 19);
    h1 = (h1 + h2) | 0;
    h1 = (Math.imul(h1, 5) + 0x561ccd1b) | 0;

    k2 = Math.imul(k2, c2);
    k2 = rotl(k2, 16);
    k2 = Math.imul(k2, c3);
    h2 ^= k2;
    h2 = rotl(h2, 17);
    h2 = (h2 + h3) | 0;
    h2 = (Math.imul(h2, 5) + 0x0bcaa747) | 0;

    k3 = Math.imul(k3, c3);
    k3 = rotl(k3, 17);
    k3 = Math.imul(k3, c4);
    h3 ^= k3;
    h3 = rotl(h3, 15);
    h3 = (h3 + h4) | 0;
    h3 = (Math.imul(h3, 5) + 0x96cd1c35) | 0;

    k4 = Math.imul(k4, c4);
    k4 = rotl(k4, 18);
    k4 = Math.imul(k4, c1);
    h4 ^= k4;
    h4 = rotl(h4, 13);
    h4 = (h4 + h1) | 0;
    h4 = (Math.imul(h4, 5) + 0x32ac3b17) | 0;
  }

  const t = blocksEnd;
  const rest = len & 15;
  let k1 = 0;
  let k2 = 0;
  let k3 = 0;
  let k4 = 0;
  // The reference's fall-through switch, case by case.
  if (rest >= 15) k4 ^= bytes[t + 14] << 16;
  if (rest >= 14) k4 ^= bytes[t + 13] << 8;
  if (rest >= 13) {
    k4 ^= bytes[t + 12];
    k4 = Math.imul(k4, c4);
    k4 = rotl(k4, 18);
    k4 = Math.imul(k4, c1);
    h4 ^= k4;
  }
  if (rest >= 12) k3 ^= bytes[t + 11] << 24;
  if (rest >= 11) k3 ^= bytes[t + 10] << 16;
  if (rest >= 10) k3 ^= bytes[t + 9] << 8;
  if (rest >= 9) {
    k3 ^= bytes[t + 8];
    k3 = Math.imul(k3, c3);
    k3 = rotl(k3, 17);
    k3 = Math.imul(k3, c4);
    h3 ^= k3;
  }
  if (rest >= 8) k2 ^= bytes[t + 7] << 24;
  if (rest >= 7) k2 ^= bytes[t + 6] << 16;
  if (rest >= 6) k2 ^= bytes[t + 5] << 8;
  if (rest >= 5) {
    k2 ^= bytes[t + 4];
    k2 = Math.imul(k2, c2);
    k2 = rotl(k2, 16);
    k2 = Math.imul(k2, c3);
    h2 ^= k2;
  }
  if (rest >= 4) k1 ^= bytes[t + 3] << 24;
  if (rest >= 3) k1 ^= bytes[t + 2] << 16;
  if (rest >= 2) k1 ^= bytes[t + 1] << 8;
  if (rest >= 1) {
    k1 ^= bytes[t];
    k1 = Math.imul(k1, c1);
    k1 = rotl(k1, 15);
    k1 = Math.imul(k1, c2);
    h1 ^= k1;
  }

  h1 ^= len;
  h2 ^= len;
  h3 ^= len;
  h4 ^= len;
  h1 = (h1 + h2) | 0;
  h1 = (h1 + h3) | 0;
  h1 = (h1 + h4) | 0;
  h2 = (h2 + h1) | 0;
  h3 = (h3 + h1) | 0;
  h4 = (h4 + h1) | 0;
  h1 = fmix(h1);
  h2 = fmix(h2);
  h3 = fmix(h3);
  h4 = fmix(h4);
  h1 = (h1 + h2) | 0;
  h1 = (h1 + h3) | 0;
  h1 = (h1 + h4) | 0;
  h2 = (h2 + h1) | 0;
  h3 = (h3 + h1) | 0;
  h4 = (h4 + h1) | 0;
  out[0] = h1;
  out[1] = h2;
  out[2] = h3;
  out[3] = h4;
}
