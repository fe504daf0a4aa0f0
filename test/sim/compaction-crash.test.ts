/**
 * Replacing segments safely, crash by crash: a compaction pass is cut off after every one of its
 * mutations in turn (before the marker, while writing it, after it, between renames, before and
 * between the deletes, while removing it), the simulated disk then crashes (seeded random
 * outcomes, and the two extremes), and the broker restarts on it. After recovery the log must be
 * exactly the whole before-state or the whole after-state, and no marker or temp file may remain.
 */
import { describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import type { CrashOptions } from "../../src/fs/memory.ts";
import {
  ManualClock,
  MemoryFileSystem,
  fetchAll,
  openBroker,
  produce,
  swapLeftovers,
  type ReadRecord,
  type Rec,
} from "../helpers/compaction-fixtures.ts";

const partitionDir = "/data/topics/t/0";
const startMs = 1_700_000_000_000;

/** 48 records over several 1 KiB segments: keys updated across segments, tombstones, keyless and empty-key records. */
function workload(): Rec[] {
  const out: Rec[] = [];
  for (let i = 0; i < 48; i++) {
    const value = `value-${i}-${"x".repeat(40 + (i % 7) * 5)}`;
    if (i % 11 === 3) out.push({ key: null, value });
    else if (i % 13 === 5) out.push({ key: "", value });
    else if (i % 9 === 8)
      out.push({ key: `k${i % 6}`, value: "" }); // tombstone
    else out.push({ key: `k${i % 6}`, value });
  }
  return out;
}

/** A broker on `fs` with the workload produced and sealed, ready for a compaction pass. */
async function prepared(fs: MemoryFileSystem) {
  const clock = new ManualClock(startMs);
  const logger = new MemoryLogger();
  const { broker } = await openBroker(fs, clock, { logger });
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { cleanup_policy: "compact", segment_bytes: 1024, tombstone_retention_ms: 0 },
  });
  for (const rec of workload()) await produce(broker, "t", [rec]);
  return { broker, clock };
}

function sameLog(a: readonly ReadRecord[], b: readonly ReadRecord[]): boolean {
  return (
    a.length === b.length &&
    a.every((r, i) => r.offset === b[i].offset && bytesEqual(r.bytes, b[i].bytes))
  );
}

describe("a compaction swap interrupted by a crash", () => {
  it("recovers to the whole before-state or the whole after-state at every step, leaving no marker or temp file", async () => {
    // The fault-free run: the two states and the number of mutations the pass makes.
    const reference = new MemoryFileSystem({ seed: 1 });
    const { broker: refBroker } = await prepared(reference);
    const before = await fetchAll(refBroker, "t", 0);
    const start = reference.mutationCount;
    const [refRun] = (await refBroker.cleanup("t")).partitions;
    const mutations = reference.mutationCount - start;
    expect(refRun.compaction.status).toBe("compacted");
    expect(refRun.compaction.segments_before).toBeGreaterThan(2);
    const after = await fetchAll(refBroker, "t", 0);
    expect(after.length).toBeLessThan(before.length);
    expect(after[0].offset).toBeGreaterThan(0); // the first segment's base moves: the log start offset file is written too
    const highWatermark = (await refBroker.listOffsets({ topic: "t", partition: 0 })).highWatermark;
    await refBroker.close();

    const seen = { before: 0, after: 0, rolledForward: 0, rolledBack: 0, cleanStart: 0 };
    const crashes: CrashOptions[] = [
      { mode: "dropAll" },
      { mode: "keepAll" },
      { seed: 11 },
      { seed: 12 },
    ];
    for (let n = 0; n < mutations; n++) {
      for (const crash of crashes) {
        const label = `cut after ${n} of ${mutations} mutations, crash ${JSON.stringify(crash)}`;
        const disk = new MemoryFileSystem({ seed: 1 });
        const fs = new MemoryFileSystem({ disk });
        const { broker } = await prepared(fs);
        fs.armPowerCut({ inMutations: n + 1 });
        const [run] = (await broker.cleanup("t")).partitions;
        expect(run.compaction.status, label).not.toBe("compacted");
        disk.crash(crash);

        const logger = new MemoryLogger();
        const { broker: again } = await openBroker(disk, new ManualClock(startMs + 1), { logger });
        const log = await fetchAll(again, "t", 0);
        const isBefore = sameLog(log, before);
        const isAfter = sameLog(log, after);
        expect(isBefore || isAfter, `${label}: offsets ${log.map((r) => r.offset).join(",")}`).toBe(
          true,
        );
        if (isBefore) seen.before++;
        if (isAfter) seen.after++;
        expect(swapLeftovers(disk, partitionDir), label).toEqual([]);
        const offsets = await again.listOffsets({ topic: "t", partition: 0 });
        expect(offsets, label).toEqual({ logStartOffset: 0, highWatermark });
        expect(await produce(again, "t", [{ key: "next", value: "v" }]), label).toBe(highWatermark);
        if (logger.named("recovery.swap_rolled_forward").length > 0) seen.rolledForward++;
        else if (logger.named("recovery.swap_rolled_back").length > 0) seen.rolledBack++;
        else seen.cleanStart++;
        await again.close();
      }
    }
    // The sweep crossed every phase: temps without a marker, a marker to finish, and neither.
    expect(seen.rolledBack).toBeGreaterThan(0);
    expect(seen.rolledForward).toBeGreaterThan(0);
    expect(seen.cleanStart).toBeGreaterThan(0);
    expect(seen.before).toBeGreaterThan(0);
    expect(seen.after).toBeGreaterThan(0);
  });

  it("finishes a marker left with every output still under its temp name", async () => {
    const refPaths: string[] = [];
    const reference = new MemoryFileSystem({ seed: 1, onMutation: (m) => refPaths.push(m.path) });
    const { broker: refBroker } = await prepared(reference);
    refPaths.length = 0;
    await refBroker.cleanup("t");
    await refBroker.close();
    const markerAt = refPaths.findIndex((p) => p.endsWith("compaction.marker"));
    expect(markerAt).toBeGreaterThan(0);

    const disk = new MemoryFileSystem({ seed: 1 });
    const paths: string[] = [];
    const fs = new MemoryFileSystem({ disk, onMutation: (m) => paths.push(m.path) });
    const { broker } = await prepared(fs);
    const before = await fetchAll(broker, "t", 0);
    // The marker's create, write, fsync and the directory fsync go through; the first rename is cut.
    paths.length = 0;
    fs.armPowerCut({ inMutations: markerAt + 5 });
    await broker.cleanup("t");
    expect(paths.at(-1)).toMatch(/\.cleaned$/);
    const names = disk.listTree(partitionDir);
    expect(names).toContain(`${partitionDir}/compaction.marker`);
    expect(names.filter((p) => p.endsWith(".cleaned")).length).toBeGreaterThan(0);
    disk.crash({ mode: "dropAll" });
    const logger = new MemoryLogger();
    const { broker: again } = await openBroker(disk, new ManualClock(startMs + 1), { logger });
    const log = await fetchAll(again, "t", 0);
    expect(log.length).toBeLessThan(before.length);
    expect(logger.named("recovery.swap_rolled_forward").length).toBe(1);
    expect(swapLeftovers(disk, partitionDir)).toEqual([]);
    await again.close();
  });
});
