// Runs the fetch-path CPU benchmark (bench/fetch-path.ts) bundled for Node 20:
// `node bench/fetch-path.mjs [--records 100000] [--batch 1000] [--value-bytes 256] [--rounds 5]`.
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { path: "bench/fetch-path.ts" },
  "es-bench-fetch-path-",
  async (out) => {
    const { main } = await importBundled(out, "path");
    return main(process.argv.slice(2));
  },
);
