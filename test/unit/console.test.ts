/**
 * The web console's build and its guards (docs/console.md): the served bundle is what
 * src/console/ gives, it stays small, no console code parses markup or evaluates text, the page's
 * policy forbids inline code, and the HTTP front door refuses cross-site state changes.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { crossSiteRefusal } from "../../src/transport/http/auth.ts";
import { consoleContentSecurityPolicy } from "../../src/transport/http/console.ts";
import { consoleScript, consoleStyles } from "../../src/transport/http/console-assets.ts";

const root = new URL("../..", import.meta.url).pathname;

describe("the web console's build", () => {
  it("src/transport/http/console-assets.ts is what src/console/ gives (scripts/build-console.mjs --check)", () => {
    expect(() =>
      execFileSync(process.execPath, ["scripts/build-console.mjs", "--check"], {
        cwd: root,
        stdio: "pipe",
      }),
    ).not.toThrow();
  });

  it("stays small: under 24 KB of script and 6 KB of styles, minified", () => {
    expect(consoleScript.length).toBeLessThan(24_000);
    expect(consoleStyles.length).toBeLessThan(6_000);
  });

  it("never parses markup or evaluates text, anywhere in its sources", () => {
    const dir = join(root, "src/console");
    const sources = readdirSync(dir).filter((n) => n.endsWith(".ts"));
    expect(sources.length).toBeGreaterThanOrEqual(3);
    for (const name of sources) {
      const code = readFileSync(join(dir, name), "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
      expect(code, name).not.toMatch(
        /innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|DOMParser|createContextualFragment/,
      );
    }
    expect(consoleScript).not.toMatch(/innerHTML|insertAdjacentHTML|document\.write/);
  });

  it("its policy allows code and styles from the broker only, never inline", () => {
    expect(consoleContentSecurityPolicy).toMatch(/script-src 'self'/);
    expect(consoleContentSecurityPolicy).toMatch(/default-src 'none'/);
    expect(consoleContentSecurityPolicy).toMatch(/frame-ancestors 'none'/);
    expect(consoleContentSecurityPolicy).not.toMatch(/unsafe-|\*|data:/);
  });
});

describe("crossSiteRefusal", () => {
  const request = (method: string, headers: Record<string, string> = {}) =>
    new Request("http://127.0.0.1:8080/v1/topics", { method, headers });

  it("lets through reads, requests without Origin, and the broker's own origin", () => {
    expect(crossSiteRefusal(request("GET", { origin: "http://evil.example" }))).toBeNull();
    expect(crossSiteRefusal(request("POST"))).toBeNull();
    expect(crossSiteRefusal(request("POST", { origin: "http://127.0.0.1:8080" }))).toBeNull();
    expect(
      crossSiteRefusal(
        request("DELETE", { origin: "http://127.0.0.1:8080", "sec-fetch-site": "same-origin" }),
      ),
    ).toBeNull();
  });

  it("refuses a state change from another origin, a null origin, or marked cross-site", async () => {
    const cases: Record<string, string>[] = [
      { origin: "http://evil.example" },
      { origin: "http://127.0.0.1:9999" },
      { origin: "null" },
      { "sec-fetch-site": "cross-site" },
    ];
    for (const headers of cases) {
      const refused = crossSiteRefusal(request("POST", headers));
      expect(refused?.status, JSON.stringify(headers)).toBe(403);
      const body = (await refused!.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("forbidden");
      expect(body.error.message).toMatch(/^Cannot accept a cross-site request/);
    }
  });
});
