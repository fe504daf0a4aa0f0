/**
 * A cold-tier read whose body stalls after the headers (a slow or wedged store, field failure 43)
 * must end at `requestTimeoutMs` and be retried, even after a garbage collection: fetch holds its
 * signal weakly, and an `AbortSignal.timeout` collected before it fired left the read — and every
 * fetch of the chunk waiting on it — hanging for good (seen against moto through a stalling proxy:
 * one segment's reads hung for minutes while the store answered everything else).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { S3ColdStore } from "../../src/runtime/s3-cold-store.ts";
import {
  collectGarbageEvery,
  type StallingServer,
  startStallingServer,
} from "../helpers/stalling-server.ts";

let server: StallingServer;

beforeAll(async () => {
  server = await startStallingServer("application/octet-stream", "x");
});

afterAll(() => server.close());

describe("S3ColdStore against a body that stalls", () => {
  it("times out and retries every attempt, garbage collections or not", async () => {
    const store = new S3ColdStore({
      location: { bucket: "cold", prefix: "" },
      credentials: { accessKeyId: "a", secretAccessKey: "b" },
      endpoint: server.url,
      logger: new MemoryLogger(),
      attempts: 2,
      retryBackoffMs: 10,
      retryBackoffMaxMs: 10,
      requestTimeoutMs: 1_000,
    });
    const stopCollecting = collectGarbageEvery(50);
    const started = Date.now();
    try {
      const outcome = await Promise.race([
        store.get("topics/t/0/00000000000000000000.log", { start: 0, end: 64 }).then(
          () => "served",
          (e: Error) => e.message,
        ),
        new Promise<string>((r) => setTimeout(() => r("still waiting after 8 s"), 8_000)),
      ]);
      expect(outcome).toMatch(/Timeout: no answer within 1000 ms \(after 2 tries\)/);
    } finally {
      stopCollecting();
    }
    expect(server.requests()).toBeGreaterThanOrEqual(1);
    // Two tries of 1 s and a backoff of 10 ms: well under the 8 s that would mean a hang.
    expect(Date.now() - started).toBeLessThan(6_000);
  });
});
