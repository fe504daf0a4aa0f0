/**
 * api 4 ListOffsets, version 0: the bounds of one partition (`Broker.listOffsets`).
 *
 * ```
 * request       = topic str16 | partition u32
 * response      = log_start_offset u64 | high_watermark u64
 * ```
 */
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** ListOffsets: decode, `broker.listOffsets`, encode. */
export const listOffsetsApi = defineApi({
  key: 4,
  name: "ListOffsets",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeListOffsetsRequest(body);
    return {
      response: broker
        .listOffsets(request)
        .then((result) => encodeListOffsetsResponse(correlationId, result)),
    };
  },
});

/** What a ListOffsets request carries. */
export interface ListOffsetsRequestFields {
  topic: string;
  partition: number;
}

/** Bounds of one partition, as ListOffsets answers. */
export interface ListOffsetsResult {
  logStartOffset: number;
  highWatermark: number;
}

/** Encodes a ListOffsets request frame. @throws ProtocolError `invalid_request` for a bad field. */
export function encodeListOffsetsRequest(
  correlationId: number,
  request: ListOffsetsRequestFields,
): Uint8Array {
  const topic = strBytes(request.topic, "list_offsets.topic");
  requireInt(request.partition, 0, 0xffff_ffff, "list_offsets.partition");
  const w = startRequest(listOffsetsApi.key, correlationId, 12 + 2 + topic.length + 4);
  w.u16(topic.length).bytes(topic).u32(request.partition);
  return finishFrame(w);
}

/** Decodes a ListOffsets request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeListOffsetsRequest(body: Uint8Array): ListOffsetsRequestFields {
  const r = new WireReader(body, "ListOffsets request");
  const topic = r.str16("topic");
  const partition = r.u32("partition");
  r.end("partition");
  return { topic, partition };
}

/** Encodes a ListOffsets response frame. */
export function encodeListOffsetsResponse(
  correlationId: number,
  result: ListOffsetsResult,
): Uint8Array {
  return finishFrame(
    startResponse(correlationId, 0, 26).u64(result.logStartOffset).u64(result.highWatermark),
  );
}

/** Decodes a ListOffsets response body. @throws ProtocolError if malformed. */
export function decodeListOffsetsResponse(body: Uint8Array): ListOffsetsResult {
  const r = new WireReader(body, "ListOffsets response");
  const logStartOffset = r.u64("log_start_offset");
  const highWatermark = r.u64("high_watermark");
  r.end("high_watermark");
  return { logStartOffset, highWatermark };
}
