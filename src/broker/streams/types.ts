/**
 * The operations of the Durable Streams protocol as the broker offers them
 * (`broker/streams/service.ts`; docs/durable-streams.md). The HTTP routes of
 * `transport/http/streams/` decode a request into one of these calls and encode the result; every
 * error is a {@link BrokerError} whose row of the error table (and `details`) the routes turn into
 * the protocol's status and headers.
 */
import type { StreamPosition } from "./offsets.ts";

/** An idempotent producer of the protocol: `Producer-Id`, `Producer-Epoch`, `Producer-Seq`. */
export interface StreamProducer {
  /** Non-empty, at most `streamProducerIdBytesMax` bytes; scoped to the stream (two streams' "p" are two producers). */
  id: string;
  /** 0 … 2^31 − 1 (es-broker's epoch range; the protocol allows up to 2^53 − 1). */
  epoch: number;
  /** Per request (not per message), from 0 in each epoch; 0 … 2^53 − 1. */
  seq: number;
}

/** What a stream is, as HEAD and every answer describe it. */
export interface StreamInfo {
  path: string;
  /** The topic holding it (`broker/streams/names.ts`). */
  topic: string;
  /** This incarnation of the path (ETags). */
  id: string;
  /** As given at creation (or inherited from the fork's source). */
  contentType: string;
  /** True for `application/json` streams (protocol §9.1). */
  json: boolean;
  /** True when SSE carries the data as text (`text/*`, JSON); otherwise base64. */
  text: boolean;
  /** The stream position after its last durable record. */
  tail: number;
  /** Set once the stream is closed: the position after its final record. */
  closedAt?: number;
  ttlSeconds?: number;
  /** RFC 3339, as given. */
  expiresAt?: string;
}

/** Arguments of {@link Streams.create} (PUT). */
export interface StreamCreateRequest {
  path: string;
  /** `Content-Type`, or undefined when absent (default `application/octet-stream`; a fork inherits its source's). */
  contentType?: string;
  ttlSeconds?: number;
  /** `Stream-Expires-At`: the text and its instant in ms. */
  expiresAt?: { text: string; ms: number };
  /** `Stream-Closed: true`: created closed, the body its whole content. */
  closed: boolean;
  /** `Stream-Forked-From` (a stream path) with `Stream-Fork-Offset` and `Stream-Fork-Sub-Offset`. */
  fork?: { sourcePath: string; offset?: StreamPosition; subOffset?: number };
  /** The initial content (may be empty). */
  body: Uint8Array;
}

/** Arguments of {@link Streams.append} (POST). */
export interface StreamAppendRequest {
  path: string;
  /** `Content-Type` as sent; undefined when absent. */
  contentType?: string;
  body: Uint8Array;
  /** `Stream-Closed: true`: close after appending (or close only, with an empty body). */
  close: boolean;
  /** `Stream-Seq`. */
  streamSeq?: string;
  producer?: StreamProducer;
}

/** What an append did. */
export interface StreamAppendResult {
  /** `appended` (new data), `duplicate` (an idempotent retry: nothing appended), `closed` (a close with no data). */
  outcome: "appended" | "duplicate" | "closed";
  /** `Stream-Next-Offset`: after this append's record, or the stream's tail. */
  nextOffset: number;
  /** True when the stream is closed now (by this request or before). */
  closed: boolean;
  /** With a producer: its epoch, and the highest sequence accepted in that epoch. */
  producer?: { epoch: number; seq: number };
}

/** Arguments of {@link Streams.read} (GET, catch-up or long-poll). */
export interface StreamReadRequest {
  path: string;
  position: StreamPosition;
  /** Wait up to this many ms for data when there is none at the position (0: catch-up). */
  waitMs: number;
  /** At most about this many bytes (one record may exceed it). */
  maxBytes: number;
  /** Ends a wait early. */
  signal?: AbortSignal;
}

/** The data of a read: the values of the records in `[start, next)`, in order. */
export interface StreamReadResult {
  info: StreamInfo;
  values: Uint8Array[];
  /** The position read from (a sentinel resolved). */
  start: number;
  /** `Stream-Next-Offset`. */
  next: number;
  /** `Stream-Up-To-Date`: nothing more was durable when the read ended. */
  upToDate: boolean;
  /** `Stream-Closed`: the stream is closed and `next` is its final position. */
  closed: boolean;
}

/** The Durable Streams operations (module comment). */
export interface Streams {
  /** Creates a stream, or confirms an identical one (`created` false). @throws stream_conflict, stream_not_found (fork source), invalid_request. */
  create(request: StreamCreateRequest): Promise<{ created: boolean; info: StreamInfo }>;
  /** Appends, closes, or both. @throws stream_not_found, stream_gone, stream_closed, content_type_mismatch, stream_seq_conflict, producer_fenced, out_of_order_sequence, invalid_request. */
  append(request: StreamAppendRequest): Promise<StreamAppendResult>;
  /** Reads from a position, waiting for data if asked. @throws stream_not_found, stream_gone, invalid_request. */
  read(request: StreamReadRequest): Promise<StreamReadResult>;
  /** Resolves once the stream has data at `position`, is closed or deleted, after `waitMs`, or on abort. */
  waitForData(request: {
    path: string;
    position: number;
    waitMs: number;
    signal?: AbortSignal;
  }): Promise<void>;
  /** HEAD: what the stream is, without counting as a read (its TTL is not renewed). */
  head(path: string): StreamInfo;
  /** Deletes a stream (soft-deletes it while forks read it). @throws stream_not_found, stream_gone. */
  delete(path: string): Promise<void>;
  /** A cursor for a live answer, given the client's (`broker/streams/cursor.ts`). */
  cursor(clientCursor: string | undefined): string;
}
