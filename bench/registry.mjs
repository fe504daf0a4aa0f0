// Runs the schema-validation benchmark (bench/registry.ts) bundled for Node 20; the broker runs
// as a child process from a bundle of src/main.ts made alongside.
// `node bench/registry.mjs [--producers 64] [--records 100] [--batch 10] [--rounds 3] [--json out.json]`.
import { join } from "node:path";
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle(
  { registry: "bench/registry.ts", broker: "src/main.ts" },
  "es-bench-registry-",
  async (out) => {
    const { main } = await importBundled(out, "registry");
    return main(process.argv.slice(2), { dir: join(out, "data"), broker: join(out, "broker.mjs") });
  },
);
