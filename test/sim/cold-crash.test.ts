/**
 * Offloading to the cold tier, crash by crash: a retention pass that copies three segments to the
 * cold tier and deletes them locally is cut off after each of its mutations, the disk crashes, and
 * the broker restarts. Whatever the step, every offset is still readable from one tier or the
 * other with its original bytes, a partial copy is never taken for a complete one (every cold
 * `.log` is byte-identical to the original, and the next pass removes `.partial` leftovers and
 * any object the cold index does not name), and a later pass completes the move.
 */
import { describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import type { CrashOptions } from "../../src/fs/memory.ts";
import {
  ManualClock,
  MemoryFileSystem,
  fetchAll,
  openBroker,
  produce,
  type ReadRecord,
  type Rec,
} from "../helpers/compaction-fixtures.ts";

const localDir = "/data/topics/t/0";
const coldDir = "/cold/topics/t/0";
const startMs = 1_700_000_000_000;

function records(n: number, tag: string): Rec[] {
  return Array.from({ length: n }, (_, i) => ({
    key: null,
    value: `${tag}-${i}-${"z".repeat(70)}`,
  }));
}

async function prepared(fs: MemoryFileSystem) {
  const clock = new ManualClock(startMs);
  const { broker } = await openBroker(fs, clock, { coldStorageDir: "/cold" });
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { segment_ms: 1000, retention_bytes: 1 },
  });
  for (const tag of ["a", "b", "c"]) {
    await produce(broker, "t", records(4, tag));
    clock.advance(1000);
  }
  await produce(broker, "t", records(1, "d"));
  return { broker, clock };
}

function sameRecords(a: readonly ReadRecord[], b: readonly ReadRecord[]): boolean {
  return (
    a.length === b.length &&
    a.every((r, i) => r.offset === b[i].offset && bytesEqual(r.bytes, b[i].bytes))
  );
}

describe("an offload to the cold tier interrupted by a crash", () => {
  it("loses no offset at any step, never trusts a partial copy, and completes at the next pass", async () => {
    const reference = new MemoryFileSystem({ seed: 3 });
    const { broker: refBroker } = await prepared(reference);
    const original = await fetchAll(refBroker, "t", 0);
    const originalFiles = new Map<string, Uint8Array>();
    for (const path of reference.listTree(localDir))
      if (!path.endsWith("/"))
        originalFiles.set(path.slice(localDir.length + 1), reference.readFileSync(path));
    const start = reference.mutationCount;
    const [refRun] = (await refBroker.cleanup("t")).partitions;
    expect(refRun.retention).toMatchObject({
      status: "ok",
      segments_offloaded: 3,
      segments_deleted: 3,
    });
    const mutations = reference.mutationCount - start;
    await refBroker.close();

    const crashes: CrashOptions[] = [
      { mode: "dropAll" },
      { mode: "keepAll" },
      { seed: 21 },
      { seed: 22 },
    ];
    let partialsSeen = 0;
    for (let n = 0; n < mutations; n++) {
      for (const crash of crashes) {
        const label = `cut after ${n} of ${mutations} mutations, crash ${JSON.stringify(crash)}`;
        const disk = new MemoryFileSystem({ seed: 3 });
        const fs = new MemoryFileSystem({ disk });
        const { broker } = await prepared(fs);
        fs.armPowerCut({ inMutations: n + 1 });
        await broker.cleanup("t");
        disk.crash(crash);
        const coldBefore = (() => {
          try {
            return disk.listTree(coldDir);
          } catch {
            return [];
          }
        })();
        if (coldBefore.some((p) => p.endsWith(".partial"))) partialsSeen++;

        const { broker: again } = await openBroker(disk, new ManualClock(startMs + 10), {
          coldStorageDir: "/cold",
        });
        expect(await again.listOffsets({ topic: "t", partition: 0 }), label).toEqual({
          logStartOffset: 0,
          highWatermark: 13,
        });
        expect(sameRecords(await fetchAll(again, "t", 0), original), label).toBe(true);
        const cold = coldBefore.length === 0 ? [] : disk.listTree(coldDir);
        // A partial copy is never taken for a complete one: only final names are compared.
        for (const path of cold.filter((p) => p.endsWith(".log"))) {
          const name = path.slice(coldDir.length + 1);
          expect(
            bytesEqual(disk.readFileSync(path), originalFiles.get(name)!),
            `${label}: ${name}`,
          ).toBe(true);
        }
        const [run] = (await again.cleanup("t")).partitions;
        expect(["ok", "nothing_to_do"], label).toContain(run.retention.status);
        expect(
          disk.listTree(localDir).filter((p) => p.endsWith(".log")),
          label,
        ).toEqual([`${localDir}/00000000000000000012.log`]);
        expect(sameRecords(await fetchAll(again, "t", 0), original), label).toBe(true);
        // The pass listed the tier: leftovers of the interrupted copy are gone, and every object
        // there is one the index names (three segments, log and index each).
        expect(
          disk.listTree(coldDir).filter((p) => !p.endsWith("/")),
          label,
        ).toEqual(
          ["00000000000000000000", "00000000000000000004", "00000000000000000008"].flatMap((b) => [
            `${coldDir}/${b}.index`,
            `${coldDir}/${b}.log`,
          ]),
        );
        await again.close();
      }
    }
    expect(partialsSeen).toBeGreaterThan(0);
  });
});
