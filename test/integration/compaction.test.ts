import { describe, expect, it } from "vitest";
import { bytesEqual, utf8 } from "../../src/lib/bytes.ts";
import { KeyOffsetMap } from "../../src/storage/key-offset-map.ts";
import { runCompaction } from "../../src/storage/compaction.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import {
  ManualClock,
  MemoryFileSystem,
  fetchAll,
  openBroker,
  produce,
  snapshotFiles,
  swapLeftovers,
  type Rec,
} from "../helpers/compaction-fixtures.ts";

const partitionDir = "/data/topics/t/0";

/** The table: offsets 0–9. */
const table: Rec[] = [
  { key: "k1", value: "a" }, // 0: superseded by 2
  { key: "k2", value: "b" }, // 1: superseded by the tombstone at 5
  { key: "k1", value: "c" }, // 2: newest k1
  { key: null, value: "d" }, // 3: keyless, always kept
  { key: null, value: "" }, // 4: keyless with an empty value is not a tombstone
  { key: "k2", value: "" }, // 5: tombstone of k2
  { key: "", value: "e" }, // 6: the empty key is a real key, superseded by 7
  { key: "", value: "f" }, // 7: newest of the empty key
  { key: "k3", value: "g" }, // 8: superseded by the tombstone at 9
  { key: "k3", value: "" }, // 9: tombstone of k3
];

async function tableSetup() {
  const fs = new MemoryFileSystem();
  const clock = new ManualClock();
  const { broker, logger } = await openBroker(fs, clock);
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { cleanup_policy: "compact", segment_ms: 1000, tombstone_retention_ms: 60_000 },
  });
  await produce(broker, "t", table);
  clock.advance(1000); // the next append rolls: offsets 0–9 are sealed
  expect(await produce(broker, "t", [{ key: "k4", value: "active" }])).toBe(10);
  const original = await fetchAll(broker, "t", 0);
  expect(original.map((r) => r.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  return { fs, clock, broker, logger, original };
}

describe("compaction", () => {
  it("keeps the newest record of each key and every keyless record, at their original offsets and bytes", async () => {
    const { broker, original, logger } = await tableSetup();
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction.status).toBe("compacted");
    expect(run.compaction.records_dropped).toBe(4);
    expect(run.compaction.tombstones_dropped).toBe(0);
    expect(run.compaction.keys).toBe(4); // k1, k2, "", k3
    const after = await fetchAll(broker, "t", 0);
    expect(after.map((r) => r.offset)).toEqual([2, 3, 4, 5, 7, 9, 10]);
    for (const r of after) expect(bytesEqual(r.bytes, original[r.offset].bytes)).toBe(true);
    expect(after.find((r) => r.offset === 7)!.key).toBe("");
    // The log start offset did not jump to the first surviving record.
    expect((await broker.listOffsets({ topic: "t", partition: 0 })).logStartOffset).toBe(0);
    const pass = logger.named("compaction.pass").at(-1)!;
    expect(pass).toMatchObject({
      status: "compacted",
      segments_before: 1,
      segments_after: 1,
      records_dropped: 4,
    });
    expect(pass.bytes_after as number).toBeLessThan(pass.bytes_before as number);
    await broker.close();
  });

  it("continues a fetch that starts on a removed offset at the next surviving record", async () => {
    const { broker } = await tableSetup();
    await broker.cleanup("t");
    const from1 = await broker.fetch({ topic: "t", partition: 0, offset: 1, maxRecords: 1 });
    expect(from1.records.count).toBe(1);
    expect(from1.nextOffset).toBe(3); // it returned offset 2
    const from0 = await broker.fetch({ topic: "t", partition: 0, offset: 0, maxRecords: 1 });
    expect(from0.nextOffset).toBe(3);
    const from8 = await fetchAll(broker, "t", 8);
    expect(from8.map((r) => r.offset)).toEqual([9, 10]);
    await broker.close();
  });

  it("drops tombstones once tombstone_retention_ms has passed, and a third pass changes no file", async () => {
    const { fs, clock, broker, original } = await tableSetup();
    await broker.cleanup("t");
    clock.advance(58_999); // the tombstones are 59 999 ms old: kept
    let [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction.status).toBe("skipped");
    clock.advance(1); // 60 000 ms old: now − timestamp ≥ tombstone_retention_ms
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction.status).toBe("compacted");
    expect(run.compaction.tombstones_dropped).toBe(2);
    const after = await fetchAll(broker, "t", 0);
    expect(after.map((r) => r.offset)).toEqual([2, 3, 4, 7, 10]);
    for (const r of after) expect(bytesEqual(r.bytes, original[r.offset].bytes)).toBe(true);
    // A fetch from 8 crosses the gap 8–9 and the segment boundary.
    expect((await fetchAll(broker, "t", 8)).map((r) => r.offset)).toEqual([10]);

    const before = snapshotFiles(fs, "/data");
    const mutations = fs.mutationCount;
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction.status).toBe("skipped");
    expect(run.compaction.reason).toBe("no record to drop");
    expect(fs.mutationCount).toBe(mutations);
    const again = snapshotFiles(fs, "/data");
    expect([...again.keys()]).toEqual([...before.keys()]);
    for (const [path, bytes] of before) expect(bytesEqual(again.get(path)!, bytes)).toBe(true);
    // Nothing changed since: the next pass does not even read the segments.
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction).toMatchObject({ status: "skipped", segments_read: 0 });
    expect(run.compaction.reason).toMatch(/no segment changed/);
    await broker.close();
  });

  it("never moves the next offset backwards after a restart, even with the tail of the sealed segments gone", async () => {
    const { fs, clock, broker } = await tableSetup();
    await broker.cleanup("t");
    clock.advance(60_000);
    await broker.cleanup("t"); // drops 9, the last record of the sealed segment
    await broker.close();
    fs.crash({ mode: "dropAll" });
    const { broker: again } = await openBroker(fs, clock);
    const offsets = await again.listOffsets({ topic: "t", partition: 0 });
    expect(offsets).toEqual({ logStartOffset: 0, highWatermark: 11 });
    expect(await produce(again, "t", [{ key: "k5", value: "x" }])).toBe(11);
    expect((await fetchAll(again, "t", 0)).map((r) => r.offset)).toEqual([2, 3, 4, 7, 10, 11]);
    expect(swapLeftovers(fs, partitionDir)).toEqual([]);
    await again.close();
  });

  it("persists the log start offset before a swap that moves the first segment's base", async () => {
    const { fs, broker } = await tableSetup();
    expect(fs.listTree("/data/topics/t")).not.toContain("/data/topics/t/log_start_offsets.json");
    await broker.cleanup("t");
    expect(fs.listTree(partitionDir)).toContain(`${partitionDir}/00000000000000000002.log`);
    expect(fs.listTree(partitionDir)).not.toContain(`${partitionDir}/00000000000000000000.log`);
    const saved = JSON.parse(
      new TextDecoder().decode(fs.readFileSync("/data/topics/t/log_start_offsets.json")),
    );
    expect(saved).toEqual({ version: 1, partitions: { "0": 0 } });
    await broker.close();
  });

  it("compacts across sealed segments, names outputs after their first record, and leaves clean leading segments alone", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { cleanup_policy: "compact", segment_ms: 1000 },
    });
    const pad = "p".repeat(40);
    // Segment A (0–4): distinct keys never updated later. Segment B (5–9) and C (10–14): updates.
    await produce(
      broker,
      "t",
      [0, 1, 2, 3, 4].map((i) => ({ key: `fixed${i}`, value: pad })),
    );
    clock.advance(1000);
    await produce(
      broker,
      "t",
      [0, 1, 2, 3, 4].map((i) => ({ key: `k${i}`, value: `old${i}` })),
    );
    clock.advance(1000);
    await produce(broker, "t", [
      ...[0, 1, 2].map((i): Rec => ({ key: `k${i}`, value: `new${i}` })),
      { key: null, value: "n1" },
      { key: null, value: "n2" },
    ]);
    clock.advance(1000);
    await produce(broker, "t", [{ key: "k0", value: "active, never compacted" }]);
    const segmentA = fs.readFileSync(`${partitionDir}/00000000000000000000.log`);
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction).toMatchObject({
      status: "compacted",
      segments_read: 3,
      segments_before: 2,
      records_dropped: 3,
    });
    // A untouched; B's survivors (8, 9) and C's (10–14) in one output named 8.
    expect(bytesEqual(fs.readFileSync(`${partitionDir}/00000000000000000000.log`), segmentA)).toBe(
      true,
    );
    const logs = fs.listTree(partitionDir).filter((p) => p.endsWith(".log"));
    expect(logs).toEqual([
      `${partitionDir}/00000000000000000000.log`,
      `${partitionDir}/00000000000000000008.log`,
      `${partitionDir}/00000000000000000015.log`,
    ]);
    const after = await fetchAll(broker, "t", 0);
    expect(after.map((r) => r.offset)).toEqual([0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15]);
    expect(after.find((r) => r.offset === 15)!.value).toBe("active, never compacted");
    await broker.close();
    // The outputs survive a restart as trusted sealed segments.
    const { broker: again } = await openBroker(fs, clock);
    expect((await fetchAll(again, "t", 0)).map((r) => r.offset)).toEqual(
      after.map((r) => r.offset),
    );
    await again.close();
  });

  it("streams records larger than its read buffer and copies them whole", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { cleanup_policy: "compact", segment_ms: 1000, segment_bytes: 64 * 1024 * 1024 },
    });
    const big = (c: string) => c.repeat(3 * 1024 * 1024);
    await produce(broker, "t", [
      { key: "big", value: big("a") },
      { key: "s", value: "1" },
      { key: "big", value: big("b") },
      { key: null, value: "x" },
      { key: "s", value: "2" },
    ]);
    clock.advance(1000);
    await produce(broker, "t", [{ key: null, value: "active" }]);
    const original = await fetchAll(broker, "t", 0, 1);
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction).toMatchObject({
      status: "compacted",
      records_dropped: 2,
      records_read: 5,
    });
    const after = await fetchAll(broker, "t", 0, 1);
    expect(after.map((r) => r.offset)).toEqual([2, 3, 4, 5]);
    for (const r of after) expect(bytesEqual(r.bytes, original[r.offset].bytes)).toBe(true);
    expect(after[0].value.length).toBe(3 * 1024 * 1024);
    await broker.close();
  });

  it("aborts on an unreadable record and leaves every original file untouched", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { cleanup_policy: "compact", segment_ms: 1000 },
    });
    await produce(
      broker,
      "t",
      [0, 1, 2, 3].map((i) => ({ key: "same", value: `v${i}` })),
    );
    clock.advance(1000);
    await produce(broker, "t", [{ key: "same", value: "v4" }]);
    clock.advance(1000);
    await produce(broker, "t", [{ key: "x", value: "active" }]);
    // Flip a byte inside the third record's value of the first segment (its CRC no longer matches).
    const path = `${partitionDir}/00000000000000000000.log`;
    const bytes = fs.readFileSync(path);
    const recordBytes = bytes.length / 4;
    bytes[recordBytes * 2 + recordBytes - 6] ^= 0xff;
    fs.writeFileSync(path, bytes);
    const before = snapshotFiles(fs, "/data");
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction.status).toBe("aborted");
    expect(run.compaction.reason).toMatch(
      /^Cannot read segment .*00000000000000000000.log at byte \d+: crc mismatch.*; nothing was changed$/,
    );
    const after = snapshotFiles(fs, "/data");
    expect([...after.keys()]).toEqual([...before.keys()]);
    for (const [p, b] of before) expect(bytesEqual(after.get(p)!, b)).toBe(true);
    expect(swapLeftovers(fs, partitionDir)).toEqual([]);
    await broker.close();
  });

  it("skips a topic whose policy is delete only, and reports why", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({ name: "t", partitions: 1, config: { segment_ms: 1000 } });
    await produce(broker, "t", [
      { key: "a", value: "1" },
      { key: "a", value: "2" },
    ]);
    clock.advance(1000);
    await produce(broker, "t", [{ key: "a", value: "3" }]);
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction).toMatchObject({
      status: "skipped",
      reason: 'the cleanup policy does not include "compact"',
    });
    expect((await fetchAll(broker, "t", 0)).length).toBe(3);
    await broker.close();
  });

  it("cancels the swap when a roll changed the sealed segments, and removes its temp files", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const dir = "/data/topics/t/0";
    const log = await PartitionLog.open({
      fs,
      dir,
      name: "t/0",
      clock,
      logger: silentLogger,
      config: () => ({ segmentBytes: 1 << 20, segmentMs: 1000 }),
    });
    const batch = (key: string, value: string) =>
      new EntryBatchBuilder().add(utf8(key), utf8(value)).build();
    await log.append(batch("a", "1"));
    await log.append(batch("a", "2"));
    clock.advance(1000);
    await log.append(batch("a", "3"));
    let tempsBeforeSwap: string[] = [];
    const result = await runCompaction(
      {
        fs,
        clock,
        logger: silentLogger,
        partition: log,
        ensureLogStartOffsetPersisted: async () => {},
        beforeSwap: async () => {
          tempsBeforeSwap = swapLeftovers(fs, dir);
          clock.advance(1000);
          await log.append(batch("a", "4")); // rolls: the sealed segments changed
        },
      },
      { tombstoneRetentionMs: 0, segmentBytes: 1 << 20 },
    );
    expect(tempsBeforeSwap).toEqual([
      `${dir}/00000000000000000001.index.cleaned`,
      `${dir}/00000000000000000001.log.cleaned`,
    ]);
    expect(result.status).toBe("cancelled");
    expect(result.reason).toMatch(/roll or a retention pass/);
    expect(swapLeftovers(fs, dir)).toEqual([]);
    expect(log.sealedSegments.map((s) => s.baseOffset)).toEqual([0, 2]);
    await log.close();
  });
});

describe("KeyOffsetMap", () => {
  it("keeps the last offset put per digest across growth, and refuses keys past keysMax", () => {
    const map = new KeyOffsetMap({ keysMax: 5000 });
    const d = new Uint32Array(4);
    const digestOf = (i: number) => {
      d[0] = Math.imul(i, 0x9e3779b1) >>> 0;
      d[1] = i;
      d[2] = ~i >>> 0;
      d[3] = 7;
      return d;
    };
    for (let i = 0; i < 5000; i++) expect(map.put(digestOf(i), i, i % 3 === 0 ? 1 : 0)).toBe(true);
    for (let i = 0; i < 5000; i += 2) map.put(digestOf(i), 10_000 + i, 0);
    expect(map.size).toBe(5000);
    expect(map.full).toBe(true);
    expect(map.put(digestOf(999_999), 1, 0)).toBe(false);
    expect(map.offsetOf(digestOf(999_999))).toBe(-1);
    for (let i = 0; i < 5000; i++) {
      expect(map.offsetOf(digestOf(i))).toBe(i % 2 === 0 ? 10_000 + i : i);
      expect(map.flagsOf(digestOf(i))).toBe(i % 2 === 1 && i % 3 === 0 ? 1 : 0);
    }
    const below = map.countBelow(10_000, 1);
    expect(below.keys).toBe(2500);
    expect(below.flagged).toBe(
      [...Array(5000).keys()].filter((i) => i % 2 === 1 && i % 3 === 0).length,
    );
    expect(map.memoryBytes).toBe(8192 * 24);
  });

  it("keeps offsets up to 2^53 − 1 exact, with their flags", () => {
    const map = new KeyOffsetMap({ keysMax: 10 });
    const offsets = [0, 2 ** 32 - 1, 2 ** 32, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER];
    offsets.forEach((offset, i) =>
      expect(map.put(Uint32Array.of(i, 1, 2, 3), offset, 255 - i)).toBe(true),
    );
    offsets.forEach((offset, i) => {
      expect(map.offsetOf(Uint32Array.of(i, 1, 2, 3))).toBe(offset);
      expect(map.flagsOf(Uint32Array.of(i, 1, 2, 3))).toBe(255 - i);
    });
    expect(map.countBelow(2 ** 32, 0)).toEqual({ keys: 2, flagged: 2 });
    expect(map.countBelow(Number.MAX_SAFE_INTEGER + 1, 255)).toEqual({ keys: 5, flagged: 1 });
  });
});
