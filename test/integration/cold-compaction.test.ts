/**
 * Compaction reaches the cold tier (docs/storage.md "Cold compaction"): the compaction table of
 * `test/helpers/cold-compaction-fixtures.ts` over a directory cold tier, a memory store and an S3
 * store on moto_server — the newest value of each key survives wherever it lives, tombstones
 * expire across tiers, keyless records and the empty key follow the local rules, offsets and bytes
 * are kept, the replaced objects are gone, and a restart serves the same.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { parseS3Url, S3ColdStore } from "../../src/runtime/s3-cold-store.ts";
import type { ColdStore } from "../../src/storage/cold-objects.ts";
import {
  fetchAll,
  ManualClock,
  MemoryFileSystem,
  openBroker,
} from "../helpers/compaction-fixtures.ts";
import {
  before,
  coldCompactionScenario,
  compactAtMs,
  survivors,
} from "../helpers/cold-compaction-fixtures.ts";
import { MemoryColdStore } from "../helpers/memory-cold-store.ts";
import { motoCredentials, startMoto, type MotoServer } from "../helpers/moto.ts";

let moto: MotoServer;
beforeAll(async () => {
  moto = await startMoto();
  await moto.createBucket("compaction");
});
afterAll(async () => {
  await moto?.stop();
});

const stores: { name: string; make: () => { store?: ColdStore; dir?: string } }[] = [
  { name: "a directory", make: () => ({ dir: "/cold" }) },
  { name: "a memory store", make: () => ({ store: new MemoryColdStore() }) },
  {
    name: "S3 (moto_server)",
    make: () => ({
      store: new S3ColdStore({
        location: parseS3Url(`s3://compaction/run-${Math.random().toString(36).slice(2)}`),
        credentials: motoCredentials,
        endpoint: moto.endpoint,
        logger: new MemoryLogger(),
      }),
    }),
  },
];

describe("compaction over the cold tier", () => {
  for (const { name, make } of stores) {
    it(`keeps the newest record of each key across tiers and expires tombstones, on ${name}`, async () => {
      const fs = new MemoryFileSystem({ seed: 9 });
      const { store, dir } = make();
      const extra = store !== undefined ? { coldStore: store } : { coldStorageDir: dir };
      const { broker } = await coldCompactionScenario(fs, extra);
      const all = await fetchAll(broker, "t", 0);
      expect(all.map((r) => r.value)).toEqual(before);
      const [run] = (await broker.cleanup("t")).partitions;
      expect(run.cold_compaction).toMatchObject({
        status: "compacted",
        cold_segments_read: 2,
        local_segments_read: 2,
        segments_replaced: 2,
        records_dropped: 5,
        gen: 1,
      });
      expect(run.compaction).toMatchObject({ status: "compacted", tombstones_dropped: 1 });
      const after = await fetchAll(broker, "t", 0);
      expect(after.map((r) => r.value)).toEqual(survivors);
      // Offsets and bytes are the originals.
      const byOffset = new Map(all.map((r) => [r.offset, r]));
      for (const r of after) expect(r.bytes).toEqual(byOffset.get(r.offset)!.bytes);
      expect(await broker.listOffsets({ topic: "t", partition: 0 })).toEqual({
        logStartOffset: 0,
        highWatermark: all.length,
      });
      // A second pass finds nothing to drop.
      const [again] = (await broker.cleanup("t")).partitions;
      expect(again.cold_compaction).toMatchObject({
        status: "skipped",
        reason: "no record to drop",
      });
      await broker.close();

      const { broker: reopened } = await openBroker(fs, new ManualClock(compactAtMs + 1000), extra);
      expect((await fetchAll(reopened, "t", 0)).map((r) => r.value)).toEqual(survivors);
      if (store !== undefined) {
        const keys = (await store.list("topics/t/0/")).map((o) =>
          o.key.slice("topics/t/0/".length),
        );
        expect(keys).toEqual([
          "00000000000000000000.1.index",
          "00000000000000000000.1.log",
          "00000000000000000005.1.index",
          "00000000000000000005.1.log",
        ]);
      }
      await reopened.close();
    });
  }
});
