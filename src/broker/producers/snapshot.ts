/**
 * `producers.json`: the snapshot of the producer state that the journal (`producers.journal`,
 * `storage/producer-journal.ts`) continues. A journal of generation G holds the entries written
 * after the snapshot whose `journal_generation` is G; a snapshot is written (and the journal
 * started afresh at the next generation) after `producerJournalEntriesRotate` entries, when a
 * topic is deleted, and at every start (`state.ts`). `producers.json` that is empty or
 * unparseable, or a journal that does not belong to it, makes idempotent produce unavailable
 * (docs/decisions.md §9); other produces are unaffected.
 *
 * ```
 * { "version": 1,
 *   "journal_generation": G,
 *   "producers": [ { "producer_id", "epoch", "last_active_ms",
 *                    "partitions": [ { "topic", "partition", "next_sequence",
 *                                      "batches": [ { "base_sequence", "count",
 *                                                     "ranges": [ { "offset", "count",
 *                                                                   "fingerprint", "verified" } ] } ] } ] } ],
 *   "pending": [ journal entry, as in the journal: "timestamp_ms", "producer_id", "epoch", "topic",
 *                "partition", "base_sequence", "batch_count", "first_index", "count",
 *                "base_offset", "fingerprint" ] }
 * ```
 * Numbers are integers ≥ 0 (offsets and sequences up to 2^53 − 1, counts and fingerprints up to
 * 2^32 − 1); `pending` holds entries whose log write was in flight when the snapshot was taken,
 * replayed before the new journal at the next start.
 */
import { offsetMax, producerEpochMax } from "../../lib/limits.ts";
import { topicPartitionKey } from "../../lib/topic-partition.ts";
import type { ProducerJournalEntry } from "../../storage/producer-journal.ts";
import type { ProducerState, RememberedBatch } from "./sequence.ts";

/**
 * The snapshot object of the module grammar, built synchronously (so no request changes the
 * state half-way). A range is written as verified if it is, or if the partition's high watermark
 * now covers it.
 * @param state the producers, the journal entries whose log write is in flight (kept as
 *   `pending`, replayed at the next start), and each partition's high watermark (−1 for a
 *   partition that is missing or unavailable).
 */
export function buildSnapshot(
  generation: number,
  state: {
    producers: Iterable<ProducerState>;
    pending: readonly ProducerJournalEntry[];
    highWatermark: (topic: string, partition: number) => number;
  },
): unknown {
  const producers = [...state.producers].map((p) => ({
    producer_id: p.id,
    epoch: p.epoch,
    last_active_ms: p.lastActiveMs,
    partitions: [...p.partitions.values()].map((s) => {
      const highWatermark = state.highWatermark(s.topic, s.partition);
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
  const pending = state.pending.map(entryJson);
  return { version: 1, journal_generation: generation, producers, pending };
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

/** Parses `producers.json` (the module grammar). @throws Error naming the first problem. */
export function parseSnapshot(value: unknown): {
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
