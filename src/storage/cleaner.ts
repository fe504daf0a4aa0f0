/**
 * The background work of one partition (docs/storage.md "Retention and compaction"): runs its retention and
 * compaction passes one at a time (a per-partition mutex, so the two tasks never interleave on
 * the same partition), remembers the last run of each for `GET /v1/admin/storage`, and paces
 * retries of failed copies to the cold tier.
 *
 * Backoff: after a failed copy the next automatic attempt waits `coldOffloadBackoffMsMin` ms,
 * doubling with each further failure up to `coldOffloadBackoffMsMax`; a copy that succeeds resets
 * it. While backing off, retention neither copies nor deletes by age or size (the segments stay
 * local). An explicit run (`POST /v1/admin/topics/{topic}/cleanup`) tries at once.
 *
 * If a compaction swap fails after its marker was written, the disk holds a swap only a restart
 * can finish: every later pass of this partition is skipped until then.
 */
import { Mutex } from "../lib/mutex.ts";
import { type Metrics, noMetrics } from "../lib/metrics.ts";
import {
  coldCompactionIntervalMs,
  coldOffloadBackoffMsMax,
  coldOffloadBackoffMsMin,
} from "../lib/limits.ts";
import type { PartitionLog } from "./partition.ts";
import type { Segment } from "./segment.ts";
import type { ColdPartition } from "./cold-store.ts";
import {
  newRetentionResult,
  runRetention,
  type RetentionContext,
  type RetentionResult,
  type RetentionSettings,
} from "./retention.ts";
import { runColdCompaction, type ColdCompactionResult } from "./cold-compaction.ts";
import {
  newCompactionResult,
  runCompaction,
  type CompactionResult,
  type CompactionSettings,
} from "./compaction.ts";

/** A topic's cleanup settings, read at the start of every pass (so a config change applies at once). */
export interface CleanerSettings extends RetentionSettings, CompactionSettings {
  /** Whether the cleanup policy includes "compact". */
  compactEnabled: boolean;
}

/**
 * Options of {@link PartitionCleaner}: what a retention pass needs (`fs`, `clock`, `logger`,
 * `partition`, `cold`, `logStartOffsets`; the cleaner decides `offloadAllowed` itself) and more.
 */
export interface PartitionCleanerOptions
  extends Omit<RetentionContext, "offloadAllowed" | "shouldStop"> {
  settings: () => CleanerSettings;
  /** True once the broker is shutting down: passes end early. */
  shouldStop: () => boolean;
  /** Most distinct keys per compaction pass (default `compactionKeysMax`); tests lower it. */
  compactionKeysMax?: number;
  /** Where passes are counted (`esb_cleanup_*`, `esb_cold_*`); default none. */
  metrics?: Metrics;
}

/**
 * How long one pass's copies to the cold tier may run before they count as a failure in
 * `cold_offload_failures` (and `esb_partition_cold_copy_consecutive_failures`) while they still
 * run, in ms: a hung store holds a pass for minutes (6 tries × 30 s per request), and the gauge
 * must not read 0 meanwhile (newuser18 F4). Healthy copies of a 128 MiB segment take seconds.
 */
export const coldOffloadStuckMs = 60_000;

/** The cleanup state of one partition, for `GET /v1/admin/storage`. */
export interface CleanerState {
  last_retention: RetentionResult | null;
  last_compaction: CompactionResult | null;
  /** The last compaction pass over the cold tier (null without one, or before the first). */
  last_cold_compaction: ColdCompactionResult | null;
  /**
   * Failed copies to the cold tier in a row (plus 1 while a pass's copies have run longer than
   * {@link coldOffloadStuckMs}), and when the next automatic attempt may run (ms since the epoch; 0 = now).
   */
  cold_offload_failures: number;
  cold_offload_retry_at_ms: number;
  /** Set when cleanup is stopped until a restart (an incomplete swap). */
  stopped_reason: string | null;
  /**
   * With a cold tier: sealed segments the last retention pass wanted gone but had to keep local
   * because their copy to the cold tier failed or is backing off, or, while a pass copies, the
   * segments it has still to copy if more (0 without a cold tier).
   */
  cold_backlog_segments: number;
}

/** Runs one partition's retention and compaction passes; see the module comment. */
export class PartitionCleaner {
  readonly partition: PartitionLog;
  readonly cold: ColdPartition | null;
  #options: PartitionCleanerOptions;
  #mutex = new Mutex();
  #lastRetention: RetentionResult | null = null;
  #lastCompaction: CompactionResult | null = null;
  #lastColdCompaction: ColdCompactionResult | null = null;
  /** When the cold tier was last compacted (ms; a pass downloads every cold segment, so it runs at most every `coldCompactionIntervalMs`). */
  #coldCompactedAtMs = Number.NEGATIVE_INFINITY;
  #offloadFailures = 0;
  #offloadRetryAtMs = 0;
  #stoppedReason: string | null = null;
  #coldBacklog = 0;
  /** While a pass copies to the cold tier: segments it still wants to move, and since when (ms). */
  #offloading: { segments: number; sinceMs: number } | null = null;
  /**
   * After a compaction pass over every sealed segment found nothing to drop: those segments, the
   * tombstone retention it used, and until when that stays true (the next tombstone expiry). A
   * pass over the same segments before then is skipped without reading them.
   */
  #clean: { segments: readonly Segment[]; tombstoneRetentionMs: number; untilMs: number } | null =
    null;

  constructor(options: PartitionCleanerOptions) {
    this.#options = options;
    this.partition = options.partition;
    this.cold = options.cold;
  }

  /**
   * Runs a retention pass now (after any pass of this partition in progress). `force` ignores the
   * cold tier's backoff. Never rejects for operating errors (see {@link RetentionResult}).
   */
  retention(options: { force?: boolean } = {}): Promise<RetentionResult> {
    return this.#mutex.run(async () => {
      const o = this.#options;
      if (this.#stoppedReason !== null) return this.#skippedRetention(this.#stoppedReason);
      const now = o.clock.nowMs();
      const offloadAllowed = options.force === true || now >= this.#offloadRetryAtMs;
      const onOffloadPending = (segments: number) => {
        if (segments === 0) this.#offloading = null;
        else this.#offloading = { segments, sinceMs: this.#offloading?.sinceMs ?? o.clock.nowMs() };
      };
      let result: RetentionResult;
      try {
        result = await runRetention({ ...o, offloadAllowed, onOffloadPending }, o.settings());
      } finally {
        this.#offloading = null;
      }
      if (result.offload_error !== null) {
        this.#offloadFailures++;
        const waitMs = Math.min(
          coldOffloadBackoffMsMax,
          coldOffloadBackoffMsMin * 2 ** Math.min(this.#offloadFailures - 1, 30),
        );
        this.#offloadRetryAtMs = o.clock.nowMs() + waitMs;
        o.logger.log("warn", "cold.offload_backoff", {
          partition: o.partition.name,
          failures: this.#offloadFailures,
          retry_in_ms: waitMs,
        });
      } else if (result.segments_offloaded > 0) {
        this.#offloadFailures = 0;
        this.#offloadRetryAtMs = 0;
      }
      if (this.cold !== null && ["ok", "nothing_to_do", "offload_failed"].includes(result.status))
        this.#coldBacklog = Math.max(
          0,
          Math.max(result.below_log_start, result.by_age, result.by_size) - result.segments_deleted,
        );
      this.#lastRetention = result;
      this.#count(result, result.bytes_deleted);
      const m = o.metrics ?? noMetrics;
      m.counter("esb_cold_copies_total").inc(result.segments_offloaded);
      m.counter("esb_cold_copied_bytes_total").inc(result.bytes_offloaded);
      if (result.offload_error !== null) m.counter("esb_cold_copy_failures_total").inc();
      return result;
    });
  }

  /**
   * Runs a compaction pass now if the policy includes "compact" (else reports it skipped): first
   * over the cold tier when it holds segments (at most every `coldCompactionIntervalMs` unless
   * `force`), then over the local sealed segments. Unless the cold pass ran and completed in this
   * call, the local pass keeps expired tombstones: dropping one could bring back older values of
   * its key that sit in the cold tier (`cold-compaction.ts`). Never rejects for operating errors.
   */
  compaction(options: { force?: boolean } = {}): Promise<CompactionResult> {
    return this.#mutex.run(async () => {
      const o = this.#options;
      let settings = o.settings();
      const cold = this.cold;
      if (
        settings.compactEnabled &&
        this.#stoppedReason === null &&
        cold !== null &&
        cold.entries.length > 0
      ) {
        let coldDone = false;
        const now = o.clock.nowMs();
        if (options.force === true || now - this.#coldCompactedAtMs >= coldCompactionIntervalMs) {
          const r = await runColdCompaction(
            {
              fs: o.fs,
              clock: o.clock,
              logger: o.logger,
              partition: o.partition,
              cold,
              keysMax: o.compactionKeysMax,
              shouldStop: o.shouldStop,
            },
            settings,
          );
          this.#lastColdCompaction = r;
          coldDone =
            r.status === "compacted" ||
            (r.status === "skipped" && r.reason === "no record to drop");
          if (coldDone) this.#coldCompactedAtMs = now;
        }
        if (!coldDone) settings = { ...settings, tombstoneRetentionMs: Number.MAX_SAFE_INTEGER };
      }
      let result: CompactionResult;
      if (this.#stoppedReason !== null) result = this.#skippedCompaction(this.#stoppedReason);
      else if (!settings.compactEnabled)
        result = this.#skippedCompaction('the cleanup policy does not include "compact"');
      else if (this.#stillClean(settings))
        result = this.#skippedCompaction(
          "no record to drop (no segment changed and no tombstone expired since the last pass)",
        );
      else {
        const sealed = o.partition.closed ? [] : o.partition.sealedSegments;
        result = await runCompaction(
          {
            fs: o.fs,
            clock: o.clock,
            logger: o.logger,
            partition: o.partition,
            shouldStop: o.shouldStop,
            keysMax: o.compactionKeysMax,
            ensureLogStartOffsetPersisted: async () => {
              if (o.logStartOffsets.get() === undefined)
                await o.logStartOffsets.set(o.partition.logStartOffset);
            },
          },
          settings,
        );
        const coveredAll =
          result.status === "skipped" &&
          result.reason === "no record to drop" &&
          result.segments_read === sealed.length;
        this.#clean = coveredAll
          ? {
              segments: sealed,
              tombstoneRetentionMs: settings.tombstoneRetentionMs,
              untilMs:
                result.next_tombstone_expiry_ms < 0 ? Infinity : result.next_tombstone_expiry_ms,
            }
          : null;
        if (result.swap_incomplete) {
          this.#stoppedReason = `a compaction swap failed after its marker was written (${result.reason}); restart to finish it`;
          o.logger.log("error", "cleanup.stopped", {
            partition: o.partition.name,
            reason: this.#stoppedReason,
          });
        }
      }
      this.#lastCompaction = result;
      this.#count(
        result,
        result.status === "compacted" ? Math.max(0, result.bytes_before - result.bytes_after) : 0,
      );
      return result;
    });
  }

  /** Counts a finished pass (module comment of `lib/metrics.ts`: `esb_cleanup_*`). */
  #count(result: RetentionResult | CompactionResult, reclaimedBytes: number): void {
    const m = this.#options.metrics ?? noMetrics;
    const task = result.task;
    m.counter("esb_cleanup_runs_total", { task, status: result.status }).inc();
    m.histogram("esb_cleanup_duration_seconds", { task }).observe(result.duration_ms / 1000);
    m.counter("esb_cleanup_reclaimed_bytes_total", { task }).inc(reclaimedBytes);
    m.gauge("esb_cleanup_last_run_timestamp_seconds", { task }).set(
      this.#options.clock.nowMs() / 1000,
    );
  }

  /** True while the last full pass's "nothing to drop" still holds (same segments, same setting, no tombstone expired since). */
  #stillClean(settings: CleanerSettings): boolean {
    const clean = this.#clean;
    if (clean === null || this.partition.closed) return false;
    if (
      clean.tombstoneRetentionMs !== settings.tombstoneRetentionMs ||
      this.#options.clock.nowMs() >= clean.untilMs
    )
      return false;
    const sealed = this.partition.sealedSegments;
    return (
      sealed.length === clean.segments.length && sealed.every((s, i) => s === clean.segments[i])
    );
  }

  /** Waits for the pass in progress, if any. */
  async idle(): Promise<void> {
    await this.#mutex.run(async () => {});
  }

  /** The state shown by `GET /v1/admin/storage`. */
  describe(): CleanerState {
    return {
      last_retention: this.#lastRetention,
      last_compaction: this.#lastCompaction,
      last_cold_compaction: this.#lastColdCompaction,
      cold_offload_failures: this.#offloadFailures + (this.#offloadStuck() ? 1 : 0),
      cold_offload_retry_at_ms: this.#offloadRetryAtMs,
      stopped_reason: this.#stoppedReason,
      cold_backlog_segments: Math.max(this.#coldBacklog, this.#offloading?.segments ?? 0),
    };
  }

  /** True while one pass's copies to the cold tier have run longer than {@link coldOffloadStuckMs}. */
  #offloadStuck(): boolean {
    const at = this.#offloading;
    return at !== null && this.#options.clock.nowMs() - at.sinceMs > coldOffloadStuckMs;
  }

  #skippedRetention(reason: string): RetentionResult {
    return {
      ...newRetentionResult(this.partition, this.#options.clock.nowMs()),
      status: "skipped",
      reason,
    };
  }

  #skippedCompaction(reason: string): CompactionResult {
    return { ...newCompactionResult(this.partition.name, this.#options.clock.nowMs()), reason };
  }
}
