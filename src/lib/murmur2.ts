/**
 * Kafka's default partitioner hash (murmur2, seed 0x9747b28c), so a key lands on the same partition
 * number here as with Kafka's Java client for the same partition count.
 */

/** murmur2 of `bytes` as a signed 32-bit integer, bit-identical to Kafka's `Utils.murmur2`. */
export function murmur2(bytes: Uint8Array): number {
  const length = bytes.length;
  const m = 0x5bd1e995;
  const r = 24;
  let h = (0x9747b28c ^ length) | 0;
  const length4 = length >>> 2;
  for (let i = 0; i < length4; i++) {
    const i4 = i * 4;
    let k =
      (bytes[i4] & 0xff) +
      ((bytes[i4 + 1] & 0xff) << 8) +
      ((bytes[i4 + 2] & 0xff) << 16) +
      ((bytes[i4 + 3] & 0xff) << 24);
    k = Math.imul(k, m);
    k ^= k >>> r;
    k = Math.imul(k, m);
    h = Math.imul(h, m);
    h ^= k;
  }
  const rest = length & 3;
  const base = length & ~3;
  if (rest === 3) h ^= (bytes[base + 2] & 0xff) << 16;
  if (rest >= 2) h ^= (bytes[base + 1] & 0xff) << 8;
  if (rest >= 1) {
    h ^= bytes[base] & 0xff;
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/** The partition (0 … `partitions` − 1) for a key, as Kafka's default partitioner picks it. */
export function partitionForKey(key: Uint8Array, partitions: number): number {
  return (murmur2(key) & 0x7fffffff) % partitions;
}
