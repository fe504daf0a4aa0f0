/**
 * Messages, `--help`, OpenAPI descriptions and console labels write a minus as ASCII "-": a user
 * pastes `-1` from them into JSON or a shell, where U+2212 ("−") is refused (newuser12 item 14).
 * Comments may use U+2212; string literals in src/ may not.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = resolve("src");

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

/** The text of `source` with comments blanked out (a string holding "//" or "/*" is rare here). */
function withoutComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

describe("user-visible text", () => {
  it("uses an ASCII minus, not U+2212, in every string literal of src/", () => {
    const found: string[] = [];
    for (const path of sources(root)) {
      const code = withoutComments(readFileSync(path, "utf8"));
      code.split("\n").forEach((line, i) => {
        // In a string literal, or a generated bundle's "\u2212".
        if (/["'`][^"'`]*\u2212|\\u2212/.test(line))
          found.push(`${relative(root, path)}: ${line.trim().slice(0, 100)} (${i})`);
      });
    }
    expect(found).toEqual([]);
  });
});
