/**
 * Topic ids (docs/cluster.md "Topic ids"): the codec of a topic's record in etcd
 * (cluster/topic-id.ts) and the `topic_id` field of `topic.json` (broker/topics.ts; docs/storage.md
 * "Files on disk"): written at creation, kept by every rewrite, readable when absent (copies made
 * before topic ids), refused when malformed.
 */
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import { parseTopicFile } from "../../src/broker/topics.ts";
import type { TopicConfig } from "../../src/broker/types.ts";
import {
  compareIncarnation,
  formatTopicRecord,
  newTopicId,
  parseTopicRecord,
  upgradeTopicId,
} from "../../src/cluster/topic-id.ts";
import { LocalBroker } from "../../src/broker/broker.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { readJsonFile } from "../../src/storage/metadata.ts";
import { openTestBroker } from "../helpers/broker.ts";

const idA = "0123456789abcdef0123456789abcdef";
const idB = "fedcba9876543210fedcba9876543210";

describe("a topic's record in etcd", () => {
  it("round-trips config, id and origin, and strips the id fields from the config", () => {
    const config = {
      replication_factor: 3,
      min_insync_replicas: 2,
      retention_ms: 1000,
    } as Partial<TopicConfig> as TopicConfig;
    for (const record of [
      { config, topicId: idA, origin: "creation" as const },
      { config, topicId: idA, origin: "upgrade" as const },
      { config, topicId: null, origin: "creation" as const },
    ]) {
      const text = formatTopicRecord(record);
      expect(parseTopicRecord(text)).toEqual(record);
    }
    expect(JSON.parse(formatTopicRecord({ config, topicId: idA, origin: "creation" }))).toEqual({
      ...config,
      topic_id: idA,
    });
    expect(JSON.parse(formatTopicRecord({ config, topicId: idA, origin: "upgrade" }))).toEqual({
      ...config,
      topic_id: idA,
      topic_id_origin: "upgrade",
    });
  });

  it("reads a record written before topic ids (config alone) as having none", () => {
    expect(parseTopicRecord('{"replication_factor":3,"min_insync_replicas":2}')).toEqual({
      config: { replication_factor: 3, min_insync_replicas: 2 },
      topicId: null,
      origin: "creation",
    });
  });

  it("refuses a malformed id or origin, naming the field", () => {
    expect(() => parseTopicRecord('{"topic_id":"ABC"}')).toThrow(/topic_id "ABC"/);
    expect(() => parseTopicRecord(`{"topic_id":"${idA}0"}`)).toThrow(/topic_id/);
    expect(() => parseTopicRecord(`{"topic_id":"${idA}","topic_id_origin":"x"}`)).toThrow(
      /topic_id_origin "x"/,
    );
    expect(() => parseTopicRecord("[]")).toThrow(/JSON object/);
  });

  it("makes 32 lowercase hex digits of 16 random bytes", () => {
    const bytes = Uint8Array.from({ length: 16 }, (_, i) => i * 17);
    expect(newTopicId(() => bytes)).toBe("00112233445566778899aabbccddeeff");
    expect(() => newTopicId(() => new Uint8Array(8))).toThrow(/16 random bytes/);
    expect(upgradeTopicId(idA, () => bytes)).toBe(idA);
    expect(upgradeTopicId(undefined, () => bytes)).toBe("00112233445566778899aabbccddeeff");
  });

  it("tells the same incarnation, one to adopt, another one, and an unknown one apart", () => {
    expect(compareIncarnation(idA, { topicId: idA, origin: "creation" })).toBe("same");
    expect(compareIncarnation(idA, { topicId: idB, origin: "creation" })).toBe("other");
    expect(compareIncarnation(idA, { topicId: idB, origin: "upgrade" })).toBe("other");
    expect(compareIncarnation(undefined, { topicId: idB, origin: "creation" })).toBe("other");
    expect(compareIncarnation(undefined, { topicId: idB, origin: "upgrade" })).toBe("adopt");
    expect(compareIncarnation(undefined, { topicId: null, origin: "creation" })).toBe("unknown");
    expect(compareIncarnation(idA, { topicId: null, origin: "creation" })).toBe("unknown");
  });

  it("tells a copy newer than etcd's topic (etcd restored from an older snapshot) by the create revisions", () => {
    const etcd = { topicId: idB, origin: "creation" as const, createRevision: 100 };
    expect(compareIncarnation(idA, etcd, 150)).toBe("newer");
    expect(compareIncarnation(idA, etcd, 50)).toBe("other");
    expect(compareIncarnation(idA, etcd, 100)).toBe("other");
    // Without a recorded revision (a hand-edited file), as before the revision: older.
    expect(compareIncarnation(idA, etcd)).toBe("other");
    expect(compareIncarnation(idB, etcd, 150)).toBe("same");
  });

  it("adopts an upgrade's id over another one taken from the same record (two brokers upgraded it at once)", () => {
    const upgraded = { topicId: idB, origin: "upgrade" as const, createRevision: 100 };
    expect(compareIncarnation(idA, upgraded, 100)).toBe("adopt");
    // From another record of the name: older or newer, as for any id.
    expect(compareIncarnation(idA, upgraded, 50)).toBe("other");
    expect(compareIncarnation(idA, upgraded, 150)).toBe("newer");
    // An id made with its topic is the only one that record ever had: another one is not of it.
    expect(compareIncarnation(idA, { ...upgraded, origin: "creation" }, 100)).toBe("other");
  });
});

describe("topic_id in topic.json", () => {
  it("is optional: a file without it parses, one with it gives the id, a malformed one is refused", () => {
    const file = { name: "t", partitions: 1, config: {} };
    expect(parseTopicFile("t", file).topicId).toBeUndefined();
    expect(parseTopicFile("t", { ...file, topic_id: idA }).topicId).toBe(idA);
    expect(() => parseTopicFile("t", { ...file, topic_id: "nope" })).toThrow(/topic_id "nope"/);
    expect(() => parseTopicFile("t", { ...file, topic_id: 5 })).toThrow(/topic_id 5/);
    expect(parseTopicFile("t", { ...file, topic_id: idA, topic_revision: 7 }).topicRevision).toBe(
      7,
    );
    expect(() => parseTopicFile("t", { ...file, topic_id: idA, topic_revision: -1 })).toThrow(
      /topic_revision -1/,
    );
  });

  it("is written at creation and kept by config updates and across a restart", async () => {
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await t.broker.createTopic({ name: "t", partitions: 1, topic_id: idA, topic_revision: 42 });
    const path = `${t.dataDir}/topics/t/topic.json`;
    const file = async () =>
      ((await readJsonFile(t.fs, path)) as { value: Record<string, unknown> }).value;
    expect(await file()).toMatchObject({ topic_id: idA, topic_revision: 42 });
    expect((await t.broker.describeTopic("t")).topic_id).toBe(idA);
    await t.broker.updateTopicConfig("t", { retention_ms: 5000 });
    expect(await file()).toMatchObject({
      topic_id: idA,
      topic_revision: 42,
      config: { retention_ms: 5000 },
    });
    await t.broker.close();
    const reopened = await LocalBroker.open({
      fs: t.fs,
      dataDir: t.dataDir,
      clock: t.clock,
      logger: new MemoryLogger(),
      cleanupIntervalMs: 0,
    });
    try {
      expect(await reopened.describeTopic("t")).toMatchObject({
        topic_id: idA,
        topic_revision: 42,
      });
    } finally {
      await reopened.close();
    }
  });

  it("a topic without one records one by setTopicId, and never takes another", async () => {
    const t = await openTestBroker({ cleanupIntervalMs: 0 });
    await t.broker.createTopic({ name: "t", partitions: 1 });
    expect((await t.broker.describeTopic("t")).topic_id).toBeUndefined();
    await t.broker.setTopicId("t", idA);
    await t.broker.setTopicId("t", idA);
    expect((await t.broker.describeTopic("t")).topic_id).toBe(idA);
    const read = (await readJsonFile(t.fs, `${t.dataDir}/topics/t/topic.json`)) as {
      value: Record<string, unknown>;
    };
    expect(read.value.topic_id).toBe(idA);
    await expect(t.broker.setTopicId("t", idB)).rejects.toMatchObject({ kind: Errors.internal });
    await expect(t.broker.setTopicId("t", idB, 5, idB)).rejects.toMatchObject({
      kind: Errors.internal,
    });
    // Replacing the id it has: the record's upgrade id that another broker wrote first.
    await t.broker.setTopicId("t", idB, 5, idA);
    expect(await t.broker.describeTopic("t")).toMatchObject({ topic_id: idB, topic_revision: 5 });
    await expect(t.broker.setTopicId("t", "bad")).rejects.toMatchObject({
      kind: Errors.invalidRequest,
    });
    await expect(
      t.broker.createTopic({ name: "u", partitions: 1, topic_id: "XYZ" }),
    ).rejects.toMatchObject({ kind: Errors.invalidRequest });
  });
});
