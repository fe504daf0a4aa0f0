/**
 * A leader leaving the cluster (`ReplicaManager.leave`, docs/cluster.md "Leaving the cluster";
 * attack13 F6) with three in-process brokers on real files and loopback sockets, partition state
 * in a real etcd: once it begins to leave it admits no produce (`not_leader`, naming no leader),
 * keeps serving its followers until they hold its log, so a produce in flight is acknowledged,
 * never shrinks an ISR however long a follower stays away, and gives up waiting after its bound.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { initialPartitionState } from "../../src/cluster/partition-state.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";
import { type ReplicatedCluster, startReplicatedCluster, waitFor } from "../helpers/replication.ts";

let etcd: EtcdCluster;
let client: EtcdHttpClient;
let n = 0;

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 1 });
  client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000 });
});

afterAll(async () => {
  await client?.close();
  await etcd?.stop();
});

function records(values: string[]) {
  return values.map((v) => ({ key: null, value: new TextEncoder().encode(v) }));
}

async function cluster3(replicaLagMs?: number): Promise<ReplicatedCluster> {
  return startReplicatedCluster({
    count: 3,
    etcd: client,
    prefix: `/es-broker-leave-${process.pid}-${n++}`,
    replicaLagMs,
  });
}

/** The error a promise rejects with (or fails the test if it resolves). */
async function rejection(promise: Promise<unknown>): Promise<{ code?: string; message?: string }> {
  return promise.then(
    () => expect.fail("expected a refusal"),
    (err: unknown) => err as { code?: string; message?: string },
  );
}

describe("a leader leaving the cluster", () => {
  it("acknowledges a produce in flight once the followers hold it, and admits no new one", async () => {
    const c = await cluster3();
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a"]), { partition: 0 });
    const before = await c.state("orders");
    // The followers stop fetching: "b" is appended on the leader, not acknowledged.
    await c.stopReplication(2);
    await c.stopReplication(3);
    const log = c.node(1).broker.partitionLog("orders", 0);
    const inFlight = leader.produce("orders", records(["b"]), { partition: 0 });
    let acked = false;
    void inFlight.then(() => (acked = true)).catch(() => {});
    await waitFor(() => log.highWatermark === 2, "the leader's fsync of b");
    const leaving = c.node(1).manager.leave(10_000);
    // A new produce is refused at once, retriably, naming no leader (not this broker), and
    // appends nothing.
    const refused = await rejection(leader.produce("orders", records(["c"]), { partition: 0 }));
    expect(refused.code).toBe("not_leader");
    expect(refused.message).toMatch(/leaving the cluster/);
    expect(log.logEndOffset).toBe(2);
    expect(acked).toBe(false);
    // The followers fetch again: "b" is acknowledged while the leader is leaving.
    await c.restartReplication(2, "orders");
    await c.restartReplication(3, "orders");
    const result = await inFlight;
    expect(result.spans[0].baseOffset).toBe(1);
    const drain = await leaving;
    expect(drain).toMatchObject({ led: 1, behind: [] });
    expect(drain.waitedMs).toBeLessThan(10_000);
    for (const id of [2, 3])
      expect(c.node(id).broker.partitionLog("orders", 0).highWatermark).toBe(2);
    // No ISR change while leaving.
    expect(await c.state("orders")).toEqual(before);
    await leader.close();
  });

  it("never shrinks an ISR while leaving; gives up on a stalled follower after its bound", async () => {
    const c = await cluster3(300);
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a"]), { partition: 0 });
    const before = await c.state("orders");
    await c.stopReplication(3);
    const inFlight = leader.produce("orders", records(["b"]), { partition: 0 });
    void inFlight.catch(() => {});
    const log = c.node(1).broker.partitionLog("orders", 0);
    await waitFor(() => log.highWatermark === 2, "the leader's fsync of b");
    const started = Date.now();
    // Five replica lag periods: a leader not leaving drops node 3 within one or two.
    const drain = await c.node(1).manager.leave(1500);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1400);
    expect(drain).toMatchObject({ led: 1, behind: ["orders/0"] });
    expect(await c.state("orders")).toEqual(before);
    expect(c.node(1).logger.named("replication.isr_changed")).toEqual([]);
    // Closing answers what is left not_leader (retriable); "b" was never acknowledged.
    await c.node(1).manager.close();
    expect((await rejection(inFlight)).code).toBe("not_leader");
    await new Promise((r) => setTimeout(r, 400));
    expect(await c.state("orders")).toEqual(before);
    await leader.close();
  });

  it("a leader whose followers hold its log leaves without waiting", async () => {
    const c = await cluster3();
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    for (let i = 0; i < 5; i++)
      await leader.produce("orders", records([`v${i}`]), { partition: 0 });
    const drain = await c.node(1).manager.leave(5000);
    expect(drain).toMatchObject({ led: 1, behind: [] });
    expect(drain.waitedMs).toBeLessThan(1000);
    await leader.close();
  });
});
