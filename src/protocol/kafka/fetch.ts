/**
 * Fetch v4 and ListOffsets v1 (Kafka's `FetchRequest.json`, `FetchResponse.json`,
 * `ListOffsetsRequest.json`, `ListOffsetsResponse.json`):
 *
 * ```
 * Fetch request v4  = replica_id int32 | max_wait_ms int32 | min_bytes int32 | max_bytes int32
 *                     | isolation_level int8
 *                     | topics [topic string | partitions [partition int32 | fetch_offset int64
 *                                                         | partition_max_bytes int32]]
 * Fetch response v4 = throttle_time_ms int32
 *                     | responses [topic string | partitions [partition_index int32 | error_code int16
 *                                 | high_watermark int64 | last_stable_offset int64
 *                                 | aborted_transactions nullable [producer_id int64 | first_offset int64]
 *                                 | records nullable bytes]]
 * ListOffsets request v1  = replica_id int32
 *                           | topics [name string | partitions [partition_index int32 | timestamp int64]]
 * ListOffsets response v1 = topics [name string | partitions [partition_index int32 | error_code int16
 *                                   | timestamp int64 | offset int64]]
 * ```
 *
 * ListOffsets timestamp −2 asks for the log start offset, −1 for the high watermark.
 * A Fetch answer's records are written as their own chunk: the response is a list of chunks.
 */
import { finishFrame, startResponse } from "./header.ts";
import { KafkaReader, KafkaWriter } from "./wire.ts";

/** A decoded Fetch v4 request. */
export interface FetchRequestV4 {
  maxWaitMs: number;
  minBytes: number;
  maxBytes: number;
  isolationLevel: number;
  topics: {
    topic: string;
    partitions: { partition: number; fetchOffset: number; partitionMaxBytes: number }[];
  }[];
}

/** Decodes a Fetch v4 request. */
export function decodeFetchRequest(body: Uint8Array): FetchRequestV4 {
  const r = new KafkaReader(body, "Fetch v4 request");
  r.int32("replica_id");
  const maxWaitMs = r.int32("max_wait_ms");
  const minBytes = r.int32("min_bytes");
  const maxBytes = r.int32("max_bytes");
  const isolationLevel = r.int8("isolation_level");
  const topics = r.array("topics", 6, (i) => ({
    topic: r.string(`topics[${i}].topic`),
    partitions: r.array(`topics[${i}].partitions`, 16, (j) => ({
      partition: r.int32(`topics[${i}].partitions[${j}].partition`),
      fetchOffset: r.int64(`topics[${i}].partitions[${j}].fetch_offset`),
      partitionMaxBytes: r.int32(`topics[${i}].partitions[${j}].partition_max_bytes`),
    })),
  }));
  r.end();
  return { maxWaitMs, minBytes, maxBytes, isolationLevel, topics };
}

/** Writes a Fetch v4 request body (tests, benchmark). */
export function writeFetchRequest(w: KafkaWriter, p: FetchRequestV4): void {
  w.int32(-1).int32(p.maxWaitMs).int32(p.minBytes).int32(p.maxBytes).int8(p.isolationLevel);
  w.array(p.topics, (t) => {
    w.string(t.topic);
    w.array(t.partitions, (q) =>
      w.int32(q.partition).int64(q.fetchOffset).int32(q.partitionMaxBytes),
    );
  });
}

/** One partition of a Fetch answer. */
export interface FetchPartitionResponse {
  partition: number;
  errorCode: number;
  highWatermark: number;
  /** One encoded RecordBatch (or empty). */
  records: Uint8Array;
}

/**
 * Encodes a Fetch v4 response as chunks: each partition's header, then its record batch bytes
 * as they are (no copy into a frame buffer).
 */
export function encodeFetchResponse(
  correlationId: number,
  topics: { topic: string; partitions: FetchPartitionResponse[] }[],
): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  let w = startResponse(correlationId, 128);
  w.int32(0);
  w.int32(topics.length);
  for (const t of topics) {
    w.string(t.topic).int32(t.partitions.length);
    for (const q of t.partitions) {
      w.int32(q.partition).int16(q.errorCode).int64(q.highWatermark).int64(q.highWatermark);
      w.int32(-1); // aborted_transactions: null (no transactions)
      w.int32(q.records.length);
      if (q.records.length > 0) {
        chunks.push(w.finish());
        chunks.push(q.records);
        w = new KafkaWriter(128);
      }
    }
  }
  chunks.push(w.finish());
  // size = every byte after the size field.
  const size = chunks.reduce((n, c) => n + c.length, 0) - 4;
  new DataView(chunks[0].buffer, chunks[0].byteOffset, 4).setInt32(0, size);
  return chunks;
}

/** Decodes a Fetch v4 response body (tests, benchmark). */
export function decodeFetchResponse(body: Uint8Array): {
  topic: string;
  partitions: FetchPartitionResponse[];
}[] {
  const r = new KafkaReader(body, "Fetch v4 response");
  r.int32("throttle_time_ms");
  const topics = r.array("responses", 6, () => ({
    topic: r.string("topic"),
    partitions: r.array("partitions", 30, () => {
      const partition = r.int32("partition_index");
      const errorCode = r.int16("error_code");
      const highWatermark = r.int64("high_watermark");
      r.int64("last_stable_offset");
      r.nullableArray("aborted_transactions", 16, () => [
        r.int64("producer_id"),
        r.int64("first_offset"),
      ]);
      const records = r.nullableBytes("records") ?? new Uint8Array(0);
      return { partition, errorCode, highWatermark, records };
    }),
  }));
  r.end();
  return topics;
}

/** A decoded ListOffsets v1 request. */
export interface ListOffsetsRequestV1 {
  topics: { name: string; partitions: { partition: number; timestamp: number }[] }[];
}

/** Decodes a ListOffsets v1 request. */
export function decodeListOffsetsRequest(body: Uint8Array): ListOffsetsRequestV1 {
  const r = new KafkaReader(body, "ListOffsets v1 request");
  r.int32("replica_id");
  const topics = r.array("topics", 6, (i) => ({
    name: r.string(`topics[${i}].name`),
    partitions: r.array(`topics[${i}].partitions`, 12, (j) => ({
      partition: r.int32(`topics[${i}].partitions[${j}].partition_index`),
      timestamp: r.int64(`topics[${i}].partitions[${j}].timestamp`),
    })),
  }));
  r.end();
  return { topics };
}

/** Encodes a ListOffsets v1 response. */
export function encodeListOffsetsResponse(
  correlationId: number,
  topics: {
    name: string;
    partitions: { partition: number; errorCode: number; timestamp: number; offset: number }[];
  }[],
): Uint8Array {
  const w = startResponse(correlationId, 64);
  w.array(topics, (t) => {
    w.string(t.name);
    w.array(t.partitions, (q) =>
      w.int32(q.partition).int16(q.errorCode).int64(q.timestamp).int64(q.offset),
    );
  });
  return finishFrame(w);
}
