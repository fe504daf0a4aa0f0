/** Keeps docs/http-api.md's account of the SSE stream's ending true to `transport/http/sse.ts` and `cli/serve.ts`. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

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
