/**
 * A partition log: a directory of segments, one writer, group commit, recovery at open
 * (docs/storage.md "Writes and durability", docs/storage.md "Recovery after a crash").
 *
 * What the promises mean:
 * - `append()` resolves, with the default `flushEveryRecords` 1, only after an fsync that covers
 *   every byte of the request. With `flushEveryRecords` N > 1 it resolves after the write (bytes in
 *   the page cache) and an fsync follows once N records wait or `flushIntervalMs` passes; a crash
 *   can lose what arrived since the last fsync.
 * - The high watermark is one past the last record an fsync covered. Reads never return a record
 *   at or above it, so a consumer never sees a record a crash can take back — in both modes.
 *
 * The write loop: appends are written in arrival order, each batch of queued requests as one write
 * to the log (at most `groupEntryBytesMax` of entries). The loop starts after the I/O events
 * already received are handled (`Clock.afterIo`), so requests that arrive together are one batch;
 * requests that arrive while a write or its fsync runs become the next batch. When a batch's write
 * returns, `group-commit.ts` decides when its requests are answered: the fsync state machine, high
 * watermark and fencing live there, with their decision table (docs/decisions.md §7: a failed fsync
 * fences the partition and is never retried; reads of acknowledged data continue).
 */
import { assert } from "../lib/assert.ts";
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import type { Metrics } from "../lib/metrics.ts";
import {
  groupEntryBytesMax,
  offsetMax,
  recordLengthPrefixBytes,
  recordOverEntryBytes,
} from "../lib/limits.ts";
import { viewOf } from "../lib/bytes.ts";
import { Mutex } from "../lib/mutex.ts";
import { lastAtOrBelow } from "../lib/search.ts";
import { errorMessage } from "../lib/errors.ts";
import type { FileSystem } from "../fs/types.ts";
import { StorageError } from "./errors.ts";
import { type AppendSink, answerAppended, answerFailed, GroupCommit } from "./group-commit.ts";

export type { AppendSink } from "./group-commit.ts";
import { recoverPartition } from "./partition-recovery.ts";
import type { CleanStop } from "./clean-stop.ts";
import {
  type AppendRecords,
  isStored,
  logBytesOf,
  RecordHeader,
  type StoredRecords,
} from "./record.ts";
import { segmentNewestTimestampMs } from "./retention.ts";
import {
  type PreparedAppend,
  Segment,
  type SegmentContext,
  type SegmentDescription,
} from "./segment.ts";
import type { StrayFile } from "./segment-files.ts";
import type { SegmentHandleCache } from "./segment-handles.ts";
import { WriteRefusals } from "./write-refusals.ts";
import { fetchReadWindows } from "./read-windows.ts";

/** Settings a partition reads on every append, so a config change applies at once. */
export interface PartitionConfig {
  /** Roll once the active segment would pass this many bytes. */
  segmentBytes: number;
  /** Roll once the active segment is this many ms old. */
  segmentMs: number;
}

/** Options of {@link PartitionLog.open}. */
export interface PartitionOptions {
  fs: FileSystem;
  /** The partition directory (created 0700 if missing). */
  dir: string;
  /** "topic/partition", used in messages and logs. */
  name: string;
  clock: Clock;
  logger: Logger;
  /** Read on every append. */
  config: () => PartitionConfig;
  /** Records per fsync: 1 (default) acknowledges only after the fsync covering them. */
  flushEveryRecords?: number;
  /** With flushEveryRecords > 1: the longest a written record waits for its fsync, in ms. */
  flushIntervalMs?: number;
  /**
   * The log start offset persisted by retention (`log_start_offsets.json`), if any. Without it the
   * log starts at the lower tier's first offset, else at the first local segment's base.
   */
  logStartOffset?: number;
  /**
   * Storage below the local segments (the cold tier), read for offsets under the first local
   * segment.
   */
  lowerTier?: LowerTier;
  /** Where group commit counts fsyncs (`storage/group-commit.ts`); default none. */
  metrics?: Metrics;
  /**
   * The broker's cache of sealed segments' open files (`segment-handles.ts`,
   * `--max-open-segments`); without one every segment keeps its files open.
   */
  segmentHandles?: SegmentHandleCache;
  /**
   * Where this partition's log ended at the broker's last clean stop (`clean-stop.ts`,
   * docs/decisions.md §17); absent after a crash.
   */
  cleanStop?: CleanStop | null;
  /**
   * The data directory's disk reserve (`disk-reserve.ts`, docs/storage.md "Full disk"): while it
   * is given up, appends are refused with the error it names, so the freed space goes to metadata
   * writes. Default none.
   */
  diskReserve?: { appendRefusal(partition: string): StorageError | null };
}

/**
 * Storage that holds the offsets below a partition's first local segment (the cold tier,
 * `src/storage/cold-store.ts`). The partition reads it for offsets in [log start offset, first
 * local base) and falls through to the local segments when it holds nothing there.
 */
export interface LowerTier {
  /** Base offset of its first segment, or −1 when it holds none. */
  readonly firstOffset: number;
  /**
   * One past the last offset it holds, or −1 when it holds none: a partition with no local
   * segment (a data directory rebuilt from the cold tier) starts its next offset there.
   */
  readonly endOffset: number;
  /**
   * Stored records with `offset` ≤ record offset < `endOffset`, verbatim, at least one if any is
   * there (count 0 if none), then stopping before `maxBytes` or at `maxRecords`.
   * @throws FsError if its files cannot be read.
   */
  read(request: {
    offset: number;
    endOffset: number;
    maxRecords: number;
    maxBytes: number;
  }): Promise<{ bytes: Uint8Array; count: number; lastOffset: number }>;
}

/** The result of {@link PartitionLog.read}. */
export interface PartitionRead {
  /** Stored records verbatim (docs/storage.md "Records"), back to back. */
  bytes: Uint8Array;
  count: number;
  /** Where to read next: one past the last record returned, or past a gap. */
  nextOffset: number;
  highWatermark: number;
  logStartOffset: number;
  /**
   * Gives the read window `bytes` views back for reuse (`read-windows.ts`). Optional to call:
   * only a holder that knows when the last view of `bytes` is done with calls it, once (the TCP
   * transport, after its socket write of the answer completed); a read nobody gives back is
   * collected. Absent when there is nothing to give back.
   */
  release?: () => void;
}

export type { StrayFile } from "./segment-files.ts";

/** Options of {@link PartitionLog.append}. */
export interface AppendOptions {
  /**
   * Called inside the write loop once this request's offsets are assigned and before any byte of
   * its group is written, with the request's base offset; the group's write waits until every
   * such promise of the group has settled. Idempotent produce uses it to make its journal entry
   * durable no later than the log write it describes (`broker/producers/`). If it rejects, this
   * request is rejected with that error and nothing of it is written; the rest of the group is
   * written without it. Offsets after it then move down, so the hook of every later request whose
   * base offset changed is called again with the new one: a hook must accept being called more
   * than once, and its last call is the one that holds. Requests without a hook are unaffected
   * (no extra work on that path).
   */
  beforeWrite?: (baseOffset: number) => Promise<void>;
  /**
   * Called inside the write loop, holding the partition's write lock, before this request's
   * offsets are assigned; if it throws, the request is rejected with that error and nothing of
   * it is written (the rest of its group is written without it). Cluster mode's leadership fence
   * (docs/cluster.md "Replication"): checked atomically with the append, so that a role change
   * which then takes the write lock ({@link PartitionLog.settle}) knows no admitted append can
   * still land after it. Synchronous on purpose: nothing may happen between the check and the
   * offsets being assigned.
   */
  admit?: () => void;
  /**
   * Called once the write of this request's group has returned (its bytes are in the page cache,
   * at the offsets the append resolves with) and before the group waits for its fsync; never if
   * the append fails before that. The append still resolves only once an fsync covered it.
   * Idempotent produce uses it to take the next batch of the same producer while this one's
   * fsync runs (`broker/producers/state.ts`).
   */
  afterWrite?: () => void;
}

/** One group write kept in memory (`PartitionLog.keepRecentWrites`): its records verbatim. */
interface RecentWrite {
  baseOffset: number;
  /** One past its last record. */
  nextOffset: number;
  /** The stored records as written to the log (a copy of their own). */
  bytes: Uint8Array;
}

interface PendingAppend {
  batch: AppendRecords;
  beforeWrite: ((baseOffset: number) => Promise<void>) | undefined;
  admit: (() => void) | undefined;
  afterWrite: (() => void) | undefined;
  /** Whom to answer ({@link PartitionLog.appendTo}). */
  sink: AppendSink;
  tag: number;
}

/** The sink of {@link PartitionLog.append}: settles its promise. */
class PromiseSink implements AppendSink {
  readonly #resolve: (result: { baseOffset: number; count: number }) => void;
  readonly #reject: (err: unknown) => void;

  constructor(
    resolve: (result: { baseOffset: number; count: number }) => void,
    reject: (err: unknown) => void,
  ) {
    this.#resolve = resolve;
    this.#reject = reject;
  }

  appended(_tag: number, baseOffset: number, count: number): void {
    this.#resolve({ baseOffset, count });
  }

  failed(err: unknown): void {
    this.#reject(err);
  }
}

/** One partition. See the module comment for what its promises mean. */
export class PartitionLog {
  readonly name: string;
  readonly dir: string;
  #fs: FileSystem;
  #clock: Clock;
  #logger: Logger;
  #config: () => PartitionConfig;
  #flushEveryRecords: number;
  #flushIntervalMs: number;
  /** What every segment of this partition is made with. */
  #segmentContext: SegmentContext;

  /**
   * Oldest first; the last is the active segment. Replaced as a whole (copy on write) when sealed
   * segments change, appended to on a roll.
   */
  #segments: Segment[] = [];
  /** Held by each group write (and its roll) and by every replacement of sealed segments. */
  #writeLock = new Mutex();
  #logStartOffset = 0;
  #lowerTier: LowerTier | null;
  /** The fsync state machine: high watermark, durable position, fencing. Made once recovered. */
  #commit!: GroupCommit;
  #closed = false;
  #cleanStop: CleanStop | null = null;
  #strays: StrayFile[] = [];
  /** The message of the last roll that failed, until a roll succeeds (logged once). */
  #rollFailure: string | null = null;

  #queue: PendingAppend[] = [];
  #drainRunning: Promise<void> | null = null;
  /** A write-loop start is scheduled with `clock.afterIo` (see {@link #scheduleDrain}). */
  #drainScheduled = false;
  #listeners = new Set<() => void>();
  #writeListeners = new Set<() => void>();
  #stats = { appends: 0, writes: 0, recordsAppended: 0 };
  /**
   * Copies of the latest group writes, oldest first, back to back up to the log end (see
   * {@link keepRecentWrites}); empty unless a leader asked for them.
   */
  #recent: RecentWrite[] = [];
  #recentBytes = 0;
  #recentBytesMax = 0;
  #diskReserve: PartitionOptions["diskReserve"] | null;
  /** Log lines of appends failing with a storage error (`write-refusals.ts`). */
  #refusals: WriteRefusals;

  private constructor(options: PartitionOptions) {
    this.name = options.name;
    this.dir = options.dir;
    this.#fs = options.fs;
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#config = options.config;
    this.#flushEveryRecords = options.flushEveryRecords ?? 1;
    this.#flushIntervalMs = options.flushIntervalMs ?? 1000;
    this.#lowerTier = options.lowerTier ?? null;
    this.#diskReserve = options.diskReserve ?? null;
    this.#refusals = new WriteRefusals(options.name, options.clock, options.logger);
    this.#segmentContext = {
      logger: this.#logger,
      partition: this.name,
      preallocateLimitBytes: () => this.#config().segmentBytes,
      syncCut: (sync) => this.#commit.syncCut(sync),
      handles: options.segmentHandles ?? null,
    };
    assert(
      Number.isInteger(this.#flushEveryRecords) && this.#flushEveryRecords >= 1,
      "flushEveryRecords is a positive integer",
    );
  }

  /**
   * Opens (creating if needed) a partition directory and recovers it (docs/storage.md "Recovery
   * after a crash"; `partition-recovery.ts`): sealed segments are checked against their index, the
   * active one is scanned in full, a torn tail is cut, a corrupt segment is reported and skipped,
   * stray files are reported and ignored, and the next offset never goes backwards
   * (docs/decisions.md §3). An interrupted segment swap is finished or undone first
   * (docs/storage.md "Replacing segments safely"). Everything recovered is durable: the high
   * watermark starts at the next offset.
   * @throws FsError if the directory cannot be read or a new segment cannot be created.
   */
  static async open(options: PartitionOptions): Promise<PartitionLog> {
    const log = new PartitionLog(options);
    const recovered = await recoverPartition(options.fs, {
      dir: options.dir,
      name: options.name,
      clock: options.clock,
      logger: options.logger,
      segmentContext: log.#segmentContext,
      logStartOffset: options.logStartOffset,
      lowerTierFirstOffset: options.lowerTier?.firstOffset ?? -1,
      lowerTierEndOffset: options.lowerTier?.endOffset ?? -1,
      cleanStop: options.cleanStop ?? null,
    });
    log.#segments = recovered.segments;
    log.#strays = recovered.strays;
    log.#logStartOffset = recovered.logStartOffset;
    log.#commit = new GroupCommit({
      name: log.name,
      clock: log.#clock,
      logger: log.#logger,
      flushEveryRecords: log.#flushEveryRecords,
      flushIntervalMs: log.#flushIntervalMs,
      active: () => log.#active,
      highWatermark: recovered.nextOffset,
      durablePosition: recovered.durablePosition,
      onFence: (err) => {
        for (const p of log.#queue.splice(0)) answerFailed(log.#logger, p.sink, err);
      },
      onChange: () => log.#notify(),
      metrics: options.metrics,
    });
    log.#atRiskStartOffset = log.#segmentActiveAtStop().baseOffset;
    return log;
  }

  get #active(): Segment {
    const active = this.#segments.at(-1);
    assert(active !== undefined, "a partition always has an active segment");
    return active;
  }

  /**
   * First offset a read may ask for: raised by retention (persisted by it in the topic's
   * `log_start_offsets.json`), never lowered. It can lie below the first local segment — the cold
   * tier holds what is between, or compaction removed the records there — and a read from there
   * continues at the next stored record.
   */
  get logStartOffset(): number {
    return this.#logStartOffset;
  }

  /**
   * Base offset of the first local segment (at or above the log start offset when only the cold
   * tier is below).
   */
  get localStartOffset(): number {
    return this.#segments[0].baseOffset;
  }

  /**
   * The active segment's size in bytes, its base offset, and when it rolls (the partition's
   * current `segment_bytes` and `segment_ms`): why retention cannot delete it
   * (docs/storage.md "Retention").
   */
  get activeSegmentInfo(): {
    baseOffset: number;
    sizeBytes: number;
    segmentBytes: number;
    segmentMs: number;
  } {
    const config = this.#config();
    const active = this.#active;
    return {
      baseOffset: active.baseOffset,
      sizeBytes: active.sizeBytes,
      segmentBytes: config.segmentBytes,
      segmentMs: config.segmentMs,
    };
  }

  /** The sealed segments (every one but the active), oldest first: a copy of the current list. */
  get sealedSegments(): Segment[] {
    return this.#segments.slice(0, -1);
  }

  /**
   * Runs `fn` holding the partition's write lock: no group write and no roll runs meanwhile, so the
   * sealed segments cannot change under it (docs/storage.md "Replacing segments safely", step 2).
   */
  withWriteLock<T>(fn: () => Promise<T>): Promise<T> {
    return this.#writeLock.run(fn);
  }

  /**
   * Opens a sealed segment of this partition's directory written by a background task (a
   * compaction output), with the partition's segment context (its files join the broker's cache
   * of open segments).
   * @throws FsError if its files cannot be opened or recovered.
   */
  openSealedSegment(baseOffset: number): Promise<Segment> {
    return Segment.open(this.#fs, {
      ...this.#segmentContext,
      dir: this.dir,
      baseOffset,
      active: false,
      nowMs: this.#clock.nowMs(),
    });
  }

  /**
   * Publishes a new segment list in which the run `replaced` (consecutive sealed segments, in
   * order) is replaced by `replacements` (sorted, empty to delete), then closes the replaced
   * segments: readers that hold one keep reading it until they release it. The replaced
   * segments' files are retained first ({@link Segment.retainFiles}): callers unlink them next,
   * and readers already using them keep reading the same bytes (compaction retains them itself,
   * before its renames). Call under {@link withWriteLock}, after the files are in place. Readers
   * already iterating keep the old list (it is replaced, not changed).
   */
  async replaceSealedSegments(
    replaced: readonly Segment[],
    replacements: readonly Segment[],
  ): Promise<void> {
    assert(this.#writeLock.held, "segments are replaced under the write lock");
    assert(replaced.length > 0, "a replacement replaces at least one segment");
    const start = this.#segments.indexOf(replaced[0]);
    assert(
      start >= 0 && start + replaced.length < this.#segments.length,
      "the replaced run is sealed and present",
    );
    for (let i = 0; i < replaced.length; i++)
      assert(this.#segments[start + i] === replaced[i], "the replaced segments are consecutive");
    const after = this.#segments[start + replaced.length];
    let previousBase = start > 0 ? this.#segments[start - 1].baseOffset : -1;
    for (const s of replacements) {
      assert(
        s.baseOffset > previousBase && s.baseOffset < after.baseOffset,
        "replacements are sorted and stay between their neighbours",
      );
      previousBase = s.baseOffset;
    }
    for (const s of replaced) {
      try {
        await s.retainFiles();
      } catch (err) {
        // The files are about to be unlinked (not replaced): a reader that needs them after this
        // gets an error, never other bytes.
        this.#logger.log("warn", "segment.retain_failed", {
          partition: this.name,
          segment: s.logPath,
          error: errorMessage(err),
        });
      }
    }
    this.#segments = [
      ...this.#segments.slice(0, start),
      ...replacements,
      ...this.#segments.slice(start + replaced.length),
    ];
    for (const s of replaced) await s.close();
  }

  /**
   * Raises the log start offset to `offset` (never lowers it, never past the high watermark).
   * Retention calls it after persisting the new value and before deleting segments.
   */
  advanceLogStartOffset(offset: number): void {
    assert(Number.isSafeInteger(offset) && offset >= 0, "a log start offset is a safe integer");
    this.#logStartOffset = Math.max(this.#logStartOffset, Math.min(offset, this.highWatermark));
  }

  /** One past the last offset an fsync covered: what consumers may read up to. */
  get highWatermark(): number {
    return this.#commit.highWatermark;
  }

  /** One past the last offset written (at or above the high watermark). */
  get logEndOffset(): number {
    return this.#active.nextOffset;
  }

  /** True once the partition refuses writes until a restart. */
  get fenced(): boolean {
    return this.#commit.fencedReason !== null;
  }

  /** Bytes of all segment logs. */
  get sizeBytes(): number {
    let total = 0;
    for (const s of this.#segments) total += s.sizeBytes;
    return total;
  }

  /** Number of segments. */
  get segmentCount(): number {
    return this.#segments.length;
  }

  /** Segments recovery found corrupt (left in place, skipped; docs/decisions.md §1). */
  get corruptSegmentCount(): number {
    let count = 0;
    for (const s of this.#segments) if (s.corruption !== null) count++;
    return count;
  }

  /**
   * The base offset of the first segment recovery found corrupt, or null if none is. A replica
   * (cluster mode) cuts its log there and fetches the rest again: the records recovery skipped are
   * missing below its log end (docs/cluster.md "Followers", field failures #27d).
   */
  get firstCorruptSegmentOffset(): number | null {
    for (const s of this.#segments) if (s.corruption !== null) return s.baseOffset;
    return null;
  }

  /** Stray files recovery found in the directory (reported, ignored; docs/decisions.md §11). */
  get strayFileCount(): number {
    return this.#strays.length;
  }

  /**
   * First offset of the records the last stop (a crash, or a shutdown) may have lost or cut
   * short, fixed when the partition opened: the base offset of the segment that was active then.
   * Every record below it was covered by an fsync before the stop (a roll fsyncs the segment it
   * seals, and compaction never touches the active segment); records from it on were recovered
   * as the scan found them. Producer recovery checks its journal against this
   * (`broker/producers/recovery.ts`).
   */
  get atRiskStartOffset(): number {
    return this.#atRiskStartOffset;
  }

  #atRiskStartOffset = 0;

  /**
   * Right after recovery: the last segment, or the corrupt one recovery sealed before rolling an
   * empty active segment after it.
   */
  #segmentActiveAtStop(): Segment {
    const segments = this.#segments;
    let i = segments.length - 1;
    if (
      i > 0 &&
      segments[i].nextOffset === segments[i].baseOffset &&
      segments[i - 1].corruption !== null
    )
      i--;
    return segments[i];
  }

  /**
   * Counters since open: fsyncs, appends (requests), writes (system calls to the log), records
   * appended.
   */
  get stats(): { fsyncs: number; appends: number; writes: number; recordsAppended: number } {
    return { fsyncs: this.#commit.fsyncs, ...this.#stats };
  }

  /**
   * Appends one request's records at consecutive offsets. See the module comment for when it
   * resolves. An empty batch resolves at once with count 0. Stored records ({@link StoredRecords},
   * a follower's copy of its leader's; docs/cluster.md "Followers") are written verbatim, as a
   * group of their own, and only at their own offsets: if the log end is elsewhere when their
   * turn comes, nothing of them is written and the append rejects with "invalid".
   * @throws StorageError "fenced", "write_failed", "unsupported" (offset above 2^53 − 1), "closed",
   *   "invalid" (stored records not at the log end); or what `options.beforeWrite` rejected with.
   */
  append(
    batch: AppendRecords,
    options: AppendOptions = {},
  ): Promise<{ baseOffset: number; count: number }> {
    return new Promise((resolve, reject) =>
      this.appendTo(batch, new PromiseSink(resolve, reject), 0, options),
    );
  }

  /**
   * {@link append} answered through `sink` instead of a promise (exactly one call, once; before
   * this returns if the partition is closed or fenced, or the batch is empty): the small-request
   * path, one object per request instead of a promise and its reactions (docs/benchmarks.md
   * "Small requests (issue #22)"). `tag` is handed back to `sink.appended` unchanged. The errors
   * `sink.failed` gets are those {@link append} rejects with.
   */
  appendTo(batch: AppendRecords, sink: AppendSink, tag: number, options: AppendOptions = {}): void {
    if (this.#closed) return answerFailed(this.#logger, sink, this.#closedError());
    if (this.fenced) return answerFailed(this.#logger, sink, this.#commit.fencedError());
    if (batch.count === 0) return answerAppended(this.#logger, sink, tag, this.logEndOffset, 0);
    this.#queue.push({
      batch,
      beforeWrite: options.beforeWrite,
      admit: options.admit,
      afterWrite: options.afterWrite,
      sink,
      tag,
    });
    this.#commit.received();
    this.#scheduleDrain();
  }

  /**
   * Starts the write loop once the I/O events already received are handled (`clock.afterIo`),
   * unless it runs or is scheduled already. Requests that arrive together (one readiness of many
   * connections) are then queued before the loop looks, and become one write to the log instead of
   * one write each (docs/storage.md "Writes and durability" — one write per batch of queued
   * requests).
   */
  #scheduleDrain(): void {
    if (this.#drainRunning !== null || this.#drainScheduled) return;
    this.#drainScheduled = true;
    this.#clock.afterIo(() => {
      this.#drainScheduled = false;
      if (this.#drainRunning === null && this.#queue.length > 0) this.#startDrain();
    });
  }

  /**
   * Runs the write loop. An append that arrives after the loop saw an empty queue but before its
   * promise settled finds `#drainRunning` still set and only queues itself, so the loop restarts
   * here if anything is left; without that the append would wait forever.
   */
  #startDrain(): void {
    this.#drainRunning = this.#drain().finally(() => {
      this.#drainRunning = null;
      if (this.#queue.length > 0) this.#startDrain();
    });
  }

  #closedError(): StorageError {
    return new StorageError("closed", `Cannot use partition "${this.name}": it is closed`);
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      if (this.fenced || this.#closed) {
        const err = this.fenced ? this.#commit.fencedError() : this.#closedError();
        for (const p of this.#queue.splice(0)) answerFailed(this.#logger, p.sink, err);
        return;
      }
      // Stored records go alone: their offsets are fixed, so nothing may shift them.
      const queue = this.#queue;
      const first = queue[0].batch;
      let entryBytes = entryBytesOf(first);
      let records = first.count;
      // The group is taken off the queue in one cut, not one `shift` per request.
      let n = 1;
      if (!isStored(first))
        while (
          n < queue.length &&
          !isStored(queue[n].batch) &&
          entryBytes + queue[n].batch.bytes.length <= groupEntryBytesMax
        ) {
          entryBytes += queue[n].batch.bytes.length;
          records += queue[n].batch.count;
          n++;
        }
      const group = n === queue.length ? queue : queue.slice(0, n);
      this.#queue = n === queue.length ? [] : queue.slice(n);
      await this.#writeLock.run(() => {
        if (!group.some((p) => p.admit !== undefined)) return this.#writeGroup(group, records);
        const admitted = admitGroup(group, this.#logger);
        if (admitted.length === 0) return Promise.resolve();
        records = 0;
        for (const p of admitted) records += p.batch.count;
        return this.#writeGroup(admitted, records);
      });
    }
  }

  /**
   * Waits until every append already admitted to the write loop is written and durable, then
   * resolves with the log end (= the high watermark). Takes the write lock, so a group that
   * passed its `admit` check (see {@link AppendOptions}) has finished writing first; appends
   * queued behind it are checked again when their turn comes. Cluster mode calls it on a role
   * change, after fencing new appends and before the follower reads its fetch position
   * (docs/cluster.md "Leader-epoch truncation").
   * @throws StorageError "fenced", "closed".
   */
  async settle(): Promise<number> {
    if (this.#closed) throw this.#closedError();
    return this.#writeLock.run(async () => {
      await this.#commit.flush();
      return this.logEndOffset;
    });
  }

  /**
   * Calls the `beforeWrite` hooks of a group (see {@link AppendOptions}) and returns the requests
   * to write: those whose hooks resolved for their final base offset, and those without a hook.
   * Requests whose hook rejected are rejected here.
   */
  async #runBeforeWrite(group: PendingAppend[], baseOffset: number): Promise<PendingAppend[]> {
    const calledWith = new Map<PendingAppend, number>();
    let kept = group;
    for (;;) {
      const calls: { p: PendingAppend; done: Promise<void> }[] = [];
      let offset = baseOffset;
      for (const p of kept) {
        if (p.beforeWrite !== undefined && calledWith.get(p) !== offset) {
          calledWith.set(p, offset);
          let done: Promise<void>;
          try {
            done = p.beforeWrite(offset);
          } catch (err) {
            // A hook that throws instead of rejecting refuses its request the same way.
            done = Promise.reject(err);
          }
          calls.push({ p, done });
        }
        offset += p.batch.count;
      }
      if (calls.length === 0) return kept;
      const settled = await Promise.allSettled(calls.map((c) => c.done));
      const failed = new Set<PendingAppend>();
      settled.forEach((s, i) => {
        if (s.status === "rejected") {
          failed.add(calls[i].p);
          answerFailed(this.#logger, calls[i].p.sink, s.reason);
        }
      });
      if (failed.size === 0) return kept;
      kept = kept.filter((p) => !failed.has(p));
    }
  }

  /**
   * Writes one group of requests (docs/storage.md "Writes and durability"). The active segment
   * rolls before each request that would take it past `segment_bytes` (and, before the first, if
   * it is older than `segment_ms`), so a group whose requests do not all fit is written as runs,
   * one write per segment: each roll first fsyncs the run before it, which answers that run's
   * requests, then the next run goes to the new segment. A request is never split, so a request
   * larger than `segment_bytes` gets a segment of its own. A run whose write fails, or a roll
   * that fails, refuses every request not yet written with that error.
   */
  async #writeGroup(group: PendingAppend[], records: number): Promise<void> {
    const rejectAll = (err: unknown) => {
      this.#noteRefused(group, err);
      for (const p of group) answerFailed(this.#logger, p.sink, err);
    };
    if (this.fenced) {
      // Fenced while this group waited for the write lock (a cleaner held it, or the lock's own
      // microtask): the unsynced bytes were cut (discardUnsynced), and nothing may be written
      // after them, or a restart would read back records that were answered with this error.
      rejectAll(this.#commit.fencedError());
      return;
    }
    // Subtract rather than add: 2^53 + 1 rounds to 2^53 in a JS number, so a sum can slip under
    // the limit.
    if (records - 1 > offsetMax - this.logEndOffset) {
      rejectAll(
        new StorageError(
          "unsupported",
          `Cannot append to partition "${this.name}": offsets would pass 2^53 - 1`,
        ),
      );
      return;
    }
    const config = this.#config();
    const now = this.#clock.nowMs();
    let active = this.#active;
    if (!active.isEmpty && now - active.createdMs >= config.segmentMs) {
      try {
        await this.#roll();
      } catch (err) {
        rejectAll(err);
        return;
      }
      active = this.#active;
    }
    // After the roll: a roll is what lets retention delete a full active segment.
    const held = this.#diskReserve?.appendRefusal(this.name) ?? null;
    if (held !== null) {
      rejectAll(held);
      return;
    }
    const first = group[0].batch;
    if (isStored(first) && first.baseOffset !== active.nextOffset) {
      rejectAll(
        new StorageError(
          "invalid",
          `Cannot append stored records to partition "${this.name}": they belong at offset ${first.baseOffset} but the log ends at ${active.nextOffset}`,
        ),
      );
      return;
    }
    if (isStored(first) && group.length === 1 && group[0].beforeWrite === undefined)
      group = splitStoredAppend(group[0], active.sizeBytes, config.segmentBytes);
    let runEnd = endOfRun(group, 0, active.sizeBytes, config.segmentBytes);
    let prepared = this.#prepareRun(active, group, 0, runEnd, now);
    // `prepared.logBytes` is a reused buffer: it is released on every path once the write has
    // returned or the append is abandoned (see Segment.prepareAppend).
    if (group.some((p) => p.beforeWrite !== undefined)) {
      // Every request of the group, those after a roll too: a roll keeps the offsets.
      const kept = await this.#runBeforeWrite(group, active.nextOffset);
      if (kept.length === 0 || this.fenced || this.#closed) prepared?.release();
      if (kept.length === 0) return;
      if (this.fenced || this.#closed) {
        for (const p of kept)
          answerFailed(
            this.#logger,
            p.sink,
            this.fenced ? this.#commit.fencedError() : this.#closedError(),
          );
        return;
      }
      if (kept.length !== group.length) {
        group = kept;
        prepared?.release();
        runEnd = endOfRun(group, 0, active.sizeBytes, config.segmentBytes);
        prepared = this.#prepareRun(active, group, 0, runEnd, now);
      }
    }
    let runStart = 0;
    for (;;) {
      if (prepared !== null) {
        const run =
          runStart === 0 && runEnd === group.length ? group : group.slice(runStart, runEnd);
        const failure = await this.#writeRun(active, run, prepared);
        if (failure !== null) {
          const rest = group.slice(runEnd);
          this.#noteRefused(rest, failure.err);
          for (const p of rest) answerFailed(this.#logger, p.sink, failure.err);
          return;
        }
      }
      if (runEnd === group.length) return;
      // The roll fsyncs the run just written (answering its requests) before the next segment.
      try {
        await this.#roll();
      } catch (err) {
        for (const p of group.slice(runEnd)) answerFailed(this.#logger, p.sink, err);
        return;
      }
      active = this.#active;
      runStart = runEnd;
      runEnd = endOfRun(group, runStart, active.sizeBytes, config.segmentBytes);
      prepared = this.#prepareRun(active, group, runStart, runEnd, now);
    }
  }

  /** Logs (rate-limited) requests refused by a storage error: a full disk, an I/O error. */
  #noteRefused(requests: readonly PendingAppend[], err: unknown): void {
    if (requests.length === 0 || !(err instanceof StorageError) || err.kind !== "write_failed")
      return;
    let records = 0;
    for (const p of requests) records += p.batch.count;
    this.#refusals.refused(requests.length, records, err);
  }

  /** `Segment.prepareAppend` of `group[start, end)`, or null for an empty run. */
  #prepareRun(
    active: Segment,
    group: readonly PendingAppend[],
    start: number,
    end: number,
    now: number,
  ): PreparedAppend | null {
    if (end === start) return null;
    const batches: AppendRecords[] = [];
    for (let i = start; i < end; i++) batches.push(group[i].batch);
    return active.prepareAppend(batches, now);
  }

  /**
   * Writes one run of a group to `active` (all of it fits there, see {@link #writeGroup}) and
   * hands its requests to the group commit. Releases `prepared`.
   * @returns null once written, or the error the run's requests were refused with (a failed
   *   write, or the partition fenced meanwhile): the requests after it must not be written.
   */
  async #writeRun(
    active: Segment,
    run: PendingAppend[],
    prepared: PreparedAppend,
  ): Promise<{ err: unknown } | null> {
    try {
      await active.append(prepared);
      // Copied before the buffer goes back to the pool: a replica fetch may still be sending it.
      if (this.#recentBytesMax > 0)
        this.#keepRecent(prepared.baseOffset, prepared.nextOffset, prepared.logBytes.slice());
    } catch (err) {
      await this.#commit.writeFailed(active, err);
      this.#noteRefused(run, err);
      for (const p of run) answerFailed(this.#logger, p.sink, err);
      return { err };
    } finally {
      prepared.release();
    }
    this.#refusals.succeeded();
    for (const p of run) p.afterWrite?.();
    const records = prepared.nextOffset - prepared.baseOffset;
    if (
      !(await this.#commit.written(active, {
        baseOffset: prepared.baseOffset,
        records,
        requests: run,
      }))
    )
      return { err: this.#commit.fencedError() };
    this.#stats.writes++;
    this.#stats.appends += run.length;
    this.#stats.recordsAppended += records;
    // After `written`, which has started the fsync: a replica fetch woken here reads while it runs.
    if (this.#writeListeners.size > 0) for (const l of [...this.#writeListeners]) l();
    return null;
  }

  /**
   * Removes every record at `offset` and after, crash-safely (leader-epoch truncation, cluster
   * mode; docs/cluster.md "Leader-epoch truncation"). Under the write lock, once everything
   * written is durable: segments that start at or after `offset` are deleted newest first (the
   * directory fsynced), then the segment holding `offset` is cut there and the cut fsynced
   * (`Segment.truncateTo`), and a new active segment starts at `offset` if the active one was
   * deleted or the cut one is sealed. A crash at any step leaves a prefix of the log, never a
   * gap. The high watermark moves back to `offset` with the log end. Offsets below the first
   * local segment are not truncated (the cold tier holds only committed records).
   * @param context fields added to the `partition.truncated` line (the caller's why, e.g. that
   *   the records cut were above the high watermark), and its level (default warn).
   * @throws StorageError "fenced" (a failed cut or fsync fences the partition), "closed",
   *   "invalid" for an offset below the first local segment's base.
   */
  async truncateTo(
    offset: number,
    context: { level?: "info" | "warn" | "error"; fields?: Record<string, unknown> } = {},
  ): Promise<void> {
    if (this.#closed) throw this.#closedError();
    await this.#writeLock.run(async () => {
      await this.#commit.flush();
      if (offset >= this.logEndOffset) return;
      this.#clearRecent();
      if (offset < this.#segments[0].baseOffset)
        throw new StorageError(
          "invalid",
          `Cannot truncate partition "${this.name}" to offset ${offset}: below its first local segment (${this.#segments[0].baseOffset})`,
        );
      try {
        const doomed = this.#segments.filter((seg) => seg.baseOffset >= offset);
        const kept = this.#segments.filter((seg) => seg.baseOffset < offset);
        for (const seg of doomed.reverse()) {
          // Readers already using it keep its bytes (docs/storage.md "Index and reads").
          await seg.retainFiles().catch(() => {});
          await seg.close();
          await this.#fs.unlink(seg.logPath);
          await this.#fs.unlink(seg.indexPath).catch(() => {});
        }
        if (doomed.length > 0) await this.#fs.syncDir(this.dir);
        const last = kept.at(-1);
        const activeKept = last !== undefined && doomed.length === 0;
        if (last !== undefined) await last.truncateTo(offset);
        if (activeKept) {
          this.#segments = kept;
          this.#commit.truncated(offset, last.sizeBytes);
        } else {
          const next = await Segment.create(this.#fs, {
            ...this.#segmentContext,
            dir: this.dir,
            baseOffset: offset,
            nowMs: this.#clock.nowMs(),
          });
          await this.#fs.syncDir(this.dir);
          this.#segments = [...kept, next];
          this.#commit.truncated(offset, 0);
        }
      } catch (err) {
        this.#commit.fence(`a failed truncation (${errorMessage(err)})`, err);
        throw this.#commit.fencedError();
      }
      this.#logger.log(context.level ?? "warn", "partition.truncated", {
        partition: this.name,
        offset,
        ...context.fields,
      });
    });
    this.#notify();
  }

  /**
   * Moves the log end up to `offset` with no record in between (cluster mode: a follower whose
   * leader has nothing there, compacted away or below its log start; docs/cluster.md
   * "Followers"): the active segment is sealed and a new one starts at `offset`, as a roll does.
   * Reads of the gap continue at the next record. Nothing happens at or below the log end.
   * @throws StorageError "fenced", "write_failed", "closed" as a roll does.
   */
  async skipTo(offset: number): Promise<void> {
    if (this.#closed) throw this.#closedError();
    await this.#writeLock.run(async () => {
      if (offset <= this.logEndOffset) return;
      if (this.fenced) throw this.#commit.fencedError();
      this.#clearRecent();
      await this.#roll(offset);
      this.#commit.skipped(offset);
    });
    this.#notify();
  }

  /** Seals the active segment and starts a new one at the next offset (or at `baseOffset`, above it). */
  async #roll(baseOffset?: number): Promise<void> {
    await this.#commit.flush();
    const old = this.#active;
    const next = await Segment.create(this.#fs, {
      ...this.#segmentContext,
      dir: this.dir,
      baseOffset: baseOffset ?? old.nextOffset,
      nowMs: this.#clock.nowMs(),
    }).catch((err: unknown) => {
      const message = `Cannot roll partition "${this.name}": creating a segment failed: ${errorMessage(err)}`;
      // Every append retries the roll: the operator hears of a failure once, not per request.
      if (this.#rollFailure !== message) {
        this.#rollFailure = message;
        this.#logger.log("error", "partition.roll_failed", {
          partition: this.name,
          error: errorMessage(err),
        });
      }
      throw new StorageError("write_failed", message, { cause: err });
    });
    this.#rollFailure = null;
    try {
      await this.#fs.syncDir(this.dir);
    } catch (err) {
      await next.close();
      this.#commit.fence(`a failed directory fsync (${errorMessage(err)})`, err);
      throw this.#commit.fencedError();
    }
    await old.seal();
    this.#segments.push(next);
    this.#commit.rolled();
    this.#logger.log("debug", "partition.rolled", {
      partition: this.name,
      base_offset: next.baseOffset,
    });
  }

  /**
   * Reads stored records with offset ≥ `offset`, below the high watermark (docs/storage.md "Index
   * and reads"). Offsets inside a gap (a corrupt range skipped at recovery, records removed by
   * compaction, [log start offset, first local segment)) continue at the next readable record;
   * offsets below the first local segment are read from the lower tier first, if there is one.
   * `endOffset` (cluster mode: the replication high watermark) lowers the bound further: no
   * record at or above it is answered, and the answer's `highWatermark` is it.
   *
   * `unsynced` (cluster mode's replica fetch only; docs/cluster.md "Replica fetch") raises the
   * bound from the high watermark to the log end: records whose write returned but whose fsync
   * may still be running. They are not durable: a failed fsync cuts them (the partition fences)
   * and a machine crash can lose them, so the caller must never treat them as committed (a
   * follower's copy is cut by leader-epoch truncation if they vanish here).
   * @throws StorageError "out_of_range" if `offset` is below the log start offset or above the
   *   high watermark (the log end with `unsynced`; `endOffset` does not narrow the range).
   */
  async read(request: {
    offset: number;
    maxRecords: number;
    maxBytes: number;
    endOffset?: number;
    unsynced?: boolean;
  }): Promise<PartitionRead> {
    if (this.#closed) throw this.#closedError();
    const unsynced = request.unsynced === true;
    const localHighWatermark = unsynced ? this.logEndOffset : this.highWatermark;
    const highWatermark =
      request.endOffset === undefined
        ? localHighWatermark
        : Math.min(localHighWatermark, request.endOffset);
    const logStartOffset = this.logStartOffset;
    let offset = request.offset;
    if (offset < logStartOffset || offset > localHighWatermark) {
      throw new StorageError(
        "out_of_range",
        `Cannot read partition "${this.name}" at offset ${offset}: outside [log start offset ${logStartOffset}, high watermark ${localHighWatermark}]`,
      );
    }
    const empty = (next: number): PartitionRead => ({
      bytes: new Uint8Array(0),
      count: 0,
      nextOffset: next,
      highWatermark,
      logStartOffset,
    });
    const segments = this.#segments;
    if (this.#lowerTier !== null && offset < segments[0].baseOffset) {
      const r = await this.#lowerTier.read({
        offset,
        endOffset: segments[0].baseOffset,
        maxRecords: request.maxRecords,
        maxBytes: request.maxBytes,
      });
      if (r.count > 0)
        return {
          bytes: r.bytes,
          count: r.count,
          nextOffset: Math.min(r.lastOffset + 1, highWatermark),
          highWatermark,
          logStartOffset,
        };
    }
    let i = findSegment(segments, offset);
    let rebuilt = false;
    while (i < segments.length && offset < highWatermark) {
      const segment = segments[i];
      const limitBytes =
        segment === this.#active && !unsynced
          ? this.#commit.durablePosition
          : segment.readableEndBytes;
      if (!segment.acquire()) {
        // Closed under us: the partition closed, or retention/compaction replaced the segment.
        // Look again from the same offset: below a raised log start offset that is out of range.
        if (this.#closed) throw this.#closedError();
        return this.read({ ...request, offset });
      }
      let r;
      try {
        // endOffset: a roll during this read seals the segment (limitBytes is then its whole
        // size), and records past the high watermark captured above must not be answered with it.
        const bounds = {
          offset,
          maxRecords: request.maxRecords,
          maxBytes: request.maxBytes,
          limitBytes,
          endOffset: highWatermark,
        };
        r = await segment.read(bounds);
        if (r.status === "bad_position" && !rebuilt) {
          rebuilt = true;
          await segment.rebuildIndex();
          r = await segment.read(bounds);
        }
      } finally {
        await segment.release();
      }
      if (r.status === "bad_position") {
        this.#logger.log("error", "read.bad_position", {
          partition: this.name,
          segment: segment.logPath,
          offset,
        });
      }
      if (r.count > 0) {
        const nextOffset = Math.min(r.lastOffset + 1, highWatermark);
        const read: PartitionRead = {
          bytes: r.bytes,
          count: r.count,
          nextOffset,
          highWatermark,
          logStartOffset,
        };
        if (r.window !== undefined) read.release = releaseOnce(r.window);
        return read;
      }
      i++;
      if (i < segments.length) offset = Math.max(offset, segments[i].baseOffset);
    }
    return empty(highWatermark);
  }

  /**
   * The first offset whose record timestamp (ms since the epoch) is at or after `timestampMs`,
   * below `endOffset` (default and at most the high watermark), or that bound when no record
   * there is: what Kafka's ListOffsets with a timestamp answers, without a time index
   * (docs/storage.md "Finding an offset by timestamp"). A sealed segment whose newest record is
   * older is skipped without reading its records (its newest timestamp is scanned once per
   * segment and remembered, as retention does); the first segment that may hold one is read
   * until a record does. Offsets below the first local segment (the cold tier) are read.
   * @returns `offset` and `timestampMs`, that record's timestamp (−1 with the bound: no record).
   * @throws StorageError if the partition is closed; FsError if a segment cannot be read.
   */
  async offsetForTimestamp(
    timestampMs: number,
    endOffset?: number,
  ): Promise<{ offset: number; timestampMs: number }> {
    if (this.#closed) throw this.#closedError();
    const end = Math.min(this.highWatermark, endOffset ?? Number.POSITIVE_INFINITY);
    const segments = this.#segments.slice();
    let offset = this.logStartOffset;
    if (this.#lowerTier === null || offset >= segments[0].baseOffset) {
      for (let i = 0; i < segments.length - 1; i++) {
        const next = segments[i + 1].baseOffset;
        if (next <= offset) continue;
        const newest = await segmentNewestTimestampMs(this.#fs, segments[i]);
        // null: closed meanwhile (retention, compaction): read from here, which is always right.
        if (newest === null || newest >= timestampMs) break;
        offset = next;
      }
    }
    const header = new RecordHeader();
    while (offset < end) {
      // Retention may raise the log start offset meanwhile: a read below it is out of range.
      offset = Math.max(offset, this.logStartOffset);
      const r = await this.read({ offset, maxRecords: 100_000, maxBytes: 1 << 20, endOffset: end });
      try {
        if (r.count === 0) break;
        const view = viewOf(r.bytes);
        for (let p = 0; p < r.bytes.length; p += header.sizeBytes) {
          header.parse(view, p);
          if (header.offset >= end) break;
          if (header.offset >= offset && header.timestampMs >= timestampMs)
            return { offset: header.offset, timestampMs: header.timestampMs };
        }
      } finally {
        r.release?.();
      }
      if (r.nextOffset <= offset) break;
      offset = r.nextOffset;
    }
    return { offset: end, timestampMs: -1 };
  }

  /**
   * Calls `listener` whenever the high watermark moves, the partition is fenced or it closes.
   * @returns a function that unsubscribes.
   */
  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #notify(): void {
    for (const l of [...this.#listeners]) l();
  }

  /**
   * Calls `listener` after every group write to the log returned (the log end moved; its fsync
   * has been started, not finished). Cluster mode's replica fetch long-poll waits on it, so a
   * follower reads records while the leader's fsync of them runs (`read` with `unsynced`).
   * @returns a function that unsubscribes.
   */
  subscribeWrites(listener: () => void): () => void {
    this.#writeListeners.add(listener);
    return () => this.#writeListeners.delete(listener);
  }

  /**
   * Keeps copies of the latest group writes in memory, up to `maxBytes` (0 stops and forgets
   * them), for {@link readRecent}. Cluster mode's leader turns it on while it leads (docs/cluster.md
   * "Replica fetch"): its followers' fetches then read the records just written without a file
   * read, a scan or a CRC pass each.
   */
  keepRecentWrites(maxBytes: number): void {
    this.#recentBytesMax = maxBytes;
    if (maxBytes === 0) this.#clearRecent();
  }

  /** Forgets the kept writes (see {@link keepRecentWrites}) that end at or below `offset`. */
  forgetRecentBelow(offset: number): void {
    let drop = 0;
    while (drop < this.#recent.length && this.#recent[drop].nextOffset <= offset) {
      this.#recentBytes -= this.#recent[drop].bytes.length;
      drop++;
    }
    if (drop > 0) this.#recent.splice(0, drop);
  }

  /**
   * The records from `offset` on out of the kept writes (see {@link keepRecentWrites}), as `read`
   * with `unsynced` would answer them (whole records, at least one, then no more than `maxBytes`
   * and `maxRecords`; durable or not: the same care applies), as chunks to send back to back
   * without joining; null when they do not hold `offset` (the caller reads the file), or the
   * partition is fenced or closed. Their CRCs are not checked again: they are copies of bytes
   * this process encoded, and the receiver checks every record's CRC.
   */
  readRecent(
    offset: number,
    maxBytes: number,
    maxRecords: number,
  ): { chunks: Uint8Array[]; bytes: number; count: number; nextOffset: number } | null {
    const recent = this.#recent;
    if (recent.length === 0 || this.fenced || this.#closed) return null;
    if (offset < recent[0].baseOffset || offset >= recent[recent.length - 1].nextOffset)
      return null;
    let i = recent.length - 1;
    while (recent[i].baseOffset > offset) i--;
    const chunks: Uint8Array[] = [];
    let bytes = 0;
    let count = 0;
    let next = offset;
    for (; i < recent.length && count < maxRecords; i++) {
      const w = recent[i];
      const view = viewOf(w.bytes);
      let pos = 0;
      // Records of this write before `next` (the first write only: the fetch starts inside it).
      for (let o = w.baseOffset; o < next; o++)
        pos += recordLengthPrefixBytes + view.getUint32(pos);
      const start = pos;
      let records = 0;
      if (w.bytes.length - start + bytes <= maxBytes && w.nextOffset - next + count <= maxRecords) {
        pos = w.bytes.length;
        records = w.nextOffset - next;
      } else {
        // The whole write does not fit: its whole records that do (the first always).
        while (pos < w.bytes.length && count + records < maxRecords) {
          const size = recordLengthPrefixBytes + view.getUint32(pos);
          if (bytes + (pos - start) + size > maxBytes && count + records > 0) break;
          pos += size;
          records++;
        }
      }
      if (records === 0) break;
      chunks.push(start === 0 && pos === w.bytes.length ? w.bytes : w.bytes.subarray(start, pos));
      bytes += pos - start;
      count += records;
      next += records;
      if (pos < w.bytes.length) break;
    }
    return { chunks, bytes, count, nextOffset: next };
  }

  #keepRecent(baseOffset: number, nextOffset: number, bytes: Uint8Array): void {
    const last = this.#recent.at(-1);
    // Only back to back up to the log end: anything else starts over.
    if (last !== undefined && last.nextOffset !== baseOffset) this.#clearRecent();
    this.#recent.push({ baseOffset, nextOffset, bytes });
    this.#recentBytes += bytes.length;
    let drop = 0;
    while (this.#recentBytes > this.#recentBytesMax && drop < this.#recent.length) {
      this.#recentBytes -= this.#recent[drop].bytes.length;
      drop++;
    }
    if (drop > 0) this.#recent.splice(0, drop);
  }

  #clearRecent(): void {
    this.#recent = [];
    this.#recentBytes = 0;
  }

  /** True after {@link close}. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Stops accepting appends, lets the write in progress finish and become durable, makes any
   * unsynced records durable, and closes the files (readers holding a segment keep it until they
   * release it). Queued appends not yet written are rejected with "closed".
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#commit.closing();
    for (const p of this.#queue.splice(0)) answerFailed(this.#logger, p.sink, this.#closedError());
    if (this.#drainRunning) await this.#drainRunning.catch(() => {});
    await this.#commit.closed(this.#closedError());
    // A clean shutdown leaves the active segment's files holding exactly its records and index.
    const active = this.#active;
    const clean =
      !this.fenced && active.nextOffset <= this.highWatermark && active.corruption === null;
    if (clean) await active.trimPreallocated();
    this.#notify();
    this.#listeners.clear();
    this.#writeListeners.clear();
    this.keepRecentWrites(0);
    for (const s of this.#segments) await s.close();
    // Every record is durable and the files are closed (docs/decisions.md §17).
    if (clean)
      this.#cleanStop = {
        logEndOffset: active.nextOffset,
        activeBaseOffset: active.baseOffset,
        activeSizeBytes: active.sizeBytes,
      };
  }

  /**
   * Where the log ended if {@link close} closed it cleanly (not fenced, every record durable, no
   * corrupt active segment), for the broker's clean-stop record (`clean-stop.ts`); null before
   * the close or after an unclean one.
   */
  get cleanStop(): CleanStop | null {
    return this.#cleanStop;
  }

  /** State for `GET /v1/admin/storage` and `es-broker check`. */
  describe(): {
    partition: string;
    state: "ok" | "fenced";
    fenced_reason: string | null;
    log_start_offset: number;
    high_watermark: number;
    log_end_offset: number;
    size_bytes: number;
    segments: SegmentDescription[];
    stray_files: StrayFile[];
  } {
    return {
      partition: this.name,
      state: this.fenced ? "fenced" : "ok",
      fenced_reason: this.#commit.fencedReason,
      log_start_offset: this.logStartOffset,
      high_watermark: this.highWatermark,
      log_end_offset: this.logEndOffset,
      size_bytes: this.sizeBytes,
      segments: this.#segments.map((s) => s.describe()),
      stray_files: [...this.#strays],
    };
  }
}

/** Index of the last segment whose base offset is ≤ `offset` (0 if none). */
function findSegment(segments: readonly Segment[], offset: number): number {
  return Math.max(
    0,
    lastAtOrBelow(segments.length, (i) => segments[i].baseOffset, offset),
  );
}

/** Entry bytes of `records` as the group limit counts them (stored records: without their framing). */
function entryBytesOf(records: AppendRecords): number {
  return isStored(records)
    ? records.bytes.length - records.count * recordOverEntryBytes
    : records.bytes.length;
}

/**
 * A follower's stored records (one request, `append`) as parts that each fit a segment
 * (docs/storage.md "Writes and durability"): the first fills what is left of the active segment
 * (holding `sizeBytes`), each next one a whole segment, a record larger than `segmentBytes` alone;
 * cut at record boundaries, so each part is one run of the write loop and the segment rolls
 * between them. Only the last part answers the request, with its whole range, once every part is
 * durable; a failure before it answers it with that error (the parts already written stay: they
 * are the leader's records at their own offsets, and the follower fetches from its log end).
 * Returns `[p]` when the records fit as they are.
 */
function splitStoredAppend(
  p: PendingAppend,
  sizeBytes: number,
  segmentBytes: number,
): PendingAppend[] {
  const records = p.batch as StoredRecords;
  if (
    records.bytes.length <= segmentBytes - sizeBytes ||
    (sizeBytes === 0 && records.bytes.length <= segmentBytes)
  )
    return [p];
  const view = viewOf(records.bytes);
  const parts: PendingAppend[] = [];
  let room = segmentBytes - sizeBytes;
  let start = 0;
  let pos = 0;
  let i = 0;
  let partBase = records.baseOffset;
  const cut = (end: number, count: number, last: boolean) => {
    parts.push({
      batch: {
        stored: true,
        bytes: records.bytes.subarray(start, end),
        count,
        baseOffset: partBase,
      },
      beforeWrite: undefined,
      admit: undefined,
      afterWrite: last ? p.afterWrite : undefined,
      sink: last ? new WholeRangeSink(p.sink, records.baseOffset, records.count) : ignoredSink,
      tag: p.tag,
    });
    partBase += count;
    start = end;
  };
  let count = 0;
  while (pos < records.bytes.length) {
    const size = recordLengthPrefixBytes + view.getUint32(pos);
    // The part so far is full: it ends here, and the next starts in an empty segment.
    if (pos + size - start > room && (count > 0 || room < segmentBytes)) {
      if (count > 0) cut(pos, count, false);
      room = segmentBytes;
      count = 0;
      continue;
    }
    pos += size;
    count++;
    i++;
  }
  cut(pos, count, true);
  assert(i === records.count, "stored records hold their count");
  return parts;
}

/** The sink of a stored part that does not answer its request: another part does. */
const ignoredSink: AppendSink = { appended: () => {}, failed: () => {} };

/** The sink of a request's last stored part: answers the request with its whole range. */
class WholeRangeSink implements AppendSink {
  constructor(
    readonly inner: AppendSink,
    readonly baseOffset: number,
    readonly count: number,
  ) {}
  appended(tag: number): void {
    this.inner.appended(tag, this.baseOffset, this.count);
  }
  failed(err: unknown): void {
    this.inner.failed(err);
  }
}

/**
 * One past the last request of the run that starts at `start` in a segment holding `sizeBytes`
 * (docs/storage.md "Writes and durability"): each request while the segment stays within
 * `segmentBytes`, and into an empty segment any request, however large. `start` itself when the
 * first does not fit: the segment must roll first.
 */
function endOfRun(
  group: readonly PendingAppend[],
  start: number,
  sizeBytes: number,
  segmentBytes: number,
): number {
  let size = sizeBytes;
  let end = start;
  while (end < group.length) {
    const bytes = logBytesOf(group[end].batch);
    if (size > 0 && size + bytes > segmentBytes) break;
    size += bytes;
    end++;
  }
  return end;
}

/**
 * The requests of a group whose `admit` check passes (those without one pass); the others are
 * rejected with what their check threw.
 */
function admitGroup(group: PendingAppend[], logger: Logger): PendingAppend[] {
  const admitted: PendingAppend[] = [];
  for (const p of group) {
    try {
      p.admit?.();
    } catch (err) {
      answerFailed(logger, p.sink, err);
      continue;
    }
    admitted.push(p);
  }
  return admitted;
}

/** A release that gives `window` back to `fetchReadWindows` the first time it is called, never again. */
function releaseOnce(window: Uint8Array): () => void {
  let given = false;
  return () => {
    if (given) return;
    given = true;
    fetchReadWindows.give(window);
  };
}
