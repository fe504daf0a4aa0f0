// Runs the start-up benchmark (bench/startup.ts): bundles it with esbuild (Node 20 cannot run
// .ts), then runs it in this process. `node bench/startup.mjs [--data-mb 1024] [--segment-mb 64]
// [--partitions 4] [--json out.json]`.
import { build } from "esbuild";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const out = mkdtempSync(join(tmpdir(), "es-bench-startup-"));
try {
  await build({
    entryPoints: { startup: join(root, "bench/startup.ts") },
    outdir: out,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
    banner: { js: 'import { createRequire as __esbCreateRequire } from "node:module"; const require = __esbCreateRequire(import.meta.url);' },
  });
  const { main } = await import(pathToFileURL(join(out, "startup.mjs")).href);
  process.exitCode = await main(process.argv.slice(2), { dir: join(out, "data") });
} finally {
  rmSync(out, { recursive: true, force: true });
}
