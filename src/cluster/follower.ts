/**
 * A follower of one partition (docs/cluster.md "Followers"): fetches from the leader over the
 * replica-fetch api (api 14), checks every record end to end, appends the leader's stored records
 * at the same offsets through the partition's write loop (so they fsync through the same group
 * commit as producers' records), and reports its durable position in its next fetch.
 *
 * One loop per partition:
 * 1. Fetch at the local log end once everything written is durable (`PartitionLog.settle`: an
 *    append this replica admitted while it led has landed by then, or failed), with the epoch of
 *    the last local record (per the leader-epoch history) and the epoch the follower believes
 *    current; the leader long-polls when it has nothing new, so an idle follower does not spin.
 *    If the log end moved while the fetch was in flight (something else appended), the answer is
 *    dropped before anything of it is taken, the epoch history included, and the loop fetches
 *    again, so the leader compares the records actually there.
 * 2. If the leader says the logs diverge, truncate to where they agree (the smaller of the
 *    leader's end offset for that epoch and the local one) and forget the later epochs, then
 *    fetch again (docs/cluster.md "Leader-epoch truncation").
 * 3. Otherwise: check every record's CRC and offsets (a failure appends nothing and is logged as
 *    `replication.corrupt_records`); add the leader's epoch entries the records fall under to the
 *    local history (fsynced); journal the idempotent producers' batches the leader sent with them
 *    (field failures #28); append the stored records verbatim (checked once, never decoded and
 *    encoded again), the write loop refusing them unless they land at the leader's offsets.
 *    Where the leader's records skip offsets (compaction removed them, or retention its log start
 *    moved past this log's end), this log skips them too (`PartitionLog.skipTo`): same offsets,
 *    same records.
 * 4. Errors back off (50 ms doubling to 1 s, ±20 % jitter) and the loop tries again, until
 *    {@link Follower.stop}. An error is logged when it first appears and, while the same one
 *    persists, again every {@link fetchFailureRelogMs} with how long it has lasted: a follower
 *    the leader keeps refusing (`it does not know epoch N yet` after an etcd restore) says so
 *    for as long as it is stuck, not once.
 */
import type { LeaderEpochEntry, ReplicaFetchResult } from "../broker/types.ts";
import type { ProducerStates } from "../broker/producers/state.ts";
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { Prng } from "../lib/prng.ts";
import type { ReplicaFetchRequestFields } from "../protocol/apis/replica-fetch.ts";
import type { LeaderEpochHistory } from "../storage/leader-epochs.ts";
import type { PartitionLog } from "../storage/partition.ts";
import { checkStoredRuns, RecordFormatError, skipStored } from "../storage/record.ts";

/** A connection to a leader's TCP listener that speaks the replica-fetch api (the runtime provides it). */
export interface ReplicaFetchConnection {
  /**
   * Sends one replica fetch and resolves with the leader's answer.
   * @throws an error with a `code` (the error table's, or `connection_closed` / `timeout`) on failure.
   */
  replicaFetch(request: ReplicaFetchRequestFields): Promise<ReplicaFetchResult>;
  /** Closes the connection; a fetch in flight rejects. */
  close(): Promise<void>;
}

/** Options of {@link Follower}. */
export interface FollowerOptions {
  topic: string;
  partition: number;
  /** This broker's node id. */
  nodeId: number;
  /** This broker's incarnation (`Membership.incarnation`), named in every fetch. */
  incarnation: string;
  /** The leader's node id and epoch this follower follows. */
  leaderId: number;
  leaderEpoch: number;
  log: PartitionLog;
  history: LeaderEpochHistory;
  producers: ProducerStates;
  /** Opens a connection to the leader; throws if its address is not known yet. */
  connect: () => ReplicaFetchConnection;
  /** The broker credential, empty without one. */
  credential: Uint8Array;
  /**
   * The topic id the local copy records now (docs/cluster.md "Topic ids"), sent with every fetch
   * so that a leader holding another incarnation's copy refuses it; undefined: none sent.
   */
  topicId?: () => string | undefined;
  clock: Clock;
  prng: Prng;
  logger: Logger;
  /** Bytes of records per fetch. */
  maxBytes: number;
  /** The leader's long-poll, in ms. */
  waitMs: number;
  /** Called with the leader's high watermark after each answer. */
  onHighWatermark: (highWatermark: number) => void;
  /** See {@link fetchFailureRelogMs} (its default). */
  fetchFailureRelogMs?: number;
  /** See {@link leaderChangeQuietMs} (its default). */
  leaderChangeQuietMs?: number;
  /** The high watermark this replica knows (the last a leader told it, at most its log's); -1 if none. */
  highWatermark?: () => number;
}

const backoffMinMs = 50;
const backoffMaxMs = 1000;

/**
 * How often a fetch error that persists is logged again, in ms (5 minutes): under-replication
 * that lasts keeps showing in the log (attack15b F5, newuser15).
 */
export const fetchFailureRelogMs = 300_000;

/**
 * How long `not_leader` refusals (the leader leaving, no leader yet, a new one taking over) are
 * logged at info, in ms: a rolling restart's leader changes are expected and end within seconds
 * (newuser18 F8: 124 warn lines for one graceful roll). Past it, one warn line says the partition
 * still has no leader to fetch from.
 */
export const leaderChangeQuietMs = 15_000;

/** The fetch loop of one partition. See the module comment. */
export class Follower {
  readonly #o: FollowerOptions;
  #stopped = false;
  #connection: ReplicaFetchConnection | null = null;
  #loop: Promise<void> | null = null;
  #wake: (() => void) | null = null;
  #lastError = "";
  /** When {@link #lastError} first appeared, and when it was last logged (clock ms). */
  #errorSinceMs = 0;
  #errorLoggedMs = 0;
  /** Since when fetches are refused `not_leader` without a break (null: not now), and whether that was warned. */
  #notLeaderSinceMs: number | null = null;
  #notLeaderWarned = false;
  /** The leader answered a fetch carrying a topic id `unsupported_api` (an older es-broker). */
  #leaderWithoutTopicIds = false;

  constructor(options: FollowerOptions) {
    this.#o = options;
  }

  /** The partition as "topic/partition", for logs. */
  get #name(): string {
    return `${this.#o.topic}/${this.#o.partition}`;
  }

  /** Starts the loop (once). */
  start(): void {
    this.#loop ??= this.#run();
  }

  /** Stops the loop: closes its connection and waits for the append in progress to finish. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#wake?.();
    const c = this.#connection;
    this.#connection = null;
    await c?.close().catch(() => {});
    await this.#loop;
  }

  async #run(): Promise<void> {
    let backoff = 0;
    // A closed log: the topic was deleted, and the manager drops this replica when it hears.
    while (!this.#stopped && !this.#o.log.closed) {
      try {
        await this.#fetchOnce();
        backoff = 0;
        this.#lastError = "";
        this.#notLeaderSinceMs = null;
      } catch (err) {
        if (this.#stopped) break;
        const message = errorMessage(err);
        const code = (err as { code?: unknown })?.code;
        if (code === "unsupported_api" && !this.#leaderWithoutTopicIds) {
          // An older leader (a rolling upgrade): fetch as before, without the topic id.
          this.#leaderWithoutTopicIds = true;
          this.#o.logger.log("info", "replication.leader_without_topic_ids", {
            partition: this.#name,
            leader: this.#o.leaderId,
          });
          continue;
        }
        if (code === "connection_closed" || code === "timeout") {
          const c = this.#connection;
          this.#connection = null;
          await c?.close().catch(() => {});
        }
        const now = this.#o.clock.nowMs();
        const fresh = message !== this.#lastError;
        if (fresh) {
          this.#lastError = message;
          this.#errorSinceMs = now;
        }
        const relogMs = this.#o.fetchFailureRelogMs ?? fetchFailureRelogMs;
        // A leader change: info while it is young, one warn once it has lasted.
        let level: "info" | "warn" | "error" = err instanceof RecordFormatError ? "error" : "warn";
        let escalate = false;
        if (code === "not_leader") {
          if (this.#notLeaderSinceMs === null) {
            this.#notLeaderSinceMs = now;
            this.#notLeaderWarned = false;
          }
          if (now - this.#notLeaderSinceMs < (this.#o.leaderChangeQuietMs ?? leaderChangeQuietMs))
            level = "info";
          else escalate = !this.#notLeaderWarned;
        } else this.#notLeaderSinceMs = null;
        if (fresh || escalate || now - this.#errorLoggedMs >= relogMs) {
          this.#errorLoggedMs = now;
          if (escalate) this.#notLeaderWarned = true;
          this.#o.logger.log(
            level,
            err instanceof RecordFormatError
              ? "replication.corrupt_records"
              : "replication.fetch_failed",
            {
              partition: this.#name,
              leader: this.#o.leaderId,
              error: message,
              ...(fresh ? {} : { failing_for_ms: now - this.#errorSinceMs }),
              ...(code === "not_leader" && this.#notLeaderSinceMs !== null && level === "warn"
                ? { no_leader_for_ms: now - this.#notLeaderSinceMs }
                : {}),
            },
          );
        }
        backoff = Math.min(backoffMaxMs, Math.max(backoffMinMs, backoff * 2));
        await this.#sleep(backoff * (0.8 + 0.4 * (this.#o.prng.int(1000) / 1000)));
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = this.#o.clock.setTimer(ms, () => {
        this.#wake = null;
        resolve();
      });
      this.#wake = () => {
        timer.cancel();
        this.#wake = null;
        resolve();
      };
    });
  }

  async #fetchOnce(): Promise<void> {
    const o = this.#o;
    const log = o.log;
    // Recovery skipped the rest of a corrupt segment: the log has a hole below its end, so its end
    // is not this replica's position. Cut it there and fetch the rest again (#27d).
    const corrupt = log.firstCorruptSegmentOffset;
    if (corrupt !== null) await this.#cutCorrupt(corrupt);
    this.#connection ??= o.connect();
    const fetchOffset = await log.settle();
    const topicId = this.#leaderWithoutTopicIds ? undefined : o.topicId?.();
    const answer = await this.#connection.replicaFetch({
      topic: o.topic,
      partition: o.partition,
      replicaId: o.nodeId,
      leaderEpoch: o.leaderEpoch,
      fetchOffset,
      lastFetchedEpoch: o.history.latestEpoch,
      maxBytes: o.maxBytes,
      waitMs: o.waitMs,
      credential: o.credential,
      incarnation: o.incarnation,
      ...(topicId === undefined ? {} : { topicId }),
    });
    if (this.#stopped) return;
    if (log.logEndOffset !== fetchOffset)
      throw new Error(
        `Cannot use the leader's answer for partition "${this.#name}": the log end moved from ${fetchOffset} to ${log.logEndOffset} while the fetch was in flight (an append this follower did not make); fetching again`,
      );
    if (answer.diverging !== null) {
      await this.#truncate(answer.diverging);
      return;
    }
    if (answer.records.count === 0 && answer.logStartOffset > log.logEndOffset) {
      // The leader's log starts above this one's end (retention deleted the records between).
      await this.#assignEpochs(answer.epochs, answer.logStartOffset + 1);
      await log.skipTo(answer.logStartOffset);
    } else await this.#append(answer);
    o.onHighWatermark(answer.highWatermark);
  }

  /** Cuts the log at a corrupt segment's base offset, to fetch the records after it again (#27d). */
  async #cutCorrupt(offset: number): Promise<void> {
    const o = this.#o;
    o.logger.log("warn", "replication.truncating_corrupt", {
      partition: this.#name,
      leader: o.leaderId,
      log_end_offset: o.log.logEndOffset,
      truncate_to: offset,
    });
    await o.history.truncate(o.history.latestEpoch, offset);
    await o.log.truncateTo(offset);
    o.producers.truncated(o.topic, o.partition, offset);
  }

  /** Step 2 of the module comment. */
  async #truncate(diverging: { epoch: number; endOffset: number }): Promise<void> {
    const o = this.#o;
    const local = o.history.endOffsetFor(diverging.epoch, o.log.logEndOffset);
    const to = Math.min(diverging.endOffset, local.endOffset, o.log.logEndOffset);
    // What the cut means for acknowledged records: a leader is elected only holding every
    // committed record (docs/cluster.md "Leader-epoch truncation"), so the records above its
    // epoch's end are above the high watermark, and a produce is acknowledged only once the high
    // watermark covers it. Checked against the high watermark this replica knows: below it would
    // be a bug that loses acknowledged records, and says so at error.
    const hw = o.highWatermark?.() ?? -1;
    const aboveHw = to >= hw;
    const fields = {
      high_watermark: hw,
      acknowledged_records_cut: !aboveHw,
      note: aboveHw
        ? "the records cut are above the high watermark: never acknowledged to a producer (an idempotent producer's retry stores them once)"
        : "records below the high watermark this replica knew are cut: acknowledged records may be lost",
    };
    o.logger.log(aboveHw ? "info" : "error", "replication.truncating", {
      partition: this.#name,
      leader: o.leaderId,
      leader_epoch: o.leaderEpoch,
      epoch: diverging.epoch,
      leader_end_offset: diverging.endOffset,
      log_end_offset: o.log.logEndOffset,
      truncate_to: to,
      ...fields,
    });
    // The history first: an entry left past the log's end is dropped at the next start anyway.
    await o.history.truncate(diverging.epoch, to);
    await o.log.truncateTo(to, { level: aboveHw ? "info" : "error", fields });
    o.producers.truncated(o.topic, o.partition, to);
  }

  /** Step 3 of the module comment. */
  async #append(answer: ReplicaFetchResult): Promise<void> {
    const o = this.#o;
    const log = o.log;
    const runs = checkStoredRuns(answer.records.bytes, answer.records.count);
    if (runs.length === 0) return;
    const last = runs.at(-1)!;
    const end = last.baseOffset + last.count;
    await this.#assignEpochs(answer.epochs, end);
    const logEnd = log.logEndOffset;
    await o.producers.applyReplicated(
      o.topic,
      o.partition,
      answer.producers.filter((b) => b.baseOffset >= logEnd && b.baseOffset < end),
    );
    for (const run of runs) {
      const have = log.logEndOffset;
      if (run.baseOffset + run.count <= have) continue;
      // A gap in the leader's log (compacted away, or below its log start): none here either.
      if (run.baseOffset > have) await log.skipTo(run.baseOffset);
      const records = run.baseOffset < have ? skipStored(run, have - run.baseOffset) : run;
      // Verbatim, and only at their own offsets: the write loop refuses them anywhere else.
      await log.append(records);
    }
  }

  /** Adds the leader's epochs that start at or below `end` (the answer's end) and are newer than the local history's last. */
  async #assignEpochs(epochs: readonly LeaderEpochEntry[], end: number): Promise<void> {
    const history = this.#o.history;
    for (const e of epochs) {
      if (e.epoch > history.latestEpoch && e.startOffset < end)
        await history.assign(e.epoch, e.startOffset);
    }
  }
}
