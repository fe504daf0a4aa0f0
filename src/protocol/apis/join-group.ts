/**
 * api 6 JoinGroup, version 0: joins a consumer group, or rejoins as a member, and answers the
 * member's assignment once the group has rebalanced (`Broker.joinGroup`).
 *
 * ```
 * request       = group str16
 *                 member_id str16       "" = join as a new member
 *                 session_timeout_ms u32  0 = broker default (30 000)
 *                 topic_count u32
 *                 topic str16 × topic_count
 * response      = member_id str16 | generation u64 | session_timeout_ms u32 | assignments
 * assignments   = assignment_count u32 | (topic str16 | partition u32) × assignment_count
 * ```
 *
 * `assignments` is shared with Heartbeat and DescribeGroup.
 */
import type { GroupAssignment, JoinGroupRequest, TopicPartition } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { checkRepeat, requireInt, strBytes, WireReader, type WireWriter } from "../wire.ts";
import { defineApi } from "./api.ts";

/** JoinGroup: decode, `broker.joinGroup`, encode. */
export const joinGroupApi = defineApi({
  key: 6,
  name: "JoinGroup",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeJoinGroupRequest(body);
    return {
      response: broker
        .joinGroup(request)
        .then((result) => encodeJoinGroupResponse(correlationId, result)),
    };
  },
});

/**
 * Encodes a JoinGroup request frame. An omitted `memberId` joins as a new member; an omitted
 * `sessionTimeoutMs` sends 0 (broker default).
 * @throws ProtocolError `invalid_request` for a field that does not fit.
 */
export function encodeJoinGroupRequest(
  correlationId: number,
  request: JoinGroupRequest,
): Uint8Array {
  const group = strBytes(request.group, "join_group.group");
  const member = strBytes(request.memberId ?? "", "join_group.member_id");
  const timeout = request.sessionTimeoutMs ?? 0;
  requireInt(timeout, 0, 0xffff_ffff, "join_group.session_timeout_ms");
  const topics = request.topics.map((t, i) => strBytes(t, `join_group.topics[${i}]`));
  const w = startRequest(
    joinGroupApi.key,
    correlationId,
    32 + group.length + member.length + topics.reduce((n, t) => n + 2 + t.length, 0),
  );
  w.u16(group.length).bytes(group).u16(member.length).bytes(member).u32(timeout).u32(topics.length);
  for (const t of topics) w.u16(t.length).bytes(t);
  return finishFrame(w);
}

/** Decodes a JoinGroup request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeJoinGroupRequest(body: Uint8Array): JoinGroupRequest {
  const r = new WireReader(body, "JoinGroup request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  const timeout = r.u32("session_timeout_ms");
  const count = r.u32("topic_count");
  checkRepeat(r, count, 2, "topic_count");
  const topics: string[] = [];
  for (let i = 0; i < count; i++) topics.push(r.str16(`topics[${i}]`));
  r.end(count === 0 ? "topic_count" : `topics[${count - 1}]`);
  const request: JoinGroupRequest = { group, topics };
  if (memberId !== "") request.memberId = memberId;
  if (timeout !== 0) request.sessionTimeoutMs = timeout;
  return request;
}

/** Encodes a JoinGroup response frame. */
export function encodeJoinGroupResponse(
  correlationId: number,
  result: GroupAssignment,
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    64 + result.assignments.reduce((n, a) => n + 6 + a.topic.length * 3, 0),
  );
  w.str16(result.memberId).u64(result.generation).u32(result.sessionTimeoutMs);
  writeAssignments(w, result.assignments);
  return finishFrame(w);
}

/** Decodes a JoinGroup response body. @throws ProtocolError if malformed. */
export function decodeJoinGroupResponse(body: Uint8Array): GroupAssignment {
  const r = new WireReader(body, "JoinGroup response");
  const memberId = r.str16("member_id");
  const generation = r.u64("generation");
  const sessionTimeoutMs = r.u32("session_timeout_ms");
  const assignments = readAssignments(r, "assignments");
  r.end("assignments");
  return { memberId, generation, sessionTimeoutMs, assignments };
}

/** Bytes of the smallest `assignments`/`topic partition` element: str16 (2) + partition (4). */
const topicPartitionBytesMin = 6;

/** Writes `assignments`. */
export function writeAssignments(w: WireWriter, assignments: readonly TopicPartition[]): void {
  w.u32(assignments.length);
  for (const a of assignments) w.str16(a.topic).u32(a.partition);
}

/** Reads `assignments`; `field` prefixes its fields' names in messages. @throws ProtocolError if malformed. */
export function readAssignments(r: WireReader, field: string): TopicPartition[] {
  const count = r.u32(`${field}.assignment_count`);
  checkRepeat(r, count, topicPartitionBytesMin, `${field}.assignment_count`);
  const out: TopicPartition[] = [];
  for (let i = 0; i < count; i++)
    out.push({
      topic: r.str16(`${field}[${i}].topic`),
      partition: r.u32(`${field}[${i}].partition`),
    });
  return out;
}
