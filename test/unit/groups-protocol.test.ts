/** Consumer-group apis 6–11 on the TCP wire: round trips of every request and response, and grammar violations. */
import { describe, expect, it } from "vitest";
import type { GroupDescription } from "../../src/broker/types.ts";
import {
  decodeCommitOffsetsRequest,
  encodeCommitOffsetsRequest,
} from "../../src/protocol/apis/commit-offsets.ts";
import {
  decodeDescribeGroupRequest,
  decodeDescribeGroupResponse,
  encodeDescribeGroupRequest,
  encodeDescribeGroupResponse,
} from "../../src/protocol/apis/describe-group.ts";
import {
  decodeHeartbeatRequest,
  decodeHeartbeatResponse,
  encodeHeartbeatRequest,
  encodeHeartbeatResponse,
} from "../../src/protocol/apis/heartbeat.ts";
import { ApiKey } from "../../src/protocol/apis/index.ts";
import {
  decodeJoinGroupRequest,
  decodeJoinGroupResponse,
  encodeJoinGroupRequest,
  encodeJoinGroupResponse,
} from "../../src/protocol/apis/join-group.ts";
import {
  decodeLeaveGroupRequest,
  encodeLeaveGroupRequest,
} from "../../src/protocol/apis/leave-group.ts";
import {
  decodeListGroupsRequest,
  decodeListGroupsResponse,
  encodeListGroupsRequest,
  encodeListGroupsResponse,
} from "../../src/protocol/apis/list-groups.ts";
import { decodeEmptyResponse, encodeEmptyResponse } from "../../src/protocol/envelope.ts";
import { protocolError, requestBody, responseBody } from "../helpers/wire.ts";

/** The field a grammar violation names. */
const fieldOf = (fn: () => unknown): string => protocolError(fn).field;

const described: GroupDescription = {
  group: "analytics",
  generation: 7,
  members: [
    {
      memberId: "m-1",
      topics: ["a", "b"],
      sessionTimeoutMs: 10_000,
      assignments: [
        { topic: "a", partition: 0 },
        { topic: "b", partition: 3 },
      ],
    },
    { memberId: "m-2", topics: ["a"], sessionTimeoutMs: 500, assignments: [] },
  ],
  offsets: [
    { topic: "a", partition: 0, committed: 12, highWatermark: 20, lag: 8, owner: "m-1" },
    { topic: "a", partition: 1, committed: null, highWatermark: 4, lag: null, owner: null },
    { topic: "b", partition: 3, committed: 2 ** 40, highWatermark: null, lag: null, owner: "m-1" },
  ],
};

describe("consumer-group apis on the wire", () => {
  it("JoinGroup: a new member (no id, default timeout) and a rejoin round-trip", () => {
    expect(
      decodeJoinGroupRequest(
        requestBody(
          encodeJoinGroupRequest(1, { group: "g", topics: ["a", "b"] }),
          ApiKey.JoinGroup,
        ),
      ),
    ).toEqual({ group: "g", topics: ["a", "b"] });
    const rejoin = { group: "g", topics: ["a"], sessionTimeoutMs: 1500, memberId: "m-1" };
    expect(
      decodeJoinGroupRequest(requestBody(encodeJoinGroupRequest(2, rejoin), ApiKey.JoinGroup)),
    ).toEqual(rejoin);
    const result = {
      memberId: "m-1",
      generation: 3,
      sessionTimeoutMs: 1500,
      assignments: [{ topic: "a", partition: 2 }],
    };
    expect(decodeJoinGroupResponse(responseBody(encodeJoinGroupResponse(2, result)))).toEqual(
      result,
    );
  });

  it("Heartbeat: with and without a generation", () => {
    expect(
      decodeHeartbeatRequest(
        requestBody(encodeHeartbeatRequest(1, { group: "g", memberId: "m" }), ApiKey.Heartbeat),
      ),
    ).toEqual({ group: "g", memberId: "m" });
    expect(
      decodeHeartbeatRequest(
        requestBody(
          encodeHeartbeatRequest(1, { group: "g", memberId: "m", generation: 0 }),
          ApiKey.Heartbeat,
        ),
      ),
    ).toEqual({ group: "g", memberId: "m", generation: 0 });
    const result = { generation: 9, rejoin: true, assignments: [{ topic: "t", partition: 1 }] };
    expect(decodeHeartbeatResponse(responseBody(encodeHeartbeatResponse(1, result)))).toEqual(
      result,
    );
  });

  it("LeaveGroup and the empty responses", () => {
    expect(
      decodeLeaveGroupRequest(
        requestBody(encodeLeaveGroupRequest(1, { group: "g", memberId: "m" }), ApiKey.LeaveGroup),
      ),
    ).toEqual({ group: "g", memberId: "m" });
    expect(decodeEmptyResponse(responseBody(encodeEmptyResponse(1)))).toBeUndefined();
    expect(fieldOf(() => decodeEmptyResponse(Uint8Array.of(0)))).toBe("error");
  });

  it("CommitOffsets: a member's commit and a standalone one", () => {
    const member = {
      group: "g",
      memberId: "m",
      generation: 4,
      offsets: [
        { topic: "a", partition: 0, offset: 2 ** 50 },
        { topic: "b", partition: 7, offset: 0 },
      ],
    };
    expect(
      decodeCommitOffsetsRequest(
        requestBody(encodeCommitOffsetsRequest(1, member), ApiKey.CommitOffsets),
      ),
    ).toEqual(member);
    const standalone = { group: "g", offsets: [{ topic: "a", partition: 0, offset: 5 }] };
    expect(
      decodeCommitOffsetsRequest(
        requestBody(encodeCommitOffsetsRequest(1, standalone), ApiKey.CommitOffsets),
      ),
    ).toEqual(standalone);
    expect(
      fieldOf(() =>
        encodeCommitOffsetsRequest(1, {
          group: "g",
          offsets: [{ topic: "a", partition: 0, offset: -1 }],
        }),
      ),
    ).toBe("commit_offsets.offsets[0].offset");
  });

  it("DescribeGroup and ListGroups carry committed, high watermark and owner only where set, and derive lag", () => {
    expect(
      decodeDescribeGroupRequest(
        requestBody(encodeDescribeGroupRequest(1, { group: "analytics" }), ApiKey.DescribeGroup),
      ),
    ).toEqual({ group: "analytics" });
    expect(
      decodeDescribeGroupResponse(responseBody(encodeDescribeGroupResponse(1, described))),
    ).toEqual(described);
    expect(
      decodeListGroupsRequest(requestBody(encodeListGroupsRequest(1), ApiKey.ListGroups)),
    ).toBeUndefined();
    expect(
      decodeListGroupsResponse(
        responseBody(
          encodeListGroupsResponse(1, [
            described,
            { ...described, group: "b", members: [], offsets: [] },
          ]),
        ),
      ),
    ).toEqual([described, { ...described, group: "b", members: [], offsets: [] }]);
    expect(decodeListGroupsResponse(responseBody(encodeListGroupsResponse(1, [])))).toEqual([]);
  });

  it("refuses bad flags, short bodies, trailing bytes and repeat counts the bytes cannot hold, naming the field", () => {
    const hb = requestBody(
      encodeHeartbeatRequest(1, { group: "g", memberId: "m", generation: 1 }),
      ApiKey.Heartbeat,
    ).slice();
    hb[6] = 2; // has_generation
    expect(fieldOf(() => decodeHeartbeatRequest(hb))).toBe("has_generation");
    const join = requestBody(
      encodeJoinGroupRequest(1, { group: "g", topics: ["a"] }),
      ApiKey.JoinGroup,
    );
    expect(fieldOf(() => decodeJoinGroupRequest(join.subarray(0, join.length - 1)))).toBe(
      "topics[0]",
    );
    const longer = new Uint8Array(join.length + 1);
    longer.set(join);
    expect(fieldOf(() => decodeJoinGroupRequest(longer))).toBe("topics[0]");
    const huge = join.slice();
    new DataView(huge.buffer).setUint32(10, 0xffff_ffff); // topic_count after group (2+1), member_id (2), timeout (4)
    expect(fieldOf(() => decodeJoinGroupRequest(huge))).toBe("topic_count");
    const d = responseBody(encodeDescribeGroupResponse(1, described)).slice();
    const present = d.length - (2 + "m-1".length) - 8 - 8 - 1; // the last offset entry's present byte
    d[present] = 8;
    expect(fieldOf(() => decodeDescribeGroupResponse(d))).toBe("group.offsets[2].present");
  });
});
