/**
 * Golden bytes for every api of the TCP dispatch table (src/protocol/apis/index.ts): for each, a
 * request and a response frame hand-built from the grammar in its file's first comment, which the
 * encoder must write byte for byte and the decoder must read back to the same value. An api added
 * to the table without a row here fails the first test.
 */
import { describe, expect, it } from "vitest";
import {
  decodeAuthenticateRequest,
  decodeAuthenticateResponse,
  encodeAuthenticateRequest,
  encodeAuthenticateResponse,
} from "../../src/protocol/apis/authenticate.ts";
import type {
  GroupDescription,
  ReplicaFetchResult,
  TopicConfig,
  TopicDescription,
} from "../../src/broker/types.ts";
import {
  decodeCommitOffsetsRequest,
  encodeCommitOffsetsRequest,
} from "../../src/protocol/apis/commit-offsets.ts";
import {
  decodeCreateTopicRequest,
  decodeCreateTopicResponse,
  encodeCreateTopicRequest,
  encodeCreateTopicResponse,
} from "../../src/protocol/apis/create-topic.ts";
import {
  decodeDeleteTopicRequest,
  decodeDeleteTopicResponse,
  encodeDeleteTopicRequest,
  encodeDeleteTopicResponse,
} from "../../src/protocol/apis/delete-topic.ts";
import {
  decodeDescribeGroupRequest,
  decodeDescribeGroupResponse,
  encodeDescribeGroupRequest,
  encodeDescribeGroupResponse,
} from "../../src/protocol/apis/describe-group.ts";
import {
  decodeFetchRequest,
  decodeFetchResponse,
  encodeFetchRequest,
  encodeFetchResponse,
} from "../../src/protocol/apis/fetch.ts";
import {
  decodeHeartbeatRequest,
  decodeHeartbeatResponse,
  encodeHeartbeatRequest,
  encodeHeartbeatResponse,
} from "../../src/protocol/apis/heartbeat.ts";
import {
  decodeIdempotentProduceRequest,
  decodeIdempotentProduceResponse,
  encodeIdempotentProduceRequest,
  encodeIdempotentProduceResponse,
} from "../../src/protocol/apis/idempotent-produce.ts";
import { apis, ApiKey, supportedApi } from "../../src/protocol/apis/index.ts";
import {
  decodeInitProducerEpochRequest,
  decodeInitProducerEpochResponse,
  encodeInitProducerEpochRequest,
  encodeInitProducerEpochResponse,
} from "../../src/protocol/apis/init-producer-epoch.ts";
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
import {
  decodeListOffsetsRequest,
  decodeListOffsetsResponse,
  decodeListOffsetsResponseV1,
  encodeListOffsetsRequest,
  encodeListOffsetsResponse,
  encodeListOffsetsResponseV1,
} from "../../src/protocol/apis/list-offsets.ts";
import {
  decodeMetadataRequest,
  decodeMetadataResponse,
  encodeMetadataRequest,
  encodeMetadataResponse,
} from "../../src/protocol/apis/metadata.ts";
import {
  decodeProduceRequest,
  decodeProduceResponse,
  encodeProduceRequest,
  encodeProduceResponse,
} from "../../src/protocol/apis/produce.ts";
import {
  decodeEmptyResponse,
  decodeRequestHeader,
  decodeResponseHeader,
  encodeEmptyResponse,
} from "../../src/protocol/envelope.ts";
import {
  decodeReplicaFetchRequest,
  decodeReplicaFetchResponse,
  encodeReplicaFetchRequest,
  encodeReplicaFetchResponse,
  encodeReplicaFetchResponseChunks,
} from "../../src/protocol/apis/replica-fetch.ts";
import { EntryBatchBuilder, encodeRecord } from "../../src/storage/record.ts";
import { hex, toHex } from "../helpers/wire.ts";

/** A made-up key of the right shape (a real secret is random). */
const authenticateGoldenKey = "esb_0123456789abcdef_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ";

/** One record, no key, value "v", timestamp 5: the entry bytes of the produce goldens. */
const batch = new EntryBatchBuilder().add(null, new TextEncoder().encode("v"), 5).build();
const entryHex = `
  0000000000000005   timestamp_ms 5
  ffffffff           key_len −1 (no key)
  00000001 76        value_len 1, value "v"
`;

/** A frame and how it is written and read back. */
interface GoldenFrame {
  /** The frame, hand-built from the grammar. */
  frame: Uint8Array;
  /** Writes the value with correlation id {@link correlationId}. */
  encode: () => Uint8Array;
  /** Reads the body back. */
  decode: (body: Uint8Array) => unknown;
  /** What `decode` gives. */
  decoded: unknown;
}

const replicaFetchResult: ReplicaFetchResult = {
  leaderEpoch: 3,
  highWatermark: 5,
  logStartOffset: 0,
  logEndOffset: 6,
  diverging: null,
  epochs: [{ epoch: 3, startOffset: 0 }],
  producers: [
    {
      producerId: "p",
      epoch: 0,
      baseSequence: 0,
      batchCount: 1,
      firstIndex: 0,
      count: 1,
      baseOffset: 0,
      fingerprint: 0x01020304,
      timestampMs: 5,
    },
  ],
  records: { bytes: new Uint8Array(0), count: 0 },
};

/** Every golden frame uses this correlation id. */
const correlationId = 0x0a0b0c0d;

const emptyTopicConfig = {} as TopicConfig;

const topic: TopicDescription = {
  name: "t",
  config: emptyTopicConfig,
  partitions: [
    {
      partition: 0,
      logStartOffset: 0,
      highWatermark: 0,
      sizeBytes: 0,
      segmentCount: 1,
      fenced: false,
    },
  ],
};

const group: GroupDescription = {
  group: "g",
  generation: 1,
  members: [
    {
      memberId: "m",
      sessionTimeoutMs: 1000,
      topics: ["t"],
      assignments: [{ topic: "t", partition: 0 }],
    },
  ],
  offsets: [{ topic: "t", partition: 0, committed: 5, highWatermark: 8, lag: 3, owner: "m" }],
};

const emptyGroup: GroupDescription = { group: "g", generation: 0, members: [], offsets: [] };

/** The golden request and response of each api, by the api's name in the dispatch table. */
const goldens: Record<string, { request: GoldenFrame; response: GoldenFrame }> = {
  Produce: {
    request: {
      frame: hex(`
        00000024           length 36
        0000 0000          api 0 Produce, version 0
        0a0b0c0d           correlation_id
        0001 74            topic "t"
        ffffffff           partition −1 (the broker picks)
        00000001           record_count 1
        ${entryHex}
      `),
      encode: () => encodeProduceRequest(correlationId, { topic: "t", batch }),
      decode: decodeProduceRequest,
      decoded: { topic: "t", batch },
    },
    response: {
      frame: hex(`
        0000001a           length 26
        0a0b0c0d           correlation_id
        0000               error 0
        00000001           span_count 1
        00000000 0000000000000007 00000001   partition 0, base_offset 7, count 1
      `),
      encode: () =>
        encodeProduceResponse(correlationId, {
          spans: [{ partition: 0, baseOffset: 7, count: 1 }],
        }),
      decode: decodeProduceResponse,
      decoded: { spans: [{ partition: 0, baseOffset: 7, count: 1 }] },
    },
  },
  Fetch: {
    request: {
      frame: hex(`
        00000023           length 35
        0001 0000          api 1 Fetch
        0a0b0c0d           correlation_id
        0001 74            topic "t"
        00000002           partition 2
        0000000000000009   offset 9
        00000000           max_records 0 (broker default)
        00001000           max_bytes 4096
        00000000           wait_ms 0
      `),
      encode: () =>
        encodeFetchRequest(correlationId, { topic: "t", partition: 2, offset: 9, maxBytes: 4096 }),
      decode: decodeFetchRequest,
      decoded: { topic: "t", partition: 2, offset: 9, maxBytes: 4096, waitMs: 0 },
    },
    response: {
      frame: hex(`
        00000026           length 38
        0a0b0c0d           correlation_id
        0000               error 0
        0000000000000009   high_watermark 9
        0000000000000003   log_start_offset 3
        0000000000000009   next_offset 9
        00000000           record_count 0
        00000000           records_bytes 0
      `),
      encode: () =>
        encodeFetchResponse(correlationId, {
          records: { bytes: new Uint8Array(0), count: 0 },
          nextOffset: 9,
          highWatermark: 9,
          logStartOffset: 3,
        }),
      decode: decodeFetchResponse,
      decoded: {
        records: { bytes: new Uint8Array(0), count: 0 },
        nextOffset: 9,
        highWatermark: 9,
        logStartOffset: 3,
      },
    },
  },
  CreateTopic: {
    request: {
      frame: hex(`
        00000013           length 19
        0002 0000          api 2 CreateTopic
        0a0b0c0d           correlation_id
        0001 74            topic "t"
        00000001           partitions 1
        00000000           config_len 0 (no config)
      `),
      encode: () => encodeCreateTopicRequest(correlationId, { name: "t", partitions: 1 }),
      decode: decodeCreateTopicRequest,
      decoded: { name: "t", partitions: 1 },
    },
    response: {
      frame: hex(`
        00000034           length 52
        0a0b0c0d           correlation_id
        0000               error 0
        0001 74            name "t"
        00000002 7b7d      config {}
        00000001           partition_count 1
        00000000           partition 0
        0000000000000000   log_start_offset 0
        0000000000000000   high_watermark 0
        0000000000000000   size_bytes 0
        00000001           segment_count 1
        00                 fenced 0
      `),
      encode: () => encodeCreateTopicResponse(correlationId, topic),
      decode: decodeCreateTopicResponse,
      decoded: topic,
    },
  },
  Metadata: {
    request: {
      frame: hex(`
        0000000f           length 15
        0003 0000          api 3 Metadata
        0a0b0c0d           correlation_id
        00000001           topic_count 1
        0001 74            topic "t"
      `),
      encode: () => encodeMetadataRequest(correlationId, { topics: ["t"] }),
      decode: decodeMetadataRequest,
      decoded: { topics: ["t"] },
    },
    response: {
      frame: hex(`
        00000017           length 23
        0a0b0c0d           correlation_id
        0000               error 0
        00000001           topic_count 1
        0001 74            name "t"
        00000002 7b7d      config {}
        00000000           partition_count 0
      `),
      encode: () =>
        encodeMetadataResponse(correlationId, [
          { name: "t", config: emptyTopicConfig, partitions: [] },
        ]),
      decode: decodeMetadataResponse,
      decoded: [{ name: "t", config: emptyTopicConfig, partitions: [] }],
    },
  },
  ListOffsets: {
    request: {
      frame: hex(`
        0000000f           length 15
        0004 0000          api 4 ListOffsets
        0a0b0c0d           correlation_id
        0001 74            topic "t"
        00000003           partition 3
      `),
      encode: () => encodeListOffsetsRequest(correlationId, { topic: "t", partition: 3 }),
      decode: decodeListOffsetsRequest,
      decoded: { topic: "t", partition: 3 },
    },
    response: {
      frame: hex(`
        00000016           length 22
        0a0b0c0d           correlation_id
        0000               error 0
        0000000000000001   log_start_offset 1
        0000000000000002   high_watermark 2
      `),
      encode: () =>
        encodeListOffsetsResponse(correlationId, { logStartOffset: 1, highWatermark: 2 }),
      decode: decodeListOffsetsResponse,
      decoded: { logStartOffset: 1, highWatermark: 2 },
    },
  },
  DeleteTopic: {
    request: {
      frame: hex(`
        0000000b           length 11
        0005 0000          api 5 DeleteTopic
        0a0b0c0d           correlation_id
        0001 74            topic "t"
      `),
      encode: () => encodeDeleteTopicRequest(correlationId, { topic: "t" }),
      decode: decodeDeleteTopicRequest,
      decoded: { topic: "t" },
    },
    response: {
      frame: hex(`
        00000006           length 6
        0a0b0c0d           correlation_id
        0000               error 0 (empty body)
      `),
      encode: () => encodeDeleteTopicResponse(correlationId),
      decode: decodeDeleteTopicResponse,
      decoded: undefined,
    },
  },
  JoinGroup: {
    request: {
      frame: hex(`
        00000018           length 24
        0006 0000          api 6 JoinGroup
        0a0b0c0d           correlation_id
        0001 67            group "g"
        0000               member_id "" (a new member)
        00000000           session_timeout_ms 0 (broker default)
        00000001           topic_count 1
        0001 74            topic "t"
      `),
      encode: () => encodeJoinGroupRequest(correlationId, { group: "g", topics: ["t"] }),
      decode: decodeJoinGroupRequest,
      decoded: { group: "g", topics: ["t"] },
    },
    response: {
      frame: hex(`
        00000020           length 32
        0a0b0c0d           correlation_id
        0000               error 0
        0001 6d            member_id "m"
        0000000000000001   generation 1
        00007530           session_timeout_ms 30 000
        00000001           assignment_count 1
        0001 74 00000000   topic "t", partition 0
      `),
      encode: () =>
        encodeJoinGroupResponse(correlationId, {
          memberId: "m",
          generation: 1,
          sessionTimeoutMs: 30_000,
          assignments: [{ topic: "t", partition: 0 }],
        }),
      decode: decodeJoinGroupResponse,
      decoded: {
        memberId: "m",
        generation: 1,
        sessionTimeoutMs: 30_000,
        assignments: [{ topic: "t", partition: 0 }],
      },
    },
  },
  Heartbeat: {
    request: {
      frame: hex(`
        00000017           length 23
        0007 0000          api 7 Heartbeat
        0a0b0c0d           correlation_id
        0001 67            group "g"
        0001 6d            member_id "m"
        01                 has_generation 1
        0000000000000001   generation 1
      `),
      encode: () =>
        encodeHeartbeatRequest(correlationId, { group: "g", memberId: "m", generation: 1 }),
      decode: decodeHeartbeatRequest,
      decoded: { group: "g", memberId: "m", generation: 1 },
    },
    response: {
      frame: hex(`
        00000013           length 19
        0a0b0c0d           correlation_id
        0000               error 0
        0000000000000002   generation 2
        01                 rejoin 1
        00000000           assignment_count 0
      `),
      encode: () =>
        encodeHeartbeatResponse(correlationId, { generation: 2, rejoin: true, assignments: [] }),
      decode: decodeHeartbeatResponse,
      decoded: { generation: 2, rejoin: true, assignments: [] },
    },
  },
  LeaveGroup: {
    request: {
      frame: hex(`
        0000000e           length 14
        0008 0000          api 8 LeaveGroup
        0a0b0c0d           correlation_id
        0001 67            group "g"
        0001 6d            member_id "m"
      `),
      encode: () => encodeLeaveGroupRequest(correlationId, { group: "g", memberId: "m" }),
      decode: decodeLeaveGroupRequest,
      decoded: { group: "g", memberId: "m" },
    },
    response: {
      frame: hex(`
        00000006           length 6
        0a0b0c0d           correlation_id
        0000               error 0 (empty body)
      `),
      encode: () => encodeEmptyResponse(correlationId),
      decode: decodeEmptyResponse,
      decoded: undefined,
    },
  },
  CommitOffsets: {
    request: {
      frame: hex(`
        00000029           length 41
        0009 0000          api 9 CommitOffsets
        0a0b0c0d           correlation_id
        0001 67            group "g"
        0000               member_id "" (a standalone consumer)
        00                 has_generation 0
        0000000000000000   generation (unused)
        00000001           offset_count 1
        0001 74            topic "t"
        00000000           partition 0
        0000000000000005   offset 5
      `),
      encode: () =>
        encodeCommitOffsetsRequest(correlationId, {
          group: "g",
          offsets: [{ topic: "t", partition: 0, offset: 5 }],
        }),
      decode: decodeCommitOffsetsRequest,
      decoded: { group: "g", offsets: [{ topic: "t", partition: 0, offset: 5 }] },
    },
    response: {
      frame: hex(`
        00000006           length 6
        0a0b0c0d           correlation_id
        0000               error 0 (empty body)
      `),
      encode: () => encodeEmptyResponse(correlationId),
      decode: decodeEmptyResponse,
      decoded: undefined,
    },
  },
  DescribeGroup: {
    request: {
      frame: hex(`
        0000000b           length 11
        000a 0000          api 10 DescribeGroup
        0a0b0c0d           correlation_id
        0001 67            group "g"
      `),
      encode: () => encodeDescribeGroupRequest(correlationId, { group: "g" }),
      decode: decodeDescribeGroupRequest,
      decoded: { group: "g" },
    },
    response: {
      frame: hex(`
        0000004d           length 77
        0a0b0c0d           correlation_id
        0000               error 0
        0001 67            group "g"
        0000000000000001   generation 1
        00000001           member_count 1
        0001 6d            member_id "m"
        000003e8           session_timeout_ms 1000
        00000001 0001 74   topic_count 1, topic "t"
        00000001           assignment_count 1
        0001 74 00000000   topic "t", partition 0
        00000001           offset_count 1
        0001 74            topic "t"
        00000000           partition 0
        07                 present: committed, high_watermark, owner
        0000000000000005   committed 5
        0000000000000008   high_watermark 8
        0001 6d            owner "m"
      `),
      encode: () => encodeDescribeGroupResponse(correlationId, group),
      decode: decodeDescribeGroupResponse,
      decoded: group,
    },
  },
  ListGroups: {
    request: {
      frame: hex(`
        00000008           length 8
        000b 0000          api 11 ListGroups
        0a0b0c0d           correlation_id (empty body)
      `),
      encode: () => encodeListGroupsRequest(correlationId),
      decode: decodeListGroupsRequest,
      decoded: undefined,
    },
    response: {
      frame: hex(`
        0000001d           length 29
        0a0b0c0d           correlation_id
        0000               error 0
        00000001           group_count 1
        0001 67            group "g"
        0000000000000000   generation 0
        00000000           member_count 0
        00000000           offset_count 0
      `),
      encode: () => encodeListGroupsResponse(correlationId, [emptyGroup]),
      decode: decodeListGroupsResponse,
      decoded: [emptyGroup],
    },
  },
  IdempotentProduce: {
    request: {
      frame: hex(`
        00000033           length 51
        000c 0000          api 12 IdempotentProduce
        0a0b0c0d           correlation_id
        0001 74            topic "t"
        00000000           partition 0
        0001 70            producer_id "p"
        00000001           producer_epoch 1
        0000000000000004   base_sequence 4
        00000001           record_count 1
        ${entryHex}
      `),
      encode: () =>
        encodeIdempotentProduceRequest(correlationId, {
          topic: "t",
          partition: 0,
          producer: { id: "p", epoch: 1, sequence: 4 },
          batch,
        }),
      decode: decodeIdempotentProduceRequest,
      decoded: { topic: "t", partition: 0, producer: { id: "p", epoch: 1, sequence: 4 }, batch },
    },
    response: {
      frame: hex(`
        0000001b           length 27
        0a0b0c0d           correlation_id
        0000               error 0
        01                 duplicate 1
        00000001           span_count 1
        00000000 0000000000000007 00000001   partition 0, base_offset 7, count 1
      `),
      encode: () =>
        encodeIdempotentProduceResponse(correlationId, {
          spans: [{ partition: 0, baseOffset: 7, count: 1 }],
          duplicate: true,
        }),
      decode: decodeIdempotentProduceResponse,
      decoded: { spans: [{ partition: 0, baseOffset: 7, count: 1 }], duplicate: true },
    },
  },
  Authenticate: {
    request: {
      frame: hex(`
        0000004a           length 74
        000d 0000          api 13 Authenticate
        0a0b0c0d           correlation_id
        0040               key: length 64
        6573625f30313233343536373839616263646566   "esb_0123456789abcdef"
        5f                                         "_"
        6162636465666768696a6b6c6d6e6f707172737475767778797a   "a" … "z"
        4142434445464748494a4b4c4d4e4f5051         "A" … "Q"
      `),
      encode: () => encodeAuthenticateRequest(correlationId, authenticateGoldenKey),
      decode: decodeAuthenticateRequest,
      decoded: { key: authenticateGoldenKey },
    },
    response: {
      frame: hex(`
        00000022           length 34
        0a0b0c0d           correlation_id
        0000               error 0
        0010 30313233343536373839616263646566   key_id "0123456789abcdef"
        0001 6b            name "k"
        0005 61646d696e    role "admin"
      `),
      encode: () =>
        encodeAuthenticateResponse(correlationId, {
          keyId: "0123456789abcdef",
          name: "k",
          role: "admin",
        }),
      decode: decodeAuthenticateResponse,
      decoded: { keyId: "0123456789abcdef", name: "k", role: "admin" },
    },
  },
  ReplicaFetch: {
    request: {
      frame: hex(`
        00000032           length 50
        000e 0001          api 14 ReplicaFetch, version 1
        0a0b0c0d           correlation_id
        0001 74            topic "t"
        00000000           partition 0
        00000002           replica_id 2
        00000003           leader_epoch 3
        0000000000000007   fetch_offset 7
        00000003           last_fetched_epoch 3
        00000400           max_bytes 1024
        000001f4           wait_ms 500
        0001 73            credential "s"
        0002 4c31          incarnation "L1"
      `),
      encode: () =>
        encodeReplicaFetchRequest(correlationId, {
          topic: "t",
          partition: 0,
          replicaId: 2,
          leaderEpoch: 3,
          fetchOffset: 7,
          lastFetchedEpoch: 3,
          maxBytes: 1024,
          waitMs: 500,
          credential: new TextEncoder().encode("s"),
          incarnation: "L1",
        }),
      decode: decodeReplicaFetchRequest,
      decoded: {
        topic: "t",
        partition: 0,
        replicaId: 2,
        leaderEpoch: 3,
        fetchOffset: 7,
        lastFetchedEpoch: 3,
        maxBytes: 1024,
        waitMs: 500,
        credential: new TextEncoder().encode("s"),
        incarnation: "L1",
      },
    },
    response: {
      frame: hex(`
        00000073           length 115
        0a0b0c0d           correlation_id
        0000               error 0
        00000003           leader_epoch 3
        0000000000000005   high_watermark 5
        0000000000000000   log_start_offset 0
        0000000000000006   log_end_offset 6
        ffffffff           diverging_epoch −1
        0000000000000000   diverging_end_offset 0
        0001               epoch_count 1
        00000003 0000000000000000   epoch 3 from offset 0
        00000001           producer_count 1
        0001 70            producer_id "p"
        00000000           epoch 0
        00000000           base_sequence 0
        00000001           batch_count 1
        00000000           first_index 0
        00000001           count 1
        0000000000000000   base_offset 0
        01020304           fingerprint
        0000000000000005   timestamp_ms 5
        00000000           record_count 0
        00000000           records_bytes 0
      `),
      encode: () => encodeReplicaFetchResponse(correlationId, replicaFetchResult),
      decode: decodeReplicaFetchResponse,
      decoded: replicaFetchResult,
    },
  },
  InitProducerEpoch: {
    request: {
      frame: hex(`
        0000000f           length 15
        000f 0000          api 15 InitProducerEpoch
        0a0b0c0d           correlation_id
        0001 70            producer_id "p"
        00000007           at_least 7
      `),
      encode: () => encodeInitProducerEpochRequest(correlationId, { producerId: "p", atLeast: 7 }),
      decode: decodeInitProducerEpochRequest,
      decoded: { producerId: "p", atLeast: 7 },
    },
    response: {
      frame: hex(`
        0000000a           length 10
        0a0b0c0d           correlation_id
        0000               error 0
        00000008           epoch 8
      `),
      encode: () => encodeInitProducerEpochResponse(correlationId, { epoch: 8 }),
      decode: decodeInitProducerEpochResponse,
      decoded: { epoch: 8 },
    },
  },
};

describe("ReplicaFetch answers from the leader's kept recent writes", () => {
  it("encode their chunks as the very frame one joined buffer makes, and decode as one", () => {
    const record = (offset: number) =>
      encodeRecord({
        offset,
        timestampMs: 9,
        key: null,
        value: new TextEncoder().encode(`r${offset}`),
      });
    const chunks = [record(0), new Uint8Array(Buffer.concat([record(1), record(2)])), record(3)];
    const joined = new Uint8Array(Buffer.concat(chunks));
    const one = encodeReplicaFetchResponse(correlationId, {
      ...replicaFetchResult,
      records: { bytes: joined, count: 4 },
    });
    const parts = encodeReplicaFetchResponseChunks(correlationId, {
      ...replicaFetchResult,
      records: { bytes: new Uint8Array(0), count: 4 },
      recordChunks: chunks,
    });
    expect(parts.slice(1)).toEqual(chunks); // not copied
    expect(toHex(new Uint8Array(Buffer.concat(parts)))).toBe(toHex(one));
    const decoded = decodeReplicaFetchResponse(decodeResponseHeader(one.subarray(4)).body);
    expect(decoded.records.count).toBe(4);
    expect(Buffer.from(decoded.records.bytes)).toEqual(Buffer.from(joined));
  });
});

describe("the TCP dispatch table", () => {
  it("has golden request and response bytes for every api it serves", () => {
    expect(Object.keys(goldens).sort()).toEqual(apis.map((a) => a.name).sort());
  });

  it("numbers its apis 0 to 15 in order, each at version 0 (Metadata and ListOffsets also 1, ReplicaFetch 1 and 2), and ApiKey names them", () => {
    expect(apis.map((a) => a.key)).toEqual(apis.map((_, i) => i));
    for (const api of apis) {
      expect(api.versionMax).toBe(
        api.name === "ReplicaFetch"
          ? 2
          : api.name === "Metadata" || api.name === "ListOffsets"
            ? 1
            : 0,
      );
      expect(ApiKey[api.name]).toBe(api.key);
      expect(supportedApi(api.key, 0)).toBe(api);
      expect(supportedApi(api.key, api.versionMax)).toBe(api);
      expect(supportedApi(api.key, api.versionMax + 1)).toBeUndefined();
    }
  });
});

describe("ReplicaFetch version 0 (an older follower)", () => {
  it("decodes without an incarnation, as the empty one no leader credits", () => {
    const body = hex(`
      0001 74 00000000 00000002 00000003 0000000000000007 00000003 00000400 000001f4 0001 73
    `);
    expect(decodeReplicaFetchRequest(body, 0).incarnation).toBe("");
    // Version 1 requires the field.
    expect(() => decodeReplicaFetchRequest(body, 1)).toThrow(/incarnation/);
  });
});

describe('ReplicaFetch version 2 (the topic id of the follower\'s copy: docs/cluster.md "Topic ids")', () => {
  const request = {
    topic: "t",
    partition: 0,
    replicaId: 2,
    leaderEpoch: 3,
    fetchOffset: 7,
    lastFetchedEpoch: 3,
    maxBytes: 1024,
    waitMs: 500,
    credential: new Uint8Array([0x73]),
    incarnation: "i",
  };

  it("is written when a topic id is given, and read back with it", () => {
    const topicId = "0123456789abcdef0123456789abcdef";
    const frame = encodeReplicaFetchRequest(9, { ...request, topicId });
    const header = decodeRequestHeader(frame.subarray(4));
    expect(header).toMatchObject({ api: 14, version: 2, correlationId: 9 });
    expect(toHex(header.body)).toBe(
      toHex(
        hex(`
          0001 74 00000000 00000002 00000003 0000000000000007 00000003 00000400 000001f4 0001 73
          0001 69 0020 ${toHex(new TextEncoder().encode(topicId))}
        `),
      ),
    );
    expect(decodeReplicaFetchRequest(header.body, 2)).toEqual({ ...request, topicId });
    // Version 2 requires the field; version 1 has none.
    expect(() => decodeReplicaFetchRequest(header.body.subarray(0, -34), 2)).toThrow(/topic_id/);
    expect(decodeReplicaFetchRequest(header.body.subarray(0, -34), 1)).toEqual(request);
  });

  it("is not written without a topic id: version 1, as an older leader takes", () => {
    const header = decodeRequestHeader(encodeReplicaFetchRequest(9, request).subarray(4));
    expect(header.version).toBe(1);
    expect(decodeReplicaFetchRequest(header.body, 1)).toEqual(request);
  });
});

describe('ListOffsets version 1 (an offset by timestamp: docs/storage.md "Finding an offset by timestamp")', () => {
  it("writes timestamp_ms after the partition, and answers the offset after the bounds", () => {
    const frame = encodeListOffsetsRequest(9, {
      topic: "t",
      partition: 3,
      timestampMs: 1700000000000,
    });
    expect(toHex(frame)).toBe(
      toHex(
        hex(`
          00000017           length 23
          0004 0001          api 4 ListOffsets, version 1
          00000009           correlation_id
          0001 74            topic "t"
          00000003           partition 3
          0000018bcfe56800   timestamp_ms 1700000000000
        `),
      ),
    );
    const header = decodeRequestHeader(frame.subarray(4));
    expect(header).toMatchObject({ api: 4, version: 1, correlationId: 9 });
    expect(decodeListOffsetsRequest(header.body, 1)).toEqual({
      topic: "t",
      partition: 3,
      timestampMs: 1700000000000,
    });
    // Version 1 requires the field; version 0 has none.
    expect(() => decodeListOffsetsRequest(header.body.subarray(0, -8), 1)).toThrow(/timestamp_ms/);
    expect(() => decodeListOffsetsRequest(header.body, 0)).toThrow(/partition/);
    const answer = encodeListOffsetsResponseV1(9, {
      logStartOffset: 1,
      highWatermark: 9,
      offset: 4,
    });
    expect(toHex(answer)).toBe(
      toHex(
        hex(`
          0000001e           length 30
          00000009           correlation_id
          0000               error 0
          0000000000000001   log_start_offset 1
          0000000000000009   high_watermark 9
          0000000000000004   offset 4
        `),
      ),
    );
    expect(decodeListOffsetsResponseV1(decodeResponseHeader(answer.subarray(4)).body)).toEqual({
      logStartOffset: 1,
      highWatermark: 9,
      offset: 4,
    });
  });
});

describe("golden bytes of every api", () => {
  for (const api of apis) {
    const golden = goldens[api.name];
    if (golden === undefined) continue;

    it(`${api.name} request: the encoder writes the golden frame and the decoder reads it back`, () => {
      const frame = golden.request.encode();
      expect(toHex(frame)).toBe(toHex(golden.request.frame));
      const header = decodeRequestHeader(golden.request.frame.subarray(4));
      // ReplicaFetch's encoder writes version 1 (the follower's incarnation); the rest version 0.
      const version = api.name === "ReplicaFetch" ? 1 : 0;
      expect(header).toMatchObject({ api: api.key, version, correlationId });
      expect(golden.request.decode(header.body)).toEqual(golden.request.decoded);
    });

    it(`${api.name} response: the encoder writes the golden frame and the decoder reads it back`, () => {
      const frame = golden.response.encode();
      expect(toHex(frame)).toBe(toHex(golden.response.frame));
      const header = decodeResponseHeader(golden.response.frame.subarray(4));
      expect(header).toMatchObject({ correlationId, error: 0 });
      expect(golden.response.decode(header.body)).toEqual(golden.response.decoded);
    });
  }
});
