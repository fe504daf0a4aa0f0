/**
 * The cold tier's read cache (`--cold-cache-bytes`, docs/storage.md "Cold tier"): fixed-size
 * aligned chunks of cold objects kept in memory, least recently used out first, never more than
 * `capacityBytes` in all. Reads of the same chunk in flight share one request, and each read starts
 * fetching the chunk after its last (read-ahead, with room for at least four chunks). With a
 * capacity of 0 nothing is kept, and every read goes to the store.
 *
 * Objects are immutable (a key is written once before anything references it, and a replaced
 * segment gets a new key), so a cached chunk never goes stale; {@link ColdReadCache.forget} drops an
 * object's chunks when it is deleted, to give the memory back.
 */
import type { ColdStore } from "./cold-objects.ts";

/** Bytes per cached chunk: one ranged request each. */
export const coldChunkBytes = 1024 * 1024;

/** See the module comment. */
export class ColdReadCache {
  readonly capacityBytes: number;
  #store: ColdStore;
  /** Chunk key → bytes, least recently used first. */
  #chunks = new Map<string, Uint8Array>();
  #inFlight = new Map<string, Promise<Uint8Array>>();
  #bytes = 0;
  #stats = { hits: 0, misses: 0, bytesFetched: 0 };

  constructor(store: ColdStore, capacityBytes: number) {
    this.#store = store;
    this.capacityBytes = Math.max(0, capacityBytes);
  }

  /** Bytes held now. */
  get sizeBytes(): number {
    return this.#bytes;
  }

  /** Counters for `GET /v1/admin/storage`. */
  get stats(): { hits: number; misses: number; bytes_fetched: number; size_bytes: number } {
    return {
      hits: this.#stats.hits,
      misses: this.#stats.misses,
      bytes_fetched: this.#stats.bytesFetched,
      size_bytes: this.#bytes,
    };
  }

  /**
   * Bytes `[start, end)` of object `key`, whose size is `objectBytes` (chunks never read past it).
   * @throws ColdStoreError.
   */
  async read(
    key: string,
    objectBytes: number,
    range: { start: number; end: number },
  ): Promise<Uint8Array> {
    const { start, end } = range;
    if (end <= start) return new Uint8Array(0);
    const first = Math.floor(start / coldChunkBytes);
    const last = Math.floor((end - 1) / coldChunkBytes);
    if (this.capacityBytes === 0) return await this.#store.get(key, { start, end });
    const parts: Uint8Array[] = [];
    for (let c = first; c <= last; c++) parts.push(await this.#chunk(key, objectBytes, c));
    // Read-ahead: a reader moving forward (a consumer catching up, a scan) finds the next chunk
    // already fetched or on its way; a failure there is the next read's to report.
    if ((last + 1) * coldChunkBytes < objectBytes && this.capacityBytes >= 4 * coldChunkBytes)
      this.#chunk(key, objectBytes, last + 1).catch(() => {});
    const out = new Uint8Array(end - start);
    let at = 0;
    for (let c = first; c <= last; c++) {
      const chunk = parts[c - first];
      const chunkStart = c * coldChunkBytes;
      const from = Math.max(start, chunkStart) - chunkStart;
      const to = Math.min(end, chunkStart + chunk.length) - chunkStart;
      out.set(chunk.subarray(from, to), at);
      at += to - from;
    }
    return at === out.length ? out : out.subarray(0, at);
  }

  async #chunk(key: string, objectBytes: number, index: number): Promise<Uint8Array> {
    const id = `${index}\u0000${key}`;
    const cached = this.#chunks.get(id);
    if (cached !== undefined) {
      this.#chunks.delete(id);
      this.#chunks.set(id, cached);
      this.#stats.hits++;
      return cached;
    }
    const pending = this.#inFlight.get(id);
    if (pending !== undefined) return await pending;
    this.#stats.misses++;
    const start = index * coldChunkBytes;
    const fetch = this.#store.get(key, {
      start,
      end: Math.min(objectBytes, start + coldChunkBytes),
    });
    this.#inFlight.set(id, fetch);
    try {
      const bytes = await fetch;
      this.#stats.bytesFetched += bytes.length;
      this.#put(id, bytes);
      return bytes;
    } finally {
      this.#inFlight.delete(id);
    }
  }

  #put(id: string, bytes: Uint8Array): void {
    if (bytes.length > this.capacityBytes) return;
    this.#chunks.set(id, bytes);
    this.#bytes += bytes.length;
    while (this.#bytes > this.capacityBytes) {
      const [oldest, evicted] = this.#chunks.entries().next().value as [string, Uint8Array];
      this.#chunks.delete(oldest);
      this.#bytes -= evicted.length;
    }
  }

  /** Drops every chunk of `key` (the object was deleted). */
  forget(key: string): void {
    for (const [id, bytes] of this.#chunks) {
      if (id.slice(id.indexOf("\u0000") + 1) === key) {
        this.#chunks.delete(id);
        this.#bytes -= bytes.length;
      }
    }
  }
}
