/**
 * Runs the HTTP app on the current runtime's server: `node:http` through `@hono/node-server`'s
 * request listener on Node and on Bun (Bun's own `node:http`), `Deno.serve` on Deno (chosen with
 * `getRuntimeKey()` from `hono/adapter`). It holds no logic beyond starting and stopping, and
 * answering what the runtime's parser refuses in the documented error shape where the runtime
 * lets it (`http-connection-errors.ts`).
 *
 * Why not `Bun.serve` on Bun: it closes the connection, writing nothing, when a pipelined request
 * arrives while an earlier answer is still pending (uWebSockets refuses "async pipelining"), so a
 * produce already appended lost its answer; and its parser's refusals are bodiless. Bun's
 * `node:http` serves pipelined requests in order and has `clientError`. It costs request rate on
 * trivial routes (docs/runtimes.md), not on produce, whose time is the fsync.
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
 * | runtime    | stop accepting                            | "no request in flight" from | close the rest          |
 * |------------|-------------------------------------------|-----------------------------|-------------------------|
 * | Node, Bun  | `server.close()`                          | `response` "close" events   | `closeAllConnections()` |
 * | Deno       | `server.shutdown()`, once no handler runs | (Deno waits by itself)      | (Deno closes by itself) |
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
 * and stopping at the cap, so the answer is always the JSON `request_too_large` error.
 *
 * On Node and Bun the app reads bodies straight from the `IncomingMessage`
 * (`HttpBindings.readRawBody`, {@link readIncomingBody}) instead of through the WHATWG `Request`
 * stream that @hono/node-server would build; on Deno it reads `Request.body`. On the `node:http`
 * path the app can also count a header's field lines (`HttpBindings.headerLines`, from
 * `rawHeaders`), which `Request.headers` joins with ", "; `Deno.serve` has no such list. There
 * too, the app's `fastRoute` (produce) is offered each request first, from the parsed request,
 * and its answer written with `writeHead`/`end` (no `Request`/`Response` pair); and a streaming
 * route may write straight to the `ServerResponse` (`HttpBindings.openStream`, the live tail).
 *
 * On Node without TLS, produce does not reach `node:http`: a `node:net` listener reads each
 * connection with the broker's own HTTP/1.1 parser, answers what the fast route takes, and hands
 * the connection to the (non-listening) `node:http` server at the first request it does not serve
 * (`http-raw.ts`; docs/http-api.md, "How requests are served").
 *
 * With TLS (`options.tls`: `--tls-cert`, `--tls-key`, optionally `--tls-client-ca`) every runtime,
 * Deno included, serves through the `node:http` path above behind `node:tls`: `Deno.serve` can
 * neither check client certificates against a CA nor swap the certificate while running, and
 * `setSecureContext` does both on all three. On Node and Deno the server is a `node:https` server;
 * on Bun, whose `https.Server` lacks `setSecureContext`, a `tls.Server` accepts the connections
 * and hands each to the `node:http` server, which does not listen. `setTlsMaterial` serves a new
 * certificate to connections accepted from then on; open ones keep theirs (SIGHUP). A client that
 * fails the handshake — plain text on the TLS port, no or a wrong client certificate — is closed
 * and logged (`tls.plaintext_client` / `tls.handshake_failed`, `runtime/tls.ts`). On Node and Bun
 * a `node:net` server accepts the HTTPS connections and hands each to the TLS server once its
 * first bytes show it is not plain HTTP (`peekBeforeTls`); a plain-HTTP request is answered 400
 * naming https:// and closed (docs/security.md "TLS"). On Deno the `node:https` server accepts
 * itself: a connection handed to it was closed after its first answer. The other way
 * round, a TLS handshake on the plain port: the `node:http` parser refuses it (answered like any
 * parse error, `http-connection-errors.ts`) and it is also logged as `http.tls_on_plain_port` on
 * Node; `Deno.serve` closes such a connection at once (the client sees a handshake error) without a
 * hook to log it.
 */
import type { ConnectionLimit } from "../lib/connection-limit.ts";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import type { Logger } from "../lib/logger.ts";
import {
  logPlaintextClient,
  logTlsClientError,
  peekBeforeTls,
  type PeerAddress,
  tlsServerOptions,
  type TlsServerMaterial,
} from "./tls.ts";
import { getRuntimeKey } from "hono/adapter";
import { BrokerError, Errors } from "../broker/errors.ts";
import type { HttpBindings } from "../transport/http/app.ts";
import type { FastRoute, RawAnswer, RawRequest, RawStream } from "../transport/http/raw-stream.ts";
import { errorBody } from "../transport/http/errors.ts";
import { foreignMessageCharsMax, httpKeepAliveMs, tcpEndLingerMs } from "../lib/limits.ts";
import { clip } from "../lib/quote.ts";
import type { RefusalLog } from "../lib/refusals.ts";
import { answerConnectionErrorsInOrder, onBodyCut } from "./http-connection-errors.ts";
import { listenRawHttp, type RawHttpListener, rawHttpSupported } from "./http-raw.ts";
import { type AppendTurn, takeAppendTurn } from "./http-append-order.ts";
import type { InFlightTotal } from "../transport/connection.ts";

/** Anything with Hono's `fetch(request, env)`; in practice the app of `createHttpApp`. */
export interface FetchApp {
  fetch(request: Request, env: HttpBindings): Response | Promise<Response>;
  /**
   * Routes served in front of `fetch` on `node:http` (Node, Bun), from the parsed request, without
   * a `Request`/`Response` pair (`transport/http/raw-stream.ts`); null hands the request to `fetch`.
   */
  fastRoute?: FastRoute;
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
  /** Counts and logs what the runtime's parser refuses (`http.parse_error`; Node and Bun). */
  refusals?: RefusalLog;
  /** Serve HTTPS with this certificate (and client CA); plain HTTP without it. */
  tls?: TlsServerMaterial;
  /** Receives `tls.*` and `http.tls_on_plain_port` events (connections refused before any request). */
  logger?: Logger;
  /**
   * `node:http` only: how long a request's line and headers may take to arrive, in ms (default
   * Node's `headersTimeout`, 60 000); answered 408 `request_timeout`. For tests.
   */
  headersTimeoutMs?: number;
  /**
   * The broker-wide connection bound (`--max-connections`): a connection accepted beyond it is
   * closed at once, before anything is read. `node:http` only (Node, Bun, Deno with TLS):
   * `Deno.serve` tells its handlers nothing about connections.
   */
  connectionLimit?: ConnectionLimit;
  /**
   * The broker-wide in-flight bytes and their cap (`--max-in-flight-bytes`, shared with the TCP
   * and Kafka listeners): fetch answers are counted in it until written, and while it is at its
   * cap a connection that holds anything starts no more requests (docs/http-api.md "How requests
   * are served"). Absent: HTTP answers are not counted.
   */
  inFlightTotal?: InFlightTotal;
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
  /**
   * HTTPS only: serves `material` to connections accepted from now on; open ones keep theirs
   * (SIGHUP). @throws Error on a plain HTTP server.
   */
  setTlsMaterial(material: TlsServerMaterial): void;
  /**
   * Connections open now (`esb_open_connections`); null on `Deno.serve`, which does not tell
   * its handlers about connections.
   */
  openConnections(): number | null;
}

/**
 * Starts serving `app` on `host:port`.
 * @returns once the socket is listening.
 * @throws whatever the runtime throws when it cannot listen (EADDRINUSE / AddrInUse…), and Error
 *   on a runtime other than Node, Deno or Bun.
 */
export async function serveHttp(app: FetchApp, options: ServeHttpOptions): Promise<HttpServer> {
  const shutdown = new AbortController();
  // Requests that arrive once close() has begun are refused (module comment, step 2).
  const handler: Handler = (request, remoteAddress, holdAnswerBytes) =>
    shutdown.signal.aborted
      ? shuttingDownResponse()
      : app.fetch(request, { shutdownSignal: shutdown.signal, remoteAddress, holdAnswerBytes });
  const runtime = getRuntimeKey();
  const total = options.inFlightTotal;
  // Node's "finish" comes once the answer's bytes are the kernel's (HttpBindings.afterAnswerWritten);
  // Bun's `node:http` makes no such promise about a body's buffer.
  const onNodeRuntime = runtime === "node";
  let started: Started;
  if (
    runtime === "node" ||
    runtime === "bun" ||
    (runtime === "deno" && options.tls !== undefined)
  ) {
    // @hono/node-server passes the raw IncomingMessage as env.incoming: the app reads bodies from
    // it directly (HttpBindings.readRawBody), skipping the web-stream layer.
    const nodeHandler: NodeHandler = (request, env) => {
      if (shutdown.signal.aborted) return shuttingDownResponse();
      const incoming = env.incoming;
      const hostFault = hostRefusal(incoming);
      if (hostFault !== null) {
        refuseRestOfConnection(incoming);
        return errorResponse(hostFault);
      }
      return app.fetch(request, {
        shutdownSignal: shutdown.signal,
        readRawBody: (maxBytes) => readIncomingBody(incoming, maxBytes),
        headerLines: (name) => countHeaderLines(incoming.rawHeaders, name),
        openStream: (headers) => openRawStream(env.outgoing, headers),
        afterAnswerWritten: onNodeRuntime ? (done) => env.outgoing.once("finish", done) : undefined,
        appendInOrder: appendInOrderOf(incoming),
        holdAnswerBytes:
          total === undefined || incoming.socket === null || incoming.socket === undefined
            ? undefined
            : (bytes, built) =>
                holdAnswerBytes(incoming.socket as Socket, env.outgoing, total, bytes, built),
        remoteAddress: () =>
          `${incoming.socket?.remoteAddress ?? "?"}:${incoming.socket?.remotePort ?? "?"}`,
      });
    };
    const fastRoute = app.fastRoute;
    // The fast route sees only what the handler above would pass to the app (not shutting down,
    // a Host given); anything else goes the usual way and is answered there.
    const fast =
      fastRoute === undefined
        ? undefined
        : (incoming: IncomingMessage, outgoing: ServerResponse): boolean => {
            if (shutdown.signal.aborted || hostRefusal(incoming) !== null) return false;
            const answer = fastRoute({
              method: incoming.method ?? "",
              url: incoming.url ?? "",
              header: (name) => {
                const value = incoming.headers[name];
                return Array.isArray(value) ? value.join(", ") : value;
              },
              headerLines: (name) => countHeaderLines(incoming.rawHeaders, name),
              readBody: (maxBytes) => readIncomingBody(incoming, maxBytes),
              appendInOrder: appendInOrderOf(incoming),
            });
            if (answer === null) return false;
            answer.then(
              (a) => writeRawAnswer(outgoing, a),
              // A fast route answers its errors itself; this is a bug: drop the connection.
              () => outgoing.destroy(),
            );
            return true;
          };
    // The same fast route, for requests read on the raw socket (plain HTTP; `http-raw.ts`): the
    // raw parser takes only HTTP/1.1 requests with a Host, so only the shutdown check remains.
    const take =
      fastRoute === undefined || options.tls !== undefined || !rawHttpSupported()
        ? undefined
        : (request: RawRequest) => (shutdown.signal.aborted ? null : fastRoute(request));
    started = await serveNode(nodeHandler, options, runtime === "bun", fast, take);
  } else if (runtime === "deno") started = serveDeno(handler, options);
  else
    throw new Error(
      `Cannot serve HTTP: runtime ${JSON.stringify(runtime)} is not supported (Node, Deno or Bun)`,
    );
  let closing: Promise<void> | null = null;
  return {
    port: started.port,
    setTlsMaterial(material) {
      if (started.setTlsMaterial === undefined)
        throw new Error("Cannot change TLS material: this HTTP server is not HTTPS");
      started.setTlsMaterial(material);
    },
    openConnections: () => started.openConnections?.() ?? null,
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
  return errorResponse(
    new BrokerError(Errors.unavailable, "Cannot serve the request: the broker is shutting down"),
  );
}

/** The JSON answer for `error`, closing the connection. */
function errorResponse(error: BrokerError): Response {
  return new Response(JSON.stringify(errorBody(error)), {
    status: error.kind.http,
    headers: { "content-type": "application/json", connection: "close" },
  });
}

/** The append turn of each request on `node:http` that took one (`http-append-order.ts`). */
const appendTurns = new WeakMap<object, AppendTurn>();

/**
 * `HttpBindings.appendInOrder` for `incoming`: its append waits for the earlier requests' on the
 * connection (docs/http-api.md, "Malformed requests and pipelining"). Undefined for a request
 * without a turn (GET, HEAD), which calls the broker directly.
 */
function appendInOrderOf(
  incoming: NodeIncoming,
): (<T>(call: () => Promise<T>) => Promise<T>) | undefined {
  const turn = appendTurns.get(incoming);
  return turn === undefined ? undefined : (call) => turn.run(call);
}

/**
 * Whether a request asks to upgrade the connection to another protocol: an `Upgrade` field and
 * an `upgrade` option in `Connection` (RFC 9110 §7.8), what `node:http`'s parser marks as an
 * upgrade. es-broker upgrades nothing: on a `node:http` server (Node, Bun, the binary, Deno with
 * TLS) such a request is served as if `Upgrade` were absent, but its answer says
 * `Connection: close`, the connection closes after it, and the requests after it are not acted on
 * (docs/http-api.md "Malformed requests and pipelining"). Why: Node's parser reads nothing more of
 * the bytes that arrived with such a request, so a request pipelined behind it was never answered
 * on a connection left open. `Deno.serve` is left alone: it serves what follows such a request
 * (and would even after a `Connection: close` answer), or refuses one with a body itself.
 * @param upgrade the `Upgrade` field's value (undefined or null when absent).
 * @param connection the `Connection` field's value(s).
 * @returns true when both are present and `connection` lists `upgrade` (any case).
 */
export function asksToUpgrade(
  upgrade: string | string[] | null | undefined,
  connection: string | string[] | null | undefined,
): boolean {
  if (upgrade === undefined || upgrade === null || connection === undefined || connection === null)
    return false;
  const options = Array.isArray(connection) ? connection.join(",") : connection;
  for (const option of options.split(","))
    if (option.trim().toLowerCase() === "upgrade") return true;
  return false;
}

/**
 * Connections (their sockets) on which a request was refused before the app with an answer that
 * closes the connection ({@link hostRefusal}, {@link unparsableRequestResponse}), or served with
 * one because it asked to upgrade ({@link asksToUpgrade}).
 * `node:http` hands over pipelined requests as soon as they are parsed, but writes nothing after
 * an answer with `Connection: close`: a produce pipelined behind the refused request would be
 * appended and never answered (docs/http-api.md, "Malformed requests and pipelining": nothing
 * after the fault is acted on). So requests that come after it on the same connection are not
 * handed to the app ({@link notServedAfterRefusal}).
 */
const refusedConnections = new WeakSet<object>();

function refuseRestOfConnection(incoming: NodeIncoming): void {
  if (incoming.socket !== null && incoming.socket !== undefined)
    refusedConnections.add(incoming.socket);
}

/**
 * Answers a request pipelined behind a refused one without handing it to the app (see
 * {@link refusedConnections}); `node:http` drops this answer with the closing connection.
 */
function notServedAfterRefusal(outgoing: ServerResponse): void {
  const body = JSON.stringify(
    errorBody(
      new BrokerError(
        Errors.unavailable,
        "Cannot serve the request: an earlier request on this connection was answered with Connection: close",
      ),
    ),
  );
  outgoing.writeHead(Errors.unavailable.http, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    connection: "close",
  });
  outgoing.end(body);
}

/**
 * The 400 `invalid_request` (`details.parameter` `Host`) RFC 9112 §3.2 requires for an HTTP/1.1
 * request without `Host` and for any request with more than one `Host` line (docs/http-api.md
 * "Malformed requests and pipelining"); null for a request with one. The raw socket's parser
 * hands both to `node:http`, so this is the one place they are refused.
 */
function hostRefusal(incoming: NodeIncoming): BrokerError | null {
  if (incoming.headers.host === undefined) {
    if (incoming.httpVersionMajor !== 1 || incoming.httpVersionMinor < 1) return null;
    return new BrokerError(
      Errors.invalidRequest,
      "Cannot serve the request: an HTTP/1.1 request needs a Host header",
      { parameter: "Host" },
    );
  }
  // `node:http` keeps the first Host line and drops the others.
  const raw = incoming.rawHeaders;
  let lines = 0;
  for (let i = 0; i < raw.length; i += 2)
    if (raw[i].length === 4 && raw[i].toLowerCase() === "host") lines++;
  if (lines < 2) return null;
  return new BrokerError(
    Errors.invalidRequest,
    `Cannot serve the request: it has ${lines} Host header lines, and a request may have only one (RFC 9112 §3.2)`,
    { parameter: "Host" },
  );
}

/**
 * The answer to a request @hono/node-server cannot turn into a `Request` (a request target that
 * is not a path, such as `*` or an absolute URL with a bad host): 400 in the documented shape
 * instead of its bodiless 400.
 */
function unparsableRequestResponse(error: unknown): Response {
  const reason = clip(
    error instanceof Error ? error.message : String(error),
    foreignMessageCharsMax,
  );
  return errorResponse(
    new BrokerError(Errors.invalidRequest, `Cannot parse the request: ${reason}`),
  );
}

type Handler = (
  request: Request,
  remoteAddress: () => string,
  holdAnswerBytes?: (bytes: number, built: boolean) => Promise<void> | null,
) => Response | Promise<Response>;
interface Started {
  port: number;
  /** Steps 2–4 of the module comment. */
  stop: () => Promise<void>;
  /** HTTPS servers only. */
  setTlsMaterial?: (material: TlsServerMaterial) => void;
  /** Connections open now, where the server can count them. */
  openConnections?: () => number;
}

/** Writes a fast route's answer, with its `content-length`. */
function writeRawAnswer(outgoing: ServerResponse, answer: RawAnswer): void {
  outgoing.writeHead(answer.status, {
    ...answer.headers,
    "content-length": Buffer.byteLength(answer.body),
  });
  outgoing.end(answer.body);
}

/** What @hono/node-server passes as the second argument of `fetch`. */
type NodeHandler = (
  request: Request,
  env: { incoming: NodeIncoming; outgoing: ServerResponse },
) => Response | Promise<Response>;

/**
 * `HttpBindings.openStream` on `node:http`: writes the head now and hands out a sink writing to
 * the `ServerResponse` (chunked), whose `closed` aborts when the connection closes.
 */
function openRawStream(outgoing: ServerResponse, headers: Record<string, string>): RawStream {
  outgoing.writeHead(200, headers);
  outgoing.flushHeaders();
  const closed = new AbortController();
  outgoing.once("close", () => closed.abort());
  return {
    write: (text) => outgoing.write(text),
    drained: () =>
      outgoing.writableNeedDrain && !closed.signal.aborted
        ? new Promise<void>((resolve) => {
            const done = () => {
              outgoing.off("drain", done);
              closed.signal.removeEventListener("abort", done);
              resolve();
            };
            outgoing.on("drain", done);
            closed.signal.addEventListener("abort", done);
          })
        : Promise.resolve(),
    closed: closed.signal,
    end: () => outgoing.end(),
    answered: () => {
      // @hono/node-server's marker for "already answered" (its RESPONSE_ALREADY_SENT). Reading
      // `bodyUsed` turns its light Response into a full one, the kind it checks the marker on.
      const response = new Response(null, { headers: { "x-hono-already-sent": "true" } });
      void response.bodyUsed;
      return response;
    },
  };
}
/** The raw request of @hono/node-server (always an IncomingMessage here: the server is HTTP/1.1). */
type NodeIncoming = IncomingMessage | Http2ServerRequest;

/** How many of `rawHeaders` (name, value, name, value, …) are named `name`, in any case. */
function countHeaderLines(rawHeaders: readonly string[], name: string): number {
  const wanted = name.toLowerCase();
  let count = 0;
  for (let i = 0; i < rawHeaders.length; i += 2)
    if (rawHeaders[i].toLowerCase() === wanted) count++;
  return count;
}

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
    let stopWaitingForCut = () => {};
    const cleanup = () => {
      stopWaitingForCut();
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
    // The parser failed inside this body (a bad chunk size…): it will never end.
    stopWaitingForCut = onBodyCut(incoming as IncomingMessage, (error) => {
      cleanup();
      reject(error);
    });
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

/**
 * Requests of one connection served at once by `node:http`; those pipelined behind them wait
 * until one is answered, and the connection stops reading meanwhile (docs/http-api.md
 * "Malformed requests and pipelining"). `node:http` hands every request of a read to the handler
 * at once, and a fetch builds its whole answer before the answers ahead of it are written: one
 * connection pipelining 1 000 fetches of 1 MiB held 1.7 GB (attack17 F5). Four keeps pipelined
 * produces sharing their fsyncs and a long-poll pipelined before a produce served beside it.
 */
export const httpServedAtOnceMax = 4;

/**
 * A connection's requests being served and those waiting their turn (see {@link admit}), and the
 * answer bytes it holds in the broker-wide in-flight bytes ({@link holdAnswerBytes}).
 */
class ServedGate {
  serving = 0;
  readonly waiting: (() => void)[] = [];
  paused = false;
  /** Answer bytes of this connection counted in `total` and not yet written. */
  heldBytes = 0;
  /** Its requests waiting in {@link holdAnswerBytes} (woken when it holds nothing more too). */
  readonly holdWaiters = new Set<{ resumeStarting(): void }>();
  closed = false;

  constructor(
    readonly socket: Socket,
    readonly total: InFlightTotal | undefined,
  ) {}

  /**
   * Whether the next request may start: fewer than {@link httpServedAtOnceMax} are served, and
   * the broker-wide in-flight bytes are under their cap, or this connection holds nothing
   * (docs/http-api.md "How requests are served").
   */
  mayStart(): boolean {
    if (this.serving >= httpServedAtOnceMax) return false;
    const total = this.total;
    return total === undefined || this.serving === 0 || total.bytes < total.max;
  }

  /** Starts the requests waiting while they may; else pauses reading (and waits for the cap). */
  pump(): void {
    while (this.waiting.length > 0 && this.mayStart()) {
      this.serving++;
      this.waiting.shift()!();
    }
    if (this.closed) return;
    if (this.waiting.length > 0) {
      // Over the cap (not over the four): wait for the sum to drop.
      if (this.serving < httpServedAtOnceMax) this.total?.wait(this);
      if (!this.paused) {
        this.paused = true;
        this.socket.pause();
      }
    } else if (this.paused) {
      this.paused = false;
      if (!this.socket.destroyed) this.socket.resume();
    }
  }

  /** `InFlightTotal`'s wake-up once the sum dropped below its cap. */
  resumeStarting(): void {
    this.pump();
  }
}

const servedGates = new WeakMap<Socket, ServedGate>();

function gateOf(socket: Socket, total: InFlightTotal | undefined): ServedGate {
  let gate = servedGates.get(socket);
  if (gate === undefined) {
    const created = new ServedGate(socket, total);
    servedGates.set(socket, created);
    socket.once("close", () => {
      created.closed = true;
      created.waiting.length = 0;
      total?.forget(created);
    });
    gate = created;
  }
  return gate;
}

/**
 * Counts the request `outgoing` answers as served on `socket` until its answer closes, if it may
 * start now ({@link ServedGate.mayStart}): returns true, and the caller serves it now. Otherwise
 * keeps `serve` for when it may (in request order), pauses the socket, and returns false;
 * requests still waiting when the connection closes are never served.
 */
function admit(
  socket: Socket,
  outgoing: ServerResponse,
  serve: () => void,
  total: InFlightTotal | undefined,
): boolean {
  const g = gateOf(socket, total);
  let served = g.waiting.length === 0 && g.mayStart();
  const turn = (): void => {
    served = true;
    serve();
  };
  outgoing.once("close", () => {
    if (!served) {
      // Closed before its turn (the connection went away): never served.
      const at = g.waiting.indexOf(turn);
      if (at >= 0) g.waiting.splice(at, 1);
      return;
    }
    g.serving--;
    g.pump();
  });
  if (served) {
    g.serving++;
    return true;
  }
  g.waiting.push(turn);
  g.pump();
  return false;
}

/** Per answer on `node:http`: the bytes it holds in the in-flight bytes ({@link holdAnswerBytes}). */
interface AnswerHold {
  bytes: number;
  /** Its bytes are a built answer (counted as queued), not a reservation. */
  built: boolean;
  released: boolean;
}

const answerHolds = new WeakMap<ServerResponse, AnswerHold>();

/**
 * `HttpBindings.holdAnswerBytes` on `node:http`: counts `bytes` for the answer `outgoing` writes
 * (replacing what it counted before) in `total` and in its connection's gate, until the answer is
 * written (its "finish": on Node the kernel has the bytes) or the connection closes; then wakes
 * what waits for the sum to drop. Before the answer is `built` (a fetch's `max_bytes`, before it
 * reads): while the sum is at its cap and the connection holds anything else, it waits for the
 * sum to drop before counting, as a TCP connection does (docs/protocol.md "Pipelining and
 * ordering"). A `built` answer is counted as queued too, and never waits.
 * @returns null when the request may go on now, else a promise that resolves when it may.
 */
function holdAnswerBytes(
  socket: Socket,
  outgoing: ServerResponse,
  total: InFlightTotal,
  bytes: number,
  built: boolean,
): Promise<void> | null {
  const g = gateOf(socket, total);
  let hold = answerHolds.get(outgoing);
  if (hold === undefined) {
    const created: AnswerHold = { bytes: 0, built: false, released: false };
    answerHolds.set(outgoing, created);
    const release = (): void => {
      if (created.released) return;
      created.released = true;
      count(g, total, created, -created.bytes);
      // A connection holding nothing may go on over the cap: its own waiters first.
      if (g.heldBytes === 0) for (const waiter of [...g.holdWaiters]) waiter.resumeStarting();
      total.released();
    };
    outgoing.once("finish", release);
    outgoing.once("close", release);
    hold = created;
  }
  const h = hold;
  if (h.released) return null;
  const wanted = Math.max(0, bytes);
  if (!built) {
    const mayCount = (): boolean =>
      h.released || total.bytes < total.max || g.heldBytes === h.bytes || g.closed;
    if (!mayCount())
      return new Promise<void>((resolve) => {
        const done = (): void => {
          total.forget(waiter);
          g.holdWaiters.delete(waiter);
          resolve();
        };
        const waiter = {
          resumeStarting: (): void => {
            if (!g.holdWaiters.has(waiter)) return;
            if (!mayCount()) return total.wait(waiter);
            if (!h.released) count(g, total, h, wanted - h.bytes);
            done();
          },
        };
        g.holdWaiters.add(waiter);
        total.wait(waiter);
        // The connection went away while waiting: nothing more to count, let the request end.
        outgoing.once("close", done);
      });
  } else if (!h.built) {
    h.built = true;
    total.queuedAnswerBytes += h.bytes;
  }
  const before = total.bytes;
  count(g, total, h, wanted - h.bytes);
  if (total.bytes < before) total.released();
  return null;
}

/** Adds `delta` bytes to `hold`, its connection's gate and `total` (queued too once built). */
function count(g: ServedGate, total: InFlightTotal, hold: AnswerHold, delta: number): void {
  hold.bytes += delta;
  g.heldBytes += delta;
  total.bytes += delta;
  if (hold.built) total.queuedAnswerBytes += delta;
}

/**
 * Serves `server`'s connections half-open for writes (docs/http-api.md "How requests are
 * served"): a client that half-closes once it has sent a produce (or any request that is not a
 * GET or HEAD) still gets that answer, and the connection ends after it, as on the raw path.
 * Without it `node:http` ends the socket at the client's FIN and drops the answer of a request
 * whose body it had read, while its append goes on (attack11 F1). A FIN while only reads are in
 * flight still ends the connection at once, as before: a long-poll or an event stream whose
 * client went away must not wait out its `wait_ms`.
 */
function answerWritesAfterHalfClose(server: Server): void {
  // Node's own switch (`socketOnEnd`); Bun's node:http reads it too.
  (server as Server & { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
  const writesOwed = new WeakMap<Socket, number>();
  server.on("request", (incoming: IncomingMessage, outgoing: ServerResponse) => {
    const socket = incoming.socket;
    if (!writesOwed.has(socket)) {
      writesOwed.set(socket, 0);
      socket.once("end", () => {
        if (writesOwed.get(socket) === 0) socket.destroy();
      });
    }
    if (incoming.method === "GET" || incoming.method === "HEAD") return;
    writesOwed.set(socket, (writesOwed.get(socket) ?? 0) + 1);
    outgoing.once("close", () => writesOwed.set(socket, (writesOwed.get(socket) ?? 1) - 1));
  });
}

/**
 * Answers `Expect: 100-continue` with `100 Continue` only once the request's body is first read
 * (docs/http-api.md, "How requests are served"). `node:http` by default sends it before any
 * handler runs, so a request the head already refuses (401 without a key, 413 from its
 * `Content-Length`, 403 for a refused `Host`) invited the client to upload a body that was then
 * thrown away (attack12 F2). A request answered before its body is read gets its final status
 * alone, with `Connection: close` (RFC 9110, 10.1.1: the body the client may still send is not
 * read as the next request). Node only: it patches the `IncomingMessage`'s `_read`, where the
 * first consumer of the body (a `data` listener, `read()`, or Node's own drain) arrives.
 */
function continueOnFirstBodyRead(server: Server): void {
  server.on("checkContinue", (incoming: IncomingMessage, outgoing: ServerResponse) => {
    const stream = incoming as IncomingMessage & { _read(size: number): void };
    const answer = outgoing as ServerResponse & { shouldKeepAlive: boolean };
    const read = stream._read;
    const keepAlive = answer.shouldKeepAlive;
    answer.shouldKeepAlive = false;
    stream._read = (size: number) => {
      stream._read = read;
      if (!answer.headersSent && !answer.writableEnded) {
        answer.shouldKeepAlive = keepAlive;
        answer.writeContinue();
      }
      read.call(stream, size);
    };
    server.emit("request", incoming, outgoing);
  });
}

/**
 * Makes `node:http` read an HTTPS connection through its stream (`data` events) rather than
 * straight from the TLS handle, so a long pipeline is answered in full (docs/http-api.md
 * "Malformed requests and pipelining"). Straight from the handle, once ~16 KiB of answers wait
 * to be written Node pauses its parser and stops reading, but the TLS records already decrypted
 * from the same read still reach the paused parser, which fails with `HPE_PAUSED`: a valid
 * request was answered 400 and the rest of the pipeline dropped (attack12 F4; a plain
 * `https.createServer` on Node 20 does the same). Through the stream, a paused socket holds what
 * was decrypted until the answers drain. A `data` listener is what makes `node:http` let go of
 * the handle (its `unconsume`); this one only watches.
 */
function readThroughStream(socket: TLSSocket): void {
  socket.on("data", () => {});
}

/**
 * The `node:http` server (Node, Bun; Deno with TLS). With `options.tls` it serves HTTPS: a
 * `node:https` server, or on Bun (`tlsInFront`) a `node:tls` server handing its connections to the
 * `node:http` server (module comment).
 */
async function serveNode(
  handler: NodeHandler,
  options: ServeHttpOptions,
  tlsInFront: boolean,
  fast?: (incoming: IncomingMessage, outgoing: ServerResponse) => boolean,
  take?: (request: RawRequest) => Promise<RawAnswer> | null,
): Promise<Started> {
  const { getRequestListener } = await import("@hono/node-server");
  const { createServer } = await import("node:http");
  /** The request being handed to @hono/node-server, which calls `errorHandler` synchronously. */
  let dispatching: NodeIncoming | null = null;
  const honoListener = getRequestListener(handler as Parameters<typeof getRequestListener>[0], {
    hostname: options.host,
    // Its lighter global Request/Response would replace Deno's: a `Deno.serve` server in the same
    // process (--metrics-port next to an HTTPS port) then refuses every Response as foreign.
    overrideGlobalObjects: getRuntimeKey() !== "deno",
    errorHandler: (error) => {
      if (dispatching !== null) refuseRestOfConnection(dispatching);
      return unparsableRequestResponse(error);
    },
  });
  const listener = (incoming: IncomingMessage, outgoing: ServerResponse): void => {
    // In request order, before any handler runs: the request's place for its append.
    const turn = incoming.socket === null ? null : takeAppendTurn(incoming.socket, incoming.method);
    if (turn !== null) {
      appendTurns.set(incoming, turn);
      outgoing.once("close", () => turn.release());
    }
    const socket = incoming.socket;
    if (
      socket === null ||
      admit(socket, outgoing, () => serve(incoming, outgoing), options.inFlightTotal)
    )
      serve(incoming, outgoing);
  };
  const serve = (incoming: IncomingMessage, outgoing: ServerResponse): void => {
    if (refusedConnections.has(incoming.socket)) return notServedAfterRefusal(outgoing);
    if (asksToUpgrade(incoming.headers.upgrade, incoming.headers.connection)) {
      // Served, and the last request the connection serves (asksToUpgrade).
      refuseRestOfConnection(incoming);
      outgoing.setHeader("connection", "close");
    }
    if (fast?.(incoming, outgoing)) return;
    dispatching = incoming;
    try {
      void honoListener(incoming, outgoing);
    } finally {
      dispatching = null;
    }
  };
  const material = options.tls;
  let server: Server;
  /** The server that listens: `server` itself, or with TLS a `node:net` server in front. */
  let listening: Server | import("node:net").Server | import("node:tls").Server;
  /** With TLS: the server that makes the handshakes (`server` itself, or on Bun in front of it). */
  let handshakes: import("node:tls").Server | null = null;
  /** With TLS: `listening` is a `node:net` server that peeks at each connection's first bytes. */
  let peekFirstBytes = false;
  // Node checks the head timeout every `connectionsCheckingInterval` (30 s by default).
  const timeouts =
    options.headersTimeoutMs === undefined
      ? {}
      : {
          headersTimeout: options.headersTimeoutMs,
          connectionsCheckingInterval: Math.max(10, Math.floor(options.headersTimeoutMs / 4)),
        };
  if (material === undefined) {
    // A missing or repeated Host is answered by the handler, in the documented shape (hostRefusal).
    server = createServer({ requireHostHeader: false, ...timeouts }, listener);
    listening = server;
    server.on("clientError", (error: Error & { rawPacket?: Uint8Array }, socket: Socket) => {
      const raw = error.rawPacket;
      if (raw === undefined || raw[0] !== 0x16 || raw[1] !== 0x03) return;
      const fields = {
        remote: `${socket.remoteAddress ?? "?"}:${socket.remotePort ?? "?"}`,
        reason:
          "the client started a TLS handshake on the plain HTTP port (use http://, or start the broker with --tls-cert and --tls-key)",
      };
      if (options.refusals !== undefined) options.refusals.refuse("http.tls_on_plain_port", fields);
      else options.logger?.log("warn", "http.tls_on_plain_port", fields);
    });
  } else {
    if (!tlsInFront) {
      const https = await import("node:https");
      server = https.createServer(
        { ...tlsServerOptions(material), requireHostHeader: false },
        listener,
      ) as unknown as Server;
      handshakes = server as unknown as import("node:tls").Server;
    } else {
      const tls = await import("node:tls");
      server = createServer({ requireHostHeader: false }, listener);
      const front = server;
      handshakes = tls.createServer(tlsServerOptions(material), (socket) =>
        front.emit("connection", socket),
      );
    }
    // A `node:net` server accepts, and hands the TLS server each connection whose first bytes
    // are not plain HTTP: plain HTTP gets a 400 naming https:// instead of a bare close. Not on
    // Deno, whose `node:https` closes a connection handed to it after its first answer (a
    // keep-alive client's next request meets a reset): there the TLS server accepts itself.
    if (getRuntimeKey() === "deno") listening = handshakes;
    else {
      const { createServer: createNetServer } = await import("node:net");
      listening = createNetServer();
      peekFirstBytes = true;
    }
  }
  // Not node:http's 5 s: a client whose loop was busy past that reused a connection the server
  // had just closed, EPIPE or ECONNRESET (attack10 F7; docs/decisions.md §18).
  server.keepAliveTimeout = httpKeepAliveMs;
  answerWritesAfterHalfClose(server);
  if (getRuntimeKey() === "node") continueOnFirstBodyRead(server);
  // Over TLS the connections are tracked here (on Bun the HTTP server does not own them).
  const tlsSockets = new Set<TLSSocket>();
  /** With TLS: connections whose first bytes have not arrived yet (`peekBeforeTls`). */
  const peeking = new Set<Socket>();
  /** With TLS: the address of each connection handed to the TLS server, read while it was open. */
  const peers = new WeakMap<Socket, PeerAddress>();
  /**
   * With TLS: per connection handed to the TLS server, the timer that closes it when the handshake
   * timeout (counted from accept, `peekBeforeTls`) passes before the handshake is done; the TLS
   * server's own timer, started at the hand-over, would give a late first byte a second timeout.
   */
  const deadlines = new WeakMap<Socket, ReturnType<typeof setTimeout>>();
  /** Connections {@link deadlines} closed (their handshake error is not logged again). */
  const timedOut = new WeakSet<Socket>();
  if (handshakes !== null) {
    const tlsServer = handshakes;
    tlsServer.on("tlsClientError", (error, socket) => {
      // The TLS socket wraps the one `peekBeforeTls` handed over, and (Node 20) reports no
      // address of its own once the handshake failed: log the address read at accept time.
      const underlying = underlyingSocket(socket);
      // Closed by the deadline below, already logged: its reset is no second refusal.
      if (underlying !== undefined && timedOut.has(underlying)) return socket.destroy();
      const peer = underlying === undefined ? undefined : peers.get(underlying);
      logTlsClientError(options, "http", error, peer ?? socket);
      // With a listener here, node:tls leaves a timed-out handshake's socket open: close it.
      socket.destroy();
    });
    tlsServer.on("secureConnection", (socket) => {
      const underlying = underlyingSocket(socket);
      if (underlying !== undefined) {
        clearTimeout(deadlines.get(underlying));
        deadlines.delete(underlying);
      }
      tlsSockets.add(socket);
      socket.once("close", () => tlsSockets.delete(socket));
      if (!tlsInFront) readThroughStream(socket);
    });
  }
  let connectionsOpen = 0;
  let onAllClosed: (() => void) | null = null;
  const limit = options.connectionLimit;
  const countConnection = (socket: Socket) => {
    connectionsOpen++;
    socket.once("close", () => {
      connectionsOpen--;
      if (connectionsOpen === 0) onAllClosed?.();
    });
  };
  // Plain HTTP with a fast route: the raw listener accepts (and counts) the connections and hands
  // `server` those it does not serve itself; `server` does not listen.
  const rawListening = material === undefined && take !== undefined;
  if (!rawListening)
    listening.on("connection", (socket: Socket) => {
      // `node:http` has set the connection up already (its listener comes first); nothing has
      // been read from it yet, so closing it now refuses it whole.
      if (limit !== undefined) {
        if (!limit.admit("http", `${socket.remoteAddress ?? "?"}:${socket.remotePort ?? "?"}`)) {
          socket.destroy();
          return;
        }
        socket.once("close", () => limit.release());
      }
      countConnection(socket);
    });
  if (peekFirstBytes && handshakes !== null && material !== undefined) {
    const tlsServer = handshakes;
    // After the connection bound above: a refused connection is closed before it is read.
    listening.on("connection", (socket: Socket) => {
      if (socket.destroyed) return;
      peeking.add(socket);
      socket.once("close", () => peeking.delete(socket));
      peekBeforeTls(socket, material.handshakeTimeoutMs, {
        tls: (raw, remainingMs) => {
          peeking.delete(raw);
          const peer = { remoteAddress: raw.remoteAddress, remotePort: raw.remotePort };
          peers.set(raw, peer);
          const deadline = setTimeout(() => {
            deadlines.delete(raw);
            timedOut.add(raw);
            logTlsClientError(options, "http", handshakeTimeout(), peer);
            raw.destroy();
          }, remainingMs);
          deadlines.set(raw, deadline);
          raw.once("close", () => clearTimeout(deadline));
          tlsServer.emit("connection", raw);
        },
        plainHttp: (raw, first) => {
          peeking.delete(raw);
          logPlaintextClient(options, "http", raw, true);
          answerPlainHttpOnTls(raw, first);
        },
        silent: (_raw, peer) =>
          logTlsClientError(options, "http", handshakeTimeout("the client sent nothing"), peer),
      });
    });
  }
  // Before any other "request" listener: what a parser fault owes, in order (that module's comment).
  answerConnectionErrorsInOrder(server, options.refusals);
  let closing = false;
  let requestsInFlight = 0;
  // closeIdleConnections() alone misses connections that never sent a request, and ones still
  // sending a refused body; once nothing is in flight, all that is left can go.
  const closeLeftovers = () => {
    if (!closing || requestsInFlight > 0) return;
    if (material === undefined) server.closeAllConnections();
    else for (const socket of [...tlsSockets, ...peeking]) socket.destroy();
  };
  server.on("request", (_request, response) => {
    requestsInFlight++;
    response.once("close", () => {
      requestsInFlight--;
      closeLeftovers();
    });
  });
  const onNode = getRuntimeKey() === "node";
  let raw: RawHttpListener | null = null;
  let port: number;
  if (rawListening) {
    raw = await listenRawHttp({
      host: options.host,
      port: options.port,
      server,
      take,
      onConnection: countConnection,
      connectionLimit: limit,
    });
    port = raw.port;
    // `node:http` starts tracking its connections (closeIdleConnections, and the head and request
    // timeouts of the connections handed to it) on "listening"; it never listens itself here.
    if (onNode) server.emit("listening");
  } else {
    await new Promise<void>((resolve, reject) => {
      const onError = (error: Error) => reject(error);
      listening.once("error", onError);
      listening.listen(options.port, options.host, () => {
        listening.off("error", onError);
        resolve();
      });
    });
    const address = listening.address();
    if (address === null || typeof address === "string")
      throw new Error("Cannot serve HTTP: the server has no TCP address");
    port = address.port;
    // The HTTPS server gets its connections from the `node:net` server in front: as above.
    if (peekFirstBytes && !tlsInFront && onNode) server.emit("listening");
  }
  const rawListener = raw;
  return {
    port,
    openConnections: () => connectionsOpen,
    setTlsMaterial:
      material === undefined ? undefined : (next) => handshakes?.setSecureContext(next.context),
    stop: () =>
      new Promise<void>((resolve, reject) => {
        closing = true;
        if (rawListener !== null) {
          // `server` never listened: once the raw listener is closed, wait for the connections
          // it handed over (closed below once nothing is in flight).
          // Ends `server`'s connection tracking (it was never listening: no error to wait for).
          if (onNode) server.close();
          rawListener.close().then(() => {
            if (connectionsOpen === 0) resolve();
            else onAllClosed = resolve;
          }, reject);
        } else {
          if (peekFirstBytes && !tlsInFront && onNode) server.close();
          listening.close((error) => (error === undefined ? resolve() : reject(error)));
        }
        if (material === undefined) server.closeIdleConnections();
        closeLeftovers();
      }),
  };
}

/** A `Host` header's value that may be quoted back: a host name or address, and a port. */
const plainHost =
  /\r\nhost:[ \t]*([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?[ \t]*\r\n/i;

/**
 * Answers a plain-HTTP request that reached the HTTPS port (docs/security.md "TLS"), `first`
 * being the bytes it sent first: 400 `invalid_request` in the shape of every error, saying the
 * port speaks HTTPS and naming the https:// URL (with the request's Host when it is a plain host
 * name or address), then the close. What the client still sends is read and dropped until it
 * closes, at most {@link tcpEndLingerMs}, so that a close with unread bytes (a reset) cannot
 * throw the answer away before the client has read it.
 */
function answerPlainHttpOnTls(socket: Socket, first: Uint8Array): void {
  const host = plainHost.exec(Buffer.from(first).toString("latin1"));
  const url = host === null ? "an https:// URL" : `https://${host[1]}${host[2] ?? ""}/`;
  const body = JSON.stringify(
    errorBody(
      new BrokerError(
        Errors.invalidRequest,
        `Cannot serve a plain HTTP request: this port speaks HTTPS (TLS): use ${url}`,
      ),
    ),
  );
  socket.on("data", () => {});
  socket.resume();
  socket.end(
    `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\nx-content-type-options: nosniff\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), tcpEndLingerMs).unref();
}

/** The part of `Deno.serve` used here (typed loosely so tsc passes without Deno's types). */
interface DenoGlobal {
  serve(
    options: { hostname: string; port: number; onListen: (addr: unknown) => void },
    handler: (request: Request, info: DenoServeInfo) => Response | Promise<Response>,
  ): { addr: { port: number }; finished: Promise<void>; shutdown(): Promise<void> };
}

/** The second argument of a `Deno.serve` handler (the part used here). */
interface DenoServeInfo {
  remoteAddr?: { hostname?: string; port?: number };
  /** Resolves (or rejects) once the answer's body has been handed to Deno's server, not sent. */
  completed?: Promise<void>;
}

function serveDeno(handler: Handler, options: ServeHttpOptions): Started {
  const deno = (globalThis as unknown as { Deno: DenoGlobal }).Deno;
  // Handlers still running; shutdown() waits until none is (Deno caveats in the module comment).
  let handlersRunning = 0;
  let onIdle: (() => void) | null = null;
  const total = options.inFlightTotal;
  const counted = async (request: Request, info: DenoServeInfo): Promise<Response> => {
    handlersRunning++;
    /** Answer bytes counted in `total` (`HttpBindings.holdAnswerBytes`). */
    let held = 0;
    const hold =
      total === undefined
        ? undefined
        : (bytes: number): null => {
            // Deno serves a connection's requests one at a time: it holds nothing else, so this
            // never waits (docs/http-api.md "How requests are served").
            const delta = Math.max(0, bytes) - held;
            held += delta;
            total.bytes += delta;
            if (delta < 0) total.released();
            return null;
          };
    const release = (): void => {
      if (held === 0 || total === undefined) return;
      total.bytes -= held;
      held = 0;
      total.released();
    };
    let answered = false;
    try {
      const response = await handler(
        request,
        () => `${info.remoteAddr?.hostname ?? "?"}:${info.remoteAddr?.port ?? "?"}`,
        hold,
      );
      answered = true;
      return response;
    } finally {
      handlersRunning--;
      if (handlersRunning === 0) onIdle?.();
      // Deno tells when the body is handed over, not when it is sent: held until then.
      if (answered && info.completed !== undefined) info.completed.then(release, release);
      else release();
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

/** The error a handshake that did not finish in time is logged with (as `node:tls` names it). */
function handshakeTimeout(detail?: string): Error {
  return Object.assign(
    new Error(`TLS handshake timeout${detail === undefined ? "" : `: ${detail}`}`),
    { code: "ERR_TLS_HANDSHAKE_TIMEOUT" },
  );
}

/**
 * The connection a TLS server's socket wraps: the one `peekBeforeTls` handed over (`_parent`, on
 * Node and Bun alike; undefined where a runtime has none).
 */
function underlyingSocket(socket: TLSSocket): Socket | undefined {
  const parent = (socket as unknown as { _parent?: unknown })._parent;
  return typeof parent === "object" && parent !== null ? (parent as Socket) : undefined;
}
