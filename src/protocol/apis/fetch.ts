/**
 * api 1 Fetch, version 0: reads stored records of one partition, waiting up to `wait_ms` when
 * none are at `offset` yet (`Broker.fetch`).
 *
 * ```
 * request       = topic str16
 *                 partition u32
 *                 offset u64
 *                 max_records u32       0 = broker default
 *                 max_bytes u32         0 = broker default
 *                 wait_ms u32           long-poll wait when nothing is available at offset
 * response      = high_watermark u64
 *                 log_start_offset u64
 *                 next_offset u64
 *                 record_count u32
 *                 records_bytes u32     must equal the bytes that follow
 *                 records [u8]          stored records verbatim (record_len | offset | timestamp |
 *                                       key_len | key | value_len | value | crc32)
 * ```
 *
 * The response goes out as two chunks, so the stored records are never copied into a frame
 * buffer ({@link encodeFetchResponseChunks}); the transport charges a fetch's `max_bytes` to the
 * connection's in-flight budget until it is answered.
 */
import type { FetchRequest, FetchResult } from "../../broker/types.ts";
import { fetchBytesDefault } from "../../lib/limits.ts";
import {
  finishFrame,
  frameLengthBytes,
  responseLengthMin,
  startRequest,
  startResponse,
} from "../envelope.ts";
import { requireInt, strBytes, WireReader } from "../wire.ts";
import { type Answer, defineApi, type Served } from "./api.ts";

/**
 * Fetch: decode, `broker.fetch` (aborted with the connection), encode as two chunks; once the
 * answer is written, the read's buffer goes back for reuse (`FetchResult.release`).
 */
export const fetchApi = defineApi({
  key: 1,
  name: "Fetch",
  versionMax: 0,
  serve(body, _correlationId, connection): Served {
    const request = decodeFetchRequest(body);
    const { broker } = connection;
    return {
      // Only a long-poll waits: reading the connection's signal makes it (FramedConnection.signal).
      response: broker.fetch(
        (request.waitMs ?? 0) > 0 ? { ...request, signal: connection.signal } : request,
      ),
      encode: encodeFetchResponseChunks as (correlationId: number, result: unknown) => Answer,
      answerBytes: request.maxBytes ?? fetchBytesDefault,
      written: releaseFetchResult,
    };
  },
});

/** Gives a written fetch answer's read buffer back (`FetchResult.release`). */
function releaseFetchResult(result: unknown): void {
  (result as FetchResult).release?.();
}

/** Bytes of the fixed part of a Fetch response before `records`. */
export const fetchResponseHeaderBytes = 32;
/** Bytes of a Fetch response frame before `records`: `length`, `correlation_id`, `error` and the fixed part. */
export const fetchResponsePrefixBytes =
  frameLengthBytes + responseLengthMin + fetchResponseHeaderBytes;

/** What a Fetch request carries (the broker's {@link FetchRequest} without the abort signal). */
export type FetchRequestFields = Omit<FetchRequest, "signal">;

/**
 * Encodes a Fetch request frame. Omitted `maxRecords`, `maxBytes` encode as 0 (broker default);
 * omitted `waitMs` as 0 (no wait).
 * @throws ProtocolError `invalid_request` for a value outside its field's range.
 */
export function encodeFetchRequest(correlationId: number, request: FetchRequestFields): Uint8Array {
  const topic = strBytes(request.topic, "fetch.topic");
  requireInt(request.partition, 0, 0xffff_ffff, "fetch.partition");
  requireInt(request.offset, 0, Number.MAX_SAFE_INTEGER, "fetch.offset");
  const maxRecords = request.maxRecords ?? 0;
  const maxBytes = request.maxBytes ?? 0;
  const waitMs = request.waitMs ?? 0;
  requireInt(maxRecords, 0, 0xffff_ffff, "fetch.max_records");
  requireInt(maxBytes, 0, 0xffff_ffff, "fetch.max_bytes");
  requireInt(waitMs, 0, 0xffff_ffff, "fetch.wait_ms");
  const w = startRequest(fetchApi.key, correlationId, 12 + 2 + topic.length + 24);
  w.u16(topic.length)
    .bytes(topic)
    .u32(request.partition)
    .u64(request.offset)
    .u32(maxRecords)
    .u32(maxBytes)
    .u32(waitMs);
  return finishFrame(w);
}

/**
 * Decodes a Fetch request body. `max_records` / `max_bytes` of 0 are left out (broker default);
 * `wait_ms` is passed as is (the broker checks its range).
 * @throws ProtocolError `invalid_request` naming the field, `unsupported` for an offset above 2^53 − 1.
 */
export function decodeFetchRequest(body: Uint8Array): FetchRequestFields {
  const r = new WireReader(body, "Fetch request");
  const topic = r.str16Recent("topic");
  const partition = r.u32("partition");
  const offset = r.u64("offset");
  const maxRecords = r.u32("max_records");
  const maxBytes = r.u32("max_bytes");
  const waitMs = r.u32("wait_ms");
  r.end("wait_ms");
  const request: FetchRequestFields = { topic, partition, offset, waitMs };
  if (maxRecords !== 0) request.maxRecords = maxRecords;
  if (maxBytes !== 0) request.maxBytes = maxBytes;
  return request;
}

/**
 * Encodes a Fetch response frame as two chunks: the frame header and the fixed fields (`length`
 * through `records_bytes`, {@link fetchResponsePrefixBytes} bytes, its `length` counting the records
 * too) and the stored records themselves, not copied. Writing the two back to back gives exactly
 * the frame {@link encodeFetchResponse} builds; the transport writes them as one gathered write so
 * the stored bytes are never copied into a frame buffer. The records view must stay unchanged
 * until it is written.
 */
export function encodeFetchResponseChunks(
  correlationId: number,
  result: FetchResult,
): [prefix: Uint8Array, records: Uint8Array] {
  const records = result.records.bytes;
  const w = startResponse(correlationId, 0, fetchResponsePrefixBytes);
  w.u64(result.highWatermark).u64(result.logStartOffset).u64(result.nextOffset);
  w.u32(result.records.count).u32(records.length);
  w.patchU32(0, w.position - frameLengthBytes + records.length);
  return [w.finish(), records];
}

/** Encodes a Fetch response frame in one buffer; the records are copied verbatim (see {@link encodeFetchResponseChunks}). */
export function encodeFetchResponse(correlationId: number, result: FetchResult): Uint8Array {
  const [prefix, records] = encodeFetchResponseChunks(correlationId, result);
  const frame = new Uint8Array(prefix.length + records.length);
  frame.set(prefix);
  frame.set(records, prefix.length);
  return frame;
}

/** The fixed fields of a Fetch response body, before `records`. */
export interface FetchResponseHeader {
  highWatermark: number;
  logStartOffset: number;
  nextOffset: number;
  /** `record_count`. */
  recordCount: number;
  /** `records_bytes`: the bytes of records that must follow. */
  recordsBytes: number;
}

/**
 * Decodes the fixed fields of a Fetch response body (its first {@link fetchResponseHeaderBytes}
 * bytes; what follows is not looked at), for a reader that takes the records from elsewhere
 * (e.g. the chunks they arrived in). It checks nothing about the records: compare `recordsBytes`
 * with the bytes that follow.
 * @throws ProtocolError if fewer than {@link fetchResponseHeaderBytes} bytes are given, or an offset is above 2^53 − 1.
 */
export function decodeFetchResponseHeader(bytes: Uint8Array): FetchResponseHeader {
  const r = new WireReader(bytes, "Fetch response");
  const highWatermark = r.u64("high_watermark");
  const logStartOffset = r.u64("log_start_offset");
  const nextOffset = r.u64("next_offset");
  const recordCount = r.u32("record_count");
  const recordsBytes = r.u32("records_bytes");
  return { highWatermark, logStartOffset, nextOffset, recordCount, recordsBytes };
}

/**
 * Decodes a Fetch response body. The records are a view of `body`, not yet checked: decode them
 * with `RecordCursor` (the client does, CRC by CRC).
 * @throws ProtocolError if malformed or `records_bytes` disagrees with the bytes present.
 */
export function decodeFetchResponse(body: Uint8Array): FetchResult {
  const r = new WireReader(body, "Fetch response");
  const highWatermark = r.u64("high_watermark");
  const logStartOffset = r.u64("log_start_offset");
  const nextOffset = r.u64("next_offset");
  const count = r.u32("record_count");
  const recordsBytes = r.u32("records_bytes");
  const bytes = r.bytes("records", recordsBytes);
  r.end("records");
  return { records: { bytes, count }, nextOffset, highWatermark, logStartOffset };
}
