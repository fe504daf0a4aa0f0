// Runs the start-up benchmark (bench/startup.ts) bundled for Node 20.
// `node bench/startup.mjs [--data-mb 1024] [--segment-mb 64] [--partitions 4] [--json out.json]`.
import { join } from "node:path";
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { startup: "bench/startup.ts" },
  "es-bench-startup-",
  async (out) => {
    const { main } = await importBundled(out, "startup");
    return main(process.argv.slice(2), { dir: join(out, "data") });
  },
);
