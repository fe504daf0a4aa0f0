/**
 * Fetch read windows kept for reuse (`src/storage/read-windows.ts`, docs/storage.md "Index and
 * reads"): the pool's bounds, and a broker fetch whose answer is released handing its window to
 * the next read, which then answers its own records, not the old ones.
 */
import { afterEach, describe, expect, it } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { checkFetchedRecords } from "../../src/client/records.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { readWindowKeptBytesMax, readWindowsKeptMax } from "../../src/lib/limits.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { fetchReadWindows, ReadWindows } from "../../src/storage/read-windows.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";

describe("ReadWindows", () => {
  it("hands out a new zeroed buffer when none kept fits, and the smallest kept one that does", () => {
    const windows = new ReadWindows({ keptMax: 4, bytesMax: 1024 });
    const fresh = windows.take(100);
    expect(fresh.length).toBe(100);
    expect(fresh.every((b) => b === 0)).toBe(true);
    const small = new Uint8Array(200);
    const large = new Uint8Array(800);
    windows.give(large);
    windows.give(small);
    expect(windows.keptCount).toBe(2);
    expect(windows.take(150)).toBe(small);
    expect(windows.take(150)).toBe(large);
    expect(windows.take(150)).not.toBe(large);
    expect(windows.keptCount).toBe(0);
  });

  it("keeps at most keptMax buffers, none over bytesMax, and never one buffer twice", () => {
    const windows = new ReadWindows({ keptMax: 2, bytesMax: 1024 });
    windows.give(new Uint8Array(1025));
    expect(windows.keptCount).toBe(0);
    const a = new Uint8Array(10);
    windows.give(a);
    windows.give(a);
    expect(windows.keptCount).toBe(1);
    windows.give(new Uint8Array(10));
    windows.give(new Uint8Array(10));
    expect(windows.keptCount).toBe(2);
    expect(windows.take(10)).not.toBe(windows.take(10));
  });

  it("bounds the process's windows by the named limits", () => {
    expect(readWindowsKeptMax * readWindowKeptBytesMax).toBeLessThanOrEqual(8 * 1024 * 1024);
  });
});

describe("a fetch's read window", () => {
  let broker: LocalBroker | null = null;
  afterEach(async () => {
    await broker?.close();
    broker = null;
  });

  async function loaded(records: number): Promise<LocalBroker> {
    const b = await LocalBroker.open({
      fs: new MemoryFileSystem(),
      dataDir: "/data",
      clock: systemClock,
      logger: silentLogger,
    });
    await b.createTopic({ name: "w", partitions: 1 });
    const batch = new EntryBatchBuilder();
    for (let i = 0; i < records; i++) batch.add(null, new TextEncoder().encode(`value-${i}`));
    await b.produce({ topic: "w", partition: 0, batch: batch.build() });
    return b;
  }

  it("goes back for reuse only when released, and the next fetch answers its own records", async () => {
    broker = await loaded(500);
    // Drain what other tests of this process may have left, so the windows seen are this test's.
    while (fetchReadWindows.keptCount > 0) fetchReadWindows.take(1);
    const first = await broker.fetch({ topic: "w", partition: 0, offset: 0, maxRecords: 100 });
    expect(first.records.count).toBe(100);
    expect(first.release).toBeTypeOf("function");
    const second = await broker.fetch({ topic: "w", partition: 0, offset: 100, maxRecords: 100 });
    // Not released: each read had a window of its own.
    expect(second.records.bytes.buffer).not.toBe(first.records.bytes.buffer);
    first.release!();
    first.release!();
    expect(fetchReadWindows.keptCount).toBe(1);
    const third = await broker.fetch({ topic: "w", partition: 0, offset: 200, maxRecords: 100 });
    expect(third.records.bytes.buffer).toBe(first.records.bytes.buffer);
    expect(fetchReadWindows.keptCount).toBe(0);
    checkFetchedRecords(third, 200);
    expect(third.nextOffset).toBe(300);
    const view = new DataView(third.records.bytes.buffer, third.records.bytes.byteOffset);
    expect(view.getUint32(8)).toBe(200); // the first record's offset (low word), after record_len
  });

  it("goes back by itself when a read hands out nothing", async () => {
    broker = await loaded(10);
    while (fetchReadWindows.keptCount > 0) fetchReadWindows.take(1);
    const empty = await broker.fetch({ topic: "w", partition: 0, offset: 10 });
    expect(empty.records.count).toBe(0);
    expect(empty.release).toBeUndefined();
  });
});
