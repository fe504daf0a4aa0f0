/**
 * Preferred leader election (docs/cluster.md "Preferred leader election") on the in-memory etcd
 * (test/helpers/fake-etcd.ts) and a manual clock: the controller moves a leadership back to the
 * preferred replica once it has been in the ISR for a whole check period, with the leader epoch
 * bumped and the ISR unchanged; never to a replica outside the ISR, a restarted one whose ISR
 * entry predates its incarnation, or one that flaps between checks; at most `rebalanceMaxMoves`
 * per check; off with `rebalanceMs: 0`, when an `elect_preferred` request still moves at once.
 * The real processes: test/e2e/cluster.test.ts "preferred leader".
 */
import { describe, expect, it } from "vitest";
import { parseElectPreferred } from "../../src/cluster/controller.ts";
import { electPreferredKey, incarnationsKey, partitionKey } from "../../src/cluster/keys.ts";
import {
  formatPartitionState,
  initialPartitionState,
  noLeader,
  type PartitionState,
  parsePartitionState,
  preferredLeaderMove,
} from "../../src/cluster/partition-state.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { startTestMember, type TestMember } from "../helpers/cluster-node.ts";
import { FakeEtcd, settle, until } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
const periodMs = 1000;
async function startBroker(
  etcd: FakeEtcd,
  clock: ManualClock,
  nodeId: number,
  options: { rebalanceMs?: number; rebalanceMaxMoves?: number },
  dataDir: { clusterId: string; nodeId: number } | null = null,
): Promise<TestMember> {
  const b = await startTestMember({ etcd, clock, nodeId, join: { dataDir }, controller: options });
  return b;
}

async function readState(etcd: FakeEtcd, topic: string, partition = 0): Promise<PartitionState> {
  const key = partitionKey(prefix, topic, partition);
  const kv = await etcd.get(key);
  if (kv === null) throw new Error(`${key} is missing`);
  return parsePartitionState(key, kv.value);
}

/** A partition whose preferred replica is in the ISR but does not lead (after a failover and its return). */
function displaced(replicas: number[], leader: number, epoch = 1): PartitionState {
  return { ...initialPartitionState(replicas, 2), leader, leader_epoch: epoch };
}

/** Three brokers with controllers, and `partitions` (topic → state) written after they registered. */
async function cluster(
  partitions: Record<string, PartitionState>,
  options: { rebalanceMs?: number; rebalanceMaxMoves?: number } = { rebalanceMs: periodMs },
) {
  const etcd = new FakeEtcd();
  const clock = new ManualClock();
  const brokers: TestMember[] = [];
  for (const id of [1, 2, 3]) brokers.push(await startBroker(etcd, clock, id, options));
  for (const [topic, state] of Object.entries(partitions))
    await etcd.put(partitionKey(prefix, topic, 0), formatPartitionState(state));
  await until("incarnations recorded", async () => {
    const kv = await etcd.get(incarnationsKey(prefix));
    return kv !== null && Object.keys(JSON.parse(kv.value)).length === 3;
  });
  const controller = () => {
    const c = brokers.find((b) => b.controller.isController);
    if (c === undefined) throw new Error("no controller");
    return c;
  };
  /** Advances one check period and lets the check run. */
  const check = async () => {
    clock.advance(periodMs);
    await settle();
  };
  return { etcd, clock, brokers, controller, check };
}

describe("preferredLeaderMove", () => {
  const view =
    (alive: number[], lapsed: number[] = []) =>
    (id: number) => ({
      alive: alive.includes(id),
      lapsed: lapsed.includes(id),
      logEndOffset: undefined,
    });

  it("moves the leadership to an alive preferred ISR member, bumping the epoch only", () => {
    const state = { ...displaced([1, 2, 3], 2, 4), committed_offset: 70 };
    expect(preferredLeaderMove(state, view([1, 2, 3]))).toEqual({
      ...state,
      leader: 1,
      leader_epoch: 5,
    });
  });

  it("moves nothing when the preferred replica leads, is outside the ISR, dead or lapsed", () => {
    expect(preferredLeaderMove(initialPartitionState([1, 2, 3], 2), view([1, 2, 3]))).toBeNull();
    const outside = { ...displaced([1, 2, 3], 2), isr: [2, 3] };
    expect(preferredLeaderMove(outside, view([1, 2, 3]))).toBeNull();
    expect(preferredLeaderMove(displaced([1, 2, 3], 2), view([2, 3]))).toBeNull();
    expect(preferredLeaderMove(displaced([1, 2, 3], 2), view([2, 3], [1]))).toBeNull();
  });

  it("leaves a partition without a leader, or with a dead or lapsed one, to the failover rules", () => {
    const offline = { ...displaced([1, 2, 3], 2), leader: noLeader };
    expect(preferredLeaderMove(offline, view([1, 2, 3]))).toBeNull();
    expect(preferredLeaderMove(displaced([1, 2, 3], 2), view([1, 3]))).toBeNull();
    expect(preferredLeaderMove(displaced([1, 2, 3], 2), view([1, 3], [2]))).toBeNull();
  });
});

describe("controller: preferred leader election", () => {
  it("moves a leadership back after the preferred replica was in the ISR for one whole period", async () => {
    const state = displaced([1, 2, 3], 2, 3);
    const { etcd, controller, check } = await cluster({ a: state });
    await check(); // first sight: recorded, not moved
    expect(await readState(etcd, "a")).toEqual(state);
    await check();
    await until("moved", async () => (await readState(etcd, "a")).leader === 1);
    expect(await readState(etcd, "a")).toEqual({ ...state, leader: 1, leader_epoch: 4 });
    expect(controller().logger.named("cluster.preferred_leader_elected")).toMatchObject([
      { topic: "a", partition: 0, leader: 1, previous_leader: 2, leader_epoch: 4 },
    ]);
    expect(controller().controller.preferredMoves).toBe(1);
    await check();
    await check();
    expect((await readState(etcd, "a")).leader_epoch).toBe(4); // moved once, then stable
  });

  it("never moves to a replica outside the ISR, nor to one that restarted between checks", async () => {
    const { etcd, brokers, clock, check } = await cluster({
      a: { ...displaced([1, 2, 3], 2), isr: [2, 3] },
      b: displaced([3, 1, 2], 1),
    });
    await check();
    // Node 3 restarts (a new incarnation on the same data directory) before the next check.
    const old = brokers[2];
    const clusterId = old.membership.clusterId;
    await old.stop();
    const again = await startBroker(
      etcd,
      clock,
      3,
      { rebalanceMs: periodMs },
      {
        clusterId,
        nodeId: 3,
      },
    );
    brokers[2] = again;
    await settle();
    for (let i = 0; i < 3; i++) await check();
    // a: node 1 was never in the ISR. b: the pass took the restarted node 3 out of the ISR
    // (a new incarnation is gone first), so it has to catch up and rejoin before it leads.
    const a = await readState(etcd, "a");
    const b = await readState(etcd, "b");
    expect(a.leader).toBe(2);
    expect(b.leader).toBe(1);
    expect(b.isr).not.toContain(3);
    expect(brokers.flatMap((x) => x.logger.named("cluster.preferred_leader_elected"))).toEqual([]);
  });

  it("moves at most rebalanceMaxMoves leaderships per check", async () => {
    const parts: Record<string, PartitionState> = {};
    for (const t of ["a", "b", "c", "d", "e"]) parts[t] = displaced([1, 2, 3], 3);
    const { etcd, check } = await cluster(parts, { rebalanceMs: periodMs, rebalanceMaxMoves: 2 });
    const led = async () => {
      let n = 0;
      for (const t of Object.keys(parts)) if ((await readState(etcd, t)).leader === 1) n++;
      return n;
    };
    await check();
    expect(await led()).toBe(0);
    await check();
    await until("two moved", async () => (await led()) === 2);
    await check();
    await until("four moved", async () => (await led()) === 4);
    await check();
    await until("all moved", async () => (await led()) === 5);
  });

  it("with rebalanceMs 0 moves nothing by itself; an elect_preferred request moves at once", async () => {
    const { etcd, brokers, check } = await cluster(
      { a: displaced([1, 2, 3], 2), b: displaced([1, 2, 3], 3) },
      { rebalanceMs: 0 },
    );
    for (let i = 0; i < 3; i++) await check();
    expect((await readState(etcd, "a")).leader).toBe(2);
    await etcd.put(electPreferredKey(prefix), JSON.stringify({ topic: "b" }));
    await until("b moved", async () => (await readState(etcd, "b")).leader === 1);
    expect((await readState(etcd, "a")).leader).toBe(2); // another topic
    // A malformed request moves nothing (attack9 F2: it used to move every partition).
    await etcd.put(electPreferredKey(prefix), JSON.stringify({ topic: ["a"] }));
    await until("the bad request logged", async () =>
      brokers.some((x) => x.logger.named("cluster.bad_elect_preferred").length > 0),
    );
    for (let i = 0; i < 2; i++) await check();
    expect((await readState(etcd, "a")).leader).toBe(2);
    await etcd.put(electPreferredKey(prefix), JSON.stringify({ topic: null }));
    await until("a moved", async () => (await readState(etcd, "a")).leader === 1);
    expect(
      brokers.flatMap((x) => x.logger.named("cluster.preferred_leader_elected")),
    ).toMatchObject([
      { topic: "b", requested: true },
      { topic: "a", requested: true },
    ]);
  });
});

describe("parseElectPreferred", () => {
  it("takes {topic: string | null} and nothing else", () => {
    expect(parseElectPreferred('{"topic":"orders"}')).toBe("orders");
    expect(parseElectPreferred('{"topic":null}')).toBeNull();
    for (const bad of [
      "",
      "x",
      "null",
      "[]",
      '["t"]',
      "{}",
      '{"topic":5}',
      '{"topic":["x"]}',
      '{"topics":"x"}',
    ])
      expect(parseElectPreferred(bad), bad).toBeUndefined();
  });
});
