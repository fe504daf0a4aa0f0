/**
 * The cold tier (docs/storage.md "Cold tier"; `--cold-storage-dir DIR` or `--cold-storage
 * s3://bucket/prefix`): where retention moves sealed segments instead of deleting them, and where
 * fetches of those offsets are served from, transparently (the partition reads it as its
 * {@link LowerTier}). The bytes live in a {@link ColdStore} (a directory or a bucket); which
 * objects hold which offsets is the topic's durable `cold_index.json` (`cold-index.ts`).
 *
 * Objects of one partition, under `topics/<topic>/<partition>/`:
 * ```
 * NNNNNNNNNNNNNNNNNNNN.log        a segment's log, byte for byte (generation 0: offloaded)
 * NNNNNNNNNNNNNNNNNNNN.index      its offset index (the entries in memory, never a torn file tail)
 * NNNNNNNNNNNNNNNNNNNN.G.log      the same, written by the G-th cold compaction (G ≥ 1)
 * NNNNNNNNNNNNNNNNNNNN.G.index
 * swap-G.json                     the plan of cold compaction G while its swap is finishing
 * ```
 * Anything else under the prefix is foreign: reported, never read and never deleted.
 *
 * An offload, in order: put the `.index` object, put the `.log` object (each verified by the
 * store: size and checksum read back), write the index file naming them (durable), and only then
 * may the caller delete the local segment. A crash at any step leaves the segment local and
 * listed or not listed in the index; an object the index does not list is garbage, and a
 * {@link ColdPartition.reclaim} pass deletes it.
 *
 * Reads use ranged gets through a bounded chunk cache (`cold-cache.ts`): the segment's index
 * object gives the position at or before the offset, and every record read is checked (length,
 * CRC, offset) before it is served, so a short or corrupt object is never handed out; it fails
 * the read as a `corrupt` ColdStoreError instead.
 *
 * When the index file is missing (a directory tier from before it, or a lost data directory), a
 * partition rebuilds its entries from a listing: every `.log` with its `.index`, its end found by
 * reading the index and the log's tail; an overlap between generations keeps the newer one only
 * when its swap plan is in the store (the swap committed), else the older. The rebuilt entries are
 * written to the index file at once.
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { offsetFileStem } from "../lib/bytes.ts";
import { errorMessage } from "../lib/errors.ts";
import { lastAtOrBelow } from "../lib/search.ts";
import type { FileSystem } from "../fs/types.ts";
import {
  bytesSource,
  ColdStoreError,
  isColdStoreError,
  type ColdObjectSource,
  type ColdStore,
} from "./cold-objects.ts";
import { ColdReadCache } from "./cold-cache.ts";
import type { ColdIndexFile, ColdPartitionIndex, ColdSegmentEntry } from "./cold-index.ts";
import { OffsetIndex } from "./offset-index.ts";
import type { LowerTier } from "./partition.ts";
import { DecodeStatus, RecordCursor } from "./record.ts";
import type { Segment } from "./segment.ts";

/** Bytes read per request when scanning a whole cold log (newest timestamp, compaction). */
const scanWindowBytes = 4 * 1024 * 1024;
/** Smallest window a fetch reads from a cold log. */
const readWindowBytesMin = 64 * 1024;
/** Decoded segment indexes a partition keeps. */
const indexesKeptMax = 8;
/** How often a partition lists its prefix to delete garbage, in ms. */
export const coldReclaimIntervalMs = 60 * 60 * 1000;

/** Name of a cold object of `entry` relative to the partition prefix. */
export function coldObjectName(
  entry: { base: number; gen: number },
  kind: "log" | "index",
): string {
  return `${offsetFileStem(entry.base)}${entry.gen > 0 ? `.${entry.gen}` : ""}.${kind}`;
}

/** Parses a name under a partition prefix: a segment object, a swap plan, or null (foreign). */
export function parseColdObjectName(
  name: string,
):
  | { type: "segment"; base: number; gen: number; kind: "log" | "index" }
  | { type: "swap"; gen: number }
  | null {
  let m = /^(\d{20})(?:\.([1-9]\d{0,9}))?\.(log|index)$/.exec(name);
  if (m !== null) {
    const base = Number(m[1]);
    if (!Number.isSafeInteger(base)) return null;
    return {
      type: "segment",
      base,
      gen: m[2] === undefined ? 0 : Number(m[2]),
      kind: m[3] as "log" | "index",
    };
  }
  m = /^swap-([1-9]\d{0,9})\.json$/.exec(name);
  if (m !== null) return { type: "swap", gen: Number(m[1]) };
  return null;
}

/**
 * Whether `key` (relative to the store's prefix) is an object this tier writes:
 * `topics/<topic>/<partition>/<segment object or swap plan>` (module comment). Anything else is
 * foreign.
 */
export function isColdTierKey(key: string): boolean {
  const m = /^topics\/([^/]+)\/(0|[1-9]\d{0,8})\/([^/]+)$/.exec(key);
  return m !== null && parseColdObjectName(m[3]) !== null;
}

/** Spreads uploads over time: at most `bytesPerSec` on average (0 = unlimited), through the Clock. */
export class UploadLimiter {
  #clock: Clock;
  #bytesPerSec: number;
  #freeAtMs = 0;

  constructor(clock: Clock, bytesPerSec: number) {
    this.#clock = clock;
    this.#bytesPerSec = bytesPerSec;
  }

  /** Waits until `bytes` more may be sent. */
  async take(bytes: number): Promise<void> {
    if (this.#bytesPerSec <= 0) return;
    const now = this.#clock.nowMs();
    const start = Math.max(this.#freeAtMs, now);
    this.#freeAtMs = start + (bytes * 1000) / this.#bytesPerSec;
    const waitMs = start - now;
    if (waitMs > 0) await new Promise<void>((r) => this.#clock.setTimer(waitMs, r));
  }
}

/** Options of {@link ColdTier}. */
export interface ColdTierOptions {
  store: ColdStore;
  fs: FileSystem;
  clock: Clock;
  logger: Logger;
  /** Bytes the read cache may hold (`--cold-cache-bytes`; 0 = no cache). */
  cacheBytes: number;
  /** Upload rate cap in bytes per second (`--cold-upload-bytes-per-sec`; 0 = none). */
  uploadBytesPerSec: number;
}

/** The cold tier's root: the store, its read cache and upload limiter; hands out one {@link ColdPartition} per partition. */
export class ColdTier {
  readonly store: ColdStore;
  readonly cache: ColdReadCache;
  readonly limiter: UploadLimiter;
  readonly fs: FileSystem;
  readonly clock: Clock;
  readonly logger: Logger;

  constructor(options: ColdTierOptions) {
    this.store = options.store;
    this.fs = options.fs;
    this.clock = options.clock;
    this.logger = options.logger;
    this.cache = new ColdReadCache(options.store, options.cacheBytes);
    this.limiter = new UploadLimiter(options.clock, options.uploadBytesPerSec);
  }

  /** Where the objects live (never a secret). */
  get location(): string {
    return this.store.location;
  }

  /** Key prefix of a topic's objects. */
  static topicPrefix(topic: string): string {
    return `topics/${topic}/`;
  }

  /**
   * Opens the cold side of one partition from the topic's index file, or rebuilds it from a
   * listing when the file is missing (see the module comment).
   * @throws ColdStoreError if a rebuild cannot list or read the store; FsError if the rebuilt
   *   index cannot be written.
   */
  async openPartition(options: {
    topic: string;
    partition: number;
    index: ColdIndexFile;
  }): Promise<ColdPartition> {
    const cold = new ColdPartition(this, options);
    await cold.load();
    return cold;
  }

  /**
   * Removes every object of a topic this tier wrote (topic deletion); foreign objects under its
   * prefix are reported and left. Succeeds if there is none.
   * @throws ColdStoreError.
   */
  async removeTopic(topic: string): Promise<void> {
    const prefix = ColdTier.topicPrefix(topic);
    const objects = await this.store.list(prefix);
    let deleted = 0;
    const foreign: string[] = [];
    for (const o of objects) {
      const rest = o.key.slice(prefix.length);
      const slash = rest.indexOf("/");
      if (
        slash < 0 ||
        !/^\d+$/.test(rest.slice(0, slash)) ||
        parseColdObjectName(rest.slice(slash + 1)) === null
      ) {
        foreign.push(o.key);
        continue;
      }
      await this.store.delete(o.key);
      this.cache.forget(o.key);
      deleted++;
    }
    await this.store.prune?.(prefix);
    if (foreign.length > 0)
      this.logger.log("warn", "cold.foreign_objects", {
        store: this.location,
        prefix,
        objects: foreign.slice(0, 20),
        count: foreign.length,
        action: "left in place",
      });
    if (deleted > 0)
      this.logger.log("info", "cold.topic_removed", {
        topic,
        store: this.location,
        objects: deleted,
      });
  }

  /**
   * True if the store holds objects of this tier's naming for `topic` (a topic of that name
   * existed on a data directory that is gone).
   * @throws ColdStoreError.
   */
  async holdsTopic(topic: string): Promise<boolean> {
    const prefix = ColdTier.topicPrefix(topic);
    return (await this.store.list(prefix)).some((o) => {
      const rest = o.key.slice(prefix.length);
      const slash = rest.indexOf("/");
      return slash > 0 && parseColdObjectName(rest.slice(slash + 1)) !== null;
    });
  }
}

/** One partition's segments in the cold tier. See the module comment. */
export class ColdPartition implements LowerTier {
  readonly name: string;
  /** Key prefix of its objects, `topics/<topic>/<partition>/`. */
  readonly prefix: string;
  readonly partition: number;
  #tier: ColdTier;
  #indexFile: ColdIndexFile;
  #entries: ColdSegmentEntry[] = [];
  #genMax = 0;
  #swap: ColdPartitionIndex["swap"];
  #indexes = new Map<string, Promise<OffsetIndex>>();
  #reclaimedAtMs = Number.NEGATIVE_INFINITY;
  #foreignReported = new Set<string>();
  #closed = false;

  constructor(tier: ColdTier, options: { topic: string; partition: number; index: ColdIndexFile }) {
    this.#tier = tier;
    this.partition = options.partition;
    this.name = `${options.topic}/${options.partition}`;
    this.prefix = `${ColdTier.topicPrefix(options.topic)}${options.partition}/`;
    this.#indexFile = options.index;
  }

  /** The store the objects live in. */
  get store(): ColdStore {
    return this.#tier.store;
  }

  /** Loads the entries (see {@link ColdTier.openPartition}). */
  async load(): Promise<void> {
    if (this.#indexFile.existed) {
      const known = this.#indexFile.get(this.partition);
      this.#entries = known?.segments ?? [];
      this.#genMax = known?.gen_max ?? 0;
      this.#swap = known?.swap;
      return;
    }
    const rebuilt = await this.#rebuild();
    this.#entries = rebuilt.entries;
    this.#genMax = rebuilt.genMax;
    await this.#persist(this.#entries);
    this.#tier.logger.log(rebuilt.entries.length > 0 ? "warn" : "info", "cold.index_rebuilt", {
      partition: this.name,
      store: this.#tier.location,
      segments: rebuilt.entries.length,
      first_offset: this.firstOffset,
      end_offset: this.endOffset,
    });
  }

  /** Base offset of the first cold segment, or −1. */
  get firstOffset(): number {
    return this.#entries[0]?.base ?? -1;
  }

  /** One past the last offset the cold tier covers, or −1 when it holds nothing. */
  get endOffset(): number {
    return this.#entries.at(-1)?.next ?? -1;
  }

  /** Base offsets of the cold segments, ascending (a copy). */
  get baseOffsets(): number[] {
    return this.#entries.map((e) => e.base);
  }

  /** The entries (copies), ascending. */
  get entries(): ColdSegmentEntry[] {
    return this.#entries.map((e) => ({ ...e }));
  }

  /** Highest compaction generation written so far. */
  get genMax(): number {
    return this.#genMax;
  }

  /** The swap plan in progress, if any (a copy). */
  get swap(): ColdPartitionIndex["swap"] {
    return this.#swap === undefined ? undefined : structuredClone(this.#swap);
  }

  /** Bytes of all cold logs. */
  get sizeBytes(): number {
    let total = 0;
    for (const e of this.#entries) total += e.log_bytes;
    return total;
  }

  /** Size in bytes of one cold segment's log (0 if unknown). */
  sizeOf(baseOffset: number): number {
    return this.#entries.find((e) => e.base === baseOffset)?.log_bytes ?? 0;
  }

  /** Full key of an object of `entry`. */
  key(entry: { base: number; gen: number }, kind: "log" | "index"): string {
    return this.prefix + coldObjectName(entry, kind);
  }

  /**
   * Writes the partition's index (entries, generation, swap plan) durably, then adopts it.
   * @throws FsError (nothing changes in memory).
   */
  async #persist(
    entries: ColdSegmentEntry[],
    extra: { swap?: ColdPartitionIndex["swap"]; genMax?: number } = {},
  ): Promise<void> {
    const genMax = extra.genMax ?? this.#genMax;
    const value: ColdPartitionIndex = { segments: entries, gen_max: genMax };
    if (extra.swap !== undefined) value.swap = extra.swap;
    await this.#indexFile.set(this.partition, value);
    this.#entries = entries;
    this.#genMax = genMax;
    this.#swap = extra.swap;
  }

  /**
   * Publishes a new list of entries (and swap plan) durably: the commit point of a cold
   * compaction (`cold-compaction.ts`). @throws FsError.
   */
  publish(
    entries: ColdSegmentEntry[],
    extra: { swap?: ColdPartitionIndex["swap"]; genMax?: number },
  ): Promise<void> {
    return this.#persist(entries, extra);
  }

  /**
   * Finishes a cold compaction's swap recorded in the index (`cold-compaction.ts`): deletes the
   * replaced objects (a failure is logged and left to {@link reclaim}), writes the index without
   * the swap, deletes the plan object. Idempotent.
   * @throws FsError if the index cannot be written (the swap stays recorded; the next call finishes it).
   */
  async finishSwap(): Promise<void> {
    const swap = this.#swap;
    if (swap === undefined) return;
    await this.deleteObjects(swap.replaced);
    await this.#persist(this.#entries);
    await this.#tier.store.delete(`${this.prefix}swap-${this.#genMax}.json`).catch((err: unknown) =>
      this.#tier.logger.log("warn", "cold.delete_failed", {
        partition: this.name,
        key: `${this.prefix}swap-${this.#genMax}.json`,
        error: errorMessage(err),
        action: "left for the next reclaim pass",
      }),
    );
  }

  /**
   * Copies a sealed local segment (log and index) into the tier (see the module comment).
   * Resolves once the objects are verified and the index naming them is durable; only then may
   * the caller delete the local copy. A segment the index already names with the same offsets
   * and size (a crash after the index write, before the local delete) is not copied again.
   * @param newestMs the segment's newest record timestamp (ms, −1 if none), as scanned
   *   (`segmentNewestTimestampMs`): cold retention judges the copy by it.
   * @throws ColdStoreError, FsError (nothing local is touched; the index is unchanged).
   */
  async offload(segment: Segment, newestMs: number): Promise<{ bytes: number }> {
    if (this.#closed)
      throw new Error(`Cannot offload to the cold tier of "${this.name}": it is closed`);
    const base = segment.baseOffset;
    const same = this.#entries.find(
      (e) => e.base === base && e.next === segment.nextOffset && e.log_bytes === segment.sizeBytes,
    );
    if (same !== undefined) return { bytes: 0 };
    // Entries at or above this segment (listed by a rebuild from objects a crash left) are
    // replaced by this copy.
    const kept = this.#entries.filter((e) => e.next <= base);
    const entry: ColdSegmentEntry = {
      base,
      next: segment.nextOffset,
      log_bytes: segment.sizeBytes,
      index_bytes: 0,
      newest_ms: newestMs,
      gen: 0,
    };
    const indexBytes = await segment.encodedIndex();
    entry.index_bytes = indexBytes.length;
    const store = this.#tier.store;
    await store.put(this.key(entry, "index"), bytesSource(indexBytes));
    const log = await this.#tier.fs.open(segment.logPath);
    try {
      const limiter = this.#tier.limiter;
      const source: ColdObjectSource = {
        sizeBytes: segment.sizeBytes,
        read: async (position, length) => {
          await limiter.take(length);
          const buf = new Uint8Array(length);
          let got = 0;
          while (got < length) {
            const n = await log.read(buf.subarray(got), position + got);
            if (n === 0) break;
            got += n;
          }
          return buf.subarray(0, got);
        },
      };
      await store.put(this.key(entry, "log"), source);
    } finally {
      await log.close().catch(() => {});
    }
    for (const key of [this.key(entry, "log"), this.key(entry, "index")])
      this.#tier.cache.forget(key);
    this.#indexes.delete(this.key(entry, "index"));
    await this.#persist([...kept, entry]);
    return { bytes: segment.sizeBytes };
  }

  /**
   * Reads records with `offset` ≤ offset < `endOffset` from the cold segments (a gap continues at
   * the next one), verbatim and checked; count 0 when the tier holds none there. A segment
   * removed while being read (retention, compaction) is looked up again once.
   * @throws ColdStoreError (`corrupt` for a record that fails its checks).
   */
  async read(request: {
    offset: number;
    endOffset: number;
    maxRecords: number;
    maxBytes: number;
  }): Promise<{ bytes: Uint8Array; count: number; lastOffset: number }> {
    for (let attempt = 0; ; attempt++) {
      const entries = this.#entries;
      try {
        return await this.#read(entries, request);
      } catch (err) {
        if (attempt > 0 || !isColdStoreError(err, "not_found") || entries === this.#entries)
          throw err;
      }
    }
  }

  async #read(
    entries: readonly ColdSegmentEntry[],
    request: { offset: number; endOffset: number; maxRecords: number; maxBytes: number },
  ): Promise<{ bytes: Uint8Array; count: number; lastOffset: number }> {
    const none = { bytes: new Uint8Array(0), count: 0, lastOffset: -1 };
    let offset = request.offset;
    let i = Math.max(
      0,
      lastAtOrBelow(entries.length, (k) => entries[k].base, offset),
    );
    for (; i < entries.length && entries[i].base < request.endOffset; i++) {
      const entry = entries[i];
      offset = Math.max(offset, entry.base);
      if (offset >= entry.next || offset >= request.endOffset) continue;
      const r = await this.#readSegment(entry, { ...request, offset });
      if (r.count > 0) return r;
    }
    return none;
  }

  /** The decoded index of a segment (cached). @throws ColdStoreError. */
  #index(entry: ColdSegmentEntry): Promise<OffsetIndex> {
    const key = this.key(entry, "index");
    let index = this.#indexes.get(key);
    if (index !== undefined) {
      this.#indexes.delete(key);
      this.#indexes.set(key, index);
      return index;
    }
    index = (async () => {
      const bytes = await this.#tier.cache.read(key, entry.index_bytes, {
        start: 0,
        end: entry.index_bytes,
      });
      const decoded = OffsetIndex.decode(bytes, entry.log_bytes);
      if ("problem" in decoded) {
        // The index is derived state: a bad one costs reads from the start, never wrong answers.
        this.#tier.logger.log("warn", "cold.index_object_bad", {
          partition: this.name,
          key,
          problem: decoded.problem,
        });
        return new OffsetIndex();
      }
      return decoded.index;
    })();
    this.#indexes.set(key, index);
    index.catch(() => this.#indexes.get(key) === index && this.#indexes.delete(key));
    while (this.#indexes.size > indexesKeptMax)
      this.#indexes.delete(this.#indexes.keys().next().value as string);
    return index;
  }

  /** Reads from one cold segment (see {@link read}). */
  async #readSegment(
    entry: ColdSegmentEntry,
    request: { offset: number; endOffset: number; maxRecords: number; maxBytes: number },
  ): Promise<{ bytes: Uint8Array; count: number; lastOffset: number }> {
    const key = this.key(entry, "log");
    const limit = entry.log_bytes;
    const index = await this.#index(entry);
    let pos = index.lookup(request.offset - entry.base);
    const cursor = new RecordCursor();
    const parts: Uint8Array[] = [];
    let count = 0;
    let bytes = 0;
    let lastOffset = -1;
    let previous = -1;
    let windowBytes = Math.max(readWindowBytesMin, request.maxBytes + 8 * 1024);
    while (pos < limit) {
      const window = await this.#tier.cache.read(key, limit, {
        start: pos,
        end: Math.min(limit, pos + windowBytes),
      });
      cursor.reset(window);
      let p = 0;
      let stop = false;
      while (p < window.length) {
        const status = cursor.decode(p);
        if (status === DecodeStatus.Incomplete) {
          if (pos + window.length >= limit)
            throw this.#corrupt(key, pos + p, `the object ends inside a record (${cursor.reason})`);
          break;
        }
        if (status === DecodeStatus.Invalid) throw this.#corrupt(key, pos + p, cursor.reason);
        if (cursor.offset <= previous)
          throw this.#corrupt(key, pos + p, `offset ${cursor.offset} does not follow ${previous}`);
        previous = cursor.offset;
        if (cursor.offset >= request.endOffset || cursor.offset >= entry.next) {
          stop = true;
          break;
        }
        if (cursor.offset >= request.offset) {
          if (
            count > 0 &&
            (bytes + cursor.sizeBytes > request.maxBytes || count >= request.maxRecords)
          ) {
            stop = true;
            break;
          }
          parts.push(window.subarray(p, p + cursor.sizeBytes));
          bytes += cursor.sizeBytes;
          count++;
          lastOffset = cursor.offset;
          if (count >= request.maxRecords || bytes >= request.maxBytes) {
            stop = true;
            break;
          }
        }
        p += cursor.sizeBytes;
      }
      if (stop) break;
      if (p === 0) {
        // A record larger than the window: grow it to hold that record.
        const head = await this.#tier.cache.read(key, limit, {
          start: pos,
          end: Math.min(limit, pos + 4),
        });
        windowBytes = Math.max(
          windowBytes * 2,
          new DataView(head.buffer, head.byteOffset, head.length).getUint32(0) + 4,
        );
        continue;
      }
      pos += p;
    }
    if (count === 0) return { bytes: new Uint8Array(0), count: 0, lastOffset: -1 };
    const out = new Uint8Array(bytes);
    let at = 0;
    for (const part of parts) {
      out.set(part, at);
      at += part.length;
    }
    return { bytes: out, count, lastOffset };
  }

  #corrupt(key: string, position: number, reason: string): ColdStoreError {
    this.#tier.logger.log("error", "cold.record_corrupt", {
      partition: this.name,
      store: this.#tier.location,
      key,
      position,
      reason,
    });
    return new ColdStoreError(
      "corrupt",
      `Cannot read cold segment "${key}" of partition "${this.name}" in ${this.#tier.location}: the record at byte ${position} fails its checks: ${reason}`,
    );
  }

  /**
   * Calls `onRecords` with every record of a cold segment in order, checked, in runs of whole
   * records (a view valid until the callback returns).
   * @throws ColdStoreError (`corrupt` if a record fails its checks or the log does not end on a record).
   */
  async scan(
    entry: ColdSegmentEntry,
    onRecords: (chunk: Uint8Array) => Promise<void> | void,
  ): Promise<void> {
    const key = this.key(entry, "log");
    const limit = entry.log_bytes;
    const cursor = new RecordCursor();
    let pos = 0;
    let previous = -1;
    let windowBytes = scanWindowBytes;
    while (pos < limit) {
      const window = await this.#tier.store.get(key, {
        start: pos,
        end: Math.min(limit, pos + windowBytes),
      });
      cursor.reset(window);
      let p = 0;
      while (p < window.length) {
        const status = cursor.decode(p);
        if (status === DecodeStatus.Incomplete) {
          if (pos + window.length >= limit)
            throw this.#corrupt(key, pos + p, `the object ends inside a record (${cursor.reason})`);
          break;
        }
        if (status === DecodeStatus.Invalid) throw this.#corrupt(key, pos + p, cursor.reason);
        if (cursor.offset <= previous)
          throw this.#corrupt(key, pos + p, `offset ${cursor.offset} does not follow ${previous}`);
        previous = cursor.offset;
        p += cursor.sizeBytes;
      }
      if (p === 0) {
        windowBytes = Math.max(
          windowBytes * 2,
          new DataView(window.buffer, window.byteOffset).getUint32(0) + 4,
        );
        continue;
      }
      await onRecords(window.subarray(0, p));
      pos += p;
    }
  }

  /**
   * The newest record timestamp of a cold segment (ms; −1 if it holds none): from the index, or
   * scanned once and remembered.
   * @throws ColdStoreError.
   */
  async newestTimestampMs(baseOffset: number): Promise<number> {
    const entry = this.#entries.find((e) => e.base === baseOffset);
    if (entry === undefined) return -1;
    if (entry.newest_ms >= 0) return entry.newest_ms;
    let newest = -1;
    const cursor = new RecordCursor();
    await this.scan(entry, (chunk) => {
      cursor.reset(chunk);
      for (let p = 0; p < chunk.length; p += cursor.sizeBytes) {
        cursor.decode(p);
        newest = Math.max(newest, cursor.timestampMs);
      }
    });
    entry.newest_ms = newest;
    return newest;
  }

  /**
   * Removes cold segments: the index stops naming them (durable), then their objects are deleted
   * (a failed delete leaves garbage for {@link reclaim}, logged). Readers holding one get a
   * `not_found` and look again. The caller has already raised the log start offset past them.
   * @throws FsError (nothing removed).
   */
  async remove(baseOffsets: readonly number[]): Promise<void> {
    const gone = this.#entries.filter((e) => baseOffsets.includes(e.base));
    if (gone.length === 0) return;
    await this.#persist(
      this.#entries.filter((e) => !baseOffsets.includes(e.base)),
      { swap: this.#swap },
    );
    await this.deleteObjects(gone);
  }

  /** Deletes the objects of entries no longer listed; failures are logged and left to {@link reclaim}. @returns objects deleted. */
  async deleteObjects(entries: readonly ColdSegmentEntry[]): Promise<number> {
    let deleted = 0;
    for (const e of entries) {
      for (const kind of ["log", "index"] as const) {
        const key = this.key(e, kind);
        try {
          await this.#tier.store.delete(key);
          deleted++;
        } catch (err) {
          this.#tier.logger.log("warn", "cold.delete_failed", {
            partition: this.name,
            key,
            error: errorMessage(err),
            action: "left for the next reclaim pass",
          });
        }
        this.#tier.cache.forget(key);
        this.#indexes.delete(key);
      }
    }
    return deleted;
  }

  /**
   * Lists the partition's prefix and deletes this tier's objects the index does not name
   * (uploads a crash interrupted, the replaced side of a swap), at most once per
   * {@link coldReclaimIntervalMs} unless `force`. Foreign objects are reported once and left.
   * Runs in the cleaner's pass, so no offload or swap of this partition is in progress.
   * @returns what it did, or null when it was not due.
   * @throws ColdStoreError.
   */
  async reclaim(
    options: { force?: boolean } = {},
  ): Promise<{ deleted: string[]; foreign: string[] } | null> {
    const now = this.#tier.clock.nowMs();
    if (options.force !== true && now - this.#reclaimedAtMs < coldReclaimIntervalMs) return null;
    this.#reclaimedAtMs = now;
    await this.finishSwap();
    const referenced = new Set<string>();
    for (const e of this.#entries)
      for (const kind of ["log", "index"] as const) referenced.add(this.key(e, kind));
    const deleted: string[] = [];
    const foreign: string[] = [];
    for (const o of await this.#tier.store.list(this.prefix)) {
      const parsed = parseColdObjectName(o.key.slice(this.prefix.length));
      if (parsed === null) {
        foreign.push(o.key);
        continue;
      }
      if (parsed.type === "swap") {
        if (this.#swap !== undefined) continue;
      } else if (referenced.has(o.key)) continue;
      await this.#tier.store.delete(o.key);
      this.#tier.cache.forget(o.key);
      deleted.push(o.key);
    }
    const fresh = foreign.filter((k) => !this.#foreignReported.has(k));
    for (const k of fresh) this.#foreignReported.add(k);
    if (fresh.length > 0)
      this.#tier.logger.log("warn", "cold.foreign_objects", {
        partition: this.name,
        store: this.#tier.location,
        objects: fresh.slice(0, 20),
        count: fresh.length,
        action: "ignored, never deleted",
      });
    if (deleted.length > 0)
      this.#tier.logger.log("info", "cold.garbage_deleted", {
        partition: this.name,
        store: this.#tier.location,
        objects: deleted.slice(0, 20),
        count: deleted.length,
      });
    return { deleted, foreign };
  }

  /** Rebuilds the entries from a listing (module comment). */
  async #rebuild(): Promise<{ entries: ColdSegmentEntry[]; genMax: number }> {
    const store = this.#tier.store;
    const objects = await store.list(this.prefix);
    const sizes = new Map<string, number>();
    const swaps = new Set<number>();
    const foreign: string[] = [];
    let genMax = 0;
    for (const o of objects) {
      const name = o.key.slice(this.prefix.length);
      const parsed = parseColdObjectName(name);
      if (parsed === null) foreign.push(o.key);
      else if (parsed.type === "swap") swaps.add(parsed.gen);
      else {
        sizes.set(name, o.sizeBytes);
        genMax = Math.max(genMax, parsed.gen);
      }
    }
    if (foreign.length > 0) {
      for (const k of foreign) this.#foreignReported.add(k);
      this.#tier.logger.log("warn", "cold.foreign_objects", {
        partition: this.name,
        store: this.#tier.location,
        objects: foreign.slice(0, 20),
        count: foreign.length,
        action: "ignored, never deleted",
      });
    }
    const candidates: ColdSegmentEntry[] = [];
    for (const [name, logBytes] of sizes) {
      const parsed = parseColdObjectName(name);
      if (parsed === null || parsed.type !== "segment" || parsed.kind !== "log") continue;
      const entry: ColdSegmentEntry = {
        base: parsed.base,
        next: parsed.base,
        log_bytes: logBytes,
        index_bytes: sizes.get(coldObjectName(parsed, "index")) ?? -1,
        newest_ms: -1,
        gen: parsed.gen,
      };
      if (entry.index_bytes < 0) {
        this.#tier.logger.log("warn", "cold.rebuild_skipped", {
          partition: this.name,
          key: this.key(entry, "log"),
          reason: "its .index object is missing",
        });
        continue;
      }
      try {
        entry.next = await this.#tailNext(entry);
      } catch (err) {
        if (!isColdStoreError(err, "corrupt")) throw err;
        this.#tier.logger.log("error", "cold.rebuild_skipped", {
          partition: this.name,
          key: this.key(entry, "log"),
          reason: errorMessage(err),
        });
        continue;
      }
      candidates.push(entry);
    }
    // Ascending base; at one base a committed newer generation first, then older ones.
    const committed = (e: ColdSegmentEntry) => e.gen === 0 || swaps.has(e.gen);
    candidates.sort((a, b) => a.base - b.base || a.gen - b.gen);
    const preferred = candidates.filter(committed);
    const chosen: ColdSegmentEntry[] = [];
    // Where a committed swap's outputs exist, the generations below it lose the overlap.
    const winners = [...preferred].sort((a, b) => b.gen - a.gen || a.base - b.base);
    for (const e of winners) {
      if (chosen.some((c) => c.base < e.next && e.base < c.next)) continue;
      chosen.push(e);
    }
    chosen.sort((a, b) => a.base - b.base);
    return { entries: chosen, genMax };
  }

  /** One past the last offset of a cold log, from its index and the records after the last entry. @throws ColdStoreError. */
  async #tailNext(entry: ColdSegmentEntry): Promise<number> {
    const index = await this.#index(entry);
    const key = this.key(entry, "log");
    const start = index.count === 0 ? 0 : index.positionAt(index.count - 1);
    const tail = await this.#tier.store.get(key, { start, end: entry.log_bytes });
    const cursor = new RecordCursor().reset(tail);
    let last = -1;
    for (let p = 0; p < tail.length; p += cursor.sizeBytes) {
      const status = cursor.decode(p);
      if (status !== DecodeStatus.Ok) throw this.#corrupt(key, start + p, cursor.reason);
      last = cursor.offset;
    }
    if (last < 0) return entry.base;
    if (last < entry.base)
      throw this.#corrupt(key, start, `offset ${last} is below the name's ${entry.base}`);
    return last + 1;
  }

  /** Stops new offloads. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#indexes.clear();
  }

  /** Status for `GET /v1/admin/storage`. */
  describe(): {
    store: string;
    prefix: string;
    segments: number;
    size_bytes: number;
    first_offset: number;
    end_offset: number;
    base_offsets: string[];
    swap_in_progress: boolean;
  } {
    return {
      store: this.#tier.location,
      prefix: this.prefix,
      segments: this.#entries.length,
      size_bytes: this.sizeBytes,
      first_offset: this.firstOffset,
      end_offset: this.endOffset,
      base_offsets: this.#entries.slice(0, 20).map((e) => offsetFileStem(e.base)),
      swap_in_progress: this.#swap !== undefined,
    };
  }
}
