/**
 * Runs the mirror's CPU benchmark (bench/mirror-cpu.mjs; docs/benchmarks.md "The mirror's CPU on
 * the edge") tiny against the built broker, so it cannot rot: two real brokers, every phase
 * measured and every record forwarded. It asserts that it measured, not how fast.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";

const root = join(import.meta.dirname, "../..");

describe("mirror CPU benchmark", () => {
  it("measures taking in, catching up and live forwarding for each shape", () => {
    expect(
      existsSync(join(root, "dist/es-broker.mjs")),
      "dist/es-broker.mjs exists (npm test builds it)",
    ).toBe(true);
    const { dir } = tempDir("es-mirror-cpu-test-");
    const run = spawnSync(
      process.execPath,
      ["bench/mirror-cpu.mjs", "--records", "200", "--rounds", "1", "--shapes", "20x2,1x4"],
      { cwd: root, encoding: "utf8", timeout: 120_000, env: { ...process.env, TMPDIR: dir } },
    );
    expect(run.status, run.stderr).toBe(0);
    const rows = run.stdout
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as Record<string, number | string>);
    expect(rows.map((r) => r.shape)).toEqual(["20x2", "1x4"]);
    for (const row of rows) {
      for (const field of ["produce_us", "backlog_us", "live_us"]) {
        expect(Number.isFinite(row[field]), `${field} of ${row.shape}`).toBe(true);
        expect(row[field] as number).toBeGreaterThanOrEqual(0);
      }
      for (const field of ["produce_per_s", "backlog_per_s", "live_per_s"])
        expect(row[field] as number, `${field} of ${row.shape}`).toBeGreaterThan(0);
    }
    expect(run.stdout).toMatch(/^uptime before: load [\d.]+ [\d.]+ [\d.]+$/m);
  });
});
