/**
 * A cold compaction cut off at every step (docs/storage.md "Cold compaction"): the compacting
 * cleanup of `test/helpers/cold-compaction-fixtures.ts` runs against a memory ColdStore that stops
 * taking mutations after its n-th (the broker died there, seen from the store), or on a disk whose
 * power is cut before its n-th mutation, for every n; then the disk crashes and the broker starts
 * again on it with the same store. Whatever the step:
 * - every record served is an original, byte for byte, at its offset (old objects or new, never a mix);
 * - every record that compaction keeps is served;
 * - no value comes back: key k2's old value is served only with the tombstone that deletes it;
 * - the next cleanup reaches exactly the compacted log, and the store then holds exactly the
 *   objects the cold index names (garbage reclaimed, nothing referenced deleted).
 */
import { describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import type { CrashOptions } from "../../src/fs/memory.ts";
import {
  fetchAll,
  ManualClock,
  MemoryFileSystem,
  openBroker,
  type ReadRecord,
} from "../helpers/compaction-fixtures.ts";
import {
  coldCompactionScenario,
  compactAtMs,
  survivors,
} from "../helpers/cold-compaction-fixtures.ts";
import { MemoryColdStore } from "../helpers/memory-cold-store.ts";

const finalObjects = [
  "topics/t/0/00000000000000000000.1.index",
  "topics/t/0/00000000000000000000.1.log",
  "topics/t/0/00000000000000000005.1.index",
  "topics/t/0/00000000000000000005.1.log",
];

function checkView(
  view: readonly ReadRecord[],
  original: Map<number, ReadRecord>,
  label: string,
): void {
  for (const r of view)
    expect(bytesEqual(r.bytes, original.get(r.offset)!.bytes), `${label}: offset ${r.offset}`).toBe(
      true,
    );
  const values = view.map((r) => r.value);
  const mustStay = survivors.filter((v) => v !== "");
  for (const v of mustStay) expect(values, `${label}: survivor ${v}`).toContain(v);
  const k2 = view.filter((r) => r.key === "k2");
  if (k2.length > 0)
    expect(k2.at(-1)!.value, `${label}: k2's old value without its tombstone`).toBe("");
  const k1 = view.filter((r) => r.key === "k1");
  expect(k1.at(-1)!.value, `${label}: k1's newest`).toBe("a3");
}

async function reopenAndFinish(
  disk: MemoryFileSystem,
  store: MemoryColdStore,
  original: Map<number, ReadRecord>,
  label: string,
): Promise<void> {
  const { broker } = await openBroker(disk, new ManualClock(compactAtMs + 100), {
    coldStore: store,
  });
  checkView(await fetchAll(broker, "t", 0), original, label);
  await broker.cleanup("t");
  expect(
    (await fetchAll(broker, "t", 0)).map((r) => r.value),
    label,
  ).toEqual(survivors);
  expect(
    (await store.list("topics/")).map((o) => o.key),
    label,
  ).toEqual(finalObjects);
  await broker.close();
}

async function scenario(fs: MemoryFileSystem, store: MemoryColdStore): Promise<LocalBroker> {
  return (await coldCompactionScenario(fs, { coldStore: store })).broker;
}

describe("a cold compaction cut off at every step", () => {
  it("serves old or new objects, never a mix, brings no value back, and finishes at the next pass", async () => {
    const refStore = new MemoryColdStore();
    const refDisk = new MemoryFileSystem({ seed: 4 });
    const ref = await scenario(refDisk, refStore);
    const original = new Map((await fetchAll(ref, "t", 0)).map((r) => [r.offset, r]));
    const storeStart = refStore.mutations;
    const diskStart = refDisk.mutationCount;
    await ref.cleanup("t");
    const storeMutations = refStore.mutations - storeStart;
    const diskMutations = refDisk.mutationCount - diskStart;
    expect((await fetchAll(ref, "t", 0)).map((r) => r.value)).toEqual(survivors);
    expect(storeMutations).toBeGreaterThan(5);
    await ref.close();

    // The store stops after its n-th mutation of the pass (the broker died there).
    for (let n = 0; n <= storeMutations; n++) {
      const label = `store cut after ${n} of ${storeMutations} mutations`;
      const store = new MemoryColdStore();
      const disk = new MemoryFileSystem({ seed: 4 });
      const broker = await scenario(disk, store);
      store.cutAfterMutations(n);
      await broker.cleanup("t");
      store.fault = null;
      disk.crash({ mode: "dropAll" });
      await reopenAndFinish(disk, store, original, label);
    }

    // The disk loses power before its n-th mutation of the pass.
    const crashes: CrashOptions[] = [{ mode: "dropAll" }, { mode: "keepAll" }, { seed: 31 }];
    for (let n = 0; n < diskMutations; n++) {
      for (const crash of crashes) {
        const label = `power cut before disk mutation ${n + 1} of ${diskMutations}, crash ${JSON.stringify(crash)}`;
        const store = new MemoryColdStore();
        const disk = new MemoryFileSystem({ seed: 4 });
        const boot = new MemoryFileSystem({ disk });
        const broker = await scenario(boot, store);
        boot.armPowerCut({ inMutations: n + 1 });
        await broker.cleanup("t").catch(() => {});
        disk.crash(crash);
        await reopenAndFinish(disk, store, original, label);
      }
    }
  });

  it("keeps an expired tombstone locally while the cold tier could not be compacted", async () => {
    const store = new MemoryColdStore();
    const fs = new MemoryFileSystem({ seed: 4 });
    const broker = await scenario(fs, store);
    store.fault = (op) => (op === "get" ? new Error("the store is unreachable") : null);
    const [run] = (await broker.cleanup("t")).partitions;
    expect(run.cold_compaction).toMatchObject({ status: "failed" });
    store.fault = null;
    const k2 = (await fetchAll(broker, "t", 0)).filter((r) => r.key === "k2");
    expect(k2.map((r) => r.value)).toEqual(["b1", ""]);
    await broker.close();
  });
});
