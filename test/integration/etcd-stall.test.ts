/**
 * An etcd member that sends its answer's headers and then stalls (a SIGSTOPped member behind a
 * proxy, a wedged gateway) must cost a request `requestTimeoutMs`, not forever, even after garbage
 * collections: fetch holds its signal weakly, and an `AbortSignal.timeout` collected before it
 * fired left the request hanging (the same defect test/integration/cold-s3-stall.test.ts shows for
 * the cold tier; `src/runtime/deadline.ts`).
 */
import { createServer, type Server } from "node:http";
import * as v8 from "node:v8";
import * as vm from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";

let server: Server;
let endpoint = "";
let requests = 0;

beforeAll(async () => {
  // Every request gets 200 with 64 bytes announced, one sent, and never the rest.
  server = createServer((req, res) => {
    requests++;
    req.resume();
    res.writeHead(200, { "content-length": "64", "content-type": "application/json" });
    res.write("{");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

describe("EtcdHttpClient against a body that stalls", () => {
  it("gives up after its request timeout, garbage collections or not", async () => {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc") as () => void;
    const etcd = new EtcdHttpClient([endpoint], { requestTimeoutMs: 400 });
    const collect = setInterval(gc, 50);
    const started = Date.now();
    try {
      const outcome = await Promise.race([
        etcd.get("/es-broker/cluster_id").then(
          () => "served",
          (e: Error) => e.message,
        ),
        new Promise<string>((r) => setTimeout(() => r("still waiting after 5 s"), 5_000)),
      ]);
      expect(outcome).toMatch(/no answer within 400 ms/);
    } finally {
      clearInterval(collect);
      await etcd.close?.();
    }
    expect(requests).toBe(1);
    expect(Date.now() - started).toBeLessThan(3_000);
  });
});
