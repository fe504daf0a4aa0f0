import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import type { TopicConfig, TopicDescription } from "../../src/broker/types.ts";
import { crc32 } from "../../src/lib/crc32.ts";
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
  decodeFetchRequest,
  decodeFetchResponse,
  encodeFetchRequest,
  encodeFetchResponse,
  encodeFetchResponseChunks,
  fetchResponsePrefixBytes,
} from "../../src/protocol/apis/fetch.ts";
import { ApiKey, isSupportedApi } from "../../src/protocol/apis/index.ts";
import {
  decodeListOffsetsRequest,
  decodeListOffsetsResponse,
  encodeListOffsetsRequest,
  encodeListOffsetsResponse,
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
  decodeErrorBody,
  decodeRequestHeader,
  decodeResponseHeader,
  encodeErrorResponse,
} from "../../src/protocol/envelope.ts";
import { WireReader, WireWriter } from "../../src/protocol/wire.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { hex, protocolError, requestBody, responseBody, text, toHex } from "../helpers/wire.ts";

// Hand-built from the grammar in src/protocol/codec.ts, field by field.
const produceRequestGolden = hex(`
  00000026          length 38
  0000 0000         api 0 Produce, version 0
  00000007          correlation_id 7
  0002 7431         topic "t1"
  00000000          partition 0
  00000001          record_count 1
  ffffffffffffffff  timestamp_ms −1
  00000001 6b       key_len 1, key "k"
  00000001 76       value_len 1, value "v"
`);

const fetchRequestGolden = hex(`
  00000024                  length 36
  0001 0000                 api 1 Fetch, version 0
  01020304                  correlation_id
  0002 7431                 topic "t1"
  00000003                  partition 3
  00000001 00000005         offset 2^32 + 5
  0000000a                  max_records 10
  00000000                  max_bytes 0 (default)
  000001f4                  wait_ms 500
`);

const createTopicRequestGolden = hex(`
  00000029          length 41
  0002 0000         api 2 CreateTopic
  00000009          correlation_id 9
  0002 7431         topic "t1"
  00000002          partitions 2
  00000015          config_len 21
  7b22726574656e74696f6e5f6d73223a313030307d   {"retention_ms":1000}
`);

const metadataRequestGolden = hex(`
  00000013          length 19
  0003 0000         api 3 Metadata
  00000001          correlation_id 1
  00000002          topic_count 2
  0001 61           "a"
  0002 6263         "bc"
`);

const listOffsetsRequestGolden = hex(`
  00000010          length 16
  0004 0000         api 4 ListOffsets
  00000002          correlation_id 2
  0002 7431         topic "t1"
  00000001          partition 1
`);

const deleteTopicRequestGolden = hex(`
  0000000c          length 12
  0005 0000         api 5 DeleteTopic
  00000003          correlation_id 3
  0002 7431         topic "t1"
`);

const produceResponseGolden = hex(`
  0000002a                    length 42
  00000007                    correlation_id 7
  0000                        error 0
  00000002                    span_count 2
  00000001 0000000100000001 00000003    partition 1, base_offset 2^32 + 1, count 3
  00000000 0000000000000000 00000001    partition 0, base_offset 0, count 1
`);

const listOffsetsResponseGolden = hex(`
  00000016          length 22
  00000002          correlation_id 2
  0000              error 0
  000000000000000a  log_start_offset 10
  0000000000000014  high_watermark 20
`);

const deleteTopicResponseGolden = hex(`
  00000006          length 6
  00000003          correlation_id 3
  0000              error 0
`);

const errorResponseGolden = hex(`
  0000001f          length 31
  00000005          correlation_id 5
  0002              error 2 topic_not_found
  000f 746f7069635f6e6f745f666f756e64     code "topic_not_found"
  00000004 6e6f7065                       message "nope"
`);

/** A stored record built by hand: offset 4, timestamp 1000, no key, value "v". */
function storedRecordGolden(): Uint8Array {
  const withoutCrc = hex(`
    0000001d            record_len 29
    0000000000000004    offset 4
    00000000000003e8    timestamp_ms 1000
    ffffffff            key_len −1
    00000001 76         value_len 1, value "v"
  `);
  const crc = crc32(withoutCrc, 4);
  const out = new Uint8Array(withoutCrc.length + 4);
  out.set(withoutCrc);
  new DataView(out.buffer).setUint32(withoutCrc.length, crc);
  return out;
}

function fetchResponseGolden(): Uint8Array {
  const head = hex(`
    00000047            length 71
    00000007            correlation_id 7
    0000                error 0
    0000000000000005    high_watermark 5
    0000000000000000    log_start_offset 0
    0000000000000005    next_offset 5
    00000001            record_count 1
    00000021            records_bytes 33
  `);
  const record = storedRecordGolden();
  const out = new Uint8Array(head.length + record.length);
  out.set(head);
  out.set(record, head.length);
  return out;
}

const smallConfig = { segment_bytes: 1024 } as unknown as TopicConfig;

const topicGolden: TopicDescription = {
  name: "t1",
  config: smallConfig,
  partitions: [
    {
      partition: 0,
      logStartOffset: 0,
      highWatermark: 2,
      sizeBytes: 66,
      segmentCount: 1,
      fenced: false,
    },
    {
      partition: 1,
      logStartOffset: 1,
      highWatermark: 0x1_0000_0000,
      sizeBytes: 0,
      segmentCount: 2,
      fenced: true,
    },
  ],
};

const topicEntryGoldenHex = `
  0002 7431                                     name "t1"
  00000016 7b227365676d656e745f6279746573223a313032347d   config {"segment_bytes":1024}
  00000002                                      partition_count 2
  00000000 0000000000000000 0000000000000002 0000000000000042 00000001 00
  00000001 0000000000000001 0000000100000000 0000000000000000 00000002 01
`;

const createTopicResponseGolden = hex(`
  0000006a          length 106
  00000009          correlation_id 9
  0000              error 0
  ${topicEntryGoldenHex}
`);

const metadataResponseGolden = hex(`
  0000006e          length 110
  00000001          correlation_id 1
  0000              error 0
  00000001          topic_count 1
  ${topicEntryGoldenHex}
`);

describe("request codecs match hand-built golden bytes", () => {
  it("Produce request encodes and decodes field by field", () => {
    const batch = new EntryBatchBuilder().add(text("k"), text("v")).build();
    expect(toHex(encodeProduceRequest(7, { topic: "t1", partition: 0, batch }))).toBe(
      toHex(produceRequestGolden),
    );
    const decoded = decodeProduceRequest(requestBody(produceRequestGolden));
    expect(decoded.topic).toBe("t1");
    expect(decoded.partition).toBe(0);
    expect(decoded.batch.count).toBe(1);
    expect(toHex(decoded.batch.bytes)).toBe(toHex(batch.bytes));
  });

  it("Produce request with partition −1 leaves the choice to the broker", () => {
    const batch = new EntryBatchBuilder().add(null, text("v")).build();
    const frame = encodeProduceRequest(1, { topic: "t", batch });
    expect(toHex(frame.subarray(4 + 8 + 3, 4 + 8 + 3 + 4))).toBe("ffffffff");
    const decoded = decodeProduceRequest(requestBody(frame));
    expect(decoded.partition).toBeUndefined();
  });

  it("Fetch request encodes a u64 offset above 2^32 and a zero max_bytes as default", () => {
    const frame = encodeFetchRequest(0x01020304, {
      topic: "t1",
      partition: 3,
      offset: 0x1_0000_0005,
      maxRecords: 10,
      waitMs: 500,
    });
    expect(toHex(frame)).toBe(toHex(fetchRequestGolden));
    expect(decodeFetchRequest(requestBody(fetchRequestGolden))).toEqual({
      topic: "t1",
      partition: 3,
      offset: 0x1_0000_0005,
      maxRecords: 10,
      waitMs: 500,
    });
  });

  it("CreateTopic request carries its config as a JSON object", () => {
    const frame = encodeCreateTopicRequest(9, {
      name: "t1",
      partitions: 2,
      config: { retention_ms: 1000 },
    });
    expect(toHex(frame)).toBe(toHex(createTopicRequestGolden));
    expect(decodeCreateTopicRequest(requestBody(createTopicRequestGolden))).toEqual({
      name: "t1",
      partitions: 2,
      config: { retention_ms: 1000 },
    });
  });

  it("CreateTopic request with config_len 0 has no config", () => {
    const frame = encodeCreateTopicRequest(1, { name: "t", partitions: 1 });
    expect(decodeCreateTopicRequest(requestBody(frame))).toEqual({ name: "t", partitions: 1 });
  });

  it("Metadata request lists topic names, or none for every topic", () => {
    expect(toHex(encodeMetadataRequest(1, { topics: ["a", "bc"] }))).toBe(
      toHex(metadataRequestGolden),
    );
    expect(decodeMetadataRequest(requestBody(metadataRequestGolden))).toEqual({
      topics: ["a", "bc"],
    });
    expect(decodeMetadataRequest(requestBody(encodeMetadataRequest(1, { topics: [] })))).toEqual({
      topics: [],
    });
  });

  it("ListOffsets and DeleteTopic requests encode and decode", () => {
    expect(toHex(encodeListOffsetsRequest(2, { topic: "t1", partition: 1 }))).toBe(
      toHex(listOffsetsRequestGolden),
    );
    expect(decodeListOffsetsRequest(requestBody(listOffsetsRequestGolden))).toEqual({
      topic: "t1",
      partition: 1,
    });
    expect(toHex(encodeDeleteTopicRequest(3, { topic: "t1" }))).toBe(
      toHex(deleteTopicRequestGolden),
    );
    expect(decodeDeleteTopicRequest(requestBody(deleteTopicRequestGolden))).toEqual({
      topic: "t1",
    });
  });

  it("the request header splits into api, version, correlation id and body", () => {
    const header = decodeRequestHeader(fetchRequestGolden.subarray(4));
    expect(header.api).toBe(ApiKey.Fetch);
    expect(header.version).toBe(0);
    expect(header.correlationId).toBe(0x01020304);
    expect(header.body.length).toBe(0x24 - 8);
  });
});

describe("response codecs match hand-built golden bytes", () => {
  it("Produce response carries spans", () => {
    const spans = [
      { partition: 1, baseOffset: 0x1_0000_0001, count: 3 },
      { partition: 0, baseOffset: 0, count: 1 },
    ];
    expect(toHex(encodeProduceResponse(7, { spans }))).toBe(toHex(produceResponseGolden));
    expect(decodeProduceResponse(responseBody(produceResponseGolden))).toEqual({ spans });
  });

  it("Fetch response carries stored records verbatim", () => {
    const golden = fetchResponseGolden();
    const record = storedRecordGolden();
    const frame = encodeFetchResponse(7, {
      records: { bytes: record, count: 1 },
      nextOffset: 5,
      highWatermark: 5,
      logStartOffset: 0,
    });
    expect(toHex(frame)).toBe(toHex(golden));
    const decoded = decodeFetchResponse(responseBody(golden));
    expect(decoded).toMatchObject({ nextOffset: 5, highWatermark: 5, logStartOffset: 0 });
    expect(decoded.records.count).toBe(1);
    expect(toHex(decoded.records.bytes)).toBe(toHex(record));
  });

  it("Fetch response in two chunks is the golden frame, with the stored records as their own chunk", () => {
    const golden = fetchResponseGolden();
    const record = storedRecordGolden();
    const [prefix, records] = encodeFetchResponseChunks(7, {
      records: { bytes: record, count: 1 },
      nextOffset: 5,
      highWatermark: 5,
      logStartOffset: 0,
    });
    expect(prefix.length).toBe(fetchResponsePrefixBytes);
    expect(records).toBe(record);
    expect(toHex(prefix) + toHex(records)).toBe(toHex(golden));
  });

  it("CreateTopic response is one topic entry with partitions and the fenced flag", () => {
    expect(toHex(encodeCreateTopicResponse(9, topicGolden))).toBe(toHex(createTopicResponseGolden));
    expect(decodeCreateTopicResponse(responseBody(createTopicResponseGolden))).toEqual(topicGolden);
  });

  it("Metadata response is a counted list of topic entries", () => {
    expect(toHex(encodeMetadataResponse(1, [topicGolden]))).toBe(toHex(metadataResponseGolden));
    expect(decodeMetadataResponse(responseBody(metadataResponseGolden))).toEqual([topicGolden]);
  });

  it("ListOffsets and DeleteTopic responses encode and decode", () => {
    expect(toHex(encodeListOffsetsResponse(2, { logStartOffset: 10, highWatermark: 20 }))).toBe(
      toHex(listOffsetsResponseGolden),
    );
    expect(decodeListOffsetsResponse(responseBody(listOffsetsResponseGolden))).toEqual({
      logStartOffset: 10,
      highWatermark: 20,
    });
    expect(toHex(encodeDeleteTopicResponse(3))).toBe(toHex(deleteTopicResponseGolden));
    expect(() => decodeDeleteTopicResponse(responseBody(deleteTopicResponseGolden))).not.toThrow();
  });

  it("an error response carries the table's number, code and the message", () => {
    expect(toHex(encodeErrorResponse(5, Errors.topicNotFound, "nope"))).toBe(
      toHex(errorResponseGolden),
    );
    const header = decodeResponseHeader(errorResponseGolden.subarray(4));
    expect(header).toMatchObject({ correlationId: 5, error: 2 });
    expect(decodeErrorBody(header.body)).toEqual({ code: "topic_not_found", message: "nope" });
  });
});

describe("decoders refuse bodies that break the grammar, naming the field", () => {
  it("a body cut short names the missing field", () => {
    const body = requestBody(fetchRequestGolden);
    const error = protocolError(() => decodeFetchRequest(body.subarray(0, body.length - 2)));
    expect(error.kind).toBe(Errors.invalidRequest);
    expect(error.field).toBe("wait_ms");
    expect(error.message).toContain('"wait_ms"');
  });

  it("a body with bytes left over names the last field", () => {
    const body = requestBody(listOffsetsRequestGolden);
    const longer = new Uint8Array(body.length + 1);
    longer.set(body);
    const error = protocolError(() => decodeListOffsetsRequest(longer));
    expect(error.kind).toBe(Errors.invalidRequest);
    expect(error.field).toBe("partition");
    expect(error.message).toContain("1 unexpected bytes");
  });

  it("a topic length running past the body is refused before reading it", () => {
    const error = protocolError(() => decodeDeleteTopicRequest(hex("ffff 7431")));
    expect(error.field).toBe("topic");
    expect(error.message).toContain("needs 65535 bytes but only 2 remain");
  });

  it("invalid UTF-8 in a topic is invalid_request", () => {
    const error = protocolError(() => decodeDeleteTopicRequest(hex("0002 c328")));
    expect(error.kind).toBe(Errors.invalidRequest);
    expect(error.message).toContain("not valid UTF-8");
  });

  it("a u64 above 2^53 − 1 is unsupported, not rounded", () => {
    const body = hex("0001 74 00000000 0020000000000000 00000000 00000000 00000000");
    const error = protocolError(() => decodeFetchRequest(body));
    expect(error.kind).toBe(Errors.unsupported);
    expect(error.field).toBe("offset");
    const exact = hex("0001 74 00000000 001fffffffffffff 00000000 00000000 00000000");
    expect(decodeFetchRequest(exact).offset).toBe(Number.MAX_SAFE_INTEGER);
  });

  it("a produce timestamp_ms above 2^53 - 1 is unsupported, and the message quotes it exactly", () => {
    const body = requestBody(produceRequestGolden).slice();
    new DataView(body.buffer, body.byteOffset).setBigUint64(12, 2n ** 62n);
    const error = protocolError(() => decodeProduceRequest(body));
    expect(error.kind).toBe(Errors.unsupported);
    expect(error.field).toBe("entries");
    expect(error.message).toContain(
      "record 0 has timestamp_ms 4611686018427387904: above 2^53 - 1",
    );
    new DataView(body.buffer, body.byteOffset).setBigInt64(12, -2n);
    const negative = protocolError(() => decodeProduceRequest(body));
    expect(negative.kind).toBe(Errors.invalidRequest);
    expect(negative.message).toContain("record 0 has timestamp_ms -2: must be >= 0, or -1");
  });

  it("a record_count that disagrees with the entries is invalid_request", () => {
    const body = requestBody(produceRequestGolden).slice();
    new DataView(body.buffer).setUint32(8, 2);
    const error = protocolError(() => decodeProduceRequest(body));
    expect(error.kind).toBe(Errors.invalidRequest);
    expect(error.field).toBe("record_count");
    expect(error.message).toContain("is 2 but the entries hold 1");
  });

  it("a produce with record_count 0 and no entries is invalid_request naming record_count, as HTTP refuses an empty produce", () => {
    // topic "t1" (2 + 2 bytes), partition (4), record_count (4), and nothing after it.
    const body = requestBody(produceRequestGolden).slice(0, 12);
    new DataView(body.buffer).setUint32(8, 0);
    const error = protocolError(() => decodeProduceRequest(body));
    expect(error.kind).toBe(Errors.invalidRequest);
    expect(error.field).toBe("record_count");
    expect(error.message).toContain('field "record_count" is 0: the request holds no records');
    // A count of 0 in front of entries is the usual disagreement, named the same way.
    const withEntries = requestBody(produceRequestGolden).slice();
    new DataView(withEntries.buffer).setUint32(8, 0);
    const disagreeing = protocolError(() => decodeProduceRequest(withEntries));
    expect(disagreeing.field).toBe("record_count");
    expect(disagreeing.message).toContain("is 0 but the entries hold 1");
  });

  it("a malformed entry is invalid_request naming the record", () => {
    const body = requestBody(produceRequestGolden);
    const error = protocolError(() => decodeProduceRequest(body.subarray(0, body.length - 1)));
    expect(error.field).toBe("entries");
    expect(error.message).toContain("record 0");
  });

  it("a produce partition below −1 is invalid_request", () => {
    const body = requestBody(produceRequestGolden).slice();
    new DataView(body.buffer).setInt32(4, -2);
    expect(protocolError(() => decodeProduceRequest(body)).field).toBe("partition");
  });

  it("a CreateTopic config that is not a JSON object is invalid_request", () => {
    const frame = (config: string) => {
      const c = text(config);
      const body = new Uint8Array(2 + 1 + 4 + 4 + c.length);
      const v = new DataView(body.buffer);
      v.setUint16(0, 1);
      body[2] = 0x74;
      v.setUint32(3, 1);
      v.setUint32(7, c.length);
      body.set(c, 11);
      return body;
    };
    expect(protocolError(() => decodeCreateTopicRequest(frame("[1]"))).message).toContain(
      "must be a JSON object",
    );
    expect(protocolError(() => decodeCreateTopicRequest(frame("{nope"))).message).toContain(
      "not valid JSON",
    );
    expect(decodeCreateTopicRequest(frame('{"retention_ms":5}')).config).toEqual({
      retention_ms: 5,
    });
  });

  it("a topic_count larger than the bytes could hold is refused before looping", () => {
    const error = protocolError(() => decodeMetadataRequest(hex("ffffffff 0001 61")));
    expect(error.field).toBe("topic_count");
  });

  it("a records_bytes that disagrees with the frame is refused", () => {
    const body = responseBody(fetchResponseGolden()).slice();
    new DataView(body.buffer).setUint32(28, 32);
    expect(protocolError(() => decodeFetchResponse(body)).field).toBe("records");
  });

  it("a fenced flag other than 0 or 1 is refused", () => {
    const body = responseBody(createTopicResponseGolden).slice();
    body[body.length - 1] = 2;
    expect(protocolError(() => decodeCreateTopicResponse(body)).message).toContain(
      "must be 0 or 1",
    );
  });
});

describe("request encoders check the caller's values", () => {
  const batch = new EntryBatchBuilder().add(null, text("v")).build();

  it("a partition outside [−1, 2^31 − 1] is invalid_request", () => {
    expect(
      protocolError(() => encodeProduceRequest(1, { topic: "t", partition: -2, batch })).field,
    ).toBe("produce.partition");
    expect(
      protocolError(() => encodeProduceRequest(1, { topic: "t", partition: 1.5, batch })).field,
    ).toBe("produce.partition");
  });

  it("a topic over 65 535 UTF-8 bytes is invalid_request", () => {
    expect(
      protocolError(() => encodeDeleteTopicRequest(1, { topic: "x".repeat(65_536) })).field,
    ).toBe("delete_topic.topic");
  });

  it("a negative or unsafe fetch offset is invalid_request", () => {
    expect(
      protocolError(() => encodeFetchRequest(1, { topic: "t", partition: 0, offset: -1 })).field,
    ).toBe("fetch.offset");
    expect(
      protocolError(() => encodeFetchRequest(1, { topic: "t", partition: 0, offset: 2 ** 53 }))
        .field,
    ).toBe("fetch.offset");
  });
});

describe("api numbers", () => {
  it("apis 0 to 15 at version 0 (Metadata, api 3, and ListOffsets, api 4, also 1; ReplicaFetch, api 14, also 1 and 2) are supported; versions above and apis 16+ are not", () => {
    for (let api = 0; api <= 15; api++) {
      expect(isSupportedApi(api, 0)).toBe(true);
      expect(isSupportedApi(api, 1)).toBe(api === 3 || api === 4 || api === 14);
      expect(isSupportedApi(api, 2)).toBe(api === 14);
      expect(isSupportedApi(api, 3)).toBe(false);
    }
    expect(isSupportedApi(16, 0)).toBe(false);
    expect(isSupportedApi(0xffff, 0)).toBe(false);
  });
});

describe("WireWriter", () => {
  it("keeps every byte when a write grows the buffer past its initial capacity", () => {
    const expected: number[] = [];
    const w = new WireWriter(16);
    // Each kind of write in turn crosses a capacity boundary (16, 32, 64, 128, …).
    const chunk = Uint8Array.from({ length: 15 }, (_, i) => i + 1);
    w.bytes(chunk).bytes(chunk);
    expected.push(...chunk, ...chunk);
    w.u8(0xab).u16(0xcdef);
    expected.push(0xab, 0xcd, 0xef);
    const filler = new Uint8Array(64 - 33 - 2).fill(7);
    w.bytes(filler).u32(0x01020304);
    expected.push(...filler, 1, 2, 3, 4);
    w.bytes(new Uint8Array(128 - 67 - 1).fill(9)).i32(-2);
    expected.push(...new Array(128 - 67 - 1).fill(9), 0xff, 0xff, 0xff, 0xfe);
    const big = Uint8Array.from({ length: 300 }, (_, i) => i % 251);
    w.bytes(big);
    expected.push(...big);
    expect(w.position).toBe(expected.length);
    expect([...w.finish()]).toEqual(expected);
  });
});

describe("WireReader.str16Recent", () => {
  const str16 = (bytes: number[]) =>
    new Uint8Array([bytes.length >> 8, bytes.length & 0xff, ...bytes]);
  const utf8 = (s: string) => [...new TextEncoder().encode(s)];

  it("reads what str16 reads, from the recent strings or not, and moves past it", () => {
    const names = ["orders", "orders", "audit", "örders", "orders", "", "a".repeat(300)];
    for (const name of [...names, ...names]) {
      const body = new Uint8Array([...str16(utf8(name)), 7]);
      const r = new WireReader(body, "test");
      expect(r.str16Recent("topic")).toBe(name);
      expect(r.u8("after")).toBe(7);
      r.end("after");
    }
    // More distinct names than it remembers, then the first again.
    for (let i = 0; i < 20; i++)
      expect(new WireReader(str16(utf8(`t${i}`)), "test").str16Recent("topic")).toBe(`t${i}`);
    expect(new WireReader(str16(utf8("t0")), "test").str16Recent("topic")).toBe("t0");
  });

  it("refuses invalid UTF-8 and a length past the body, naming the field, cached or not", () => {
    new WireReader(str16(utf8("orders")), "test").str16Recent("topic");
    expect(() => new WireReader(str16([0xff, 0xfe]), "test").str16Recent("topic")).toThrow(
      /field "topic" is not valid UTF-8/,
    );
    // "orders" is remembered, but only its first three bytes are here.
    const short = str16(utf8("orders")).subarray(0, 5);
    expect(() => new WireReader(short, "test").str16Recent("topic")).toThrow(
      /field "topic" needs 6 bytes but only 3 remain/,
    );
  });
});
