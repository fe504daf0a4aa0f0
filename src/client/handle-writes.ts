/**
 * Writes on a Node TCP socket's handle (`TCPWrap`) directly, not through `net.Socket`'s
 * `Writable`: per write that saves the stream's bookkeeping, its write request object and its
 * `afterWrite` tick (docs/benchmarks.md "Broker CPU per record at 64 × 1: the socket layer
 * (2026-12-02, 14:27–15:07 UTC)"). The broker's plain connections on Node answer through it
 * (`runtime/tcp.ts`), and so do the client's plain connections on Node (`client.ts`). Ordering is
 * libuv's: a write that finds the bytes of an earlier one still queued queues behind them; a
 * stream `end()` (shutdown) is queued behind them too.
 */
import type * as net from "node:net";

/** Node's internal `stream_wrap` binding, the parts used here. */
interface StreamWrap {
  WriteWrap: new () => WriteRequest;
  streamBaseState: Int32Array;
  kLastWriteWasAsync: number;
}

/** A `WriteWrap`: native calls `oncomplete(status)` on it when a write that went asynchronous ends. */
interface WriteRequest {
  oncomplete: ((status: number) => void) | null;
}

/** The parts of a TCP handle (`TCPWrap`) a direct write uses; each returns 0 or a negative errno. */
interface StreamHandle {
  writeBuffer(req: WriteRequest, chunk: Uint8Array): number;
  writev(req: WriteRequest, chunks: readonly Uint8Array[], allBuffers: true): number;
  /** Bytes libuv holds that the kernel has not taken yet. */
  readonly writeQueueSize: number;
}

/** Node (not Deno's or Bun's `node:net`, whose sockets have no such handle). */
const isNode =
  (globalThis as { Deno?: unknown }).Deno === undefined &&
  (globalThis as { Bun?: unknown }).Bun === undefined;

/** Node's write request and the state its stream writes report through; null where not found. */
const streamWrap: StreamWrap | null = isNode ? loadStreamWrap() : null;

function loadStreamWrap(): StreamWrap | null {
  try {
    const binding = (process as unknown as { binding(name: string): Partial<StreamWrap> }).binding(
      "stream_wrap",
    );
    if (
      typeof binding.WriteWrap === "function" &&
      binding.streamBaseState instanceof Int32Array &&
      typeof binding.kLastWriteWasAsync === "number"
    )
      return binding as StreamWrap;
  } catch {
    // Not offered by this Node: writes go through net.Socket.write.
  }
  return null;
}

/**
 * The write request every direct write passes while the kernel takes its bytes at once (nearly
 * always: a small write on a socket with room): native code only turns it into a queued write
 * when part of the bytes must wait, and then the request belongs to that write until it ends.
 */
let spareWriteRequest: WriteRequest | null = null;

/** True where {@link HandleWrites} can be used (Node, with its `stream_wrap` binding). */
export function handleWritesAvailable(): boolean {
  return streamWrap !== null;
}

/**
 * Direct writes on one plain (not TLS) `net.Socket`'s handle on Node. A write the kernel takes at
 * once is done when {@link write} returns; one that must wait keeps its chunks alive here until
 * libuv ends it. An error (EPIPE, ECONNRESET) destroys the socket, as `net.Socket` does ('close'
 * follows).
 */
export class HandleWrites {
  readonly #socket: net.Socket;
  readonly #onDrain: () => void;
  /** Writes that went asynchronous and have not ended (their chunks kept alive here), oldest first. */
  #queued: { req: WriteRequest | null; chunks: readonly Uint8Array[]; onWritten?: () => void }[] =
    [];
  /** A write returned false: call `onDrain` once the queued ones have ended. */
  #needDrain = false;

  /**
   * @param socket a plain TCP socket on Node ({@link handleWritesAvailable} must be true).
   * @param onDrain called once every queued write has ended after {@link write} returned false.
   * @throws Error where direct writes are not available.
   */
  constructor(socket: net.Socket, onDrain: () => void = () => {}) {
    if (streamWrap === null) throw new Error("direct handle writes need Node's stream_wrap");
    this.#socket = socket;
    this.#onDrain = onDrain;
  }

  /**
   * Writes `chunks` in order, in one system call where the kernel takes them all. `onWritten` is
   * called at once when it did, or when the queued write ends without error.
   * @returns false if more than the socket's high-water mark now waits in libuv (`onDrain` will
   * follow), true otherwise (also when the socket is closed or the write failed).
   */
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    const handle = (this.#socket as unknown as { _handle: StreamHandle | null })._handle;
    if (handle === null) return true;
    const wrap = streamWrap!;
    const req = spareWriteRequest ?? new wrap.WriteWrap();
    spareWriteRequest = null;
    const error =
      chunks.length === 1 ? handle.writeBuffer(req, chunks[0]) : handle.writev(req, chunks, true);
    if (error !== 0) {
      // The request is not reused: native code may have bound it to the write it then abandoned.
      this.#socket.destroy();
      return true;
    }
    if (wrap.streamBaseState[wrap.kLastWriteWasAsync] === 0) {
      spareWriteRequest = req;
      // libuv can take this write at once while an earlier one's completion is still to be
      // delivered: its onWritten waits its turn, so they are called in write order.
      if (this.#queued.length > 0) this.#queued.push({ req: null, chunks: [], onWritten });
      else onWritten?.();
      return true;
    }
    // Part of the bytes wait in libuv's queue: the request and the chunks live until they are sent.
    req.oncomplete = this.#ended;
    this.#queued.push({ req, chunks, onWritten });
    if (handle.writeQueueSize <= this.#socket.writableHighWaterMark) return true;
    this.#needDrain = true;
    return false;
  }

  /** Native's `oncomplete` of a write that went asynchronous (they end in order). */
  readonly #ended = (status: number): void => {
    const ended = this.#queued.shift();
    if (status < 0) {
      this.#socket.destroy();
      return;
    }
    ended?.onWritten?.();
    // Writes taken at once after it (no request of their own) are done too.
    while (this.#queued.length > 0 && this.#queued[0].req === null)
      this.#queued.shift()?.onWritten?.();
    if (this.#needDrain && this.#queued.length === 0 && !this.#socket.destroyed) {
      this.#needDrain = false;
      this.#onDrain();
    }
  };
}
