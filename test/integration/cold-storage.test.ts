import { describe, expect, it } from "vitest";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { bytesEqual, fromUtf8 } from "../../src/lib/bytes.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  ManualClock,
  MemoryFileSystem,
  fetchAll,
  openBroker,
  produce,
  rejectionCode,
  type Rec,
} from "../helpers/compaction-fixtures.ts";

const localDir = "/data/topics/t/0";
const coldDir = "/cold/topics/t/0";
const stem = (base: number) => String(base).padStart(20, "0");

function records(n: number, tag: string): Rec[] {
  return Array.from({ length: n }, (_, i) => ({
    key: `${tag}${i % 3}`,
    value: `${tag}-${i}-${"c".repeat(80)}`,
  }));
}

function partitionState(broker: LocalBroker) {
  const p = broker.describeStorage().topics.find((t) => t.name === "t")!.partitions[0];
  return {
    bases: p.segments.map((s) => s.base_offset),
    cleanup: p.cleanup!,
    logStartOffset: p.log_start_offset,
  };
}

async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 10_000 && !done(); i++) await new Promise((resolve) => setImmediate(resolve));
  expect(done()).toBe(true);
}

/** A broker with a cold tier and three sealed segments (0, 5, 10) plus an active one (15) that retention wants gone. */
async function withColdTier(
  extra: { cleanupIntervalMs?: number; config?: Record<string, unknown> } = {},
) {
  const fs = new MemoryFileSystem();
  const clock = new ManualClock();
  const { broker, logger } = await openBroker(fs, clock, {
    coldStorageDir: "/cold",
    cleanupIntervalMs: extra.cleanupIntervalMs ?? 0,
  });
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { segment_ms: 1000, ...extra.config },
  });
  for (const tag of ["a", "b", "c"]) {
    await produce(broker, "t", records(5, tag));
    clock.advance(1000);
  }
  await produce(broker, "t", records(1, "d"));
  const original = await fetchAll(broker, "t", 0);
  const localFiles = new Map<string, Uint8Array>();
  for (const base of [0, 5, 10]) {
    for (const ext of ["log", "index"])
      localFiles.set(`${stem(base)}.${ext}`, fs.readFileSync(`${localDir}/${stem(base)}.${ext}`));
  }
  return { fs, clock, broker, logger, original, localFiles };
}

describe("cold storage", () => {
  it("keeps all local data while the cold directory is unwritable, retries with backoff, then offloads byte-identical copies that fetches still read", async () => {
    const { fs, clock, broker, logger, original, localFiles } = await withColdTier({
      cleanupIntervalMs: 400,
    });
    fs.faults.failNext({ op: "mkdir", path: /^\/cold/, code: "EACCES", times: Infinity });
    fs.faults.failNext({ op: "create", path: /^\/cold/, code: "EACCES", times: Infinity });
    await broker.updateTopicConfig("t", { retention_bytes: 1 });

    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      status: "offload_failed",
      segments_deleted: 0,
      segments_offloaded: 0,
    });
    expect(run.retention.offload_error).toMatch(/EACCES/);
    expect(partitionState(broker).bases).toEqual([0, 5, 10, 15]);
    expect(partitionState(broker).cleanup).toMatchObject({
      cold_offload_failures: 1,
      cold_offload_retry_at_ms: clock.nowMs() + 1000,
    });
    const kept = await fetchAll(broker, "t", 0);
    expect(kept.map((r) => r.offset)).toEqual(original.map((r) => r.offset));

    // A background visit inside the backoff copies nothing; the first one after it tries again.
    const visits = () => logger.named("retention.pass").length;
    let seen = visits();
    clock.advance(400);
    await until(() => visits() > seen);
    expect(partitionState(broker).cleanup.last_retention).toMatchObject({
      status: "nothing_to_do",
      reason: "copies to the cold tier are backing off after a failure",
    });
    seen = visits();
    clock.advance(600);
    await until(() => visits() > seen);
    expect(partitionState(broker).cleanup).toMatchObject({
      cold_offload_failures: 2,
      cold_offload_retry_at_ms: clock.nowMs() + 2000,
    });
    expect(logger.named("cold.offload_backoff").map((f) => f.retry_in_ms)).toEqual([1000, 2000]);
    expect(partitionState(broker).bases).toEqual([0, 5, 10, 15]);

    // The directory becomes writable: the next attempt after the backoff moves everything.
    fs.faults.clear();
    seen = visits();
    clock.advance(2000);
    await until(
      () =>
        visits() > seen &&
        partitionState(broker).cleanup.last_retention!.status !== "nothing_to_do",
    );
    expect(partitionState(broker).cleanup.last_retention).toMatchObject({
      status: "ok",
      segments_offloaded: 3,
      segments_deleted: 3,
    });
    expect(partitionState(broker).cleanup.cold_offload_failures).toBe(0);
    expect(partitionState(broker).bases).toEqual([15]);
    expect(fs.listTree(coldDir)).toEqual(
      [0, 5, 10].flatMap((b) => [`${coldDir}/${stem(b)}.index`, `${coldDir}/${stem(b)}.log`]),
    );
    for (const [name, bytes] of localFiles)
      expect(bytesEqual(fs.readFileSync(`${coldDir}/${name}`), bytes), name).toBe(true);
    for (const name of localFiles.keys())
      expect(fs.listTree(localDir)).not.toContain(`${localDir}/${name}`);

    // The log still starts at 0; fetches of offloaded offsets come from the cold tier, intact.
    expect(await broker.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 16,
    });
    const read = await fetchAll(broker, "t", 0, 3);
    expect(read.map((r) => r.offset)).toEqual(original.map((r) => r.offset));
    for (let i = 0; i < read.length; i++)
      expect(bytesEqual(read[i].bytes, original[i].bytes)).toBe(true);
    expect((await fetchAll(broker, "t", 7)).map((r) => r.offset)).toEqual([
      7, 8, 9, 10, 11, 12, 13, 14, 15,
    ]);
    await broker.close();
  });

  it("serves offloaded offsets after a restart, and the cold tier's own retention moves the log start offset", async () => {
    const { fs, clock, broker, original } = await withColdTier({ config: { retention_bytes: 1 } });
    await broker.cleanup("t");
    await broker.close();
    fs.crash({ mode: "dropAll" });
    const { broker: again } = await openBroker(fs, clock, { coldStorageDir: "/cold" });
    expect(await again.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 16,
    });
    const read = await fetchAll(again, "t", 0);
    expect(read.map((r) => r.offset)).toEqual(original.map((r) => r.offset));

    // Cold segments' newest records are at T, T+1000, T+2000; now T+3000.
    await again.updateTopicConfig("t", { cold_retention_ms: 1500 });
    const [run] = (await again.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      cold_segments_deleted: 2,
      log_start_offset_before: 0,
      log_start_offset_after: 10,
    });
    expect(fs.listTree(coldDir)).toEqual([
      `${coldDir}/${stem(10)}.index`,
      `${coldDir}/${stem(10)}.log`,
    ]);
    expect(JSON.parse(fromUtf8(fs.readFileSync("/data/topics/t/log_start_offsets.json")))).toEqual({
      version: 1,
      partitions: { "0": 10 },
    });
    expect(await rejectionCode(again.fetch({ topic: "t", partition: 0, offset: 9 }))).toBe(
      "offset_out_of_range",
    );
    expect((await fetchAll(again, "t", 10)).map((r) => r.offset)).toEqual([10, 11, 12, 13, 14, 15]);
    expect(again.describeStorage().topics[0].partitions[0].cleanup!.cold).toMatchObject({
      segments: 1,
      first_offset: 10,
    });
    await again.close();
  });

  it("judges a copy by the newest record of the whole segment, also for a segment trusted at start", async () => {
    // Producer timestamps need not rise with offsets: here the segment's newest record is its
    // first, and every record after its last index entry is older. A segment trusted at start
    // knows only that tail's newest timestamp; the copy must carry the whole segment's.
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const t0 = clock.nowMs();
    const { broker } = await openBroker(fs, clock, { coldStorageDir: "/cold" });
    await broker.createTopic({ name: "t", partitions: 1, config: { segment_ms: 1000 } });
    const newest = t0 + 60_000;
    const batch: Rec[] = [{ key: null, value: "newest", ts: newest }];
    for (let i = 0; i < 80; i++)
      batch.push({ key: null, value: `old-${i}-${"o".repeat(100)}`, ts: t0 });
    await produce(broker, "t", batch);
    clock.advance(1000);
    await produce(broker, "t", records(1, "next"));
    expect(partitionState(broker).bases).toEqual([0, 81]);
    await broker.close();

    const { broker: again } = await openBroker(fs, clock, { coldStorageDir: "/cold" });
    await again.updateTopicConfig("t", { retention_bytes: 1 });
    const [offloaded] = (await again.cleanup("t")).partitions;
    expect(offloaded.retention).toMatchObject({ segments_offloaded: 1 });
    // Now t0 + 3000: by its tail (t0) the copy would be past a 1.5 s cold retention; by its newest
    // record (a minute ahead) it is not.
    clock.advance(2000);
    await again.updateTopicConfig("t", { cold_retention_ms: 1500 });
    const [run] = (await again.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ cold_segments_deleted: 0, log_start_offset_after: 0 });
    expect((await fetchAll(again, "t", 0)).length).toBe(82);
    await again.close();
  });

  it("removes a topic's cold data with the topic, so a new topic of that name starts empty", async () => {
    const { fs, broker } = await withColdTier({ config: { retention_bytes: 1 } });
    await broker.cleanup("t");
    expect(fs.listTree("/cold/topics/t").length).toBeGreaterThan(0);
    await broker.deleteTopic("t");
    expect(fs.listTree("/cold/topics")).toEqual([]);
    await broker.createTopic({ name: "t", partitions: 1 });
    expect(await broker.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 0,
    });
    await broker.close();
  });
});

describe("cold storage on the real file system", () => {
  it("writes byte-identical copies with files 0600 and directories 0700, then reads them back", async () => {
    const { dir } = tempDir();
    const clock = new ManualClock();
    const cold = `${dir}/cold`;
    const { broker } = await openBroker(new NodeFileSystem(), clock, {
      dataDir: `${dir}/data`,
      coldStorageDir: cold,
    });
    await broker.createTopic({ name: "t", partitions: 1, config: { segment_ms: 1000 } });
    await produce(broker, "t", records(5, "a"));
    clock.advance(1000);
    await produce(broker, "t", records(5, "b"));
    clock.advance(1000);
    await produce(broker, "t", records(1, "c"));
    const original = await fetchAll(broker, "t", 0);
    const local = `${dir}/data/topics/t/0`;
    const before = new Map(
      readdirSync(local)
        .filter((n) => !n.startsWith(stem(10)))
        .map((n) => [n, readFileSync(`${local}/${n}`)]),
    );
    expect(before.size).toBe(4);
    await broker.updateTopicConfig("t", { retention_ms: 1 });
    clock.advance(10);
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      status: "ok",
      segments_offloaded: 2,
      segments_deleted: 2,
    });
    const coldPartition = `${cold}/topics/t/0`;
    expect(readdirSync(coldPartition).sort()).toEqual([...before.keys()].sort());
    for (const [name, bytes] of before) {
      expect(Buffer.compare(readFileSync(`${coldPartition}/${name}`), bytes), name).toBe(0);
      expect(statSync(`${coldPartition}/${name}`).mode & 0o777, name).toBe(0o600);
    }
    for (const d of [cold, `${cold}/topics`, `${cold}/topics/t`, coldPartition])
      expect(statSync(d).mode & 0o777, d).toBe(0o700);
    expect(readdirSync(local).sort()).toEqual([`${stem(10)}.index`, `${stem(10)}.log`]);
    const read = await fetchAll(broker, "t", 0);
    expect(read.map((r) => r.offset)).toEqual(original.map((r) => r.offset));
    for (let i = 0; i < read.length; i++)
      expect(bytesEqual(read[i].bytes, original[i].bytes)).toBe(true);
    await broker.close();
  });
});
