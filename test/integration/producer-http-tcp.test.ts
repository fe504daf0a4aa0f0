/**
 * Idempotent produce through both front doors. The scenarios every front door must pass run from
 * one table against HTTP (the Producer-Id / Producer-Epoch / Producer-Seq headers, through the Hono
 * app) and TCP (api 12 with error details, over a real socket), each checking its own wire shapes
 * (test/helpers/front-doors.ts); then what only one door has: HTTP's NDJSON bodies and header
 * checks, and the client's IdempotentProducer retrying through lost answers and recovering from a
 * forgotten producer.
 */
import * as net from "node:net";
import { describe, expect, it, onTestFinished, vi } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { ClientError, IdempotentProducer, TcpClient } from "../../src/client/client.ts";
import { ManualClock, type Clock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";
import type { ProduceResult } from "../../src/broker/types.ts";
import { buildEntryBatch } from "../../src/client/records.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { expectDoorError, frontDoors } from "../helpers/front-doors.ts";
import { fetchValues } from "../helpers/records.ts";

async function broker(
  options: { clock?: Clock; producerExpiryMs?: number } = {},
): Promise<LocalBroker> {
  const { broker } = await openTestBroker({
    clock: options.clock ?? new ManualClock(),
    cleanupIntervalMs: 0,
    producerExpiryMs: options.producerExpiryMs,
  });
  return broker;
}

/** `b` as a broker without producer epochs (an older broker): api 15 unsupported_api, 404 over HTTP. */
function withoutEpochs(b: LocalBroker): LocalBroker {
  return new Proxy(b, {
    get: (target, prop) => {
      if (prop === "initProducerEpoch") return undefined;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

async function values(b: LocalBroker, topic: string, partition = 0): Promise<string[]> {
  return fetchValues(b, topic, { partition, maxRecords: 10_000 });
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
  onTestFinished(async () => {
    await new Promise<void>((r) => proxy.close(() => r()));
    const stopped = listener.close();
    await transport.close({ graceMs: 500 });
    await stopped;
  });
  const clients: TcpClient[] = [];
  onTestFinished(async () => {
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

for (const factory of frontDoors) {
  describe(`idempotent produce over ${factory.name}`, () => {
    it("answers a retry with the original offsets and duplicate: true, appending nothing; a gap names the expected sequence, a stale epoch the expected epoch", async () => {
      const b = await broker();
      await b.createTopic({ name: "t", partitions: 2 });
      const door = await factory.open(b);
      const producer = { id: "web-1", epoch: 0, sequence: 0 };
      const first = await door.produceIdempotent("t", 1, ["a", "b"], producer);
      expect(first).toEqual({
        spans: [{ partition: 1, baseOffset: 0, count: 2 }],
        duplicate: false,
      });
      expect(await door.produceIdempotent("t", 1, ["a", "b"], producer)).toEqual({
        ...first,
        duplicate: true,
      });
      expect(await values(b, "t", 1)).toEqual(["a", "b"]);
      await expectDoorError(door.produceIdempotent("t", 1, ["c"], { ...producer, sequence: 9 }), {
        code: "out_of_order_sequence",
        http: 409,
        exactDetails: { expected_sequence: 2 },
      });
      await door.produceIdempotent("t", 1, ["c"], { id: "web-1", epoch: 5, sequence: 0 });
      await expectDoorError(
        door.produceIdempotent("t", 1, ["d"], { id: "web-1", epoch: 4, sequence: 0 }),
        { code: "producer_fenced", http: 403, exactDetails: { expected_epoch: 5 } },
      );
      expect(await values(b, "t", 1)).toEqual(["a", "b", "c"]);
    });

    it("hands out producer epochs (docs/decisions.md §20): the clock second, then stored + 1 or at_least; the previous incarnation is fenced; an exhausted id is 409 and a bad at_least 400", async () => {
      const b = await broker();
      await b.createTopic({ name: "t", partitions: 1 });
      const door = await factory.open(b);
      const first = await door.initProducerEpoch("web-1");
      expect(first).toBe(Math.floor(new ManualClock().nowMs() / 1000));
      await door.produceIdempotent("t", 0, ["a"], { id: "web-1", epoch: first, sequence: 0 });
      expect(await door.initProducerEpoch("web-1")).toBe(first + 1);
      await expectDoorError(
        door.produceIdempotent("t", 0, ["b"], { id: "web-1", epoch: first, sequence: 1 }),
        { code: "producer_fenced", http: 403, exactDetails: { expected_epoch: first + 1 } },
      );
      expect(await door.initProducerEpoch("web-1", first + 10)).toBe(first + 10);
      expect(await door.initProducerEpoch("web-1", 0x7fff_ffff)).toBe(0x7fff_ffff);
      await expectDoorError(door.initProducerEpoch("web-1"), {
        code: "producer_epoch_exhausted",
        http: 409,
      });
      await expectDoorError(door.initProducerEpoch("web-2", 0x8000_0000), {
        code: "invalid_request",
        http: 400,
        details: { field: "at_least" },
      });
      await expectDoorError(door.initProducerEpoch("no spaces"), {
        code: "invalid_request",
        http: 400,
      });
    });
  });
}

describe("producer epochs on a broker that does not hand them out", () => {
  it("is unsupported_api over TCP and 404 over HTTP, so clients fall back to a clock epoch", async () => {
    const b = await broker();
    const without = new Proxy(b, {
      get: (target, prop) => {
        if (prop === "initProducerEpoch") return undefined;
        const v: unknown = Reflect.get(target, prop, target);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    for (const factory of frontDoors) {
      const door = await factory.open(without);
      await expectDoorError(door.initProducerEpoch("p"), {
        code: factory.name === "TCP" ? "unsupported_api" : "not_found",
        http: 404,
      });
    }
  });
});

describe("idempotent produce over HTTP only", () => {
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

  it("answers a produce without the headers as before (no duplicate field)", async () => {
    const { produce } = await setup();
    await produce(h("web-1", 0, 0), { records: [{ value: "a", partition: 1 }] });
    expect((await produce({}, { records: [{ value: "c", partition: 1 }] })).body).toEqual({
      offsets: [{ partition: 1, offset: 1 }],
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

describe("idempotent produce over TCP only", () => {
  it("IdempotentProducer resends a batch whose answer was lost and gets its original offsets, stored once", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 3 });
    const server = await serve(b);
    const producer = new IdempotentProducer({
      connect: server.connect,
      producerId: "svc-1",
      retryBackoffMs: 5,
    });
    onTestFinished(() => producer.close());
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

  it("IdempotentProducer without an epoch asks the broker once: each start gets the next epoch and fences the previous one; a broker without epochs gives the clock", async () => {
    const clock = new ManualClock();
    const b = await broker({ clock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const start = () => {
      const p = new IdempotentProducer({ connect: server.connect, producerId: "svc-1" });
      onTestFinished(() => p.close());
      return p;
    };
    const first = start();
    expect(first.epochSource).toBe("pending");
    await first.send("t", [{ value: "a" }], { partition: 0 });
    expect(first.epochSource).toBe("broker");
    // The broker's clock (ManualClock), not this process's, gave the first epoch of the id.
    expect(first.epoch).toBe(Math.floor(clock.nowMs() / 1000));
    await first.send("t", [{ value: "b" }], { partition: 0 });
    const second = start();
    await second.start();
    expect([second.epochSource, second.epoch]).toEqual(["broker", first.epoch + 1]);
    // Fenced at once, before the second incarnation sent anything.
    const fenced = await first.send("t", [{ value: "late" }], { partition: 0 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect((fenced as ClientError).code).toBe("producer_fenced");
    await second.send("t", [{ value: "c" }], { partition: 0 });
    expect(await values(b, "t")).toEqual(["a", "b", "c"]);

    const old = await serve(withoutEpochs(b));
    const clockProducer = new IdempotentProducer({ connect: old.connect, producerId: "svc-2" });
    onTestFinished(() => clockProducer.close());
    const before = Math.floor(Date.now() / 1000);
    await clockProducer.send("t", [{ value: "d" }], { partition: 0 });
    expect(clockProducer.epochSource).toBe("clock");
    expect(clockProducer.epoch).toBeGreaterThanOrEqual(before);
    expect(clockProducer.epoch).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  it("IdempotentProducer started again under a taken epoch begins the next one instead of dropping or refusing its first batch", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const make = (epoch: number) =>
      new IdempotentProducer({ connect: server.connect, producerId: "rerun", epoch });
    const first = make(7);
    onTestFinished(() => first.close());
    expect((await first.send("t", [{ value: "same" }], { partition: 0 })).duplicate).toBe(false);
    expect((await first.send("t", [{ value: "x" }], { partition: 0 })).duplicate).toBe(false);
    // The same first batch from a second incarnation (the README's example run twice).
    const second = make(7);
    onTestFinished(() => second.close());
    const again = await second.send("t", [{ value: "same" }], { partition: 0 });
    expect(again).toEqual({ spans: [{ partition: 0, baseOffset: 2, count: 1 }], duplicate: false });
    expect(second.epoch).toBe(8);
    // A different first batch (row 9 of the decision table: duplicate_sequence) from a third
    // incarnation under the epoch the second one now holds.
    const third = make(8);
    onTestFinished(() => third.close());
    const other = await third.send("t", [{ value: "other" }], { partition: 0 });
    expect(other.duplicate).toBe(false);
    expect(third.epoch).toBe(8 + 1);
    expect(await values(b, "t", 0)).toEqual(["same", "x", "same", "other"]);
    // The older incarnations are fenced, not renumbered past the newest one.
    const fenced = await first.send("t", [{ value: "late" }], { partition: 0 }).catch((e) => e);
    expect(fenced).toBeInstanceOf(ClientError);
    expect(fenced.code).toBe("producer_fenced");
    expect(await values(b, "t", 0)).toHaveLength(4);
  });

  it("IdempotentProducer on its clock epoch starts above a newer epoch it is fenced by, until its first acknowledgement (attack8 F3)", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    // An earlier start that moved past this second (as a same-second restart does).
    const ahead = Math.floor(Date.now() / 1000) + 5;
    const older = new IdempotentProducer({
      connect: server.connect,
      producerId: "crash-loop",
      epoch: ahead,
    });
    onTestFinished(() => older.close());
    await older.send("t", [{ value: "old" }], { partition: 0 });
    // The newest start, on the clock's epoch (below `ahead`): it fences the older one.
    const newest = new IdempotentProducer({ connect: server.connect, producerId: "crash-loop" });
    onTestFinished(() => newest.close());
    expect(newest.epoch).toBeLessThan(ahead);
    expect((await newest.send("t", [{ value: "new" }], { partition: 0 })).duplicate).toBe(false);
    expect(newest.epoch).toBe(ahead + 1);
    const late = await older.send("t", [{ value: "late" }], { partition: 0 }).catch((e) => e);
    expect((late as ClientError).code).toBe("producer_fenced");
    // Once acknowledged, the newest one is an incarnation like any other: fenced, it rejects.
    const newer = new IdempotentProducer({
      connect: server.connect,
      producerId: "crash-loop",
      epoch: ahead + 10,
    });
    onTestFinished(() => newer.close());
    await newer.send("t", [{ value: "newer" }], { partition: 0 });
    const fenced = await newest.send("t", [{ value: "x" }], { partition: 0 }).catch((e) => e);
    expect((fenced as ClientError).code).toBe("producer_fenced");
    expect(newest.epoch).toBe(ahead + 1);
    expect(await values(b, "t", 0)).toEqual(["old", "new", "newer"]);
  });

  it("IdempotentProducer on its clock epoch does not move above a later start's epoch, idle or not (attack8 F5)", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    // Clock epochs: a broker without producer epochs (as before docs/decisions.md §20).
    const server = await serve(withoutEpochs(b));
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() });
    onTestFinished(() => {
      vi.useRealTimers();
    });
    // An older start, idle since it began (nothing acknowledged).
    const older = new IdempotentProducer({ connect: server.connect, producerId: "blue-green" });
    onTestFinished(() => older.close());
    vi.setSystemTime(Date.now() + 3000);
    // A start three seconds later, on its clock epoch, producing.
    const newer = new IdempotentProducer({ connect: server.connect, producerId: "blue-green" });
    onTestFinished(() => newer.close());
    expect(newer.epoch).toBe(older.epoch + 3);
    await newer.send("t", [{ value: "n1" }], { partition: 0 });
    const refused = await older.send("t", [{ value: "z" }], { partition: 0 }).catch((e) => e);
    expect((refused as ClientError).code).toBe("producer_fenced");
    expect(older.epoch).toBe(newer.epoch - 3);
    await newer.send("t", [{ value: "n2" }], { partition: 0 });
    expect(await values(b, "t", 0)).toEqual(["n1", "n2"]);
  });

  it("IdempotentProducer's default epoch for a new id is the current Unix second (the broker's), so a restart fences the last run", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const before = Math.floor(Date.now() / 1000);
    const producer = new IdempotentProducer({ connect: server.connect, producerId: "dflt" });
    onTestFinished(() => producer.close());
    expect(producer.epoch).toBeGreaterThanOrEqual(before);
    expect(producer.epoch).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
    expect((await producer.send("t", [{ value: "a" }], { partition: 0 })).duplicate).toBe(false);
  });

  it("IdempotentProducer routes keyless records by its id and keyed ones by key, refusing a send that spans partitions", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 4 });
    const server = await serve(b);
    const producer = new IdempotentProducer({ connect: server.connect, producerId: "router" });
    onTestFinished(() => producer.close());
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
    onTestFinished(() => producer.close());
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
    const producer = new IdempotentProducer({
      connect: server.connect,
      producerId: "sleepy",
      epoch: 0,
    });
    onTestFinished(() => producer.close());
    await producer.send("t", [{ value: "a" }], { partition: 0 });
    await producer.send("t", [{ value: "b" }], { partition: 0 });
    clock.advance(120_000);
    const after = await producer.send("t", [{ value: "c" }], { partition: 0 });
    expect(after.duplicate).toBe(false);
    expect(producer.epoch).toBe(1);
    expect(producer.nextSequence("t", 0)).toBe(1);
    expect(await values(b, "t")).toEqual(["a", "b", "c"]);
  });

  it("the broker appends a connection's pipelined idempotent produces of one partition in arrival order", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const client = await server.connect();
    // Twenty requests written back to back, none awaited: each sequence meets the broker right
    // after the one before it, or it would be refused out_of_order_sequence.
    let sequence = 0;
    const answers = Array.from({ length: 20 }, (_, i) => {
      const records = Array.from({ length: 1 + (i % 3) }, (_, j) => ({ value: `${i}.${j}` }));
      const producer = { id: "piped", epoch: 3, sequence };
      sequence += records.length;
      return client.produceIdempotent("t", records, { partition: 0, producer });
    });
    const results = await Promise.all(answers);
    let offset = 0;
    for (const [i, r] of results.entries()) {
      expect(r.duplicate, `request ${i}`).toBe(false);
      expect(r.spans, `request ${i}`).toEqual([
        { partition: 0, baseOffset: offset, count: 1 + (i % 3) },
      ]);
      offset += 1 + (i % 3);
    }
    expect(await values(b, "t")).toEqual(
      Array.from({ length: 20 }, (_, i) =>
        Array.from({ length: 1 + (i % 3) }, (_, j) => `${i}.${j}`),
      ).flat(),
    );
  });

  it("IdempotentProducer with batches in flight stores each once, in send order, through lost answers", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const producer = new IdempotentProducer({
      connect: server.connect,
      producerId: "piped",
      maxInFlight: 4,
      retryBackoffMs: 5,
    });
    onTestFinished(() => producer.close());
    await producer.send("t", [{ value: "v0" }], { partition: 0 });
    const sends: Promise<ProduceResult>[] = [];
    for (let i = 1; i < 40; i++) {
      // A connection cut with up to four answers owed, every tenth batch.
      if (i % 10 === 5) server.dropAnswers(1);
      sends.push(producer.send("t", [{ value: `v${i}` }], { partition: 0 }));
      if (i % 4 === 0) await sends[sends.length - 1];
    }
    const results = await Promise.all(sends);
    expect(await values(b, "t")).toEqual(Array.from({ length: 40 }, (_, i) => `v${i}`));
    expect(results.map((r) => r.spans[0].baseOffset)).toEqual(
      Array.from({ length: 39 }, (_, i) => i + 1),
    );
    expect(producer.nextSequence("t", 0)).toBe(40);
  });

  it("IdempotentProducer with batches in flight: a batch refused mid-pipeline fails alone; the ones sent past it are renumbered in a new epoch, in order", async () => {
    const b = await broker({ clock: realClock });
    await b.createTopic({ name: "t", partitions: 1 });
    const server = await serve(b);
    const producer = new IdempotentProducer({
      connect: server.connect,
      producerId: "midway",
      epoch: 10,
      maxInFlight: 5,
    });
    onTestFinished(() => producer.close());
    await producer.send("t", [{ value: "first" }], { partition: 0 });
    // Five in flight at once: the third is refused before any append (its timestamp is ten days
    // ahead), so the two sent past it meet a gap (out_of_order_sequence).
    const sends = ["a", "b", "bad", "c", "d", "e", "f"].map((value) =>
      producer
        .send(
          "t",
          [{ value, timestampMs: value === "bad" ? Date.now() + 10 * 24 * 3600_000 : undefined }],
          { partition: 0 },
        )
        .then(
          (r) => ({ value, ok: r }),
          (e: unknown) => ({ value, error: e as ClientError }),
        ),
    );
    const outcomes = await Promise.all(sends);
    const failed = outcomes.filter((o) => "error" in o);
    expect(failed.map((o) => o.value)).toEqual(["bad"]);
    expect((failed[0] as { error: ClientError }).error.code).toBe("invalid_timestamp");
    expect(await values(b, "t")).toEqual(["first", "a", "b", "c", "d", "e", "f"]);
    const offsets = outcomes.flatMap((o) => ("ok" in o ? [o.ok.spans[0].baseOffset] : []));
    expect(offsets).toEqual([1, 2, 3, 4, 5, 6]);
    // The batches past the gap could not be stored under epoch 10: the producer moved to 11.
    expect(producer.epoch).toBe(11);
  });

  it("IdempotentProducer refuses a maxInFlight outside 1 … the batches the broker remembers", () => {
    for (const maxInFlight of [0, 6, 1.5]) {
      expect(
        () =>
          new IdempotentProducer({
            connect: () => Promise.reject(new Error("unused")),
            producerId: "x",
            maxInFlight,
          }),
      ).toThrow(/maxInFlight must be an integer from 1 to 5/);
    }
  });
});

/** `fs` with every sync of a `.log` file held until `release()`. */
function gatedLogSyncs(fs: FileSystem) {
  let held: (() => void)[] | null = [];
  const gated = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop) as unknown;
      if (typeof value !== "function") return value;
      if (prop !== "open") return (value as (...a: unknown[]) => unknown).bind(target);
      return async (path: string, options?: unknown) => {
        const handle = await target.open(path, options as never);
        if (!path.endsWith(".log")) return handle;
        return new Proxy(handle, {
          get(h, name) {
            const v = Reflect.get(h, name) as unknown;
            if (typeof v !== "function") return v;
            if (name === "sync")
              return async () => {
                if (held !== null) await new Promise<void>((r) => held!.push(r));
                return h.sync();
              };
            return (v as (...a: unknown[]) => unknown).bind(h);
          },
        });
      };
    },
  });
  return {
    fs: gated,
    release() {
      const waiting = held ?? [];
      held = null;
      for (const r of waiting) r();
    },
  };
}

describe("idempotent batches of one producer while an fsync runs", () => {
  it("the next batch is written while the last one waits for its fsync; nothing, a duplicate neither, is answered before its fsync", async () => {
    const gate = gatedLogSyncs(new MemoryFileSystem());
    const { broker: b } = await openTestBroker({
      fs: gate.fs,
      clock: realClock,
      cleanupIntervalMs: 0,
    });
    await b.createTopic({ name: "t", partitions: 1 });
    const produce = (value: string, sequence: number) =>
      b.produce({
        topic: "t",
        partition: 0,
        batch: buildEntryBatch([{ value }]),
        producer: { id: "overlap", epoch: 1, sequence },
      });
    const settled: string[] = [];
    const track = <T>(name: string, p: Promise<T>) => p.finally(() => settled.push(name));
    const log = b.partitionLog("t", 0);
    const first = track("first", produce("a", 0));
    const second = track("second", produce("b", 1));
    // Both are written (the log ends past them) although the first one's fsync has not finished.
    for (let i = 0; i < 500 && log.logEndOffset < 2; i++)
      await new Promise((r) => setTimeout(r, 2));
    const again = track("again", produce("a", 0));
    await new Promise((r) => setTimeout(r, 20));
    const early = [...settled];
    const written = log.logEndOffset;
    const durable = log.highWatermark;
    gate.release();
    expect(written).toBe(2);
    expect(durable).toBe(0);
    expect(early).toEqual([]);
    expect(await first).toEqual({
      spans: [{ partition: 0, baseOffset: 0, count: 1 }],
      duplicate: false,
    });
    expect(await second).toEqual({
      spans: [{ partition: 0, baseOffset: 1, count: 1 }],
      duplicate: false,
    });
    expect(await again).toEqual({
      spans: [{ partition: 0, baseOffset: 0, count: 1 }],
      duplicate: true,
    });
    expect(await values(b, "t")).toEqual(["a", "b"]);
  });
});
