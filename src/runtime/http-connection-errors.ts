/**
 * What a `node:http` server (Node's, and Bun's `node:http`) answers when its parser refuses what a
 * client sent, so that a pipelining client can match every answer to its request (docs/http-api.md,
 * "Malformed requests and pipelining"):
 *
 * 1. Every request received whole before the fault gets its own answer, in order, as usual.
 * 2. Then the fault gets one answer, in the documented error shape
 *    `{"error":{"code","message","details"}}` with `Connection: close`, and the connection closes:
 *
 * | fault (the parser's `code`)                        | answer                           |
 * |----------------------------------------------------|----------------------------------|
 * | inside the body of a request being received (a bad chunk size, a body cut short) | that request's own answer: its body read fails, the app answers 400 `invalid_request` naming the parse error (or whatever it answers without reading the body) |
 * | request line and headers over the limit (`HPE_HEADER_OVERFLOW`) | 431 `headers_too_large` |
 * | chunk extensions over the limit (`HPE_CHUNK_EXTENSIONS_OVERFLOW`) | 413 `request_too_large` |
 * | the request did not arrive in time (`ERR_HTTP_REQUEST_TIMEOUT`) | 408 `request_timeout` |
 * | any other parse error (`HPE_*`: a bad request line, method, URL byte, header, version, `Content-Length`, `Transfer-Encoding`) | 400 `invalid_request` naming it |
 * | a `CONNECT` request (no tunnels here)              | 404 `not_found`                  |
 * | the connection failed (`ECONNRESET`, …)            | none: it is destroyed             |
 *
 * Without this, `node:http` writes its bodiless `400 Bad Request` at once, ahead of the answers
 * still owed to the requests before the fault, and destroys the connection: a client pipelining
 * five produces and then a malformed request saw one 400 for five appended batches.
 *
 * After the final answer the connection is ended, what the client still sends is read and
 * dropped, and it is destroyed once the client closes or after `tcpEndLingerMs` (so a reset does
 * not destroy the answer in the client's buffer).
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { BrokerError, Errors } from "../broker/errors.ts";
import { foreignMessageCharsMax, tcpEndLingerMs } from "../lib/limits.ts";
import { clip } from "../lib/quote.ts";
import type { RefusalLog } from "../lib/refusals.ts";
import { errorBody } from "../transport/http/errors.ts";

/** Per connection: what is owed before it may close. */
interface ConnectionState {
  /** Requests handed to the app whose response has not closed yet. */
  pending: number;
  /** The connection's latest request (the one whose body a fault may cut), and its response. */
  last: IncomingMessage | null;
  lastResponse: ServerResponse | null;
  /** Set once the parser failed: the final answer (null: none), written once `pending` is 0. */
  closing: { answer: Uint8Array | null } | null;
}

const connections = new WeakMap<Duplex, ConnectionState>();

/** Per request whose body a parse fault cut: the error, and the body readers waiting. */
const cutBodies = new WeakMap<
  IncomingMessage,
  { error: Error | null; waiting: Set<(error: Error) => void> }
>();

/**
 * The peer's `address:port` of each connection, read when the server got it: a socket that has
 * closed by the time its parse error is logged no longer knows its peer (attack17 F7).
 */
const peers = new WeakMap<object, string>();

/**
 * Notes `socket`'s peer address (`peer`, read by whoever accepted it, else read now, while it is
 * open) for the `http.parse_error` line
 * (docs/http-api.md "Malformed requests and pipelining"; {@link answerConnectionErrorsInOrder}
 * does it on the server's `connection` and `secureConnection` events).
 */
export function rememberPeer(socket: Duplex, peer?: string): void {
  if (peer !== undefined) return void peers.set(socket, peer);
  if (peers.has(socket)) return;
  const { remoteAddress, remotePort } = socket as { remoteAddress?: string; remotePort?: number };
  if (remoteAddress !== undefined) peers.set(socket, `${remoteAddress}:${remotePort ?? ""}`);
}

/**
 * `address:port` of the peer of `socket` (a `node:http` connection, possibly a TLS socket over
 * the one accepted), as read when it was accepted, else now; "" if neither knows it.
 */
export function peerOf(socket: Duplex): string {
  const known = peers.get(socket);
  if (known !== undefined) return known;
  const { remoteAddress, remotePort } = socket as { remoteAddress?: string; remotePort?: number };
  if (remoteAddress !== undefined) return `${remoteAddress}:${remotePort ?? ""}`;
  // A TLS socket: the connection it wraps (`_parent` on Node and Bun) was the one accepted.
  const parent = (socket as { _parent?: unknown })._parent;
  return typeof parent === "object" && parent !== null ? (peers.get(parent) ?? "") : "";
}

function stateOf(socket: Duplex): ConnectionState {
  let state = connections.get(socket);
  if (state === undefined) {
    state = { pending: 0, last: null, lastResponse: null, closing: null };
    connections.set(socket, state);
  }
  return state;
}

/**
 * Calls `onCut` if the connection's parser fails inside the body of `incoming` (at once if it
 * already has): the body will never end. Returns a function that stops listening.
 */
export function onBodyCut(incoming: IncomingMessage, onCut: (error: Error) => void): () => void {
  let entry = cutBodies.get(incoming);
  if (entry === undefined) {
    entry = { error: null, waiting: new Set() };
    cutBodies.set(incoming, entry);
  }
  if (entry.error !== null) {
    onCut(entry.error);
    return () => {};
  }
  const waiting = entry.waiting;
  waiting.add(onCut);
  return () => waiting.delete(onCut);
}

function cutBody(incoming: IncomingMessage, error: Error): void {
  let entry = cutBodies.get(incoming);
  if (entry === undefined) {
    entry = { error: null, waiting: new Set() };
    cutBodies.set(incoming, entry);
  }
  entry.error = error;
  for (const onCut of [...entry.waiting]) onCut(error);
  entry.waiting.clear();
}

/**
 * Installs the answers of the module comment on `server`: its `request` (counting what each
 * connection owes), `clientError`, `checkExpectation` and `connect` events. Call before it
 * listens. `refusals` counts and logs each fault as `http.parse_error`, with the peer's address
 * as read when the connection was accepted ({@link rememberPeer}).
 */
export function answerConnectionErrorsInOrder(server: Server, refusals?: RefusalLog): void {
  server.on("connection", (socket: Duplex) => rememberPeer(socket));
  server.on("secureConnection", (socket: Duplex) => rememberPeer(socket));
  server.on("request", (request: IncomingMessage, response: ServerResponse) => {
    const state = stateOf(request.socket);
    state.pending++;
    state.last = request;
    state.lastResponse = response;
    response.once("close", () => {
      state.pending--;
      if (state.pending === 0 && state.closing !== null) finish(request.socket, state);
    });
  });
  // An `Expect` other than 100-continue is ignored, as Deno and Bun do (RFC 9110 allows it),
  // instead of Node's bodiless 417.
  server.on("checkExpectation", (request: IncomingMessage, response: ServerResponse) => {
    server.emit("request", request, response);
  });
  server.on("connect", (request: IncomingMessage, socket: Duplex) => {
    const error = new BrokerError(
      Errors.notFound,
      `Cannot CONNECT ${clip(request.url ?? "")}: no such route (es-broker tunnels nothing)`,
    );
    fail(socket, answerBytes(error), refusals, { code: "CONNECT" });
  });
  server.on("clientError", (error: Error & { code?: string }, socket: Duplex) => {
    const code = typeof error.code === "string" ? error.code : "";
    const state = stateOf(socket);
    if (state.closing !== null) return; // the parser keeps failing on what follows: answered once
    if (!code.startsWith("HPE_") && code !== "ERR_HTTP_REQUEST_TIMEOUT") {
      socket.destroy(); // the connection itself failed (ECONNRESET, …): nobody to answer
      return;
    }
    const partial = state.last !== null && !state.last.complete ? state.last : null;
    if (partial !== null && code !== "ERR_HTTP_REQUEST_TIMEOUT") {
      // The fault is inside this request's body: its own answer says so (module comment).
      refusals?.refuse("http.parse_error", fieldsOf(socket, code));
      state.closing = { answer: null };
      // Its answer says the connection closes (it does, once that answer is out).
      const response = state.lastResponse;
      if (response !== null && !response.headersSent) response.setHeader("connection", "close");
      cutBody(partial, new Error(clip(`${error.message} (${code})`, foreignMessageCharsMax)));
      if (state.pending === 0) finish(socket, state);
      return;
    }
    fail(socket, answerBytes(faultError(error, code)), refusals, { code });
  });
}

/** The final answer for a fault that is not inside a body (module comment). */
function faultError(error: Error, code: string): BrokerError {
  const detail = clip(error.message, foreignMessageCharsMax);
  const details = { parser_error: code };
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return new BrokerError(
        Errors.headersTooLarge,
        "Cannot accept the request: its request line and headers are over the server's limit; the connection is closed",
        details,
      );
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return new BrokerError(
        Errors.requestTooLarge,
        `Cannot accept the request: ${detail}; the connection is closed`,
        details,
      );
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new BrokerError(
        Errors.requestTimeout,
        "Cannot accept the request: it did not arrive whole in time; the connection is closed",
        details,
      );
    default:
      return new BrokerError(
        Errors.invalidRequest,
        `Cannot parse the request: ${detail}; the connection is closed`,
        details,
      );
  }
}

function fieldsOf(socket: Duplex, code: string): Record<string, unknown> {
  return { remote: peerOf(socket), parser_error: code };
}

function fail(
  socket: Duplex,
  answer: Uint8Array,
  refusals: RefusalLog | undefined,
  fields: { code: string },
): void {
  const state = stateOf(socket);
  if (state.closing !== null) return;
  refusals?.refuse("http.parse_error", fieldsOf(socket, fields.code));
  state.closing = { answer };
  // Read nothing more as requests; what arrives is dropped once the answer is out.
  socket.pause();
  if (state.pending === 0) finish(socket, state);
}

/** Writes the final answer (if any) behind everything already written, ends and lingers. */
function finish(socket: Duplex, state: ConnectionState): void {
  const answer = state.closing?.answer ?? null;
  state.closing = { answer: null };
  if (socket.destroyed) return;
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  if (answer !== null) socket.end(answer);
  else socket.end();
  const linger = setTimeout(() => socket.destroy(), tcpEndLingerMs);
  linger.unref?.();
  socket.once("close", () => clearTimeout(linger));
  socket.on("data", () => {});
  socket.resume();
}

/** The HTTP/1.1 response for `error`: its JSON body, `Connection: close`. */
function answerBytes(error: BrokerError): Uint8Array {
  const body = Buffer.from(JSON.stringify(errorBody(error)));
  const status = error.kind.http;
  const head =
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}\r\n` +
    "content-type: application/json\r\n" +
    `content-length: ${body.length}\r\n` +
    "connection: close\r\n\r\n";
  return Buffer.concat([Buffer.from(head, "latin1"), body]);
}
