/**
 * Encoding of Durable Streams answers (docs/durable-streams.md "Answers and caching"): the
 * protocol's headers, the caching tiers and the error mapping. Every answer carries the browser
 * security headers of protocol §12.7 and CORS headers that expose the protocol's own.
 *
 * Caching (`Cache-Control`; the protocol leaves the values per answer open), one tier per kind of answer:
 *
 * | answer                                                        | Cache-Control                                   |
 * |---------------------------------------------------------------|-------------------------------------------------|
 * | data (catch-up or long-poll 200 with data), EOF of a closed stream | `public, max-age=60, stale-while-revalidate=300`: the bytes at a position never change (protocol §10.1); `private, …` when the request carries a key |
 * | an empty catch-up read at the tail of an open stream, `offset=now`, a long-poll 204 timeout | `no-store`: the answer changes as soon as data arrives; a cached one would loop readers |
 * | SSE                                                           | `no-cache`                                      |
 * | HEAD, PUT, POST, DELETE, every error                          | `no-store`                                      |
 *
 * Every answer says `Vary: Authorization`, and one to a request with a key (`Authorization`) is
 * `private`: a shared cache must never hand data read with a key to a request without it (RFC
 * 9111 §3.5 lets it reuse an authorized answer marked `public`).
 *
 * Live answers always carry `Stream-Cursor` (protocol §10.1), so readers that poll the same offset
 * through a cache move to a new key every 20 s at the latest.
 */
import { BrokerError, Errors } from "../../../broker/errors.ts";
import { formatStreamOffset } from "../../../broker/streams/offsets.ts";
import type { StreamInfo } from "../../../broker/streams/types.ts";
import { errorBody } from "../errors.ts";

/** `Cache-Control` of answers whose body can never change. */
export const cacheImmutable = "public, max-age=60, stale-while-revalidate=300";
/** `Cache-Control` of answers whose body can never change, read with a key: browsers only. */
export const cacheImmutablePrivate = "private, max-age=60, stale-while-revalidate=300";
/** `Cache-Control` of answers that must not be cached. */
export const cacheNone = "no-store";

/** Response headers a browser may read (CORS). */
const exposed = [
  "Stream-Next-Offset",
  "Stream-Cursor",
  "Stream-Up-To-Date",
  "Stream-Closed",
  "Stream-TTL",
  "Stream-Expires-At",
  "Stream-SSE-Data-Encoding",
  "Producer-Epoch",
  "Producer-Seq",
  "Producer-Expected-Seq",
  "Producer-Received-Seq",
  "ETag",
  "Location",
  "Content-Type",
].join(", ");

/** Request headers a browser may send (CORS preflight). */
export const allowedRequestHeaders = [
  "Content-Type",
  "Authorization",
  "If-None-Match",
  "Last-Event-ID",
  "Stream-TTL",
  "Stream-Expires-At",
  "Stream-Closed",
  "Stream-Seq",
  "Stream-Forked-From",
  "Stream-Fork-Offset",
  "Stream-Fork-Sub-Offset",
  "Producer-Id",
  "Producer-Epoch",
  "Producer-Seq",
].join(", ");

/** Headers on every answer of the protocol (protocol §12.7, CORS). */
export function baseHeaders(cacheControl: string): Headers {
  return new Headers({
    "cache-control": cacheControl,
    vary: "Authorization",
    "x-content-type-options": "nosniff",
    "cross-origin-resource-policy": "cross-origin",
    "access-control-allow-origin": "*",
    "access-control-expose-headers": exposed,
  });
}

/** Adds what describes the stream: its content type, tail or next offset, closure, TTL and expiry. */
export function describe(
  headers: Headers,
  info: StreamInfo,
  nextOffset: number = info.tail,
): Headers {
  headers.set("content-type", info.contentType);
  headers.set("stream-next-offset", formatStreamOffset(nextOffset));
  if (info.closedAt !== undefined && nextOffset >= info.closedAt)
    headers.set("stream-closed", "true");
  return headers;
}

/** The ETag of a read of `[start, next)` (protocol §10.1: it changes when the stream closes). */
export function etag(
  info: StreamInfo,
  range: { start: number; next: number; closed: boolean },
): string {
  return `"${info.id}:${range.start}:${range.next}${range.closed ? ":c" : ""}"`;
}

/** True when an `If-None-Match` value lists `tag` (or is `*`). */
export function matchesEtag(ifNoneMatch: string | undefined, tag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  return ifNoneMatch
    .split(",")
    .map((t) => t.trim().replace(/^W\//, ""))
    .some((t) => t === tag || t === "*");
}

/**
 * The answer for a refused request: the JSON error body of every es-broker route with the table's
 * status, `no-store`, and the protocol's headers its details carry — `Stream-Closed` and
 * `Stream-Next-Offset` for a closed stream, `Producer-Epoch` for a fenced producer,
 * `Producer-Expected-Seq` / `Producer-Received-Seq` for a sequence gap.
 */
export function errorResponse(error: BrokerError): Response {
  const headers = baseHeaders(cacheNone);
  headers.set("content-type", "application/json");
  const d = error.details ?? {};
  if (error.kind === Errors.streamClosed) {
    headers.set("stream-closed", "true");
    if (typeof d.next_offset === "number")
      headers.set("stream-next-offset", formatStreamOffset(d.next_offset));
  } else if (error.kind === Errors.producerFenced && typeof d.expected_epoch === "number") {
    headers.set("producer-epoch", String(d.expected_epoch));
  } else if (error.kind === Errors.outOfOrderSequence) {
    if (typeof d.expected_sequence === "number")
      headers.set("producer-expected-seq", String(d.expected_sequence));
    if (typeof d.received_sequence === "number")
      headers.set("producer-received-seq", String(d.received_sequence));
  }
  return new Response(JSON.stringify(errorBody(error)), { status: error.kind.http, headers });
}

/** The body of a read: `[` + values joined by `,` + `]` for JSON streams, the bytes back to back otherwise. */
export function readBody(info: StreamInfo, values: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const v of values) size += v.length;
  if (info.json) size += 2 + Math.max(0, values.length - 1);
  const out = new Uint8Array(size);
  let at = 0;
  if (info.json) out[at++] = 0x5b;
  values.forEach((v, i) => {
    if (info.json && i > 0) out[at++] = 0x2c;
    out.set(v, at);
    at += v.length;
  });
  if (info.json) out[at++] = 0x5d;
  return out;
}

/** A BrokerError for anything else thrown while serving a stream (a bug; the caller logs it). */
export function internalError(method: string, path: string): BrokerError {
  return new BrokerError(
    Errors.internal,
    `Cannot complete ${method} ${path}: internal error (logged)`,
  );
}
