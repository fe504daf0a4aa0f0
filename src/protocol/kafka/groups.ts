/**
 * The consumer-group apis (Kafka's `JoinGroup*.json` v1, `SyncGroup*.json` v0, `Heartbeat*.json`
 * v0, `LeaveGroup*.json` v0, `OffsetCommit*.json` v2, `OffsetFetch*.json` v1) and the "consumer"
 * embedded protocol (`ConsumerProtocolSubscription.json`, `ConsumerProtocolAssignment.json`):
 *
 * ```
 * JoinGroup request v1  = group_id string | session_timeout_ms int32 | rebalance_timeout_ms int32
 *                         | member_id string | protocol_type string
 *                         | protocols [name string | metadata bytes]
 * JoinGroup response v1 = error_code int16 | generation_id int32 | protocol_name string
 *                         | leader string | member_id string | members [member_id string | metadata bytes]
 * SyncGroup request v0  = group_id string | generation_id int32 | member_id string
 *                         | assignments [member_id string | assignment bytes]
 * SyncGroup response v0 = error_code int16 | assignment bytes
 * Heartbeat request v0  = group_id string | generation_id int32 | member_id string
 * Heartbeat response v0 = error_code int16
 * LeaveGroup request v0 = group_id string | member_id string
 * LeaveGroup response v0 = error_code int16
 * OffsetCommit request v2  = group_id string | generation_id int32 | member_id string
 *                            | retention_time_ms int64
 *                            | topics [name string | partitions [partition_index int32
 *                                      | committed_offset int64 | committed_metadata nullable string]]
 * OffsetCommit response v2 = topics [name string | partitions [partition_index int32 | error_code int16]]
 * OffsetFetch request v1   = group_id string | topics [name string | partition_indexes [int32]]
 * OffsetFetch response v1  = topics [name string | partitions [partition_index int32
 *                            | committed_offset int64 | metadata nullable string | error_code int16]]
 *
 * consumer subscription = version int16 | topics [string] | user_data nullable bytes | (v1+ more)
 * consumer assignment   = version int16 | assigned [topic string | partitions [int32]]
 *                         | user_data nullable bytes
 * ```
 */
import { finishFrame, startResponse } from "./header.ts";
import { KafkaReader, KafkaWriter } from "./wire.ts";

/** A decoded JoinGroup v1 request. */
export interface JoinGroupRequestV1 {
  groupId: string;
  sessionTimeoutMs: number;
  rebalanceTimeoutMs: number;
  memberId: string;
  protocolType: string;
  protocols: { name: string; metadata: Uint8Array }[];
}

/** Decodes a JoinGroup v1 request (metadata stays a view into the frame). */
export function decodeJoinGroupRequest(body: Uint8Array): JoinGroupRequestV1 {
  const r = new KafkaReader(body, "JoinGroup v1 request");
  const groupId = r.string("group_id");
  const sessionTimeoutMs = r.int32("session_timeout_ms");
  const rebalanceTimeoutMs = r.int32("rebalance_timeout_ms");
  const memberId = r.string("member_id");
  const protocolType = r.string("protocol_type");
  const protocols = r.array("protocols", 6, (i) => ({
    name: r.string(`protocols[${i}].name`),
    metadata: r.bytes(`protocols[${i}].metadata`),
  }));
  r.end();
  return { groupId, sessionTimeoutMs, rebalanceTimeoutMs, memberId, protocolType, protocols };
}

/** Encodes a JoinGroup v1 response; `members` is non-empty only for the leader. */
export function encodeJoinGroupResponse(
  correlationId: number,
  p: {
    errorCode: number;
    generationId: number;
    protocolName: string;
    leader: string;
    memberId: string;
    members: { memberId: string; metadata: Uint8Array }[];
  },
): Uint8Array {
  const w = startResponse(correlationId, 128);
  w.int16(p.errorCode)
    .int32(p.generationId)
    .string(p.protocolName)
    .string(p.leader)
    .string(p.memberId);
  w.array(p.members, (m) => w.string(m.memberId).bytes(m.metadata));
  return finishFrame(w);
}

/** A decoded SyncGroup v0 request. */
export interface SyncGroupRequestV0 {
  groupId: string;
  generationId: number;
  memberId: string;
  assignments: { memberId: string; assignment: Uint8Array }[];
}

/** Decodes a SyncGroup v0 request. */
export function decodeSyncGroupRequest(body: Uint8Array): SyncGroupRequestV0 {
  const r = new KafkaReader(body, "SyncGroup v0 request");
  const groupId = r.string("group_id");
  const generationId = r.int32("generation_id");
  const memberId = r.string("member_id");
  const assignments = r.array("assignments", 6, (i) => ({
    memberId: r.string(`assignments[${i}].member_id`),
    assignment: r.bytes(`assignments[${i}].assignment`),
  }));
  r.end();
  return { groupId, generationId, memberId, assignments };
}

/** Encodes a SyncGroup v0 response. */
export function encodeSyncGroupResponse(
  correlationId: number,
  p: { errorCode: number; assignment: Uint8Array },
): Uint8Array {
  const w = startResponse(correlationId, 32 + p.assignment.length);
  w.int16(p.errorCode).bytes(p.assignment);
  return finishFrame(w);
}

/** Decodes a Heartbeat v0 request. */
export function decodeHeartbeatRequest(body: Uint8Array): {
  groupId: string;
  generationId: number;
  memberId: string;
} {
  const r = new KafkaReader(body, "Heartbeat v0 request");
  const groupId = r.string("group_id");
  const generationId = r.int32("generation_id");
  const memberId = r.string("member_id");
  r.end();
  return { groupId, generationId, memberId };
}

/** Decodes a LeaveGroup v0 request. */
export function decodeLeaveGroupRequest(body: Uint8Array): { groupId: string; memberId: string } {
  const r = new KafkaReader(body, "LeaveGroup v0 request");
  const groupId = r.string("group_id");
  const memberId = r.string("member_id");
  r.end();
  return { groupId, memberId };
}

/** Encodes a response that is only an error code (Heartbeat v0, LeaveGroup v0). */
export function encodeErrorCodeResponse(correlationId: number, errorCode: number): Uint8Array {
  return finishFrame(startResponse(correlationId, 16).int16(errorCode));
}

/** A decoded OffsetCommit v2 request. */
export interface OffsetCommitRequestV2 {
  groupId: string;
  generationId: number;
  memberId: string;
  retentionTimeMs: number;
  topics: {
    name: string;
    partitions: { partition: number; offset: number; metadata: string | null }[];
  }[];
}

/** Decodes an OffsetCommit v2 request. */
export function decodeOffsetCommitRequest(body: Uint8Array): OffsetCommitRequestV2 {
  const r = new KafkaReader(body, "OffsetCommit v2 request");
  const groupId = r.string("group_id");
  const generationId = r.int32("generation_id");
  const memberId = r.string("member_id");
  const retentionTimeMs = r.int64("retention_time_ms");
  const topics = r.array("topics", 6, (i) => ({
    name: r.string(`topics[${i}].name`),
    partitions: r.array(`topics[${i}].partitions`, 14, (j) => ({
      partition: r.int32(`topics[${i}].partitions[${j}].partition_index`),
      offset: r.int64(`topics[${i}].partitions[${j}].committed_offset`),
      metadata: r.nullableString(`topics[${i}].partitions[${j}].committed_metadata`),
    })),
  }));
  r.end();
  return { groupId, generationId, memberId, retentionTimeMs, topics };
}

/** Writes an OffsetCommit v2 request body (tests). */
export function writeOffsetCommitRequest(w: KafkaWriter, p: OffsetCommitRequestV2): void {
  w.string(p.groupId).int32(p.generationId).string(p.memberId).int64(p.retentionTimeMs);
  w.array(p.topics, (t) => {
    w.string(t.name);
    w.array(t.partitions, (q) => w.int32(q.partition).int64(q.offset).string(q.metadata));
  });
}

/** Encodes an OffsetCommit v2 response. */
export function encodeOffsetCommitResponse(
  correlationId: number,
  topics: { name: string; partitions: { partition: number; errorCode: number }[] }[],
): Uint8Array {
  const w = startResponse(correlationId, 64);
  w.array(topics, (t) => {
    w.string(t.name);
    w.array(t.partitions, (q) => w.int32(q.partition).int16(q.errorCode));
  });
  return finishFrame(w);
}

/** Decodes an OffsetCommit v2 response body (tests). */
export function decodeOffsetCommitResponse(
  body: Uint8Array,
): { name: string; partitions: { partition: number; errorCode: number }[] }[] {
  const r = new KafkaReader(body, "OffsetCommit v2 response");
  const topics = r.array("topics", 6, () => ({
    name: r.string("name"),
    partitions: r.array("partitions", 6, () => ({
      partition: r.int32("partition_index"),
      errorCode: r.int16("error_code"),
    })),
  }));
  r.end();
  return topics;
}

/** Decodes an OffsetFetch v1 request. */
export function decodeOffsetFetchRequest(body: Uint8Array): {
  groupId: string;
  topics: { name: string; partitions: number[] }[];
} {
  const r = new KafkaReader(body, "OffsetFetch v1 request");
  const groupId = r.string("group_id");
  const topics = r.array("topics", 6, (i) => ({
    name: r.string(`topics[${i}].name`),
    partitions: r.array(`topics[${i}].partition_indexes`, 4, () => r.int32("partition_index")),
  }));
  r.end();
  return { groupId, topics };
}

/** Encodes an OffsetFetch v1 response (committed −1 = none; metadata always empty). */
export function encodeOffsetFetchResponse(
  correlationId: number,
  topics: {
    name: string;
    partitions: { partition: number; offset: number; errorCode: number }[];
  }[],
): Uint8Array {
  const w = startResponse(correlationId, 64);
  w.array(topics, (t) => {
    w.string(t.name);
    w.array(t.partitions, (q) =>
      w.int32(q.partition).int64(q.offset).string("").int16(q.errorCode),
    );
  });
  return finishFrame(w);
}

/**
 * The topics of a "consumer" protocol subscription (any version: the topic list comes first).
 * @throws KafkaDecodeError if malformed.
 */
export function decodeConsumerSubscription(metadata: Uint8Array): string[] {
  const r = new KafkaReader(metadata, "consumer protocol subscription");
  r.int16("version");
  return r.array("topics", 2, (i) => r.string(`topics[${i}]`));
}

/** Encodes a version-0 "consumer" subscription (tests). */
export function encodeConsumerSubscription(topics: string[]): Uint8Array {
  const w = new KafkaWriter(32);
  w.int16(0)
    .array(topics, (t) => w.string(t))
    .bytes(null);
  return w.finish().slice();
}

/**
 * The partitions of a "consumer" protocol assignment (any version: the list comes first).
 * @throws KafkaDecodeError if malformed.
 */
export function decodeConsumerAssignment(
  assignment: Uint8Array,
): { topic: string; partition: number }[] {
  if (assignment.length === 0) return [];
  const r = new KafkaReader(assignment, "consumer protocol assignment");
  r.int16("version");
  const out: { topic: string; partition: number }[] = [];
  r.array("assigned", 6, (i) => {
    const topic = r.string(`assigned[${i}].topic`);
    for (const partition of r.array(`assigned[${i}].partitions`, 4, () => r.int32("partition")))
      out.push({ topic, partition });
  });
  return out;
}

/** Encodes a version-0 "consumer" assignment (tests). */
export function encodeConsumerAssignment(
  assigned: { topic: string; partitions: number[] }[],
): Uint8Array {
  const w = new KafkaWriter(32);
  w.int16(0);
  w.array(assigned, (a) => w.string(a.topic).array(a.partitions, (p) => w.int32(p)));
  w.bytes(null);
  return w.finish().slice();
}
