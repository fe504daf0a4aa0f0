import { describe, expect, it } from "vitest";
import {
  appendFileSync,
  cpSync,
  readFileSync,
  readdirSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { tempDir } from "../helpers/tmp.ts";
import { decodeRecords } from "../helpers/records.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";

async function openLog(
  dir: string,
  segmentBytes = 1024 * 1024,
  extra: { clock?: ManualClock; logger?: MemoryLogger; flushEveryRecords?: number } = {},
) {
  return PartitionLog.open({
    fs: new NodeFileSystem(),
    dir,
    name: "t/0",
    clock: extra.clock ?? new ManualClock(),
    logger: extra.logger ?? new MemoryLogger(),
    config: () => ({ segmentBytes, segmentMs: 7 * 24 * 3600_000 }),
    flushEveryRecords: extra.flushEveryRecords,
  });
}

function batchOf(values: string[], keyPrefix: string | null = null) {
  const b = new EntryBatchBuilder();
  values.forEach((v, i) => b.add(keyPrefix === null ? null : utf8(`${keyPrefix}${i}`), utf8(v)));
  return b.build();
}

function decodeAll(bytes: Uint8Array): { offset: number; value: string }[] {
  return decodeRecords(bytes).map(({ offset, value }) => ({ offset, value }));
}

describe("PartitionLog on the real file system", () => {
  it("assigns consecutive offsets and reads every offset back", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`, 2048);
    const values = Array.from({ length: 300 }, (_, i) => `value-${i}-${"x".repeat(i % 50)}`);
    let next = 0;
    for (let i = 0; i < values.length; i += 7) {
      const chunk = values.slice(i, i + 7);
      const r = await log.append(batchOf(chunk));
      expect(r.baseOffset).toBe(next);
      next += chunk.length;
    }
    expect(log.highWatermark).toBe(300);
    expect(log.segmentCount).toBeGreaterThan(5);
    for (let o = 0; o < 300; o++) {
      const r = await log.read({ offset: o, maxRecords: 3, maxBytes: 1 << 20 });
      const got = decodeAll(r.bytes);
      expect(got[0]).toEqual({ offset: o, value: values[o] });
      expect(r.nextOffset).toBe(got.at(-1)!.offset + 1);
    }
    await log.close();
  });

  it("rolls at segment_bytes, names segments by base offset, and keeps index entries 4 KiB apart", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`, 64 * 1024);
    for (let i = 0; i < 40; i++)
      await log.append(batchOf(Array.from({ length: 10 }, () => "y".repeat(500))));
    await log.close();
    const names = readdirSync(`${dir}/p`).sort();
    const logs = names.filter((n) => n.endsWith(".log"));
    expect(logs.length).toBeGreaterThan(3);
    expect(logs[0]).toBe("00000000000000000000.log");
    for (const name of logs) {
      expect(name).toMatch(/^\d{20}\.log$/);
      const size = statSync(`${dir}/p/${name}`).size;
      expect(size).toBeLessThanOrEqual(64 * 1024);
      const index = readFileSync(`${dir}/p/${name.replace(".log", ".index")}`);
      expect(index.length % 16).toBe(0);
      const positions: number[] = [];
      for (let i = 0; i < index.length; i += 16)
        positions.push(Number(index.readBigUInt64BE(i + 8)));
      expect(positions[0]).toBe(0);
      for (let i = 1; i < positions.length; i++)
        expect(positions[i] - positions[i - 1]).toBeGreaterThanOrEqual(4096);
      // No gap of 4 KiB + one record (532 bytes) without an entry.
      const gaps = [...positions, size].map((p, i, a) => (i === 0 ? 0 : p - a[i - 1]));
      for (const g of gaps) expect(g).toBeLessThan(4096 + 532 + 1);
      expect(Number(readFileSync(`${dir}/p/${name}`).readBigUInt64BE(4))).toBe(
        Number(name.slice(0, 20)),
      );
    }
  });

  it("reopens with the same records and continues at the next offset", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`, 4096);
    for (let i = 0; i < 20; i++) await log.append(batchOf([`a${i}`, `b${i}`]));
    await log.close();
    log = await openLog(`${dir}/p`, 4096);
    expect(log.highWatermark).toBe(40);
    const r = await log.append(batchOf(["after"]));
    expect(r.baseOffset).toBe(40);
    const all = await log.read({ offset: 0, maxRecords: 1000, maxBytes: 1 << 20 });
    expect(decodeAll(all.bytes).length).toBeGreaterThan(0);
    await log.close();
  });

  it("names the segment active at the last stop as the records at risk, fixed when it opened", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`);
    expect(log.atRiskStartOffset).toBe(0);
    await log.close();
    log = await openLog(`${dir}/p`, 256);
    for (let i = 0; i < 20; i++) await log.append(batchOf([`a${i}`, `b${i}`]));
    await log.close();
    const bases = readdirSync(`${dir}/p`)
      .filter((n) => n.endsWith(".log"))
      .map((n) => Number(n.slice(0, 20)))
      .sort((a, b) => a - b);
    expect(bases.length).toBeGreaterThan(1);
    log = await openLog(`${dir}/p`, 64);
    expect(log.atRiskStartOffset).toBe(bases.at(-1));
    // Rolls after the start (at 64 segment bytes, every append) leave it where it was.
    for (let i = 0; i < 3; i++) await log.append(batchOf([`c${i}`]));
    expect(log.segmentCount).toBeGreaterThan(bases.length);
    expect(log.atRiskStartOffset).toBe(bases.at(-1));
    await log.close();
  });

  it("names the corrupt active segment recovery sealed, not the empty one it rolled after it", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`);
    await log.append(batchOf(["one", "two", "three"]));
    await log.close();
    // Record 0 (no key): record_len 4 | offset 8 | timestamp 8 | key_len 4 | value_len 4 | value.
    const path = `${dir}/p/00000000000000000000.log`;
    const bytes = readFileSync(path);
    bytes[28] ^= 0xff;
    writeFileSync(path, bytes);
    const logger = new MemoryLogger();
    log = await openLog(`${dir}/p`, 1 << 20, { logger });
    expect(logger.named("recovery.corrupt_segment")).toHaveLength(1);
    expect(log.segmentCount).toBe(2);
    expect(log.atRiskStartOffset).toBe(0);
    await log.close();
  });

  it("a roll that cannot create its segment refuses the append, logged once however often it is retried (attack10 F4)", async () => {
    const { dir } = tempDir();
    const logger = new MemoryLogger();
    const log = await openLog(`${dir}/p`, 2048, { logger });
    await log.append(batchOf(["x".repeat(1500)]));
    // A file already holding the next segment's name (put there by hand): the roll's create fails.
    writeFileSync(`${dir}/p/00000000000000000001.log`, "");
    for (let i = 0; i < 3; i++)
      await expect(log.append(batchOf(["y".repeat(1500)]))).rejects.toThrow(
        /Cannot roll partition "t\/0": creating a segment failed: EEXIST/,
      );
    expect(logger.named("partition.roll_failed")).toHaveLength(1);
    expect(logger.named("partition.roll_failed")[0].error).toMatch(/EEXIST/);
    expect(log.highWatermark).toBe(1);
    await log.close();
  });

  it("cuts a torn tail of the active segment at start and reports it", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`);
    await log.append(batchOf(["one", "two", "three"]));
    await log.close();
    const path = `${dir}/p/00000000000000000000.log`;
    const size = statSync(path).size;
    appendFileSync(path, Buffer.from([1, 2, 3, 4, 5, 6, 7]));
    const logger = new MemoryLogger();
    log = await openLog(`${dir}/p`, 1 << 20, { logger });
    expect(statSync(path).size).toBe(size);
    expect(log.highWatermark).toBe(3);
    expect(logger.named("recovery.torn_tail_cut")).toHaveLength(1);
    expect((await log.append(batchOf(["four"]))).baseOffset).toBe(3);
    await log.close();
    truncateSync(path, statSync(path).size - 1);
    log = await openLog(`${dir}/p`);
    expect(log.highWatermark).toBe(3);
    await log.close();
  });

  it("writes zeros ahead of the records, reads them as free space after a crash, and leaves exactly the records after a clean close", async () => {
    const { dir } = tempDir();
    const path = `${dir}/p/00000000000000000000.log`;
    let log = await openLog(`${dir}/p`, 8 * 1024 * 1024);
    await log.append(batchOf(["v0"]));
    const firstBytes = log.describe().size_bytes;
    for (let i = 1; i < 10; i++) await log.append(batchOf([`v${i}`]));
    const recordsBytes = log.describe().size_bytes;
    // The first append wrote 64 KiB of zeros after its record (the first preallocation step: as
    // many bytes as the log holds, at least 64 KiB, at most 1 MiB); the next ones went into them,
    // so their fdatasyncs flushed data only.
    expect(statSync(path).size).toBe(firstBytes + 64 * 1024);
    // A crash now: the files as they are, without close.
    cpSync(`${dir}/p`, `${dir}/crashed`, { recursive: true });
    await log.close();
    expect(statSync(path).size).toBe(recordsBytes);

    const logger = new MemoryLogger();
    log = await openLog(`${dir}/crashed`, 8 * 1024 * 1024, { logger });
    expect(log.highWatermark).toBe(10);
    expect(logger.named("recovery.torn_tail_cut")).toHaveLength(0);
    expect(logger.named("recovery.corrupt_segment")).toHaveLength(0);
    expect(log.describe().segments[0].recovery).toBe("scanned");
    expect((await log.append(batchOf(["after"]))).baseOffset).toBe(10);
    const all = await log.read({ offset: 0, maxRecords: 100, maxBytes: 1 << 20 });
    expect(decodeAll(all.bytes).map((r) => r.value)).toEqual([
      ...Array.from({ length: 10 }, (_, i) => `v${i}`),
      "after",
    ]);
    await log.close();
    expect(statSync(`${dir}/crashed/00000000000000000000.log`).size).toBe(
      log.describe().size_bytes,
    );
  });

  it("cuts zeros left at the end of a sealed segment (a crash between a roll and its seal) without calling it corrupt", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`, 4096);
    for (let i = 0; i < 30; i++) await log.append(batchOf(["z".repeat(300)]));
    expect(log.segmentCount).toBeGreaterThan(1);
    await log.close();
    const first = `${dir}/p/00000000000000000000.log`;
    const size = statSync(first).size;
    appendFileSync(first, Buffer.alloc(3000));
    const logger = new MemoryLogger();
    log = await openLog(`${dir}/p`, 4096, { logger });
    expect(logger.named("recovery.corrupt_segment")).toHaveLength(0);
    expect(statSync(first).size).toBe(size);
    expect(log.highWatermark).toBe(30);
    const all = await log.read({ offset: 0, maxRecords: 100, maxBytes: 1 << 20 });
    expect(decodeAll(all.bytes).length).toBeGreaterThan(0);
    for (let o = 0; o < 30; o++)
      expect(
        decodeAll((await log.read({ offset: o, maxRecords: 1, maxBytes: 1 << 20 })).bytes)[0]
          .offset,
      ).toBe(o);
    await log.close();
  });

  it("cuts a torn record followed by zeros as a torn tail", async () => {
    const { dir } = tempDir();
    let log = await openLog(`${dir}/p`);
    await log.append(batchOf(["one", "two", "three"]));
    await log.close();
    const path = `${dir}/p/00000000000000000000.log`;
    const size = statSync(path).size;
    appendFileSync(
      path,
      Buffer.concat([Buffer.from([0, 0, 0, 40, 9, 9, 9]), Buffer.alloc(200 * 1024)]),
    );
    const logger = new MemoryLogger();
    log = await openLog(`${dir}/p`, 1 << 20, { logger });
    expect(logger.named("recovery.torn_tail_cut")).toHaveLength(1);
    expect(statSync(path).size).toBe(size);
    expect(log.highWatermark).toBe(3);
    await log.close();
  });

  it("answers out of range below the log start and above the high watermark, empty at it", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a"]));
    await expect(log.read({ offset: 2, maxRecords: 1, maxBytes: 100 })).rejects.toMatchObject({
      kind: "out_of_range",
    });
    const r = await log.read({ offset: 1, maxRecords: 1, maxBytes: 100 });
    expect(r.count).toBe(0);
    expect(r.nextOffset).toBe(1);
    await log.close();
  });

  it("makes files 0600 and directories 0700", async () => {
    const { dir } = tempDir();
    const old = process.umask(0);
    try {
      const log = await openLog(`${dir}/a/b`, 1024);
      for (let i = 0; i < 10; i++) await log.append(batchOf(["z".repeat(300)]));
      await log.close();
    } finally {
      process.umask(old);
    }
    expect(statSync(`${dir}/a`).mode & 0o777).toBe(0o700);
    expect(statSync(`${dir}/a/b`).mode & 0o777).toBe(0o700);
    for (const n of readdirSync(`${dir}/a/b`))
      expect(statSync(`${dir}/a/b/${n}`).mode & 0o777, n).toBe(0o600);
  });

  it("shares one fsync among concurrent appends (group commit)", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => log.append(batchOf([`r${i}`]))),
    );
    expect(new Set(results.map((r) => r.baseOffset)).size).toBe(200);
    expect(log.stats.fsyncs).toBeLessThan(200);
    expect(log.highWatermark).toBe(200);
    await log.close();
  });

  it("writes requests that arrive together as one write, in arrival order, and acknowledges each after one fsync", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    // Appends made in one turn of the event loop (as from one readiness of many connections)
    // are all queued before the write loop starts.
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => log.append(batchOf([`r${i}`]))),
    );
    expect(results.map((r) => r.baseOffset)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(log.stats).toMatchObject({ writes: 1, fsyncs: 1, appends: 50, recordsAppended: 50 });
    const read = await log.read({ offset: 0, maxRecords: 100, maxBytes: 1 << 20 });
    expect(decodeAll(read.bytes).map((r) => r.value)).toEqual(
      Array.from({ length: 50 }, (_, i) => `r${i}`),
    );
    await log.close();
  });

  it("reads written records whose fsync is still running only when asked (unsynced), and loses them with the fsync", async () => {
    const { dir } = tempDir();
    // The log file's fsync can be held and then failed, as a disk that never makes them durable.
    let hold: { release: (err?: Error) => void } | null = null;
    let holding = false;
    const fs = wrapFileSystem(new NodeFileSystem(), {
      sync: (inner, path) => {
        if (!holding || !path.endsWith(".log")) return inner.sync();
        return new Promise<void>((resolve, reject) => {
          hold = { release: (err) => (err === undefined ? resolve(inner.sync()) : reject(err)) };
        });
      },
    });
    const log = await PartitionLog.open({
      fs,
      dir: `${dir}/p`,
      name: "t/0",
      clock: new ManualClock(),
      logger: new MemoryLogger(),
      config: () => ({ segmentBytes: 1024 * 1024, segmentMs: 7 * 24 * 3600_000 }),
    });
    await log.append(batchOf(["a"]));
    let writes = 0;
    const unsubscribe = log.subscribeWrites(() => writes++);
    holding = true;
    const pending = log.append(batchOf(["b", "c"]));
    const outcome = pending.then(
      () => "acknowledged",
      (err: { kind?: string }) => err.kind,
    );
    for (let i = 0; i < 100 && (log.logEndOffset < 3 || hold === null); i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(log.logEndOffset).toBe(3);
    expect(log.highWatermark).toBe(1);
    expect(writes).toBe(1);
    // A plain read stops at the high watermark; an unsynced one reaches the log end.
    expect((await log.read({ offset: 1, maxRecords: 10, maxBytes: 1 << 20 })).count).toBe(0);
    await expect(log.read({ offset: 2, maxRecords: 10, maxBytes: 1 << 20 })).rejects.toMatchObject({
      kind: "out_of_range",
    });
    const unsynced = await log.read({
      offset: 1,
      maxRecords: 10,
      maxBytes: 1 << 20,
      unsynced: true,
    });
    expect(decodeAll(unsynced.bytes)).toEqual([
      { offset: 1, value: "b" },
      { offset: 2, value: "c" },
    ]);
    expect(unsynced.nextOffset).toBe(3);
    await expect(
      log.read({ offset: 4, maxRecords: 10, maxBytes: 1 << 20, unsynced: true }),
    ).rejects.toMatchObject({ kind: "out_of_range" });
    // The fsync fails: the partition fences, the unsynced records are cut and never acknowledged.
    (hold as { release: (err?: Error) => void } | null)?.release(new Error("EIO: the disk failed"));
    expect(await outcome).toBe("fenced");
    for (let i = 0; i < 100 && log.logEndOffset !== 1; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(log.logEndOffset).toBe(1);
    expect(
      (await log.read({ offset: 1, maxRecords: 10, maxBytes: 1 << 20, unsynced: true })).count,
    ).toBe(0);
    unsubscribe();
    await log.close();
  });

  it("returns a record larger than the read window whole", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["small"]));
    await log.append(batchOf(["B".repeat(600 * 1024)]));
    const r = await log.read({ offset: 0, maxRecords: 10, maxBytes: 100 });
    expect(decodeAll(r.bytes).map((x) => x.offset)).toEqual([0]);
    const big = await log.read({ offset: 1, maxRecords: 10, maxBytes: 100 });
    expect(decodeAll(big.bytes)[0].value.length).toBe(600 * 1024);
    await log.close();
  });
});
