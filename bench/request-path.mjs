// Runs the request-path CPU benchmark (bench/request-path.ts) bundled for Node 20:
// `node bench/request-path.mjs [--connections 64] [--records 1] [--requests 200000] [--rounds 3] [--fsync]`.
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { path: "bench/request-path.ts" },
  "es-bench-request-path-",
  async (out) => {
    const { main } = await importBundled(out, "path");
    return main(process.argv.slice(2));
  },
);
