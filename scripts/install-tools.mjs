// Installs Deno and Bun into tools/node_modules (the root package's `postinstall`, so the README's
// `npm ci` is the whole set-up), then checks that both binaries run.
//
// Why a separate prefix: inside `deno task`, a bare `deno` resolves to node_modules/.bin first, and
// the root one would be the npm package's wrapper, which Deno then tries to run as JavaScript. So
// deno and bun stay out of the root node_modules/.bin; the tests and scripts call them by path
// (tools/node_modules/.bin/deno, tools/node_modules/.bin/bun).
//
// Both npm packages place their binary with a postinstall script. npm 11 warns about install
// scripts "not yet covered by allowScripts" (and later versions block them), so tools/package.json
// approves exactly these two in its `allowScripts`, and this script fails loudly if a binary does
// not run afterwards, rather than leaving a broken runtime for the tests to trip over.
//
// Set ES_BROKER_SKIP_TOOLS=1 to skip (the Deno, Bun and binary targets then fail in `npm test`).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const tools = join(root, "tools");
const bin = join(tools, "node_modules", ".bin");

if (process.env.ES_BROKER_SKIP_TOOLS === "1") {
  console.log("install-tools: ES_BROKER_SKIP_TOOLS=1, not installing deno and bun into tools/");
  process.exit(0);
}
if (!existsSync(join(tools, "package-lock.json"))) {
  // Installed as someone's dependency (tools/ is not part of the package): nothing to do.
  process.exit(0);
}

// npm runs this script with npm_execpath pointing at its own CLI; use the same npm for tools/.
const npm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ["npm"];
// The parent `npm ci` exports its settings as npm_config_*; ones that describe the root install
// (its prefix, a --global, --omit=dev, --ignore-scripts…) must not leak into this one.
const env = Object.fromEntries(
  Object.entries(process.env).filter(
    ([k]) =>
      !/^npm_config_(prefix|global|omit|include|production|only|ignore_scripts|workspaces?|location)$/i.test(
        k,
      ),
  ),
);
const args = [
  ...npm.slice(1),
  "ci",
  "--prefix",
  tools,
  "--no-audit",
  "--no-fund",
  "--loglevel=error",
];
console.log(`install-tools: npm ci --prefix tools (deno and bun)`);
const installed = spawnSync(npm[0], args, { cwd: tools, env, stdio: "inherit" });
if (installed.status !== 0) {
  console.error(
    `install-tools: npm ci --prefix tools failed (status ${installed.status ?? installed.signal})`,
  );
  process.exit(1);
}

let failed = false;
for (const [name, versionArgs] of [
  ["deno", ["--version"]],
  ["bun", ["--version"]],
]) {
  const path = join(bin, name);
  const run = spawnSync(path, versionArgs, { encoding: "utf8" });
  const first = (run.stdout ?? "").split("\n")[0].trim();
  if (run.status !== 0 || first === "") {
    failed = true;
    console.error(
      `install-tools: ${path} does not run (${run.error?.message ?? `status ${run.status}`}): ${(run.stderr ?? "").trim().slice(0, 300)}\n` +
        `  Its npm package's postinstall may have been blocked; see tools/package.json "allowScripts".`,
    );
  } else {
    console.log(`install-tools: ${name} ok (${first})`);
  }
}
process.exit(failed ? 1 : 0);
