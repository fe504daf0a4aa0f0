/**
 * The HTTP front door: a Hono app that decodes each request, calls one {@link Broker} method and
 * encodes the result. It holds no broker logic. The full contract, with curl examples, is
 * `docs/http-api.md`; the routes:
 *
 * | method & path                                              | success                         |
 * |------------------------------------------------------------|---------------------------------|
 * | `GET /healthz`                                             | 200 `{"status":"ok"}`           |
 * | `GET /readyz`                                              | 200 `{"status":"ready"}` (503 while recovering: `cli/serve.ts`) |
 * | `GET /metrics`                                             | 200 Prometheus text (`prometheus.ts`) |
 * | `GET /v1/openapi.json`                                     | 200 the OpenAPI 3.1 document (`openapi.ts`) |
 * | `GET /console` (and its assets)                            | 200 the web console (`console.ts`) |
 * | `GET /v1/admin/metrics`                                    | 200 storage counters (fsyncs, …), refusals |
 * | `GET /v1/admin/storage`                                    | 200 segments, recovery, cleanup |
 * | `POST /v1/admin/topics/{topic}/cleanup`                    | 200 what retention/compaction did |
 * | `PATCH /v1/topics/{topic}` `{"config":{…}}`                | 200 topic description           |
 * | `POST /v1/topics`                                          | 201 topic description           |
 * | `GET /v1/topics`                                           | 200 `{"topics":[…]}`            |
 * | `GET /v1/topics/{topic}`                                   | 200 topic description           |
 * | `DELETE /v1/topics/{topic}`                                | 204, no body                    |
 * | `POST /v1/topics/{topic}/records` (JSON or NDJSON)         | 200 `{"offsets":[…]}` once durable |
 * | `GET /v1/topics/{topic}/partitions/{p}/records?offset=…`   | 200 records (long-poll: `wait_ms`) |
 * | `GET /v1/topics/{topic}/partitions/{p}/stream`             | 200 `text/event-stream`         |
 * | `/v1/groups/…` (consumer groups, `groups.ts`)              | see `groups.ts`                 |
 * | `/registry/…` (Confluent Schema Registry API, `registry/routes.ts`) | see `registry/routes.ts` |
 * | `/v1/stream/{path}` (Durable Streams, `streams/routes.ts`)  | see docs/durable-streams.md     |
 *
 * Produce with `Producer-Id`, `Producer-Epoch`, `Producer-Seq` headers is idempotent
 * (`groups.ts`, `broker/producers/`); its answer adds `"duplicate"`.
 *
 * Errors are `{"error":{"code","message","details"?}}` with the status of the error table
 * (`src/broker/errors.ts`), produced by one `onError`. Unknown routes are 404 `not_found`. A body
 * over `maxRequestBytes` is 413 `request_too_large`, decided from `Content-Length` before reading,
 * or, for a chunked body, as soon as the bytes read pass the cap (the rest is never buffered).
 * Anything that is not a {@link BrokerError} is a bug: it is logged through the injected
 * {@link Logger} as `http.internal_error` and answered 500 `internal`.
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { BrokerError, Errors, type ErrorKind } from "../../broker/errors.ts";
import type { Broker, ProduceResult } from "../../broker/types.ts";
import { concatBytes, utf8 } from "../../lib/bytes.ts";
import {
  fetchBytesDefault,
  fetchBytesMax,
  fetchRecordsDefault,
  fetchRecordsMax,
  fetchWaitMsMax,
  foreignMessageCharsMax,
  httpProduceMembersMax,
  httpProduceRecordsMax,
  jsonNestingDepthMax,
  offsetMax,
  requestBytesDefault,
  requestBytesMax,
  requestBytesMin,
  streamLongPollMsDefault,
} from "../../lib/limits.ts";
import { formatJsonPath, type JsonPath, jsonShapeFault } from "../../lib/json-nesting.ts";
import type { Logger } from "../../lib/logger.ts";
import { clip, quote } from "../../lib/quote.ts";
import { snakeCaseKeys } from "../../lib/text.ts";
import type { ValueEncoding } from "./encode.ts";
import { produceAnswerJson, topicJson } from "./encode.ts";
import {
  AnswerBuffers,
  answerBytesPerFetchByte,
  answerSliceBytes,
  FetchAnswer,
} from "./fetch-json.ts";
import { errorBody, invalidRequest } from "./errors.ts";
import { parseInteger } from "./params.ts";
import type { DecodedProduce } from "./produce.ts";
import {
  decodeJsonProduce,
  decodeNdjsonProduce,
  partitionNumberMax,
  refuseJsonProduceArray,
  refuseJsonProduceMembers,
} from "./produce.ts";
import { scanJsonProduce } from "./produce-json.ts";
import { sseHeartbeatMsDefault, streamRecords } from "./sse.ts";
import { prometheusContentType } from "./prometheus.ts";
import { openApiDocument } from "./openapi.ts";
import { registerConsoleRoutes } from "./console.ts";
import { type BodyReaders, producerFromHeaders, registerGroupRoutes } from "./groups.ts";
import { errorMessage, errorStack } from "../../lib/errors.ts";
import type { SchemaRegistry } from "../../registry/registry.ts";
import { createRegistryApp, type RegistryOperation } from "./registry/routes.ts";
import { registerStreamRoutes } from "./streams/routes.ts";
import type { RawAnswer, RawRequest, RawStream } from "./raw-stream.ts";

/**
 * Values the server passes to every request as Hono's `c.env`. `serveHttp`
 * (`src/runtime/http.ts`) sets `shutdownSignal`, aborted when the server closes, so long-polls
 * and event streams end promptly; with `app.request()` in tests it is absent.
 */
export interface HttpBindings {
  shutdownSignal?: AbortSignal;
  /**
   * Set by `serveHttp`: the peer's address (`host:port`), for logs of failed authentications.
   * Absent with `app.request()`.
   */
  remoteAddress?: () => string;
  /**
   * Set by `serveHttp` on Node: reads this request's body straight from the connection (the
   * `IncomingMessage`) into one buffer, bypassing the WHATWG `Request` stream. Resolves to the
   * bytes; to null as soon as more than `maxBytes` bytes have arrived (the rest is discarded,
   * never stored); rejects if the client breaks off mid-body. Absent on Deno and Bun and with
   * `app.request()`: the app then reads `Request.body` with the same cap.
   */
  readRawBody?: (maxBytes: number) => Promise<Uint8Array | null>;
  /**
   * Set by `serveHttp` where the runtime keeps the request's field lines apart (`node:http` on
   * Node, Bun, and Deno with TLS): how many field lines named `name` (any case) the request
   * carried. The WHATWG `Headers` of the request joins repeats with ", ", so only this tells
   * `Producer-Id: a` + `Producer-Id: b` from `Producer-Id: a, b`. Absent on `Deno.serve` and with
   * `app.request()`.
   */
  headerLines?: (name: string) => number;
  /**
   * Set by `serveHttp` on Node and Bun: answers this request with status 200 and `headers` at once
   * and returns a sink that writes the rest of the body straight to the connection, bypassing
   * the WHATWG streams of a `Response` body (the live tail, `sse.ts`, writes to a hundred such
   * streams per record). The route then returns its `answered()`. Absent on Deno and
   * with `app.request()`: the route streams through a `Response`.
   */
  openStream?: (headers: Record<string, string>) => RawStream;
  /**
   * Set by `serveHttp` on Node: calls `done` once this request's answer has been handed whole to
   * the operating system (the `ServerResponse`'s "finish"), never if the connection closes first.
   * The fetch route then writes a later answer into this answer's buffer (`AnswerBuffers`,
   * `fetch-json.ts`). Absent on Deno and Bun and with `app.request()`: every answer gets a new
   * buffer.
   */
  afterAnswerWritten?: (done: () => void) => void;
  /**
   * Set by `serveHttp` on `node:http` (Node, Bun): makes this request's append (`call`, the
   * broker call) once every earlier request on the connection has made its own or is answered,
   * so pipelined appends are stored in request order (`runtime/http-append-order.ts`;
   * docs/http-api.md, "Malformed requests and pipelining"). Absent elsewhere: call directly.
   */
  appendInOrder?: <T>(call: () => Promise<T>) => Promise<T>;
  /**
   * Set by `serveHttp` when the broker counts HTTP answers in its in-flight bytes
   * (`--max-in-flight-bytes`; docs/http-api.md "How requests are served"): counts `bytes` as held
   * for this request's answer, replacing what it counted before, until the answer is written
   * (`node:http`: its "finish", the bytes are the kernel's, or the connection closes;
   * `Deno.serve`: until the body is handed to Deno's server). The fetch route calls it with its
   * `max_bytes` before it reads (`built` false; not for a long-poll, whose wait would hold the
   * bytes for nothing), and with the answer's size once built (`built` true). Before the answer
   * is built it returns a promise while the sum is at its cap and the connection holds other
   * answers: the route goes on once it resolves; null (or nothing) otherwise. Absent with
   * `app.request()`.
   */
  holdAnswerBytes?: (bytes: number, built: boolean) => Promise<void> | null | undefined;
}

/**
 * The Hono app {@link createHttpApp} returns, with its produce route also served in front of the
 * router (`fastRoute`, see `createHttpApp`).
 */
export type HttpApp = Hono<{ Bindings: HttpBindings }> & {
  /**
   * The produce route without a `Request`/`Response` pair, for the runtime's server;
   * `extraHeaders` are added to its answers (the authenticating wrapper's `nosniff`).
   */
  fastRoute?: (
    request: RawRequest,
    extraHeaders?: Record<string, string>,
  ) => Promise<RawAnswer> | null;
};

/** Options of {@link createHttpApp}. */
export interface HttpAppOptions {
  /** Every route calls this broker; the app never closes it. */
  broker: Broker;
  /** Receives `http.internal_error` events (with the stack) for anything answered 500. */
  logger: Logger;
  /**
   * Largest request body accepted, in bytes (`--max-request-bytes`); default
   * `requestBytesDefault` (16 MiB), allowed `requestBytesMin` … `requestBytesMax`.
   */
  maxRequestBytes?: number;
  /** Heartbeat period of an idle SSE stream, in ms (1 … 60 000); default 15 000. */
  sseHeartbeatMs?: number;
  /**
   * Refusals of client input counted outside the app (bad TCP frames, HTTP the runtime's parser
   * refused), served as `refused` by `GET /v1/admin/metrics`.
   */
  refusals?: { counts(): Record<string, number> };
  /**
   * The `GET /metrics` answer (`prometheus.ts`), authorizing the caller first (it throws
   * BrokerError forbidden for a key without the admin role); without it the route is 404.
   */
  metricsText?: () => Promise<string>;
  /** Whether requests need an API key now (`GET /readyz` says so); default false. */
  keysRequired?: () => boolean;
  /**
   * More routes, registered after the built-in ones and given the app's body helpers (the key
   * administration routes of `keys.ts` use it).
   */
  routes?: (app: HttpApp, helpers: { limitBody: (c: Context) => void } & BodyReaders) => void;
  /** The schema registry served under `/registry` (`registry/routes.ts`); absent: those routes are 404. */
  registry?: SchemaRegistry;
  /** Decides each registry operation (throws to refuse); absent: all allowed. See `registry/routes.ts`. */
  authorizeRegistry?: (operation: RegistryOperation) => void | Promise<void>;
  /** Server-side long-poll timeout of the Durable Streams protocol, in ms (1 … 60 000); default 30 000. */
  streamLongPollMs?: number;
  /** The wall clock (ms since the epoch) for the lifetime of Durable Streams SSE connections; default `Date.now`. */
  nowMs?: () => number;
}

type AppContext = Context<{ Bindings: HttpBindings }>;

/** A body of the buffers `chunks` one after the other, a buffer per read. */
function chunksStream(chunks: Uint8Array<ArrayBuffer>[]): ReadableStream<Uint8Array> {
  let next = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (next < chunks.length) controller.enqueue(chunks[next++]);
      else controller.close();
    },
  });
}

/**
 * Resolves once the I/O events that have arrived are handled: a fetch answer written a slice at a
 * time lets other connections be served between two slices. `setImmediate` on Node and Bun; a
 * 0 ms timer on Deno, whose `setImmediate` let no request in between (a produce sent during a
 * 16 MiB answer was answered after it; test/e2e/http-fetch-slices.test.ts).
 */
function nextTurn(): Promise<void> {
  const immediate =
    "Deno" in globalThis
      ? undefined
      : (globalThis as { setImmediate?: (fn: () => void) => unknown }).setImmediate;
  return new Promise((resolve) => {
    if (immediate !== undefined) immediate(resolve);
    else setTimeout(resolve, 0);
  });
}

/** Signal that aborts when the client goes away or the server shuts down. */
function requestSignal(c: AppContext): AbortSignal {
  const shutdown = c.env?.shutdownSignal;
  return shutdown === undefined ? c.req.raw.signal : AbortSignal.any([c.req.raw.signal, shutdown]);
}

/** The value of a query parameter given at most once; undefined when absent. */
function singleQuery(c: AppContext, name: string, action: string): string | undefined {
  const values = c.req.queries(name);
  if (values === undefined || values.length === 0) return undefined;
  if (values.length > 1) {
    throw invalidRequest(
      action,
      `query parameter "${name}" is given ${values.length} times, at most once is allowed`,
      { parameter: name },
    );
  }
  return values[0];
}

function integerQuery(
  c: AppContext,
  name: string,
  bounds: { min: number; max: number; action: string },
): number | undefined {
  const text = singleQuery(c, name, bounds.action);
  return text === undefined
    ? undefined
    : parseInteger(text, { label: `query parameter "${name}"`, name, ...bounds });
}

function partitionParam(c: AppContext, action: string): number {
  return parseInteger(c.req.param("partition") ?? "", {
    label: 'path parameter "partition"',
    name: "partition",
    min: 0,
    max: partitionNumberMax,
    action,
  });
}

function encodingQuery(c: AppContext, action: string): ValueEncoding {
  const text = singleQuery(c, "encoding", action);
  if (text === undefined || text === "utf8") return "utf8";
  if (text === "base64") return "base64";
  throw invalidRequest(
    action,
    `query parameter "encoding" ${quote(text)} must be "utf8" or "base64"`,
    { parameter: "encoding" },
  );
}

/** The media types that ask the fetch route for NDJSON (docs/http-api.md "`GET /v1/topics/{topic}/partitions/{p}/records` — fetch"). */
const ndjsonMediaTypes = new Set(["application/x-ndjson", "application/ndjson"]);

/** An RFC 9110 qvalue: 0 to 1 with at most three decimals. */
const qvalue = /^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$/;

/**
 * Whether an `Accept` header asks the fetch route for NDJSON: it names `application/x-ndjson`
 * or `application/ndjson` with a quality above 0, and at least the quality of JSON, whether named
 * (`application/json`) or by a wildcard (`*\/*`, `application/*`): at a tie the named NDJSON wins,
 * being the more specific. A range whose `q` is not a qvalue (`q=0x1`, `q=1e-9`, `q=2`) counts as
 * q=0. No Accept, wildcards alone, or anything unparsable keep the JSON answer, so every client
 * that worked before gets the same answer (docs/http-api.md "`GET /v1/topics/{topic}/partitions/{p}/records` — fetch").
 */
export function acceptsNdjson(accept: string | undefined): boolean {
  if (accept === undefined) return false;
  let ndjson = 0;
  let json = 0;
  for (const range of accept.split(",")) {
    const [type, ...params] = range.split(";");
    const media = type.trim().toLowerCase();
    const isNdjson = ndjsonMediaTypes.has(media);
    if (!isNdjson && media !== "application/json" && media !== "*/*" && media !== "application/*")
      continue;
    let q = 1;
    for (const param of params) {
      const [name, value] = param.split("=");
      if (name.trim().toLowerCase() === "q") {
        const text = (value ?? "").trim();
        q = qvalue.test(text) ? Number(text) : 0;
      }
    }
    if (isNdjson) ndjson = Math.max(ndjson, q);
    else json = Math.max(json, q);
  }
  return ndjson > 0 && ndjson >= json;
}

/** `offset`: a number, or `earliest` / `latest`, resolved through `listOffsets`. */
async function resolveOffset(
  broker: Broker,
  text: string,
  where: { topic: string; partition: number; action: string },
): Promise<number> {
  if (text === "earliest" || text === "latest") {
    const bounds = await broker.listOffsets({ topic: where.topic, partition: where.partition });
    return text === "earliest" ? bounds.logStartOffset : bounds.highWatermark;
  }
  return parseInteger(text, {
    label: 'query parameter "offset"',
    name: "offset",
    min: 0,
    max: offsetMax,
    action: where.action,
  });
}

/**
 * Refuses a request body whose `Content-Encoding` names a coding other than `identity`
 * (docs/http-api.md "Conventions"): the broker decodes none, and reading gzip bytes as records
 * would answer 200 for data it did not understand (RFC 9110 §15.5.16: 415).
 * @param header the header's value (several lines joined with ", ").
 * @throws BrokerError unsupported_media_type naming the header and its value.
 */
function refuseContentEncoding(header: string): void {
  for (const coding of header.split(",")) {
    const name = coding.trim().toLowerCase();
    if (name !== "" && name !== "identity") {
      throw new BrokerError(
        Errors.unsupportedMediaType,
        `Cannot accept the request body: Content-Encoding ${quote(coding.trim())} is not supported (the broker decodes no content coding): send the body uncompressed, without a Content-Encoding header`,
        { header: "content-encoding" },
      );
    }
  }
}

/** The media type of the body, lower case, without parameters; "" when there is no Content-Type. */
function mediaType(c: AppContext): string {
  const header = c.req.header("content-type");
  if (header === undefined) return "";
  return header.split(";", 1)[0].trim().toLowerCase();
}

/**
 * The query parameter a cluster broker adds to the `Location` of its 307 to a partition's leader
 * (docs/cluster.md "Decisions (and why)"; docs/http-api.md `GET /v1/cluster`); a request carrying it is
 * never redirected again. Every route ignores it otherwise.
 */
export const redirectedMarker = "redirected";

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** 413 `request_too_large` for a body over `maxBytes`. */
function requestTooLarge(maxBytes: number): BrokerError {
  return new BrokerError(
    Errors.requestTooLarge,
    `Cannot accept the request: the body is over the limit of ${maxBytes} bytes (the broker's --max-request-bytes)`,
    { limit_bytes: maxBytes },
  );
}

/**
 * Reads a body through the WHATWG `Request` (Deno, Bun, `app.request()`), like Hono's
 * `bodyLimit`: a body with a `Content-Length` is read whole (the runtime's parser never delivers
 * more than it says, and the header was checked before the route ran); a streamed one is counted
 * as it arrives and abandoned, unstored, as soon as the count passes `maxBytes` (null).
 */
async function readRequestBody(request: Request, maxBytes: number): Promise<Uint8Array | null> {
  if (request.headers.has("content-length") && !request.headers.has("transfer-encoding")) {
    return new Uint8Array(await request.arrayBuffer());
  }
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let sizeBytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    sizeBytes += value.length;
    if (sizeBytes > maxBytes) return null;
    chunks.push(value);
  }
  return chunks.length === 1 ? chunks[0] : concatBytes(chunks);
}

/** How {@link parseJson} names a body nested past `jsonNestingDepthMax`: the error kind by the path of the offending value. */
export type NestingErrorKind = (path: JsonPath) => ErrorKind;

/** What {@link parseJson} checks besides the syntax. */
interface ParseJsonOptions {
  /** The error kind of a body nested too deep, by the path of the offending value (default invalid_request). */
  nestingKind?: NestingErrorKind;
  /** The produce route: a body of several JSON objects gets a hint to send it as NDJSON. */
  ndjsonHint?: boolean;
  /**
   * Most elements an array of the body may hold, checked on the text in the nesting check's pass
   * (`jsonShapeFault`), before `JSON.parse` builds anything; `refuse` names the error for the
   * path of the first array found to hold more.
   */
  elements?: { max: number; refuse: (path: JsonPath) => never };
  /**
   * Most members all objects of the body may hold together, checked in the same pass; `refuse`
   * names the error for the path of the object in which the count passed `max`.
   */
  members?: { max: number; refuse: (path: JsonPath) => never };
}

/**
 * Decodes a JSON body: strict UTF-8, at most `jsonNestingDepthMax` levels deep and at most
 * `options.elements.max` elements an array and `options.members.max` object members in all
 * (checked on the text, before anything is built or recurses over it), then `JSON.parse`.
 * @throws BrokerError invalid_request (or the kind `nestingKind` picks for a body nested too
 *   deep, naming the field; or what `elements.refuse` or `members.refuse` throws) with the
 *   parser's message, clipped.
 */
function parseJson(bytes: Uint8Array, action: string, options: ParseJsonOptions = {}): unknown {
  let text: string;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    throw invalidRequest(action, "the body is not valid UTF-8");
  }
  const fault = jsonShapeFault(text, {
    elementsMax: options.elements?.max,
    membersMax: options.members?.max,
  });
  if (fault !== null) {
    if ("elementsMax" in fault) return options.elements!.refuse(fault.path);
    if ("membersMax" in fault) return options.members!.refuse(fault.path);
    const field = formatJsonPath(fault.path);
    return throwNestedTooDeep(
      action,
      field,
      options.nestingKind?.(fault.path) ?? Errors.invalidRequest,
    );
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    // Several JSON values one after another (`}{`, or `}` and `{` on lines of their own) are
    // NDJSON sent without its content type, as `curl -d @events.ndjson` does (stripping newlines).
    const hint =
      options.ndjsonHint === true && /\}\s*\{/.test(text)
        ? "; a body of several JSON objects, one a line, is NDJSON: send Content-Type: application/x-ndjson, with curl --data-binary @FILE (curl -d strips the newlines)"
        : "";
    throw invalidRequest(
      action,
      `the body is not valid JSON: ${clip(errorMessage(e), foreignMessageCharsMax)}${hint}`,
    );
  }
}

/**
 * What {@link parseJson} checks of a JSON produce body besides its nesting: the NDJSON hint, no
 * array of more than `httpProduceRecordsMax` elements, refused as the record count is
 * (`refuseJsonProduceArray`), and no more than `httpProduceMembersMax` object members in all
 * (`refuseJsonProduceMembers`), both before the body is parsed (docs/decisions.md §19).
 */
function jsonProduceChecks(action: string): ParseJsonOptions {
  return {
    ndjsonHint: true,
    elements: {
      max: httpProduceRecordsMax,
      refuse: (path) => refuseJsonProduceArray(path, formatJsonPath(path), action),
    },
    members: {
      max: httpProduceMembersMax,
      refuse: (path) => refuseJsonProduceMembers(path, formatJsonPath(path), action),
    },
  };
}

function throwNestedTooDeep(action: string, field: string, kind: ErrorKind): never {
  throw new BrokerError(
    kind,
    `${action}: field ${quote(field)} nests arrays or objects deeper than ${jsonNestingDepthMax} levels`,
    { field, depth_max: jsonNestingDepthMax },
  );
}

/** Topic bodies: a value nested too deep inside `config` is a bad config value. */
const topicNestingKind: NestingErrorKind = (path) =>
  path[0] === "config" ? Errors.invalidConfig : Errors.invalidRequest;

/**
 * Builds the HTTP app over `broker`. Routes and shapes: module comment and `docs/http-api.md`.
 * @throws RangeError if `maxRequestBytes`, `sseHeartbeatMs` or `streamLongPollMs` is out of range (a configuration bug).
 */
export function createHttpApp(options: HttpAppOptions): HttpApp {
  const { broker, logger } = options;
  const maxRequestBytes = options.maxRequestBytes ?? requestBytesDefault;
  if (
    !Number.isSafeInteger(maxRequestBytes) ||
    maxRequestBytes < requestBytesMin ||
    maxRequestBytes > requestBytesMax
  ) {
    throw new RangeError(
      `maxRequestBytes ${maxRequestBytes} must be an integer from ${requestBytesMin} to ${requestBytesMax}`,
    );
  }
  const heartbeatMs = options.sseHeartbeatMs ?? sseHeartbeatMsDefault;
  const answerBuffers = new AnswerBuffers();
  // Served by `GET /v1/admin/metrics`: how many slices the fetch answers took (`FetchAnswer`).
  const fetchCounters = { answers: 0, slices: 0 };
  if (!Number.isSafeInteger(heartbeatMs) || heartbeatMs < 1 || heartbeatMs > fetchWaitMsMax) {
    throw new RangeError(
      `sseHeartbeatMs ${heartbeatMs} must be an integer from 1 to ${fetchWaitMsMax}`,
    );
  }

  const streamLongPollMs = options.streamLongPollMs ?? streamLongPollMsDefault;
  if (
    !Number.isSafeInteger(streamLongPollMs) ||
    streamLongPollMs < 1 ||
    streamLongPollMs > fetchWaitMsMax
  ) {
    throw new RangeError(
      `streamLongPollMs ${streamLongPollMs} must be an integer from 1 to ${fetchWaitMsMax}`,
    );
  }

  const app: HttpApp = new Hono<{ Bindings: HttpBindings }>();

  /**
   * The first step of every route with a body: refuses a body under a `Content-Encoding` the
   * broker does not decode (docs/http-api.md "Conventions"), and a declared size over the cap from
   * the header alone (the body is not touched), so a 100 MiB upload is refused after its headers; a
   * streamed body is counted by readBody as it arrives. A plain call rather than a middleware:
   * Hono calls a route's only handler directly, without composing a chain per request.
   * @throws BrokerError unsupported_media_type, request_too_large.
   */
  const limitBody = (c: Context): void => {
    const coding = c.req.header("content-encoding");
    if (coding !== undefined) refuseContentEncoding(coding);
    const length = c.req.header("content-length");
    if (
      length !== undefined &&
      c.req.header("transfer-encoding") === undefined &&
      parseInt(length, 10) > maxRequestBytes
    ) {
      throw requestTooLarge(maxRequestBytes);
    }
  };

  /**
   * The request body, at most `maxRequestBytes` (413 past it, the rest never stored): straight
   * from the connection on Node (`HttpBindings.readRawBody`), through `Request.body` elsewhere.
   * @throws BrokerError request_too_large; invalid_request if the client breaks off mid-body.
   */
  const readBody = async (c: Context, action: string): Promise<Uint8Array> => {
    const readRawBody = (c.env as HttpBindings | undefined)?.readRawBody;
    let body: Uint8Array | null;
    try {
      body =
        readRawBody === undefined
          ? await readRequestBody(c.req.raw, maxRequestBytes)
          : await readRawBody(maxRequestBytes);
    } catch (e) {
      // The client went away mid-body or sent a broken stream: its fault, not a broker bug.
      throw invalidRequest(action, `the request body could not be read: ${errorMessage(e)}`);
    }
    if (body === null) throw requestTooLarge(maxRequestBytes);
    return body;
  };

  /**
   * The answer to a route's failure (`target`: the request's path and query, for a redirect to
   * the leader); anything that is not a client's fault is logged as a bug and answered 500.
   */
  const errorAnswer = (
    err: unknown,
    method: string,
    path: string,
    target: () => string,
  ): { status: number; headers: Record<string, string>; body: string } => {
    let error: BrokerError;
    if (err instanceof BrokerError) {
      error = err;
    } else if (err instanceof HTTPException && err.status === 400) {
      error = invalidRequest(
        "Cannot accept the request",
        clip(err.message, foreignMessageCharsMax),
      );
    } else {
      logger.log("error", "http.internal_error", {
        method,
        path: clip(path),
        error: clip(errorMessage(err), foreignMessageCharsMax),
        stack: errorStack(err),
      });
      error = new BrokerError(
        Errors.internal,
        `Cannot complete ${clip(method)} ${clip(path)}: internal error (logged)`,
      );
    }
    const headers: Record<string, string> = {};
    // A key revoked while its request ran (auth.ts answers the other 401s itself).
    if (error.kind === Errors.unauthenticated || error.kind === Errors.keyRevoked)
      headers["www-authenticate"] = 'Bearer realm="es-broker", error="invalid_token"';
    // Cluster mode: the same request on the partition's leader (docs/cluster.md "Clients"),
    // marked as redirected; a request already marked is never redirected again (the leader
    // moved while it was redirected: 503, retry), so a client follows at most one redirect.
    const leaderHttp = error.details?.leader_http;
    if (error.kind === Errors.notLeader && typeof leaderHttp === "string") {
      const request = target();
      const query = request.indexOf("?");
      if (query < 0 || !new URLSearchParams(request.slice(query + 1)).has(redirectedMarker)) {
        headers.location = `${leaderHttp}${request}${query < 0 ? "?" : "&"}${redirectedMarker}=1`;
        return { status: 307, headers, body: JSON.stringify(errorBody(error)) };
      }
      error = new BrokerError(
        error.kind,
        `${error.message}; this request was redirected here already, so it is not redirected again: retry it`,
        error.details,
      );
    }
    const body = JSON.stringify(errorBody(error));
    return { status: error.kind.http, headers, body };
  };

  app.onError((err, c) => {
    const answer = errorAnswer(err, c.req.method, c.req.path, () => {
      const url = new URL(c.req.url);
      return `${url.pathname}${url.search}`;
    });
    for (const [name, value] of Object.entries(answer.headers)) c.header(name, value);
    c.header("content-type", "application/json");
    return c.body(answer.body, answer.status as ContentfulStatusCode);
  });

  app.notFound((c) => {
    const error = new BrokerError(
      Errors.notFound,
      `Cannot ${clip(c.req.method)} ${clip(c.req.path)}: no such route`,
    );
    return c.json(errorBody(error), 404);
  });

  app.get("/healthz", (c) => c.json({ status: "ok" }));

  // This app serves only once recovery is over (until then `cli/serve.ts` answers 503 itself).
  // `api_keys` tells a browser (the console) whether to ask for a key before its first request.
  app.get("/readyz", (c) =>
    c.json({ status: "ready", api_keys: options.keysRequired?.() ?? false }),
  );

  app.get("/v1/openapi.json", (c) => c.json(openApiDocument));
  registerConsoleRoutes(app);

  app.get("/metrics", async (c) => {
    if (options.metricsText === undefined)
      throw new BrokerError(Errors.notFound, "Cannot GET /metrics: this server keeps no metrics");
    return c.body(await options.metricsText(), 200, {
      "content-type": prometheusContentType,
      "cache-control": "no-store",
    });
  });

  // Storage counters (fsyncs, appends, writes, records), when the broker offers them
  // (LocalBroker.metrics); the benchmark harness reads them to report fsyncs/s and records per fsync.
  app.get("/v1/admin/metrics", (c) => {
    const source = broker as Broker & { metrics?: () => Record<string, number> };
    if (typeof source.metrics !== "function")
      throw new BrokerError(
        Errors.notFound,
        "Cannot GET /v1/admin/metrics: this broker keeps no metrics",
      );
    const refused = options.refusals?.counts();
    // The counters' names in snake_case like the rest of the API (`records_appended`); the keys of
    // `refused` are log event names and stay as they are.
    const counters = {
      ...(snakeCaseKeys(source.metrics()) as Record<string, number>),
      http_fetch_answers: fetchCounters.answers,
      http_fetch_answer_slices: fetchCounters.slices,
    };
    return c.json(refused === undefined ? counters : { ...counters, refused });
  });

  // Storage state and the cleanup tasks (retention, cold tier, compaction), when the broker has them.
  app.get("/v1/admin/storage", (c) => {
    if (broker.describeStorage === undefined)
      throw new BrokerError(
        Errors.notFound,
        "Cannot GET /v1/admin/storage: this broker does not describe its storage",
      );
    return c.json(broker.describeStorage());
  });

  app.post("/v1/admin/topics/:topic/cleanup", async (c) => {
    const topic = c.req.param("topic");
    if (broker.cleanup === undefined)
      throw new BrokerError(
        Errors.notFound,
        `Cannot clean up topic ${quote(topic)}: this broker has no cleanup tasks`,
      );
    return c.json(await broker.cleanup(topic));
  });

  app.patch("/v1/topics/:topic", async (c) => {
    limitBody(c);
    const topic = c.req.param("topic");
    const action = `Cannot update the config of topic ${quote(topic)}`;
    if (broker.updateTopicConfig === undefined)
      throw new BrokerError(Errors.notFound, `${action}: this broker cannot change topic configs`);
    const body = parseJson(await readBody(c, action), action, { nestingKind: topicNestingKind });
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw invalidRequest(
        action,
        'the body must be a JSON object like {"config":{"retention_ms":86400000}}',
      );
    }
    for (const field of Object.keys(body)) {
      if (field !== "config")
        throw invalidRequest(action, `unknown field ${quote(field)} (expected config)`, {
          field: clip(field),
        });
    }
    const config = (body as { config?: unknown }).config;
    if (typeof config !== "object" || config === null || Array.isArray(config)) {
      throw invalidRequest(action, '"config" must be a JSON object', { field: "config" });
    }
    return c.json(
      topicJson(await broker.updateTopicConfig(topic, config as Record<string, unknown>)),
    );
  });

  app.post("/v1/topics", async (c) => {
    limitBody(c);
    let action = "Cannot create topic";
    const body = parseJson(await readBody(c, action), action, { nestingKind: topicNestingKind });
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw invalidRequest(
        action,
        'the body must be a JSON object like {"name":"orders","partitions":3,"config":{}}',
      );
    }
    const fields = body as Record<string, unknown>;
    for (const field of Object.keys(fields)) {
      if (field !== "name" && field !== "partitions" && field !== "config") {
        throw invalidRequest(
          action,
          `unknown field ${quote(field)} (expected name, partitions, config)`,
          { field: clip(field) },
        );
      }
    }
    if (typeof fields.name !== "string")
      throw invalidRequest(action, '"name" must be a string', { field: "name" });
    action = `Cannot create topic ${quote(fields.name)}`;
    const partitions = fields.partitions ?? 1;
    if (typeof partitions !== "number" || !Number.isInteger(partitions)) {
      throw invalidRequest(action, '"partitions" must be an integer', { field: "partitions" });
    }
    const config = fields.config ?? {};
    if (typeof config !== "object" || config === null || Array.isArray(config)) {
      throw invalidRequest(action, '"config" must be a JSON object', { field: "config" });
    }
    const topic = await broker.createTopic({
      name: fields.name,
      partitions,
      config: config as Record<string, unknown>,
    });
    return c.json(topicJson(topic), 201);
  });

  app.get("/v1/topics", async (c) => {
    const topics = await broker.listTopics();
    return c.json({ topics: topics.map(topicJson) });
  });

  app.get("/v1/cluster", async (c) => {
    if (broker.clusterMetadata === undefined)
      throw new BrokerError(
        Errors.notFound,
        "Cannot GET /v1/cluster: this broker runs as a single node (serve --cluster joins a cluster)",
      );
    const topics = c.req.queries("topic");
    return c.json(await broker.clusterMetadata(topics));
  });

  app.get("/v1/topics/:topic", async (c) => {
    return c.json(topicJson(await broker.describeTopic(c.req.param("topic"))));
  });

  app.delete("/v1/topics/:topic", async (c) => {
    await broker.deleteTopic(c.req.param("topic"));
    return c.body(null, 204);
  });

  /**
   * Reads and decodes a produce body (JSON or NDJSON by `Content-Type`). Its own async function so
   * that the body's bytes are garbage once it returns: V8 keeps every value an async function
   * holds in a register alive across each later `await`, so read in the route itself the body
   * (~290 KB for 1 000 records, besides the batch decoded from it) would live until the produce
   * is durable; with 64 such requests in flight that kept the broker's RSS ~10 MiB higher.
   * @throws BrokerError invalid_request / request_too_large / record_too_large.
   */
  const decodeProduceBody = async (c: AppContext, action: string): Promise<DecodedProduce> => {
    const type = mediaType(c);
    let decoded: DecodedProduce;
    if (type === "application/x-ndjson" || type === "application/ndjson") {
      const keyText = singleQuery(c, "key", action);
      const partition = integerQuery(c, "partition", { min: 0, max: partitionNumberMax, action });
      decoded = decodeNdjsonProduce(await readBody(c, action), {
        action,
        key: keyText === undefined ? null : utf8(keyText),
        partition,
      });
    } else {
      // Anything else is parsed as JSON (curl -d sends x-www-form-urlencoded, fetch text/plain):
      // a body that is not JSON fails with a clear 400 either way.
      for (const name of ["key", "partition"]) {
        if (singleQuery(c, name, action) !== undefined) {
          throw invalidRequest(
            action,
            `query parameter "${name}" applies to NDJSON bodies only; put it in each record of a JSON body`,
            { parameter: name },
          );
        }
      }
      const bytes = await readBody(c, action);
      // The byte-level fast path decodes the common shapes; the general path does the rest and names every error.
      decoded =
        scanJsonProduce(bytes) ??
        decodeJsonProduce(parseJson(bytes, action, jsonProduceChecks(action)), {
          action,
          sizeHintBytes: bytes.length,
        });
    }
    return decoded;
  };

  /**
   * The produce route in front of the router (`HttpApp.fastRoute`), for the runtime's server: it
   * takes only requests it answers exactly as the route below would — `POST
   * /v1/topics/{topic}/records` with a topic of `[A-Za-z0-9._-]` (not `.` or `..`), no query (an
   * NDJSON body may have `?partition=N`), a `Content-Length` within the cap, no
   * `Transfer-Encoding`, at most one `Content-Type` line, no `Producer-*` header — and leaves every
   * other request (null) to the router. The authenticating wrapper adds its own conditions
   * (`auth.ts`).
   */
  /** The success answer's headers per `extraHeaders` object (frozen: `RawAnswer.headers`). */
  const okHeadersCache = new WeakMap<object, Record<string, string>>();
  const okHeadersPlain = Object.freeze({ "content-type": "application/json" });
  const okHeaders = (extraHeaders: Record<string, string> | undefined): Record<string, string> => {
    if (extraHeaders === undefined) return okHeadersPlain;
    let headers = okHeadersCache.get(extraHeaders);
    if (headers === undefined) {
      headers = Object.freeze({ "content-type": "application/json", ...extraHeaders });
      okHeadersCache.set(extraHeaders, headers);
    }
    return headers;
  };
  /** What {@link fastRoute} made of the last target it took (clients send the same one again). */
  let lastTarget = "";
  let lastTopic = "";
  let lastPath = "";
  let lastQuery = -1;
  /** The last `Content-Type` value seen and whether it names NDJSON. */
  let lastType: string | undefined;
  let lastTypeNdjson = false;

  /**
   * The produce route in front of the router (`HttpApp.fastRoute`), for the runtime's server: it
   * takes only requests it answers exactly as the route below would — `POST
   * /v1/topics/{topic}/records` with a topic of `[A-Za-z0-9._-]` (not `.` or `..`), no query (an
   * NDJSON body may have `?partition=N`), a `Content-Length` within the cap, no
   * `Transfer-Encoding`, at most one `Content-Type` line, no `Content-Encoding` (the router refuses
   * it, 415), no `Producer-*` header — and leaves every other request (null) to the router. The
   * authenticating wrapper adds its own conditions (`auth.ts`). With the whole body at hand (`RawRequest.body`) it decodes it at once, and only
   * the broker's promise stands between the request and its answer.
   */
  const fastRoute = (
    request: RawRequest,
    extraHeaders?: Record<string, string>,
  ): Promise<RawAnswer> | null => {
    if (request.method !== "POST") return null;
    const url = request.url;
    let topic: string;
    let path: string;
    let query: number;
    if (url === lastTarget) {
      topic = lastTopic;
      path = lastPath;
      query = lastQuery;
    } else {
      if (!url.startsWith("/v1/topics/")) return null;
      query = url.indexOf("?");
      path = query < 0 ? url : url.slice(0, query);
      const slash = path.indexOf("/", 11);
      if (slash < 0 || path.length !== slash + 8 || !path.endsWith("/records")) return null;
      topic = path.slice(11, slash);
      if (!/^[A-Za-z0-9._-]+$/.test(topic) || topic === "." || topic === "..") return null;
      lastTarget = url;
      lastTopic = topic;
      lastPath = path;
      lastQuery = query;
    }
    const length = request.header("content-length");
    if (
      length === undefined ||
      !/^[0-9]{1,16}$/.test(length) ||
      Number(length) > maxRequestBytes ||
      request.header("transfer-encoding") !== undefined ||
      request.headerLines("content-type") > 1 ||
      request.header("content-encoding") !== undefined ||
      request.header("producer-id") !== undefined ||
      request.header("producer-epoch") !== undefined ||
      request.header("producer-seq") !== undefined
    )
      return null;
    const typeText = request.header("content-type");
    if (typeText !== lastType) {
      const type = (typeText ?? "").split(";", 1)[0].trim().toLowerCase();
      lastType = typeText;
      lastTypeNdjson = type === "application/x-ndjson" || type === "application/ndjson";
    }
    const ndjson = lastTypeNdjson;
    let partitionText: string | undefined;
    if (query >= 0) {
      const m = ndjson ? /^partition=([0-9]{1,16})$/.exec(url.slice(query + 1)) : null;
      if (m === null) return null;
      partitionText = m[1];
    }
    const failed = (err: unknown): RawAnswer => {
      const answer = errorAnswer(err, "POST", path, () => url);
      return {
        status: answer.status,
        headers: { "content-type": "application/json", ...answer.headers, ...extraHeaders },
        body: answer.body,
      };
    };
    const body = request.body;
    if (body === undefined) {
      // The body is still to be read (`node:http`): as the route below, the query is checked
      // before it is.
      const answer = async (): Promise<RawAnswer> => {
        try {
          const action = `Cannot produce to topic ${quote(topic)}`;
          const partition = queryPartition(partitionText, action);
          const decoded = await decodeRawProduce(request, action, ndjson, partition);
          const produce = () => broker.produce({ topic, ...decoded, producer: undefined });
          const inOrder = request.appendInOrder;
          return produced(
            await (inOrder === undefined ? produce() : inOrder(produce)),
            decoded,
            extraHeaders,
          );
        } catch (err) {
          return failed(err);
        }
      };
      return answer();
    }
    let pending: Promise<ProduceResult>;
    let decoded: DecodedProduce;
    try {
      decoded = decodeWholeProduce(topic, body, ndjson, partitionText);
      pending = broker.produce({ topic, ...decoded, producer: undefined });
    } catch (err) {
      return Promise.resolve(failed(err));
    }
    return pending.then((result) => {
      try {
        return produced(result, decoded, extraHeaders);
      } catch (err) {
        return failed(err);
      }
    }, failed);
  };

  /** The fast route's success answer. */
  const produced = (
    result: ProduceResult,
    decoded: DecodedProduce,
    extraHeaders: Record<string, string> | undefined,
  ): RawAnswer => ({
    status: 200,
    headers: okHeaders(extraHeaders),
    body: produceAnswerJson(result, { recordCount: decoded.batch.count }),
  });

  /** The `partition` query parameter of an NDJSON produce, checked (undefined: none). */
  const queryPartition = (text: string | undefined, action: string): number | undefined =>
    text === undefined
      ? undefined
      : parseInteger(text, {
          label: 'query parameter "partition"',
          name: "partition",
          min: 0,
          max: partitionNumberMax,
          action,
        });

  /**
   * {@link decodeRawProduce} for a body already read whole: synchronous, and the error message's
   * action is made only when there is an error to name.
   */
  const decodeWholeProduce = (
    topic: string,
    body: Uint8Array,
    ndjson: boolean,
    partitionText: string | undefined,
  ): DecodedProduce => {
    if (!ndjson && body.length <= maxRequestBytes) {
      const scanned = scanJsonProduce(body);
      if (scanned !== undefined) return scanned;
    }
    const action = `Cannot produce to topic ${quote(topic)}`;
    const partition = queryPartition(partitionText, action);
    if (body.length > maxRequestBytes) throw requestTooLarge(maxRequestBytes);
    if (ndjson) return decodeNdjsonProduce(body, { action, key: null, partition });
    return decodeJsonProduce(parseJson(body, action, jsonProduceChecks(action)), {
      action,
      sizeHintBytes: body.length,
    });
  };

  /** `decodeProduceBody` for {@link fastRoute}: its own async function for the same reason. */
  const decodeRawProduce = async (
    request: RawRequest,
    action: string,
    ndjson: boolean,
    partition: number | undefined,
  ): Promise<DecodedProduce> => {
    let body: Uint8Array | null;
    try {
      body = await request.readBody(maxRequestBytes);
    } catch (e) {
      // The client went away mid-body or sent a broken stream: its fault, not a broker bug.
      throw invalidRequest(action, `the request body could not be read: ${errorMessage(e)}`);
    }
    if (body === null) throw requestTooLarge(maxRequestBytes);
    if (ndjson) return decodeNdjsonProduce(body, { action, key: null, partition });
    return (
      scanJsonProduce(body) ??
      decodeJsonProduce(parseJson(body, action, jsonProduceChecks(action)), {
        action,
        sizeHintBytes: body.length,
      })
    );
  };
  app.fastRoute = fastRoute;

  app.post("/v1/topics/:topic/records", async (c) => {
    limitBody(c);
    const topic = c.req.param("topic");
    const action = `Cannot produce to topic ${quote(topic)}`;
    const decoded = await decodeProduceBody(c, action);
    const producer = producerFromHeaders(c, action);
    const produce = () => broker.produce({ topic, ...decoded, producer });
    const inOrder = c.env?.appendInOrder;
    const result = await (inOrder === undefined ? produce() : inOrder(produce));
    const duplicate = producer === undefined ? undefined : result.duplicate === true;
    return c.body(produceAnswerJson(result, { recordCount: decoded.batch.count, duplicate }), 200, {
      "content-type": "application/json",
    });
  });

  app.get("/v1/topics/:topic/partitions/:partition/records", async (c) => {
    const topic = c.req.param("topic");
    const action = `Cannot fetch from partition ${quote(`${topic}/${c.req.param("partition")}`)}`;
    const partition = partitionParam(c, action);
    const offsetText = singleQuery(c, "offset", action);
    if (offsetText === undefined) {
      throw invalidRequest(
        action,
        'query parameter "offset" is required (an offset, "earliest" or "latest")',
        { parameter: "offset" },
      );
    }
    const maxRecords =
      integerQuery(c, "max_records", { min: 1, max: fetchRecordsMax, action }) ??
      fetchRecordsDefault;
    const maxBytes =
      integerQuery(c, "max_bytes", { min: 1, max: fetchBytesMax, action }) ?? fetchBytesDefault;
    const waitMs = integerQuery(c, "wait_ms", { min: 0, max: fetchWaitMsMax, action }) ?? 0;
    const encoding = encodingQuery(c, action);
    const ndjson = acceptsNdjson(c.req.header("accept"));
    const offset = await resolveOffset(broker, offsetText, { topic, partition, action });
    // Only a long-poll waits, so only a long-poll needs to hear of a disconnect or a shutdown.
    const signal = waitMs > 0 ? requestSignal(c) : undefined;
    // Counted like a TCP fetch: its max_bytes until the answer is built, then the answer; a
    // long-poll from its answer only (idle long-polls must not fill the cap).
    const held = waitMs > 0 ? null : c.env?.holdAnswerBytes?.(maxBytes, false);
    if (held) await held;
    const result = await broker.fetch({
      topic,
      partition,
      offset,
      maxRecords,
      maxBytes,
      waitMs,
      signal,
    });
    const answerBytesMax = answerBytesPerFetchByte * maxBytes;
    // A buffer of an earlier answer, where the server says when this one is written.
    const afterWritten = c.env?.afterAnswerWritten;
    const buffers = afterWritten === undefined ? undefined : answerBuffers;
    const answer = new FetchAnswer(
      result,
      encoding,
      ndjson ? "ndjson" : "json",
      answerBytesMax,
      buffers,
    );
    // A slice per event-loop turn, so that a large answer never holds up the other connections
    // for long (docs/http-api.md "Large answers are written a slice at a time").
    while (!answer.writeSlice(answerSliceBytes)) {
      await nextTurn();
      // The client is gone: nobody reads the rest.
      if (c.req.raw.signal.aborted) return new Response(null, { status: 499 });
    }
    fetchCounters.answers++;
    fetchCounters.slices += answer.slices;
    c.env?.holdAnswerBytes?.(answer.size, true);
    // Vary: the answer's form follows Accept, so a cache must not serve one for the other.
    const headers: Record<string, string> = ndjson
      ? {
          "content-type": "application/x-ndjson",
          vary: "Accept",
          "next-offset": String(answer.nextOffset),
          "high-watermark": String(result.highWatermark),
          "log-start-offset": String(result.logStartOffset),
        }
      : { "content-type": "application/json", vary: "Accept" };
    const chunks = answer.chunks;
    // One buffer (any answer to the default max_bytes): as it is, given back once written.
    if (chunks.length === 1) {
      if (buffers !== undefined) afterWritten!(() => buffers.give(chunks[0]));
      return c.body(chunks[0], 200, headers);
    }
    // More (a large answer): one after the other, not copied into one (`answerChunkBytes`).
    headers["content-length"] = String(answer.size);
    return c.body(chunksStream(chunks), 200, headers);
  });

  app.get("/v1/topics/:topic/partitions/:partition/stream", async (c) => {
    const topic = c.req.param("topic");
    const action = `Cannot stream partition ${quote(`${topic}/${c.req.param("partition")}`)}`;
    const partition = partitionParam(c, action);
    const encoding = encodingQuery(c, action);
    const offsetText = singleQuery(c, "offset", action);
    if (offsetText !== undefined && offsetText !== "earliest" && offsetText !== "latest") {
      parseInteger(offsetText, {
        label: 'query parameter "offset"',
        name: "offset",
        min: 0,
        max: offsetMax,
        action,
      });
    }
    const lastEventId = c.req.header("last-event-id");
    let offset: number;
    if (lastEventId !== undefined && lastEventId.trim() !== "") {
      const lastOffset = parseInteger(lastEventId.trim(), {
        label: 'header "Last-Event-ID"',
        name: "Last-Event-ID",
        min: 0,
        max: offsetMax - 1,
        action,
      });
      offset = lastOffset + 1;
    } else {
      offset = await resolveOffset(broker, offsetText ?? "latest", { topic, partition, action });
    }
    return streamRecords(
      c,
      { topic, partition, offset, encoding, signal: requestSignal(c) },
      { broker, logger, heartbeatMs },
    );
  });

  registerGroupRoutes(app, { broker, limitBody, readBody, parseJson });
  options.routes?.(app, { limitBody, readBody, parseJson });
  if (options.registry !== undefined)
    app.route(
      "/registry",
      createRegistryApp({
        registry: options.registry,
        logger,
        readBody,
        limitBody,
        authorize: options.authorizeRegistry,
      }),
    );
  registerStreamRoutes(app, {
    streams: broker.streams,
    logger,
    limitBody,
    readBody,
    longPollMs: streamLongPollMs,
    heartbeatMs,
    signal: requestSignal,
    nowMs: options.nowMs ?? (() => Date.now()),
  });

  return app;
}
