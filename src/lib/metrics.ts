/**
 * Counting without a global registry (docs/operations.md "Metrics"): storage and broker code is
 * handed a {@link Metrics} and asks it, once, for the series it updates — a {@link Counter}, a
 * {@link Gauge} or a {@link Histogram} of one family of {@link metricFamilies} with fixed labels —
 * and updates them on the hot path with one call and no allocation. The Prometheus exposition
 * (`src/transport/http/prometheus.ts`) reads the series back through {@link MetricsRegistry}; the
 * simulations and unit tests hand in {@link noMetrics}.
 *
 * Label values come only from the broker's own vocabulary (a topic or partition that exists, a
 * task, a status of a fixed set), never from client input as such, so the number of series is
 * bounded by topics × partitions (docs/operations.md "Cardinality"). A deleted topic's series go
 * with {@link Metrics.forgetTopic}.
 *
 * Durations come from {@link Metrics.seconds}, a monotonic clock the runtime supplies
 * (`performance.now()`); `noMetrics` answers 0, so code under a simulated clock stays deterministic.
 */

/** Label names and values of one series (values are what the exposition escapes and prints). */
export type Labels = Readonly<Record<string, string>>;

/** A monotonically increasing count. */
export interface Counter {
  /** Adds `value` (≥ 0; default 1). */
  inc(value?: number): void;
}

/** A value that goes up and down. */
export interface Gauge {
  set(value: number): void;
}

/** A distribution: observations counted into fixed cumulative buckets, with their sum. */
export interface Histogram {
  /** Counts one observation of `value` (in the family's unit). */
  observe(value: number): void;
}

/** What storage and broker count through (module comment). */
export interface Metrics {
  /** The counter of family `name` with `labels` (the same series for the same labels). */
  counter(name: CounterFamily, labels?: Labels): Counter;
  /** The gauge of family `name` with `labels`. */
  gauge(name: GaugeFamily, labels?: Labels): Gauge;
  /** The histogram of family `name` with `labels`. */
  histogram(name: HistogramFamily, labels?: Labels): Histogram;
  /** A monotonic time in seconds, for durations (0 from {@link noMetrics}). */
  seconds(): number;
  /** Drops every series labelled `topic` = `topic` (the topic was deleted). */
  forgetTopic(topic: string): void;
  /**
   * Changes whenever series are dropped: a caller that keeps series per topic across calls asks
   * for them again when it changed (a dropped series no longer reaches the exposition).
   */
  epoch(): number;
}

/** Buckets of request and fsync latencies, in seconds. */
export const latencyBucketsSeconds: readonly number[] = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];
/** Buckets of records per group commit. */
const groupCommitRecordBuckets: readonly number[] = [
  1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536,
];
/** Buckets of cleanup pass durations, in seconds. */
const cleanupBucketsSeconds: readonly number[] = [0.001, 0.01, 0.1, 1, 10, 60, 600];
/** Buckets of event-loop delay, in seconds. */
const eventLoopBucketsSeconds: readonly number[] = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
];

/** One family of series: its kind, help line, label names (every series has exactly these) and buckets. */
export interface FamilyDefinition {
  readonly type: "counter" | "gauge" | "histogram";
  readonly help: string;
  readonly labels: readonly string[];
  readonly buckets?: readonly number[];
}

/**
 * The families counted through {@link Metrics}. Those computed from the broker's state at each
 * scrape (partitions, consumer lag, connections, process) are in `transport/http/prometheus.ts`.
 * docs/operations.md lists them all with what they mean.
 */
export const metricFamilies = {
  esb_produce_requests_total: {
    type: "counter",
    help: "Produce requests answered successfully, by topic and front door (http, tcp, kafka; per partition for kafka).",
    labels: ["topic", "transport"],
  },
  esb_produce_records_total: {
    type: "counter",
    help: "Records appended by successful produce requests, by topic and front door.",
    labels: ["topic", "transport"],
  },
  esb_produce_bytes_total: {
    type: "counter",
    help: "Bytes of the records (producer entries: timestamp, key, value and their lengths) of successful produce requests, by topic and front door.",
    labels: ["topic", "transport"],
  },
  esb_produce_duration_seconds: {
    type: "histogram",
    help: "Time from a front door's produce call to its answer (durable with --flush-every-records 1), successful or not, by front door.",
    labels: ["transport"],
    buckets: latencyBucketsSeconds,
  },
  esb_fetch_requests_total: {
    type: "counter",
    help: "Fetch requests answered successfully (SSE reads included), by topic and front door (per partition read for kafka).",
    labels: ["topic", "transport"],
  },
  esb_fetch_records_total: {
    type: "counter",
    help: "Records returned by successful fetch requests, by topic and front door.",
    labels: ["topic", "transport"],
  },
  esb_fetch_bytes_total: {
    type: "counter",
    help: "Bytes of stored records returned by successful fetch requests, by topic and front door.",
    labels: ["topic", "transport"],
  },
  esb_fetch_duration_seconds: {
    type: "histogram",
    help: "Time from a front door's fetch call to its answer (long-poll waits included), successful or not, by front door.",
    labels: ["transport"],
    buckets: latencyBucketsSeconds,
  },
  esb_request_errors_total: {
    type: "counter",
    help: "Broker calls answered with an error, by front door, operation and error code (the error table).",
    labels: ["transport", "operation", "code"],
  },
  esb_storage_fsync_duration_seconds: {
    type: "histogram",
    help: "Duration of each fsync of a partition's log by group commit (its _count is the number of fsyncs).",
    labels: [],
    buckets: latencyBucketsSeconds,
  },
  esb_storage_fsync_failures_total: {
    type: "counter",
    help: "Failed fsyncs of a partition's log (each fences its partition until restart).",
    labels: [],
  },
  esb_storage_group_commit_records: {
    type: "histogram",
    help: "Records one successful fsync of a partition's log made durable (group commit size).",
    labels: [],
    buckets: groupCommitRecordBuckets,
  },
  esb_storage_fenced_total: {
    type: "counter",
    help: "Partitions fenced since start (a failed fsync, or a failed write that could not be cut off).",
    labels: [],
  },
  esb_cleanup_runs_total: {
    type: "counter",
    help: "Retention and compaction passes over one partition, by task and outcome status.",
    labels: ["task", "status"],
  },
  esb_cleanup_duration_seconds: {
    type: "histogram",
    help: "Duration of retention and compaction passes over one partition, by task.",
    labels: ["task"],
    buckets: cleanupBucketsSeconds,
  },
  esb_cleanup_reclaimed_bytes_total: {
    type: "counter",
    help: "Local log bytes removed by retention (offloaded segments included) and by compaction, by task.",
    labels: ["task"],
  },
  esb_cleanup_last_run_timestamp_seconds: {
    type: "gauge",
    help: "When the last pass of a task over any partition finished (seconds since the epoch): the cleaner's heartbeat.",
    labels: ["task"],
  },
  esb_mirror_records_deleted_unforwarded_total: {
    type: "counter",
    help: "Edge records retention deleted before the mirror forwarded them (lost to the upstream), by topic and partition; 0 from the first retention pass over a mirrored partition.",
    labels: ["topic", "partition"],
  },
  esb_cold_copies_total: {
    type: "counter",
    help: "Segments copied (and verified) to the cold tier.",
    labels: [],
  },
  esb_cold_copied_bytes_total: {
    type: "counter",
    help: "Log bytes copied to the cold tier.",
    labels: [],
  },
  esb_cold_copy_failures_total: {
    type: "counter",
    help: "Failed copies to the cold tier (the segment stays local; retried with backoff).",
    labels: [],
  },
  esb_tls_certificate_expiry_timestamp_seconds: {
    type: "gauge",
    help: "When the certificate a TLS listener presents expires (its notAfter), in seconds since the epoch; follows each SIGHUP reload that succeeded.",
    labels: ["listener"],
  },
  esb_tls_reload_failures_total: {
    type: "counter",
    help: "SIGHUP reloads of TLS files that failed (the old material stays in force), by material: listeners (--tls-cert/--tls-key/--tls-client-ca), cluster_ca, etcd.",
    labels: ["material"],
  },
  esb_tls_last_reload_successful: {
    type: "gauge",
    help: "1 if the TLS files were read at start or at the last SIGHUP, 0 if the last reload failed (the files on disk are unusable: a restart would fail too), by material.",
    labels: ["material"],
  },
  esb_event_loop_delay_seconds: {
    type: "histogram",
    help: "How late a 100 ms timer fires: time the event loop was busy with other work.",
    labels: [],
    buckets: eventLoopBucketsSeconds,
  },
} as const satisfies Record<string, FamilyDefinition>;

/** A family name of {@link metricFamilies}. */
export type FamilyName = keyof typeof metricFamilies;
type FamiliesOf<T extends FamilyDefinition["type"]> = {
  [K in FamilyName]: (typeof metricFamilies)[K]["type"] extends T ? K : never;
}[FamilyName];
/** Counter families. */
export type CounterFamily = FamiliesOf<"counter">;
/** Gauge families. */
export type GaugeFamily = FamiliesOf<"gauge">;
/** Histogram families. */
export type HistogramFamily = FamiliesOf<"histogram">;

const noCounter: Counter = { inc() {} };
const noGauge: Gauge = { set() {} };
const noHistogram: Histogram = { observe() {} };

/** Metrics that keep nothing (tests, simulations, a broker embedded without an exposition). */
export const noMetrics: Metrics = {
  counter: () => noCounter,
  gauge: () => noGauge,
  histogram: () => noHistogram,
  seconds: () => 0,
  forgetTopic() {},
  epoch: () => 0,
};

/** One series as the exposition reads it. */
export interface SeriesSnapshot {
  readonly labels: Labels;
  /** Counter or gauge value; for a histogram, the sum of observations. */
  readonly value: number;
  /** Histogram only: observations per bucket (not cumulative; the last is +Inf), and their count. */
  readonly buckets?: readonly number[];
  readonly count?: number;
}

class CounterSeries implements Counter {
  value = 0;
  constructor(readonly labels: Labels) {}
  inc(value = 1): void {
    if (value > 0) this.value += value;
  }
}

class GaugeSeries implements Gauge {
  value = 0;
  constructor(readonly labels: Labels) {}
  set(value: number): void {
    this.value = value;
  }
}

class HistogramSeries implements Histogram {
  sum = 0;
  count = 0;
  readonly counts: Float64Array;
  constructor(
    readonly labels: Labels,
    readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }
  observe(value: number): void {
    const bounds = this.bounds;
    // Few buckets: a linear scan from the bottom beats a binary search for small values.
    let i = 0;
    while (i < bounds.length && value > bounds[i]) i++;
    this.counts[i]++;
    this.sum += value;
    this.count++;
  }
}

type AnySeries = CounterSeries | GaugeSeries | HistogramSeries;

/** `name="value"` pairs in the family's label order: the key of a series. */
function seriesKey(definition: FamilyDefinition, labels: Labels): string {
  let key = "";
  for (const name of definition.labels) key += `${labels[name] ?? ""}\u0000`;
  return key;
}

/**
 * The store behind {@link Metrics}: series by family and labels, read by the exposition. Updates
 * are plain field writes (JavaScript runs one thing at a time), so a scrape never sees a half
 * update and two scrapes never interfere.
 */
export class MetricsRegistry implements Metrics {
  readonly #families = new Map<FamilyName, Map<string, AnySeries>>();
  readonly #now: () => number;
  #epoch = 0;

  /** @param options.nowSeconds the monotonic clock of {@link Metrics.seconds} (the runtime's `performance.now() / 1000`). */
  constructor(options: { nowSeconds: () => number }) {
    this.#now = options.nowSeconds;
    for (const name of Object.keys(metricFamilies) as FamilyName[])
      this.#families.set(name, new Map());
  }

  #series<T extends AnySeries>(name: FamilyName, labels: Labels, make: () => T): T {
    const definition: FamilyDefinition = metricFamilies[name];
    const family = this.#families.get(name)!;
    const key = seriesKey(definition, labels);
    let series = family.get(key) as T | undefined;
    if (series === undefined) {
      const names = Object.keys(labels);
      if (
        names.length !== definition.labels.length ||
        !definition.labels.every((n) => typeof labels[n] === "string")
      )
        throw new RangeError(
          `metric ${name} takes labels [${definition.labels.join(", ")}], got [${names.join(", ")}]`,
        );
      series = make();
      family.set(key, series);
    }
    return series;
  }

  counter(name: CounterFamily, labels: Labels = {}): Counter {
    return this.#series(name, labels, () => new CounterSeries({ ...labels }));
  }

  gauge(name: GaugeFamily, labels: Labels = {}): Gauge {
    return this.#series(name, labels, () => new GaugeSeries({ ...labels }));
  }

  histogram(name: HistogramFamily, labels: Labels = {}): Histogram {
    const buckets = (metricFamilies[name] as FamilyDefinition).buckets ?? [];
    return this.#series(name, labels, () => new HistogramSeries({ ...labels }, buckets));
  }

  seconds(): number {
    return this.#now();
  }

  epoch(): number {
    return this.#epoch;
  }

  forgetTopic(topic: string): void {
    this.#epoch++;
    for (const family of this.#families.values())
      for (const [key, series] of family) if (series.labels.topic === topic) family.delete(key);
  }

  /**
   * Drops every series whose `topic` label names none of `topics` (a produce that finished after
   * its topic was deleted may have made one again). Called by each scrape before reading.
   */
  retainTopics(topics: ReadonlySet<string>): void {
    for (const family of this.#families.values())
      for (const [key, series] of family) {
        const topic = series.labels.topic;
        if (topic !== undefined && !topics.has(topic)) {
          family.delete(key);
          this.#epoch++;
        }
      }
  }

  /** The series of family `name` now (copies: later updates do not change them). */
  read(name: FamilyName): SeriesSnapshot[] {
    const out: SeriesSnapshot[] = [];
    for (const series of this.#families.get(name)!.values()) {
      if (series instanceof HistogramSeries)
        out.push({
          labels: series.labels,
          value: series.sum,
          buckets: Array.from(series.counts),
          count: series.count,
        });
      else out.push({ labels: series.labels, value: series.value });
    }
    return out;
  }
}
