/**
 * Zeros written ahead of the active segment (`segmentPreallocateBytes`), attacked on the simulated
 * disk: a power cut at every mutation of a workload that rolls, a failed write of zeros, and the
 * files a clean shutdown leaves.
 */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem, type CrashOptions } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { readPartitionRecords } from "../helpers/records.ts";
import { FsError } from "../../src/fs/types.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { bytesEqual, utf8 } from "../../src/lib/bytes.ts";
import { ColdTier } from "../../src/storage/cold-store.ts";
import { DirectoryColdStore } from "../../src/storage/cold-dir-store.ts";
import { ColdIndexFile } from "../../src/storage/cold-index.ts";
import { checkDataDir } from "../../src/storage/check.ts";

const dir = "/data/topics/t/0";

function batch(...values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v));
  return b.build();
}

function disk(): MemoryFileSystem {
  const mem = new MemoryFileSystem({ seed: 1 });
  mem.writeFileSync(
    "/data/topics/t/topic.json",
    utf8(JSON.stringify({ name: "t", partitions: 1, config: {} })),
  );
  mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
  return mem;
}

function openLog(fs: FileSystem, segmentBytes: number, logger = new MemoryLogger()) {
  return PartitionLog.open({
    fs,
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger,
    config: () => ({ segmentBytes, segmentMs: 1e12 }),
  });
}

async function values(log: PartitionLog): Promise<Map<number, string>> {
  return new Map((await readPartitionRecords(log, 8 << 20)).map((r) => [r.offset, r.value]));
}

/** Sizes of the segment log files on disk, by name. */
function logFileSizes(mem: MemoryFileSystem): number[] {
  return mem
    .listTree(dir)
    .filter((p) => p.endsWith(".log"))
    .map((p) => mem.readFileSync(p).length);
}

describe("zeros written ahead of the active segment", () => {
  it("loses no acknowledged record and never assigns an offset twice when the power goes at any mutation of appends that roll", async () => {
    // Two shapes: small segments (the zeros reach segment_bytes at once) and segments larger
    // than one preallocation step, with records big enough to cross it.
    const shapes = [
      { segmentBytes: 3000, value: (i: number) => `v${i}-${"a".repeat(200 + (i % 5) * 37)}` },
      {
        segmentBytes: (5 << 20) / 2,
        value: (i: number) => `v${i}-${"b".repeat(180_000 + i * 13)}`,
      },
    ];
    const stats = { corrupt: 0, warnings: 0 };
    for (const shape of shapes) {
      const workload = async (log: PartitionLog, acked: Map<number, string>) => {
        let i = 0;
        for (let round = 0; round < 8; round++) {
          const group = [0, 1, 2].slice(0, 1 + (round % 3)).map(() => shape.value(i++));
          await Promise.all(
            group.map((v) =>
              log.append(batch(v)).then(
                (r) => void acked.set(r.baseOffset, v),
                () => {},
              ),
            ),
          );
        }
      };
      const reference = disk();
      const refLog = await openLog(reference, shape.segmentBytes);
      const start = reference.mutationCount;
      await workload(refLog, new Map());
      const mutations = reference.mutationCount - start;
      await refLog.close();
      expect(mutations).toBeGreaterThan(10);

      const crashes: CrashOptions[] = [
        { mode: "dropAll" },
        { mode: "keepAll" },
        { seed: 5 },
        { seed: 6 },
      ];
      for (let n = 0; n <= mutations; n++) {
        for (const crash of crashes) {
          const label = `segment_bytes ${shape.segmentBytes}, cut after ${n} of ${mutations} mutations, crash ${JSON.stringify(crash)}`;
          const mem = disk();
          const fs = new MemoryFileSystem({ disk: mem });
          const log = await openLog(fs, shape.segmentBytes);
          const acked = new Map<number, string>();
          fs.armPowerCut({ inMutations: n + 1 });
          await workload(log, acked);
          await log.close().catch(() => {});
          mem.crash(crash);

          // The offline check changes nothing and calls corrupt exactly what recovery will.
          const files = new Map(
            mem
              .listTree(dir)
              .filter((p) => !p.endsWith("/"))
              .map((p) => [p, mem.readFileSync(p)]),
          );
          const report = await checkDataDir(mem, "/data");
          for (const [p, bytes] of files)
            expect(
              bytesEqual(mem.readFileSync(p), bytes),
              `${label}: check left ${p} unchanged`,
            ).toBe(true);
          const logger = new MemoryLogger();
          let again = await openLog(mem, shape.segmentBytes, logger);
          const verdicts = report.topics[0].partitions[0].segments.map((s) => s.severity);
          expect(
            report.corrupt,
            `${label}: ${JSON.stringify(report.topics[0].partitions[0].segments)}`,
          ).toBe(logger.named("recovery.corrupt_segment").length);
          stats.corrupt += report.corrupt;
          stats.warnings += verdicts.filter((v) => v === "warning").length;
          const found = await values(again);
          for (const [offset, value] of acked)
            expect(found.get(offset)?.slice(0, 12), `${label}: offset ${offset}`).toBe(
              value.slice(0, 12),
            );
          const highest = Math.max(-1, ...acked.keys());
          expect(again.highWatermark, label).toBeGreaterThan(highest);
          const next = await again.append(batch("after"));
          expect(found.has(next.baseOffset), label).toBe(false);
          await again.close();
          // A clean shutdown leaves every log file holding exactly its records.
          const sizes = again.describe().segments.map((s) => s.size_bytes);
          expect(logFileSizes(mem), label).toEqual(sizes);
          again = await openLog(mem, shape.segmentBytes);
          const afterRestart = await values(again);
          for (const [offset, value] of acked)
            expect(
              afterRestart.get(offset)?.slice(0, 12),
              `${label}: offset ${offset} after restart`,
            ).toBe(value.slice(0, 12));
          expect(afterRestart.get(next.baseOffset), label).toBe("after");
          await again.close();
        }
      }
    }
    console.log("power-cut sweep", stats);
  }, 300_000);

  it("cuts the zeros of a write of zeros that failed part-way when the segment is sealed", async () => {
    const mem = disk();
    // Fails the first write of zeros to the log after 700 of its bytes landed (a disk that fills up).
    let failed = false;
    const fs = wrapFileSystem(mem, {
      write: async (h, path, b, p) => {
        if (!failed && path.endsWith(".log") && b.length > 1000 && b.every((x) => x === 0)) {
          failed = true;
          await h.write(b.subarray(0, 700), p);
          throw new FsError(
            "ENOSPC",
            path,
            "ENOSPC: no space left on device (injected after 700 bytes)",
          );
        }
        return h.write(b, p);
      },
    });
    const log = await openLog(fs, 4096);
    expect(await log.append(batch("a"))).toEqual({ baseOffset: 0, count: 1 });
    expect(failed).toBe(true);
    await log.append(batch("b"));
    await log.append(batch("x".repeat(4000))); // does not fit: the segment rolls and is sealed
    expect(log.segmentCount).toBe(2);
    const sealed = log.describe().segments[0];
    expect(mem.readFileSync(`${dir}/00000000000000000000.log`).length).toBe(sealed.size_bytes);
    await log.close();
  });

  it("offloads a sealed segment to the cold tier when the cut of its zeros at the seal failed", async () => {
    const mem = disk();
    const logger = new MemoryLogger();
    const log = await openLog(mem, 4096, logger);
    await log.append(batch("a"));
    await log.append(batch("b"));
    mem.faults.failNext({ op: "truncate", path: /\.log$/, code: "EIO" });
    await log.append(batch("x".repeat(4000))); // rolls; the seal cannot cut the zeros
    expect(logger.named("segment.preallocated_cut_failed")).toHaveLength(1);
    const [sealed] = log.sealedSegments;
    await mem.mkdir("/data/topics/t");
    const index = await ColdIndexFile.load(mem, "/data/topics/t");
    if ("error" in index) throw new Error(index.error);
    const cold = await new ColdTier({
      store: new DirectoryColdStore({ fs: mem, root: "/cold", logger }),
      fs: mem,
      clock: new ManualClock(),
      logger,
      cacheBytes: 1 << 20,
      uploadBytesPerSec: 0,
    }).openPartition({ topic: "t", partition: 0, index });
    expect(await cold.offload(sealed, sealed.maxTimestampMs)).toEqual({ bytes: sealed.sizeBytes });
    const read = await cold.read({ offset: 0, endOffset: 2, maxRecords: 10, maxBytes: 1 << 20 });
    expect(read.count).toBe(2);
    expect(mem.readFileSync("/cold/topics/t/0/00000000000000000000.log").length).toBe(
      sealed.sizeBytes,
    );
    await log.close();
  });
});

describe("a bad record followed by zeros and then a valid record (docs/decisions.md §1)", () => {
  it("is reported as corruption and its later record counted, wherever the zeros end relative to the scan window", async () => {
    const mem = disk();
    let log = await openLog(mem, 64 << 20);
    await log.append(batch("r0", "r1", "r2"));
    await log.close();
    const path = `${dir}/00000000000000000000.log`;
    const original = mem.readFileSync(path);
    const c = new RecordCursor().reset(original);
    c.decode(0);
    const s0 = c.sizeBytes;
    c.decode(s0);
    const s1 = c.sizeBytes;
    const r2 = original.subarray(s0 + s1);
    const MiB = 1 << 20;
    for (let d = -60; d <= 8; d += 1) {
      for (const tail of [0, 3, 100, MiB + 5]) {
        const zeros = MiB + 1 + d - s1;
        const bytes = new Uint8Array(s0 + s1 + zeros + r2.length + tail);
        bytes.set(original.subarray(0, s0 + s1), 0);
        bytes[s0 + s1 - 1] ^= 0x5a; // r1's CRC no longer matches
        bytes.set(r2, s0 + s1 + zeros);
        mem.writeFileSync(path, bytes);
        mem.writeFileSync(`${dir}/00000000000000000000.index`, new Uint8Array(0));
        const logger = new MemoryLogger();
        log = await openLog(mem, 64 << 20, logger);
        const label = `r2 ${d} bytes from the window end, ${tail} zeros after it`;
        const corrupt = logger.named("recovery.corrupt_segment");
        expect(corrupt, label).toHaveLength(1);
        expect(corrupt[0].highest_skipped_offset, label).toBe(2);
        expect(log.highWatermark, label).toBe(3);
        expect([...(await values(log)).entries()], label).toEqual([[0, "r0"]]);
        expect((await log.append(batch("next"))).baseOffset, label).toBe(3);
        await log.close();
        for (const p of mem.listTree(dir))
          if (p.endsWith(".log") && p !== path) await mem.unlink(p);
        for (const p of mem.listTree(dir))
          if (p.endsWith(".index") && !p.includes("00000000000000000000")) await mem.unlink(p);
      }
    }
  }, 120_000);
});

describe("the active segment's index after a crash", () => {
  it("is rebuilt when its entries point into zeros (the index write survived, the log write did not)", async () => {
    const mem = disk();
    let log = await openLog(mem, 64 << 20);
    const value = "q".repeat(4000);
    for (let i = 0; i < 600; i += 60)
      await log.append(batch(...Array.from({ length: 60 }, () => value)));
    const path = `${dir}/00000000000000000000.log`;
    const indexPath = `${dir}/00000000000000000000.index`;
    expect(mem.readFileSync(indexPath).length).toBeGreaterThan(0); // 256 entries were written
    // The crash: the log's records from offset 500 on read as zeros; the index file is as written.
    const c = new RecordCursor().reset(mem.readFileSync(path));
    let pos = 0;
    for (let o = 0; o < 500; o++) {
      c.decode(pos);
      pos += c.sizeBytes;
    }
    const crashed = mem.readFileSync(path);
    crashed.fill(0, pos);
    const index = mem.readFileSync(indexPath);
    await log.close().catch(() => {});
    mem.writeFileSync(path, crashed);
    mem.writeFileSync(indexPath, index);
    const logger = new MemoryLogger();
    log = await openLog(mem, 64 << 20, logger);
    expect(log.highWatermark).toBe(500);
    expect(logger.named("recovery.corrupt_segment")).toHaveLength(0);
    expect((await log.append(batch("new"))).baseOffset).toBe(500);
    for (const o of [0, 150, 499, 500]) {
      const r = await log.read({ offset: o, maxRecords: 1, maxBytes: 1 << 20 });
      expect(r.count, `offset ${o}`).toBe(1);
      expect(new RecordCursor().reset(r.bytes).decode(0)).toBe(DecodeStatus.Ok);
    }
    expect(logger.named("read.bad_position")).toHaveLength(0);
    await log.close();
    log = await openLog(mem, 64 << 20);
    expect((await values(log)).get(500)).toBe("new");
    await log.close();
  });
});

/** A manual clock whose `afterIo` callbacks wait until {@link HeldIoClock.release}. */
class HeldIoClock extends ManualClock {
  held: (() => void)[] = [];
  override afterIo(fn: () => void): void {
    this.held.push(fn);
  }
  /** Runs the held callbacks from index `from` on (those queued later stay held). */
  release(from = 0): void {
    for (const fn of this.held.splice(from)) fn();
  }
}

/**
 * A file system over `mem` whose log fsyncs, while {@link GatedSyncs.hold} is in force, make the
 * bytes written so far durable at once but report it only at {@link GatedSyncs.letGo} (an fsync
 * in flight covers what was written when it started). An fsync kept in flight is how a test
 * reaches a deferred fsync start: only the fsync that follows a running one waits for
 * `Clock.afterIo` (an acknowledged batch starts its own at once).
 */
class GatedSyncs {
  readonly fs: FileSystem;
  #gate: Promise<void> | null = null;
  #open = () => {};
  constructor(mem: FileSystem) {
    this.fs = wrapFileSystem(mem, {
      sync: async (inner, path) => {
        const done = inner.sync();
        done.catch(() => {}); // the caller sees a failure once the gate opens
        if (this.#gate !== null && path.endsWith(".log")) await this.#gate;
        return done;
      },
    });
  }
  /** Log fsyncs started from now on wait until {@link letGo}. */
  hold(): void {
    this.#gate = new Promise((resolve) => (this.#open = resolve));
  }
  /** Lets the waiting fsyncs (and later ones) run. */
  letGo(): void {
    this.#gate = null;
    this.#open();
  }
}

const settleMicrotasks = async (n = 20) => {
  for (let i = 0; i < n; i++) await Promise.resolve();
};

/**
 * Brings `log` (opened over `syncs.fs` with `clock`) to the state the tests below start from:
 * `first` is durable and acknowledged; `subject` is written and its fsync's start is the one
 * callback `clock` holds. `first`'s fsync is kept in flight while `subject` is written, so the
 * fsync `subject` asks for is the follow-up, deferred until pending I/O is handled.
 * @returns `subject`'s promise, in an object so that it is not awaited here.
 */
async function writtenWithSyncDeferred(
  log: PartitionLog,
  clock: HeldIoClock,
  syncs: GatedSyncs,
  first: string,
  subject: string,
) {
  syncs.hold();
  const firstDone = log.append(batch(first));
  await settleMicrotasks();
  clock.release(); // the write loop: "first" is written and its fsync starts, held in flight
  await settleMicrotasks();
  const pending = log.append(batch(subject));
  await settleMicrotasks();
  clock.release(); // the write loop: the subject is written while the fsync of "first" runs
  await settleMicrotasks();
  syncs.letGo(); // the fsync of "first" ends; the subject's is deferred
  await firstDone;
  await settleMicrotasks();
  expect(clock.held.length).toBe(1);
  return { pending };
}

describe("an fsync start deferred until pending I/O is handled", () => {
  function open(mem: FileSystem, clock: HeldIoClock, segmentBytes = 1 << 20) {
    return PartitionLog.open({
      fs: mem,
      dir,
      name: "t/0",
      clock,
      logger: new MemoryLogger(),
      config: () => ({ segmentBytes, segmentMs: 1e12 }),
    });
  }

  it("does nothing when it comes after the partition closed, and close still acknowledges what was written", async () => {
    const mem = disk();
    const clock = new HeldIoClock();
    const syncs = new GatedSyncs(mem);
    const log = await open(syncs.fs, clock);
    const { pending: a } = await writtenWithSyncDeferred(log, clock, syncs, "first", "a");
    await log.close();
    expect(await a).toEqual({ baseOffset: 1, count: 1 });
    const syncsBefore = mem.mutationCount;
    clock.release();
    await settleMicrotasks();
    expect(mem.mutationCount).toBe(syncsBefore);
    mem.crash({ mode: "dropAll" });
    const again = await open(mem, new HeldIoClock());
    expect([...(await values(again)).values()]).toEqual(["first", "a"]);
    await again.close();
  });

  it("starts no fsync after the partition was fenced, and the waiting request gets the fenced error", async () => {
    const mem = disk();
    const clock = new HeldIoClock();
    const syncs = new GatedSyncs(mem);
    const log = await open(syncs.fs, clock, 3000);
    const { pending: b } = await writtenWithSyncDeferred(log, clock, syncs, "a", "b");
    const bState = { settled: "pending" as string };
    b.then(
      () => (bState.settled = "ok"),
      (e: { kind?: string }) => (bState.settled = e.kind ?? "error"),
    );
    // The next append does not fit: the roll flushes first (fsync of "b" fails: fenced).
    mem.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" });
    const x = log.append(batch("x".repeat(2990)));
    for (let i = 0; i < 20; i++) await Promise.resolve();
    expect(clock.held.length).toBe(2);
    clock.release(1); // only the write loop of "x"; the fsync start of "b" stays held
    await expect(x).rejects.toMatchObject({ kind: "fenced" });
    expect(bState.settled).toBe("fenced");
    const mutations = mem.mutationCount;
    clock.release();
    for (let i = 0; i < 20; i++) await Promise.resolve();
    expect(mem.mutationCount).toBe(mutations);
    expect(log.fenced).toBe(true);
    await log.close();
    mem.crash({ mode: "dropAll" });
    const again = await open(mem, new HeldIoClock());
    expect([...(await values(again)).values()]).toEqual(["a"]);
    await again.close();
  });

  it("acknowledges a request written before a roll whose flush covered it, before the deferred start comes", async () => {
    const mem = disk();
    const clock = new HeldIoClock();
    const syncs = new GatedSyncs(mem);
    const log = await open(syncs.fs, clock, 3000);
    const { pending: a } = await writtenWithSyncDeferred(log, clock, syncs, "first", "a");
    const state = { v: "pending" };
    a.then(() => (state.v = "ok"));
    const roll = log.append(batch("y".repeat(2990)));
    for (let i = 0; i < 20; i++) await Promise.resolve();
    clock.release(1); // the write loop of the roll, not the fsync start of "a"
    for (let i = 0; i < 40; i++) await Promise.resolve();
    expect(state.v).toBe("ok");
    expect(log.segmentCount).toBe(2);
    clock.release();
    expect(await roll).toEqual({ baseOffset: 2, count: 1 });
    await log.close();
  });
});

describe("recovery of a sealed segment whose zeros were not cut", () => {
  it("still opens the partition and serves every record when the cut of the zeros fails", async () => {
    const mem = disk();
    let log = await openLog(mem, 3000);
    await log.append(batch("a"));
    await log.append(batch("b"));
    mem.faults.failNext({ op: "truncate", path: /\.log$/, code: "EIO" });
    await log.append(batch("x".repeat(2990))); // rolls; the seal's cut of the zeros fails
    await log.close();
    expect(mem.readFileSync(`${dir}/00000000000000000000.log`).length).toBe(3000);
    mem.faults.failNext({ op: "truncate", path: /00000000000000000000\.log$/, code: "EROFS" });
    const logger = new MemoryLogger();
    log = await openLog(mem, 3000, logger);
    expect([...(await values(log)).values()].map((v) => v.slice(0, 3))).toEqual(["a", "b", "xxx"]);
    expect(log.describe().segments[0].size_bytes).toBe(66);
    expect(logger.named("recovery.corrupt_segment")).toHaveLength(0);
    expect(logger.named("recovery.preallocated_cut_failed")).toHaveLength(1);
    await log.close();
  });
});

describe("a group waiting for the write lock when an fsync fails", () => {
  it("is refused without being written, so a restart does not bring back a record that was answered with the fenced error", async () => {
    const mem = disk();
    const clock = new HeldIoClock();
    const syncs = new GatedSyncs(mem);
    let log = await PartitionLog.open({
      fs: syncs.fs,
      dir,
      name: "t/0",
      clock,
      logger: new MemoryLogger(),
      config: () => ({ segmentBytes: 1 << 20, segmentMs: 1e12 }),
    });
    const settle = (p: Promise<unknown>) => {
      const s = { v: "pending" };
      p.then(
        () => (s.v = "ok"),
        (e: { kind?: string }) => (s.v = e.kind ?? "error"),
      );
      return s;
    };
    const a = settle((await writtenWithSyncDeferred(log, clock, syncs, "first", "a")).pending); // "a" is written, its fsync not started yet
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const cleaner = log.withWriteLock(() => gate); // a retention pass holds the write lock
    const b = settle(log.append(batch("b")));
    for (let i = 0; i < 20; i++) await Promise.resolve();
    expect(clock.held.length).toBe(2);
    clock.release(1); // the write loop of "b": it waits for the write lock
    for (let i = 0; i < 20; i++) await Promise.resolve();
    mem.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" });
    clock.release(); // the fsync of "a" starts and fails: the partition is fenced
    for (let i = 0; i < 40; i++) await Promise.resolve();
    expect(a.v).toBe("fenced");
    open();
    await cleaner;
    for (let i = 0; i < 40; i++) await Promise.resolve();
    expect(b.v).toBe("fenced");
    await log.close();
    // A restart without a reboot reads what the page cache holds.
    log = await openLog(mem, 1 << 20);
    expect([...(await values(log)).values()]).toEqual(["first"]);
    await log.close();
  });
});
