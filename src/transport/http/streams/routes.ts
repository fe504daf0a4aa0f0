/**
 * The Durable Streams protocol on the HTTP listener, under `/v1/stream/{path}`
 * (docs/durable-streams.md): decode the request (`request.ts`), call `broker.streams`
 * (`broker/streams/`), encode the answer (`response.ts`, `sse.ts`). No protocol state lives here.
 *
 * | method | what                                                       | success                    |
 * |--------|------------------------------------------------------------|----------------------------|
 * | PUT    | create (or confirm) a stream; fork it with `Stream-Forked-From` | 201 (`Location`) / 200 |
 * | POST   | append; with `Stream-Closed: true`, append-and-close or close | 204, 200 with a producer  |
 * | GET    | catch-up read; `live=long-poll`; `live=sse`                 | 200 / 204 / 304 / SSE      |
 * | HEAD   | metadata: tail, content type, TTL, expiry, closure          | 200                        |
 * | DELETE | delete (soft while forks read it)                           | 204                        |
 * | OPTIONS| CORS preflight                                              | 204                        |
 *
 * Errors are the JSON error body of every route with the status of the error table and the
 * protocol's headers (`response.ts`); never a 5xx for client input.
 *
 * Authorization: with API keys, `streams` is the principal's view (`auth/streams.ts`), which
 * applies the topic api's role table (docs/durable-streams.md "Access").
 */
import type { Context, Env, Hono } from "hono";
import { BrokerError, Errors } from "../../../broker/errors.ts";
import { formatStreamOffset, type StreamPosition } from "../../../broker/streams/offsets.ts";
import type { Streams } from "../../../broker/streams/types.ts";
import { streamReadBytesMax, streamSseConnectionMs } from "../../../lib/limits.ts";
import type { Logger } from "../../../lib/logger.ts";
import { errorMessage, errorStack } from "../../../lib/errors.ts";
import {
  decodeStreamPath,
  header,
  parseClosed,
  parseExpiresAt,
  parseForkedFrom,
  parseOffsetParam,
  parseProducer,
  parseSubOffset,
  parseTtl,
  rawUrlPath,
  singleQuery,
} from "./request.ts";
import {
  allowedRequestHeaders,
  baseHeaders,
  cacheImmutable,
  cacheImmutablePrivate,
  cacheNone,
  describe,
  errorResponse,
  etag,
  internalError,
  matchesEtag,
  readBody,
} from "./response.ts";
import { streamSse } from "./sse.ts";

/** What the routes need from the app. */
export interface StreamRoutesDeps {
  /** The broker's streams; absent: every stream route answers 404. */
  streams: Streams | undefined;
  logger: Logger;
  /** Refuses a declared body over the app's cap (413) before it is read. */
  limitBody: (c: Context) => void;
  /** Reads the body within the app's cap. */
  readBody: (c: Context, action: string) => Promise<Uint8Array>;
  /** Server-side long-poll timeout, in ms. */
  longPollMs: number;
  /** Longest SSE silence before a keep-alive control event, in ms. */
  heartbeatMs: number;
  /** Aborted when the client goes away or the server shuts down. */
  signal: (c: Context) => AbortSignal;
  /** The wall clock, for the SSE connection's lifetime. */
  nowMs: () => number;
}

const methods = ["GET", "PUT", "POST", "DELETE", "OPTIONS"];

/** Registers `/v1/stream/*` on `app` (module comment). */
export function registerStreamRoutes<E extends Env>(app: Hono<E>, deps: StreamRoutesDeps): void {
  app.on(methods, "/v1/stream/*", async (c) => {
    const method = c.req.raw.method;
    try {
      if (method === "OPTIONS") return preflight(c);
      const streams = deps.streams;
      if (streams === undefined)
        throw new BrokerError(
          Errors.notFound,
          "Cannot serve streams: this broker offers no Durable Streams (they are off in cluster mode, where a stream's topic would not be replicated: docs/durable-streams.md)",
        );
      const path = decodeStreamPath(rawUrlPath(c.req.url));
      switch (method) {
        case "PUT":
          return await create(c, streams, path, deps);
        case "POST":
          return await append(c, streams, path, deps);
        case "DELETE":
          await streams.delete(path);
          return new Response(null, { status: 204, headers: baseHeaders(cacheNone) });
        case "HEAD":
          return new Response(null, { status: 200, headers: headInfo(streams, path) });
        default:
          return await read(c, streams, path, deps);
      }
    } catch (err) {
      if (err instanceof BrokerError) return errorResponse(err);
      deps.logger.log("error", "http.internal_error", {
        method,
        path: c.req.path,
        error: errorMessage(err),
        stack: errorStack(err),
      });
      return errorResponse(internalError(method, c.req.path));
    }
  });
}

function preflight(c: Context): Response {
  const headers = baseHeaders(cacheNone);
  headers.set("access-control-allow-methods", "GET, HEAD, POST, PUT, DELETE, OPTIONS");
  headers.set(
    "access-control-allow-headers",
    c.req.header("access-control-request-headers") ?? allowedRequestHeaders,
  );
  headers.set("access-control-max-age", "86400");
  return new Response(null, { status: 204, headers });
}

function headInfo(streams: Streams, path: string): Headers {
  const info = streams.head(path);
  const headers = describe(baseHeaders(cacheNone), info);
  if (info.ttlSeconds !== undefined) headers.set("stream-ttl", String(info.ttlSeconds));
  if (info.expiresAt !== undefined) headers.set("stream-expires-at", info.expiresAt);
  return headers;
}

async function create(
  c: Context,
  streams: Streams,
  path: string,
  deps: StreamRoutesDeps,
): Promise<Response> {
  deps.limitBody(c);
  const ttlSeconds = parseTtl(header(c, "stream-ttl"));
  const expiresAt = parseExpiresAt(header(c, "stream-expires-at"));
  // The protocol says nothing of an expiry already past; a stream created expired would be
  // gone before anyone could read it (docs/durable-streams.md "Requests", on TTL and expiry).
  if (expiresAt !== undefined && expiresAt.ms <= deps.nowMs())
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid header "Stream-Expires-At": ${JSON.stringify(expiresAt.text)} is not in the future`,
      { parameter: 'header "Stream-Expires-At"' },
    );
  if (ttlSeconds !== undefined && expiresAt !== undefined)
    throw new BrokerError(
      Errors.invalidRequest,
      "Invalid stream creation: give Stream-TTL or Stream-Expires-At, not both",
    );
  const forkedFrom = header(c, "stream-forked-from");
  const forkOffsetText = header(c, "stream-fork-offset");
  const subOffset = parseSubOffset(header(c, "stream-fork-sub-offset"));
  const invalid = (detail: string) =>
    new BrokerError(Errors.invalidRequest, `Invalid fork: ${detail}`);
  if (forkedFrom === undefined && (forkOffsetText !== undefined || subOffset !== undefined))
    throw invalid("Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From");
  if (subOffset !== undefined && subOffset > 0 && forkOffsetText === undefined)
    throw invalid("a Stream-Fork-Sub-Offset above 0 needs Stream-Fork-Offset");
  let fork: { sourcePath: string; offset?: StreamPosition; subOffset?: number } | undefined;
  if (forkedFrom !== undefined) {
    fork = {
      sourcePath: parseForkedFrom(forkedFrom, c.req.url),
      ...(forkOffsetText === undefined
        ? {}
        : { offset: parseOffsetParam(forkOffsetText.trim(), 'header "Stream-Fork-Offset"') }),
      ...(subOffset === undefined ? {} : { subOffset }),
    };
  }
  const body = await deps.readBody(c, `Cannot create stream ${JSON.stringify(path)}`);
  const contentType = header(c, "content-type");
  const { created, info } = await streams.create({
    path,
    contentType:
      contentType === undefined || contentType.trim() === "" ? undefined : contentType.trim(),
    ttlSeconds,
    expiresAt,
    closed: parseClosed(header(c, "stream-closed")),
    fork,
    body,
  });
  const headers = describe(baseHeaders(cacheNone), info);
  if (created) headers.set("location", c.req.url.split("?", 1)[0]);
  return new Response(null, { status: created ? 201 : 200, headers });
}

async function append(
  c: Context,
  streams: Streams,
  path: string,
  deps: StreamRoutesDeps,
): Promise<Response> {
  deps.limitBody(c);
  const producer = parseProducer(c);
  const close = parseClosed(header(c, "stream-closed"));
  const streamSeq = header(c, "stream-seq");
  const body = await deps.readBody(c, `Cannot append to stream ${JSON.stringify(path)}`);
  const result = await streams.append({
    path,
    contentType: header(c, "content-type"),
    body,
    close,
    streamSeq,
    producer,
  });
  const headers = baseHeaders(cacheNone);
  headers.set("stream-next-offset", formatStreamOffset(result.nextOffset));
  if (result.closed) headers.set("stream-closed", "true");
  if (result.producer !== undefined) {
    headers.set("producer-epoch", String(result.producer.epoch));
    headers.set("producer-seq", String(result.producer.seq));
  }
  const status = result.outcome === "appended" && producer !== undefined ? 200 : 204;
  return new Response(null, { status, headers });
}

async function read(
  c: Context,
  streams: Streams,
  path: string,
  deps: StreamRoutesDeps,
): Promise<Response> {
  const live = singleQuery(c, "live");
  if (live !== undefined && live !== "long-poll" && live !== "sse")
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid query parameter "live": ${JSON.stringify(live.slice(0, 32))} must be "long-poll" or "sse"`,
      { parameter: "live" },
    );
  let position = parseOffsetParam(singleQuery(c, "offset"), 'query parameter "offset"');
  if (live !== undefined && position === undefined)
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid live read: query parameter "offset" is required with live=${live} (use -1 for the start, now for the tail)`,
      { parameter: "offset" },
    );
  const clientCursor = singleQuery(c, "cursor");
  if (live === "sse") {
    const lastEventId = header(c, "last-event-id");
    if (lastEventId !== undefined && lastEventId.trim() !== "")
      position = parseOffsetParam(lastEventId.trim(), 'header "Last-Event-ID"');
    const first = await streams.read({
      path,
      position: position ?? "start",
      waitMs: 0,
      maxBytes: streamReadBytesMax,
    });
    return streamSse({
      streams,
      path,
      first,
      clientCursor,
      heartbeatMs: deps.heartbeatMs,
      connectionMs: streamSseConnectionMs,
      maxBytes: streamReadBytesMax,
      signal: deps.signal(c),
      logger: deps.logger,
      nowMs: deps.nowMs,
    });
  }
  const longPoll = live === "long-poll";
  const r = await streams.read({
    path,
    position: position ?? "start",
    waitMs: longPoll ? deps.longPollMs : 0,
    maxBytes: streamReadBytesMax,
    signal: longPoll ? deps.signal(c) : undefined,
  });
  const empty = r.values.length === 0;
  // Read with a key: never in a shared cache (response.ts).
  const immutable =
    c.req.header("authorization") === undefined ? cacheImmutable : cacheImmutablePrivate;
  const tier = r.closed || !empty ? immutable : cacheNone;
  const headers = describe(baseHeaders(position === "now" ? cacheNone : tier), r.info, r.next);
  if (r.closed) headers.set("stream-closed", "true");
  else headers.delete("stream-closed");
  if (r.upToDate || r.closed) headers.set("stream-up-to-date", "true");
  if (longPoll && !r.closed) headers.set("stream-cursor", streams.cursor(clientCursor));
  if (longPoll && empty) {
    // A timeout (or EOF) of a long-poll: no body (protocol §5.7).
    if (!r.closed) headers.set("cache-control", cacheNone);
    headers.delete("content-type");
    return new Response(null, { status: 204, headers });
  }
  if (position !== "now") {
    const tag = etag(r.info, r);
    headers.set("etag", tag);
    if (matchesEtag(c.req.header("if-none-match"), tag)) {
      headers.delete("content-type");
      return new Response(null, { status: 304, headers });
    }
  }
  return new Response(readBody(r.info, r.values), { status: 200, headers });
}
