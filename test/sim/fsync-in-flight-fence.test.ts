/**
 * A group commit's fsync in flight while the next group's write fails: the fsync of one group
 * runs (on the thread pool when more than 256 KiB are unsynced) while the write loop writes the
 * next group, and that write fails.
 *
 * - If its partial bytes are cut but the cut's fsync fails: the cut's fsync is one of the
 *   partition's, so it waits for the fsync in flight; that one's group is acknowledged, and the
 *   failed cut then fences the partition.
 * - If its partial bytes cannot even be cut (the truncate fails): the partition is fenced at once
 *   and every waiter gets "fenced", the group whose fsync is in flight too. When that fsync then
 *   reports success, nothing it covered may become readable: reads serve only acknowledged
 *   records (docs/decisions.md §7), and a restart must not find them.
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
import { readPartitionRecords } from "../helpers/records.ts";

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
 * 256 KiB) while {@link hold} is in force. The third log write (the second group's; the second put
 * zeros ahead) fails: with `"cutSync"` nothing of it lands and the fsync of its cut fails; with
 * `"truncate"` 10 bytes of it land and the truncate that should cut them fails.
 */
function heldSyncDisk(mem: MemoryFileSystem, failure: "cutSync" | "truncate") {
  let gate: Promise<void> | null = null;
  let open = () => {};
  let logWrites = 0;
  const fs: FileSystem = wrapFileSystem(mem, {
    async write(inner, path, bytes, position) {
      if (path.endsWith(".log") && ++logWrites === 3) {
        mem.faults.failNext({
          op: "write",
          path: /\.log$/,
          code: "ENOSPC",
          partialBytes: failure === "truncate" ? 10 : 0,
        });
        mem.faults.failNext({
          op: failure === "truncate" ? "truncate" : "sync",
          path: /\.log$/,
          code: "EIO",
        });
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

/**
 * Appends "a" (with a beforeWrite hook, as idempotent produce journals before the log write) and
 * "b", which arrives while the hook runs, so the same write-loop run takes it as the next group.
 * "a" is written and its fsync starts at once, kept in flight; "b"'s write fails (`failure`).
 * @returns the outcomes of both, and the log, once every answer is in.
 */
async function failWhileFsyncInFlight(mem: MemoryFileSystem, failure: "cutSync" | "truncate") {
  mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
  const disk = heldSyncDisk(mem, failure);
  const log = await PartitionLog.open({
    fs: disk.fs,
    dir,
    name: "t/0",
    clock: new ImmediateClock(),
    logger: new MemoryLogger(),
    config: () => ({ segmentBytes: 1 << 20, segmentMs: 1e12 }),
  });
  disk.hold();
  let journaled!: () => void;
  const a = outcome(
    log.append(batch("a"), { beforeWrite: () => new Promise<void>((r) => (journaled = r)) }),
  );
  await settleIo();
  expect(journaled).toBeDefined(); // the group of "a" is formed and waits for its hook
  const b = outcome(log.append(batch("b")));
  journaled(); // "a" is written; its fsync starts at once and is kept in flight
  await settle();
  const aBeforeItsFsync = a.v;
  disk.letGo(); // the fsync kept in flight reports success
  await settle();
  await settleIo();
  await settle();
  return { log, a, b, aBeforeItsFsync };
}

const reopen = (mem: MemoryFileSystem) =>
  PartitionLog.open({
    fs: mem,
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger: new MemoryLogger(),
    config: () => ({ segmentBytes: 1 << 20, segmentMs: 1e12 }),
  });

describe("a failed write while the previous group's fsync is in flight", () => {
  it("whose cut's fsync fails: waits for that fsync, acknowledges its group, then fences", async () => {
    const mem = new MemoryFileSystem({ seed: 1 });
    const { log, a, b } = await failWhileFsyncInFlight(mem, "cutSync");
    expect(log.fenced).toBe(true);
    expect({ a: a.v, b: b.v }).toEqual({ a: "ok", b: "fenced" });
    expect(await values(log)).toEqual(["a"]);
    await log.close();
    // A restart (no reboot: the page cache is what a restart reads) finds the same.
    const again = await reopen(mem);
    expect(await values(again)).toEqual(["a"]);
    await again.close();
  });

  it("whose partial bytes cannot be cut: fences at once, and the fsync's later success makes nothing readable, nor brings it back after a restart", async () => {
    const mem = new MemoryFileSystem({ seed: 1 });
    const { log, a, b, aBeforeItsFsync } = await failWhileFsyncInFlight(mem, "truncate");
    expect(aBeforeItsFsync).toBe("fenced"); // answered by the fence, before its fsync reported
    expect(log.fenced).toBe(true);
    expect({ a: a.v, b: b.v }).toEqual({ a: "fenced", b: "fenced" });
    expect(await values(log)).toEqual([]);
    await log.close();
    const again = await reopen(mem);
    expect(await values(again)).toEqual([]);
    await again.close();
  });
});
