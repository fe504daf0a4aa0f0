/**
 * Keeps docs/http-api.md true: its account of the SSE stream's ending to `transport/http/sse.ts`
 * and `cli/serve.ts`, and the keys it lists for `GET /v1/admin/metrics` to the route's answer.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { realClock } from "../helpers/clock.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { RefusalLog } from "../../src/lib/refusals.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";

const doc = readFileSync(new URL("../../docs/http-api.md", import.meta.url), "utf8");

/** The bullets of the stream section (each starting "- "), from its heading to the next example. */
function streamBullets(): string[] {
  const start = doc.indexOf("/stream");
  expect(start).toBeGreaterThanOrEqual(0);
  const section = doc.slice(start, doc.indexOf("```sh", doc.indexOf("Last-Event-ID: N", start)));
  return section.split(/\n(?=- )/).filter((b) => b.startsWith("- "));
}

describe("docs/http-api.md on the end of an SSE stream", () => {
  it("says a server shutdown ends it cleanly, and does not list shutdown among the causes of an error event", () => {
    const bullets = streamBullets();
    const errorEvent = bullets.filter((b) => b.includes("`event: error` is sent"));
    expect(errorEvent).toHaveLength(1);
    expect(errorEvent[0]).not.toMatch(/shut/);
    expect(errorEvent[0]).not.toMatch(/shutting down/);
    const clean = bullets.filter((b) => /ends cleanly/.test(b));
    expect(clean).toHaveLength(1);
    expect(clean[0]).toMatch(/no `event: error`/);
    expect(clean[0]).toMatch(/server shuts\s+down/);
  });
});

describe("docs/http-api.md on GET /v1/admin/metrics", () => {
  it("lists exactly the keys the route answers, all snake_case", async () => {
    const section = doc.slice(doc.indexOf("### `GET /v1/admin/metrics`"));
    const listed = /Answers \*\*200\*\* `\{([^}]*)\}`/.exec(section);
    expect(listed, "the key list of the metrics section").not.toBeNull();
    const documented = [...listed![1].matchAll(/"([^"]+)"/g)].map((m) => m[1]);
    const logger = new MemoryLogger();
    const { broker } = await openTestBroker({ clock: realClock, logger });
    await broker.createTopic({ name: "orders", partitions: 2 });
    const refusals = new RefusalLog({ logger, clock: realClock });
    const app = createHttpApp({ broker, logger, refusals });
    const res = await app.request("/v1/admin/metrics");
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual([...documented].sort());
    for (const key of Object.keys(body)) expect(key).toMatch(/^[a-z]+(_[a-z]+)*$/);
    expect(body.partitions).toBe(2);
  });
});
