/**
 * The one binary search the storage code needs: over ascending keys (index entries' offsets,
 * segments' base offsets), the last key at or below a target.
 */

/**
 * Index of the last of `count` keys that is at or below `target`, or −1 when there is none (every
 * key is above it, or `count` is 0). `keyAt(i)` returns key `i`; keys must not decrease.
 */
export function lastAtOrBelow(count: number, keyAt: (i: number) => number, target: number): number {
  let lo = 0;
  let hi = count - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    if (keyAt(mid) <= target) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}
