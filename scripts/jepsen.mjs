// The longer Jepsen-style run of issue #16 (test/cluster/run.ts, bundled for Node 20): three
// brokers and a three-member etcd under a seeded fault schedule of several minutes, then the
// checker. `npm test` runs a bounded one (test/cluster/jepsen.test.ts).
//   node scripts/jepsen.mjs [--minutes 5] [--seed N] [--mode cluster|single]
// Builds dist/es-broker.mjs first. Exit code 0: no anomaly; 1: the checker found some (the
// processes' logs and the history are saved, the path is printed); the seed replays the faults.
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { importBundled, repoRoot, withBundle } from "./bundle.mjs";

execFileSync(process.execPath, [join(repoRoot, "scripts/build.mjs"), "--bundle-only"], {
  stdio: "inherit",
});
process.exitCode = await withBundle(
  { jepsen: "test/cluster/run.ts" },
  "es-jepsen-",
  async (out) => {
    const { main } = await importBundled(out, "jepsen");
    return main(process.argv.slice(2), {
      command: [process.execPath, join(repoRoot, "dist/es-broker.mjs")],
    });
  },
);
