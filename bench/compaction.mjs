// Runs the compaction benchmark (bench/compaction.ts) bundled for Node 20, in this process.
// `node bench/compaction.mjs [--quick] [--data-mb 256] [--keys 1000000,10000] [--dir DIR] [--json out.json]`.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { compaction: "bench/compaction.ts" },
  "es-bench-compaction-",
  async (out) => {
    const { main } = await importBundled(out, "compaction");
    return main(process.argv.slice(2), {
      dir: join(out, "data"),
      runner: fileURLToPath(import.meta.url),
    });
  },
);
