/**
 * An etcd member that sends its answer's headers and then stalls (a SIGSTOPped member behind a
 * proxy, a wedged gateway) must cost a request `requestTimeoutMs`, not forever, even after garbage
 * collections: fetch holds its signal weakly, and an `AbortSignal.timeout` collected before it
 * fired left the request hanging (the same defect test/integration/cold-s3-stall.test.ts shows for
 * the cold tier; `src/runtime/deadline.ts`).
 *
 * And closing the client abandons such a request at once, and a watch waiting between two tries:
 * a broker leaving while etcd has no quorum must not be held until their deadlines (attack16 F7:
 * the process stayed 3.2 s after `cluster.left`).
 */
import { createServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryLogger } from "../../src/lib/logger.ts";
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

  it("close abandons a request in flight at once: a read fails unavailable, a write indeterminate", async () => {
    const etcd = new EtcdHttpClient([server.url], { requestTimeoutMs: 30_000 });
    const before = server.requests();
    const read = etcd.get("/es-broker/cluster_id").then(
      () => null,
      (e: Error & { code?: string }) => e,
    );
    const write = etcd.put("/es-broker/x", "1").then(
      () => null,
      (e: Error & { code?: string }) => e,
    );
    const deadline = Date.now() + 10_000;
    while (server.requests() < before + 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(server.requests()).toBe(before + 2);
    const closedAt = Date.now();
    await etcd.close();
    const [r, w] = await Promise.all([read, write]);
    // Before: both waited out the 30 s request timeout.
    expect(Date.now() - closedAt).toBeLessThan(2_000);
    expect(r).toMatchObject({ code: "unavailable" });
    expect(r?.message).toMatch(/closed/);
    // The write was sent: it may have been applied.
    expect(w).toMatchObject({ code: "indeterminate" });
    expect(w?.message).toMatch(/closed/);
  });

  it("close ends a watch waiting between two tries at once", async () => {
    // A port nothing listens on: every try of the watch is refused, then it waits 5 s.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const logger = new MemoryLogger();
    const etcd = new EtcdHttpClient([`http://127.0.0.1:${port}`], {
      requestTimeoutMs: 2_000,
      watchRetryMs: 5_000,
      logger,
    });
    etcd.watch({ key: "/es-broker/", prefix: true, startRevision: 1 }, { onEvents() {} });
    const deadline = Date.now() + 5_000;
    while (logger.named("etcd.watch_broken").length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(logger.named("etcd.watch_broken")).toHaveLength(1);
    const closedAt = Date.now();
    await etcd.close();
    // Before: close waited for the rest of the 5 s pause.
    expect(Date.now() - closedAt).toBeLessThan(1_000);
  });
});
