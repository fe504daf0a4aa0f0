/**
 * A cold-tier read whose body stalls after the headers (a slow or wedged store, field failure 43)
 * must end at `requestTimeoutMs` and be retried, even after a garbage collection: fetch holds its
 * signal weakly, and an `AbortSignal.timeout` collected before it fired left the read — and every
 * fetch of the chunk waiting on it — hanging for good (seen against moto through a stalling proxy:
 * one segment's reads hung for minutes while the store answered everything else).
 */
import { createServer, type Server } from "node:http";
import * as v8 from "node:v8";
import * as vm from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { S3ColdStore } from "../../src/runtime/s3-cold-store.ts";

let server: Server;
let endpoint = "";
let requests = 0;

beforeAll(async () => {
  // Every GET answers 200 with 64 bytes announced, sends one, and never the rest.
  server = createServer((req, res) => {
    requests++;
    req.resume();
    res.writeHead(200, { "content-length": "64", "content-type": "application/octet-stream" });
    res.write("x");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

describe("S3ColdStore against a body that stalls", () => {
  it("times out and retries every attempt, garbage collections or not", async () => {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc") as () => void;
    const store = new S3ColdStore({
      location: { bucket: "cold", prefix: "" },
      credentials: { accessKeyId: "a", secretAccessKey: "b" },
      endpoint,
      logger: new MemoryLogger(),
      attempts: 2,
      retryBackoffMs: 10,
      retryBackoffMaxMs: 10,
      requestTimeoutMs: 400,
    });
    const collect = setInterval(gc, 50);
    const started = Date.now();
    try {
      const outcome = await Promise.race([
        store.get("topics/t/0/00000000000000000000.log", { start: 0, end: 64 }).then(
          () => "served",
          (e: Error) => e.message,
        ),
        new Promise<string>((r) => setTimeout(() => r("still waiting after 5 s"), 5_000)),
      ]);
      expect(outcome).toMatch(/Timeout: no answer within 400 ms \(after 2 tries\)/);
    } finally {
      clearInterval(collect);
    }
    expect(requests).toBeGreaterThanOrEqual(1);
    expect(Date.now() - started).toBeLessThan(3_000);
  });
});
