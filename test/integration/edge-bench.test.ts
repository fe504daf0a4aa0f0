import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runEdgeBench } from "../../bench/edge.ts";
import { startMoto, type MotoServer } from "../helpers/moto.ts";
import { tempDir } from "../helpers/tmp.ts";

let moto: MotoServer;
beforeAll(async () => {
  moto = await startMoto();
  await moto.createBucket("bench");
});
afterAll(async () => {
  await moto?.stop();
});

describe("the edge benchmark, run tiny so it cannot rot", () => {
  it("measures uploads and cold reads on both tiers and the mirror's steady and catch-up rates", async () => {
    const { dir } = tempDir();
    const r = await runEdgeBench({
      dir,
      s3Endpoint: moto.endpoint,
      dataBytes: 1024 * 1024,
      segmentBytes: 256 * 1024,
      mirrorRate: 200,
      mirrorMs: 500,
      backlogRecords: 500,
    });
    expect(r.cold.map((c) => c.tier)).toEqual(["directory", "s3"]);
    for (const c of r.cold) {
      expect(c.segments_offloaded).toBeGreaterThan(1);
      expect(c.data_bytes).toBeGreaterThan(1024 * 1024 - 2000);
      expect(c.upload_mb_per_s).toBeGreaterThan(0);
      expect(c.cold_read_mb_per_s).toBeGreaterThan(0);
    }
    expect(r.mirror.steady_forwarded_records_per_s).toBeGreaterThan(0);
    expect(r.mirror.catch_up_capped_records_per_s).toBeGreaterThan(0);
    expect(r.mirror.catch_up_uncapped_records_per_s).toBeGreaterThan(0);
  });
});
