/**
 * `PartitionLog.appendTo`, the append answered through a sink instead of a promise (the
 * small-request path of docs/benchmarks.md "Small requests (issue #22)"): what its sinks hear,
 * and when, against the same log the promise path writes.
 */
import { describe, expect, it } from "vitest";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { type AppendSink, PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { tempDir } from "../helpers/tmp.ts";
import { decodeRecords } from "../helpers/records.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";

function batchOf(values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v));
  return b.build();
}

async function openLog(
  dir: string,
  logger = new MemoryLogger(),
  fs: FileSystem = new NodeFileSystem(),
) {
  return PartitionLog.open({
    fs,
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger,
    config: () => ({ segmentBytes: 1024 * 1024, segmentMs: 7 * 24 * 3600_000 }),
  });
}

/** A sink that records what it heard, and a promise of its one answer. */
function recordingSink() {
  const heard: unknown[] = [];
  let settle!: (v: unknown) => void;
  const answered = new Promise((r) => (settle = r));
  const sink: AppendSink = {
    appended(tag, baseOffset, count) {
      heard.push({ tag, baseOffset, count });
      settle(heard[0]);
    },
    failed(err) {
      heard.push({ failed: (err as { kind?: string }).kind ?? String(err) });
      settle(heard[0]);
    },
  };
  return { sink, heard, answered };
}

describe("PartitionLog.appendTo (the sink path)", () => {
  it("answers each sink once, with its tag, at the offsets the log holds, only after the fsync", async () => {
    const { dir } = tempDir();
    // Every fsync of the log is counted and held until released, so an answer before it shows.
    let syncs = 0;
    let release: (() => void) | null = null;
    const fs = wrapFileSystem(new NodeFileSystem(), {
      sync: (inner, path) => {
        if (!path.endsWith(".log")) return inner.sync();
        syncs++;
        return new Promise<void>((resolve) => {
          release = () => resolve(inner.sync());
        });
      },
    });
    const log = await openLog(`${dir}/p`, new MemoryLogger(), fs);
    const sinks = Array.from({ length: 5 }, () => recordingSink());
    sinks.forEach((s, i) => log.appendTo(batchOf([`s${i}a`, `s${i}b`]), s.sink, 100 + i));
    // A promise append in the same turn joins the same group, after them.
    const promised = log.append(batchOf(["p"]));
    for (let i = 0; i < 200 && release === null; i++) await new Promise((r) => setTimeout(r, 5));
    expect(release).not.toBeNull();
    expect(log.logEndOffset).toBe(11);
    expect(sinks.map((s) => s.heard.length)).toEqual([0, 0, 0, 0, 0]);
    (release as unknown as () => void)();
    await Promise.all(sinks.map((s) => s.answered));
    expect(sinks.map((s) => s.heard)).toEqual(
      sinks.map((_, i) => [{ tag: 100 + i, baseOffset: 2 * i, count: 2 }]),
    );
    expect(await promised).toEqual({ baseOffset: 10, count: 1 });
    expect(syncs).toBe(1);
    const read = await log.read({ offset: 0, maxRecords: 100, maxBytes: 1 << 20 });
    expect(decodeRecords(read.bytes).map((r) => r.value)).toEqual([
      ...sinks.flatMap((_, i) => [`s${i}a`, `s${i}b`]),
      "p",
    ]);
    await log.close();
  });

  it("answers an empty batch at the log end, and a closed log's refusal, before it returns", async () => {
    const { dir } = tempDir();
    const log = await openLog(`${dir}/p`);
    await log.append(batchOf(["a", "b"]));
    const empty = recordingSink();
    log.appendTo(new EntryBatchBuilder().build(), empty.sink, 7);
    expect(empty.heard).toEqual([{ tag: 7, baseOffset: 2, count: 0 }]);
    await log.close();
    const closed = recordingSink();
    log.appendTo(batchOf(["c"]), closed.sink, 8);
    expect(closed.heard).toEqual([{ failed: "closed" }]);
  });

  it("a failed fsync answers every waiting sink fenced, and later appends at once", async () => {
    const { dir } = tempDir();
    let failing = false;
    const fs = wrapFileSystem(new NodeFileSystem(), {
      sync: (inner, path) =>
        failing && path.endsWith(".log")
          ? Promise.reject(new Error("EIO: the disk failed"))
          : inner.sync(),
    });
    const log = await openLog(`${dir}/p`, new MemoryLogger(), fs);
    await log.append(batchOf(["kept"]));
    failing = true;
    const sinks = Array.from({ length: 3 }, () => recordingSink());
    sinks.forEach((s, i) => log.appendTo(batchOf([`x${i}`]), s.sink, i));
    await Promise.all(sinks.map((s) => s.answered));
    expect(sinks.map((s) => s.heard)).toEqual(sinks.map(() => [{ failed: "fenced" }]));
    const after = recordingSink();
    log.appendTo(batchOf(["y"]), after.sink, 9);
    expect(after.heard).toEqual([{ failed: "fenced" }]);
    expect(log.highWatermark).toBe(1);
    await log.close();
  });

  it("answers the waiters an fsync covered, in order, and a failed next fsync fences only those it did not", async () => {
    const { dir } = tempDir();
    // Each fsync of the log is held until the test lets it end, with success or an error.
    const held: ((error?: Error) => void)[] = [];
    const fs = wrapFileSystem(new NodeFileSystem(), {
      sync: (inner, path) => {
        if (!path.endsWith(".log")) return inner.sync();
        return new Promise<void>((resolve, reject) => {
          held.push((error) => (error === undefined ? resolve(inner.sync()) : reject(error)));
        });
      },
    });
    const log = await openLog(`${dir}/p`, new MemoryLogger(), fs);
    const waitForSync = async (n: number) => {
      for (let i = 0; i < 200 && held.length < n; i++) await new Promise((r) => setTimeout(r, 5));
      expect(held.length).toBe(n);
    };
    const first = Array.from({ length: 3 }, () => recordingSink());
    first.forEach((s, i) => log.appendTo(batchOf([`a${i}`]), s.sink, i));
    await waitForSync(1);
    // Written while the first fsync runs: they wait for the next one, behind the first three.
    const second = Array.from({ length: 3 }, () => recordingSink());
    second.forEach((s, i) => log.appendTo(batchOf([`b${i}`, `b${i}`]), s.sink, 10 + i));
    for (let i = 0; i < 200 && log.logEndOffset < 9; i++)
      await new Promise((r) => setTimeout(r, 5));
    expect(log.logEndOffset).toBe(9);
    held[0]();
    await Promise.all(first.map((s) => s.answered));
    expect(first.map((s) => s.heard)).toEqual(
      first.map((_, i) => [{ tag: i, baseOffset: i, count: 1 }]),
    );
    expect(second.map((s) => s.heard.length)).toEqual([0, 0, 0]);
    expect(log.highWatermark).toBe(3);
    await waitForSync(2);
    held[1](new Error("EIO: the disk failed"));
    await Promise.all(second.map((s) => s.answered));
    expect(second.map((s) => s.heard)).toEqual(second.map(() => [{ failed: "fenced" }]));
    // Each sink was answered once: the fence did not answer the covered ones again.
    expect(first.map((s) => s.heard.length)).toEqual([1, 1, 1]);
    expect(log.highWatermark).toBe(3);
    await log.close();
  });

  it("requests queued past a group's byte limit are written as the next group, answered in order", async () => {
    const { dir } = tempDir();
    // The log's writes of records (not the zeros written ahead), by size.
    const writes: number[] = [];
    const fs = wrapFileSystem(new NodeFileSystem(), {
      write: (inner, path, bytes, position) => {
        if (path.endsWith(".log") && bytes.length > 1024 * 1024 && bytes.some((b) => b !== 0))
          writes.push(bytes.length);
        return inner.write(bytes, position);
      },
    });
    const log = await PartitionLog.open({
      fs,
      dir: `${dir}/p`,
      name: "t/0",
      clock: new ManualClock(),
      logger: new MemoryLogger(),
      config: () => ({ segmentBytes: 64 * 1024 * 1024, segmentMs: 7 * 24 * 3600_000 }),
    });
    // Three requests of 3 MiB each: the first two fit a group (8 MiB), the third starts the next.
    const big = (tag: string) => {
      const b = new EntryBatchBuilder();
      for (let i = 0; i < 3; i++) b.add(null, new Uint8Array(1024 * 1024).fill(tag.charCodeAt(0)));
      return b.build();
    };
    const sinks = ["x", "y", "z"].map(() => recordingSink());
    ["x", "y", "z"].forEach((tag, i) => log.appendTo(big(tag), sinks[i].sink, i));
    await Promise.all(sinks.map((s) => s.answered));
    expect(sinks.map((s) => s.heard)).toEqual(
      sinks.map((_, i) => [{ tag: i, baseOffset: 3 * i, count: 3 }]),
    );
    expect(writes.map((n) => Math.round(n / (1024 * 1024)))).toEqual([6, 3]);
    const read = await log.read({ offset: 0, maxRecords: 100, maxBytes: 16 << 20 });
    expect(decodeRecords(read.bytes).map((r) => r.value[0])).toEqual([..."xxxyyyzzz"]);
    await log.close();
  });

  it("a sink that throws is logged, and the requests after it are still answered", async () => {
    const { dir } = tempDir();
    const logger = new MemoryLogger();
    const log = await openLog(`${dir}/p`, logger);
    const throwing: AppendSink = {
      appended() {
        throw new Error("a caller's bug");
      },
      failed() {
        throw new Error("a caller's bug");
      },
    };
    const after = recordingSink();
    log.appendTo(batchOf(["a"]), throwing, 0);
    log.appendTo(batchOf(["b"]), after.sink, 1);
    expect(await after.answered).toEqual({ tag: 1, baseOffset: 1, count: 1 });
    expect(logger.named("storage.sink_failed").map((f) => f.error)).toEqual(["a caller's bug"]);
    expect(log.highWatermark).toBe(2);
    await log.close();
  });
});
