/**
 * Readers against retention and compaction: a fetch already reading a segment when retention
 * deletes it or compaction replaces it finishes from the old file with every record intact (CRC
 * and offset checked, bytes equal to what was written); the consumer's next fetch below the new
 * log start offset gets a clear offset_out_of_range, and a consumer past it continues on the new
 * segments.
 */
import { describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
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

const keyed = (prefix: string, n: number): Rec[] =>
  Array.from({ length: n }, (_, i) => ({
    key: `${prefix}${i}`,
    value: `${prefix}-${i}-${"r".repeat(50)}`,
  }));

/** Sealed segments 0 (a0–a4), 5 (b0–b4), 10 (c0–c4), 15 (c0–c2 again, two keyless); active 20. */
async function fourSealed(fs: GatedFs) {
  const clock = new ManualClock();
  const { broker } = await openBroker(fs, clock);
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { cleanup_policy: "compact,delete", segment_ms: 1000, retention_ms: -1 },
  });
  for (const batch of [
    keyed("a", 5),
    keyed("b", 5),
    keyed("c", 5),
    [...keyed("c", 3), { key: null, value: "n1" }, { key: null, value: "n2" }],
  ]) {
    await produce(broker, "t", batch);
    clock.advance(1000);
  }
  await produce(broker, "t", [{ key: "z", value: "active" }]);
  const original = await fetchAll(broker, "t", 0);
  const sizes = broker.describeStorage().topics[0].partitions[0].segments.map((s) => s.size_bytes);
  return { broker, clock, original, sizes };
}

function expectIntact(records: readonly ReadRecord[], original: readonly ReadRecord[]): void {
  for (const r of records) {
    const o = original.find((x) => x.offset === r.offset);
    expect(o, `offset ${r.offset} was written`).toBeDefined();
    expect(bytesEqual(r.bytes, o!.bytes), `offset ${r.offset}`).toBe(true);
  }
}

describe("readers while retention and compaction remove their segments", () => {
  it("finish reads already in progress from the old files, then get a clear out-of-range answer", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const { broker, original, sizes } = await fourSealed(fs);
    await broker.updateTopicConfig("t", { retention_bytes: sizes[2] + sizes[3] + sizes[4] });

    // A reads segment 0 (retention deletes it), B reads segment 10 (compaction replaces it).
    fs.hold(/\/(00000000000000000000|00000000000000000010)\.log$/, 2);
    const a = broker.fetch({ topic: "t", partition: 0, offset: 0, maxRecords: 3 });
    const b = broker.fetch({ topic: "t", partition: 0, offset: 10, maxRecords: 100 });
    await fs.waiting;
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      status: "ok",
      segments_deleted: 2,
      log_start_offset_after: 10,
    });
    expect(run.compaction).toMatchObject({ status: "compacted", records_dropped: 3 });
    fs.release();

    const readA = decodeRecords((await a).records.bytes);
    expect(readA.map((r) => r.offset)).toEqual([0, 1, 2]);
    expectIntact(readA, original);
    const next = broker.fetch({ topic: "t", partition: 0, offset: 3, maxRecords: 3 });
    await expect(next).rejects.toBeInstanceOf(BrokerError);
    await expect(next).rejects.toMatchObject({ kind: { code: "offset_out_of_range" } });
    await expect(next).rejects.toThrow(
      /offset 3: outside \[log start offset 10, high watermark 21\]/,
    );

    // B got segment 10 as it was, dropped records included; its next fetch reads the new segments.
    const readB = decodeRecords((await b).records.bytes);
    expect(readB.map((r) => r.offset)).toEqual([10, 11, 12, 13, 14]);
    expectIntact(readB, original);
    const rest = await fetchAll(broker, "t", 15);
    expect(rest.map((r) => r.offset)).toEqual([15, 16, 17, 18, 19, 20]);
    expectIntact(rest, original);
    expect((await fetchAll(broker, "t", 10)).map((r) => r.offset)).toEqual([
      13, 14, 15, 16, 17, 18, 19, 20,
    ]);
    await broker.close();
  });

  it("lets concurrent consumers from offset 0 see only intact records in order until they fall below the log start offset", async () => {
    const fs = new GatedFs(new MemoryFileSystem());
    const clock = new ManualClock();
    const { broker } = await openBroker(fs, clock);
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { cleanup_policy: "compact,delete", segment_ms: 1000, retention_ms: -1 },
    });
    for (let s = 0; s < 12; s++) {
      await produce(
        broker,
        "t",
        Array.from({ length: 8 }, (_, i) => ({
          key: i % 2 === 0 ? `k${(s * 8 + i) % 10}` : null,
          value: `s${s}-r${i}-${"q".repeat(30)}`,
        })),
      );
      clock.advance(1000);
    }
    await produce(broker, "t", [{ key: null, value: "active" }]);
    const original = await fetchAll(broker, "t", 0);
    const highWatermark = original.at(-1)!.offset + 1;

    const consume = async (
      maxRecords: number,
    ): Promise<{ records: ReadRecord[]; ending: string }> => {
      const records: ReadRecord[] = [];
      let offset = 0;
      for (;;) {
        let r;
        try {
          r = await broker.fetch({ topic: "t", partition: 0, offset, maxRecords });
        } catch (err) {
          if (err instanceof BrokerError && err.kind.code === "offset_out_of_range")
            return { records, ending: "out_of_range" };
          throw err;
        }
        for (const rec of decodeRecords(r.records.bytes)) {
          if (records.length > 0) expect(rec.offset).toBeGreaterThan(records.at(-1)!.offset);
          records.push(rec);
        }
        if (r.nextOffset >= highWatermark) return { records, ending: "end" };
        offset = r.nextOffset;
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    const cleaner = async (broker: LocalBroker) => {
      for (const keepSegments of [10, 7, 4, 1]) {
        const size = broker
          .describeStorage()
          .topics[0].partitions[0].segments.slice(-keepSegments - 1)
          .reduce((n, s) => n + s.size_bytes, 0);
        await broker.updateTopicConfig("t", { retention_bytes: size });
        await broker.cleanup("t");
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    const [c1, c2, c3] = await Promise.all([consume(2), consume(5), consume(1), cleaner(broker)]);
    for (const c of [c1, c2, c3]) {
      expect(c.records.length).toBeGreaterThan(0);
      expectIntact(c.records, original);
      expect(["end", "out_of_range"]).toContain(c.ending);
    }
    expect(c3.ending).toBe("out_of_range"); // one record per fetch cannot outrun the deletions
    const lso = (await broker.listOffsets({ topic: "t", partition: 0 })).logStartOffset;
    expect(lso).toBeGreaterThan(0);
    await broker.close();
  });
});
