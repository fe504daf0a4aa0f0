/**
 * The offset index of one segment (docs/storage.md "Index and reads"): 16-byte entries, big-endian
 * `(u64 offset within segment, u64 file position)`, one for the first record and then one each
 * time at least {@link indexIntervalBytes} of log has passed since the last entry.
 *
 * The index is derived state: it is validated when loaded (docs/decisions.md §2) and rebuilt from the log
 * rather than trusted when anything about it is off. In memory it is one growable Uint32Array
 * (offsets and positions interleaved): 8 bytes per entry, and a Float64Array (16 bytes) only if a
 * value reaches 2^32 (a log file over 4 GiB that recovery met). Every segment keeps its index in
 * memory, so the broker's memory grows with the data it retains — ~0.2 % of the log (8 bytes per
 * 4 KiB) — and a sealed segment's array is cut to its entries ({@link OffsetIndex.trim}).
 */
import { readU64, viewOf, writeU64 } from "../lib/bytes.ts";
import { indexEntryBytes, indexIntervalBytes } from "../lib/limits.ts";
import { lastAtOrBelow } from "../lib/search.ts";

/** Why a stored index was rejected on load. */
export type IndexProblem = { reason: string } | null;

/** A segment's offset index in memory. */
export class OffsetIndex {
  #entries: Uint32Array | Float64Array;
  #count = 0;

  /** @param capacity entries to make room for (grows as needed). */
  constructor(capacity = 16) {
    this.#entries = new Uint32Array(Math.max(1, capacity) * 2);
  }

  /** Number of entries. */
  get count(): number {
    return this.#count;
  }

  /** File position of the last entry, or −1 when empty. */
  get lastPosition(): number {
    return this.#count === 0 ? -1 : this.#entries[this.#count * 2 - 1];
  }

  /** Offset within the segment of the last entry, or −1 when empty. */
  get lastRelativeOffset(): number {
    return this.#count === 0 ? -1 : this.#entries[this.#count * 2 - 2];
  }

  /** Entry `i`: offset within the segment. */
  relativeOffsetAt(i: number): number {
    return this.#entries[i * 2];
  }

  /** Entry `i`: file position in bytes. */
  positionAt(i: number): number {
    return this.#entries[i * 2 + 1];
  }

  /**
   * True if a record at `position` needs an entry: it is the first record, or at least
   * {@link indexIntervalBytes} bytes of log lie between the last entry and it.
   */
  wants(position: number, lastIndexedPosition = this.lastPosition): boolean {
    return lastIndexedPosition < 0 || position - lastIndexedPosition >= indexIntervalBytes;
  }

  /** Appends an entry; both values must be larger than the last entry's. */
  push(relativeOffset: number, position: number): void {
    const wide =
      this.#entries instanceof Uint32Array &&
      (relativeOffset > 0xffffffff || position > 0xffffffff);
    if (wide || this.#count * 2 + 2 > this.#entries.length) {
      const length = Math.max(
        this.#entries.length * (this.#count * 2 + 2 > this.#entries.length ? 2 : 1),
        2,
      );
      const next =
        wide || this.#entries instanceof Float64Array
          ? new Float64Array(length)
          : new Uint32Array(length);
      next.set(this.#entries.subarray(0, this.#count * 2));
      this.#entries = next;
    }
    this.#entries[this.#count * 2] = relativeOffset;
    this.#entries[this.#count * 2 + 1] = position;
    this.#count++;
  }

  /** Shrinks the array to exactly its entries (a sealed segment's index no longer grows). */
  trim(): void {
    if (this.#entries.length > this.#count * 2)
      this.#entries = this.#entries.slice(0, Math.max(this.#count, 1) * 2);
  }

  /** Drops every entry at index ≥ `count`. */
  truncate(count: number): void {
    this.#count = Math.min(this.#count, Math.max(0, count));
  }

  /**
   * The file position to start scanning from for `relativeOffset`: the entry at or before it
   * (0 when the index is empty or the offset precedes every entry).
   */
  lookup(relativeOffset: number): number {
    const i = this.entryAtOrBefore(relativeOffset);
    return i < 0 ? 0 : this.#entries[i * 2 + 1];
  }

  /** Index of the last entry whose offset is at or before `relativeOffset`, or −1 if none. */
  entryAtOrBefore(relativeOffset: number): number {
    const entries = this.#entries;
    return lastAtOrBelow(this.#count, (i) => entries[i * 2], relativeOffset);
  }

  /** Encodes entries `[from, count)` in the on-disk format. */
  encode(from = 0): Uint8Array {
    const n = Math.max(0, this.#count - from);
    const out = new Uint8Array(n * indexEntryBytes);
    const view = viewOf(out);
    for (let i = 0; i < n; i++) {
      writeU64(view, i * indexEntryBytes, this.#entries[(from + i) * 2]);
      writeU64(view, i * indexEntryBytes + 8, this.#entries[(from + i) * 2 + 1]);
    }
    return out;
  }

  /**
   * Decodes and validates a stored index against its log's size (docs/decisions.md §2): whole 16-byte
   * entries; the first entry is (0, 0); offsets and positions strictly increase; every position
   * lies inside the log.
   * @returns the index, or the reason it must be rebuilt.
   */
  static decode(
    bytes: Uint8Array,
    logSizeBytes: number,
  ): { index: OffsetIndex } | { problem: string } {
    if (bytes.length % indexEntryBytes !== 0)
      return {
        problem: `index is ${bytes.length} bytes, not a whole number of ${indexEntryBytes}-byte entries`,
      };
    const view = viewOf(bytes);
    const n = bytes.length / indexEntryBytes;
    const index = new OffsetIndex(n);
    for (let i = 0; i < n; i++) {
      const rel = readU64(view, i * indexEntryBytes);
      const pos = readU64(view, i * indexEntryBytes + 8);
      if (i === 0 && (rel !== 0 || pos !== 0))
        return { problem: `first index entry is (${rel}, ${pos}), not (0, 0)` };
      if (i > 0 && (rel <= index.lastRelativeOffset || pos <= index.lastPosition)) {
        return {
          problem: `index entry ${i} (${rel}, ${pos}) does not increase past (${index.lastRelativeOffset}, ${index.lastPosition})`,
        };
      }
      if (pos >= logSizeBytes)
        return {
          problem: `index entry ${i} points at position ${pos}, past the log's ${logSizeBytes} bytes`,
        };
      index.push(rel, pos);
    }
    if (n === 0 && logSizeBytes > 0) return { problem: "index is empty but the log is not" };
    return { index };
  }
}
