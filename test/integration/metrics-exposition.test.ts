/**
 * `GET /metrics` against a real broker on disk, checked by Prometheus's own `promtool check
 * metrics` (docs/operations.md "Metrics", "Cardinality"): hostile label values, parallel
 * scrapes while producing, series of deleted topics and groups, and the relations between values
 * (lag ≥ 0, high watermark ≥ committed offset, counters that never go down).
 */
import { beforeAll, describe, expect, it } from "vitest";
import { renderMetrics, type MetricsSources } from "../../src/transport/http/prometheus.ts";
import { MetricsRegistry } from "../../src/lib/metrics.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { FrontDoorMetrics } from "../../src/transport/metered-broker.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import type { BrokerObservation, LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  ensureDebianTool,
  installHookTimeoutMs,
  promtool,
  promtoolCheckMetrics,
} from "../helpers/system-tools.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { AccessControl } from "../../src/auth/access.ts";
import { ClientError, TcpClient } from "../../src/client/client.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";

beforeAll(() => ensureDebianTool(promtool), installHookTimeoutMs);

function batch(count: number, key: string | null = null) {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) b.add(key === null ? null : utf8(key), utf8(`value-${i}`));
  return b.build();
}

async function realBroker() {
  const { dir } = tempDir();
  const registry = new MetricsRegistry({ nowSeconds: () => performance.now() / 1000 });
  const { broker } = await openTestBroker({
    fs: new NodeFileSystem(),
    dataDir: dir,
    clock: systemClock,
    cleanupIntervalMs: 0,
    metrics: registry,
  });
  const sources: MetricsSources = {
    registry,
    observe: () => broker.observe(),
    refusals: () => ({ "auth.failed": 2 }),
    connections: () => ({ http: 3, tcp: 1, metrics: null }),
    process: () => ({
      residentMemoryBytes: 1,
      heapUsedBytes: 1,
      heapTotalBytes: 1,
      externalMemoryBytes: 1,
      cpuSeconds: 0.5,
      startTimeSeconds: 1_700_000_000.25,
      uptimeSeconds: 3,
    }),
    build: { version: "0.1.0", runtime: "node 20" },
  };
  return { broker, registry, sources, door: new FrontDoorMetrics(registry, "tcp") };
}

/** Series of an exposition: `name{labels}` → value. Fails on a duplicate series or a family with two HELP lines. */
function parse(text: string): Map<string, number> {
  const series = new Map<string, number>();
  const helps = new Set<string>();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("# HELP ")) {
      const name = line.split(" ")[2];
      expect(helps.has(name), `two HELP lines for ${name}`).toBe(false);
      helps.add(name);
      continue;
    }
    if (line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    const key = line.slice(0, at);
    expect(series.has(key), `duplicate series ${key}`).toBe(false);
    series.set(key, Number(line.slice(at + 1)));
  }
  return series;
}

function expectPromtoolClean(text: string): void {
  const check = promtoolCheckMetrics(text);
  expect(check.output).toBe("");
  expect(check.status).toBe(0);
}

describe("GET /metrics exposition (promtool)", () => {
  it("shows partitions, produce and fetch counts, fsyncs and consumer lag of a real broker", async () => {
    const { broker, sources, door } = await realBroker();
    const b = door.wrap(broker as LocalBroker);
    await b.createTopic({ name: "orders", partitions: 2 });
    await b.produce({ topic: "orders", partition: 0, batch: batch(5) });
    await b.produce({ topic: "orders", partition: 1, batch: batch(2) });
    await b.fetch({ topic: "orders", partition: 0, offset: 0 });
    await expect(b.produce({ topic: "missing", batch: batch(1) })).rejects.toBeInstanceOf(
      BrokerError,
    );
    await b.commitOffsets({
      group: "billing",
      offsets: [{ topic: "orders", partition: 0, offset: 2 }],
    });
    // Every broker call is counted, producer epochs (docs/decisions.md §20) too.
    expect((await b.initProducerEpoch!({ producerId: "svc" })).epoch).toBeGreaterThan(0);
    await expect(b.initProducerEpoch!({ producerId: "no spaces" })).rejects.toBeInstanceOf(
      BrokerError,
    );
    const text = await renderMetrics(sources);
    expectPromtoolClean(text);
    const s = parse(text);
    expect(s.get('esb_partition_high_watermark{topic="orders",partition="0"}')).toBe(5);
    expect(s.get('esb_partition_high_watermark{topic="orders",partition="1"}')).toBe(2);
    expect(
      s.get('esb_consumer_group_lag_records{group="billing",topic="orders",partition="0"}'),
    ).toBe(3);
    expect(
      s.get('esb_consumer_group_committed_offset{group="billing",topic="orders",partition="0"}'),
    ).toBe(2);
    expect(s.get('esb_produce_records_total{topic="orders",transport="tcp"}')).toBe(7);
    expect(s.get('esb_produce_requests_total{topic="orders",transport="tcp"}')).toBe(2);
    expect(s.get('esb_fetch_records_total{topic="orders",transport="tcp"}')).toBe(5);
    expect(
      s.get('esb_request_errors_total{transport="tcp",operation="produce",code="topic_not_found"}'),
    ).toBe(1);
    expect(
      s.get(
        'esb_request_errors_total{transport="tcp",operation="init_producer_epoch",code="invalid_request"}',
      ),
    ).toBe(1);
    // The refused produce named a topic that does not exist: no series carries that name.
    expect([...s.keys()].some((k) => k.includes('"missing"'))).toBe(false);
    expect(s.get("esb_storage_fsync_duration_seconds_count")).toBeGreaterThanOrEqual(2);
    expect(s.get("esb_storage_group_commit_records_sum")).toBe(7);
    expect(s.get('esb_open_connections{listener="http"}')).toBe(3);
    expect(s.get('esb_refusals_total{kind="auth.failed"}')).toBe(2);
    expect(s.get('esb_build_info{version="0.1.0",runtime="node 20"}')).toBe(1);
    expect(s.get("process_start_time_seconds")).toBe(1_700_000_000);
  });

  it("a produce over the TCP transport counts what the counting view's own produce counts", async () => {
    // The TCP transport counts a Produce in the sink of the view's `produceTo`; the
    // same calls made on the view itself (as HTTP and Kafka make them) must give equal series.
    const { broker, registry, sources, door } = await realBroker();
    const logger = new MemoryLogger();
    const transport = createTcpTransport({
      broker,
      clock: systemClock,
      logger,
      access: new AccessControl({ broker, keys: null, logger }),
      meter: (b) => door.wrap(b),
    });
    const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
      transport.handleConnection(socket),
    );
    const client = await TcpClient.connect({ host: "127.0.0.1", port: listener.port });
    const direct = new FrontDoorMetrics(registry, "kafka").wrap(broker as LocalBroker);
    try {
      await client.createTopic({ name: "orders", partitions: 1 });
      const batches = [batch(5), batch(2, "k")];
      for (const b of batches) {
        await client.produce("orders", b, { partition: 0 });
        await direct.produce({ topic: "orders", partition: 0, batch: b });
      }
      const refused = await client.produce("missing", batch(1)).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(ClientError);
      expect((refused as ClientError).code).toBe("topic_not_found");
      await expect(direct.produce({ topic: "missing", batch: batch(1) })).rejects.toBeInstanceOf(
        BrokerError,
      );
    } finally {
      await client.close();
      const stopped = listener.close();
      await transport.close({ graceMs: 1000 });
      await stopped;
    }
    const text = await renderMetrics(sources);
    expectPromtoolClean(text);
    const s = parse(text);
    const bytes = batch(5).bytes.length + batch(2, "k").bytes.length;
    expect(s.get('esb_produce_requests_total{topic="orders",transport="tcp"}')).toBe(2);
    expect(s.get('esb_produce_records_total{topic="orders",transport="tcp"}')).toBe(7);
    expect(s.get('esb_produce_bytes_total{topic="orders",transport="tcp"}')).toBe(bytes);
    expect(
      s.get('esb_request_errors_total{transport="tcp",operation="produce",code="topic_not_found"}'),
    ).toBe(1);
    const tcp = [...s].filter(([k]) => k.includes('transport="tcp"'));
    const kafka = [...s].filter(([k]) => k.includes('transport="kafka"'));
    // Every series the TCP produces made has its twin from the view's own produce, with the same
    // value (durations: the same observation count; their sums and buckets follow the clock).
    const twins = (series: [string, number][]) =>
      series
        .filter(([k]) => !/_seconds_(sum|bucket)\{/.test(k))
        .map(([k, v]) => [k.replace('transport="kafka"', 'transport="tcp"'), v] as const)
        .sort(([a], [b]) => a.localeCompare(b));
    expect(twins(kafka)).toEqual(twins(tcp));
    expect(s.get('esb_produce_duration_seconds_count{transport="tcp"}')).toBe(3);
  });

  it("stays parseable whatever the names: quotes, backslashes, newlines, U+2028, braces, 1000 characters, emoji", async () => {
    const hostile = [
      'a"b',
      "back\\slash",
      "new\nline",
      "\u2028sep",
      "{}=,",
      "x".repeat(1000),
      "😀",
      "",
    ];
    const { registry } = await realBroker();
    const observation: BrokerObservation = {
      groups: hostile.map((group, i) => ({
        group,
        generation: 1,
        members: [],
        offsets: [
          {
            topic: hostile[(i + 1) % hostile.length],
            partition: 0,
            committed: 1,
            highWatermark: 3,
            lag: 2,
            owner: null,
          },
        ],
      })),
      partitions: hostile.map((topic) => ({
        topic,
        partition: 0,
        logStartOffset: 0,
        highWatermark: 3,
        logEndOffset: 3,
        sizeBytes: 10,
        segments: 1,
        fenced: false,
        corruptSegments: 0,
        strayFiles: 0,
        fsyncs: 1,
        cold: null,
        cleanupStopped: false,
      })),
      unavailableTopics: 0,
      unavailableGroups: 0,
    };
    for (const topic of hostile)
      registry.counter("esb_produce_records_total", { topic, transport: "http" }).inc(1);
    const text = await renderMetrics({
      registry,
      observe: async () => observation,
      refusals: () => ({ 'odd"kind\n': 1 }),
      build: { version: '1"\\\n', runtime: "\u2028" },
    });
    expectPromtoolClean(text);
    const s = parse(text);
    expect(s.get('esb_partition_high_watermark{topic="a\\"b",partition="0"}')).toBe(3);
    expect(s.get('esb_partition_high_watermark{topic="new\\nline",partition="0"}')).toBe(3);
    expect(s.get('esb_produce_records_total{topic="back\\\\slash",transport="http"}')).toBe(1);
  });

  it("twenty scrapes in parallel while producing are each clean, with no duplicate series", async () => {
    const { broker, sources, door } = await realBroker();
    const b = door.wrap(broker as LocalBroker);
    for (const name of ["t1", "t2", "t3"]) await b.createTopic({ name, partitions: 3 });
    let producing = true;
    const producers = ["t1", "t2", "t3"].map(async (topic) => {
      while (producing) await b.produce({ topic, batch: batch(3, "k") });
    });
    const texts = await Promise.all(Array.from({ length: 20 }, () => renderMetrics(sources)));
    producing = false;
    await Promise.all(producers);
    for (const text of texts) {
      expectPromtoolClean(text);
      parse(text);
    }
  });

  it("series of deleted topics and groups are gone by the next scrape, and the count returns to its baseline", async () => {
    const { broker, sources, door, registry } = await realBroker();
    const b = door.wrap(broker as LocalBroker);
    await b.createTopic({ name: "stays", partitions: 1 });
    await b.produce({ topic: "stays", batch: batch(1) });
    const baseline = parse(await renderMetrics(sources)).size;
    const rounds = 300;
    for (let i = 0; i < rounds; i++) {
      const name = `churn-${i}`;
      await b.createTopic({ name, partitions: 2 });
      await b.produce({ topic: name, partition: 1, batch: batch(2) });
      await b.fetch({ topic: name, partition: 1, offset: 0 });
      await b.commitOffsets({
        group: `group-${i}`,
        offsets: [{ topic: name, partition: 1, offset: 1 }],
      });
      if (i % 50 === 0) {
        const during = parse(await renderMetrics(sources));
        expect(
          during.get(
            `esb_consumer_group_lag_records{group="group-${i}",topic="${name}",partition="1"}`,
          ),
        ).toBe(1);
      }
      await b.deleteTopic(name);
    }
    const after = parse(await renderMetrics(sources));
    expect([...after.keys()].filter((k) => k.includes("churn-"))).toEqual([]);
    // A group whose only topic was deleted, with no members, goes with it: no series at all.
    expect([...after.keys()].filter((k) => k.includes("group-"))).toEqual([]);
    expect(after.size).toBe(baseline);
    expect((await b.listGroups()).map((g) => g.group)).toEqual([]);
    expect(registry.read("esb_produce_records_total")).toHaveLength(1);
    // scripts/metrics-churn.mjs runs this at 5,000 rounds against the real process, with RSS.
  });

  it("exports the data directory's free and total bytes (statfs) and whether the disk reserve is given up", async () => {
    const { sources } = await realBroker();
    const s = parse(await renderMetrics(sources));
    const free = s.get("esb_data_dir_free_bytes")!;
    const total = s.get("esb_data_dir_total_bytes")!;
    expect(total).toBeGreaterThan(0);
    expect(free).toBeGreaterThan(0);
    expect(free).toBeLessThanOrEqual(total);
    expect(s.get("esb_disk_reserve_given_up")).toBe(0);
  });

  it("keeps lag ≥ 0, high watermark ≥ committed offset and counters non-decreasing while a group consumes", async () => {
    const { broker, sources, door } = await realBroker();
    const b = door.wrap(broker as LocalBroker);
    await b.createTopic({ name: "stream", partitions: 2 });
    let producing = true;
    const producer = (async () => {
      while (producing) await b.produce({ topic: "stream", batch: batch(4, "key") });
    })();
    const member = await b.joinGroup({ group: "readers", topics: ["stream"] });
    let consuming = true;
    const consumer = (async () => {
      const next = [0, 0];
      while (consuming) {
        for (const p of [0, 1]) {
          const r = await b.fetch({
            topic: "stream",
            partition: p,
            offset: next[p],
            maxRecords: 7,
          });
          next[p] = r.nextOffset;
        }
        await b.commitOffsets({
          group: "readers",
          memberId: member.memberId,
          generation: member.generation,
          offsets: [0, 1].map((partition) => ({
            topic: "stream",
            partition,
            offset: next[partition],
          })),
        });
      }
    })();
    let previous = new Map<string, number>();
    for (let scrape = 0; scrape < 25; scrape++) {
      const s = parse(await renderMetrics(sources));
      for (const p of ["0", "1"]) {
        const committed = s.get(
          `esb_consumer_group_committed_offset{group="readers",topic="stream",partition="${p}"}`,
        );
        const hw = s.get(`esb_partition_high_watermark{topic="stream",partition="${p}"}`)!;
        const lag = s.get(
          `esb_consumer_group_lag_records{group="readers",topic="stream",partition="${p}"}`,
        );
        if (committed !== undefined) {
          expect(hw).toBeGreaterThanOrEqual(committed);
          expect(lag).toBeGreaterThanOrEqual(0);
          expect(lag).toBe(hw - committed);
        }
      }
      for (const [key, value] of s)
        if (/_total\{|_total |_count|_bucket/.test(key) && previous.has(key))
          expect(value, key).toBeGreaterThanOrEqual(previous.get(key)!);
      previous = s;
      await new Promise((r) => setTimeout(r, 5));
    }
    producing = false;
    consuming = false;
    await Promise.all([producer, consumer]);
  });
});
