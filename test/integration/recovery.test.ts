/**
 * Recovery after files changed between a stop and a start (docs/storage.md "Recovery after a crash";
 * docs/decisions.md §1, §2, §3, §11), on the real file system in temporary directories. Each test writes a
 * partition through a LocalBroker (every record acknowledged, after the fsync of its request),
 * stops it, changes the files as a crash, a bad disk or a person might,
 * starts a new broker, and asserts the one expected outcome: which records are served, at which
 * offsets, where a fetch that starts in a skipped range continues, which offset comes next, what
 * is left on disk, and which reports were logged.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { crc32IsNative, crc32Portable, setCrc32Implementation } from "../../src/lib/crc32.ts";
import { installFastCrc32 } from "../../src/runtime/crc.ts";
import {
  existsSync,
  readFileSync,
  readdirSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { EntryBatchBuilder, RecordCursor, DecodeStatus } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import type { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { tempDir } from "../helpers/tmp.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { fetchAll } from "../helpers/records.ts";

const startMs = 1_700_000_000_000;

/** The record written at `offset`: key `k<offset>`, a value of `valueBytes`, timestamp startMs − offset. */
function expected(
  offset: number,
  valueBytes: number,
): { offset: number; key: string; value: string; timestampMs: number } {
  const head = `value-${offset}-`;
  return {
    offset,
    key: `k${offset}`,
    value: head + "x".repeat(Math.max(0, valueBytes - head.length)),
    timestampMs: startMs - offset,
  };
}

async function open(dataDir: string): Promise<{ broker: LocalBroker; logger: MemoryLogger }> {
  const { broker, logger } = await openTestBroker({
    fs: new NodeFileSystem(),
    dataDir,
    clock: new ManualClock(startMs),
  });
  return { broker, logger };
}

/**
 * Writes `count` records to topic "r" (one partition) one request at a time and stops cleanly;
 * with `crash`, the clean-stop record is then removed, as a crash leaves the directory.
 * @returns the data dir, the partition dir, the segment base offsets, and the record size.
 */
async function writeLog(options: {
  count: number;
  segmentBytes: number;
  valueBytes?: number;
  crash?: boolean;
}) {
  // Large logs go ten records per request (each request still acknowledged after its fsync).
  const perRequest = options.count > 100 ? 10 : 1;
  const { dir } = tempDir();
  const dataDir = `${dir}/data`;
  const valueBytes = options.valueBytes ?? 100;
  const { broker } = await open(dataDir);
  await broker.createTopic({
    name: "r",
    partitions: 1,
    config: { segment_bytes: options.segmentBytes },
  });
  for (let o = 0; o < options.count; o += perRequest) {
    const builder = new EntryBatchBuilder();
    const n = Math.min(perRequest, options.count - o);
    for (let i = 0; i < n; i++) {
      const e = expected(o + i, valueBytes);
      builder.add(utf8(e.key), utf8(e.value), e.timestampMs);
    }
    const result = await broker.produce({ topic: "r", partition: 0, batch: builder.build() });
    expect(result.spans).toEqual([{ partition: 0, baseOffset: o, count: n }]);
  }
  await broker.close();
  const part = `${dataDir}/topics/r/0`;
  expect(existsSync(`${dataDir}/clean-stop.json`)).toBe(true);
  if (options.crash) unlinkSync(`${dataDir}/clean-stop.json`);
  return { dataDir, part, bases: segmentBases(part), valueBytes };
}

function segmentBases(part: string): number[] {
  return readdirSync(part)
    .filter((n) => /^\d{20}\.log$/.test(n))
    .map((n) => Number(n.slice(0, 20)))
    .sort((a, b) => a - b);
}

const logPath = (part: string, base: number) => `${part}/${String(base).padStart(20, "0")}.log`;
const indexPath = (part: string, base: number) => `${part}/${String(base).padStart(20, "0")}.index`;

/** Positions of the records in a log file: record_len at `position`, key and value where they start. */
function recordsIn(
  path: string,
): { offset: number; position: number; size: number; keyStart: number; valueStart: number }[] {
  const bytes = readFileSync(path);
  const cursor = new RecordCursor().reset(bytes);
  const out = [];
  let p = 0;
  while (p < bytes.length && cursor.decode(p) === DecodeStatus.Ok) {
    out.push({
      offset: cursor.offset,
      position: p,
      size: cursor.sizeBytes,
      keyStart: cursor.keyStart,
      valueStart: cursor.valueStart,
    });
    p += cursor.sizeBytes;
  }
  return out;
}

/** Changes bytes of a file in place. */
function patch(path: string, edit: (bytes: Buffer) => void): void {
  const bytes = readFileSync(path);
  edit(bytes);
  writeFileSync(path, bytes);
}

/** Every record served from `from` to the high watermark, decoded, following nextOffset. */
async function readAll(broker: LocalBroker, from = 0) {
  // Seven records a fetch, so reads cross index entries and segment ends.
  return (await fetchAll(broker, "r", from, { maxRecords: 7 })).map((r) => ({
    offset: r.offset,
    key: r.key!,
    value: r.value,
    timestampMs: r.timestampMs,
  }));
}

/** The first record a fetch at `offset` serves (its offset), or null. */
async function firstServed(broker: LocalBroker, offset: number): Promise<number | null> {
  const r = await broker.fetch({ topic: "r", partition: 0, offset, maxRecords: 1 });
  if (r.records.count === 0) return null;
  const cursor = new RecordCursor().reset(r.records.bytes);
  expect(cursor.decode(0)).toBe(DecodeStatus.Ok);
  return cursor.offset;
}

async function produceOne(broker: LocalBroker, text: string): Promise<number> {
  const r = await broker.produce({
    topic: "r",
    partition: 0,
    batch: new EntryBatchBuilder().add(utf8("new"), utf8(text), startMs).build(),
  });
  return r.spans[0].baseOffset;
}

function range(from: number, to: number): number[] {
  return Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);
}

function events(logger: MemoryLogger, name: string) {
  return logger.named(name);
}

describe("recovery after the files changed between stop and start", () => {
  it("after a crash, cuts 7 garbage bytes appended to the active log as a torn tail and serves every record", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024, crash: true });
    const active = logPath(w.part, w.bases.at(-1)!);
    const size = statSync(active).size;
    writeFileSync(
      active,
      Buffer.concat([readFileSync(active), Buffer.from([1, 2, 3, 4, 5, 6, 7])]),
    );
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(range(0, 30).map((o) => expected(o, w.valueBytes)));
    expect(events(logger, "recovery.torn_tail_cut")).toMatchObject([
      { partition: "r/0", position: size, cut_bytes: 7 },
    ]);
    expect(statSync(active).size).toBe(size);
    expect(await produceOne(broker, "after")).toBe(30);
  });

  it("after a crash, cuts the last record when it is one byte short, and gives its offset to the next record", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024, crash: true });
    const active = logPath(w.part, w.bases.at(-1)!);
    const last = recordsIn(active).at(-1)!;
    expect(last.offset).toBe(29);
    writeFileSync(active, readFileSync(active).subarray(0, last.position + last.size - 1));
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(range(0, 29).map((o) => expected(o, w.valueBytes)));
    expect(events(logger, "recovery.torn_tail_cut")).toMatchObject([
      { position: last.position, cut_bytes: last.size - 1 },
    ]);
    expect(statSync(active).size).toBe(last.position);
    expect(await produceOne(broker, "after")).toBe(29);
  });

  describe("after a clean stop (a clean-stop record: no write was in flight, docs/decisions.md §17)", () => {
    /**
     * The active segment's tail changed after a clean stop: the segment is left as it is and
     * reported corrupt, a new active segment is rolled at the recorded log end (30), the records
     * before the damage are served, and no offset is given to a second record.
     */
    async function expectCleanStopCorruption(
      edit: (active: string, last: { position: number; size: number; valueStart: number }) => void,
      served: number,
    ) {
      const w = await writeLog({ count: 30, segmentBytes: 1024 });
      const active = logPath(w.part, w.bases.at(-1)!);
      const last = recordsIn(active).at(-1)!;
      expect(last.offset).toBe(29);
      edit(active, last);
      const size = statSync(active).size;
      const { broker, logger } = await open(w.dataDir);
      expect(events(logger, "recovery.torn_tail_cut")).toEqual([]);
      expect(events(logger, "recovery.corrupt_segment")).toMatchObject([{ segment: active }]);
      expect(statSync(active).size).toBe(size);
      expect(existsSync(`${w.dataDir}/clean-stop.json`)).toBe(false);
      expect(segmentBases(w.part)).toEqual([...w.bases, 30]);
      expect(await readAll(broker)).toEqual(range(0, served).map((o) => expected(o, w.valueBytes)));
      expect((await broker.listOffsets({ topic: "r", partition: 0 })).highWatermark).toBe(30);
      expect(await produceOne(broker, "after")).toBe(30);
      await broker.close();
    }

    it("reports a flipped bit in the last record's value as corruption, not a torn tail: offset 29 is never reused", async () => {
      await expectCleanStopCorruption(
        (active, last) => patch(active, (b) => void (b[last.valueStart + 3] ^= 0x01)),
        29,
      );
    });

    it("reports a last record one byte short as corruption", async () => {
      await expectCleanStopCorruption(
        (active, last) =>
          writeFileSync(active, readFileSync(active).subarray(0, last.position + last.size - 1)),
        29,
      );
    });

    it("reports a whole last record missing as corruption (every record left decodes)", async () => {
      await expectCleanStopCorruption(
        (active, last) => writeFileSync(active, readFileSync(active).subarray(0, last.position)),
        29,
      );
    });

    it("reports 7 bytes appended to the active log as corruption and serves every record", async () => {
      await expectCleanStopCorruption(
        (active) =>
          writeFileSync(
            active,
            Buffer.concat([readFileSync(active), Buffer.from([1, 2, 3, 4, 5, 6, 7])]),
          ),
        30,
      );
    });

    it("continues at the recorded log end when the active segment is gone", async () => {
      const w = await writeLog({ count: 30, segmentBytes: 1024 });
      expect(w.bases.length).toBeGreaterThan(1);
      const activeBase = w.bases.at(-1)!;
      unlinkSync(logPath(w.part, activeBase));
      unlinkSync(indexPath(w.part, activeBase));
      const { broker, logger } = await open(w.dataDir);
      expect(events(logger, "recovery.clean_stop_log_end_missing")).toMatchObject([
        { partition: "r/0", next_offset: activeBase, clean_stop_log_end_offset: 30 },
      ]);
      expect(segmentBases(w.part)).toEqual([...w.bases.slice(0, -1), 30]);
      expect(await produceOne(broker, "after")).toBe(30);
      await broker.close();
    });

    it("starts as usual from an intact clean stop, and removes the record", async () => {
      const w = await writeLog({ count: 30, segmentBytes: 1024 });
      const { broker, logger } = await open(w.dataDir);
      expect(existsSync(`${w.dataDir}/clean-stop.json`)).toBe(false);
      expect(events(logger, "recovery.corrupt_segment")).toEqual([]);
      expect(events(logger, "recovery.partition")).toMatchObject([{ clean_stop: true }]);
      expect(segmentBases(w.part)).toEqual(w.bases);
      expect(await readAll(broker)).toEqual(range(0, 30).map((o) => expected(o, w.valueBytes)));
      expect(await produceOne(broker, "after")).toBe(30);
      await broker.close();
    });

    it("ignores an unreadable record, reports it, and applies the crash rule", async () => {
      const w = await writeLog({ count: 30, segmentBytes: 1024 });
      writeFileSync(`${w.dataDir}/clean-stop.json`, "{");
      const active = logPath(w.part, w.bases.at(-1)!);
      const last = recordsIn(active).at(-1)!;
      writeFileSync(active, readFileSync(active).subarray(0, last.position + 5));
      const { broker, logger } = await open(w.dataDir);
      expect(events(logger, "recovery.clean_stop_unreadable")).toHaveLength(1);
      expect(events(logger, "recovery.torn_tail_cut")).toHaveLength(1);
      expect(existsSync(`${w.dataDir}/clean-stop.json`)).toBe(false);
      expect(await produceOne(broker, "after")).toBe(29);
      await broker.close();
    });
  });

  /**
   * A sealed segment with a bad record: the records before it are served, the rest of that
   * segment is skipped and reported, the file is left as it is, a fetch inside the skipped
   * range continues at the next segment, and the next offset does not move.
   */
  async function expectSealedCorruption(options: {
    segmentBytes: number;
    count: number;
    edit: (
      bytes: Buffer,
      record: { position: number; size: number; keyStart: number; valueStart: number },
    ) => void;
    pick?: number;
    event: string;
  }) {
    const w = await writeLog({ count: options.count, segmentBytes: options.segmentBytes });
    expect(w.bases.length).toBeGreaterThanOrEqual(3);
    const base = w.bases[1];
    const next = w.bases[2];
    const path = logPath(w.part, base);
    const records = recordsIn(path);
    const bad = records[options.pick ?? Math.floor(records.length / 2)];
    patch(path, (bytes) => options.edit(bytes, bad));
    const before = readFileSync(path);
    const { broker, logger } = await open(w.dataDir);
    const survivors = [...range(0, bad.offset), ...range(next, options.count)];
    expect(await readAll(broker)).toEqual(survivors.map((o) => expected(o, w.valueBytes)));
    expect(events(logger, options.event)).toMatchObject([
      { partition: "r/0", segment: path, position: bad.position },
    ]);
    for (const o of range(bad.offset, next)) expect(await firstServed(broker, o)).toBe(next);
    expect(await firstServed(broker, bad.offset - 1)).toBe(bad.offset - 1);
    expect(readFileSync(path).equals(before)).toBe(true);
    expect(await produceOne(broker, "after")).toBe(options.count);
    return { logger };
  }

  it("skips the rest of a sealed segment after a byte flipped in a record's value (found at start)", async () => {
    await expectSealedCorruption({
      segmentBytes: 1024,
      count: 30,
      edit: (b, r) => void (b[r.valueStart + 3] ^= 0x40),
      event: "recovery.corrupt_segment",
    });
  });

  it("counts the log end it publishes for leader eligibility only up to a corrupt sealed segment (cluster log_ends, #27d)", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024 });
    expect(w.bases.length).toBeGreaterThanOrEqual(3);
    const path = logPath(w.part, w.bases[1]);
    const bad = recordsIn(path)[1];
    patch(path, (bytes) => void (bytes[bad.valueStart + 3] ^= 0x40));
    const { broker, logger } = await open(w.dataDir);
    expect(events(logger, "recovery.corrupt_segment")).toHaveLength(1);
    // The log still ends at 30, but this copy misses records below that: a lone eligible replica
    // (ELR) publishing 30 could be elected over committed records it does not hold.
    expect(broker.partitionLog("r", 0).logEndOffset).toBe(30);
    expect(broker.logEndOffsets()).toEqual(new Map([["r/0", w.bases[1]]]));
  });

  it("skips the rest of a sealed segment whose start-up check passed, once a read meets the flipped byte", async () => {
    // 16 KiB segments have index entries every 4 KiB; the start-up check reads only the first
    // record and the tail after the last entry, so a flip in between is found by a read.
    const { logger } = await expectSealedCorruption({
      segmentBytes: 16 * 1024,
      count: 300,
      pick: 5,
      edit: (b, r) => void (b[r.valueStart + 3] ^= 0x40),
      event: "read.corrupt_segment",
    });
    expect(events(logger, "recovery.corrupt_segment")).toEqual([]);
  });

  describe("with the runtime's native CRC-32 (a read checks its records' CRCs together)", () => {
    beforeAll(() => void installFastCrc32());
    afterAll(() => setCrc32Implementation(crc32Portable));

    for (const [what, pick, edit] of [
      [
        "a value byte",
        5,
        (b: Buffer, r: { valueStart: number }) => void (b[r.valueStart + 3] ^= 0x40),
      ],
      [
        "a CRC byte",
        9,
        (b: Buffer, r: { position: number; size: number }) =>
          void (b[r.position + r.size - 1] ^= 0x08),
      ],
      [
        "an offset byte",
        20,
        (b: Buffer, r: { position: number }) => void (b[r.position + 11] ^= 0x01),
      ],
    ] as const) {
      it(`serves the records before ${what} flipped mid-segment, then skips the rest of it`, async () => {
        expect(crc32IsNative()).toBe(true);
        const { logger } = await expectSealedCorruption({
          segmentBytes: 16 * 1024,
          count: 300,
          pick,
          edit: edit as (
            b: Buffer,
            r: { position: number; size: number; valueStart: number },
          ) => void,
          event: "read.corrupt_segment",
        });
        expect(events(logger, "recovery.corrupt_segment")).toEqual([]);
      });
    }
  });

  it("skips the rest of a sealed segment after a byte flipped in a record's CRC", async () => {
    await expectSealedCorruption({
      segmentBytes: 1024,
      count: 30,
      edit: (b, r) => void (b[r.position + r.size - 2] ^= 0x01),
      event: "recovery.corrupt_segment",
    });
  });

  it("skips the rest of a sealed segment after the top byte of a record_len flipped", async () => {
    await expectSealedCorruption({
      segmentBytes: 1024,
      count: 30,
      edit: (b, r) => void (b[r.position] ^= 0x80),
      event: "recovery.corrupt_segment",
    });
  });

  it("skips the rest of a sealed segment after a record_len set to 27, below the smallest record", async () => {
    await expectSealedCorruption({
      segmentBytes: 1024,
      count: 30,
      edit: (b, r) => b.writeUInt32BE(27, r.position),
      event: "recovery.corrupt_segment",
    });
  });

  it("skips the rest of a sealed segment after a key_len set to -2", async () => {
    await expectSealedCorruption({
      segmentBytes: 1024,
      count: 30,
      edit: (b, r) => b.writeInt32BE(-2, r.keyStart - 4),
      event: "recovery.corrupt_segment",
    });
  });

  it("after a crash, cuts a last record whose record_len became 0xFFFFFFFF as a torn tail (nothing valid follows it)", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024, crash: true });
    const active = logPath(w.part, w.bases.at(-1)!);
    const last = recordsIn(active).at(-1)!;
    patch(active, (b) => b.writeUInt32BE(0xffffffff, last.position));
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(range(0, 29).map((o) => expected(o, w.valueBytes)));
    expect(events(logger, "recovery.torn_tail_cut")).toMatchObject([
      { position: last.position, cut_bytes: last.size },
    ]);
    expect(events(logger, "recovery.corrupt_segment")).toEqual([]);
    expect(await produceOne(broker, "after")).toBe(29);
  });

  it("treats a bad record followed by valid ones in the active segment as corruption: nothing cut, a new active segment, the next offset above every valid record (docs/decisions.md §1)", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 4096 });
    const activeBase = w.bases.at(-1)!;
    const active = logPath(w.part, activeBase);
    const records = recordsIn(active);
    expect(records.length).toBeGreaterThanOrEqual(4);
    const bad = records[1];
    patch(active, (b) => void (b[bad.valueStart] ^= 0xff));
    const size = statSync(active).size;
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(
      range(0, bad.offset).map((o) => expected(o, w.valueBytes)),
    );
    expect(events(logger, "recovery.corrupt_segment")).toMatchObject([
      { segment: active, position: bad.position, highest_skipped_offset: 29 },
    ]);
    expect(events(logger, "recovery.torn_tail_cut")).toEqual([]);
    expect(statSync(active).size).toBe(size);
    expect(segmentBases(w.part)).toEqual([...w.bases, 30]);
    expect((await broker.listOffsets({ topic: "r", partition: 0 })).highWatermark).toBe(30);
    expect(await produceOne(broker, "after")).toBe(30);
    for (const o of range(bad.offset, 30)) expect(await firstServed(broker, o)).toBe(30);
  });

  /** An index problem: every record is still served, from every offset, and the index is rebuilt. */
  async function expectIndexRebuilt(options: {
    segmentBytes: number;
    count: number;
    edit: (index: string, log: string) => void;
    event: string;
  }) {
    const w = await writeLog({ count: options.count, segmentBytes: options.segmentBytes });
    const base = w.bases[0];
    options.edit(indexPath(w.part, base), logPath(w.part, base));
    const { broker, logger } = await open(w.dataDir);
    const all = range(0, options.count).map((o) => expected(o, w.valueBytes));
    expect(await readAll(broker)).toEqual(all);
    for (const o of range(0, w.bases[1] ?? options.count))
      expect(await firstServed(broker, o)).toBe(o);
    expect(events(logger, options.event)).toMatchObject([
      { partition: "r/0", segment: indexPath(w.part, base) },
    ]);
    const rebuilt = readFileSync(indexPath(w.part, base));
    expect(rebuilt.length % 16).toBe(0);
    expect(rebuilt.length).toBeGreaterThanOrEqual(16);
    expect(rebuilt.readBigUInt64BE(0)).toBe(0n);
    expect(rebuilt.readBigUInt64BE(8)).toBe(0n);
    return { w, rebuilt };
  }

  it("rebuilds an index truncated to 9 bytes", async () => {
    await expectIndexRebuilt({
      segmentBytes: 1024,
      count: 30,
      edit: (index) => writeFileSync(index, readFileSync(index).subarray(0, 9)),
      event: "recovery.index_rebuilt",
    });
  });

  it("rebuilds a deleted index", async () => {
    await expectIndexRebuilt({
      segmentBytes: 1024,
      count: 30,
      edit: (index) => unlinkSync(index),
      event: "recovery.index_rebuilt",
    });
  });

  it("rebuilds a zero-filled index", async () => {
    const { rebuilt } = await expectIndexRebuilt({
      segmentBytes: 16 * 1024,
      count: 300,
      edit: (index) => writeFileSync(index, Buffer.alloc(readFileSync(index).length)),
      event: "recovery.index_rebuilt",
    });
    expect(rebuilt.length).toBeGreaterThan(16);
    expect(rebuilt.readBigUInt64BE(16)).toBeGreaterThan(0n);
  });

  it("rebuilds an index given an entry past the end of the log", async () => {
    await expectIndexRebuilt({
      segmentBytes: 1024,
      count: 30,
      edit: (index, log) => {
        const entry = Buffer.alloc(16);
        entry.writeBigUInt64BE(3n, 0);
        entry.writeBigUInt64BE(BigInt(statSync(log).size + 100), 8);
        writeFileSync(index, Buffer.concat([readFileSync(index), entry]));
      },
      event: "recovery.index_rebuilt",
    });
  });

  it("rebuilds an index whose last entry points into the middle of a record (found at start)", async () => {
    await expectIndexRebuilt({
      segmentBytes: 16 * 1024,
      count: 300,
      edit: (index) =>
        patch(index, (b) => b.writeBigUInt64BE(b.readBigUInt64BE(b.length - 8) + 5n, b.length - 8)),
      event: "recovery.index_rebuilt",
    });
  });

  it("rebuilds an index whose middle entry points into the middle of a record (found by a read)", async () => {
    const { w, rebuilt } = await expectIndexRebuilt({
      segmentBytes: 16 * 1024,
      count: 300,
      edit: (index) => patch(index, (b) => b.writeBigUInt64BE(b.readBigUInt64BE(24) + 5n, 24)),
      event: "segment.index_rebuilt",
    });
    // The rewritten entry points at the start of the record it names again.
    const starts = new Map(
      recordsIn(logPath(w.part, w.bases[0])).map((r) => [r.position, r.offset]),
    );
    expect(starts.get(Number(rebuilt.readBigUInt64BE(24)))).toBe(
      Number(rebuilt.readBigUInt64BE(16)),
    );
  });

  it("skips a segment whose first record's offset differs from its file name (docs/decisions.md §11)", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024 });
    const [, base, next] = w.bases;
    const renamed = base + 1;
    writeFileSync(logPath(w.part, renamed), readFileSync(logPath(w.part, base)));
    writeFileSync(indexPath(w.part, renamed), readFileSync(indexPath(w.part, base)));
    unlinkSync(logPath(w.part, base));
    unlinkSync(indexPath(w.part, base));
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(
      [...range(0, base), ...range(next, 30)].map((o) => expected(o, w.valueBytes)),
    );
    expect(events(logger, "recovery.corrupt_segment")).toMatchObject([
      { segment: logPath(w.part, renamed), position: 0 },
    ]);
    for (const o of range(base, next)) expect(await firstServed(broker, o)).toBe(next);
    expect(await produceOne(broker, "after")).toBe(30);
  });

  it("rebuilds an index whose middle entry points at the start of a later record (found by a read), serving the record it skipped", async () => {
    await expectIndexRebuilt({
      segmentBytes: 16 * 1024,
      count: 300,
      edit: (index, log) => {
        const starts = recordsIn(log).map((r) => r.position);
        patch(index, (b) => {
          const position = Number(b.readBigUInt64BE(24));
          b.writeBigUInt64BE(BigInt(starts[starts.indexOf(position) + 1]), 24);
        });
      },
      event: "segment.index_rebuilt",
    });
  });

  it("reports a segment named above 2^53 − 1 as unsupported and leaves it alone (docs/decisions.md §6)", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024 });
    writeFileSync(`${w.part}/99999999999999999999.log`, readFileSync(logPath(w.part, w.bases[0])));
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(range(0, 30).map((o) => expected(o, w.valueBytes)));
    expect(events(logger, "recovery.stray_file")).toMatchObject([
      { file: `${w.part}/99999999999999999999.log`, reason: expect.stringMatching(/unsupported/) },
    ]);
    expect(await produceOne(broker, "after")).toBe(30);
  });

  it("assigns 2^53 − 1 as the last offset and then refuses appends with unsupported (docs/decisions.md §6)", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024 });
    const last = Number.MAX_SAFE_INTEGER;
    writeFileSync(logPath(w.part, last), new Uint8Array(0));
    const { broker } = await open(w.dataDir);
    expect((await broker.listOffsets({ topic: "r", partition: 0 })).highWatermark).toBe(last);
    expect(await produceOne(broker, "the last offset")).toBe(last);
    const refused = await broker
      .produce({
        topic: "r",
        partition: 0,
        batch: new EntryBatchBuilder().add(null, utf8("one too many")).build(),
      })
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({ kind: { code: "unsupported" } });
    expect(await firstServed(broker, last)).toBe(last);
    expect(await firstServed(broker, 30)).toBe(last);
    await broker.close();
    const again = await open(w.dataDir);
    expect(await firstServed(again.broker, last)).toBe(last);
    expect((await again.broker.listOffsets({ topic: "r", partition: 0 })).highWatermark).toBe(
      last + 1,
    );
  });

  it("reports stray files 147.log and x.log.bak, leaves them in place, and serves every record", async () => {
    const w = await writeLog({ count: 30, segmentBytes: 1024 });
    writeFileSync(`${w.part}/147.log`, "not a segment");
    writeFileSync(`${w.part}/x.log.bak`, readFileSync(logPath(w.part, w.bases[0])));
    const { broker, logger } = await open(w.dataDir);
    expect(await readAll(broker)).toEqual(range(0, 30).map((o) => expected(o, w.valueBytes)));
    expect(
      events(logger, "recovery.stray_file")
        .map((f) => f.file)
        .sort(),
    ).toEqual([`${w.part}/147.log`, `${w.part}/x.log.bak`]);
    expect(existsSync(`${w.part}/147.log`)).toBe(true);
    expect(existsSync(`${w.part}/x.log.bak`)).toBe(true);
    expect(await produceOne(broker, "after")).toBe(30);
  });
});
