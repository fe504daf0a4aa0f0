// Entry point of `npm run bench`: bundles the harness and the load generator into a temporary
// directory (Node 20 cannot run .ts; the generator must be its own process), then runs the
// harness. Arguments after `--` go to the harness: `npm run bench -- --quick --json out.json`.
// A full run (not `--quick`, not `--from-json`, and `--only` absent or matching "cluster") ends
// with the cluster benchmark (bench/cluster.ts: replication factor 3 on three brokers next to a
// single broker), its figures written to `<json>.cluster.json` with `--json`.
import { join } from "node:path";
import { importBundled, repoRoot, withBundle } from "../scripts/bundle.mjs";

const args = process.argv.slice(2);
const flagValue = (flag) => {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
};
const only = flagValue("--only");
const withCluster =
  !args.includes("--help") &&
  !args.includes("-h") &&
  !args.includes("--quick") &&
  !args.includes("--from-json") &&
  (only === undefined || new RegExp(only).test("cluster"));

process.exitCode = await withBundle(
  { harness: "bench/harness.ts", generator: "bench/generator.ts", cluster: "bench/cluster.ts" },
  "es-bench-bundle-",
  async (out) => {
    const paths = { root: repoRoot, generatorPath: join(out, "generator.mjs") };
    const { main } = await importBundled(out, "harness");
    const code = await main(args, paths);
    if (!withCluster) return code;
    const cluster = await importBundled(out, "cluster");
    const json = flagValue("--json");
    const clusterCode = await cluster.main(
      json === undefined ? [] : ["--json", `${json.replace(/\.json$/, "")}.cluster.json`],
      paths,
    );
    return code || clusterCode;
  },
);
