// Shared esbuild settings for running TypeScript under Node 20 (which cannot run .ts): the dist
// bundle (scripts/build.mjs) and the bench and sim runners all bundle the same way.
import { build } from "esbuild";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** The repository root. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** esbuild options for an ESM bundle that runs on Node 20 (bundled CommonJS may require() built-ins). */
export const nodeBundleOptions = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  logLevel: "warning",
  banner: {
    js: 'import { createRequire as __esbCreateRequire } from "node:module"; const require = __esbCreateRequire(import.meta.url);',
  },
};

/**
 * Bundles `entries` ({ name: path relative to the repo root }) into a fresh temporary directory as
 * `<name>.mjs`, runs `fn(outDir)`, and removes the directory afterwards, whatever happens.
 */
export async function withBundle(entries, prefix, fn) {
  const out = mkdtempSync(join(tmpdir(), prefix));
  try {
    const entryPoints = Object.fromEntries(
      Object.entries(entries).map(([name, path]) => [name, join(repoRoot, path)]),
    );
    await build({
      ...nodeBundleOptions,
      entryPoints,
      outdir: out,
      outExtension: { ".js": ".mjs" },
    });
    return await fn(out);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/** Imports `<outDir>/<name>.mjs`. */
export function importBundled(outDir, name) {
  return import(pathToFileURL(join(outDir, `${name}.mjs`)).href);
}
