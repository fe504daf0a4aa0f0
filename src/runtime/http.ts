/**
 * Runs the HTTP app on the current runtime's native server: `@hono/node-server` on Node,
 * `Deno.serve` on Deno, `Bun.serve` on Bun (chosen with `getRuntimeKey()` from `hono/adapter`).
 * It holds no logic of its own beyond starting, and stopping gracefully:
 *
 * 1. `close()` aborts the shutdown signal passed to every request as `c.env.shutdownSignal`
 *    (see `HttpBindings` in `src/transport/http/app.ts`), so long-polls return their (possibly
 *    empty) result at once and Server-Sent Event streams end cleanly;
 * 2. stops accepting connections, lets in-flight requests finish (a produce already handed to the
 *    broker is answered), and closes idle keep-alive connections;
 * 3. resolves once every connection is closed.
 *
 * The request-body cap is enforced by the app itself (`createHttpApp({ maxRequestBytes })`), the
 * same way on every runtime. `maxRequestBytes` here only keeps a runtime's own cap (Bun's
 * `maxRequestBodySize`) from answering before the app can, with a body that is not the JSON error.
 */
import { getRuntimeKey } from "hono/adapter";
import type { HttpBindings } from "../transport/http/app.ts";
import { fetchWaitMsMax, requestBytesDefault } from "../lib/limits.ts";

/** Anything with Hono's `fetch(request, env)`; in practice the app of `createHttpApp`. */
export interface FetchApp {
  fetch(request: Request, env: HttpBindings): Response | Promise<Response>;
}

/** Where to listen. */
export interface ServeHttpOptions {
  /** Interface address, e.g. "127.0.0.1" or "0.0.0.0". */
  host: string;
  /** TCP port; 0 picks a free one (the real one is in the result). */
  port: number;
  /** The app's body cap in bytes (default `requestBytesDefault`); see the module comment. */
  maxRequestBytes?: number;
}

/** A running server. */
export interface HttpServer {
  /** The port actually bound (the chosen one when `port` was 0). */
  readonly port: number;
  /**
   * Stops accepting, ends long-polls and event streams, lets in-flight requests finish and
   * resolves once all connections are closed. Calling it again returns the same promise.
   */
  close(): Promise<void>;
}

/** Seconds a Bun connection may stay silent: above the longest long-poll and the SSE heartbeat. */
const bunIdleTimeoutSeconds = Math.ceil(fetchWaitMsMax / 1000) + 30;

/**
 * Starts serving `app` on `host:port`.
 * @returns once the socket is listening.
 * @throws whatever the runtime throws when it cannot listen (e.g. EADDRINUSE / AddrInUse), and
 *   Error on a runtime without a supported server.
 */
export async function serveHttp(app: FetchApp, options: ServeHttpOptions): Promise<HttpServer> {
  const shutdown = new AbortController();
  const bindings: HttpBindings = { shutdownSignal: shutdown.signal };
  const handler = (request: Request): Response | Promise<Response> => app.fetch(request, bindings);
  const runtime = getRuntimeKey();
  let stop: () => Promise<void>;
  let port: number;
  if (runtime === "node") {
    ({ port, stop } = await serveNode(handler, options));
  } else if (runtime === "deno") {
    ({ port, stop } = serveDeno(handler, options));
  } else if (runtime === "bun") {
    ({ port, stop } = serveBun(handler, options));
  } else {
    throw new Error(`Cannot serve HTTP: runtime ${JSON.stringify(runtime)} is not supported (Node, Deno or Bun)`);
  }
  let closing: Promise<void> | null = null;
  return {
    port,
    close() {
      closing ??= (async () => {
        shutdown.abort();
        await stop();
      })();
      return closing;
    },
  };
}

type Handler = (request: Request) => Response | Promise<Response>;
interface Started {
  port: number;
  stop: () => Promise<void>;
}

async function serveNode(handler: Handler, options: ServeHttpOptions): Promise<Started> {
  const { createAdaptorServer } = await import("@hono/node-server");
  const { Server } = await import("node:http");
  const server = createAdaptorServer({ fetch: handler, hostname: options.host });
  if (!(server instanceof Server)) throw new Error("Cannot serve HTTP: @hono/node-server did not return a node:http server");
  // While closing: once no request is in flight, close every connection left. Idle keep-alive
  // connections, and connections that were opened but never sent a request (which
  // closeIdleConnections() does not count as idle), would otherwise hold close() open until the
  // client lets go of them.
  let closing = false;
  let requestsInFlight = 0;
  const closeLeftovers = () => {
    if (closing && requestsInFlight === 0) server.closeAllConnections();
  };
  server.on("request", (_request, response) => {
    requestsInFlight++;
    response.once("close", () => {
      requestsInFlight--;
      closeLeftovers();
    });
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error) => reject(error);
    server.once("error", onError);
    server.listen(options.port, options.host, () => {
      server.off("error", onError);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("Cannot serve HTTP: the server has no TCP address");
  return {
    port: address.port,
    stop: () =>
      new Promise<void>((resolve, reject) => {
        closing = true;
        server.close((error) => (error === undefined ? resolve() : reject(error)));
        server.closeIdleConnections();
        closeLeftovers();
      }),
  };
}

/** The part of `Deno.serve` used here (typed loosely so tsc passes without Deno's types). */
interface DenoGlobal {
  serve(
    options: { hostname: string; port: number; onListen?: (addr: unknown) => void },
    handler: Handler,
  ): { addr: { port: number }; shutdown(): Promise<void>; finished: Promise<void> };
}

function serveDeno(handler: Handler, options: ServeHttpOptions): Started {
  const deno = (globalThis as unknown as { Deno: DenoGlobal }).Deno;
  const server = deno.serve({ hostname: options.host, port: options.port, onListen: () => {} }, handler);
  return {
    port: server.addr.port,
    stop: async () => {
      await server.shutdown();
      await server.finished;
    },
  };
}

/** The part of `Bun.serve` used here (typed loosely so tsc passes without Bun's types). */
interface BunGlobal {
  serve(options: {
    hostname: string;
    port: number;
    fetch: Handler;
    maxRequestBodySize: number;
    idleTimeout: number;
  }): { port: number; stop(closeActiveConnections?: boolean): Promise<void> | void };
}

function serveBun(handler: Handler, options: ServeHttpOptions): Started {
  const bun = (globalThis as unknown as { Bun: BunGlobal }).Bun;
  const maxRequestBytes = options.maxRequestBytes ?? requestBytesDefault;
  const server = bun.serve({
    hostname: options.host,
    port: options.port,
    fetch: handler,
    // Bun answers a body over this by itself; keep it above the app's cap (which decides from
    // Content-Length before reading, or stops reading at the cap) so the app always answers first.
    maxRequestBodySize: maxRequestBytes * 2,
    // Bun's default (10 s) would cut long-polls (up to 60 s) and SSE streams between heartbeats.
    idleTimeout: bunIdleTimeoutSeconds,
  });
  return {
    port: server.port,
    stop: async () => {
      await server.stop(false);
    },
  };
}
