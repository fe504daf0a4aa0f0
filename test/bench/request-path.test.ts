/** Runs the request-path CPU benchmark tiny, so it cannot rot; asserts that it measured, not how fast. */
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";

describe("request-path CPU benchmark", () => {
  it("answers every request of each round and reports CPU per request, with and without fsync", () => {
    for (const fsync of [[], ["--fsync"]]) {
      const run = spawnSync(
        process.execPath,
        [
          "bench/request-path.mjs",
          ...["--connections", "8", "--requests", "400", "--rounds", "2"],
          ...fsync,
        ],
        { encoding: "utf8", timeout: 120_000 },
      );
      expect(run.status, run.stderr).toBe(0);
      const rounds = [
        ...run.stdout.matchAll(/round \d+: .*?(\d+) requests\/s, CPU ([\d.]+) µs\/request/g),
      ];
      expect(rounds, run.stdout).toHaveLength(2);
      for (const [, perSecond, cpu] of rounds) {
        expect(Number(perSecond)).toBeGreaterThan(0);
        expect(Number(cpu)).toBeGreaterThan(0);
      }
    }
  });
});
