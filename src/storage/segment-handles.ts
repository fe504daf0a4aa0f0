/**
 * The bounded cache of sealed segments' open files (docs/storage.md "Index and reads"): a sealed
 * segment's log handle and its index in memory are held only while it is in this cache, opened
 * again on demand by the next read that needs them, and closed least recently used first once more
 * than `capacity` sealed segments are open (`--max-open-segments`). Open file descriptors are
 * then bounded by configuration — the active segment of every partition (its log and its index,
 * always open) plus `capacity` sealed logs — not by the number of segments ever written.
 *
 * A segment in use is never closed under its user: a segment with readers (`Segment.acquire`) or
 * whose files are retained because retention or compaction is removing it
 * (`Segment.retainFiles`) is pinned, and the cache closes the least recently used unpinned one
 * instead; with every open segment pinned it holds more than `capacity` until they are let go.
 * One cache serves the whole broker (every partition of every topic), so the bound holds however
 * the segments are spread. Why the spec's "each segment keeps its own file handle open" is read
 * this way: docs/decisions.md §15.
 */
import { assert } from "../lib/assert.ts";

/** What the cache asks of a segment it holds (implemented by `Segment`). */
export interface CachedSegmentFiles {
  /** True while the segment's files must stay open (readers, or retained for removal). */
  readonly pinned: boolean;
  /** Closes the segment's log handle and drops its index from memory; called only when unpinned. */
  evict(): void;
}

/** See the module comment. */
export class SegmentHandleCache {
  /** Sealed segments kept open at most (before pinned ones push past it). */
  readonly capacity: number;
  /** Open sealed segments, least recently used first (a Map keeps insertion order). */
  #open = new Map<CachedSegmentFiles, true>();
  #evictions = 0;

  /** @param capacity sealed segments kept open at most, ≥ 1 (`--max-open-segments`). */
  constructor(capacity: number) {
    assert(Number.isSafeInteger(capacity) && capacity >= 1, "the cache holds at least one segment");
    this.capacity = capacity;
  }

  /** Sealed segments whose files are open now (pinned ones included). */
  get size(): number {
    return this.#open.size;
  }

  /** Segments closed to make room since the cache was made. */
  get evictions(): number {
    return this.#evictions;
  }

  /**
   * Records that `segment` opened its files (or was used again): it becomes the most recently
   * used, and the least recently used unpinned segments are closed until at most `capacity` are
   * open.
   */
  opened(segment: CachedSegmentFiles): void {
    this.#open.delete(segment);
    this.#open.set(segment, true);
    this.#trim();
  }

  /** Marks `segment` as the most recently used, if it is open. */
  touched(segment: CachedSegmentFiles): void {
    if (!this.#open.delete(segment)) return;
    this.#open.set(segment, true);
  }

  /** Forgets `segment`: it closed its files itself (closed for good, or it became unpinned late). */
  closed(segment: CachedSegmentFiles): void {
    this.#open.delete(segment);
  }

  /** Closes unpinned segments, least recently used first, while more than `capacity` are open. */
  #trim(): void {
    if (this.#open.size <= this.capacity) return;
    for (const segment of this.#open.keys()) {
      if (this.#open.size <= this.capacity) return;
      if (segment.pinned) continue;
      this.#open.delete(segment);
      this.#evictions++;
      segment.evict();
    }
  }

  /** Closes unpinned segments past the capacity again: after pinned ones were let go. */
  trim(): void {
    this.#trim();
  }
}
