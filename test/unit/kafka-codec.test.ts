/**
 * The Kafka codecs (`src/protocol/kafka/`): golden bytes per message, RecordBatch v2 against
 * kafkajs's independent encoder and decoder, the refusals of bad batches with their Kafka codes,
 * the decompressors and their bounds, and the PLAIN token rules (docs/kafka.md "SASL/PLAIN and API keys").
 */
import { createRequire } from "node:module";
import * as lz4 from "lz4js";
import * as snappy from "snappyjs";
import * as zlib from "node:zlib";
import { describe, expect, it } from "vitest";
import { kafkaErrorCodes, Errors } from "../../src/broker/errors.ts";
import { writeI64, viewOf } from "../../src/lib/bytes.ts";
import { decompress } from "../../src/protocol/kafka/compression.ts";
import {
  advertisedVersions,
  decodeApiVersionsResponse,
  decodeRequestHeader,
  encodeApiVersionsResponse,
  encodeRequest,
  isServedVersion,
} from "../../src/protocol/kafka/header.ts";
import {
  decodeMetadataRequest,
  encodeFindCoordinatorResponse,
} from "../../src/protocol/kafka/metadata.ts";
import {
  decodeProduceRequest,
  encodeProduceResponse,
  writeProduceRequest,
} from "../../src/protocol/kafka/produce.ts";
import {
  crc32c,
  decodeRecordBatch,
  encodeRecordBatch,
  RecordBatchError,
} from "../../src/protocol/kafka/record-batch.ts";
import { parsePlainToken } from "../../src/protocol/kafka/sasl.ts";
import { KafkaDecodeError, KafkaReader } from "../../src/protocol/kafka/wire.ts";
import { nodeGunzip } from "../../src/runtime/kafka-gzip.ts";
import { storedRecords } from "../helpers/kafka.ts";

const require = createRequire(import.meta.url);
const kjsEncodeBatch = require("kafkajs/src/protocol/recordBatch/v0/index.js").RecordBatch;
const kjsRecord = require("kafkajs/src/protocol/recordBatch/record/v0/index.js");
const kjsDecodeBatch = require("kafkajs/src/protocol/recordBatch/v0/decoder.js");
const KjsDecoder = require("kafkajs/src/protocol/decoder.js");

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const options = {
  maxUncompressedBytes: 1 << 20,
  maxRecords: 1000,
  maxRecordPayloadBytes: 1 << 20,
  gunzip: nodeGunzip,
};

async function kafkajsBatch(
  records: {
    key: string | null;
    value: string | null;
    headers?: Record<string, string>;
    timestamp?: number;
  }[],
  extra: Record<string, unknown> = {},
): Promise<Uint8Array> {
  const ts = 1_700_000_000_000;
  const encoder = await kjsEncodeBatch({
    compression: 0,
    firstOffset: 0,
    firstTimestamp: ts,
    maxTimestamp: ts + records.length,
    lastOffsetDelta: records.length - 1,
    records: records.map((r, i) =>
      kjsRecord({
        key: r.key === null ? null : Buffer.from(r.key),
        value: r.value === null ? null : Buffer.from(r.value),
        headers: r.headers ?? {},
        offsetDelta: i,
        timestampDelta: i,
      }),
    ),
    ...extra,
  });
  return new Uint8Array(encoder.buffer);
}

function entries(batch: {
  bytes: Uint8Array;
  count: number;
}): { ts: number; key: string | null; value: string }[] {
  const out = [];
  const v = viewOf(batch.bytes);
  let pos = 0;
  for (let i = 0; i < batch.count; i++) {
    const ts = Number(v.getBigInt64(pos));
    const keyLen = v.getInt32(pos + 8);
    pos += 12;
    const key = keyLen < 0 ? null : Buffer.from(batch.bytes.subarray(pos, pos + keyLen)).toString();
    pos += Math.max(0, keyLen);
    const valueLen = v.getUint32(pos);
    pos += 4;
    out.push({ ts, key, value: Buffer.from(batch.bytes.subarray(pos, pos + valueLen)).toString() });
    pos += valueLen;
  }
  return out;
}

function codeOf(fn: () => unknown): number | string {
  try {
    fn();
    return "ok";
  } catch (err) {
    if (err instanceof RecordBatchError) return err.kafkaCode;
    if (err instanceof KafkaDecodeError) return "decode";
    throw err;
  }
}

/** Rewrites the CRC of a batch after a test edited it. */
function recrc(b: Uint8Array): Uint8Array {
  viewOf(b).setUint32(17, crc32c(b.subarray(21)));
  return b;
}

describe("Kafka wire primitives and headers", () => {
  it("CRC-32C of '123456789' is 0xe3069283 (Castagnoli, not zlib's CRC-32)", () => {
    expect(crc32c(new TextEncoder().encode("123456789"))).toBe(0xe3069283);
  });

  it("encodes a FindCoordinator v0 response to golden bytes", () => {
    const bytes = encodeFindCoordinatorResponse(7, {
      errorCode: 0,
      node: { nodeId: 0, host: "h", port: 9 },
    });
    expect(hex(bytes)).toBe(
      "00000011" + "00000007" + "0000" + "00000000" + "0001" + "68" + "00000009",
    );
  });

  it("answers ApiVersions with the advertised set; the v0 layout has no throttle time", () => {
    const v0 = encodeApiVersionsResponse(1, 0, 35);
    const body = v0.subarray(8);
    const d = decodeApiVersionsResponse(body, 0);
    expect(d.errorCode).toBe(35);
    expect(d.apis).toEqual(advertisedVersions);
    expect(v0.length).toBe(4 + 4 + 2 + 4 + advertisedVersions.length * 6);
    expect(encodeApiVersionsResponse(1, 2).length).toBe(v0.length + 4);
    expect(advertisedVersions.find((a) => a.key === 10)).toEqual({ key: 10, min: 0, max: 0 });
    expect(advertisedVersions.find((a) => a.key === 17)).toEqual({ key: 17, min: 0, max: 1 });
    expect(advertisedVersions.find((a) => a.key === 0)).toEqual({ key: 0, min: 0, max: 3 });
    expect(isServedVersion(0, 3)).toBe(true);
    expect(isServedVersion(0, 2)).toBe(false);
  });

  it("decodes a request header and a Metadata v1 body from golden bytes; null topics mean all", () => {
    const frame = Buffer.from(
      "0003" + "0001" + "0000002a" + "0003" + "6b6a73" + "00000001" + "0001" + "61",
      "hex",
    );
    const { header, body } = decodeRequestHeader(new Uint8Array(frame));
    expect(header).toEqual({ apiKey: 3, apiVersion: 1, correlationId: 42, clientId: "kjs" });
    expect(decodeMetadataRequest(body)).toEqual({ topics: ["a"] });
    expect(decodeMetadataRequest(new Uint8Array([0xff, 0xff, 0xff, 0xff]))).toEqual({
      topics: null,
    });
  });

  it("refuses array counts the bytes left cannot hold, before making anything of that size", () => {
    const r = new KafkaReader(new Uint8Array([0x7f, 0xff, 0xff, 0xff, 0, 1]), "test");
    expect(() => r.array("topics", 2, () => r.string("t"))).toThrow(/more than the 2 bytes left/);
    expect(() =>
      new KafkaReader(new Uint8Array([0, 0x20, 0, 0, 0, 0, 0, 0]), "t").int64("x"),
    ).toThrow(KafkaDecodeError);
  });

  it("round-trips a Produce v3 request and encodes its response", () => {
    const batch = new Uint8Array([1, 2, 3]);
    const frame = encodeRequest(
      { apiKey: 0, apiVersion: 3, correlationId: 5, clientId: null },
      (w) =>
        writeProduceRequest(w, {
          transactionalId: null,
          acks: -1,
          timeoutMs: 1000,
          topics: [{ name: "t", partitions: [{ index: 2, records: batch }] }],
        }),
    );
    const { body } = decodeRequestHeader(frame.subarray(4));
    const req = decodeProduceRequest(body);
    expect(req.topics[0].partitions[0].index).toBe(2);
    expect([...req.topics[0].partitions[0].records!]).toEqual([1, 2, 3]);
    const res = encodeProduceResponse(5, [
      { name: "t", partitions: [{ index: 2, errorCode: 0, baseOffset: 10 }] },
    ]);
    expect(hex(res)).toBe(
      "00000029" +
        "00000005" +
        "00000001" +
        "0001" +
        "74" +
        "00000001" +
        "00000002" +
        "0000" +
        "000000000000000a" +
        "ffffffffffffffff" +
        "00000000",
    );
  });

  it("maps every row of the error table to a Kafka code", () => {
    for (const kind of Object.values(Errors))
      expect(kafkaErrorCodes[kind.code], kind.code).toBeTypeOf("number");
  });
});

describe("RecordBatch v2", () => {
  it("decodes kafkajs's batches into entries: keys (null and empty stay apart), values, timestamps", async () => {
    const bytes = await kafkajsBatch([
      { key: "k", value: "v" },
      { key: null, value: "no key" },
      { key: "", value: "empty key" },
      { key: "t", value: null },
    ]);
    const batch = decodeRecordBatch(bytes, options);
    expect(batch.producerId).toBe(-1);
    expect(entries(batch.entries)).toEqual([
      { ts: 1_700_000_000_000, key: "k", value: "v" },
      { ts: 1_700_000_000_001, key: null, value: "no key" },
      { ts: 1_700_000_000_002, key: "", value: "empty key" },
      { ts: 1_700_000_000_003, key: "t", value: "" },
    ]);
  });

  it("reads the producer id, epoch and base sequence of an idempotent batch", async () => {
    const bytes = await kafkajsBatch([{ key: null, value: "x" }], {
      producerId: 4242,
      producerEpoch: 3,
      firstSequence: 17,
    });
    const b = decodeRecordBatch(bytes, options);
    expect([b.producerId, b.producerEpoch, b.baseSequence]).toEqual([4242, 3, 17]);
  });

  it("encodes stored records as a batch kafkajs decodes, with a valid CRC and the stored offsets", async () => {
    const stored = storedRecords([
      { offset: 5, ts: 1_700_000_000_500, key: "a", value: "one" },
      { offset: 6, ts: 1_700_000_000_400, key: null, value: "two" },
      { offset: 9, ts: 1_700_000_000_600, key: "", value: "" },
    ]);
    const bytes = encodeRecordBatch(stored);
    expect(crc32c(bytes.subarray(21))).toBe(viewOf(bytes).getUint32(17));
    const decoded = await kjsDecodeBatch(new KjsDecoder(Buffer.from(bytes)));
    expect(
      decoded.records.map(
        (r: { offset: string; key: Buffer | null; value: Buffer | null; timestamp: string }) => [
          r.offset,
          r.key?.toString() ?? null,
          r.value?.toString(),
          r.timestamp,
        ],
      ),
    ).toEqual([
      ["5", "a", "one", "1700000000500"],
      ["6", null, "two", "1700000000400"],
      ["9", "", "", "1700000000600"],
    ]);
    // Golden: the same records always encode to the same bytes.
    // Golden (checked field by field): base offset 5, length 79, magic 2, CRC, attributes 0,
    // last offset delta 4, base timestamp the smallest, producer −1/−1/−1, 3 records; the second
    // record's key length is −1 (no key), the third's 0 (the empty key).
    expect(hex(bytes)).toBe(
      "00000000000000050000004f000000000248170578000000000004" +
        "0000018bcfe569900000018bcfe56a58ffffffffffffffffffffffffffff00000003" +
        "1600c801000261066f6e6500" +
        "12000002010674776f00" +
        "0e00900308000000",
    );
  });

  it("refuses bad batches with the right Kafka code and never allocates a claimed count", async () => {
    const good = await kafkajsBatch([
      { key: "k", value: "v" },
      { key: "k2", value: "v2" },
    ]);
    const copy = () => good.slice();
    expect(codeOf(() => decodeRecordBatch(good, options))).toBe("ok");
    const badCrc = copy();
    badCrc[good.length - 1] ^= 1;
    expect(codeOf(() => decodeRecordBatch(badCrc, options))).toBe(2);
    const magic1 = copy();
    magic1[16] = 1;
    expect(codeOf(() => decodeRecordBatch(magic1, options))).toBe(43);
    const zstd = copy();
    viewOf(zstd).setInt16(21, 4);
    expect(codeOf(() => decodeRecordBatch(recrc(zstd), options))).toBe(76);
    const huge = copy();
    viewOf(huge).setInt32(57, 0x7fffffff);
    viewOf(huge).setInt32(23, 0x7ffffffe);
    expect(
      codeOf(() => decodeRecordBatch(recrc(huge), { ...options, maxRecords: 0x7fffffff })),
    ).toBe(2);
    expect(codeOf(() => decodeRecordBatch(good.subarray(0, 40), options))).toBe(2);
    const two = new Uint8Array(good.length * 2);
    two.set(good);
    two.set(good, good.length);
    expect(codeOf(() => decodeRecordBatch(two, options))).toBe(87);
    const withHeaders = await kafkajsBatch([{ key: "k", value: "v", headers: { h: "x" } }]);
    expect(codeOf(() => decodeRecordBatch(withHeaders, options))).toBe(87);
    const transactional = copy();
    viewOf(transactional).setInt16(21, 0x10);
    expect(codeOf(() => decodeRecordBatch(recrc(transactional), options))).toBe(87);
    // A record whose length varint runs six bytes.
    const longVarint = copy();
    longVarint.set([0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 61);
    expect(codeOf(() => decodeRecordBatch(recrc(longVarint), options))).toBe(2);
    expect(codeOf(() => decodeRecordBatch(good, { ...options, maxRecords: 1 }))).toBe(10);
    // A batch of no records (the header alone, recordCount 0): refused, as the TCP Produce and
    // HTTP refuse an empty produce (docs/protocol.md "0 Produce").
    const empty = good.slice(0, 61);
    viewOf(empty).setInt32(8, 61 - 12);
    viewOf(empty).setInt32(23, -1);
    viewOf(empty).setInt32(57, 0);
    expect(codeOf(() => decodeRecordBatch(recrc(empty), options))).toBe(2);
    expect(() => decodeRecordBatch(empty, options)).toThrow(
      /recordCount 0: a batch holds at least/,
    );
  });

  it("keeps a no-timestamp batch unstamped (−1), so the broker stamps it", async () => {
    const bytes = await kafkajsBatch([{ key: null, value: "x" }]);
    writeI64(viewOf(bytes), 27, -1);
    expect(entries(decodeRecordBatch(recrc(bytes), options).entries)[0].ts).toBe(-1);
  });
});

describe("decompression", () => {
  const text = new TextEncoder().encode("es-broker ".repeat(2000));
  it("inflates gzip, raw snappy, Xerial-framed snappy and an LZ4 frame", () => {
    const d = (codec: "gzip" | "snappy" | "lz4", input: Uint8Array) =>
      decompress(codec, input, { maxBytes: 1 << 20, gunzip: nodeGunzip });
    expect(Buffer.from(d("gzip", zlib.gzipSync(text))).equals(Buffer.from(text))).toBe(true);
    expect(Buffer.from(d("snappy", snappy.compress(text))).equals(Buffer.from(text))).toBe(true);
    const raw = snappy.compress(text);
    const xerial = Buffer.concat([
      Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0, 0, 0, 0, 1, 0, 0, 0, 1]),
      Buffer.from(new Uint8Array(new Int32Array([0]).buffer)),
      Buffer.from(raw),
    ]);
    viewOf(xerial).setInt32(16, raw.length);
    expect(Buffer.from(d("snappy", xerial)).equals(Buffer.from(text))).toBe(true);
    expect(Buffer.from(d("lz4", lz4.compress(text))).equals(Buffer.from(text))).toBe(true);
  });

  it("stops at maxBytes: a small input never inflates into a large allocation", () => {
    const bomb = new Uint8Array(4 << 20);
    const opts = { maxBytes: 64 * 1024, gunzip: nodeGunzip };
    for (const [codec, input] of [
      ["gzip", zlib.gzipSync(bomb)],
      ["snappy", snappy.compress(bomb)],
      ["lz4", lz4.compress(bomb)],
    ] as const) {
      expect(() => decompress(codec, input, opts), codec).toThrow(
        expect.objectContaining({ tooLarge: true }),
      );
    }
  });

  it("refuses corrupt input with an error, never a crash", () => {
    const junk = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    for (const codec of ["gzip", "snappy", "lz4"] as const)
      expect(
        () => decompress(codec, junk, { maxBytes: 1 << 20, gunzip: nodeGunzip }),
        codec,
      ).toThrow(expect.objectContaining({ tooLarge: false }));
  });
});

describe("PLAIN tokens: no impersonation, nothing malformed accepted", () => {
  const t = (s: string) => new TextEncoder().encode(s);
  it.each([
    ["B\0A\0passA", null, "an authzid other than the user"],
    ["\0\0passA", null, "an empty user"],
    ["A\0\0", null, "an empty password (A then NUL NUL)"],
    ["\0A\0passA\0extra", null, "a third NUL"],
    ["no nuls at all", null, "no NULs"],
    ["\0A\0passA", { user: "A", password: "passA" }, "no authzid"],
    ["A\0A\0passA", { user: "A", password: "passA" }, "authzid equal to the user"],
  ] as [string, { user: string; password: string } | null, string][])(
    "%j → %j (%s)",
    (token, expected) => {
      expect(parsePlainToken(t(token))).toEqual(expected);
    },
  );

  it("refuses a 100 KB token and invalid UTF-8", () => {
    expect(parsePlainToken(new Uint8Array(100_000).fill(0x41))).toBeNull();
    expect(parsePlainToken(new Uint8Array([0, 0xff, 0xfe, 0, 0x41]))).toBeNull();
  });
});
