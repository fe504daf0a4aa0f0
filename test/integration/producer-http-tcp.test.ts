/**
 * Idempotent produce through both front doors: the Producer-Id / Producer-Epoch / Producer-Seq
 * headers over HTTP (through the Hono app), api 12 over TCP with error details, and the client's
 * IdempotentProducer retrying through lost answers and recovering from a forgotten producer.
 */
import * as net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { ClientError, IdempotentProducer, TcpClient } from "../../src/client/client.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { fromUtf8 } from "../../src/lib/bytes.ts";
import { ManualClock, type Clock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { DecodeStatus, RecordCursor } from "../../src/storage/record.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";
import { realClock } from "../helpers/clock.ts";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function broker(
  options: { clock?: Clock; producerExpiryMs?: number } = {},
): Promise<LocalBroker> {
  const b = await LocalBroker.open({
    fs: new MemoryFileSystem(),
    dataDir: "/data",
    clock: options.clock ?? new ManualClock(),
    logger: new MemoryLogger(),
    cleanupIntervalMs: 0,
    producerExpiryMs: options.producerExpiryMs,
  });
  cleanups.push(() => b.close());
  return b;
}

async function values(b: LocalBroker, topic: string, partition = 0): Promise<string[]> {
  const r = await b.fetch({ topic, partition, offset: 0, maxRecords: 10_000 });
  const c = new RecordCursor().reset(r.records.bytes);
  const out: string[] = [];
  for (let pos = 0; pos < r.records.bytes.length; pos += c.sizeBytes) {
    expect(c.decode(pos)).toBe(DecodeStatus.Ok);
    out.push(fromUtf8(c.value()));
  }
  return out;
}

/** A TCP server over `b`; `dropAnswers(n)` makes the next n answers vanish (the connection is cut after the request got through). */
async function serve(b: LocalBroker) {
  const transport = createTcpTransport({ broker: b, clock: realClock, logger: new MemoryLogger() });
  const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
    transport.handleConnection(socket),
  );
  let drop = 0;
  const proxy = net.createServer((front) => {
    const back = net.connect({ host: "127.0.0.1", port: listener.port });
    front.on("data", (d) => back.write(d));
    back.on("data", (d) => {
      if (drop > 0) {
        drop--;
        front.destroy();
        back.destroy();
        return;
      }
      front.write(d);
    });
    front.on("error", () => back.destroy());
    back.on("error", () => front.destroy());
    front.on("close", () => back.destroy());
    back.on("close", () => front.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  const proxyPort = (proxy.address() as net.AddressInfo).port;
  cleanups.push(async () => {
    await new Promise<void>((r) => proxy.close(() => r()));
    const stopped = listener.close();
    await transport.close({ graceMs: 500 });
    await stopped;
  });
  const clients: TcpClient[] = [];
  cleanups.push(async () => {
    for (const c of clients) await c.close();
  });
  return {
    dropAnswers: (n: number) => void (drop = n),
    connect: async () => {
      const client = await TcpClient.connect({
        host: "127.0.0.1",
        port: proxyPort,
        timeoutMs: 5000,
      });
      clients.push(client);
      return client;
    },
  };
}

describe("idempotent produce over HTTP", () => {
  async function setup() {
    const b = await broker();
    await b.createTopic({ name: "t", partitions: 2 });
    const app = createHttpApp({ broker: b, logger: new MemoryLogger() });
    const produce = async (
      headers: Record<string, string>,
      body: unknown,
      type = "application/json",
    ) => {
      const res = await app.request("/v1/topics/t/records", {
        method: "POST",
        headers: { "content-type": type, ...headers },
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    return { b, produce };
  }
  const h = (id: string, epoch: number, seq: number) => ({
    "Producer-Id": id,
    "Producer-Epoch": String(epoch),
    "Producer-Seq": String(seq),
  });

  it("answers a retry 200 with the original offsets and duplicate: true, appending nothing", async () => {
    const { b, produce } = await setup();
    const body = {
      records: [
        { value: "a", partition: 1 },
        { value: "b", partition: 1 },
      ],
    };
    expect(await produce(h("web-1", 0, 0), body)).toEqual({
      status: 200,
      body: {
        offsets: [
          { partition: 1, offset: 0 },
          { partition: 1, offset: 1 },
        ],
        duplicate: false,
      },
    });
    expect(await produce(h("web-1", 0, 0), body)).toEqual({
      status: 200,
      body: {
        offsets: [
          { partition: 1, offset: 0 },
          { partition: 1, offset: 1 },
        ],
        duplicate: true,
      },
    });
    expect(await values(b, "t", 1)).toEqual(["a", "b"]);
    // Without the headers, produce answers as before (no "duplicate").
    expect((await produce({}, { records: [{ value: "c", partition: 1 }] })).body).toEqual({
      offsets: [{ partition: 1, offset: 2 }],
    });
  });

  it("answers a sequence gap 409 and a stale epoch 403, each naming the expected value", async () => {
    const { produce } = await setup();
    await produce(h("web-1", 2, 0), { records: [{ value: "a", partition: 0 }] });
    const gap = await produce(h("web-1", 2, 5), { records: [{ value: "b", partition: 0 }] });
    expect(gap.status).toBe(409);
    expect(gap.body.error).toMatchObject({
      code: "out_of_order_sequence",
      details: { expected_sequence: 1 },
    });
    const stale = await produce(h("web-1", 1, 1), { records: [{ value: "b", partition: 0 }] });
    expect(stale.status).toBe(403);
    expect(stale.body.error).toMatchObject({
      code: "producer_fenced",
      details: { expected_epoch: 2 },
    });
  });

  it("works with NDJSON bodies, whose records all go to one partition", async () => {
    const { b, produce } = await setup();
    const first = await produce(h("nd", 0, 0), "x\ny\n", "application/x-ndjson");
    expect(first.status).toBe(200);
    expect(first.body.duplicate).toBe(false);
    const again = await produce(h("nd", 0, 0), "x\ny\n", "application/x-ndjson");
    expect(again.body).toEqual({ ...first.body, duplicate: true });
    const partition = first.body.offsets[0].partition as number;
    expect(await values(b, "t", partition)).toEqual(["x", "y"]);
  });

  it("refuses 400 a request whose records go to several partitions, and incomplete or malformed headers", async () => {
    const { produce } = await setup();
    const split = await produce(h("web-1", 0, 0), {
      records: [
        { value: "a", partition: 0 },
        { value: "b", partition: 1 },
      ],
    });
    expect(split.status).toBe(400);
    expect(split.body.error.message).toMatch(/one partition/);
    const missing = await produce(
      { "Producer-Id": "web-1", "Producer-Epoch": "0" },
      { records: [{ value: "a" }] },
    );
    expect(missing.status).toBe(400);
    expect(missing.body.error.details).toEqual({ parameter: "Producer-Seq" });
    const badEpoch = await produce(
      { ...h("web-1", 0, 0), "Producer-Epoch": "-1" },
      { records: [{ value: "a" }] },
    );
    expect(badEpoch.status).toBe(400);
    expect(badEpoch.body.error.details).toEqual({ parameter: "Producer-Epoch" });
    const badId = await produce(h("has space", 0, 0), { records: [{ value: "a" }] });
    expect(badId.status).toBe(400);
  });
});

describe("idempotent produce over TCP", () => {
  it("answers a retry as a duplicate and carries the expected sequence in error details", async () => {
    const b = await broker();
    await b.createTopic({ name: "t", partitions: 1 });
    const client = await (await serve(b)).connect();
    const producer = { id: "p", epoch: 0, sequence: 0 };
    const first = await client.produceIdempotent("t", [{ value: "a" }, { value: "b" }], {
      producer,
    });
    expect(first).toEqual({ spans: [{ partition: 0, baseOffset: 0, count: 2 }], duplicate: false });
    expect(
      await client.produceIdempotent("t", [{ value: "a" }, { value: "b" }], { producer }),
    ).toEqual({ ...first, duplicate: true });
    const gap = (await client
      .produceIdempotent("t", [{ value: "c" }], { producer: { ...producer, sequence: 9 } })
      .catch((e: unknown) => e)) as ClientError;
    expect(gap).toBeInstanceOf(ClientError);
    expect(gap.code).toBe("out_of_order_sequence");
    expect(gap.details).toEqual({ expected_sequence: 2 });
    const fenced = (await client
      .produceIdempotent("t", [{ value: "c" }], { producer: { id: "p", epoch: 5, sequence: 0 } })
      .then(() =>
        client.produceIdempotent("t", [{ value: "d" }], {
          producer: { id: "p", epoch: 4, sequence: 0 },
        }),
      )
      .catch((e: unknown) => e)) as ClientError;
    expect(fenced.code).toBe("producer_fenced");
    expect(fenced.details).toEqual({ expected_epoch: 5 });
    expect(await values(b, "t")).toEqual(["a", "b", "c"]);
  });

  it("IdempotentProducer resends a batch whose answer was lost and gets its original offsets, stored once", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 3 });
    const server = await serve(b);
    const producer = new IdempotentProducer({
      connect: server.connect,
      producerId: "svc-1",
      retryBackoffMs: 5,
    });
    cleanups.push(() => producer.close());
    const results = [];
    for (let i = 0; i < 10; i++) {
      if (i % 3 === 1) server.dropAnswers(1);
      results.push(await producer.send("t", [{ value: `v${i}` }], { partition: 2 }));
    }
    expect(await values(b, "t", 2)).toEqual(Array.from({ length: 10 }, (_, i) => `v${i}`));
    expect(results.map((r) => r.spans[0].baseOffset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(results.filter((r) => r.duplicate).length).toBe(3);
    expect(producer.nextSequence("t", 2)).toBe(10);
  });

  it("IdempotentProducer routes keyless records by its id and keyed ones by key, refusing a send that spans partitions", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 4 });
    const server = await serve(b);
    const producer = new IdempotentProducer({ connect: server.connect, producerId: "router" });
    cleanups.push(() => producer.close());
    const keyless = await producer.send("t", [{ value: "a" }, { value: "b" }]);
    expect(new Set(keyless.spans.map((s) => s.partition)).size).toBe(1);
    const keyed = await producer.send("t", [
      { key: "k", value: "1" },
      { key: "k", value: "2" },
    ]);
    expect(keyed.spans).toHaveLength(1);
    const spanning = await producer
      .send("t", [
        { key: "k1", value: "1" },
        { key: "k2", value: "2" },
        { key: "k3", value: "3" },
        { key: "k4", value: "4" },
      ])
      .catch((e: unknown) => e);
    expect((spanning as ClientError).code).toBe("invalid_request");
  });

  it("IdempotentProducer hands back the sequence of a batch the broker refused, so the next one leaves no gap", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const producer = new IdempotentProducer({ connect: server.connect, producerId: "careful" });
    cleanups.push(() => producer.close());
    await producer.send("t", [{ value: "a" }], { partition: 0 });
    const refused = await producer
      .send("t", [{ value: "future", timestampMs: Date.now() + 10 * 24 * 3600_000 }], {
        partition: 0,
      })
      .catch((e: unknown) => e);
    expect((refused as ClientError).code).toBe("invalid_timestamp");
    expect(producer.nextSequence("t", 0)).toBe(1);
    const next = await producer.send("t", [{ value: "b" }], { partition: 0 });
    expect(next.spans[0].baseOffset).toBe(1);
    expect(await values(b, "t")).toEqual(["a", "b"]);
  });

  it("IdempotentProducer starts a new epoch when the broker has forgotten it, and goes on", async () => {
    const clock = new ManualClock();
    const b = await broker({ clock, producerExpiryMs: 60_000 });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const producer = new IdempotentProducer({ connect: server.connect, producerId: "sleepy" });
    cleanups.push(() => producer.close());
    await producer.send("t", [{ value: "a" }], { partition: 0 });
    await producer.send("t", [{ value: "b" }], { partition: 0 });
    clock.advance(120_000);
    const after = await producer.send("t", [{ value: "c" }], { partition: 0 });
    expect(after.duplicate).toBe(false);
    expect(producer.epoch).toBe(1);
    expect(producer.nextSequence("t", 0)).toBe(1);
    expect(await values(b, "t")).toEqual(["a", "b", "c"]);
  });
});
