// Entry point of the per-runtime benchmark (bench/runtimes.ts): bundles it with esbuild into a
// temporary directory (Node 20 cannot run .ts) and runs it. Needs `npm run build` first (the Node
// bundle and the compiled binary are two of the targets) and `npm ci` (deno and bun in tools/).
//
//   npm run build && node bench/runtimes.mjs [--rounds 3] [--quick] [--json out.json] [--targets node,bun]
import { build } from "esbuild";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const out = mkdtempSync(join(tmpdir(), "es-bench-runtimes-bundle-"));
try {
  await build({
    entryPoints: [join(root, "bench/runtimes.ts")],
    outfile: join(out, "runtimes.mjs"),
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
    banner: { js: 'import { createRequire as __esbCreateRequire } from "node:module"; const require = __esbCreateRequire(import.meta.url);' },
  });
  const { main } = await import(pathToFileURL(join(out, "runtimes.mjs")).href);
  process.exitCode = await main(process.argv.slice(2), { root });
} finally {
  rmSync(out, { recursive: true, force: true });
}
