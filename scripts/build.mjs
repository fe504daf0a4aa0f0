// Builds dist/es-broker.mjs: one esbuild bundle of src/main.ts that runs under node, deno and bun.
import { build } from "esbuild";
import { chmodSync, mkdirSync } from "node:fs";

mkdirSync("dist", { recursive: true });
await build({
  entryPoints: ["src/main.ts"],
  outfile: "dist/es-broker.mjs",
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: false,
  legalComments: "none",
  logLevel: "warning",
  // Bundled CommonJS dependencies may call require() for node built-ins.
  banner: { js: 'import { createRequire as __esbCreateRequire } from "node:module"; const require = __esbCreateRequire(import.meta.url);' },
});
chmodSync("dist/es-broker.mjs", 0o755);
