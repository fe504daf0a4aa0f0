// Entry point of `npm run bench`: bundles the harness and the load generator with esbuild into a
// temporary directory (Node 20 cannot run .ts; the generator must be its own process), then runs
// the harness. Arguments after `--` go to the harness: `npm run bench -- --quick --json out.json`.
import { build } from "esbuild";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const out = mkdtempSync(join(tmpdir(), "es-bench-bundle-"));
try {
  await build({
    entryPoints: { harness: join(root, "bench/harness.ts"), generator: join(root, "bench/generator.ts") },
    outdir: out,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
    banner: { js: 'import { createRequire as __esbCreateRequire } from "node:module"; const require = __esbCreateRequire(import.meta.url);' },
  });
  const { main } = await import(pathToFileURL(join(out, "harness.mjs")).href);
  process.exitCode = await main(process.argv.slice(2), { root, generatorPath: join(out, "generator.mjs") });
} finally {
  rmSync(out, { recursive: true, force: true });
}
