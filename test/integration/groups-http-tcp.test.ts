/**
 * Consumer groups through both front doors over the real broker. The scenarios every front door
 * must pass run from one table against HTTP (the Hono app) and TCP (real loopback sockets and the
 * TypeScript client), each checking its own wire shapes (test/helpers/front-doors.ts); then what
 * only one door has: HTTP's refusal of malformed bodies, and the TCP GroupConsumer that
 * heartbeats, rejoins and commits.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { GroupConsumer } from "../../src/client/client.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import type { Clock } from "../../src/lib/clock.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { expectDoorError, frontDoors, serveTcp } from "../helpers/front-doors.ts";

async function broker(clock: Clock = new ManualClock()): Promise<LocalBroker> {
  return (await openTestBroker({ clock, cleanupIntervalMs: 0 })).broker;
}

async function fill(b: LocalBroker, topic: string, partition: number, values: string[]) {
  const batch = new EntryBatchBuilder();
  for (const v of values) batch.add(null, utf8(v));
  await b.produce({ topic, partition, batch: batch.build() });
}

const t0 = { topic: "t", partition: 0 };
const t1 = { topic: "t", partition: 1 };

for (const factory of frontDoors) {
  describe(`consumer groups over ${factory.name}`, () => {
    /** Topic t: partition 0 holds a, b, c; partition 1 holds x, y. */
    async function setup() {
      const b = await broker();
      await b.createTopic({ name: "t", partitions: 2 });
      await fill(b, "t", 0, ["a", "b", "c"]);
      await fill(b, "t", 1, ["x", "y"]);
      return { b, door: await factory.open(b) };
    }

    it("joins, heartbeats, commits, describes, lists and leaves with the contract's shapes", async () => {
      const { b, door } = await setup();
      const joined = await door.joinGroup("g", { topics: ["t"], sessionTimeoutMs: 5000 });
      expect(joined).toEqual({
        memberId: expect.any(String),
        generation: 1,
        sessionTimeoutMs: 5000,
        assignments: [t0, t1],
      });
      const member = joined.memberId;
      expect(await door.heartbeat("g", member, 1)).toEqual({
        generation: 1,
        rejoin: false,
        assignments: [t0, t1],
      });
      await door.commitOffsets({
        group: "g",
        memberId: member,
        generation: 1,
        offsets: [
          { ...t0, offset: 2 },
          { ...t1, offset: 1 },
        ],
      });
      const described = await door.describeGroup("g");
      expect(described).toEqual({
        group: "g",
        generation: 1,
        members: [
          { memberId: member, topics: ["t"], sessionTimeoutMs: 5000, assignments: [t0, t1] },
        ],
        offsets: [
          { ...t0, committed: 2, highWatermark: 3, lag: 1, owner: member },
          { ...t1, committed: 1, highWatermark: 2, lag: 1, owner: member },
        ],
      });
      expect(described).toEqual(await b.describeGroup("g"));
      expect(await door.listGroups()).toEqual([described]);
      expect(await door.listGroups()).toEqual(await b.listGroups());
      // A commit of an older generation names the current one; one above the high watermark is refused.
      await expectDoorError(
        door.commitOffsets({
          group: "g",
          memberId: member,
          generation: 0,
          offsets: [{ ...t1, offset: 2 }],
        }),
        { code: "stale_generation", http: 409, exactDetails: { generation: 1 } },
      );
      await expectDoorError(
        door.commitOffsets({
          group: "g",
          memberId: member,
          generation: 1,
          offsets: [{ ...t1, offset: 3 }],
        }),
        { code: "invalid_offset", http: 400 },
      );
      await door.leaveGroup("g", member);
      const after = await door.describeGroup("g");
      expect(after.generation).toBe(2);
      expect(after.members).toEqual([]);
      expect(after.offsets[0]).toEqual({
        ...t0,
        committed: 2,
        highWatermark: 3,
        lag: 1,
        owner: null,
      });
      await expectDoorError(door.describeGroup("nope"), { code: "group_not_found", http: 404 });
    });

    it("refuses stale generations, commits by non-owners or without a member, offsets out of range, and unknown members", async () => {
      const { door } = await setup();
      const a = await door.joinGroup("g", { topics: ["t"] });
      const b = await door.joinGroup("g", { topics: ["t"] });
      await expectDoorError(
        door.commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: a.generation,
          offsets: [{ ...t0, offset: 1 }],
        }),
        { code: "stale_generation", http: 409 },
      );
      await expectDoorError(
        door.commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: b.generation,
          offsets: [{ ...b.assignments[0], offset: 0 }],
        }),
        { code: "not_partition_owner", http: 409 },
      );
      // A group with members takes commits only from a named member.
      await expectDoorError(door.commitOffsets({ group: "g", offsets: [{ ...t0, offset: 1 }] }), {
        code: "unknown_member",
        http: 409,
      });
      await expectDoorError(
        door.commitOffsets({ group: "solo", offsets: [{ ...t0, offset: 4 }] }),
        {
          code: "invalid_offset",
          http: 400,
          details: { high_watermark: 3 },
        },
      );
      expect((await door.heartbeat("g", a.memberId, a.generation)).rejoin).toBe(true);
      await expectDoorError(door.heartbeat("g", "ghost", 1), { code: "unknown_member" });
      await expectDoorError(door.leaveGroup("g", "ghost"), { code: "unknown_member", http: 409 });
    });
  });
}

describe("consumer groups over HTTP only", () => {
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

  it("refuses a negative offset with 400 invalid_offset (a TCP client cannot encode one)", async () => {
    const { call } = await setup();
    const negative = await call("POST", "/v1/groups/solo/offsets", {
      offsets: [{ topic: "t", partition: 0, offset: -1 }],
    });
    expect(negative.status).toBe(400);
    expect(negative.body.error.code).toBe("invalid_offset");
  });

  it("accepts a heartbeat without a body", async () => {
    const { call } = await setup();
    const member = (await call("POST", "/v1/groups/g/members", { topics: ["t"] })).body.member_id;
    const bare = await call("POST", `/v1/groups/g/members/${member}/heartbeat`);
    expect(bare.status).toBe(200);
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

describe("consumer groups over TCP only", () => {
  it("GroupConsumer commits where it starts a partition the group never committed, so a member taking over after it dies skips nothing", async () => {
    const clock = new ManualClock();
    const b = await broker(clock);
    await b.createTopic({ name: "t", partitions: 1 });
    await fill(b, "t", 0, ["old-1", "old-2", "old-3"]);
    const server = await serveTcp(b);
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

  it("GroupConsumer: a commit refused by a rebalance is sent again after the rejoin for the partitions the member keeps", async () => {
    const b = await broker(realClock);
    await b.createTopic({ name: "t", partitions: 1 });
    await b.createTopic({ name: "u", partitions: 1 });
    await fill(b, "t", 0, ["a", "b", "c"]);
    const server = await serveTcp(b);
    const options = { group: "g", sessionTimeoutMs: 5000, heartbeatIntervalMs: 60_000 };
    const one = await GroupConsumer.join({
      client: await server.connect(),
      topics: ["t"],
      ...options,
    });
    const batches = await one.poll({ waitMs: 100 });
    expect(batches.flatMap((x) => x.records.map((r) => fromUtf8(r.value)))).toEqual([
      "a",
      "b",
      "c",
    ]);
    // Another member joins (for another topic): a new generation, in which one keeps t/0.
    const two = await GroupConsumer.join({
      client: await server.connect(),
      topics: ["u"],
      ...options,
    });
    const upTo = new Map([[GroupConsumer.partitionKey(t0), 3]]);
    expect(await one.commit(upTo)).toBe(true);
    expect(one.generation).toBe(2);
    expect((await b.describeGroup("g")).offsets).toContainEqual(
      expect.objectContaining({ topic: "t", partition: 0, committed: 3, lag: 0 }),
    );
    // A partition lost in the rebalance is not committed by its former owner: false.
    await one.close();
    const three = await GroupConsumer.join({
      client: await server.connect(),
      topics: ["u"],
      ...options,
    });
    await fill(b, "u", 0, ["x"]);
    const got = await two.poll({ waitMs: 100 });
    expect(got.flatMap((x) => x.records.map((r) => fromUtf8(r.value)))).toEqual(["x"]);
    const lost = await two.commit();
    expect(two.assignments.length + three.assignments.length).toBe(1);
    expect(lost).toBe(two.assignments.length === 1);
    await two.close();
    await three.close();
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
    const server = await serveTcp(b);
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
