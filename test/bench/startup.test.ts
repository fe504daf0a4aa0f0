/** Runs the start-up benchmark tiny, so it cannot rot; asserts that it measured, not how fast. */
import { describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

describe("start-up benchmark", () => {
  it("measures start-up with valid indexes and with a forced full scan", () => {
    const dir = mkdtempSync(join(tmpdir(), "es-startup-test-"));
    try {
      const out = join(dir, "startup.json");
      const run = spawnSync(
        process.execPath,
        [
          "bench/startup.mjs",
          "--data-mb",
          "8",
          "--segment-mb",
          "1",
          "--partitions",
          "2",
          "--json",
          out,
        ],
        { encoding: "utf8", timeout: 120_000 },
      );
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/valid indexes \(fast path\): \d+ ms/);
      const result = JSON.parse(readFileSync(out, "utf8")) as Record<string, number>;
      expect(result.segments).toBeGreaterThan(4);
      expect(result.data_bytes).toBeGreaterThan(7 * 1024 * 1024);
      expect(result.startup_trusted_ms).toBeGreaterThanOrEqual(0);
      expect(result.startup_full_scan_ms).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
