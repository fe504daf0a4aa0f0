/**
 * The bounded cache of sealed segments' open files (`src/storage/segment-handles.ts`,
 * docs/storage.md "Index and reads"): descriptors stay bounded by `maxOpenSegments` however many
 * segments a partition holds, reads across segments the cache closed return every record intact
 * (the index read back and checked), and retention, compaction and the cold tier's upload racing
 * an eviction never make a reader see other bytes or lose its segment. Runs on the memory file
 * system, whose open handles are counted.
 */
import { describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { SegmentHandleCache, type CachedSegmentFiles } from "../../src/storage/segment-handles.ts";
import {
  GatedFs,
  ManualClock,
  MemoryFileSystem,
  decodeRecords,
  fetchAll,
  openBroker,
  produce,
  type ReadRecord,
  type Rec,
} from "../helpers/compaction-fixtures.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { tempDir } from "../helpers/tmp.ts";

const segments = 12;
const perSegment = 4;
const dir = "/data/topics/t/0";
const logName = (base: number) => `${dir}/${String(base).padStart(20, "0")}.log`;
const indexName = (base: number) => `${dir}/${String(base).padStart(20, "0")}.index`;

/**
 * Segment s holds keys s0…s3; with `repeatKeys`, k0…k3 in every segment, but offset 0 has no key
 * (so compaction keeps it, and names its first output after offset 0).
 */
function batchOf(s: number, repeatKeys: boolean): Rec[] {
  return Array.from({ length: perSegment }, (_, i) => ({
    key: !repeatKeys ? `s${s}k${i}` : s === 0 && i === 0 ? null : `k${i}`,
    value: `seg${s}-rec${i}-${"v".repeat(40)}`,
  }));
}

/**
 * A broker whose topic "t" has `segments` sealed segments of 4 records (rolled by `segment_ms`)
 * and an active one holding one record. `baseline` is the memory file system's open handles
 * right after the topic was made: the active segment's files and the broker's own.
 */
async function manySealed(
  fs: GatedFs,
  maxOpenSegments: number,
  options: { repeatKeys?: boolean; coldStorageDir?: string } = {},
) {
  const memory = fs.inner as MemoryFileSystem;
  const clock = new ManualClock();
  const { broker, logger } = await openBroker(fs, clock, {
    maxOpenSegments,
    ...(options.coldStorageDir ? { coldStorageDir: options.coldStorageDir } : {}),
  });
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { cleanup_policy: "compact,delete", segment_ms: 1000, retention_ms: -1 },
  });
  const baseline = memory.openHandleCount;
  for (let s = 0; s < segments; s++) {
    await produce(broker, "t", batchOf(s, options.repeatKeys === true));
    clock.advance(1000);
  }
  await produce(broker, "t", [{ key: null, value: "active" }]);
  const original = await fetchAll(broker, "t", 0);
  return { broker, logger, clock, memory, baseline, original };
}

function expectIntact(records: readonly ReadRecord[], original: readonly ReadRecord[]): void {
  for (const r of records) {
    const o = original.find((x) => x.offset === r.offset);
    expect(o, `offset ${r.offset} was written`).toBeDefined();
    expect(bytesEqual(r.bytes, o!.bytes), `offset ${r.offset}`).toBe(true);
  }
}

async function fetchAt(broker: LocalBroker, offset: number, maxRecords = 100) {
  const r = await broker.fetch({ topic: "t", partition: 0, offset, maxRecords });
  return decodeRecords(r.records.bytes);
}

/** A stand-in for a segment: pinned on demand, records its evictions. */
class FakeSegment implements CachedSegmentFiles {
  pinned = false;
  evicted = 0;
  constructor(readonly name: string) {}
  evict(): void {
    this.evicted++;
  }
}

describe("the cache of open segment files", () => {
  it("closes the least recently used unpinned segment first, never a pinned one", () => {
    const cache = new SegmentHandleCache(2);
    const [a, b, c, d] = ["a", "b", "c", "d"].map((n) => new FakeSegment(n));
    cache.opened(a);
    cache.opened(b);
    cache.touched(a); // b is now the least recently used
    cache.opened(c);
    expect([a.evicted, b.evicted, c.evicted]).toEqual([0, 1, 0]);
    expect(cache.size).toBe(2);
    a.pinned = true;
    c.pinned = true;
    cache.opened(d); // every other one is pinned: d is the only one to close… but it was just used
    expect(cache.size).toBe(2);
    expect([a.evicted, c.evicted, d.evicted]).toEqual([0, 0, 1]);
    // Over the bound while everything is pinned; a trim once they are let go brings it back.
    const e = new FakeSegment("e");
    e.pinned = true;
    cache.opened(e);
    expect(cache.size).toBe(3);
    a.pinned = false;
    cache.trim();
    expect(cache.size).toBe(2);
    expect(a.evicted).toBe(1);
    cache.closed(c);
    expect(cache.size).toBe(1);
    expect(cache.evictions).toBe(3);
    expect(() => new SegmentHandleCache(0)).toThrow();
  });

  it("keeps descriptors bounded while reads cross every segment, and after a restart", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const { broker, memory, baseline, original } = await manySealed(fs, 2);
    expect(original.map((r) => r.offset)).toEqual(
      Array.from({ length: segments * perSegment + 1 }, (_, i) => i),
    );
    expect(memory.openHandleCount - baseline).toBeLessThanOrEqual(2);
    // Every sealed segment read again, newest first then oldest first: each reopened, intact.
    for (const order of [[...Array(segments).keys()].reverse(), [...Array(segments).keys()]]) {
      for (const s of order) {
        const got = await fetchAt(broker, s * perSegment, perSegment);
        expect(got.map((r) => r.offset)).toEqual([0, 1, 2, 3].map((i) => s * perSegment + i));
        expectIntact(got, original);
        expect(got.map((r) => r.value)).toEqual(batchOf(s, false).map((r) => r.value));
        expect(memory.openHandleCount - baseline).toBeLessThanOrEqual(2);
      }
    }
    const described = broker.describeStorage().topics[0].partitions[0].segments;
    expect(described.slice(0, -1).every((s) => s.index_entries === 1)).toBe(true);
    await broker.close();
    expect(memory.openHandleCount).toBe(0);

    // A start over the same segments leaves at most the bound open beyond the active segment.
    const clock = new ManualClock();
    const capped = await openBroker(fs, clock, { maxOpenSegments: 2 });
    const cappedHandles = memory.openHandleCount;
    await capped.broker.close();
    const wide = await openBroker(fs, clock, { maxOpenSegments: 1000 });
    const wideHandles = memory.openHandleCount;
    expectIntact(await fetchAll(wide.broker, "t", 0), original);
    await wide.broker.close();
    expect(wideHandles - cappedHandles).toBe(segments - 2);
    const again = await openBroker(fs, clock, { maxOpenSegments: 2 });
    expectIntact(await fetchAll(again.broker, "t", 0), original);
    expect(memory.openHandleCount).toBe(cappedHandles);
    await again.broker.close();
  });

  it("reads an index back from its file, and rebuilds it from the log if the file changed meanwhile", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const { broker, logger, memory, original } = await manySealed(fs, 1);
    // Segment 0's files are closed (only the newest sealed one is open): damage its index file.
    memory.writeFileSync(indexName(0), new Uint8Array(16).fill(0xff));
    const got = await fetchAt(broker, 0, perSegment);
    expect(got.map((r) => r.offset)).toEqual([0, 1, 2, 3]);
    expectIntact(got, original);
    const rebuilt = (logger as MemoryLogger).events.filter(
      (e) => e.event === "segment.index_rebuilt",
    );
    expect(rebuilt).toHaveLength(1);
    expect(String(rebuilt[0].fields.reason)).toMatch(/first index entry/);
    // The file is rewritten: the next time the segment is reopened it loads without a rebuild.
    await fetchAt(broker, 40, 1);
    expect(
      decodeRecords(
        (await broker.fetch({ topic: "t", partition: 0, offset: 1, maxRecords: 2 })).records.bytes,
      ).map((r) => r.offset),
    ).toEqual([1, 2]);
    expect(
      (logger as MemoryLogger).events.filter((e) => e.event === "segment.index_rebuilt"),
    ).toHaveLength(1);
    await broker.close();
  });

  it("closes a deleted segment's cached handle, and keeps a reader's segment open through retention", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const { broker, memory, baseline, original } = await manySealed(fs, 1);
    // A reader holds segment 0 (its read is held at the gate): pinned, whatever else is read.
    fs.hold(/00000000000000000000\.log$/, 1);
    const a = fetchAt(broker, 0, 3);
    await fs.waiting;
    for (const s of [5, 7, 9]) expectIntact(await fetchAt(broker, s * perSegment, 1), original);
    // Retention deletes segments 0-5 while the reader is inside segment 0.
    const sizes = broker
      .describeStorage()
      .topics[0].partitions[0].segments.map((s) => s.size_bytes);
    await broker.updateTopicConfig("t", {
      retention_bytes: sizes.slice(6).reduce((x, y) => x + y, 0),
    });
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ status: "ok", segments_deleted: 6 });
    expect(await memory.stat(logName(0))).toBeNull();
    fs.release();
    const readA = await a;
    expect(readA.map((r) => r.offset)).toEqual([0, 1, 2]);
    expectIntact(readA, original);
    // Once the reader let go, every deleted segment's handle is closed: only the bound remains.
    expect(memory.openHandleCount - baseline).toBeLessThanOrEqual(1);
    expectIntact(await fetchAll(broker, "t", 24), original);
    expect(memory.openHandleCount - baseline).toBeLessThanOrEqual(1);
    await broker.close();
  });

  it("keeps the replaced bytes for a reader when compaction renames an output over a segment the cache had closed", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const { broker, memory, baseline, original } = await manySealed(fs, 1, { repeatKeys: true });
    // Segment 0 was closed by the cache. A reader opens it again and is held inside it.
    fs.hold(/00000000000000000000\.log$/, 1);
    const b = fetchAt(broker, 0, 100);
    await fs.waiting;
    // Compaction keeps offset 0 (keyless) and the newest k1…k3 (in segment 11): its output is
    // named after offset 0 and renamed over segment 0's files; the other replaced segments, whose
    // handles the cache had closed, are opened again (retained) before the swap.
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.compaction).toMatchObject({ status: "compacted" });
    const renamedOver = memory.readFileSync(logName(0));
    fs.release();
    const readB = await b;
    expect(readB.map((r) => r.offset)).toEqual([0, 1, 2, 3]);
    expectIntact(readB, original);
    expect(renamedOver.length).toBeLessThan(
      original.slice(0, 4).reduce((n, r) => n + r.bytes.length, 0) * 4,
    );
    const after = await fetchAll(broker, "t", 0);
    expect(after.map((r) => r.offset)).toEqual([0, 44, 45, 46, 47, 48]);
    expectIntact(after, original);
    expect(memory.openHandleCount - baseline).toBeLessThanOrEqual(1);
    await broker.close();
    expect(memory.openHandleCount).toBe(0);
  });

  it("uploads a segment's index to the cold tier after the cache dropped it from memory", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const { broker, memory, baseline, original } = await manySealed(fs, 1, {
      coldStorageDir: "/cold",
    });
    const indexes = Array.from({ length: segments }, (_, s) =>
      memory.readFileSync(indexName(s * perSegment)),
    );
    // A reader holds segment 4 while retention offloads segments 0-5 and the cache churns.
    fs.hold(/00000000000000000004\.log$/, 1);
    const c = fetchAt(broker, 4, 2);
    await fs.waiting;
    const sizes = broker
      .describeStorage()
      .topics[0].partitions[0].segments.map((s) => s.size_bytes);
    await broker.updateTopicConfig("t", {
      retention_bytes: sizes.slice(6).reduce((x, y) => x + y, 0),
    });
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({ status: "ok", segments_deleted: 6 });
    fs.release();
    expectIntact(await c, original);
    for (let s = 0; s < 6; s++) {
      const stem = String(s * perSegment).padStart(20, "0");
      const uploaded = memory.readFileSync(`/cold/topics/t/0/${stem}.index`);
      expect(bytesEqual(uploaded, indexes[s]), `segment ${s} index object`).toBe(true);
    }
    // Every record still reads, the first six segments from the cold tier.
    const all = await fetchAll(broker, "t", 0);
    expect(all).toHaveLength(original.length);
    expectIntact(all, original);
    expect(memory.openHandleCount - baseline).toBeLessThanOrEqual(1);
    await broker.close();
  });

  it("cuts a sealed segment whose files the cache closed (leader-epoch truncation) on the real file system", async () => {
    const { dir, cleanup } = tempDir("es-handles-");
    try {
      const clock = new ManualClock();
      const open = (handles: SegmentHandleCache) =>
        PartitionLog.open({
          fs: new NodeFileSystem(),
          dir: `${dir}/p`,
          name: "t/0",
          clock,
          logger: new MemoryLogger(),
          config: () => ({ segmentBytes: 1 << 20, segmentMs: 1000 }),
          segmentHandles: handles,
        });
      let log = await open(new SegmentHandleCache(1));
      for (let s = 0; s < 6; s++) {
        const b = new EntryBatchBuilder();
        for (let i = 0; i < perSegment; i++) b.add(null, utf8(`s${s}-r${i}`));
        await log.append(b.build());
        clock.advance(1000);
      }
      // Segment 8 (offsets 8-11) was closed by the cache; cut at offset 10, inside it.
      await log.truncateTo(10);
      expect(log.logEndOffset).toBe(10);
      const values: string[] = [];
      for (let offset = 0; offset < log.highWatermark; ) {
        const read = await log.read({ offset, maxRecords: 100, maxBytes: 1 << 20 });
        values.push(...decodeRecords(read.bytes).map((r) => r.value));
        offset = read.nextOffset;
      }
      expect(values).toEqual([
        ...["s0", "s1"].flatMap((p) => [0, 1, 2, 3].map((i) => `${p}-r${i}`)),
        "s2-r0",
        "s2-r1",
      ]);
      await log.close();
      log = await open(new SegmentHandleCache(1));
      expect(log.logEndOffset).toBe(10);
      // The cut segment's index was rewritten: the next start trusts it; 10 is the new active one.
      expect(log.describe().segments.map((s) => [s.base_offset, s.recovery])).toEqual([
        [0, "trusted"],
        [4, "trusted"],
        [8, "trusted"],
        [10, "scanned"],
      ]);
      await log.close();
    } finally {
      cleanup();
    }
  });
});
