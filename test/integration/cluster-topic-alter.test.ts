/**
 * Concurrent topic config changes through different brokers (docs/http-api.md
 * "`PATCH /v1/topics/{topic}` — change a topic's config"; attack F4: of three PATCHes of
 * different keys sent at once to three brokers, one was answered 503 "it changed meanwhile"):
 * each PATCH names only the keys it changes, so a broker whose compare-and-set lost reads the
 * topic again from etcd and applies its patch to that. Three cluster brokers (cluster/node.ts,
 * cluster/cluster-broker.ts) on one in-memory etcd (test/helpers/fake-etcd.ts).
 */
import { describe, expect, it, onTestFinished } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import type { Broker } from "../../src/broker/types.ts";
import { clusterBroker } from "../../src/cluster/cluster-broker.ts";
import { ClusterNode, type ReplicaSink, topicConfigAttempts } from "../../src/cluster/node.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { FakeEtcd, until } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";

const replicas: ReplicaSink = {
  setBrokers() {},
  async applyPartitionState() {},
  logEndOffsets: () => new Map(),
  setMembershipLive() {},
  async close() {},
};

/** Three cluster brokers on `etcd`, holding topic `t` (1 partition, a replica on each). */
async function threeBrokers(etcd: FakeEtcd): Promise<{ fronts: Broker[]; locals: LocalBroker[] }> {
  const fronts: Broker[] = [];
  const locals: LocalBroker[] = [];
  const nodes: ClusterNode[] = [];
  for (const nodeId of [1, 2, 3]) {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    const node = await ClusterNode.start({
      etcd,
      clock: systemClock,
      prng: new Prng(nodeId),
      logger: new MemoryLogger(),
      prefix,
      nodeId,
      advertise: { tcp: `127.0.0.1:${9000 + nodeId}`, http: `http://127.0.0.1:${8000 + nodeId}` },
      dataDirId: `dir-${nodeId}`,
      dataDir: null,
      newClusterId: "c1",
      leaseTtlSeconds: 30,
      broker,
      replicas: () => replicas,
      rebalanceMs: 0,
    });
    onTestFinished(() => node.close());
    fronts.push(clusterBroker(broker, node));
    locals.push(broker);
    nodes.push(node);
  }
  await until("every broker to see the others", () => nodes.every((n) => n.brokers.size === 3));
  await fronts[0].createTopic({ name: "t", partitions: 1, config: { replication_factor: 3 } });
  await until("every broker to create t", async () => {
    for (const b of locals) if ((await b.listTopics()).every((t) => t.name !== "t")) return false;
    return true;
  });
  return { fronts, locals };
}

const stored = async (etcd: FakeEtcd) =>
  JSON.parse((await etcd.get(`${prefix}/topics/t`))!.value) as Record<string, unknown>;

describe("concurrent topic config changes through different brokers (attack F4)", () => {
  it("lands every patch of a different key, none undoing another", async () => {
    const etcd = new FakeEtcd();
    const { fronts, locals } = await threeBrokers(etcd);
    const keys = ["retention_ms", "tombstone_retention_ms", "segment_ms"];
    for (let round = 1; round <= 4; round++) {
      // Sent together: the second and third meet the first's change, which their brokers'
      // watches have not brought yet.
      const answers = await Promise.all(
        keys.map((key, i) =>
          fronts[i].updateTopicConfig!("t", { [key]: (i + 1) * 10_000_000 + round }),
        ),
      );
      for (const [i, answer] of answers.entries())
        expect(answer.config[keys[i] as keyof typeof answer.config]).toBe(
          (i + 1) * 10_000_000 + round,
        );
      expect(await stored(etcd)).toMatchObject({
        retention_ms: 10_000_000 + round,
        tombstone_retention_ms: 20_000_000 + round,
        segment_ms: 30_000_000 + round,
        replication_factor: 3,
      });
    }

    // All at once, with every watch held: six patches from three stale copies.
    etcd.holdWatches();
    const six = [
      [0, "retention_ms", 111_111],
      [1, "tombstone_retention_ms", 222_222],
      [2, "segment_ms", 333_333],
      [0, "retention_bytes", 444_444],
      [1, "segment_bytes", 555_555],
      [2, "replica_lag_ms", 6_666],
    ] as const;
    const pending = six.map(([i, key, value]) =>
      fronts[i].updateTopicConfig!("t", { [key]: value }),
    );
    etcd.releaseWatches();
    await Promise.all(pending);
    const want = Object.fromEntries(six.map(([, key, value]) => [key, value]));
    expect(await stored(etcd)).toMatchObject(want);
    await until("every broker to apply the last change", async () => {
      for (const b of locals)
        if (
          Object.entries(want).some(
            ([k, v]) => (b.topicConfig("t") as unknown as Record<string, unknown>)[k] !== v,
          )
        )
          return false;
      return true;
    });
  });

  it("answers 409 concurrent_update, storing nothing of it, when other changes keep landing first", async () => {
    const etcd = new FakeEtcd();
    const { fronts } = await threeBrokers(etcd);
    // Another writer changes the topic just before each of this broker's puts of it.
    const txn = etcd.txn.bind(etcd);
    let competing = 0;
    etcd.txn = async (request) => {
      const putsTopic = request.success.some(
        (op) => "put" in op && op.put.key === `${prefix}/topics/t`,
      );
      if (putsTopic) {
        competing++;
        const config = await stored(etcd);
        await etcd.put(`${prefix}/topics/t`, JSON.stringify({ ...config, segment_ms: competing }));
      }
      return txn(request);
    };
    const refused = await fronts[1].updateTopicConfig!("t", { retention_ms: 123_456 }).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(BrokerError);
    expect((refused as BrokerError).kind).toBe(Errors.concurrentUpdate);
    expect((refused as BrokerError).kind.http).toBe(409);
    expect((refused as BrokerError).kind.retriable).toBe(true);
    expect((refused as Error).message).toMatch(
      /^Cannot change topic "t": other changes to its config landed first \d+ times in a row; send the change again$/,
    );
    expect(competing).toBe(topicConfigAttempts);
    const after = await stored(etcd);
    expect(after.retention_ms).not.toBe(123_456);
    expect(after.segment_ms).toBe(topicConfigAttempts);
  });

  it("refuses a fixed key against etcd's current config, and a topic deleted meanwhile is not found", async () => {
    const etcd = new FakeEtcd();
    const { fronts } = await threeBrokers(etcd);
    const refused = await fronts[2].updateTopicConfig!("t", { replication_factor: 2 }).catch(
      (e: unknown) => e,
    );
    expect((refused as BrokerError).kind).toBe(Errors.invalidConfig);
    expect((refused as Error).message).toMatch(/"replication_factor": it is fixed .* \(3\)/);

    // Deleted in etcd after this broker read it (its watch held): topic_not_found, not a retry loop.
    etcd.holdWatches();
    await etcd.delete(`${prefix}/topics/t`);
    const gone = await fronts[1].updateTopicConfig!("t", { retention_ms: 5_000 }).catch(
      (e: unknown) => e,
    );
    etcd.releaseWatches();
    expect((gone as BrokerError).kind).toBe(Errors.topicNotFound);
    expect(etcd.kvs.has(`${prefix}/topics/t`)).toBe(false);
  });
});
