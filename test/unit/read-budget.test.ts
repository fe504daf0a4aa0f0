/**
 * File reads within a budget per event-loop turn (`src/runtime/read-budget.ts`, docs/runtimes.md
 * "File reads: synchronous within a budget per turn"): the budget's count and its reset once per
 * turn (a fake turn), the limit on reads in the thread pool, and the runtime file handle's reads
 * beyond the budget (in the pool): the same bytes, the same errors, and a close or truncate that
 * waits for them.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FsError } from "../../src/fs/types.ts";
import { syncReadBytesPerTurn } from "../../src/lib/limits.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { InFlightLimit, TurnReadBudget } from "../../src/runtime/read-budget.ts";
import { tempDir } from "../helpers/tmp.ts";

/** A fake event loop: `afterTurn` queues; `endTurn` runs what was queued. */
function fakeTurns(): {
  afterTurn: (fn: () => void) => void;
  endTurn: () => void;
  queued: () => number;
} {
  let queue: (() => void)[] = [];
  return {
    afterTurn: (fn) => queue.push(fn),
    endTurn: () => {
      const run = queue;
      queue = [];
      for (const fn of run) fn();
    },
    queued: () => queue.length,
  };
}

describe("TurnReadBudget", () => {
  it("lets reads through until the turn's budget, queues the one that would pass it, and lets it through after the turn", async () => {
    const turns = fakeTurns();
    const budget = new TurnReadBudget(1000, turns.afterTurn);
    expect(budget.reserve(400)).toBeNull();
    expect(budget.reserve(600)).toBeNull();
    expect(budget.usedBytes).toBe(1000);
    let through = false;
    const later = budget.reserve(1)!;
    void later.then(() => (through = true));
    expect(later).toBeInstanceOf(Promise);
    expect(budget.usedBytes).toBe(1000);
    expect(budget.waiting).toBe(1);
    // One end of turn scheduled, however many reads took from the turn.
    expect(turns.queued()).toBe(1);
    await Promise.resolve();
    expect(through).toBe(false);
    turns.endTurn();
    await later;
    expect(through).toBe(true);
    expect(budget.waiting).toBe(0);
    // The next turn counts the read let through; it has room for 999 more.
    expect(budget.usedBytes).toBe(1);
    expect(budget.reserve(999)).toBeNull();
    expect(budget.reserve(1)).not.toBeNull();
  });

  it("queues a read behind those waiting even when the turn has room, and lets them through in order, a turn's budget at a time", async () => {
    const turns = fakeTurns();
    const budget = new TurnReadBudget(1000, turns.afterTurn);
    expect(budget.reserve(900)).toBeNull();
    const order: string[] = [];
    const a = budget.reserve(600)!.then(() => order.push("a"));
    const b = budget.reserve(50)!.then(() => order.push("b"));
    const c = budget.reserve(500)!.then(() => order.push("c"));
    expect(budget.waiting).toBe(3);
    turns.endTurn();
    await Promise.resolve();
    await Promise.resolve();
    // a (600) and b (50) fit the new turn; c (500) would pass it and waits one more.
    expect(order).toEqual(["a", "b"]);
    expect(budget.usedBytes).toBe(650);
    expect(budget.waiting).toBe(1);
    expect(budget.reserve(10)).not.toBeNull();
    turns.endTurn();
    await Promise.all([a, b, c]);
    expect(order).toEqual(["a", "b", "c"]);
  });

  it("lets the first waiting read through at a turn's start whatever its size, so none waits forever", async () => {
    const turns = fakeTurns();
    const budget = new TurnReadBudget(1000, turns.afterTurn);
    expect(budget.reserve(1)).toBeNull();
    const big = budget.reserve(5000)!;
    turns.endTurn();
    await big;
    expect(budget.usedBytes).toBe(5000);
    expect(budget.reserve(1)).not.toBeNull();
  });

  it("lets a read of 0 bytes through without scheduling an end of turn; the count resets once nothing is left", () => {
    const turns = fakeTurns();
    const budget = new TurnReadBudget(10, turns.afterTurn);
    expect(budget.reserve(0)).toBeNull();
    expect(turns.queued()).toBe(0);
    expect(budget.reserve(10)).toBeNull();
    turns.endTurn();
    expect(budget.usedBytes).toBe(0);
    expect(turns.queued()).toBe(0);
  });
});

describe("InFlightLimit", () => {
  it("runs at most maxInFlight jobs at once, the rest in arrival order, each with its own outcome", async () => {
    const limit = new InFlightLimit(2);
    const release: (() => void)[] = [];
    const started: number[] = [];
    const job =
      (i: number, fail = false) =>
      () =>
        new Promise<number>((resolve, reject) => {
          started.push(i);
          release[i] = () => (fail ? reject(new Error(`job ${i}`)) : resolve(i * 10));
        });
    const runs = [limit.run(job(0)), limit.run(job(1, true)), limit.run(job(2)), limit.run(job(3))];
    const outcomes = runs.map((r) =>
      r.then(
        (v) => ({ v }),
        (e: Error) => ({ e: e.message }),
      ),
    );
    await Promise.resolve();
    expect(started).toEqual([0, 1]);
    expect(limit.inFlight).toBe(2);
    expect(limit.waiting).toBe(2);
    release[1]!();
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual([0, 1, 2]);
    expect(limit.inFlight).toBe(2);
    release[0]!();
    release[2]!();
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual([0, 1, 2, 3]);
    release[3]!();
    expect(await Promise.all(outcomes)).toEqual([{ v: 0 }, { e: "job 1" }, { v: 20 }, { v: 30 }]);
    expect(limit.inFlight).toBe(0);
    expect(limit.waiting).toBe(0);
  });
});

describe("NodeFileSystem reads past the turn's budget (a later turn, or the thread pool)", () => {
  /** A file of `bytes` bytes, each position's byte its index mod 251. */
  function patternFile(bytes: number): { path: string; data: Buffer } {
    const { dir } = tempDir();
    const data = Buffer.alloc(bytes);
    for (let i = 0; i < bytes; i++) data[i] = i % 251;
    const path = join(dir, "segment.log");
    writeFileSync(path, data);
    return { path, data };
  }
  const large = syncReadBytesPerTurn + 4097;

  it("reads the same bytes as a read within the budget, and fewer at the end of the file", async () => {
    const { path, data } = patternFile(large + 1000);
    const file = await new NodeFileSystem().open(path);
    const buf = new Uint8Array(large);
    expect(await file.read(buf, 7)).toBe(large);
    expect(Buffer.from(buf).equals(data.subarray(7, 7 + large))).toBe(true);
    const tail = new Uint8Array(large);
    expect(await file.read(tail, 2000)).toBe(large + 1000 - 2000);
    expect(Buffer.from(tail.subarray(0, large - 1000)).equals(data.subarray(2000))).toBe(true);
    const small = new Uint8Array(100);
    expect(await file.read(small, 7)).toBe(100);
    expect(Buffer.from(small).equals(data.subarray(7, 107))).toBe(true);
    await file.close();
  });

  it("maps errors as a read within the budget does", async () => {
    const { dir } = tempDir();
    const file = await new NodeFileSystem().open(dir);
    const errorOf = (p: Promise<unknown>) =>
      p.then(
        () => null,
        (e: FsError) => ({
          type: e instanceof FsError,
          code: e.code,
          path: e.path,
          starts: e.message.split(",")[0],
        }),
      );
    const inPool = await errorOf(file.read(new Uint8Array(large), 0));
    const inline = await errorOf(file.read(new Uint8Array(10), 0));
    expect(inPool).toEqual({
      type: true,
      code: "EISDIR",
      path: dir,
      starts: "EISDIR: illegal operation on a directory",
    });
    expect(inPool).toEqual(inline);
    await file.close();
  });

  it("reads within the budget that pass the turn's remainder in a later turn, with the same bytes; close waits for them", async () => {
    const { path, data } = patternFile(syncReadBytesPerTurn * 3);
    const file = await new NodeFileSystem().open(path);
    const each = Math.floor(syncReadBytesPerTurn * 0.6);
    const bufs = [0, 1, 2, 3].map(() => new Uint8Array(each));
    let immediates = 0;
    const tick = (): void => {
      immediates++;
      if (immediates < 100) setImmediate(tick);
    };
    setImmediate(tick);
    const reads = bufs.map((b, i) => file.read(b, i * 1000));
    const closed = file.close();
    expect(await Promise.all(reads)).toEqual([each, each, each, each]);
    // Four reads of 0.6 budgets each: one a turn, so other callbacks ran between them (all four
    // read at once would leave this at 0).
    expect(immediates).toBeGreaterThanOrEqual(2);
    bufs.forEach((b, i) => {
      expect(Buffer.from(b).equals(data.subarray(i * 1000, i * 1000 + each))).toBe(true);
    });
    await closed;
  });

  it("closes the file only once the reads started before the close have their bytes; later reads get EBADF", async () => {
    const { path, data } = patternFile(large);
    const fs = new NodeFileSystem();
    const file = await fs.open(path);
    const bufs = [new Uint8Array(large), new Uint8Array(large), new Uint8Array(large)];
    // Three at once: more than the pool runs at once, so one waits its turn past the close.
    const reads = bufs.map((b) => file.read(b, 0));
    const closed = file.close();
    await expect(file.read(new Uint8Array(large), 0)).rejects.toMatchObject({ code: "EBADF" });
    await expect(file.read(new Uint8Array(10), 0)).rejects.toMatchObject({ code: "EBADF" });
    // Files opened meanwhile must not take over the descriptor under the reads.
    const others = await Promise.all([fs.open(path), fs.open(path)]);
    expect(await Promise.all(reads)).toEqual([large, large, large]);
    for (const b of bufs) expect(Buffer.from(b).equals(data)).toBe(true);
    await closed;
    for (const o of others) await o.close();
  });

  it("truncates only once the reads started before it have their bytes", async () => {
    const { path, data } = patternFile(large);
    const file = await new NodeFileSystem().open(path, { write: true });
    const buf = new Uint8Array(large);
    const read = file.read(buf, 0);
    const truncated = file.truncate(10);
    expect(await read).toBe(large);
    expect(Buffer.from(buf).equals(data)).toBe(true);
    await truncated;
    expect(await file.size()).toBe(10);
    expect(await file.read(new Uint8Array(large), 0)).toBe(10);
    await file.close();
  });
});
