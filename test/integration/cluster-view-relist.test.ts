/**
 * cluster/node.ts on an in-memory etcd (test/helpers/fake-etcd.ts) whose watch drops single
 * revisions and keeps delivering later ones (etcd 3.4's lost-event bugs; attack16 F1), so the
 * watch guard has nothing to see: the node's periodic comparison of its view with etcd's keys
 * (docs/cluster.md "A watch that goes deaf") repairs a dropped deletion and re-creation of a
 * topic and a dropped put of a partition state within one period (here 300 ms, grace 50 ms), and
 * a comparison read before events still on their way never undoes them.
 */
import { describe, expect, it, onTestFinished } from "vitest";
import type { Etcd } from "../../src/cluster/etcd.ts";
import { controllerKey, partitionKey, topicKey } from "../../src/cluster/keys.ts";
import { ClusterNode, type ReplicaSink } from "../../src/cluster/node.ts";
import { formatPartitionState } from "../../src/cluster/partition-state.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { readJsonFile } from "../../src/storage/metadata.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { openTestBroker, type TestBroker } from "../helpers/broker.ts";
import { FakeEtcd, settle } from "../helpers/fake-etcd.ts";
import { createTestTopic, deleteTestTopic, testPartitionState } from "../helpers/cluster-topics.ts";
import { waitFor } from "../helpers/replication.ts";

const prefix = "/es-broker";
const relistMs = 300;
const relistGraceMs = 50;
/** Ample for one period and the grace, on a loaded machine. */
const within = 10 * (relistMs + relistGraceMs);
const idA = "a".repeat(32);
const idB = "b".repeat(32);

const state = testPartitionState;
const createTopic = (etcd: Pick<Etcd, "txn">, name: string, topicId: string) =>
  createTestTopic(etcd, prefix, name, topicId);
const deleteTopic = (etcd: Pick<Etcd, "txn">, name: string) => deleteTestTopic(etcd, prefix, name);

async function topicJson(t: TestBroker, name: string): Promise<Record<string, unknown>> {
  const read = await readJsonFile(t.fs, `${t.dataDir}/topics/${name}/topic.json`);
  if (!("value" in read)) throw new Error(`no topic.json for ${name}`);
  return read.value as Record<string, unknown>;
}

/** A node (id 1) replicating topic `t` (id A, one partition led by node 2), with 3 records in its copy. */
async function startNode(relist: number) {
  const etcd = new FakeEtcd();
  // Another broker is the controller (a key on no lease): this node's controller stays idle.
  await etcd.put(controllerKey(prefix), JSON.stringify({ node_id: 9, incarnation: "x" }));
  await createTopic(etcd, "t", idA);
  const logger = new MemoryLogger();
  const applied: string[] = [];
  const replicas: ReplicaSink = {
    setBrokers() {},
    async applyPartitionState(topic, partition, s) {
      applied.push(`${topic}/${partition}@${s.leader_epoch} leader ${s.leader}`);
    },
    logEndOffsets: () => new Map(),
    setMembershipLive() {},
    async close() {},
  };
  const t = await openTestBroker({ cleanupIntervalMs: 0 });
  const node = await ClusterNode.start({
    etcd,
    clock: systemClock,
    prng: new Prng(3),
    logger,
    prefix,
    nodeId: 1,
    advertise: { tcp: "127.0.0.1:9001", http: "http://127.0.0.1:8001" },
    dataDirId: "dir-1",
    dataDir: null,
    newClusterId: "c1",
    leaseTtlSeconds: 30,
    broker: t.broker,
    replicas: () => replicas,
    rebalanceMs: 0,
    resyncMs: 3_600_000,
    relistMs: relist,
    relistGraceMs,
  });
  onTestFinished(() => node.close());
  await waitFor(() => applied.includes("t/0@0 leader 2"), "t/0 applied at the start");
  const batch = new EntryBatchBuilder();
  for (let i = 0; i < 3; i++) batch.add(null, utf8(`old-${i}`));
  await t.broker.produce({ topic: "t", partition: 0, batch: batch.build() });
  expect((await topicJson(t, "t")).topic_id).toBe(idA);
  const repaired = () => logger.named("etcd.view_repaired");
  return { etcd, node, t, logger, applied, repaired };
}

/** Writes topic `later` (not dropped) and waits until the node has applied it: the watch lives on. */
async function laterEventDelivered(etcd: FakeEtcd, applied: string[]) {
  await createTopic(etcd, "later", idA);
  await waitFor(() => applied.includes("later/0@0 leader 2"), "a later event delivered");
}

describe("a view whose watch dropped single events (attack16 F1)", () => {
  it("a topic deleted and created again, both events dropped, is replaced within a period", async () => {
    const { etcd, t, logger, applied, repaired } = await startNode(relistMs);
    etcd.dropNextRevisions(2);
    await deleteTopic(etcd, "t");
    await createTopic(etcd, "t", idB);
    await laterEventDelivered(etcd, applied);
    await waitFor(
      () => logger.named("cluster.topic_incarnation_replaced").length === 1,
      "the old copy replaced",
      within,
    );
    expect(logger.named("cluster.topic_incarnation_replaced")[0]).toMatchObject({
      topic: "t",
      local_topic_id: idA,
      topic_id: idB,
    });
    expect((await topicJson(t, "t")).topic_id).toBe(idB);
    expect((await t.broker.describeTopic("t")).partitions[0].highWatermark).toBe(0);
    expect(repaired()).toHaveLength(1);
    expect(repaired()[0]).toMatchObject({
      keys: [partitionKey(prefix, "t", 0), topicKey(prefix, "t")].sort(),
    });
  });

  it("without the comparison (relistMs 0) the same drop leaves the old copy for good", async () => {
    const { etcd, t, logger, applied } = await startNode(0);
    etcd.dropNextRevisions(2);
    await deleteTopic(etcd, "t");
    await createTopic(etcd, "t", idB);
    await laterEventDelivered(etcd, applied);
    await new Promise((r) => setTimeout(r, relistMs + relistGraceMs));
    await settle();
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([]);
    expect((await topicJson(t, "t")).topic_id).toBe(idA);
  });

  it("a dropped put of a partition state is applied within a period", async () => {
    const { etcd, applied, repaired } = await startNode(relistMs);
    etcd.dropNextRevisions(1);
    await etcd.put(partitionKey(prefix, "t", 0), formatPartitionState(state(1, 1)));
    await laterEventDelivered(etcd, applied);
    expect(applied).not.toContain("t/0@1 leader 1");
    await waitFor(() => applied.includes("t/0@1 leader 1"), "t/0's new state applied", within);
    expect(repaired()).toEqual([expect.objectContaining({ keys: [partitionKey(prefix, "t", 0)] })]);
  });

  it("events older than a repair never undo it, and delivered changes are no repairs", async () => {
    const { etcd, applied, repaired } = await startNode(relistMs);
    // Held past the grace: the comparison repairs t/0 with epoch 2 first.
    etcd.holdWatches();
    await etcd.put(partitionKey(prefix, "t", 0), formatPartitionState(state(3, 1)));
    await etcd.put(partitionKey(prefix, "t", 0), formatPartitionState(state(1, 2)));
    await waitFor(() => applied.includes("t/0@2 leader 1"), "t/0's epoch 2 applied", within);
    expect(repaired()).toHaveLength(1);
    // The held events arrive late (epoch 1, then 2): neither is applied again.
    const before = applied.length;
    etcd.releaseWatches();
    await laterEventDelivered(etcd, applied);
    expect(applied.slice(before).filter((a) => a.startsWith("t/0@"))).toEqual([]);
    expect(applied).not.toContain("t/0@1 leader 3");
    // Changes the watch delivers are never called repairs.
    await etcd.put(partitionKey(prefix, "t", 0), formatPartitionState(state(2, 3)));
    await waitFor(() => applied.includes("t/0@3 leader 2"), "t/0's epoch 3 applied", within);
    await new Promise((r) => setTimeout(r, 2 * (relistMs + relistGraceMs)));
    expect(repaired()).toHaveLength(1);
  });
});
