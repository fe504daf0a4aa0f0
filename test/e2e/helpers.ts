/**
 * Set-up steps the end-to-end files share (auth, console, prometheus, kafka, cli, groups, mirror,
 * cold storage): an admin key made offline before the first start, and polling until something
 * holds. Each error starts with `[target]`, as the harness's do.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";
import { runCli, target } from "./harness.ts";

/**
 * Makes an admin key with the CLI (`keys create --data-dir DATA --name NAME --role admin --out
 * DIR/admin.key`, the broker not running yet) and asserts it worked.
 * @returns the key and the path of its file (mode 0600).
 */
export async function offlineAdminKey(
  dataDir: string,
  dir: string,
  name = "root",
): Promise<{ key: string; path: string; stderr: string; stdout: Buffer }> {
  const path = join(dir, "admin.key");
  const made = await runCli([
    ...["keys", "create", "--data-dir", dataDir, "--name", name, "--role", "admin"],
    ...["--out", path],
  ]);
  expect(made.code, made.stderr).toBe(0);
  return { key: readFileSync(path, "utf8").trim(), path, stderr: made.stderr, stdout: made.stdout };
}

/**
 * Polls `check` every `intervalMs` until it holds.
 * @throws Error naming `what` after `timeoutMs`, or what `check` throws.
 */
export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
  intervalMs = 50,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`[${target}] timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
