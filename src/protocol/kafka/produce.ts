/**
 * Produce v3 and InitProducerId v0 (Kafka's `ProduceRequest.json`, `ProduceResponse.json`,
 * `InitProducerIdRequest.json`, `InitProducerIdResponse.json`):
 *
 * ```
 * Produce request v3  = transactional_id nullable string | acks int16 | timeout_ms int32
 *                       | topic_data [name string | partition_data [index int32 | records nullable bytes]]
 * Produce response v3 = responses [name string | partition_responses [index int32 | error_code int16
 *                                  | base_offset int64 | log_append_time_ms int64]]
 *                       | throttle_time_ms int32
 * InitProducerId request v0  = transactional_id nullable string | transaction_timeout_ms int32
 * InitProducerId response v0 = throttle_time_ms int32 | error_code int16 | producer_id int64
 *                              | producer_epoch int16
 * ```
 *
 * `records` holds one RecordBatch v2 (`record-batch.ts`); it stays a view into the request frame
 * until it is decoded. acks 0 means the client expects no response at all.
 */
import { finishFrame, startResponse } from "./header.ts";
import { KafkaReader, type KafkaWriter } from "./wire.ts";

/** A decoded Produce v3 request. */
export interface ProduceRequestV3 {
  transactionalId: string | null;
  acks: number;
  timeoutMs: number;
  topics: { name: string; partitions: { index: number; records: Uint8Array | null }[] }[];
}

/** Decodes a Produce v3 request (the record batches stay undecoded views). */
export function decodeProduceRequest(body: Uint8Array): ProduceRequestV3 {
  const r = new KafkaReader(body, "Produce v3 request");
  const transactionalId = r.nullableString("transactional_id");
  const acks = r.int16("acks");
  const timeoutMs = r.int32("timeout_ms");
  const topics = r.array("topic_data", 6, (i) => ({
    name: r.string(`topic_data[${i}].name`),
    partitions: r.array(`topic_data[${i}].partition_data`, 8, (j) => ({
      index: r.int32(`topic_data[${i}].partition_data[${j}].index`),
      records: r.nullableBytes(`topic_data[${i}].partition_data[${j}].records`),
    })),
  }));
  r.end();
  return { transactionalId, acks, timeoutMs, topics };
}

/** Writes a Produce v3 request body (tests, benchmark). */
export function writeProduceRequest(w: KafkaWriter, p: ProduceRequestV3): void {
  w.string(p.transactionalId).int16(p.acks).int32(p.timeoutMs);
  w.array(p.topics, (t) => {
    w.string(t.name);
    w.array(t.partitions, (q) => w.int32(q.index).bytes(q.records));
  });
}

/** One partition of a Produce response. */
export interface ProducePartitionResponse {
  index: number;
  errorCode: number;
  /** The first record's offset, or −1 on error. */
  baseOffset: number;
}

/** Encodes a Produce v3 response (log_append_time −1: CreateTime). */
export function encodeProduceResponse(
  correlationId: number,
  topics: { name: string; partitions: ProducePartitionResponse[] }[],
): Uint8Array {
  const w = startResponse(correlationId, 64);
  w.array(topics, (t) => {
    w.string(t.name);
    w.array(t.partitions, (q) => w.int32(q.index).int16(q.errorCode).int64(q.baseOffset).int64(-1));
  });
  w.int32(0);
  return finishFrame(w);
}

/** Decodes a Produce v3 response body (tests, benchmark). */
export function decodeProduceResponse(
  body: Uint8Array,
): { name: string; partitions: ProducePartitionResponse[] }[] {
  const r = new KafkaReader(body, "Produce v3 response");
  const topics = r.array("responses", 6, () => ({
    name: r.string("name"),
    partitions: r.array("partition_responses", 22, () => {
      const q = {
        index: r.int32("index"),
        errorCode: r.int16("error_code"),
        baseOffset: r.int64("base_offset"),
      };
      r.int64("log_append_time_ms");
      return q;
    }),
  }));
  r.int32("throttle_time_ms");
  r.end();
  return topics;
}

/** Decodes an InitProducerId v0 request. */
export function decodeInitProducerIdRequest(body: Uint8Array): {
  transactionalId: string | null;
  transactionTimeoutMs: number;
} {
  const r = new KafkaReader(body, "InitProducerId v0 request");
  const transactionalId = r.nullableString("transactional_id");
  const transactionTimeoutMs = r.int32("transaction_timeout_ms");
  r.end();
  return { transactionalId, transactionTimeoutMs };
}

/** Encodes an InitProducerId v0 response. */
export function encodeInitProducerIdResponse(
  correlationId: number,
  p: { errorCode: number; producerId: number; producerEpoch: number },
): Uint8Array {
  const w = startResponse(correlationId, 32);
  w.int32(0).int16(p.errorCode).int64(p.producerId).int16(p.producerEpoch);
  return finishFrame(w);
}
