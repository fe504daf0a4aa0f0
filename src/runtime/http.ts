/**
 * Runs the HTTP app on the current runtime's native server: `@hono/node-server` on Node,
 * `Deno.serve` on Deno, `Bun.serve` on Bun (chosen with `getRuntimeKey()` from `hono/adapter`).
 * It holds no logic beyond starting and stopping.
 *
 * `close()` shuts down gracefully:
 *
 * 1. it aborts the shutdown signal passed to every request as `c.env.shutdownSignal` (see
 *    `HttpBindings` in `src/transport/http/app.ts`): long-polls return their (possibly empty)
 *    result at once and Server-Sent Event streams end cleanly;
 * 2. it stops accepting connections and lets in-flight requests finish (a produce already handed to
 *    the broker is answered, also one whose body is still arriving); a request that arrives after
 *    this point on a connection that is still open (keep-alive, or on Deno see below) is answered
 *    503 `unavailable` (retriable) with `Connection: close`, never handed to the app;
 * 3. once no request is in flight it closes every connection left: idle keep-alive ones, ones that
 *    never sent a request, and ones still sending a body that was refused with 413 (which would
 *    otherwise hold shutdown open for as long as the client keeps sending) — except on Deno;
 * 4. it resolves when the server is closed.
 *
 * Per runtime (each checked on Node 20, Deno 2.9, Bun 1.4, by test/e2e/runtime.test.ts):
 *
 * | runtime | stop accepting                            | "no request in flight" from  | close the rest          |
 * |---------|-------------------------------------------|------------------------------|-------------------------|
 * | Node    | `server.close()`                          | `response` "close" events    | `closeAllConnections()` |
 * | Bun     | `server.stop(false)`                      | `server.pendingRequests` = 0 | `server.stop(true)`     |
 * | Deno    | `server.shutdown()`, once no handler runs | (Deno waits by itself)       | (Deno closes by itself) |
 *
 * Deno caveats: `shutdown()` fails the body of a request still being received (reading it throws
 * BadResource), so close() first waits for every running handler to settle, answering requests
 * that arrive meanwhile with the 503 above, and only then calls `shutdown()`: the listener stays
 * open for that long (usually the few ms of an fsync; a client stalled mid-body holds it until a
 * second signal). Deno has no way to close one connection, and its forced close (aborting the serve
 * signal) drops responses still being written — `info.completed` resolves when a body is handed
 * over, not when it is sent, and aborting after `shutdown()` throws an uncaught BadResource. So on
 * Deno close() uses only the graceful `shutdown()`, which delivers every response but also waits
 * for a client that is still sending a body it was refused (413). A caller that needs a bound on
 * shutdown time should race close() against its own timer.
 *
 * The request-body cap is enforced by the app itself (`createHttpApp({ maxRequestBytes })`) the
 * same way on every runtime: from `Content-Length` before reading, or by counting a streamed body
 * and stopping at the cap. Runtime caps are therefore turned off (Bun's `maxRequestBodySize`, whose
 * own 413 has an empty body) so the answer is always the JSON `request_too_large` error.
 *
 * On Node the app reads bodies straight from the `IncomingMessage` (`HttpBindings.readRawBody`,
 * {@link readIncomingBody}) instead of through the WHATWG `Request` stream that @hono/node-server
 * would build; on Deno and Bun it reads `Request.body`.
 */
import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import { getRuntimeKey } from "hono/adapter";
import { BrokerError, Errors } from "../broker/errors.ts";
import type { HttpBindings } from "../transport/http/app.ts";
import { errorBody } from "../transport/http/errors.ts";
import { fetchWaitMsMax } from "../lib/limits.ts";

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
  /**
   * The app's body cap in bytes, for reference only: the app enforces it (module comment), and
   * no runtime cap is set below it.
   */
  maxRequestBytes?: number;
}

/** A running server. */
export interface HttpServer {
  /** The port actually bound (the chosen one when `port` was 0). */
  readonly port: number;
  /**
   * Ends long-polls and event streams, stops accepting, lets in-flight requests finish, closes
   * every connection and resolves once the server is closed (module comment). Calling it again
   * returns the same promise.
   */
  close(): Promise<void>;
}

/** Seconds a Bun connection may stay silent: above the longest long-poll and the SSE heartbeat. */
const bunIdleTimeoutSeconds = Math.ceil(fetchWaitMsMax / 1000) + 30;
/** How often Bun's `pendingRequests` is checked while closing, in ms (Bun has no event for it). */
const bunDrainPollMs = 10;

/**
 * Starts serving `app` on `host:port`.
 * @returns once the socket is listening.
 * @throws whatever the runtime throws when it cannot listen (EADDRINUSE / AddrInUse…), and Error
 *   on a runtime other than Node, Deno or Bun.
 */
export async function serveHttp(app: FetchApp, options: ServeHttpOptions): Promise<HttpServer> {
  const shutdown = new AbortController();
  const bindings: HttpBindings = { shutdownSignal: shutdown.signal };
  // Requests that arrive once close() has begun are refused (module comment, step 2).
  const handler = (request: Request): Response | Promise<Response> =>
    shutdown.signal.aborted ? shuttingDownResponse() : app.fetch(request, bindings);
  const runtime = getRuntimeKey();
  let started: Started;
  if (runtime === "node") {
    // @hono/node-server passes the raw IncomingMessage as env.incoming: the app reads bodies from
    // it directly (HttpBindings.readRawBody), skipping the web-stream layer.
    const nodeHandler: NodeHandler = (request, env) => {
      if (shutdown.signal.aborted) return shuttingDownResponse();
      const incoming = env.incoming;
      return app.fetch(request, {
        shutdownSignal: shutdown.signal,
        readRawBody: (maxBytes) => readIncomingBody(incoming, maxBytes),
      });
    };
    started = await serveNode(nodeHandler, options);
  } else if (runtime === "deno") started = serveDeno(handler, options);
  else if (runtime === "bun") started = serveBun(handler, options);
  else
    throw new Error(
      `Cannot serve HTTP: runtime ${JSON.stringify(runtime)} is not supported (Node, Deno or Bun)`,
    );
  let closing: Promise<void> | null = null;
  return {
    port: started.port,
    close() {
      closing ??= (async () => {
        shutdown.abort();
        await started.stop();
      })();
      return closing;
    },
  };
}

/** 503 `unavailable` for a request that arrives while the server is closing; the client may retry elsewhere or later. */
function shuttingDownResponse(): Response {
  const error = new BrokerError(
    Errors.unavailable,
    "Cannot serve the request: the broker is shutting down",
  );
  return new Response(JSON.stringify(errorBody(error)), {
    status: error.kind.http,
    headers: { "content-type": "application/json", connection: "close" },
  });
}

type Handler = (request: Request) => Response | Promise<Response>;
interface Started {
  port: number;
  /** Steps 2–4 of the module comment. */
  stop: () => Promise<void>;
}

/** What @hono/node-server passes as the second argument of `fetch`. */
type NodeHandler = (
  request: Request,
  env: { incoming: NodeIncoming },
) => Response | Promise<Response>;
/** The raw request of @hono/node-server (always an IncomingMessage here: the server is HTTP/1.1). */
type NodeIncoming = IncomingMessage | Http2ServerRequest;

/**
 * Reads the body of `incoming` into one buffer (`HttpBindings.readRawBody`): resolves to the
 * bytes, or null once more than `maxBytes` have arrived — then it stops listening and the rest
 * flows past unstored (the server drains or closes the connection after the 413). Rejects if the
 * connection fails or closes mid-body.
 *
 * Node hands the body over in fresh chunks (one copy per socket read). With a `Content-Length`,
 * once half of the body has arrived the chunks so far are copied into one buffer of exactly that
 * length and each later chunk straight into it, so chunks die at once instead of living until the
 * body is complete and then being joined (with 64 clients sending ~290 KB bodies, the dead chunks
 * that lived long enough to be promoted waited for a full GC and swelled the peak RSS). Half, so
 * that nothing is allocated from a length the client merely claims: the buffer is at most twice
 * the bytes actually received (and the app refuses a `Content-Length` over the cap before it asks
 * for the body).
 */
function readIncomingBody(incoming: NodeIncoming, maxBytes: number): Promise<Uint8Array | null> {
  if (incoming.readableEnded) return Promise.resolve(new Uint8Array(0));
  const declaredBytes = declaredBodyBytes(incoming, maxBytes);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let sizeBytes = 0;
    /** The body's buffer once half of a declared body has arrived (see above), else null. */
    let body: Uint8Array | null = null;
    const cleanup = () => {
      incoming.off("data", onData);
      incoming.off("end", onEnd);
      incoming.off("error", onError);
      incoming.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      const at = sizeBytes;
      sizeBytes += chunk.length;
      if (sizeBytes > maxBytes || (declaredBytes >= 0 && sizeBytes > declaredBytes)) {
        // Past the cap (the second test cannot happen: Node's parser ends the body at its Content-Length).
        cleanup();
        chunks.length = 0;
        body = null;
        resolve(null);
        return;
      }
      if (body !== null) {
        body.set(chunk, at);
        return;
      }
      chunks.push(chunk);
      if (declaredBytes >= 0 && sizeBytes < declaredBytes && sizeBytes * 2 >= declaredBytes) {
        body = new Uint8Array(declaredBytes);
        let pos = 0;
        for (const c of chunks) {
          body.set(c, pos);
          pos += c.length;
        }
        chunks.length = 0;
      }
    };
    const onEnd = () => {
      cleanup();
      if (body !== null) resolve(sizeBytes === body.length ? body : body.subarray(0, sizeBytes));
      else resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, sizeBytes));
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    const onClose = () => {
      // "close" before "end": the client went away mid-body.
      cleanup();
      reject(
        incoming.errored ?? new Error("the client closed the connection before the body ended"),
      );
    };
    incoming.on("data", onData);
    incoming.on("end", onEnd);
    incoming.on("error", onError);
    incoming.on("close", onClose);
    // "data" starts the flow only on the next tick; until then the parser buffers the body and,
    // past the stream's high-water mark (16 KiB), pauses the socket, to resume it a tick later
    // (two system calls per request). A read(0) now makes the parser hand chunks straight over.
    incoming.read(0);
  });
}

/**
 * The body length `incoming` declares with `Content-Length` (without `Transfer-Encoding`), or −1
 * when there is none or it is not a plain decimal within `maxBytes` (the body is then read as it
 * comes and counted against the cap).
 */
function declaredBodyBytes(incoming: NodeIncoming, maxBytes: number): number {
  const length = incoming.headers["content-length"];
  if (
    typeof length !== "string" ||
    incoming.headers["transfer-encoding"] !== undefined ||
    !/^[0-9]{1,16}$/.test(length)
  )
    return -1;
  const bytes = Number(length);
  return bytes <= maxBytes ? bytes : -1;
}

async function serveNode(handler: NodeHandler, options: ServeHttpOptions): Promise<Started> {
  const { createAdaptorServer } = await import("@hono/node-server");
  const { Server } = await import("node:http");
  const server = createAdaptorServer({ fetch: handler, hostname: options.host });
  if (!(server instanceof Server))
    throw new Error("Cannot serve HTTP: @hono/node-server did not return a node:http server");
  let closing = false;
  let requestsInFlight = 0;
  // closeIdleConnections() alone misses connections that never sent a request, and ones still
  // sending a refused body; once nothing is in flight, all that is left can go.
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
  if (address === null || typeof address === "string")
    throw new Error("Cannot serve HTTP: the server has no TCP address");
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
    options: { hostname: string; port: number; onListen: (addr: unknown) => void },
    handler: (request: Request) => Response | Promise<Response>,
  ): { addr: { port: number }; finished: Promise<void>; shutdown(): Promise<void> };
}

function serveDeno(handler: Handler, options: ServeHttpOptions): Started {
  const deno = (globalThis as unknown as { Deno: DenoGlobal }).Deno;
  // Handlers still running; shutdown() waits until none is (Deno caveats in the module comment).
  let handlersRunning = 0;
  let onIdle: (() => void) | null = null;
  const counted = async (request: Request): Promise<Response> => {
    handlersRunning++;
    try {
      return await handler(request);
    } finally {
      handlersRunning--;
      if (handlersRunning === 0) onIdle?.();
    }
  };
  const server = deno.serve(
    { hostname: options.host, port: options.port, onListen: () => {} },
    counted,
  );
  return {
    port: server.addr.port,
    stop: async () => {
      if (handlersRunning > 0) await new Promise<void>((resolve) => (onIdle = resolve));
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
  }): {
    port: number;
    pendingRequests: number;
    stop(closeActiveConnections?: boolean): Promise<void> | void;
  };
}

function serveBun(handler: Handler, options: ServeHttpOptions): Started {
  const bun = (globalThis as unknown as { Bun: BunGlobal }).Bun;
  const server = bun.serve({
    hostname: options.host,
    port: options.port,
    fetch: handler,
    // Off: the app answers an oversized body itself, with the JSON error (module comment).
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    // Bun's default (10 s) would cut long-polls (up to 60 s) and SSE streams between heartbeats.
    idleTimeout: bunIdleTimeoutSeconds,
  });
  return {
    port: server.port,
    stop: async () => {
      const graceful = Promise.resolve(server.stop(false));
      // pendingRequests counts a response until its body (an SSE stream too) has been sent.
      while (server.pendingRequests > 0)
        await new Promise((resolve) => setTimeout(resolve, bunDrainPollMs));
      await server.stop(true);
      await graceful;
    },
  };
}
