/**
 * The order of a broker leaving the cluster (`ClusterNode.leave`, docs/cluster.md "Leaving the
 * cluster"; attack13 F6) on the in-memory etcd (test/helpers/fake-etcd.ts): replication drains
 * first while the broker is still registered and no departure is recorded; only then is
 * replication closed, and only after that are `departed/<id>` written and the lease revoked, so
 * the controller moves leaderships only once nothing more can be acknowledged here. The drain's
 * bound reaches replication; `close()` after `leave()` does not leave twice, and `close()` alone
 * (a failed start) does not wait for followers.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { Broker } from "../../src/broker/types.ts";
import { brokerKey, departedKey } from "../../src/cluster/membership.ts";
import { ClusterNode, type ReplicaSink } from "../../src/cluster/node.ts";
import type { LeaveDrain } from "../../src/cluster/replica-manager.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { FakeEtcd, settle } from "../helpers/fake-etcd.ts";

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
) {
  const node = await ClusterNode.start({
    etcd,
    clock,
    prng: new Prng(1),
    logger,
    prefix,
    nodeId: 1,
    advertise: { tcp: "127.0.0.1:9001", http: "http://127.0.0.1:8001" },
    dataDirId: "dir-1",
    dataDir: null,
    newClusterId: "cluster-a",
    broker: { listTopics: async () => [] } as unknown as Broker,
    replicas: () => sink,
  });
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
});
