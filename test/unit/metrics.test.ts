import { describe, expect, it } from "vitest";
import { MetricsRegistry, metricFamilies, noMetrics } from "../../src/lib/metrics.ts";
import {
  escapeHelp,
  escapeLabelValue,
  ExpositionWriter,
  formatValue,
  renderMetrics,
} from "../../src/transport/http/prometheus.ts";
import type { BrokerObservation } from "../../src/broker/broker.ts";

function registry(): MetricsRegistry {
  let t = 0;
  return new MetricsRegistry({ nowSeconds: () => (t += 0.5) });
}

const emptyObservation: BrokerObservation = {
  groups: [],
  partitions: [],
  unavailableTopics: 0,
  unavailableGroups: 0,
};

/** Sample lines of an exposition, without comments. */
function samples(text: string): string[] {
  return text.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
}

describe("MetricsRegistry", () => {
  it("gives the same series for the same family and labels, and counts into it", () => {
    const r = registry();
    r.counter("esb_produce_requests_total", { topic: "a", transport: "http" }).inc();
    r.counter("esb_produce_requests_total", { transport: "http", topic: "a" }).inc(2);
    r.counter("esb_produce_requests_total", { topic: "b", transport: "http" }).inc();
    const read = r.read("esb_produce_requests_total");
    expect(read.map((s) => [s.labels.topic, s.value])).toEqual([
      ["a", 3],
      ["b", 1],
    ]);
  });

  it("never lets a counter go down", () => {
    const r = registry();
    const c = r.counter("esb_cold_copies_total");
    c.inc(5);
    c.inc(-3);
    c.inc(Number.NaN);
    expect(r.read("esb_cold_copies_total")[0].value).toBe(5);
  });

  it("refuses a series whose labels are not the family's", () => {
    const r = registry();
    expect(() => r.counter("esb_produce_requests_total", { topic: "a" })).toThrow(/takes labels/);
    expect(() =>
      r.counter("esb_produce_requests_total", { topic: "a", transport: "http", client: "x" }),
    ).toThrow(/takes labels/);
  });

  it("counts histogram observations into their bucket, with sum and count", () => {
    const r = registry();
    const h = r.histogram("esb_storage_group_commit_records");
    for (const v of [1, 1, 3, 100, 1e9]) h.observe(v);
    const [s] = r.read("esb_storage_group_commit_records");
    const bounds = metricFamilies.esb_storage_group_commit_records.buckets;
    expect(s.count).toBe(5);
    expect(s.value).toBe(1 + 1 + 3 + 100 + 1e9);
    expect(s.buckets![0]).toBe(2); // ≤ 1
    expect(s.buckets![bounds.indexOf(4)]).toBe(1); // 3 falls in ≤ 4
    expect(s.buckets![bounds.indexOf(128)]).toBe(1); // 100 falls in ≤ 128
    expect(s.buckets![bounds.length]).toBe(1); // +Inf
  });

  it("forgets a deleted topic's series and changes its epoch, keeping the others", () => {
    const r = registry();
    r.counter("esb_fetch_records_total", { topic: "gone", transport: "tcp" }).inc();
    r.counter("esb_fetch_records_total", { topic: "kept", transport: "tcp" }).inc();
    r.counter("esb_cold_copies_total").inc();
    const before = r.epoch();
    r.forgetTopic("gone");
    expect(r.epoch()).not.toBe(before);
    expect(r.read("esb_fetch_records_total").map((s) => s.labels.topic)).toEqual(["kept"]);
    expect(r.read("esb_cold_copies_total")).toHaveLength(1);
    r.retainTopics(new Set());
    expect(r.read("esb_fetch_records_total")).toEqual([]);
  });

  it("noMetrics keeps nothing and reads time as 0", () => {
    noMetrics.counter("esb_cold_copies_total").inc();
    noMetrics.histogram("esb_storage_fsync_duration_seconds").observe(1);
    expect(noMetrics.seconds()).toBe(0);
    expect(noMetrics.epoch()).toBe(0);
  });
});

describe("exposition writer", () => {
  it("escapes label values and help text as the text format requires", () => {
    expect(escapeLabelValue('a"b\\c\nd')).toBe('a\\"b\\\\c\\nd');
    expect(escapeLabelValue("\u2028{}=😀")).toBe("\u2028{}=😀");
    expect(escapeHelp("x\\y\nz")).toBe("x\\\\y\\nz");
    expect(
      [1, 0.25, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.NaN].map(formatValue),
    ).toEqual(["1", "0.25", "+Inf", "-Inf", "NaN"]);
  });

  it("writes each family once, and refuses a second one or a bad name", () => {
    const w = new ExpositionWriter().family("x_total", "counter", "X.").sample({ a: "1" }, 2);
    expect(() => w.family("x_total", "counter", "again")).toThrow(/written twice/);
    expect(() => w.family("bad-name", "gauge", "h")).toThrow(/bad metric name/);
    expect(() =>
      new ExpositionWriter().family("y", "gauge", "h").sample({ "b-c": "v" }, 1),
    ).toThrow(/bad label name/);
    expect(w.text()).toBe('# HELP x_total X.\n# TYPE x_total counter\nx_total{a="1"} 2\n');
  });

  it("writes histograms as cumulative buckets ending at +Inf, then _sum and _count", async () => {
    const r = registry();
    r.histogram("esb_storage_fsync_duration_seconds").observe(0.0003);
    r.histogram("esb_storage_fsync_duration_seconds").observe(7);
    const text = await renderMetrics({
      registry: r,
      observe: async () => emptyObservation,
      build: { version: "0.0.0", runtime: "test" },
    });
    const lines = samples(text).filter((l) => l.startsWith("esb_storage_fsync_duration_seconds"));
    const buckets = lines.filter((l) => l.includes("_bucket"));
    const counts = buckets.map((l) => Number(l.split(" ")[1]));
    expect(counts).toEqual([...counts].sort((a, b) => a - b)); // cumulative
    expect(buckets.at(-1)).toBe('esb_storage_fsync_duration_seconds_bucket{le="+Inf"} 2');
    expect(buckets.find((l) => l.includes('le="0.0005"'))).toMatch(/ 1$/);
    expect(lines).toContain("esb_storage_fsync_duration_seconds_count 2");
    expect(lines).toContain("esb_storage_fsync_duration_seconds_sum 7.0003");
  });

  it("counts partitions below their min ISR apart from merely under-replicated ones (cluster mode)", async () => {
    const led = (partition: number, isr: number) => ({
      topic: "pay",
      partition,
      role: "leader" as const,
      replicas: 3,
      isr,
      minInsyncReplicas: 2,
      offline: false,
      leaderEpoch: 1,
      highWatermark: 10,
      fetchLag: null,
    });
    const text = await renderMetrics({
      registry: registry(),
      observe: async () => emptyObservation,
      build: { version: "0.0.0", runtime: "test" },
      replication: () => ({
        controller: true,
        membershipLive: true,
        offlinePartitions: 0,
        partitions: [led(0, 3), led(1, 2), led(2, 1)],
      }),
    });
    const lines = samples(text);
    expect(lines).toContain("esb_cluster_under_replicated_partitions 2");
    expect(lines).toContain("esb_cluster_under_min_isr_partitions 1");
    expect(lines.filter((l) => l.startsWith("esb_replica_under_min_isr{"))).toEqual([
      'esb_replica_under_min_isr{topic="pay",partition="0"} 0',
      'esb_replica_under_min_isr{topic="pay",partition="1"} 0',
      'esb_replica_under_min_isr{topic="pay",partition="2"} 1',
    ]);
    // Without the watch guard's count (a node started without it), no such family.
    expect(text).not.toContain("esb_cluster_etcd_watches_deaf_total");
  });

  it("counts the etcd watches found deaf and reopened (cluster mode)", async () => {
    const text = await renderMetrics({
      registry: registry(),
      observe: async () => emptyObservation,
      build: { version: "0.0.0", runtime: "test" },
      replication: () => ({
        controller: false,
        membershipLive: true,
        offlinePartitions: 0,
        partitions: [],
        etcdWatchesDeaf: 3,
      }),
    });
    expect(text).toContain("# TYPE esb_cluster_etcd_watches_deaf_total counter");
    expect(samples(text)).toContain("esb_cluster_etcd_watches_deaf_total 3");
  });
});
