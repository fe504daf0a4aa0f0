import { describe, expect, it } from "vitest";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { FsError, type FileSystem } from "../../src/fs/types.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { tempDir } from "../helpers/tmp.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { fetchValues } from "../helpers/records.ts";

async function broker(
  dataDir: string,
  options: { fs?: FileSystem; logger?: MemoryLogger; coldStorageDir?: string } = {},
) {
  const { broker: b } = await openTestBroker({
    fs: options.fs ?? new NodeFileSystem(),
    dataDir,
    logger: options.logger,
    coldStorageDir: options.coldStorageDir,
    cleanupIntervalMs: 0,
  });
  return b;
}

async function closeBroker(b: LocalBroker) {
  await b.close();
}

function fresh() {
  return tempDir().dir;
}

async function produce(b: LocalBroker, topic: string, value: string) {
  await b.produce({
    topic,
    partition: 0,
    batch: new EntryBatchBuilder().add(null, utf8(value)).build(),
  });
}

async function values(b: LocalBroker, topic: string): Promise<string[]> {
  return fetchValues(b, topic);
}

/** The node file system, with `rename` and `removeTree` replaceable (`renameGate` is awaited before a rename into the trash). */
function faultyFs(faults: {
  rename?: (from: string, to: string) => Error | null;
  removeTree?: (path: string) => Error | null;
  renameGate?: () => Promise<void>;
}): FileSystem {
  const inner = new NodeFileSystem();
  return wrapFileSystem(
    inner,
    {},
    {
      rename: async (from, to) => {
        if (to.includes("/trash/")) await faults.renameGate?.();
        const err = faults.rename?.(from, to) ?? null;
        if (err !== null) throw err;
        return inner.rename(from, to);
      },
      removeTree: async (path) => {
        const err = faults.removeTree?.(path) ?? null;
        if (err !== null) throw err;
        return inner.removeTree(path);
      },
    },
  );
}

describe("deleting a topic", () => {
  it("works for every valid name length, up to 249 characters, and the topic stays deleted after a restart", async () => {
    const dir = `${fresh()}/data`;
    let b = await broker(dir);
    const names = [1, 200, 240, 245, 249].map((n) => "b".repeat(n));
    for (const name of names) {
      await b.createTopic({ name, partitions: 1 });
      await produce(b, name, "keepme");
      await b.deleteTopic(name);
      await expect(b.describeTopic(name)).rejects.toSatisfy(
        (e: unknown) => e instanceof BrokerError && e.kind.code === "topic_not_found",
      );
    }
    expect(await b.listTopics()).toEqual([]);
    expect(readdirSync(`${dir}/topics`)).toEqual([]);
    // A new topic of the longest name starts empty.
    await b.createTopic({ name: names[4], partitions: 1 });
    expect(await values(b, names[4])).toEqual([]);
    await b.deleteTopic(names[4]);
    await closeBroker(b);
    b = await broker(dir);
    expect(await b.listTopics()).toEqual([]);
  });

  it("keeps the topic listed and usable, with its records, when moving it to the trash fails, and says what failed", async () => {
    const dir = `${fresh()}/data`;
    let failRename = true;
    const b = await broker(dir, {
      fs: faultyFs({
        rename: (from, to) =>
          failRename && to.includes("/trash/")
            ? new FsError("EIO", from, `EIO: i/o error, rename '${from}'`)
            : null,
      }),
    });
    await b.createTopic({ name: "orders", partitions: 2 });
    await produce(b, "orders", "before");
    const err = await b.deleteTopic("orders").then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BrokerError);
    expect((err as BrokerError).message).toMatch(
      /^Cannot delete topic "orders": moving .*\/topics\/orders to .*\/trash\/.* failed, the topic is unchanged: EIO/,
    );
    expect((await b.listTopics()).map((t) => t.name)).toEqual(["orders"]);
    await produce(b, "orders", "after");
    expect(await values(b, "orders")).toEqual(["before", "after"]);
    await expect(b.createTopic({ name: "orders", partitions: 1 })).rejects.toSatisfy(
      (e: unknown) => e instanceof BrokerError && e.kind.code === "topic_exists",
    );
    failRename = false;
    await b.deleteTopic("orders");
    expect(await b.listTopics()).toEqual([]);
  });

  it("answers with the failed move, not the failure to reopen, when the topic cannot be opened again either; the topic is then unavailable and opens at the next start", async () => {
    const dir = `${fresh()}/data`;
    let fail = true;
    const inner = new NodeFileSystem();
    const fs = wrapFileSystem(
      inner,
      {},
      {
        rename: async (from, to) => {
          if (fail && to.includes("/trash/"))
            throw new FsError("EIO", from, `EIO: i/o error, rename '${from}'`);
          return inner.rename(from, to);
        },
        // Reopening lists the topic's directory first: that fails too while `fail` holds.
        readdir: async (path) => {
          if (fail && path.endsWith("/topics/orders"))
            throw new FsError("EIO", path, `EIO: i/o error, scandir '${path}'`);
          return inner.readdir(path);
        },
      },
    );
    let b = await broker(dir, { fs });
    await b.createTopic({ name: "orders", partitions: 1 });
    await produce(b, "orders", "kept");
    await expect(b.deleteTopic("orders")).rejects.toSatisfy(
      (e: unknown) =>
        e instanceof BrokerError &&
        /^Cannot delete topic "orders": moving .* failed, the topic is unchanged: EIO/.test(
          e.message,
        ),
    );
    await expect(b.fetch({ topic: "orders", partition: 0, offset: 0 })).rejects.toSatisfy(
      (e: unknown) =>
        e instanceof BrokerError &&
        e.kind.code === "unavailable" &&
        e.message.includes("opening it again after a failed delete failed"),
    );
    fail = false;
    await closeBroker(b);
    b = await broker(dir);
    expect(await values(b, "orders")).toEqual(["kept"]);
  });

  it("refuses requests to a topic while it is being deleted as unavailable, naming the deletion, then answers topic_not_found", async () => {
    let release: () => void = () => {};
    let reached: () => void = () => {};
    const atRename = new Promise<void>((r) => (reached = r));
    const gate = new Promise<void>((r) => (release = r));
    const b = await broker(`${fresh()}/data`, {
      fs: faultyFs({
        renameGate: () => {
          reached();
          return gate;
        },
      }),
    });
    await b.createTopic({ name: "orders", partitions: 1 });
    await produce(b, "orders", "x");
    const deleting = b.deleteTopic("orders");
    await atRename;
    await expect(b.fetch({ topic: "orders", partition: 0, offset: 0 })).rejects.toSatisfy(
      (e: unknown) =>
        e instanceof BrokerError &&
        e.kind.code === "unavailable" &&
        e.message === 'Cannot use topic "orders": it is being deleted',
    );
    await expect(b.deleteTopic("orders")).rejects.toSatisfy(
      (e: unknown) => e instanceof BrokerError && e.kind.code === "unavailable",
    );
    release();
    await deleting;
    await expect(b.fetch({ topic: "orders", partition: 0, offset: 0 })).rejects.toSatisfy(
      (e: unknown) => e instanceof BrokerError && e.kind.code === "topic_not_found",
    );
  });

  it("finishes an interrupted deletion at the next start: the trash entry and the topic's cold data go", async () => {
    const root = fresh();
    const dir = `${root}/data`;
    const cold = `${root}/cold`;
    const name = "c".repeat(249);
    const logger = new MemoryLogger();
    const b = await broker(dir, {
      logger,
      coldStorageDir: cold,
      fs: faultyFs({
        removeTree: (path) =>
          path.startsWith(cold) ? new FsError("EIO", path, `EIO: i/o error, rm '${path}'`) : null,
      }),
    });
    await b.createTopic({ name, partitions: 1 });
    await produce(b, name, "x");
    // Stands for segments retention offloaded earlier.
    mkdirSync(`${cold}/topics/${name}/0`, { recursive: true });
    writeFileSync(`${cold}/topics/${name}/0/00000000000000000000.log`, "old");
    await b.deleteTopic(name);
    expect(await b.listTopics()).toEqual([]);
    expect(logger.events.some((e) => e.event === "topic.delete_cleanup_failed")).toBe(true);
    expect(readdirSync(`${dir}/trash`).length).toBe(1);
    expect(readdirSync(`${dir}/trash`)[0].length).toBeLessThan(40);
    await closeBroker(b);

    const again = await broker(dir, { coldStorageDir: cold });
    expect(existsSync(`${dir}/trash`)).toBe(false);
    expect(existsSync(`${cold}/topics/${name}`)).toBe(false);
    expect(await again.listTopics()).toEqual([]);
  });
});
