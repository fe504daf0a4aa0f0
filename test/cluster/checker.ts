/**
 * The queue checker of the Jepsen-style run (issue #16): judges a {@link History} for the anomalies
 * Jepsen's Kafka/queue checker names. Pure: it reads the history, never the system.
 *
 * Terms. The *version order* of a partition is offset → value as observed anywhere (acks, polls,
 * final reads). A value is *acknowledged* when its send completed `ok`. The *final read* of a
 * partition is everything it holds after the faults healed (`final-read` ops; several of one
 * partition, e.g. one per replica, are each judged).
 *
 * | anomaly | what it means |
 * | --- | --- |
 * | `lostWrite` | an acknowledged value is missing from a final read that holds something at a higher offset than its ack |
 * | `unseen` | an acknowledged value is missing from a final read that ends at or below its acknowledged offset (the partition got shorter than an ack), or its partition was never read at the end |
 * | `pollSkip` | a consumer's consecutive reads of a partition within one session jumped over offsets that hold values; or a consumer (a group, taken together) never read a value below the highest offset it read |
 * | `nonMonotonicPoll` | within one session, a consumer read an offset at or below one it read before; or a group member's new session first read a partition below a commit of its group acknowledged before that session began (the completion of the member's last op in its previous session: a committed offset went backwards) |
 * | `nonMonotonicSend` | a producer process's acknowledged offsets in a partition did not increase in the order of its sends |
 * | `duplicate` | one value at two offsets (for plain producers too, unless `plainDuplicatesAllowed`: the workload never resends a value) |
 * | `inconsistentOffsets` | one offset of a partition holds two different values (across acks, polls, final reads, replicas) |
 * | `vanishedRead` | a consumer read a value that was never acknowledged, and no final read holds it |
 * | `phantomRead` | a value was read that no send of that partition carried, or whose send definitely failed |
 */
import type { HistoryRecord, Op } from "./history.ts";

/** The anomalies the checker reports, in report order. */
export const anomalyKinds = [
  "lostWrite",
  "unseen",
  "pollSkip",
  "nonMonotonicPoll",
  "nonMonotonicSend",
  "duplicate",
  "inconsistentOffsets",
  "vanishedRead",
  "phantomRead",
] as const;

/** One of {@link anomalyKinds}. */
export type AnomalyKind = (typeof anomalyKinds)[number];

/** One anomaly found: where, which history entries show it, and a sentence saying what is wrong. */
export interface Anomaly {
  topic: string;
  partition: number;
  /** The offset(s) concerned, when there are some. */
  offsets?: number[];
  /** The value(s) concerned. */
  values?: string[];
  process?: string;
  /** Indexes of the history entries that show it. */
  ops: number[];
  message: string;
}

/** Counts over the history, for the report. */
export interface HistoryStats {
  sends: { ok: number; fail: number; info: number; outstanding: number };
  /** Values acknowledged. */
  acknowledged: number;
  /** Values sent without an acknowledgement (`info` or outstanding) that a final read holds anyway. */
  unacknowledgedPresent: number;
  /** Distinct values read by consumers during the run. */
  polled: number;
  /** Records in final reads (per partition, the largest of its reads). */
  finalRecords: number;
  /** Values stored twice by plain producers, when allowed. */
  plainDuplicates: number;
}

/** What {@link checkHistory} found. */
export interface CheckResult {
  /** True when no anomaly of any kind was found. */
  valid: boolean;
  anomalies: Record<AnomalyKind, Anomaly[]>;
  stats: HistoryStats;
}

/** Options of {@link checkHistory}. */
export interface CheckOptions {
  /** Plain producers may store a value twice (their client resends ambiguous sends); default false. */
  plainDuplicatesAllowed?: boolean;
}

interface SendInfo {
  value: string;
  topic: string;
  partition: number;
  process: string;
  idempotent: boolean;
  invoke: number;
  /** Completion type, or undefined while outstanding. */
  outcome: "ok" | "fail" | "info" | undefined;
  completion?: number;
  ackOffset?: number;
}

interface Observation {
  offset: number;
  value: string;
  op: number;
  /** Where it was seen. */
  via: "ack" | "poll" | "final";
}

const tpKey = (topic: string, partition: number) => `${topic}\u0000${partition}`;
const tpOf = (key: string) => {
  const i = key.lastIndexOf("\u0000");
  return { topic: key.slice(0, i), partition: Number(key.slice(i + 1)) };
};
const tpName = (topic: string, partition: number) => `"${topic}/${partition}"`;

function getOrSet<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let v = map.get(key);
  if (v === undefined) map.set(key, (v = make()));
  return v;
}

/** First index in sorted `xs` whose element is greater than `x`. */
function upperBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid] <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function offsetOf(r: HistoryRecord, op: Op): number {
  if (r.offset === undefined || !Number.isSafeInteger(r.offset) || r.offset < 0) {
    throw new Error(
      `History entry ${op.index} (${op.f} ${op.type} of "${op.process}") has a record without a valid offset: ${JSON.stringify(r)}`,
    );
  }
  return r.offset;
}

/**
 * Checks a history for every anomaly of {@link anomalyKinds}.
 * @throws Error if the history breaks its own rules (a value sent twice, a completion without an
 *   invoke, a read record without an offset): those are workload bugs, not system anomalies.
 */
export function checkHistory(ops: readonly Op[], options: CheckOptions = {}): CheckResult {
  const anomalies = Object.fromEntries(anomalyKinds.map((k) => [k, [] as Anomaly[]])) as Record<
    AnomalyKind,
    Anomaly[]
  >;
  const stats: HistoryStats = {
    sends: { ok: 0, fail: 0, info: 0, outstanding: 0 },
    acknowledged: 0,
    unacknowledgedPresent: 0,
    polled: 0,
    finalRecords: 0,
    plainDuplicates: 0,
  };

  // Sends, by value.
  const sends = new Map<string, SendInfo>();
  const openSends = new Map<string, SendInfo[]>();
  for (const op of ops) {
    if (op.f !== "send") continue;
    if (op.type === "invoke") {
      const batch: SendInfo[] = [];
      for (const r of op.records) {
        if (sends.has(r.value)) {
          throw new Error(
            `History entry ${op.index} sends value "${r.value}" again (first sent by entry ${sends.get(r.value)!.invoke}): values must be unique over a run`,
          );
        }
        const info: SendInfo = {
          value: r.value,
          topic: r.topic,
          partition: r.partition,
          process: op.process,
          idempotent: op.idempotent === true,
          invoke: op.index,
          outcome: undefined,
        };
        sends.set(r.value, info);
        batch.push(info);
      }
      openSends.set(op.process, batch);
      continue;
    }
    const batch = openSends.get(op.process);
    if (batch === undefined) {
      throw new Error(
        `History entry ${op.index} completes a send that "${op.process}" never invoked`,
      );
    }
    openSends.delete(op.process);
    stats.sends[op.type]++;
    for (const s of batch) {
      s.outcome = op.type;
      s.completion = op.index;
    }
    if (op.type === "ok") {
      for (const r of op.records) {
        const s = sends.get(r.value);
        if (s === undefined || !batch.includes(s)) {
          throw new Error(
            `History entry ${op.index} acknowledges value "${r.value}" that its invoke did not send`,
          );
        }
        s.ackOffset = offsetOf(r, op);
      }
      stats.acknowledged += batch.length;
    }
  }
  for (const batch of openSends.values()) if (batch.length > 0) stats.sends.outstanding++;

  // Every observation, per partition.
  const observations = new Map<string, Observation[]>();
  for (const s of sends.values()) {
    if (s.ackOffset === undefined) continue;
    getOrSet(observations, tpKey(s.topic, s.partition), () => []).push({
      offset: s.ackOffset,
      value: s.value,
      op: s.completion!,
      via: "ack",
    });
  }
  const finals = new Map<string, Op[]>();
  const polledValues = new Map<string, { tp: string; op: number }>();
  for (const op of ops) {
    if (op.type !== "ok" || (op.f !== "poll" && op.f !== "final-read")) continue;
    for (const r of op.records) {
      const key = tpKey(r.topic, r.partition);
      getOrSet(observations, key, () => []).push({
        offset: offsetOf(r, op),
        value: r.value,
        op: op.index,
        via: op.f === "poll" ? "poll" : "final",
      });
      if (op.f === "poll" && !polledValues.has(r.value))
        polledValues.set(r.value, { tp: key, op: op.index });
    }
    if (op.f === "final-read") {
      if (op.topic === undefined || op.partition === undefined)
        throw new Error(`History entry ${op.index} is a final read without its partition`);
      const key = tpKey(op.topic, op.partition);
      for (const r of op.records) {
        if (tpKey(r.topic, r.partition) !== key)
          throw new Error(
            `History entry ${op.index}, the final read of ${tpName(op.topic, op.partition)}, holds a record of ${tpName(r.topic, r.partition)}`,
          );
      }
      getOrSet(finals, key, () => []).push(op);
    }
  }
  stats.polled = polledValues.size;

  // inconsistentOffsets and duplicate, from the version order.
  const known = new Map<string, number[]>(); // sorted offsets holding some value, per partition
  for (const [key, obs] of observations) {
    const { topic, partition } = tpOf(key);
    const byOffset = new Map<number, Map<string, number[]>>();
    const byValue = new Map<string, Map<number, number[]>>();
    for (const o of obs) {
      getOrSet(
        getOrSet(byOffset, o.offset, () => new Map()),
        o.value,
        () => [],
      ).push(o.op);
      getOrSet(
        getOrSet(byValue, o.value, () => new Map()),
        o.offset,
        () => [],
      ).push(o.op);
    }
    for (const [offset, values] of byOffset) {
      if (values.size > 1) {
        anomalies.inconsistentOffsets.push({
          topic,
          partition,
          offsets: [offset],
          values: [...values.keys()],
          ops: [...values.values()].flat(),
          message: `Offset ${offset} of ${tpName(topic, partition)} holds ${values.size} different values: ${[...values.keys()].map((v) => `"${v}"`).join(", ")}`,
        });
      }
    }
    for (const [value, offsets] of byValue) {
      if (offsets.size < 2) continue;
      const s = sends.get(value);
      if (s !== undefined && !s.idempotent && options.plainDuplicatesAllowed) {
        stats.plainDuplicates++;
        continue;
      }
      anomalies.duplicate.push({
        topic,
        partition,
        offsets: [...offsets.keys()].sort((a, b) => a - b),
        values: [value],
        ...(s === undefined ? {} : { process: s.process }),
        ops: [...offsets.values()].flat(),
        message: `Value "${value}"${s?.idempotent ? " of an idempotent producer" : ""} is at ${offsets.size} offsets of ${tpName(topic, partition)}: ${[...offsets.keys()].sort((a, b) => a - b).join(", ")}`,
      });
    }
    known.set(
      key,
      [...byOffset.keys()].sort((a, b) => a - b),
    );
  }

  // phantomRead: a read value no send of that partition carried, or whose send failed.
  for (const [key, obs] of observations) {
    const { topic, partition } = tpOf(key);
    const reported = new Set<string>();
    for (const o of obs) {
      if (o.via === "ack" || reported.has(o.value)) continue;
      const s = sends.get(o.value);
      let why: string | undefined;
      if (s === undefined) why = "no process ever sent it";
      else if (tpKey(s.topic, s.partition) !== key)
        why = `it was sent to ${tpName(s.topic, s.partition)}`;
      else if (s.outcome === "fail") why = `its send (entry ${s.completion}) definitely failed`;
      if (why === undefined) continue;
      reported.add(o.value);
      anomalies.phantomRead.push({
        topic,
        partition,
        offsets: [o.offset],
        values: [o.value],
        ops: [o.op],
        message: `Value "${o.value}" was read at offset ${o.offset} of ${tpName(topic, partition)}, but ${why}`,
      });
    }
  }

  // lostWrite and unseen: every acknowledged value against every final read of its partition.
  const finalValues = new Map<string, Set<string>>(); // union over the final reads of a partition
  for (const [key, reads] of finals) {
    const union = getOrSet(finalValues, key, () => new Set());
    let largest = 0;
    for (const op of reads) {
      for (const r of op.records) union.add(r.value);
      largest = Math.max(largest, op.records.length);
    }
    stats.finalRecords += largest;
  }
  const finalShape = new Map<Op, { values: Set<string>; maxOffset: number }>();
  const shapeOf = (op: Op) =>
    getOrSet(finalShape, op, () => ({
      values: new Set(op.records.map((r) => r.value)),
      maxOffset: op.records.reduce((m, r) => Math.max(m, offsetOf(r, op)), -1),
    }));
  for (const s of sends.values()) {
    const key = tpKey(s.topic, s.partition);
    if (s.outcome !== "ok") {
      if (s.outcome !== "fail" && finalValues.get(key)?.has(s.value)) stats.unacknowledgedPresent++;
      continue;
    }
    const reads = finals.get(key);
    if (reads === undefined) {
      anomalies.unseen.push({
        topic: s.topic,
        partition: s.partition,
        offsets: [s.ackOffset!],
        values: [s.value],
        process: s.process,
        ops: [s.completion!],
        message: `Value "${s.value}" was acknowledged at offset ${s.ackOffset} of ${tpName(s.topic, s.partition)}, but that partition was never read at the end`,
      });
      continue;
    }
    for (const op of reads) {
      const shape = shapeOf(op);
      if (shape.values.has(s.value)) continue;
      const lost = shape.maxOffset > s.ackOffset!;
      const where = op.node === undefined ? "the final read" : `the final read of node ${op.node}`;
      (lost ? anomalies.lostWrite : anomalies.unseen).push({
        topic: s.topic,
        partition: s.partition,
        offsets: [s.ackOffset!],
        values: [s.value],
        process: s.process,
        ops: [s.completion!, op.index],
        message: lost
          ? `Value "${s.value}" was acknowledged at offset ${s.ackOffset} of ${tpName(s.topic, s.partition)} but is missing from ${where}, which reaches offset ${shape.maxOffset}`
          : `Value "${s.value}" was acknowledged at offset ${s.ackOffset} of ${tpName(s.topic, s.partition)} but ${where} ${shape.maxOffset < 0 ? "holds nothing" : `ends at offset ${shape.maxOffset}`}`,
      });
    }
  }

  // vanishedRead: read during the run, never acknowledged, in no final read.
  for (const [value, seen] of polledValues) {
    const s = sends.get(value);
    if (s === undefined || s.outcome === "ok" || s.outcome === "fail") continue; // phantom / lost cover these
    if (finalValues.get(seen.tp)?.has(value)) continue;
    const { topic, partition } = tpOf(seen.tp);
    anomalies.vanishedRead.push({
      topic,
      partition,
      values: [value],
      process: s.process,
      ops: [seen.op],
      message: `Value "${value}" (send ${s.outcome === undefined ? "outstanding" : "indeterminate"}, entry ${s.invoke}) was read during the run (entry ${seen.op}) but no final read of ${tpName(topic, partition)} holds it`,
    });
  }

  // nonMonotonicSend: per producer process and partition, acknowledged offsets in send order.
  const lastSent = new Map<string, { offset: number; op: number }>();
  for (const op of ops) {
    if (op.f !== "send" || op.type !== "ok") continue;
    for (const r of op.records) {
      const offset = offsetOf(r, op);
      const k = `${op.process}\u0000${tpKey(r.topic, r.partition)}`;
      const prev = lastSent.get(k);
      if (prev !== undefined && offset <= prev.offset) {
        anomalies.nonMonotonicSend.push({
          topic: r.topic,
          partition: r.partition,
          offsets: [prev.offset, offset],
          values: [r.value],
          process: op.process,
          ops: [prev.op, op.index],
          message: `Process "${op.process}" was acknowledged offset ${offset} of ${tpName(r.topic, r.partition)} after offset ${prev.offset}`,
        });
      }
      lastSent.set(k, { offset, op: op.index });
    }
  }

  // pollSkip and nonMonotonicPoll within sessions, then pollSkip over each reader as a whole.
  const lastRead = new Map<string, { offset: number; op: number }>();
  const readBy = new Map<string, Set<number>>(); // reader + partition -> offsets read
  const maxReadBy = new Map<string, number>();
  const skipped = new Set<string>(); // reader + partition + offset already reported
  // A group's highest acknowledged commit per partition, and what it was when each member's
  // session began: a new session starts at the group's committed offset, which an acknowledged
  // commit has already moved up (a member's position is set when it joins, and a commit of an
  // older generation is refused once a newer one exists). The join happens inside an op (a poll,
  // or a commit that rejoins) or between ops (a new incarnation), so a session is known to have
  // begun only after the last op that reported the one before it: the floor of a new session is
  // the group's commits when that op completed (for a process's first session, when its first
  // op was invoked). A commit acknowledged later, while the new session was already reading,
  // does not bind it (a member of an older generation may read until it learns of the newer).
  const groupCommitted = new Map<string, { offset: number; op: number }>(); // group + partition
  const lastSession = new Map<string, string>(); // process -> session its last op reported
  const floorAtLastReport = new Map<string, Map<string, { offset: number; op: number }>>();
  const sessionFloor = new Map<string, Map<string, { offset: number; op: number }>>(); // process
  const noteSession = (op: Op) => {
    if (op.group === undefined || op.session === undefined || op.type !== "ok") return;
    if (lastSession.get(op.process) !== op.session) {
      const floor = floorAtLastReport.get(op.process);
      if (floor !== undefined) sessionFloor.set(op.process, floor);
      lastSession.set(op.process, op.session);
    }
    floorAtLastReport.set(op.process, new Map(groupCommitted));
  };
  for (const op of ops) {
    if (op.f === "commit" && op.type === "ok" && op.group !== undefined) {
      for (const r of op.records) {
        const k = `${op.group}\u0000${tpKey(r.topic, r.partition)}`;
        const offset = offsetOf(r, op);
        if (offset > (groupCommitted.get(k)?.offset ?? -1))
          groupCommitted.set(k, { offset, op: op.index });
      }
      noteSession(op);
      continue;
    }
    if (op.f === "poll" && op.type === "invoke" && op.group !== undefined) {
      if (!floorAtLastReport.has(op.process))
        floorAtLastReport.set(op.process, new Map(groupCommitted));
      continue;
    }
    if (op.f === "poll" && op.type === "ok") noteSession(op);
    if (op.f !== "poll" || op.type !== "ok") continue;
    const reader = op.group === undefined ? `process ${op.process}` : `group ${op.group}`;
    const floors = sessionFloor.get(op.process);
    for (const r of op.records) {
      const offset = offsetOf(r, op);
      const key = tpKey(r.topic, r.partition);
      const readerKey = `${reader}\u0000${key}`;
      getOrSet(readBy, readerKey, () => new Set()).add(offset);
      maxReadBy.set(readerKey, Math.max(maxReadBy.get(readerKey) ?? -1, offset));
      const sessionKey = `${op.process}\u0000${op.session ?? ""}\u0000${key}`;
      const prev = lastRead.get(sessionKey);
      lastRead.set(sessionKey, { offset, op: op.index });
      if (prev === undefined) {
        const floor = op.group === undefined ? undefined : floors?.get(`${op.group}\u0000${key}`);
        if (floor !== undefined && offset < floor.offset)
          anomalies.nonMonotonicPoll.push({
            topic: r.topic,
            partition: r.partition,
            offsets: [floor.offset, offset],
            process: op.process,
            ops: [floor.op, op.index],
            message: `Process "${op.process}"${op.session === undefined ? "" : ` (session ${op.session})`} of group ${op.group} began reading ${tpName(r.topic, r.partition)} at offset ${offset}, below offset ${floor.offset} the group had committed (acknowledged, entry ${floor.op}) before that session began: a committed offset went backwards`,
          });
        continue;
      }
      if (offset <= prev.offset) {
        anomalies.nonMonotonicPoll.push({
          topic: r.topic,
          partition: r.partition,
          offsets: [prev.offset, offset],
          process: op.process,
          ops: [prev.op, op.index],
          message: `Process "${op.process}"${op.session === undefined ? "" : ` (session ${op.session})`} read offset ${offset} of ${tpName(r.topic, r.partition)} after offset ${prev.offset}`,
        });
        continue;
      }
      const offsets = known.get(key)!;
      const between: number[] = [];
      for (let i = upperBound(offsets, prev.offset); i < offsets.length && offsets[i] < offset; i++)
        between.push(offsets[i]);
      if (between.length === 0) continue;
      for (const o of between) skipped.add(`${readerKey}\u0000${o}`);
      anomalies.pollSkip.push({
        topic: r.topic,
        partition: r.partition,
        offsets: [prev.offset, offset],
        process: op.process,
        ops: [prev.op, op.index],
        message: `Process "${op.process}"${op.session === undefined ? "" : ` (session ${op.session})`} read offset ${offset} of ${tpName(r.topic, r.partition)} right after offset ${prev.offset}, skipping ${between.length} record(s) at ${between.slice(0, 5).join(", ")}${between.length > 5 ? ", …" : ""}`,
      });
    }
  }
  for (const [readerKey, maxOffset] of maxReadBy) {
    const key = readerKey.slice(readerKey.indexOf("\u0000") + 1);
    const reader = readerKey.slice(0, readerKey.indexOf("\u0000"));
    const { topic, partition } = tpOf(key);
    const read = readBy.get(readerKey)!;
    const missing: number[] = [];
    for (const o of known.get(key) ?? []) {
      if (o >= maxOffset) break;
      if (!read.has(o) && !skipped.has(`${readerKey}\u0000${o}`)) missing.push(o);
    }
    if (missing.length === 0) continue;
    anomalies.pollSkip.push({
      topic,
      partition,
      offsets: missing,
      ops: [],
      message: `${reader[0].toUpperCase()}${reader.slice(1)} read ${tpName(topic, partition)} up to offset ${maxOffset} but never read ${missing.length} record(s) below it, at ${missing.slice(0, 5).join(", ")}${missing.length > 5 ? ", …" : ""}`,
    });
  }

  const valid = anomalyKinds.every((k) => anomalies[k].length === 0);
  return { valid, anomalies, stats };
}

/**
 * A report of a check: one line per anomaly kind with its count, then up to `examples` messages
 * of each kind found, then the counts of the history.
 */
export function formatCheckResult(
  result: CheckResult,
  options: { examples?: number } = {},
): string {
  const examples = options.examples ?? 5;
  const lines = [
    `checker: ${result.valid ? "valid, no anomaly" : "INVALID"}`,
    ...anomalyKinds.map((k) => `  ${k.padEnd(20)} ${result.anomalies[k].length}`),
  ];
  for (const k of anomalyKinds) {
    for (const a of result.anomalies[k].slice(0, examples)) lines.push(`  [${k}] ${a.message}`);
  }
  const s = result.stats;
  lines.push(
    `  sends: ${s.sends.ok} ok, ${s.sends.info} indeterminate, ${s.sends.fail} failed, ${s.sends.outstanding} outstanding; ` +
      `${s.acknowledged} values acknowledged, ${s.unacknowledgedPresent} unacknowledged but stored; ` +
      `${s.polled} values polled; ${s.finalRecords} records in final reads` +
      (s.plainDuplicates > 0 ? `; ${s.plainDuplicates} plain-producer duplicates (allowed)` : ""),
  );
  return lines.join("\n");
}
