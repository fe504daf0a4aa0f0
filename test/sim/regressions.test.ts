/**
 * One small deterministic test for each crash-safety bug the simulation found in the storage
 * core (the seeds that found them are named in the commit messages of the fixes). They pin the
 * scenario down on the simulated disk, so a regression fails here by name, not only as a seed.
 */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { LocalBroker } from "../../src/broker/broker.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { drainMicrotasks } from "./harness.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { readPartitionRecords } from "../helpers/records.ts";

const dir = "/d/p";

function batch(...values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v));
  return b.build();
}

/** A disk whose partition directory already exists durably (as a broker's topic dir would). */
function disk(options: { failedSyncDropsDirtyData?: boolean } = {}): MemoryFileSystem {
  const mem = new MemoryFileSystem({ seed: 1, ...options });
  mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
  return mem;
}

function openLog(
  fs: FileSystem,
  options: { segmentBytes?: number; flushEveryRecords?: number; logger?: MemoryLogger } = {},
) {
  return PartitionLog.open({
    fs,
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger: options.logger ?? new MemoryLogger(),
    config: () => ({ segmentBytes: options.segmentBytes ?? 1 << 20, segmentMs: 1e12 }),
    flushEveryRecords: options.flushEveryRecords,
  });
}

async function values(log: PartitionLog): Promise<string[]> {
  return (await readPartitionRecords(log)).map((r) => `${r.offset}:${r.value}`);
}

type State = "pending" | "ok" | "error";
function watch(promise: Promise<unknown>): { state: State } {
  const w = { state: "pending" as State };
  promise.then(
    () => (w.state = "ok"),
    () => (w.state = "error"),
  );
  return w;
}

/**
 * Delays every fsync of a log (or, with `reads`, every read instead) by some microtask turns, so
 * writes can land meanwhile.
 */
function slowLogSyncs(
  mem: MemoryFileSystem,
  turns: number,
  options: { reads?: boolean } = {},
): FileSystem {
  const wait = async () => {
    for (let i = 0; i < turns; i++) await Promise.resolve();
  };
  return wrapFileSystem(mem, {
    read: async (h, _path, b, p) => {
      if (options.reads) await wait();
      return h.read(b, p);
    },
    sync: async (h, path) => {
      if (path.endsWith(".log") && !options.reads) await wait();
      return h.sync();
    },
  });
}

describe("crash-safety regressions found by the simulation", () => {
  it("writes an append issued right after the previous one resolved (the write loop restarts)", async () => {
    // Whether the previous append resolves before the write loop has wound down depends on how
    // long its fsync takes; sweep that, so one of them lands in the gap.
    for (let turns = 0; turns < 24; turns++) {
      for (const flushEveryRecords of [1, 3]) {
        const log = await openLog(slowLogSyncs(disk(), turns), { flushEveryRecords });
        await log.append(batch("first"));
        const next = watch(log.append(batch("next")));
        await drainMicrotasks();
        expect(next.state, `fsync ${turns} turns, flush every ${flushEveryRecords}`).toBe("ok");
        await log.close();
      }
    }
  });

  it("acknowledges a request whose records an fsync covered before the write loop queued it as a waiter", async () => {
    // A large append writes its records (the log end moves), then its index entries; while the
    // index write is slow, the fsync in flight ends, the next one starts, covers the new records
    // and ends too. The request then joins the waiters with nothing left to fsync for it: it must
    // be acknowledged then, not wait for an fsync that only a later append would start.
    const big = new EntryBatchBuilder();
    for (let i = 0; i < 300; i++) big.add(null, new Uint8Array(4096).fill(97));
    const bigBatch = big.build();
    for (let indexTurns = 0; indexTurns < 40; indexTurns += 3) {
      const mem = disk();
      const fs = wrapFileSystem(mem, {
        write: async (h, path, b, p) => {
          if (path.endsWith(".index")) for (let i = 0; i < indexTurns; i++) await Promise.resolve();
          return h.write(b, p);
        },
        sync: async (h) => {
          for (let i = 0; i < 3; i++) await Promise.resolve();
          return h.sync();
        },
      });
      const log = await openLog(fs, { segmentBytes: 8 << 20 });
      const first = watch(log.append(batch("first")));
      const second = watch(log.append(bigBatch));
      await drainMicrotasks();
      expect([first.state, second.state], `index write ${indexTurns} turns`).toEqual(["ok", "ok"]);
      expect(log.highWatermark).toBe(301);
      await log.close();
    }
  });

  it("rejects a request whose write finished after an fsync failure fenced the partition, instead of leaving it waiting", async () => {
    for (let delay = 0; delay < 16; delay++) {
      const mem = disk();
      const log = await openLog(slowLogSyncs(mem, 6));
      mem.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" });
      const first = watch(log.append(batch("a")));
      for (let i = 0; i < delay; i++) await Promise.resolve();
      const second = watch(log.append(batch("b")));
      await drainMicrotasks();
      expect([first.state, second.state], `second append ${delay} turns later`).toEqual([
        "error",
        "error",
      ]);
      await log.close();
    }
  });

  it("does not serve bytes a failed fsync left unsynced after a restart without a reboot, so later acknowledged records survive a crash", async () => {
    const mem = disk();
    let log = await openLog(mem);
    await log.append(batch("durable"));
    mem.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" });
    await expect(log.append(batch("never acknowledged"))).rejects.toMatchObject({ kind: "fenced" });
    await log.close();
    log = await openLog(mem);
    expect(await values(log)).toEqual(["0:durable"]);
    expect(await log.append(batch("acknowledged after restart"))).toEqual({
      baseOffset: 1,
      count: 1,
    });
    await log.close();
    mem.crash({ mode: "dropAll" });
    log = await openLog(mem);
    expect(await values(log)).toEqual(["0:durable", "1:acknowledged after restart"]);
    await log.close();
  });

  it("cuts unsynced bytes too when a failed write fences the partition because its cut cannot be made durable", async () => {
    const mem = disk();
    let log = await openLog(mem, { flushEveryRecords: 10 });
    await log.append(batch("a", "b"));
    await log.close(); // flushes: a and b are durable
    log = await openLog(mem, { flushEveryRecords: 10 });
    await log.append(batch("c", "d")); // acknowledged without an fsync
    mem.faults.failNext({ op: "write", path: /\.log$/, code: "ENOSPC", partialBytes: 10 });
    mem.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" });
    await expect(log.append(batch("e"))).rejects.toMatchObject({ kind: "fenced" });
    expect(log.fenced).toBe(true);
    await log.close();
    log = await openLog(mem, { flushEveryRecords: 10 });
    expect(await values(log)).toEqual(["0:a", "1:b"]);
    await log.append(batch("f"));
    await log.close();
    mem.crash({ mode: "dropAll" });
    log = await openLog(mem);
    expect(await values(log)).toEqual(["0:a", "1:b", "2:f"]);
    await log.close();
  });

  it("keeps the partial bytes of a refused write cut off after a crash, even when the segment rolls before its next fsync", async () => {
    // The refused request fits the segment, and its partial write holds one whole record;
    // whatever a crash keeps of the unsynced writes, that record must not come back inside the
    // sealed segment, at the offset the next segment gives to "rolls".
    const value = "x".repeat(300);
    for (let seed = 1; seed <= 40; seed++) {
      const mem = disk();
      let log = await openLog(mem, { segmentBytes: 1024 });
      await log.append(batch("a", "b"));
      mem.faults.failNext({
        op: "write",
        path: /\.log$/,
        code: "ENOSPC",
        partialBytes: 32 + 300 + 10,
      });
      await expect(log.append(batch(value, value))).rejects.toMatchObject({ kind: "write_failed" });
      expect(log.segmentCount).toBe(1);
      await log.append(batch("rolls", "x".repeat(900))); // does not fit: the segment rolls first
      expect(log.segmentCount).toBe(2);
      await log.close();
      mem.crash({ seed, mode: "random" });
      log = await openLog(mem, { segmentBytes: 1024 });
      expect(await values(log), `crash seed ${seed}`).toEqual([
        "0:a",
        "1:b",
        "2:rolls",
        `3:${"x".repeat(900)}`,
      ]);
      await log.close();
    }
  });

  it("makes the name of a segment durable at recovery when the roll that created it failed its directory fsync", async () => {
    const mem = disk();
    let log = await openLog(mem, { segmentBytes: 1024 });
    await log.append(batch("y".repeat(900)));
    mem.faults.failNext({ op: "syncDir", code: "EIO" });
    await expect(log.append(batch("z".repeat(900)))).rejects.toMatchObject({ kind: "fenced" });
    await log.close();
    log = await openLog(mem, { segmentBytes: 1024 });
    expect(log.segmentCount).toBe(2);
    expect(await log.append(batch("acknowledged"))).toEqual({ baseOffset: 1, count: 1 });
    await log.close();
    mem.crash({ mode: "dropAll" });
    log = await openLog(mem, { segmentBytes: 1024 });
    expect(await values(log)).toEqual([`0:${"y".repeat(900)}`, "1:acknowledged"]);
    await log.close();
  });

  it("answers a read that races a roll only with records below the high watermark it reports", async () => {
    // Offsets 1–2 lie in a corrupt stretch of segment 0, so a read from 1 finds nothing there and
    // moves on to the next segment; while its slow disk read runs, appends write offset 4 into
    // segment 3 and roll, sealing it.
    for (let turns = 0; turns < 200; turns += 10) {
      const mem = disk();
      let log = await openLog(mem, { segmentBytes: 1024 });
      await log.append(batch("a", "b", "c"));
      await log.close();
      const path = `${dir}/00000000000000000000.log`;
      const bytes = mem.readFileSync(path);
      bytes[33 + 30] ^= 0xff; // inside record 1
      mem.writeFileSync(path, bytes);
      log = await openLog(slowLogSyncs(mem, turns, { reads: true }), { segmentBytes: 1024 });
      await log.append(batch("d"));
      expect(log.highWatermark).toBe(4);
      const read = log.read({ offset: 1, maxRecords: 100, maxBytes: 1 << 20 });
      await log.append(batch("e")); // offset 4, in segment 3
      await log.append(batch("x".repeat(1000))); // rolls: segment 3 is sealed
      const r = await read;
      const c = new RecordCursor().reset(r.bytes);
      const offsets = [];
      for (let p = 0; p < r.bytes.length; p += c.sizeBytes) {
        expect(c.decode(p)).toBe(DecodeStatus.Ok);
        offsets.push(c.offset);
      }
      for (const o of offsets)
        expect(o, `read ${turns} turns slower`).toBeLessThan(r.highWatermark);
      if (offsets.length > 0) expect(r.nextOffset).toBe(offsets.at(-1)! + 1);
      await log.close();
    }
  });

  it("keeps the data directory and topics/ after a crash right after the first topic was created", async () => {
    const mem = new MemoryFileSystem({ seed: 1 });
    const open = () =>
      LocalBroker.open({
        fs: mem,
        dataDir: "/srv/data",
        clock: new ManualClock(),
        logger: new MemoryLogger(),
      });
    const broker = await open();
    await broker.createTopic({ name: "t", partitions: 1 });
    await broker.produce({ topic: "t", partition: 0, batch: batch("x") });
    mem.crash({ mode: "dropAll" });
    const after = await open();
    expect((await after.listTopics()).map((t) => t.name)).toEqual(["t"]);
    expect((await after.fetch({ topic: "t", partition: 0, offset: 0 })).records.count).toBe(1);
    await after.close();
  });
});
