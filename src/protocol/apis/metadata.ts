/**
 * api 3 Metadata, versions 0 and 1: describes the named topics, or every topic
 * (`Broker.listTopics`, `Broker.describeTopic`); version 1 adds the cluster (`Broker.clusterMetadata`):
 * brokers, controller, and every listed topic's partition leaders, so clients route by it.
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
 * Version 1: the same request; the response is version 0's, then
 *
 * ```
 * cluster       = u8                    0 = single node (nothing follows), 1 = cluster:
 *                 cluster_id str16 | node_id u32 | controller i32 (−1 = none)
 *                 broker_count u32 | broker_entry × broker_count
 *                 topic_count u32 | cluster_topic × topic_count   (the same topics, same order)
 * broker_entry  = node_id u32 | tcp str16 | http str16
 * cluster_topic = name str16 | partition_count u32 | cluster_partition × partition_count
 * cluster_partition = partition u32 | leader i32 (−1 = offline) | leader_epoch u32 |
 *                 replica_count u16 | replica u32 × … | isr_count u16 | isr u32 × … |
 *                 elr_count u16 | elr u32 × …
 * ```
 *
 * `topic_entry` is shared with CreateTopic (`create-topic.ts`).
 */
import { Errors } from "../../broker/errors.ts";
import type {
  ClusterMetadata,
  PartitionInfo,
  TopicConfig,
  TopicDescription,
} from "../../broker/types.ts";
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
  versionMax: 1,
  serve(body, correlationId, { broker }, version) {
    const { topics } = decodeMetadataRequest(body);
    const described =
      topics.length === 0
        ? broker.listTopics()
        : Promise.all(topics.map((name) => broker.describeTopic(name)));
    if (version === 0)
      return { response: described.then((list) => encodeMetadataResponse(correlationId, list)) };
    return {
      response: described.then(async (list) => {
        const cluster =
          broker.clusterMetadata === undefined
            ? null
            : await broker.clusterMetadata(list.map((t) => t.name));
        return encodeMetadataResponse(correlationId, list, cluster);
      }),
    };
  },
});

/** What a version 1 Metadata answer holds: the topics, and the cluster (null on a single node). */
export interface MetadataV1 {
  topics: TopicDescription[];
  cluster: ClusterMetadata | null;
}

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
  version: 0 | 1 = 0,
): Uint8Array {
  const topics = request.topics.map((t, i) => strBytes(t, `metadata.topics[${i}]`));
  const w = startRequest(
    metadataApi.key,
    correlationId,
    16 + topics.reduce((n, t) => n + 2 + t.length, 0),
    version,
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

/**
 * Encodes a Metadata response frame: version 0 without `cluster` (undefined), version 1 with it
 * (null on a single node).
 */
export function encodeMetadataResponse(
  correlationId: number,
  topics: readonly TopicDescription[],
  cluster?: ClusterMetadata | null,
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    15 +
      topics.reduce((n, t) => n + topicEntryBytesEstimate(t), 0) +
      (cluster ? clusterBytesEstimate(cluster) : 0),
  );
  w.u32(topics.length);
  for (const topic of topics) writeTopicEntry(w, topic);
  if (cluster === undefined) return finishFrame(w);
  if (cluster === null) return finishFrame(w.u8(0));
  w.u8(1).str16(cluster.cluster_id).u32(cluster.node_id).i32(cluster.controller);
  w.u32(cluster.brokers.length);
  for (const b of cluster.brokers) w.u32(b.node_id).str16(b.tcp).str16(b.http);
  w.u32(cluster.topics.length);
  for (const t of cluster.topics) {
    w.str16(t.name).u32(t.partitions.length);
    for (const p of t.partitions) {
      w.u32(p.partition).i32(p.leader).u32(p.leader_epoch);
      for (const list of [p.replicas, p.isr, p.elr]) {
        w.u16(list.length);
        for (const id of list) w.u32(id);
      }
    }
  }
  return finishFrame(w);
}

function clusterBytesEstimate(c: ClusterMetadata): number {
  let n = 2 + c.cluster_id.length * 3 + 12 + 4;
  for (const b of c.brokers) n += 4 + 4 + (b.tcp.length + b.http.length) * 3;
  for (const t of c.topics) {
    n += 6 + t.name.length * 3;
    for (const p of t.partitions) n += 18 + 4 * (p.replicas.length + p.isr.length + p.elr.length);
  }
  return n;
}

/** Decodes a version 1 Metadata response body. @throws ProtocolError if malformed. */
export function decodeMetadataV1Response(body: Uint8Array): MetadataV1 {
  const r = new WireReader(body, "Metadata response");
  const count = r.u32("topic_count");
  checkRepeat(r, count, 10, "topic_count");
  const topics: TopicDescription[] = [];
  for (let i = 0; i < count; i++) topics.push(readTopicEntry(r, `topics[${i}]`));
  const present = r.u8("cluster");
  if (present === 0) {
    r.end("cluster");
    return { topics, cluster: null };
  }
  const clusterId = r.str16("cluster_id");
  const nodeId = r.u32("node_id");
  const controller = r.i32("controller");
  const brokerCount = r.u32("broker_count");
  checkRepeat(r, brokerCount, 8, "broker_count");
  const brokers: ClusterMetadata["brokers"] = [];
  for (let i = 0; i < brokerCount; i++)
    brokers.push({
      node_id: r.u32(`brokers[${i}].node_id`),
      tcp: r.str16(`brokers[${i}].tcp`),
      http: r.str16(`brokers[${i}].http`),
    });
  const topicCount = r.u32("cluster_topic_count");
  checkRepeat(r, topicCount, 6, "cluster_topic_count");
  const clusterTopics: ClusterMetadata["topics"] = [];
  for (let i = 0; i < topicCount; i++) {
    const name = r.str16(`cluster_topics[${i}].name`);
    const partitionCount = r.u32(`cluster_topics[${i}].partition_count`);
    checkRepeat(r, partitionCount, 18, `cluster_topics[${i}].partition_count`);
    const partitions: ClusterMetadata["topics"][number]["partitions"] = [];
    for (let j = 0; j < partitionCount; j++) {
      const at = `cluster_topics[${i}].partitions[${j}]`;
      const partition = r.u32(`${at}.partition`);
      const leader = r.i32(`${at}.leader`);
      const leaderEpoch = r.u32(`${at}.leader_epoch`);
      const lists = ["replicas", "isr", "elr"].map((name) => {
        const n = r.u16(`${at}.${name}_count`);
        checkRepeat(r, n, 4, `${at}.${name}_count`);
        return Array.from({ length: n }, (_, k) => r.u32(`${at}.${name}[${k}]`));
      });
      partitions.push({
        partition,
        leader,
        leader_epoch: leaderEpoch,
        replicas: lists[0],
        isr: lists[1],
        elr: lists[2],
      });
    }
    clusterTopics.push({ name, partitions });
  }
  r.end("cluster_topics");
  return {
    topics,
    cluster: {
      cluster_id: clusterId,
      node_id: nodeId,
      controller,
      brokers,
      topics: clusterTopics,
    },
  };
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
