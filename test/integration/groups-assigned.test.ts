/**
 * Client-assigned groups (Kafka's JoinGroup/SyncGroup; `broker/groups.ts` "Client-assigned
 * groups") through LocalBroker on the simulated disk with a ManualClock: joins held until every
 * member rejoined or the rebalance timeout, the leader's assignment handed out, heartbeats
 * signalling rebalances, session expiry, and the fencing of stale commits (22, 25 and 27, the
 * stored offset unchanged).
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import type { AssignedJoinResult } from "../../src/broker/types.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { openTestBroker } from "../helpers/broker.ts";

async function start() {
  const clock = new ManualClock();
  const { broker } = await openTestBroker({
    fs: new MemoryFileSystem(),
    clock,
    logger: new MemoryLogger(),
    cleanupIntervalMs: 0,
  });
  await broker.createTopic({ name: "t", partitions: 4 });
  const b = new EntryBatchBuilder();
  for (let i = 0; i < 10; i++) b.add(null, utf8(`r${i}`));
  for (let p = 0; p < 4; p++) await broker.produce({ topic: "t", partition: p, batch: b.build() });
  return { broker, clock };
}

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof BrokerError) return err.kind.code;
    throw err;
  }
  return "ok";
}

const join = (broker: LocalBroker, memberId?: string) =>
  broker.joinAssignedGroup({
    group: "g",
    memberId,
    clientId: "c",
    sessionTimeoutMs: 1000,
    rebalanceTimeoutMs: 5000,
    protocolType: "consumer",
    protocols: [{ name: "range", metadata: utf8("meta") }],
    topics: ["t"],
  });

/** Lets promise callbacks run (the coordinator works on microtasks and the simulated disk). */
const settle = () => new Promise((r) => setTimeout(r, 5));

describe("client-assigned groups", () => {
  it("holds joins until every member rejoins, hands the leader the members, and the leader's sync out to all", async () => {
    const { broker, clock } = await start();
    const a1 = await join(broker);
    expect(a1.generation).toBe(1);
    expect(a1.leader).toBe(a1.memberId);
    await broker.syncAssignedGroup({
      group: "g",
      memberId: a1.memberId,
      generation: 1,
      assignments: [
        {
          memberId: a1.memberId,
          assignment: utf8("all"),
          partitions: [0, 1, 2, 3].map((partition) => ({ topic: "t", partition })),
        },
      ],
    });
    // A second member starts a rebalance: its join waits for the first to rejoin.
    let b: AssignedJoinResult | null = null;
    const bJoin = join(broker).then((r) => (b = r));
    await settle();
    expect(b).toBeNull();
    expect(
      await code(
        broker.heartbeatAssignedGroup({ group: "g", memberId: a1.memberId, generation: 1 }),
      ),
    ).toBe("rebalance_in_progress");
    const a2 = await join(broker, a1.memberId);
    await bJoin;
    expect(a2.generation).toBe(2);
    expect(b!.generation).toBe(2);
    expect(a2.leader).toBe(a1.memberId);
    expect(a2.members.map((m) => m.memberId).sort()).toEqual([a1.memberId, b!.memberId].sort());
    expect(b!.members).toEqual([]);
    // The follower's sync waits for the leader's.
    let bAssignment: string | null = null;
    const bSync = broker
      .syncAssignedGroup({ group: "g", memberId: b!.memberId, generation: 2, assignments: [] })
      .then((r) => (bAssignment = Buffer.from(r.assignment).toString()));
    await settle();
    expect(bAssignment).toBeNull();
    // Commits wait for the assignment too (during the completing phase).
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: b!.memberId,
          generation: 2,
          offsets: [{ topic: "t", partition: 2, offset: 5 }],
        }),
      ),
    ).toBe("rebalance_in_progress");
    const leaderSync = await broker.syncAssignedGroup({
      group: "g",
      memberId: a1.memberId,
      generation: 2,
      assignments: [
        {
          memberId: a1.memberId,
          assignment: utf8("01"),
          partitions: [0, 1].map((partition) => ({ topic: "t", partition })),
        },
        {
          memberId: b!.memberId,
          assignment: utf8("23"),
          partitions: [2, 3].map((partition) => ({ topic: "t", partition })),
        },
      ],
    });
    await bSync;
    expect(Buffer.from(leaderSync.assignment).toString()).toBe("01");
    expect(bAssignment).toBe("23");
    const d = await broker.describeGroup("g");
    expect(d.members.map((m) => m.assignments.map((x) => x.partition))).toEqual(
      d.members.map((m) => (m.memberId === a1.memberId ? [0, 1] : [2, 3])),
    );
    await broker.heartbeatAssignedGroup({ group: "g", memberId: b!.memberId, generation: 2 });
    void clock;
  });

  it("fences stale commits: old generation 22, unknown member 25, and the stored offset stays", async () => {
    const { broker } = await start();
    const a = await join(broker);
    await broker.syncAssignedGroup({
      group: "g",
      memberId: a.memberId,
      generation: a.generation,
      assignments: [{ memberId: a.memberId, assignment: utf8("x"), partitions: [] }],
    });
    await broker.commitOffsets({
      group: "g",
      memberId: a.memberId,
      generation: a.generation,
      offsets: [{ topic: "t", partition: 0, offset: 7 }],
    });
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: a.generation - 1,
          offsets: [{ topic: "t", partition: 0, offset: 1 }],
        }),
      ),
    ).toBe("stale_generation");
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: "nobody",
          generation: a.generation,
          offsets: [{ topic: "t", partition: 0, offset: 1 }],
        }),
      ),
    ).toBe("unknown_member");
    expect(
      await code(
        broker.heartbeatAssignedGroup({ group: "g", memberId: "nobody", generation: a.generation }),
      ),
    ).toBe("unknown_member");
    const d = await broker.describeGroup("g");
    expect(d.offsets.find((o) => o.partition === 0)?.committed).toBe(7);
  });

  it("completes a rebalance at the rebalance timeout without the member that did not rejoin, and expires silent members", async () => {
    const { broker, clock } = await start();
    const a = await join(broker);
    await broker.syncAssignedGroup({
      group: "g",
      memberId: a.memberId,
      generation: 1,
      assignments: [],
    });
    let b: AssignedJoinResult | null = null;
    const bJoin = join(broker).then((r) => (b = r));
    await settle();
    // A keeps heartbeating but never rejoins; the rebalance ends at the 5 s rebalance timeout.
    for (let t = 0; t < 5; t++) {
      expect(
        await code(
          broker.heartbeatAssignedGroup({ group: "g", memberId: a.memberId, generation: 1 }),
        ),
      ).toBe("rebalance_in_progress");
      clock.advance(900);
      await settle();
    }
    clock.advance(600);
    await broker.groups.settled();
    await bJoin;
    expect(b!.generation).toBe(2);
    expect(b!.members.map((m) => m.memberId)).toEqual([b!.memberId]);
    expect(
      await code(
        broker.heartbeatAssignedGroup({ group: "g", memberId: a.memberId, generation: 2 }),
      ),
    ).toBe("unknown_member");
    // B never heartbeats: after its 1 s session it is gone and the group is empty.
    await broker.syncAssignedGroup({
      group: "g",
      memberId: b!.memberId,
      generation: 2,
      assignments: [],
    });
    clock.advance(1100);
    await broker.groups.settled();
    expect((await broker.describeGroup("g")).members).toEqual([]);
  });

  it("keeps native and Kafka members apart: neither may join the other's group", async () => {
    const { broker } = await start();
    await broker.joinGroup({ group: "native", topics: ["t"] });
    expect(
      await code(
        broker.joinAssignedGroup({
          group: "native",
          clientId: "c",
          sessionTimeoutMs: 1000,
          rebalanceTimeoutMs: 1000,
          protocolType: "consumer",
          protocols: [{ name: "range", metadata: new Uint8Array(0) }],
          topics: [],
        }),
      ),
    ).toBe("inconsistent_group_protocol");
    await join(broker);
    expect(await code(broker.joinGroup({ group: "g", topics: ["t"] }))).toBe(
      "inconsistent_group_protocol",
    );
  });
});
