/**
 * cluster/node.ts and its controller on an in-memory etcd (test/helpers/fake-etcd.ts) behind the
 * watch guard (cluster/watch-guard.ts, docs/cluster.md "A watch that goes deaf"): every watch the
 * node has open goes deaf (attack15 F6), then a partition state changes, a topic is created, a
 * broker's registration is deleted (seen by the node, and by the controller, which runs a pass),
 * or another broker becomes the controller. Each reaches the
 * node within a few check periods (here 300 ms + a 100 ms grace), through the same code that
 * applies a watch's events, where without the guard it never would (the controller's resync is
 * set far out, so only the guard can bring the controller key).
 */
import { describe, expect, it } from "vitest";
import { controllerKey, incarnationsKey, partitionKey, topicKey } from "../../src/cluster/keys.ts";
import { formatPartitionState, type PartitionState } from "../../src/cluster/partition-state.ts";
import { guardWatches } from "../../src/cluster/watch-guard.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { startTestNode } from "../helpers/cluster-node.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";
import { waitFor } from "../helpers/replication.ts";

const prefix = "/es-broker";
const checkMs = 300;
const graceMs = 100;
/** Ample for one check period and the grace, on a loaded machine. */
const within = 10 * (checkMs + graceMs);

function state(leaderEpoch: number): PartitionState {
  return {
    replicas: [1, 2, 3],
    leader: 1,
    leader_epoch: leaderEpoch,
    isr: [1, 2, 3],
    elr: [],
    committed_offset: 0,
    min_insync_replicas: 1,
  };
}

function registration(nodeId: number): string {
  return JSON.stringify({
    node_id: nodeId,
    cluster_id: "c1",
    data_dir_id: `dir-${nodeId}`,
    incarnation: `inc-${nodeId}`,
    tcp: `127.0.0.1:${9000 + nodeId}`,
    http: `http://127.0.0.1:${8000 + nodeId}`,
  });
}

async function startNode(asController = false) {
  const fake = new FakeEtcd();
  // Another broker is the controller (a key on no lease): this node's controller stays idle.
  if (!asController)
    await fake.put(controllerKey(prefix), JSON.stringify({ node_id: 9, incarnation: "x" }));
  await fake.put(topicKey(prefix, "t"), JSON.stringify({ replication_factor: 3 }));
  await fake.put(partitionKey(prefix, "t", 0), formatPartitionState(state(1)));
  await fake.put(`${prefix}/brokers/2`, registration(2));
  const logger = new MemoryLogger();
  const etcd = guardWatches(fake, { clock: systemClock, logger, checkMs, graceMs });
  const { node, applied } = await startTestNode({
    etcd,
    logger,
    resyncMs: 3_600_000,
    lapseGraceMs: 0,
  });
  await waitFor(() => applied.includes("t/0@1 leader 1"), "t/0 applied at the start");
  await waitFor(() => node.brokers.has(2), "node 2's registration seen");
  const controller = asController ? 1 : 9;
  await waitFor(
    () => node.controller.current?.node_id === controller,
    `node ${controller} seen as the controller`,
  );
  // As the controller: its first pass has recorded node 2's incarnation.
  if (asController)
    await waitFor(
      async () => (await fake.get(incarnationsKey(prefix)))?.value.includes('"2"') === true,
      "node 2's incarnation recorded",
    );
  // Every watch the node opened (its view of the prefix, the controller key) is deaf from now on.
  expect(fake.deafenWatches()).toBeGreaterThanOrEqual(2);
  const deaf = () => logger.named("etcd.watch_deaf");
  return { fake, node, applied, deaf };
}

describe("a node whose etcd watches all went deaf (attack15 F6)", () => {
  it("applies a partition-state change within a check period", async () => {
    const { fake, applied, deaf } = await startNode();
    await fake.put(partitionKey(prefix, "t", 0), formatPartitionState(state(2)));
    await waitFor(() => applied.includes("t/0@2 leader 1"), "t/0's new state applied", within);
    expect(deaf().length).toBeGreaterThanOrEqual(1);
    // At least the state's put; a broker holding a copy may also have given the topic an id.
    expect(deaf()[0]).toMatchObject({ key: `${prefix}/`, prefix: true });
    expect(deaf()[0].missed_puts).toBeGreaterThanOrEqual(1);
  });

  it("creates a topic made in etcd within a check period", async () => {
    const { fake, node, applied } = await startNode();
    await fake.put(topicKey(prefix, "fresh"), JSON.stringify({ replication_factor: 3 }));
    await fake.put(partitionKey(prefix, "fresh", 0), formatPartitionState(state(1)));
    await waitFor(() => applied.includes("fresh/0@1 leader 1"), "fresh/0 applied", within);
    expect(node.topicConfig("fresh")).toMatchObject({ replication_factor: 3 });
  });

  it("forgets a deleted registration within a check period", async () => {
    const { fake, node, deaf } = await startNode();
    await fake.delete(`${prefix}/brokers/2`);
    await waitFor(() => !node.brokers.has(2), "node 2's registration gone", within);
    expect(deaf()[0]).toMatchObject({ missed_deletes: 1 });
  });

  it("as the controller, runs a pass on a registration's deletion within a check period", async () => {
    const { fake, deaf } = await startNode(true);
    await fake.delete(`${prefix}/brokers/2`);
    // The pass records the brokers it acted on: node 2 is gone from them.
    await waitFor(
      async () => {
        const kv = await fake.get(incarnationsKey(prefix));
        return kv !== null && !kv.value.includes('"2"');
      },
      "a controller pass without node 2",
      within,
    );
    // Both the node's and the controller's watch of the prefix missed it.
    expect(deaf().filter((d) => d.key === `${prefix}/`).length).toBe(2);
  });

  it("sees another controller within a check period, its controller resync an hour away", async () => {
    const { fake, node } = await startNode();
    await fake.put(controllerKey(prefix), JSON.stringify({ node_id: 8, incarnation: "y" }));
    await waitFor(() => node.controller.current?.node_id === 8, "node 8 as controller", within);
  });
});
