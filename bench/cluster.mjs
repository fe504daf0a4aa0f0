// Runs the cluster benchmark (bench/cluster.ts) bundled for Node 20, in this process, with the load
// generator bundled alongside; the brokers are dist/es-broker.mjs (built first).
// `node bench/cluster.mjs [--quick] [--rounds 2] [--warmup-ms 1000] [--measure-ms 5000] [--json out.json]`.
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { importBundled, repoRoot, withBundle } from "../scripts/bundle.mjs";

execFileSync(process.execPath, [join(repoRoot, "scripts/build.mjs"), "--bundle-only"], {
  stdio: "inherit",
});
process.exitCode = await withBundle(
  { cluster: "bench/cluster.ts", generator: "bench/generator.ts" },
  "es-bench-cluster-",
  async (out) => {
    const { main } = await importBundled(out, "cluster");
    return main(process.argv.slice(2), {
      root: repoRoot,
      generatorPath: join(out, "generator.mjs"),
    });
  },
);
