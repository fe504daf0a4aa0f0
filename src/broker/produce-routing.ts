/**
 * Produce routing: which partition each record of a produce request goes to, and how the
 * per-partition appends become the answer's spans. Pure: no I/O, no clock, no state of its own
 * (the topic's round-robin position comes in and the next one goes out), so the rules below are
 * tested without a broker.
 *
 * A record's partition, first matching row (`ProduceRequest` in `broker/types.ts`):
 *
 * | per-record partition | request partition | key     | idempotent | partition                                   |
 * |----------------------|-------------------|---------|------------|---------------------------------------------|
 * | p ≥ 0                | any               | any     | any        | p                                           |
 * | −1 or none           | p ≥ 0             | any     | any        | p                                           |
 * | −1 or none           | −1 or none        | present | any        | murmur2(key) mod partitions (Kafka's)       |
 * | −1 or none           | −1 or none        | null    | yes        | murmur2(UTF-8 of the producer id) mod partitions: a retry lands where the original did |
 * | −1 or none           | −1 or none        | null    | no         | the topic's next round-robin partition, the same for every keyless record of the request |
 *
 * The caller checks every named partition before routing (all-or-nothing: nothing is appended
 * when one is wrong); routing asserts they are in range.
 */
import { assert } from "../lib/assert.ts";
import { utf8 } from "../lib/bytes.ts";
import { partitionForKey } from "../lib/murmur2.ts";
import { EntryCursor, type EntryBatch } from "../storage/record.ts";
import type { ProduceSpan } from "./types.ts";

/** Where a request's records go. */
export type Route =
  /** Every record to one partition: one append, one span. */
  | { kind: "single"; partition: number }
  /** Records to two or more partitions: `assignment[i]` is record i's partition. */
  | { kind: "spread"; assignment: Int32Array };

/** Options of {@link routeRecords}: the topic's shape and the request's partition fields. */
export interface RouteOptions {
  /** Partitions of the topic (≥ 1). */
  partitionCount: number;
  /** The request's partition for every record; −1 or undefined lets the broker pick. Checked by the caller. */
  partition?: number;
  /** Per-record partitions (length = records), −1 = broker picks; they take precedence. Checked by the caller. */
  partitions?: Int32Array;
  /** The idempotent producer's id, whose hash places keyless records; undefined for plain produce. */
  producerId?: string;
  /** The topic's round-robin position for keyless records (any integer ≥ 0). */
  roundRobin: number;
}

/**
 * Routes every record of `batch` by the module table.
 * @returns the route and the topic's next round-robin position (moved on by one if a keyless
 *   record took the round-robin partition, else unchanged).
 */
export function routeRecords(
  batch: EntryBatch,
  options: RouteOptions,
): { route: Route; roundRobin: number } {
  const n = options.partitionCount;
  assert(Number.isInteger(n) && n >= 1, "a topic has at least one partition");
  const fixed = options.partition ?? -1;
  const perRecord = options.partitions;
  let roundRobin = options.roundRobin;
  if (perRecord === undefined && fixed !== -1) {
    assert(fixed >= 0 && fixed < n, "the request's partition was checked");
    return { route: { kind: "single", partition: fixed }, roundRobin };
  }
  assert(perRecord === undefined || perRecord.length === batch.count, "one partition per record");
  const assignment = new Int32Array(batch.count);
  const cursor = new EntryCursor(batch);
  let keyless = -1;
  let first = -1;
  let same = true;
  while (cursor.next()) {
    const i = cursor.index;
    let p = perRecord !== undefined ? perRecord[i] : -1;
    if (p === -1) p = fixed;
    if (p === -1) {
      const key = cursor.key();
      if (key !== null) p = partitionForKey(key, n);
      else {
        if (keyless === -1 && options.producerId !== undefined) {
          keyless = partitionForKey(utf8(options.producerId), n);
        } else if (keyless === -1) {
          keyless = roundRobin % n;
          roundRobin = (roundRobin + 1) % n;
        }
        p = keyless;
      }
    }
    assert(p >= 0 && p < n, "every named partition was checked");
    assignment[i] = p;
    if (first === -1) first = p;
    else if (p !== first) same = false;
  }
  if (same && first !== -1) return { route: { kind: "single", partition: first }, roundRobin };
  return { route: { kind: "spread", assignment }, roundRobin };
}

/**
 * Copies each record's entry bytes into one batch per partition, records in request order.
 * @returns one entry per partition (`partitionCount` of them): its batch, or null where it gets none.
 */
export function splitByPartition(
  batch: EntryBatch,
  assignment: Int32Array,
  partitionCount: number,
): (EntryBatch | null)[] {
  const sizes = new Array<number>(partitionCount).fill(0);
  const counts = new Array<number>(partitionCount).fill(0);
  const cursor = new EntryCursor(batch);
  while (cursor.next()) {
    sizes[assignment[cursor.index]] += cursor.end - cursor.start;
    counts[assignment[cursor.index]]++;
  }
  const buffers = sizes.map((s, p) => (counts[p] > 0 ? new Uint8Array(s) : null));
  const used = new Array<number>(partitionCount).fill(0);
  const again = new EntryCursor(batch);
  while (again.next()) {
    const p = assignment[again.index];
    const buf = buffers[p];
    if (buf === null) continue;
    buf.set(batch.bytes.subarray(again.start, again.end), used[p]);
    used[p] += again.end - again.start;
  }
  return buffers.map((bytes, p) =>
    counts[p] === 0 || bytes === null ? null : { bytes, count: counts[p] },
  );
}

/**
 * The spans of a spread produce, in request order: consecutive records of one partition at
 * consecutive offsets merge into one span.
 * @param assignment record i's partition, as routed.
 * @param baseOffsets per partition, the first offset its append was given (unused where it got no records).
 */
export function spansInRequestOrder(
  assignment: Int32Array,
  baseOffsets: readonly number[],
): ProduceSpan[] {
  const nextOffset = [...baseOffsets];
  const spans: ProduceSpan[] = [];
  for (let i = 0; i < assignment.length; i++) {
    const p = assignment[i];
    const offset = nextOffset[p]++;
    const last = spans.at(-1);
    if (last !== undefined && last.partition === p && last.baseOffset + last.count === offset)
      last.count++;
    else spans.push({ partition: p, baseOffset: offset, count: 1 });
  }
  return spans;
}
