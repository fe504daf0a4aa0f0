// The connection core's writes (src/transport/connection.ts, docs/protocol.md "Pipelining and
// ordering"): answers ready in one turn leave in one write per connection, in the order they were
// given, for every connection answered in that turn (a group commit's fsync answers many
// connections at once, and they are flushed together, in one microtask).
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

/** A socket that records each write's chunks (their first bytes) and takes them at once. */
class RecordingSocket implements ByteSocket {
  readonly remoteAddress = "test:1";
  handlers: ByteSocketHandlers | null = null;
  /** One entry per write call: the first byte of each chunk. */
  writes: number[][] = [];
  /** Called inside write(), after recording it. */
  onWrite: (() => void) | null = null;
  attach(handlers: ByteSocketHandlers): void {
    this.handlers = handlers;
  }
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    this.writes.push(chunks.map((c) => c[0]));
    this.onWrite?.();
    onWritten?.();
    return true;
  }
  pause(): void {}
  resume(): void {}
  end(): void {}
  destroy(): void {
    queueMicrotask(() => this.handlers!.onClose());
  }
}

/** A frame of 8 body bytes whose first byte is `id`. */
function frame(id: number): Uint8Array {
  const f = new Uint8Array(12);
  new DataView(f.buffer).setUint32(0, 8);
  f[4] = id;
  return f;
}

/** A connection whose frames are requests left for the test to answer. */
function connection(total: InFlightTotal) {
  const clock = new ManualClock();
  const logger = new MemoryLogger();
  const socket = new RecordingSocket();
  const core = new FramedConnection(socket, {
    name: "tcp",
    clock,
    logger,
    refusals: new RefusalLog({ logger, clock }),
    lengthMin: 1,
    lengthMax: 1 << 20,
    readTimeoutMs: 1000,
    maxInFlightRequests: 100,
    maxInFlightBytes: 1 << 20,
    order: "completion",
    total,
  });
  const started: PendingRequest[] = [];
  core.start({
    onFrame: () => started.push(core.begin(12)),
    onFrameLengthError: () => {},
    onClose: () => {},
  });
  /** Answers the `i`th started request with a one-byte answer `id`. */
  const answer = (i: number, id: number) => core.finish(started[i], Uint8Array.of(id));
  return { core, socket, started, answer };
}

const microtasks = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

describe("connection core: answers of many connections in one turn", () => {
  it("writes each connection's answers of the turn once, in the order they were given", async () => {
    const total = new InFlightTotal(1 << 30);
    const a = connection(total);
    const b = connection(total);
    const c = connection(total);
    for (const x of [a, b, c])
      x.socket.handlers!.onData(Uint8Array.from([...frame(1), ...frame(2), ...frame(3)]));
    // Interleaved, as an fsync's waiters of three connections are answered.
    a.answer(1, 12);
    b.answer(0, 21);
    a.answer(0, 11);
    b.answer(2, 23);
    a.answer(2, 13);
    b.answer(1, 22);
    expect(a.socket.writes).toEqual([]);
    expect(b.socket.writes).toEqual([]);
    await microtasks();
    expect(a.socket.writes).toEqual([[12, 11, 13]]);
    expect(b.socket.writes).toEqual([[21, 23, 22]]);
    // A connection answered nothing this turn writes nothing.
    expect(c.socket.writes).toEqual([]);
    expect(a.core.inFlight + b.core.inFlight).toBe(0);
    // Only c's three unanswered requests are still held; the answers written were taken.
    expect(total.bytes).toBe(36);
  });

  it("an answer given while the turn's answers are written goes out in a write of its own", async () => {
    const total = new InFlightTotal(1 << 30);
    const a = connection(total);
    const b = connection(total);
    a.socket.handlers!.onData(Uint8Array.from([...frame(1), ...frame(2)]));
    b.socket.handlers!.onData(Uint8Array.from([...frame(1), ...frame(2)]));
    // While a's write is made, b's second request and a's second are answered.
    a.socket.onWrite = () => {
      a.socket.onWrite = null;
      b.answer(1, 22);
      a.answer(1, 12);
    };
    a.answer(0, 11);
    b.answer(0, 21);
    await microtasks();
    expect(a.socket.writes).toEqual([[11], [12]]);
    expect(b.socket.writes).toEqual([[21, 22]]);
    expect(a.core.inFlight + b.core.inFlight).toBe(0);
  });

  it("a connection closed before the turn's flush writes nothing; the others still write", async () => {
    const total = new InFlightTotal(1 << 30);
    const a = connection(total);
    const b = connection(total);
    a.socket.handlers!.onData(frame(1));
    b.socket.handlers!.onData(frame(1));
    a.answer(0, 11);
    b.answer(0, 21);
    a.core.destroy("test");
    await microtasks();
    expect(a.socket.writes).toEqual([]);
    expect(b.socket.writes).toEqual([[21]]);
  });
});
