/**
 * api 4 ListOffsets, versions 0 and 1: the bounds of one partition (`Broker.listOffsets`);
 * version 1 also finds the first offset whose record timestamp is at or after a time.
 *
 * ```
 * request v0    = topic str16 | partition u32
 * response v0   = log_start_offset u64 | high_watermark u64
 * request v1    = topic str16 | partition u32 | timestamp_ms u64
 * response v1   = log_start_offset u64 | high_watermark u64 | offset u64
 * ```
 */
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** ListOffsets: decode, `broker.listOffsets`, encode (version 1 with its timestamp). */
export const listOffsetsApi = defineApi({
  key: 4,
  name: "ListOffsets",
  versionMax: 1,
  serve(body, correlationId, { broker }, version) {
    const request = decodeListOffsetsRequest(body, version === 1 ? 1 : 0);
    return {
      response: broker.listOffsets(request).then((result) =>
        version === 1
          ? encodeListOffsetsResponseV1(correlationId, {
              ...result,
              offset: result.offset ?? result.highWatermark,
            })
          : encodeListOffsetsResponse(correlationId, result),
      ),
    };
  },
});

/** What a ListOffsets request carries; `timestampMs` (ms since the epoch) makes it version 1. */
export interface ListOffsetsRequestFields {
  topic: string;
  partition: number;
  timestampMs?: number;
}

/** Bounds of one partition, as ListOffsets answers. */
export interface ListOffsetsResult {
  logStartOffset: number;
  highWatermark: number;
}

/**
 * A version 1 answer: the bounds, and `offset`, the first offset whose record timestamp is at or
 * after the request's `timestamp_ms`, or the high watermark when no record's is.
 */
export interface ListOffsetsResultV1 extends ListOffsetsResult {
  offset: number;
}

/**
 * Encodes a ListOffsets request frame: version 1 when `request.timestampMs` is given, else 0.
 * @throws ProtocolError `invalid_request` for a bad field.
 */
export function encodeListOffsetsRequest(
  correlationId: number,
  request: ListOffsetsRequestFields,
): Uint8Array {
  const topic = strBytes(request.topic, "list_offsets.topic");
  requireInt(request.partition, 0, 0xffff_ffff, "list_offsets.partition");
  const { timestampMs } = request;
  if (timestampMs !== undefined)
    requireInt(timestampMs, 0, Number.MAX_SAFE_INTEGER, "list_offsets.timestamp_ms");
  const w = startRequest(
    listOffsetsApi.key,
    correlationId,
    12 + 2 + topic.length + 4 + (timestampMs === undefined ? 0 : 8),
    timestampMs === undefined ? 0 : 1,
  );
  w.u16(topic.length).bytes(topic).u32(request.partition);
  if (timestampMs !== undefined) w.u64(timestampMs);
  return finishFrame(w);
}

/**
 * Decodes a ListOffsets request body of `version` (0, or 1 with `timestamp_ms`).
 * @throws ProtocolError `invalid_request` naming the field.
 */
export function decodeListOffsetsRequest(
  body: Uint8Array,
  version: 0 | 1 = 0,
): ListOffsetsRequestFields {
  const r = new WireReader(body, "ListOffsets request");
  const topic = r.str16("topic");
  const partition = r.u32("partition");
  if (version === 0) {
    r.end("partition");
    return { topic, partition };
  }
  const timestampMs = r.u64("timestamp_ms");
  r.end("timestamp_ms");
  return { topic, partition, timestampMs };
}

/** Encodes a version 0 ListOffsets response frame. */
export function encodeListOffsetsResponse(
  correlationId: number,
  result: ListOffsetsResult,
): Uint8Array {
  return finishFrame(
    startResponse(correlationId, 0, 26).u64(result.logStartOffset).u64(result.highWatermark),
  );
}

/** Encodes a version 1 ListOffsets response frame. */
export function encodeListOffsetsResponseV1(
  correlationId: number,
  result: ListOffsetsResultV1,
): Uint8Array {
  return finishFrame(
    startResponse(correlationId, 0, 34)
      .u64(result.logStartOffset)
      .u64(result.highWatermark)
      .u64(result.offset),
  );
}

/** Decodes a version 0 ListOffsets response body. @throws ProtocolError if malformed. */
export function decodeListOffsetsResponse(body: Uint8Array): ListOffsetsResult {
  const r = new WireReader(body, "ListOffsets response");
  const logStartOffset = r.u64("log_start_offset");
  const highWatermark = r.u64("high_watermark");
  r.end("high_watermark");
  return { logStartOffset, highWatermark };
}

/** Decodes a version 1 ListOffsets response body. @throws ProtocolError if malformed. */
export function decodeListOffsetsResponseV1(body: Uint8Array): ListOffsetsResultV1 {
  const r = new WireReader(body, "ListOffsets response");
  const logStartOffset = r.u64("log_start_offset");
  const highWatermark = r.u64("high_watermark");
  const offset = r.u64("offset");
  r.end("offset");
  return { logStartOffset, highWatermark, offset };
}
