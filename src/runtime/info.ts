/** Which runtime is running us, for `--version` and the start-up line. */

interface RuntimeGlobals {
  Deno?: { version?: { deno?: string } };
  Bun?: { version?: string; main?: string };
  process?: { versions?: { node?: string } };
}

/** The runtime's name: `"node"`, `"deno"` or `"bun"` (the compiled binary is `"bun"`). */
export type RuntimeName = "node" | "deno" | "bun";

/** Which runtime this is, from its own globals (not from the user agent, which can be changed). */
export function runtimeName(): RuntimeName {
  const g = globalThis as RuntimeGlobals;
  if (typeof g.Deno?.version?.deno === "string") return "deno";
  if (typeof g.Bun?.version === "string") return "bun";
  return "node";
}

/**
 * True inside an executable made by `bun build --compile`: its entry module lives in Bun's
 * embedded file system, whose paths start with `/$bunfs/` (`B:/~BUN/` on Windows).
 */
export function isStandaloneBinary(): boolean {
  const main = (globalThis as RuntimeGlobals).Bun?.main ?? "";
  return main.startsWith("/$bunfs/") || main.includes("~BUN");
}

/** `"node 20.20.2"`, `"deno 2.9.6"`, `"bun 1.4.5"` or `"bun 1.4.5, standalone binary"`. */
export function runtimeDescription(): string {
  const g = globalThis as RuntimeGlobals;
  switch (runtimeName()) {
    case "deno":
      return `deno ${g.Deno!.version!.deno}`;
    case "bun":
      return `bun ${g.Bun!.version}${isStandaloneBinary() ? ", standalone binary" : ""}`;
    case "node":
      return `node ${g.process?.versions?.node ?? "unknown"}`;
  }
}

/**
 * The process's soft limit on open descriptors (`ulimit -n`, `LimitNOFILE`), read from
 * `/proc/self/limits` (Linux, every runtime); null where that file is not there or not readable
 * (macOS, a sandbox) or the limit is "unlimited".
 */
export async function openFilesSoftLimit(): Promise<number | null> {
  try {
    const { readFile } = await import("node:fs/promises");
    const text = await readFile("/proc/self/limits", "utf8");
    const match = /^Max open files\s+(\d+)\s/m.exec(text);
    return match === null ? null : Number(match[1]);
  } catch {
    return null;
  }
}
