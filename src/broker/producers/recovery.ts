/**
 * Producer recovery: rebuilding the producer state at start from the snapshot and the journal
 * (`state.ts` reads them), and checking it against the recovered logs.
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
 * never touches the active segment. The partition says where that segment starts
 * (`PartitionLog.atRiskStartOffset`).
 */
import type { Logger } from "../../lib/logger.ts";
import { errorMessage } from "../../lib/errors.ts";
import { topicPartitionKey } from "../../lib/topic-partition.ts";
import type { ProducerJournalEntry } from "../../storage/producer-journal.ts";
import type { PartitionLog } from "../../storage/partition.ts";
import { DecodeStatus, RecordCursor } from "../../storage/record.ts";
import {
  chainNext,
  recordFingerprint,
  rememberBatch,
  sumRanges,
  type BatchRange,
  type ProducerState,
} from "./sequence.ts";

/** How the producer state reaches partitions: the log, or why there is none. */
export interface ProducerPartitions {
  get(topic: string, partition: number): PartitionLog | "missing" | "unavailable";
}

/**
 * Applies one journal entry (or one pending entry of the snapshot) to `producers`, in journal
 * order. Returns false if it was ignored (an older epoch, or a completion without its batch).
 */
export function replayEntry(
  producers: Map<string, ProducerState>,
  e: ProducerJournalEntry,
): boolean {
  let p = producers.get(e.producerId);
  if (p === undefined) {
    p = { id: e.producerId, epoch: e.epoch, lastActiveMs: e.timestampMs, partitions: new Map() };
    producers.set(p.id, p);
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
    const b = s?.batches.find((x) => x.baseSequence === e.baseSequence && x.count === e.batchCount);
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
  rememberBatch(s, { baseSequence: e.baseSequence, count: e.batchCount, ranges: [range] });
  s.nextSequence = e.baseSequence + e.batchCount;
  return true;
}

/**
 * Checks every range of `producers` not yet known durable against its recovered partition (the
 * module table), after the replay and before the first request: keeps it (verified), cuts it
 * short, or forgets it, and moves each partition's next sequence back to the first batch lost.
 * A partition that no longer exists loses its state; one that is unavailable keeps it unchecked.
 * A range whose read fails is kept unchecked and logged (`producers.verify_failed`).
 * @returns counts for the `recovery.producers` log line.
 */
export async function reconcile(
  producers: Map<string, ProducerState>,
  options: { partitions: ProducerPartitions; logger: Logger },
): Promise<Record<string, number>> {
  const counts = {
    ranges_checked: 0,
    ranges_kept: 0,
    ranges_forgotten: 0,
    ranges_stale: 0,
    batches_cut_short: 0,
    partitions_forgotten: 0,
    ranges_unchecked: 0,
  };
  for (const p of producers.values()) {
    for (const [key, s] of p.partitions) {
      const log = options.partitions.get(s.topic, s.partition);
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
      const atRiskStart = log.atRiskStartOffset;
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
            options.logger.log("error", "producers.verify_failed", {
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
            options.logger.log("warn", "producers.batch_cut_short", {
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

/** What the log holds of one range, by the module table. */
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
