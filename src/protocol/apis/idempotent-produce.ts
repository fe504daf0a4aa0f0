/**
 * api 12 IdempotentProduce, version 0: Produce with a producer identity, so a retried batch is
 * stored once (`Broker.produce` with `producer`; the decision table:
 * `broker/producers/sequence.ts`).
 *
 * ```
 * request       = topic str16
 *                 partition i32         −1 = the broker picks (every record must land in one partition)
 *                 producer_id str16
 *                 producer_epoch u32
 *                 base_sequence u64
 *                 record_count u32
 *                 entries [u8]          as in Produce
 * response      = duplicate u8 (0/1) | span_count u32 | span × span_count   (span as in Produce)
 * ```
 */
import type { ProduceRequest, ProduceResult } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { readFlag, requireInt, strBytes, WireReader } from "../wire.ts";
import { answerBy, defineApi } from "./api.ts";
import {
  produceSpanBytes,
  readEntries,
  readPartitionChoice,
  readSpans,
  writeSpans,
  type ProduceRequestFields,
} from "./produce.ts";

/** IdempotentProduce: decode, `broker.produce` with the producer, encode. */
export const idempotentProduceApi = defineApi({
  key: 12,
  name: "IdempotentProduce",
  versionMax: 0,
  serve(body, _correlationId, { broker }) {
    const request = decodeIdempotentProduceRequest(body);
    return answerBy(broker.produce(request), encodeIdempotentProduceResponse);
  },
});

/** What an IdempotentProduce request carries. */
export interface IdempotentProduceRequestFields extends ProduceRequestFields {
  producer: { id: string; epoch: number; sequence: number };
}

/**
 * Encodes an IdempotentProduce request frame. The batch bytes are copied once.
 * @throws ProtocolError `invalid_request` for a field that does not fit.
 */
export function encodeIdempotentProduceRequest(
  correlationId: number,
  request: IdempotentProduceRequestFields,
): Uint8Array {
  const topic = strBytes(request.topic, "idempotent_produce.topic");
  const id = strBytes(request.producer.id, "idempotent_produce.producer_id");
  const partition = request.partition ?? -1;
  requireInt(partition, -1, 0x7fff_ffff, "idempotent_produce.partition");
  requireInt(request.producer.epoch, 0, 0xffff_ffff, "idempotent_produce.producer_epoch");
  requireInt(
    request.producer.sequence,
    0,
    Number.MAX_SAFE_INTEGER,
    "idempotent_produce.base_sequence",
  );
  requireInt(request.batch.count, 0, 0xffff_ffff, "idempotent_produce.record_count");
  const w = startRequest(
    idempotentProduceApi.key,
    correlationId,
    12 + 2 + topic.length + 4 + 2 + id.length + 16 + request.batch.bytes.length,
  );
  w.u16(topic.length)
    .bytes(topic)
    .i32(partition)
    .u16(id.length)
    .bytes(id)
    .u32(request.producer.epoch)
    .u64(request.producer.sequence);
  w.u32(request.batch.count).bytes(request.batch.bytes);
  return finishFrame(w);
}

/**
 * Decodes an IdempotentProduce request body; the entries are checked as in Produce.
 * @throws ProtocolError `invalid_request` naming the field.
 */
export function decodeIdempotentProduceRequest(
  body: Uint8Array,
): ProduceRequest & { producer: NonNullable<ProduceRequest["producer"]> } {
  const r = new WireReader(body, "IdempotentProduce request");
  const topic = r.str16Recent("topic");
  const partition = readPartitionChoice(r);
  const id = r.str16("producer_id");
  const epoch = r.u32("producer_epoch");
  const sequence = r.u64("base_sequence");
  const batch = readEntries(r);
  const request: ProduceRequest & { producer: NonNullable<ProduceRequest["producer"]> } = {
    topic,
    batch,
    producer: { id, epoch, sequence },
  };
  if (partition >= 0) request.partition = partition;
  return request;
}

/** Encodes an IdempotentProduce response frame. */
export function encodeIdempotentProduceResponse(
  correlationId: number,
  result: ProduceResult,
): Uint8Array {
  const w = startResponse(correlationId, 0, 11 + 4 + result.spans.length * produceSpanBytes);
  w.u8(result.duplicate === true ? 1 : 0);
  writeSpans(w, result.spans);
  return finishFrame(w);
}

/** Decodes an IdempotentProduce response body. @throws ProtocolError if malformed. */
export function decodeIdempotentProduceResponse(body: Uint8Array): ProduceResult {
  const r = new WireReader(body, "IdempotentProduce response");
  const duplicate = readFlag(r, "duplicate");
  const spans = readSpans(r);
  r.end("spans");
  return { spans, duplicate };
}
