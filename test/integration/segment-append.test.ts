import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import { EntryBatchBuilder, RecordCursor, DecodeStatus } from "../../src/storage/record.ts";
import { Segment } from "../../src/storage/segment.ts";
import { recordingAllocations } from "../helpers/allocations.ts";

const context = { logger: new MemoryLogger(), partition: "t/0" };

function batchOf(values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v), 1000);
  return b.build();
}

async function readValues(segment: Segment): Promise<string[]> {
  const r = await segment.read({
    offset: segment.baseOffset,
    maxRecords: 1000,
    maxBytes: 1 << 20,
    limitBytes: segment.sizeBytes,
  });
  const cursor = new RecordCursor().reset(r.bytes);
  const values: string[] = [];
  for (let p = 0; p < r.bytes.length; p += cursor.sizeBytes) {
    expect(cursor.decode(p)).toBe(DecodeStatus.Ok);
    values.push(fromUtf8(cursor.value()));
  }
  return values;
}

describe("Segment.prepareAppend buffers", () => {
  it("reuses a released buffer for the next append and the records already written stay intact", async () => {
    const fs = new MemoryFileSystem();
    await fs.mkdir("/p");
    const segment = await Segment.create(fs, { dir: "/p", baseOffset: 0, nowMs: 0, ...context });
    const first = segment.prepareAppend([batchOf(["a1", "a2"])], 0);
    await segment.append(first);
    first.release();
    const second = segment.prepareAppend([batchOf(["b1-longer", "b2"])], 0);
    expect(second.logBytes.buffer).toBe(first.logBytes.buffer);
    await segment.append(second);
    second.release();
    expect(await readValues(segment)).toEqual(["a1", "a2", "b1-longer", "b2"]);
    await segment.close();
  });

  it("never hands out a buffer that is still in use, and release is idempotent", async () => {
    const fs = new MemoryFileSystem();
    await fs.mkdir("/p");
    const segment = await Segment.create(fs, { dir: "/p", baseOffset: 0, nowMs: 0, ...context });
    const held = segment.prepareAppend([batchOf(["x"])], 0);
    const other = segment.prepareAppend([batchOf(["y"])], 0);
    expect(other.logBytes.buffer).not.toBe(held.logBytes.buffer);
    other.release();
    other.release();
    const third = segment.prepareAppend([batchOf(["z"])], 0);
    const fourth = segment.prepareAppend([batchOf(["w"])], 0);
    expect(third.logBytes.buffer).toBe(other.logBytes.buffer);
    expect(fourth.logBytes.buffer).not.toBe(other.logBytes.buffer);
    expect(fourth.logBytes.buffer).not.toBe(held.logBytes.buffer);
    for (const p of [held, third, fourth]) p.release();
    await segment.close();
  });
});

describe("Segment.prepareAppend buffer sizes", () => {
  it("gives a small write a buffer of at most twice its bytes when no free buffer fits, however many writes hold one", async () => {
    // Partitions whose writes wait (e.g. for an idempotent producer's journal fsync) each hold a
    // buffer; a one-record write must not make the broker allocate a MiB for it.
    const fs = new MemoryFileSystem();
    await fs.mkdir("/p");
    const segment = await Segment.create(fs, { dir: "/p", baseOffset: 0, nowMs: 0, ...context });
    const batch = batchOf(["one small record"]);
    const storedBytes = batch.bytes.length + 16;
    const held = [];
    for (let i = 0; i < 6; i++) {
      const { value, sizes } = recordingAllocations(() => segment.prepareAppend([batch], 0));
      held.push(value);
      expect(value.logBytes.length).toBe(storedBytes);
      for (const size of sizes)
        expect(size, `allocation for a write of ${storedBytes} bytes`).toBeLessThanOrEqual(
          2 * storedBytes,
        );
    }
    // Distinct buffers while held.
    expect(new Set(held.map((p) => p.logBytes.buffer)).size).toBe(held.length);
    for (const p of held) p.release();
    await segment.close();
  });
});
