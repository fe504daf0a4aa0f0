/**
 * cluster/node.ts on an in-memory etcd (test/helpers/fake-etcd.ts), attack11 F4: a broker whose
 * node id another process registered while its lease was lost stops replicating at once and asks
 * to be shut down; a broker that cannot apply a leadership (its storage fails) gives it up in
 * etcd so the controller elects another replica. And attack11 F5: a cluster topic never adopts
 * a local topic's log (one made on a data directory before it joined).
 */
import { describe, expect, it, onTestFinished } from "vitest";
import type { Broker } from "../../src/broker/types.ts";
import { clusterBroker } from "../../src/cluster/cluster-broker.ts";
import { EtcdError } from "../../src/cluster/etcd.ts";
import { controllerKey, logEndsKey, partitionKey } from "../../src/cluster/keys.ts";
import { joinCluster } from "../../src/cluster/membership.ts";
import { ClusterNode, type ReplicaSink } from "../../src/cluster/node.ts";
import {
  formatPartitionState,
  type PartitionState,
  parsePartitionState,
} from "../../src/cluster/partition-state.ts";
import { defaultTopicConfig } from "../../src/broker/config.ts";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";
import { waitFor } from "../helpers/replication.ts";

const prefix = "/es-broker";

/** A replication layer that records what the node asks of it; `fail` makes an apply throw. */
function sink(fail?: (topic: string, partition: number) => Error | null) {
  const calls = { applied: [] as string[], closed: 0 };
  const replicas: ReplicaSink = {
    setBrokers() {},
    async applyPartitionState(topic, partition, state) {
      const err = fail?.(topic, partition) ?? null;
      if (err !== null) throw err;
      calls.applied.push(`${topic}/${partition}@${state.leader_epoch}`);
    },
    logEndOffsets: () => new Map(),
    setMembershipLive() {},
    async close() {
      calls.closed++;
    },
  };
  return { replicas, calls };
}

async function startNode(
  etcd: FakeEtcd,
  broker: Broker,
  replicas: ReplicaSink,
  onRefused?: (err: Error) => void,
  nodeId = 1,
) {
  const logger = new MemoryLogger();
  const node = await ClusterNode.start({
    etcd,
    clock: systemClock,
    prng: new Prng(nodeId),
    logger,
    prefix,
    nodeId,
    advertise: { tcp: `127.0.0.1:${9000 + nodeId}`, http: `http://127.0.0.1:${8000 + nodeId}` },
    dataDirId: `dir-old-${nodeId}`,
    dataDir: null,
    newClusterId: "c1",
    leaseTtlSeconds: 1,
    broker,
    replicas: () => replicas,
    rebalanceMs: 0,
    onRefused,
  });
  onTestFinished(() => node.close());
  return { node, logger };
}

describe("cluster node: a duplicate node id and a leadership it cannot take (attack11 F4)", () => {
  it("a refused registration stops replication at once and reports it for shutdown", async () => {
    const etcd = new FakeEtcd();
    const { broker } = await openTestBroker();
    const { replicas, calls } = sink();
    const refusals: Error[] = [];
    const { node } = await startNode(etcd, broker, replicas, (err) => refusals.push(err));
    // Paused past its lease: etcd drops it and a replacement registers as node 1.
    await etcd.leaseRevoke(node.membership.leaseId);
    const replacement = await joinCluster({
      etcd,
      clock: systemClock,
      prng: new Prng(2),
      logger: new MemoryLogger(),
      prefix,
      nodeId: 1,
      advertise: { tcp: "127.0.0.1:9101", http: "http://127.0.0.1:8101" },
      dataDirId: "dir-new",
      dataDir: null,
      newClusterId: "ignored",
      leaseTtlSeconds: 30,
    });
    onTestFinished(async () => void (await replacement.close()));
    await node.membership.checkNow();
    await waitFor(() => refusals.length === 1, "the refusal to be reported");
    expect(calls.closed).toBe(1);
    // Its own message, not the starting broker's advice (attack15 F7).
    expect(refusals[0].message).toMatch(
      /^Node 1 was taken over by a broker on another data directory \(tcp 127\.0\.0\.1:9101, http http:\/\/127\.0\.0\.1:8101\) while this process could not renew its registration/,
    );
    expect(refusals[0].message).toContain("Keep this data directory");
    expect(refusals[0].message).not.toContain("--node-id");
    expect(node.membership.refused).not.toBeNull();
  });

  it("a leadership whose apply fails is given up in etcd, in a new epoch, and other partitions still apply", async () => {
    const etcd = new FakeEtcd();
    const { broker } = await openTestBroker();
    const enospc = Object.assign(new Error("ENOSPC: no space left on device"), { code: "ENOSPC" });
    const { replicas, calls } = sink((_t, p) => (p === 0 ? enospc : null));
    const state: PartitionState = {
      replicas: [1, 2, 3],
      leader: 1,
      leader_epoch: 6,
      isr: [1],
      elr: [2, 3],
      committed_offset: 3737,
      min_insync_replicas: 2,
    };
    await etcd.put(
      `${prefix}/topics/c`,
      JSON.stringify({ replication_factor: 3, min_insync_replicas: 2 }),
    );
    await etcd.put(partitionKey(prefix, "c", 0), formatPartitionState(state));
    await etcd.put(partitionKey(prefix, "c", 1), formatPartitionState(state));
    const { logger } = await startNode(etcd, broker, replicas);
    await waitFor(async () => {
      const kv = await etcd.get(partitionKey(prefix, "c", 0));
      return kv !== null && parsePartitionState(kv.key, kv.value).leader === -1;
    }, "the leadership of c/0 to be given up");
    const kv = (await etcd.get(partitionKey(prefix, "c", 0)))!;
    expect(parsePartitionState(kv.key, kv.value)).toEqual({
      ...state,
      leader: -1,
      leader_epoch: 7,
      isr: [],
      elr: [1, 2, 3],
    });
    expect(calls.applied).toContain("c/1@6");
    expect(logger.named("cluster.apply_failed")[0]).toMatchObject({
      partition: "c/0",
      action: "leadership given up",
    });
  });
});

describe("cluster node: a leadership given up beside a gone ISR member (attack13 F1 B)", () => {
  it("the ISR members not registered leave with it, and both join the ELR below min ISR", async () => {
    const etcd = new FakeEtcd();
    // Another broker is the controller (a key that never expires): this node's own controller
    // stays idle, so only the leader's give-up writes the state.
    await etcd.put(controllerKey(prefix), JSON.stringify({ node_id: 9, incarnation: "x" }));
    const { broker } = await openTestBroker();
    const eio = Object.assign(new Error("EIO: i/o error"), { code: "EIO" });
    const { replicas } = sink((t) => (t === "g" ? eio : null));
    await startNode(etcd, broker, replicas);
    await etcd.put(
      `${prefix}/topics/g`,
      JSON.stringify({ replication_factor: 3, min_insync_replicas: 1 }),
    );
    // Node 2 is in the ISR but not registered (killed; the controller has not acted yet).
    const state: PartitionState = {
      replicas: [1, 2, 3],
      leader: 1,
      leader_epoch: 2,
      isr: [1, 2],
      elr: [],
      committed_offset: 0,
      min_insync_replicas: 1,
    };
    await etcd.put(partitionKey(prefix, "g", 0), formatPartitionState(state));
    await waitFor(async () => {
      const kv = await etcd.get(partitionKey(prefix, "g", 0));
      return kv !== null && parsePartitionState(kv.key, kv.value).leader === -1;
    }, "the leadership of g/0 to be given up");
    const kv = (await etcd.get(partitionKey(prefix, "g", 0)))!;
    // Leaving alone would have left ISR [2] and node 1, holding every record, in neither list.
    expect(parsePartitionState(kv.key, kv.value)).toEqual({
      ...state,
      leader: -1,
      leader_epoch: 3,
      isr: [],
      elr: [1, 2],
    });
  });
});

describe("cluster node: log ends of an ELR member that cannot apply (attack13 F1 B)", () => {
  it("an offline state naming it in the ELR is answered with its log ends even when its apply fails", async () => {
    const etcd = new FakeEtcd();
    const { broker } = await openTestBroker();
    const eio = Object.assign(new Error("EIO: i/o error"), { code: "EIO" });
    const { replicas } = sink((t) => (t === "h" ? eio : null));
    const { logger } = await startNode(etcd, broker, replicas);
    await etcd.put(
      `${prefix}/topics/h`,
      JSON.stringify({ replication_factor: 3, min_insync_replicas: 2 }),
    );
    const offline: PartitionState = {
      replicas: [1, 2, 3],
      leader: -1,
      leader_epoch: 3,
      isr: [],
      elr: [1, 2, 3],
      committed_offset: 0,
      min_insync_replicas: 2,
    };
    const revision = await etcd.put(partitionKey(prefix, "h", 0), formatPartitionState(offline));
    // An ELR election waits for every member's log end published after the state: one that
    // never came would keep nodes 2 and 3 from ever leading.
    await waitFor(async () => {
      const kv = await etcd.get(logEndsKey(prefix, 1));
      return kv !== null && kv.modRevision > revision;
    }, "node 1 to publish its log ends after the offline state");
    expect(logger.named("cluster.apply_failed")[0]).toMatchObject({ partition: "h/0" });
  });
});

describe("cluster node: a local topic's name (attack11 F5)", () => {
  /** Node 1's broker holds a local topic "t" with 10 records, made before it joined. */
  async function withLocalTopic() {
    const etcd = new FakeEtcd();
    const { broker } = await openTestBroker();
    await broker.createTopic({ name: "t", partitions: 1, config: {} });
    const batch = new EntryBatchBuilder();
    for (let i = 0; i < 10; i++) batch.add(null, new TextEncoder().encode("h"));
    await broker.produce({ topic: "t", partition: 0, batch: batch.build() });
    const one = sink();
    const a = await startNode(etcd, broker, one.replicas, undefined, 1);
    const { broker: other } = await openTestBroker();
    const two = sink();
    const b = await startNode(etcd, other, two.replicas, undefined, 2);
    return { etcd, broker, a, b, one };
  }

  it("a cluster topic of a local topic's name is refused on every broker, naming the one holding it", async () => {
    const { a, b } = await withLocalTopic();
    expect(a.logger.named("cluster.local_topics")[0]).toMatchObject({ topics: ["t"] });
    for (const node of [a.node, b.node]) {
      const err = await node
        .createTopic("t", 1, { ...defaultTopicConfig })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BrokerError);
      expect((err as BrokerError).kind).toBe(Errors.topicExists);
      expect((err as BrokerError).message).toMatch(
        /Cannot create topic "t": node 1 holds a local topic of that name, made on its data directory before it joined the cluster/,
      );
    }
    // Other names are fine.
    await b.node.createTopic("u", 1, { ...defaultTopicConfig });
  });

  it("a cluster topic of that name made anyway is never adopted: no replica here, leadership handed on, the local log kept", async () => {
    const { etcd, broker, a, one } = await withLocalTopic();
    const state: PartitionState = {
      replicas: [1, 2],
      leader: 1,
      leader_epoch: 0,
      isr: [1, 2],
      elr: [],
      committed_offset: 0,
      min_insync_replicas: 2,
    };
    await etcd.put(
      `${prefix}/topics/t`,
      JSON.stringify({ replication_factor: 2, min_insync_replicas: 2 }),
    );
    await etcd.put(partitionKey(prefix, "t", 0), formatPartitionState(state));
    await waitFor(async () => {
      const kv = await etcd.get(partitionKey(prefix, "t", 0));
      const s = kv === null ? null : parsePartitionState(kv.key, kv.value);
      return s !== null && s.leader !== 1 && !s.isr.includes(1) && !s.elr.includes(1);
    }, "node 1 to hand on t/0 and stay out of its ISR and ELR");
    expect(a.logger.named("cluster.topic_conflict")).toHaveLength(1);
    expect(one.calls.applied.filter((c) => c.startsWith("t/"))).toEqual([]);
    expect((await broker.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(10);
    // Its local log is no claim to lead the cluster topic.
    const ends = JSON.parse((await etcd.get(`${prefix}/log_ends/1`))!.value);
    expect(ends.log_end_offsets["t/0"]).toBeUndefined();
    expect(ends.local_topics).toEqual(["t"]);
  });
});

describe("cluster node: a local cluster topic etcd does not know (newuser15 #0)", () => {
  it("keeps one etcd never heard of (a restored snapshot), deletes one etcd records as deleted", async () => {
    const etcd = new FakeEtcd();
    const { broker } = await openTestBroker();
    const { replicas } = sink();
    const first = await startNode(etcd, broker, replicas);
    // Node 1 alone: a topic of replication factor 1 on it.
    await first.node.createTopic("restored-away", 1, { ...defaultTopicConfig });
    await first.node.createTopic("deleted-while-down", 1, { ...defaultTopicConfig });
    await waitFor(
      async () => (await broker.listTopics()).length === 2,
      "both topics to exist on the broker",
    );
    await first.node.close();
    // While node 1 is down: one topic deleted through the cluster (another broker), which
    // records the deletion; the other vanishes as etcd restored from an older snapshot would.
    await etcd.delete(`${prefix}/topics/deleted-while-down`);
    await etcd.delete(`${prefix}/partitions/deleted-while-down/`, { prefix: true });
    await etcd.put(`${prefix}/deleted_topics/deleted-while-down`, "{}");
    await etcd.delete(`${prefix}/topics/restored-away`);
    await etcd.delete(`${prefix}/partitions/restored-away/`, { prefix: true });
    const again = await startNode(etcd, broker, replicas);
    await waitFor(
      async () => !(await broker.listTopics()).some((t) => t.name === "deleted-while-down"),
      "the deleted topic to be deleted here",
    );
    expect((await broker.listTopics()).map((t) => t.name)).toEqual(["restored-away"]);
    expect(again.logger.named("cluster.topic_unknown")).toMatchObject([
      { topic: "restored-away", action: expect.stringMatching(/its files are kept/) },
    ]);
    // Not a topic of the cluster: listed nowhere, served to no one, and Metadata of every topic
    // still answers (attack15b F8: one kept topic made topics list and cluster status fail).
    expect(again.node.isUnknownTopic("restored-away")).toBe(true);
    const front = clusterBroker(broker, again.node);
    const listed = await front.listTopics();
    expect(listed.map((t) => t.name)).toEqual([]);
    await front.clusterMetadata!(listed.map((t) => t.name));
    await expect(front.describeTopic("restored-away")).rejects.toMatchObject({
      kind: Errors.topicNotFound,
      message: expect.stringMatching(/etcd does not know it .*keeps files/),
    });
    await expect(
      front.fetch({ topic: "restored-away", partition: 0, offset: 0 }),
    ).rejects.toMatchObject({ kind: Errors.topicNotFound });
    // A new topic of that name would take the kept files for its own: refused, saying why.
    await expect(
      again.node.createTopic("restored-away", 1, { ...defaultTopicConfig }),
    ).rejects.toMatchObject({
      kind: Errors.topicExists,
      message: expect.stringMatching(
        /node 1 keeps the files of a topic of that name that etcd does not know/,
      ),
    });
    // Created again: the record of its deletion goes in the same transaction.
    await again.node.createTopic("deleted-while-down", 1, { ...defaultTopicConfig });
    expect(await etcd.get(`${prefix}/deleted_topics/deleted-while-down`)).toBeNull();
    // Deleted through the cluster while running: recorded, and deleted here.
    await again.node.deleteTopic("deleted-while-down");
    expect(await etcd.get(`${prefix}/deleted_topics/deleted-while-down`)).not.toBeNull();
    await waitFor(
      async () => !(await broker.listTopics()).some((t) => t.name === "deleted-while-down"),
      "the topic to be deleted here",
    );
  });
});

describe("cluster node: its log ends for an ELR election (attack13 F1 B)", () => {
  /** A FakeEtcd whose next `failLogEnds` puts of a `log_ends/` key fail as if etcd were down. */
  class FlakyEtcd extends FakeEtcd {
    failLogEnds = 0;
    override async put(key: string, value: string, options: { lease?: string } = {}) {
      if (key.includes("/log_ends/") && this.failLogEnds > 0) {
        this.failLogEnds--;
        throw new EtcdError("unavailable", "put: no endpoint answered");
      }
      return super.put(key, value, options);
    }
  }

  it("publishes them again on an offline state naming it in the ELR, retrying until etcd takes them", async () => {
    const etcd = new FlakyEtcd();
    const { broker } = await openTestBroker();
    const { replicas } = sink();
    replicas.logEndOffsets = () => new Map([["e/0", 42]]);
    const { logger } = await startNode(etcd, broker, replicas);
    await etcd.put(
      `${prefix}/topics/e`,
      JSON.stringify({ replication_factor: 3, min_insync_replicas: 2 }),
    );
    etcd.failLogEnds = 2;
    // The partition lost its ISR; node 1 is eligible, node 2 (never registered) too.
    const offline: PartitionState = {
      replicas: [1, 2, 3],
      leader: -1,
      leader_epoch: 4,
      isr: [],
      elr: [1, 2],
      committed_offset: 40,
      min_insync_replicas: 2,
    };
    const revision = await etcd.put(partitionKey(prefix, "e", 0), formatPartitionState(offline));
    // The controller elects from the ELR only by log ends published after this revision.
    await waitFor(async () => {
      const kv = await etcd.get(logEndsKey(prefix, 1));
      return kv !== null && kv.modRevision > revision;
    }, "node 1 to publish its log ends after the offline state");
    expect(etcd.failLogEnds).toBe(0);
    expect(logger.named("cluster.log_ends_failed")).toMatchObject([
      { action: "tried again in 1 s" },
      { action: "tried again in 1 s" },
    ]);
    const kv = (await etcd.get(logEndsKey(prefix, 1)))!;
    expect(JSON.parse(kv.value).log_end_offsets).toEqual({ "e/0": 42 });
  });
});

describe("cluster node: a topic config in etcd without every key", () => {
  it("takes the defaults for keys it lacks and goes on applying the partition states", async () => {
    const etcd = new FakeEtcd();
    const { broker } = await openTestBroker();
    const { replicas, calls } = sink();
    // As written by an older version, or by hand: only the replication keys.
    await etcd.put(
      `${prefix}/topics/p`,
      JSON.stringify({ replication_factor: 1, min_insync_replicas: 1 }),
    );
    const state: PartitionState = {
      replicas: [1],
      leader: 1,
      leader_epoch: 0,
      isr: [1],
      elr: [],
      committed_offset: 0,
      min_insync_replicas: 1,
    };
    await etcd.put(partitionKey(prefix, "p", 0), formatPartitionState(state));
    const { logger } = await startNode(etcd, broker, replicas);
    await waitFor(() => calls.applied.includes("p/0@0"), "p/0 applied");
    // A later state of the partition is applied too (before, every later reconcile of the
    // topic threw on "segment_bytes": null and applied nothing more).
    await etcd.put(
      partitionKey(prefix, "p", 0),
      formatPartitionState({ ...state, leader_epoch: 1 }),
    );
    await waitFor(() => calls.applied.includes("p/0@1"), "p/0 at epoch 1 applied");
    expect(logger.named("cluster.apply_failed")).toEqual([]);
    expect(logger.named("cluster.topic_config_failed")).toEqual([]);
    expect((await broker.describeTopic("p")).config.segment_bytes).toBe(
      defaultTopicConfig.segment_bytes,
    );
  });
});
