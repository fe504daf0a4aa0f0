// `npm run build`: writes the two build outputs.
//
//   dist/es-broker.mjs  one esbuild bundle of src/main.ts; runs under `node`, `deno run -A` and `bun`
//   dist/es-broker-client.mjs  the TypeScript client (src/client/client.ts) as one JavaScript module
//                       with its dependencies inside, for projects outside this repository
//   dist/es-broker      a standalone executable (`bun build --compile`): runs on a machine with no
//                       Node, no node_modules, nothing but the file
//
// Options: --bundle-only (skip the executable), --target=bun-linux-arm64 (cross-compile the
// executable; any target `bun build --compile --target` takes, see docs/runtimes.md), --outfile=PATH.
// Bun comes from tools/node_modules (installed by `npm ci`, scripts/install-tools.mjs).
import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { nodeBundleOptions } from "./bundle.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const option = (name) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const bundleOnly = process.argv.includes("--bundle-only");

// The console's bundle is a source module of the build (src/transport/http/console-assets.ts).
{
  const { consoleAssetsModule } = await import("./build-console.mjs");
  const assets = join(root, "src/transport/http/console-assets.ts");
  const text = await consoleAssetsModule();
  if (!existsSync(assets) || readFileSync(assets, "utf8") !== text) writeFileSync(assets, text);
}
mkdirSync(join(root, "dist"), { recursive: true });
await build({
  absWorkingDir: root,
  entryPoints: ["src/main.ts"],
  outfile: "dist/es-broker.mjs",
  ...nodeBundleOptions,
  sourcemap: false,
  legalComments: "none",
});
chmodSync(join(root, "dist/es-broker.mjs"), 0o755);
// The client for other projects (docs/client.md "Using it from another project").
await build({
  absWorkingDir: root,
  entryPoints: ["src/client/client.ts"],
  outfile: "dist/es-broker-client.mjs",
  ...nodeBundleOptions,
  sourcemap: false,
  legalComments: "none",
});

if (!bundleOnly) {
  const bun = join(root, "tools/node_modules/.bin/bun");
  if (!existsSync(bun)) {
    console.error(
      `build: ${bun} is missing, so dist/es-broker cannot be compiled; run \`npm ci\` (it installs bun into tools/), or pass --bundle-only`,
    );
    process.exit(1);
  }
  const target = option("target");
  const outfile = resolve(root, option("outfile") ?? "dist/es-broker");
  // Bun writes the executable in place; a stale one must not survive a failed compile.
  rmSync(outfile, { force: true });
  const args = ["build", "--compile", "src/main.ts", "--outfile", outfile];
  if (target) args.push(`--target=${target}`);
  const compiled = spawnSync(bun, args, { cwd: root, encoding: "utf8" });
  if (compiled.status !== 0) {
    console.error(
      `build: bun ${args.join(" ")} failed (status ${compiled.status ?? compiled.signal}):\n${compiled.stdout}${compiled.stderr}`,
    );
    process.exit(1);
  }
}
