/**
 * api 0 Produce, version 0: appends records to a topic (`Broker.produce`).
 *
 * ```
 * request       = topic str16
 *                 partition i32         −1 = the broker picks (murmur2 of key / round robin)
 *                 record_count u32      must equal the entries that follow; at least 1
 *                 entries [u8]          to the end of the frame: the entry-batch format of
 *                                       storage/record.ts (timestamp_ms i64 | key_len i32 | key |
 *                                       value_len u32 | value), repeated
 * response      = span_count u32
 *                 span × span_count     partition u32 | base_offset u64 | count u32
 * ```
 *
 * `entries` and `span` are shared with IdempotentProduce (`idempotent-produce.ts`).
 */
import { Errors } from "../../broker/errors.ts";
import type { ProduceRequest, ProduceResult } from "../../broker/types.ts";
import { produceRecordsMax } from "../../lib/limits.ts";
import { RecordFormatError, scanEntries, type EntryBatch } from "../../storage/record.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import {
  checkRepeat,
  ProtocolError,
  requireInt,
  strBytes,
  WireReader,
  type WireWriter,
} from "../wire.ts";
import { answerBy, defineApi } from "./api.ts";

/** Produce: decode, `broker.produce`, encode. */
export const produceApi = defineApi({
  key: 0,
  name: "Produce",
  versionMax: 0,
  serve(body, _correlationId, { broker }) {
    return answerBy(broker.produce(decodeProduceRequest(body)), encodeProduceResponse);
  },
  decodeProduce: decodeProduceRequest,
});

/** Bytes of one span in a Produce (and IdempotentProduce) response. */
export const produceSpanBytes = 16;

/** What a Produce request carries: the broker's {@link ProduceRequest} without per-record partitions. */
export interface ProduceRequestFields {
  topic: string;
  /** A partition ≥ 0, or −1 / omitted to let the broker pick. */
  partition?: number;
  batch: EntryBatch;
}

/**
 * Encodes a Produce request frame. The batch bytes are copied once.
 * @throws ProtocolError `invalid_request` for a topic over 65 535 UTF-8 bytes or a partition outside [−1, 2^31 − 1].
 */
export function encodeProduceRequest(
  correlationId: number,
  request: ProduceRequestFields,
): Uint8Array {
  const topic = strBytes(request.topic, "produce.topic");
  const partition = request.partition ?? -1;
  requireInt(partition, -1, 0x7fff_ffff, "produce.partition");
  requireInt(request.batch.count, 0, 0xffff_ffff, "produce.record_count");
  const w = startRequest(
    produceApi.key,
    correlationId,
    12 + 2 + topic.length + 8 + request.batch.bytes.length,
  );
  w.u16(topic.length)
    .bytes(topic)
    .i32(partition)
    .u32(request.batch.count)
    .bytes(request.batch.bytes);
  return finishFrame(w);
}

/**
 * Decodes a Produce request body. The entries are validated with `scanEntries` and their number
 * must equal `record_count` and be at least 1; the batch is a view of `body`.
 * @throws ProtocolError `invalid_request` naming the field (or the record index for a bad entry).
 */
export function decodeProduceRequest(body: Uint8Array): ProduceRequest {
  const r = new WireReader(body, "Produce request");
  const topic = r.str16Recent("topic");
  const partition = readPartitionChoice(r);
  const batch = readEntries(r);
  const request: ProduceRequest = { topic, batch };
  if (partition >= 0) request.partition = partition;
  return request;
}

/** Encodes a Produce response frame. */
export function encodeProduceResponse(correlationId: number, result: ProduceResult): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + 4 + result.spans.length * produceSpanBytes);
  writeSpans(w, result.spans);
  return finishFrame(w);
}

/**
 * Encodes the Produce response of a request whose records all went to `partition`, at
 * `[baseOffset, baseOffset + count)`: {@link encodeProduceResponse} of that one span, without
 * the result object.
 */
export function encodeProduceAppended(
  correlationId: number,
  partition: number,
  baseOffset: number,
  count: number,
): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + 4 + produceSpanBytes);
  w.u32(1).u32(partition).u64(baseOffset).u32(count);
  return finishFrame(w);
}

/** Decodes a Produce response body. @throws ProtocolError if malformed. */
export function decodeProduceResponse(body: Uint8Array): ProduceResult {
  const r = new WireReader(body, "Produce response");
  const spans = readSpans(r);
  r.end("spans");
  return { spans };
}

/** Reads `partition i32`: ≥ 0, or −1 for the broker's choice. @throws ProtocolError below −1. */
export function readPartitionChoice(r: WireReader): number {
  const partition = r.i32("partition");
  if (partition < -1) {
    throw new ProtocolError(
      Errors.invalidRequest,
      "partition",
      `Cannot decode ${r.context}: field "partition" is ${partition}, must be ≥ 0 or -1`,
    );
  }
  return partition;
}

/**
 * Reads `record_count u32 | entries [u8]` to the end of the body: the entries checked with
 * `scanEntries` (at most `produceRecordsMax`), their number equal to `record_count`, and at
 * least one.
 * @returns the batch, a view of the body.
 * @throws ProtocolError `invalid_request` naming `entries` (with the record) or `record_count`
 *   (also for a request with no records);
 *   `unsupported` for a `timestamp_ms` above 2^53 - 1.
 */
export function readEntries(r: WireReader): EntryBatch {
  const recordCount = r.u32("record_count");
  const entries = r.rest();
  let scanned: number;
  try {
    scanned = scanEntries(entries, { maxCount: produceRecordsMax });
  } catch (error) {
    if (error instanceof RecordFormatError) {
      // A u64 above 2^53 - 1 is `unsupported`, as everywhere in the protocol (docs/protocol.md).
      throw new ProtocolError(
        error.aboveSafeInteger ? Errors.unsupported : Errors.invalidRequest,
        "entries",
        `Cannot decode ${r.context}: field "entries": ${error.message}`,
      );
    }
    throw error;
  }
  // An empty produce is refused, as over HTTP and Kafka (docs/protocol.md "0 Produce").
  if (scanned !== recordCount || scanned === 0) {
    throw new ProtocolError(
      Errors.invalidRequest,
      "record_count",
      scanned === 0 && recordCount === 0
        ? `Cannot decode ${r.context}: field "record_count" is 0: the request holds no records (at least 1 is needed)`
        : `Cannot decode ${r.context}: field "record_count" is ${recordCount} but the entries hold ${scanned} records`,
    );
  }
  return { bytes: entries, count: scanned };
}

/** Writes `span_count u32 | span × span_count`. */
export function writeSpans(w: WireWriter, spans: ProduceResult["spans"]): void {
  w.u32(spans.length);
  for (const span of spans) w.u32(span.partition).u64(span.baseOffset).u32(span.count);
}

/** Reads `span_count u32 | span × span_count`. @throws ProtocolError if malformed. */
export function readSpans(r: WireReader): ProduceResult["spans"] {
  const spanCount = r.u32("span_count");
  checkRepeat(r, spanCount, produceSpanBytes, "span_count");
  const spans: ProduceResult["spans"] = [];
  for (let i = 0; i < spanCount; i++) {
    const partition = r.u32(`spans[${i}].partition`);
    const baseOffset = r.u64(`spans[${i}].base_offset`);
    const count = r.u32(`spans[${i}].count`);
    spans.push({ partition, baseOffset, count });
  }
  return spans;
}
