/**
 * End-to-end: what the command line says when it cannot do what it was asked (the real process,
 * so on every runtime target): one short line on stderr naming the problem, and the exit code.
 */
import { afterEach, describe, expect, it } from "vitest";
import { writeFileSync } from "node:fs";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, target } from "./harness.ts";

const cleanups: (() => void)[] = [];
afterEach(() => {
  cleanups.splice(0).forEach((c) => c());
});

function fresh(): string {
  const t = tempDir();
  cleanups.push(t.cleanup);
  return t.dir;
}

describe(`[${target}] es-broker command line errors`, () => {
  it("serve --data-dir naming a file says it is not a directory, once, and exits 1", async () => {
    const dir = fresh();
    writeFileSync(`${dir}/README.md`, "not a data directory\n");
    const r = await runCli(["serve", "--data-dir", `${dir}/README.md`, "--http-port", "0", "--tcp-port", "0"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`es-broker: Cannot use data directory ${dir}/README.md: it is not a directory\n`);
  });
});
