// Entry point of `npm run bench`: bundles the harness and the load generator into a temporary
// directory (Node 20 cannot run .ts; the generator must be its own process), then runs the
// harness. Arguments after `--` go to the harness: `npm run bench -- --quick --json out.json`.
import { join } from "node:path";
import { importBundled, repoRoot, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { harness: "bench/harness.ts", generator: "bench/generator.ts" },
  "es-bench-bundle-",
  async (out) => {
    const { main } = await importBundled(out, "harness");
    return main(process.argv.slice(2), {
      root: repoRoot,
      generatorPath: join(out, "generator.mjs"),
    });
  },
);
