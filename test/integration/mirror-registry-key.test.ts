/**
 * The mirror's client of the upstream schema registry (`src/cli/mirror-registry.ts`) sends the key
 * it is given at each request, so a key SIGHUP re-read from `--mirror-api-key-file` reaches the
 * registry requests too, not only the mirror's TCP connections (docs/edge.md "Schema ids
 * upstream"). A real HTTP server on loopback records what each request carried.
 */
import * as http from "node:http";
import { afterEach, expect, it } from "vitest";
import { upstreamRegistry } from "../../src/cli/mirror-registry.ts";

let server: http.Server | null = null;
afterEach(async () => {
  await new Promise<void>((resolve) =>
    server === null ? resolve() : server.close(() => resolve()),
  );
  server = null;
});

it("sends the key current at each request as its bearer, and none when there is none", async () => {
  const seen: (string | undefined)[] = [];
  server = http.createServer((req, res) => {
    seen.push(req.headers.authorization);
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/vnd.schemaregistry.v1+json" });
      res.end(JSON.stringify({ id: 7 }));
    });
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  let key: string | undefined = "first.secret";
  const registry = upstreamRegistry(
    new URL(`http://127.0.0.1:${port}/registry`),
    () => key,
    undefined,
    5_000,
  );
  await registry.post("/subjects/s-value", { schema: "{}" });
  key = "rotated.secret";
  await registry.post("/subjects/s-value", { schema: "{}" });
  key = undefined;
  await registry.post("/subjects/s-value", { schema: "{}" });
  expect(seen).toEqual(["Bearer first.secret", "Bearer rotated.secret", undefined]);
});
