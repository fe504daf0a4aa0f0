// Runs the edge benchmark (bench/edge.ts) bundled for Node 20, in this process.
// `node bench/edge.mjs [--quick] [--dir DIR] [--json out.json]`; starts moto_server itself.
import { join } from "node:path";
import { importBundled, withBundle } from "../scripts/bundle.mjs";

process.exitCode = await withBundle({ edge: "bench/edge.ts" }, "es-bench-edge-", async (out) => {
  const { main } = await importBundled(out, "edge");
  return main(process.argv.slice(2), { dir: join(out, "data") });
});
