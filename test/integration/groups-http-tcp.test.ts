/**
 * Consumer groups through both front doors over the real broker: the HTTP shapes of the issue's
 * contract (through the Hono app) and the same operations over TCP (real loopback sockets and the
 * TypeScript client), including the GroupConsumer that heartbeats, rejoins and commits.
 */
import { afterEach, describe, expect, it } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { ClientError, GroupConsumer, TcpClient } from "../../src/client/client.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import type { Clock } from "../../src/lib/clock.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";
import { realClock } from "../helpers/clock.ts";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function broker(clock: Clock = new ManualClock()): Promise<LocalBroker> {
  const b = await LocalBroker.open({
    fs: new MemoryFileSystem(),
    dataDir: "/data",
    clock,
    logger: new MemoryLogger(),
    cleanupIntervalMs: 0,
  });
  cleanups.push(() => b.close());
  return b;
}

async function fill(b: LocalBroker, topic: string, partition: number, values: string[]) {
  const batch = new EntryBatchBuilder();
  for (const v of values) batch.add(null, utf8(v));
  await b.produce({ topic, partition, batch: batch.build() });
}

async function tcp(b: LocalBroker): Promise<{ connect: () => Promise<TcpClient> }> {
  const transport = createTcpTransport({ broker: b, clock: realClock, logger: new MemoryLogger() });
  const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
    transport.handleConnection(socket),
  );
  cleanups.push(async () => {
    const stopped = listener.close();
    await transport.close({ graceMs: 500 });
    await stopped;
  });
  return {
    connect: async () => {
      const client = await TcpClient.connect({ host: "127.0.0.1", port: listener.port });
      cleanups.push(() => client.close());
      return client;
    },
  };
}

describe("consumer groups over HTTP", () => {
  async function setup() {
    const b = await broker();
    await b.createTopic({ name: "t", partitions: 2 });
    await fill(b, "t", 0, ["a", "b", "c"]);
    const app = createHttpApp({ broker: b, logger: new MemoryLogger() });
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await app.request(path, {
        method,
        headers: { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text === "" ? null : JSON.parse(text) };
    };
    return { b, call };
  }

  it("joins, heartbeats, commits, describes, lists and leaves with the contract's shapes", async () => {
    const { call } = await setup();
    const joined = await call("POST", "/v1/groups/g/members", {
      topics: ["t"],
      session_timeout_ms: 5000,
    });
    expect(joined.status).toBe(200);
    expect(joined.body).toEqual({
      member_id: expect.any(String),
      generation: 1,
      session_timeout_ms: 5000,
      assignments: [
        { topic: "t", partition: 0 },
        { topic: "t", partition: 1 },
      ],
    });
    const member = joined.body.member_id as string;
    const hb = await call("POST", `/v1/groups/g/members/${member}/heartbeat`, { generation: 1 });
    expect(hb).toEqual({
      status: 200,
      body: {
        generation: 1,
        rejoin: false,
        assignments: [
          { topic: "t", partition: 0 },
          { topic: "t", partition: 1 },
        ],
      },
    });
    const bare = await call("POST", `/v1/groups/g/members/${member}/heartbeat`);
    expect(bare.status).toBe(200);
    const commit = await call("POST", "/v1/groups/g/offsets", {
      member_id: member,
      generation: 1,
      offsets: [{ topic: "t", partition: 0, offset: 2 }],
    });
    expect(commit).toEqual({ status: 204, body: null });
    const described = await call("GET", "/v1/groups/g");
    expect(described).toEqual({
      status: 200,
      body: {
        group: "g",
        generation: 1,
        members: [
          {
            member_id: member,
            topics: ["t"],
            session_timeout_ms: 5000,
            assignments: [
              { topic: "t", partition: 0 },
              { topic: "t", partition: 1 },
            ],
          },
        ],
        offsets: [
          { topic: "t", partition: 0, committed: 2, high_watermark: 3, lag: 1, owner: member },
          {
            topic: "t",
            partition: 1,
            committed: null,
            high_watermark: 0,
            lag: null,
            owner: member,
          },
        ],
      },
    });
    expect((await call("GET", "/v1/groups")).body).toEqual({ groups: [described.body] });
    expect(await call("DELETE", `/v1/groups/g/members/${member}`)).toEqual({
      status: 204,
      body: null,
    });
    const after = await call("GET", "/v1/groups/g");
    expect(after.body.generation).toBe(2);
    expect(after.body.members).toEqual([]);
    expect(after.body.offsets[0]).toEqual({
      topic: "t",
      partition: 0,
      committed: 2,
      high_watermark: 3,
      lag: 1,
      owner: null,
    });
  });

  it("answers fencing with 409, bad offsets with 400 and unknown groups with 404", async () => {
    const { call } = await setup();
    const a = (await call("POST", "/v1/groups/g/members", { topics: ["t"] })).body;
    const b = (await call("POST", "/v1/groups/g/members", { topics: ["t"] })).body;
    const stale = await call("POST", "/v1/groups/g/offsets", {
      member_id: a.member_id,
      generation: a.generation,
      offsets: [{ topic: "t", partition: 0, offset: 1 }],
    });
    expect(stale.status).toBe(409);
    expect(stale.body.error.code).toBe("stale_generation");
    const notOwner = await call("POST", "/v1/groups/g/offsets", {
      member_id: a.member_id,
      generation: b.generation,
      offsets: [{ ...b.assignments[0], offset: 0 }],
    });
    expect(notOwner.status).toBe(409);
    expect(notOwner.body.error.code).toBe("not_partition_owner");
    const anonymous = await call("POST", "/v1/groups/g/offsets", {
      offsets: [{ topic: "t", partition: 0, offset: 1 }],
    });
    expect(anonymous.status).toBe(409);
    const above = await call("POST", "/v1/groups/solo/offsets", {
      offsets: [{ topic: "t", partition: 0, offset: 4 }],
    });
    expect(above.status).toBe(400);
    expect(above.body.error).toMatchObject({
      code: "invalid_offset",
      details: { high_watermark: 3 },
    });
    const negative = await call("POST", "/v1/groups/solo/offsets", {
      offsets: [{ topic: "t", partition: 0, offset: -1 }],
    });
    expect(negative.status).toBe(400);
    expect(negative.body.error.code).toBe("invalid_offset");
    const hb = await call("POST", `/v1/groups/g/members/${a.member_id}/heartbeat`, {
      generation: a.generation,
    });
    expect(hb.body.rejoin).toBe(true);
    expect((await call("GET", "/v1/groups/nope")).status).toBe(404);
    expect((await call("POST", "/v1/groups/g/members/ghost/heartbeat")).body.error.code).toBe(
      "unknown_member",
    );
    expect((await call("DELETE", "/v1/groups/g/members/ghost")).status).toBe(409);
  });

  it("refuses malformed bodies with 400 naming the field", async () => {
    const { call } = await setup();
    for (const [path, body, field] of [
      ["/v1/groups/g/members", { topics: "t" }, "topics"],
      ["/v1/groups/g/members", { topics: ["t"], sesion_timeout_ms: 5 }, "sesion_timeout_ms"],
      ["/v1/groups/g/members", { topics: ["t"], session_timeout_ms: "5" }, "session_timeout_ms"],
      ["/v1/groups/g/offsets", { offsets: {} }, "offsets"],
      [
        "/v1/groups/g/offsets",
        { offsets: [{ topic: "t", partition: 0, offset: 0, extra: 1 }] },
        "extra",
      ],
      ["/v1/groups/g/offsets", { generation: "1", offsets: [] }, "generation"],
    ] as const) {
      const res = await call("POST", path, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe("invalid_request");
      expect(JSON.stringify(res.body.error)).toContain(field);
    }
    expect((await call("POST", "/v1/groups/bad name/members", { topics: ["t"] })).status).toBe(400);
  });
});

describe("consumer groups over TCP", () => {
  it("joins, heartbeats, commits, describes, lists and leaves through the client", async () => {
    const b = await broker();
    await b.createTopic({ name: "t", partitions: 2 });
    await fill(b, "t", 1, ["x", "y"]);
    const client = await (await tcp(b)).connect();
    const a = await client.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 4000 });
    expect(a).toEqual({
      memberId: expect.any(String),
      generation: 1,
      sessionTimeoutMs: 4000,
      assignments: [
        { topic: "t", partition: 0 },
        { topic: "t", partition: 1 },
      ],
    });
    expect(await client.heartbeat({ group: "g", memberId: a.memberId, generation: 1 })).toEqual({
      generation: 1,
      rejoin: false,
      assignments: a.assignments,
    });
    await client.commitOffsets({
      group: "g",
      memberId: a.memberId,
      generation: 1,
      offsets: [{ topic: "t", partition: 1, offset: 1 }],
    });
    const d = await client.describeGroup("g");
    expect(d).toEqual(await b.describeGroup("g"));
    expect(d.offsets[1]).toEqual({
      topic: "t",
      partition: 1,
      committed: 1,
      highWatermark: 2,
      lag: 1,
      owner: a.memberId,
    });
    expect(await client.listGroups()).toEqual(await b.listGroups());
    const stale = await client
      .commitOffsets({
        group: "g",
        memberId: a.memberId,
        generation: 0,
        offsets: [{ topic: "t", partition: 1, offset: 2 }],
      })
      .catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(ClientError);
    expect((stale as ClientError).code).toBe("stale_generation");
    expect((stale as ClientError).details).toEqual({ generation: 1 });
    const above = await client
      .commitOffsets({
        group: "g",
        memberId: a.memberId,
        generation: 1,
        offsets: [{ topic: "t", partition: 1, offset: 3 }],
      })
      .catch((e: unknown) => e);
    expect((above as ClientError).code).toBe("invalid_offset");
    await client.leaveGroup({ group: "g", memberId: a.memberId });
    expect((await client.describeGroup("g")).members).toEqual([]);
    expect(
      ((await client.describeGroup("nope").catch((e: unknown) => e)) as ClientError).code,
    ).toBe("group_not_found");
  });

  it("GroupConsumer commits where it starts a partition the group never committed, so a member taking over after it dies skips nothing", async () => {
    const clock = new ManualClock();
    const b = await broker(clock);
    await b.createTopic({ name: "t", partitions: 1 });
    await fill(b, "t", 0, ["old-1", "old-2", "old-3"]);
    const server = await tcp(b);
    const one = await GroupConsumer.join({
      client: await server.connect(),
      group: "g",
      topics: ["t"],
      sessionTimeoutMs: 1000,
      heartbeatIntervalMs: 60_000,
      startFrom: "latest",
    });
    expect(one.position({ topic: "t", partition: 0 })).toBe(3);
    expect((await b.describeGroup("g")).offsets.map((o) => o.committed)).toEqual([3]);
    // Produced while one is alive but before it polls; then one dies without ever committing.
    await fill(b, "t", 0, ["new-1", "new-2"]);
    await one.close({ leave: false });
    clock.advance(1001);
    await b.groups.settled();
    expect((await b.describeGroup("g")).members).toEqual([]);
    const two = await GroupConsumer.join({
      client: await server.connect(),
      group: "g",
      topics: ["t"],
      sessionTimeoutMs: 1000,
      heartbeatIntervalMs: 60_000,
      startFrom: "latest",
    });
    expect(two.position({ topic: "t", partition: 0 })).toBe(3);
    const seen: string[] = [];
    for (const batch of await two.poll({ waitMs: 100 }))
      for (const r of batch.records) seen.push(fromUtf8(r.value));
    expect(seen).toEqual(["new-1", "new-2"]);
    await two.close();
  });

  it("GroupConsumer: two members split a topic, and when one leaves the other takes over from the committed offsets", async () => {
    const b = await broker(realClock);
    await b.createTopic({ name: "t", partitions: 4 });
    for (let p = 0; p < 4; p++)
      await fill(
        b,
        "t",
        p,
        Array.from({ length: 5 }, (_, i) => `p${p}-${i}`),
      );
    const server = await tcp(b);
    const seen: string[] = [];
    const drain = async (c: GroupConsumer, rounds: number) => {
      for (let i = 0; i < rounds; i++) {
        for (const batch of await c.poll({ waitMs: 50 }))
          for (const r of batch.records) seen.push(fromUtf8(r.value));
        await c.commit();
      }
    };
    const one = await GroupConsumer.join({
      client: await server.connect(),
      group: "g",
      topics: ["t"],
      sessionTimeoutMs: 2000,
      heartbeatIntervalMs: 20,
    });
    expect(one.assignments).toHaveLength(4);
    const two = await GroupConsumer.join({
      client: await server.connect(),
      group: "g",
      topics: ["t"],
      sessionTimeoutMs: 2000,
      heartbeatIntervalMs: 20,
    });
    expect(two.assignments).toHaveLength(2);
    // one learns of the rebalance by its heartbeat and rejoins at its next poll.
    await new Promise((r) => setTimeout(r, 80));
    await drain(one, 3);
    expect(one.generation).toBe(2);
    expect(one.assignments).toHaveLength(2);
    await drain(two, 3);
    expect(new Set(seen).size).toBe(20);
    // More records; one reads them, then leaves without committing the last poll.
    for (let p = 0; p < 4; p++) await fill(b, "t", p, [`p${p}-late`]);
    await drain(one, 2);
    await one.close();
    await drain(two, 4);
    expect(two.assignments).toHaveLength(4);
    // Every record was read, none skipped.
    expect(new Set(seen).size).toBe(24);
    const d = await b.describeGroup("g");
    expect(d.offsets.map((o) => o.lag)).toEqual([0, 0, 0, 0]);
    await two.close();
  });
});
