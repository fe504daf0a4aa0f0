/**
 * Decoding of Durable Streams requests (docs/durable-streams.md "Requests"): the stream path from
 * the URL, the protocol's headers and query parameters. Every refusal is a 400 `invalid_request`
 * naming the header or parameter, its value and the accepted form; nothing here holds protocol
 * state.
 */
import type { Context } from "hono";
import { BrokerError, Errors } from "../../../broker/errors.ts";
import { parseStreamOffset, type StreamPosition } from "../../../broker/streams/offsets.ts";
import type { StreamProducer } from "../../../broker/streams/types.ts";
import { offsetMax, producerEpochMax, streamTtlSecondsMax } from "../../../lib/limits.ts";

/** The prefix every stream URL starts with. */
export const streamPathPrefix = "/v1/stream/";

function invalid(what: string, detail: string): BrokerError {
  return new BrokerError(Errors.invalidRequest, `Invalid ${what}: ${detail}`, { parameter: what });
}

function shown(text: string): string {
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}…` : text);
}

/**
 * The stream path of a URL path that starts with `/v1/stream/`: each segment percent-decoded on
 * its own (strict UTF-8). A percent-encoded `/` is refused rather than guessed at (one stream or
 * a deeper path?); the broker then checks the path itself (`validateStreamPath`: no empty, `.`
 * or `..` segment, no control character, the length limit). Dot segments the client wrote are
 * resolved by the URL parser of the runtime before any of this (RFC 3986 §5.2.4).
 * @throws BrokerError invalid_request.
 */
export function decodeStreamPath(rawPath: string, what = "stream path"): string {
  if (!rawPath.startsWith(streamPathPrefix))
    throw invalid(
      what,
      `${shown(rawPath)} does not start with ${JSON.stringify(streamPathPrefix)}`,
    );
  const segments = rawPath.slice(streamPathPrefix.length).split("/");
  return segments
    .map((segment) => {
      if (/%2f/i.test(segment))
        throw invalid(what, `${shown(rawPath)} has a percent-encoded "/" (%2F) in a segment`);
      try {
        return decodeURIComponent(segment);
      } catch {
        throw invalid(what, `${shown(rawPath)} has a bad percent-encoding (not UTF-8)`);
      }
    })
    .join("/");
}

/** The raw (undecoded) path of a request URL: from the first "/" after the authority to "?" or "#". */
export function rawUrlPath(url: string): string {
  const start = url.indexOf("/", url.indexOf("://") + 3);
  if (start < 0) return "/";
  let end = url.length;
  for (const stop of ["?", "#"]) {
    const at = url.indexOf(stop, start);
    if (at >= 0 && at < end) end = at;
  }
  return url.slice(start, end);
}

/**
 * A single-valued protocol header (`Content-Type`, `Stream-*`, `Producer-*`, `Last-Event-ID`);
 * undefined when absent. Given on more than one field line it is refused, never joined: the
 * runtime's `Headers` would hand over `a, b`, which reads as one (wrong) producer id, sequence or
 * path. Where the runtime keeps the field lines apart (`HttpBindings.headerLines`: Node, Bun,
 * Deno with TLS) they are counted; where it does not (`Deno.serve`), a value containing ", " —
 * how every runtime joins repeats — is refused as a repeat (docs/durable-streams.md "Requests").
 * @throws BrokerError invalid_request naming the header.
 */
export function header(c: Context, name: string): string | undefined {
  const value = c.req.header(name);
  if (value === undefined) return undefined;
  const lines = (c.env as { headerLines?: (name: string) => number } | undefined)?.headerLines;
  const repeated = lines === undefined ? value.includes(", ") : lines(name) > 1;
  if (repeated)
    throw invalid(
      `header "${canonicalName(name)}"`,
      lines === undefined
        ? `${shown(value)} holds ", ", which is how a repeated header arrives here; give it once, without ", "`
        : `given ${lines(name)} times, it must be given once`,
    );
  return value;
}

/** `stream-fork-offset` → `Stream-Fork-Offset`, for messages. */
function canonicalName(name: string): string {
  return name.replace(
    /(^|-)([a-z])/g,
    (_, dash: string, letter: string) => dash + letter.toUpperCase(),
  );
}

/** A query parameter given at most once; undefined when absent. @throws BrokerError invalid_request if repeated. */
export function singleQuery(c: Context, name: string): string | undefined {
  const values = c.req.queries(name);
  if (values === undefined || values.length === 0) return undefined;
  if (values.length > 1)
    throw invalid(
      `query parameter "${name}"`,
      `given ${values.length} times, at most once is allowed`,
    );
  return values[0];
}

/** `offset` (or `Last-Event-ID`) as a position; undefined when absent. */
export function parseOffsetParam(
  text: string | undefined,
  what: string,
): StreamPosition | undefined {
  if (text === undefined) return undefined;
  return parseStreamOffset(text, what);
}

/**
 * A non-negative integer in canonical decimal — no sign, leading zero, space, fraction or
 * exponent (`0`, `17`; not `017`, `+17`, `1 7`, `1.0`, `1e1`) — up to `max`, at most 2^53 − 1.
 */
function strictInteger(text: string, what: string, max: number): number {
  if (!/^(0|[1-9][0-9]*)$/.test(text) || text.length > 16 || Number(text) > max)
    throw invalid(what, `${shown(text)} must be an integer from 0 to ${max}, in plain decimal`);
  return Number(text);
}

/**
 * `Stream-TTL` in seconds; undefined when absent. 0 is refused: the protocol's grammar allows
 * it, but a stream that expires as soon as it is idle is gone before any reader could see it
 * (docs/durable-streams.md "Requests", on TTL and expiry).
 */
export function parseTtl(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const ttl = strictInteger(text.trim(), 'header "Stream-TTL"', streamTtlSecondsMax);
  if (ttl === 0)
    throw invalid(
      'header "Stream-TTL"',
      '"0" would expire the stream at once; give 1 or more seconds',
    );
  return ttl;
}

const rfc3339 =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?([Zz]|[+-]([0-9]{2}):([0-9]{2}))$/;

/** Days in `month` (1–12) of `year` (proleptic Gregorian). */
function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/**
 * `Stream-Expires-At` (RFC 3339 §5.6); undefined when absent. Every field is range-checked before
 * the runtime's date parser sees it, which would roll February 30 over into March: month 01–12,
 * day within its month, hour 00–23, minute and second 00–59 (a leap second, 60, is refused: the
 * broker's clock has none), offset up to 23:59.
 * @throws BrokerError invalid_request naming the header.
 */
export function parseExpiresAt(text: string | undefined): { text: string; ms: number } | undefined {
  if (text === undefined) return undefined;
  const trimmed = text.trim();
  const m = rfc3339.exec(trimmed);
  const n = (i: number) => Number(m?.[i] ?? 0);
  const valid =
    m !== null &&
    n(2) >= 1 &&
    n(2) <= 12 &&
    n(3) >= 1 &&
    n(3) <= daysInMonth(n(1), n(2)) &&
    n(4) <= 23 &&
    n(5) <= 59 &&
    n(6) <= 59 &&
    n(9) <= 23 &&
    n(10) <= 59;
  const ms = valid ? Date.parse(trimmed.replace(" ", "T")) : Number.NaN;
  if (!Number.isFinite(ms) || ms < 0)
    throw invalid(
      'header "Stream-Expires-At"',
      `${shown(text)} is not a valid RFC 3339 timestamp (e.g. 2030-01-31T12:00:00Z; every field in range)`,
    );
  return { text: trimmed, ms };
}

/**
 * `Stream-Closed`: present only when its value is `true` in any case. Any other value (`false`,
 * `yes`, `maybe`, empty) is treated as if the header were absent, never refused: protocol §4.1
 * says servers MUST treat it so and SHOULD NOT answer an error for it.
 */
export function parseClosed(text: string | undefined): boolean {
  return text !== undefined && text.trim().toLowerCase() === "true";
}

/**
 * `Stream-Forked-From` as a stream path: this server's own path form `/v1/stream/{source}`, or
 * an absolute URL of this very origin (`requestUrl`'s scheme, host and port). Protocol §4.2:
 * the source is on the same server; a URL naming another host is refused rather than read as a
 * local path, as are a network-path reference (`//host/…`), a query and a fragment.
 * @throws BrokerError invalid_request naming the header.
 */
export function parseForkedFrom(text: string, requestUrl: string): string {
  const what = 'header "Stream-Forked-From"';
  const value = text.trim();
  let path = value;
  if (!value.startsWith("/") || value.startsWith("//")) {
    let origin: string | undefined;
    try {
      if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) origin = new URL(value).origin;
    } catch {
      origin = undefined;
    }
    if (origin === undefined || origin !== new URL(requestUrl).origin)
      throw invalid(
        what,
        `${shown(text)} is not a stream of this server: give its path, ${streamPathPrefix}{source} (forking from another server is not supported)`,
      );
    const start = value.indexOf("/", value.indexOf("://") + 3);
    path = start < 0 ? "/" : value.slice(start);
  }
  if (/[?#\s]/.test(path))
    throw invalid(
      what,
      `${shown(text)} has a query, a fragment or a space; give the stream's path only`,
    );
  return decodeStreamPath(path, what);
}

/** `Stream-Fork-Sub-Offset`; undefined when absent. */
export function parseSubOffset(text: string | undefined): number | undefined {
  return text === undefined
    ? undefined
    : strictInteger(text.trim(), 'header "Stream-Fork-Sub-Offset"', offsetMax);
}

/**
 * `Producer-Id`, `Producer-Epoch`, `Producer-Seq`: all three or none (protocol §5.2.1).
 * @throws BrokerError invalid_request when only some are given or one is malformed.
 */
export function parseProducer(c: Context): StreamProducer | undefined {
  const id = header(c, "producer-id");
  const epoch = header(c, "producer-epoch");
  const seq = header(c, "producer-seq");
  if (id === undefined && epoch === undefined && seq === undefined) return undefined;
  if (id === undefined || epoch === undefined || seq === undefined)
    throw invalid(
      "producer headers",
      "Producer-Id, Producer-Epoch and Producer-Seq must be given together",
    );
  if (id.length === 0) throw invalid('header "Producer-Id"', "it is empty");
  return {
    id,
    epoch: strictInteger(epoch.trim(), 'header "Producer-Epoch"', producerEpochMax),
    seq: strictInteger(seq.trim(), 'header "Producer-Seq"', offsetMax),
  };
}
