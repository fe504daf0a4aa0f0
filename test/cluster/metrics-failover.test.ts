/**
 * Field failure 29d, bounded, in `npm test` (node target): `/metrics` of a real three-broker
 * cluster scraped every 200 ms while a consumer group consumes and commits, across one leader
 * failover (SIGKILL, lease expiry, new leader) and one broker restart (SIGTERM), with the checks
 * of `metrics-failover.ts`. The 5-minute run: `node scripts/metrics-failover.mjs`.
 */
import { describe, expect, it } from "vitest";
import { metricsChecks, runMetricsFailover } from "./metrics-failover.ts";

describe("metrics across a failover and a restart", () => {
  it("lag ≥ 0, counters never decrease, log end ≥ committed, under-replicated count = etcd's", async () => {
    const report = await runMetricsFailover({
      // The killed leader comes back after its lease (6 s) and the controller's grace for a
      // vanished registration (3 s) are over: a failover first, then a restart.
      durationMs: 15_000,
      faults: [{ killLeaderAtMs: 1_000, restartKilledAtMs: 11_000, restartBrokerAtMs: 12_000 }],
      log: (line) => console.log(line),
    });
    // The run did what it is about, or zero violations means nothing.
    console.log(report.text);
    expect(report.faults.map((f) => f.what.split(" ")[0])).toEqual([
      "SIGKILL",
      "start",
      "SIGTERM",
      "start",
    ]);
    expect(report.rounds).toBeGreaterThan(30);
    expect(report.commits).toBeGreaterThan(5);
    expect(report.underReplicatedRounds, report.text).toBeGreaterThan(0);
    expect(report.counterComparisons).toBeGreaterThan(1000);
    expect(report.lagSamples).toBeGreaterThan(30);
    expect(report.counts, report.text).toEqual(
      Object.fromEntries(metricsChecks.map((c) => [c, 0])),
    );
  }, 90_000);
});
