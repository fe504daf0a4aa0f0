/**
 * api 8 LeaveGroup, version 0: a member leaves its group; its partitions go to the others at
 * once (`Broker.leaveGroup`).
 *
 * ```
 * request       = group str16 | member_id str16
 * response      = (empty)
 * ```
 */
import { encodeEmptyResponse, finishFrame, startRequest } from "../envelope.ts";
import { strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** LeaveGroup: decode, `broker.leaveGroup`, an empty answer. */
export const leaveGroupApi = defineApi({
  key: 8,
  name: "LeaveGroup",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeLeaveGroupRequest(body);
    return { response: broker.leaveGroup(request).then(() => encodeEmptyResponse(correlationId)) };
  },
});

/** Encodes a LeaveGroup request frame. */
export function encodeLeaveGroupRequest(
  correlationId: number,
  request: { group: string; memberId: string },
): Uint8Array {
  const group = strBytes(request.group, "leave_group.group");
  const member = strBytes(request.memberId, "leave_group.member_id");
  const w = startRequest(leaveGroupApi.key, correlationId, 16 + group.length + member.length);
  w.u16(group.length).bytes(group).u16(member.length).bytes(member);
  return finishFrame(w);
}

/** Decodes a LeaveGroup request body. @throws ProtocolError naming the field. */
export function decodeLeaveGroupRequest(body: Uint8Array): { group: string; memberId: string } {
  const r = new WireReader(body, "LeaveGroup request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  r.end("member_id");
  return { group, memberId };
}
