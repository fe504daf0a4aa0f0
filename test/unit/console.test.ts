/**
 * The web console's build and its guards (docs/console.md): the served bundle is what
 * src/console/ gives, it stays small, no console code parses markup or evaluates text, the page's
 * policy forbids inline code, and the HTTP front door refuses cross-site state changes.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
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

describe("the console's groups view in a cluster (src/console/api.ts)", () => {
  // Groups are the controller's: another broker answers GET /v1/groups with a 307 to it.
  it("does not follow the 307 of a group read; finds the controller's console instead", async () => {
    const { createServer } = await import("node:http");
    const apiModule = "../../src/console/api.ts";
    const { call, coordinatorGroups, ApiError } = (await import(apiModule)) as {
      call: (method: string, path: string) => Promise<unknown>;
      coordinatorGroups: () => Promise<unknown>;
      ApiError: new (...args: never[]) => Error;
    };
    vi.stubGlobal("sessionStorage", { getItem: () => null, setItem() {}, removeItem() {} });
    const listen = (handler: Parameters<typeof createServer>[1]) =>
      new Promise<{ url: string; close: () => void; hits: () => number }>((resolve) => {
        let hits = 0;
        const server = createServer((req, res) => {
          hits++;
          handler?.(req, res);
        });
        server.listen(0, "127.0.0.1", () => {
          const port = (server.address() as { port: number }).port;
          resolve({
            url: `http://127.0.0.1:${port}`,
            close: () => server.close(),
            hits: () => hits,
          });
        });
      });
    const controller = await listen((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ groups: [] }));
    });
    const other = await listen((req, res) => {
      if (req.url?.startsWith("/v1/cluster")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({ controller: 3, brokers: [{ node_id: 3, http: `${controller.url}/` }] }),
        );
        return;
      }
      res.writeHead(307, { location: `${controller.url}${req.url}` });
      res.end(JSON.stringify({ error: { code: "not_leader", message: "node 3 coordinates" } }));
    });
    const pageFetch = globalThis.fetch;
    vi.stubGlobal("fetch", (path: string, init?: RequestInit) =>
      pageFetch(new URL(path, other.url), init),
    );
    try {
      const failed = await call("GET", "/v1/groups").catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(ApiError);
      expect(failed).toMatchObject({ status: 307 });
      expect(controller.hits()).toBe(0);
      expect(await coordinatorGroups()).toEqual({
        node: 3,
        url: `${controller.url}/console#/groups`,
      });
    } finally {
      vi.unstubAllGlobals();
      controller.close();
      other.close();
    }
  });
});

describe("the console's live tail in a cluster (src/console/api.ts)", () => {
  // A broker that does not lead the partition (307 to another origin), and the leader; real
  // sockets. The console runs in a page whose policy forbids following the redirect.
  it("does not follow a 307 to another broker; finds the leader's console instead", async () => {
    const { createServer } = await import("node:http");
    // A path the compiler does not follow: src/console/ is typed against the DOM (its own tsconfig).
    const apiModule = "../../src/console/api.ts";
    const { tail, leaderTail, ApiError } = (await import(apiModule)) as {
      tail: (path: string, onRecord: (r: unknown) => void, signal: AbortSignal) => Promise<void>;
      leaderTail: (topic: string, partition: number) => Promise<unknown>;
      ApiError: new (...args: never[]) => Error;
    };
    const keys = new Map<string, string>();
    vi.stubGlobal("sessionStorage", {
      getItem: (k: string) => keys.get(k) ?? null,
      setItem: (k: string, v: string) => keys.set(k, v),
      removeItem: (k: string) => keys.delete(k),
    });
    const listen = (handler: Parameters<typeof createServer>[1]) =>
      new Promise<{ url: string; close: () => void }>((resolve) => {
        const server = createServer(handler);
        server.listen(0, "127.0.0.1", () => {
          const port = (server.address() as { port: number }).port;
          resolve({ url: `http://127.0.0.1:${port}`, close: () => server.close() });
        });
      });
    const leader = await listen((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(
        `event: record\ndata: ${JSON.stringify({ offset: 0, timestamp: 0, key: null, value: "x" })}\n\n`,
      );
    });
    const follower = await listen((req, res) => {
      if (req.url?.startsWith("/v1/cluster")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            brokers: [{ node_id: 2, http: leader.url }],
            topics: [{ name: "t/x", partitions: [{ partition: 1, leader: 2 }] }],
          }),
        );
        return;
      }
      res.writeHead(307, { location: `${leader.url}${req.url}?redirected=1` });
      res.end(JSON.stringify({ error: { code: "not_leader", message: "node 2 leads it" } }));
    });
    // The page's fetch resolves relative paths against its own broker.
    const pageFetch = globalThis.fetch;
    vi.stubGlobal("fetch", (path: string, init?: RequestInit) =>
      pageFetch(new URL(path, follower.url), init),
    );
    try {
      const seen: unknown[] = [];
      const failed = await tail(
        "/v1/topics/t/partitions/1/stream?offset=latest",
        (r) => seen.push(r),
        new AbortController().signal,
      ).catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(ApiError);
      expect(failed).toMatchObject({ status: 307, code: "not_leader" });
      expect(seen).toEqual([]);
      expect(await leaderTail("t/x", 1)).toEqual({
        node: 2,
        url: `${leader.url}/console#/tail/t%2Fx/1`,
      });
    } finally {
      vi.unstubAllGlobals();
      leader.close();
      follower.close();
    }
  });
});
