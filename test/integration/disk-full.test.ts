/**
 * A full disk relieved through the broker (docs/storage.md "Full disk"): the disk reserve is given
 * up when a metadata write (the log start offset retention persists before deleting, topic.json)
 * fails with ENOSPC, appends wait while it is gone, and it is made again when space returns. The
 * full disk is the in-memory file system with ENOSPC faults; `FullDisk` stays full (every new
 * block refused) until a file is deleted.
 */
import { describe, expect, it } from "vitest";
import { fromUtf8 } from "../../src/lib/bytes.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { diskReserveFileName, diskReserveRetryMs } from "../../src/storage/disk-reserve.ts";
import type { MutationOp } from "../../src/fs/memory.ts";
import {
  ManualClock,
  MemoryFileSystem,
  fetchAll,
  openBroker,
  produce,
  rejectionCode,
  type Rec,
} from "../helpers/compaction-fixtures.ts";

const reservePath = `/data/${diskReserveFileName}`;

function records(n: number): Rec[] {
  return Array.from({ length: n }, (_, i) => ({
    key: null,
    value: `record-${i}-${"v".repeat(60)}`,
  }));
}

function segmentBases(broker: LocalBroker): number[] {
  return broker
    .describeStorage()
    .topics.find((t) => t.name === "t")!
    .partitions[0].segments.map((s) => s.base_offset);
}

/**
 * A disk with no free block: writes and creates fail with ENOSPC. Deleting the reserve frees
 * room for small files only (making the reserve again still fails); deleting a segment frees it all.
 */
class FullDisk extends MemoryFileSystem {
  fill(): void {
    for (const op of ["write", "create"] as MutationOp[])
      this.faults.failNext({ op, code: "ENOSPC", times: Number.POSITIVE_INFINITY });
  }
  override async unlink(path: string): Promise<void> {
    await super.unlink(path);
    if (path === reservePath) {
      this.faults.clear();
      this.faults.failNext({
        op: "create",
        path: /disk_reserve/,
        code: "ENOSPC",
        times: Number.POSITIVE_INFINITY,
      });
    } else if (path.endsWith(".log")) this.faults.clear();
  }
}

/** Three sealed segments of 5 records (rolled by segment_ms) and an active one with 1 record. */
async function threeSealed(fs: MemoryFileSystem, extra: { diskReserveBytes?: number } = {}) {
  const clock = new ManualClock();
  const { broker, logger } = await openBroker(fs, clock, extra);
  await broker.createTopic({ name: "t", partitions: 1, config: { segment_ms: 1000 } });
  for (let i = 0; i < 3; i++) {
    await produce(broker, "t", records(5));
    clock.advance(1000);
  }
  await produce(broker, "t", records(1));
  expect(segmentBases(broker)).toEqual([0, 5, 10, 15]);
  return { clock, broker, logger };
}

describe("a full disk", () => {
  for (const op of ["create", "write", "sync"] as MutationOp[]) {
    it(`lets retention delete when the log start offset's ${op} fails with ENOSPC, by giving up the reserve; appends wait until it is made again`, async () => {
      const fs = new MemoryFileSystem();
      const { clock, broker, logger } = await threeSealed(fs);
      expect(await fs.stat(reservePath)).toMatchObject({ size: 1024 * 1024 });
      await broker.updateTopicConfig("t", { retention_bytes: 1 });
      fs.faults.failNext({ op, path: /log_start_offsets/, code: "ENOSPC" });
      // Still no room for the reserve right after the retried write.
      fs.faults.failNext({ op: "create", path: /disk_reserve/, code: "ENOSPC" });
      const [run] = (await broker.cleanup("t")).partitions;
      expect(run.retention).toMatchObject({
        status: "ok",
        segments_deleted: 3,
        log_start_offset_after: 15,
      });
      expect(
        JSON.parse(fromUtf8(fs.readFileSync("/data/topics/t/log_start_offsets.json"))),
      ).toEqual({ version: 1, partitions: { "0": 15 } });
      expect(await fs.stat(reservePath)).toBeNull();
      expect(logger.named("storage.reserve_given_up")).toEqual([
        expect.objectContaining({ for_file: "/data/topics/t/log_start_offsets.json" }),
      ]);
      // The freed space is for metadata writes: appends are refused (nothing stored) meanwhile.
      expect(await rejectionCode(produce(broker, "t", records(2)))).toBe("storage_error");
      expect(await rejectionCode(produce(broker, "t", records(2)))).toBe("storage_error");
      expect(logger.named("partition.writes_refused")).toHaveLength(1);
      clock.advance(diskReserveRetryMs);
      for (let i = 0; i < 100 && (await fs.stat(reservePath)) === null; i++)
        await new Promise((resolve) => setImmediate(resolve));
      expect(await fs.stat(reservePath)).toMatchObject({ size: 1024 * 1024 });
      expect(await produce(broker, "t", records(1))).toBe(16);
      expect(logger.named("storage.reserve_restored")).toHaveLength(1);
      expect(logger.named("partition.writes_resumed")).toEqual([
        expect.objectContaining({ partition: "t/0", refused_requests: 2, refused_records: 4 }),
      ]);
      expect((await fetchAll(broker, "t", 15)).map((r) => r.offset)).toEqual([15, 16]);
      await broker.close();
    });
  }

  it("without a reserve, retention fails on a full disk as before (what the reserve fixes)", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await threeSealed(fs, { diskReserveBytes: 0 });
    await broker.updateTopicConfig("t", { retention_bytes: 1 });
    fs.faults.failNext({ op: "create", path: /log_start_offsets/, code: "ENOSPC" });
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention.status).toBe("failed");
    expect(run.retention.reason).toMatch(/ENOSPC/);
    expect(segmentBases(broker)).toEqual([0, 5, 10, 15]);
    await broker.close();
  });

  it("is relieved through the broker: lowering retention_bytes and cleanup free space, nothing acknowledged is lost, and a crash after it recovers the same log", async () => {
    const fs = new FullDisk();
    const { clock, broker, logger } = await threeSealed(fs);
    fs.fill();
    expect(await rejectionCode(produce(broker, "t", records(3)))).toBe("storage_error");
    // topic.json cannot be rewritten without space: the reserve goes, the write goes through.
    await broker.updateTopicConfig("t", { retention_bytes: 200 });
    expect(logger.named("storage.reserve_given_up")).toEqual([
      expect.objectContaining({ for_file: "/data/topics/t/topic.json" }),
    ]);
    // The reserve's space is left for the cleanup's own metadata write: appends wait meanwhile.
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ status: "ok", segments_deleted: 3 });
    expect(await rejectionCode(produce(broker, "t", records(1)))).toBe("storage_error");
    clock.advance(diskReserveRetryMs);
    for (let i = 0; i < 100 && (await fs.stat(reservePath)) === null; i++)
      await new Promise((resolve) => setImmediate(resolve));
    expect(await produce(broker, "t", records(1))).toBe(16);
    expect(logger.named("partition.writes_refused")).toHaveLength(1);
    expect(logger.named("partition.writes_resumed")).toEqual([
      expect.objectContaining({ refused_requests: 2, refused_records: 4 }),
    ]);
    await broker.close();
    fs.faults.clear();
    fs.crash({ mode: "dropAll" });
    const { broker: again } = await openBroker(fs, clock);
    expect(await again.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 15,
      highWatermark: 17,
    });
    expect(await rejectionCode(again.fetch({ topic: "t", partition: 0, offset: 14 }))).toBe(
      "offset_out_of_range",
    );
    expect((await fetchAll(again, "t", 15)).map((r) => r.offset)).toEqual([15, 16]);
    await again.close();
  });

  it("keeps every rule at a power cut at any step of a pass that gives up the reserve", async () => {
    // Count the mutations of the pass, then cut the power at each of them in turn.
    const count = async (): Promise<number> => {
      const fs = new MemoryFileSystem();
      const { broker } = await threeSealed(fs);
      await broker.updateTopicConfig("t", { retention_bytes: 1 });
      fs.faults.failNext({ op: "create", path: /log_start_offsets/, code: "ENOSPC" });
      const before = fs.mutationCount;
      await broker.cleanup("t");
      const n = fs.mutationCount - before;
      await broker.close();
      return n;
    };
    const mutations = await count();
    expect(mutations).toBeGreaterThan(8);
    for (let cut = 1; cut <= mutations; cut++) {
      const disk = new MemoryFileSystem({ seed: cut });
      const { broker } = await threeSealed(disk);
      await broker.updateTopicConfig("t", { retention_bytes: 1 });
      disk.faults.failNext({ op: "create", path: /log_start_offsets/, code: "ENOSPC" });
      disk.armPowerCut({ inMutations: cut });
      await broker.cleanup("t").catch(() => undefined);
      await broker.close().catch(() => undefined);
      disk.crash({ seed: cut });
      const { broker: again } = await openBroker(disk, new ManualClock(1_700_000_100_000));
      const { logStartOffset, highWatermark } = await again.listOffsets({
        topic: "t",
        partition: 0,
      });
      expect(highWatermark).toBe(16);
      // The log start offset is 0 (the pass never got to it) or 15 (persisted): never a deleted
      // offset exposed below it, never a retained one lost above it.
      expect([0, 15]).toContain(logStartOffset);
      const offsets = (await fetchAll(again, "t", logStartOffset)).map((r) => r.offset);
      expect(offsets).toEqual(
        Array.from({ length: 16 - logStartOffset }, (_, i) => logStartOffset + i),
      );
      await again.close();
    }
  });
});

describe("a cleanup with nothing to do", () => {
  it("says why: everything is in the active segment, which is never deleted", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({ name: "t", partitions: 1, config: { retention_bytes: 100 } });
    await produce(broker, "t", records(5));
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention.status).toBe("nothing_to_do");
    expect(run.retention.reason).toMatch(
      /^no sealed segment: the active segment \(base offset 0\) holds \d+ bytes; it is never deleted; it rolls at the next append once it would pass segment_bytes \(134217728\) or is segment_ms \(\d+\) old/,
    );
    await broker.updateTopicConfig("t", { cleanup_policy: "compact" });
    const [compact] = (await broker.cleanup("t")).partitions;
    expect(compact.retention.reason).toBe(
      'cleanup_policy has no "delete": retention by age and size does not apply',
    );
    await broker.close();
  });
});
