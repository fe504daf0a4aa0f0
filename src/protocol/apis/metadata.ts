/**
 * api 3 Metadata, version 0: describes the named topics, or every topic (`Broker.listTopics`,
 * `Broker.describeTopic`).
 *
 * ```
 * request       = topic_count u32       0 = every topic
 *                 topic str16 × topic_count
 * response      = topic_count u32
 *                 topic_entry × topic_count
 * topic_entry   = name str16
 *                 config_len u32
 *                 config [u8]           JSON object (TopicConfig, snake_case keys)
 *                 partition_count u32
 *                 partition_entry × partition_count
 * partition_entry = partition u32 | log_start_offset u64 | high_watermark u64 | size_bytes u64 |
 *                   segment_count u32 | fenced u8 (0 or 1)
 * ```
 *
 * `topic_entry` is shared with CreateTopic (`create-topic.ts`).
 */
import { Errors } from "../../broker/errors.ts";
import type { PartitionInfo, TopicConfig, TopicDescription } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import {
  checkRepeat,
  parseJsonObject,
  ProtocolError,
  strBytes,
  WireReader,
  type WireWriter,
} from "../wire.ts";
import { defineApi } from "./api.ts";

/** Metadata: decode, `broker.listTopics` or `broker.describeTopic` per name, encode. */
export const metadataApi = defineApi({
  key: 3,
  name: "Metadata",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const { topics } = decodeMetadataRequest(body);
    const described =
      topics.length === 0
        ? broker.listTopics()
        : Promise.all(topics.map((name) => broker.describeTopic(name)));
    return { response: described.then((list) => encodeMetadataResponse(correlationId, list)) };
  },
});

/** Bytes of one partition_entry in a topic_entry. */
export const partitionEntryBytes = 33;

/** What a Metadata request carries: the topics wanted, empty for every topic. */
export interface MetadataRequestFields {
  topics: string[];
}

/** Encodes a Metadata request frame. @throws ProtocolError `invalid_request` for a topic over 65 535 bytes. */
export function encodeMetadataRequest(
  correlationId: number,
  request: MetadataRequestFields,
): Uint8Array {
  const topics = request.topics.map((t, i) => strBytes(t, `metadata.topics[${i}]`));
  const w = startRequest(
    metadataApi.key,
    correlationId,
    16 + topics.reduce((n, t) => n + 2 + t.length, 0),
  );
  w.u32(topics.length);
  for (const t of topics) w.u16(t.length).bytes(t);
  return finishFrame(w);
}

/** Decodes a Metadata request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeMetadataRequest(body: Uint8Array): MetadataRequestFields {
  const r = new WireReader(body, "Metadata request");
  const count = r.u32("topic_count");
  checkRepeat(r, count, 2, "topic_count");
  const topics: string[] = [];
  for (let i = 0; i < count; i++) topics.push(r.str16(`topics[${i}]`));
  r.end(count === 0 ? "topic_count" : `topics[${count - 1}]`);
  return { topics };
}

/** Encodes a Metadata response frame. */
export function encodeMetadataResponse(
  correlationId: number,
  topics: readonly TopicDescription[],
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    14 + topics.reduce((n, t) => n + topicEntryBytesEstimate(t), 0),
  );
  w.u32(topics.length);
  for (const topic of topics) writeTopicEntry(w, topic);
  return finishFrame(w);
}

/** Decodes a Metadata response body. @throws ProtocolError if malformed. */
export function decodeMetadataResponse(body: Uint8Array): TopicDescription[] {
  const r = new WireReader(body, "Metadata response");
  const count = r.u32("topic_count");
  // A topic_entry is at least 2 + 4 + 4 bytes.
  checkRepeat(r, count, 10, "topic_count");
  const topics: TopicDescription[] = [];
  for (let i = 0; i < count; i++) topics.push(readTopicEntry(r, `topics[${i}]`));
  r.end(count === 0 ? "topic_count" : `topics[${count - 1}]`);
  return topics;
}

/** A generous size for one topic_entry, to size the response buffer. */
export function topicEntryBytesEstimate(topic: TopicDescription): number {
  return 2 + topic.name.length * 3 + 4 + 512 + 4 + topic.partitions.length * partitionEntryBytes;
}

/** Writes one `topic_entry`. */
export function writeTopicEntry(w: WireWriter, topic: TopicDescription): void {
  w.str16(topic.name).str32(JSON.stringify(topic.config)).u32(topic.partitions.length);
  for (const p of topic.partitions) {
    w.u32(p.partition)
      .u64(p.logStartOffset)
      .u64(p.highWatermark)
      .u64(p.sizeBytes)
      .u32(p.segmentCount)
      .u8(p.fenced ? 1 : 0);
  }
}

/** Reads one `topic_entry`; `field` prefixes the names of its fields in messages. @throws ProtocolError if malformed. */
export function readTopicEntry(r: WireReader, field: string): TopicDescription {
  const name = r.str16(`${field}.name`);
  const configText = r.str32(`${field}.config`, `${field}.config_len`);
  const config = parseJsonObject(
    configText,
    r.context,
    `${field}.config`,
  ) as unknown as TopicConfig;
  const partitionCount = r.u32(`${field}.partition_count`);
  checkRepeat(r, partitionCount, partitionEntryBytes, `${field}.partition_count`);
  const partitions: PartitionInfo[] = [];
  for (let i = 0; i < partitionCount; i++) {
    const at = `${field}.partitions[${i}]`;
    const partition = r.u32(`${at}.partition`);
    const logStartOffset = r.u64(`${at}.log_start_offset`);
    const highWatermark = r.u64(`${at}.high_watermark`);
    const sizeBytes = r.u64(`${at}.size_bytes`);
    const segmentCount = r.u32(`${at}.segment_count`);
    const fenced = r.u8(`${at}.fenced`);
    if (fenced > 1) {
      throw new ProtocolError(
        Errors.invalidRequest,
        `${at}.fenced`,
        `Cannot decode ${r.context}: field "${at}.fenced" is ${fenced}, must be 0 or 1`,
      );
    }
    partitions.push({
      partition,
      logStartOffset,
      highWatermark,
      sizeBytes,
      segmentCount,
      fenced: fenced === 1,
    });
  }
  return { name, config, partitions };
}
