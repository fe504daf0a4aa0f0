/** Which runtime is running us, for `--version` and the start-up line. */

/** `"node 20.20.2"`, `"deno 2.9.6"` or `"bun 1.4.5"`. */
export function runtimeDescription(): string {
  const g = globalThis as { Deno?: { version?: { deno?: string } }; Bun?: { version?: string }; process?: { versions?: { node?: string } } };
  if (g.Deno?.version?.deno) return `deno ${g.Deno.version.deno}`;
  if (g.Bun?.version) return `bun ${g.Bun.version}`;
  return `node ${g.process?.versions?.node ?? "unknown"}`;
}
