/**
 * Metadata version 1 (docs/protocol.md "3 Metadata"): the cluster section after version 0's
 * answer, byte for byte, and its decoder's refusals.
 */
import { describe, expect, it } from "vitest";
import type { ClusterMetadata, TopicDescription } from "../../src/broker/types.ts";
import {
  decodeMetadataResponse,
  decodeMetadataV1Response,
  encodeMetadataRequest,
  encodeMetadataResponse,
} from "../../src/protocol/apis/metadata.ts";
import { decodeRequestHeader, decodeResponseHeader } from "../../src/protocol/envelope.ts";
import { defaultTopicConfig } from "../../src/broker/config.ts";

const topic: TopicDescription = {
  name: "t",
  config: { ...defaultTopicConfig, replication_factor: 3, min_insync_replicas: 2 },
  partitions: [
    {
      partition: 0,
      logStartOffset: 0,
      highWatermark: 5,
      sizeBytes: 100,
      segmentCount: 1,
      fenced: false,
    },
  ],
};

const cluster: ClusterMetadata = {
  cluster_id: "c1",
  node_id: 2,
  controller: 3,
  brokers: [
    { node_id: 1, tcp: "h1:9092", http: "http://h1:8080" },
    { node_id: 2, tcp: "h2:9092", http: "http://h2:8080" },
  ],
  topics: [
    {
      name: "t",
      partitions: [
        { partition: 0, leader: 1, leader_epoch: 4, replicas: [1, 2, 3], isr: [1, 2], elr: [3] },
      ],
    },
  ],
};

/** The body of a response frame (after length, correlation id and error). */
function body(frame: Uint8Array): Uint8Array {
  return decodeResponseHeader(frame.subarray(4)).body;
}

describe("Metadata version 1", () => {
  it("a request carries version 1 in its header and the same body as version 0", () => {
    const v0 = encodeMetadataRequest(7, { topics: ["t"] });
    const v1 = encodeMetadataRequest(7, { topics: ["t"] }, 1);
    expect(decodeRequestHeader(v1.subarray(4))).toMatchObject({ api: 3, version: 1 });
    expect(decodeRequestHeader(v0.subarray(4)).version).toBe(0);
    expect(v1.subarray(12)).toEqual(v0.subarray(12));
  });

  it("the answer is version 0's followed by the cluster; version 0 readers are unaffected", () => {
    const v0 = body(encodeMetadataResponse(7, [topic]));
    const v1 = body(encodeMetadataResponse(7, [topic], cluster));
    expect(v1.subarray(0, v0.length)).toEqual(v0);
    const tail = [...v1.subarray(v0.length)];
    const str16 = (s: string) => [0, s.length, ...Buffer.from(s)];
    const u32 = (n: number) => [(n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
    expect(tail).toEqual([
      1,
      ...str16("c1"),
      ...u32(2),
      ...u32(3),
      ...u32(2),
      ...u32(1),
      ...str16("h1:9092"),
      ...str16("http://h1:8080"),
      ...u32(2),
      ...str16("h2:9092"),
      ...str16("http://h2:8080"),
      ...u32(1),
      ...str16("t"),
      ...u32(1),
      ...u32(0),
      ...u32(1),
      ...u32(4),
      0,
      3,
      ...u32(1),
      ...u32(2),
      ...u32(3),
      0,
      2,
      ...u32(1),
      ...u32(2),
      0,
      1,
      ...u32(3),
    ]);
    expect(decodeMetadataV1Response(v1)).toEqual({ topics: [topic], cluster });
    expect(decodeMetadataResponse(v0)).toEqual([topic]);
  });

  it("a single node answers cluster 0 and nothing more; offline leaders are −1", () => {
    const single = body(encodeMetadataResponse(1, [topic], null));
    expect(single[single.length - 1]).toBe(0);
    expect(decodeMetadataV1Response(single)).toEqual({ topics: [topic], cluster: null });
    const offline: ClusterMetadata = {
      ...cluster,
      controller: -1,
      topics: [
        {
          name: "t",
          partitions: [
            { partition: 0, leader: -1, leader_epoch: 5, replicas: [1], isr: [], elr: [1] },
          ],
        },
      ],
    };
    expect(decodeMetadataV1Response(body(encodeMetadataResponse(1, [topic], offline)))).toEqual({
      topics: [topic],
      cluster: offline,
    });
  });

  it("refuses a truncated cluster section and a count larger than the bytes left", () => {
    const v1 = body(encodeMetadataResponse(7, [topic], cluster));
    expect(() => decodeMetadataV1Response(v1.subarray(0, v1.length - 2))).toThrow(
      /Metadata response/,
    );
    const v0len = body(encodeMetadataResponse(7, [topic])).length;
    const forged = new Uint8Array(v1.subarray(0, v0len + 1 + 4 + 4 + 4 + 4));
    // broker_count = 2^32 − 1 with no bytes behind it: refused, nothing allocated for it.
    forged.set([0xff, 0xff, 0xff, 0xff], forged.length - 4);
    const withCount = new Uint8Array([...forged]);
    expect(() => decodeMetadataV1Response(withCount)).toThrow(/broker_count/);
  });
});
