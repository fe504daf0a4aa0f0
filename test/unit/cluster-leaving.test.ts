/**
 * A broker that has begun to leave the cluster (docs/cluster.md "Leaving the cluster") is elected
 * nowhere while it drains, as Kafka's controlled shutdown keeps a shutting-down broker from
 * leading: the rules of `partition-state.ts` with a leaving replica (an ISR member passed over,
 * the only live ISR member leaving takes the partition offline, an ELR member with the longest
 * log leaving keeps it offline, a leaving leader stays leader while it drains, no preferred move
 * to it), then the controller on the in-memory etcd (test/helpers/fake-etcd.ts) reading
 * `leaving/<id>` (elects the next ISR member when the leader dies while another is leaving, logs
 * `cluster.broker_leaving` once, a marker of another incarnation counts for nothing), and
 * `ClusterNode.leave` writing the marker on its lease at the start of the leave, before the
 * drain ends (`cluster.leaving`), the marker gone with the lease; with etcd silent (no quorum)
 * the leave still takes its two bounded steps and no more, and a refused announcement is a
 * `cluster.leave_step_failed` warn (`mark_leaving`) while the leave goes on.
 */
import { afterEach, describe, expect, it } from "vitest";
import { incarnationsKey, partitionKey } from "../../src/cluster/keys.ts";
import { leavingKey } from "../../src/cluster/membership.ts";
import type { ReplicaSink } from "../../src/cluster/node.ts";
import {
  controllerUpdate,
  formatPartitionState,
  initialPartitionState,
  noLeader,
  type PartitionState,
  parsePartitionState,
  preferredLeaderMove,
  type ReplicaView,
} from "../../src/cluster/partition-state.ts";
import type { LeaveDrain } from "../../src/cluster/replica-manager.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { startLeaveTestNode, startTestMember, type TestMember } from "../helpers/cluster-node.ts";
import { FakeEtcd, SilentEtcd, settle, until } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

/** Replica views: `alive` registered, `leaving` among them announcing a leave. */
function view(
  alive: number[],
  leaving: number[] = [],
  ends: Record<number, number> = {},
): (id: number) => ReplicaView {
  return (id) => ({
    alive: alive.includes(id),
    leaving: leaving.includes(id),
    logEndOffset: ends[id],
  });
}

describe("partition state: a leaving replica is never elected", () => {
  const state = initialPartitionState([1, 2, 3], 2);

  it("a dead leader gives way to the first ISR member that is not leaving", () => {
    // Without the leave, node 2 (first in replica order) would lead: the rule has to pass it over.
    expect(controllerUpdate(state, { gone: [1], view: view([2, 3]) })?.leader).toBe(2);
    expect(controllerUpdate(state, { gone: [1], view: view([2, 3], [2]) })).toEqual({
      ...state,
      leader: 3,
      leader_epoch: 1,
      isr: [2, 3],
    });
  });

  it("with the only live ISR member leaving, the partition goes offline rather than to it", () => {
    const two = { ...state, isr: [1, 2] };
    expect(controllerUpdate(two, { gone: [1], view: view([2, 3], [2]) })).toEqual({
      ...two,
      leader: noLeader,
      leader_epoch: 1,
      isr: [2],
      elr: [1],
    });
  });

  it("a leaving leader keeps its leadership while it drains (its departure moves it)", () => {
    expect(controllerUpdate(state, { gone: [], view: view([1, 2, 3], [1]) })).toBeNull();
    // Its departure: gone, and the first ISR member not leaving leads.
    expect(controllerUpdate(state, { gone: [1], view: view([2, 3]) })?.leader).toBe(2);
  });

  it("an ELR member with the longest log that is leaving keeps the partition offline", () => {
    const offline: PartitionState = {
      ...state,
      leader: noLeader,
      leader_epoch: 5,
      isr: [],
      elr: [1, 2],
      committed_offset: 10,
    };
    const ends = { 1: 20, 2: 15 };
    expect(controllerUpdate(offline, { gone: [], view: view([1, 2], [], ends) })?.leader).toBe(1);
    // Node 2 would hold fewer records than node 1: electing it would truncate node 1's.
    expect(controllerUpdate(offline, { gone: [], view: view([1, 2], [1], ends) })).toBeNull();
    // A leaving member that is not the longest is no obstacle.
    expect(controllerUpdate(offline, { gone: [], view: view([1, 2], [2], ends) })?.leader).toBe(1);
  });

  it("no preferred leader move goes to a leaving replica", () => {
    const displaced = { ...state, leader: 2, leader_epoch: 1 };
    expect(preferredLeaderMove(displaced, view([1, 2, 3]))?.leader).toBe(1);
    expect(preferredLeaderMove(displaced, view([1, 2, 3], [1]))).toBeNull();
  });
});

async function readState(etcd: FakeEtcd, topic: string): Promise<PartitionState> {
  const key = partitionKey(prefix, topic, 0);
  const kv = await etcd.get(key);
  if (kv === null) throw new Error(`${key} is missing`);
  return parsePartitionState(key, kv.value);
}

/** Three brokers with controllers, node 1 the controller, and partition `a` led by `leader`. */
async function cluster(leader: number) {
  const etcd = new FakeEtcd();
  const clock = new ManualClock();
  const brokers: TestMember[] = [];
  for (const nodeId of [1, 2, 3])
    brokers.push(await startTestMember({ etcd, clock, nodeId, controller: { rebalanceMs: 0 } }));
  await until("node 1 controls", () => brokers[0].controller.isController);
  await etcd.put(
    partitionKey(prefix, "a", 0),
    formatPartitionState({ ...initialPartitionState([1, 2, 3], 2), leader }),
  );
  await until("incarnations recorded", async () => {
    const kv = await etcd.get(incarnationsKey(prefix));
    return kv !== null && Object.keys(JSON.parse(kv.value)).length === 3;
  });
  return { etcd, clock, brokers };
}

describe("controller: brokers that announced their leave", () => {
  it("control: without a marker, the first live ISR member in replica order takes a dead leader's place", async () => {
    const { etcd, brokers } = await cluster(3);
    await brokers[2].stop(); // node 3 departs (departed/3 recorded): gone at once
    await until("a new leader", async () => (await readState(etcd, "a")).leader !== 3);
    expect((await readState(etcd, "a")).leader).toBe(1);
  });

  it("elects the next in-sync replica when the leader dies while another broker is leaving, and logs the leave once", async () => {
    const { etcd, brokers } = await cluster(3);
    const leaving = brokers[0]; // node 1: the controller, and first in replica order
    leaving.controller.retire();
    const marked = await leaving.membership.markLeaving();
    expect(marked).toMatchObject({ ok: true });
    const marker = await etcd.get(leavingKey(prefix, 1));
    expect(marker).toMatchObject({
      value: leaving.membership.incarnation,
      lease: leaving.membership.leaseId,
    });
    await until("the leave seen", () => leaving.logger.named("cluster.broker_leaving").length > 0);
    await brokers[2].stop(); // the leader departs while node 1 drains
    await until("a new leader", async () => (await readState(etcd, "a")).leader !== 3);
    expect(await readState(etcd, "a")).toMatchObject({ leader: 2, leader_epoch: 1, isr: [1, 2] });
    expect(leaving.logger.named("cluster.partition_changed")).toMatchObject([
      { topic: "a", leader: 2 },
    ]);
    // Logged once per incarnation, however many passes followed.
    expect(leaving.logger.named("cluster.broker_leaving")).toEqual([
      expect.objectContaining({ node_id: 1, incarnation: leaving.membership.incarnation }),
    ]);
    // The marker goes with the leaving broker's lease.
    await leaving.stop();
    expect(await etcd.get(leavingKey(prefix, 1))).toBeNull();
  });

  it("a broker that registers again mid-leave (etcd revoked its lease) writes the marker again on the new lease", async () => {
    const { etcd, brokers } = await cluster(3);
    const m = brokers[0].membership;
    await m.markLeaving();
    const first = m.leaseId;
    await etcd.leaseRevoke(first);
    expect(await etcd.get(leavingKey(prefix, 1))).toBeNull();
    await m.checkNow();
    await until("the marker back", async () => (await etcd.get(leavingKey(prefix, 1))) !== null);
    expect(m.leaseId).not.toBe(first);
    expect(await etcd.get(leavingKey(prefix, 1))).toMatchObject({
      value: m.incarnation,
      lease: m.leaseId,
    });
  });

  it("a marker naming another incarnation than the one registered counts for nothing", async () => {
    const { etcd, brokers } = await cluster(3);
    await etcd.put(leavingKey(prefix, 1), "an-earlier-incarnation");
    await settle();
    await brokers[2].stop();
    await until("a new leader", async () => (await readState(etcd, "a")).leader !== 3);
    expect((await readState(etcd, "a")).leader).toBe(1);
    expect(brokers[0].logger.named("cluster.broker_leaving")).toEqual([]);
  });
});

/** A node whose replication drains at once (or when `finishDrain` is called, if `held`). */
async function startNode(etcd: FakeEtcd, clock: ManualClock, logger: MemoryLogger, held: boolean) {
  let finishDrain: (d: LeaveDrain) => void = () => {};
  const sink: ReplicaSink = {
    setBrokers() {},
    async applyPartitionState() {},
    logEndOffsets: () => new Map(),
    setMembershipLive() {},
    leave: () =>
      held
        ? new Promise<LeaveDrain>((resolve) => (finishDrain = resolve))
        : Promise.resolve({ led: 0, behind: [], waitedMs: 0 }),
    async close() {},
  };
  const node = await startLeaveTestNode({
    etcd,
    clock,
    logger,
    replicas: sink,
    leaveEtcdStepMs: 1500,
  });
  cleanups.push(() => node.close());
  return { node, finishDrain: (d: LeaveDrain) => finishDrain(d) };
}

describe("ClusterNode.leave announces the leave", () => {
  it("with etcd silent from the start, the leave takes no longer than the two steps it had (attack15b F4)", async () => {
    const etcd = new SilentEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { node } = await startNode(etcd, clock, logger, false);
    etcd.silent = true;
    let left = false;
    const leaving = node.leave(3000).then(() => (left = true));
    await settle();
    // The announcement waits in the background: the departure's bound runs meanwhile.
    clock.advance(1500);
    await settle();
    expect(left).toBe(false);
    clock.advance(1500);
    await leaving;
    expect(logger.named("cluster.left")).toEqual([expect.objectContaining({ ms: 3000 })]);
    // The announcement given up while the departure was tried says nothing of its own.
    expect(logger.named("cluster.leave_step_failed").map((f) => f.step)).toEqual([
      "record_departure",
      "revoke_lease",
    ]);
    expect(logger.named("cluster.leaving")).toEqual([]);
  });

  it("an announcement etcd refuses before the departure is a warn of its own, and the leave goes on", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { node, finishDrain } = await startNode(etcd, clock, logger, true);
    const put = etcd.put.bind(etcd);
    etcd.put = (key, value, options) =>
      key === leavingKey(prefix, 1)
        ? Promise.reject(new Error("etcdserver: no leader"))
        : put(key, value, options);
    const leaving = node.leave(3000);
    await settle();
    expect(logger.events.filter((e) => e.event === "cluster.leave_step_failed")).toEqual([
      {
        level: "warn",
        event: "cluster.leave_step_failed",
        fields: expect.objectContaining({
          step: "mark_leaving",
          outcome: "failed",
          error: "etcdserver: no leader",
          effect: expect.stringMatching(/may still elect this broker leader/),
        }),
      },
    ]);
    finishDrain({ led: 0, behind: [], waitedMs: 0 });
    await leaving;
    expect(logger.events.find((e) => e.event === "cluster.left")).toMatchObject({
      level: "info",
      fields: { departure_recorded: true, lease_revoked: true },
    });
  });

  it("writes leaving/<id> on its lease while the drain is still under way; the lease takes it", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    let finishDrain!: (d: LeaveDrain) => void;
    const sink: ReplicaSink = {
      setBrokers() {},
      async applyPartitionState() {},
      logEndOffsets: () => new Map(),
      setMembershipLive() {},
      leave: () => new Promise<LeaveDrain>((resolve) => (finishDrain = resolve)),
      async close() {},
    };
    const node = await startLeaveTestNode({ etcd, clock, logger, replicas: sink });
    cleanups.push(() => node.close());
    expect(await etcd.get(leavingKey(prefix, 1))).toBeNull();
    const leaving = node.leave(3000);
    await settle();
    // Draining: the marker is there, on the lease, naming this incarnation.
    expect(await etcd.get(leavingKey(prefix, 1))).toMatchObject({
      value: node.membership.incarnation,
      lease: node.membership.leaseId,
    });
    expect(logger.named("cluster.leaving")).toEqual([
      expect.objectContaining({ node_id: 1, incarnation: node.membership.incarnation }),
    ]);
    finishDrain({ led: 0, behind: [], waitedMs: 0 });
    await leaving;
    expect(await etcd.get(leavingKey(prefix, 1))).toBeNull();
    expect(logger.named("cluster.leave_step_failed")).toEqual([]);
  });
});
