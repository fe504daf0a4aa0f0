/**
 * `PartitionLog.offsetForTimestamp` (docs/storage.md "Finding an offset by timestamp"): the
 * first offset whose record timestamp is at or after a time, over many segments, with
 * timestamps out of order (producers set them), before and after a restart (sealed segments
 * trusted at start know only their tail's newest timestamp, so the lookup must not skip by it).
 */
import { describe, expect, it } from "vitest";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { tempDir } from "../helpers/tmp.ts";

function openLog(dir: string) {
  return PartitionLog.open({
    fs: new NodeFileSystem(),
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger: new MemoryLogger(),
    config: () => ({ segmentBytes: 16 * 1024, segmentMs: 7 * 24 * 3600_000 }),
  });
}

/**
 * Record i's timestamp: rising by 10 ms, but every 37th record 5 s late or early, and every 211th
 * 100 s late (newer than every record after it in its segment).
 */
function timestampOf(i: number): number {
  if (i % 211 === 10) return 100_000 + i * 10 + 100_000;
  if (i % 37 === 5) return 100_000 + i * 10 + 5_000;
  if (i % 37 === 20) return Math.max(0, 100_000 + i * 10 - 5_000);
  return 100_000 + i * 10;
}

/**
 * The answer by definition: the first offset whose timestamp is ≥ t and that timestamp, else
 * `end` and −1.
 */
function found(count: number, t: number, end = count): { offset: number; timestampMs: number } {
  for (let i = 0; i < end; i++)
    if (timestampOf(i) >= t) return { offset: i, timestampMs: timestampOf(i) };
  return { offset: end, timestampMs: -1 };
}

describe("PartitionLog.offsetForTimestamp", () => {
  it("finds the first record at or after a time over many segments, before and after a restart", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`);
    const count = 2000;
    for (let i = 0; i < count; i += 8) {
      const b = new EntryBatchBuilder();
      for (let j = i; j < i + 8; j++)
        b.add(null, utf8(`value-${j}-${"x".repeat(40)}`), timestampOf(j));
      await log.append(b.build());
    }
    expect(log.segmentCount).toBeGreaterThan(5);
    const targets = [0, 99_999, 100_000, 100_001, 100_050, 101_000, 101_234, 102_000, 103_990];
    for (let i = 0; i < count; i += 13) targets.push(timestampOf(i), timestampOf(i) + 1);
    // The late records: a segment's newest timestamp can be one near its start (several index
    // entries, 4 KiB apart, before its tail).
    for (let i = 5; i < count; i += 37 * 3) targets.push(timestampOf(i));
    for (let i = 10; i < count; i += 211) targets.push(timestampOf(i) - 1, timestampOf(i));
    targets.push(100_000 + count * 10 + 10_000); // after every record: the high watermark
    const check = async () => {
      for (const t of targets)
        expect(await log.offsetForTimestamp(t), `t=${t}`).toEqual(found(count, t));
      // endOffset bounds the answer (a cluster leader's replicated high watermark).
      for (const t of [100_000, 101_500, 199_999])
        expect(await log.offsetForTimestamp(t, 150), `t=${t} end 150`).toEqual(
          found(count, t, 150),
        );
    };
    await check();
    await log.close();
    log = await openLog(`${dir}/p`);
    expect(log.highWatermark).toBe(count);
    await check();
    await log.close();
  });

  it("answers the high watermark for an empty log", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    expect(await log.offsetForTimestamp(0)).toEqual({ offset: 0, timestampMs: -1 });
    await log.close();
  });
});
