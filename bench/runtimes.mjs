// Entry point of the per-runtime benchmark (bench/runtimes.ts): bundles it with esbuild into a
// temporary directory (Node 20 cannot run .ts) and runs it. Needs `npm run build` first (the Node
// bundle and the compiled binary are two of the targets) and `npm ci` (deno and bun in tools/).
//
//   npm run build && node bench/runtimes.mjs [--rounds 7] [--quick] [--json out.json] [--targets node,bun]
import { importBundled, repoRoot, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { runtimes: "bench/runtimes.ts" },
  "es-bench-runtimes-bundle-",
  async (out) => {
    const { main } = await importBundled(out, "runtimes");
    return main(process.argv.slice(2), { root: repoRoot });
  },
);
