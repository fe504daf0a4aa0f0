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
