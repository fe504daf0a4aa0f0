/** Runs the /metrics cost benchmark tiny, so it cannot rot; asserts that it measured, not how fast. */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";

describe("/metrics cost benchmark", () => {
  it("measures the 64 × 1 TCP case with and without a scrape every second, in one run", () => {
    const { dir } = tempDir("es-metrics-bench-test-");
    const out = join(dir, "metrics.json");
    const args = [
      "bench/metrics.mjs",
      ...["--producers", "4", "--seconds", "1.2", "--rounds", "1", "--scrapeMs", "300"],
      ...["--idleTopics", "3"],
    ];
    const run = spawnSync(process.execPath, [...args, "--json", out], {
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/scrape +\d+ records\/s/);
    const result = JSON.parse(readFileSync(out, "utf8")) as Record<string, number>;
    expect(result.none_records_per_s).toBeGreaterThan(0);
    expect(result.scrape_records_per_s).toBeGreaterThan(0);
    expect(result.scrapes).toBeGreaterThanOrEqual(3);
    expect(result.scrape_bytes).toBeGreaterThan(1000);
  });
});
