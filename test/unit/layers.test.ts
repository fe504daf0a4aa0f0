/**
 * Keeps docs/architecture.md's picture true: imports point down the layers only, and only the runtime layer
 * (plus the client library and the CLI, which run in user processes) touches `node:*`, Deno or Bun.
 */
import { describe, expect, it } from "vitest";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, dirname, resolve } from "node:path";

const root = resolve("src");

/** Which layers each layer may import from (besides itself). */
const allowed: Record<string, string[]> = {
  lib: [],
  // The web console's browser code (bundled by scripts/build-console.mjs): nothing of the server.
  console: [],
  fs: ["lib"],
  storage: ["lib", "fs"],
  registry: ["lib", "fs", "storage"],
  broker: ["lib", "fs", "storage", "registry"],
  protocol: ["lib", "storage", "broker"],
  client: ["lib", "storage", "broker", "protocol"],
  auth: ["lib", "fs", "storage", "broker"],
  transport: ["lib", "storage", "broker", "registry", "protocol", "auth"],
  cluster: ["lib", "fs", "storage", "registry", "broker", "protocol", "client", "auth"],
  mirror: ["lib", "fs", "storage", "broker", "protocol", "client"],
  runtime: [
    "lib",
    "fs",
    "storage",
    "broker",
    "registry",
    "protocol",
    "client",
    "transport",
    "auth",
    "cluster",
    "mirror",
  ],
  cli: [
    "lib",
    "fs",
    "storage",
    "broker",
    "registry",
    "protocol",
    "client",
    "transport",
    "runtime",
    "auth",
    "cluster",
    "mirror",
    ".",
  ],
  ".": [
    "lib",
    "fs",
    "storage",
    "broker",
    "registry",
    "protocol",
    "client",
    "transport",
    "runtime",
    "auth",
    "cluster",
    "mirror",
    "cli",
  ],
};
const mayUseNode = new Set(["runtime", "client", "cli", "."]);
/** The only modules of lower layers that the protocol and client may use from above them. */
const pureExceptions = [
  /^broker\/errors\.ts$/,
  /^broker\/types\.ts$/,
  /^storage\/record\.ts$/,
  /^storage\/errors\.ts$/,
];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

function layerOf(path: string): string {
  const rel = relative(root, path);
  return rel.includes("/") ? rel.split("/")[0] : ".";
}

const sources = files(root);

describe("layering (docs/architecture.md)", () => {
  it("finds the source tree", () => {
    expect(sources.length).toBeGreaterThan(20);
  });

  for (const file of sources) {
    const rel = relative(root, file);
    it(`${rel} imports only what its layer may`, () => {
      const layer = layerOf(file);
      const text = readFileSync(file, "utf8");
      const specifiers = [
        ...text.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"/gms),
        ...text.matchAll(/import\(\s*"([^"]+)"\s*\)/g),
      ].map((m) => m[1]);
      for (const spec of specifiers) {
        if (spec.startsWith("node:")) {
          expect(mayUseNode.has(layer), `${rel} imports ${spec}`).toBe(true);
          continue;
        }
        if (!spec.startsWith(".")) continue; // npm packages
        const target = relative(root, resolve(dirname(file), spec));
        const targetLayer = target.includes("/") ? target.split("/")[0] : ".";
        if (targetLayer === layer) continue;
        const ok =
          allowed[layer].includes(targetLayer) &&
          (!["protocol", "client"].includes(layer) ||
            ["lib", "protocol"].includes(targetLayer) ||
            pureExceptions.some((re) => re.test(target)));
        expect(ok, `${rel} (${layer}) imports ${target} (${targetLayer})`).toBe(true);
      }
      if (!mayUseNode.has(layer)) {
        expect(
          /\bDeno\.|\bBun\./.test(text.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "")),
          `${rel} uses Deno or Bun`,
        ).toBe(false);
      }
      if (["storage", "registry", "broker", "auth", "cluster", "mirror"].includes(layer)) {
        const code = text.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
        expect(
          /Date\.now\(|Math\.random\(|setTimeout\(|setInterval\(/.test(code),
          `${rel} reads the clock or randomness directly`,
        ).toBe(false);
      }
    });
  }
});
