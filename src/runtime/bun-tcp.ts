/**
 * The plain-TCP listener on Bun (and the compiled binary) over `Bun.listen`, Bun's native socket
 * layer (uSockets), instead of Bun's `node:net` emulation: each read reaches JavaScript as one
 * call with the bytes, and each write is one synchronous `send` that returns what the kernel
 * took, with no stream object, write request or callback per answer (docs/runtimes.md, "Sockets
 * on Bun"; the measurement is in docs/benchmarks.md, "The socket floor"). It adapts a Bun socket
 * to the transport's {@link ByteSocket}, so the connection core (`transport/connection.ts`) sees
 * the same contract as over `node:net` (`tcp.ts`), which TLS listeners and Node and Deno keep.
 *
 * What `Bun.listen` does differently, and how the adapter makes it the same:
 * - A write is not buffered: `write` returns the bytes the kernel took, possibly fewer. The rest
 *   waits here, in order, and goes out on `drain`; until then {@link ByteSocket.write} answers
 *   false (the core stops starting requests and pauses reading, as with `node:net`'s high-water
 *   mark) and later writes queue behind it.
 * - The peer's FIN: `node:net` (without `allowHalfOpen`) ends our side once what was written has
 *   gone out; here the listener is half-open and the adapter does the same itself.
 * - A connection is paused from the moment it opens until its owner attaches, so bytes wait in
 *   the kernel, not in memory, while an early listener holds it (`cli/early-listener.ts`).
 */
import { unmappedHost } from "../lib/address.ts";
import { tcpEndLingerMs } from "../lib/limits.ts";
import type { ByteSocket, ByteSocketHandlers } from "../transport/tcp/socket.ts";
import type { ConnectionLimit } from "../lib/connection-limit.ts";

/** The part of a Bun TCP socket the adapter uses (Bun's own types are not a dependency). */
export interface BunSocket {
  /** The adapter of this connection, set in `open`. */
  data: BunByteSocket | undefined;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** The local address the peer reached (Bun 1.1 and later). */
  readonly localAddress?: string;
  /** Sends what the kernel takes now: the bytes taken, or -1 once the socket is closed. */
  write(bytes: Uint8Array): number;
  /** Sends FIN once the bytes given to `write` are out; keeps reading. */
  shutdown(): void;
  /** Closes the socket now. */
  terminate(): void;
  pause(): void;
  resume(): void;
  setNoDelay(on: boolean): boolean;
}

/** The part of the listener `Bun.listen` returns that the adapter uses. */
interface BunTcpServer {
  readonly port: number;
  /** Stops accepting; open connections stay (`closeActiveConnections` false). */
  stop(closeActiveConnections?: boolean): void;
}

interface BunListenOptions {
  hostname: string;
  port: number;
  allowHalfOpen: boolean;
  socket: {
    open(socket: BunSocket): void;
    data(socket: BunSocket, bytes: Uint8Array): void;
    drain(socket: BunSocket): void;
    end(socket: BunSocket): void;
    close(socket: BunSocket, error?: Error): void;
    error(socket: BunSocket, error: Error): void;
  };
}

interface BunGlobal {
  listen(options: BunListenOptions): BunTcpServer;
}

/** A listener of {@link listenBunTcp}: stop accepting, then wait for the open connections. */
export interface BunTcpListener {
  readonly port: number;
  /** Stops accepting; resolves once every accepted connection has closed. */
  close(): Promise<void>;
}

/**
 * Gathered writes up to this size are copied into one buffer and sent with one `send` (`write`
 * takes one buffer); larger answers (a fetch's stored records) are sent chunk by chunk, uncopied.
 */
const gatherBytesMax = 64 * 1024;

/**
 * Listens on `host:port` with `Bun.listen` and hands each accepted connection to `onConnection`
 * as a {@link ByteSocket} (Nagle off, paused until the owner calls `attach`). Bun only.
 * @throws the listen error (`EADDRINUSE`, `EACCES`, with its `code`) as a rejection.
 */
export function listenBunTcp(
  host: string,
  port: number,
  onConnection: (socket: ByteSocket) => void,
  options: {
    /** Connections beyond it are closed at once (`lib/connection-limit.ts`). */
    limit?: ConnectionLimit;
    /** Which listener this is, in the refusal's log line. */
    listener?: "tcp" | "kafka";
  } = {},
): Promise<BunTcpListener> {
  const { limit } = options;
  const bun = (globalThis as { Bun?: BunGlobal }).Bun;
  if (bun === undefined) return Promise.reject(new Error("Bun.listen needs the Bun runtime"));
  let open = 0;
  let onDrained: (() => void) | null = null;
  let server: BunTcpServer;
  try {
    server = bun.listen({
      hostname: host,
      port,
      allowHalfOpen: true,
      socket: {
        open(socket) {
          // A refused socket keeps `data` undefined: its `close` is not counted.
          if (
            limit !== undefined &&
            !limit.admit(options.listener ?? "tcp", `${socket.remoteAddress}:${socket.remotePort}`)
          ) {
            socket.terminate();
            return;
          }
          open++;
          const adapter = new BunByteSocket(socket);
          socket.data = adapter;
          onConnection(adapter);
        },
        data: (socket, bytes) => socket.data?.onData(bytes),
        drain: (socket) => socket.data?.onDrain(),
        end: (socket) => socket.data?.onPeerEnd(),
        close(socket) {
          if (socket.data === undefined) return;
          socket.data.onClose();
          limit?.release();
          open--;
          onDrained?.();
        },
        // An error (ECONNRESET, EPIPE) is followed by `close`: that is what the owner hears.
        error() {},
      },
    });
  } catch (error) {
    return Promise.reject(error);
  }
  let closing: Promise<void> | null = null;
  return Promise.resolve({
    port: server.port,
    close() {
      closing ??= new Promise<void>((done) => {
        server.stop(false);
        onDrained = () => {
          if (open === 0) done();
        };
        onDrained();
      });
      return closing;
    },
  });
}

/**
 * {@link ByteSocket} over a Bun socket (module comment). `end()` sends FIN after the queued bytes,
 * keeps reading (and discarding) what the peer still sends so the kernel does not answer with a
 * reset that could destroy our last answer in the peer's buffer, and closes when the peer's FIN
 * arrives or after {@link tcpEndLingerMs}, as over `node:net`.
 */
export class BunByteSocket implements ByteSocket {
  readonly remoteAddress: string;
  readonly localHost?: string;
  readonly #socket: BunSocket;
  #handlers: ByteSocketHandlers | null = null;
  /** Bytes the kernel has not taken yet, oldest first; null when nothing waits. */
  #queue: Uint8Array[] | null = null;
  /** `onWritten` of the writes whose bytes wait in {@link #queue}: called once it has emptied. */
  #queueWritten: (() => void)[] | null = null;
  /** A write answered false: the owner hears `onDrain` once the queue is empty. */
  #owesDrain = false;
  #paused = false;
  #ending = false;
  /** FIN has been sent (after the queue emptied). */
  #shutDown = false;
  #closed = false;
  #linger: ReturnType<typeof setTimeout> | null = null;
  /** Reads that arrived before `attach` (the socket is paused from `open`, so rarely any). */
  #early: Uint8Array[] | null = null;

  constructor(socket: BunSocket) {
    this.#socket = socket;
    this.remoteAddress = `${socket.remoteAddress ?? "?"}:${socket.remotePort ?? "?"}`;
    const local = unmappedHost(socket.localAddress);
    if (local !== undefined) this.localHost = local;
    socket.setNoDelay(true);
    socket.pause();
  }

  attach(handlers: ByteSocketHandlers): void {
    if (this.#handlers) throw new Error("ByteSocket.attach called twice");
    this.#handlers = handlers;
    if (this.#closed) {
      queueMicrotask(() => handlers.onClose());
      return;
    }
    const early = this.#early;
    this.#early = null;
    if (early !== null) for (const chunk of early) if (!this.#ending) handlers.onData(chunk);
    if (!this.#paused && !this.#closed) this.#socket.resume();
  }

  /** A read (a buffer of its own, which the owner may keep). */
  onData(bytes: Uint8Array): void {
    if (this.#ending || this.#closed) return;
    const handlers = this.#handlers;
    if (handlers === null) (this.#early ??= []).push(bytes);
    else handlers.onData(bytes);
  }

  /** The kernel takes bytes again: send what waits, then end or tell the owner. */
  onDrain(): void {
    const queue = this.#queue;
    if (queue === null || this.#closed) return;
    this.#queue = null;
    if (!this.#send(queue)) return;
    const written = this.#queueWritten;
    this.#queueWritten = null;
    if (written !== null) for (const f of written) f();
    if (this.#ending) {
      this.#shutdown();
      return;
    }
    if (this.#owesDrain) {
      this.#owesDrain = false;
      this.#handlers?.onDrain();
    }
  }

  /** The peer sent FIN: end our side after what is queued (as `node:net` does without `allowHalfOpen`). */
  onPeerEnd(): void {
    if (this.#closed) return;
    if (!this.#ending) this.end();
    // Both sides are done once ours is shut down: nothing more can arrive or must be sent.
    else if (this.#shutDown) this.#socket.terminate();
  }

  /** The socket has closed (either side, cleanly or not). */
  onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#queue = null;
    this.#queueWritten = null;
    if (this.#linger !== null) clearTimeout(this.#linger);
    this.#handlers?.onClose();
  }

  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    if (this.#ending || this.#closed) return true;
    if (this.#queue !== null) {
      for (const chunk of chunks) if (chunk.length > 0) this.#queue.push(chunk);
      if (onWritten !== undefined) (this.#queueWritten ??= []).push(onWritten);
      this.#owesDrain = true;
      return false;
    }
    if (this.#send(gather(chunks))) {
      // Every byte went to the kernel in `send` (none waits in the queue): the chunks are free.
      onWritten?.();
      return true;
    }
    if (onWritten !== undefined) (this.#queueWritten ??= []).push(onWritten);
    this.#owesDrain = true;
    return false;
  }

  /** Sends `chunks` in order until the kernel takes less than offered; queues the rest. True if all went. */
  #send(chunks: readonly Uint8Array[]): boolean {
    const socket = this.#socket;
    for (let i = 0; i < chunks.length; i++) {
      const chunk = chunks[i];
      if (chunk.length === 0) continue;
      const sent = socket.write(chunk);
      // -1: the socket is closed; `close` follows and drops the rest anyway.
      if (sent < 0) return true;
      if (sent < chunk.length) {
        const rest = [chunk.subarray(sent)];
        for (let j = i + 1; j < chunks.length; j++) rest.push(chunks[j]);
        this.#queue = rest;
        return false;
      }
    }
    return true;
  }

  pause(): void {
    if (this.#ending || this.#paused) return;
    this.#paused = true;
    if (this.#handlers !== null && !this.#closed) this.#socket.pause();
  }

  resume(): void {
    if (this.#ending || !this.#paused) return;
    this.#paused = false;
    if (this.#handlers !== null && !this.#closed) this.#socket.resume();
  }

  end(): void {
    if (this.#ending || this.#closed) return;
    this.#ending = true;
    this.#early = null;
    const socket = this.#socket;
    // Read and discard what the peer still sends (class comment).
    socket.resume();
    this.#linger = setTimeout(() => socket.terminate(), tcpEndLingerMs);
    (this.#linger as { unref?: () => void }).unref?.();
    if (this.#queue === null) this.#shutdown();
  }

  #shutdown(): void {
    if (this.#shutDown || this.#closed) return;
    this.#shutDown = true;
    this.#socket.shutdown();
  }

  destroy(): void {
    if (this.#closed) return;
    this.#ending = true;
    this.#queue = null;
    this.#queueWritten = null;
    this.#early = null;
    this.#socket.terminate();
  }
}

/** `chunks` as one buffer if together they are small (one `send`), else as they are. */
function gather(chunks: readonly Uint8Array[]): readonly Uint8Array[] {
  if (chunks.length <= 1) return chunks;
  let total = 0;
  for (const chunk of chunks) total += chunk.length;
  if (total > gatherBytesMax) return chunks;
  const out = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return [out];
}
