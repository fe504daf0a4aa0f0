/**
 * Group commit of one partition (docs/storage.md "Writes and durability", docs/storage.md
 * "Failures"): the fsync state machine, the durable position, the high watermark and fencing. This
 * is the one place that decides when a write is acknowledged.
 *
 * One fsync of the active segment's log is in flight at a time; it covers everything written
 * when it started. A group written while it runs waits for the next one, which covers all of
 * them; waiters whose records an fsync covered are answered without a system call of their own.
 * The high watermark is one past the last record an fsync covered, and the durable position the
 * matching byte position in the active segment: reads stop there, so a consumer never sees a
 * record that a crash can take back.
 *
 * When the next fsync starts (docs/storage.md "Writes and durability", "When the next fsync
 * starts"): after a group's write, at once — unless the last fsync answered several requests.
 * Then the producers it answered are likely to come back (closed-loop producers, each with one
 * request in flight), and the start waits for the requests left waiting when that fsync ended
 * plus those it answered: on a timer (`clock.waitForIo`, `groupCommitGatherWaitMs`), so the
 * event loop blocks in its poll while they arrive, and the fsync starts at the write of the group
 * that brings the requests waiting to that number (or past `inlineSyncBytesMax` bytes). A wait
 * that runs out (producers that stopped, open-loop ones) makes the next fsync starts wait turn by
 * turn instead (`clock.afterIo`, while each turn brings appends, for at most
 * `groupCommitGatherTurnsMax` turns), for 1, 2, 4 … (`groupCommitWaitBackoffMax`) starts, reset
 * by a wait that is met. So a lone writer's fsync starts at once as before, and concurrent
 * producers share one fsync instead of alternating in two groups (one fsyncing while the other
 * is read). Waiting changes only when an fsync starts, never what it covers or when a request
 * is answered relative to it; a fence or close cancels the timer.
 *
 * A failed fsync is final (docs/decisions.md §7): it is never retried, and the partition is fenced:
 * every request waiting for an fsync and every later append gets "fenced", and what lies past the
 * durable position is cut off, so that a restart cannot read back bytes a failed fsync may have
 * lost. Reads of acknowledged records continue.
 *
 * What happens, row by row (`flushEveryRecords` 1 is the default):
 *
 * | event                  | state or result      | what happens                                  |
 * |------------------------|----------------------|-----------------------------------------------|
 * | a group's write        | fenced while it      | cut to the durable position again (the        |
 * | returned (`written`)   | was written          | write may have landed after the fence's       |
 * |                        |                      | cut); the group gets "fenced"                 |
 * |                        | flushEveryRecords 1  | the group waits for an fsync, which starts    |
 * |                        |                      | at once (after more requests while gathering) |
 * |                        |                      | or follows the one in flight                  |
 * |                        | flushEveryRecords    | the group is answered now; an fsync follows   |
 * |                        | N > 1                | once N records wait or flushIntervalMs passes |
 * | a group's write        | partial bytes cut,   | the group gets "write_failed"; the            |
 * | failed (`writeFailed`) | the cut fsynced      | partition goes on                             |
 * |                        | the cut or its fsync | fence; the fsync in flight settles; cut to    |
 * |                        | failed ("fenced")    | the durable position; the group gets it       |
 * | a failed write's cut   | an fsync in flight   | waits for it: never two fsyncs of the log     |
 * | is to be fsynced       | fenced               | not made: throws "fenced" (the write fences)  |
 * | (`syncCut`)            | the fsync fails      | fence                                         |
 * | an fsync ended         | failed               | fence; cut to the durable position            |
 * |                        | succeeded, but       | nothing more becomes readable: its waiters    |
 * |                        | fenced meanwhile     | were answered "fenced"                        |
 * |                        | succeeded            | durable position and high watermark move to   |
 * |                        |                      | what it covered; covered waiters answered;    |
 * |                        |                      | the next fsync asked for if records wait      |
 * | a roll's directory     |                      | fence                                         |
 * | fsync fails (`fence`)  |                      |                                               |
 */
import type { Clock, Timer } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import {
  groupCommitGatherTurnsMax,
  groupCommitGatherWaitMaxMs,
  groupCommitGatherWaitMs,
  groupCommitWaitBackoffMax,
  inlineSyncBytesMax,
} from "../lib/limits.ts";
import type { Logger } from "../lib/logger.ts";
import { type Counter, type Histogram, type Metrics, noMetrics } from "../lib/metrics.ts";
import { StorageError } from "./errors.ts";
import type { Segment } from "./segment.ts";

/**
 * Who hears how one append ended (`PartitionLog.appendTo`): exactly one of its methods is called,
 * once. It lets the small-request path answer a group commit's requests without a promise each
 * (docs/benchmarks.md "Small requests (issue #22)"). A sink must not throw; one that does is
 * logged (`storage.sink_failed`) and the other requests are still answered.
 */
export interface AppendSink {
  /**
   * The records are at `[baseOffset, baseOffset + count)` and acknowledged as docs/storage.md
   * "Writes and durability" says (with `flushEveryRecords` 1: an fsync covered them). `tag` is
   * the caller's number given with the append, handed back unchanged.
   */
  appended(tag: number, baseOffset: number, count: number): void;
  /** The append failed: a StorageError, or what the append's `beforeWrite` hook rejected with. */
  failed(err: unknown): void;
}

/** A request of a written group: its records, and whom to answer. */
export interface WrittenRequest {
  /** Its records (their offsets follow the previous request's). */
  readonly batch: { readonly count: number };
  readonly sink: AppendSink;
  readonly tag: number;
}

interface DurabilityWaiter {
  endOffset: number;
  baseOffset: number;
  count: number;
  sink: AppendSink;
  tag: number;
}

/**
 * Calls `sink.appended`; a sink that throws is a bug of its caller, logged, and does not keep
 * the requests after it from being answered.
 */
export function answerAppended(
  logger: Logger,
  sink: AppendSink,
  tag: number,
  baseOffset: number,
  count: number,
): void {
  try {
    sink.appended(tag, baseOffset, count);
  } catch (err) {
    logger.log("error", "storage.sink_failed", { error: errorMessage(err) });
  }
}

/** Calls `sink.failed` as {@link answerAppended} calls `appended`. */
export function answerFailed(logger: Logger, sink: AppendSink, err: unknown): void {
  try {
    sink.failed(err);
  } catch (thrown) {
    logger.log("error", "storage.sink_failed", { error: errorMessage(thrown) });
  }
}

/** Options of {@link GroupCommit}. */
export interface GroupCommitOptions {
  /** The partition's name, "topic/partition", in messages and logs. */
  name: string;
  clock: Clock;
  logger: Logger;
  /** Records per fsync: 1 acknowledges a write only after the fsync covering it. */
  flushEveryRecords: number;
  /** With flushEveryRecords > 1: the longest a written record waits for its fsync, in ms. */
  flushIntervalMs: number;
  /** The segment being appended to (the partition's active segment). */
  active: () => Segment;
  /** One past the last durable record at the start (what recovery found). */
  highWatermark: number;
  /** Bytes of the active segment that are durable at the start. */
  durablePosition: number;
  /** Called with the "fenced" error when the partition is fenced, to refuse the writes queued. */
  onFence: (err: StorageError) => void;
  /** Called when the high watermark moves or the partition is fenced. */
  onChange: () => void;
  /**
   * Where fsyncs are counted: their duration, the records each made durable, failures and
   * fences (`esb_storage_*`). Default {@link noMetrics}.
   */
  metrics?: Metrics;
}

/** The series one partition's group commit updates (shared by every partition: unlabelled). */
interface GroupCommitMetrics {
  metrics: Metrics;
  fsyncSeconds: Histogram;
  fsyncFailures: Counter;
  recordsPerCommit: Histogram;
  fences: Counter;
}

/** The fsync state machine of one partition. See the module comment. */
export class GroupCommit {
  #options: GroupCommitOptions;
  #highWatermark: number;
  #durablePosition: number;
  #fenced: string | null = null;
  #closing = false;
  #waiters: DurabilityWaiter[] = [];
  #syncRunning: Promise<void> | null = null;
  #syncWanted = false;
  /** An fsync start is scheduled with `clock.afterIo` (see {@link #requestSync}). */
  #syncDeferred = false;
  /** Numbers each deferred start, so that a callback of one already ended does nothing. */
  #deferral = 0;
  /** Requests the last successful fsync of the log answered. */
  #lastAnswered = 0;
  /**
   * Requests expected to wait before the next fsync starts: those left waiting when the last one
   * ended, plus those it answered (their producers are expected back).
   */
  #expected = 0;
  /** The timed gather wait of a deferred start, while it runs (see {@link #requestSync}). */
  #gatherTimer: Timer | null = null;
  /** The deferred start waited on the timer (it may have run out since). */
  #timedWait = false;
  /** Fsync starts left that gather turn by turn, without the timer, after a wait ran out. */
  #timerSkips = 0;
  /** What {@link #timerSkips} becomes after the next wait that runs out. */
  #timerBackoff = 1;
  /** How long the last successful fsync of the log took, in ms (`clock.nowMs`). */
  #lastSyncMs = 0;
  /** Appends the partition received since open ({@link received}). */
  #arrivals = 0;
  /** `#arrivals` when the deferred start last looked (see {@link #gatherMore}). */
  #arrivalsSeen = 0;
  /** Turns the deferred start has waited for requests still arriving. */
  #gatherTurns = 0;
  #unsyncedRecords = 0;
  #flushTimer: Timer | null = null;
  #fsyncs = 0;
  #metrics: GroupCommitMetrics;

  constructor(options: GroupCommitOptions) {
    this.#options = options;
    const metrics = options.metrics ?? noMetrics;
    this.#metrics = {
      metrics,
      fsyncSeconds: metrics.histogram("esb_storage_fsync_duration_seconds"),
      fsyncFailures: metrics.counter("esb_storage_fsync_failures_total"),
      recordsPerCommit: metrics.histogram("esb_storage_group_commit_records"),
      fences: metrics.counter("esb_storage_fenced_total"),
    };
    this.#highWatermark = options.highWatermark;
    this.#durablePosition = options.durablePosition;
  }

  /** One past the last offset an fsync covered: what consumers may read up to. */
  get highWatermark(): number {
    return this.#highWatermark;
  }

  /** Bytes of the active segment an fsync covered: reads of it stop there. */
  get durablePosition(): number {
    return this.#durablePosition;
  }

  /** Why the partition is fenced, or null while it is not. */
  get fencedReason(): string | null {
    return this.#fenced;
  }

  /** Successful fsyncs of the log since open. */
  get fsyncs(): number {
    return this.#fsyncs;
  }

  /** The error every write gets once the partition is fenced. */
  fencedError(): StorageError {
    return new StorageError(
      "fenced",
      `Cannot append to partition "${this.#options.name}": partition is fenced after ${this.#fenced}, restart required`,
    );
  }

  /**
   * The partition queued an append (it will be written, or refused, by its write loop): a
   * deferred fsync start waits while appends keep arriving (see the module comment).
   */
  received(): void {
    this.#arrivals++;
  }

  /**
   * After a group's write to `segment` returned (see the module's table): answers the group's
   * requests now, or makes them wait for the fsync that covers them, and asks for that fsync.
   * @param baseOffset the offset of the group's first record; `requests` follow one another.
   * @returns false if the group was refused because the partition was fenced meanwhile.
   */
  async written(
    segment: Segment,
    group: { baseOffset: number; records: number; requests: readonly WrittenRequest[] },
  ): Promise<boolean> {
    if (this.#fenced !== null) {
      // An fsync failed while this write was in flight: #fence already rejected the waiters and
      // the queue, and no fsync will run again, so these requests would otherwise wait forever.
      // Its cut to the last good fsync may have run before this write's bytes landed (a write
      // that completes after its call returns): cut again, or they stay past a hole, and a
      // restart calls the segment corrupt.
      await this.#discardUnsynced(segment);
      const err = this.fencedError();
      for (const r of group.requests) answerFailed(this.#options.logger, r.sink, err);
      return false;
    }
    let offset = group.baseOffset;
    const acked = this.#options.flushEveryRecords === 1;
    for (const r of group.requests) {
      const baseOffset = offset;
      const count = r.batch.count;
      offset += count;
      if (acked)
        this.#waiters.push({ endOffset: offset, baseOffset, count, sink: r.sink, tag: r.tag });
      else answerAppended(this.#options.logger, r.sink, r.tag, baseOffset, count);
    }
    if (acked) {
      // At once, unless requests the last fsync answered are still to come back (see
      // #gathering): this group already holds everything that arrived together (the write loop
      // started after those I/O events), and for a lone writer a turn in between only delays
      // it. Started now, an fsync that blocks the event loop lets more requests queue in the
      // kernel and become the next group.
      this.#requestSync(!this.#gathering());
    } else {
      this.#unsyncedRecords += group.records;
      if (this.#unsyncedRecords >= this.#options.flushEveryRecords) this.#requestSync();
      else this.#armFlushTimer();
    }
    return true;
  }

  /**
   * After a group's write to `segment` failed with `err` (`Segment.append`): a "fenced" error
   * (its partial bytes could not be cut off, or the cut not made durable) fences the partition
   * and cuts the segment back to the durable position once the fsync in flight has settled. Any
   * other error leaves the partition working. The caller answers the group with `err`.
   */
  async writeFailed(segment: Segment, err: unknown): Promise<void> {
    if (!(err instanceof StorageError && err.kind === "fenced")) return;
    this.fence("a failed write that could not be cut off", err);
    // As after a failed fsync: what is not durable must not be read back after a restart (the
    // failed fsync of the cut may have dropped it from the disk). An fsync still in flight
    // settles first, so the cut starts at the final durable position.
    if (this.#syncRunning !== null) await this.#syncRunning;
    await this.#discardUnsynced(segment);
  }

  /**
   * The fsync of a failed write's cut (`SegmentContext.syncCut`), as one of the partition's own:
   * one fsync of the log at a time (two in flight could each take the other's writeback error,
   * and the success of one could not be trusted). It waits for the one in flight, starts none
   * once a failed fsync fenced the partition (the failed write then fences it too: its cut
   * cannot be made durable), holds the fsync slot while it runs, and fences the partition if it
   * fails.
   * @throws StorageError "fenced" if the partition is fenced once nothing is in flight; the
   *   fsync's error if it fails.
   */
  async syncCut(sync: () => Promise<void>): Promise<void> {
    while (this.#syncRunning !== null) await this.#syncRunning;
    if (this.#fenced !== null) throw this.fencedError();
    const cut = sync();
    this.#syncRunning = cut
      .then(
        () => {},
        (err: unknown) => {
          this.#metrics.fsyncFailures.inc();
          this.fence(`a failed fsync of a failed write's cut (${errorMessage(err)})`, err);
        },
      )
      .finally(() => this.#syncEnded());
    await cut;
  }

  /** Resolves once everything written so far is durable. @throws StorageError "fenced". */
  async flush(): Promise<void> {
    const active = this.#options.active;
    while (active().nextOffset > this.#highWatermark || this.#syncRunning !== null) {
      if (this.#fenced !== null) throw this.fencedError();
      if (this.#syncRunning === null) this.#requestSync(true);
      const running = this.#syncRunning as Promise<void> | null;
      if (running === null) break;
      await running;
    }
    if (this.#fenced !== null) throw this.fencedError();
  }

  /**
   * After `PartitionLog.skipTo` rolled to a segment starting at `offset` (everything before was
   * durable): the offsets below it hold nothing more to wait for.
   */
  skipped(offset: number): void {
    this.#highWatermark = Math.max(this.#highWatermark, offset);
  }

  /**
   * After a leader-epoch truncation (cluster mode; `PartitionLog.truncateTo`), everything durable
   * before it: the log now ends at `nextOffset`, `durablePosition` bytes into the active segment.
   * The high watermark moves back to it.
   */
  truncated(nextOffset: number, durablePosition: number): void {
    this.#highWatermark = nextOffset;
    this.#durablePosition = durablePosition;
  }

  /**
   * After a roll (everything was durable before it): the new active segment has nothing durable
   * yet.
   */
  rolled(): void {
    this.#durablePosition = 0;
  }

  /**
   * Fences the partition (once; later calls keep the first reason): logs `partition.fenced`,
   * rejects every waiter and (through `onFence`) every queued write with the "fenced" error, and
   * stops the flush timer. No fsync runs after it.
   */
  fence(reason: string, err: unknown): void {
    if (this.#fenced !== null) return;
    this.#fenced = reason;
    this.#metrics.fences.inc();
    this.#options.logger.log("error", "partition.fenced", {
      partition: this.#options.name,
      reason,
      error: errorMessage(err),
      high_watermark: this.#highWatermark,
    });
    const fencedErr = this.fencedError();
    for (const w of this.#waiters.splice(0)) answerFailed(this.#options.logger, w.sink, fencedErr);
    this.#options.onFence(fencedErr);
    this.#flushTimer?.cancel();
    this.#flushTimer = null;
    this.#cancelGatherWait();
    this.#options.onChange();
  }

  /**
   * The partition is closing: no fsync is scheduled for later any more (no flush timer, no fsync
   * after the I/O events); {@link flush} still runs one. Call {@link closed} once the write loop
   * has stopped.
   */
  closing(): void {
    this.#closing = true;
    this.#cancelGatherWait();
  }

  /**
   * After the write loop stopped at close: makes what was written durable (unless fenced; a fence
   * meanwhile is not an error here), then answers the waiters still left with `closedError`.
   */
  async closed(closedError: StorageError): Promise<void> {
    try {
      if (this.#fenced === null) await this.flush();
    } catch (err) {
      if (!(err instanceof StorageError)) throw err;
    }
    this.#flushTimer?.cancel();
    this.#flushTimer = null;
    for (const w of this.#waiters.splice(0))
      answerFailed(this.#options.logger, w.sink, closedError);
  }

  /** Cuts `segment` back to the durable position, if it is still the active one or was. */
  #discardUnsynced(segment: Segment): Promise<void> {
    return segment.discardUnsynced({
      position: this.#durablePosition,
      nextOffset: this.#highWatermark,
    });
  }

  /** With flushEveryRecords > 1: makes sure an fsync happens within flushIntervalMs. */
  #armFlushTimer(): void {
    if (this.#flushTimer !== null || this.#fenced !== null || this.#closing) return;
    this.#flushTimer = this.#options.clock.setTimer(this.#options.flushIntervalMs, () => {
      this.#flushTimer = null;
      this.#requestSync();
    });
  }

  /**
   * Whether the last fsync answered several requests, fewer are waiting now than were left
   * waiting when it ended plus those it answered (`#expected`), and the bytes waiting are few
   * (under `inlineSyncBytesMax`: past that an fsync's fixed cost is small beside its data, and
   * waiting would only leave the disk idle): then the next fsync's start waits for more (see the
   * module comment). With `flushEveryRecords` > 1
   * nothing waits for an fsync, and this is false.
   */
  #gathering(): boolean {
    return (
      this.#lastAnswered >= 2 &&
      this.#waiters.length < this.#expected &&
      this.#options.active().sizeBytes - this.#durablePosition < inlineSyncBytesMax
    );
  }

  /**
   * At a deferred start: whether to wait one more turn of the event loop — while gathering, if
   * appends arrived since the last look and fewer than `groupCommitGatherTurnsMax` turns passed.
   */
  #gatherMore(): boolean {
    if (!this.#gathering() || this.#arrivals === this.#arrivalsSeen) return false;
    if (this.#gatherTurns >= groupCommitGatherTurnsMax) return false;
    this.#arrivalsSeen = this.#arrivals;
    this.#gatherTurns++;
    return true;
  }

  /**
   * Asks for an fsync: if one is running, another follows when it ends; otherwise, with `now`, one
   * starts at once (after an acknowledged group is written, a flush before a roll or close, the
   * write that ends a gathering), and without it once the I/O events already received are handled
   * (`clock.afterIo`: the follow-up fsync, the `flushEveryRecords` > 1 paths, and a group written
   * while gathering), so that writes those events bring share it; while gathering, on the timer
   * (`clock.waitForIo`) until the requests expected are written, or after a wait ran out turn
   * after turn as long as each brings appends.
   */
  #requestSync(now = false): void {
    if (this.#fenced !== null) return;
    if (this.#syncRunning !== null) {
      this.#syncWanted = true;
      return;
    }
    if (now) {
      if (this.#timedWait) {
        // The requests expected came back while waiting: waiting pays while it ends so.
        this.#cancelGatherWait();
        this.#timerBackoff = 1;
      }
      this.#syncDeferred = false;
      this.#startSync();
      return;
    }
    if (this.#syncDeferred) return;
    this.#syncDeferred = true;
    const deferral = ++this.#deferral;
    this.#gatherTurns = 0;
    this.#arrivalsSeen = this.#arrivals;
    let timed = this.#timerSkips === 0;
    if (!timed) this.#timerSkips--;
    const deferredStart = (): void => {
      if (!this.#syncDeferred || deferral !== this.#deferral) return;
      const live = !this.#closing && this.#fenced === null;
      if (timed && live && this.#gathering()) {
        timed = false;
        this.#timedWait = true;
        // Half the last fsync at most: merging two cohorts pays while the wait is shorter than
        // the fsync it saves.
        const waitMs = Math.min(
          groupCommitGatherWaitMaxMs,
          Math.max(groupCommitGatherWaitMs, Math.round(this.#lastSyncMs / 2)),
        );
        this.#gatherTimer = this.#options.clock.waitForIo(waitMs, () => {
          if (this.#gatherTimer === null || deferral !== this.#deferral) return;
          this.#gatherTimer = null;
          // Run out: turn by turn while requests still arrive, as without the timer.
          deferredStart();
        });
        return;
      }
      if (live && this.#gatherMore()) {
        this.#options.clock.afterIo(deferredStart);
        return;
      }
      if (this.#timedWait && this.#gathering()) {
        // The producers did not all come back in time: the next fsyncs start without the timer.
        this.#timerSkips = this.#timerBackoff;
        this.#timerBackoff = Math.min(this.#timerBackoff * 2, groupCommitWaitBackoffMax);
      }
      this.#timedWait = false;
      this.#syncDeferred = false;
      if (!this.#closing) this.#requestSync(true);
    };
    this.#options.clock.afterIo(deferredStart);
  }

  /** Cancels the timed gather wait, if one runs; the start it deferred is then made by the caller. */
  #cancelGatherWait(): void {
    this.#gatherTimer?.cancel();
    this.#gatherTimer = null;
    this.#timedWait = false;
  }

  /** Starts an fsync of everything written so far (see {@link #requestSync}). */
  #startSync(): void {
    const segment = this.#options.active();
    const targetOffset = segment.nextOffset;
    const targetPosition = segment.sizeBytes;
    if (targetOffset <= this.#highWatermark && targetPosition <= this.#durablePosition) {
      // An fsync that started after these bytes were written, but before their requests were
      // queued as waiters (the write loop resumes a few microtasks after the write), covered them.
      this.#resolveCovered();
      return;
    }
    this.#flushTimer?.cancel();
    this.#flushTimer = null;
    const recordsCovered = this.#unsyncedRecords;
    const m = this.#metrics;
    this.#syncRunning = (async () => {
      const startedSeconds = m.metrics.seconds();
      const startedMs = this.#options.clock.nowMs();
      try {
        await segment.syncLog();
      } catch (err) {
        m.fsyncFailures.inc();
        this.fence(`a failed fsync (${errorMessage(err)})`, err);
        // Nothing past the last good fsync can be trusted: cut it so a restart cannot read it back.
        if (segment === this.#options.active()) await this.#discardUnsynced(segment);
        return;
      }
      this.#fsyncs++;
      this.#lastSyncMs = this.#options.clock.nowMs() - startedMs;
      m.fsyncSeconds.observe(m.metrics.seconds() - startedSeconds);
      // Fenced while this fsync ran (a later group's write failed and its partial bytes could
      // not be truncated): every waiter, this fsync's included, was answered with the fenced
      // error, so nothing it covered may become readable; the fence's cut to the last good fsync
      // removes it (test/sim/fsync-in-flight-fence.test.ts).
      if (this.#fenced !== null) return;
      this.#unsyncedRecords = Math.max(0, this.#unsyncedRecords - recordsCovered);
      if (segment === this.#options.active()) this.#durablePosition = targetPosition;
      if (targetOffset > this.#highWatermark)
        m.recordsPerCommit.observe(targetOffset - this.#highWatermark);
      this.#highWatermark = Math.max(this.#highWatermark, targetOffset);
      this.#lastAnswered = this.#resolveCovered();
      this.#expected = this.#waiters.length + this.#lastAnswered;
      this.#options.onChange();
    })().finally(() => this.#syncEnded());
  }

  /**
   * After an fsync (the partition's, or a cut's): asks for the next one if anything waits for it.
   */
  #syncEnded(): void {
    this.#syncRunning = null;
    if (this.#fenced !== null) return;
    const behind = this.#options.active().nextOffset > this.#highWatermark;
    if (this.#syncWanted || (behind && this.#options.flushEveryRecords === 1)) {
      this.#syncWanted = false;
      this.#requestSync();
    } else if (behind) {
      this.#armFlushTimer();
    }
  }

  /** Acknowledges every waiter whose records the high watermark covers. @returns how many. */
  #resolveCovered(): number {
    const waiters = this.#waiters;
    const highWatermark = this.#highWatermark;
    let n = 0;
    while (n < waiters.length && waiters[n].endOffset <= highWatermark) n++;
    if (n === 0) return 0;
    // Taken off in one cut before any is answered (not one `shift` each): the covered are
    // answered once, whatever a sink does meanwhile.
    const covered = n === waiters.length ? waiters : waiters.slice(0, n);
    this.#waiters = n === waiters.length ? [] : waiters.slice(n);
    const logger = this.#options.logger;
    for (const w of covered) answerAppended(logger, w.sink, w.tag, w.baseOffset, w.count);
    return n;
  }
}
