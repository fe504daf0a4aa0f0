/**
 * Live tail of one partition as Server-Sent Events (`GET /v1/topics/{topic}/partitions/{p}/stream`).
 *
 * Wire format, one event per record, in offset order:
 *
 * ```
 * id: 42
 * event: record
 * data: {"offset":42,"timestamp":1700000000000,"key":"user-1","value":"hello"}
 *
 * ```
 *
 * plus SSE comments (`: …`): one when the stream opens, naming the start offset, and a heartbeat
 * after every long-poll that found nothing (about every `heartbeatMs`, default 15 s) so proxies
 * and clients see the connection is alive. If a fetch fails mid-stream (the topic is deleted,
 * retention overtakes the reader, the broker is closed under a server still running) one
 * `event: error` is sent with the usual `{"error":{"code","message"}}` body as data, and the
 * stream ends. A server shutdown ends it cleanly instead (below): `serve` closes the HTTP server,
 * which aborts the streams, before it closes the broker.
 *
 * Where the stream starts, first match wins:
 *
 * | request                           | start offset                                         |
 * |-----------------------------------|------------------------------------------------------|
 * | `Last-Event-ID: N` header         | N + 1 (resume after the last record the client saw)   |
 * | `?offset=N`                       | N                                                    |
 * | `?offset=earliest`                | the log start offset                                 |
 * | `?offset=latest` or no `offset`   | the high watermark (only records produced from now)   |
 *
 * Errors found before the first byte (bad parameters, unknown topic or partition, an offset outside
 * [log start offset, high watermark] → 416) are ordinary JSON error responses. The stream ends
 * when the client disconnects (the request's abort signal), when the response body is cancelled,
 * or when the server shuts down (`serveHttp().close()` aborts the shutdown signal); each of these
 * also ends the broker long-poll in progress at once.
 */
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import type { SSEStreamingApi } from "hono/streaming";
import { BrokerError, Errors } from "../../broker/errors.ts";
import type { Broker, FetchResult } from "../../broker/types.ts";
import type { Logger } from "../../lib/logger.ts";
import { fetchRecordsDefault, fetchWaitMsMax } from "../../lib/limits.ts";
import type { ValueEncoding } from "./encode.ts";
import { forEachRecord } from "./encode.ts";
import type { HttpBindings } from "./app.ts";
import { errorBody } from "./errors.ts";
import { errorMessage, errorStack } from "../../lib/errors.ts";
import { partitionName } from "../../lib/topic-partition.ts";

/** Default pause between heartbeats of an idle stream, in ms (also the long-poll wait per round). */
export const sseHeartbeatMsDefault = 15_000;

/** Where and how to stream; the start offset is already resolved (table above). */
export interface RecordStreamRequest {
  topic: string;
  partition: number;
  offset: number;
  encoding: ValueEncoding;
  /** Aborted when the client disconnects or the server shuts down. */
  signal: AbortSignal;
}

/** What the stream needs besides the request. */
export interface RecordStreamDeps {
  broker: Broker;
  logger: Logger;
  /** Long-poll wait per round and so the heartbeat period of an idle stream, in ms (1 … 60 000). */
  heartbeatMs: number;
}

/**
 * Events already encoded, by the fetched bytes they encode: streams tailing a partition at the
 * same offset get the same bytes from the broker's shared read (`broker/tail.ts`), so the events
 * are encoded once for all of them.
 */
const encodedEvents = new WeakMap<Uint8Array, { utf8?: string; base64?: string }>();

function recordEvents(result: FetchResult, encoding: ValueEncoding): string {
  const bytes = result.records.bytes;
  let cached = encodedEvents.get(bytes);
  const hit = cached?.[encoding];
  if (hit !== undefined) return hit;
  let text = "";
  // JSON.stringify escapes CR and LF inside strings, so every `data` is exactly one line.
  forEachRecord(result, encoding, (record) => {
    text += `id: ${record.offset}\nevent: record\ndata: ${JSON.stringify(record)}\n\n`;
  });
  if (cached === undefined) {
    cached = {};
    encodedEvents.set(bytes, cached);
  }
  cached[encoding] = text;
  return text;
}

/**
 * Opens the event stream. The first fetch (without waiting) runs before the response starts, so
 * `offset_out_of_range`, `topic_not_found` and the like still become JSON error responses.
 * @throws BrokerError from that first fetch.
 */
export async function streamRecords(
  c: Context,
  request: RecordStreamRequest,
  deps: RecordStreamDeps,
): Promise<Response> {
  const { broker } = deps;
  const { topic, partition } = request;
  const first = await broker.fetch({
    topic,
    partition,
    offset: request.offset,
    maxRecords: fetchRecordsDefault,
    waitMs: 0,
  });
  // HEAD: the headers the stream would start with, and an end — never a tail, which would hold
  // the connection (and a long-poll) open with nothing to send.
  if (c.req.method === "HEAD")
    return new Response(null, { status: 200, headers: eventStreamHeaders });
  const openStream = (c.env as HttpBindings | undefined)?.openStream;
  if (openStream !== undefined) {
    // Straight to the connection (Node, Bun): no WHATWG stream between the events and the socket.
    const raw = openStream(eventStreamHeaders);
    const signal = AbortSignal.any([request.signal, raw.closed]);
    void tail(c, request, deps, first, {
      write: (text) => (raw.write(text) ? undefined : raw.drained()),
      ended: () => signal.aborted,
      signal,
    }).finally(() => raw.end());
    return raw.answered();
  }
  return streamSSE(c, async (stream: SSEStreamingApi) => {
    // Ends the long-poll when the response body is cancelled, not only when the request aborts.
    const cancelled = new AbortController();
    stream.onAbort(() => cancelled.abort());
    const signal = AbortSignal.any([request.signal, cancelled.signal]);
    await tail(c, request, deps, first, {
      write: (text) => stream.write(text).then(() => {}),
      ended: () => signal.aborted || stream.aborted,
      signal,
    });
  });
}

/** The headers of an event stream (those `streamSSE` sets, and `nosniff` as on every answer). */
const eventStreamHeaders: Record<string, string> = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  connection: "keep-alive",
  "x-content-type-options": "nosniff",
};

/** Where {@link tail} writes: a promise from `write` means "wait before writing more". */
interface EventWriter {
  write(text: string): Promise<void> | undefined;
  ended(): boolean;
  /** Aborted when the stream ends: ends the long-poll in progress. */
  signal: AbortSignal;
}

/** Writes the opening comment, then the records of `first` and of every later long-poll (module comment). */
async function tail(
  c: Context,
  request: RecordStreamRequest,
  deps: RecordStreamDeps,
  first: FetchResult,
  out: EventWriter,
): Promise<void> {
  const { broker } = deps;
  const { topic, partition, encoding } = request;
  const waitMs = Math.min(Math.max(1, deps.heartbeatMs), fetchWaitMsMax);
  const { signal, ended } = out;
  try {
    await out.write(
      `: es-broker stream of partition ${JSON.stringify(partitionName(topic, partition))} from offset ${request.offset}\n\n`,
    );
    let result = first;
    let offset = request.offset;
    let polled = false;
    while (!ended()) {
      if (result.records.count > 0) await out.write(recordEvents(result, encoding));
      else if (polled) await out.write(": heartbeat\n\n");
      offset = result.nextOffset;
      if (ended()) break;
      result = await broker.fetch({
        topic,
        partition,
        offset,
        maxRecords: fetchRecordsDefault,
        waitMs,
        signal,
      });
      polled = true;
    }
  } catch (e) {
    if (ended()) return;
    const error = e instanceof BrokerError ? e : internalError(e, deps.logger, c);
    await out.write(`event: error\ndata: ${JSON.stringify(errorBody(error))}\n\n`);
  }
}

function internalError(cause: unknown, logger: Logger, c: Context): BrokerError {
  logger.log("error", "http.internal_error", {
    method: c.req.method,
    path: c.req.path,
    error: errorMessage(cause),
    stack: errorStack(cause),
  });
  return new BrokerError(Errors.internal, "Cannot continue the stream: internal error");
}
