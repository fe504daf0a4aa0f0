/** The producer journal (src/storage/producer-journal.ts): entry codec, torn tails, group commit, failures, rotation. */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { StorageError } from "../../src/storage/errors.ts";
import {
  decodeJournalEntry,
  encodeJournalEntry,
  journalHeaderBytes,
  ProducerJournal,
  scanJournal,
  SnapshotOutcomeUnknown,
  type ProducerJournalEntry,
} from "../../src/storage/producer-journal.ts";

const path = "/data/producers.journal";

function entry(n: number, overrides: Partial<ProducerJournalEntry> = {}): ProducerJournalEntry {
  return {
    timestampMs: 1_700_000_000_000 + n,
    producerId: `p-${n}`,
    epoch: n,
    topic: "orders",
    partition: n % 3,
    baseSequence: n * 10,
    batchCount: 3,
    firstIndex: 0,
    count: 3,
    baseOffset: 2 ** 45 + n,
    fingerprint: 0xdead0000 + n,
    ...overrides,
  };
}

async function open(fs: MemoryFileSystem, logger = new MemoryLogger(), generationIfNew = 0) {
  await fs.mkdir("/data");
  await fs.syncDir("/");
  const opened = await ProducerJournal.open(fs, { path, logger, generationIfNew });
  if (opened.journal === null) throw new Error("the journal opened as corrupt");
  return { ...opened, journal: opened.journal, logger };
}

/** A closed journal file holding `n` entries; returns its bytes and each entry's start. */
async function journalOf(fs: MemoryFileSystem, n: number) {
  const { journal } = await open(fs);
  for (let i = 1; i <= n; i++) await journal.append(entry(i));
  await journal.close();
  const starts: number[] = [];
  let pos = journalHeaderBytes;
  for (let i = 1; i <= n; i++) {
    starts.push(pos);
    pos += encodeJournalEntry(entry(i)).length;
  }
  return { bytes: fs.readFileSync(path), starts };
}

describe("producer journal damage (docs/decisions.md §1)", () => {
  it("a bad first entry with valid ones after it is corruption: nothing is cut, nothing dropped", async () => {
    const fs = new MemoryFileSystem();
    const { bytes, starts } = await journalOf(fs, 30);
    const damaged = bytes.slice();
    new DataView(damaged.buffer).setUint32(starts[0] as number, 0xdeadbeef);
    fs.writeFileSync(path, damaged);
    const scan = scanJournal(damaged);
    expect(scan.entries).toEqual([]);
    expect(scan.corruption).toMatchObject({
      position: journalHeaderBytes,
      nextEntryPosition: starts[1],
      entriesAfter: 29,
    });
    const logger = new MemoryLogger();
    const opened = await ProducerJournal.open(fs, { path, logger, generationIfNew: 0 });
    expect(opened.journal).toBeNull();
    expect(opened.corruption?.entriesAfter).toBe(29);
    expect(logger.named("producers.journal_torn_tail")).toHaveLength(0);
    expect(logger.named("producers.journal_corrupt")).toHaveLength(1);
    expect(fs.readFileSync(path)).toEqual(damaged);
  });

  it("a flipped byte mid-journal is corruption; the entries before it are returned", async () => {
    const fs = new MemoryFileSystem();
    const { bytes, starts } = await journalOf(fs, 5);
    const damaged = bytes.slice();
    damaged[(starts[2] as number) + 20] ^= 0x01;
    const scan = scanJournal(damaged);
    expect(scan.entries).toEqual([entry(1), entry(2)]);
    expect(scan.corruption).toMatchObject({ position: starts[2], entriesAfter: 2 });
  });

  it("a bad header with entries after it is corruption, not a journal to reset", async () => {
    const fs = new MemoryFileSystem();
    const { bytes } = await journalOf(fs, 3);
    const damaged = bytes.slice();
    damaged[0] = 0;
    fs.writeFileSync(path, damaged);
    expect(scanJournal(damaged).corruption).toMatchObject({ position: 0, entriesAfter: 3 });
    const opened = await ProducerJournal.open(fs, {
      path,
      logger: new MemoryLogger(),
      generationIfNew: 0,
    });
    expect(opened.journal).toBeNull();
    expect(fs.readFileSync(path)).toEqual(damaged);
  });

  it("a torn last entry (any prefix of it) is still a torn tail", async () => {
    const fs = new MemoryFileSystem();
    const { bytes, starts } = await journalOf(fs, 3);
    for (let cut = (starts[2] as number) + 1; cut < bytes.length; cut++) {
      const scan = scanJournal(bytes.subarray(0, cut));
      expect(scan.corruption, `cut at ${cut}`).toBeNull();
      expect(scan.endPosition).toBe(starts[2]);
      expect(scan.entries).toHaveLength(2);
    }
  });
});

describe("producer journal entries", () => {
  it("round-trip every field, and a completion entry (first index > 0)", () => {
    for (const e of [
      entry(1),
      entry(2, { firstIndex: 2, count: 1, batchCount: 3 }),
      entry(3, { producerId: "x".repeat(249), topic: "é" }),
    ]) {
      const bytes = encodeJournalEntry(e);
      expect(decodeJournalEntry(bytes, 0)).toEqual({ entry: e, sizeBytes: bytes.length });
    }
  });

  it("refuse a flipped byte, a short entry and an implausible length before allocating anything", () => {
    const bytes = encodeJournalEntry(entry(1));
    for (let i = 4; i < bytes.length; i++) {
      const bad = bytes.slice();
      bad[i] ^= 0x40;
      expect(decodeJournalEntry(bad, 0), `byte ${i}`).toBeNull();
    }
    expect(decodeJournalEntry(bytes.subarray(0, bytes.length - 1), 0)).toBeNull();
    const huge = bytes.slice();
    new DataView(huge.buffer).setUint32(0, 0xffff_fff0);
    expect(decodeJournalEntry(huge, 0)).toBeNull();
  });
});

describe("ProducerJournal", () => {
  it("creates a journal with a header, durably named, and reads back what was appended", async () => {
    const fs = new MemoryFileSystem();
    const { journal, entries, generation } = await open(fs, new MemoryLogger(), 4);
    expect(entries).toEqual([]);
    expect(generation).toBe(4);
    await Promise.all([
      journal.append(entry(1)),
      journal.append(entry(2)),
      journal.append(entry(3)),
    ]);
    fs.crash({ mode: "dropAll" });
    const again = await ProducerJournal.open(fs, {
      path,
      logger: new MemoryLogger(),
      generationIfNew: 0,
    });
    expect(again.generation).toBe(4);
    expect(again.entries).toEqual([entry(1), entry(2), entry(3)]);
  });

  it("group-commits: appends queued behind one fsync share the next one", async () => {
    const fs = new MemoryFileSystem();
    const { journal } = await open(fs);
    const syncsBefore = fs.mutationCount;
    await Promise.all(Array.from({ length: 20 }, (_, i) => journal.append(entry(i))));
    // 20 appends: far fewer than 20 write + fsync pairs.
    expect(fs.mutationCount - syncsBefore).toBeLessThanOrEqual(4);
    expect(journal.entryCount).toBe(20);
  });

  it("cuts a torn tail at the first entry that does not decode and reports it", async () => {
    const fs = new MemoryFileSystem();
    const { journal } = await open(fs);
    await journal.append(entry(1));
    await journal.append(entry(2));
    await journal.close();
    const whole = fs.readFileSync(path);
    fs.writeFileSync(path, whole.subarray(0, whole.length - 5));
    const logger = new MemoryLogger();
    const reopened = await ProducerJournal.open(fs, { path, logger, generationIfNew: 0 });
    expect(reopened.entries).toEqual([entry(1)]);
    expect(reopened.cutBytes).toBe(encodeJournalEntry(entry(2)).length - 5);
    expect(logger.named("producers.journal_torn_tail")).toHaveLength(1);
    expect(fs.readFileSync(path).length).toBe(
      journalHeaderBytes + encodeJournalEntry(entry(1)).length,
    );
  });

  it("cuts off a failed write's partial bytes, and fences itself after a failed fsync (never retried)", async () => {
    const fs = new MemoryFileSystem();
    const { journal } = await open(fs);
    await journal.append(entry(1));
    fs.faults.failNext({ op: "write", path, code: "ENOSPC", partialBytes: 7 });
    await expect(journal.append(entry(2))).rejects.toSatisfy(
      (e: unknown) => e instanceof StorageError && e.kind === "write_failed",
    );
    await journal.append(entry(3));
    fs.faults.failNext({ op: "sync", path, code: "EIO" });
    await expect(journal.append(entry(4))).rejects.toSatisfy(
      (e: unknown) => e instanceof StorageError && e.kind === "fenced",
    );
    await expect(journal.append(entry(5))).rejects.toSatisfy(
      (e: unknown) => e instanceof StorageError && e.kind === "fenced",
    );
    expect(journal.fenced).toBe(true);
    await journal.close();
    const reopened = await ProducerJournal.open(fs, {
      path,
      logger: new MemoryLogger(),
      generationIfNew: 0,
    });
    expect(reopened.entries.slice(0, 2)).toEqual([entry(1), entry(3)]);
  });

  it("rotates to a new generation after the snapshot callback, and leaves everything as it was when the callback fails", async () => {
    const fs = new MemoryFileSystem();
    const { journal } = await open(fs);
    await journal.append(entry(1));
    await expect(
      journal.rotate(async () => Promise.reject(new Error("disk full"))),
    ).rejects.toThrow("disk full");
    expect(journal.generation).toBe(0);
    expect(journal.fenced).toBe(false);
    let snapshotFor = -1;
    await journal.rotate(async (next) => void (snapshotFor = next));
    expect(snapshotFor).toBe(1);
    expect(journal.generation).toBe(1);
    expect(journal.entryCount).toBe(0);
    await journal.append(entry(2));
    const reopened = await ProducerJournal.open(fs, {
      path,
      logger: new MemoryLogger(),
      generationIfNew: 0,
    });
    expect(reopened.generation).toBe(1);
    expect(reopened.entries).toEqual([entry(2)]);
  });

  it("fences itself when a snapshot's outcome is unknown", async () => {
    const fs = new MemoryFileSystem();
    const { journal } = await open(fs);
    await expect(
      journal.rotate(async () =>
        Promise.reject(new SnapshotOutcomeUnknown("renamed, directory fsync failed")),
      ),
    ).rejects.toBeInstanceOf(SnapshotOutcomeUnknown);
    expect(journal.fenced).toBe(true);
    await expect(journal.append(entry(1))).rejects.toSatisfy(
      (e: unknown) => e instanceof StorageError && e.kind === "fenced",
    );
  });

  it("treats a file without a valid header as an empty journal of the snapshot's generation", async () => {
    const fs = new MemoryFileSystem();
    fs.writeFileSync(path, Uint8Array.of(1, 2, 3));
    const logger = new MemoryLogger();
    const opened = await ProducerJournal.open(fs, { path, logger, generationIfNew: 9 });
    expect(opened.generation).toBe(9);
    expect(opened.entries).toEqual([]);
    expect(logger.named("producers.journal_header_invalid")).toHaveLength(1);
  });
});
