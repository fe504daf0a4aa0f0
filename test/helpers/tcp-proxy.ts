/**
 * A TCP proxy on loopback that can cut the link: while `down`, every connection is closed as soon
 * as it opens and the open ones are cut — an uplink outage between an edge and its upstream.
 * The target can change (an upstream restarted on a new port). `muteWatches()` silences the
 * connections that carry an etcd watch (`POST /v3/watch`): etcd's answers on them are dropped,
 * the connections stay open, every other connection (a status probe) still works: a deaf watch
 * stream (attack15 F6).
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";

/** See the module comment. */
export class TcpProxy {
  readonly port: number;
  #server: Server;
  #target: { host: string; port: number };
  #down = false;
  #sockets = new Set<Socket>();
  /** Open connections that carried a watch request: the client's socket and the upstream one. */
  #watches = new Set<{ client: Socket; upstream: Socket }>();
  /** Connections accepted (and forwarded) so far. */
  connections = 0;

  private constructor(server: Server, port: number, target: { host: string; port: number }) {
    this.#server = server;
    this.port = port;
    this.#target = target;
  }

  /** Listens on `port` (default: any free one) at 127.0.0.1. */
  static async start(target: { host: string; port: number }, port = 0): Promise<TcpProxy> {
    let proxy: TcpProxy | null = null;
    const server = createServer((client) => proxy!.#accept(client));
    await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
    proxy = new TcpProxy(server, (server.address() as { port: number }).port, target);
    return proxy;
  }

  #accept(client: Socket): void {
    if (this.#down) {
      client.destroy();
      return;
    }
    this.connections++;
    const upstream = createConnection(this.#target);
    for (const s of [client, upstream]) {
      this.#sockets.add(s);
      s.on("close", () => this.#sockets.delete(s));
      s.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
    const pair = { client, upstream };
    client.on("data", (chunk: Buffer) => {
      if (chunk.includes("POST /v3/watch ")) this.#watches.add(pair);
    });
    client.on("close", () => this.#watches.delete(pair));
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  }

  /** Cuts the link (true) or restores it (false). */
  down(on: boolean): void {
    this.#down = on;
    if (on) for (const s of this.#sockets) s.destroy();
  }

  /**
   * Drops from now on everything etcd sends on the open connections that carried a watch
   * request, leaving them open. Returns how many it muted.
   */
  muteWatches(): number {
    for (const { client, upstream } of this.#watches) {
      upstream.unpipe(client);
      upstream.on("data", () => {});
    }
    return this.#watches.size;
  }

  /** Forwards new connections to another target. */
  setTarget(target: { host: string; port: number }): void {
    this.#target = target;
  }

  async close(): Promise<void> {
    this.down(true);
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
