/**
 * `Broker.produceTo` (produce answered through a sink, docs/benchmarks.md "Small requests (issue
 * #22)") on the local broker, behind access control and behind a front door's counting view:
 * each outcome reaches the sink once, as `produce` would have answered it.
 */
import { describe, expect, it } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { produceVia } from "../../src/broker/produce-sink.ts";
import type { Broker, ProduceResult, ProduceSink } from "../../src/broker/types.ts";
import { AccessControl } from "../../src/auth/access.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { MetricsRegistry } from "../../src/lib/metrics.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { StorageError } from "../../src/storage/errors.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { FrontDoorMetrics } from "../../src/transport/metered-broker.ts";
import { openTestBroker } from "../helpers/broker.ts";

function batch(count: number) {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) b.add(null, utf8(`value-${i}`));
  return b.build();
}

/** A sink that records every call (a second call would show as a second entry). */
function recordingSink() {
  const heard: unknown[] = [];
  let settle!: () => void;
  const answered = new Promise<void>((r) => (settle = r));
  const sink: ProduceSink = {
    appended(partition, baseOffset, count) {
      heard.push({ appended: { partition, baseOffset, count } });
      settle();
    },
    produced(result: ProduceResult) {
      heard.push({ produced: result });
      settle();
    },
    failed(err) {
      heard.push({ failed: err instanceof BrokerError ? err.kind.code : String(err) });
      settle();
    },
  };
  return { sink, heard, answered };
}

describe("Broker.produceTo", () => {
  it("the local broker: one partition as `appended`, several as `produced`, a refusal as `failed`", async () => {
    const { broker } = await openTestBroker({ clock: systemClock });
    await broker.createTopic({ name: "o", partitions: 3 });
    await broker.produce({ topic: "o", partition: 1, batch: batch(2) });

    const one = recordingSink();
    broker.produceTo({ topic: "o", partition: 1, batch: batch(3) }, one.sink);
    await one.answered;
    expect(one.heard).toEqual([{ appended: { partition: 1, baseOffset: 2, count: 3 } }]);

    const several = recordingSink();
    broker.produceTo(
      { topic: "o", batch: batch(2), partitions: Int32Array.of(0, 2) },
      several.sink,
    );
    await several.answered;
    expect(several.heard).toEqual([
      {
        produced: {
          spans: [
            { partition: 0, baseOffset: 0, count: 1 },
            { partition: 2, baseOffset: 0, count: 1 },
          ],
        },
      },
    ]);

    // Refused before anything is written: answered before produceTo returns.
    const missing = recordingSink();
    broker.produceTo({ topic: "nope", batch: batch(1) }, missing.sink);
    expect(missing.heard).toEqual([{ failed: Errors.topicNotFound.code }]);
    const badPartition = recordingSink();
    broker.produceTo({ topic: "o", partition: 9, batch: batch(1) }, badPartition.sink);
    expect(badPartition.heard).toEqual([{ failed: Errors.partitionNotFound.code }]);

    const read = await broker.fetch({ topic: "o", partition: 1, offset: 0 });
    expect(read.records.count).toBe(5);
  });

  it("behind access control and a counting view, as `produce` answers and counts it", async () => {
    const { broker } = await openTestBroker({ clock: systemClock });
    await broker.createTopic({ name: "o", partitions: 1 });
    const logger = new MemoryLogger();
    const access = new AccessControl({ broker, keys: null, logger });
    const metrics = new MetricsRegistry({ nowSeconds: () => performance.now() / 1000 });
    const door = new FrontDoorMetrics(metrics, "tcp");
    const view = door.wrap(access.brokerFor(access.authenticate(undefined, "127.0.0.1", "tcp")));
    const ok = recordingSink();
    produceVia(view, { topic: "o", partition: 0, batch: batch(4) }, ok.sink);
    await ok.answered;
    expect(ok.heard).toEqual([{ appended: { partition: 0, baseOffset: 0, count: 4 } }]);
    const missing = recordingSink();
    produceVia(view, { topic: "nope", batch: batch(1) }, missing.sink);
    expect(missing.heard).toEqual([{ failed: Errors.topicNotFound.code }]);
    const value = (name: Parameters<MetricsRegistry["read"]>[0]) =>
      metrics.read(name).map((s) => [s.labels, s.count ?? s.value]);
    expect(value("esb_produce_records_total")).toEqual([[{ topic: "o", transport: "tcp" }, 4]]);
    expect(value("esb_produce_requests_total")).toEqual([[{ topic: "o", transport: "tcp" }, 1]]);
    expect(value("esb_request_errors_total")).toEqual([
      [{ transport: "tcp", operation: "produce", code: Errors.topicNotFound.code }, 1],
    ]);
    expect(value("esb_produce_duration_seconds")).toEqual([[{ transport: "tcp" }, 2]]);
  });

  it("the counting view maps a storage error before counting and passing it on", async () => {
    // A broker whose partition answers the sink with the storage layer's own error.
    const inner = {
      produce: () => Promise.reject(new Error("not called")),
      produceTo: (_request: unknown, sink: ProduceSink) =>
        sink.failed(new StorageError("fenced", "Cannot append: partition t/0 is fenced")),
    } as unknown as Broker;
    const metrics = new MetricsRegistry({ nowSeconds: () => performance.now() / 1000 });
    const view = new FrontDoorMetrics(metrics, "tcp").wrap(inner);
    const s = recordingSink();
    produceVia(view, { topic: "t", partition: 0, batch: batch(1) }, s.sink);
    expect(s.heard).toEqual([{ failed: Errors.partitionFenced.code }]);
    expect(metrics.read("esb_request_errors_total").map((r) => [r.labels.code, r.value])).toEqual([
      [Errors.partitionFenced.code, 1],
    ]);
  });

  it("a broker without produceTo is answered through its promise", async () => {
    const inner = {
      produce: () => Promise.resolve({ spans: [{ partition: 0, baseOffset: 7, count: 1 }] }),
    } as unknown as Broker;
    const s = recordingSink();
    produceVia(inner, { topic: "t", batch: batch(1) }, s.sink);
    await s.answered;
    expect(s.heard).toEqual([{ produced: { spans: [{ partition: 0, baseOffset: 7, count: 1 }] } }]);
    const throwing = {
      produce: () => {
        throw new BrokerError(Errors.unavailable, "down");
      },
    } as unknown as Broker;
    const t = recordingSink();
    produceVia(throwing, { topic: "t", batch: batch(1) }, t.sink);
    expect(t.heard).toEqual([{ failed: Errors.unavailable.code }]);
  });
});
