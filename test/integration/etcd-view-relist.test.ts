/**
 * cluster/node.ts on a real etcd (one member) whose watch, as etcd 3.4's lost-event bugs do
 * (etcd-io/etcd#18089; attack16 F1), drops the events of one topic's deletion and re-creation and
 * delivers later ones: the node's periodic comparison (docs/cluster.md "A watch that goes deaf"),
 * a keys-only range through the real client, replaces the old copy within a period (500 ms here).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Etcd, EtcdEvent } from "../../src/cluster/etcd.ts";
import { controllerKey, deletedTopicKey, partitionKey, topicKey } from "../../src/cluster/keys.ts";
import { ClusterNode, type ReplicaSink } from "../../src/cluster/node.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { readJsonFile } from "../../src/storage/metadata.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";
import { createTestTopic, deleteTestTopic, testPartitionState } from "../helpers/cluster-topics.ts";
import { waitFor } from "../helpers/replication.ts";

let cluster: EtcdCluster;

beforeAll(async () => {
  cluster = await startEtcdCluster({ size: 1 });
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

const prefix = `/es-broker-relist-${process.pid}`;
const relistMs = 500;
const idA = "a".repeat(32);
const idB = "b".repeat(32);

const _state = testPartitionState;
const createTopic = (etcd: Pick<Etcd, "txn">, name: string, topicId: string) =>
  createTestTopic(etcd, prefix, name, topicId);
const deleteTopic = (etcd: Pick<Etcd, "txn">, name: string) => deleteTestTopic(etcd, prefix, name);

describe("a node on a real etcd whose watch dropped a topic's deletion and re-creation", () => {
  it("replaces the old copy within a comparison period", async () => {
    const client = new EtcdHttpClient(cluster.endpoints, { requestTimeoutMs: 5000 });
    await client.put(controllerKey(prefix), JSON.stringify({ node_id: 9, incarnation: "x" }));
    await createTopic(client, "t", idA);
    // The node's watches skip every event of `t`'s keys while `dropping`.
    let dropping = false;
    const dropped: EtcdEvent[] = [];
    const ofT = (key: string) =>
      key === topicKey(prefix, "t") ||
      key === partitionKey(prefix, "t", 0) ||
      key === deletedTopicKey(prefix, "t");
    const etcd: Etcd = new Proxy(client, {
      get: (target, name) => {
        if (name === "watch")
          return (r: Parameters<Etcd["watch"]>[0], h: Parameters<Etcd["watch"]>[1]) =>
            target.watch(r, {
              ...h,
              onEvents: (events) => {
                const kept = events.filter((e) => !(dropping && ofT(e.kv.key)));
                dropped.push(...events.filter((e) => !kept.includes(e)));
                if (kept.length > 0) h.onEvents(kept);
              },
            });
        const v = Reflect.get(target, name);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
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
      prng: new Prng(5),
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
      relistMs,
      relistGraceMs: 100,
    });
    try {
      await waitFor(() => applied.includes("t/0@0 leader 2"), "t/0 applied at the start");
      const topicId = async () => {
        const read = await readJsonFile(t.fs, `${t.dataDir}/topics/t/topic.json`);
        return "value" in read ? (read.value as { topic_id?: string }).topic_id : undefined;
      };
      expect(await topicId()).toBe(idA);
      dropping = true;
      await deleteTopic(client, "t");
      await createTopic(client, "t", idB);
      await createTopic(client, "later", idA);
      await waitFor(() => applied.includes("later/0@0 leader 2"), "a later event delivered");
      expect(dropped.length).toBeGreaterThanOrEqual(4);
      await waitFor(
        () => logger.named("cluster.topic_incarnation_replaced").length === 1,
        "the old copy replaced",
        20 * relistMs,
      );
      expect(await topicId()).toBe(idB);
      expect(logger.named("etcd.view_repaired")).toEqual([
        expect.objectContaining({
          keys: [partitionKey(prefix, "t", 0), topicKey(prefix, "t")].sort(),
        }),
      ]);
    } finally {
      await node.close();
    }
  }, 60_000);
});
