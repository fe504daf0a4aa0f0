/**
 * What makes a topic a Durable Stream: the `stream` section of its `topic.json`
 * (docs/durable-streams.md "What a stream's topic holds"), written atomically with the rest of the
 * file by the topic registry. Field names are snake_case, like the topic config's.
 *
 * ```json
 * "stream": {
 *   "path": "chat/room-1",             the stream path (the topic name may be hashed)
 *   "id": "18c3f2a9b0e1-0004",          this incarnation: ETags, producer state
 *   "content_type": "application/json",
 *   "created_ms": 1700000000000,
 *   "initial_records": 1,               records the creation appends (its commit check)
 *   "ttl_seconds": 3600,                sliding TTL (or none)
 *   "expires_at": "2025-01-01T00:00:00Z", "expires_at_ms": 1735689600000,   absolute expiry (or none)
 *   "closed": { "offset": 7, "producer": { "id": "p", "epoch": 0, "seq": 3 } },
 *   "fork": { "source": "chat.room", "source_path": "chat/room", "anchor": 5, "sub_offset": 0, "offset": 5 },
 *   "deleted": true                     soft-deleted: forks still read it
 * }
 * ```
 *
 * `closed.offset` is the stream position after the final record; `fork.offset` is the position of
 * the fork's own record 0 (everything below it is read from `fork.source`); `fork.anchor` and
 * `fork.sub_offset` are the fork point the creator asked for (idempotent re-creation compares them).
 */
import { offsetMax, streamTtlSecondsMax } from "../../lib/limits.ts";

/** The idempotent producer request that closed a stream (a retry of it is answered as a duplicate). */
export interface StreamCloser {
  id: string;
  epoch: number;
  seq: number;
}

/** Where a fork's inherited data comes from. */
export interface StreamForkOrigin {
  /** The source stream's topic name. */
  source: string;
  /** The source stream's path. */
  source_path: string;
  /** The position the creator named (`Stream-Fork-Offset`, or the source's tail then). */
  anchor: number;
  /** `Stream-Fork-Sub-Offset` (0 when absent). */
  sub_offset: number;
  /** Position of the fork's own record 0: positions below it are read from the source. */
  offset: number;
}

/** The `stream` section of a stream topic's `topic.json` (module comment). */
export interface StreamMeta {
  path: string;
  id: string;
  content_type: string;
  created_ms: number;
  initial_records: number;
  ttl_seconds?: number;
  expires_at?: string;
  expires_at_ms?: number;
  closed?: { offset: number; producer?: StreamCloser };
  fork?: StreamForkOrigin;
  deleted?: boolean;
}

function fail(field: string, why: string): never {
  throw new Error(`stream.${field} ${why}`);
}

function position(value: unknown, field: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0 || value > offsetMax)
    fail(field, "must be an integer from 0 to 2^53 - 1");
  return value;
}

function text(value: unknown, field: string): string {
  if (typeof value !== "string" || value.length === 0) fail(field, "must be a non-empty string");
  return value;
}

const known = new Set([
  "path",
  "id",
  "content_type",
  "created_ms",
  "initial_records",
  "ttl_seconds",
  "expires_at",
  "expires_at_ms",
  "closed",
  "fork",
  "deleted",
]);

/**
 * Validates the `stream` section read from a `topic.json`.
 * @throws Error naming the bad field (the registry then makes the topic unavailable, docs/decisions.md §9).
 */
export function parseStreamMeta(value: unknown): StreamMeta {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new Error("stream must be an object");
  const v = value as Record<string, unknown>;
  for (const key of Object.keys(v)) if (!known.has(key)) fail(key, "is not a known field");
  const meta: StreamMeta = {
    path: text(v.path, "path"),
    id: text(v.id, "id"),
    content_type: text(v.content_type, "content_type"),
    created_ms: position(v.created_ms, "created_ms"),
    initial_records: position(v.initial_records, "initial_records"),
  };
  if (v.ttl_seconds !== undefined) {
    const ttl = v.ttl_seconds;
    if (
      typeof ttl !== "number" ||
      !Number.isSafeInteger(ttl) ||
      ttl < 0 ||
      ttl > streamTtlSecondsMax
    )
      fail("ttl_seconds", `must be an integer from 0 to ${streamTtlSecondsMax}`);
    meta.ttl_seconds = ttl;
  }
  if (v.expires_at !== undefined || v.expires_at_ms !== undefined) {
    meta.expires_at = text(v.expires_at, "expires_at");
    meta.expires_at_ms = position(v.expires_at_ms, "expires_at_ms");
  }
  if (v.closed !== undefined) {
    const c = v.closed as Record<string, unknown> | null;
    if (typeof c !== "object" || c === null) fail("closed", "must be an object");
    meta.closed = { offset: position(c.offset, "closed.offset") };
    if (c.producer !== undefined) {
      const p = c.producer as Record<string, unknown> | null;
      if (typeof p !== "object" || p === null) fail("closed.producer", "must be an object");
      meta.closed.producer = {
        id: text(p.id, "closed.producer.id"),
        epoch: position(p.epoch, "closed.producer.epoch"),
        seq: position(p.seq, "closed.producer.seq"),
      };
    }
  }
  if (v.fork !== undefined) {
    const f = v.fork as Record<string, unknown> | null;
    if (typeof f !== "object" || f === null) fail("fork", "must be an object");
    meta.fork = {
      source: text(f.source, "fork.source"),
      source_path: text(f.source_path, "fork.source_path"),
      anchor: position(f.anchor, "fork.anchor"),
      sub_offset: position(f.sub_offset, "fork.sub_offset"),
      offset: position(f.offset, "fork.offset"),
    };
  }
  if (v.deleted !== undefined) {
    if (v.deleted !== true) fail("deleted", "must be true when present");
    meta.deleted = true;
  }
  return meta;
}

/** The media type of a Content-Type value, lower case, without parameters ("" for none). */
export function mediaType(contentType: string | null | undefined): string {
  if (contentType === null || contentType === undefined) return "";
  return contentType.split(";", 1)[0].trim().toLowerCase();
}

/** How a stream's records are framed on reads: JSON arrays, or bytes as they are. */
export function isJsonStream(meta: StreamMeta): boolean {
  return mediaType(meta.content_type) === "application/json";
}

/**
 * True when SSE carries the stream's data as text (`text/*` and `application/json`); other
 * content types are base64-encoded (protocol §5.8).
 */
export function isTextStream(meta: StreamMeta): boolean {
  const type = mediaType(meta.content_type);
  return type.startsWith("text/") || type === "application/json";
}
