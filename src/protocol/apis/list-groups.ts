/**
 * api 11 ListGroups, version 0: every consumer group, described (`Broker.listGroups`).
 *
 * ```
 * request       = (empty)
 * response      = group_count u32 | group_entry × group_count   (group_entry as in DescribeGroup)
 * ```
 */
import type { GroupDescription } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { checkRepeat, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";
import { groupEntryBytesEstimate, readGroupEntry, writeGroupEntry } from "./describe-group.ts";

/** ListGroups: decode, `broker.listGroups`, encode. */
export const listGroupsApi = defineApi({
  key: 11,
  name: "ListGroups",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    decodeListGroupsRequest(body);
    return {
      response: broker
        .listGroups()
        .then((groups) => encodeListGroupsResponse(correlationId, groups)),
    };
  },
});

/** Encodes a ListGroups request frame (empty body). */
export function encodeListGroupsRequest(correlationId: number): Uint8Array {
  return finishFrame(startRequest(listGroupsApi.key, correlationId, 12));
}

/** Decodes a ListGroups request body (must be empty). */
export function decodeListGroupsRequest(body: Uint8Array): void {
  new WireReader(body, "ListGroups request").end("correlation_id");
}

/** Encodes a ListGroups response frame. */
export function encodeListGroupsResponse(
  correlationId: number,
  groups: readonly GroupDescription[],
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    14 + groups.reduce((n, g) => n + groupEntryBytesEstimate(g), 0),
  );
  w.u32(groups.length);
  for (const g of groups) writeGroupEntry(w, g);
  return finishFrame(w);
}

/** Decodes a ListGroups response body. @throws ProtocolError if malformed. */
export function decodeListGroupsResponse(body: Uint8Array): GroupDescription[] {
  const r = new WireReader(body, "ListGroups response");
  const count = r.u32("group_count");
  // A group_entry is at least 2 + 8 + 4 + 4 bytes.
  checkRepeat(r, count, 18, "group_count");
  const groups: GroupDescription[] = [];
  for (let i = 0; i < count; i++) groups.push(readGroupEntry(r, `groups[${i}]`));
  r.end(count === 0 ? "group_count" : `groups[${count - 1}]`);
  return groups;
}
