/**
 * api 7 Heartbeat, version 0: keeps a member's session alive and tells it whether to rejoin
 * (`Broker.heartbeat`).
 *
 * ```
 * request       = group str16 | member_id str16 | has_generation u8 (0/1) | generation u64
 * response      = generation u64 | rejoin u8 (0/1) | assignments   (as in JoinGroup)
 * ```
 */
import type { HeartbeatResult } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { readFlag, requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";
import { readAssignments, writeAssignments } from "./join-group.ts";

/** Heartbeat: decode, `broker.heartbeat`, encode. */
export const heartbeatApi = defineApi({
  key: 7,
  name: "Heartbeat",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeHeartbeatRequest(body);
    return {
      response: broker
        .heartbeat(request)
        .then((result) => encodeHeartbeatResponse(correlationId, result)),
    };
  },
});

/** What a Heartbeat request carries. */
export interface HeartbeatRequestFields {
  group: string;
  memberId: string;
  /** The generation the member holds; omitted = not reported (then `rejoin` is false). */
  generation?: number;
}

/** Encodes a Heartbeat request frame. @throws ProtocolError `invalid_request` for a field that does not fit. */
export function encodeHeartbeatRequest(
  correlationId: number,
  request: HeartbeatRequestFields,
): Uint8Array {
  const group = strBytes(request.group, "heartbeat.group");
  const member = strBytes(request.memberId, "heartbeat.member_id");
  if (request.generation !== undefined)
    requireInt(request.generation, 0, Number.MAX_SAFE_INTEGER, "heartbeat.generation");
  const w = startRequest(heartbeatApi.key, correlationId, 32 + group.length + member.length);
  w.u16(group.length)
    .bytes(group)
    .u16(member.length)
    .bytes(member)
    .u8(request.generation === undefined ? 0 : 1)
    .u64(request.generation ?? 0);
  return finishFrame(w);
}

/** Decodes a Heartbeat request body. @throws ProtocolError naming the field. */
export function decodeHeartbeatRequest(body: Uint8Array): HeartbeatRequestFields {
  const r = new WireReader(body, "Heartbeat request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  const has = readFlag(r, "has_generation");
  const generation = r.u64("generation");
  r.end("generation");
  return has ? { group, memberId, generation } : { group, memberId };
}

/** Encodes a Heartbeat response frame. */
export function encodeHeartbeatResponse(
  correlationId: number,
  result: HeartbeatResult,
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    32 + result.assignments.reduce((n, a) => n + 6 + a.topic.length * 3, 0),
  );
  w.u64(result.generation).u8(result.rejoin ? 1 : 0);
  writeAssignments(w, result.assignments);
  return finishFrame(w);
}

/** Decodes a Heartbeat response body. @throws ProtocolError if malformed. */
export function decodeHeartbeatResponse(body: Uint8Array): HeartbeatResult {
  const r = new WireReader(body, "Heartbeat response");
  const generation = r.u64("generation");
  const rejoin = readFlag(r, "rejoin");
  const assignments = readAssignments(r, "assignments");
  r.end("assignments");
  return { generation, rejoin, assignments };
}
