/**
 * api 10 DescribeGroup, version 0: a group's generation, members, assignments and committed
 * offsets with their lag (`Broker.describeGroup`).
 *
 * ```
 * request       = group str16
 * response      = group_entry
 * group_entry   = group str16 | generation u64
 *                 member_count u32
 *                 (member_id str16 | session_timeout_ms u32 | topic_count u32 | topic str16 × n |
 *                  assignments) × member_count              (assignments as in JoinGroup)
 *                 offset_count u32
 *                 offset_entry × offset_count
 * offset_entry  = topic str16 | partition u32
 *                 present u8            bit 0: committed, bit 1: high_watermark, bit 2: owner
 *                 committed u64 | high_watermark u64   (0 when absent)
 *                 owner str16           ("" when absent)
 * ```
 *
 * `group_entry` is shared with ListGroups (`list-groups.ts`).
 */
import { Errors } from "../../broker/errors.ts";
import type { GroupDescription } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { checkRepeat, ProtocolError, strBytes, WireReader, type WireWriter } from "../wire.ts";
import { defineApi } from "./api.ts";
import { readAssignments, writeAssignments } from "./join-group.ts";

/** DescribeGroup: decode, `broker.describeGroup`, encode. */
export const describeGroupApi = defineApi({
  key: 10,
  name: "DescribeGroup",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const { group } = decodeDescribeGroupRequest(body);
    return {
      response: broker
        .describeGroup(group)
        .then((result) => encodeDescribeGroupResponse(correlationId, result)),
    };
  },
});

/** Encodes a DescribeGroup request frame. */
export function encodeDescribeGroupRequest(
  correlationId: number,
  request: { group: string },
): Uint8Array {
  const group = strBytes(request.group, "describe_group.group");
  const w = startRequest(describeGroupApi.key, correlationId, 16 + group.length);
  w.u16(group.length).bytes(group);
  return finishFrame(w);
}

/** Decodes a DescribeGroup request body. */
export function decodeDescribeGroupRequest(body: Uint8Array): { group: string } {
  const r = new WireReader(body, "DescribeGroup request");
  const group = r.str16("group");
  r.end("group");
  return { group };
}

/** Writes one `group_entry`. */
export function writeGroupEntry(w: WireWriter, g: GroupDescription): void {
  w.str16(g.group).u64(g.generation).u32(g.members.length);
  for (const m of g.members) {
    w.str16(m.memberId).u32(m.sessionTimeoutMs).u32(m.topics.length);
    for (const t of m.topics) w.str16(t);
    writeAssignments(w, m.assignments);
  }
  w.u32(g.offsets.length);
  for (const o of g.offsets) {
    const present =
      (o.committed !== null ? 1 : 0) |
      (o.highWatermark !== null ? 2 : 0) |
      (o.owner !== null ? 4 : 0);
    w.str16(o.topic)
      .u32(o.partition)
      .u8(present)
      .u64(o.committed ?? 0)
      .u64(o.highWatermark ?? 0)
      .str16(o.owner ?? "");
  }
}

/** Reads one `group_entry` (lag derived: high watermark − committed); `field` prefixes its fields' names. @throws ProtocolError if malformed. */
export function readGroupEntry(r: WireReader, field: string): GroupDescription {
  const group = r.str16(`${field}.group`);
  const generation = r.u64(`${field}.generation`);
  const memberCount = r.u32(`${field}.member_count`);
  // A member is at least 2 + 4 + 4 + 4 bytes.
  checkRepeat(r, memberCount, 14, `${field}.member_count`);
  const members: GroupDescription["members"] = [];
  for (let i = 0; i < memberCount; i++) {
    const at = `${field}.members[${i}]`;
    const memberId = r.str16(`${at}.member_id`);
    const sessionTimeoutMs = r.u32(`${at}.session_timeout_ms`);
    const topicCount = r.u32(`${at}.topic_count`);
    checkRepeat(r, topicCount, 2, `${at}.topic_count`);
    const topics: string[] = [];
    for (let j = 0; j < topicCount; j++) topics.push(r.str16(`${at}.topics[${j}]`));
    members.push({
      memberId,
      sessionTimeoutMs,
      topics,
      assignments: readAssignments(r, `${at}.assignments`),
    });
  }
  const offsetCount = r.u32(`${field}.offset_count`);
  // An offset entry is at least 2 + 4 + 1 + 8 + 8 + 2 bytes.
  checkRepeat(r, offsetCount, 25, `${field}.offset_count`);
  const offsets: GroupDescription["offsets"] = [];
  for (let i = 0; i < offsetCount; i++) {
    const at = `${field}.offsets[${i}]`;
    const topic = r.str16(`${at}.topic`);
    const partition = r.u32(`${at}.partition`);
    const present = r.u8(`${at}.present`);
    if (present > 7)
      throw new ProtocolError(
        Errors.invalidRequest,
        `${at}.present`,
        `Cannot decode ${r.context}: field "${at}.present" is ${present}, only bits 0–2 are defined`,
      );
    const committedRaw = r.u64(`${at}.committed`);
    const highWatermarkRaw = r.u64(`${at}.high_watermark`);
    const ownerRaw = r.str16(`${at}.owner`);
    const committed = present & 1 ? committedRaw : null;
    const highWatermark = present & 2 ? highWatermarkRaw : null;
    const lag =
      committed !== null && highWatermark !== null ? Math.max(0, highWatermark - committed) : null;
    offsets.push({
      topic,
      partition,
      committed,
      highWatermark,
      lag,
      owner: present & 4 ? ownerRaw : null,
    });
  }
  return { group, generation, members, offsets };
}

/** A generous size for one group_entry, to size the response buffer. */
export function groupEntryBytesEstimate(g: GroupDescription): number {
  let n = 64 + g.group.length * 3;
  for (const m of g.members)
    n +=
      32 +
      m.memberId.length * 3 +
      m.topics.reduce((a, t) => a + 2 + t.length * 3, 0) +
      m.assignments.reduce((a, x) => a + 6 + x.topic.length * 3, 0);
  for (const o of g.offsets) n += 32 + o.topic.length * 3 + (o.owner?.length ?? 0) * 3;
  return n;
}

/** Encodes a DescribeGroup response frame. */
export function encodeDescribeGroupResponse(
  correlationId: number,
  group: GroupDescription,
): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + groupEntryBytesEstimate(group));
  writeGroupEntry(w, group);
  return finishFrame(w);
}

/** Decodes a DescribeGroup response body (lag is derived: high watermark − committed). @throws ProtocolError if malformed. */
export function decodeDescribeGroupResponse(body: Uint8Array): GroupDescription {
  const r = new WireReader(body, "DescribeGroup response");
  const group = readGroupEntry(r, "group");
  r.end("group");
  return group;
}
