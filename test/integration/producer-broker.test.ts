/**
 * Idempotent produce through LocalBroker on the simulated disk: duplicates, gaps, fencing,
 * expiry, restarts, crashes (torn journal tail, unsynced log), deleted topics, journal rotation.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import type { ProduceResult, ProducerIdentity } from "../../src/broker/types.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { producerJournalEntriesRotate } from "../../src/lib/limits.ts";
import type { MemoryLogger } from "../../src/lib/logger.ts";
import {
  DecodeStatus,
  EntryBatchBuilder,
  RecordCursor,
  type EntryBatch,
} from "../../src/storage/record.ts";
import { abandonTestBroker, openTestBroker } from "../helpers/broker.ts";

async function start(
  fs: MemoryFileSystem,
  options: {
    clock?: ManualClock;
    logger?: MemoryLogger;
    producerExpiryMs?: number;
    flushEveryRecords?: number;
  } = {},
) {
  const { broker, logger } = await openTestBroker({
    fs,
    clock: options.clock,
    logger: options.logger,
    cleanupIntervalMs: 0,
    producerExpiryMs: options.producerExpiryMs,
    flushEveryRecords: options.flushEveryRecords,
  });
  return { broker, logger };
}

async function close(broker: LocalBroker) {
  await broker.close();
}

function batch(...values: string[]): EntryBatch {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v));
  return b.build();
}

function p(id: string, epoch: number, sequence: number): ProducerIdentity {
  return { id, epoch, sequence };
}

async function rejection(promise: Promise<unknown>): Promise<BrokerError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof BrokerError) return err;
    throw err;
  }
  throw new Error("expected a rejection");
}

/** Every value stored in a partition, with its offset. */
async function stored(
  broker: LocalBroker,
  topic: string,
  partition = 0,
): Promise<{ offset: number; value: string }[]> {
  const out: { offset: number; value: string }[] = [];
  let offset = (await broker.listOffsets({ topic, partition })).logStartOffset;
  for (;;) {
    const r = await broker.fetch({ topic, partition, offset, maxRecords: 10_000 });
    if (r.records.count === 0) return out;
    const c = new RecordCursor().reset(r.records.bytes);
    for (let pos = 0; pos < r.records.bytes.length; pos += c.sizeBytes) {
      expect(c.decode(pos)).toBe(DecodeStatus.Ok);
      out.push({ offset: c.offset, value: fromUtf8(c.value()) });
    }
    offset = r.nextOffset;
  }
}

function offsetsOf(result: ProduceResult): number[] {
  return result.spans.flatMap((s) => Array.from({ length: s.count }, (_, i) => s.baseOffset + i));
}

describe("idempotent produce", () => {
  it("answers a retried batch with its original offsets, appending nothing", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 1 });
    const first = await broker.produce({
      topic: "t",
      batch: batch("a", "b"),
      producer: p("p1", 0, 0),
    });
    expect(first).toEqual({ spans: [{ partition: 0, baseOffset: 0, count: 2 }], duplicate: false });
    await broker.produce({ topic: "t", batch: batch("x") }); // someone else's record in between
    const again = await broker.produce({
      topic: "t",
      batch: batch("a", "b"),
      producer: p("p1", 0, 0),
    });
    expect(again).toEqual({ spans: [{ partition: 0, baseOffset: 0, count: 2 }], duplicate: true });
    const next = await broker.produce({ topic: "t", batch: batch("c"), producer: p("p1", 0, 2) });
    expect(offsetsOf(next)).toEqual([3]);
    expect((await stored(broker, "t")).map((r) => r.value)).toEqual(["a", "b", "x", "c"]);
  });

  it("refuses a sequence gap with 409 naming the expected sequence, and appends nothing", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    await broker.produce({ topic: "t", batch: batch("a", "b"), producer: p("p1", 0, 0) });
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("c"), producer: p("p1", 0, 5) }),
    );
    expect(err.kind.code).toBe("out_of_order_sequence");
    expect(err.kind.http).toBe(409);
    expect(err.details).toEqual({ expected_sequence: 2 });
    expect(err.message).toMatch(/expected sequence 2/);
    expect(await stored(broker, "t")).toHaveLength(2);
  });

  it("fences an older epoch with 403 naming the current one; a new epoch starts at sequence 0", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 2 });
    await broker.produce({ topic: "t", partition: 0, batch: batch("a"), producer: p("p1", 0, 0) });
    await broker.produce({ topic: "t", partition: 1, batch: batch("b"), producer: p("p1", 0, 0) });
    const gap = await rejection(
      broker.produce({ topic: "t", partition: 0, batch: batch("c"), producer: p("p1", 1, 1) }),
    );
    expect(gap.kind.code).toBe("out_of_order_sequence");
    expect(gap.details).toEqual({ expected_sequence: 0 });
    await broker.produce({ topic: "t", partition: 0, batch: batch("c"), producer: p("p1", 1, 0) });
    const stale = await rejection(
      broker.produce({ topic: "t", partition: 1, batch: batch("d"), producer: p("p1", 0, 1) }),
    );
    expect(stale.kind.code).toBe("producer_fenced");
    expect(stale.kind.http).toBe(403);
    expect(stale.details).toEqual({ expected_epoch: 1 });
    // The new epoch restarts every partition's sequence, not just the one it first wrote to.
    const onOther = await broker.produce({
      topic: "t",
      partition: 1,
      batch: batch("d"),
      producer: p("p1", 1, 0),
    });
    expect(onOther.duplicate).toBe(false);
    expect((await stored(broker, "t", 1)).map((r) => r.value)).toEqual(["b", "d"]);
  });

  it("tells a producer it does not know to start a new epoch, never appending a sequence from the middle", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("a"), producer: p("ghost", 3, 17) }),
    );
    expect(err.kind.code).toBe("unknown_producer");
    expect(err.details).toEqual({ expected_sequence: 0 });
    expect(err.message).toMatch(/start a new epoch at sequence 0/);
    expect(await stored(broker, "t")).toHaveLength(0);
  });

  it("forgets idle producers after the expiry: the returning producer gets unknown_producer and recovers with a new epoch", async () => {
    const clock = new ManualClock();
    const { broker } = await start(new MemoryFileSystem(), { clock, producerExpiryMs: 60_000 });
    await broker.createTopic({ name: "t", partitions: 1 });
    await broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) });
    clock.advance(30_000);
    await broker.produce({ topic: "t", batch: batch("b"), producer: p("p1", 0, 1) }); // activity keeps it alive
    clock.advance(60_001);
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("c"), producer: p("p1", 0, 2) }),
    );
    expect(err.kind.code).toBe("unknown_producer");
    const recovered = await broker.produce({
      topic: "t",
      batch: batch("c"),
      producer: p("p1", 1, 0),
    });
    expect(offsetsOf(recovered)).toEqual([2]);
    expect((await stored(broker, "t")).map((r) => r.value)).toEqual(["a", "b", "c"]);
  });

  it("refuses an idempotent request whose records would go to several partitions", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 2 });
    const err = await rejection(
      broker.produce({
        topic: "t",
        batch: batch("a", "b"),
        partitions: new Int32Array([0, 1]),
        producer: p("p1", 0, 0),
      }),
    );
    expect(err.kind.code).toBe("invalid_request");
    expect(err.message).toMatch(/one partition/);
  });

  it("sends an idempotent producer's keyless records to the same partition on every retry", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 8 });
    const first = await broker.produce({
      topic: "t",
      batch: batch("a"),
      producer: p("sticky", 0, 0),
    });
    for (let i = 0; i < 5; i++) await broker.produce({ topic: "t", batch: batch("noise") });
    const retry = await broker.produce({
      topic: "t",
      batch: batch("a"),
      producer: p("sticky", 0, 0),
    });
    expect(retry).toEqual({ ...first, duplicate: true });
  });

  it("refuses bad producer ids, epochs and sequences naming the field", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    for (const bad of [
      p("has space", 0, 0),
      p("", 0, 0),
      p("ok", -1, 0),
      p("ok", 0.5, 0),
      p("ok", 0, -2),
      p("ok", 2 ** 31, 0),
    ]) {
      const err = await rejection(broker.produce({ topic: "t", batch: batch("a"), producer: bad }));
      expect(err.kind.code).toBe("invalid_request");
      expect(err.message).toMatch(/producer (id|epoch|sequence)/);
    }
  });

  it("serialises two in-flight batches of one producer and partition, so a concurrent retry is answered as a duplicate", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    const results = await Promise.all([
      broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) }),
      broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) }),
      broker.produce({ topic: "t", batch: batch("b"), producer: p("p1", 0, 1) }),
      broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) }),
    ]);
    expect(results.map((r) => r.duplicate)).toEqual([false, true, false, true]);
    expect((await stored(broker, "t")).map((r) => r.value)).toEqual(["a", "b"]);
  });

  it("keeps the state across a clean restart: a retry after it is still a duplicate", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    const original = await first.broker.produce({
      topic: "t",
      batch: batch("a", "b", "c"),
      producer: p("p1", 2, 0),
    });
    await close(first.broker);
    const { broker } = await start(fs);
    expect(
      await broker.produce({ topic: "t", batch: batch("a", "b", "c"), producer: p("p1", 2, 0) }),
    ).toEqual({ ...original, duplicate: true });
    expect(
      (await rejection(broker.produce({ topic: "t", batch: batch("d"), producer: p("p1", 1, 3) })))
        .kind.code,
    ).toBe("producer_fenced");
    expect(
      offsetsOf(await broker.produce({ topic: "t", batch: batch("d"), producer: p("p1", 2, 3) })),
    ).toEqual([3]);
  });

  it("keeps every acknowledged batch across a power loss that drops everything unsynced", async () => {
    for (const mode of ["dropAll", "random", "keepAll"] as const) {
      const fs = new MemoryFileSystem({ seed: 3 });
      const first = await start(fs);
      await first.broker.createTopic({ name: "t", partitions: 1 });
      const acked: ProduceResult[] = [];
      for (let s = 0; s < 10; s++)
        acked.push(
          await first.broker.produce({
            topic: "t",
            batch: batch(`v${s}`),
            producer: p("p1", 0, s),
          }),
        );
      fs.crash({ mode, seed: 11 });
      abandonTestBroker(first.broker);
      const { broker } = await start(fs);
      // The last five batches are remembered and answered with their offsets; older ones are refused, never stored again.
      for (let s = 0; s < 10; s++) {
        const retry = broker.produce({
          topic: "t",
          batch: batch(`v${s}`),
          producer: p("p1", 0, s),
        });
        if (s < 5)
          expect((await rejection(retry)).kind.code, `${mode} s=${s}`).toBe("duplicate_sequence");
        else expect(await retry, `${mode} s=${s}`).toEqual({ ...acked[s], duplicate: true });
      }
      expect((await stored(broker, "t")).map((r) => r.value)).toEqual(
        Array.from({ length: 10 }, (_, s) => `v${s}`),
      );
      await close(broker);
    }
  });

  it("logs the first duplicate-sequence refusal of a producer epoch and partition, not every retry (newuser16 #2)", async () => {
    const fs = new MemoryFileSystem();
    const { broker, logger } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 2 });
    await broker.produce({ topic: "t", partition: 0, batch: batch("a"), producer: p("p1", 0, 0) });
    await broker.produce({ topic: "t", partition: 1, batch: batch("a"), producer: p("p1", 0, 0) });
    // New records under a sequence the partition holds (a client that lost track of a stored
    // batch): refused each time, logged once per partition.
    for (const partition of [0, 0, 0, 1])
      expect(
        (
          await rejection(
            broker.produce({ topic: "t", partition, batch: batch("b"), producer: p("p1", 0, 0) }),
          )
        ).kind.code,
      ).toBe("duplicate_sequence");
    const lines = logger.named("producer.duplicate_sequence");
    expect(lines.map((l) => [l.partition, l.sequence, l.expected_sequence])).toEqual([
      [0, 0, 1],
      [1, 0, 1],
    ]);
    expect(lines[0]).toMatchObject({ producer_id: "p1", epoch: 0, topic: "t" });
    expect(logger.events.find((e) => e.event === "producer.duplicate_sequence")?.level).toBe(
      "warn",
    );
    // A plain retry of the stored batch is answered, not refused, and logs nothing.
    await broker.produce({ topic: "t", partition: 0, batch: batch("a"), producer: p("p1", 0, 0) });
    expect(logger.named("producer.duplicate_sequence")).toHaveLength(2);
    await close(broker);
  });

  it("forgets a batch whose log write failed, so its retry is appended (once)", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 1 });
    await broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) });
    fs.faults.failNext({ op: "write", path: /\.log$/, code: "ENOSPC", partialBytes: 5 });
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("b"), producer: p("p1", 0, 1) }),
    );
    expect(err.kind.code).toBe("storage_error");
    await broker.produce({ topic: "t", batch: batch("z") }); // takes the offset the failed batch had
    const retried = await broker.produce({
      topic: "t",
      batch: batch("b"),
      producer: p("p1", 0, 1),
    });
    expect(retried.duplicate).toBe(false);
    expect((await stored(broker, "t")).map((r) => r.value)).toEqual(["a", "z", "b"]);
    // After a restart, the stale journal entry of the failed write (offset 1, now "z") is recognised and ignored.
    await close(broker);
    const again = await start(fs);
    expect(
      await again.broker.produce({ topic: "t", batch: batch("b"), producer: p("p1", 0, 1) }),
    ).toEqual({ ...retried, duplicate: true });
  });

  it("refuses idempotent produce when the journal cannot be written, and leaves other produce working", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 1 });
    fs.faults.failNext({ op: "sync", path: /producers\.journal$/, code: "EIO" });
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) }),
    );
    expect(err.kind.code).toBe("unavailable");
    expect(err.message).toMatch(/restart required/);
    expect(
      (await rejection(broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) })))
        .kind.code,
    ).toBe("unavailable");
    expect(offsetsOf(await broker.produce({ topic: "t", batch: batch("plain") }))).toEqual([0]);
  });

  it("forgets the sequences of a deleted topic: a topic created again under its name starts afresh", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 1 });
    await broker.produce({ topic: "t", batch: batch("a", "b"), producer: p("p1", 0, 0) });
    await broker.deleteTopic("t");
    await broker.createTopic({ name: "t", partitions: 1 });
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("c"), producer: p("p1", 0, 2) }),
    );
    expect(err.kind.code).toBe("out_of_order_sequence");
    expect(err.details).toEqual({ expected_sequence: 0 });
    expect(
      (await broker.produce({ topic: "t", batch: batch("a", "b"), producer: p("p1", 0, 0) }))
        .duplicate,
    ).toBe(false);
  });

  it("folds the journal into producers.json every few thousand entries and keeps answering retries", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    const total = producerJournalEntriesRotate + 10;
    for (let s = 0; s < total; s++)
      await first.broker.produce({ topic: "t", batch: batch(`v${s}`), producer: p("p1", 0, s) });
    const snapshot = JSON.parse(fromUtf8(fs.readFileSync("/data/producers.json")));
    expect(snapshot.journal_generation).toBeGreaterThanOrEqual(2);
    expect(fs.readFileSync("/data/producers.journal").length).toBeLessThan(100 * 1024);
    fs.crash({ mode: "dropAll" });
    abandonTestBroker(first.broker);
    const { broker } = await start(fs);
    expect(
      offsetsOf(
        await broker.produce({
          topic: "t",
          batch: batch(`v${total - 1}`),
          producer: p("p1", 0, total - 1),
        }),
      ),
    ).toEqual([total - 1]);
    expect(
      offsetsOf(
        await broker.produce({ topic: "t", batch: batch("next"), producer: p("p1", 0, total) }),
      ),
    ).toEqual([total]);
  });

  it("cuts a torn journal tail at start and reports it", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await first.broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) });
    await close(first.broker);
    const journal = fs.readFileSync("/data/producers.journal");
    const torn = new Uint8Array(journal.length + 30);
    torn.set(journal);
    torn.set([0, 0, 0, 80, 1, 2, 3], journal.length); // a length and a few bytes of an entry that never finished
    fs.writeFileSync("/data/producers.journal", torn);
    const { broker, logger } = await start(fs);
    expect(logger.named("producers.journal_torn_tail")).toEqual([
      expect.objectContaining({ cut_bytes: 30 }),
    ]);
    expect(
      (await broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) })).duplicate,
    ).toBe(true);
  });

  it("never cuts valid entries behind a damaged one as a torn tail: idempotent produce is unavailable, not unknown_producer", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    for (let seq = 0; seq < 30; seq++)
      await first.broker.produce({
        topic: "t",
        batch: batch(`v${seq}`),
        producer: p("p1", 0, seq),
      });
    await close(first.broker);
    const whole = fs.readFileSync("/data/producers.journal");
    const damaged = whole.slice();
    new DataView(damaged.buffer).setUint32(16, 0xffff_ffff); // the first entry's length
    fs.writeFileSync("/data/producers.journal", damaged);

    const second = await start(fs);
    expect(second.logger.named("producers.journal_torn_tail")).toHaveLength(0);
    expect(second.logger.named("producers.journal_corrupt")).toEqual([
      expect.objectContaining({ position: 16, entries_before: 0, entries_after: 29 }),
    ]);
    // A retry of a stored batch must not be told to start a new epoch (the client would resend it).
    const err = await rejection(
      second.broker.produce({ topic: "t", batch: batch("v29"), producer: p("p1", 0, 29) }),
    );
    expect(err.kind.code).toBe("unavailable");
    expect(err.kind.retriable).toBe(true);
    expect(err.message).toMatch(/producers\.journal is corrupt/);
    expect(offsetsOf(await second.broker.produce({ topic: "t", batch: batch("plain") }))).toEqual([
      30,
    ]);
    await close(second.broker);
    // Left as it was, and nothing else replaced it: no new snapshot generation started over it.
    expect(fs.readFileSync("/data/producers.journal")).toEqual(damaged);

    // Repaired, every entry is still there: the retry is a duplicate.
    fs.writeFileSync("/data/producers.journal", whole);
    const third = await start(fs);
    expect(
      (await third.broker.produce({ topic: "t", batch: batch("v29"), producer: p("p1", 0, 29) }))
        .duplicate,
    ).toBe(true);
    await close(third.broker);
  });

  it("makes only idempotent produce unavailable when producers.json is unreadable", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await first.broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) });
    await close(first.broker);
    fs.writeFileSync("/data/producers.json", utf8("{ not json"));
    const { broker, logger } = await start(fs);
    expect(logger.named("producers.unavailable")).toHaveLength(1);
    const err = await rejection(
      broker.produce({ topic: "t", batch: batch("a"), producer: p("p1", 0, 0) }),
    );
    expect(err.kind.code).toBe("unavailable");
    expect(err.message).toMatch(/producers\.json/);
    expect(offsetsOf(await broker.produce({ topic: "t", batch: batch("b") }))).toEqual([1]);
    // Never silently reset: the file is left as it was.
    expect(fromUtf8(fs.readFileSync("/data/producers.json"))).toBe("{ not json");
  });
});
