/**
 * Global setup of each `e2e:*` project: makes sure the build output its target runs is not older
 * than the sources, rebuilding it if it is. `npm test` builds first (the binary once per run), so
 * this only does work when vitest is started directly after an edit; it keeps the node and binary
 * targets from silently testing a stale dist/. A failed build fails the run.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "./targets.ts";

function newestMtimeMs(path: string): number {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let newest = st.mtimeMs;
  for (const name of readdirSync(path)) newest = Math.max(newest, newestMtimeMs(join(path, name)));
  return newest;
}

function mtimeMs(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return -1;
  }
}

/** Vitest calls this with the project (its name is `e2e:<target>` or `e2e:<target>-serial`). */
export default function setup(project: { name: string }): void {
  const target = project.name.replace(/^e2e:/, "").replace(/-serial$/, "");
  const output =
    target === "node" ? "dist/es-broker.mjs" : target === "binary" ? "dist/es-broker" : null;
  if (output === null) return; // deno and bun run the sources
  const sourcesMs = Math.max(
    newestMtimeMs(join(repoRoot, "src")),
    mtimeMs(join(repoRoot, "package-lock.json")),
  );
  if (mtimeMs(join(repoRoot, output)) >= sourcesMs) return;
  const args = ["scripts/build.mjs", ...(target === "node" ? ["--bundle-only"] : [])];
  process.stderr.write(
    `[${target}] ${output} is older than src/; rebuilding (node ${args.join(" ")})\n`,
  );
  execFileSync(process.execPath, args, { cwd: repoRoot, stdio: "inherit" });
}
