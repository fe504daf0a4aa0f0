/**
 * The broker's side of retention, cold storage and compaction (docs/storage.md "Retention and compaction"):
 * per topic, the log start offset file and the cold tier of each partition; per partition, a
 * {@link PartitionCleaner}; and the two background tasks, retention and compaction, each visiting
 * every partition of every topic once per `--cleanup-interval-ms` (0 = no background tasks; the
 * explicit `POST /v1/admin/topics/{topic}/cleanup` still works).
 *
 * Each task re-arms its timer (through the injected Clock) only after its visit ends, so visits
 * never overlap; the two tasks share a per-partition mutex, so they never interleave on one
 * partition. On shutdown, timers are cancelled, passes in progress stop at their next check and
 * are awaited before the partitions close.
 */
import type { Clock, Timer } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import type { Metrics } from "../lib/metrics.ts";
import type { FileSystem } from "../fs/types.ts";
import type { PartitionLog } from "../storage/partition.ts";
import { ColdTier, type ColdPartition } from "../storage/cold-store.ts";
import type { ColdStore } from "../storage/cold-objects.ts";
import { DirectoryColdStore } from "../storage/cold-dir-store.ts";
import { ColdIndexFile } from "../storage/cold-index.ts";
import { LogStartOffsetFile } from "../storage/log-start-offsets.ts";
import { PartitionCleaner, type CleanerSettings, type CleanerState } from "../storage/cleaner.ts";
import type { RetentionResult } from "../storage/retention.ts";
import type { CompactionResult } from "../storage/compaction.ts";
import type { ColdCompactionResult } from "../storage/cold-compaction.ts";
import { errorMessage } from "../lib/errors.ts";
import { coldCacheBytesDefault } from "../lib/limits.ts";
import type { TopicConfig } from "./types.ts";

/** Options of {@link CleanupService}. */
export interface CleanupServiceOptions {
  fs: FileSystem;
  clock: Clock;
  logger: Logger;
  /** Root of a directory cold tier (`--cold-storage-dir`), or undefined. */
  coldStorageDir?: string;
  /** The cold tier's object store (`--cold-storage s3://…`, built in runtime/); wins over `coldStorageDir`. */
  coldStore?: ColdStore;
  /** Bytes of cold reads cached in memory (`--cold-cache-bytes`, default 64 MiB). */
  coldCacheBytes?: number;
  /** Upload rate cap to the cold tier in bytes/s (`--cold-upload-bytes-per-sec`; 0 = none). */
  coldUploadBytesPerSec?: number;
  /** Period of each background task in ms; 0 = none. */
  intervalMs: number;
  /** Most distinct keys per compaction pass (tests lower it). */
  compactionKeysMax?: number;
  /** Where passes are counted (`storage/cleaner.ts`); default none. */
  metrics?: Metrics;
}

/** What the storage of one topic needs before its partitions open. */
export interface TopicStorage {
  logStartOffsets: LogStartOffsetFile;
  /** The topic's `cold_index.json`, or null without a cold tier. */
  coldIndex: ColdIndexFile | null;
  /** One per partition (null entries without a cold tier). */
  cold: (ColdPartition | null)[];
}

/** One partition's outcome of {@link CleanupService.runTopic}. */
export interface PartitionCleanup {
  partition: number;
  retention: RetentionResult;
  compaction: CompactionResult;
  /** The cold tier's last compaction pass (null without a cold tier or before the first). */
  cold_compaction?: ColdCompactionResult | null;
}

interface TopicCleanup {
  cleaners: PartitionCleaner[];
}

/** The cleanup settings of a topic config. */
export function cleanerSettings(config: TopicConfig): CleanerSettings {
  const policies = config.cleanup_policy.split(",");
  return {
    deleteEnabled: policies.includes("delete"),
    compactEnabled: policies.includes("compact"),
    retentionMs: config.retention_ms,
    retentionBytes: config.retention_bytes,
    coldRetentionMs: config.cold_retention_ms,
    holdUnforwarded: config.mirror_hold_retention === true,
    tombstoneRetentionMs: config.tombstone_retention_ms,
    segmentBytes: config.segment_bytes,
  };
}

/** See the module comment. */
export class CleanupService {
  readonly cold: ColdTier | null;
  #options: CleanupServiceOptions;
  #topics = new Map<string, TopicCleanup>();
  #timers: { retention: Timer | null; compaction: Timer | null } = {
    retention: null,
    compaction: null,
  };
  #running = new Set<Promise<void>>();
  #closing = false;
  #unforwardedFrom: ((topic: string, partition: number) => number | null) | null = null;

  constructor(options: CleanupServiceOptions) {
    this.#options = options;
    const store =
      options.coldStore ??
      (options.coldStorageDir === undefined
        ? undefined
        : new DirectoryColdStore({
            fs: options.fs,
            root: options.coldStorageDir,
            logger: options.logger,
          }));
    this.cold =
      store === undefined
        ? null
        : new ColdTier({
            store,
            fs: options.fs,
            clock: options.clock,
            logger: options.logger,
            cacheBytes: options.coldCacheBytes ?? coldCacheBytesDefault,
            uploadBytesPerSec: options.coldUploadBytesPerSec ?? 0,
          });
  }

  /**
   * Tells retention where a mirror's forwarding stands (docs/edge.md): `fn(topic, partition)` is
   * the lowest offset not forwarded yet, or null for a partition no mirror covers.
   */
  setUnforwardedFrom(fn: (topic: string, partition: number) => number | null): void {
    this.#unforwardedFrom = fn;
  }

  /** Starts the two background tasks (no-op with an interval of 0). */
  start(): void {
    if (this.#options.intervalMs <= 0) return;
    this.#arm("retention");
    this.#arm("compaction");
  }

  #arm(task: "retention" | "compaction"): void {
    if (this.#closing) return;
    this.#timers[task] = this.#options.clock.setTimer(this.#options.intervalMs, () => {
      this.#timers[task] = null;
      const visit = this.#visit(task).finally(() => {
        this.#running.delete(visit);
        this.#arm(task);
      });
      this.#running.add(visit);
    });
  }

  /** One visit of every partition by one task. */
  async #visit(task: "retention" | "compaction"): Promise<void> {
    for (const [topic, t] of [...this.#topics]) {
      for (const cleaner of t.cleaners) {
        if (this.#closing) return;
        if (cleaner.partition.closed) continue;
        try {
          if (task === "retention") await cleaner.retention();
          else await cleaner.compaction();
        } catch (err) {
          this.#options.logger.log("error", "cleanup.pass_crashed", {
            topic,
            partition: cleaner.partition.name,
            task,
            error: errorMessage(err),
          });
        }
      }
    }
  }

  /**
   * Loads what a topic's partitions need to open: its `log_start_offsets.json` and, with a cold
   * tier, its `cold_index.json` and each partition's cold side (rebuilt from a listing of the
   * store when the index file is missing).
   * @returns `{ error }` if the log start offsets or cold index file is unreadable (docs/decisions.md §9).
   * @throws ColdStoreError if a rebuild cannot list the store; FsError.
   */
  async prepareTopic(options: {
    topic: string;
    dir: string;
    partitions: number;
  }): Promise<TopicStorage | { error: string }> {
    const loaded = await LogStartOffsetFile.load(this.#options.fs, options.dir);
    if ("error" in loaded) return loaded;
    const cold: (ColdPartition | null)[] = [];
    let coldIndex: ColdIndexFile | null = null;
    if (this.cold !== null) {
      const index = await ColdIndexFile.load(this.#options.fs, options.dir);
      if ("error" in index) return index;
      coldIndex = index;
    }
    for (let p = 0; p < options.partitions; p++)
      cold.push(
        this.cold === null || coldIndex === null
          ? null
          : await this.cold.openPartition({ topic: options.topic, partition: p, index: coldIndex }),
      );
    return { logStartOffsets: loaded, coldIndex, cold };
  }

  /** The extra open options of partition `p` of a prepared topic. */
  partitionOptions(
    storage: TopicStorage,
    p: number,
  ): { logStartOffset?: number; lowerTier?: ColdPartition } {
    const cold = storage.cold[p];
    return {
      logStartOffset: storage.logStartOffsets.get(p),
      ...(cold === null ? {} : { lowerTier: cold }),
    };
  }

  /** Starts cleaning a topic whose partitions are open. `config` is read at every pass. */
  attach(options: {
    topic: string;
    storage: TopicStorage;
    partitions: readonly PartitionLog[];
    config: () => TopicConfig;
  }): void {
    const o = this.#options;
    const cleaners = options.partitions.map(
      (partition, p) =>
        new PartitionCleaner({
          fs: o.fs,
          clock: o.clock,
          logger: o.logger,
          partition,
          cold: options.storage.cold[p] ?? null,
          logStartOffsets: {
            get: () => options.storage.logStartOffsets.get(p),
            set: (offset) => options.storage.logStartOffsets.set(p, offset),
          },
          settings: () => cleanerSettings(options.config()),
          shouldStop: () => this.#closing || partition.closed,
          unforwardedFrom: () => this.#unforwardedFrom?.(options.topic, p) ?? null,
          onUnforwardedDeleted: (records) =>
            o.metrics
              ?.counter("esb_mirror_records_deleted_unforwarded_total", {
                topic: options.topic,
                partition: String(p),
              })
              .inc(records),
          compactionKeysMax: o.compactionKeysMax,
          metrics: o.metrics,
        }),
    );
    this.#topics.set(options.topic, { cleaners });
  }

  /** Stops cleaning a topic (deletion): waits for its passes in progress and closes its cold partitions. */
  async detach(topic: string): Promise<void> {
    const t = this.#topics.get(topic);
    if (t === undefined) return;
    this.#topics.delete(topic);
    for (const c of t.cleaners) {
      await c.idle();
      await c.cold?.close();
    }
  }

  /** Closes the cold side of partitions that never got attached (a topic that failed to open). */
  async discard(storage: TopicStorage): Promise<void> {
    for (const cold of storage.cold) await cold?.close();
  }

  /** Removes a topic's cold data (deletion, or leftovers when a topic of that name is created). @throws FsError. */
  async removeColdData(topic: string): Promise<void> {
    await this.cold?.removeTopic(topic);
  }

  /**
   * Runs retention (ignoring the cold tier's backoff) and then compaction on every partition of
   * `topic` now, and reports what each did. Undefined if the topic is not attached.
   */
  async runTopic(topic: string): Promise<PartitionCleanup[] | undefined> {
    const t = this.#topics.get(topic);
    if (t === undefined) return undefined;
    const out: PartitionCleanup[] = [];
    for (let p = 0; p < t.cleaners.length; p++) {
      const retention = await t.cleaners[p].retention({ force: true });
      const compaction = await t.cleaners[p].compaction({ force: true });
      out.push({
        partition: p,
        retention,
        compaction,
        cold_compaction: t.cleaners[p].describe().last_cold_compaction,
      });
    }
    return out;
  }

  /** Cleanup state of partition `p` of `topic` (null if unknown), with its cold tier. */
  describePartition(
    topic: string,
    p: number,
  ): (CleanerState & { cold: ReturnType<ColdPartition["describe"]> | null }) | null {
    const cleaner = this.#topics.get(topic)?.cleaners[p];
    if (cleaner === undefined) return null;
    return { ...cleaner.describe(), cold: cleaner.cold?.describe() ?? null };
  }

  /** Cancels the timers, lets passes in progress stop, and waits for them; closes cold partitions. */
  async close(): Promise<void> {
    this.#closing = true;
    this.#timers.retention?.cancel();
    this.#timers.compaction?.cancel();
    await Promise.allSettled([...this.#running]);
    for (const t of this.#topics.values()) {
      for (const c of t.cleaners) {
        await c.idle();
        await c.cold?.close();
      }
    }
    this.#topics.clear();
  }
}
