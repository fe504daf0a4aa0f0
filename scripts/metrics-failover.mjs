// Field failure 29d at length (docs/operations.md "Under failover"; test/cluster/metrics-failover.ts):
// three brokers and a three-member etcd, /metrics of every broker scraped every 200 ms for 5 minutes
// while a consumer group consumes and commits, across leader failovers (SIGKILL) and broker restarts
// (SIGTERM); lag ≥ 0, counters never decrease within one process_start_time_seconds, log end ≥
// committed offset, and the brokers' under-replicated count matches etcd's ISRs within one interval.
//   node scripts/metrics-failover.mjs [--minutes 5] [--scrape-ms 200]
// Builds dist/es-broker.mjs first. Exit code 0: every check held; 1: a violation (listed).
// `npm test` runs a bounded one (test/cluster/metrics-failover.test.ts).
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { importBundled, repoRoot, withBundle } from "./bundle.mjs";

execFileSync(process.execPath, [join(repoRoot, "scripts/build.mjs"), "--bundle-only"], {
  stdio: "inherit",
});
process.exitCode = await withBundle(
  { run: "test/cluster/metrics-failover.ts" },
  "es-metrics-failover-",
  async (out) => {
    const { main } = await importBundled(out, "run");
    return main(process.argv.slice(2), {
      command: [process.execPath, join(repoRoot, "dist/es-broker.mjs")],
    });
  },
);
