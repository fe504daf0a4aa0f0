/**
 * Authentication on both front doors in one process: the TCP transport over real loopback
 * sockets (the client's `apiKey`, raw frames for what a client would never send) and the HTTP app
 * called directly, over one LocalBroker and one key store on a simulated disk (docs/security.md).
 */
import * as net from "node:net";
import { describe, expect, it, onTestFinished } from "vitest";
import { AccessControl } from "../../src/auth/access.ts";
import type { KeyStore } from "../../src/auth/key-store.ts";
import { ClientError, TcpClient } from "../../src/client/client.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { encodeAuthenticateRequest } from "../../src/protocol/apis/authenticate.ts";
import { encodeMetadataRequest } from "../../src/protocol/apis/metadata.ts";
import { decodeErrorBody, decodeResponseHeader } from "../../src/protocol/envelope.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { createAuthenticatedHttpApp } from "../../src/transport/http/auth.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { openTestKeyStore } from "../helpers/keys.ts";

interface Doors {
  keys: KeyStore;
  logger: MemoryLogger;
  port: number;
  http: (path: string, init?: RequestInit & { key?: string }) => Promise<Response>;
  connect: (apiKey?: string) => Promise<TcpClient>;
  admin: string;
  producer: string;
  consumer: string;
}

/** A broker with topics "orders" and "other", keys admin / producer on orders / consumer on orders + group billing, and both doors. */
async function doors(
  options: { withKeys?: boolean; readTimeoutMs?: number; maxInFlightRequests?: number } = {},
): Promise<Doors> {
  const logger = new MemoryLogger();
  const { broker, fs } = await openTestBroker({ clock: realClock, logger });
  const { keys } = await openTestKeyStore({ fs, logger });
  onTestFinished(() => keys.close());
  await broker.createTopic({ name: "orders", partitions: 1 });
  await broker.createTopic({ name: "other", partitions: 1 });
  const made = { admin: "", producer: "", consumer: "" };
  if (options.withKeys !== false) {
    made.admin = (await keys.create({ name: "admin", role: "admin" })).key;
    made.producer = (
      await keys.create({ name: "ingest", role: "producer", topics: ["orders"] })
    ).key;
    made.consumer = (
      await keys.create({
        name: "reader",
        role: "consumer",
        topics: ["orders"],
        groups: ["billing"],
      })
    ).key;
  }
  const access = new AccessControl({ broker, keys, logger });
  const transport = createTcpTransport({
    broker,
    access,
    clock: realClock,
    logger,
    readTimeoutMs: options.readTimeoutMs,
    maxInFlightRequests: options.maxInFlightRequests,
  });
  const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
    transport.handleConnection(socket),
  );
  onTestFinished(async () => {
    const stopped = listener.close();
    await transport.close({ graceMs: 200 });
    await stopped;
  });
  const app = createAuthenticatedHttpApp({ access, logger, sseHeartbeatMs: 50 });
  return {
    keys,
    logger,
    port: listener.port,
    http: async (path, init = {}) => {
      const headers = new Headers(init.headers);
      if (init.key !== undefined) headers.set("authorization", `Bearer ${init.key}`);
      return app.fetch(new Request(`http://broker${path}`, { ...init, headers }), {
        remoteAddress: () => "203.0.113.9:4000",
      });
    },
    connect: async (apiKey) => {
      const client = await TcpClient.connect({ host: "127.0.0.1", port: listener.port, apiKey });
      onTestFinished(() => client.close());
      return client;
    },
    ...made,
  };
}

async function clientError(promise: Promise<unknown>): Promise<ClientError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ClientError);
  return error as ClientError;
}

/** Sends raw bytes on a new connection; resolves with every byte received until the server closes it. */
function rawExchange(port: number, bytes: Uint8Array): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port }, () => socket.write(bytes));
    const chunks: Buffer[] = [];
    socket.on("data", (d) => chunks.push(d));
    socket.on("error", () => {});
    socket.on("close", () => resolve(Buffer.concat(chunks)));
    setTimeout(() => reject(new Error("the server kept the connection open")), 5000).unref();
  });
}

/** The response frames in `bytes`: correlation id, error number and (for errors) the code. */
function frames(bytes: Uint8Array): { correlationId: number; error: number; code?: string }[] {
  const out = [];
  let at = 0;
  while (at + 4 <= bytes.length) {
    const length = new DataView(bytes.buffer, bytes.byteOffset + at).getUint32(0);
    const header = decodeResponseHeader(bytes.subarray(at + 4, at + 4 + length));
    out.push({
      correlationId: header.correlationId,
      error: header.error,
      code: header.error === 0 ? undefined : decodeErrorBody(header.body).code,
    });
    at += 4 + length;
  }
  return out;
}

describe("TCP authentication", () => {
  it("a client with a key authenticates and works within its role; the wrong role is forbidden and the connection goes on", async () => {
    const d = await doors();
    const producer = await d.connect(d.producer);
    expect(producer.principal).toEqual({
      keyId: d.producer.slice(4, 20),
      name: "ingest",
      role: "producer",
    });
    await producer.produce("orders", [{ value: "a" }]);
    const forbidden = await clientError(
      producer.fetch({ topic: "orders", partition: 0, offset: 0 }),
    );
    expect(forbidden.code).toBe("forbidden");
    expect(forbidden.details).toEqual({ operation: "fetch" });
    const other = await clientError(producer.produce("other", [{ value: "a" }]));
    expect(other.code).toBe("forbidden");
    expect(other.details).toEqual({ operation: "produce", topic: "other" });
    expect(other.message).toMatch(
      /key "ingest" \(role producer\) may not produce on topic "other"/,
    );
    expect((await producer.metadata()).map((t) => t.name)).toEqual(["orders"]);
    await producer.produce("orders", [{ value: "b" }]);
    const consumer = await d.connect(d.consumer);
    const fetched = await consumer.fetch({ topic: "orders", partition: 0, offset: 0 });
    expect(fetched.records.map((r) => new TextDecoder().decode(r.value))).toEqual(["a", "b"]);
  });

  it("a key's idempotent producer ids are its own: another key with the same id and a higher epoch fences nothing", async () => {
    const d = await doors();
    const other = (await d.keys.create({ name: "ingest-2", role: "producer", topics: ["other"] }))
      .key;
    const a = await d.connect(d.producer);
    const b = await d.connect(other);
    const first = await a.produceIdempotent("orders", [{ value: "a0" }], {
      producer: { id: "shared-1", epoch: 1, sequence: 0 },
    });
    expect(first.duplicate ?? false).toBe(false);
    // Key B uses the same client id with a higher epoch on its own topic: before ids were
    // namespaced by key, this fenced key A's producer (producer_fenced, expected_epoch 7).
    await b.produceIdempotent("other", [{ value: "b0" }], {
      producer: { id: "shared-1", epoch: 7, sequence: 0 },
    });
    const next = await a.produceIdempotent("orders", [{ value: "a1" }], {
      producer: { id: "shared-1", epoch: 1, sequence: 1 },
    });
    expect(next.duplicate ?? false).toBe(false);
    // The same key still fences its own older epoch.
    await a.produceIdempotent("orders", [{ value: "a2" }], {
      producer: { id: "shared-1", epoch: 2, sequence: 0 },
    });
    const fenced = await clientError(
      a.produceIdempotent("orders", [{ value: "late" }], {
        producer: { id: "shared-1", epoch: 1, sequence: 2 },
      }),
    );
    expect(fenced.code).toBe("producer_fenced");
    const consumer = await d.connect(d.consumer);
    const fetched = await consumer.fetch({ topic: "orders", partition: 0, offset: 0 });
    expect(fetched.records.map((r) => new TextDecoder().decode(r.value))).toEqual([
      "a0",
      "a1",
      "a2",
    ]);
    // A client id that, with the key's name, passes the producer id limit is refused by name.
    const long = await clientError(
      a.produceIdempotent("orders", [{ value: "x" }], {
        producer: { id: "p".repeat(249), epoch: 1, sequence: 0 },
      }),
    );
    expect(long.code).toBe("invalid_request");
    expect(long.message).toMatch(/with key "ingest" a producer id is at most 242 characters/);
  });

  it("producer epochs follow the produce row and a key's own ids: another key's allocation fences nothing, a consumer key is forbidden", async () => {
    const d = await doors();
    const other = (await d.keys.create({ name: "ingest-2", role: "producer", topics: ["other"] }))
      .key;
    const a = await d.connect(d.producer);
    const b = await d.connect(other);
    const epoch = await a.initProducerEpoch("shared-1");
    await a.produceIdempotent("orders", [{ value: "a0" }], {
      producer: { id: "shared-1", epoch, sequence: 0 },
    });
    // Key B's allocation for the same client id is of B's own producer ("ingest-2:shared-1").
    expect(await b.initProducerEpoch("shared-1", { atLeast: epoch + 100 })).toBe(epoch + 100);
    await a.produceIdempotent("orders", [{ value: "a1" }], {
      producer: { id: "shared-1", epoch, sequence: 1 },
    });
    expect(await a.initProducerEpoch("shared-1")).toBe(epoch + 1);
    const consumer = await d.connect(d.consumer);
    const refused = await clientError(consumer.initProducerEpoch("shared-1"));
    expect(refused.code).toBe("forbidden");
    const bad = await clientError(a.initProducerEpoch(""));
    expect([bad.code, bad.details]).toEqual(["invalid_request", { field: "producer_id" }]);
  });

  it("without a key, the first request is answered unauthenticated and the connection closed", async () => {
    const d = await doors();
    const client = await d.connect();
    const error = await clientError(client.metadata());
    expect(error.code).toBe("unauthenticated");
    await new Promise((r) => setTimeout(r, 50));
    expect(client.closed).toBe(true);
    expect(d.logger.named("auth.failed")).toContainEqual(
      expect.objectContaining({ transport: "tcp", reason: "missing" }),
    );
  });

  it("a refused key is answered unauthenticated, frames pipelined behind it are not started, and the connection closes", async () => {
    const d = await doors();
    const wrong = `${d.admin.slice(0, -1)}${d.admin.endsWith("A") ? "B" : "A"}`;
    const bytes = Buffer.concat([
      encodeAuthenticateRequest(1, wrong),
      encodeMetadataRequest(2, { topics: [] }),
      encodeMetadataRequest(3, { topics: [] }),
    ]);
    const answers = frames(await rawExchange(d.port, bytes));
    expect(answers).toEqual([{ correlationId: 1, error: 28, code: "unauthenticated" }]);
    const failed = d.logger.named("auth.failed").at(-1)!;
    expect(failed).toMatchObject({
      transport: "tcp",
      reason: "unknown",
      key_id: d.admin.slice(4, 20),
    });
    expect(JSON.stringify(d.logger.events)).not.toContain(wrong.slice(21));
  });

  it("frames pipelined right behind a good Authenticate run with its rights", async () => {
    const d = await doors();
    const bytes = Buffer.concat([
      encodeAuthenticateRequest(1, d.admin),
      encodeMetadataRequest(2, { topics: [] }),
    ]);
    const socket = net.connect({ host: "127.0.0.1", port: d.port });
    onTestFinished(() => void socket.destroy());
    const received: Buffer[] = [];
    socket.on("data", (chunk) => received.push(chunk));
    socket.write(bytes);
    await expect.poll(() => frames(Buffer.concat(received)).length).toBe(2);
    expect(frames(Buffer.concat(received)).map((f) => [f.correlationId, f.error])).toEqual([
      [1, 0],
      [2, 0],
    ]);
  });

  it("before authenticating, a frame claiming more than 1 KiB is refused unread and the connection closed", async () => {
    const d = await doors();
    // An Authenticate header claiming 16 MiB, followed by nothing of it.
    const header = new Uint8Array(12);
    const view = new DataView(header.buffer);
    view.setUint32(0, 16 * 1024 * 1024);
    view.setUint16(4, 13);
    view.setUint16(6, 0);
    view.setUint32(8, 77);
    const answers = frames(await rawExchange(d.port, header));
    expect(answers).toEqual([{ correlationId: 77, error: 6, code: "request_too_large" }]);
    expect(d.logger.named("tcp.frame_refused").at(-1)).toMatchObject({
      length: 16 * 1024 * 1024,
      max_request_bytes: 1024,
    });
  });

  it("an Authenticate whose key length runs past its frame is invalid_request, and the connection closes", async () => {
    const d = await doors();
    const frame = encodeAuthenticateRequest(5, d.admin);
    new DataView(frame.buffer, frame.byteOffset).setUint16(12, 200); // key length 200, 64 bytes follow
    expect(frames(await rawExchange(d.port, frame))).toEqual([
      { correlationId: 5, error: 1, code: "invalid_request" },
    ]);
  });

  it("a second Authenticate on an authenticated connection is refused and the connection keeps its key", async () => {
    const d = await doors();
    const socket = net.connect({ host: "127.0.0.1", port: d.port });
    onTestFinished(() => void socket.destroy());
    const received: Buffer[] = [];
    socket.on("data", (chunk) => received.push(chunk));
    socket.write(
      Buffer.concat([
        encodeAuthenticateRequest(1, d.producer),
        encodeAuthenticateRequest(2, d.admin),
        encodeMetadataRequest(3, { topics: [] }),
      ]),
    );
    await expect.poll(() => frames(Buffer.concat(received)).length).toBe(3);
    expect(frames(Buffer.concat(received))).toEqual([
      { correlationId: 1, error: 0, code: undefined },
      { correlationId: 2, error: 1, code: "invalid_request" },
      { correlationId: 3, error: 0, code: undefined },
    ]);
  });

  it("a connection that does not authenticate within the read timeout is closed", async () => {
    const d = await doors({ readTimeoutMs: 200 });
    const socket = net.connect({ host: "127.0.0.1", port: d.port });
    onTestFinished(() => void socket.destroy());
    const closed = new Promise<number>((resolve) => {
      const started = Date.now();
      socket.on("close", () => resolve(Date.now() - started));
      socket.on("error", () => {});
    });
    const after = await closed;
    expect(after).toBeGreaterThanOrEqual(150);
    expect(after).toBeLessThan(3000);
    expect(d.logger.named("auth.failed")).toContainEqual(
      expect.objectContaining({ transport: "tcp", reason: "timeout" }),
    );
    // An authenticated connection is not closed by it.
    const client = await d.connect(d.admin);
    await new Promise((r) => setTimeout(r, 400));
    expect((await client.metadata()).length).toBe(2);
  });

  it("revoking a key answers its long-polls key_revoked at once, then closes its connections; other keys go on", async () => {
    const d = await doors();
    const consumer = await d.connect(d.consumer);
    const idle = await d.connect(d.consumer);
    const producer = await d.connect(d.producer);
    const polling = consumer.fetch({ topic: "orders", partition: 0, offset: 0, waitMs: 30_000 });
    polling.catch(() => {});
    await new Promise((r) => setTimeout(r, 50));
    const started = Date.now();
    await d.keys.revoke("reader");
    const refused = await clientError(polling);
    expect(refused.code).toBe("key_revoked");
    expect(refused.message).toBe(
      `Cannot fetch from topic "orders": API key ${d.consumer.slice(4, 20)} was revoked (or changed in api_keys.json) while this connection was open`,
    );
    expect(Date.now() - started).toBeLessThan(2000);
    await expect.poll(() => consumer.closed).toBe(true);
    // A connection with nothing to answer closes at once.
    await expect.poll(() => idle.closed).toBe(true);
    expect(d.logger.named("auth.connection_closed")).toContainEqual(
      expect.objectContaining({ transport: "tcp", key_id: d.consumer.slice(4, 20) }),
    );
    await producer.produce("orders", [{ value: "still" }]);
    expect((await clientError(d.connect(d.consumer))).code).toBe("unauthenticated");
    // The broker's line for the later attempt says revoked, not unknown (newuser18 F10), and
    // never holds the key's secret.
    const failed = d.logger.named("auth.failed").at(-1)!;
    expect(failed).toMatchObject({ reason: "revoked", key_id: d.consumer.slice(4, 20) });
    expect(JSON.stringify(d.logger.events)).not.toContain(d.consumer.slice(21));
  });

  it("a request received but not started when the key is revoked is answered key_revoked too", async () => {
    // One request in flight at a time: the metadata request waits behind the long-poll, unstarted.
    const d = await doors({ maxInFlightRequests: 1 });
    const consumer = await d.connect(d.consumer);
    const polling = consumer.fetch({ topic: "orders", partition: 0, offset: 0, waitMs: 30_000 });
    const waiting = consumer.metadata(["orders"]);
    polling.catch(() => {});
    waiting.catch(() => {});
    await new Promise((r) => setTimeout(r, 50));
    await d.keys.revoke("reader");
    expect((await clientError(polling)).code).toBe("key_revoked");
    const refused = await clientError(waiting);
    expect(refused.code).toBe("key_revoked");
    expect(refused.message).toMatch(/^Cannot handle request: API key [0-9a-f]{16} was revoked/);
    await expect.poll(() => consumer.closed).toBe(true);
  });

  it("without keys, connections need no key; one that sends a key is refused; they close when the first key is created", async () => {
    const d = await doors({ withKeys: false });
    const anonymous = await d.connect();
    expect((await anonymous.metadata()).map((t) => t.name)).toEqual(["orders", "other"]);
    const refused = await clientError(d.connect(`esb_0123456789abcdef_${"A".repeat(43)}`));
    expect(refused.code).toBe("unauthenticated");
    await d.keys.create({ name: "admin", role: "admin" });
    await expect.poll(() => anonymous.closed).toBe(true);
    expect((await clientError((await d.connect()).metadata())).code).toBe("unauthenticated");
  });
});

describe("HTTP authentication", () => {
  it("without keys, the first key made over HTTP must be admin: a producer one is refused (400, nothing stored), then admin is made and anonymous access ends", async () => {
    const d = await doors({ withKeys: false });
    const create = (body: unknown, key?: string) =>
      d.http("/v1/admin/keys", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        key,
      });
    const refused = await create({ name: "late", role: "producer", topics: ["orders"] });
    expect(refused.status).toBe(400);
    const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe("invalid_request");
    expect(error.message).toMatch(
      /^Cannot create key "late": the first key must have role "admin", not "producer"/,
    );
    expect(d.keys.list()).toEqual([]);
    expect((await d.http("/v1/topics")).status).toBe(200);
    const admin = await create({ name: "admin", role: "admin" });
    expect(admin.status).toBe(201);
    const adminKey = ((await admin.json()) as { key: string }).key;
    expect((await d.http("/v1/topics")).status).toBe(401);
    // With the admin key, any role may follow.
    expect(
      (await create({ name: "late", role: "producer", topics: ["orders"] }, adminKey)).status,
    ).toBe(201);
    expect(d.keys.list().map((k) => [k.name, k.role])).toEqual([
      ["admin", "admin"],
      ["late", "producer"],
    ]);
  });

  it("GET /healthz needs no key; everything else is 401 with a Bearer challenge", async () => {
    const d = await doors();
    expect((await d.http("/healthz")).status).toBe(200);
    const res = await d.http("/v1/topics");
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe('Bearer realm="es-broker"');
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("unauthenticated");
    // A body is never read for an unauthenticated request.
    const post = await d.http("/v1/topics/orders/records", {
      method: "POST",
      body: '{"records":[{"value":"x"}]}',
    });
    expect(post.status).toBe(401);
  });

  it("a 401 of a request another broker redirected here (redirected=1) says the redirect dropped the key", async () => {
    const d = await doors();
    const res = await d.http("/v1/topics/orders/partitions/0/records?offset=0&redirected=1");
    expect(res.status).toBe(401);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("unauthenticated");
    expect(body.error.message).toContain("the redirect dropped your key");
    expect(body.error.message).toContain("--location-trusted");
    // Not redirected: the plain message.
    const plain = (await (
      await d.http("/v1/topics/orders/partitions/0/records?offset=0")
    ).json()) as {
      error: { message: string };
    };
    expect(plain.error.message).not.toContain("redirect");
    // A wrong key sent after a redirect is a wrong key, not a dropped one.
    const wrong = await d.http("/v1/topics?redirected=1", {
      headers: { authorization: `Bearer ${d.consumer.slice(0, -4)}zzzz` },
    });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { error: { message: string } }).error.message).not.toContain(
      "redirect",
    );
  });

  it("malformed Authorization headers are 401 invalid_token, logged, and never echoed", async () => {
    const d = await doors();
    const secretish = "S3cr3tValueThatMustNotBeEchoed";
    const headers = [
      "Bearer",
      "Bearer ",
      `Basic ${secretish}`,
      `Bearer ${secretish} extra`,
      `Bearer ${secretish}`,
      `Bearer${secretish}`,
      `Token ${d.admin}`,
      `Bearer ${d.admin.toUpperCase()}`,
      `Bearer ${"x".repeat(10_000)}`,
      `Bearer ${d.admin.slice(0, 40)}`,
    ];
    for (const value of headers) {
      const res = await d.http("/v1/topics", { headers: { authorization: value } });
      expect(res.status, value.slice(0, 40)).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe(
        'Bearer realm="es-broker", error="invalid_token"',
      );
      const text = await res.text();
      expect(text).not.toContain(secretish);
      expect(text).not.toContain(d.admin.slice(21));
    }
    expect(d.logger.named("auth.failed").length).toBeGreaterThanOrEqual(headers.length);
    for (const f of d.logger.named("auth.failed")) expect(f.remote).toBe("203.0.113.9:4000");
  });

  it("two Authorization headers, even with the same good key, are 401 saying only one is allowed", async () => {
    const d = await doors();
    for (const second of [d.admin, d.consumer]) {
      const headers = new Headers();
      headers.append("authorization", `Bearer ${d.admin}`);
      headers.append("authorization", `Bearer ${second}`);
      const res = await d.http("/v1/topics", { headers });
      expect(res.status).toBe(401);
      const text = await res.text();
      expect(JSON.parse(text).error.message).toBe(
        'Cannot authenticate: the request has more than one Authorization header: send exactly one, "Bearer <key>"',
      );
      expect(text).not.toContain(d.admin.slice(21));
    }
  });

  it("403 names the operation and the topic or group; listings show only what the key matches", async () => {
    const d = await doors();
    const res = await d.http("/v1/topics/other/records", {
      method: "POST",
      key: d.producer,
      headers: { "content-type": "application/json" },
      body: '{"records":[{"value":"x"}]}',
    });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({
      code: "forbidden",
      details: { operation: "produce", topic: "other" },
    });
    const join = await d.http("/v1/groups/payroll/members", {
      method: "POST",
      key: d.consumer,
      headers: { "content-type": "application/json" },
      body: '{"topics":["orders"]}',
    });
    expect(join.status).toBe(403);
    expect(((await join.json()) as { error: { details: unknown } }).error.details).toEqual({
      operation: "join_group",
      group: "payroll",
    });
    const topics = (await (await d.http("/v1/topics", { key: d.consumer })).json()) as {
      topics: { name: string }[];
    };
    expect(topics.topics.map((t: { name: string }) => t.name)).toEqual(["orders"]);
  });

  it("a group's description shows a consumer only the topics its key matches, over HTTP and TCP", async () => {
    const d = await doors();
    // The admin uses the consumer's group "billing" with a topic the consumer may not read.
    const admin = await d.connect(d.admin);
    await admin.produce("other", [{ value: "secret" }]);
    const joined = await admin.joinGroup({ group: "billing", topics: ["other", "orders"] });
    await admin.commitOffsets({
      group: "billing",
      memberId: joined.memberId,
      generation: joined.generation,
      offsets: [
        { topic: "other", partition: 0, offset: 1 },
        { topic: "orders", partition: 0, offset: 0 },
      ],
    });
    const seenByAdmin = JSON.stringify(await admin.describeGroup("billing"));
    expect(seenByAdmin).toContain('"other"');

    const reader = await d.connect(d.consumer);
    const overTcp = await reader.describeGroup("billing");
    const listedOverTcp = await reader.listGroups();
    const overHttp = await (await d.http("/v1/groups/billing", { key: d.consumer })).json();
    const listedOverHttp = await (await d.http("/v1/groups", { key: d.consumer })).json();
    for (const seen of [overTcp, listedOverTcp, overHttp, listedOverHttp]) {
      const text = JSON.stringify(seen);
      expect(text).toContain('"orders"');
      expect(text).not.toContain('"other"');
    }
    expect(overTcp.offsets.map((o) => o.topic)).toEqual(["orders"]);
    expect(overTcp.members[0]).toMatchObject({
      memberId: joined.memberId,
      topics: ["orders"],
      assignments: [{ topic: "orders", partition: 0 }],
    });
  });

  it("the key routes quote a client's value in an error at most a short prefix long", async () => {
    const d = await doors();
    const long = "Z".repeat(100_000);
    const answers = [
      await d.http("/v1/admin/keys", {
        method: "POST",
        key: d.admin,
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "k", role: "admin", [long]: 1 }),
      }),
      await d.http(`/v1/admin/keys/${long.slice(0, 10_000)}`, { method: "DELETE", key: d.admin }),
    ];
    for (const answer of answers) {
      const body = await answer.text();
      expect(answer.status, body.slice(0, 200)).toBeGreaterThanOrEqual(400);
      expect(body.length, body.slice(0, 200)).toBeLessThan(1000);
    }
  });

  it("the key routes are admin-only, answer no-store, and show the key only in the creation answer", async () => {
    const d = await doors();
    const create = (key: string) =>
      d.http("/v1/admin/keys", {
        method: "POST",
        key,
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "late", role: "consumer", topics: ["orders"] }),
      });
    expect((await create(d.producer)).status).toBe(403);
    const created = await create(d.admin);
    expect(created.status).toBe(201);
    expect(created.headers.get("cache-control")).toBe("no-store");
    const body = (await created.json()) as Record<string, unknown> & { key: string };
    expect(body.key).toMatch(/^esb_[0-9a-f]{16}_/);
    expect(body).toMatchObject({ name: "late", role: "consumer", topics: ["orders"], groups: [] });
    const list = await (await d.http("/v1/admin/keys", { key: d.admin })).text();
    expect(list).not.toContain(body.key.slice(21));
    expect(list).not.toContain("sha256:");
    expect(JSON.parse(list).keys.map((k: { name: string }) => k.name)).toEqual([
      "admin",
      "ingest",
      "late",
      "reader",
    ]);
    expect(
      (await d.http("/v1/admin/keys/late", { method: "DELETE", key: d.consumer })).status,
    ).toBe(403);
    expect((await d.http("/v1/admin/keys/late", { method: "DELETE", key: d.admin })).status).toBe(
      204,
    );
    expect((await d.http("/v1/topics", { key: body.key })).status).toBe(401);
    expect((await d.http("/v1/admin/keys/late", { method: "DELETE", key: d.admin })).status).toBe(
      404,
    );
    expect(d.logger.named("audit.key_created")).toContainEqual(
      expect.objectContaining({ key: "admin", name: "late" }),
    );
    expect(d.logger.named("audit.key_revoked")).toContainEqual(
      expect.objectContaining({ key: "admin", name: "late" }),
    );
  });

  it("a revoked key's SSE stream ends with an error event", async () => {
    const d = await doors();
    const res = await d.http("/v1/topics/orders/partitions/0/stream?offset=earliest", {
      key: d.consumer,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    const readUntil = async (needle: string) => {
      while (!text.includes(needle)) {
        const { done, value } = await reader.read();
        if (done) return;
        text += decoder.decode(value, { stream: true });
      }
    };
    await readUntil("es-broker stream");
    await d.keys.revoke("reader");
    await readUntil("event: error");
    expect(text).toMatch(/event: error\ndata: \{"error":\{"code":"key_revoked"/);
    expect((await reader.read()).done).toBe(true);
  });

  it("without keys no header is needed, and a request with a key is refused (the broker knows no keys)", async () => {
    const d = await doors({ withKeys: false });
    expect((await d.http("/v1/topics")).status).toBe(200);
    expect(
      (await d.http("/v1/topics", { key: `esb_0123456789abcdef_${"A".repeat(43)}` })).status,
    ).toBe(401);
  });
});
