/**
 * Many Server-Sent Event streams tailing one partition (issue #22; docs/http-api.md, "Many readers
 * of one partition"): streams at the same offset share one storage read (`broker/tail.ts`) and
 * one encoding into SSE text (`transport/http/sse.ts`) of each new batch, rather than one each.
 */
import { describe, expect, it, vi } from "vitest";
import { utf8 } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { PartitionLog } from "../../src/storage/partition.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";

/** Counts the `event: record` blocks of an event stream as they arrive. */
function countEvents(body: ReadableStream<Uint8Array>): { count: () => number } {
  let events = 0;
  let carry = "";
  const decoder = new TextDecoder();
  void (async () => {
    const reader = body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        const text = carry + decoder.decode(value, { stream: true });
        const last = text.lastIndexOf("\n");
        for (const line of text.slice(0, last + 1).split("\n"))
          if (line === "event: record") events++;
        carry = text.slice(last + 1);
      }
    } catch {
      // The stream was aborted at the end of the test.
    }
  })();
  return { count: () => events };
}

describe("SSE fan-out", () => {
  it("100 streams at one offset: each batch is read from storage once and encoded once, not once a stream", async () => {
    const { broker } = await openTestBroker({ clock: realClock, cleanupIntervalMs: 0 });
    const app = createHttpApp({ broker, logger: new MemoryLogger(), sseHeartbeatMs: 60_000 });
    await broker.createTopic({ name: "t", partitions: 1 });
    const streams = 100;
    const batches = 10;
    const recordsPerBatch = 5;
    const abort = new AbortController();
    const counters = await Promise.all(
      Array.from({ length: streams }, async () => {
        const res = await app.request("/v1/topics/t/partitions/0/stream?offset=0", {
          signal: abort.signal,
        });
        expect(res.status).toBe(200);
        return countEvents(res.body!);
      }),
    );
    const reads = vi.spyOn(PartitionLog.prototype, "read");
    const stringify = vi.spyOn(JSON, "stringify");
    try {
      for (let b = 0; b < batches; b++) {
        const batch = new EntryBatchBuilder();
        for (let r = 0; r < recordsPerBatch; r++) batch.add(null, utf8(`batch ${b} record ${r}`));
        await broker.produce({ topic: "t", partition: 0, batch: batch.build() });
        const expected = (b + 1) * recordsPerBatch;
        await vi.waitFor(
          () => {
            for (const c of counters) expect(c.count()).toBe(expected);
          },
          { timeout: 10_000, interval: 2 },
        );
      }
      // Encoded records: JSON.stringify of one record's event data (`{"offset":…,"value":…}`).
      const encodings = stringify.mock.calls.filter(
        ([value]) => typeof value === "object" && value !== null && "offset" in value,
      ).length;
      // One read and one encoding of each batch, with room for a stream that came back late and
      // read on its own; one a stream would be `streams` times that.
      expect(reads.mock.calls.length).toBeGreaterThanOrEqual(batches);
      expect(reads.mock.calls.length).toBeLessThanOrEqual(batches * 2);
      expect(encodings).toBeGreaterThanOrEqual(batches * recordsPerBatch);
      expect(encodings).toBeLessThanOrEqual(batches * recordsPerBatch * 2);
    } finally {
      reads.mockRestore();
      stringify.mockRestore();
      abort.abort();
    }
  });
});
