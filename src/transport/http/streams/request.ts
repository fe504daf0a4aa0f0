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

/** A header given at most once (Hono joins repeats with ", "); undefined when absent. */
export function header(c: Context, name: string): string | undefined {
  return c.req.header(name);
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

/** A non-negative decimal integer without sign, leading zeros, fraction or exponent, up to `max`. */
function strictInteger(text: string, what: string, max: number): number {
  if (!/^(0|[1-9][0-9]*)$/.test(text) || text.length > 16 || Number(text) > max)
    throw invalid(what, `${shown(text)} must be an integer from 0 to ${max}, in plain decimal`);
  return Number(text);
}

/** `Stream-TTL` in seconds; undefined when absent. */
export function parseTtl(text: string | undefined): number | undefined {
  return text === undefined
    ? undefined
    : strictInteger(text.trim(), 'header "Stream-TTL"', streamTtlSecondsMax);
}

const rfc3339 =
  /^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$/;

/** `Stream-Expires-At` (RFC 3339); undefined when absent. */
export function parseExpiresAt(text: string | undefined): { text: string; ms: number } | undefined {
  if (text === undefined) return undefined;
  const trimmed = text.trim();
  const ms = rfc3339.test(trimmed) ? Date.parse(trimmed.replace(" ", "T")) : Number.NaN;
  if (!Number.isFinite(ms) || ms < 0)
    throw invalid('header "Stream-Expires-At"', `${shown(text)} is not an RFC 3339 timestamp`);
  return { text: trimmed, ms };
}

/** `Stream-Closed`: present only when its value is `true` in any case (protocol §4.1); other values are ignored. */
export function parseClosed(text: string | undefined): boolean {
  return text !== undefined && text.trim().toLowerCase() === "true";
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
    epoch: strictDigits(epoch.trim(), 'header "Producer-Epoch"', producerEpochMax),
    seq: strictDigits(seq.trim(), 'header "Producer-Seq"', offsetMax),
  };
}

/** Plain decimal digits (leading zeros allowed) up to `max`. */
function strictDigits(text: string, what: string, max: number): number {
  if (!/^[0-9]{1,16}$/.test(text) || Number(text) > max)
    throw invalid(what, `${shown(text)} must be an integer from 0 to ${max}, in plain decimal`);
  return Number(text);
}
