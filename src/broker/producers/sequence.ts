/**
 * Idempotent producers (Kafka's semantics): a producer has a stable id chosen by the client, an
 * epoch that fences older incarnations, and per partition a sequence number that counts records.
 * The broker remembers, per (producer, partition), the next sequence it expects and the last
 * {@link producerBatchesRemembered} batches with their offsets, so a retried batch appends nothing
 * and gets its original offsets back. This module is that state's shape and the rules over it;
 * `state.ts` keeps it, `recovery.ts` rebuilds it at start, `snapshot.ts` stores it.
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
 * {@link decideSequence} is this table and {@link refusalError} words its refusals; the tests
 * follow it row by row. "Expired" means idle for longer than the producer expiry
 * (`--producer-expiry-ms`, default 7 days): the state is forgotten, and a producer that comes
 * back mid-sequence gets row 2 — a clear error telling it to start a new epoch — never a silent
 * duplicate. (Its retry of sequence 0 after so long would be taken as new.)
 */
import { crc32 } from "../../lib/crc32.ts";
import {
  offsetMax,
  producerBatchesRemembered,
  producerEpochMax,
  producerIdCharsMax,
} from "../../lib/limits.ts";
import { EntryCursor, type EntryBatch, type RecordCursor } from "../../storage/record.ts";
import { BrokerError, Errors, type ErrorKind } from "../errors.ts";
import type { ProduceSpan, ProducerIdentity } from "../types.ts";

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
  /** Keyed by `topicPartitionKey` (`lib/topic-partition.ts`). */
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
    return refuse(2, Errors.unknownProducer, { sequence: 0 });
  }
  if (epoch < producer.epoch) return refuse(3, Errors.producerFenced, { epoch: producer.epoch });
  if (epoch > producer.epoch) {
    if (sequence === 0) return { row: 4, outcome: "append" };
    return refuse(5, Errors.outOfOrderSequence, { sequence: 0 });
  }
  const state = producer.partitions.get(request.partitionKey);
  if (state === undefined) {
    if (sequence === 0) return { row: 6, outcome: "append" };
    return refuse(7, Errors.outOfOrderSequence, { sequence: 0 });
  }
  const expected = { sequence: state.nextSequence };
  const remembered = state.batches.find((b) => b.baseSequence === sequence);
  if (remembered !== undefined) {
    if (
      remembered.count === request.count &&
      (remembered.ranges.length === 0 || remembered.ranges[0].fingerprint === request.fingerprint)
    ) {
      return { row: 8, outcome: "duplicate", batch: remembered };
    }
    return refuse(9, Errors.duplicateSequence, expected);
  }
  if (sequence === state.nextSequence) return { row: 10, outcome: "append" };
  if (sequence < state.nextSequence) return refuse(11, Errors.duplicateSequence, expected);
  return refuse(12, Errors.outOfOrderSequence, expected);
}

/** A refusing row of the decision table: its error, and what the broker expected instead (sent as details). */
function refuse(
  row: 2 | 3 | 5 | 7 | 9 | 11 | 12,
  kind: ErrorKind,
  expected: { sequence?: number; epoch?: number },
): SequenceDecision {
  return { row, outcome: "refuse", kind, expected };
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
export function batchFrom(
  batch: EntryBatch,
  first: number,
): { batch: EntryBatch; fingerprint: number } {
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
 * Checks a producer id: 1 to {@link producerIdCharsMax} characters of `[A-Za-z0-9._:-]`.
 * @param action the failed action the error names first ("Cannot allocate an epoch for …").
 * @throws BrokerError invalid_request with details `field: "producer_id"`.
 */
export function validateProducerId(id: unknown, action: string): void {
  if (
    typeof id !== "string" ||
    id.length < 1 ||
    id.length > producerIdCharsMax ||
    !producerIdPattern.test(id)
  ) {
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: producer id must be 1 to ${producerIdCharsMax} characters of letters, digits, ".", "_", ":" and "-"`,
      { field: "producer_id" },
    );
  }
}

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
    bad("producer sequence", `${producer.sequence} + ${count} records would pass 2^53 - 1`);
}

/** Records of a remembered batch that are stored (fewer than its count if a crash cut it short). */
export function sumRanges(batch: RememberedBatch): number {
  let n = 0;
  for (const r of batch.ranges) n += r.count;
  return n;
}

/** `next`, moved past every remembered batch that starts exactly there (a retry filled the gap before them). */
export function chainNext(next: number, batches: readonly RememberedBatch[]): number {
  for (;;) {
    const b = batches.find((x) => x.baseSequence === next);
    if (b === undefined) return next;
    next = b.baseSequence + b.count;
  }
}

/** A remembered batch's ranges as the spans of a produce answer. */
export function rangesToSpans(partition: number, batch: RememberedBatch): ProduceSpan[] {
  return batch.ranges.map((r) => ({ partition, baseOffset: r.offset, count: r.count }));
}

/**
 * Adds a batch at the end of a partition's remembered batches, forgetting the oldest beyond
 * {@link producerBatchesRemembered}. The caller sets the next sequence.
 */
export function rememberBatch(state: PartitionSequenceState, batch: RememberedBatch): void {
  state.batches.push(batch);
  if (state.batches.length > producerBatchesRemembered)
    state.batches.splice(0, state.batches.length - producerBatchesRemembered);
}

/**
 * The error a refusing row of the decision table answers, naming the producer, the partition and
 * what the broker expected (details `expected_sequence` / `expected_epoch`).
 * @param where the partition's name, `"orders/3"`.
 */
export function refusalError(
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
