/**
 * Group commit while concurrent producers come back (docs/storage.md "Writes and durability",
 * "When the next fsync starts"; `storage/group-commit.ts`): after an fsync that answered several
 * requests, the next fsync's start waits, turn after turn of the event loop, while the producers
 * it answered send their next requests. Here closed-loop producers (one request in flight each,
 * the next sent some turns after the answer) run on a scripted event loop: each turn first
 * delivers the requests due (a poll), then runs the `Clock.afterIo` callbacks queued before it.
 *
 * - With a power cut at every mutation of that workload, then a crash in every mode, a restart
 *   finds every acknowledged record at its offset, offsets without gaps or repeats, and nothing
 *   but acknowledged records below the last acknowledged one. An acknowledgement that came
 *   before its covering fsync loses its record when the power is cut at that fsync.
 * - Every acknowledgement follows the successful end of a log fsync that started after the
 *   write holding the request's record (checked at each acknowledgement, from the bytes written).
 * - A failed fsync while a group waits for the gathering to end, and a failed write that cannot
 *   be cut meanwhile, fence: every waiting request gets "fenced", no fsync starts after, and a
 *   restart finds only what was acknowledged.
 * - A lone producer's fsync starts at once, with no turn in between.
 */
import { describe, expect, it } from "vitest";
import { type CrashMode, MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { ManualClock, type Timer } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { readPartitionRecords } from "../helpers/records.ts";

const dir = "/data/topics/t/0";

/** Lets every pending microtask (and the ones they queue) run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * A scripted event loop: `afterIo` callbacks queued during a turn run in the next one, after
 * that turn's poll, as `setImmediate` callbacks run after the I/O events of the next loop turn.
 */
class LoopClock extends ManualClock {
  #queue: (() => void)[] = [];
  #timers: { turn: number; resolve: () => void }[] = [];
  turnNo = 0;
  /** `afterIo` calls so far. */
  afterIoCalls = 0;
  override afterIo(fn: () => void): void {
    this.afterIoCalls++;
    this.#queue.push(fn);
  }
  /** Callbacks waiting for the next turn. */
  get queued(): number {
    return this.#queue.length;
  }
  /** Resolves at the start of the turn `turns` turns from now. */
  inTurns(turns: number): Promise<void> {
    return new Promise((resolve) => this.#timers.push({ turn: this.turnNo + turns, resolve }));
  }
  /** One turn: `poll` delivers what arrived, then the callbacks queued before the turn run. */
  async turn(poll: () => void): Promise<void> {
    this.turnNo++;
    for (const t of this.#timers.filter((t) => t.turn <= this.turnNo)) t.resolve();
    this.#timers = this.#timers.filter((t) => t.turn > this.turnNo);
    await settle();
    poll();
    await settle();
    for (const fn of this.#queue.splice(0)) {
      fn();
      await settle();
    }
  }
}

/**
 * A scripted event loop whose `waitForIo` is a timer of `waitTurns` turns: it fires at the start
 * of the turn it falls due in, before that turn's poll (Node runs due timers before polling),
 * unless cancelled first.
 */
class TimedLoopClock extends LoopClock {
  #waits: { turn: number; live: boolean; fn: () => void }[] = [];
  /** `waitForIo` calls so far, and how many of them ran out (fired). */
  waitCalls = 0;
  waitsRunOut = 0;
  constructor(readonly waitTurns: number) {
    super();
  }
  override waitForIo(_maxMs: number, fn: () => void): Timer {
    this.waitCalls++;
    const wait = { turn: this.turnNo + this.waitTurns, live: true, fn };
    this.#waits.push(wait);
    return { cancel: () => void (wait.live = false) };
  }
  /** Waits neither fired nor cancelled. */
  get pendingWaits(): number {
    return this.#waits.filter((w) => w.live).length;
  }
  override turn(poll: () => void): Promise<void> {
    return super.turn(() => {
      for (const w of this.#waits.filter((w) => w.live && w.turn <= this.turnNo)) {
        w.live = false;
        this.waitsRunOut++;
        w.fn();
      }
      this.#waits = this.#waits.filter((w) => w.live);
      poll();
    });
  }
}

/** A value of fixed width, so that no value is part of another in the bytes written. */
const recordValue = (producer: number, request: number) =>
  `gather-p${String(producer).padStart(2, "0")}-r${String(request).padStart(3, "0")}`;

function batchOf(value: string) {
  const b = new EntryBatchBuilder();
  b.add(null, utf8(value), 1000);
  return b.build();
}

function contains(bytes: Uint8Array, needle: Uint8Array): boolean {
  outer: for (let i = 0; i + needle.length <= bytes.length; i++) {
    for (let j = 0; j < needle.length; j++) if (bytes[i + j] !== needle[j]) continue outer;
    return true;
  }
  return false;
}

/**
 * A file system over `inner` that remembers, for every value, which log write carried it, and
 * how many log writes the last successful log fsync covered (those made before it started).
 * `syncTurns` > 0 keeps each log fsync in flight for that many turns of `clock`.
 */
class WatchedDisk {
  readonly fs: FileSystem;
  /** Value → the number of the log write (1-based) that carried it. */
  readonly writeOf = new Map<string, number>();
  logWrites = 0;
  /** Log writes made before the start of the last log fsync that succeeded. */
  durableWrites = 0;
  logSyncs = 0;
  constructor(inner: FileSystem, clock: LoopClock, values: () => Iterable<string>, syncTurns = 0) {
    this.fs = wrapFileSystem(inner, {
      write: async (handle, path, bytes, position) => {
        if (!path.endsWith(".log")) return handle.write(bytes, position);
        const n = ++this.logWrites;
        await handle.write(bytes, position);
        for (const v of values())
          if (!this.writeOf.has(v) && contains(bytes, utf8(v))) this.writeOf.set(v, n);
      },
      sync: async (handle, path) => {
        if (!path.endsWith(".log")) return handle.sync();
        const covers = this.logWrites;
        this.logSyncs++;
        const done = handle.sync();
        done.catch(() => {});
        if (syncTurns > 0) await clock.inTurns(syncTurns);
        await done;
        this.durableWrites = Math.max(this.durableWrites, covers);
      },
    });
  }
}

interface Request {
  producer: number;
  value: string;
  state: "pending" | "ok" | "refused";
  offset?: number;
  error?: unknown;
  /** Set when an acknowledgement came before the fsync covering its record. */
  early?: string;
}

interface Workload {
  producers: number;
  requestsEach: number;
  /** Most turns a producer takes to send its next request after an answer. */
  thinkTurnsMax: number;
  seed: number;
  /** Turns each log fsync stays in flight. */
  syncTurns?: number;
  /** With a value: the loop's `waitForIo` is a timer of this many turns ({@link TimedLoopClock}). */
  waitTurns?: number;
  /** Requests of each producer, where they differ from `requestsEach`. */
  requestsOf?: number[];
  /** Producers that send on their schedule whether answered or not (open loop). */
  openLoop?: boolean;
}

/** The state of one run of {@link runWorkload}. */
interface Run {
  clock: LoopClock;
  disk: WatchedDisk;
  log: PartitionLog | null;
  requests: Request[];
  turns: number;
}

function openLog(fs: FileSystem, clock: ManualClock) {
  return PartitionLog.open({
    fs,
    dir,
    name: "t/0",
    clock,
    logger: new MemoryLogger(),
    config: () => ({ segmentBytes: 1024, segmentMs: 1e12 }),
  });
}

/**
 * Runs closed-loop producers against a partition on `fs`: each sends `requestsEach` one-record
 * requests, one in flight, the next 0…`thinkTurnsMax` turns (seeded) after the answer; a refused
 * request stops its producer. Returns once every request settled (or the open failed).
 */
async function runWorkload(fs: FileSystem, w: Workload): Promise<Run> {
  const clock = w.waitTurns === undefined ? new LoopClock() : new TimedLoopClock(w.waitTurns);
  const requests: Request[] = [];
  const disk = new WatchedDisk(fs, clock, () => requests.map((r) => r.value), w.syncTurns);
  const run: Run = { clock, disk, log: null, requests, turns: 0 };
  try {
    run.log = await openLog(disk.fs, clock);
  } catch {
    return run; // power lost while opening
  }
  const log = run.log;
  const prng = new Prng(w.seed);
  const sent = new Array<number>(w.producers).fill(0);
  /** The turn each producer sends its next request at; -1 while one is in flight or it stopped. */
  const dueAt = new Array<number>(w.producers).fill(1);
  const send = (p: number) => {
    const request: Request = { producer: p, value: recordValue(p, sent[p]++), state: "pending" };
    requests.push(request);
    dueAt[p] = w.openLoop ? clock.turnNo + 1 + prng.int(w.thinkTurnsMax + 1) : -1;
    log.append(batchOf(request.value)).then(
      (result) => {
        const writtenBy = disk.writeOf.get(request.value);
        if (writtenBy === undefined || writtenBy > disk.durableWrites)
          request.early = `acknowledged after log write ${writtenBy ?? "none"}, with ${disk.durableWrites} durable`;
        request.state = "ok";
        request.offset = result.baseOffset;
        if (sent[p] < (w.requestsOf?.[p] ?? w.requestsEach) && !w.openLoop)
          dueAt[p] = clock.turnNo + 1 + prng.int(w.thinkTurnsMax + 1);
      },
      (error: unknown) => {
        request.state = "refused";
        request.error = error;
        dueAt[p] = -1;
      },
    );
  };
  const poll = () => {
    for (let p = 0; p < w.producers; p++)
      if (
        dueAt[p] >= 0 &&
        dueAt[p] <= clock.turnNo &&
        sent[p] < (w.requestsOf?.[p] ?? w.requestsEach)
      )
        send(p);
  };
  const limit = w.producers * w.requestsEach * (w.thinkTurnsMax + 4) + 200;
  while (run.turns < limit) {
    const waiting = requests.some((r) => r.state === "pending");
    const more = dueAt.some((d, p) => d >= 0 && sent[p] < (w.requestsOf?.[p] ?? w.requestsEach));
    if (!waiting && !more && clock.queued === 0) break;
    await clock.turn(poll);
    run.turns++;
  }
  return run;
}

/** Every acknowledgement followed the fsync covering its record; nothing was left waiting. */
function expectAnswered(run: Run): void {
  expect(
    run.requests.filter((r) => r.state === "pending").map((r) => r.value),
    "requests never answered (a lost wake-up)",
  ).toEqual([]);
  expect(
    run.requests.filter((r) => r.early !== undefined).map((r) => `${r.value}: ${r.early}`),
    "acknowledged before the fsync covering it",
  ).toEqual([]);
}

/**
 * After a restart on `mem`: every acknowledged record at its offset, no record twice, and below
 * the last acknowledged offset nothing that was not acknowledged there; unless the crash could
 * tear or drop single unsynced writes (`tornWrites`: a random crash, which can leave a hole
 * before a kept write, reported as a corrupt stretch past the durable records), also no corrupt
 * segment and offsets from 0 without gaps.
 */
async function expectRecovered(
  mem: MemoryFileSystem,
  requests: Request[],
  tornWrites = false,
): Promise<void> {
  const again = await openLog(mem, new ManualClock());
  const found = await readPartitionRecords(again);
  if (!tornWrites) {
    expect(again.describe().segments.filter((s) => s.corruption !== null)).toEqual([]);
    found.forEach((f, i) => expect(f.offset).toBe(i));
  }
  const at = new Map(found.map((f) => [f.offset, f.value]));
  const acked = requests.filter((r) => r.state === "ok");
  for (const r of acked) expect(at.get(r.offset!), `acknowledged ${r.value}`).toBe(r.value);
  const ackedAt = new Map(acked.map((r) => [r.value, r.offset!]));
  const lastAcked = Math.max(-1, ...acked.map((r) => r.offset!));
  const sentValues = new Set(requests.map((r) => r.value));
  const seen = new Set<string>();
  for (const f of found) {
    expect(seen.has(f.value), `${f.value} found twice`).toBe(false);
    seen.add(f.value);
    expect(sentValues.has(f.value), `${f.value} was never sent`).toBe(true);
    if (f.offset <= lastAcked)
      expect(ackedAt.get(f.value), `${f.value} at ${f.offset}`).toBe(f.offset);
  }
  expect(again.logEndOffset).toBeGreaterThan(lastAcked);
  await again.close();
}

function freshDisk(seed = 7): MemoryFileSystem {
  const mem = new MemoryFileSystem({ seed });
  // The partition directory exists durably, as the broker makes it before it opens a partition.
  mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
  return mem;
}

const crashes: { mode: CrashMode; seed: number }[] = [
  { mode: "dropAll", seed: 0 },
  { mode: "keepAll", seed: 0 },
  { mode: "random", seed: 1 },
  { mode: "random", seed: 2 },
];

describe("group commit gathering the requests of concurrent producers", () => {
  const workload: Workload = { producers: 6, requestsEach: 6, thinkTurnsMax: 2, seed: 3 };

  it("shares each fsync among the producers coming back, and acknowledges nothing before its covering fsync", async () => {
    for (const syncTurns of [0, 1]) {
      const mem = freshDisk();
      const run = await runWorkload(mem, { ...workload, syncTurns });
      expectAnswered(run);
      expect(run.requests.every((r) => r.state === "ok")).toBe(true);
      const records = workload.producers * workload.requestsEach;
      // Started at once after each group's write, the fsyncs would follow the producers' returns
      // turn by turn: about one per turn in which any came back.
      expect(run.log!.stats.fsyncs).toBeLessThan(records / 3);
      await run.log!.close();
      mem.crash({ mode: "dropAll" });
      await expectRecovered(mem, run.requests);
    }
  });

  it("keeps every acknowledged record through a power cut at every mutation, in every crash mode", async () => {
    for (const syncTurns of [0, 1]) {
      const base = freshDisk();
      const before = base.mutationCount;
      const clean = await runWorkload(new MemoryFileSystem({ disk: base }), {
        ...workload,
        syncTurns,
      });
      await clean.log!.close();
      const mutations = base.mutationCount - before;
      expect(mutations).toBeGreaterThan(20);
      for (let n = 1; n <= mutations + 1; n++) {
        for (const crash of crashes) {
          const mem = freshDisk();
          const boot = new MemoryFileSystem({ disk: mem, powerCutAtMutation: n });
          const run = await runWorkload(boot, { ...workload, syncTurns });
          const label = `power cut at mutation ${n} of ${mutations}, fsyncs ${syncTurns} turns long, then ${crash.mode} ${crash.seed}`;
          try {
            expectAnswered(run);
            await run.log?.close();
            mem.crash({ mode: crash.mode, seed: crash.seed });
            await expectRecovered(mem, run.requests, crash.mode === "random");
          } catch (err) {
            throw new Error(`${label}: ${(err as Error).message}`);
          }
        }
      }
    }
  });

  /**
   * Runs the workload until a group is written and waits for the gathering to end (its fsync's
   * start is deferred), then calls `fault` and runs on.
   */
  async function faultWhileGathering(
    fault: (mem: MemoryFileSystem) => void,
    clock: LoopClock = new LoopClock(),
  ): Promise<{ mem: MemoryFileSystem; run: Run; waiting: Request[] }> {
    const mem = freshDisk();
    const requests: Request[] = [];
    const disk = new WatchedDisk(mem, clock, () => requests.map((r) => r.value));
    const log = await openLog(disk.fs, clock);
    const run: Run = { clock, disk, log, requests, turns: 0 };
    let next = 0;
    const send = () => {
      const request: Request = { producer: 0, value: recordValue(0, next++), state: "pending" };
      requests.push(request);
      log.append(batchOf(request.value)).then(
        (result) => {
          if ((disk.writeOf.get(request.value) ?? Infinity) > disk.durableWrites)
            request.early = "acknowledged before its fsync";
          request.state = "ok";
          request.offset = result.baseOffset;
        },
        (error: unknown) => {
          request.state = "refused";
          request.error = error;
        },
      );
    };
    // Four requests arrive together: one group, its fsync at once (no fsync answered any yet).
    await clock.turn(() => {
      for (let i = 0; i < 4; i++) send();
    });
    expect(requests.map((r) => r.state)).toEqual(["ok", "ok", "ok", "ok"]);
    // Two come back: their group's fsync waits, as two more are expected.
    await clock.turn(() => {
      send();
      send();
    });
    const waiting = requests.slice(4);
    expect(waiting.map((r) => r.state)).toEqual(["pending", "pending"]);
    expect(disk.writeOf.has(waiting[1].value)).toBe(true); // written, not yet fsynced
    expect(disk.logSyncs).toBe(1);
    expect(clock.queued).toBe(1); // the deferred fsync start
    fault(mem);
    // One more arrives (its write may fail), then turns until the deferred start has run.
    await clock.turn(send);
    for (let i = 0; i < 5; i++) await clock.turn(() => {});
    return { mem, run, waiting };
  }

  it("fences when the fsync that ends the gathering fails: every waiting request gets fenced, and a restart finds only what was acknowledged", async () => {
    const { mem, run, waiting } = await faultWhileGathering((m) =>
      m.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" }),
    );
    expectAnswered(run);
    expect(run.log!.fenced).toBe(true);
    for (const r of [...waiting, run.requests[6]])
      expect((r.error as { kind?: string }).kind, r.value).toBe("fenced");
    await expect(run.log!.append(batchOf("after"))).rejects.toMatchObject({ kind: "fenced" });
    const fsyncs = run.disk.logSyncs;
    for (let i = 0; i < 3; i++) await run.clock.turn(() => {});
    expect(run.disk.logSyncs).toBe(fsyncs);
    await run.log!.close();
    mem.crash({ mode: "dropAll" });
    await expectRecovered(mem, run.requests);
    const again = await openLog(mem, new ManualClock());
    expect((await readPartitionRecords(again)).map((r) => r.value)).toEqual(
      run.requests.slice(0, 4).map((r) => r.value),
    );
    await again.close();
  });

  it("fences when a write fails and cannot be cut while a group waits: the waiting group gets fenced, and no fsync starts after", async () => {
    const { mem, run, waiting } = await faultWhileGathering((m) => {
      m.faults.failNext({ op: "write", path: /\.log$/, code: "ENOSPC", partialBytes: 10 });
      m.faults.failNext({ op: "truncate", path: /\.log$/, code: "EIO" });
    });
    expectAnswered(run);
    expect(run.log!.fenced).toBe(true);
    for (const r of waiting) expect((r.error as { kind?: string }).kind, r.value).toBe("fenced");
    expect(run.disk.logSyncs).toBe(1); // the deferred start started nothing
    await run.log!.close();
    mem.crash({ mode: "dropAll" });
    await expectRecovered(mem, run.requests);
  });

  it("starts a lone producer's fsync at once, with no turn of the event loop in between", async () => {
    const mem = freshDisk();
    const run = await runWorkload(mem, {
      producers: 1,
      requestsEach: 10,
      thinkTurnsMax: 2,
      seed: 5,
    });
    expectAnswered(run);
    expect(run.log!.stats.fsyncs).toBe(10);
    // One afterIo per request: the write loop's start; none for an fsync.
    expect(run.clock.afterIoCalls).toBe(10);
    await run.log!.close();
  });

  describe("with a timed wait for the producers the last fsync answered", () => {
    /** Turns a timed wait lasts: longer than the producers' think time, so they come back in it. */
    const waitTurns = 4;

    it("shares each fsync among every producer the last one answered, and acknowledges nothing before its covering fsync", async () => {
      for (const syncTurns of [0, 1]) {
        const mem = freshDisk();
        const run = await runWorkload(mem, { ...workload, syncTurns, waitTurns });
        const clock = run.clock as TimedLoopClock;
        expectAnswered(run);
        expect(run.requests.every((r) => r.state === "ok")).toBe(true);
        // After the first fsync every producer waits for the same one: one fsync per round of
        // requests, plus the first ones, which answer those that arrived first.
        expect(run.log!.stats.fsyncs).toBeLessThanOrEqual(workload.requestsEach + 2);
        // The waits ended when the producers were back, not on the timer, except at the end
        // (the producers' last requests answered, none comes back).
        expect(clock.waitCalls).toBeGreaterThan(0);
        expect(clock.waitsRunOut).toBeLessThanOrEqual(1);
        expect(clock.pendingWaits).toBe(0);
        await run.log!.close();
        mem.crash({ mode: "dropAll" });
        await expectRecovered(mem, run.requests);
      }
    });

    it("keeps every acknowledged record through a power cut at every mutation, in every crash mode", async () => {
      for (const syncTurns of [0, 1]) {
        const w: Workload = { ...workload, syncTurns, waitTurns };
        const base = freshDisk();
        const before = base.mutationCount;
        const clean = await runWorkload(new MemoryFileSystem({ disk: base }), w);
        await clean.log!.close();
        const mutations = base.mutationCount - before;
        expect(mutations).toBeGreaterThan(20);
        for (let n = 1; n <= mutations + 1; n++) {
          for (const crash of crashes) {
            const mem = freshDisk();
            const boot = new MemoryFileSystem({ disk: mem, powerCutAtMutation: n });
            const run = await runWorkload(boot, w);
            const label = `power cut at mutation ${n} of ${mutations}, fsyncs ${syncTurns} turns long, then ${crash.mode} ${crash.seed}`;
            try {
              expectAnswered(run);
              await run.log?.close();
              expect((run.clock as TimedLoopClock).pendingWaits).toBe(0);
              mem.crash({ mode: crash.mode, seed: crash.seed });
              await expectRecovered(mem, run.requests, crash.mode === "random");
            } catch (err) {
              throw new Error(`${label}: ${(err as Error).message}`);
            }
          }
        }
      }
    });

    it("fences when the fsync the timer starts fails: every waiting request gets fenced, and no fsync starts after", async () => {
      const clock = new TimedLoopClock(waitTurns - 1);
      const { mem, run, waiting } = await faultWhileGathering(
        (m) => m.faults.failNext({ op: "sync", path: /\.log$/, code: "EIO" }),
        clock,
      );
      expectAnswered(run);
      expect(clock.waitCalls).toBe(1);
      expect(clock.waitsRunOut).toBe(1); // three of the four expected came back: the timer ran out
      expect(run.log!.fenced).toBe(true);
      for (const r of [...waiting, run.requests[6]])
        expect((r.error as { kind?: string }).kind, r.value).toBe("fenced");
      const fsyncs = run.disk.logSyncs;
      expect(fsyncs).toBe(2);
      for (let i = 0; i < 6; i++) await clock.turn(() => {});
      expect(run.disk.logSyncs).toBe(fsyncs);
      await run.log!.close();
      mem.crash({ mode: "dropAll" });
      await expectRecovered(mem, run.requests);
    });

    it("fences when a write fails and cannot be cut while a group waits on the timer: the timer is cancelled and no fsync starts", async () => {
      const clock = new TimedLoopClock(waitTurns - 1);
      const { mem, run, waiting } = await faultWhileGathering((m) => {
        m.faults.failNext({ op: "write", path: /\.log$/, code: "ENOSPC", partialBytes: 10 });
        m.faults.failNext({ op: "truncate", path: /\.log$/, code: "EIO" });
      }, clock);
      expectAnswered(run);
      expect(run.log!.fenced).toBe(true);
      for (const r of waiting) expect((r.error as { kind?: string }).kind, r.value).toBe("fenced");
      expect(clock.waitCalls).toBe(1);
      expect(clock.waitsRunOut).toBe(0);
      expect(clock.pendingWaits).toBe(0);
      expect(run.disk.logSyncs).toBe(1);
      await run.log!.close();
      mem.crash({ mode: "dropAll" });
      await expectRecovered(mem, run.requests);
    });

    it("on close while a group waits on the timer: cancels it, makes the group durable, and starts no fsync after", async () => {
      const mem = freshDisk();
      const clock = new TimedLoopClock(waitTurns);
      const requests: Request[] = [];
      const disk = new WatchedDisk(mem, clock, () => requests.map((r) => r.value));
      const log = await openLog(disk.fs, clock);
      const run: Run = { clock, disk, log, requests, turns: 0 };
      const send = () => {
        const request: Request = {
          producer: 0,
          value: recordValue(0, requests.length),
          state: "pending",
        };
        requests.push(request);
        log.append(batchOf(request.value)).then(
          (result) => {
            if ((disk.writeOf.get(request.value) ?? Infinity) > disk.durableWrites)
              request.early = "acknowledged before its fsync";
            request.state = "ok";
            request.offset = result.baseOffset;
          },
          (error: unknown) => {
            request.state = "refused";
            request.error = error;
          },
        );
      };
      await clock.turn(() => {
        for (let i = 0; i < 4; i++) send();
      });
      await clock.turn(() => {
        send();
        send();
      });
      await clock.turn(() => {}); // the deferred start arms the timer: two of four are back
      expect(clock.pendingWaits).toBe(1);
      expect(disk.logSyncs).toBe(1);
      let closed = false;
      const closing = log.close().then(() => void (closed = true));
      for (let i = 0; i < 10 && !closed; i++) await clock.turn(() => {});
      await closing;
      expect(clock.pendingWaits).toBe(0);
      expect(clock.waitsRunOut).toBe(0);
      expectAnswered(run);
      expect(requests.map((r) => r.state)).toEqual(Array(6).fill("ok"));
      const fsyncs = disk.logSyncs;
      expect(fsyncs).toBe(2); // the close's flush
      for (let i = 0; i < 2 * waitTurns; i++) await clock.turn(() => {});
      expect(disk.logSyncs).toBe(fsyncs);
      mem.crash({ mode: "dropAll" });
      await expectRecovered(mem, requests);
    });

    it("lets producers that do not come back pay the timer rarely: open-loop producers, and producers that stop", async () => {
      // Open loop: each producer sends every 1–3 turns, answered or not, while fsyncs take two
      // turns; what an fsync answered says little about what arrives next.
      const mem = freshDisk();
      const run = await runWorkload(mem, {
        producers: 3,
        requestsEach: 40,
        thinkTurnsMax: 2,
        seed: 11,
        syncTurns: 2,
        waitTurns,
        openLoop: true,
      });
      const clock = run.clock as TimedLoopClock;
      expectAnswered(run);
      expect(run.requests.every((r) => r.state === "ok")).toBe(true);
      // Each wait that runs out at least doubles the fsyncs that start without one after it.
      expect(clock.waitsRunOut).toBeLessThanOrEqual(Math.log2(run.log!.stats.fsyncs) + 2);
      await run.log!.close();
      mem.crash({ mode: "dropAll" });
      await expectRecovered(mem, run.requests);

      // Six producers, of which all but one stop after their third request: the wait runs out
      // as they stop, then the one left starts its fsyncs at once (each answers one request).
      const mem2 = freshDisk();
      const stopping = await runWorkload(mem2, {
        producers: 6,
        requestsEach: 3,
        requestsOf: [20],
        thinkTurnsMax: 1,
        seed: 2,
        waitTurns,
      });
      const stoppingClock = stopping.clock as TimedLoopClock;
      expectAnswered(stopping);
      expect(stopping.requests.every((r) => r.state === "ok")).toBe(true);
      expect(stoppingClock.waitsRunOut).toBeLessThanOrEqual(2);
      expect(stoppingClock.waitCalls).toBeLessThanOrEqual(6);
      await stopping.log!.close();
      mem2.crash({ mode: "dropAll" });
      await expectRecovered(mem2, stopping.requests);
    });

    it("starts a lone producer's fsync at once, with no wait and no turn of the event loop in between", async () => {
      const mem = freshDisk();
      const run = await runWorkload(mem, {
        producers: 1,
        requestsEach: 10,
        thinkTurnsMax: 2,
        seed: 5,
        waitTurns,
      });
      expectAnswered(run);
      expect(run.log!.stats.fsyncs).toBe(10);
      expect(run.clock.afterIoCalls).toBe(10);
      expect((run.clock as TimedLoopClock).waitCalls).toBe(0);
      await run.log!.close();
    });
  });
});
