/**
 * The Kafka listener (`src/transport/kafka/`) over an in-memory socket and a real LocalBroker on
 * the simulated disk: answers in request order behind a long-polling Fetch, the ApiVersions v3
 * probe, and a seeded fuzz of mutated request frames — every one ends in answers or a closed
 * connection, never an exception, and a produce appends all of its batch or none of it.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { writeFetchRequest } from "../../src/protocol/kafka/fetch.ts";
import {
  encodeConsumerSubscription,
  writeOffsetCommitRequest,
} from "../../src/protocol/kafka/groups.ts";
import { decodeApiVersionsResponse, encodeRequest } from "../../src/protocol/kafka/header.ts";
import { writeMetadataRequest } from "../../src/protocol/kafka/metadata.ts";
import { decodeProduceResponse, writeProduceRequest } from "../../src/protocol/kafka/produce.ts";
import { encodeRecordBatch } from "../../src/protocol/kafka/record-batch.ts";
import type { KafkaWriter } from "../../src/protocol/kafka/wire.ts";
import { nodeGunzip } from "../../src/runtime/kafka-gzip.ts";
import { createKafkaTransport } from "../../src/transport/kafka/listener.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { FakeSocket, storedRecords } from "../helpers/kafka.ts";

async function setup(): Promise<{
  broker: LocalBroker;
  clock: ManualClock;
  connect: () => FakeSocket;
  logger: MemoryLogger;
}> {
  const clock = new ManualClock();
  const logger = new MemoryLogger();
  const { broker } = await openTestBroker({
    fs: new MemoryFileSystem(),
    clock,
    logger,
    cleanupIntervalMs: 0,
  });
  await broker.createTopic({ name: "t", partitions: 2 });
  const transport = createKafkaTransport({
    broker,
    clock,
    logger,
    advertised: { host: "127.0.0.1", port: 9 },
    gunzip: nodeGunzip,
    maxRequestBytes: 1 << 20,
  });
  return {
    broker,
    clock,
    logger,
    connect() {
      const s = new FakeSocket();
      transport.handleConnection(s);
      return s;
    },
  };
}

const settle = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
};

const request = (
  apiKey: number,
  apiVersion: number,
  correlationId: number,
  write: (w: KafkaWriter) => void,
) => encodeRequest({ apiKey, apiVersion, correlationId, clientId: "fuzz" }, write);

function produceFrame(correlationId: number, partition: number, count: number): Uint8Array {
  const records = Array.from({ length: count }, (_, i) => ({
    offset: i,
    ts: 1_000 + i,
    key: `k${i}`,
    value: `v${i}`,
  }));
  const batch = encodeRecordBatch(storedRecords(records));
  return request(0, 3, correlationId, (w) =>
    writeProduceRequest(w, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 1000,
      topics: [{ name: "t", partitions: [{ index: partition, records: batch }] }],
    }),
  );
}

describe("Kafka listener", () => {
  it("answers in request order: a Metadata request behind a long-polling Fetch waits for it", async () => {
    const { connect, clock } = await setup();
    const s = connect();
    s.send(
      request(1, 4, 1, (w) =>
        writeFetchRequest(w, {
          maxWaitMs: 500,
          minBytes: 1,
          maxBytes: 1 << 20,
          isolationLevel: 0,
          topics: [
            {
              topic: "t",
              partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 20 }],
            },
          ],
        }),
      ),
    );
    s.send(request(3, 1, 2, (w) => writeMetadataRequest(w, null)));
    await settle();
    expect(s.responses()).toEqual([]);
    clock.advance(500);
    await settle();
    expect(s.responses().map((r) => r.correlationId)).toEqual([1, 2]);
  });

  it("answers librdkafka's ApiVersions v3 probe with error 35 in the v0 layout", async () => {
    const { connect } = await setup();
    const s = connect();
    const frame = new Uint8Array([0, 0, 0, 10, 0, 18, 0, 3, 0, 0, 0, 9, 0, 0]);
    s.send(frame);
    await settle();
    const [r] = s.responses();
    expect(r.correlationId).toBe(9);
    expect(decodeApiVersionsResponse(r.body, 0).errorCode).toBe(35);
  });

  it("a produce appends its whole batch and answers its base offset", async () => {
    const { connect, broker } = await setup();
    const s = connect();
    s.send(produceFrame(3, 1, 5));
    await settle();
    const [r] = s.responses();
    expect(decodeProduceResponse(r.body)[0].partitions[0]).toEqual({
      index: 1,
      errorCode: 0,
      baseOffset: 0,
    });
    expect((await broker.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(5);
  });

  it("names an api it does not serve, and for CreateTopics says how to create topics", async () => {
    const { connect, logger } = await setup();
    const s = connect();
    s.send(request(19, 2, 5, (w) => w.int32(0)));
    await settle();
    expect(s.closed).toBe(true);
    expect(logger.named("kafka.request_refused")[0]).toMatchObject({
      reason:
        "CreateTopics (api 19) version 2 is not served: create topics with es-broker topics create or POST /v1/topics",
      api: "CreateTopics",
      api_version: 2,
    });
  });

  it("logs a negative request size as the negative int32 the client sent", async () => {
    const { connect, logger } = await setup();
    const s = connect();
    s.send(Uint8Array.of(0xff, 0xff, 0xff, 0xfb, 0, 18, 0, 0));
    await settle();
    expect(s.closed).toBe(true);
    expect(logger.named("kafka.request_refused")[0]).toMatchObject({
      reason: "frame size out of range",
      size: -5,
      error: "Cannot read request: size -5 is negative",
    });
  });

  it("survives mutated frames: answers or a closed connection, never a crash, never a partial append", async () => {
    const { connect, broker, logger } = await setup();
    const valid = [
      produceFrame(1, 0, 4),
      request(1, 4, 2, (w) =>
        writeFetchRequest(w, {
          maxWaitMs: 0,
          minBytes: 1,
          maxBytes: 1 << 16,
          isolationLevel: 0,
          topics: [
            {
              topic: "t",
              partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 16 }],
            },
          ],
        }),
      ),
      request(3, 1, 3, (w) => writeMetadataRequest(w, ["t", "missing"])),
      request(8, 2, 4, (w) =>
        writeOffsetCommitRequest(w, {
          groupId: "g",
          generationId: -1,
          memberId: "",
          retentionTimeMs: -1,
          topics: [{ name: "t", partitions: [{ partition: 0, offset: 0, metadata: null }] }],
        }),
      ),
      request(11, 1, 5, (w) => {
        w.string("g").int32(1000).int32(0).string("").string("consumer");
        w.array([0], () => w.string("range").bytes(encodeConsumerSubscription(["t"])));
      }),
    ];
    const mutation = fc.record({
      frame: fc.integer({ min: 0, max: valid.length - 1 }),
      edits: fc.array(fc.record({ at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }), {
        maxLength: 6,
      }),
      cut: fc.option(fc.nat(), { nil: undefined }),
      lie: fc.option(fc.integer({ min: -5, max: 1 << 24 }), { nil: undefined }),
    });
    let before = (await broker.listOffsets({ topic: "t", partition: 0 })).highWatermark;
    await fc.assert(
      fc.asyncProperty(mutation, async (m) => {
        let bytes = valid[m.frame].slice();
        for (const e of m.edits) bytes[4 + (e.at % (bytes.length - 4))] = e.byte;
        if (m.cut !== undefined) bytes = bytes.subarray(0, 4 + (m.cut % (bytes.length - 4)));
        if (m.lie !== undefined)
          new DataView(bytes.buffer, bytes.byteOffset).setInt32(4 + 6, m.lie);
        const s = connect();
        s.send(bytes);
        await settle();
        // A frame cut short waits for its rest: the peer closing ends it.
        if (!s.closed) s.handlers!.onClose();
        await settle();
        const after = (await broker.listOffsets({ topic: "t", partition: 0 })).highWatermark;
        expect([0, 4]).toContain(after - before);
        before = after;
      }),
      { seed: 20, numRuns: 200 },
    );
    expect(logger.named("kafka.internal_error")).toEqual([]);
    expect(logger.named("kafka.request_refused").length).toBeGreaterThan(0);
  });
});
