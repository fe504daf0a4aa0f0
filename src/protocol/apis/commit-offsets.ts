/**
 * api 9 CommitOffsets, version 0: stores a group's committed offsets, as a member of the current
 * generation or as a standalone consumer (`Broker.commitOffsets`).
 *
 * ```
 * request       = group str16
 *                 member_id str16       "" = none (a standalone consumer)
 *                 has_generation u8 | generation u64
 *                 offset_count u32
 *                 (topic str16 | partition u32 | offset u64) × offset_count
 * response      = (empty)
 * ```
 */
import type { CommitOffsetsRequest } from "../../broker/types.ts";
import { encodeEmptyResponse, finishFrame, startRequest } from "../envelope.ts";
import { checkRepeat, readFlag, requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** CommitOffsets: decode, `broker.commitOffsets`, an empty answer. */
export const commitOffsetsApi = defineApi({
  key: 9,
  name: "CommitOffsets",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeCommitOffsetsRequest(body);
    return {
      response: broker.commitOffsets(request).then(() => encodeEmptyResponse(correlationId)),
    };
  },
});

/** Bytes of the smallest offset element of a CommitOffsets request: str16 (2) + partition (4) + offset (8). */
const commitOffsetBytesMin = 14;

/** Encodes a CommitOffsets request frame. @throws ProtocolError `invalid_request` for a field that does not fit (e.g. a negative offset). */
export function encodeCommitOffsetsRequest(
  correlationId: number,
  request: CommitOffsetsRequest,
): Uint8Array {
  const group = strBytes(request.group, "commit_offsets.group");
  const member = strBytes(request.memberId ?? "", "commit_offsets.member_id");
  if (request.generation !== undefined)
    requireInt(request.generation, 0, Number.MAX_SAFE_INTEGER, "commit_offsets.generation");
  const offsets = request.offsets.map((o, i) => {
    requireInt(o.partition, 0, 0xffff_ffff, `commit_offsets.offsets[${i}].partition`);
    requireInt(o.offset, 0, Number.MAX_SAFE_INTEGER, `commit_offsets.offsets[${i}].offset`);
    return {
      topic: strBytes(o.topic, `commit_offsets.offsets[${i}].topic`),
      partition: o.partition,
      offset: o.offset,
    };
  });
  const w = startRequest(
    commitOffsetsApi.key,
    correlationId,
    32 +
      group.length +
      member.length +
      offsets.reduce((n, o) => n + commitOffsetBytesMin + o.topic.length, 0),
  );
  w.u16(group.length)
    .bytes(group)
    .u16(member.length)
    .bytes(member)
    .u8(request.generation === undefined ? 0 : 1)
    .u64(request.generation ?? 0)
    .u32(offsets.length);
  for (const o of offsets) w.u16(o.topic.length).bytes(o.topic).u32(o.partition).u64(o.offset);
  return finishFrame(w);
}

/** Decodes a CommitOffsets request body. @throws ProtocolError naming the field. */
export function decodeCommitOffsetsRequest(body: Uint8Array): CommitOffsetsRequest {
  const r = new WireReader(body, "CommitOffsets request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  const has = readFlag(r, "has_generation");
  const generation = r.u64("generation");
  const count = r.u32("offset_count");
  checkRepeat(r, count, commitOffsetBytesMin, "offset_count");
  const offsets: CommitOffsetsRequest["offsets"] = [];
  for (let i = 0; i < count; i++) {
    offsets.push({
      topic: r.str16(`offsets[${i}].topic`),
      partition: r.u32(`offsets[${i}].partition`),
      offset: r.u64(`offsets[${i}].offset`),
    });
  }
  r.end(count === 0 ? "offset_count" : `offsets[${count - 1}]`);
  const request: CommitOffsetsRequest = { group, offsets };
  if (memberId !== "") request.memberId = memberId;
  if (has) request.generation = generation;
  return request;
}
