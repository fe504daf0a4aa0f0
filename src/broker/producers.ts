/**
 * Idempotent producers (Kafka's semantics): a producer has a stable id chosen by the client, an
 * epoch that fences older incarnations, and per partition a sequence number that counts records.
 * The broker remembers, per (producer, partition), the next sequence it expects and the last
 * {@link producerBatchesRemembered} batches with their offsets, so a retried batch appends nothing
 * and gets its original offsets back.
 *
 * ## The decision table (request: epoch E, base sequence S, N records, to one partition)
 *
 * | row | producer state         | epoch         | sequence                                      | outcome |
 * |-----|------------------------|---------------|-----------------------------------------------|---------|
 * | 1   | none (new or expired)  | any           | S = 0                                         | append; the producer starts at epoch E |
 * | 2   | none (new or expired)  | any           | S > 0                                         | refuse `unknown_producer`, expected sequence 0 (start a new epoch) |
 * | 3   | known, epoch P         | E < P         | any                                           | refuse `producer_fenced`, expected epoch P |
 * | 4   | known, epoch P         | E > P         | S = 0                                         | append; epoch becomes E, every partition's sequence restarts |
 * | 5   | known, epoch P         | E > P         | S > 0                                         | refuse `out_of_order_sequence`, expected 0 (a new epoch starts at 0) |
 * | 6   | known, no state for the partition | E = P | S = 0                                   | append |
 * | 7   | known, no state for the partition | E = P | S > 0                                   | refuse `out_of_order_sequence`, expected 0 |
 * | 8   | known, next sequence Q | E = P         | a remembered batch starts at S, has N records and the same first record | duplicate: append nothing (or only the part a crash cut off), answer its offsets |
 * | 9   | known, next sequence Q | E = P         | a remembered batch starts at S, but N or the first record differ | refuse `duplicate_sequence` |
 * | 10  | known, next sequence Q | E = P         | S = Q (not remembered)                        | append |
 * | 11  | known, next sequence Q | E = P         | S < Q (not remembered)                        | refuse `duplicate_sequence`, expected Q (stored, but too old to answer) |
 * | 12  | known, next sequence Q | E = P         | S > Q                                         | refuse `out_of_order_sequence`, expected Q |
 *
 * {@link decideSequence} is this table; the tests follow it row by row. "Expired" means idle for
 * longer than the producer expiry (`--producer-expiry-ms`, default 7 days): the state is forgotten,
 * and a producer that comes back mid-sequence gets row 2 — a clear error telling it to start a new
 * epoch — never a silent duplicate. (Its retry of sequence 0 after so long would be taken as new.)
 *
 * ## Durability: journal first
 *
 * Requests of one (producer, partition) run one at a time. An accepted batch is appended through
 * the partition's write loop with a `beforeWrite` hook: once its offsets are assigned, and before
 * any byte of it is written, an entry (producer, epoch, partition, base sequence, count, base
 * offset, fingerprint of the first record) is appended to `producers.journal` and fsynced
 * (`storage/producer-journal.ts`). So an entry is durable no later than the log write it
 * describes, and a record that reached the log always has its entry. The in-memory state takes
 * the batch once the append resolves (after the log's fsync with `--flush-every-records 1`).
 * Requests without a producer never touch the journal.
 *
 * ## Recovery
 *
 * At start: load `producers.json` (the snapshot), replay the journal if it continues that snapshot
 * (same generation; a torn tail is cut and reported), forget expired producers, then reconcile
 * every batch not yet known durable with the recovered logs (table below), write a new snapshot
 * and start a fresh journal. A failed log write whose entry was already durable, or a crash, can
 * leave entries for records that never reached the log, or reached it only in part.
 *
 * | the batch's first offset B (of a range of c records)          | outcome |
 * |---------------------------------------------------------------|---------|
 * | B ≥ the recovered log end                                     | never written: forgotten (a retry appends it) |
 * | B < the log start offset                                      | kept (retention removed it after it was durable) |
 * | a record at B whose fingerprint differs                       | its write failed and the offset went to other records: forgotten |
 * | records B … B+c−1 all present, fingerprint matches            | kept |
 * | in the last segment at the crash, only B … B+k−1 present      | kept as cut short after k records: a retry appends the other c−k |
 * | in the last segment at the crash, nothing at B                | never written: forgotten |
 * | in an older segment, records missing                          | kept (compaction removed superseded records; those segments were durable before the crash) |
 *
 * Only the segment that was active at the crash (or the one recovery sealed as corrupt after it)
 * can hold records that no fsync covered: a roll fsyncs the old segment first, and compaction
 * never touches the active segment.
 *
 * A snapshot is written (and the journal started afresh) after {@link producerJournalEntriesRotate}
 * entries, when a topic is deleted, and at every start. `producers.json` that is empty or
 * unparseable, or a journal that does not belong to it, makes idempotent produce unavailable
 * (docs/decisions.md §9); other produces are unaffected.
 */
import { assert } from "../lib/assert.ts";
import type { Clock } from "../lib/clock.ts";
import { crc32 } from "../lib/crc32.ts";
import type { Logger } from "../lib/logger.ts";
import { Mutex } from "../lib/mutex.ts";
import {
  offsetMax,
  producerBatchesRemembered,
  producerEpochMax,
  producerIdCharsMax,
  producerJournalEntriesRotate,
} from "../lib/limits.ts";
import { joinPath, type FileSystem } from "../fs/types.ts";
import { readJsonFile, writeJsonAtomic } from "../storage/metadata.ts";
import {
  ProducerJournal,
  SnapshotOutcomeUnknown,
  type ProducerJournalEntry,
} from "../storage/producer-journal.ts";
import { StorageError } from "../storage/errors.ts";
import type { PartitionLog } from "../storage/partition.ts";
import { DecodeStatus, EntryCursor, RecordCursor, type EntryBatch } from "../storage/record.ts";
import { errorMessage } from "../lib/errors.ts";
import { partitionName, topicPartitionKey } from "../lib/topic-partition.ts";
import { BrokerError, Errors, type ErrorKind } from "./errors.ts";
import { storageFailureKind } from "./storage-failure.ts";
import type { ProduceResult, ProduceSpan, ProducerIdentity } from "./types.ts";

/** A run of a batch's records at consecutive offsets (a batch cut short by a crash and completed later has two). */
export interface BatchRange {
  offset: number;
  count: number;
  /** CRC-32 of the range's first record (key_len | key | value_len | value); see {@link entryFingerprint}. */
  fingerprint: number;
  /** True once known durable (covered by an fsync, or checked against the log at start). */
  verified: boolean;
}

/** A batch remembered for answering retries. */
export interface RememberedBatch {
  baseSequence: number;
  /** Records in the batch. */
  count: number;
  /** Where its records are, in batch order; fewer than `count` records in all if a crash cut it short. */
  ranges: BatchRange[];
}

/** Sequence state of one producer on one partition. */
export interface PartitionSequenceState {
  topic: string;
  partition: number;
  /** The next base sequence the broker expects. */
  nextSequence: number;
  /** The last batches, oldest first (at most {@link producerBatchesRemembered}). */
  batches: RememberedBatch[];
}

/** State of one producer. */
export interface ProducerState {
  id: string;
  epoch: number;
  /** Broker clock at its last request, ms (expiry). */
  lastActiveMs: number;
  /** Keyed by {@link topicPartitionKey}. */
  partitions: Map<string, PartitionSequenceState>;
}

/** What {@link decideSequence} says to do with a request. */
export type SequenceDecision =
  | { row: 1 | 4 | 6 | 10; outcome: "append" }
  | { row: 8; outcome: "duplicate"; batch: RememberedBatch }
  | {
      row: 2 | 3 | 5 | 7 | 9 | 11 | 12;
      outcome: "refuse";
      kind: ErrorKind;
      expected: { sequence?: number; epoch?: number };
    };

/**
 * The decision table of the module comment. Pure: changes nothing.
 * @param producer the producer's state, or undefined if none (never seen, or expired).
 * @param request the request's epoch, partition key, base sequence, record count and first-record fingerprint.
 */
export function decideSequence(
  producer: ProducerState | undefined,
  request: {
    epoch: number;
    partitionKey: string;
    sequence: number;
    count: number;
    fingerprint: number;
  },
): SequenceDecision {
  const { epoch, sequence } = request;
  if (producer === undefined) {
    if (sequence === 0) return { row: 1, outcome: "append" };
    return { row: 2, outcome: "refuse", kind: Errors.unknownProducer, expected: { sequence: 0 } };
  }
  if (epoch < producer.epoch)
    return {
      row: 3,
      outcome: "refuse",
      kind: Errors.producerFenced,
      expected: { epoch: producer.epoch },
    };
  if (epoch > producer.epoch) {
    if (sequence === 0) return { row: 4, outcome: "append" };
    return {
      row: 5,
      outcome: "refuse",
      kind: Errors.outOfOrderSequence,
      expected: { sequence: 0 },
    };
  }
  const state = producer.partitions.get(request.partitionKey);
  if (state === undefined) {
    if (sequence === 0) return { row: 6, outcome: "append" };
    return {
      row: 7,
      outcome: "refuse",
      kind: Errors.outOfOrderSequence,
      expected: { sequence: 0 },
    };
  }
  const remembered = state.batches.find((b) => b.baseSequence === sequence);
  if (remembered !== undefined) {
    if (
      remembered.count === request.count &&
      (remembered.ranges.length === 0 || remembered.ranges[0].fingerprint === request.fingerprint)
    ) {
      return { row: 8, outcome: "duplicate", batch: remembered };
    }
    return {
      row: 9,
      outcome: "refuse",
      kind: Errors.duplicateSequence,
      expected: { sequence: state.nextSequence },
    };
  }
  if (sequence === state.nextSequence) return { row: 10, outcome: "append" };
  if (sequence < state.nextSequence)
    return {
      row: 11,
      outcome: "refuse",
      kind: Errors.duplicateSequence,
      expected: { sequence: state.nextSequence },
    };
  return {
    row: 12,
    outcome: "refuse",
    kind: Errors.outOfOrderSequence,
    expected: { sequence: state.nextSequence },
  };
}

/** Fingerprint of the entry under `cursor`: CRC-32 of key_len | key | value_len | value (the timestamp is left out: the broker may stamp it). */
export function entryFingerprint(batch: EntryBatch, cursor: EntryCursor): number {
  return crc32(batch.bytes, cursor.start + 8, cursor.end);
}

/** Fingerprint of the stored record under `cursor` (same bytes as {@link entryFingerprint}). */
export function recordFingerprint(cursor: RecordCursor): number {
  return crc32(cursor.bytes, cursor.keyStart - 4, cursor.valueStart + cursor.valueLen);
}

/** The records of `batch` from index `first` on, as a batch (a view), with the first one's fingerprint. */
function batchFrom(batch: EntryBatch, first: number): { batch: EntryBatch; fingerprint: number } {
  const cursor = new EntryCursor(batch);
  while (cursor.next()) {
    if (cursor.index === first) {
      return {
        batch: { bytes: batch.bytes.subarray(cursor.start), count: batch.count - first },
        fingerprint: entryFingerprint(batch, cursor),
      };
    }
  }
  throw new Error(`batch of ${batch.count} records has no record ${first}`);
}

const producerIdPattern = /^[A-Za-z0-9._:-]+$/;

/**
 * Checks a producer identity and the request's size against it.
 * @throws BrokerError invalid_request naming the field.
 */
export function validateProducerIdentity(producer: ProducerIdentity, count: number): void {
  const bad = (field: string, why: string): never => {
    throw new BrokerError(Errors.invalidRequest, `Cannot produce idempotently: ${field} ${why}`, {
      field,
    });
  };
  if (
    typeof producer.id !== "string" ||
    producer.id.length < 1 ||
    producer.id.length > producerIdCharsMax ||
    !producerIdPattern.test(producer.id)
  ) {
    bad(
      "producer id",
      `must be 1 to ${producerIdCharsMax} characters of letters, digits, ".", "_", ":" and "-"`,
    );
  }
  if (!Number.isInteger(producer.epoch) || producer.epoch < 0 || producer.epoch > producerEpochMax)
    bad("producer epoch", `must be an integer from 0 to ${producerEpochMax}`);
  if (!Number.isSafeInteger(producer.sequence) || producer.sequence < 0)
    bad("producer sequence", "must be a non-negative integer");
  if (producer.sequence + count - 1 > offsetMax)
    bad("producer sequence", `${producer.sequence} + ${count} records would pass 2^53 − 1`);
}

/** How the producer state reaches partitions: the log, or why there is none. */
export interface ProducerPartitions {
  get(topic: string, partition: number): PartitionLog | "missing" | "unavailable";
}

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
}

/** Arguments of {@link ProducerStates.produce}. */
export interface IdempotentAppend {
  producer: ProducerIdentity;
  topic: string;
  partition: number;
  log: PartitionLog;
  batch: EntryBatch;
}

interface PendingEntry {
  entry: ProducerJournalEntry | null;
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
  #partitions: ProducerPartitions;
  #producers = new Map<string, ProducerState>();
  #journal: ProducerJournal | null = null;
  /** Why idempotent produce is refused, or null. */
  #unavailable: string | null = null;
  /** Journal entries whose log write has not finished (a snapshot must keep them). */
  #pending = new Set<PendingEntry>();
  #locks = new Map<string, { mutex: Mutex; users: number }>();
  #rotation: Promise<void> | null = null;
  #closed = false;

  private constructor(options: ProducerStatesOptions) {
    this.#fs = options.fs;
    this.#snapshotPath = joinPath(options.dataDir, "producers.json");
    this.#journalPath = joinPath(options.dataDir, "producers.journal");
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#expiryMs = options.expiryMs;
    this.#partitions = options.partitions;
  }

  /**
   * Loads and reconciles the producer state (module comment, Recovery). Never throws for a bad
   * file: it makes idempotent produce unavailable and reports why (`producers.unavailable`).
   */
  static async open(options: ProducerStatesOptions): Promise<ProducerStates> {
    assert(
      Number.isSafeInteger(options.expiryMs) && options.expiryMs > 0,
      "producer expiry is a positive integer of ms",
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

  /** A copy of one producer's state, for tests and reports. */
  inspect(id: string): ProducerState | undefined {
    const p = this.#producers.get(id);
    return p === undefined ? undefined : structuredClone(p);
  }

  #setUnavailable(reason: string): void {
    this.#unavailable = reason;
    this.#logger.log("error", "producers.unavailable", { reason });
  }

  async #load(): Promise<void> {
    const started = this.#clock.nowMs();
    const read = await readJsonFile(this.#fs, this.#snapshotPath);
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
    for (const e of [...pendingFromSnapshot, ...replay]) if (!this.#replay(e)) ignored++;
    const now = this.#clock.nowMs();
    let expired = 0;
    for (const [id, p] of this.#producers) {
      if (now - p.lastActiveMs > this.#expiryMs) {
        this.#producers.delete(id);
        expired++;
      }
    }
    const outcome = await this.#reconcile();
    this.#logger.log("info", "recovery.producers", {
      producers: this.#producers.size,
      journal_entries: replay.length,
      snapshot_pending_entries: pendingFromSnapshot.length,
      entries_ignored: ignored,
      journal_cut_bytes: opened.cutBytes,
      expired,
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

  /** Applies one journal entry to the state. Returns false if it was ignored (older epoch, or a completion without its batch). */
  #replay(e: ProducerJournalEntry): boolean {
    let p = this.#producers.get(e.producerId);
    if (p === undefined) {
      p = { id: e.producerId, epoch: e.epoch, lastActiveMs: e.timestampMs, partitions: new Map() };
      this.#producers.set(p.id, p);
    }
    if (e.epoch < p.epoch) return false;
    if (e.epoch > p.epoch) {
      p.epoch = e.epoch;
      p.partitions.clear();
    }
    p.lastActiveMs = Math.max(p.lastActiveMs, e.timestampMs);
    const key = topicPartitionKey(e.topic, e.partition);
    let s = p.partitions.get(key);
    const range: BatchRange = {
      offset: e.baseOffset,
      count: e.count,
      fingerprint: e.fingerprint,
      verified: false,
    };
    if (e.firstIndex > 0) {
      const b = s?.batches.find(
        (x) => x.baseSequence === e.baseSequence && x.count === e.batchCount,
      );
      if (b === undefined || sumRanges(b) !== e.firstIndex) return false;
      b.ranges.push(range);
      return true;
    }
    if (s === undefined) {
      s = { topic: e.topic, partition: e.partition, nextSequence: 0, batches: [] };
      p.partitions.set(key, s);
    }
    // A later entry for a sequence supersedes every remembered batch from that sequence on: the
    // broker journals sequence S only while it expects S, so an earlier entry for S (or after)
    // belongs to a write that failed.
    s.batches = s.batches.filter((b) => b.baseSequence < e.baseSequence);
    s.batches.push({ baseSequence: e.baseSequence, count: e.batchCount, ranges: [range] });
    if (s.batches.length > producerBatchesRemembered)
      s.batches.splice(0, s.batches.length - producerBatchesRemembered);
    s.nextSequence = e.baseSequence + e.batchCount;
    return true;
  }

  /** Checks every unverified range against its partition (module comment, second table). */
  async #reconcile(): Promise<Record<string, number>> {
    const counts = {
      ranges_checked: 0,
      ranges_kept: 0,
      ranges_forgotten: 0,
      ranges_stale: 0,
      batches_cut_short: 0,
      partitions_forgotten: 0,
      ranges_unchecked: 0,
    };
    for (const p of this.#producers.values()) {
      for (const [key, s] of p.partitions) {
        const log = this.#partitions.get(s.topic, s.partition);
        if (log === "missing") {
          p.partitions.delete(key);
          counts.partitions_forgotten++;
          continue;
        }
        if (log === "unavailable") {
          for (const b of s.batches)
            for (const r of b.ranges) if (!r.verified) counts.ranges_unchecked++;
          continue;
        }
        const atRiskStart = atRiskStartOffset(log);
        let firstLost: number | null = null;
        for (const b of s.batches) {
          const kept: BatchRange[] = [];
          let cut = false;
          for (const r of b.ranges) {
            if (cut) break;
            if (r.verified) {
              kept.push(r);
              continue;
            }
            counts.ranges_checked++;
            let verdict: RangeVerdict;
            try {
              verdict = await verifyRange(log, r, atRiskStart);
            } catch (err) {
              this.#logger.log("error", "producers.verify_failed", {
                partition: log.name,
                offset: r.offset,
                error: errorMessage(err),
              });
              counts.ranges_unchecked++;
              kept.push(r);
              continue;
            }
            if (verdict.kind === "whole") {
              kept.push({ ...r, verified: true });
              counts.ranges_kept++;
            } else if (verdict.kind === "partial") {
              kept.push({ ...r, count: verdict.present, verified: true });
              counts.batches_cut_short++;
              cut = true;
              this.#logger.log("warn", "producers.batch_cut_short", {
                producer_id: p.id,
                partition: log.name,
                base_sequence: b.baseSequence,
                offset: r.offset,
                records: r.count,
                present: verdict.present,
              });
            } else {
              counts[verdict.kind === "stale" ? "ranges_stale" : "ranges_forgotten"]++;
              cut = true;
            }
          }
          b.ranges = kept;
          if (sumRanges(b) === 0 && (firstLost === null || b.baseSequence < firstLost))
            firstLost = b.baseSequence;
        }
        s.batches = s.batches.filter((b) => sumRanges(b) > 0);
        if (firstLost !== null) {
          // Nothing from the lost batch on is stored (batches of one producer and partition are
          // written one after another), except batches still remembered after it, if any.
          s.nextSequence = chainNext(firstLost, s.batches);
        }
      }
    }
    return counts;
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
   * An idempotent append (module comment). The broker has routed every record to `partition`.
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
    return this.#withLock(`${producer.id}\u0000${key}`, async () => {
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
      if (decision.outcome === "refuse")
        throw refusal(decision, producer, partitionName(topic, partition));
      if (state !== undefined) state.lastActiveMs = now;
      if (decision.outcome === "duplicate") {
        const remembered = decision.batch;
        const present = sumRanges(remembered);
        if (present === remembered.count)
          return { spans: rangesToSpans(partition, remembered), duplicate: true };
        // A crash cut this batch short: write the records that are missing.
        const rest = batchFrom(batch, present);
        const range = await this.#write(
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
        );
        if (this.#producers.get(producer.id) === state && state?.epoch === producer.epoch)
          remembered.ranges.push(range);
        return { spans: rangesToSpans(partition, remembered), duplicate: false };
      }
      const range = await this.#write(
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
      );
      const current = this.#producers.get(producer.id);
      // A newer epoch that arrived meanwhile on another partition fenced this one: the records are
      // stored (and acknowledged to the old incarnation), but its sequences no longer count.
      if (current !== undefined && current.epoch === producer.epoch) {
        let s = current.partitions.get(key);
        if (s === undefined) {
          s = { topic, partition, nextSequence: 0, batches: [] };
          current.partitions.set(key, s);
        }
        s.batches.push({ baseSequence: producer.sequence, count: batch.count, ranges: [range] });
        if (s.batches.length > producerBatchesRemembered)
          s.batches.splice(0, s.batches.length - producerBatchesRemembered);
        s.nextSequence = chainNext(producer.sequence + batch.count, s.batches);
        current.lastActiveMs = now;
      }
      this.#maybeRotate();
      return {
        spans: [{ partition, baseOffset: range.offset, count: range.count }],
        duplicate: false,
      };
    });
  }

  /** Appends `batch` to the partition with its journal entry made durable first; resolves with where it went. */
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
  ): Promise<BatchRange> {
    const { producer, topic, partition, log } = request;
    const pending: PendingEntry = { entry: null };
    try {
      const result = await log.append(batch, {
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
      assert(
        pending.entry !== null && result.baseOffset === pending.entry.baseOffset,
        "the log wrote the batch where its journal entry says",
      );
      return {
        offset: result.baseOffset,
        count: result.count,
        fingerprint: fields.fingerprint,
        verified: result.baseOffset + result.count <= log.highWatermark,
      };
    } finally {
      this.#pending.delete(pending);
    }
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

  /** Writes a snapshot of everything (state and entries in flight) and starts a new journal generation. */
  async #rotateNow(): Promise<void> {
    const journal = this.#journal;
    if (journal === null || this.#unavailable !== null) return;
    await journal.rotate(async (nextGeneration) => {
      const now = this.#clock.nowMs();
      for (const [id, p] of this.#producers)
        if (now - p.lastActiveMs > this.#expiryMs && !this.#hasLock(id)) this.#producers.delete(id);
      const snapshot = this.#snapshot(nextGeneration);
      try {
        await writeJsonAtomic(this.#fs, this.#snapshotPath, snapshot);
      } catch (err) {
        // Failed before its rename, the old snapshot stands and the journal goes on. Failed
        // after it (the directory fsync), a restart may find either snapshot: unknown.
        const now = await readJsonFile(this.#fs, this.#snapshotPath);
        const generation =
          "value" in now
            ? (now.value as { journal_generation?: unknown } | null)?.journal_generation
            : undefined;
        if (generation === nextGeneration) throw new SnapshotOutcomeUnknown(errorMessage(err));
        throw err;
      }
    });
  }

  #hasLock(producerId: string): boolean {
    const prefix = `${producerId}\u0000`;
    for (const key of this.#locks.keys()) if (key.startsWith(prefix)) return true;
    return false;
  }

  /** The snapshot object (built synchronously, so no request changes it half-way). */
  #snapshot(generation: number): unknown {
    const producers = [...this.#producers.values()].map((p) => ({
      producer_id: p.id,
      epoch: p.epoch,
      last_active_ms: p.lastActiveMs,
      partitions: [...p.partitions.values()].map((s) => {
        const log = this.#partitions.get(s.topic, s.partition);
        const highWatermark = typeof log === "string" ? -1 : log.highWatermark;
        return {
          topic: s.topic,
          partition: s.partition,
          next_sequence: s.nextSequence,
          batches: s.batches.map((b) => ({
            base_sequence: b.baseSequence,
            count: b.count,
            ranges: b.ranges.map((r) => ({
              offset: r.offset,
              count: r.count,
              fingerprint: r.fingerprint,
              verified: r.verified || r.offset + r.count <= highWatermark,
            })),
          })),
        };
      }),
    }));
    const pending = [...this.#pending].flatMap((p) =>
      p.entry === null ? [] : [entryJson(p.entry)],
    );
    return { version: 1, journal_generation: generation, producers, pending };
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

function sumRanges(batch: RememberedBatch): number {
  let n = 0;
  for (const r of batch.ranges) n += r.count;
  return n;
}

/** `next`, moved past every remembered batch that starts exactly there (a retry filled the gap before them). */
function chainNext(next: number, batches: readonly RememberedBatch[]): number {
  for (;;) {
    const b = batches.find((x) => x.baseSequence === next);
    if (b === undefined) return next;
    next = b.baseSequence + b.count;
  }
}

function rangesToSpans(partition: number, batch: RememberedBatch): ProduceSpan[] {
  return batch.ranges.map((r) => ({ partition, baseOffset: r.offset, count: r.count }));
}

function refusal(
  decision: Extract<SequenceDecision, { outcome: "refuse" }>,
  producer: ProducerIdentity,
  where: string,
): BrokerError {
  const who = `Cannot produce to partition "${where}" as producer "${producer.id}" (epoch ${producer.epoch}, sequence ${producer.sequence})`;
  const { sequence, epoch } = decision.expected;
  switch (decision.row) {
    case 2:
      return new BrokerError(
        decision.kind,
        `${who}: the broker has no state for this producer (never seen, or idle past the producer expiry and forgotten): start a new epoch at sequence 0`,
        {
          expected_sequence: 0,
        },
      );
    case 3:
      return new BrokerError(
        decision.kind,
        `${who}: epoch ${producer.epoch} is fenced by the producer's current epoch ${epoch}`,
        { expected_epoch: epoch },
      );
    case 5:
      return new BrokerError(decision.kind, `${who}: a new epoch starts at sequence 0`, {
        expected_sequence: 0,
      });
    case 7:
      return new BrokerError(
        decision.kind,
        `${who}: the producer's first batch on this partition in this epoch must start at sequence 0`,
        { expected_sequence: 0 },
      );
    case 9:
      return new BrokerError(
        decision.kind,
        `${who}: a different batch is stored with this base sequence (record count or first record differ)`,
        { expected_sequence: sequence },
      );
    case 11:
      return new BrokerError(
        decision.kind,
        `${who}: sequence ${producer.sequence} is already stored, in a batch older than the ${producerBatchesRemembered} the broker remembers; expected sequence ${sequence}`,
        {
          expected_sequence: sequence,
        },
      );
    case 12:
      return new BrokerError(decision.kind, `${who}: sequence gap, expected sequence ${sequence}`, {
        expected_sequence: sequence,
      });
  }
}

/** Where records that no fsync covered can be, after recovery: the last segment with records (or the corrupt one recovery sealed before a new empty one). */
function atRiskStartOffset(log: PartitionLog): number {
  const segments = log.describe().segments;
  let i = segments.length - 1;
  if (
    i > 0 &&
    segments[i].next_offset === segments[i].base_offset &&
    segments[i - 1].corruption !== null
  )
    i--;
  return segments[i].base_offset;
}

type RangeVerdict =
  | { kind: "whole" }
  | { kind: "partial"; present: number }
  | { kind: "absent" }
  | { kind: "stale" };

/** The recovery table of the module comment for one range. @throws what reading the log throws. */
async function verifyRange(
  log: PartitionLog,
  range: BatchRange,
  atRiskStart: number,
): Promise<RangeVerdict> {
  const end = range.offset + range.count;
  if (range.offset >= log.logEndOffset) return { kind: "absent" };
  if (range.offset < log.logStartOffset) return { kind: "whole" };
  const atRisk = range.offset >= atRiskStart;
  const cursor = new RecordCursor();
  let leading = 0;
  let others = 0;
  let offset = range.offset;
  while (offset < end && offset < log.highWatermark) {
    const read = await log.read({ offset, maxRecords: end - offset, maxBytes: 8 * 1024 * 1024 });
    if (read.count === 0) break;
    cursor.reset(read.bytes);
    let pos = 0;
    let last = offset - 1;
    for (let i = 0; i < read.count; i++) {
      if (cursor.decode(pos) !== DecodeStatus.Ok)
        throw new Error(
          `record ${i} of a read at offset ${offset} does not decode: ${cursor.reason}`,
        );
      pos += cursor.sizeBytes;
      if (cursor.offset >= end) break;
      if (cursor.offset === range.offset && recordFingerprint(cursor) !== range.fingerprint)
        return { kind: "stale" };
      if (cursor.offset === range.offset + leading) leading++;
      else others++;
      last = cursor.offset;
    }
    if (last < offset) break;
    offset = Math.max(read.nextOffset, last + 1);
  }
  if (leading === range.count) return { kind: "whole" };
  if (!atRisk) return { kind: "whole" };
  if (leading === 0) return { kind: "absent" };
  // A write is torn to a prefix, so records after a missing one cannot be this batch's; keep the
  // batch whole rather than write any record of it twice.
  if (others > 0) return { kind: "whole" };
  return { kind: "partial", present: leading };
}

function entryJson(e: ProducerJournalEntry): Record<string, unknown> {
  return {
    timestamp_ms: e.timestampMs,
    producer_id: e.producerId,
    epoch: e.epoch,
    topic: e.topic,
    partition: e.partition,
    base_sequence: e.baseSequence,
    batch_count: e.batchCount,
    first_index: e.firstIndex,
    count: e.count,
    base_offset: e.baseOffset,
    fingerprint: e.fingerprint,
  };
}

/** Parses `producers.json`. @throws Error naming the first problem. */
function parseSnapshot(value: unknown): {
  generation: number;
  producers: ProducerState[];
  pending: ProducerJournalEntry[];
} {
  const fail = (why: string): never => {
    throw new Error(why);
  };
  const int = (v: unknown, what: string, max = offsetMax): number => {
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0 || v > max)
      fail(`${what} is not an integer from 0 to ${max}`);
    return v as number;
  };
  const str = (v: unknown, what: string): string => {
    if (typeof v !== "string" || v.length === 0) fail(`${what} is not a non-empty string`);
    return v as string;
  };
  const arr = (v: unknown, what: string): unknown[] => {
    if (!Array.isArray(v)) fail(`${what} is not an array`);
    return v as unknown[];
  };
  if (typeof value !== "object" || value === null || Array.isArray(value))
    fail("not a JSON object");
  const v = value as Record<string, unknown>;
  if (v.version !== 1) fail(`version ${JSON.stringify(v.version)} is not 1`);
  const generation = int(v.journal_generation, "journal_generation");
  const producers: ProducerState[] = arr(v.producers, "producers").map((raw, i) => {
    const p = (raw ?? {}) as Record<string, unknown>;
    const at = `producers[${i}]`;
    const state: ProducerState = {
      id: str(p.producer_id, `${at}.producer_id`),
      epoch: int(p.epoch, `${at}.epoch`, producerEpochMax),
      lastActiveMs: int(p.last_active_ms, `${at}.last_active_ms`),
      partitions: new Map(),
    };
    arr(p.partitions, `${at}.partitions`).forEach((rawS, j) => {
      const s = (rawS ?? {}) as Record<string, unknown>;
      const sat = `${at}.partitions[${j}]`;
      const topic = str(s.topic, `${sat}.topic`);
      const partition = int(s.partition, `${sat}.partition`, 0xffff_ffff);
      const batches: RememberedBatch[] = arr(s.batches, `${sat}.batches`).map((rawB, k) => {
        const b = (rawB ?? {}) as Record<string, unknown>;
        const bat = `${sat}.batches[${k}]`;
        return {
          baseSequence: int(b.base_sequence, `${bat}.base_sequence`),
          count: int(b.count, `${bat}.count`, 0xffff_ffff),
          ranges: arr(b.ranges, `${bat}.ranges`).map((rawR, m) => {
            const r = (rawR ?? {}) as Record<string, unknown>;
            const rat = `${bat}.ranges[${m}]`;
            if (typeof r.verified !== "boolean") fail(`${rat}.verified is not a boolean`);
            return {
              offset: int(r.offset, `${rat}.offset`),
              count: int(r.count, `${rat}.count`, 0xffff_ffff),
              fingerprint: int(r.fingerprint, `${rat}.fingerprint`, 0xffff_ffff),
              verified: r.verified as boolean,
            };
          }),
        };
      });
      state.partitions.set(topicPartitionKey(topic, partition), {
        topic,
        partition,
        nextSequence: int(s.next_sequence, `${sat}.next_sequence`),
        batches,
      });
    });
    return state;
  });
  const pending: ProducerJournalEntry[] = arr(v.pending, "pending").map((raw, i) => {
    const e = (raw ?? {}) as Record<string, unknown>;
    const at = `pending[${i}]`;
    const entry: ProducerJournalEntry = {
      timestampMs: int(e.timestamp_ms, `${at}.timestamp_ms`),
      producerId: str(e.producer_id, `${at}.producer_id`),
      epoch: int(e.epoch, `${at}.epoch`, producerEpochMax),
      topic: str(e.topic, `${at}.topic`),
      partition: int(e.partition, `${at}.partition`, 0xffff_ffff),
      baseSequence: int(e.base_sequence, `${at}.base_sequence`),
      batchCount: int(e.batch_count, `${at}.batch_count`, 0xffff_ffff),
      firstIndex: int(e.first_index, `${at}.first_index`, 0xffff_ffff),
      count: int(e.count, `${at}.count`, 0xffff_ffff),
      baseOffset: int(e.base_offset, `${at}.base_offset`),
      fingerprint: int(e.fingerprint, `${at}.fingerprint`, 0xffff_ffff),
    };
    if (entry.count < 1 || entry.firstIndex + entry.count !== entry.batchCount)
      fail(`${at} has inconsistent counts`);
    return entry;
  });
  return { generation, producers, pending };
}
