/**
 * The Jepsen-style run of issue #16, bounded and seeded, in `npm test`: real broker processes
 * (and, in cluster mode, a three-member etcd) under the fault schedule of the printed seed,
 * concurrent plain and idempotent producers and plain and group consumers, then a full read and
 * the checker. Zero of every anomaly, and proof the workload did work under the faults.
 *
 * Replay a run: `ES_BROKER_JEPSEN_SEED=<seed> npx vitest run --project default test/cluster/jepsen.test.ts`.
 * `ES_BROKER_JEPSEN_MODE=single|cluster` picks the system (default below). A longer run:
 * `node scripts/jepsen.mjs`.
 */
import { describe, expect, it } from "vitest";
import { anomalyKinds } from "./checker.ts";
import { runJepsen } from "./run.ts";
import { seedFromEnv } from "./schedule.ts";

const mode = process.env.ES_BROKER_JEPSEN_MODE ?? "cluster";
if (mode !== "single" && mode !== "cluster") {
  throw new Error(`ES_BROKER_JEPSEN_MODE must be "single" or "cluster", got "${mode}"`);
}

describe(`jepsen (${mode})`, () => {
  it("no acknowledged record is lost, duplicated, reordered or skipped under the seeded faults", async () => {
    const seed = seedFromEnv();
    const report = await runJepsen({
      seed,
      cluster: mode === "cluster",
      log: (line) => console.log(line),
    });
    // The workload must have done real work on both sides of the faults, or zero anomalies means nothing.
    expect(report.okOps.producer).toBeGreaterThan(50);
    expect(report.okOps.idem).toBeGreaterThan(50);
    expect(report.okOps.consumer).toBeGreaterThan(50);
    expect(report.okOps.member).toBeGreaterThan(20);
    // Leadership moves back to a returning preferred replica are a fault source of their own.
    // Every leadership off its preferred replica when the faults ended moved back under load.
    if (mode === "cluster")
      expect(
        report.preferredMoves,
        `seed ${seed}: ${report.text}${report.logsDir ? `\nlogs and history: ${report.logsDir}` : ""}`,
      ).toBeGreaterThanOrEqual(report.displacedAtEnd);
    const lastFaultEnd = report.schedule.endMs;
    const acksAfterFaults = report.history.ops.filter(
      (o) => o.f === "send" && o.type === "ok" && o.timeMs > lastFaultEnd,
    ).length;
    expect(
      acksAfterFaults,
      "writes are accepted again after the last fault healed",
    ).toBeGreaterThan(0);
    const counts = Object.fromEntries(
      anomalyKinds.map((k) => [k, report.check.anomalies[k].length]),
    );
    expect(
      counts,
      `seed ${seed}: ${report.text}${report.logsDir ? `\nlogs and history: ${report.logsDir}` : ""}`,
    ).toEqual(Object.fromEntries(anomalyKinds.map((k) => [k, 0])));
    expect(report.check.stats.finalRecords).toBeGreaterThanOrEqual(report.check.stats.acknowledged);
    // Every replica's data directory was read too, each copy holding records of every partition.
    const replicaReads = report.history.ops.filter(
      (o) => o.f === "final-read" && o.type === "ok" && o.node !== undefined,
    );
    expect(replicaReads).toHaveLength((mode === "cluster" ? 3 : 1) * 2);
    for (const r of replicaReads) expect(r.records.length, `node ${r.node}`).toBeGreaterThan(0);
  }, 300_000);
});
