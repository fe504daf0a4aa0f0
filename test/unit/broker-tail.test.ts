/**
 * Shared tail reads and coalesced long-poll wake-ups (`src/broker/tail.ts`), against a fake
 * partition log and a manual clock: one subscription per partition, one read per offset for
 * overlapping identical reads, wake-ups held back only with several readers, the readers of
 * the last wake-up counted while they come back, a reader at the tail of a busy partition held
 * back until the others' next wake-up (never past a span), and a closed or fenced partition, an
 * abort or a timeout ending a long-poll.
 */
import { describe, expect, it, vi } from "vitest";
import {
  coalesceDelayMs,
  coalesceDelayMsMax,
  coalesceWaitersMin,
  PartitionTails,
} from "../../src/broker/tail.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import type { PartitionLog, PartitionRead } from "../../src/storage/partition.ts";

/** The part of a PartitionLog the tails use, with counters. */
class FakeLog {
  highWatermark = 0;
  closed = false;
  fenced = false;
  reads = 0;
  listeners = new Set<() => void>();
  pending: ((r: PartitionRead) => void)[] = [];

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  read(request: { offset: number }): Promise<PartitionRead> {
    this.reads++;
    return new Promise((resolve) => {
      this.pending.push(() =>
        resolve({
          bytes: new Uint8Array([request.offset]),
          count: 1,
          nextOffset: request.offset + 1,
          highWatermark: this.highWatermark,
          logStartOffset: 0,
        }),
      );
    });
  }

  /** Completes every read in flight. */
  finishReads(): void {
    for (const f of this.pending.splice(0)) f(undefined as never);
  }

  append(records: number): void {
    this.highWatermark += records;
    for (const l of [...this.listeners]) l();
  }
}

const asLog = (fake: FakeLog) => fake as unknown as PartitionLog;
const flush = () => new Promise((r) => setTimeout(r, 0));

describe("PartitionTails", () => {
  it("coalesces only with several waiters, 0.1 ms each, up to the cap", () => {
    expect(coalesceDelayMs(1)).toBe(0);
    expect(coalesceDelayMs(coalesceWaitersMin - 1)).toBe(0);
    expect(coalesceDelayMs(coalesceWaitersMin)).toBe(1);
    expect(coalesceDelayMs(50)).toBe(5);
    expect(coalesceDelayMs(10_000)).toBe(coalesceDelayMsMax);
  });

  it("shares one read among identical overlapping reads, and reads again once it settled", async () => {
    const log = new FakeLog();
    log.highWatermark = 10;
    const tails = new PartitionTails(new ManualClock());
    const request = { offset: 3, maxRecords: 100, maxBytes: 1000 };
    const a = tails.read(asLog(log), request);
    const b = tails.read(asLog(log), request);
    const other = tails.read(asLog(log), { ...request, offset: 4 });
    expect(log.reads).toBe(2);
    log.finishReads();
    const [ra, rb] = await Promise.all([a, b, other]);
    expect(ra).toBe(rb);
    expect(ra.bytes).toBe(rb.bytes);
    const again = tails.read(asLog(log), request);
    expect(log.reads).toBe(3);
    log.finishReads();
    expect(await again).not.toBe(ra);
  });

  it("gives a shared read's window back once every sharer released it, and only then", async () => {
    const log = new FakeLog();
    log.highWatermark = 10;
    let given = 0;
    const read = log.read.bind(log);
    log.read = (request) => read(request).then((r) => ({ ...r, release: () => void given++ }));
    const tails = new PartitionTails(new ManualClock());
    const request = { offset: 3, maxRecords: 100, maxBytes: 1000 };
    const sharers = [tails.read(asLog(log), request), tails.read(asLog(log), request)];
    sharers.push(tails.read(asLog(log), request));
    log.finishReads();
    const [a, b, c] = await Promise.all(sharers);
    expect(a).toBe(b);
    a.release!();
    b.release!();
    expect(given).toBe(0);
    c.release!();
    expect(given).toBe(1);
    // A read nobody shared keeps the release it came with.
    const alone = tails.read(asLog(log), { ...request, offset: 4 });
    log.finishReads();
    (await alone).release!();
    expect(given).toBe(2);
  });

  it("wakes a single waiter at once, through one subscription that goes when it does", async () => {
    const log = new FakeLog();
    const clock = new ManualClock();
    const tails = new PartitionTails(clock);
    let woke = false;
    const waiting = tails.wait(asLog(log), 0, 5000).then(() => (woke = true));
    expect(log.listeners.size).toBe(1);
    log.append(1);
    await waiting;
    expect(woke).toBe(true);
    expect(log.listeners.size).toBe(0);
  });

  it("holds back the wake-up of many waiters, then wakes those past their offset together", async () => {
    const log = new FakeLog();
    const clock = new ManualClock();
    const tails = new PartitionTails(clock);
    const waiters = 20;
    const woken: number[] = [];
    for (let i = 0; i < waiters; i++)
      void tails.wait(asLog(log), i === 0 ? 5 : 0, 5000).then(() => woken.push(i));
    expect(log.listeners.size).toBe(1);
    log.append(1);
    clock.advance(1);
    log.append(1);
    await flush();
    expect(woken).toEqual([]);
    // The span runs from the first move.
    clock.advance(coalesceDelayMs(waiters) - 1);
    await flush();
    // Every waiter at offset 0 woke; the one at 5 still waits for its records.
    expect(woken.length).toBe(waiters - 1);
    expect(woken).not.toContain(0);
    clock.advance(5000);
    await flush();
    expect(woken).toContain(0);
    expect(log.listeners.size).toBe(0);
  });

  it("counts the readers a wake-up answered while they come back, and forgets those that leave", async () => {
    const log = new FakeLog();
    const clock = new ManualClock();
    const tails = new PartitionTails(clock);
    expect(tails.busy(asLog(log))).toBe(false);
    for (let i = 0; i < 20; i++) void tails.wait(asLog(log), 0, 5000);
    log.append(1);
    clock.advance(coalesceDelayMs(20));
    await flush();
    // Nobody waits now, yet the 20 just answered are on their way back: still a busy tail, and
    // the first to come back (fewer than the coalescing minimum) wait for the span of all 20.
    expect(tails.busy(asLog(log))).toBe(true);
    let early = 0;
    for (let i = 0; i < coalesceWaitersMin - 1; i++)
      void tails.wait(asLog(log), 1, 5000).then(() => early++);
    log.append(1);
    await flush();
    expect(early).toBe(0);
    clock.advance(coalesceDelayMs(20) - 1);
    await flush();
    expect(early).toBe(0);
    clock.advance(1);
    await flush();
    expect(early).toBe(coalesceWaitersMin - 1);

    // Only one reader keeps coming back: the count fades below the minimum within a few wake-ups.
    let wakeUps = 0;
    while (tails.busy(asLog(log))) {
      void tails.wait(asLog(log), log.highWatermark, 5000);
      log.append(1);
      clock.advance(coalesceDelayMsMax);
      await flush();
      wakeUps++;
      expect(wakeUps).toBeLessThan(20);
    }
    expect(wakeUps).toBeGreaterThan(1);
  });

  it("holds a reader at the tail of a busy partition until the next wake-up, at most a span", async () => {
    const log = new FakeLog();
    const clock = new ManualClock();
    const tails = new PartitionTails(clock);
    const readers = 50;
    const span = coalesceDelayMs(readers);
    for (let i = 0; i < readers; i++) void tails.wait(asLog(log), 0, 5000);
    log.append(1);
    clock.advance(span);
    await flush();
    expect(tails.busy(asLog(log))).toBe(true);

    // A record arrived before they came back: held (no timer of their own), from the first one
    // back, and released together at the end of that span, with the waiters.
    log.append(1);
    const released: number[] = [];
    for (let i = 0; i < readers - 1; i++)
      void tails.holdBack(asLog(log)).then(() => released.push(i));
    let waited = false;
    void tails.wait(asLog(log), 2, 5000).then(() => (waited = true));
    clock.advance(span - 1);
    await flush();
    expect(released).toEqual([]);
    log.append(1);
    clock.advance(1);
    await flush();
    expect(released.length).toBe(readers - 1);
    expect(waited).toBe(true);
    expect(log.listeners.size).toBe(0);

    // No record arrives: still released at the end of the span, never left waiting for one.
    let alone = false;
    void tails.holdBack(asLog(log)).then(() => (alone = true));
    clock.advance(span - 1);
    await flush();
    expect(alone).toBe(false);
    clock.advance(1);
    await flush();
    expect(alone).toBe(true);
  });

  it("wakes every waiter at once when the partition is fenced or closed, and on abort or timeout", async () => {
    const log = new FakeLog();
    const clock = new ManualClock();
    const tails = new PartitionTails(clock);
    let woken = 0;
    for (let i = 0; i < 10; i++) void tails.wait(asLog(log), 0, 5000).then(() => woken++);
    log.fenced = true;
    log.append(0);
    await flush();
    expect(woken).toBe(10);

    const abort = new AbortController();
    let aborted = false;
    void tails.wait(asLog(log), 0, 5000, abort.signal).then(() => (aborted = true));
    abort.abort();
    await flush();
    expect(aborted).toBe(true);

    // Long-polls of one connection, held or waiting, end with its signal, and leave no listener
    // on it once answered (one left on a combined signal would keep that signal alive).
    const connection = new AbortController();
    const adds = vi.spyOn(connection.signal, "addEventListener");
    const removes = vi.spyOn(connection.signal, "removeEventListener");
    let ended = 0;
    for (let i = 0; i < 5; i++)
      void tails.wait(asLog(log), 0, 5000, connection.signal).then(() => ended++);
    void tails.holdBack(asLog(log), connection.signal).then(() => ended++);
    connection.abort();
    await flush();
    expect(ended).toBe(6);
    expect(removes).toHaveBeenCalledTimes(adds.mock.calls.length);
    // An aborted signal ends a long-poll at once.
    let late = false;
    void tails.wait(asLog(log), 0, 5000, connection.signal).then(() => (late = true));
    await flush();
    expect(late).toBe(true);

    let timedOut = false;
    void tails.wait(asLog(log), 0, 100).then(() => (timedOut = true));
    clock.advance(99);
    await flush();
    expect(timedOut).toBe(false);
    clock.advance(1);
    await flush();
    expect(timedOut).toBe(true);
    expect(log.listeners.size).toBe(0);
  });

  it("puts one abort listener on a signal however many long-polls share it (attack14b F6)", async () => {
    // Node warns (plain text on stderr) from the 11th listener on one signal; a connection's
    // long-polls all wait on its signal.
    const log = new FakeLog();
    const clock = new ManualClock();
    const tails = new PartitionTails(clock);
    const connection = new AbortController();
    const adds = vi.spyOn(connection.signal, "addEventListener");
    const removes = vi.spyOn(connection.signal, "removeEventListener");
    let ended = 0;
    for (let i = 0; i < 20; i++)
      void tails.wait(asLog(log), 0, 100 + i, connection.signal).then(() => ended++);
    expect(adds).toHaveBeenCalledTimes(1);
    clock.advance(105);
    await flush();
    expect(ended).toBe(6);
    expect(removes).not.toHaveBeenCalled();
    // The last one to end takes the listener off.
    clock.advance(20);
    await flush();
    expect(ended).toBe(20);
    expect(removes).toHaveBeenCalledTimes(1);
    // The next waits put one on again, and the abort still ends them all.
    for (let i = 0; i < 12; i++)
      void tails.wait(asLog(log), 0, 5000, connection.signal).then(() => ended++);
    expect(adds).toHaveBeenCalledTimes(2);
    connection.abort();
    await flush();
    expect(ended).toBe(32);
    expect(log.listeners.size).toBe(0);
  });
});
