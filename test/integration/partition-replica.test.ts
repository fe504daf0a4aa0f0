/**
 * The storage operations replication adds (cluster mode): `PartitionLog.truncateTo` (leader-epoch
 * truncation: across segments, the index trimmed, surviving a restart, a prefix of the log at
 * every step) and `PartitionLog.skipTo` (a follower skipping what its leader compacted away), the
 * leader-epoch history file, the follower's end-to-end check of stored records, and the
 * leader's kept recent writes (`keepRecentWrites` / `readRecent`).
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { crc32IsNative, crc32Portable, setCrc32Implementation } from "../../src/lib/crc32.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { installFastCrc32 } from "../../src/runtime/crc.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { LeaderEpochHistory, leaderEpochsFileName } from "../../src/storage/leader-epochs.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import {
  checkStoredRuns,
  EntryBatchBuilder,
  encodeRecord,
  RecordFormatError,
  skipStored,
} from "../../src/storage/record.ts";
import { decodeRecords } from "../helpers/records.ts";
import { tempDir } from "../helpers/tmp.ts";

async function openLog(dir: string, logger = new MemoryLogger()) {
  return PartitionLog.open({
    fs: new NodeFileSystem(),
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger,
    config: () => ({ segmentBytes: 1024, segmentMs: 7 * 24 * 3600_000 }),
  });
}

function batchOf(values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v), 7);
  return b.build();
}

async function readAll(log: PartitionLog): Promise<{ offset: number; value: string }[]> {
  const out: { offset: number; value: string }[] = [];
  let offset = log.logStartOffset;
  while (offset < log.highWatermark) {
    const r = await log.read({ offset, maxRecords: 1000, maxBytes: 1 << 20 });
    if (r.count === 0) break;
    for (const x of decodeRecords(r.bytes)) out.push({ offset: x.offset, value: x.value });
    offset = r.nextOffset;
  }
  return out;
}

const values = (n: number, prefix = "v") =>
  Array.from({ length: n }, (_, i) => `${prefix}-${i}-${"x".repeat(40)}`);

describe("PartitionLog.truncateTo", () => {
  it("cuts across sealed segments, keeps a prefix, and the log reopens the same", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    for (let i = 0; i < 10; i++) await log.append(batchOf(values(5, `b${i}`)));
    expect(log.segmentCount).toBeGreaterThan(3);
    const before = await readAll(log);
    expect(before).toHaveLength(50);
    await log.truncateTo(23);
    expect(log.logEndOffset).toBe(23);
    expect(log.highWatermark).toBe(23);
    expect(await readAll(log)).toEqual(before.slice(0, 23));
    // New records continue at the cut, and nothing of the old suffix comes back.
    await log.append(batchOf(["new-23", "new-24"]));
    expect((await readAll(log)).slice(21)).toEqual([
      before[21],
      before[22],
      { offset: 23, value: "new-23" },
      { offset: 24, value: "new-24" },
    ]);
    await log.close();
    const reopened = await openLog(`${dir}/p`);
    expect(await readAll(reopened)).toEqual([
      ...before.slice(0, 23),
      { offset: 23, value: "new-23" },
      { offset: 24, value: "new-24" },
    ]);
    expect(reopened.describe().stray_files).toEqual([]);
    await reopened.close();
  });

  it("cuts inside the active segment and to an empty log", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a", "b", "c"]));
    await log.truncateTo(1);
    expect(await readAll(log)).toEqual([{ offset: 0, value: "a" }]);
    await log.truncateTo(0);
    expect(log.logEndOffset).toBe(0);
    await log.append(batchOf(["z"]));
    await log.close();
    const reopened = await openLog(`${dir}/p`);
    expect(await readAll(reopened)).toEqual([{ offset: 0, value: "z" }]);
    await reopened.close();
  });

  it("a crash between its steps leaves a prefix of the log (segments deleted newest first)", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    for (let i = 0; i < 8; i++) await log.append(batchOf(values(5, `b${i}`)));
    const before = await readAll(log);
    await log.close();
    // The state after the first deletion only (the newest segment gone, nothing cut yet).
    const logs = readdirSync(`${dir}/p`)
      .filter((f) => f.endsWith(".log"))
      .sort();
    const newest = logs.at(-1)!;
    writeFileSync(`${dir}/p/${newest}`, new Uint8Array(0));
    const reopened = await openLog(`${dir}/p`);
    const after = await readAll(reopened);
    expect(after).toEqual(before.slice(0, after.length));
    await reopened.close();
  });
});

describe("PartitionLog.skipTo", () => {
  it("moves the log end over a gap; reads continue after it, and it survives a restart", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a", "b"]));
    await log.skipTo(10);
    expect(log.logEndOffset).toBe(10);
    expect(log.highWatermark).toBe(10);
    const r = await log.append(batchOf(["k"]));
    expect(r.baseOffset).toBe(10);
    expect(await readAll(log)).toEqual([
      { offset: 0, value: "a" },
      { offset: 1, value: "b" },
      { offset: 10, value: "k" },
    ]);
    await log.close();
    const reopened = await openLog(`${dir}/p`);
    expect(reopened.logEndOffset).toBe(11);
    expect(await readAll(reopened)).toHaveLength(3);
    await reopened.close();
  });
});

describe("PartitionLog admit and settle (the leadership fence)", () => {
  it("a request its admit check refuses writes nothing; the rest of its group is written", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a"]));
    let leading = true;
    const admit = () => {
      if (!leading) throw new Error("not the leader any more");
    };
    // Hold the write loop so that all three requests are queued, then fence before they run.
    let release!: () => void;
    const held = log.withWriteLock(() => new Promise<void>((r) => (release = r)));
    const refused = log.append(batchOf(["stray-1", "stray-2"]), { admit });
    const plain = log.append(batchOf(["b"]));
    const alsoRefused = log.append(batchOf(["stray-3"]), { admit });
    await new Promise((r) => setTimeout(r, 20));
    leading = false;
    release();
    await held;
    await expect(refused).rejects.toThrow("not the leader any more");
    await expect(alsoRefused).rejects.toThrow("not the leader any more");
    expect(await plain).toEqual({ baseOffset: 1, count: 1 });
    expect(await readAll(log)).toEqual([
      { offset: 0, value: "a" },
      { offset: 1, value: "b" },
    ]);
    await log.close();
  });

  it("settle waits for an append already admitted to the write loop and returns the durable end", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a"]));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // Admitted, its write held by its beforeWrite hook (inside the write lock).
    const inFlight = log.append(batchOf(["b", "c"]), { admit: () => {}, beforeWrite: () => gate });
    await new Promise((r) => setTimeout(r, 20));
    let settledAt: number | null = null;
    const settling = log.settle().then((end) => {
      settledAt = end;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(settledAt).toBe(null);
    expect(log.logEndOffset).toBe(1);
    release();
    await settling;
    expect(settledAt).toBe(3);
    expect(log.highWatermark).toBe(3);
    expect(await inFlight).toEqual({ baseOffset: 1, count: 2 });
    await log.close();
    await expect(log.settle()).rejects.toMatchObject({ kind: "closed" });
  });
});

describe("LeaderEpochHistory", () => {
  it("records epochs durably, answers where an epoch ends, and truncates", async () => {
    const { dir } = tempDir();
    const fs = new NodeFileSystem();
    const h = await LeaderEpochHistory.load(fs, dir, 0);
    expect(h.latestEpoch).toBe(-1);
    await h.assign(0, 0);
    await h.assign(2, 10);
    await h.assign(1, 12); // older than the latest: ignored
    await h.assign(5, 30);
    expect(h.endOffsetFor(0, 40)).toEqual({ epoch: 0, endOffset: 10 });
    expect(h.endOffsetFor(3, 40)).toEqual({ epoch: 2, endOffset: 30 });
    expect(h.endOffsetFor(5, 40)).toEqual({ epoch: 5, endOffset: 40 });
    const stored = JSON.parse(readFileSync(`${dir}/${leaderEpochsFileName}`, "utf8"));
    expect(stored.epochs).toEqual([
      { epoch: 0, start_offset: 0 },
      { epoch: 2, start_offset: 10 },
      { epoch: 5, start_offset: 30 },
    ]);
    // Reloaded under a log that ends at 20: the entry for offset 30 is past it.
    const reloaded = await LeaderEpochHistory.load(fs, dir, 20);
    expect(reloaded.entries).toEqual([
      { epoch: 0, startOffset: 0 },
      { epoch: 2, startOffset: 10 },
    ]);
    await reloaded.truncate(0, 8);
    expect(reloaded.entries).toEqual([{ epoch: 0, startOffset: 0 }]);
    writeFileSync(
      `${dir}/${leaderEpochsFileName}`,
      '{"version": 1, "epochs": [{"epoch": 2, "start_offset": 5}, {"epoch": 1, "start_offset": 9}]}',
    );
    await expect(LeaderEpochHistory.load(fs, dir, 20)).rejects.toThrow(/epochs must increase/);
  });
});

describe("checkStoredRuns and verbatim appends (the follower's path)", () => {
  const stored = (offsets: number[], timestampMs = 7) =>
    new Uint8Array(
      Buffer.concat(
        offsets.map((o) =>
          encodeRecord({ offset: o, timestampMs, key: null, value: utf8(`r${o}`) }),
        ),
      ),
    );

  it("splits runs of consecutive offsets, each appended as the very bytes the leader stored", async () => {
    const bytes = stored([4, 5, 6, 9, 10]);
    const runs = checkStoredRuns(bytes, 5);
    expect(runs.map((r) => [r.baseOffset, r.count])).toEqual([
      [4, 3],
      [9, 2],
    ]);
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.skipTo(4);
    expect(await log.append(runs[0])).toEqual({ baseOffset: 4, count: 3 });
    await log.skipTo(9);
    expect(await log.append(runs[1])).toEqual({ baseOffset: 9, count: 2 });
    const read = await log.read({ offset: 4, maxRecords: 10, maxBytes: 1 << 20 });
    expect(Buffer.from(read.bytes)).toEqual(Buffer.from(stored([4, 5, 6])));
    const after = await log.read({ offset: read.nextOffset, maxRecords: 10, maxBytes: 1 << 20 });
    expect(Buffer.from(after.bytes)).toEqual(Buffer.from(stored([9, 10])));
    await log.close();
    // After a restart (recovery scans and indexes them like any records).
    const reopened = await openLog(`${dir}/p`);
    expect(reopened.logEndOffset).toBe(11);
    const again = await reopened.read({ offset: 9, maxRecords: 10, maxBytes: 1 << 20 });
    expect(Buffer.from(again.bytes)).toEqual(Buffer.from(stored([9, 10])));
    await reopened.close();
  });

  it("writes stored records only at their own offsets: anywhere else nothing is written", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a", "b"]));
    const [run] = checkStoredRuns(stored([5, 6]), 2);
    await expect(log.append(run)).rejects.toMatchObject({
      kind: "invalid",
      message: expect.stringMatching(/belong at offset 5 but the log ends at 2/),
    });
    expect(log.logEndOffset).toBe(2);
    // Queued between entries, they are a write of their own, at their offsets.
    const [atThree] = checkStoredRuns(stored([3, 4]), 2);
    const results = await Promise.all([
      log.append(batchOf(["c"])),
      log.append(atThree),
      log.append(batchOf(["d"])),
    ]);
    expect(results).toEqual([
      { baseOffset: 2, count: 1 },
      { baseOffset: 3, count: 2 },
      { baseOffset: 5, count: 1 },
    ]);
    const read = await log.read({ offset: 3, maxRecords: 2, maxBytes: 1 << 20 });
    expect(Buffer.from(read.bytes)).toEqual(Buffer.from(stored([3, 4])));
    await log.close();
  });

  it("skips a run's first records, keeping the rest verbatim", () => {
    const [run] = checkStoredRuns(stored([4, 5, 6]), 3);
    const rest = skipStored(run, 2);
    expect(rest.baseOffset).toBe(6);
    expect(rest.count).toBe(1);
    expect(Buffer.from(rest.bytes)).toEqual(Buffer.from(stored([6])));
  });

  it("refuses a flipped bit, a count that disagrees and offsets that do not increase", () => {
    const bytes = stored([0, 1, 2]);
    const flipped = bytes.slice();
    flipped[flipped.length - 6] ^= 0x10;
    expect(() => checkStoredRuns(flipped, 3)).toThrow(RecordFormatError);
    expect(() => checkStoredRuns(flipped, 3)).toThrow(/crc mismatch/);
    expect(() => checkStoredRuns(bytes, 4)).toThrow(/announced/);
    expect(() => checkStoredRuns(bytes, 2)).toThrow(/announced/);
    expect(() => checkStoredRuns(stored([3, 2]), 2)).toThrow(/not above/);
  });

  describe("with the native CRC-32 (every CRC checked by one pass)", () => {
    beforeAll(() => void installFastCrc32());
    afterAll(() => setCrc32Implementation(crc32Portable));

    it("accepts good records and still names the one a flipped bit damaged", () => {
      expect(crc32IsNative()).toBe(true);
      const offsets = Array.from({ length: 40 }, (_, i) => i);
      const bytes = stored(offsets);
      expect(checkStoredRuns(bytes, 40).map((r) => [r.baseOffset, r.count])).toEqual([[0, 40]]);
      for (const at of [10, Math.floor(bytes.length / 2), bytes.length - 6]) {
        const flipped = bytes.slice();
        flipped[at] ^= 0x01;
        expect(() => checkStoredRuns(flipped, 40)).toThrow(RecordFormatError);
      }
      const flipped = bytes.slice();
      flipped[flipped.length - 6] ^= 0x10;
      expect(() => checkStoredRuns(flipped, 40)).toThrow(/stored record 39 .*crc mismatch/);
    });
  });
});

describe("PartitionLog.keepRecentWrites / readRecent (the leader's answers to its followers)", () => {
  const fromFile = async (log: PartitionLog, offset: number, maxBytes: number, maxRecords = 1000) =>
    log.read({ offset, maxRecords, maxBytes, unsynced: true });
  const joined = (chunks: Uint8Array[]) => new Uint8Array(Buffer.concat(chunks));

  it("answers exactly what a read of the log answers, from any offset and any byte budget", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(values(3, "before")));
    expect(log.readRecent(0, 1 << 20, 1000)).toBeNull();
    log.keepRecentWrites(1 << 20);
    // Groups of several sizes, rolling segments (segmentBytes 1024) on the way.
    for (let i = 0; i < 12; i++) await log.append(batchOf(values(1 + (i % 4), `g${i}`)));
    const end = log.logEndOffset;
    expect(log.segmentCount).toBeGreaterThan(2);
    expect(log.readRecent(2, 1 << 20, 1000)).toBeNull(); // written before it was on
    expect(log.readRecent(end, 1 << 20, 1000)).toBeNull();
    // Every record as the log stores it, one read each.
    const stored: Uint8Array[] = [];
    for (let offset = 0; offset < end; offset++)
      stored.push((await fromFile(log, offset, 1, 1)).bytes.slice());
    for (let offset = 3; offset < end; offset++) {
      for (const maxBytes of [1, 100, 250, 700, 1 << 20]) {
        for (const maxRecords of [1, 3, 1000]) {
          // What a read answers: whole records from `offset`, at least one, within both budgets.
          const expected: Uint8Array[] = [];
          let bytes = 0;
          for (let o = offset; o < end && expected.length < maxRecords; o++) {
            if (expected.length > 0 && bytes + stored[o].length > maxBytes) break;
            expected.push(stored[o]);
            bytes += stored[o].length;
          }
          const recent = log.readRecent(offset, maxBytes, maxRecords);
          expect(recent).not.toBeNull();
          expect([recent!.count, recent!.nextOffset, recent!.bytes]).toEqual([
            expected.length,
            offset + expected.length,
            bytes,
          ]);
          expect(Buffer.from(joined(recent!.chunks))).toEqual(Buffer.from(joined(expected)));
        }
      }
    }
    await log.close();
  });

  it("forgets what every follower has, keeps no more than asked, and nothing after a cut or when off", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    log.keepRecentWrites(1 << 20);
    for (let i = 0; i < 6; i++) await log.append(batchOf(values(2, `g${i}`)));
    log.forgetRecentBelow(4);
    expect(log.readRecent(3, 1 << 20, 1000)).toBeNull();
    expect(log.readRecent(4, 1 << 20, 1000)?.count).toBe(8);
    // A cap of one group's bytes keeps the last group only.
    const one = (await fromFile(log, 10, 1 << 20)).bytes.length;
    log.keepRecentWrites(one);
    await log.append(batchOf(values(2, "g6")));
    expect(log.readRecent(10, 1 << 20, 1000)).toBeNull();
    expect(log.readRecent(12, 1 << 20, 1000)?.count).toBe(2);
    // Leader-epoch truncation: nothing kept answers offsets the log no longer holds.
    log.keepRecentWrites(1 << 20);
    await log.append(batchOf(values(2, "g7")));
    await log.truncateTo(13);
    expect(log.readRecent(12, 1 << 20, 1000)).toBeNull();
    await log.append(batchOf(["new-13"]));
    const after = log.readRecent(13, 1 << 20, 1000);
    expect(Buffer.from(joined(after!.chunks))).toEqual(
      Buffer.from((await fromFile(log, 13, 1 << 20)).bytes),
    );
    log.keepRecentWrites(0);
    expect(log.readRecent(13, 1 << 20, 1000)).toBeNull();
    await log.append(batchOf(["off"]));
    expect(log.readRecent(14, 1 << 20, 1000)).toBeNull();
    await log.close();
  });
});
