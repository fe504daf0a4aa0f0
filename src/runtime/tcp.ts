/**
 * The TCP listener over `node:net`, or `node:tls` with `--tls-cert` (both run unchanged on Node,
 * Deno and Bun); plain TCP on Bun (and the compiled binary) goes through `Bun.listen` instead
 * (`bun-tcp.ts`, unless `ES_BROKER_BUN_LISTEN=0`). It only adapts the runtime's socket to the
 * transport's {@link ByteSocket}; every protocol rule lives in `src/transport/`. Over TLS a connection is handed over once its handshake has
 * succeeded (with mutual TLS, once the client's certificate has been checked); a failed handshake
 * is logged (`runtime/tls.ts`) and never reaches the transport.
 */
import * as net from "node:net";
import * as tls from "node:tls";
import { unmappedHost } from "../lib/address.ts";
import { tcpEndLingerMs } from "../lib/limits.ts";
import { copyRead, sharedReadBuffer } from "../lib/read-slab.ts";
import { HandleWrites, handleWritesAvailable } from "../client/handle-writes.ts";
import { listenBunTcp } from "./bun-tcp.ts";
import { runtimeName } from "./info.ts";
import type { Logger } from "../lib/logger.ts";
import type { RefusalLog } from "../lib/refusals.ts";
import type { ConnectionLimit } from "../lib/connection-limit.ts";
import {
  logTlsClientError,
  type PeerAddress,
  tlsServerOptions,
  type TlsServerMaterial,
} from "./tls.ts";
import type { ByteSocket, ByteSocketHandlers } from "../transport/tcp/socket.ts";

/** A listening TCP server. */
export interface TcpListener {
  /** The bound address as given (e.g. `"127.0.0.1"`). */
  readonly host: string;
  /** The bound port (the one the OS picked when 0 was asked for). */
  readonly port: number;
  /**
   * Stops accepting connections. Resolves once every accepted connection has closed: end them
   * through the transport (`TcpTransport.close()`) or this never resolves while clients stay.
   */
  close(): Promise<void>;
  /**
   * TLS listeners only: serves `material` to connections accepted from now on; open ones keep
   * theirs (SIGHUP). @throws Error on a plain listener.
   */
  setTlsMaterial(material: TlsServerMaterial): void;
}

/** Where and how to listen. */
export interface ListenTcpOptions {
  host: string;
  port: number;
  /** Serve TLS with this certificate (and client CA); plain TCP without it. */
  tls?: TlsServerMaterial;
  /** Receives `tls.*` events of failed handshakes, without `refusals`. */
  logger?: Logger;
  /** Counts failed handshakes and rate-limits their log lines (`lib/refusals.ts`). */
  refusals?: RefusalLog;
  /** Which listener this is, for those log lines: the TCP protocol's (default) or the Kafka one. */
  listener?: "tcp" | "kafka";
  /**
   * The broker-wide connection bound (`--max-connections`): a connection accepted beyond it is
   * closed at once, before anything is read from it or a TLS handshake starts.
   */
  connectionLimit?: ConnectionLimit;
}

/**
 * Listens on `host:port` and hands each accepted connection to `onConnection` as a
 * {@link ByteSocket} (Nagle off, data held until the owner calls `attach`).
 * @throws the listen error (e.g. `EADDRINUSE`, `EACCES`) as a rejection.
 */
export function listenTcp(
  options: ListenTcpOptions,
  onConnection: (socket: ByteSocket) => void,
): Promise<TcpListener> {
  const limit = options.connectionLimit;
  const name = options.listener ?? "tcp";
  if (options.tls === undefined && useBunListen())
    return listenBunTcp(options.host, options.port, onConnection, {
      limit,
      listener: name,
    }).then((listener) => ({
      host: options.host,
      port: listener.port,
      close: () => listener.close(),
      setTlsMaterial() {
        throw new Error("Cannot change TLS material: this TCP listener is not TLS");
      },
    }));
  return new Promise((resolve, reject) => {
    const material = options.tls;
    // Connections open, counted here: a shared-read connection leaves the server's own count when
    // its handle moves to a new socket (`NodeByteSocket.accepted`).
    let open = 0;
    let onDrained: (() => void) | null = null;
    const closed = (): void => {
      open--;
      onDrained?.();
    };
    const server: net.Server | tls.Server =
      material === undefined
        ? net.createServer({ noDelay: true, pauseOnConnect: sharedReads }, (socket) => {
            if (limit !== undefined && !limit.admit(name, remoteOf(socket))) {
              socket.destroy();
              return;
            }
            open++;
            onConnection(
              NodeByteSocket.accepted(socket, () => {
                limit?.release();
                closed();
              }),
            );
          })
        : tls.createServer(
            { ...tlsServerOptions(material), noDelay: true } as tls.TlsOptions,
            (socket) => onConnection(new NodeByteSocket(socket)),
          );
    if (server instanceof tls.Server) {
      // Each connection's address, read at accept: a TLS socket whose handshake failed reports
      // none of its own on Node (newuser17 #10: "remote":"?:?" on the TCP and Kafka ports).
      const peers = new WeakMap<net.Socket, PeerAddress>();
      server.on("connection", (socket: net.Socket) => {
        peers.set(socket, { remoteAddress: socket.remoteAddress, remotePort: socket.remotePort });
      });
      if (limit !== undefined) {
        // The raw connection, before its handshake: a refused one never costs a handshake.
        server.on("connection", (socket: net.Socket) => {
          if (!limit.admit(name, remoteOf(socket))) {
            socket.destroy();
            return;
          }
          socket.once("close", () => limit.release());
        });
      }
      server.on("tlsClientError", (error, socket) => {
        const raw = (socket as unknown as { _parent?: unknown })._parent;
        const peer =
          typeof raw === "object" && raw !== null ? peers.get(raw as net.Socket) : undefined;
        logTlsClientError(options, options.listener ?? "tcp", error, peer ?? socket);
        // With a listener here, node:tls leaves a timed-out handshake's socket open: close it.
        socket.destroy();
      });
    }
    const onListenError = (error: Error): void => reject(error);
    server.once("error", onListenError);
    server.listen({ host: options.host, port: options.port }, () => {
      server.off("error", onListenError);
      // Errors after listening (e.g. EMFILE on accept) must not crash the process; accepting goes on.
      server.on("error", () => {});
      const address = server.address() as net.AddressInfo;
      let closing: Promise<void> | null = null;
      resolve({
        host: options.host,
        port: address.port,
        close() {
          closing ??= new Promise<void>((done) => {
            let stopped = false;
            onDrained = () => {
              if (stopped && open === 0) done();
            };
            server.close(() => {
              stopped = true;
              onDrained!();
            });
          });
          return closing;
        },
        setTlsMaterial(next) {
          if (!(server instanceof tls.Server))
            throw new Error("Cannot change TLS material: this TCP listener is not TLS");
          server.setSecureContext(next.context);
        },
      });
    });
  });
}

/** `address:port` of a connection's peer, for log lines. */
function remoteOf(socket: net.Socket): string {
  return `${socket.remoteAddress ?? "?"}:${socket.remotePort ?? "?"}`;
}

/**
 * Plain TCP on Bun goes through `Bun.listen` (`bun-tcp.ts`): per small request it costs less CPU
 * than Bun's `node:net` (docs/benchmarks.md, "The socket floor"). `ES_BROKER_BUN_LISTEN=0` keeps
 * `node:net` (docs/runtimes.md, "Sockets on Bun"). TLS stays on `node:tls` on every runtime.
 */
function useBunListen(): boolean {
  return runtimeName() === "bun" && process.env.ES_BROKER_BUN_LISTEN !== "0";
}

/**
 * On Node, plain TCP connections read into one buffer shared by every connection (`onread`) and
 * copy what each read brings into a slab (`lib/read-slab.ts`), instead of Node allocating a buffer
 * of its own for every read: per small request that was one `ArrayBuffer` with a backing store for
 * the GC to track (measured with a bare server, 64 connections × one 300-byte frame each: ~15 %
 * less server CPU per request). Deno and Bun keep `data` events.
 */
const sharedReads = runtimeName() === "node";

/**
 * Moves the handle of `socket` (accepted with `pauseOnConnect`, on Node) to a new `net.Socket`
 * that reads into the shared buffer and hands each read, copied out (`lib/read-slab.ts`), to
 * `onRead`, reading at once (the comment of `sharedReads`). `socket` is destroyed (closing
 * nothing: it no longer has the handle). `allowHalfOpen` as `net.Socket`'s.
 * @returns the new socket, or null (and `socket` untouched) if the handle is not where Node keeps it.
 */
export function adoptSharedReads(
  socket: net.Socket,
  onRead: (chunk: Uint8Array) => void,
  allowHalfOpen = false,
): net.Socket | null {
  const handle = (socket as unknown as { _handle?: unknown })._handle;
  if (handle === undefined || handle === null) return null;
  (socket as unknown as { _handle: unknown })._handle = null;
  socket.destroy();
  return new net.Socket({
    handle,
    allowHalfOpen,
    readable: true,
    writable: true,
    onread: {
      buffer: sharedReadBuffer,
      callback: (bytes: number, buffer: Uint8Array): boolean => {
        onRead(copyRead(buffer.subarray(0, bytes)));
        return true;
      },
    },
  } as net.SocketConstructorOpts);
}

/**
 * {@link ByteSocket} over a `net.Socket`. `end()` sends FIN after the written bytes, keeps
 * draining (and discarding) what the peer still sends so the kernel does not answer with a reset
 * that could destroy our last response in the peer's buffer, and destroys the socket when the
 * peer closes or after {@link tcpEndLingerMs}.
 */
export class NodeByteSocket implements ByteSocket {
  readonly remoteAddress: string;
  readonly localHost?: string;
  readonly serverName?: string;
  readonly #socket: net.Socket;
  #handlers: ByteSocketHandlers | null = null;
  #ending = false;
  #closed = false;

  /**
   * Answers are written on the handle itself (an adopted connection on Node, where
   * {@link handleWritesAvailable}), not through `net.Socket`'s `Writable`
   * (`client/handle-writes.ts`); null elsewhere. `end()` goes through the stream, whose shutdown
   * libuv queues behind those writes.
   */
  readonly #direct: HandleWrites | null;

  /** Chunks read (shared reads) before {@link attach}. */
  #early: Uint8Array[] | null = null;
  /** The socket delivers its bytes through `onread` (see {@link accepted}), not `data` events. */
  readonly #sharedReads: boolean;

  /**
   * A connection a plain `net.Server` accepted (with `pauseOnConnect` on Node): on Node its handle
   * moves to a new `net.Socket` that reads into the shared buffer (the comment of `sharedReads`);
   * elsewhere, or if the handle is not where Node keeps it, the socket is used as it is.
   * @param onClose called once the connection has closed.
   */
  static accepted(socket: net.Socket, onClose: () => void): NodeByteSocket {
    let owner: NodeByteSocket | null = null;
    const adopted = sharedReads ? adoptSharedReads(socket, (chunk) => owner!.#onRead(chunk)) : null;
    if (adopted === null) {
      socket.once("close", onClose);
      return new NodeByteSocket(socket, false, sharedReads);
    }
    adopted.once("close", onClose);
    owner = new NodeByteSocket(adopted, true);
    return owner;
  }

  /** The socket was accepted paused (`pauseOnConnect`): {@link attach} resumes it. */
  readonly #pausedOnConnect: boolean;

  /**
   * @param socket an accepted or connected socket with no `data` listener yet.
   * @param sharedReads true if it reads through `onread` into {@link #onRead} (see {@link accepted}).
   * @param pausedOnConnect true if it was accepted with `pauseOnConnect` (and is not `sharedReads`).
   */
  constructor(socket: net.Socket, sharedReads = false, pausedOnConnect = false) {
    this.#socket = socket;
    this.#sharedReads = sharedReads;
    this.#direct =
      sharedReads && handleWritesAvailable()
        ? new HandleWrites(socket, () => {
            if (!this.#closed) this.#handlers?.onDrain();
          })
        : null;
    this.#pausedOnConnect = pausedOnConnect;
    this.remoteAddress = `${socket.remoteAddress ?? "?"}:${socket.remotePort ?? "?"}`;
    const local = unmappedHost(socket.localAddress);
    if (local !== undefined) this.localHost = local;
    const servername = (socket as tls.TLSSocket).servername;
    if (typeof servername === "string" && servername !== "") this.serverName = servername;
    socket.setNoDelay(true);
    // Errors (ECONNRESET, EPIPE) are followed by 'close'; that is what the owner hears.
    socket.on("error", () => {});
    socket.once("close", () => {
      this.#closed = true;
      this.#handlers?.onClose();
    });
  }

  attach(handlers: ByteSocketHandlers): void {
    if (this.#handlers) throw new Error("ByteSocket.attach called twice");
    this.#handlers = handlers;
    if (this.#closed) {
      queueMicrotask(() => handlers.onClose());
      return;
    }
    if (this.#sharedReads) {
      const early = this.#early;
      this.#early = null;
      if (early !== null) for (const chunk of early) if (!this.#ending) handlers.onData(chunk);
    } else {
      this.#socket.on("data", (chunk: Buffer) => {
        if (!this.#ending) handlers.onData(chunk);
      });
      if (this.#pausedOnConnect) this.#socket.resume();
    }
    this.#socket.on("drain", () => handlers.onDrain());
  }

  /** A read of a shared-read connection (already copied out of the shared buffer). */
  #onRead(chunk: Uint8Array): void {
    if (this.#ending || this.#closed) return;
    const handlers = this.#handlers;
    if (handlers === null) (this.#early ??= []).push(chunk);
    else handlers.onData(chunk);
  }

  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    const socket = this.#socket;
    if (this.#ending || socket.destroyed) return true;
    if (this.#direct !== null) return this.#direct.write(chunks, onWritten);
    // Node calls a write's callback once libuv has handed all of it to the kernel (or failed).
    const done =
      onWritten === undefined
        ? undefined
        : (error?: Error | null) => {
            if (error === undefined || error === null) onWritten();
          };
    if (chunks.length === 1) return socket.write(chunks[0], done);
    socket.cork();
    let ok = true;
    const last = chunks.length - 1;
    for (let i = 0; i <= last; i++) ok = socket.write(chunks[i], i === last ? done : undefined);
    socket.uncork();
    return ok && !socket.writableNeedDrain;
  }

  pause(): void {
    if (!this.#ending) this.#socket.pause();
  }

  resume(): void {
    if (!this.#ending) this.#socket.resume();
  }

  end(): void {
    if (this.#ending || this.#socket.destroyed) return;
    this.#ending = true;
    const socket = this.#socket;
    socket.end();
    socket.resume();
    const linger = setTimeout(() => socket.destroy(), tcpEndLingerMs);
    linger.unref?.();
    socket.once("close", () => clearTimeout(linger));
  }

  destroy(): void {
    this.#ending = true;
    this.#socket.destroy();
  }
}
