/**
 * An etcd member that sends its answer's headers and then stalls (a SIGSTOPped member behind a
 * proxy, a wedged gateway) must cost a request `requestTimeoutMs`, not forever, even after garbage
 * collections: fetch holds its signal weakly, and an `AbortSignal.timeout` collected before it
 * fired left the request hanging (the same defect test/integration/cold-s3-stall.test.ts shows for
 * the cold tier; `src/runtime/deadline.ts`).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import {
  collectGarbageEvery,
  type StallingServer,
  startStallingServer,
} from "../helpers/stalling-server.ts";

let server: StallingServer;

beforeAll(async () => {
  server = await startStallingServer("application/json", "{");
});

afterAll(() => server.close());

describe("EtcdHttpClient against a body that stalls", () => {
  it("gives up after its request timeout, garbage collections or not", async () => {
    // 1.5 s, not less: on a loaded machine the connection itself can take a few hundred ms, and
    // the request must reach the server (and stall there) for the test to mean anything.
    const etcd = new EtcdHttpClient([server.url], { requestTimeoutMs: 1500 });
    const stopCollecting = collectGarbageEvery(50);
    const started = Date.now();
    try {
      const outcome = await Promise.race([
        etcd.get("/es-broker/cluster_id").then(
          () => "served",
          (e: Error) => e.message,
        ),
        new Promise<string>((r) => setTimeout(() => r("still waiting after 8 s"), 8_000)),
      ]);
      expect(outcome).toMatch(/no answer within 1500 ms/);
    } finally {
      stopCollecting();
      await etcd.close?.();
    }
    expect(server.requests()).toBe(1);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
