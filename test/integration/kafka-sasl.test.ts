/**
 * SASL/PLAIN on the Kafka listener over the broker's API keys (docs/kafka.md "SASL/PLAIN and API keys",
 * `transport/kafka/sasl.ts`'s state table, row by row): malformed and impersonating PLAIN
 * tokens, requests before and between the SASL steps, the role table
 * through Kafka's apis, revocation, the pre-authentication limits. One LocalBroker and one key
 * store on a simulated disk, the Kafka transport over in-memory sockets.
 */
import { describe, expect, it, onTestFinished } from "vitest";
import { AccessControl } from "../../src/auth/access.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { decodeFetchResponse, writeFetchRequest } from "../../src/protocol/kafka/fetch.ts";
import {
  decodeOffsetCommitResponse,
  encodeConsumerSubscription,
  writeOffsetCommitRequest,
} from "../../src/protocol/kafka/groups.ts";
import { encodeRequest } from "../../src/protocol/kafka/header.ts";
import { decodeMetadataResponse, writeMetadataRequest } from "../../src/protocol/kafka/metadata.ts";
import { decodeProduceResponse, writeProduceRequest } from "../../src/protocol/kafka/produce.ts";
import { encodeRecordBatch } from "../../src/protocol/kafka/record-batch.ts";
import {
  decodeSaslAuthenticateResponse,
  decodeSaslHandshakeResponse,
  writeSaslAuthenticateRequest,
  writeSaslHandshakeRequest,
} from "../../src/protocol/kafka/sasl.ts";
import { KafkaReader, type KafkaWriter } from "../../src/protocol/kafka/wire.ts";
import { nodeGunzip } from "../../src/runtime/kafka-gzip.ts";
import { createKafkaTransport } from "../../src/transport/kafka/listener.ts";
import { accessAuthenticator, kafkaSaslFrameBytesMax } from "../../src/transport/kafka/sasl.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { FakeSocket, storedRecords } from "../helpers/kafka.ts";
import { openTestKeyStore } from "../helpers/keys.ts";

const readTimeoutMs = 5_000;

interface Made {
  key: string;
  id: string;
}

async function setup(options: { withKeys?: boolean } = {}) {
  const logger = new MemoryLogger();
  const { broker, fs, clock } = await openTestBroker({ logger, cleanupIntervalMs: 0 });
  const { keys } = await openTestKeyStore({ fs, logger, clock });
  onTestFinished(() => keys.close());
  await broker.createTopic({ name: "orders", partitions: 1 });
  await broker.createTopic({ name: "other", partitions: 1 });
  const made: Record<"admin" | "ingest" | "reader", Made> = {
    admin: { key: "", id: "" },
    ingest: { key: "", id: "" },
    reader: { key: "", id: "" },
  };
  if (options.withKeys !== false) {
    for (const [name, spec] of [
      ["admin", { role: "admin" }],
      ["ingest", { role: "producer", topics: ["orders"] }],
      ["reader", { role: "consumer", topics: ["orders"], groups: ["billing"] }],
    ] as const) {
      const created = await keys.create({ name, ...spec });
      made[name] = { key: created.key, id: created.info.id };
    }
  }
  const access = new AccessControl({ broker, keys, logger });
  const transport = createKafkaTransport({
    broker,
    clock,
    logger,
    advertised: { host: "127.0.0.1", port: 9 },
    gunzip: nodeGunzip,
    authenticator: accessAuthenticator(access),
    readTimeoutMs,
  });
  let n = 0;
  return {
    broker,
    keys,
    clock,
    logger,
    ...made,
    connect(): FakeSocket {
      const s = new FakeSocket(`198.51.100.7:${++n}`);
      transport.handleConnection(s);
      return s;
    },
  };
}

const settle = async () => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
};

const frame = (
  apiKey: number,
  apiVersion: number,
  correlationId: number,
  write: (w: KafkaWriter) => void,
) => encodeRequest({ apiKey, apiVersion, correlationId, clientId: "sasl-test" }, write);

const handshake = (c: number, mechanism = "PLAIN") =>
  frame(17, 1, c, (w) => writeSaslHandshakeRequest(w, mechanism));
const authenticate = (c: number, token: Uint8Array | string) =>
  frame(36, 0, c, (w) =>
    writeSaslAuthenticateRequest(w, typeof token === "string" ? utf8(token) : token),
  );
const plain = (user: string, password: string, authzid = "") => `${authzid}\0${user}\0${password}`;
const metadata = (c: number, topics: string[] | null = null) =>
  frame(3, 1, c, (w) => writeMetadataRequest(w, topics));
const produce = (c: number, topic: string) =>
  frame(0, 3, c, (w) =>
    writeProduceRequest(w, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 1000,
      topics: [
        {
          name: topic,
          partitions: [
            {
              index: 0,
              records: encodeRecordBatch(
                storedRecords([{ offset: 0, ts: 1_000, key: "k", value: "v" }]),
              ),
            },
          ],
        },
      ],
    }),
  );
const fetchFrame = (c: number, topic: string) =>
  frame(1, 4, c, (w) =>
    writeFetchRequest(w, {
      maxWaitMs: 0,
      minBytes: 1,
      maxBytes: 1 << 16,
      isolationLevel: 0,
      topics: [
        { topic, partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 16 }] },
      ],
    }),
  );
const listOffsets = (c: number, topic: string) =>
  frame(2, 1, c, (w) => {
    w.int32(-1);
    w.array([topic], (t) => {
      w.string(t);
      w.array([0], (p) => w.int32(p).int64(-2));
    });
  });
const joinGroup = (c: number, group: string, topic: string) =>
  frame(11, 1, c, (w) => {
    w.string(group).int32(10_000).int32(0).string("").string("consumer");
    w.array([0], () => w.string("range").bytes(encodeConsumerSubscription([topic])));
  });
const commit = (c: number, group: string, topic: string) =>
  frame(8, 2, c, (w) =>
    writeOffsetCommitRequest(w, {
      groupId: group,
      generationId: -1,
      memberId: "",
      retentionTimeMs: -1,
      topics: [{ name: topic, partitions: [{ partition: 0, offset: 0, metadata: null }] }],
    }),
  );
const initProducerId = (c: number) =>
  frame(22, 0, c, (w) => {
    w.string(null).int32(60_000);
  });

/** The error code of a ListOffsets v1 answer's one partition. */
function listOffsetsCode(body: Uint8Array): number {
  const r = new KafkaReader(body, "ListOffsets v1 response");
  r.int32("topics");
  r.string("name");
  r.int32("partitions");
  r.int32("partition");
  return r.int16("error_code");
}

/** Connects and authenticates; every answer so far must be a success. */
async function login(s: FakeSocket, user: string, key: string): Promise<void> {
  s.send(handshake(1));
  s.send(authenticate(2, plain(user, key)));
  await settle();
  const [h, a] = s.responses();
  expect(decodeSaslHandshakeResponse(h.body)).toEqual({ errorCode: 0, mechanisms: ["PLAIN"] });
  expect(decodeSaslAuthenticateResponse(a.body).errorCode).toBe(0);
  s.written = [];
}

async function endOffset(broker: LocalBroker, topic = "orders"): Promise<number> {
  return (await broker.listOffsets({ topic, partition: 0 })).highWatermark;
}

describe("SASL/PLAIN over API keys on the Kafka listener", () => {
  it("authenticates with the key's id or name as the user, and the key as the password", async () => {
    const t = await setup();
    for (const user of [t.ingest.id, "ingest"]) {
      const s = t.connect();
      await login(s, user, t.ingest.key);
      s.send(produce(3, "orders"));
      await settle();
      expect(decodeProduceResponse(s.responses()[0].body)[0].partitions[0].errorCode).toBe(0);
    }
    // An authzid equal to the user is the same identity (RFC 4616).
    const s = t.connect();
    s.send(handshake(1));
    s.send(authenticate(2, plain("ingest", t.ingest.key, "ingest")));
    await settle();
    expect(decodeSaslAuthenticateResponse(s.responses()[1].body).errorCode).toBe(0);
    expect(await endOffset(t.broker)).toBe(2);
  });

  it("refuses every malformed or wrong token with 58 and one message, closes, and logs no secret", async () => {
    const t = await setup();
    const a = t.reader.key;
    const tokens: [string, Uint8Array | string][] = [
      ["another authzid", plain("reader", a, "admin")],
      ["an empty user", plain("", a)],
      ["an empty password", plain("reader", "")],
      ["a third NUL", `${plain("reader", a)}\0extra`],
      ["no NUL", `reader${a}`],
      ["invalid UTF-8", new Uint8Array([0, 0xff, 0xfe, 0, ...utf8(a)])],
      ["a wrong secret", plain("reader", `${a.slice(0, -4)}AAAA`)],
      [
        "an unknown key",
        plain("reader", "esb_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
      ],
      ["another key's name", plain("ingest", a)],
      ["another key's id", plain(t.ingest.id, a)],
      ["a malformed key", plain("reader", "hunter2")],
    ];
    const messages = new Set<string | null>();
    for (const [what, token] of tokens) {
      const s = t.connect();
      s.send(handshake(1));
      s.send(authenticate(2, token));
      // Pipelined behind the failure: never served.
      s.send(produce(3, "orders"));
      await settle();
      const answers = s.responses();
      expect(
        answers.map((r) => r.correlationId),
        what,
      ).toEqual([1, 2]);
      const r = decodeSaslAuthenticateResponse(answers[1].body);
      expect(r.errorCode, what).toBe(58);
      messages.add(r.errorMessage);
      expect(s.closed, what).toBe(true);
    }
    expect([...messages]).toEqual(["Authentication failed: invalid user name or password"]);
    expect(await endOffset(t.broker)).toBe(0);
    const failed = t.logger.named("auth.failed");
    expect(failed.length).toBe(tokens.length);
    expect(failed.every((l) => l.transport === "kafka")).toBe(true);
    expect(failed.filter((l) => l.reason === "user_mismatch")).toHaveLength(2);
    const logged = JSON.stringify(t.logger.events);
    for (const key of [t.admin.key, t.ingest.key, t.reader.key]) {
      expect(logged).not.toContain(key);
      expect(logged).not.toContain(key.slice(-43));
    }
  });

  it("closes a connection that sends anything but ApiVersions or SASL before success, serving nothing", async () => {
    const t = await setup();
    const before: [string, Uint8Array[]][] = [
      ["Produce first", [produce(1, "orders")]],
      ["Metadata first", [metadata(1)]],
      ["Fetch first", [fetchFrame(1, "orders")]],
      ["Produce between handshake and authenticate", [handshake(1), produce(2, "orders")]],
      ["SaslAuthenticate without a handshake", [authenticate(1, plain("admin", t.admin.key))]],
    ];
    for (const [what, frames] of before) {
      const s = t.connect();
      for (const f of frames) s.send(f);
      await settle();
      expect(s.closed, what).toBe(true);
      expect(s.responses().length, what).toBe(frames.length - 1);
    }
    expect(await endOffset(t.broker)).toBe(0);
    expect(t.logger.named("auth.failed").map((l) => l.reason)).toEqual(before.map(() => "missing"));
    // ApiVersions is answered before authentication.
    const s = t.connect();
    s.send(frame(18, 2, 7, () => {}));
    await settle();
    expect(s.responses().map((r) => r.correlationId)).toEqual([7]);
    expect(s.closed).toBe(false);
  });

  it("answers a second SaslHandshake or SaslAuthenticate 34, and another mechanism 33", async () => {
    const t = await setup();
    const s = t.connect();
    s.send(handshake(1, "SCRAM-SHA-256"));
    await settle();
    expect(decodeSaslHandshakeResponse(s.responses()[0].body)).toEqual({
      errorCode: 33,
      mechanisms: ["PLAIN"],
    });
    s.written = [];
    await login(s, "admin", t.admin.key);
    s.send(handshake(3));
    s.send(authenticate(4, plain("admin", t.admin.key)));
    await settle();
    const [h, a] = s.responses();
    expect(decodeSaslHandshakeResponse(h.body).errorCode).toBe(34);
    expect(decodeSaslAuthenticateResponse(a.body).errorCode).toBe(34);
    expect(s.closed).toBe(false);
  });

  it("closes, unread, a frame larger than the pre-authentication cap (a 100 KB token)", async () => {
    const t = await setup();
    const s = t.connect();
    s.send(handshake(1));
    s.send(authenticate(2, new Uint8Array(100_000).fill(0x41)));
    await settle();
    expect(s.responses().map((r) => r.correlationId)).toEqual([1]);
    expect(s.closed).toBe(true);
    expect(t.logger.named("kafka.request_refused")[0]).toMatchObject({
      reason: "frame size out of range",
      max_request_bytes: kafkaSaslFrameBytesMax,
    });
  });

  it("closes a connection that has not authenticated within the read timeout", async () => {
    const t = await setup();
    const s = t.connect();
    s.send(handshake(1));
    await settle();
    t.clock.advance(readTimeoutMs - 1);
    await settle();
    expect(s.closed).toBe(false);
    t.clock.advance(1);
    await settle();
    expect(s.closed).toBe(true);
    expect(t.logger.named("auth.failed")[0]).toMatchObject({
      reason: "timeout",
      transport: "kafka",
    });
    // An authenticated connection is not timed out.
    const ok = t.connect();
    await login(ok, "reader", t.reader.key);
    t.clock.advance(readTimeoutMs * 2);
    await settle();
    expect(ok.closed).toBe(false);
  });

  it("applies the role table: a producer key produces but cannot fetch, list offsets or use groups", async () => {
    const t = await setup();
    const s = t.connect();
    await login(s, "ingest", t.ingest.key);
    s.send(produce(3, "orders"));
    s.send(produce(4, "other"));
    s.send(fetchFrame(5, "orders"));
    s.send(listOffsets(6, "orders"));
    s.send(joinGroup(7, "billing", "orders"));
    s.send(commit(8, "billing", "orders"));
    s.send(initProducerId(9));
    s.send(metadata(10));
    s.send(metadata(11, ["orders", "other", "missing"]));
    await settle();
    const r = s.responses();
    expect(r.map((x) => x.correlationId)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(decodeProduceResponse(r[0].body)[0].partitions[0].errorCode).toBe(0);
    expect(decodeProduceResponse(r[1].body)[0].partitions[0].errorCode).toBe(29);
    expect(decodeFetchResponse(r[2].body)[0].partitions[0].errorCode).toBe(29);
    expect(listOffsetsCode(r[3].body)).toBe(29);
    expect(new DataView(r[4].body.buffer, r[4].body.byteOffset).getInt16(0)).toBe(30);
    expect(decodeOffsetCommitResponse(r[5].body)[0].partitions[0].errorCode).toBe(30);
    expect(new DataView(r[6].body.buffer, r[6].body.byteOffset).getInt16(4)).toBe(0);
    // Metadata lists only the topics the key may see; a named topic it may not see is 29,
    // whether or not it exists (no existence leak).
    expect(decodeMetadataResponse(r[7].body).topics.map((x) => x.name)).toEqual(["orders"]);
    expect(decodeMetadataResponse(r[8].body).topics.map((x) => [x.name, x.errorCode])).toEqual([
      ["orders", 0],
      ["other", 29],
      ["missing", 29],
    ]);
    expect(await endOffset(t.broker)).toBe(1);
    expect(await endOffset(t.broker, "other")).toBe(0);
    expect(s.closed).toBe(false);
  });

  it("applies the role table: a consumer key fetches and commits its group, not others, and cannot produce", async () => {
    const t = await setup();
    await t.broker.produce({
      topic: "orders",
      partition: 0,
      batch: new EntryBatchBuilder().add(null, utf8("x")).build(),
    });
    const s = t.connect();
    await login(s, t.reader.id, t.reader.key);
    s.send(fetchFrame(3, "orders"));
    s.send(fetchFrame(4, "other"));
    s.send(listOffsets(5, "orders"));
    s.send(commit(6, "billing", "orders"));
    s.send(commit(7, "audit", "orders"));
    s.send(commit(8, "billing", "other"));
    s.send(produce(9, "orders"));
    s.send(initProducerId(10));
    s.send(joinGroup(11, "audit", "orders"));
    await settle();
    const r = s.responses();
    expect(r.map((x) => x.correlationId)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11]);
    const fetched = decodeFetchResponse(r[0].body)[0].partitions[0];
    expect(fetched.errorCode).toBe(0);
    expect(fetched.records.length).toBeGreaterThan(0);
    expect(decodeFetchResponse(r[1].body)[0].partitions[0].errorCode).toBe(29);
    expect(listOffsetsCode(r[2].body)).toBe(0);
    expect(decodeOffsetCommitResponse(r[3].body)[0].partitions[0].errorCode).toBe(0);
    expect(decodeOffsetCommitResponse(r[4].body)[0].partitions[0].errorCode).toBe(30);
    expect(decodeOffsetCommitResponse(r[5].body)[0].partitions[0].errorCode).toBe(29);
    expect(decodeProduceResponse(r[6].body)[0].partitions[0].errorCode).toBe(29);
    expect(new DataView(r[7].body.buffer, r[7].body.byteOffset).getInt16(4)).toBe(31);
    expect(new DataView(r[8].body.buffer, r[8].body.byteOffset).getInt16(0)).toBe(30);
    expect(await endOffset(t.broker)).toBe(1);
    expect((await t.broker.describeGroup("billing")).offsets).toEqual([
      expect.objectContaining({ topic: "orders", partition: 0, committed: 0 }),
    ]);
  });

  it("closes a key's connections when the key is revoked, and anonymous ones when the first key is made", async () => {
    const t = await setup();
    const s = t.connect();
    await login(s, "ingest", t.ingest.key);
    const other = t.connect();
    await login(other, "reader", t.reader.key);
    await t.keys.revoke("ingest");
    await settle();
    expect(s.closed).toBe(true);
    expect(other.closed).toBe(false);
    expect(t.logger.named("auth.connection_closed")).toEqual([
      expect.objectContaining({ transport: "kafka", key_id: t.ingest.id }),
    ]);
    // The revoked key no longer authenticates.
    const again = t.connect();
    again.send(handshake(1));
    again.send(authenticate(2, plain("ingest", t.ingest.key)));
    await settle();
    expect(decodeSaslAuthenticateResponse(again.responses()[1].body).errorCode).toBe(58);

    const open = await setup({ withKeys: false });
    const anonymous = open.connect();
    anonymous.send(metadata(1));
    anonymous.send(handshake(2));
    await settle();
    expect(anonymous.responses().map((r) => r.correlationId)).toEqual([1, 2]);
    expect(decodeSaslHandshakeResponse(anonymous.responses()[1].body).errorCode).toBe(34);
    await open.keys.create({ name: "first", role: "admin" });
    await settle();
    expect(anonymous.closed).toBe(true);
    const later = open.connect();
    later.send(metadata(1));
    await settle();
    expect(later.closed).toBe(true);
    expect(later.responses()).toEqual([]);
  });
});
