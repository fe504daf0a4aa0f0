/**
 * A group commit's fsync in flight while the next group's write fails: the fsync of one group
 * runs (on the thread pool when more than 256 KiB are unsynced) while the write loop writes the
 * next group. If that write fails and the cut of its partial bytes cannot be made durable (the
 * cut's own fsync, in `Segment.append`, fails), the partition is fenced and every waiter gets
 * "fenced" — the requests of the group whose fsync is in flight too, since a concurrent failed
 * fsync on the same file means its success can no longer be trusted (Linux reports a writeback
 * error to one caller). When that fsync then reports success, nothing it covered may become
 * readable: reads serve only acknowledged records (DECISIONS 7), and a restart must not find them.
 */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { readPartitionRecords } from "../helpers/partition-records.ts";

const dir = "/data/topics/t/0";

function batch(...values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v));
  return b.build();
}

async function values(log: PartitionLog): Promise<string[]> {
  return (await readPartitionRecords(log, 8 << 20)).map((r) => r.value);
}

/** Lets the `setImmediate` callbacks run (the write loop's and the deferred fsync's starts). */
const settleIo = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A manual clock whose `afterIo` is `setImmediate`, as the runtime's clock. */
class ImmediateClock extends ManualClock {
  override afterIo(fn: () => void): void {
    setImmediate(fn);
  }
}

const settle = async (n = 40) => {
  for (let i = 0; i < n; i++) await Promise.resolve();
};

function outcome(p: Promise<unknown>) {
  const s = { v: "pending" };
  p.then(
    () => (s.v = "ok"),
    (e: { kind?: string }) => (s.v = e.kind ?? "error"),
  );
  return s;
}

/**
 * A disk whose log fsyncs start at once (they cover what was written when called) and report
 * only when the test lets them go (an fsync on the thread pool, as node-fs runs one of more than
 * 256 KiB) while {@link hold} is in force; the third log write (the second group's) fails (ENOSPC, nothing written),
 * and so does the fsync that follows it (the cut's).
 */
function heldSyncDisk(mem: MemoryFileSystem) {
  let gate: Promise<void> | null = null;
  let open = () => {};
  let logWrites = 0;
  const fs: FileSystem = wrapFileSystem(mem, {
    async write(inner, path, bytes, position) {
      if (path.endsWith(".log")) {
        if (++logWrites === 3) {
          // The second group's write (the third log write: the first put zeros ahead) fails, and so does the fsync of its cut.
          mem.faults.failNext({ op: "write", path: /\.log$/, code: "ENOSPC", partialBytes: 0 });
          mem.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" });
        }
      }
      return inner.write(bytes, position);
    },
    async sync(inner, path) {
      const done = inner.sync();
      done.catch(() => {});
      if (gate !== null && path.endsWith(".log")) {
        const g = gate;
        gate = null; // only the first log fsync after hold() is kept in flight
        await g;
      }
      return done;
    },
  });
  return {
    fs,
    hold: () => void (gate = new Promise<void>((r) => (open = r))),
    letGo: () => open(),
  };
}

describe("a failed write whose cut cannot be made durable while the previous group's fsync is in flight", () => {
  it("does not make the records of requests answered with the fenced error readable, nor bring them back after a restart", async () => {
    const mem = new MemoryFileSystem({ seed: 1 });
    mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
    const disk = heldSyncDisk(mem);
    const log = await PartitionLog.open({ fs: disk.fs, dir, name: "t/0", clock: new ImmediateClock(), logger: new MemoryLogger(), config: () => ({ segmentBytes: 1 << 20, segmentMs: 1e12 }) });
    disk.hold();
    // "a" carries a beforeWrite hook (idempotent produce journals before the log write); "b"
    // arrives while the hook runs, so the same write-loop run takes it as the next group. Its
    // write fails, and so does the fsync of the cut (heldSyncDisk).
    let journaled!: () => void;
    const a = outcome(log.append(batch("a"), { beforeWrite: () => new Promise<void>((r) => (journaled = r)) }));
    await settleIo();
    expect(journaled).toBeDefined(); // the group of "a" is formed and waits for its hook
    const b = outcome(log.append(batch("b")));
    journaled(); // "a" is written; its fsync starts at once and is kept in flight
    await settle();
    disk.letGo(); // the fsync kept in flight reports success
    await settle();
    await settleIo();
    await settle();
    expect(log.fenced).toBe(true); // "b" failed, and so did the fsync of its cut
    expect(b.v).toBe("fenced");
    expect(a.v).not.toBe("pending");
    // Whatever "a" was answered, what is readable is exactly what was acknowledged…
    const acked = a.v === "ok" ? ["a"] : [];
    expect({ a: a.v, readable: await values(log) }).toEqual({ a: a.v, readable: acked });
    await log.close();
    // …and a restart (no reboot: the page cache is what a restart reads) finds the same.
    const again = await PartitionLog.open({ fs: mem, dir, name: "t/0", clock: new ManualClock(), logger: new MemoryLogger(), config: () => ({ segmentBytes: 1 << 20, segmentMs: 1e12 }) });
    expect({ a: a.v, afterRestart: await values(again) }).toEqual({ a: a.v, afterRestart: acked });
    await again.close();
  });
});
