/** Runs the schema-validation benchmark tiny, so it cannot rot; asserts that it measured, not how fast. */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";

describe("schema-validation benchmark", () => {
  it("measures produce with Avro and JSON validation against none, in one run", () => {
    const { dir } = tempDir("es-registry-bench-test-");
    const out = join(dir, "registry.json");
    const args = ["bench/registry.mjs", "--producers", "4", "--records", "20", "--rounds", "1"];
    const run = spawnSync(process.execPath, [...args, "--json", out], {
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/avro +\d+ records\/s/);
    const result = JSON.parse(readFileSync(out, "utf8")) as Record<string, number>;
    for (const c of ["none", "avro", "json"])
      expect(result[`${c}_records_per_s`]).toBeGreaterThan(0);
    expect(result.avro_share).toBeGreaterThan(0);
  });
});
