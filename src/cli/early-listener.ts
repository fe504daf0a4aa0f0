/**
 * A TCP listener bound before the broker can serve it (cluster mode, docs/cluster.md "Running
 * a cluster"): `serve` binds every port before it registers in etcd, so a broker that cannot
 * listen exits before it could lead a partition. Connections accepted meanwhile wait, unread,
 * until {@link EarlyListener.serve} hands them to their transport.
 */
import { listenTcp, type ListenTcpOptions, type TcpListener } from "../runtime/tcp.ts";
import type { ByteSocket } from "../transport/tcp/socket.ts";

/** A bound listener whose connections wait for a handler. */
export interface EarlyListener {
  readonly listener: TcpListener;
  /** Hands the waiting connections, and every later one, to `handler`. */
  serve(handler: (socket: ByteSocket) => void): void;
  /** Start-up failed: closes the waiting connections and the listener. */
  close(): Promise<void>;
}

/**
 * Binds `options` now (see the module comment).
 * @throws the listen error (e.g. `EADDRINUSE`) as a rejection, as {@link listenTcp}.
 */
export async function listenEarly(options: ListenTcpOptions): Promise<EarlyListener> {
  let handler: ((socket: ByteSocket) => void) | null = null;
  let waiting: ByteSocket[] | null = [];
  const listener = await listenTcp(options, (socket) => {
    if (handler !== null) handler(socket);
    else if (waiting !== null) waiting.push(socket);
    else socket.destroy();
  });
  return {
    listener,
    serve(h) {
      handler = h;
      const held = waiting ?? [];
      waiting = null;
      for (const socket of held) h(socket);
    },
    async close() {
      const held = waiting ?? [];
      waiting = null;
      for (const socket of held) socket.destroy();
      await listener.close();
    },
  };
}
