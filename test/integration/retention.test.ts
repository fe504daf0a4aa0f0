import { describe, expect, it } from "vitest";
import { fromUtf8 } from "../../src/lib/bytes.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import {
  ManualClock,
  MemoryFileSystem,
  fetchAll,
  openBroker,
  produce,
  rejectionCode,
  type Rec,
} from "../helpers/compaction-fixtures.ts";

const partitionDir = "/data/topics/t/0";

function segmentBases(broker: LocalBroker): number[] {
  return broker
    .describeStorage()
    .topics.find((t) => t.name === "t")!
    .partitions[0].segments.map((s) => s.base_offset);
}

function records(n: number, ts = -1): Rec[] {
  return Array.from({ length: n }, (_, i) => ({
    key: null,
    value: `record-${i}-${"v".repeat(60)}`,
    ts,
  }));
}

/** Yields to the event loop until `done()` holds (bounded; not a timed wait). */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 10_000 && !done(); i++) await new Promise((resolve) => setImmediate(resolve));
  expect(done()).toBe(true);
}

/** Three sealed segments of 5 records each (rolled by segment_ms) and an active one with 1 record. */
async function threeSealed(
  config: Record<string, unknown> = {},
  timestamps: number[] = [-1, -1, -1],
) {
  const fs = new MemoryFileSystem();
  const clock = new ManualClock();
  const { broker, logger } = await openBroker(fs, clock);
  await broker.createTopic({ name: "t", partitions: 1, config: { segment_ms: 1000, ...config } });
  for (const ts of timestamps) {
    await produce(broker, "t", records(5, ts));
    clock.advance(1000);
  }
  await produce(broker, "t", records(1));
  expect(segmentBases(broker)).toEqual([0, 5, 10, 15]);
  return { fs, clock, broker, logger };
}

describe("retention", () => {
  it("never deletes the active segment, even with retention_ms=1 and retention_bytes=1", async () => {
    const { broker, clock } = await threeSealed();
    clock.advance(10);
    await broker.updateTopicConfig("t", { retention_ms: 1, retention_bytes: 1 });
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      status: "ok",
      segments_deleted: 3,
      by_age: 3,
      by_size: 3,
      log_start_offset_before: 0,
      log_start_offset_after: 15,
    });
    expect(segmentBases(broker)).toEqual([15]);
    expect((await fetchAll(broker, "t", 15)).map((r) => r.offset)).toEqual([15]);
    expect(await produce(broker, "t", records(1))).toBe(16);
    // A second pass has nothing left to delete.
    const [again] = (await broker.cleanup("t")).partitions;
    expect(again.retention.status).toBe("nothing_to_do");
    expect(segmentBases(broker)).toEqual([15]);
    await broker.close();
  });

  it("deletes by age only segments whose newest record is older than retention_ms", async () => {
    const { broker, clock } = await threeSealed({ retention_ms: 2500 });
    // Newest timestamps: segment 0 at T, 5 at T+1000, 10 at T+2000; now T+3000.
    let [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ by_age: 1, segments_deleted: 1 });
    expect(segmentBases(broker)).toEqual([5, 10, 15]);
    clock.advance(500); // segment 5 is exactly 2500 ms old: not older
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention.segments_deleted).toBe(0);
    clock.advance(1);
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention.segments_deleted).toBe(1);
    expect(segmentBases(broker)).toEqual([10, 15]);
    await broker.close();
  });

  it("lets a segment with a future timestamp hold back every segment after it", async () => {
    const start = new ManualClock().nowMs();
    const past = start - 600_000;
    const future = start + 1_800_000; // within the default 1 h skew
    const { broker, clock } = await threeSealed({ retention_ms: 60_000 }, [past, future, past]);
    let [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ by_age: 1, segments_deleted: 1 });
    expect(segmentBases(broker)).toEqual([5, 10, 15]);
    clock.advance(1_860_000 - 3000); // the future segment is now exactly 60 s old
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention.segments_deleted).toBe(0);
    clock.advance(1);
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ by_age: 2, segments_deleted: 2 });
    expect(segmentBases(broker)).toEqual([15]);
    await broker.close();
  });

  it('timestamp_type "log_append_time" keeps records sent with 8-day-old timestamps for retention_ms from their arrival; "create_time" (the default) deletes them at once', async () => {
    const start = new ManualClock().nowMs();
    const eightDaysAgo = start - 8 * 24 * 3600_000;
    const old = [eightDaysAgo, eightDaysAgo, eightDaysAgo];
    const appended = await threeSealed(
      { timestamp_type: "log_append_time", retention_ms: 60_000 },
      old,
    );
    let [run] = (await appended.broker.cleanup("t")).partitions;
    expect(run.retention.segments_deleted).toBe(0);
    const stored = await fetchAll(appended.broker, "t");
    expect(stored).toHaveLength(16);
    // Each record carries the broker clock at its append (1 s apart per batch), nothing older.
    expect(stored.map((r) => r.timestampMs - start)).toEqual([
      ...Array(5).fill(0),
      ...Array(5).fill(1000),
      ...Array(5).fill(2000),
      3000,
    ]);
    appended.clock.advance(60_000 - 3000 + 1); // the first segment's newest record is now 60 s + 1 ms old
    [run] = (await appended.broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ by_age: 1, segments_deleted: 1 });
    await appended.broker.close();

    const created = await threeSealed({ retention_ms: 60_000 }, old);
    expect((await created.broker.describeTopic("t")).config.timestamp_type).toBe("create_time");
    [run] = (await created.broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ by_age: 3, segments_deleted: 3 });
    await created.broker.close();
  });

  it("refuses a timestamp_type other than create_time or log_append_time, naming both", async () => {
    const { broker } = await openBroker(new MemoryFileSystem(), new ManualClock());
    await expect(
      broker.createTopic({ name: "t", partitions: 1, config: { timestamp_type: "LogAppendTime" } }),
    ).rejects.toThrow(
      /"timestamp_type": "LogAppendTime" is not one of "create_time".*"log_append_time"/,
    );
    await broker.close();
  });

  it("deletes by size the oldest sealed segments until the partition is within retention_bytes", async () => {
    const { broker } = await threeSealed();
    const sizes = broker
      .describeStorage()
      .topics[0].partitions[0].segments.map((s) => s.size_bytes);
    const keep = sizes[2] + sizes[3];
    await broker.updateTopicConfig("t", { retention_bytes: keep });
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      by_size: 2,
      by_age: 0,
      segments_deleted: 2,
      bytes_deleted: sizes[0] + sizes[1],
    });
    expect(segmentBases(broker)).toEqual([10, 15]);
    expect((await broker.describeTopic("t")).partitions[0].sizeBytes).toBe(keep);
    await broker.close();
  });

  it("answers offset_out_of_range below the new log start offset, and keeps it across a restart", async () => {
    const { fs, clock, broker } = await threeSealed({ retention_bytes: 1 });
    await broker.cleanup("t");
    expect(await rejectionCode(broker.fetch({ topic: "t", partition: 0, offset: 3 }))).toBe(
      "offset_out_of_range",
    );
    const saved = JSON.parse(fromUtf8(fs.readFileSync("/data/topics/t/log_start_offsets.json")));
    expect(saved).toEqual({ version: 1, partitions: { "0": 15 } });
    await broker.close();
    fs.crash({ mode: "dropAll" });
    const { broker: again } = await openBroker(fs, clock);
    expect(await again.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 15,
      highWatermark: 16,
    });
    expect(fs.listTree(partitionDir).filter((p) => p.endsWith(".log"))).toEqual([
      `${partitionDir}/00000000000000000015.log`,
    ]);
    await again.close();
  });

  it("finishes at the next pass a deletion that a crash interrupted after the log start offset was written", async () => {
    const disk = new MemoryFileSystem();
    const paths: string[] = [];
    const fs = new MemoryFileSystem({ disk, onMutation: (m) => paths.push(m.path) });
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_bytes: 1 },
    });
    for (let i = 0; i < 3; i++) {
      await produce(broker, "t", records(5));
      clock.advance(1000);
    }
    await produce(broker, "t", records(1));
    // Let the log start offset file be written, then cut at the first unlink.
    const lsoWrite = 5; // create, write, sync of the temp file; rename; directory fsync
    paths.length = 0;
    fs.armPowerCut({ inMutations: lsoWrite + 1 });
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention.status).toBe("failed");
    expect(
      paths
        .slice(0, lsoWrite)
        .every((p) => p.includes("log_start_offsets.json") || p === "/data/topics/t"),
    ).toBe(true);
    expect(paths.at(-1)).toMatch(/00000000000000000000\.index$/);
    disk.crash({ seed: 5 });
    const { broker: again, logger } = await openBroker(disk, clock);
    expect(await again.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 15,
      highWatermark: 16,
    });
    expect(segmentBases(again)).toEqual([0, 5, 10, 15]); // still on disk, below the log start offset
    expect(await rejectionCode(again.fetch({ topic: "t", partition: 0, offset: 0 }))).toBe(
      "offset_out_of_range",
    );
    await again.updateTopicConfig("t", { retention_bytes: -1 });
    const [finish] = (await again.cleanup("t")).partitions;
    expect(finish.retention).toMatchObject({
      status: "ok",
      below_log_start: 3,
      segments_deleted: 3,
    });
    expect(segmentBases(again)).toEqual([15]);
    expect(logger.named("retention.pass").at(-1)).toMatchObject({ below_log_start: 3 });
    await again.close();
  });

  it("runs in the background every cleanup interval and shows its last run in the storage description", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock, { cleanupIntervalMs: 10_000 });
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_ms: 5000 },
    });
    await produce(broker, "t", records(5));
    clock.advance(1000);
    await produce(broker, "t", records(1));
    const cleanup = () => broker.describeStorage().topics[0].partitions[0].cleanup!;
    expect(cleanup().last_retention).toBeNull();
    clock.advance(9_000); // the first visit: the sealed segment is 10 s old
    await until(() => cleanup().last_retention !== null && cleanup().last_compaction !== null);
    expect(cleanup().last_retention).toMatchObject({
      task: "retention",
      status: "ok",
      segments_deleted: 1,
    });
    expect(cleanup().last_compaction).toMatchObject({ task: "compaction", status: "skipped" });
    expect(segmentBases(broker)).toEqual([5]);
    const first = cleanup().last_retention!.started_ms;
    clock.advance(10_000);
    await until(() => cleanup().last_retention!.started_ms > first);
    expect(cleanup().last_retention!.status).toBe("nothing_to_do");
    await broker.close();
  });
});

describe("topic config updates (PATCH /v1/topics/{topic})", () => {
  it("validates with errors naming the key, rewrites topic.json atomically, and applies at once", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({ name: "t", partitions: 2 });
    await expect(broker.updateTopicConfig("t", { retention_hours: 1 })).rejects.toThrow(
      /unknown key "retention_hours"/,
    );
    await expect(broker.updateTopicConfig("t", { retention_ms: 0 })).rejects.toThrow(
      /"retention_ms": 0 must be an integer from 1/,
    );
    await expect(broker.updateTopicConfig("t", { cleanup_policy: "shred" })).rejects.toThrow(
      /"cleanup_policy"/,
    );
    await expect(broker.updateTopicConfig("t", { cold_retention_ms: -2 })).rejects.toThrow(
      /"cold_retention_ms"/,
    );
    expect(await rejectionCode(broker.updateTopicConfig("t", { segment_bytes: 1 }))).toBe(
      "invalid_config",
    );
    expect(await rejectionCode(broker.updateTopicConfig("nope", {}))).toBe("topic_not_found");
    const updated = await broker.updateTopicConfig("t", {
      cleanup_policy: "delete,compact",
      retention_bytes: 4096,
      cold_retention_ms: 86_400_000,
    });
    expect(updated.config).toMatchObject({
      cleanup_policy: "compact,delete",
      retention_bytes: 4096,
      cold_retention_ms: 86_400_000,
      retention_ms: 7 * 24 * 3600_000,
    });
    expect(updated.partitions.length).toBe(2);
    await broker.close();
    fs.crash({ mode: "dropAll" });
    const { broker: again } = await openBroker(fs, clock);
    expect((await again.describeTopic("t")).config).toEqual(updated.config);
    await again.close();
  });
});
