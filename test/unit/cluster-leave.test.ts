/**
 * The order of a broker leaving the cluster (`ClusterNode.leave`, docs/cluster.md "Leaving the
 * cluster"; attack13 F6) on the in-memory etcd (test/helpers/fake-etcd.ts): replication drains
 * first while the broker is still registered and no departure is recorded; only then is
 * replication closed, and only after that are `departed/<id>` written and the lease revoked, so
 * the controller moves leaderships only once nothing more can be acknowledged here. The drain's
 * bound reaches replication; `close()` after `leave()` does not leave twice, and `close()` alone
 * (a failed start) does not wait for followers. With etcd gone silent (no quorum: attack15b F4)
 * each etcd step of the leave is given up after `leaveEtcdStepMs`, each logged as a warn saying
 * what the controller will do instead, and `cluster.left` is a warn naming what was not recorded.
 */
import { afterEach, describe, expect, it } from "vitest";
import { controllerKey } from "../../src/cluster/keys.ts";
import { brokerKey, departedKey } from "../../src/cluster/membership.ts";
import type { ReplicaSink } from "../../src/cluster/node.ts";
import type { LeaveDrain } from "../../src/cluster/replica-manager.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { startLeaveTestNode } from "../helpers/cluster-node.ts";
import { FakeEtcd, SilentEtcd, settle } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

/** A replication layer that records what the node asks of it and what etcd held at each step. */
function recordingSink(etcd: FakeEtcd, nodeId: number) {
  const steps: { step: string; registered: boolean; departed: boolean; drainMs?: number }[] = [];
  let finishDrain!: (d: LeaveDrain) => void;
  const snapshot = async (step: string, extra: { drainMs?: number } = {}) =>
    steps.push({
      step,
      registered: (await etcd.get(brokerKey(prefix, nodeId))) !== null,
      departed: (await etcd.get(departedKey(prefix, nodeId))) !== null,
      ...extra,
    });
  const sink: ReplicaSink = {
    setBrokers() {},
    async applyPartitionState() {},
    logEndOffsets: () => new Map(),
    setMembershipLive() {},
    async leave(drainMs) {
      await snapshot("leave", { drainMs });
      return new Promise<LeaveDrain>((resolve) => (finishDrain = resolve));
    },
    async close() {
      await snapshot("close");
    },
  };
  return { sink, steps, finishDrain: (d: LeaveDrain) => finishDrain(d) };
}

async function startNode(
  etcd: FakeEtcd,
  clock: ManualClock,
  sink: ReplicaSink,
  logger: MemoryLogger,
  leaveEtcdStepMs?: number,
) {
  const node = await startLeaveTestNode({ etcd, clock, logger, replicas: sink, leaveEtcdStepMs });
  cleanups.push(() => node.close());
  return node;
}

describe("ClusterNode.leave", () => {
  it("drains while registered, closes replication, then records the departure and revokes the lease", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { sink, steps, finishDrain } = recordingSink(etcd, 1);
    const node = await startNode(etcd, clock, sink, logger);
    let left = false;
    const leaving = node.leave(2500).then(() => (left = true));
    await settle();
    // Draining: still registered, no departure, replication not closed.
    expect(steps).toEqual([{ step: "leave", registered: true, departed: false, drainMs: 2500 }]);
    expect(left).toBe(false);
    finishDrain({ led: 2, behind: ["t/1"], waitedMs: 2500 });
    await leaving;
    // Replication closed while the broker was still registered and before the departure.
    expect(steps[1]).toEqual({ step: "close", registered: true, departed: false });
    expect(steps).toHaveLength(2);
    expect((await etcd.get(departedKey(prefix, 1)))?.value).toBe(node.membership.incarnation);
    expect(await etcd.get(brokerKey(prefix, 1))).toBeNull();
    expect(logger.named("cluster.left")).toEqual([
      expect.objectContaining({ node_id: 1, led: 2, drain_ms: 2500, not_caught_up: ["t/1"] }),
    ]);
    // close() after leave() neither drains nor closes replication again.
    await node.close();
    expect(steps).toHaveLength(2);
    expect(logger.named("cluster.left")).toHaveLength(1);
  });

  it("campaigns for the controller no more once the leave begins, even while it drains", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    // Another broker holds the controller key: node 1 is a candidate, not the controller.
    await etcd.put(controllerKey(prefix), JSON.stringify({ node_id: 2, incarnation: "x" }));
    const { sink, finishDrain } = recordingSink(etcd, 1);
    const node = await startNode(etcd, clock, sink, logger);
    expect(node.controller.isController).toBe(false);
    void node.leave(2500);
    await settle();
    // The holder's key goes (its lease expired) while node 1 drains: node 1 does not take it,
    // neither on the watch's deletion nor at its resyncs.
    await etcd.delete(controllerKey(prefix));
    await settle();
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      await settle();
    }
    expect(await etcd.get(controllerKey(prefix))).toBeNull();
    expect(node.controller.isController).toBe(false);
    finishDrain({ led: 0, behind: [], waitedMs: 0 });
  });

  it("close() alone leaves without waiting for followers", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { sink, steps, finishDrain } = recordingSink(etcd, 1);
    const node = await startNode(etcd, clock, sink, logger);
    const closing = node.close();
    await settle();
    expect(steps).toEqual([{ step: "leave", registered: true, departed: false, drainMs: 0 }]);
    finishDrain({ led: 0, behind: [], waitedMs: 0 });
    await closing;
    expect(steps.map((s) => s.step)).toEqual(["leave", "close"]);
    expect(await etcd.get(departedKey(prefix, 1))).not.toBeNull();
  });

  it("gives up each etcd step after its bound when etcd does not answer, and says so (attack15b F4)", async () => {
    const etcd = new SilentEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { sink, steps, finishDrain } = recordingSink(etcd, 1);
    const node = await startNode(etcd, clock, sink, logger, 1500);
    const lease = node.membership.leaseId;
    // etcd falls silent once replication is closed, before the departure is recorded.
    const closeReplication = sink.close;
    sink.close = async () => {
      await closeReplication();
      etcd.silent = true;
    };
    let left = false;
    const leaving = node.leave(3000).then(() => (left = true));
    await settle();
    finishDrain({ led: 1, behind: [], waitedMs: 4 });
    await settle();
    expect(steps.map((s) => s.step)).toEqual(["leave", "close"]);
    // The departure's put waits its bound, then the revocation waits its own.
    clock.advance(1499);
    await settle();
    expect(logger.named("cluster.leave_step_failed")).toEqual([]);
    clock.advance(1);
    await settle();
    expect(logger.named("cluster.leave_step_failed")).toEqual([
      expect.objectContaining({ step: "record_departure", outcome: "timeout", ms: 1500 }),
    ]);
    expect(left).toBe(false);
    clock.advance(1500);
    await leaving;
    const warns = logger.events.filter((e) => e.event === "cluster.leave_step_failed");
    expect(warns.map((e) => [e.level, e.fields.step, e.fields.outcome])).toEqual([
      ["warn", "record_departure", "timeout"],
      ["warn", "revoke_lease", "timeout"],
    ]);
    // Each says when the controller will notice instead: the lease (6 s TTL, granted at the
    // start) expires 4.5 s after the first warn and 3 s after the second; without a departure,
    // the controller's grace for a vanished registration (3 s) follows.
    expect(warns[0].fields.effect).toMatch(/lease expires \(in about 5 s\) and its 3 s grace/);
    expect(warns[1].fields.effect).toMatch(/until its lease expires \(in about 3 s\)/);
    expect(logger.events.filter((e) => e.event === "cluster.left")).toEqual([
      {
        level: "warn",
        event: "cluster.left",
        fields: expect.objectContaining({
          departure_recorded: false,
          lease_revoked: false,
          ms: 3000,
        }),
      },
    ]);
    // Nothing was written: once etcd answers again the lease is still there.
    etcd.silent = false;
    expect(await etcd.get(departedKey(prefix, 1))).toBeNull();
    expect((await etcd.get(brokerKey(prefix, 1)))?.lease).toBe(lease);
  });

  it("a departure etcd refuses is a warn of its own; the lease is still revoked", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { sink, finishDrain } = recordingSink(etcd, 1);
    const node = await startNode(etcd, clock, sink, logger);
    const put = etcd.put.bind(etcd);
    etcd.put = (key, value, options) =>
      key === departedKey(prefix, 1)
        ? Promise.reject(new Error("etcdserver: request timed out"))
        : put(key, value, options);
    const leaving = node.leave(3000);
    await settle();
    finishDrain({ led: 0, behind: [], waitedMs: 0 });
    await leaving;
    expect(logger.events.filter((e) => e.event === "cluster.leave_step_failed")).toEqual([
      {
        level: "warn",
        event: "cluster.leave_step_failed",
        fields: expect.objectContaining({
          step: "record_departure",
          outcome: "failed",
          error: "etcdserver: request timed out",
        }),
      },
    ]);
    expect(await etcd.get(brokerKey(prefix, 1))).toBeNull();
    expect(logger.events.find((e) => e.event === "cluster.left")).toMatchObject({
      level: "warn",
      fields: { departure_recorded: false, lease_revoked: true },
    });
  });

  it("a healthy leave logs cluster.left at info with both steps done", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock(1_000_000);
    const logger = new MemoryLogger();
    const { sink, finishDrain } = recordingSink(etcd, 1);
    const node = await startNode(etcd, clock, sink, logger);
    const leaving = node.leave(3000);
    await settle();
    finishDrain({ led: 0, behind: [], waitedMs: 0 });
    await leaving;
    expect(logger.named("cluster.leave_step_failed")).toEqual([]);
    expect(logger.events.find((e) => e.event === "cluster.left")).toMatchObject({
      level: "info",
      fields: { departure_recorded: true, lease_revoked: true },
    });
  });
});
