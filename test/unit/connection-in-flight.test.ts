// The connection core's in-flight accounting (src/transport/connection.ts, docs/protocol.md
// "Pipelining and ordering"): an answer's bytes stay held against the connection's budget and
// the broker-wide InFlightTotal until the socket says the kernel took them (attack17 F1).
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { RefusalLog } from "../../src/lib/refusals.ts";
import {
  FramedConnection,
  InFlightTotal,
  type PendingRequest,
} from "../../src/transport/connection.ts";
import type { ByteSocket, ByteSocketHandlers } from "../../src/transport/tcp/socket.ts";

/** A socket whose peer does not read: nothing written is taken by the kernel until {@link take}. */
class StalledSocket implements ByteSocket {
  readonly remoteAddress = "test:1";
  handlers: ByteSocketHandlers | null = null;
  paused = false;
  /** Bytes written, and the `onWritten` of each write not yet taken. */
  written = 0;
  untaken: (() => void)[] = [];
  /** What write() returns: true models a write buffer still under its high-water mark. */
  accepts = true;
  /** The kernel takes each write at once, inside write() (as it nearly always does for a reader). */
  takesAtOnce = false;
  attach(handlers: ByteSocketHandlers): void {
    this.handlers = handlers;
  }
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    for (const c of chunks) this.written += c.length;
    if (this.takesAtOnce) onWritten?.();
    else if (onWritten !== undefined) this.untaken.push(onWritten);
    return this.accepts;
  }
  /** The kernel takes the oldest `n` writes (all by default). */
  take(n = this.untaken.length): void {
    for (const f of this.untaken.splice(0, n)) f();
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  end(): void {}
  destroy(): void {
    queueMicrotask(() => this.handlers!.onClose());
  }
  /** Bytes from the peer. */
  send(bytes: Uint8Array): void {
    if (this.paused) throw new Error("data delivered while paused");
    this.handlers!.onData(bytes);
  }
}

/** A frame of `n` body bytes (first byte: its id). */
function frame(id: number, n = 8): Uint8Array {
  const f = new Uint8Array(4 + n);
  new DataView(f.buffer).setUint32(0, n);
  f[4] = id;
  return f;
}

const settle = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

/**
 * A connection whose every frame is a request charged `cost` bytes (its frame plus an answer it
 * may grow to), left for the test to answer.
 */
function connection(
  total: InFlightTotal,
  options: { maxInFlightBytes?: number; cost?: number } = {},
) {
  const clock = new ManualClock();
  const logger = new MemoryLogger();
  const socket = new StalledSocket();
  const core = new FramedConnection(socket, {
    name: "tcp",
    clock,
    logger,
    refusals: new RefusalLog({ logger, clock }),
    lengthMin: 1,
    lengthMax: 1 << 20,
    readTimeoutMs: 1000,
    maxInFlightRequests: 100,
    maxInFlightBytes: options.maxInFlightBytes ?? 1000,
    order: "completion",
    total,
  });
  const started: { id: number; pending: PendingRequest }[] = [];
  core.start({
    onFrame: (f) => started.push({ id: f[0], pending: core.begin(options.cost ?? 100) }),
    onFrameLengthError: () => {},
    onClose: () => {},
  });
  /** Answers the `i`th started request with `bytes` answer bytes. */
  const answer = (i: number, bytes: number) =>
    core.finish(started[i].pending, new Uint8Array(bytes));
  return { core, socket, started, answer };
}

describe("connection core: answers count until the kernel takes them", () => {
  it("holds an answer's bytes against the connection's budget until onWritten, then starts what waits", async () => {
    const total = new InFlightTotal(1 << 30);
    const { core, socket, started, answer } = connection(total, { maxInFlightBytes: 1000 });
    socket.send(Uint8Array.from([...frame(1), ...frame(2), ...frame(3)]));
    expect(started.map((s) => s.id)).toEqual([1, 2, 3]);
    expect(core.heldBytes).toBe(300);
    // Request 1's 100 bytes are exchanged for its 950-byte answer: 1150 held, over the budget.
    answer(0, 950);
    expect(core.heldBytes).toBe(1150);
    expect(socket.paused).toBe(true);
    socket.handlers!.onData(frame(4));
    expect(started.length).toBe(3);
    expect(socket.paused).toBe(true);
    await settle();
    // Written, but the peer does not read: still held, still paused (the old core let it go here).
    expect(socket.written).toBe(950);
    expect(core.heldBytes).toBe(1150);
    expect(socket.paused).toBe(true);
    expect(started.length).toBe(3);
    socket.take();
    expect(core.heldBytes).toBe(300);
    expect(started.map((s) => s.id)).toEqual([1, 2, 3, 4]);
    expect(socket.paused).toBe(false);
  });

  it("does not start a waiting frame when a request is answered (before the turn's flush)", async () => {
    const total = new InFlightTotal(1 << 30);
    const { core, socket, started, answer } = connection(total, { cost: 500 });
    socket.send(Uint8Array.from([...frame(1), ...frame(2), ...frame(3)]));
    expect(started.length).toBe(2);
    expect(socket.paused).toBe(true);
    // Request 1's 500 bytes leave, its 900-byte answer comes in: frame 3 still waits.
    answer(0, 900);
    expect(core.heldBytes).toBe(1400);
    expect(started.length).toBe(2);
    await settle();
    expect(started.length).toBe(2);
    socket.take();
    expect(started.map((s) => s.id)).toEqual([1, 2, 3]);
  });

  it("charges answers sent outside the request count (refusals) too", async () => {
    const total = new InFlightTotal(1 << 30);
    const { core, socket } = connection(total);
    core.send([new Uint8Array(10), new Uint8Array(0), new Uint8Array(5)]);
    expect(core.heldBytes).toBe(15);
    expect(total.queuedAnswerBytes).toBe(15);
    await settle();
    socket.take();
    expect(core.heldBytes).toBe(0);
    expect(total.queuedAnswerBytes).toBe(0);
  });

  it("calls an answer's onWritten with the write that carried it, only once the kernel took it", async () => {
    const total = new InFlightTotal(1 << 30);
    const { core, socket, started } = connection(total);
    socket.send(Uint8Array.from([...frame(1), ...frame(2)]));
    const calls: number[] = [];
    core.finish(started[0].pending, new Uint8Array(10), () => calls.push(1));
    await settle();
    core.finish(started[1].pending, new Uint8Array(10), () => calls.push(2));
    await settle();
    expect(socket.untaken.length).toBe(2);
    socket.take(1);
    expect(calls).toEqual([1]);
    expect(core.heldBytes).toBe(10);
    socket.take(1);
    expect(calls).toEqual([1, 2]);
    expect(core.heldBytes).toBe(0);
  });

  it("releases a write the kernel takes at once inside write(), and later ones as they are taken", async () => {
    const total = new InFlightTotal(1 << 30);
    const { core, socket, started } = connection(total);
    socket.send(Uint8Array.from([...frame(1), ...frame(2), ...frame(3)]));
    const calls: number[] = [];
    socket.takesAtOnce = true;
    core.finish(started[0].pending, new Uint8Array(10), () => calls.push(1));
    await settle();
    expect(calls).toEqual([1]);
    expect(core.heldBytes).toBe(200);
    socket.takesAtOnce = false;
    core.finish(started[1].pending, new Uint8Array(20), () => calls.push(2));
    await settle();
    core.finish(started[2].pending, new Uint8Array(30), () => calls.push(3));
    await settle();
    expect(core.heldBytes).toBe(50);
    expect(total.queuedAnswerBytes).toBe(50);
    socket.take(1);
    expect(calls).toEqual([1, 2]);
    expect(core.heldBytes).toBe(30);
    socket.take();
    expect(calls).toEqual([1, 2, 3]);
    expect(core.heldBytes).toBe(0);
    expect(total.bytes).toBe(0);
  });
});

describe("connection core: the broker-wide InFlightTotal", () => {
  it("sums what every connection holds and releases a closed connection's share at once", async () => {
    const total = new InFlightTotal(1 << 30);
    const a = connection(total);
    const b = connection(total);
    a.socket.send(Uint8Array.from([...frame(1), ...frame(2)]));
    b.socket.send(frame(1));
    expect(total.bytes).toBe(300);
    a.answer(0, 700);
    expect(total.bytes).toBe(900);
    expect(total.queuedAnswerBytes).toBe(700);
    await settle();
    a.core.destroy("test");
    await settle();
    expect(total.bytes).toBe(100);
    expect(total.queuedAnswerBytes).toBe(0);
    // Its request still in flight answers after the close: nothing is released twice.
    a.answer(1, 50);
    a.socket.take();
    expect(total.bytes).toBe(100);
    b.answer(0, 0);
    expect(total.bytes).toBe(0);
  });

  it("over the cap, stops connections holding anything and lets one holding nothing start one request; all resume once it drops", async () => {
    const total = new InFlightTotal(1000);
    const slow = connection(total, { maxInFlightBytes: 1 << 20 });
    const busy = connection(total, { maxInFlightBytes: 1 << 20 });
    const idle = connection(total, { maxInFlightBytes: 1 << 20 });
    slow.socket.send(frame(1));
    slow.answer(0, 1200);
    expect(total.bytes).toBe(1200);
    await settle();
    // `busy` holds a request in flight: its next frame waits for the total.
    busy.socket.send(Uint8Array.from([...frame(1), ...frame(2)]));
    expect(busy.started.length).toBe(1);
    expect(busy.socket.paused).toBe(true);
    // `idle` holds nothing: one request starts, the next waits.
    idle.socket.send(Uint8Array.from([...frame(1), ...frame(2)]));
    expect(idle.started.length).toBe(1);
    expect(idle.socket.paused).toBe(true);
    // The slow connection itself waits too: it holds its unread answer.
    expect(total.waiting).toBe(3);
    expect(total.waits).toBe(3);
    // The slow peer reads: the total drops below the cap and the waiting connections go on.
    slow.socket.take();
    // 200 left, then each waiting connection started its second request at once.
    expect(total.bytes).toBe(400);
    expect(busy.started.length).toBe(2);
    expect(idle.started.length).toBe(2);
    expect(busy.socket.paused).toBe(false);
    expect(idle.socket.paused).toBe(false);
    expect(total.waiting).toBe(0);
  });

  it("a waiting connection that closes is forgotten", async () => {
    const total = new InFlightTotal(100);
    const a = connection(total);
    const b = connection(total);
    a.socket.send(Uint8Array.from([...frame(1), ...frame(2)]));
    expect(a.started.length).toBe(1);
    expect(total.waiting).toBe(1);
    a.core.destroy("test");
    await settle();
    expect(total.waiting).toBe(0);
    expect(total.bytes).toBe(0);
    b.socket.send(frame(1));
    expect(b.started.length).toBe(1);
  });

  it("refuses a cap that is not a positive number", () => {
    expect(() => new InFlightTotal(0)).toThrow(RangeError);
    expect(() => new InFlightTotal(Number.NaN)).toThrow(RangeError);
  });
});

describe("connection core: the abort signal", () => {
  it("is aborted at close whether it was read before (a long-poll) or only after", async () => {
    const before = connection(new InFlightTotal(1 << 30));
    const signal = before.core.signal;
    expect(signal.aborted).toBe(false);
    expect(before.core.signal).toBe(signal);
    before.socket.destroy();
    await settle();
    expect(signal.aborted).toBe(true);

    // Never read while open (made lazily): read after the close, it is already aborted.
    const after = connection(new InFlightTotal(1 << 30));
    after.socket.destroy();
    await settle();
    expect(after.core.signal.aborted).toBe(true);
  });
});
