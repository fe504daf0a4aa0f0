import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { recordOverEntryBytes } from "../../src/lib/limits.ts";
import {
  DecodeStatus,
  EntryBatchBuilder,
  RecordCursor,
  encodeEntries,
} from "../../src/storage/record.ts";
import { RecordScanner, ScanStatus } from "../../src/storage/record-scanner.ts";
import { newestTimestampMs } from "../../src/storage/segment-scan.ts";

/** Stored records with offsets `base…` and values of the given sizes, back to back. */
function storedRecords(sizes: number[], base = 0): Uint8Array {
  const b = new EntryBatchBuilder();
  sizes.forEach((n, i) => b.add(null, utf8(String(i % 10).repeat(n)), 1000 + i));
  const batch = b.build();
  const out = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
  encodeEntries(batch, out, { outPos: 0, baseOffset: base, nowMs: 0 });
  return out;
}

async function fileWith(bytes: Uint8Array) {
  const fs = new MemoryFileSystem();
  const file = await fs.open("/f", { create: true });
  await file.write(bytes, 0);
  return file;
}

/** Offsets of every record walked with decode/readRecordAt; asserts readRecordAt never answers Cut. */
async function walk(
  scanner: RecordScanner,
  from = 0,
): Promise<{ offsets: number[]; stop: number }> {
  const offsets: number[] = [];
  let pos = from;
  while (pos < scanner.dataEnd) {
    let status = scanner.decode(pos);
    if (status === ScanStatus.Cut) {
      status = await scanner.readRecordAt(pos);
      expect(status).not.toBe(ScanStatus.Cut);
    }
    if (status !== ScanStatus.Ok) return { offsets, stop: status };
    offsets.push(scanner.cursor.offset);
    pos += scanner.cursor.sizeBytes;
  }
  return { offsets, stop: ScanStatus.Ok };
}

describe("RecordScanner", () => {
  it("finds every record at every window size, re-reading each record a window cuts", async () => {
    const sizes = [0, 5, 300, 17, 1000, 2, 64, 700, 3, 3, 90];
    const bytes = storedRecords(sizes, 40);
    const file = await fileWith(bytes);
    for (const windowBytes of [1, 4, 7, 33, 50, 128, 500, bytes.length, bytes.length * 2]) {
      const scanner = new RecordScanner(file, { end: bytes.length, windowBytes });
      const { offsets, stop } = await walk(scanner);
      expect(stop, `window ${windowBytes}`).toBe(ScanStatus.Ok);
      expect(offsets, `window ${windowBytes}`).toEqual(sizes.map((_, i) => 40 + i));
    }
  });

  it("tells a record the window cuts (Cut) from one the range's end cuts (Incomplete)", async () => {
    const bytes = storedRecords([100, 100]);
    const file = await fileWith(bytes);
    const first = 4 + 28 + 100;
    const scanner = new RecordScanner(file, { end: bytes.length - 1, windowBytes: 50 });
    expect(scanner.decode(0)).toBe(ScanStatus.Cut);
    expect(await scanner.readRecordAt(0)).toBe(ScanStatus.Ok);
    expect(scanner.decode(first)).toBe(ScanStatus.Cut);
    expect(await scanner.readRecordAt(first)).toBe(ScanStatus.Incomplete);
    expect(scanner.cursor.reason).toContain("runs past the end");
  });

  it("reports a bad record as Invalid, whatever the window", async () => {
    const bytes = storedRecords([40, 40, 40]);
    bytes[4 + 28 + 40 + 20] ^= 0xff; // inside the second record: its CRC fails
    const file = await fileWith(bytes);
    for (const windowBytes of [10, 80, 1000]) {
      const { offsets, stop } = await walk(
        new RecordScanner(file, { end: bytes.length, windowBytes }),
      );
      expect(offsets).toEqual([0]);
      expect(stop).toBe(ScanStatus.Invalid);
    }
  });

  it("learns where a file shorter than its range ends, and reads nothing past it", async () => {
    const bytes = storedRecords([10, 10]);
    const file = await fileWith(bytes);
    const scanner = new RecordScanner(file, { end: bytes.length + 500, windowBytes: 1000 });
    const { offsets } = await walk(scanner);
    expect(offsets).toEqual([0, 1]);
    expect(scanner.dataEnd).toBe(bytes.length);
    expect(scanner.decode(bytes.length)).toBe(ScanStatus.Incomplete);
  });

  it("measures a run of zeros (space written ahead) inside the window, and only one of at least 4", async () => {
    const bytes = new Uint8Array(40);
    bytes.set([0, 0, 0, 0, 0, 0, 7], 10);
    bytes.set([0, 0, 0, 9], 20);
    bytes.fill(1, 30);
    const file = await fileWith(bytes);
    const scanner = new RecordScanner(file, { end: 40, windowBytes: 40 });
    await scanner.fill(0);
    expect(scanner.zerosEnd(10)).toBe(16);
    expect(scanner.zerosEnd(20)).toBe(-1);
    expect(scanner.zerosEnd(37)).toBe(-1);
    expect(scanner.zerosEnd(0)).toBe(16);
  });

  it("gives a record longer than the window a window of its own size, never one the file claims unchecked", async () => {
    const bytes = new Uint8Array(64);
    new DataView(bytes.buffer).setUint32(0, 0xffff_fff0); // an implausible record_len
    const file = await fileWith(bytes);
    const scanner = new RecordScanner(file, { end: 64, windowBytes: 2 });
    expect(scanner.decode(0)).toBe(ScanStatus.Cut);
    expect(await scanner.readRecordAt(0)).toBe(ScanStatus.Invalid);
    expect(scanner.windowEnd - scanner.windowStart).toBeLessThanOrEqual(64);
  });
});

describe("the scanner's users across its windows (records larger than a scan window's rest)", () => {
  const sizes = [300, 700, 450, 900, 200, 650, 800, 120, 500, 999, 333, 610].map((k) => k * 1024);

  async function filled() {
    const fs = new MemoryFileSystem();
    const open = () =>
      PartitionLog.open({
        fs,
        dir: "/p",
        name: "t/0",
        clock: new ManualClock(),
        logger: new MemoryLogger(),
        config: () => ({ segmentBytes: 3 * 1024 * 1024, segmentMs: 7 * 24 * 3600_000 }),
      });
    const log = await open();
    for (let i = 0; i < sizes.length; i++) {
      const b = new EntryBatchBuilder().add(null, utf8(String(i % 10).repeat(sizes[i])), 5000 + i);
      await log.append(b.build());
    }
    await log.close();
    return { fs, open };
  }

  async function values(log: PartitionLog): Promise<number[]> {
    const out: number[] = [];
    let offset = log.logStartOffset;
    while (offset < log.highWatermark) {
      const r = await log.read({ offset, maxRecords: 100, maxBytes: 1 });
      const c = new RecordCursor().reset(r.bytes);
      for (let p = 0; p < r.bytes.length; p += c.sizeBytes) {
        expect(c.decode(p)).toBe(DecodeStatus.Ok);
        out.push(fromUtf8(c.value()).length);
      }
      offset = r.nextOffset;
    }
    return out;
  }

  it("recovery's full scan rebuilds every index and reads every record back", async () => {
    const { fs, open } = await filled();
    for (const name of await fs.readdir("/p"))
      if (name.endsWith(".index")) await fs.unlink(`/p/${name}`);
    const log = await open();
    const report = log.describe();
    expect(report.segments.length).toBeGreaterThan(2);
    expect(report.segments.slice(0, -1).every((s) => s.recovery === "index_rebuilt")).toBe(true);
    expect(await values(log)).toEqual(sizes);
    await log.close();
  });

  it("recovery finds the valid records after a corrupt one, across windows, and skips them", async () => {
    const { fs, open } = await filled();
    const first = await open();
    const sealed = first.describe().segments[0];
    await first.close();
    expect(sealed.next_offset - sealed.base_offset).toBeGreaterThan(2);
    // Flip a byte inside the second record of the first segment.
    const file = await fs.open(`/p/${String(sealed.base_offset).padStart(20, "0")}.log`, {
      write: true,
    });
    const at = 4 + 28 + sizes[0] + 100;
    const one = new Uint8Array(1);
    await file.read(one, at);
    one[0] ^= 0xff;
    await file.write(one, at);
    await file.close();
    // Make the start scan the segment in full rather than trust its index.
    await fs.unlink(`/p/${String(sealed.base_offset).padStart(20, "0")}.index`);
    const log = await open();
    const segment = log.describe().segments[0];
    expect(segment.recovery).toBe("corrupt");
    expect(segment.corruption?.position).toBe(4 + 28 + sizes[0]);
    expect(segment.corruption?.highest_skipped_offset).toBe(sealed.next_offset - 1);
    await log.close();
  });
});

it("newestTimestampMs reads a sealed segment of records larger than a scan window's rest", async () => {
  const fs = new MemoryFileSystem();
  const log = await PartitionLog.open({
    fs,
    dir: "/p",
    name: "t/0",
    clock: new ManualClock(),
    logger: new MemoryLogger(),
    config: () => ({ segmentBytes: 4 * 1024 * 1024, segmentMs: 7 * 24 * 3600_000 }),
  });
  const stamps = [700, 900, 100, 999, 300];
  for (const [i, ts] of stamps.entries()) {
    await log.append(
      new EntryBatchBuilder().add(null, utf8("v".repeat(700 * 1024 + i)), ts).build(),
    );
  }
  await log.append(new EntryBatchBuilder().add(null, utf8("x".repeat(4 * 1024 * 1024)), 1).build());
  const [segment] = log.sealedSegments;
  expect(segment.nextOffset - segment.baseOffset).toBe(stamps.length);
  expect(await newestTimestampMs(fs, segment)).toBe(999);
  await log.close();
});
