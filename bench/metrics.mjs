// Runs the /metrics cost benchmark (bench/metrics.ts) bundled for Node 20; the broker runs as a
// child process from a bundle of src/main.ts made alongside.
// `node bench/metrics.mjs [--producers 64] [--seconds 10] [--rounds 3] [--scrapeMs 1000] [--idleTopics 100] [--json out.json]`.
import { join } from "node:path";
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { metrics: "bench/metrics.ts", broker: "src/main.ts" },
  "es-bench-metrics-",
  async (out) => {
    const { main } = await importBundled(out, "metrics");
    return main(process.argv.slice(2), { dir: join(out, "data"), broker: join(out, "broker.mjs") });
  },
);
