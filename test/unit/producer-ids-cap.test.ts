/**
 * The producer state stays bounded and readable (attack18 F4; `src/broker/producers/state.ts`,
 * "Bounded state"): past `--producer-ids-max` the least recently active idle producer is forgotten
 * (logged, counted), a start reads a valid `producers.json` larger than the 16 MiB metadata limit,
 * and no snapshot the broker writes is larger than what its start reads.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { buildSnapshot } from "../../src/broker/producers/snapshot.ts";
import { ProducerStates } from "../../src/broker/producers/state.ts";
import { buildEntryBatch } from "../../src/client/records.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { readWholeFile } from "../../src/fs/types.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { metadataFileBytesMax } from "../../src/lib/limits.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { openTestBroker } from "../helpers/broker.ts";

function send(broker: LocalBroker, id: string, sequence: number) {
  return broker.produce({
    topic: "t",
    partition: 0,
    batch: buildEntryBatch([{ value: `${id}:${sequence}` }]),
    producer: { id, epoch: 0, sequence },
  });
}

async function snapshotText(fs: MemoryFileSystem): Promise<string> {
  return new TextDecoder().decode(await readWholeFile(fs, "/data/producers.json", 2 ** 30));
}

describe("--producer-ids-max", () => {
  it("forgets the least recently active producer past the cap, logs and counts it, across a restart", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const logger = new MemoryLogger();
    const first = await openTestBroker({
      fs,
      clock,
      logger,
      producerIdsMax: 3,
      cleanupIntervalMs: 0,
    });
    await first.broker.createTopic({ name: "t", partitions: 1 });
    for (const id of ["a", "b", "c"]) {
      await send(first.broker, id, 0);
      clock.advance(1000);
    }
    // "a" becomes the most recently active: "b" is now the oldest.
    await send(first.broker, "a", 1);
    clock.advance(1000);
    await send(first.broker, "d", 0);
    clock.advance(1000);
    await send(first.broker, "e", 0);

    const seen = await first.broker.observe();
    expect(seen.producers).toEqual({ ids: 3, evicted: 2 });
    const evicted = logger.events.filter((e) => e.event === "producers.evicted");
    expect(evicted.length).toBeGreaterThanOrEqual(1);
    expect(evicted[0].fields).toMatchObject({ reason: "producer_ids_max", last_producer_id: "b" });
    // "a" is still known (its next sequence is 2); "b" is forgotten: sequence 1 is unknown.
    expect((await send(first.broker, "a", 2)).duplicate).toBe(false);
    const refused = await send(first.broker, "b", 1).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(BrokerError);
    expect((refused as BrokerError).kind.code).toBe("unknown_producer");
    await first.broker.close();

    // The journal still holds the forgotten producers' entries: the start applies the cap again,
    // by the entries' times, and its snapshot holds the three most recently active.
    const second = await openTestBroker({ fs, clock, producerIdsMax: 3, cleanupIntervalMs: 0 });
    expect((await second.broker.observe()).producers?.ids).toBe(3);
    const text = await snapshotText(fs);
    const ids = (JSON.parse(text) as { producers: { producer_id: string }[] }).producers.map(
      (p) => p.producer_id,
    );
    expect(ids.sort()).toEqual(["a", "d", "e"]);
  });
});

describe("a large producers.json", () => {
  it("is read at start when it is over the 16 MiB metadata limit, and written back readable", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const count = 50_000;
    const producers = Array.from({ length: count }, (_, i) => ({
      id: `p-${i}-${"x".repeat(240)}`.slice(0, 249),
      epoch: 0,
      lastActiveMs: clock.nowMs() - count + i,
      partitions: new Map(),
    }));
    const text = `${JSON.stringify(
      buildSnapshot(0, { producers, pending: [], highWatermark: () => -1 }),
      null,
      2,
    )}\n`;
    expect(text.length).toBeGreaterThan(metadataFileBytesMax);
    await fs.mkdir("/data");
    fs.writeFileSync("/data/producers.json", utf8(text));

    const logger = new MemoryLogger();
    const first = await openTestBroker({
      fs,
      clock,
      logger,
      producerIdsMax: 60_000,
      cleanupIntervalMs: 0,
    });
    expect(logger.events.filter((e) => e.event === "producers.unavailable")).toEqual([]);
    expect((await first.broker.observe()).producers?.ids).toBe(count);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await send(first.broker, "fresh", 0);
    await first.broker.close();

    // What this start wrote (still over 16 MiB) is read by the next one.
    expect((await snapshotText(fs)).length).toBeGreaterThan(metadataFileBytesMax);
    const logger2 = new MemoryLogger();
    const second = await openTestBroker({
      fs,
      clock,
      logger: logger2,
      producerIdsMax: 60_000,
      cleanupIntervalMs: 0,
    });
    expect(logger2.events.filter((e) => e.event === "producers.unavailable")).toEqual([]);
    expect((await second.broker.observe()).producers?.ids).toBe(count + 1);
    expect((await send(second.broker, "fresh", 1)).duplicate).toBe(false);
  });

  it("is never written over the size a start reads: the oldest idle producers are forgotten", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const logger = new MemoryLogger();
    await fs.mkdir("/data");
    const options = {
      fs,
      dataDir: "/data",
      clock,
      logger,
      expiryMs: 86_400_000,
      partitions: { get: () => "missing" as const },
      snapshotBytesMax: 8192,
    };
    const states = await ProducerStates.open(options);
    for (let i = 0; i < 100; i++) {
      await states.allocateEpoch({ producerId: `producer-${i}`, atLeast: 0 });
      clock.advance(10);
      const size = (await readWholeFile(fs, "/data/producers.json", 2 ** 30)).length;
      expect(size).toBeLessThanOrEqual(8192);
    }
    expect(states.evictedCount).toBeGreaterThan(0);
    // The latest allocation is kept (never evicted while it waits for its snapshot).
    expect(states.inspect("producer-99")).toBeDefined();
    expect(states.inspect("producer-0")).toBeUndefined();
    expect(
      logger.events.some(
        (e) => e.event === "producers.evicted" && e.fields.reason === "snapshot_bytes_max",
      ),
    ).toBe(true);
    await states.close();
    const again = await ProducerStates.open({ ...options, logger: new MemoryLogger() });
    expect(again.unavailableReason).toBeNull();
    expect(again.inspect("producer-99")).toBeDefined();
    await again.close();
  });
});
