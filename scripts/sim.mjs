// `npm run sim -- --seed N` replays one seed of the crash-safety simulation, printing what happened;
// `npm run sim -- --seeds 100000` is the long run. Node 20 cannot run .ts files, so this bundles
// test/sim/cli.ts with esbuild into a temporary .mjs, runs it with the same arguments, and removes it.
import { build } from "esbuild";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const dir = mkdtempSync(join(tmpdir(), "es-broker-sim-"));
const outfile = join(dir, "sim.mjs");
try {
  await build({
    entryPoints: ["test/sim/cli.ts"],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
    banner: { js: 'import { createRequire as __esbCreateRequire } from "node:module"; const require = __esbCreateRequire(import.meta.url);' },
  });
  await import(pathToFileURL(outfile).href);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
