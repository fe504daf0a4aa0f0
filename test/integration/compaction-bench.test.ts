import { describe, expect, it } from "vitest";
import { runCompactionBench } from "../../bench/compaction.ts";
import { tempDir } from "../helpers/tmp.ts";

describe("the compaction benchmark, run tiny so it cannot rot", () => {
  it("compacts the same data with many and with few keys and reports throughput and memory", async () => {
    const { dir } = tempDir();
    const results = await runCompactionBench({
      dir,
      dataBytes: 1024 * 1024,
      keyCounts: [5000, 50],
      segmentBytes: 256 * 1024,
      forceGc: false,
    });
    expect(results.map((r) => r.keys)).toEqual([5000, 50]);
    for (const r of results) {
      expect(r.status).toBe("compacted");
      expect(r.records_dropped).toBe(r.records - r.keys);
      expect(r.data_bytes).toBeGreaterThan(1024 * 1024 - 200);
      expect(r.input_mb_per_s).toBeGreaterThan(0);
      expect(r.peak_rss_bytes).toBeGreaterThan(0);
    }
    expect(results[0].records).toBe(results[1].records);
    // The key map follows the number of keys (24 bytes a slot, doubling at 3/4 full).
    expect(results[0].map_bytes).toBe(8192 * 24);
    expect(results[1].map_bytes).toBe(1024 * 24);
  });
});
