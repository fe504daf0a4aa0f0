/**
 * Idempotent produce under a power loss at every step. A fixed workload (start, create a topic,
 * two idempotent producers and a plain one writing concurrently, with segment rolls) is run once
 * to count its mutations M; then, for every N in 1…M, the disk dies just before mutation N (that
 * mutation and every later one fail with EIO, as if the power went there), the machine crashes
 * (unsynced writes kept, dropped or torn by a seed, or all dropped), the broker starts again, and
 * each producer resends, with the same sequence numbers, every batch it has no answer for, until
 * it has one. Then every (producer, sequence) must be stored exactly once, every record
 * acknowledged before the crash must be at the offset it was acknowledged at, and a retry of the
 * last acknowledged batch must be answered as a duplicate with its original offsets.
 */
import { describe, expect, it } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import type { ProduceResult } from "../../src/broker/types.ts";
import { MemoryFileSystem, type CrashMode } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder, type EntryBatch } from "../../src/storage/record.ts";
import { fetchAll } from "../helpers/records.ts";

interface Sent {
  producer: string;
  partition: number;
  sequence: number;
  values: string[];
  /** The answer, once one came. */
  result: ProduceResult | null;
}

const producers = [
  { id: "alpha", partition: 0 },
  { id: "beta", partition: 1 },
];
const batchesPerProducer = 6;

function plan(): Sent[][] {
  return producers.map(({ id, partition }) => {
    const out: Sent[] = [];
    let sequence = 0;
    for (let b = 0; b < batchesPerProducer; b++) {
      const n = 1 + ((b * 7 + partition) % 3);
      const values = Array.from(
        { length: n },
        (_, i) => `${id}-s${sequence + i}-${"x".repeat(40 + ((b + i) % 5) * 13)}`,
      );
      out.push({ producer: id, partition, sequence, values, result: null });
      sequence += n;
    }
    return out;
  });
}

function batchOf(values: string[]): EntryBatch {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v));
  return b.build();
}

async function open(fs: FileSystem, logger = new MemoryLogger()): Promise<LocalBroker> {
  return LocalBroker.open({
    fs,
    dataDir: "/data",
    clock: new ManualClock(),
    logger,
    cleanupIntervalMs: 0,
  });
}

/**
 * The workload: start, create the topic, then the producers and a plain writer, concurrently.
 * A producer sends each batch up to `attempts` times (same sequence) while it gets errors; a batch
 * still without an answer ends that producer's run.
 */
async function workload(
  fs: FileSystem,
  batches: Sent[][],
  attempts = 1,
): Promise<LocalBroker | null> {
  let broker: LocalBroker;
  try {
    broker = await open(fs);
  } catch {
    return null;
  }
  try {
    await broker.createTopic({ name: "t", partitions: 2, config: { segment_bytes: 1024 } });
  } catch {
    return broker;
  }
  const plain = (async () => {
    for (let i = 0; i < 4; i++)
      await broker
        .produce({ topic: "t", partition: i % 2, batch: batchOf([`plain-${i}`]) })
        .catch(() => {});
  })();
  await Promise.all([
    plain,
    ...batches.map(async (list) => {
      for (const sent of list) {
        for (let attempt = 0; attempt < attempts && sent.result === null; attempt++) {
          try {
            sent.result = await broker.produce({
              topic: "t",
              partition: sent.partition,
              batch: batchOf(sent.values),
              producer: { id: sent.producer, epoch: 0, sequence: sent.sequence },
            });
          } catch (err) {
            if (!(err instanceof BrokerError)) throw err;
          }
        }
        if (sent.result === null) return; // this batch and the ones after it have no answer
      }
    }),
  ]);
  return broker;
}

async function storedValues(
  broker: LocalBroker,
  partition: number,
): Promise<Map<string, number[]>> {
  const seen = new Map<string, number[]>();
  const from = (await broker.listOffsets({ topic: "t", partition })).logStartOffset;
  for (const r of await fetchAll(broker, "t", from, { partition, maxRecords: 10_000 }))
    seen.set(r.value, [...(seen.get(r.value) ?? []), r.offset]);
  return seen;
}

function offsetsOf(result: ProduceResult): number[] {
  return result.spans.flatMap((s) => Array.from({ length: s.count }, (_, i) => s.baseOffset + i));
}

/** How the first run goes wrong at mutation N. */
type Fault =
  | { kind: "power_loss" }
  | { kind: "fail_one"; code: string; partialBytes?: number; dropDirtyData?: boolean };

async function runOne(
  n: number,
  fault: Fault,
  mode: CrashMode,
  seed: number,
  stats: { cutShort: number; duplicatesAfterCrash: number },
): Promise<void> {
  const mem = new MemoryFileSystem({ seed });
  const batches = plan();
  let first: LocalBroker | null;
  if (fault.kind === "power_loss") {
    first = await workload(new MemoryFileSystem({ disk: mem, powerCutAtMutation: n }), batches);
  } else {
    // Only mutation N fails; the producers retry, so the run goes on past it.
    mem.faults.failNth({
      n,
      code: fault.code,
      partialBytes: fault.partialBytes,
      dropDirtyData: fault.dropDirtyData,
    });
    first = await workload(mem, batches, 3);
  }
  await first?.close().catch(() => {});
  mem.crash({ mode, seed });
  const logger = new MemoryLogger();
  const broker = await open(mem, logger);
  try {
    stats.cutShort += logger.named("producers.batch_cut_short").length;
    // A crash tears only the journal's last write: never read as damage (docs/decisions.md §1).
    expect(logger.named("producers.journal_corrupt")).toEqual([]);
    const topicExists = (await broker.listTopics()).some((t) => t.name === "t");
    if (!topicExists) {
      // The power went before the topic was durable: nothing can have been acknowledged.
      expect(batches.flat().every((s) => s.result === null)).toBe(true);
      return;
    }
    const acked = new Map<string, ProduceResult>();
    for (const s of batches.flat())
      if (s.result !== null) acked.set(`${s.producer}/${s.sequence}`, s.result);
    // Each producer resends, in order, every batch it has no answer for.
    for (const list of batches) {
      // The last batch acknowledged before the crash is remembered, and answered with its offsets.
      const lastAcked = [...list].reverse().find((s) => acked.has(`${s.producer}/${s.sequence}`));
      if (lastAcked !== undefined) {
        const again = await broker.produce({
          topic: "t",
          partition: lastAcked.partition,
          batch: batchOf(lastAcked.values),
          producer: { id: lastAcked.producer, epoch: 0, sequence: lastAcked.sequence },
        });
        expect(again).toEqual({
          ...acked.get(`${lastAcked.producer}/${lastAcked.sequence}`)!,
          duplicate: true,
        });
      }
      for (const sent of list) {
        if (sent.result !== null) continue;
        const result = await broker.produce({
          topic: "t",
          partition: sent.partition,
          batch: batchOf(sent.values),
          producer: { id: sent.producer, epoch: 0, sequence: sent.sequence },
        });
        if (result.duplicate) stats.duplicatesAfterCrash++;
        sent.result = result;
      }
    }
    for (const { partition } of producers) {
      const seen = await storedValues(broker, partition);
      for (const sent of batches.flat().filter((s) => s.partition === partition)) {
        const offsets = offsetsOf(sent.result!);
        sent.values.forEach((v, i) => {
          expect(seen.get(v), `${v.slice(0, 14)} is stored exactly once`).toHaveLength(1);
          expect(seen.get(v)![0], `${v.slice(0, 14)} is where its answer says`).toBe(offsets[i]);
        });
        const before = acked.get(`${sent.producer}/${sent.sequence}`);
        if (before !== undefined) expect(offsetsOf(before)).toEqual(offsets);
      }
    }
  } finally {
    await broker.close();
  }
}

/** Fails a run that hangs (a lost wake-up is a bug too), naming it, instead of timing the whole test out. */
async function withDeadline<T>(run: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>(
    (_, reject) =>
      (timer = setTimeout(
        () => reject(new Error(`no progress within ${ms} ms (a request waits forever)`)),
        ms,
      )),
  );
  try {
    return await Promise.race([run, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

describe("idempotent produce under a power loss at every step", () => {
  it("stores every (producer, sequence) exactly once and keeps every acknowledged record where it was acknowledged", async () => {
    const probe = new MemoryFileSystem();
    const baseline = plan();
    const b = await workload(probe, baseline);
    await b?.close();
    expect(baseline.flat().every((s) => s.result !== null)).toBe(true);
    const mutations = probe.mutationCount;
    expect(mutations).toBeGreaterThan(50);
    const stats = { cutShort: 0, duplicatesAfterCrash: 0 };
    const modes: CrashMode[] = ["random", "dropAll", "keepAll"];
    for (let n = 1; n <= mutations + 1; n++) {
      for (const [m, mode] of modes.entries()) {
        const seed = n * 10 + m;
        try {
          await withDeadline(runOne(n, { kind: "power_loss" }, mode, seed, stats), 5_000);
        } catch (err) {
          throw new Error(
            `power lost before mutation ${n} of ${mutations}, ${mode} crash, seed ${seed}: ${err instanceof Error ? err.message : String(err)}`,
            { cause: err },
          );
        }
      }
    }
    // The sweep reached the interesting paths: records stored but unanswered (answered as
    // duplicates after the crash), and batches a torn write cut short (completed by their retry).
    expect(stats.duplicatesAfterCrash).toBeGreaterThan(0);
    expect(stats.cutShort).toBeGreaterThan(0);
    console.log(
      `producer power-loss sweep: ${mutations} mutations × ${modes.length} crash modes; batches cut short and completed: ${stats.cutShort}; duplicates answered after a crash: ${stats.duplicatesAfterCrash}`,
    );
  });

  it("stays exactly-once when one mutation fails (EIO, ENOSPC mid-write, a failed fsync) and the producers retry, then the power goes", async () => {
    const probe = new MemoryFileSystem();
    await (await workload(probe, plan()))?.close();
    const mutations = probe.mutationCount;
    const faults: Fault[] = [
      { kind: "fail_one", code: "EIO" },
      { kind: "fail_one", code: "ENOSPC", partialBytes: 30 },
      { kind: "fail_one", code: "EIO", dropDirtyData: false },
    ];
    const stats = { cutShort: 0, duplicatesAfterCrash: 0 };
    for (let n = 1; n <= mutations; n++) {
      for (const [f, fault] of faults.entries()) {
        const mode: CrashMode = (n + f) % 2 === 0 ? "random" : "dropAll";
        const seed = n * 10 + f;
        try {
          await withDeadline(runOne(n, fault, mode, seed, stats), 5_000);
        } catch (err) {
          throw new Error(
            `mutation ${n} of ${mutations} failed (${JSON.stringify(fault)}), then a ${mode} crash, seed ${seed}: ${err instanceof Error ? err.message : String(err)}`,
            { cause: err },
          );
        }
      }
    }
  });
});
