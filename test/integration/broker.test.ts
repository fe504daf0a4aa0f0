import { describe, expect, it } from "vitest";
import { writeFileSync, existsSync, mkdirSync, readdirSync, statSync, unlinkSync } from "node:fs";
import { FsError } from "../../src/fs/types.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder, RecordCursor } from "../../src/storage/record.ts";
import { partitionForKey } from "../../src/lib/murmur2.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { tempDir } from "../helpers/tmp.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { recordValues } from "../helpers/records.ts";

async function broker(dataDir: string, clock = new ManualClock(), logger = new MemoryLogger()) {
  return (await openTestBroker({ fs: new NodeFileSystem(), dataDir, clock, logger })).broker;
}

function fresh() {
  return `${tempDir().dir}/data`;
}

async function rejectsWith(p: Promise<unknown>, code: string) {
  await expect(p).rejects.toSatisfy(
    (e: unknown) => e instanceof BrokerError && e.kind.code === code,
  );
}

describe("LocalBroker", () => {
  it("creates, lists, describes and deletes topics", async () => {
    const b = await broker(fresh());
    const d = await b.createTopic({
      name: "orders",
      partitions: 3,
      config: { segment_bytes: 4096 },
    });
    expect(d.partitions.map((p) => p.partition)).toEqual([0, 1, 2]);
    expect(d.config.segment_bytes).toBe(4096);
    await rejectsWith(b.createTopic({ name: "orders", partitions: 1 }), "topic_exists");
    await rejectsWith(b.createTopic({ name: "bad/name", partitions: 1 }), "invalid_topic_name");
    await rejectsWith(b.createTopic({ name: "x", partitions: 0 }), "invalid_config");
    await rejectsWith(
      b.createTopic({ name: "x", partitions: 1, config: { nope: 1 } }),
      "invalid_config",
    );
    await b.createTopic({ name: "a", partitions: 1 });
    expect((await b.listTopics()).map((t) => t.name)).toEqual(["a", "orders"]);
    await b.deleteTopic("orders");
    await rejectsWith(b.describeTopic("orders"), "topic_not_found");
    await rejectsWith(b.deleteTopic("orders"), "topic_not_found");
    const again = await b.createTopic({ name: "orders", partitions: 1 });
    expect(again.partitions[0].highWatermark).toBe(0);
  });

  it("routes keyed records by murmur2, keyless ones round-robin per request, and reports spans in request order", async () => {
    const b = await broker(fresh());
    await b.createTopic({ name: "t", partitions: 4 });
    const keys = ["alpha", "beta", "gamma", "delta", "epsilon"];
    const batch = new EntryBatchBuilder();
    for (const k of keys) batch.add(utf8(k), utf8(`v-${k}`));
    const res = await b.produce({ topic: "t", batch: batch.build() });
    const placed = res.spans.flatMap((s) =>
      Array.from({ length: s.count }, (_, i) => ({
        partition: s.partition,
        offset: s.baseOffset + i,
      })),
    );
    expect(placed.map((p) => p.partition)).toEqual(keys.map((k) => partitionForKey(utf8(k), 4)));
    for (const [i, p] of placed.entries()) {
      const r = await b.fetch({
        topic: "t",
        partition: p.partition,
        offset: p.offset,
        maxRecords: 1,
      });
      expect(recordValues(r.records.bytes)).toEqual([`v-${keys[i]}`]);
    }
    const keyless = async () =>
      (
        await b.produce({
          topic: "t",
          batch: new EntryBatchBuilder().add(null, utf8("a")).add(null, utf8("b")).build(),
        })
      ).spans;
    const first = await keyless();
    const second = await keyless();
    expect(first).toHaveLength(1);
    expect(first[0].count).toBe(2);
    expect(second[0].partition).toBe((first[0].partition + 1) % 4);
  });

  it("honours per-record partitions and refuses a partition that does not exist, appending nothing", async () => {
    const b = await broker(fresh());
    await b.createTopic({ name: "t", partitions: 2 });
    const batch = new EntryBatchBuilder()
      .add(null, utf8("x"))
      .add(null, utf8("y"))
      .add(null, utf8("z"))
      .build();
    const res = await b.produce({ topic: "t", batch, partitions: Int32Array.from([1, 0, 1]) });
    expect(res.spans).toEqual([
      { partition: 1, baseOffset: 0, count: 1 },
      { partition: 0, baseOffset: 0, count: 1 },
      { partition: 1, baseOffset: 1, count: 1 },
    ]);
    await rejectsWith(
      b.produce({ topic: "t", batch, partitions: Int32Array.from([0, 5, 1]) }),
      "partition_not_found",
    );
    await rejectsWith(b.produce({ topic: "t", batch, partition: 2 }), "partition_not_found");
    const d = await b.describeTopic("t");
    expect(d.partitions.map((p) => p.highWatermark)).toEqual([1, 2]);
  });

  it("refuses timestamps too far ahead of its clock and negative ones, appending nothing", async () => {
    const clock = new ManualClock(1_000_000);
    const b = await broker(fresh(), clock);
    await b.createTopic({ name: "t", partitions: 1, config: { max_timestamp_skew_ms: 1000 } });
    const ahead = new EntryBatchBuilder()
      .add(null, utf8("ok"), 5)
      .add(null, utf8("late"), 1_001_001)
      .build();
    await rejectsWith(b.produce({ topic: "t", batch: ahead }), "invalid_timestamp");
    expect((await b.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(0);
    const stamped = await b.produce({
      topic: "t",
      batch: new EntryBatchBuilder().add(null, utf8("now")).build(),
    });
    const r = await b.fetch({ topic: "t", partition: 0, offset: stamped.spans[0].baseOffset });
    const c = new RecordCursor().reset(r.records.bytes);
    c.decode(0);
    expect(c.timestampMs).toBe(1_000_000);
  });

  it("validates fetch parameters and answers out of range with offset_out_of_range", async () => {
    const b = await broker(fresh());
    await b.createTopic({ name: "t", partitions: 1 });
    await b.produce({ topic: "t", batch: new EntryBatchBuilder().add(null, utf8("a")).build() });
    await rejectsWith(b.fetch({ topic: "t", partition: 0, offset: 2 }), "offset_out_of_range");
    await rejectsWith(b.fetch({ topic: "t", partition: 0, offset: -1 }), "invalid_request");
    await rejectsWith(
      b.fetch({ topic: "t", partition: 0, offset: 0, maxRecords: 0 }),
      "invalid_request",
    );
    await rejectsWith(
      b.fetch({ topic: "t", partition: 0, offset: 0, waitMs: 60_001 }),
      "invalid_request",
    );
    await rejectsWith(b.fetch({ topic: "t", partition: 1, offset: 0 }), "partition_not_found");
    await rejectsWith(b.fetch({ topic: "nope", partition: 0, offset: 0 }), "topic_not_found");
  });

  it("wakes a long-poll when a record arrives and times out on its clock otherwise", async () => {
    const clock = new ManualClock();
    const b = await broker(fresh(), clock);
    await b.createTopic({ name: "t", partitions: 1 });
    const waiting = b.fetch({ topic: "t", partition: 0, offset: 0, waitMs: 10_000 });
    await b.produce({
      topic: "t",
      batch: new EntryBatchBuilder().add(null, utf8("hello")).build(),
    });
    const r = await waiting;
    expect(recordValues(r.records.bytes)).toEqual(["hello"]);
    const idle = b.fetch({ topic: "t", partition: 0, offset: 1, waitMs: 10_000 });
    await new Promise((res) => setTimeout(res, 20));
    clock.advance(10_000);
    expect((await idle).records.count).toBe(0);
    const aborter = new AbortController();
    const aborted = b.fetch({
      topic: "t",
      partition: 0,
      offset: 1,
      waitMs: 10_000,
      signal: aborter.signal,
    });
    aborter.abort();
    expect((await aborted).records.count).toBe(0);
  });

  it("keeps topics, config and records across a restart", async () => {
    const dir = fresh();
    let b = await broker(dir);
    await b.createTopic({ name: "keep", partitions: 2, config: { segment_bytes: 2048 } });
    for (let i = 0; i < 50; i++)
      await b.produce({
        topic: "keep",
        partition: i % 2,
        batch: new EntryBatchBuilder().add(null, utf8(`r${i}`)).build(),
      });
    await b.close();
    b = await broker(dir);
    const d = await b.describeTopic("keep");
    expect(d.config.segment_bytes).toBe(2048);
    expect(d.partitions.map((p) => p.highWatermark)).toEqual([25, 25]);
    const r = await b.fetch({ topic: "keep", partition: 1, offset: 0, maxRecords: 100 });
    expect(recordValues(r.records.bytes)).toEqual(
      Array.from({ length: 25 }, (_, i) => `r${i * 2 + 1}`),
    );
  });

  it("makes a topic with an unparseable topic.json unavailable without resetting it (docs/decisions.md §9)", async () => {
    const dir = fresh();
    let b = await broker(dir);
    await b.createTopic({ name: "ok", partitions: 1 });
    await b.createTopic({ name: "broken", partitions: 1 });
    await b.close();
    writeFileSync(`${dir}/topics/broken/topic.json`, "{ not json");
    const logger = new MemoryLogger();
    b = await broker(dir, new ManualClock(), logger);
    await rejectsWith(b.describeTopic("broken"), "unavailable");
    await rejectsWith(b.createTopic({ name: "broken", partitions: 1 }), "topic_exists");
    expect((await b.describeTopic("ok")).name).toBe("ok");
    expect(logger.named("recovery.topic_unavailable")).toHaveLength(1);
    expect(existsSync(`${dir}/topics/broken/0`)).toBe(true);
  });

  it("removes a topic directory a crash left without topic.json and nothing else, so the name can be created", async () => {
    const dir = fresh();
    let b = await broker(dir);
    await b.close();
    mkdirSync(`${dir}/topics/half`, { mode: 0o700 });
    const logger = new MemoryLogger();
    b = await broker(dir, new ManualClock(), logger);
    expect(logger.named("recovery.incomplete_topic_removed")).toHaveLength(1);
    expect(existsSync(`${dir}/topics/half`)).toBe(false);
    await rejectsWith(b.describeTopic("half"), "topic_not_found");
    expect((await b.createTopic({ name: "half", partitions: 1 })).name).toBe("half");
  });

  it("answers a failed disk read during a fetch with storage_error, not an internal error", async () => {
    const dir = fresh();
    let failReads = false;
    const real = new NodeFileSystem();
    const flaky = wrapFileSystem(real, {
      read: (h, path, buf, position) =>
        failReads && path.endsWith(".log")
          ? Promise.reject(new FsError("EIO", path))
          : h.read(buf, position),
    });
    const { broker: b } = await openTestBroker({ fs: flaky, dataDir: dir });
    await b.createTopic({ name: "t", partitions: 1 });
    await b.produce({ topic: "t", batch: new EntryBatchBuilder().add(null, utf8("a")).build() });
    failReads = true;
    await rejectsWith(b.fetch({ topic: "t", partition: 0, offset: 0 }), "storage_error");
    failReads = false;
    expect((await b.fetch({ topic: "t", partition: 0, offset: 0 })).records.count).toBe(1);
  });

  it("reports recovery progress while a start loads many topics", async () => {
    const dir = fresh();
    let b = await broker(dir);
    for (let i = 0; i < 6; i++) await b.createTopic({ name: `t${i}`, partitions: 1 });
    await b.close();
    // A clock that moves a second every time it is read: every topic takes "a second" to load.
    let now = 0;
    const manual = new ManualClock();
    const slow = {
      nowMs: () => (now += 1000),
      setTimer: manual.setTimer.bind(manual),
      afterIo: manual.afterIo.bind(manual),
      waitForIo: manual.waitForIo.bind(manual),
    };
    const logger = new MemoryLogger();
    b = (await openTestBroker({ fs: new NodeFileSystem(), dataDir: dir, clock: slow, logger }))
      .broker;
    const progress = logger.named("recovery.progress");
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)!.topics_total).toBe(6);
  });

  it("creates files 0600 and directories 0700 under umask 000, including topic.json, rebuilt indexes and new segments", async () => {
    const dir = fresh();
    const old = process.umask(0);
    try {
      let b = await broker(dir);
      await b.createTopic({ name: "m", partitions: 2, config: { segment_bytes: 1024 } });
      for (let i = 0; i < 20; i++)
        await b.produce({
          topic: "m",
          partition: i % 2,
          batch: new EntryBatchBuilder().add(null, utf8("z".repeat(200))).build(),
        });
      await b.updateTopicConfig!("m", { retention_ms: 3_600_000 });
      await b.close();
      for (const n of readdirSync(`${dir}/topics/m/0`))
        if (n.endsWith(".index")) unlinkSync(`${dir}/topics/m/0/${n}`);
      b = await broker(dir);
      await b.produce({
        topic: "m",
        partition: 0,
        batch: new EntryBatchBuilder().add(null, utf8("after")).build(),
      });
    } finally {
      process.umask(old);
    }
    let files = 0;
    const walk = (p: string): void => {
      const st = statSync(p);
      if (st.isDirectory()) {
        expect(st.mode & 0o777, p).toBe(0o700);
        for (const n of readdirSync(p)) walk(`${p}/${n}`);
      } else {
        files++;
        expect(st.mode & 0o777, p).toBe(0o600);
      }
    };
    walk(dir);
    expect(
      readdirSync(`${dir}/topics/m/0`).filter((n) => n.endsWith(".index")).length,
    ).toBeGreaterThan(2);
    expect(files).toBeGreaterThan(8);
  });

  it("answers the long-polls of a busy tail together, with every record up to the high watermark and none above", async () => {
    const clock = new ManualClock();
    const b = await broker(fresh(), clock);
    await b.createTopic({ name: "t", partitions: 1 });
    const one = () => new EntryBatchBuilder().add(null, utf8("x")).build();
    const settle = () => new Promise((r) => setTimeout(r, 20));
    const readers = 10;
    const poll = (offset: number, maxRecords?: number) =>
      b.fetch({ topic: "t", partition: 0, offset, waitMs: 5000, maxRecords });

    // Readers waiting at the end, woken together a span after the record.
    const first = Array.from({ length: readers }, () => poll(0));
    await b.produce({ topic: "t", partition: 0, batch: one() });
    clock.advance(10);
    const answered = await Promise.all(first);
    for (const r of answered)
      expect([r.records.count, r.nextOffset, r.highWatermark]).toEqual([1, 1, 1]);

    // A record arrives before they come back: they are held (not answered, not above what is
    // durable) until the span since that wake-up ends, then get everything that arrived.
    await b.produce({ topic: "t", partition: 0, batch: one() });
    let done = 0;
    const second = Array.from({ length: readers }, () =>
      poll(1).then((r) => {
        done++;
        return r;
      }),
    );
    // A reader asking for fewer records than are waiting is answered at once.
    const behind = await poll(0, 1);
    expect([behind.records.count, behind.nextOffset]).toEqual([1, 1]);
    await b.produce({ topic: "t", partition: 0, batch: one() });
    await settle();
    expect(done).toBe(0);
    clock.advance(10);
    for (const r of await Promise.all(second)) {
      expect([r.records.count, r.nextOffset, r.highWatermark]).toEqual([2, 3, 3]);
      expect(r.nextOffset).toBeLessThanOrEqual(r.highWatermark);
    }
    await b.close();
  });
});
