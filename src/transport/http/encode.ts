/**
 * JSON encodings of broker results: topic and group descriptions, produce offsets and fetched
 * records. The HTTP API answers with them and the CLI prints them (`topics describe`,
 * `groups describe`), so both show the same shapes. Field names are snake_case, offsets and timestamps JSON numbers (exact to 2^53 − 1, docs/decisions.md §6).
 */
import { AssertionError } from "../../lib/assert.ts";
import { encodeBase64 } from "../../lib/base64.ts";
import { fromUtf8 } from "../../lib/bytes.ts";
import type {
  FetchResult,
  GroupDescription,
  PartitionInfo,
  ProduceResult,
  TopicDescription,
  TopicPartition,
} from "../../broker/types.ts";
import { DecodeStatus, RecordCursor } from "../../storage/record.ts";

/** How keys and values appear in fetched records: UTF-8 text (invalid bytes become U+FFFD) or base64. */
export type ValueEncoding = "utf8" | "base64";

/** One partition as shown over HTTP. */
export interface PartitionJson {
  partition: number;
  log_start_offset: number;
  high_watermark: number;
  size_bytes: number;
  segments: number;
  fenced: boolean;
}

/** A topic as shown over HTTP: `{ name, partitions: [...], config: {...} }`. */
export interface TopicJson {
  name: string;
  partitions: PartitionJson[];
  config: Record<string, unknown>;
  /** A Durable Stream's section of `topic.json` (docs/durable-streams.md), when the topic is one. */
  stream?: Record<string, unknown>;
}

/** One fetched record as shown over HTTP (and as the `data` of an SSE `record` event). */
export interface RecordJson {
  offset: number;
  /** ms since the epoch. */
  timestamp: number;
  /** null when the record has no key; "" is the empty key. */
  key: string | null;
  value: string;
}

/** Body of a fetch response. */
export interface FetchJson {
  records: RecordJson[];
  next_offset: number;
  high_watermark: number;
  log_start_offset: number;
}

function partitionJson(info: PartitionInfo): PartitionJson {
  return {
    partition: info.partition,
    log_start_offset: info.logStartOffset,
    high_watermark: info.highWatermark,
    size_bytes: info.sizeBytes,
    segments: info.segmentCount,
    fenced: info.fenced,
  };
}

/** The HTTP shape of a topic description. */
export function topicJson(topic: TopicDescription): TopicJson {
  return {
    name: topic.name,
    partitions: topic.partitions.map(partitionJson),
    config: { ...topic.config },
    ...(topic.stream === undefined ? {} : { stream: { ...topic.stream } }),
  };
}

/** Assignments as shown over HTTP: `[{ topic, partition }, …]` (copies, nothing else of each entry). */
export function assignmentsJson(
  list: readonly TopicPartition[],
): { topic: string; partition: number }[] {
  return list.map((a) => ({ topic: a.topic, partition: a.partition }));
}

/**
 * The HTTP shape of a group description (`GET /v1/groups/{group}`, docs/http-api.md):
 * `{ group, generation, members: [{ member_id, topics, session_timeout_ms, assignments }],
 * offsets: [{ topic, partition, committed, high_watermark, lag, owner }] }`.
 */
export function groupJson(g: GroupDescription): Record<string, unknown> {
  return {
    group: g.group,
    generation: g.generation,
    members: g.members.map((m) => ({
      member_id: m.memberId,
      topics: m.topics,
      session_timeout_ms: m.sessionTimeoutMs,
      assignments: assignmentsJson(m.assignments),
    })),
    offsets: g.offsets.map((o) => ({
      topic: o.topic,
      partition: o.partition,
      committed: o.committed,
      high_watermark: o.highWatermark,
      lag: o.lag,
      owner: o.owner,
    })),
  };
}

/**
 * The body of a produce answer as JSON text: `{"offsets":[{"partition":P,"offset":O}, …]}` with
 * one entry per record in request order (the spans expanded), plus `"duplicate":D` when
 * `duplicate` is given (idempotent produce). Written directly rather than through objects and
 * `JSON.stringify`: every value is an integer.
 * @throws AssertionError if the spans do not cover exactly `recordCount` records (a broker bug).
 */
export function produceAnswerJson(
  result: ProduceResult,
  options: { recordCount: number; duplicate?: boolean },
): string {
  let text = '{"offsets":[';
  let count = 0;
  for (const span of result.spans) {
    const head = `{"partition":${span.partition},"offset":`;
    for (let i = 0; i < span.count; i++) {
      text += `${count === 0 ? "" : ","}${head}${span.baseOffset + i}}`;
      count++;
    }
  }
  if (count !== options.recordCount) {
    throw new AssertionError(
      `assertion failed: produce spans cover ${count} records, the request had ${options.recordCount}`,
    );
  }
  return options.duplicate === undefined
    ? `${text}]}`
    : `${text}],"duplicate":${options.duplicate}}`;
}

/**
 * Decodes the stored records of a fetch result with {@link RecordCursor}, calling `each` for every
 * record in offset order. @throws AssertionError if the broker handed out bytes that do not decode
 * as exactly `records.count` whole records (the broker validates what it serves; this is a bug).
 */
export function forEachRecord(
  result: FetchResult,
  encoding: ValueEncoding,
  each: (record: RecordJson) => void,
): void {
  const cursor = new RecordCursor().reset(result.records.bytes);
  const end = result.records.bytes.length;
  let pos = 0;
  for (let i = 0; i < result.records.count; i++) {
    const status = cursor.decode(pos, end);
    if (status !== DecodeStatus.Ok) {
      throw new AssertionError(
        `assertion failed: fetched record ${i} of ${result.records.count} does not decode: ${cursor.reason}`,
      );
    }
    const key = cursor.key();
    const value = cursor.value();
    each({
      offset: cursor.offset,
      timestamp: cursor.timestampMs,
      key: key === null ? null : encoding === "base64" ? encodeBase64(key) : fromUtf8(key),
      value: encoding === "base64" ? encodeBase64(value) : fromUtf8(value),
    });
    pos += cursor.sizeBytes;
  }
  if (pos !== end)
    throw new AssertionError(
      `assertion failed: ${end - pos} bytes left after ${result.records.count} fetched records`,
    );
}

/** The HTTP body of a fetch result. */
export function fetchJson(result: FetchResult, encoding: ValueEncoding): FetchJson {
  const records: RecordJson[] = [];
  forEachRecord(result, encoding, (record) => records.push(record));
  return {
    records,
    next_offset: result.nextOffset,
    high_watermark: result.highWatermark,
    log_start_offset: result.logStartOffset,
  };
}
