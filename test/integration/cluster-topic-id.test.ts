/**
 * cluster/node.ts on an in-memory etcd (test/helpers/fake-etcd.ts), attack15b F5: a topic's
 * incarnation (docs/cluster.md "Topic ids"). A local copy whose topic id differs from the one
 * etcd holds for its name (the topic was deleted and created again while this broker was away)
 * is moved aside as a deleted topic's copy is, and an empty replica of the new topic takes its
 * place; its records are never served. A copy made before topic ids adopts the id an upgrade
 * added, and a topic etcd holds without an id is given one.
 */
import { describe, expect, it } from "vitest";
import { defaultTopicConfig } from "../../src/broker/config.ts";
import type { Broker, TopicConfig } from "../../src/broker/types.ts";
import { partitionKey, topicKey } from "../../src/cluster/keys.ts";
import type { ReplicaSink } from "../../src/cluster/node.ts";
import { formatPartitionState, initialPartitionState } from "../../src/cluster/partition-state.ts";
import { formatTopicRecord, parseTopicRecord } from "../../src/cluster/topic-id.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { Prng } from "../../src/lib/prng.ts";
import { readJsonFile } from "../../src/storage/metadata.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { openTestBroker, type TestBroker } from "../helpers/broker.ts";
import { recordingReplicas, startTestNode } from "../helpers/cluster-node.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";
import { waitFor } from "../helpers/replication.ts";

const prefix = "/es-broker";
/** A record's config as an older es-broker could have written it (two keys; the rest default). */
const config = {
  replication_factor: 3,
  min_insync_replicas: 2,
} as Partial<TopicConfig> as TopicConfig;
const idA = "a".repeat(32);
const idB = "b".repeat(32);

/** Node 1 on `etcd`, `broker` its local broker, handing every partition state to `replicas`. */
const startNode = (etcd: FakeEtcd, broker: Broker, replicas: ReplicaSink) =>
  startTestNode({ etcd, broker, replicas: () => replicas, prng: new Prng(7) });

/** Puts topic `name` in etcd (one partition, replicas 1,2,3 by default, led by node 2) with `record`'s id. */
async function putTopic(
  etcd: FakeEtcd,
  name: string,
  record: { topicId: string | null; origin?: "creation" | "upgrade" },
  epoch = 0,
  replicas = [1, 2, 3],
) {
  await etcd.txn({
    compare: [],
    success: [
      {
        put: {
          key: topicKey(prefix, name),
          value: formatTopicRecord({
            config,
            topicId: record.topicId,
            origin: record.origin ?? "creation",
          }),
        },
      },
      {
        put: {
          key: partitionKey(prefix, name, 0),
          value: formatPartitionState({
            ...initialPartitionState(replicas, 2),
            leader: 2,
            leader_epoch: epoch,
          }),
        },
      },
    ],
  });
}

/**
 * A local copy of cluster topic `name` holding `count` records, with topic id `topicId` taken
 * from a record etcd created at `revision`.
 */
async function localCopy(
  t: TestBroker,
  name: string,
  topicId: string | undefined,
  count = 3,
  revision?: number,
) {
  await t.broker.createTopic({
    name,
    partitions: 1,
    config: { ...config },
    ...(topicId === undefined ? {} : { topic_id: topicId }),
    ...(revision === undefined ? {} : { topic_revision: revision }),
  });
  const batch = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) batch.add(null, utf8(`old-${i}`));
  await t.broker.produce({ topic: name, partition: 0, batch: batch.build() });
}

async function topicJson(t: TestBroker, name: string): Promise<Record<string, unknown>> {
  const read = await readJsonFile(t.fs, `${t.dataDir}/topics/${name}/topic.json`);
  if (!("value" in read)) throw new Error(`no topic.json for ${name}`);
  return read.value as Record<string, unknown>;
}

async function highWatermark(broker: Broker, name: string): Promise<number> {
  return (await broker.describeTopic(name)).partitions[0].highWatermark;
}

describe("topic ids: a copy of another incarnation is moved aside (attack15b F5)", () => {
  it("a topic created through the node has one id in etcd and in the local topic.json, kept by config changes", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    const { replicas } = recordingReplicas();
    const { node } = await startNode(etcd, t.broker, replicas);
    const one = { ...defaultTopicConfig, replication_factor: 1, min_insync_replicas: 1 };
    await node.createTopic("fresh", 2, one);
    const kv = (await etcd.get(topicKey(prefix, "fresh")))!;
    const record = parseTopicRecord(kv.value);
    expect(record.topicId).toMatch(/^[0-9a-f]{32}$/);
    expect(record.origin).toBe("creation");
    expect(record.config).toEqual(one);
    await waitFor(async () => (await t.broker.listTopics()).length === 1, "the local copy");
    expect(await topicJson(t, "fresh")).toMatchObject({
      topic_id: record.topicId,
      topic_revision: kv.createRevision,
    });
    await node.updateTopicConfig("fresh", (c) => ({ ...c, retention_ms: 60_000 }));
    const changed = parseTopicRecord((await etcd.get(topicKey(prefix, "fresh")))!.value);
    expect(changed.topicId).toBe(record.topicId);
    expect(changed.config.retention_ms).toBe(60_000);
    await waitFor(
      async () => (await t.broker.describeTopic("fresh")).config.retention_ms === 60_000,
      "the local config change",
    );
    expect((await topicJson(t, "fresh")).topic_id).toBe(record.topicId);
    // A second topic of another name gets another id.
    await node.createTopic("other", 1, one);
    const other = parseTopicRecord((await etcd.get(topicKey(prefix, "other")))!.value);
    expect(other.topicId).not.toBe(record.topicId);
  });

  it("at start, a copy with another id is moved aside and an empty replica of the new topic follows", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "t8", idA);
    expect(await highWatermark(t.broker, "t8")).toBe(3);
    await putTopic(etcd, "t8", { topicId: idB });
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([
      expect.objectContaining({ topic: "t8", local_topic_id: idA, topic_id: idB }),
    ]);
    expect(await highWatermark(t.broker, "t8")).toBe(0);
    expect((await topicJson(t, "t8")).topic_id).toBe(idB);
    // Replication let go of the old copy's partition before the new one was handed over.
    expect(applied).toEqual(["t8/0@0 leader -1", "t8/0@0 leader 2"]);
    // Moved aside as a deleted topic's copy: through trash/, which is then emptied.
    expect(await t.fs.readdir(`${t.dataDir}/trash`).catch(() => [])).toEqual([]);
    const fetched = await t.broker.fetch({
      topic: "t8",
      partition: 0,
      offset: 0,
      maxRecords: 10,
      maxBytes: 1 << 20,
    });
    expect(fetched.records.count).toBe(0);
  });

  it("a copy with fewer partitions than the new topic is moved aside all the same (attack16 F5)", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "t14", idA);
    // The new t14 has three partitions, each with node 1 as a replica; the copy has one.
    await etcd.txn({
      compare: [],
      success: [
        {
          put: {
            key: topicKey(prefix, "t14"),
            value: formatTopicRecord({ config, topicId: idB, origin: "creation" }),
          },
        },
        ...[0, 1, 2].map((p) => ({
          put: {
            key: partitionKey(prefix, "t14", p),
            value: formatPartitionState({ ...initialPartitionState([1, 2, 3], 2), leader: 2 }),
          },
        })),
      ],
    });
    // As replication does: a partition the local topic lacks cannot be applied.
    const applied: string[] = [];
    const replicas: ReplicaSink = {
      setBrokers() {},
      async applyPartitionState(topic, partition, state) {
        const have = (await t.broker.describeTopic(topic)).partitions.length;
        if (partition >= have)
          throw new Error(`Cannot find partition ${partition} of topic "${topic}": it has ${have}`);
        applied.push(`${topic}/${partition} leader ${state.leader}`);
      },
      logEndOffsets: () => new Map(),
      setMembershipLive() {},
      async close() {},
    };
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(logger.named("cluster.topic_incarnation_replaced")).toHaveLength(1);
    expect(logger.named("cluster.apply_failed")).toEqual([]);
    expect((await t.broker.describeTopic("t14")).partitions).toHaveLength(3);
    expect((await topicJson(t, "t14")).topic_id).toBe(idB);
    expect(applied).toEqual([
      "t14/0 leader -1",
      "t14/0 leader 2",
      "t14/1 leader 2",
      "t14/2 leader 2",
    ]);
  });

  it("a copy of another incarnation on a broker holding no replica of the new topic is moved aside too (attack16 F2)", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "t2", idA);
    // The same incarnation, no replica here either: kept (no change from before).
    await localCopy(t, "kept2", idB);
    await putTopic(etcd, "t2", { topicId: idB }, 0, [2, 3, 4]);
    await putTopic(etcd, "kept2", { topicId: idB }, 0, [2, 3, 4]);
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    await waitFor(
      () => logger.named("cluster.topic_incarnation_replaced").length === 1,
      "t2's old copy moved aside",
    );
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([
      expect.objectContaining({ topic: "t2", local_topic_id: idA, topic_id: idB }),
    ]);
    // Gone, not replaced by a replica (none here): no log end of it can be published.
    const names = (await t.broker.listTopics()).map((x) => x.name);
    expect(names).not.toContain("t2");
    expect(names).toContain("kept2");
    expect(await highWatermark(t.broker, "kept2")).toBe(3);
    expect(await t.fs.readdir(`${t.dataDir}/trash`).catch(() => [])).toEqual([]);
    expect(applied).toEqual([]);
  });

  it("a copy without an id is another incarnation when etcd's id was made with the topic", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "t9", undefined);
    await putTopic(etcd, "t9", { topicId: idB, origin: "creation" });
    const { replicas } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([
      expect.objectContaining({ topic: "t9", local_topic_id: null, topic_id: idB }),
    ]);
    expect(await highWatermark(t.broker, "t9")).toBe(0);
    expect((await topicJson(t, "t9")).topic_id).toBe(idB);
  });

  it("a copy without an id adopts an id an upgrade added, keeping its records", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "old", undefined);
    await putTopic(etcd, "old", { topicId: idB, origin: "upgrade" });
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([]);
    expect(await highWatermark(t.broker, "old")).toBe(3);
    expect(await topicJson(t, "old")).toMatchObject({
      topic_id: idB,
      topic_revision: (await etcd.get(topicKey(prefix, "old")))!.createRevision,
    });
    expect(applied).toEqual(["old/0@0 leader 2"]);
  });

  it("a topic etcd holds without an id is given one (the local copy's, if it has one), which the copies adopt", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "legacy", undefined);
    await localCopy(t, "restored", idA);
    await putTopic(etcd, "legacy", { topicId: null });
    await putTopic(etcd, "restored", { topicId: null });
    const { replicas } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    await waitFor(
      async () => typeof (await topicJson(t, "legacy")).topic_id === "string",
      "the legacy copy to adopt the added id",
    );
    const legacy = parseTopicRecord((await etcd.get(topicKey(prefix, "legacy")))!.value);
    expect(legacy.origin).toBe("upgrade");
    expect(legacy.topicId).toMatch(/^[0-9a-f]{32}$/);
    expect((await topicJson(t, "legacy")).topic_id).toBe(legacy.topicId);
    const restored = parseTopicRecord((await etcd.get(topicKey(prefix, "restored")))!.value);
    expect(restored).toEqual({ config, topicId: idA, origin: "upgrade" });
    expect(await highWatermark(t.broker, "legacy")).toBe(3);
    expect(await highWatermark(t.broker, "restored")).toBe(3);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([]);
  });

  it("a copy whose id another broker's upgrade of the same record replaced adopts the record's id", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await putTopic(etcd, "raced", { topicId: idB, origin: "upgrade" });
    const { createRevision } = (await etcd.get(topicKey(prefix, "raced")))!;
    // This copy took id A from the same record (same create revision) before etcd lost it.
    await localCopy(t, "raced", idA, 3, createRevision);
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([]);
    expect(applied).toEqual(["raced/0@0 leader 2"]);
    expect(await highWatermark(t.broker, "raced")).toBe(3);
    expect(await topicJson(t, "raced")).toMatchObject({
      topic_id: idB,
      topic_revision: createRevision,
    });
  });

  it("a copy newer than etcd's topic (etcd restored from an older snapshot) is kept and not served", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    // Etcd's record of the name (id B) is older than the one the copy was made from (id A, at
    // revision 1000): the re-creation that made A was lost with the restore.
    await putTopic(etcd, "kept", { topicId: idB });
    await localCopy(t, "kept", idA, 3, 1000);
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(logger.named("cluster.topic_incarnation_newer")).toEqual([
      expect.objectContaining({
        topic: "kept",
        local_topic_id: idA,
        local_topic_revision: 1000,
        topic_id: idB,
      }),
    ]);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([]);
    // Nothing applied: neither served nor followed; the files and their id stay.
    expect(applied).toEqual([]);
    expect(await highWatermark(t.broker, "kept")).toBe(3);
    expect(await topicJson(t, "kept")).toMatchObject({ topic_id: idA, topic_revision: 1000 });
  });

  it("a copy of another incarnation that cannot be moved aside is neither served nor followed", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "stuck", idA);
    await putTopic(etcd, "stuck", { topicId: idB });
    // Its directory cannot be moved into trash/ (EIO): the delete fails, the copy stays.
    const failing = new Proxy(t.broker, {
      get(target, key) {
        if (key === "deleteTopic")
          return async () => {
            throw Object.assign(new Error("EIO: i/o error, rename"), { code: "EIO" });
          };
        const value = Reflect.get(target, key);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, failing, replicas);
    // Replication let go of it before the delete was tried; the state naming node 2 leader was
    // never handed over, so this broker neither follows with nor serves the other copy.
    expect(applied).toEqual(["stuck/0@0 leader -1"]);
    expect(logger.named("cluster.apply_failed")).toEqual([
      expect.objectContaining({ partition: "stuck/0", error: expect.stringMatching(/EIO/) }),
    ]);
    expect(logger.named("cluster.topic_incarnation_replaced")).toEqual([]);
    expect((await topicJson(t, "stuck")).topic_id).toBe(idA);
  });

  it("while running, a delete and a re-create that arrive together replace the copy", async () => {
    const etcd = new FakeEtcd();
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await localCopy(t, "live", idA);
    await putTopic(etcd, "live", { topicId: idA });
    const { replicas, applied } = recordingReplicas();
    const { logger } = await startNode(etcd, t.broker, replicas);
    expect(applied).toEqual(["live/0@0 leader 2"]);
    expect(await highWatermark(t.broker, "live")).toBe(3);
    // One transaction: the watch never shows this broker the topic gone.
    await etcd.txn({
      compare: [],
      success: [
        { delete: { key: partitionKey(prefix, "live", 0) } },
        {
          put: {
            key: topicKey(prefix, "live"),
            value: formatTopicRecord({ config, topicId: idB, origin: "creation" }),
          },
        },
      ],
    });
    await etcd.put(
      partitionKey(prefix, "live", 0),
      formatPartitionState({ ...initialPartitionState([1, 2, 3], 2), leader: 3 }),
    );
    await waitFor(
      () => logger.named("cluster.topic_incarnation_replaced").length === 1,
      "the copy to be replaced",
    );
    await waitFor(async () => applied.includes("live/0@0 leader 3"), "the new state applied");
    expect(await highWatermark(t.broker, "live")).toBe(0);
    expect((await topicJson(t, "live")).topic_id).toBe(idB);
  });
});
