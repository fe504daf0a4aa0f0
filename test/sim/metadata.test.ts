/**
 * Metadata files under crashes (docs/storage.md "Writes and durability", "replaced atomically"; docs/decisions.md §9):
 * `writeJsonAtomic` with power lost before each of its mutations, in every crash mode; topic
 * creation with power lost before each of its mutations; leftover temporary files; and empty or
 * unparseable `topic.json` files, which make only that topic unavailable.
 */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem, type CrashMode } from "../../src/fs/memory.ts";
import { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import {
  isTempFileName,
  listStaleTempFiles,
  readJsonFile,
  writeJsonAtomic,
} from "../../src/storage/metadata.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";

const crashModes: { mode: CrashMode; seed: number }[] = [
  { mode: "random", seed: 1 },
  { mode: "random", seed: 2 },
  { mode: "random", seed: 3 },
  { mode: "dropAll", seed: 0 },
  { mode: "keepAll", seed: 0 },
];

const oldValue = { name: "orders", partitions: 3, config: { segment_bytes: 1024 } };
const newValue = {
  name: "orders",
  partitions: 3,
  config: { segment_bytes: 2048, retention_ms: 60_000, note: "x".repeat(300) },
};

/** A disk holding `/m/topic.json` = oldValue, durably. */
function diskWithOldFile(): MemoryFileSystem {
  const mem = new MemoryFileSystem({ seed: 1 });
  mem.writeFileSync("/m/topic.json", utf8(JSON.stringify(oldValue)));
  return mem;
}

async function openBroker(fs: MemoryFileSystem) {
  const logger = new MemoryLogger();
  const broker = await LocalBroker.open({ fs, dataDir: "/data", clock: new ManualClock(), logger });
  return { broker, logger };
}

async function errorOf(promise: Promise<unknown>): Promise<BrokerError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BrokerError);
  return err as BrokerError;
}

describe("atomic metadata files under crashes", () => {
  it("leaves either the old or the new topic.json after power loss before any mutation of writeJsonAtomic, in every crash mode", async () => {
    const probe = new MemoryFileSystem({ disk: diskWithOldFile() });
    await writeJsonAtomic(probe, "/m/topic.json", newValue);
    const mutations = probe.bootMutationCount;
    expect(mutations).toBeGreaterThanOrEqual(5); // create, write, sync, rename, syncDir
    const outcomes = new Set<string>();
    for (let k = 1; k <= mutations + 1; k++) {
      for (const { mode, seed } of crashModes) {
        const mem = diskWithOldFile();
        const fs = new MemoryFileSystem({
          disk: mem,
          powerCutAtMutation: k,
          crashAtPowerCut: { seed, mode },
        });
        const done = await writeJsonAtomic(fs, "/m/topic.json", newValue).then(
          () => true,
          () => false,
        );
        if (done) mem.crash({ seed, mode }); // power lost right after it resolved
        const read = await readJsonFile(mem, "/m/topic.json");
        expect(read, `power lost before mutation ${k} (${mode} ${seed})`).toHaveProperty("value");
        const value = (read as { value: unknown }).value;
        if (done) expect(value, `resolved, then power lost (${mode} ${seed})`).toEqual(newValue);
        else expect([oldValue, newValue]).toContainEqual(value);
        outcomes.add(JSON.stringify(value) === JSON.stringify(newValue) ? "new" : "old");
        for (const name of await mem.readdir("/m"))
          expect(name === "topic.json" || isTempFileName(name), `leftover ${name}`).toBe(true);
      }
    }
    expect([...outcomes].sort()).toEqual(["new", "old"]);
  });

  it("names leftover temporary files so they are found and ignored", async () => {
    const mem = diskWithOldFile();
    const fs = new MemoryFileSystem({
      disk: mem,
      powerCutAtMutation: 4,
      crashAtPowerCut: { seed: 0, mode: "keepAll" },
    }); // before the rename
    await expect(writeJsonAtomic(fs, "/m/topic.json", newValue)).rejects.toThrow(/lost power/);
    const stale = await listStaleTempFiles(mem, "/m");
    expect(stale).toHaveLength(1);
    expect(stale[0]).toMatch(/^\.topic\.json\.tmp-\d+$/);
    expect(await readJsonFile(mem, "/m/topic.json")).toEqual({
      value: oldValue,
      bytes: expect.any(Uint8Array),
    });
  });
});

describe("topic creation under crashes", () => {
  it("after power loss before any mutation of createTopic, the topic is absent, or complete with every partition; topic.json is never half-written", async () => {
    const base = new MemoryFileSystem({ seed: 1 });
    const first = await openBroker(base);
    const before = base.mutationCount;
    await first.broker.createTopic({ name: "orders", partitions: 3 });
    const mutations = base.mutationCount - before;
    await first.broker.close();
    expect(mutations).toBeGreaterThan(10);
    const seen = new Set<string>();
    for (let k = 1; k <= mutations + 1; k++) {
      for (const { mode, seed } of crashModes) {
        const mem = new MemoryFileSystem({ seed: 1 });
        const { broker } = await openBroker(mem);
        await broker.close();
        const fs = new MemoryFileSystem({ disk: mem });
        const { broker: dying } = await openBroker(fs);
        fs.armPowerCut({ inMutations: k, crash: { seed, mode } });
        const created = await dying.createTopic({ name: "orders", partitions: 3 }).then(
          () => true,
          () => false,
        );
        if (created) mem.crash({ seed, mode });
        const { broker: after } = await openBroker(mem);
        const topics = await after.listTopics();
        const unavailable = after.describeStorage().unavailable;
        const label = `power lost before mutation ${k} of createTopic (${mode} ${seed})`;
        if (created)
          expect(
            topics.map((t) => t.name),
            label,
          ).toEqual(["orders"]);
        if (topics.length === 1) {
          expect(
            topics[0].partitions.map((p) => p.partition),
            label,
          ).toEqual([0, 1, 2]);
          seen.add("complete");
          // Every partition takes appends and serves them.
          for (const p of [0, 1, 2]) {
            const r = await after.produce({
              topic: "orders",
              partition: p,
              batch: new EntryBatchBuilder().add(null, utf8("v")).build(),
            });
            expect(r.spans[0].baseOffset).toBe(0);
          }
        } else {
          expect(topics, label).toEqual([]);
          // What may be left is a directory whose creation never reached its commit point.
          for (const u of unavailable) expect(u.reason, label).toMatch(/is missing/);
          seen.add(unavailable.length > 0 ? "directory without topic.json" : "absent");
        }
        await after.close();
      }
    }
    expect(seen.has("complete")).toBe(true);
    expect(seen.has("absent")).toBe(true);
  });
});

describe("metadata files that are damaged or left over at start (docs/decisions.md §9)", () => {
  async function twoTopics(): Promise<MemoryFileSystem> {
    const mem = new MemoryFileSystem({ seed: 1 });
    const { broker } = await openBroker(mem);
    await broker.createTopic({ name: "a", partitions: 1 });
    await broker.createTopic({ name: "b", partitions: 2 });
    await broker.produce({
      topic: "a",
      partition: 0,
      batch: new EntryBatchBuilder().add(null, utf8("in a")).build(),
    });
    await broker.produce({
      topic: "b",
      partition: 1,
      batch: new EntryBatchBuilder().add(null, utf8("in b")).build(),
    });
    await broker.close();
    return mem;
  }

  for (const [what, bytes] of [
    ["an empty", new Uint8Array(0)],
    ["an unparseable", utf8('{"name": "a", "partitions": ')],
    ["a wrong-shaped (valid JSON)", utf8('["a", 1]')],
  ] as const) {
    it(`makes only the topic with ${what} topic.json unavailable, reports it and leaves the file as it is`, async () => {
      const mem = await twoTopics();
      mem.writeFileSync("/data/topics/a/topic.json", bytes);
      const { broker, logger } = await openBroker(mem);
      expect((await broker.listTopics()).map((t) => t.name)).toEqual(["b"]);
      expect((await errorOf(broker.describeTopic("a"))).kind.code).toBe("unavailable");
      expect(
        (
          await errorOf(
            broker.produce({
              topic: "a",
              partition: 0,
              batch: new EntryBatchBuilder().add(null, utf8("x")).build(),
            }),
          )
        ).kind.code,
      ).toBe("unavailable");
      expect((await errorOf(broker.fetch({ topic: "a", partition: 0, offset: 0 }))).kind.code).toBe(
        "unavailable",
      );
      expect((await errorOf(broker.createTopic({ name: "a", partitions: 1 }))).kind.code).toBe(
        "topic_exists",
      );
      expect(logger.named("recovery.topic_unavailable")).toMatchObject([
        { topic: "a", file: "/data/topics/a/topic.json" },
      ]);
      // The other topic works: its record is there and it takes appends.
      expect((await broker.fetch({ topic: "b", partition: 1, offset: 0 })).records.count).toBe(1);
      expect(
        (
          await broker.produce({
            topic: "b",
            partition: 1,
            batch: new EntryBatchBuilder().add(null, utf8("more")).build(),
          })
        ).spans[0].baseOffset,
      ).toBe(1);
      await broker.close();
      expect(mem.readFileSync("/data/topics/a/topic.json")).toEqual(bytes);
      // Repaired, the topic comes back with its data.
      mem.writeFileSync(
        "/data/topics/a/topic.json",
        utf8(JSON.stringify({ name: "a", partitions: 1, config: {} })),
      );
      const { broker: repaired } = await openBroker(mem);
      expect((await repaired.fetch({ topic: "a", partition: 0, offset: 0 })).records.count).toBe(1);
      await repaired.close();
    });
  }

  it("removes temp files of interrupted metadata writes at start, reporting each once, and keeps what is not the writer's", async () => {
    const mem = await twoTopics();
    mem.writeFileSync("/data/topics/a/.topic.json.tmp-7", utf8('{"name": "a", "partitions": 99'));
    mem.writeFileSync("/data/groups/.g1.json.tmp-4", utf8('{"version":'));
    mem.writeFileSync("/data/.producers.json.tmp-2", utf8("{"));
    mem.writeFileSync("/data/topics/.a.tmp-3", utf8("garbage")); // not where the writer writes
    const { broker, logger } = await openBroker(mem);
    expect((await broker.listTopics()).map((t) => [t.name, t.partitions.length])).toEqual([
      ["a", 1],
      ["b", 2],
    ]);
    expect(
      logger
        .named("recovery.temp_file_removed")
        .map((f) => f.file)
        .sort(),
    ).toEqual([
      "/data/.producers.json.tmp-2",
      "/data/groups/.g1.json.tmp-4",
      "/data/topics/a/.topic.json.tmp-7",
    ]);
    expect(logger.named("recovery.stray_file").map((f) => f.file)).toEqual([
      "/data/topics/.a.tmp-3",
    ]);
    const files = mem.listTree("/data");
    for (const gone of [
      "/data/.producers.json.tmp-2",
      "/data/groups/.g1.json.tmp-4",
      "/data/topics/a/.topic.json.tmp-7",
    ])
      expect(files).not.toContain(gone);
    expect(files).toContain("/data/topics/.a.tmp-3");
    await broker.close();
    // Reported once: the next start finds nothing of the writer's.
    const { broker: again, logger: againLog } = await openBroker(mem);
    expect(againLog.named("recovery.temp_file_removed")).toEqual([]);
    expect(againLog.named("recovery.stray_file").map((f) => f.file)).toEqual([
      "/data/topics/.a.tmp-3",
    ]);
    await again.close();
  });

  it("keeps a temp file beside a target that cannot be read, reporting it, until the target is repaired", async () => {
    const mem = await twoTopics();
    const good = utf8(JSON.stringify({ name: "a", partitions: 1, config: {} }));
    mem.writeFileSync("/data/topics/a/topic.json", utf8('{"name": "a", "partitions": '));
    mem.writeFileSync("/data/topics/a/.topic.json.tmp-9", good);
    const { broker, logger } = await openBroker(mem);
    expect((await errorOf(broker.describeTopic("a"))).kind.code).toBe("unavailable");
    expect(logger.named("recovery.stray_file")).toMatchObject([
      {
        file: "/data/topics/a/.topic.json.tmp-9",
        reason: expect.stringMatching(/target that cannot be read/),
      },
    ]);
    expect(mem.listTree("/data/topics/a")).toContain("/data/topics/a/.topic.json.tmp-9");
    await broker.close();
    mem.writeFileSync("/data/topics/a/topic.json", good);
    const { broker: repaired, logger: repairedLog } = await openBroker(mem);
    expect((await repaired.describeTopic("a")).name).toBe("a");
    expect(repairedLog.named("recovery.temp_file_removed").map((f) => f.file)).toEqual([
      "/data/topics/a/.topic.json.tmp-9",
    ]);
    await repaired.close();
  });
});
