/**
 * A topic create that fails while opening its partitions — here because the cold store cannot
 * list the topic's objects (a missing bucket, wrong credentials, an outage) — leaves nothing
 * behind, so the same name can be created once the cause has passed (found by the attacker of the
 * edge work: the half-created topic stayed unavailable, and its name taken, until deleted).
 */
import { describe, expect, it } from "vitest";
import { ColdStoreError } from "../../src/storage/cold-objects.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { buildEntryBatch } from "../../src/client/records.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { MemoryColdStore } from "../helpers/memory-cold-store.ts";

describe("creating a topic while the cold store fails", () => {
  it("refuses with storage_error, leaves no topic behind, and the name works once the store is back", async () => {
    const store = new MemoryColdStore();
    store.fault = (op) =>
      op === "list" ? new ColdStoreError("unavailable", "404 NoSuchBucket (simulated)") : null;
    const logger = new MemoryLogger();
    const { broker, fs, dataDir } = await openTestBroker({ coldStore: store, logger });
    const err = await broker.createTopic({ name: "ct", partitions: 2 }).catch((e: unknown) => e);
    expect((err as { kind?: { code: string } }).kind?.code).toBe("storage_error");
    // It says why a create needs the store (newuser8: an edge node offline could not tell).
    expect((err as Error).message).toMatch(
      /Cannot create topic "ct": its prefix in the cold tier must be listed before the topic is created .*create it again once the store is reachable \(.*NoSuchBucket/,
    );
    expect((await broker.listTopics()).map((t) => t.name)).toEqual([]);
    expect(await fs.stat(`${dataDir}/topics/ct`)).toBeNull();
    expect(logger.named("topic.create_failed")).toHaveLength(1);
    store.fault = null;
    const created = await broker.createTopic({ name: "ct", partitions: 2 });
    expect(created.partitions).toHaveLength(2);
    await broker.produce({ topic: "ct", partition: 0, batch: buildEntryBatch([{ value: "x" }]) });
    expect((await broker.listTopics()).map((t) => t.name)).toEqual(["ct"]);
  });
});
