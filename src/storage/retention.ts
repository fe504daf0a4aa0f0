/**
 * Retention (docs/storage.md "Retention"; docs/decisions.md §4): one pass over one
 * partition deletes a prefix of its sealed segments, and with a cold tier moves them there first.
 *
 * Which segments go, oldest first, never the active one:
 *
 * | rule            | a sealed segment goes when …                                          | applies            |
 * |-----------------|-----------------------------------------------------------------------|--------------------|
 * | below the start | all its records are below the log start offset (a crash between      | always             |
 * |                 | persisting the log start offset and deleting left it behind)          |                    |
 * | by age          | its newest record (largest timestamp) is older than `retention_ms`    | policy has delete  |
 * | by size         | the partition's local logs are over `retention_bytes`                 | policy has delete  |
 *
 * Each rule yields a prefix, and the pass deletes the longest of them: a segment goes only if
 * every older one goes too, so a segment whose newest timestamp is in the future holds back every
 * segment after it (for the age rule). With a cold tier, each segment past the "below the start"
 * prefix is copied there durably first; the first copy that fails ends the prefix (the segment and
 * every later one stay local) and the caller retries later with backoff.
 *
 * Order of durable steps: without a cold tier the new log start offset is written to the topic's
 * `log_start_offsets.json` *before* any segment is deleted; with one, the log start offset does
 * not move (the offsets are still served, from the cold tier). Then, under the partition's write
 * lock, the segments leave the published list; their files are unlinked oldest first, with a
 * directory fsync after each segment, so a crash never leaves a hole in the local segments.
 * Readers that hold a segment keep reading it.
 *
 * The cold tier's own retention runs in the same pass: cold segments whose newest record is older
 * than `cold_retention_ms` (−1 = forever) go, as a prefix, after the log start offset is raised
 * past them and persisted.
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import type { FileSystem } from "../fs/types.ts";
import { unlinkDurably } from "./metadata.ts";
import type { PartitionLog } from "./partition.ts";
import type { Segment } from "./segment.ts";
import { errorMessage } from "../lib/errors.ts";
import type { ColdPartition } from "./cold-store.ts";
import { newestTimestampMs } from "./segment-scan.ts";

/** A topic's retention settings, as one pass sees them. */
export interface RetentionSettings {
  /** Whether the cleanup policy includes "delete" (the age and size rules apply). */
  deleteEnabled: boolean;
  /** `retention_ms`; −1 = keep forever. */
  retentionMs: number;
  /** `retention_bytes`; −1 = no limit. */
  retentionBytes: number;
  /** `cold_retention_ms`: how long the cold tier keeps a segment; −1 = forever. */
  coldRetentionMs: number;
  /** `mirror_hold_retention`: keep segments holding records a mirror has not forwarded yet. */
  holdUnforwarded?: boolean;
}

/** Where the partition's log start offset is persisted (the topic's `log_start_offsets.json`). */
export interface LogStartOffsetStore {
  /** The persisted value, or undefined if none was written. */
  get(): number | undefined;
  /** Persists a value durably. @throws FsError. */
  set(offset: number): Promise<void>;
}

/** What one retention pass needs. */
export interface RetentionContext {
  fs: FileSystem;
  clock: Clock;
  logger: Logger;
  partition: PartitionLog;
  /** The partition's cold tier, or null without one (`--cold-storage-dir`, `--cold-storage`). */
  cold: ColdPartition | null;
  logStartOffsets: LogStartOffsetStore;
  /** False while failed copies to the cold tier back off: nothing is offloaded (or deleted by age/size) this pass. */
  offloadAllowed: boolean;
  /** Polled between segments; true ends the pass early (broker shutting down). */
  shouldStop?: () => boolean;
  /**
   * Told before each copy to the cold tier how many segments this pass still wants to move there
   * (the one about to be copied included), and 0 when the copies are over: the backlog gauges show
   * a pass stuck on a hung store while it hangs, not only after it ends.
   */
  onOffloadPending?: (segments: number) => void;
  /**
   * The lowest offset a mirror has not forwarded yet (docs/edge.md), or null with no mirror of
   * this partition. Deleting records at or above it is reported (`retention.deletes_unforwarded`),
   * or held back with `holdUnforwarded`.
   */
  unforwardedFrom?: () => number | null;
  /**
   * Called on each pass over a partition a mirror covers (`unforwardedFrom` not null) with the
   * number of records the pass deleted that the mirror had not forwarded: 0 when none, so that a
   * counter of them exists before the first loss (`esb_mirror_records_deleted_unforwarded_total`,
   * docs/operations.md "Metrics").
   */
  onUnforwardedDeleted?: (records: number) => void;
}

/** What a retention pass did (logged as `retention.pass`, shown in `GET /v1/admin/storage`). */
export interface RetentionResult {
  task: "retention";
  partition: string;
  /**
   * "ok": something was deleted or offloaded; "nothing_to_do"; "skipped" (closed or fenced
   * partition); "cancelled" (the segments changed under the pass, or shutdown); "offload_failed"
   * (a copy to the cold tier failed: what precedes it was handled, the rest stays); "failed".
   */
  status: "ok" | "nothing_to_do" | "skipped" | "cancelled" | "offload_failed" | "failed";
  reason: string;
  started_ms: number;
  duration_ms: number;
  /** Local segments deleted (offloaded ones included) and their log bytes. */
  segments_deleted: number;
  bytes_deleted: number;
  /** How many of those each rule asked for (prefix lengths). */
  below_log_start: number;
  by_age: number;
  by_size: number;
  /** Segments copied to the cold tier, and their log bytes. */
  segments_offloaded: number;
  bytes_offloaded: number;
  /** Cold segments deleted by the cold tier's retention, and their log bytes. */
  cold_segments_deleted: number;
  cold_bytes_deleted: number;
  log_start_offset_before: number;
  log_start_offset_after: number;
  /** Bytes of the partition's local logs before and after the pass. */
  size_bytes_before: number;
  size_bytes_after: number;
  /** Why a copy to the cold tier failed, or null. */
  offload_error: string | null;
}

/** Newest timestamps of sealed segments, scanned once per segment object (sealed segments never change). */
const newestCache = new WeakMap<Segment, number>();

/**
 * The largest record timestamp of a sealed segment (ms, −1 if it holds none), scanned on first
 * use and remembered. Returns null if the segment was closed meanwhile.
 * @throws SegmentUnreadableError, FsError.
 */
export async function segmentNewestTimestampMs(
  fs: FileSystem,
  segment: Segment,
): Promise<number | null> {
  const known = newestCache.get(segment);
  if (known !== undefined) return known;
  if (!segment.acquire()) return null;
  try {
    const newest = await newestTimestampMs(fs, segment);
    newestCache.set(segment, newest);
    return newest;
  } finally {
    await segment.release();
  }
}

/**
 * A retention result with nothing done yet (status "nothing_to_do"), for `partition` at `startedMs`;
 * the size and log start offset "after" equal "before" until a pass changes them.
 */
export function newRetentionResult(partition: PartitionLog, startedMs: number): RetentionResult {
  const lso = partition.closed ? 0 : partition.logStartOffset;
  const size = partition.closed ? 0 : partition.sizeBytes;
  return {
    task: "retention",
    partition: partition.name,
    status: "nothing_to_do",
    reason: "",
    started_ms: startedMs,
    duration_ms: 0,
    segments_deleted: 0,
    bytes_deleted: 0,
    below_log_start: 0,
    by_age: 0,
    by_size: 0,
    segments_offloaded: 0,
    bytes_offloaded: 0,
    cold_segments_deleted: 0,
    cold_bytes_deleted: 0,
    log_start_offset_before: lso,
    log_start_offset_after: lso,
    size_bytes_before: size,
    size_bytes_after: size,
    offload_error: null,
  };
}

/**
 * Runs one retention pass over one partition (see the module comment). Never throws for
 * operating errors: they come back as status "failed" or "offload_failed" and are logged.
 */
export async function runRetention(
  ctx: RetentionContext,
  settings: RetentionSettings,
): Promise<RetentionResult> {
  const { partition, clock, logger } = ctx;
  const started = clock.nowMs();
  const result = newRetentionResult(partition, started);
  const finish = (status: RetentionResult["status"], reason: string): RetentionResult => {
    result.status = status;
    result.reason = reason;
    result.duration_ms = clock.nowMs() - started;
    result.log_start_offset_after = partition.closed
      ? result.log_start_offset_before
      : partition.logStartOffset;
    result.size_bytes_after = partition.closed ? result.size_bytes_before : partition.sizeBytes;
    const level =
      status === "failed" || status === "offload_failed"
        ? "error"
        : status === "ok"
          ? "info"
          : "debug";
    logger.log(level, "retention.pass", { ...result });
    return result;
  };
  if (partition.closed) return finish("skipped", "the partition is closed");
  if (partition.fenced) return finish("skipped", "the partition is fenced (restart required)");

  try {
    const sealed = partition.sealedSegments;
    const now = clock.nowMs();
    const lso = partition.logStartOffset;
    let below = 0;
    while (below < sealed.length && sealed[below].nextOffset <= lso) below++;
    let byAge = 0;
    let bySize = 0;
    if (settings.deleteEnabled && settings.retentionMs >= 0) {
      byAge = below;
      while (byAge < sealed.length) {
        const newest = await segmentNewestTimestampMs(ctx.fs, sealed[byAge]);
        if (newest === null) return finish("cancelled", "a segment was replaced during the pass");
        // docs/decisions.md §4: a newest timestamp in the future is never "older", and holds back the rest.
        if (now - newest > settings.retentionMs) byAge++;
        else break;
      }
    }
    if (settings.deleteEnabled && settings.retentionBytes >= 0) {
      let total = partition.sizeBytes;
      while (bySize < sealed.length && total > settings.retentionBytes)
        total -= sealed[bySize++].sizeBytes;
    }
    result.below_log_start = below;
    result.by_age = byAge;
    result.by_size = bySize;
    let count = Math.max(below, byAge, bySize);
    // Without a cold tier deletion loses records: those a mirror has not forwarded are reported
    // loudly, and kept when the topic says so.
    const unforwarded = ctx.unforwardedFrom?.() ?? null;
    if (unforwarded !== null) ctx.onUnforwardedDeleted?.(0);
    if (ctx.cold === null && unforwarded !== null && count > 0) {
      let safe = 0;
      while (safe < count && sealed[safe].nextOffset <= unforwarded) safe++;
      if (safe < count) {
        logger.log(
          settings.holdUnforwarded === true ? "warn" : "error",
          "retention.deletes_unforwarded",
          {
            partition: partition.name,
            unforwarded_from: unforwarded,
            would_delete_to: sealed[count - 1].nextOffset,
            action:
              settings.holdUnforwarded === true
                ? "held (mirror_hold_retention): the segments stay until the mirror forwards them"
                : "deleted: the mirror stops this partition with a gap error (set mirror_hold_retention to hold them)",
          },
        );
        if (settings.holdUnforwarded === true) {
          count = Math.max(safe, below);
          result.reason = "segments holding records the mirror has not forwarded are held";
        }
      }
    }

    // With a cold tier, a segment leaves only after its copy there is durable.
    const cold = ctx.cold;
    if (cold !== null && count > below) {
      if (!ctx.offloadAllowed) {
        result.reason = "copies to the cold tier are backing off after a failure";
        count = below;
      } else {
        for (let i = below; i < count; i++) {
          if (ctx.shouldStop?.()) {
            count = i;
            break;
          }
          ctx.onOffloadPending?.(count - i);
          try {
            // The scanned newest timestamp, not `Segment.maxTimestampMs`: for a segment trusted at
            // start that one covers only the records after its last index entry, and cold
            // retention would judge the segment by it.
            const newest = await segmentNewestTimestampMs(ctx.fs, sealed[i]);
            if (newest === null) {
              count = i;
              result.reason = "a segment was replaced during the pass";
              break;
            }
            const { bytes } = await cold.offload(sealed[i], newest);
            result.segments_offloaded++;
            result.bytes_offloaded += bytes;
          } catch (err) {
            result.offload_error = errorMessage(err);
            logger.log("error", "cold.offload_failed", {
              partition: partition.name,
              segment: sealed[i].logPath,
              error: result.offload_error,
            });
            count = i;
            break;
          }
        }
        ctx.onOffloadPending?.(0);
      }
    }

    if (count > 0) {
      const victims = sealed.slice(0, count);
      const outcome = await partition.withWriteLock(async () => {
        if (partition.closed) return "the partition closed";
        const current = partition.sealedSegments;
        if (!victims.every((s, i) => current[i] === s))
          return "the sealed segments changed during the pass";
        // Without a cold tier the log now starts after the victims; persist that first.
        const startAfter =
          count < sealed.length
            ? Math.max(sealed[count - 1].nextOffset, sealed[count].baseOffset)
            : sealed[count - 1].nextOffset;
        const newLso =
          cold === null ? Math.max(startAfter, partition.logStartOffset) : partition.logStartOffset;
        if (newLso > partition.logStartOffset || ctx.logStartOffsets.get() === undefined)
          await ctx.logStartOffsets.set(newLso);
        // Read again: the mirror may have forwarded more since the pass began.
        const notForwarded = ctx.unforwardedFrom?.() ?? null;
        const lost =
          notForwarded === null ? 0 : newLso - Math.max(notForwarded, partition.logStartOffset);
        partition.advanceLogStartOffset(newLso);
        if (lost > 0) ctx.onUnforwardedDeleted?.(lost);
        await partition.replaceSealedSegments(victims, []);
        return "";
      });
      if (outcome !== "") return finish("cancelled", outcome);
      // Oldest first, each deletion durable before the next: a crash leaves the local segments a
      // suffix of what they were, never a run with a hole (with a cold tier, the offsets of a hole
      // would be read past rather than from the cold copy).
      for (const s of victims) {
        // The index first: a crash between leaves a log that loads again (its index rebuilt), not a stray index.
        await unlinkDurably(ctx.fs, partition.dir, [s.indexPath, s.logPath]);
        result.segments_deleted++;
        result.bytes_deleted += s.sizeBytes;
      }
    }

    if (cold !== null) {
      await coldRetention(ctx, cold, settings, result);
      // Garbage in the store (uploads a crash cut short, replaced objects whose delete failed):
      // listed and deleted now and then; a failure waits for the next pass.
      await cold.reclaim().catch((err: unknown) =>
        logger.log("warn", "cold.reclaim_failed", {
          partition: partition.name,
          error: errorMessage(err),
        }),
      );
    }
  } catch (err) {
    return finish("failed", errorMessage(err));
  }
  if (result.offload_error !== null)
    return finish("offload_failed", `a copy to the cold tier failed: ${result.offload_error}`);
  const did =
    result.segments_deleted + result.segments_offloaded + result.cold_segments_deleted > 0;
  if (did) return finish("ok", result.reason);
  return finish(
    "nothing_to_do",
    result.reason !== "" ? result.reason : nothingToDoReason(ctx, settings),
  );
}

/**
 * Why a pass deleted nothing, in words an operator can act on (`reason` of a "nothing_to_do"
 * result; newuser18 got an empty one with everything in the active segment).
 */
export function nothingToDoReason(ctx: RetentionContext, settings: RetentionSettings): string {
  const { partition } = ctx;
  if (partition.closed) return "the partition is closed";
  const active = partition.activeSegmentInfo;
  const activeText = `the active segment (base offset ${active.baseOffset}) holds ${active.sizeBytes} bytes; it is never deleted; it rolls at the next append once it would pass segment_bytes (${active.segmentBytes}) or is segment_ms (${active.segmentMs}) old, and retention can delete it after that`;
  if (!settings.deleteEnabled)
    return `cleanup_policy has no "delete": retention by age and size does not apply`;
  if (settings.retentionMs < 0 && settings.retentionBytes < 0)
    return "retention_ms and retention_bytes are both -1 (keep forever)";
  const sealed = partition.sealedSegments;
  if (sealed.length === 0) return `no sealed segment: ${activeText}`;
  const parts: string[] = [];
  if (settings.retentionMs >= 0)
    parts.push(
      `no sealed segment's newest record is older than retention_ms (${settings.retentionMs})`,
    );
  if (settings.retentionBytes >= 0) {
    const size = partition.sizeBytes;
    parts.push(
      size > settings.retentionBytes
        ? `the partition's ${size} bytes are over retention_bytes (${settings.retentionBytes})`
        : `the partition's ${size} bytes are within retention_bytes (${settings.retentionBytes})`,
    );
  }
  return `${parts.join("; ")}; ${activeText}`;
}

/** The cold tier's retention: a prefix of cold segments below the log start offset or older than `cold_retention_ms`. */
async function coldRetention(
  ctx: RetentionContext,
  cold: ColdPartition,
  settings: RetentionSettings,
  result: RetentionResult,
): Promise<void> {
  const { partition } = ctx;
  const bases = cold.baseOffsets;
  const localStart = partition.localStartOffset;
  const now = ctx.clock.nowMs();
  let expired = 0;
  while (expired < bases.length) {
    const next = expired + 1 < bases.length ? bases[expired + 1] : localStart;
    if (next <= partition.logStartOffset) {
      expired++;
      continue;
    }
    if (settings.coldRetentionMs < 0) break;
    const newest = await cold.newestTimestampMs(bases[expired]);
    if (now - newest > settings.coldRetentionMs) expired++;
    else break;
  }
  if (expired === 0) return;
  const newLso = Math.min(expired < bases.length ? bases[expired] : localStart, localStart);
  if (newLso > partition.logStartOffset) {
    await ctx.logStartOffsets.set(newLso);
    partition.advanceLogStartOffset(newLso);
  }
  const gone = bases.slice(0, expired);
  for (const base of gone) result.cold_bytes_deleted += cold.sizeOf(base);
  await cold.remove(gone);
  result.cold_segments_deleted += gone.length;
}
