/**
 * The TCP front door end to end over real loopback sockets: `listenTcp` + transport + `TcpClient`
 * against the real `LocalBroker` on a temp dir (and, where a misbehaving broker is needed, a
 * small fake).
 */
import * as net from "node:net";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import type { Broker, FetchResult } from "../../src/broker/types.ts";
import { ClientError, ClusterClient, expandSpans, TcpClient } from "../../src/client/client.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { tcpShutdownLingerMs } from "../../src/lib/limits.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import {
  decodeListOffsetsResponse,
  encodeListOffsetsRequest,
} from "../../src/protocol/apis/list-offsets.ts";
import { encodeProduceRequest } from "../../src/protocol/apis/produce.ts";
import { decodeErrorBody, decodeResponseHeader } from "../../src/protocol/envelope.ts";
import { FrameDecoder } from "../../src/protocol/frame.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { listenTcp, type TcpListener } from "../../src/runtime/tcp.ts";
import { EntryBatchBuilder, encodeRecord } from "../../src/storage/record.ts";
import {
  createTcpTransport,
  type TcpTransport,
  type TcpTransportOptions,
} from "../../src/transport/tcp/transport.ts";
import { tempDir } from "../helpers/tmp.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";

const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array | null) => (b === null ? null : new TextDecoder().decode(b));

interface Server {
  broker: Broker;
  transport: TcpTransport;
  listener: TcpListener;
  logger: MemoryLogger;
  port: number;
}

/** Starts transport + listener over `broker`; shut down after the test. */
async function serve(broker: Broker, options: Partial<TcpTransportOptions> = {}): Promise<Server> {
  const logger = new MemoryLogger();
  const transport = createTcpTransport({ broker, clock: realClock, logger, ...options });
  const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
    transport.handleConnection(socket),
  );
  onTestFinished(async () => {
    const stopped = listener.close();
    await transport.close({ graceMs: 1000 });
    await stopped;
    await broker.close();
  });
  return { broker, transport, listener, logger, port: listener.port };
}

/** Starts a server over a real LocalBroker on a fresh temp dir. */
async function serveLocal(options: Partial<TcpTransportOptions> = {}): Promise<Server> {
  const { dir } = tempDir("es-broker-tcp-");
  const { broker } = await openTestBroker({
    fs: new NodeFileSystem(),
    dataDir: dir,
    clock: realClock,
  });
  return serve(broker, options);
}

async function connect(port: number, timeoutMs?: number): Promise<TcpClient> {
  const client = await TcpClient.connect({ host: "127.0.0.1", port, timeoutMs });
  onTestFinished(() => client.close());
  return client;
}

async function rejection(promise: Promise<unknown>): Promise<ClientError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(ClientError);
    return error as ClientError;
  }
  throw new Error("expected a rejection");
}

/** A raw socket that records every byte received and resolves `closed` when the server closes it. */
async function rawSocket(
  port: number,
): Promise<{ socket: net.Socket; received: () => Uint8Array; closed: Promise<void> }> {
  const socket = net.connect({ host: "127.0.0.1", port });
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  onTestFinished(() => void socket.destroy());
  return { socket, received: () => new Uint8Array(Buffer.concat(chunks)), closed };
}

/** Reads response frames from a raw socket until `count` have arrived. */
function responsesFrom(socket: net.Socket, count: number) {
  const decoder = new FrameDecoder({ lengthMin: 6, lengthMax: 1 << 24 });
  const out: ReturnType<typeof decodeResponseHeader>[] = [];
  return new Promise<typeof out>((resolve) => {
    socket.on("data", (chunk: Buffer) => {
      decoder.push(chunk);
      for (let f = decoder.next(); f !== null; f = decoder.next())
        out.push(decodeResponseHeader(f));
      if (out.length >= count) resolve(out);
    });
  });
}

describe("TCP front door against LocalBroker", () => {
  it("creates a topic, produces and fetches records with keys, empty keys, no keys and timestamps", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    const topic = await client.createTopic({
      name: "orders",
      partitions: 2,
      config: { retention_ms: 60_000 },
    });
    expect(topic.name).toBe("orders");
    expect(topic.partitions.map((p) => p.partition)).toEqual([0, 1]);
    expect(topic.config.retention_ms).toBe(60_000);

    const result = await client.produce(
      "orders",
      [
        { key: "k1", value: "first", timestampMs: 1_700_000_000_000 },
        { key: "", value: "empty key" },
        { value: text("no key") },
        { key: text("k2"), value: "" },
      ],
      { partition: 1 },
    );
    expect(result.spans).toEqual([{ partition: 1, baseOffset: 0, count: 4 }]);
    expect(expandSpans(result.spans)).toEqual(
      [0, 1, 2, 3].map((offset) => ({ partition: 1, offset })),
    );

    const fetched = await client.fetch({ topic: "orders", partition: 1, offset: 0 });
    expect(fetched.highWatermark).toBe(4);
    expect(fetched.nextOffset).toBe(4);
    expect(fetched.logStartOffset).toBe(0);
    expect(fetched.records.map((r) => [r.offset, str(r.key), str(r.value)])).toEqual([
      [0, "k1", "first"],
      [1, "", "empty key"],
      [2, null, "no key"],
      [3, "k2", ""],
    ]);
    expect(fetched.records[0].timestampMs).toBe(1_700_000_000_000);
    expect(fetched.records[1].timestampMs).toBeGreaterThan(1_700_000_000_000);

    expect(await client.listOffsets({ topic: "orders", partition: 1 })).toEqual({
      logStartOffset: 0,
      highWatermark: 4,
    });
    const [meta] = await client.metadata(["orders"]);
    expect(meta.partitions.find((p) => p.partition === 1)).toMatchObject({
      highWatermark: 4,
      fenced: false,
      segmentCount: 1,
    });
    expect((await client.metadata()).map((t) => t.name)).toEqual(["orders"]);

    await client.deleteTopic("orders");
    expect(await client.metadata()).toEqual([]);
  });

  it("rejects with a ClientError carrying the table's code, number and retriability", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    const missing = await rejection(client.fetch({ topic: "nope", partition: 0, offset: 0 }));
    expect(missing).toMatchObject({
      code: "topic_not_found",
      tcp: Errors.topicNotFound.tcp,
      retriable: false,
    });
    expect(missing.message).toContain("nope");
    await client.createTopic({ name: "t", partitions: 1 });
    const exists = await rejection(client.createTopic({ name: "t", partitions: 1 }));
    expect(exists).toMatchObject({ code: "topic_exists", tcp: Errors.topicExists.tcp });
    const noPartition = await rejection(client.listOffsets({ topic: "t", partition: 5 }));
    expect(noPartition.code).toBe("partition_not_found");
    const badName = await rejection(client.createTopic({ name: "a/b", partitions: 1 }));
    expect(badName.code).toBe("invalid_topic_name");
    // The connection still works after errors.
    expect(await client.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 0,
    });
  });

  it("refuses a bad argument locally with invalid_request, sending nothing", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    const error = await rejection(client.fetch({ topic: "t", partition: 0, offset: -1 }));
    expect(error).toMatchObject({ code: "invalid_request", tcp: Errors.invalidRequest.tcp });
    expect(client.pendingRequests).toBe(0);
  });

  it("keeps the order of pipelined produces to one partition on one connection", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    await client.createTopic({ name: "seq", partitions: 1 });
    const count = 300;
    const pending = Array.from({ length: count }, (_, i) =>
      client.produce("seq", [{ value: `m${i}` }], { partition: 0 }),
    );
    expect(client.pendingRequests).toBe(count);
    const results = await Promise.all(pending);
    expect(results.map((r) => r.spans[0].baseOffset)).toEqual(
      Array.from({ length: count }, (_, i) => i),
    );
    const fetched = await client.fetch({
      topic: "seq",
      partition: 0,
      offset: 0,
      maxRecords: count,
    });
    expect(fetched.records.map((r) => str(r.value))).toEqual(
      Array.from({ length: count }, (_, i) => `m${i}`),
    );
  });

  it("reads a fetch answer of many socket chunks where it lies: every record intact through records and cursor alike", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    await client.createTopic({ name: "big", partitions: 1 });
    // Values of varied sizes so record edges fall everywhere against the socket's chunk edges.
    const values = Array.from({ length: 3000 }, (_, i) =>
      `v${i}:`.padEnd(100 + ((i * 37) % 900), String.fromCharCode(97 + (i % 26))),
    );
    for (let i = 0; i < values.length; i += 500) {
      await client.produce(
        "big",
        values
          .slice(i, i + 500)
          .map((value, j) => ({ key: j % 3 === 0 ? null : `k${i + j}`, value })),
        { partition: 0 },
      );
    }
    const fetched = await client.fetch({
      topic: "big",
      partition: 0,
      offset: 0,
      maxRecords: values.length,
      maxBytes: 8 * 1024 * 1024,
    });
    expect(fetched.recordCount).toBe(values.length);
    expect(fetched.nextOffset).toBe(values.length);
    const viaCursor: [number, string | null, string][] = [];
    for (const c = fetched.cursor(); c.next(); )
      viaCursor.push([c.offset, str(c.key()), new TextDecoder().decode(c.value())]);
    const wanted = values.map((value, i): [number, string | null, string] => [
      i,
      (i % 500) % 3 === 0 ? null : `k${i}`,
      value,
    ]);
    expect(viaCursor).toEqual(wanted);
    expect(
      fetched.records.map((r): [number, string | null, string] => [
        r.offset,
        str(r.key),
        new TextDecoder().decode(r.value),
      ]),
    ).toEqual(wanted);
    expect(fetched.records).toBe(fetched.records);
  });

  it("matches many pipelined requests of different kinds to their answers", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    await client.createTopic({ name: "mix", partitions: 3 });
    const work = Array.from({ length: 60 }, (_, i) =>
      i % 3 === 0
        ? client
            .produce("mix", [{ value: `v${i}` }], { partition: i % 3 })
            .then((r) => ["produce", r.spans[0].partition])
        : i % 3 === 1
          ? client
              .listOffsets({ topic: "mix", partition: 1 })
              .then((r) => ["offsets", r.logStartOffset])
          : client.metadata(["mix"]).then((t) => ["meta", t[0].partitions.length]),
    );
    const answers = await Promise.all(work);
    answers.forEach((answer, i) => {
      expect(answer).toEqual(
        i % 3 === 0 ? ["produce", 0] : i % 3 === 1 ? ["offsets", 0] : ["meta", 3],
      );
    });
  });

  it("answers a long-polling fetch when a record is produced on another connection", async () => {
    const { port } = await serveLocal();
    const consumer = await connect(port);
    const producer = await connect(port);
    await producer.createTopic({ name: "live", partitions: 1 });
    const waiting = consumer.fetch({ topic: "live", partition: 0, offset: 0, waitMs: 30_000 });
    await producer.produce("live", [{ value: "hello" }], { partition: 0 });
    const fetched = await waiting;
    expect(fetched.records.map((r) => str(r.value))).toEqual(["hello"]);
  });

  it("reads a partition in order one fetch ahead: the next fetch goes out before the current answer is consumed", async () => {
    const { dir } = tempDir("es-broker-tcp-");
    const { broker: local } = await openTestBroker({
      fs: new NodeFileSystem(),
      dataDir: dir,
      clock: realClock,
    });
    const fetchedOffsets: number[] = [];
    const counting = new Proxy(local, {
      get(target, key, receiver) {
        if (key === "fetch")
          return (request: Parameters<Broker["fetch"]>[0]) => {
            fetchedOffsets.push(request.offset);
            return target.fetch(request);
          };
        const value = Reflect.get(target, key, receiver);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const { port } = await serve(counting);
    const client = await connect(port);
    await client.createTopic({ name: "ahead", partitions: 1 });
    const values = Array.from({ length: 45 }, (_, i) => ({ value: `v${i}` }));
    await client.produce("ahead", values, { partition: 0 });
    const reader = client.reader({ topic: "ahead", partition: 0, offset: 0, maxRecords: 10 });
    const first = await reader.next();
    expect(first.records.map((r) => r.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // Nothing asked for the second answer yet, but its fetch is already on its way (and, once
    // that answer is in, the one after it: never more than one answer waits unconsumed).
    await vi.waitFor(() => expect(fetchedOffsets.slice(0, 2)).toEqual([0, 10]));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(fetchedOffsets.length).toBeLessThanOrEqual(3);
    const seen = first.records.map((r) => str(r.value));
    for (;;) {
      const answer = await reader.next();
      if (answer.recordCount === 0) break;
      seen.push(...answer.records.map((r) => str(r.value)));
    }
    reader.close();
    expect(seen).toEqual(values.map((v) => v.value));
    expect(fetchedOffsets.slice(0, 6)).toEqual([0, 10, 20, 30, 40, 45]);
  });

  it("produces a prebuilt entry batch and lets the broker pick partitions by key", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    await client.createTopic({ name: "keyed", partitions: 4 });
    const batch = new EntryBatchBuilder()
      .add(text("a"), text("1"))
      .add(text("a"), text("2"))
      .add(text("a"), text("3"))
      .build();
    const result = await client.produce("keyed", batch);
    expect(result.spans.length).toBe(1);
    expect(result.spans[0].count).toBe(3);
  });

  it("ClusterClient.produce without a partition number refuses at once, saying the option is required (attack14b F9)", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    await client.createTopic({ name: "cq", partitions: 2 });
    const cluster = await ClusterClient.connect({ bootstrap: [{ host: "127.0.0.1", port }] });
    onTestFinished(() => cluster.close());
    // A JavaScript caller, or a partition computed as undefined (the type says it is required).
    for (const options of [{}, { partition: undefined }, { partition: -1 }, { partition: 1.5 }]) {
      const err = await rejection(
        cluster.produce("cq", [{ value: "x" }], options as { partition: number }),
      );
      expect(err.code).toBe("invalid_request");
      expect(err.retriable).toBe(false);
      expect(err.message).toContain("the partition option is required");
      expect(err.message).not.toContain("Partition undefined");
    }
    // Nothing was sent; a partition number goes through.
    const ends = await Promise.all(
      [0, 1].map((partition) => client.listOffsets({ topic: "cq", partition })),
    );
    expect(ends.map((e) => e.highWatermark)).toEqual([0, 0]);
    const sent = await cluster.produce("cq", [{ value: "y" }], { partition: 1 });
    expect(sent.spans[0]).toMatchObject({ partition: 1, baseOffset: 0 });
  });

  it("answers an unknown api with unsupported_api and keeps serving the same connection", async () => {
    const { port } = await serveLocal();
    const client = await connect(port);
    await client.createTopic({ name: "t", partitions: 1 });
    const { socket, closed } = await rawSocket(port);
    let isClosed = false;
    void closed.then(() => (isClosed = true));
    const unknown = Buffer.from("0000000c 0063 0000 00000001 cafebabe".replace(/ /g, ""), "hex");
    const responses = responsesFrom(socket, 2);
    socket.write(unknown);
    socket.write(encodeListOffsetsRequest(2, { topic: "t", partition: 0 }));
    const [first, second] = await responses;
    expect(first).toMatchObject({ correlationId: 1, error: Errors.unsupportedApi.tcp });
    expect(decodeErrorBody(first.body).code).toBe("unsupported_api");
    expect(second).toMatchObject({ correlationId: 2, error: 0 });
    expect(decodeListOffsetsResponse(second.body)).toEqual({ logStartOffset: 0, highWatermark: 0 });
    expect(isClosed).toBe(false);
  });

  it("closes a connection whose half frame stalls past the read timeout", async () => {
    const { port, logger, transport } = await serveLocal({ readTimeoutMs: 150 });
    const { socket, closed, received } = await rawSocket(port);
    socket.write(encodeListOffsetsRequest(1, { topic: "t", partition: 0 }).subarray(0, 7));
    await closed;
    expect(received().length).toBe(0);
    expect(logger.named("tcp.read_timeout")).toMatchObject([
      { buffered_bytes: 7, read_timeout_ms: 150 },
    ]);
    await vi.waitFor(() => expect(transport.connectionCount).toBe(0));
  });

  it('closes the connection when an HTTP request arrives ("GET / HTTP/1.1")', async () => {
    const { port, logger } = await serveLocal();
    const { socket, closed, received } = await rawSocket(port);
    socket.write("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    await closed;
    expect(received().length).toBe(0);
    expect(logger.named("tcp.frame_refused")).toMatchObject([{ length: 0x47455420 }]);
  });

  it("answers a TLS ClientHello with a plain-text line and closes the connection", async () => {
    const { port } = await serveLocal();
    const { socket, closed, received } = await rawSocket(port);
    const hello = Buffer.from(`16030100c8010000c40303${"ab".repeat(32)}00`, "hex");
    socket.write(hello);
    await closed;
    // Not a TLS record: the client's TLS layer reports "wrong version number", not a bare close.
    expect(Buffer.from(received()).toString()).toBe(
      "es-broker: this port is plain TCP, not TLS: connect without TLS\n",
    );
  });

  it("refuses an oversize frame with request_too_large and closes the connection", async () => {
    const { port } = await serveLocal({ maxRequestBytes: 64 * 1024 });
    const client = await connect(port);
    await client.createTopic({ name: "big", partitions: 1 });
    const error = await rejection(
      client.produce("big", [{ value: new Uint8Array(100 * 1024) }], { partition: 0 }),
    );
    expect(error).toMatchObject({
      code: "request_too_large",
      tcp: Errors.requestTooLarge.tcp,
      retriable: false,
    });
    const after = await rejection(client.listOffsets({ topic: "big", partition: 0 }));
    expect(after.code).toBe("connection_closed");
    // The refused bytes were never appended.
    const other = await connect(port);
    expect(await other.listOffsets({ topic: "big", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 0,
    });
  });

  it("refuses a raw oversize length header before the body is sent", async () => {
    const { port } = await serveLocal({ maxRequestBytes: 1024 });
    const { socket, closed, received } = await rawSocket(port);
    const header = encodeProduceRequest(9, {
      topic: "t",
      batch: new EntryBatchBuilder().add(null, text("x")).build(),
    }).slice(0, 12);
    new DataView(header.buffer).setUint32(0, 1025);
    socket.write(header);
    await closed;
    const decoder = new FrameDecoder({ lengthMin: 6, lengthMax: 1024 });
    decoder.push(received());
    const response = decodeResponseHeader(decoder.next()!);
    expect(response).toMatchObject({ correlationId: 9, error: Errors.requestTooLarge.tcp });
  });

  it("ends every connection on shutdown so the listener closes", async () => {
    const { dir } = tempDir("es-broker-tcp-");
    const { broker } = await openTestBroker({
      fs: new NodeFileSystem(),
      dataDir: dir,
      clock: realClock,
    });
    const transport = createTcpTransport({ broker, clock: realClock, logger: new MemoryLogger() });
    const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (s) =>
      transport.handleConnection(s),
    );
    const client = await TcpClient.connect({ host: "127.0.0.1", port: listener.port });
    await client.createTopic({ name: "t", partitions: 1 });
    // The long poll is cut short by shutdown: it ends empty, or with the connection.
    const poll = client.fetch({ topic: "t", partition: 0, offset: 0, waitMs: 60_000 }).then(
      (r) => r.records.length,
      (e: ClientError) => e.code,
    );
    const stopped = listener.close();
    await transport.close();
    await stopped;
    const outcome = await poll;
    expect([0, "connection_closed"]).toContain(outcome);
    expect(client.closed).toBe(true);
    await broker.close();
  });
});

/** A broker whose methods are supplied per test; the rest are unavailable. */
function fakeBroker(overrides: Partial<Broker>): Broker {
  const unavailable = () =>
    Promise.reject(new BrokerError(Errors.unavailable, "Cannot serve: fake broker"));
  return {
    createTopic: unavailable,
    listTopics: unavailable,
    describeTopic: unavailable,
    deleteTopic: unavailable,
    produce: unavailable,
    fetch: unavailable,
    listOffsets: unavailable,
    joinGroup: unavailable,
    heartbeat: unavailable,
    leaveGroup: unavailable,
    commitOffsets: unavailable,
    describeGroup: unavailable,
    listGroups: unavailable,
    close: () => Promise.resolve(),
    ...overrides,
  };
}

describe("TCP client against a misbehaving broker", () => {
  function fetchResult(bytes: Uint8Array, count: number, nextOffset: number): FetchResult {
    return { records: { bytes, count }, nextOffset, highWatermark: nextOffset, logStartOffset: 0 };
  }

  it("on shutdown, cuts off a peer that never closes its side after tcpShutdownLingerMs, not the 2 s linger (attack15b F2)", async () => {
    const { dir } = tempDir("es-broker-tcp-");
    const { broker } = await openTestBroker({
      fs: new NodeFileSystem(),
      dataDir: dir,
      clock: realClock,
    });
    await broker.createTopic({ name: "t", partitions: 1 });
    // The transport's timers on a manual clock: only the shutdown linger can end the wait here.
    const clock = new ManualClock();
    const transport = createTcpTransport({ broker, clock, logger: new MemoryLogger() });
    const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (s) =>
      transport.handleConnection(s),
    );
    // A peer that reads but never closes its side (a paused follower does not either).
    const socket = net.connect({ host: "127.0.0.1", port: listener.port, allowHalfOpen: true });
    onTestFinished(() => void socket.destroy());
    socket.on("error", () => {});
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    const ended = new Promise<void>((resolve) => socket.once("end", () => resolve()));
    const answered = responsesFrom(socket, 1);
    socket.write(
      encodeProduceRequest(7, {
        topic: "t",
        partition: 0,
        batch: new EntryBatchBuilder().add(null, text("x")).build(),
      }),
    );
    expect(await answered).toEqual([expect.objectContaining({ correlationId: 7, error: 0 })]);
    let closed = false;
    const stopped = listener.close();
    const closing = transport.close().then(() => {
      closed = true;
    });
    await ended; // its answer went out, then the end
    await new Promise((r) => setTimeout(r, 50));
    expect(closed).toBe(false);
    clock.advance(tcpShutdownLingerMs - 1);
    await new Promise((r) => setTimeout(r, 50));
    expect(closed).toBe(false);
    clock.advance(1);
    // At once now (the 2 s linger of an ordinary end ran on real time, past this wait).
    const outcome = await Promise.race([
      closing.then(() => "closed"),
      new Promise((r) => setTimeout(() => r("still open after 1 s"), 1000)),
    ]);
    expect(outcome).toBe("closed");
    await stopped;
    expect((await broker.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(1);
    await broker.close();
  });

  it("destroy() closes at once when the broker never closes its side, failing what is pending (attack15b F2)", async () => {
    // A broker that accepts, reads and never answers nor closes (a SIGSTOPped leader's kernel).
    const accepted: net.Socket[] = [];
    const server = net.createServer({ allowHalfOpen: true }, (s) => {
      accepted.push(s);
      s.on("error", () => {});
      s.resume();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
    onTestFinished(() => {
      for (const s of accepted) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    });
    const { port } = server.address() as net.AddressInfo;
    const client = await TcpClient.connect({ host: "127.0.0.1", port, timeoutMs: 60_000 });
    const pending = client.listOffsets({ topic: "t", partition: 0 }).catch((e: ClientError) => e);
    await new Promise((r) => setTimeout(r, 20));
    const outcome = await Promise.race([
      client.destroy().then(() => "closed"),
      new Promise((r) => setTimeout(() => r("still open after 1 s"), 1000)),
    ]);
    expect(outcome).toBe("closed");
    expect(client.closed).toBe(true);
    expect((await pending) as ClientError).toMatchObject({ code: "connection_closed" });
  });

  it("treats a fetched record with a bad CRC as an error, not data", async () => {
    const record = encodeRecord({ offset: 0, timestampMs: 1, key: null, value: text("good") });
    record[record.length - 5] ^= 0xff; // flip a value byte; the stored CRC no longer matches
    const { port } = await serve(fakeBroker({ fetch: async () => fetchResult(record, 1, 1) }));
    const client = await connect(port);
    const error = await rejection(client.fetch({ topic: "t", partition: 0, offset: 0 }));
    expect(error).toMatchObject({ code: "invalid_response", retriable: false });
    expect(error.message).toContain("crc mismatch");
  });

  it("treats fetched offsets that do not increase as an error", async () => {
    const a = encodeRecord({ offset: 5, timestampMs: 1, key: null, value: text("a") });
    const b = encodeRecord({ offset: 5, timestampMs: 1, key: null, value: text("b") });
    const bytes = new Uint8Array(a.length + b.length);
    bytes.set(a);
    bytes.set(b, a.length);
    const { port } = await serve(fakeBroker({ fetch: async () => fetchResult(bytes, 2, 6) }));
    const client = await connect(port);
    const error = await rejection(client.fetch({ topic: "t", partition: 0, offset: 0 }));
    expect(error.code).toBe("invalid_response");
    expect(error.message).toContain("does not follow");
  });

  it("treats a record_count that disagrees with the records as an error", async () => {
    const a = encodeRecord({ offset: 0, timestampMs: 1, key: null, value: text("a") });
    const { port } = await serve(fakeBroker({ fetch: async () => fetchResult(a, 2, 2) }));
    const client = await connect(port);
    expect((await rejection(client.fetch({ topic: "t", partition: 0, offset: 0 }))).code).toBe(
      "invalid_response",
    );
  });

  it("rejects every pending request with connection_closed when the connection is lost", async () => {
    const never = () => new Promise<never>(() => {});
    const { port, transport } = await serve(fakeBroker({ listOffsets: never, produce: never }));
    const client = await connect(port);
    const a = client.listOffsets({ topic: "t", partition: 0 });
    const b = client.produce("t", [{ value: "x" }]);
    expect(client.pendingRequests).toBe(2);
    void transport.close({ graceMs: 0 });
    const [ea, eb] = await Promise.all([rejection(a), rejection(b)]);
    expect(ea).toMatchObject({ code: "connection_closed", tcp: -1, retriable: true });
    expect(eb.code).toBe("connection_closed");
    expect((await rejection(client.listOffsets({ topic: "t", partition: 0 }))).code).toBe(
      "connection_closed",
    );
  });

  it("rejects a request the broker never answers with timeout, and the connection keeps working", async () => {
    let calls = 0;
    const { port } = await serve(
      fakeBroker({
        listOffsets: () =>
          ++calls === 1
            ? new Promise<never>(() => {})
            : Promise.resolve({ logStartOffset: 0, highWatermark: 7 }),
      }),
    );
    const client = await connect(port, 500);
    const error = await rejection(client.listOffsets({ topic: "t", partition: 0 }));
    expect(error).toMatchObject({ code: "timeout", retriable: true });
    expect(await client.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 7,
    });
  });

  it("drops the late answer of a timed-out request and keeps the connection", async () => {
    let release: () => void = () => {};
    let calls = 0;
    const { port } = await serve(
      fakeBroker({
        listOffsets: () =>
          ++calls === 1
            ? new Promise(
                (resolve) => (release = () => resolve({ logStartOffset: 0, highWatermark: 1 })),
              )
            : Promise.resolve({ logStartOffset: 0, highWatermark: 2 }),
      }),
    );
    const client = await connect(port, 300);
    expect((await rejection(client.listOffsets({ topic: "t", partition: 0 }))).code).toBe(
      "timeout",
    );
    release();
    expect(await client.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 2,
    });
    expect(client.closed).toBe(false);
  });

  it("closes the connection with invalid_response when an answer matches no request", async () => {
    const server = net.createServer((socket) => {
      socket.on("error", () => {});
      socket.once("data", () =>
        socket.write(Buffer.from("00000006 000003e7 0000".replace(/ /g, ""), "hex")),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const client = await connect((server.address() as net.AddressInfo).port);
    const error = await rejection(client.listOffsets({ topic: "t", partition: 0 }));
    expect(error.code).toBe("invalid_response");
    expect(error.message).toContain("correlation id 999");
    expect(client.closed).toBe(true);
  });

  it("answers an internal failure with a generic message and logs the detail on the server", async () => {
    const { port, logger } = await serve(
      fakeBroker({ listOffsets: () => Promise.reject(new Error("disk gremlin")) }),
    );
    const client = await connect(port);
    const error = await rejection(client.listOffsets({ topic: "t", partition: 0 }));
    expect(error).toMatchObject({ code: "internal", tcp: Errors.internal.tcp });
    expect(error.message).not.toContain("gremlin");
    expect(logger.named("tcp.internal_error")[0].error).toBe("disk gremlin");
  });

  it("fails to connect to a closed port with connection_closed", async () => {
    const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (s) => s.destroy());
    const port = listener.port;
    await listener.close();
    const error = await rejection(TcpClient.connect({ host: "127.0.0.1", port }));
    expect(error.code).toBe("connection_closed");
  });
});

describe("listenTcp's sockets on Node", () => {
  it("writes answers past a full socket buffer in order, reports the full buffer, drains, and says when each write left", async () => {
    const chunkBytes = 256 * 1024;
    const chunkCount = 48;
    // Each chunk filled with its own index, so order and completeness can be checked byte by byte.
    const chunks = Array.from({ length: chunkCount }, (_, i) => new Uint8Array(chunkBytes).fill(i));
    const results: boolean[] = [];
    /** The writes whose `onWritten` was called, in call order. */
    const written: number[] = [];
    let drained = 0;
    const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) => {
      socket.attach({
        onData() {},
        onDrain: () => drained++,
        onClose() {},
      });
      // Single chunks and gathered pairs, written while the peer reads nothing.
      for (let i = 0; i < chunkCount; i += 3) {
        results.push(socket.write([chunks[i]], () => written.push(i)));
        results.push(socket.write([chunks[i + 1], chunks[i + 2]], () => written.push(i + 1)));
      }
      socket.end();
    });
    onTestFinished(() => listener.close());
    const { socket, received, closed } = await rawSocket(listener.port);
    socket.pause();
    await vi.waitFor(() => expect(results.length).toBe((chunkCount / 3) * 2));
    // 12 MiB cannot all go into the kernel's buffers at once: some write must report a full buffer.
    expect(results).toContain(false);
    // While the peer reads nothing, the writes still queued have not been reported written.
    expect(written.length).toBeLessThan(results.length);
    socket.resume();
    await closed;
    const bytes = received();
    expect(bytes.length).toBe(chunkBytes * chunkCount);
    for (let i = 0; i < chunkCount; i++) {
      const part = bytes.subarray(i * chunkBytes, (i + 1) * chunkBytes);
      expect(part.every((b) => b === i)).toBe(true);
    }
    expect(drained).toBeGreaterThanOrEqual(1);
    // Every write reported once, in the order written.
    const expected = Array.from({ length: chunkCount / 3 }, (_, k) => [3 * k, 3 * k + 1]).flat();
    expect(written).toEqual(expected);
  });
});
