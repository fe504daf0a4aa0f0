/**
 * The socket side of HTTP/1.1 produce on the raw socket (`transport/http/raw-connection.ts`;
 * docs/http-api.md, "How requests are served"): a plain `node:net` listener in front of the
 * `node:http` server, which then does not listen itself. Each accepted connection is read by a
 * {@link RawHttpConnection}; when it hands the connection over, the bytes read so far are put back
 * (`socket.unshift`) and the socket is given to the `node:http` server (`emit("connection")`),
 * which serves it from then on exactly as if it had accepted it.
 *
 * Node only ({@link rawHttpSupported}). The raw connections read into the shared buffer
 * (`lib/read-slab.ts`, as the TCP listener's do); once handed over, `node:http` consumes the
 * handle itself. Where the handle cannot be adopted the socket's `data` events are used instead.
 *
 * An idle raw connection (nothing owed, read or written) is destroyed 65–66 s after its last
 * activity (the `node:http` server's `keepAliveTimeout`, `httpKeepAliveMs`, checked once a
 * second), as `node:http` destroys an idle keep-alive connection; never sooner, since clients
 * reuse a connection until shortly before the `Keep-Alive: timeout=65` the answers announce.
 */
import type { ConnectionLimit } from "../lib/connection-limit.ts";
import { refuseHttp } from "./http-refuse.ts";
import { rememberPeer } from "./http-connection-errors.ts";
import type { Server } from "node:http";
import { STATUS_CODES } from "node:http";
import * as net from "node:net";
import {
  type RawHttpOptions,
  RawHttpConnection,
  type RawHttpSocket,
} from "../transport/http/raw-connection.ts";
import type { RawAnswer, RawRequest } from "../transport/http/raw-stream.ts";
import { runtimeName } from "./info.ts";
import { adoptSharedReads } from "./tcp.ts";

/** A raw listener. */
export interface RawHttpListener {
  readonly port: number;
  /** Connections open now (raw, or handed over and not yet closed). */
  openConnections(): number;
  /**
   * Stops accepting; raw connections end once their owed answers are out (what they still send
   * is not read). Resolves once the listener is closed and every connection it accepted that is
   * still raw has closed; handed-over ones are the `node:http` server's to close.
   */
  close(): Promise<void>;
}

/** Settings of {@link listenRawHttp}. */
export interface ListenRawHttpOptions {
  host: string;
  port: number;
  /** The server handed-over connections go to (not listening). */
  server: Server;
  /** The fast route, with the caller's conditions (null: hand over). */
  take(request: RawRequest): Promise<RawAnswer> | null;
  /** Called on every connection accepted (counting, as the `node:http` path does). */
  onConnection?: (socket: net.Socket) => void;
  /**
   * The broker-wide connection bound (`--max-connections`): a connection accepted beyond it is
   * closed at once, before anything is read (and `onConnection` is not called for it).
   */
  connectionLimit?: ConnectionLimit;
}

/** Raw requests started and not yet answered per connection, past which the rest is handed over. */
const rawInFlightMax = 128;
const idleCheckMs = 1000;

let dateSecond = -1;
let dateText = "";

/** The `Date` header's value now (an HTTP-date, as `node:http` writes it), made once a second. */
export function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

/**
 * Where the raw path runs: Node only. Bun's `node:http` takes a handed-over socket and serves it
 * (pipelining, faults, the hostile suites pass), but applies its head and request timeouts only to
 * connections it accepted itself: a slowloris head handed over waited unanswered for as long as
 * the client trickled (4 s in the check, with a 500 ms head timeout that `node:http` alone
 * enforced after 0.6 s). Bun and the binary keep `node:http` for every request.
 */
export function rawHttpSupported(): boolean {
  return runtimeName() === "node";
}

/**
 * Listens on `host:port` and serves as the module comment says.
 * @throws the listen error (`EADDRINUSE`…) as a rejection.
 */
export function listenRawHttp(options: ListenRawHttpOptions): Promise<RawHttpListener> {
  const { server } = options;
  const keepAliveMs = server.keepAliveTimeout;
  const settings: RawHttpOptions = {
    take: options.take,
    date: httpDate,
    reason: (status) => STATUS_CODES[status] ?? "unknown",
    keepAliveSeconds: Math.floor(keepAliveMs / 1000),
    maxInFlight: rawInFlightMax,
  };
  const raw = new Map<RawHttpConnection, net.Socket>();
  let open = 0;
  let onEmpty: (() => void) | null = null;

  const limit = options.connectionLimit;
  const accept = (accepted: net.Socket): void => {
    // Read once, at accept: the socket adopted below may have closed by the time a parse error
    // names its peer (attack17 F7).
    const peer = `${accepted.remoteAddress ?? "?"}:${accepted.remotePort ?? "?"}`;
    if (limit !== undefined && !limit.admit("http", peer)) {
      refuseHttp(accepted);
      return;
    }
    open++;
    let connection: RawHttpConnection | null = null;
    let handedOver = false;
    const onData = (chunk: Uint8Array): void => {
      if (handedOver) {
        // Only if `node:http` did not take the handle over (it does on Node 20): pass it on.
        socket.push(chunk);
        return;
      }
      connection!.onData(chunk);
    };
    // Half-open, as `node:http`'s sockets are: a client that half-closes after its requests
    // still gets their answers.
    const adopted = adoptSharedReads(accepted, onData, true);
    const socket = adopted ?? accepted;
    rememberPeer(socket, peer);
    options.onConnection?.(socket);
    socket.setNoDelay(true);
    socket.on("error", () => {});
    const rawSocket: RawHttpSocket = {
      write: (text) => socket.destroyed || socket.write(text),
      pause: () => socket.pause(),
      resume: () => socket.resume(),
      handOver: (rest) => {
        handedOver = true;
        raw.delete(connection!);
        if (adopted === null) socket.off("data", onData);
        socket.pause();
        if (rest.length > 0) socket.unshift(Buffer.from(rest.buffer, rest.byteOffset, rest.length));
        server.emit("connection", socket);
        socket.resume();
        checkEmpty();
      },
      // As `node:http` closes a connection at shutdown: at once, once what was written is out.
      end: () => socket.end(() => socket.destroy()),
      destroy: () => socket.destroy(),
    };
    connection = new RawHttpConnection(rawSocket, settings);
    raw.set(connection, socket);
    const mine = connection;
    socket.on("drain", () => {
      if (!handedOver) mine.onDrain();
    });
    socket.once("end", () => {
      if (!handedOver) mine.onEnd();
    });
    socket.once("close", () => {
      open--;
      limit?.release();
      mine.onClose();
      raw.delete(mine);
      checkEmpty();
    });
    if (adopted === null) {
      socket.on("data", onData);
      socket.resume(); // accepted paused, but its handle could not be adopted
    }
  };
  const checkEmpty = (): void => {
    if (raw.size === 0) onEmpty?.();
  };

  const listener = net.createServer(
    { noDelay: true, pauseOnConnect: true, allowHalfOpen: true },
    accept,
  );
  const idleTicks = Math.max(1, Math.ceil(keepAliveMs / idleCheckMs));
  const idleCheck = setInterval(() => {
    for (const [connection, socket] of raw) if (connection.idleTick(idleTicks)) socket.destroy();
  }, idleCheckMs);
  idleCheck.unref?.();

  return new Promise((resolve, reject) => {
    const onListenError = (error: Error): void => {
      clearInterval(idleCheck);
      reject(error);
    };
    listener.once("error", onListenError);
    listener.listen({ host: options.host, port: options.port }, () => {
      listener.off("error", onListenError);
      // Errors after listening (EMFILE on accept) must not crash the process; accepting goes on.
      listener.on("error", () => {});
      const address = listener.address() as net.AddressInfo;
      let closing: Promise<void> | null = null;
      resolve({
        port: address.port,
        openConnections: () => open,
        close() {
          closing ??= new Promise<void>((done) => {
            clearInterval(idleCheck);
            let stopped = false;
            const maybeDone = () => {
              if (stopped && raw.size === 0) done();
            };
            onEmpty = maybeDone;
            listener.close(() => {
              stopped = true;
              maybeDone();
            });
            for (const connection of [...raw.keys()]) connection.shutdown();
          });
          return closing;
        },
      });
    });
  });
}
