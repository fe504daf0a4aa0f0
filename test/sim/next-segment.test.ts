/**
 * The next segment's log prepared ahead (`storage/next-segment.ts`; docs/storage.md "Writes and
 * durability"), attacked on the simulated disk: a power cut at every mutation of a workload that
 * rolls into prepared files (the prepare's writes, fsync and directory fsync, the roll's rename
 * and directory fsync), a crash between the rename and its directory fsync, a leftover at start,
 * failed prepares, and the growing writes it exists to remove.
 */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem, type CrashOptions, type MutationEvent } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { readPartitionRecords } from "../helpers/records.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { checkDataDir } from "../../src/storage/check.ts";
import { preparedSegmentName } from "../../src/storage/next-segment.ts";

const dir = "/data/topics/t/0";
const prepared = `${dir}/${preparedSegmentName}`;
const segmentBytes = 4096;

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
  // The partition directory, durable (as a topic's creation leaves it), holding a stray file.
  mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
  return mem;
}

function openLog(fs: FileSystem, logger = new MemoryLogger()) {
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

const value = (i: number) => `v${i}-${"a".repeat(250 + (i % 7) * 31)}`;

/** Appends 36 records in groups of 1–3, about four segments' worth; records what was acknowledged. */
async function workload(log: PartitionLog, acked: Map<number, string>): Promise<void> {
  let i = 0;
  for (let round = 0; round < 18; round++) {
    const group = [0, 1, 2].slice(0, 1 + (round % 3)).map(() => value(i++));
    await Promise.all(
      group.map((v) =>
        log.append(batch(v)).then(
          (r) => void acked.set(r.baseOffset, v),
          () => {},
        ),
      ),
    );
  }
}

/** Segment log files on disk, by name, with their sizes. */
function logFiles(mem: MemoryFileSystem): Map<string, number> {
  return new Map(
    mem
      .listTree(dir)
      .filter((p) => /\d{20}\.log$/.test(p))
      .map((p) => [p.slice(dir.length + 1), mem.readFileSync(p).length]),
  );
}

describe("the next segment's log, prepared ahead", () => {
  it("is what every roll after the first renames into place, and no append grows a prepared log", async () => {
    const mem = disk();
    const created: string[] = [];
    const growing = new Map<string, number>();
    const fs = wrapFileSystem(
      mem,
      {
        write: async (h, path, bytes, position) => {
          if (/\d{20}\.log$/.test(path) && position + bytes.length > (await h.size()))
            growing.set(path, (growing.get(path) ?? 0) + 1);
          return h.write(bytes, position);
        },
      },
      {},
    );
    const counting: FileSystem = {
      ...fs,
      open: (path, options) => {
        if (options?.create === true && /\d{20}\.log$/.test(path)) created.push(path);
        return fs.open(path, options);
      },
    };
    const logger = new MemoryLogger();
    const log = await openLog(counting, logger);
    await workload(log, new Map());
    expect(log.segmentCount).toBeGreaterThanOrEqual(4);
    // Only the first segment's log was created empty; every later one was a prepared file.
    expect(created).toEqual([`${dir}/00000000000000000000.log`]);
    expect(logger.named("segment.prepared").length).toBeGreaterThanOrEqual(log.segmentCount - 1);
    expect(logger.named("segment.prepare_failed")).toEqual([]);
    const bases = log.describe().segments.map((s) => s.base_offset);
    for (const base of bases.slice(1)) {
      const path = `${dir}/${String(base).padStart(20, "0")}.log`;
      expect(growing.get(path) ?? 0, `growing writes to ${path}`).toBe(0);
    }
    // The first segment, created empty, grew (its zeros are written ahead in steps).
    expect(growing.get(`${dir}/00000000000000000000.log`)).toBeGreaterThan(0);
    // Sealed segments hold exactly their records: the zeros were cut at the seal.
    const sealed = log.describe().segments.slice(0, -1);
    for (const s of sealed)
      expect(logFiles(mem).get(`${String(s.base_offset).padStart(20, "0")}.log`)).toBe(
        s.size_bytes,
      );
    // The active one holds zeros up to segment_bytes, to append into.
    const active = log.describe().segments.at(-1)!;
    expect(logFiles(mem).get(`${String(active.base_offset).padStart(20, "0")}.log`)).toBe(
      segmentBytes,
    );
    await log.close();
    // A clean close leaves only segments, each exactly its records.
    expect(mem.listTree(dir)).not.toContain(prepared);
    expect([...logFiles(mem).values()]).toEqual(log.describe().segments.map((s) => s.size_bytes));
  });

  it("loses no acknowledged record, never assigns an offset twice, and leaves no prepared file behind when the power goes at any mutation", async () => {
    const reference = disk();
    const events: MutationEvent[] = [];
    const refFs = new MemoryFileSystem({ disk: reference, onMutation: (e) => events.push(e) });
    const refLog = await openLog(refFs);
    const start = reference.mutationCount;
    await workload(refLog, new Map());
    const mutations = reference.mutationCount - start;
    await refLog.close();
    // The sweep covers every step of the prepare and of the rename into place.
    const ops = (op: string, path: RegExp) =>
      events.filter((e) => e.op === op && path.test(e.path)).length;
    expect(ops("create", /next\.log\.zeros$/)).toBeGreaterThanOrEqual(3);
    expect(ops("write", /next\.log\.zeros$/)).toBeGreaterThanOrEqual(3);
    expect(ops("sync", /next\.log\.zeros$/)).toBeGreaterThanOrEqual(3);
    expect(ops("rename", /next\.log\.zeros$/)).toBeGreaterThanOrEqual(3);

    const crashes: CrashOptions[] = [
      { mode: "dropAll" },
      { mode: "keepAll" },
      { seed: 5 },
      { seed: 6 },
    ];
    for (let n = 0; n <= mutations; n++) {
      for (const crash of crashes) {
        const label = `cut after ${n} of ${mutations} mutations, crash ${JSON.stringify(crash)}`;
        const mem = disk();
        const fs = new MemoryFileSystem({ disk: mem });
        const log = await openLog(fs);
        const acked = new Map<number, string>();
        fs.armPowerCut({ inMutations: n + 1 });
        await workload(log, acked);
        await log.close().catch(() => {});
        mem.crash(crash);

        const report = await checkDataDir(mem, "/data");
        expect(report.corrupt, label).toBe(0);
        const logger = new MemoryLogger();
        let again = await openLog(mem, logger);
        // A prepared file is removed and reported, never read as a segment nor kept as a stray.
        expect(mem.listTree(dir), label).not.toContain(prepared);
        expect(
          again.describe().stray_files.map((f) => f.name),
          label,
        ).toEqual([".keep"]);
        expect(logger.named("recovery.corrupt_segment"), label).toEqual([]);
        const found = await values(again);
        for (const [offset, v] of acked) expect(found.get(offset), `${label}: ${offset}`).toBe(v);
        expect(again.highWatermark, label).toBeGreaterThan(Math.max(-1, ...acked.keys()));
        const next = await again.append(batch("after"));
        expect(found.has(next.baseOffset), label).toBe(false);
        await again.close();
        expect([...logFiles(mem).values()], label).toEqual(
          again.describe().segments.map((s) => s.size_bytes),
        );
        again = await openLog(mem);
        expect((await values(again)).get(next.baseOffset), label).toBe("after");
        await again.close();
      }
    }
  }, 300_000);

  for (const mode of ["dropAll", "keepAll"] as const) {
    it(`recovers a crash between the roll's rename and its directory fsync (${mode})`, async () => {
      const mem = disk();
      let renamed = false;
      const boot = new MemoryFileSystem({ disk: mem });
      const fs = wrapFileSystem(
        boot,
        {},
        {
          rename: async (from, to) => {
            await boot.rename(from, to);
            if (from === prepared) renamed = true;
          },
          syncDir: async (path) => {
            // The power goes just before the directory fsync that would make the rename durable.
            if (renamed) boot.armPowerCut({ inMutations: 1 });
            return boot.syncDir(path);
          },
        },
      );
      const log = await openLog(fs);
      const acked = new Map<number, string>();
      await workload(log, acked);
      expect(renamed).toBe(true);
      await log.close().catch(() => {});
      mem.crash({ mode });
      // dropAll: the entry is back under its temporary name; keepAll: the new segment's log is
      // there, all zeros (nothing is appended before the directory fsync).
      const names = mem.listTree(dir).map((p) => p.slice(dir.length + 1));
      if (mode === "dropAll") expect(names).toContain(preparedSegmentName);
      else expect(names).not.toContain(preparedSegmentName);
      const logger = new MemoryLogger();
      const again = await openLog(mem, logger);
      expect(logger.named("recovery.prepared_segment_removed")).toHaveLength(
        mode === "dropAll" ? 1 : 0,
      );
      expect(mem.listTree(dir)).not.toContain(prepared);
      const found = await values(again);
      for (const [offset, v] of acked) expect(found.get(offset)).toBe(v);
      const next = await again.append(batch("after"));
      expect(next.baseOffset).toBe(Math.max(...acked.keys()) + 1);
      await again.close();
    });
  }

  it("is removed and reported when found at start, and a file of another name is reported and kept", async () => {
    const mem = disk();
    let log = await openLog(mem);
    await log.append(batch("a", "b"));
    await log.close();
    // Not zeros: whatever it holds, it is never read as a segment.
    mem.writeFileSync(prepared, utf8("garbage that would not decode as a record"));
    mem.writeFileSync(`${dir}/next.log.zeros.old`, new Uint8Array(100));
    const report = await checkDataDir(mem, "/data");
    const strays = report.topics[0].partitions[0].strays.map((s) => [s.name, s.kind]);
    expect(strays).toEqual([
      [".keep", "not_a_segment_file"],
      ["next.log.zeros", "prepared_segment"],
      ["next.log.zeros.old", "not_a_segment_file"],
    ]);
    const logger = new MemoryLogger();
    log = await openLog(mem, logger);
    expect(logger.named("recovery.prepared_segment_removed").map((e) => e.file)).toEqual([
      prepared,
    ]);
    expect(mem.listTree(dir)).not.toContain(prepared);
    expect(mem.listTree(dir)).toContain(`${dir}/next.log.zeros.old`);
    expect(log.describe().stray_files.map((s) => s.name)).toEqual([".keep", "next.log.zeros.old"]);
    expect([...(await values(log)).values()]).toEqual(["a", "b"]);
    await log.close();
  });

  const failures: {
    name: string;
    arm: (mem: MemoryFileSystem) => void;
    fs?: (mem: MemoryFileSystem) => FileSystem;
  }[] = [
    {
      name: "a write of its zeros fails (ENOSPC after 100 bytes)",
      arm: (mem) =>
        mem.faults.failNext({
          op: "write",
          path: /next\.log\.zeros$/,
          code: "ENOSPC",
          partialBytes: 100,
        }),
    },
    {
      name: "its fsync fails (EIO)",
      arm: (mem) => mem.faults.failNext({ op: "sync", path: /next\.log\.zeros$/, code: "EIO" }),
    },
    {
      name: "its creation fails (EACCES)",
      arm: (mem) =>
        mem.faults.failNext({ op: "create", path: /next\.log\.zeros$/, code: "EACCES" }),
    },
    {
      name: "the rename into place fails (EIO)",
      arm: (mem) => mem.faults.failNext({ op: "rename", path: /next\.log\.zeros$/, code: "EIO" }),
    },
  ];
  for (const failure of failures) {
    it(`only drops the prepared file when ${failure.name}: the roll creates the log as without it, nothing fences`, async () => {
      const mem = disk();
      failure.arm(mem);
      const logger = new MemoryLogger();
      const log = await openLog(mem, logger);
      const acked = new Map<number, string>();
      await workload(log, acked);
      expect(mem.faults.fired).toHaveLength(1);
      expect(logger.named("segment.prepare_failed")).toHaveLength(1);
      expect(log.fenced).toBe(false);
      expect(acked.size).toBe(36);
      expect(log.segmentCount).toBeGreaterThanOrEqual(4);
      const found = await values(log);
      for (const [offset, v] of acked) expect(found.get(offset)).toBe(v);
      await log.close();
      expect(mem.listTree(dir)).not.toContain(prepared);
      expect([...logFiles(mem).values()]).toEqual(log.describe().segments.map((s) => s.size_bytes));
    });
  }
});
