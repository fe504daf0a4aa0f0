/**
 * `BunByteSocket` (src/runtime/bun-tcp.ts) over a scripted Bun socket: what the adapter does that
 * `Bun.listen` does not and `node:net` does — queueing what the kernel did not take, in order,
 * until `drain`; ending after the queue; ending our side on the peer's FIN; holding reads until
 * the owner attaches. The real socket is covered end to end on the bun and binary targets
 * (test/e2e/runtime.test.ts, "a TCP client that stopped reading").
 */
import { describe, expect, it } from "vitest";
import { BunByteSocket, type BunSocket } from "../../src/runtime/bun-tcp.ts";

/** A Bun socket whose kernel takes at most `room` bytes until the test gives it more. */
class ScriptedSocket implements BunSocket {
  data: BunByteSocket | undefined;
  readonly remoteAddress = "127.0.0.1";
  readonly remotePort = 40000;
  room = Number.POSITIVE_INFINITY;
  sent: number[] = [];
  calls: string[] = [];
  closed = false;

  write(bytes: Uint8Array): number {
    if (this.closed) return -1;
    const n = Math.min(bytes.length, this.room);
    this.room -= n;
    for (const b of bytes.subarray(0, n)) this.sent.push(b);
    return n;
  }
  shutdown(): void {
    this.calls.push("shutdown");
  }
  terminate(): void {
    this.calls.push("terminate");
  }
  pause(): void {
    this.calls.push("pause");
  }
  resume(): void {
    this.calls.push("resume");
  }
  setNoDelay(): boolean {
    return true;
  }
}

function open(): {
  raw: ScriptedSocket;
  socket: BunByteSocket;
  events: string[];
  data: number[][];
} {
  const raw = new ScriptedSocket();
  const socket = new BunByteSocket(raw);
  const events: string[] = [];
  const data: number[][] = [];
  socket.attach({
    onData: (chunk) => data.push([...chunk]),
    onDrain: () => events.push("drain"),
    onClose: () => events.push("close"),
  });
  return { raw, socket, events, data };
}

const bytes = (...values: number[]) => Uint8Array.from(values);

describe("BunByteSocket", () => {
  it("names the peer and is paused from opening until the owner attaches", () => {
    const raw = new ScriptedSocket();
    const socket = new BunByteSocket(raw);
    expect(socket.remoteAddress).toBe("127.0.0.1:40000");
    expect(raw.calls).toEqual(["pause"]);
    // A read that still arrives before attach is held, then delivered first.
    socket.onData(bytes(1, 2));
    const seen: number[][] = [];
    socket.attach({ onData: (c) => seen.push([...c]), onDrain() {}, onClose() {} });
    expect(seen).toEqual([[1, 2]]);
    expect(raw.calls).toEqual(["pause", "resume"]);
  });

  it("gathers small chunks into one send and answers true when the kernel took all", () => {
    const { raw, socket } = open();
    expect(socket.write([bytes(1, 2), bytes(3), bytes(4, 5)])).toBe(true);
    expect(raw.sent).toEqual([1, 2, 3, 4, 5]);
  });

  it("queues what the kernel did not take, in order, answers false, and drains it before onDrain", () => {
    const { raw, socket, events } = open();
    raw.room = 3;
    expect(socket.write([bytes(1, 2), bytes(3, 4, 5)])).toBe(false);
    expect(raw.sent).toEqual([1, 2, 3]);
    // Later writes wait behind the queue, never overtaking it.
    expect(socket.write([bytes(6)])).toBe(false);
    expect(raw.sent).toEqual([1, 2, 3]);
    // Drain with room for part of it: still blocked, no onDrain.
    raw.room = 1;
    socket.onDrain();
    expect(raw.sent).toEqual([1, 2, 3, 4]);
    expect(events).toEqual([]);
    raw.room = Number.POSITIVE_INFINITY;
    socket.onDrain();
    expect(raw.sent).toEqual([1, 2, 3, 4, 5, 6]);
    expect(events).toEqual(["drain"]);
    // A drain with nothing queued tells the owner nothing.
    socket.onDrain();
    expect(events).toEqual(["drain"]);
  });

  it("calls onWritten at once when the kernel took a write, and for queued writes once the queue is out, in order, before onDrain", () => {
    const { raw, socket, events } = open();
    socket.write([bytes(1)], () => events.push("written 1"));
    expect(events).toEqual(["written 1"]);
    raw.room = 1;
    expect(socket.write([bytes(2, 3)], () => events.push("written 2"))).toBe(false);
    expect(socket.write([bytes(4)], () => events.push("written 3"))).toBe(false);
    socket.onDrain();
    expect(events).toEqual(["written 1"]);
    raw.room = Number.POSITIVE_INFINITY;
    socket.onDrain();
    expect(raw.sent).toEqual([1, 2, 3, 4]);
    expect(events).toEqual(["written 1", "written 2", "written 3", "drain"]);
  });

  it("never calls onWritten of writes still queued when the socket is destroyed", () => {
    const { raw, socket, events } = open();
    raw.room = 0;
    socket.write([bytes(1)], () => events.push("written"));
    socket.destroy();
    socket.onClose();
    socket.onDrain();
    expect(events).toEqual(["close"]);
  });

  it("sends a large answer chunk by chunk, queueing from the first chunk the kernel cut", () => {
    const { raw, socket } = open();
    const big = new Uint8Array(70 * 1024).fill(7);
    raw.room = 10;
    expect(socket.write([bytes(1), big, bytes(9)])).toBe(false);
    expect(raw.sent.length).toBe(10);
    raw.room = Number.POSITIVE_INFINITY;
    socket.onDrain();
    expect(raw.sent.length).toBe(1 + big.length + 1);
    expect(raw.sent[0]).toBe(1);
    expect(raw.sent.at(-1)).toBe(9);
  });

  it("end sends FIN only after the queue is out, drops later writes, and keeps reading to discard", () => {
    const { raw, socket, data } = open();
    raw.room = 1;
    socket.write([bytes(1, 2)]);
    socket.end();
    expect(raw.calls).not.toContain("shutdown");
    expect(socket.write([bytes(3)])).toBe(true);
    socket.onData(bytes(8));
    expect(data).toEqual([]);
    raw.room = Number.POSITIVE_INFINITY;
    socket.onDrain();
    expect(raw.sent).toEqual([1, 2]);
    expect(raw.calls.at(-1)).toBe("shutdown");
    // The peer's FIN then closes it.
    socket.onPeerEnd();
    expect(raw.calls.at(-1)).toBe("terminate");
  });

  it("ends our side when the peer sends FIN, after what is queued (as node:net without allowHalfOpen)", () => {
    const { raw, socket } = open();
    raw.room = 0;
    socket.write([bytes(1)]);
    socket.onPeerEnd();
    expect(raw.calls).not.toContain("shutdown");
    raw.room = Number.POSITIVE_INFINITY;
    socket.onDrain();
    expect(raw.sent).toEqual([1]);
    expect(raw.calls.at(-1)).toBe("shutdown");
  });

  it("pause and resume reach the socket once each, and nothing is delivered or written after close", () => {
    const { raw, socket, events, data } = open();
    socket.pause();
    socket.pause();
    socket.resume();
    socket.resume();
    expect(raw.calls).toEqual(["pause", "resume", "pause", "resume"]);
    socket.onClose();
    socket.onClose();
    expect(events).toEqual(["close"]);
    socket.onData(bytes(1));
    expect(data).toEqual([]);
    expect(socket.write([bytes(1)])).toBe(true);
    expect(raw.sent).toEqual([]);
  });

  it("destroy terminates at once and drops what is queued", () => {
    const { raw, socket } = open();
    raw.room = 0;
    socket.write([bytes(1, 2)]);
    socket.destroy();
    expect(raw.calls.at(-1)).toBe("terminate");
    raw.room = Number.POSITIVE_INFINITY;
    socket.onDrain();
    expect(raw.sent).toEqual([]);
  });
});
