/**
 * Rolls inside a group commit (docs/storage.md "Writes and durability"): requests that queue
 * together are one group, and the active segment must still roll before each request that would
 * take it past `segment_bytes` — a group spanning a roll is written as one write per segment, the
 * roll's fsync answering the requests before it. Checked on the in-memory file system: pipelined
 * producers on one partition, faults on each step of a group spanning rolls (the write or fsync
 * of either segment, the roll's files), and every mutation of such a group failing in turn,
 * followed by a crash and recovery.
 */
import { describe, expect, it } from "vitest";
import { type CrashMode, MemoryFileSystem } from "../../src/fs/memory.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder, skipStored, type StoredRecords } from "../../src/storage/record.ts";
import { readPartitionRecords } from "../helpers/records.ts";

const dir = "/data/topics/t/0";

function newDisk(): MemoryFileSystem {
  const mem = new MemoryFileSystem({ seed: 11 });
  mem.writeFileSync(`${dir}/.keep`, new Uint8Array(0));
  return mem;
}

function openLog(fs: MemoryFileSystem, segmentBytes: number, logger = new MemoryLogger()) {
  return PartitionLog.open({
    fs,
    dir,
    name: "t/0",
    clock: new ManualClock(),
    logger,
    config: () => ({ segmentBytes, segmentMs: 1e12 }),
  });
}

/** `count` records of `valueBytes` each, valued `${tag}-${i}` padded. */
function valuesOf(tag: string, count: number, valueBytes: number): string[] {
  return Array.from({ length: count }, (_, i) => `${tag}-${i}-`.padEnd(valueBytes, "x"));
}

function batchOf(values: readonly string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, utf8(v), 1000);
  return b.build();
}

/** Bytes one record of `valueBytes` takes in the log (no key). */
const recordBytes = (valueBytes: number) => 4 + 8 + 8 + 4 + 4 + valueBytes + 4;

interface Sent {
  values: string[];
  state: "pending" | "ok" | "refused";
  baseOffset?: number;
  error?: { kind?: string };
}

/** Appends every request without waiting: they queue together and become one group. */
function sendTogether(log: PartitionLog, requests: readonly string[][]): Sent[] {
  return requests.map((values) => {
    const sent: Sent = { values: [...values], state: "pending" };
    log.append(batchOf(values)).then(
      (r) => {
        sent.state = "ok";
        sent.baseOffset = r.baseOffset;
      },
      (err: unknown) => {
        sent.state = "refused";
        sent.error = err as { kind?: string };
      },
    );
    return sent;
  });
}

async function settled(sent: readonly Sent[]): Promise<void> {
  for (let i = 0; i < 1000 && sent.some((s) => s.state === "pending"); i++)
    await new Promise<void>((resolve) => setImmediate(resolve));
  expect(
    sent.filter((s) => s.state === "pending"),
    "requests never answered",
  ).toEqual([]);
}

/**
 * Every segment holds at most `segmentBytes`, or exactly one request's records (a request never
 * splits): `requests` are the acknowledged ones, with their offsets.
 */
function expectSegmentsBounded(log: PartitionLog, segmentBytes: number, requests: Sent[]): void {
  const starts = new Map(requests.map((r) => [r.baseOffset!, r.values.length]));
  for (const s of log.describe().segments) {
    if (s.size_bytes <= segmentBytes) continue;
    expect(
      starts.get(s.base_offset),
      `segment ${s.base_offset} holds ${s.size_bytes} bytes (segment_bytes ${segmentBytes}) but not one request alone`,
    ).toBe(s.next_offset - s.base_offset);
  }
}

/**
 * After a restart: offsets run from 0 without a gap, every acknowledged record is at its offset,
 * and any other record is one of a request refused with "fenced", after every acknowledged one
 * (docs/storage.md "Failures": `partition_fenced` means "not acknowledged", not "not stored").
 */
async function expectExactlyAcknowledged(log: PartitionLog, sent: readonly Sent[]): Promise<void> {
  const found = await readPartitionRecords(log);
  found.forEach((f, i) => expect(f.offset).toBe(i));
  const ackedAt = new Map<string, number>();
  for (const s of sent)
    if (s.state === "ok") s.values.forEach((v, i) => ackedAt.set(v, s.baseOffset! + i));
  const fencedValues = new Set(
    sent
      .filter((s) => s.state === "refused" && s.error?.kind === "fenced")
      .flatMap((s) => s.values),
  );
  const highestAcked = Math.max(-1, ...ackedAt.values());
  for (const [value, offset] of ackedAt) expect(found[offset]?.value, value).toBe(value);
  for (const f of found) {
    if (ackedAt.has(f.value)) continue;
    expect(fencedValues.has(f.value) && f.offset > highestAcked, `${f.value} at ${f.offset}`).toBe(
      true,
    );
  }
}

describe("rolls inside a group commit", () => {
  it("pipelined produces from 64 producers on one partition keep every segment within segment_bytes, one write per segment of a group", async () => {
    const segmentBytes = 4096;
    const mem = newDisk();
    const log = await openLog(mem, segmentBytes);
    const acked: Sent[] = [];
    let seed = 5;
    const nextRandom = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    // Closed-loop producers (one request in flight each, the next sent once it is answered), so
    // that requests queue while a write and its fsync run and groups hold many of them.
    const producer = async (p: number) => {
      for (let i = 0; i < 12; i++) {
        // Now and then a request larger than segment_bytes: it gets a segment of its own.
        const count = p % 16 === 3 && i === 5 ? 80 : 1 + nextRandom(20);
        const values = valuesOf(`p${p}-r${i}`, count, 40 + nextRandom(30));
        const r = await log.append(batchOf(values));
        acked.push({ values, state: "ok", baseOffset: r.baseOffset });
      }
    };
    await Promise.all(Array.from({ length: 64 }, (_, p) => producer(p)));
    const { appends, writes } = log.stats;
    // The groups were real: far fewer writes than requests.
    expect(writes).toBeLessThan(appends / 4);
    expect(log.segmentCount).toBeGreaterThan(40);
    expectSegmentsBounded(log, segmentBytes, acked);
    // A segment that rolled was full: the next request would have taken it past segment_bytes.
    const segments = log.describe().segments;
    const sizeOfRequestAt = new Map(
      acked.map((r) => [r.baseOffset!, r.values.reduce((n, v) => n + recordBytes(v.length), 0)]),
    );
    for (let i = 0; i + 1 < segments.length; i++) {
      const next = sizeOfRequestAt.get(segments[i].next_offset);
      expect(next, "a segment ends where a request starts").toBeDefined();
      expect(segments[i].size_bytes + next!).toBeGreaterThan(segmentBytes);
    }
    await log.close();
    mem.crash({ mode: "dropAll" });
    const again = await openLog(mem, segmentBytes);
    expectSegmentsBounded(again, segmentBytes, acked);
    await expectExactlyAcknowledged(again, acked);
    await again.close();
  }, 60_000);

  // Three requests of 120 B each after 100 B already in the segment, 230 B segments: the group is
  // written as [r1] | roll | [r2] | roll | [r3].
  const segmentBytes = 230;
  const valueBytes = 120 - recordBytes(0);
  async function groupSpanningRolls(arm: (mem: MemoryFileSystem) => void) {
    const mem = newDisk();
    const logger = new MemoryLogger();
    const log = await openLog(mem, segmentBytes, logger);
    const first = valuesOf("r0", 1, 100 - recordBytes(0));
    const sent: Sent[] = [
      { values: first, state: "ok", baseOffset: (await log.append(batchOf(first))).baseOffset },
    ];
    arm(mem);
    const group = sendTogether(log, [
      valuesOf("r1", 1, valueBytes),
      valuesOf("r2", 1, valueBytes),
      valuesOf("r3", 1, valueBytes),
    ]);
    sent.push(...group);
    await settled(group);
    return { mem, log, logger, sent, group };
  }

  it("writes a group spanning two rolls as one write per segment, each answered by an fsync", async () => {
    const { mem, log, group, sent } = await groupSpanningRolls(() => {});
    expect(group.map((s) => s.state)).toEqual(["ok", "ok", "ok"]);
    expect(log.describe().segments.map((s) => [s.base_offset, s.size_bytes])).toEqual([
      [0, 220],
      [2, 120],
      [3, 120],
    ]);
    // The first append's write, then one per segment of the group.
    expect(log.stats.writes).toBe(4);
    await log.close();
    mem.crash({ mode: "dropAll" });
    const again = await openLog(mem, segmentBytes);
    await expectExactlyAcknowledged(again, sent);
    await again.close();
  });

  const faults: {
    name: string;
    arm: (mem: MemoryFileSystem) => void;
    states: string[];
    fenced: boolean;
  }[] = [
    {
      name: "the write to the second segment fails part-way",
      arm: (mem) =>
        mem.faults.failNext({
          op: "write",
          path: /00000000000000000002\.log$/,
          code: "ENOSPC",
          partialBytes: 50,
        }),
      states: ["ok", "refused:write_failed", "refused:write_failed"],
      fenced: false,
    },
    {
      name: "the roll's fsync of the first segment fails",
      arm: (mem) =>
        mem.faults.failNext({ op: "sync", path: /00000000000000000000\.log$/, code: "EIO" }),
      states: ["refused:fenced", "refused:fenced", "refused:fenced"],
      fenced: true,
    },
    {
      name: "the fsync of the second segment fails",
      arm: (mem) =>
        mem.faults.failNext({ op: "sync", path: /00000000000000000002\.log$/, code: "EIO" }),
      states: ["ok", "refused:fenced", "refused:fenced"],
      fenced: true,
    },
    {
      name: "the roll cannot create the second segment",
      arm: (mem) =>
        mem.faults.failNext({ op: "create", path: /00000000000000000002\.log$/, code: "EACCES" }),
      states: ["ok", "refused:write_failed", "refused:write_failed"],
      fenced: false,
    },
    {
      name: "the roll's directory fsync fails",
      arm: (mem) => mem.faults.failNext({ op: "syncDir", code: "EIO" }),
      states: ["ok", "refused:fenced", "refused:fenced"],
      fenced: true,
    },
  ];
  for (const fault of faults) {
    it(`a group spanning rolls where ${fault.name}: what was answered is exactly what a crash keeps`, async () => {
      const { mem, log, group, sent } = await groupSpanningRolls(fault.arm);
      expect(
        group.map((s) => (s.state === "ok" ? "ok" : `refused:${s.error?.kind}`)),
        fault.name,
      ).toEqual(fault.states);
      expect(log.fenced).toBe(fault.fenced);
      if (!fault.fenced) {
        // The partition goes on, right after what was acknowledged.
        const after = sendTogether(log, [valuesOf("after", 2, valueBytes)]);
        sent.push(...after);
        await settled(after);
        expect(after[0].state).toBe("ok");
        expect(after[0].baseOffset).toBe(2);
      }
      await log.close();
      mem.faults.clear();
      mem.crash({ mode: "dropAll" });
      const again = await openLog(mem, segmentBytes);
      expect(again.describe().segments.filter((s) => s.corruption !== null)).toEqual([]);
      await expectExactlyAcknowledged(again, sent);
      await again.close();
    });
  }

  it("a group spanning rolls whose beforeWrite hooks refuse some requests: offsets as the hooks last saw them, segments bounded", async () => {
    const mem = newDisk();
    const log = await openLog(mem, segmentBytes);
    const sent: (Sent & { hookOffset?: number })[] = [];
    for (let i = 0; i < 9; i++) {
      const values = valuesOf(`h${i}`, 1, valueBytes);
      const s: Sent & { hookOffset?: number } = { values, state: "pending" };
      sent.push(s);
      log
        .append(batchOf(values), {
          beforeWrite: async (baseOffset) => {
            s.hookOffset = baseOffset;
            await Promise.resolve();
            if (i % 3 === 1) throw new Error("the journal refused it");
          },
        })
        .then(
          (r) => {
            s.state = "ok";
            s.baseOffset = r.baseOffset;
          },
          (err: unknown) => {
            s.state = "refused";
            s.error = err as { kind?: string };
          },
        );
    }
    await settled(sent);
    const acked = sent.filter((s) => s.state === "ok");
    expect(acked).toHaveLength(6);
    for (const s of acked) expect(s.baseOffset).toBe(s.hookOffset);
    expect(acked.map((s) => s.baseOffset)).toEqual([0, 1, 2, 3, 4, 5]);
    // 120 B each into 230 B segments: one request per segment, one write each.
    expect(log.describe().segments.map((s) => s.size_bytes)).toEqual([
      120, 120, 120, 120, 120, 120,
    ]);
    expect(log.stats.writes).toBe(6);
    await log.close();
    mem.crash({ mode: "dropAll" });
    const again = await openLog(mem, segmentBytes);
    await expectExactlyAcknowledged(again, sent);
    await again.close();
  });

  it("every mutation of a group spanning rolls failing in turn, then a crash, keeps exactly what was answered", async () => {
    const count = async (): Promise<number> => {
      const mem = newDisk();
      const log = await openLog(mem, segmentBytes);
      await log.append(batchOf(valuesOf("r0", 1, 100 - recordBytes(0))));
      const before = mem.mutationCount;
      await settled(
        sendTogether(log, [
          valuesOf("r1", 1, valueBytes),
          valuesOf("r2", 1, valueBytes),
          valuesOf("r3", 1, valueBytes),
        ]),
      );
      const n = mem.mutationCount - before;
      await log.close();
      return n;
    };
    const mutations = await count();
    // Three writes and their fsyncs, two rolls (files, directory fsync, seal).
    expect(mutations).toBeGreaterThan(12);
    const modes: CrashMode[] = ["dropAll", "keepAll", "random"];
    for (let n = 1; n <= mutations; n++) {
      for (const code of ["EIO", "ENOSPC"]) {
        for (const mode of modes) {
          const { mem, log, sent } = await groupSpanningRolls((m) =>
            m.faults.failNth({ n, code, partialBytes: 30 }),
          );
          await log.close().catch(() => {});
          mem.faults.clear();
          mem.crash({ mode, seed: n });
          const again = await openLog(mem, segmentBytes);
          expect(
            again.describe().segments.filter((s) => s.corruption !== null),
            `n=${n} ${code} ${mode}`,
          ).toEqual([]);
          await expectExactlyAcknowledged(again, sent);
          expectSegmentsBounded(
            again,
            segmentBytes,
            sent.filter((s) => s.state === "ok"),
          );
          await again.close();
        }
      }
    }
  }, 120_000);
});

describe("a follower's stored records spanning rolls", () => {
  const segmentBytes = 1024;

  /** Stored records at offsets 0…count-1, as a leader's log serves them. */
  async function leaderRecords(
    count: number,
  ): Promise<{ records: StoredRecords; values: string[] }> {
    const leader = await openLog(newDisk(), 1 << 20);
    const values: string[] = [];
    for (let i = 0; i < count; i += 10) {
      const chunk = valuesOf(`l${i}`, Math.min(10, count - i), 30 + (i % 70));
      values.push(...chunk);
      await leader.append(batchOf(chunk));
    }
    // One oversized record: it must get a segment of its own.
    const big = valuesOf("big", 1, 1500);
    values.push(...big);
    await leader.append(batchOf(big));
    const read = await leader.read({ offset: 0, maxRecords: 10_000, maxBytes: 1 << 20 });
    expect(read.count).toBe(values.length);
    const records: StoredRecords = {
      stored: true,
      bytes: read.bytes.slice(),
      count: read.count,
      baseOffset: 0,
    };
    read.release?.();
    await leader.close();
    return { records, values };
  }

  it("cuts one stored append into segments of at most segment_bytes, answered once with its whole range", async () => {
    const { records, values } = await leaderRecords(120);
    const mem = newDisk();
    const log = await openLog(mem, segmentBytes);
    const result = await log.append(records);
    expect(result).toEqual({ baseOffset: 0, count: values.length });
    expect(log.highWatermark).toBe(values.length);
    const segments = log.describe().segments;
    expect(segments.length).toBeGreaterThan(5);
    for (const s of segments)
      if (s.size_bytes > segmentBytes) expect(s.next_offset - s.base_offset).toBe(1);
    expect(segments.at(-1)!.size_bytes).toBeGreaterThan(segmentBytes);
    await log.close();
    mem.crash({ mode: "dropAll" });
    const again = await openLog(mem, segmentBytes);
    expect((await readPartitionRecords(again)).map((r) => r.value)).toEqual(values);
    await again.close();
  });

  it("fills what is left of the active segment first", async () => {
    const { records } = await leaderRecords(40);
    const log = await openLog(newDisk(), segmentBytes);
    const tail = skipStored(records, 3);
    const headBytes = records.bytes.length - tail.bytes.length;
    await log.append({
      stored: true,
      bytes: records.bytes.subarray(0, headBytes),
      count: 3,
      baseOffset: 0,
    });
    await log.append(tail);
    const [first, second] = log.describe().segments;
    expect(first.base_offset).toBe(0);
    expect(first.size_bytes).toBeLessThanOrEqual(segmentBytes);
    expect(first.next_offset).toBeGreaterThan(3);
    // The first segment rolled only because the next record did not fit.
    const next = decodeFirstRecordBytes(skipStored(records, first.next_offset));
    expect(first.size_bytes + next).toBeGreaterThan(segmentBytes);
    expect(second.base_offset).toBe(first.next_offset);
    await log.close();
  });

  it("a failed write of a later part refuses the append and keeps the parts written before it", async () => {
    const { records, values } = await leaderRecords(120);
    const mem = newDisk();
    const log = await openLog(mem, segmentBytes);
    // The first part fills the first segment; the write of the second (to the segment named
    // after the first part's end) fails part-way.
    const firstPart = recordsFitting(records, segmentBytes);
    mem.faults.failNext({
      op: "write",
      path: new RegExp(`${String(firstPart).padStart(20, "0")}\\.log$`),
      code: "ENOSPC",
      partialBytes: 20,
    });
    const appended = log.append(records).then(
      () => "ok",
      (err: { kind?: string }) => err.kind,
    );
    expect(await appended).toBe("write_failed");
    expect(log.fenced).toBe(false);
    const kept = log.logEndOffset;
    expect(kept).toBe(firstPart);
    expect(log.highWatermark).toBe(kept);
    // The follower fetches from its log end and appends the rest.
    await log.append(skipStored(records, kept));
    await log.close();
    mem.crash({ mode: "dropAll" });
    const again = await openLog(mem, segmentBytes);
    expect((await readPartitionRecords(again)).map((r) => r.value)).toEqual(values);
    await again.close();
  });
});

/** How many of the first stored records of `records` fit in `room` bytes. */
function recordsFitting(records: StoredRecords, room: number): number {
  let pos = 0;
  let n = 0;
  for (;;) {
    const next = decodeFirstRecordBytes(skipStored(records, n));
    if (pos + next > room) return n;
    pos += next;
    n++;
  }
}

/** Bytes of the first stored record of `records`. */
function decodeFirstRecordBytes(records: StoredRecords): number {
  return 4 + new DataView(records.bytes.buffer, records.bytes.byteOffset).getUint32(0);
}
