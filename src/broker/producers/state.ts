/**
 * The idempotent producer state of one data directory ({@link ProducerStates}): the producers,
 * their epochs and per-partition sequences (`sequence.ts` has the shape and the decision table),
 * kept durable by a journal and a snapshot (`snapshot.ts`) and rebuilt at start
 * (`recovery.ts`).
 *
 * ## Durability: journal first
 *
 * Requests of one (producer, partition) are decided and written one at a time, in arrival order.
 * An accepted batch is appended through
 * the partition's write loop with a `beforeWrite` hook: once its offsets are assigned, and before
 * any byte of it is written, an entry (producer, epoch, partition, base sequence, count, base
 * offset, fingerprint of the first record) is appended to `producers.journal` and fsynced
 * (`storage/producer-journal.ts`). So an entry is durable no later than the log write it
 * describes, and a record that reached the log always has its entry. The in-memory state takes
 * the batch once the log write has returned, and the next request of that producer and partition
 * is decided then, while this one waits for the log's fsync: a client with several batches in
 * flight gets its writes overlapped with the fsyncs, and one fsync may cover several of its
 * batches. Every answer still waits for its fsync (with `--flush-every-records 1`), a duplicate
 * of a batch not yet covered too. A failed fsync fences the partition, so a batch the state took
 * that never became durable is never answered; the next start reconciles the state with the log.
 * Requests without a producer never touch the journal.
 *
 * ## Epochs the broker hands out (docs/decisions.md §20)
 *
 * {@link ProducerStates.allocateEpoch} answers `max(stored epoch + 1, at_least)` for an id it
 * holds state for, `max(min(Unix second, 2^31 − 1 − 2^24), at_least)` for one it has none for,
 * and refuses `producer_epoch_exhausted` past 2^31 − 1. The new epoch is set in memory at once
 * (it fences the previous incarnation: row 3 of `sequence.ts`, and a batch of the old epoch
 * waiting for its journal entry is refused by {@link ProducerStates} before its write), then made
 * durable by a journal rotation: a snapshot holding the producer at the new epoch, written and
 * fsynced (`writeJsonAtomic`), before the epoch is answered. Allocations that arrive while a
 * rotation waits to start share it (one snapshot, one fsync); each still gets its own epoch, so
 * two incarnations starting at once never share one. A failed snapshot write makes idempotent
 * produce unavailable until restart: a failed fsync is final, never retried.
 *
 * ## Bounded state
 *
 * Producer ids are chosen by clients (Durable Streams `Producer-Id`, `--producer-id`) or handed out
 * per Kafka producer session, so their number is bounded twice: a producer idle past
 * `expiryMs` is forgotten, and past `idsMax` producers the least recently active one that has no
 * request in progress is forgotten the same way (`producers.evicted`, rate-limited;
 * `esb_producer_ids_evicted_total`). A snapshot never exceeds `producerSnapshotBytesMax`, the
 * limit its read at start uses: one that would is built again without its least recently active
 * idle producers. A forgotten producer is answered as an expired one (`sequence.ts`).
 *
 * ## Start
 *
 * {@link ProducerStates.open} reads the snapshot, replays the journal that continues it, forgets
 * expired producers, reconciles with the recovered logs (`recovery.ts`), and writes a new
 * snapshot. A bad snapshot, a journal that does not continue it, or a corrupt journal (a bad entry
 * with valid ones after it: never cut as a torn tail) makes idempotent produce unavailable
 * (`snapshot.ts`, docs/decisions.md §1); other produces are unaffected.
 */
import { assert } from "../../lib/assert.ts";
import type { Clock } from "../../lib/clock.ts";
import { errorMessage } from "../../lib/errors.ts";
import type { Logger } from "../../lib/logger.ts";
import {
  duplicateSequenceLoggedMax,
  producerEpochHeadroom,
  producerEpochMax,
  producerIdsMaxDefault,
  producerJournalEntriesRotate,
  producerSnapshotBytesMax,
  refusalLogIntervalMs,
} from "../../lib/limits.ts";
import { Mutex } from "../../lib/mutex.ts";
import { quote } from "../../lib/quote.ts";
import { partitionName, topicPartitionKey } from "../../lib/topic-partition.ts";
import { joinPath, type FileSystem } from "../../fs/types.ts";
import { readJsonFile, writeFileAtomic } from "../../storage/metadata.ts";
import { utf8 } from "../../lib/bytes.ts";
import {
  ProducerJournal,
  SnapshotOutcomeUnknown,
  type ProducerJournalEntry,
} from "../../storage/producer-journal.ts";
import { StorageError } from "../../storage/errors.ts";
import type { PartitionLog } from "../../storage/partition.ts";
import { EntryCursor, type EntryBatch } from "../../storage/record.ts";
import { BrokerError, Errors } from "../errors.ts";
import { storageFailureKind } from "../storage-failure.ts";
import type { ProduceResult, ProducerIdentity, ReplicatedProducerBatch } from "../types.ts";
import { reconcile, replayEntry, type ProducerPartitions } from "./recovery.ts";
import {
  batchFrom,
  chainNext,
  decideSequence,
  entryFingerprint,
  rangesToSpans,
  refusalError,
  rememberBatch,
  sumRanges,
  validateProducerId,
  validateProducerIdentity,
  type BatchRange,
  type ProducerState,
  type RememberedBatch,
  type SequenceDecision,
} from "./sequence.ts";
import { buildSnapshot, parseSnapshot } from "./snapshot.ts";

export type { ProducerPartitions } from "./recovery.ts";

/** File name of the producer snapshot inside the data directory. */
export const producerSnapshotFileName = "producers.json";
/** File name of the producer journal inside the data directory. */
export const producerJournalFileName = "producers.journal";

/** Options of {@link ProducerStates.open}. */
export interface ProducerStatesOptions {
  fs: FileSystem;
  /** The broker's data directory: `producers.json` and `producers.journal` live there. */
  dataDir: string;
  clock: Clock;
  logger: Logger;
  /** Idle time after which a producer's state is forgotten, in ms. */
  expiryMs: number;
  /** Partitions as they are after their recovery (the producer state opens after the topics). */
  partitions: ProducerPartitions;
  /**
   * Most producer ids kept (`--producer-ids-max`, default `producerIdsMaxDefault`): past it the
   * least recently active idle one is forgotten (the module comment, Bounded state).
   */
  idsMax?: number;
  /** Largest snapshot written and read, in bytes (default `producerSnapshotBytesMax`; tests lower it). */
  snapshotBytesMax?: number;
}

/** Arguments of {@link ProducerStates.produce}. */
export interface IdempotentAppend {
  producer: ProducerIdentity;
  topic: string;
  partition: number;
  log: PartitionLog;
  batch: EntryBatch;
  /** Cluster mode's leadership fence, run in the write loop (`AppendOptions.admit`). */
  admit?: () => void;
}

interface PendingEntry {
  entry: ProducerJournalEntry | null;
}

/**
 * The epoch an allocation hands out (docs/decisions.md §20): `max(stored + 1, atLeast)` for an id
 * with state, `max(min(Unix second, 2^31 − 1 − 2^24), atLeast)` for one without; null when that
 * would pass 2^31 − 1 (the id's epochs are exhausted). Pure.
 * @param stored the stored epoch, or undefined when the broker holds no state for the id.
 * @param at `atLeast` 0 … 2^31 − 1; `nowMs` the broker clock, ms since the Unix epoch.
 */
export function nextProducerEpoch(
  stored: number | undefined,
  at: { atLeast: number; nowMs: number },
): number | null {
  const start =
    stored === undefined
      ? Math.min(Math.floor(at.nowMs / 1000), producerEpochMax - producerEpochHeadroom)
      : stored + 1;
  const epoch = Math.max(start, at.atLeast);
  return epoch > producerEpochMax ? null : epoch;
}

/** Maps a journal failure to the error table. */
function journalError(err: unknown): unknown {
  if (!(err instanceof StorageError)) return err;
  if (err.kind === "write_failed")
    return new BrokerError(storageFailureKind(err), `Cannot produce idempotently: ${err.message}`);
  return new BrokerError(Errors.unavailable, `Cannot produce idempotently: ${err.message}`);
}

/** The producer state of one data directory. See the module comment. */
export class ProducerStates {
  #fs: FileSystem;
  #snapshotPath: string;
  #journalPath: string;
  #clock: Clock;
  #logger: Logger;
  #expiryMs: number;
  #idsMax: number;
  #snapshotBytesMax: number;
  /** Producers forgotten by the cap (`idsMax` or the snapshot size) since the start. */
  #evicted = 0;
  /** Evictions not yet logged, and when the last `producers.evicted` line was written. */
  #evictedUnlogged = 0;
  #evictedLoggedAtMs = Number.NEGATIVE_INFINITY;
  /** Ids whose allocated epoch waits for its snapshot: never evicted meanwhile. */
  #allocating = new Map<string, number>();
  #partitions: ProducerPartitions;
  #producers = new Map<string, ProducerState>();
  #journal: ProducerJournal | null = null;
  /** Why idempotent produce is refused, or null. */
  #unavailable: string | null = null;
  /** Journal entries whose log write has not finished (a snapshot must keep them). */
  #pending = new Set<PendingEntry>();
  #locks = new Map<string, { mutex: Mutex; users: number }>();
  /** Remembered batches written but not yet covered by an fsync: their duplicates wait on it. */
  #unsynced = new WeakMap<RememberedBatch, Promise<void>>();
  #rotation: Promise<void> | null = null;
  /**
   * `producer id, epoch, partition` of the duplicate-sequence refusals already logged: one line
   * per wedged producer and partition, not one per retry (at most
   * {@link duplicateSequenceLoggedMax}; forgotten all at once past it).
   */
  #duplicateSequenceLogged = new Set<string>();
  /** The rotation epoch allocations wait for; `started` once its snapshot is being built. */
  #allocationRotation: { started: boolean; promise: Promise<void> } | null = null;
  #closed = false;

  private constructor(options: ProducerStatesOptions) {
    this.#fs = options.fs;
    this.#snapshotPath = joinPath(options.dataDir, producerSnapshotFileName);
    this.#journalPath = joinPath(options.dataDir, producerJournalFileName);
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#expiryMs = options.expiryMs;
    this.#idsMax = options.idsMax ?? producerIdsMaxDefault;
    this.#snapshotBytesMax = options.snapshotBytesMax ?? producerSnapshotBytesMax;
    this.#partitions = options.partitions;
  }

  /**
   * Loads and reconciles the producer state (the module comment, Start; `recovery.ts`). Never
   * throws for a bad file: it makes idempotent produce unavailable and reports why
   * (`producers.unavailable`).
   */
  static async open(options: ProducerStatesOptions): Promise<ProducerStates> {
    assert(
      Number.isSafeInteger(options.expiryMs) && options.expiryMs > 0,
      "producer expiry is a positive integer of ms",
    );
    assert(
      options.idsMax === undefined || (Number.isSafeInteger(options.idsMax) && options.idsMax > 0),
      "the producer id cap is a positive integer",
    );
    const states = new ProducerStates(options);
    await states.#load();
    return states;
  }

  /** Why idempotent produce is unavailable, or null. */
  get unavailableReason(): string | null {
    return this.#unavailable;
  }

  /** Producers with state. */
  get producerCount(): number {
    return this.#producers.size;
  }

  /** Producers forgotten by the cap (`idsMax`, or to keep a snapshot within its size) since start. */
  get evictedCount(): number {
    return this.#evicted;
  }

  /**
   * Forgets the least recently active producer with no request in progress (no lock, no epoch
   * allocation waiting), counting and logging it (rate-limited). False if every one is busy.
   */
  #evictOldest(reason: "producer_ids_max" | "snapshot_bytes_max"): boolean {
    let oldest: ProducerState | undefined;
    for (const p of this.#producers.values()) {
      if (oldest !== undefined && p.lastActiveMs >= oldest.lastActiveMs) continue;
      if (this.#allocating.has(p.id) || this.#hasLock(p.id)) continue;
      oldest = p;
    }
    if (oldest === undefined) return false;
    this.#producers.delete(oldest.id);
    this.#evicted++;
    this.#evictedUnlogged++;
    const now = this.#clock.nowMs();
    if (now - this.#evictedLoggedAtMs >= refusalLogIntervalMs) {
      this.#logger.log("warn", "producers.evicted", {
        reason,
        evicted: this.#evictedUnlogged,
        last_producer_id: oldest.id,
        last_idle_ms: now - oldest.lastActiveMs,
        producers: this.#producers.size,
        producer_ids_max: this.#idsMax,
        action:
          "the least recently active idle producers were forgotten, as if expired: a retry of their last batch may be stored again. Raise --producer-ids-max if this many producers are expected",
      });
      this.#evictedUnlogged = 0;
      this.#evictedLoggedAtMs = now;
    }
    return true;
  }

  /** Forgets least recently active idle producers while more than `idsMax` have state. */
  #enforceIdsMax(): void {
    while (this.#producers.size > this.#idsMax && this.#evictOldest("producer_ids_max")) {}
  }

  /** A copy of one producer's state, for tests and reports. */
  inspect(id: string): ProducerState | undefined {
    const p = this.#producers.get(id);
    return p === undefined ? undefined : structuredClone(p);
  }

  /**
   * A producer's current epoch and the next sequence it is expected to send to one partition
   * (`nextSequence` 0 when it has sent none there in this epoch); undefined when the broker holds
   * no state for it (never seen, or expired). A snapshot without the producer's lock: the decision
   * table of `sequence.ts` stays the authority when the request is produced.
   */
  peek(
    id: string,
    where: { topic: string; partition: number },
  ): { epoch: number; nextSequence: number } | undefined {
    const p = this.#producers.get(id);
    if (p === undefined || this.#clock.nowMs() - p.lastActiveMs > this.#expiryMs) return undefined;
    const s = p.partitions.get(topicPartitionKey(where.topic, where.partition));
    return { epoch: p.epoch, nextSequence: s?.nextSequence ?? 0 };
  }

  #setUnavailable(reason: string): void {
    this.#unavailable = reason;
    this.#logger.log("error", "producers.unavailable", { reason });
  }

  async #load(): Promise<void> {
    const started = this.#clock.nowMs();
    const read = await readJsonFile(this.#fs, this.#snapshotPath, this.#snapshotBytesMax);
    let generation = 0;
    let pendingFromSnapshot: ProducerJournalEntry[] = [];
    if ("error" in read) return this.#setUnavailable(`${this.#snapshotPath}: ${read.error}`);
    if ("value" in read) {
      try {
        const parsed = parseSnapshot(read.value);
        generation = parsed.generation;
        pendingFromSnapshot = parsed.pending;
        for (const p of parsed.producers) this.#producers.set(p.id, p);
      } catch (err) {
        return this.#setUnavailable(`${this.#snapshotPath}: ${errorMessage(err)}`);
      }
    }
    let opened;
    try {
      opened = await ProducerJournal.open(this.#fs, {
        path: this.#journalPath,
        logger: this.#logger,
        generationIfNew: generation,
      });
    } catch (err) {
      return this.#setUnavailable(`cannot open producers.journal: ${errorMessage(err)}`);
    }
    if (opened.journal === null) {
      // Some entry is lost, and which producer it belonged to is not known: any answer from the
      // rest (`unknown_producer`, or a batch taken as new) could store a retry twice.
      const c = opened.corruption;
      return this.#setUnavailable(
        `producers.journal is corrupt${c === null ? "" : `: ${c.reason}`}; it is left as it is (docs/decisions.md §1)`,
      );
    }
    this.#journal = opened.journal;
    let replay = opened.entries;
    if (opened.generation < generation) {
      this.#logger.log("info", "producers.journal_stale", {
        journal_generation: opened.generation,
        snapshot_generation: generation,
        entries_ignored: replay.length,
      });
      replay = [];
    } else if (opened.generation > generation) {
      return this.#setUnavailable(
        `producers.journal is generation ${opened.generation} but producers.json ${"value" in read ? `is generation ${generation}` : "is missing"}: the snapshot it continues is lost, so retries could be stored twice`,
      );
    }
    let ignored = 0;
    for (const e of [...pendingFromSnapshot, ...replay])
      if (!replayEntry(this.#producers, e)) ignored++;
    const now = this.#clock.nowMs();
    let expired = 0;
    for (const [id, p] of this.#producers) {
      if (now - p.lastActiveMs > this.#expiryMs) {
        this.#producers.delete(id);
        expired++;
      }
    }
    const evictedBefore = this.#evicted;
    this.#enforceIdsMax();
    const outcome = await reconcile(this.#producers, {
      partitions: this.#partitions,
      logger: this.#logger,
    });
    this.#logger.log("info", "recovery.producers", {
      producers: this.#producers.size,
      journal_entries: replay.length,
      snapshot_pending_entries: pendingFromSnapshot.length,
      entries_ignored: ignored,
      journal_cut_bytes: opened.cutBytes,
      expired,
      evicted: this.#evicted - evictedBefore,
      ...outcome,
      duration_ms: this.#clock.nowMs() - started,
    });
    try {
      await this.#rotateNow();
    } catch (err) {
      // The files on disk still describe this state (the journal keeps growing from where it
      // was); the next start reconciles again.
      this.#logger.log("error", "producers.snapshot_failed", { error: errorMessage(err) });
    }
  }

  #checkAvailable(): ProducerJournal {
    if (this.#closed)
      throw new BrokerError(
        Errors.unavailable,
        "Cannot produce idempotently: the broker is shutting down",
      );
    if (this.#unavailable !== null || this.#journal === null) {
      throw new BrokerError(
        Errors.unavailable,
        `Cannot produce idempotently: the producer state is unavailable: ${this.#unavailable ?? "not loaded"}`,
      );
    }
    return this.#journal;
  }

  async #withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    let lock = this.#locks.get(key);
    if (lock === undefined) {
      lock = { mutex: new Mutex(), users: 0 };
      this.#locks.set(key, lock);
    }
    lock.users++;
    try {
      return await lock.mutex.run(fn);
    } finally {
      lock.users--;
      if (lock.users === 0) this.#locks.delete(key);
    }
  }

  /**
   * Logs (warn) the first duplicate-sequence refusal of a producer epoch on a partition
   * (docs/kafka.md "Supported apis": a client that lost track of a stored batch, e.g. kafkajs
   * 2.2.4 after a leader change, is refused every later batch until it starts a new epoch, and
   * the client's side may say nothing).
   */
  #logDuplicateSequence(
    producer: ProducerIdentity,
    topic: string,
    partition: number,
    decision: Extract<SequenceDecision, { outcome: "refuse" }>,
  ): void {
    const key = `${producer.id}\u0000${producer.epoch}\u0000${topic}\u0000${partition}`;
    if (this.#duplicateSequenceLogged.has(key)) return;
    if (this.#duplicateSequenceLogged.size >= duplicateSequenceLoggedMax)
      this.#duplicateSequenceLogged.clear();
    this.#duplicateSequenceLogged.add(key);
    this.#logger.log("warn", "producer.duplicate_sequence", {
      producer_id: producer.id,
      epoch: producer.epoch,
      topic,
      partition,
      sequence: producer.sequence,
      expected_sequence: decision.expected.sequence ?? null,
      action:
        "the producer sent new records under a sequence number this partition already holds (it lost track of a stored batch); every later batch of this epoch is refused the same way until the producer starts again (a new producer id or epoch). Logged once per producer epoch and partition",
    });
  }

  /**
   * An idempotent append (the decision table of `sequence.ts`, then the module comment's journal
   * first). The broker has routed every record to `partition`.
   * @throws BrokerError from the decision table (details: `expected_sequence` / `expected_epoch`),
   *   unavailable, storage_error; StorageError from the partition (the broker maps it).
   */
  async produce(request: IdempotentAppend): Promise<ProduceResult> {
    this.#checkAvailable();
    const { producer, topic, partition, batch } = request;
    validateProducerIdentity(producer, batch.count);
    assert(batch.count > 0, "an idempotent batch has records");
    const first = new EntryCursor(batch);
    first.next();
    const fingerprint = entryFingerprint(batch, first);
    const key = topicPartitionKey(topic, partition);
    // The lock covers the decision and the write; the wait for the fsync comes after it, so the
    // next batch of the same producer and partition (pipelined on its connection) is decided and
    // written while this one's fsync runs, and one fsync can cover both.
    const answer = await this.#withLock(
      `${producer.id}\u0000${key}`,
      async (): Promise<{ durable: Promise<ProduceResult> }> => {
        const journal = this.#checkAvailable();
        const now = this.#clock.nowMs();
        let state = this.#producers.get(producer.id);
        if (state !== undefined && now - state.lastActiveMs > this.#expiryMs) {
          this.#producers.delete(producer.id);
          this.#logger.log("info", "producers.expired", {
            producer_id: producer.id,
            idle_ms: now - state.lastActiveMs,
          });
          state = undefined;
        }
        const decision = decideSequence(state, {
          epoch: producer.epoch,
          partitionKey: key,
          sequence: producer.sequence,
          count: batch.count,
          fingerprint,
        });
        if (decision.outcome === "refuse") {
          if (decision.kind === Errors.duplicateSequence)
            this.#logDuplicateSequence(producer, topic, partition, decision);
          throw refusalError(decision, producer, partitionName(topic, partition));
        }
        if (state !== undefined) state.lastActiveMs = now;
        if (decision.outcome === "duplicate") {
          const remembered = decision.batch;
          const present = sumRanges(remembered);
          // A duplicate of a batch whose fsync has not finished is answered once it has: never
          // acknowledge what an fsync has not covered.
          const written = this.#unsynced.get(remembered);
          if (present === remembered.count) {
            const spans = rangesToSpans(partition, remembered);
            return {
              durable:
                written === undefined
                  ? Promise.resolve({ spans, duplicate: true })
                  : written.then(() => ({ spans, duplicate: true })),
            };
          }
          // A crash cut this batch short: write the records that are missing.
          const rest = batchFrom(batch, present);
          const pending: PendingEntry = { entry: null };
          try {
            const { range, durable } = await this.#write(
              journal,
              request,
              {
                baseSequence: producer.sequence,
                batchCount: batch.count,
                firstIndex: present,
                fingerprint: rest.fingerprint,
                now,
              },
              rest.batch,
              pending,
            );
            await durable;
            if (this.#producers.get(producer.id) === state && state?.epoch === producer.epoch)
              remembered.ranges.push(range);
          } finally {
            this.#pending.delete(pending);
          }
          return {
            durable: Promise.resolve({
              spans: rangesToSpans(partition, remembered),
              duplicate: false,
            }),
          };
        }
        // The entry stays pending until the state below holds the batch, so a replica fetch
        // (`replicatedBatches`) always finds it in one or the other.
        const pending: PendingEntry = { entry: null };
        let written: { range: BatchRange; durable: Promise<void> };
        try {
          written = await this.#write(
            journal,
            request,
            {
              baseSequence: producer.sequence,
              batchCount: batch.count,
              firstIndex: 0,
              fingerprint,
              now,
            },
            batch,
            pending,
          );
        } catch (err) {
          this.#pending.delete(pending);
          throw err;
        }
        const { range, durable } = written;
        const current = this.#producers.get(producer.id);
        // A newer epoch that arrived meanwhile on another partition fenced this one: the records
        // are stored (and acknowledged to the old incarnation), but its sequences no longer count.
        if (current !== undefined && current.epoch === producer.epoch) {
          let s = current.partitions.get(key);
          if (s === undefined) {
            s = { topic, partition, nextSequence: 0, batches: [] };
            current.partitions.set(key, s);
          }
          const remembered = {
            baseSequence: producer.sequence,
            count: batch.count,
            ranges: [range],
          };
          rememberBatch(s, remembered);
          s.nextSequence = chainNext(producer.sequence + batch.count, s.batches);
          current.lastActiveMs = now;
          this.#unsynced.set(remembered, durable);
          durable.then(
            () => this.#unsynced.delete(remembered),
            () => {},
          );
        }
        this.#pending.delete(pending);
        this.#maybeRotate();
        return {
          durable: durable.then(() => ({
            spans: [{ partition, baseOffset: range.offset, count: range.count }],
            duplicate: false,
          })),
        };
      },
    );
    return answer.durable;
  }

  /**
   * Appends `batch` to the partition with its journal entry made durable first; resolves once the
   * log write has returned (bytes in the page cache), with where it went and `durable`, which
   * resolves once an fsync covered it (and marks the range verified) or rejects with the append's
   * error (the partition is then fenced). `pending` holds the entry from its journaling on; the
   * caller removes it from the pending set once the state holds the batch.
   */
  async #write(
    journal: ProducerJournal,
    request: IdempotentAppend,
    fields: {
      baseSequence: number;
      batchCount: number;
      firstIndex: number;
      fingerprint: number;
      now: number;
    },
    batch: EntryBatch,
    pending: PendingEntry,
  ): Promise<{ range: BatchRange; durable: Promise<void> }> {
    const { producer, topic, partition, log } = request;
    let markWritten!: () => void;
    const written = new Promise<void>((resolve) => (markWritten = resolve));
    const appended = log.append(batch, {
      admit: request.admit,
      afterWrite: markWritten,
      beforeWrite: async (baseOffset) => {
        const entry: ProducerJournalEntry = {
          timestampMs: fields.now,
          producerId: producer.id,
          epoch: producer.epoch,
          topic,
          partition,
          baseSequence: fields.baseSequence,
          batchCount: fields.batchCount,
          firstIndex: fields.firstIndex,
          count: batch.count,
          baseOffset,
          fingerprint: fields.fingerprint,
        };
        pending.entry = entry;
        this.#pending.add(pending);
        try {
          await journal.append(entry);
        } catch (err) {
          throw journalError(err);
        }
        this.#applyEpoch(producer, fields.now);
      },
    });
    // Whichever comes first: the write (then the fsync is awaited through `durable`), or the
    // append's failure before any byte was written.
    await Promise.race([written, appended]);
    const entry = pending.entry;
    assert(entry !== null, "a written batch was journaled");
    const range: BatchRange = {
      offset: entry.baseOffset,
      count: batch.count,
      fingerprint: fields.fingerprint,
      verified: false,
    };
    const durable = appended.then((result) => {
      assert(
        result.baseOffset === range.offset,
        "the log wrote the batch where its journal entry says",
      );
      range.verified = result.baseOffset + result.count <= log.highWatermark;
    });
    return { range, durable };
  }

  /**
   * The batches of idempotent producers that start at offsets in [`from`, `to`) of one partition,
   * as this broker (the leader) validated and journaled them: what a replica fetch answering
   * those records sends with them (docs/cluster.md "Producer state on followers"). From the
   * remembered batches and the entries whose write is in flight.
   */
  replicatedBatches(
    topic: string,
    partition: number,
    from: number,
    to: number,
  ): ReplicatedProducerBatch[] {
    const out: ReplicatedProducerBatch[] = [];
    if (from >= to) return out;
    const key = topicPartitionKey(topic, partition);
    const seen = new Set<number>();
    for (const p of this.#producers.values()) {
      const s = p.partitions.get(key);
      if (s === undefined) continue;
      for (const b of s.batches) {
        let firstIndex = 0;
        for (const r of b.ranges) {
          if (r.offset >= from && r.offset < to) {
            seen.add(r.offset);
            out.push({
              producerId: p.id,
              epoch: p.epoch,
              baseSequence: b.baseSequence,
              batchCount: b.count,
              firstIndex,
              count: r.count,
              baseOffset: r.offset,
              fingerprint: r.fingerprint,
              timestampMs: p.lastActiveMs,
            });
          }
          firstIndex += r.count;
        }
      }
    }
    for (const { entry: e } of this.#pending) {
      if (e === null || e.topic !== topic || e.partition !== partition) continue;
      if (e.baseOffset < from || e.baseOffset >= to || seen.has(e.baseOffset)) continue;
      out.push({
        producerId: e.producerId,
        epoch: e.epoch,
        baseSequence: e.baseSequence,
        batchCount: e.batchCount,
        firstIndex: e.firstIndex,
        count: e.count,
        baseOffset: e.baseOffset,
        fingerprint: e.fingerprint,
        timestampMs: e.timestampMs,
      });
    }
    return out.sort((a, b) => a.baseOffset - b.baseOffset);
  }

  /**
   * A follower cut `topic/partition` back to `offset` (leader-epoch truncation, docs/cluster.md
   * "Leader-epoch truncation"): what the state remembers at or after it is forgotten, so a retry
   * is never answered with offsets that now hold other records (#28). A batch cut in two keeps
   * its surviving part (a retry then writes the rest, as after a crash); a batch wholly removed is
   * forgotten and the producer's next sequence there moves back to it (a retry is appended again).
   * The journal needs nothing: a start checks every remembered range against the log.
   */
  truncated(topic: string, partition: number, offset: number): void {
    const key = topicPartitionKey(topic, partition);
    for (const p of this.#producers.values()) {
      const s = p.partitions.get(key);
      if (s === undefined) continue;
      while (s.batches.length > 0) {
        const b = s.batches[s.batches.length - 1];
        const kept = b.ranges
          .filter((r) => r.offset < offset)
          .map((r) => ({ ...r, count: Math.min(r.count, offset - r.offset) }));
        if (kept.length === b.ranges.length && kept.every((r, i) => r.count === b.ranges[i].count))
          break;
        if (kept.length > 0) {
          b.ranges = kept;
          break;
        }
        s.batches.pop();
        s.nextSequence = b.baseSequence;
      }
    }
  }

  /**
   * A follower takes the producer batches its leader validated (KAFKA-6003: replicas accept what
   * the leader validated), before it appends the records they describe: each is journaled
   * (fsynced) and applied as a replayed journal entry would be, so that this broker deduplicates
   * retries once it leads (field failures #28).
   * Nothing is done while the producer state is unavailable (this broker then refuses idempotent
   * produce anyway).
   * @throws BrokerError unavailable when shutting down; storage_error when the journal write fails.
   */
  async applyReplicated(
    topic: string,
    partition: number,
    batches: readonly ReplicatedProducerBatch[],
  ): Promise<void> {
    if (batches.length === 0) return;
    // Unavailable producer state refuses every idempotent produce on this broker, leader or not:
    // skipping the batches then loses no deduplication, and replication goes on.
    if (this.#unavailable !== null && !this.#closed) return;
    const journal = this.#checkAvailable();
    const entries = batches.map((b): ProducerJournalEntry => ({ ...b, topic, partition }));
    const pending = entries.map((entry): PendingEntry => ({ entry }));
    for (const p of pending) this.#pending.add(p);
    try {
      // Appended together, they share the journal's group commit: one write and one fsync.
      await Promise.all(entries.map((e) => journal.append(e)));
    } catch (err) {
      throw journalError(err);
    } finally {
      for (const p of pending) this.#pending.delete(p);
    }
    const now = this.#clock.nowMs();
    for (const entry of entries) {
      replayEntry(this.#producers, entry);
      const p = this.#producers.get(entry.producerId);
      if (p !== undefined) p.lastActiveMs = Math.max(p.lastActiveMs, now);
    }
    this.#enforceIdsMax();
    this.#maybeRotate();
  }

  /**
   * Once a request's journal entry is durable: a new producer starts, or a higher epoch takes
   * over (every partition's sequence restarts). A lower epoch than the current one means a newer
   * incarnation took over while this request waited for the journal: it is refused before its
   * write (its entry is ignored at replay, being older).
   */
  #applyEpoch(producer: ProducerIdentity, now: number): void {
    const state = this.#producers.get(producer.id);
    if (state === undefined) {
      this.#producers.set(producer.id, {
        id: producer.id,
        epoch: producer.epoch,
        lastActiveMs: now,
        partitions: new Map(),
      });
      this.#enforceIdsMax();
    } else if (producer.epoch > state.epoch) {
      state.epoch = producer.epoch;
      state.partitions.clear();
      state.lastActiveMs = now;
    } else if (producer.epoch < state.epoch) {
      throw new BrokerError(
        Errors.producerFenced,
        `Cannot produce as producer "${producer.id}": epoch ${producer.epoch} was fenced by epoch ${state.epoch} while the request waited`,
        { expected_epoch: state.epoch },
      );
    }
  }

  /**
   * Hands out the next epoch of producer `producerId` (the module comment, "Epochs the broker
   * hands out"; docs/decisions.md §20): resolves once a snapshot holding it is durable.
   * @param request `atLeast`: the lowest epoch the caller takes (0 = none), 0 … 2^31 − 1.
   * @throws BrokerError invalid_request (a bad id or `atLeast`, naming it),
   *   producer_epoch_exhausted (the id is at 2^31 − 1), unavailable (the producer state is
   *   unavailable, the broker is shutting down, or the snapshot failed: then it stays unavailable
   *   until restart).
   */
  async allocateEpoch(request: {
    producerId: string;
    atLeast: number;
  }): Promise<{ epoch: number }> {
    const { producerId, atLeast } = request;
    const action = `Cannot allocate an epoch for producer ${quote(producerId)}`;
    validateProducerId(producerId, action);
    if (!Number.isInteger(atLeast) || atLeast < 0 || atLeast > producerEpochMax)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: at_least must be an integer from 0 to ${producerEpochMax}`,
        { field: "at_least" },
      );
    this.#checkAvailable();
    const now = this.#clock.nowMs();
    let state = this.#producers.get(producerId);
    if (state !== undefined && now - state.lastActiveMs > this.#expiryMs) {
      this.#producers.delete(producerId);
      state = undefined;
    }
    const epoch = nextProducerEpoch(state?.epoch, { atLeast, nowMs: now });
    if (epoch === null)
      throw new BrokerError(
        Errors.producerEpochExhausted,
        `${action}: its epoch is ${producerEpochMax}, the largest there is; use a new producer id`,
        { epoch: producerEpochMax },
      );
    if (state === undefined)
      this.#producers.set(producerId, {
        id: producerId,
        epoch,
        lastActiveMs: now,
        partitions: new Map(),
      });
    else {
      state.epoch = epoch;
      state.partitions.clear();
      state.lastActiveMs = now;
    }
    this.#allocating.set(producerId, (this.#allocating.get(producerId) ?? 0) + 1);
    try {
      this.#enforceIdsMax();
      await this.#rotationForAllocations();
    } catch (err) {
      const reason = `a snapshot of an allocated epoch failed (${errorMessage(err)})`;
      if (this.#unavailable === null && !this.#closed) this.#setUnavailable(reason);
      throw new BrokerError(
        Errors.unavailable,
        `${action}: ${reason}; idempotent produce is unavailable until the broker restarts`,
      );
    } finally {
      const n = (this.#allocating.get(producerId) ?? 1) - 1;
      if (n === 0) this.#allocating.delete(producerId);
      else this.#allocating.set(producerId, n);
    }
    this.#logger.log("info", "producers.epoch_allocated", {
      producer_id: producerId,
      epoch,
      at_least: atLeast,
    });
    return { epoch };
  }

  /**
   * A rotation whose snapshot is built after this call (so it holds every allocation made
   * before it): the one waiting to start if there is one, else a new one.
   */
  #rotationForAllocations(): Promise<void> {
    const queued = this.#allocationRotation;
    if (queued !== null && !queued.started) return queued.promise;
    const next = { started: false, promise: Promise.resolve() };
    this.#allocationRotation = next;
    // `building` may run before `#rotateNow` returns (no rotation in progress): `next` is set.
    next.promise = this.#rotateNow(() => (next.started = true)).finally(
      () => (next.started = true),
    );
    return next.promise;
  }

  #maybeRotate(): void {
    if (
      this.#rotation !== null ||
      this.#journal === null ||
      this.#journal.entryCount < producerJournalEntriesRotate
    )
      return;
    this.#rotation = this.#rotateNow()
      .catch((err: unknown) =>
        this.#logger.log("error", "producers.snapshot_failed", { error: errorMessage(err) }),
      )
      .finally(() => (this.#rotation = null));
  }

  /**
   * Writes a snapshot of everything (state and entries in flight) and starts a new journal
   * generation. `building` is called right before the snapshot is built from the state.
   * @throws what the snapshot write or the journal's rotation throws; StorageError "fenced" and
   *   unavailable when there is no journal to rotate (so a caller waiting for durability never
   *   takes a skipped rotation for a done one).
   */
  async #rotateNow(building?: () => void): Promise<void> {
    const journal = this.#journal;
    if (journal === null || this.#unavailable !== null) {
      if (building === undefined) return;
      throw new Error(`the producer state is unavailable: ${this.#unavailable ?? "not loaded"}`);
    }
    await journal.rotate(async (nextGeneration) => {
      building?.();
      const now = this.#clock.nowMs();
      for (const [id, p] of this.#producers)
        if (now - p.lastActiveMs > this.#expiryMs && !this.#hasLock(id)) this.#producers.delete(id);
      const bytes = this.#snapshotBytes(nextGeneration);
      try {
        await writeFileAtomic(this.#fs, this.#snapshotPath, bytes);
      } catch (err) {
        // Failed before its rename, the old snapshot stands and the journal goes on. Failed
        // after it (the directory fsync), a restart may find either snapshot: unknown.
        const now = await readJsonFile(this.#fs, this.#snapshotPath, this.#snapshotBytesMax);
        const generation =
          "value" in now
            ? (now.value as { journal_generation?: unknown } | null)?.journal_generation
            : undefined;
        if (generation === nextGeneration) throw new SnapshotOutcomeUnknown(errorMessage(err));
        throw err;
      }
    });
  }

  /**
   * The snapshot of generation `generation` as written (pretty JSON), at most `snapshotBytesMax`
   * bytes: while larger, the least recently active idle eighth of the producers is forgotten and
   * it is built again. Synchronous, so no request changes the state between tries.
   * @throws Error when it cannot fit even with every idle producer forgotten.
   */
  #snapshotBytes(generation: number): Uint8Array {
    for (;;) {
      const snapshot = buildSnapshot(generation, {
        producers: this.#producers.values(),
        pending: [...this.#pending].flatMap((p) => (p.entry === null ? [] : [p.entry])),
        highWatermark: (topic, partition) => {
          const log = this.#partitions.get(topic, partition);
          return typeof log === "string" ? -1 : log.highWatermark;
        },
      });
      let bytes: Uint8Array | null = null;
      try {
        bytes = utf8(`${JSON.stringify(snapshot, null, 2)}\n`);
      } catch (err) {
        // Past the runtime's longest string: too large as well.
        if (!(err instanceof RangeError)) throw err;
      }
      if (bytes !== null && bytes.length <= this.#snapshotBytesMax) return bytes;
      const drop = Math.max(1, Math.ceil(this.#producers.size / 8));
      let dropped = 0;
      while (dropped < drop && this.#evictOldest("snapshot_bytes_max")) dropped++;
      if (dropped === 0)
        throw new Error(
          `the producer snapshot would be over ${this.#snapshotBytesMax} bytes with every idle producer forgotten`,
        );
    }
  }

  #hasLock(producerId: string): boolean {
    const prefix = `${producerId}\u0000`;
    for (const key of this.#locks.keys()) if (key.startsWith(prefix)) return true;
    return false;
  }

  /**
   * Forgets a deleted topic's sequence state and writes a snapshot, so a topic created later under
   * the same name starts clean. A failed snapshot is logged.
   */
  async forgetTopic(topic: string): Promise<void> {
    let changed = false;
    for (const p of this.#producers.values()) {
      for (const [key, s] of p.partitions) {
        if (s.topic === topic) {
          p.partitions.delete(key);
          changed = true;
        }
      }
    }
    if (!changed || this.#journal === null || this.#unavailable !== null || this.#closed) return;
    if (this.#rotation !== null) await this.#rotation;
    try {
      await this.#rotateNow();
    } catch (err) {
      this.#logger.log("error", "producers.snapshot_failed", { error: errorMessage(err) });
    }
  }

  /** Waits for a snapshot in progress and closes the journal. Later produces throw unavailable. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#rotation !== null) await this.#rotation;
    await this.#journal
      ?.close()
      .catch((err: unknown) =>
        this.#logger.log("error", "producers.close_failed", { error: errorMessage(err) }),
      );
  }
}
