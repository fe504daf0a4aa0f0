/**
 * The broker hands out producer epochs (docs/decisions.md §20): the allocation rule row by row
 * (`nextProducerEpoch`), then through the broker on a simulated disk: the previous incarnation
 * fenced at once, the epoch durable before the answer (a crash keeps it), a failed fsync of the
 * snapshot making idempotent produce unavailable without a retry, and concurrent allocations
 * each getting their own epoch.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { nextProducerEpoch } from "../../src/broker/producers/state.ts";
import { buildEntryBatch } from "../../src/client/records.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { readWholeFile } from "../../src/fs/types.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { producerEpochHeadroom, producerEpochMax } from "../../src/lib/limits.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { abandonTestBroker, openTestBroker } from "../helpers/broker.ts";

const nowMs = 1_700_000_000_123; // ManualClock's default start
const second = Math.floor(nowMs / 1000);
const after2038Ms = 2 ** 31 * 1000 + 5_000;

describe("nextProducerEpoch follows docs/decisions.md §20", () => {
  it("starts an id without state at the Unix second", () => {
    expect(nextProducerEpoch(undefined, { atLeast: 0, nowMs })).toBe(second);
  });

  it("starts an id without state 2^24 below the cap once the second has passed it", () => {
    expect(nextProducerEpoch(undefined, { atLeast: 0, nowMs: after2038Ms })).toBe(
      producerEpochMax - producerEpochHeadroom,
    );
  });

  it("gives an id with state its stored epoch + 1, whatever the clock says", () => {
    expect(nextProducerEpoch(5, { atLeast: 0, nowMs })).toBe(6);
    expect(nextProducerEpoch(producerEpochMax - 1, { atLeast: 0, nowMs })).toBe(producerEpochMax);
  });

  it("gives at_least when it is higher, with state or without", () => {
    expect(nextProducerEpoch(5, { atLeast: 90, nowMs })).toBe(90);
    expect(nextProducerEpoch(5, { atLeast: 6, nowMs })).toBe(6);
    expect(nextProducerEpoch(5, { atLeast: 3, nowMs })).toBe(6);
    expect(nextProducerEpoch(undefined, { atLeast: second + 10, nowMs })).toBe(second + 10);
    expect(nextProducerEpoch(undefined, { atLeast: producerEpochMax, nowMs })).toBe(
      producerEpochMax,
    );
  });

  it("has nothing to give an id at 2^31 − 1", () => {
    expect(nextProducerEpoch(producerEpochMax, { atLeast: 0, nowMs })).toBeNull();
    expect(nextProducerEpoch(producerEpochMax, { atLeast: producerEpochMax, nowMs })).toBeNull();
  });
});

function send(broker: LocalBroker, id: string, epoch: number, sequence: number) {
  return broker.produce({
    topic: "t",
    partition: 0,
    batch: buildEntryBatch([{ value: `${id}@${epoch}:${sequence}` }]),
    producer: { id, epoch, sequence },
  });
}

async function refusal(p: Promise<unknown>): Promise<BrokerError> {
  const err = await p.then(
    () => {
      throw new Error("expected a refusal");
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BrokerError);
  return err as BrokerError;
}

describe("LocalBroker.initProducerEpoch", () => {
  it("answers the clock second for a new id, then stored + 1, fencing the previous incarnation", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    await broker.createTopic({ name: "t", partitions: 1 });
    const first = await broker.initProducerEpoch({ producerId: "p" });
    expect(first.epoch).toBe(second);
    await send(broker, "p", first.epoch, 0);
    await send(broker, "p", first.epoch, 1);
    const next = await broker.initProducerEpoch({ producerId: "p" });
    expect(next.epoch).toBe(first.epoch + 1);
    const fenced = await refusal(send(broker, "p", first.epoch, 2));
    expect(fenced.kind.code).toBe("producer_fenced");
    expect(fenced.details).toEqual({ expected_epoch: next.epoch });
    // The new incarnation starts every partition afresh at sequence 0.
    expect((await send(broker, "p", next.epoch, 0)).spans[0].baseOffset).toBe(2);
    expect(broker.producerStates.inspect("p")?.epoch).toBe(next.epoch);
  });

  it("answers at_least when it is above stored + 1", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    await broker.initProducerEpoch({ producerId: "p" });
    expect(await broker.initProducerEpoch({ producerId: "p", atLeast: second + 50 })).toEqual({
      epoch: second + 50,
    });
    expect(await broker.initProducerEpoch({ producerId: "p", atLeast: 3 })).toEqual({
      epoch: second + 51,
    });
  });

  it("continues above a clock epoch an older client produced with", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    await broker.createTopic({ name: "t", partitions: 1 });
    await send(broker, "p", second + 7, 0);
    expect(await broker.initProducerEpoch({ producerId: "p" })).toEqual({ epoch: second + 8 });
  });

  it("starts an id forgotten after the producer expiry at the clock again", async () => {
    const clock = new ManualClock();
    const { broker } = await openTestBroker({
      clock,
      cleanupIntervalMs: 0,
      producerExpiryMs: 60_000,
    });
    await broker.initProducerEpoch({ producerId: "p", atLeast: second + 1000 });
    clock.advance(60_001);
    expect(await broker.initProducerEpoch({ producerId: "p" })).toEqual({
      epoch: Math.floor((nowMs + 60_001) / 1000),
    });
  });

  it("refuses producer_epoch_exhausted (409) for an id at 2^31 − 1, naming it", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    await broker.initProducerEpoch({ producerId: "p", atLeast: producerEpochMax });
    const err = await refusal(broker.initProducerEpoch({ producerId: "p" }));
    expect(err.kind.code).toBe("producer_epoch_exhausted");
    expect(err.kind.http).toBe(409);
    expect(err.kind.tcp).toBe(35);
    expect(err.message).toContain('"p"');
    expect(err.message).toContain("new producer id");
  });

  it("refuses a bad producer id or at_least as invalid_request naming the field", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    const badId = await refusal(broker.initProducerEpoch({ producerId: "a b" }));
    expect([badId.kind.code, badId.details]).toEqual(["invalid_request", { field: "producer_id" }]);
    const badAt = await refusal(
      broker.initProducerEpoch({ producerId: "p", atLeast: producerEpochMax + 1 }),
    );
    expect([badAt.kind.code, badAt.details]).toEqual(["invalid_request", { field: "at_least" }]);
    expect(broker.producerStates.inspect("p")).toBeUndefined();
    // A long bad id is quoted by its first 64 characters and its length (docs/http-api.md
    // "Errors"), not echoed whole (attack13 F5: 3000 characters came back).
    const long = await refusal(broker.initProducerEpoch({ producerId: "a".repeat(3000) }));
    expect(long.kind.code).toBe("invalid_request");
    expect(long.message).toContain(`"${"a".repeat(64)}…"… (3000 characters)`);
    expect(long.message).not.toContain("a".repeat(65));
    expect(long.message.length).toBeLessThan(400);
  });

  it("gives concurrent allocations of one id distinct, increasing epochs sharing snapshots", async () => {
    const { broker, fs } = await openTestBroker({ cleanupIntervalMs: 0 });
    const generation = async () =>
      (
        JSON.parse(
          new TextDecoder().decode(await readWholeFile(fs, "/data/producers.json", 1 << 20)),
        ) as {
          journal_generation: number;
        }
      ).journal_generation;
    const before = await generation();
    const epochs = await Promise.all(
      [0, 1, 2, 3].map(() => broker.initProducerEpoch({ producerId: "p" })),
    );
    expect(epochs.map((e) => e.epoch)).toEqual([second, second + 1, second + 2, second + 3]);
    // The first allocation's snapshot starts at once; the three behind it share the next one.
    expect(await generation()).toBe(before + 2);
  });

  it("keeps an answered epoch through a crash: the next start answers higher and fences the old one", async () => {
    const fs = new MemoryFileSystem();
    const first = await openTestBroker({ fs, cleanupIntervalMs: 0 });
    await first.broker.createTopic({ name: "t", partitions: 1 });
    const old = await first.broker.initProducerEpoch({ producerId: "p" });
    const current = await first.broker.initProducerEpoch({ producerId: "p" });
    abandonTestBroker(first.broker);
    fs.crash({ mode: "dropAll" });
    const second2 = await openTestBroker({ fs, cleanupIntervalMs: 0 });
    expect(second2.broker.producerStates.inspect("p")?.epoch).toBe(current.epoch);
    const fenced = await refusal(send(second2.broker, "p", old.epoch, 0));
    expect(fenced.kind.code).toBe("producer_fenced");
    expect(await second2.broker.initProducerEpoch({ producerId: "p" })).toEqual({
      epoch: current.epoch + 1,
    });
  });

  it("makes idempotent produce unavailable after a failed fsync of the snapshot, and never retries it", async () => {
    const fs = new MemoryFileSystem();
    const logger = new MemoryLogger();
    const { broker } = await openTestBroker({ fs, logger, cleanupIntervalMs: 0 });
    await broker.createTopic({ name: "t", partitions: 1 });
    fs.faults.failNext({ op: "sync", path: /producers\.json/, code: "EIO" });
    const err = await refusal(broker.initProducerEpoch({ producerId: "p" }));
    expect(err.kind.code).toBe("unavailable");
    expect(err.message).toContain("until the broker restarts");
    const syncsAfter = fs.faults.fired.length;
    expect((await refusal(broker.initProducerEpoch({ producerId: "p" }))).kind.code).toBe(
      "unavailable",
    );
    expect((await refusal(send(broker, "p", 1, 0))).kind.code).toBe("unavailable");
    expect(fs.faults.fired.length).toBe(syncsAfter);
    expect(broker.producerStates.unavailableReason).toContain("snapshot");
    // Produce without a producer is unaffected.
    await broker.produce({ topic: "t", partition: 0, batch: buildEntryBatch([{ value: "x" }]) });
  });
});
