/**
 * `GET /metrics`: the Prometheus text exposition format, version 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/), written by a small writer of our
 * own rather than `prom-client`: most families here are read from the broker's state at each
 * scrape, and a writer that builds each answer from one snapshot into a fresh buffer cannot emit a
 * family twice, interleave two scrapes, or keep a series its object has lost (docs/operations.md
 * "Metrics" lists every family and says what it means).
 *
 * The format, as written here:
 * ```
 * # HELP <name> <help, with \ and newline escaped>
 * # TYPE <name> counter|gauge|histogram
 * <name>{<label>="<value, with \, " and newline escaped>",…} <value>
 * ```
 * One HELP and one TYPE line per family, its samples right after them, each series once;
 * a histogram's series are `_bucket{le=…}` (cumulative, ending with `le="+Inf"`), `_sum` and
 * `_count`. Names and label names are checked against the format's grammar as they are written
 * (a bad one is a bug: it throws), label values are escaped, whatever they hold.
 *
 * Cardinality: partitions give topic × partition series; consumer groups give group × topic ×
 * partition, for at most `metricsGroupsMax` groups (those with the largest total lag; the rest are
 * counted in `esb_consumer_groups_unexported`); nothing is labelled with a client id, a producer
 * id, a key or a remote address.
 */
import type { BrokerObservation } from "../../broker/broker.ts";
import type { GroupDescription, ReplicationSnapshot } from "../../broker/types.ts";
import { metricsGroupsMax } from "../../lib/limits.ts";
import {
  type FamilyDefinition,
  type FamilyName,
  type Labels,
  metricFamilies,
  type MetricsRegistry,
} from "../../lib/metrics.ts";

/** The `Content-Type` of the answer. */
export const prometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

/** The process's own numbers at the moment of a scrape (`runtime/process-metrics.ts`). */
export interface ProcessSnapshot {
  residentMemoryBytes: number;
  heapUsedBytes: number;
  heapTotalBytes: number;
  externalMemoryBytes: number;
  /** User + system CPU time since start, in seconds (null where the runtime cannot tell). */
  cpuSeconds: number | null;
  /** When the process started, in seconds since the epoch. */
  startTimeSeconds: number;
  uptimeSeconds: number;
}

/**
 * The store-and-forward mirror's state at a scrape (`Mirror.observe` in src/mirror/mirror.ts,
 * docs/edge.md): per partition its position, lag read now, records forwarded and failures.
 */
export interface MirrorSnapshot {
  /** `--mirror-name`. */
  name: string;
  /** Whether the last attempt to reach the upstream succeeded; null before any. */
  upstreamReachable: boolean | null;
  partitions: readonly {
    topic: string;
    partition: number;
    /** Next edge offset to forward. */
    position: number;
    lagRecords: number;
    lagMs: number;
    state: string;
    forwarded: number;
    failures: number;
  }[];
}

/** What {@link MetricsSources.inFlight} reads: an `InFlightTotal` (`transport/connection.ts`). */
export interface InFlightSnapshot {
  /** Bytes held now: request frames and fetch `max_bytes` in flight, answers not yet taken by the kernel. */
  readonly bytes: number;
  /** The part of `bytes` that is answers not yet taken by the kernel. */
  readonly queuedAnswerBytes: number;
  /** The cap on `bytes`. */
  readonly max: number;
  /** Times a connection stopped starting requests because `bytes` was at or over `max`. */
  readonly waits: number;
}

/** Everything one scrape reads. */
export interface MetricsSources {
  registry: MetricsRegistry;
  /** The broker's state (`LocalBroker.observe`). */
  observe: () => Promise<BrokerObservation>;
  /** Refusals of client input since start, by kind (`lib/refusals.ts`). */
  refusals?: () => Record<string, number>;
  /** Open connections per listener ("http", "tcp", "metrics"); null where the runtime cannot count them. */
  connections?: () => Record<string, number | null>;
  process?: () => ProcessSnapshot;
  /**
   * Bytes held for requests in flight and unread answers over every TCP and Kafka connection, and
   * their cap (`InFlightTotal`, `--max-in-flight-bytes`; docs/protocol.md "Pipelining and ordering").
   */
  inFlight?: () => InFlightSnapshot;
  /** The mirror (`serve --mirror-to`), if one runs. */
  mirror?: () => Promise<MirrorSnapshot>;
  /** Cluster mode: replication (`ClusterNode.observeReplication`). */
  replication?: () => ReplicationSnapshot;
  /** `esb_build_info` labels. */
  build: { version: string; runtime: string };
}

const metricNamePattern = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const labelNamePattern = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** A label value as the format wants it: `\` → `\\`, `"` → `\"`, newline → `\n`. */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => (c === "\\" ? "\\\\" : c === '"' ? '\\"' : "\\n"));
}

/** A HELP text as the format wants it: `\` → `\\`, newline → `\n`. */
export function escapeHelp(text: string): string {
  return text.replace(/[\\\n]/g, (c) => (c === "\\" ? "\\\\" : "\\n"));
}

/** A sample value: integers as they are, `+Inf`, `-Inf`, `NaN`, other numbers in JS notation. */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Number.POSITIVE_INFINITY) return "+Inf";
  if (value === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(value);
}

/**
 * `{name="value",…}` for `labels` (empty for none), values escaped.
 * @throws Error if a label name breaks the grammar.
 */
export function formatLabels(labels: Labels): string {
  const names = Object.keys(labels);
  if (names.length === 0) return "";
  let text = "{";
  names.forEach((label, i) => {
    if (!labelNamePattern.test(label)) throw new Error(`bad label name ${JSON.stringify(label)}`);
    text += `${i > 0 ? "," : ""}${label}="${escapeLabelValue(labels[label])}"`;
  });
  return `${text}}`;
}

/**
 * Writes one exposition: families in the order they are begun, each once.
 * @throws Error if a family is begun twice, or a name or label name breaks the grammar.
 */
export class ExpositionWriter {
  readonly #lines: string[] = [];
  readonly #families = new Set<string>();
  #current = "";

  /** Starts family `name` (HELP and TYPE lines). */
  family(name: string, type: "counter" | "gauge" | "histogram", help: string): this {
    if (!metricNamePattern.test(name)) throw new Error(`bad metric name ${JSON.stringify(name)}`);
    if (this.#families.has(name)) throw new Error(`metric family ${name} written twice`);
    this.#families.add(name);
    this.#current = name;
    this.#lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
    return this;
  }

  /** One sample of the current family: `<family><suffix>{labels} value`. */
  sample(labels: Labels, value: number, suffix = ""): this {
    return this.sampleWithLabels(formatLabels(labels), value, suffix);
  }

  /** {@link sample} with labels already written by {@link formatLabels} (reused across families). */
  sampleWithLabels(labelText: string, value: number, suffix = ""): this {
    this.#lines.push(`${this.#current}${suffix}${labelText} ${formatValue(value)}`);
    return this;
  }

  /** The exposition so far, ending with a newline. */
  text(): string {
    return this.#lines.length === 0 ? "" : `${this.#lines.join("\n")}\n`;
  }
}

/** Writes family `name` of the registry (its series now). */
function writeRegistryFamily(out: ExpositionWriter, registry: MetricsRegistry, name: FamilyName) {
  const definition: FamilyDefinition = metricFamilies[name];
  out.family(name, definition.type, definition.help);
  for (const series of registry.read(name)) {
    if (definition.type !== "histogram") {
      out.sample(series.labels, series.value);
      continue;
    }
    const bounds = definition.buckets ?? [];
    const counts = series.buckets ?? [];
    let cumulative = 0;
    bounds.forEach((bound, i) => {
      cumulative += counts[i] ?? 0;
      out.sample({ ...series.labels, le: formatValue(bound) }, cumulative, "_bucket");
    });
    out.sample({ ...series.labels, le: "+Inf" }, series.count ?? 0, "_bucket");
    out.sample(series.labels, series.value, "_sum");
    out.sample(series.labels, series.count ?? 0, "_count");
  }
}

/** Total lag of a group (its partitions with a known lag). */
function totalLag(group: GroupDescription): number {
  let total = 0;
  for (const o of group.offsets) total += o.lag ?? 0;
  return total;
}

/** The groups exported: at most `metricsGroupsMax`, largest total lag first, then by name. */
function exportedGroups(groups: GroupDescription[]): GroupDescription[] {
  if (groups.length <= metricsGroupsMax) return groups;
  return groups
    .map((group) => ({ group, lag: totalLag(group) }))
    .sort((a, b) => b.lag - a.lag || (a.group.group < b.group.group ? -1 : 1))
    .slice(0, metricsGroupsMax)
    .map((x) => x.group)
    .sort((a, b) => (a.group < b.group ? -1 : a.group > b.group ? 1 : 0));
}

/** One gauge family over every partition. */
function partitionGauge(
  out: ExpositionWriter,
  partitions: readonly { labels: string; p: BrokerObservation["partitions"][number] }[],
  family: { name: string; help: string },
  value: (p: BrokerObservation["partitions"][number]) => number | null,
): void {
  out.family(family.name, "gauge", family.help);
  for (const { labels, p } of partitions) {
    const v = value(p);
    if (v !== null) out.sampleWithLabels(labels, v);
  }
}

/** The `esb_mirror_*` families (docs/operations.md "Metrics", store-and-forward); partitions of existing topics only. */
function writeMirror(out: ExpositionWriter, mirror: MirrorSnapshot, topics: ReadonlySet<string>) {
  const partitions = mirror.partitions
    .filter((p) => topics.has(p.topic))
    .map((p) => ({
      labels: formatLabels({ mirror: mirror.name, topic: p.topic, partition: String(p.partition) }),
      p,
    }));
  out.family(
    "esb_mirror_upstream_up",
    "gauge",
    "1 if the mirror's last attempt to reach the upstream broker succeeded (connected, authenticated, answered), 0 if it failed.",
  );
  if (mirror.upstreamReachable !== null)
    out.sample({ mirror: mirror.name }, mirror.upstreamReachable ? 1 : 0);
  const family = (
    name: string,
    type: "counter" | "gauge",
    help: string,
    value: (p: MirrorSnapshot["partitions"][number]) => number,
  ) => {
    out.family(name, type, help);
    for (const { labels, p } of partitions) out.sampleWithLabels(labels, value(p));
  };
  family(
    "esb_mirror_forwarded_records_total",
    "counter",
    "Records the mirror forwarded to the upstream (acknowledged there) since the process started.",
    (p) => p.forwarded,
  );
  family(
    "esb_mirror_last_forwarded_offset",
    "gauge",
    "Edge offset before the mirror's position: the last record the upstream holds (-1 before any).",
    (p) => p.position - 1,
  );
  family(
    "esb_mirror_lag_records",
    "gauge",
    "Edge records not yet forwarded: high watermark minus the mirror's position (never negative).",
    (p) => p.lagRecords,
  );
  family(
    "esb_mirror_lag_seconds",
    "gauge",
    "Age of the oldest edge record not yet forwarded, by its timestamp, in seconds (0 when caught up).",
    (p) => p.lagMs / 1000,
  );
  family(
    "esb_mirror_failures_total",
    "counter",
    "Failed attempts to forward a batch (upstream unreachable or refusing, edge read errors) since the process started; each is retried unless the partition stops.",
    (p) => p.failures,
  );
  family(
    "esb_mirror_partition_stopped",
    "gauge",
    "1 while the mirror has stopped forwarding the partition (a gap, a conflicting upstream state, a rename conflict: see the mirror.partition_stopped log), else 0.",
    (p) => (p.state === "stopped" ? 1 : 0),
  );
}

/** The `esb_cluster_*` and `esb_replica_*` families (docs/operations.md "Metrics", replication). */
function writeReplication(out: ExpositionWriter, r: ReplicationSnapshot): void {
  out.family(
    "esb_cluster_controller",
    "gauge",
    "1 while this broker is the cluster's controller, else 0.",
  );
  out.sample({}, r.controller ? 1 : 0);
  out.family(
    "esb_cluster_membership_live",
    "gauge",
    "1 while this broker's membership lease in etcd is live (it may acknowledge writes), else 0.",
  );
  out.sample({}, r.membershipLive ? 1 : 0);
  const led = r.partitions.filter((p) => p.role === "leader");
  out.family(
    "esb_cluster_under_replicated_partitions",
    "gauge",
    "Partitions this broker leads whose ISR is smaller than their replica set.",
  );
  out.sample({}, led.filter((p) => p.isr < p.replicas).length);
  out.family(
    "esb_cluster_under_min_isr_partitions",
    "gauge",
    "Partitions this broker leads whose ISR is below their min_insync_replicas: they refuse every write (not_enough_replicas).",
  );
  out.sample({}, led.filter((p) => p.isr < p.minInsyncReplicas).length);
  out.family(
    "esb_cluster_offline_partitions",
    "gauge",
    "Partitions of the cluster with no leader (their replicas are down or behind), as etcd's partition state says.",
  );
  out.sample({}, r.offlinePartitions);
  out.family(
    "esb_cluster_peer_tls_failing",
    "gauge",
    "1 while this broker's replica-fetch link to the broker `peer` (node id) fails in TLS (its certificate not trusted or not naming its host, this broker's certificate refused, a plain-TCP peer), else 0; only brokers it fetched from.",
  );
  for (const p of r.peers ?? []) out.sample({ peer: String(p.nodeId) }, p.tlsFailure ? 1 : 0);
  if (r.etcdWatchesDeaf !== undefined) {
    out.family(
      "esb_cluster_etcd_watches_deaf_total",
      "counter",
      "etcd watches this broker found deaf (their stream open, changes missed) and reopened; see the etcd.watch_deaf log.",
    );
    out.sample({}, r.etcdWatchesDeaf);
  }
  const family = (
    name: string,
    help: string,
    rows: typeof r.partitions,
    value: (p: (typeof r.partitions)[number]) => number,
  ) => {
    out.family(name, "gauge", help);
    for (const p of rows) out.sample({ topic: p.topic, partition: String(p.partition) }, value(p));
  };
  family(
    "esb_replica_isr_size",
    "Members of the partition's ISR (partitions this broker leads).",
    led,
    (p) => p.isr,
  );
  family(
    "esb_replica_replicas",
    "Replicas assigned to the partition (partitions this broker leads).",
    led,
    (p) => p.replicas,
  );
  family(
    "esb_replica_under_replicated",
    "1 if the ISR of a partition this broker leads is smaller than its replica set, else 0.",
    led,
    (p) => (p.isr < p.replicas ? 1 : 0),
  );
  family(
    "esb_replica_under_min_isr",
    "1 if the ISR of a partition this broker leads is below its min_insync_replicas (writes refused), else 0.",
    led,
    (p) => (p.isr < p.minInsyncReplicas ? 1 : 0),
  );
  family(
    "esb_replica_leader_epoch",
    "Leader epoch of a partition this broker leads.",
    led,
    (p) => p.leaderEpoch,
  );
  family(
    "esb_replica_high_watermark",
    "High watermark (one past the last offset every ISR member fsynced) of a partition this broker leads.",
    led,
    (p) => p.highWatermark ?? 0,
  );
  family(
    "esb_replica_offline",
    "1 if a partition this broker holds a replica of has no leader, else 0.",
    r.partitions,
    (p) => (p.offline ? 1 : 0),
  );
  const following = r.partitions.filter((p) => p.fetchLag !== null);
  family(
    "esb_replica_fetch_lag_records",
    "Records of the leader's high watermark (as its last answer said) a partition this broker follows does not hold yet.",
    following,
    (p) => p.fetchLag!.records,
  );
  family(
    "esb_replica_fetch_lag_seconds",
    "Seconds since a partition this broker follows last held the leader's high watermark (0 while caught up).",
    following,
    (p) => p.fetchLag!.ms / 1000,
  );
}

/**
 * Builds one exposition from `sources` (module comment). Each call reads its own snapshot into its
 * own buffer, so concurrent scrapes cannot interfere.
 */
export async function renderMetrics(sources: MetricsSources): Promise<string> {
  const observation = await sources.observe();
  const mirror = await sources.mirror?.();
  const registry = sources.registry;
  // A produce that finished after its topic was deleted may have counted it again: drop such series.
  registry.retainTopics(new Set(observation.partitions.map((p) => p.topic)));
  const out = new ExpositionWriter();

  out
    .family(
      "esb_build_info",
      "gauge",
      "Always 1: the es-broker version and the runtime it runs on.",
    )
    .sample({ version: sources.build.version, runtime: sources.build.runtime }, 1);
  const process = sources.process?.();
  if (process !== undefined) {
    out
      .family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the epoch, in seconds.",
      )
      .sample({}, Math.floor(process.startTimeSeconds));
    out
      .family("esb_uptime_seconds", "gauge", "Seconds since the process started.")
      .sample({}, process.uptimeSeconds);
    out
      .family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident set size of the process, in bytes.",
      )
      .sample({}, process.residentMemoryBytes);
    out
      .family("esb_heap_used_bytes", "gauge", "JavaScript heap in use, in bytes.")
      .sample({}, process.heapUsedBytes);
    out
      .family("esb_heap_total_bytes", "gauge", "JavaScript heap reserved, in bytes.")
      .sample({}, process.heapTotalBytes);
    out
      .family(
        "esb_external_memory_bytes",
        "gauge",
        "Memory outside the JavaScript heap held by JavaScript objects (buffers), in bytes.",
      )
      .sample({}, process.externalMemoryBytes);
    if (process.cpuSeconds !== null)
      out
        .family(
          "process_cpu_seconds_total",
          "counter",
          "User and system CPU time of the process, in seconds.",
        )
        .sample({}, process.cpuSeconds);
  }

  for (const name of Object.keys(metricFamilies) as FamilyName[])
    writeRegistryFamily(out, registry, name);

  const connections = sources.connections?.();
  if (connections !== undefined) {
    out.family(
      "esb_open_connections",
      "gauge",
      "Connections open now, by listener (http, tcp, kafka, metrics).",
    );
    for (const [listener, count] of Object.entries(connections))
      if (count !== null) out.sample({ listener }, count);
  }
  const inFlight = sources.inFlight?.();
  if (inFlight !== undefined) {
    out
      .family(
        "esb_in_flight_bytes",
        "gauge",
        "Bytes the TCP, Kafka and HTTP connections hold for requests in flight (frames, fetch max_bytes) and answers not yet taken by the kernel (HTTP: fetches).",
      )
      .sample({}, inFlight.bytes);
    out
      .family(
        "esb_in_flight_bytes_limit",
        "gauge",
        "The cap on esb_in_flight_bytes (--max-in-flight-bytes).",
      )
      .sample({}, inFlight.max);
    out
      .family(
        "esb_queued_answer_bytes",
        "gauge",
        "Bytes of answers written to TCP and Kafka connections, and HTTP fetch answers, not yet taken by the kernel (clients not reading).",
      )
      .sample({}, inFlight.queuedAnswerBytes);
    out
      .family(
        "esb_in_flight_waits_total",
        "counter",
        "Times a connection stopped starting requests because esb_in_flight_bytes was at its cap.",
      )
      .sample({}, inFlight.waits);
  }
  const refusals = sources.refusals?.();
  if (refusals !== undefined) {
    out.family(
      "esb_refusals_total",
      "counter",
      "Client input refused since start, by kind: malformed TCP frames, read timeouts, HTTP parse errors, failed authentications (auth.failed), TLS failures.",
    );
    for (const [kind, count] of Object.entries(refusals)) out.sample({ kind }, count);
  }

  out
    .family(
      "esb_topics_unavailable",
      "gauge",
      "Topics on disk that cannot be served (unreadable topic.json, partitions that would not open).",
    )
    .sample({}, observation.unavailableTopics);
  out
    .family(
      "esb_consumer_groups_unavailable",
      "gauge",
      "Consumer groups whose file could not be loaded.",
    )
    .sample({}, observation.unavailableGroups);

  if (observation.dataDir != null) {
    out
      .family(
        "esb_data_dir_free_bytes",
        "gauge",
        "Bytes the broker can still write on the data directory's file system (statfs: available blocks for its user).",
      )
      .sample({}, observation.dataDir.freeBytes);
    out
      .family(
        "esb_data_dir_total_bytes",
        "gauge",
        "Size of the data directory's file system, in bytes.",
      )
      .sample({}, observation.dataDir.totalBytes);
  }
  if (observation.diskReserveGivenUp !== undefined)
    out
      .family(
        "esb_disk_reserve_given_up",
        "gauge",
        "1 while the data directory's disk reserve is given up after a write failed for lack of space (appends refused until it is made again), else 0.",
      )
      .sample({}, observation.diskReserveGivenUp ? 1 : 0);

  if (observation.producers !== undefined) {
    out
      .family("esb_producer_ids", "gauge", "Idempotent producer ids whose state the broker keeps.")
      .sample({}, observation.producers.ids);
    out
      .family(
        "esb_producer_ids_evicted_total",
        "counter",
        "Idle idempotent producer ids forgotten before their expiry because --producer-ids-max was reached (or a snapshot would pass its size limit).",
      )
      .sample({}, observation.producers.evicted);
  }

  // Each partition's labels are written once and reused by every partition family.
  const partitions = observation.partitions.map((p) => ({
    labels: formatLabels({ topic: p.topic, partition: String(p.partition) }),
    p,
  }));
  partitionGauge(
    out,
    partitions,
    { name: "esb_partition_log_start_offset", help: "First offset a fetch may ask for." },
    (p) => p.logStartOffset,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_high_watermark",
      help: "One past the last offset an fsync covered: what consumers may read up to.",
    },
    (p) => p.highWatermark,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_log_end_offset",
      help: "One past the last offset written (durable or not yet).",
    },
    (p) => p.logEndOffset,
  );
  partitionGauge(
    out,
    partitions,
    { name: "esb_partition_size_bytes", help: "Bytes of the partition's local segment logs." },
    (p) => p.sizeBytes,
  );
  partitionGauge(
    out,
    partitions,
    { name: "esb_partition_segments", help: "Local segments of the partition." },
    (p) => p.segments,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_fenced",
      help: "1 while the partition refuses writes after a failed fsync or write (restart required), else 0.",
    },
    (p) => (p.fenced ? 1 : 0),
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_corrupt_segments",
      help: "Segments found corrupt at start (left in place, skipped).",
    },
    (p) => p.corruptSegments,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_stray_files",
      help: "Stray files found in the partition directory at start (reported, ignored).",
    },
    (p) => p.strayFiles,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_cleanup_stopped",
      help: "1 while retention and compaction are stopped on the partition until a restart (an incomplete compaction swap).",
    },
    (p) => (p.cleanupStopped ? 1 : 0),
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_cold_segments",
      help: "Segments of the partition in the cold tier (with --cold-storage-dir).",
    },
    (p) => p.cold?.segments ?? null,
  );
  partitionGauge(
    out,
    partitions,
    { name: "esb_partition_cold_size_bytes", help: "Log bytes of the partition in the cold tier." },
    (p) => p.cold?.sizeBytes ?? null,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_cold_backlog_segments",
      help: "Segments retention wanted to move to the cold tier but kept local because their copy failed or is backing off.",
    },
    (p) => p.cold?.backlogSegments ?? null,
  );
  partitionGauge(
    out,
    partitions,
    {
      name: "esb_partition_cold_copy_consecutive_failures",
      help: "Failed copies to the cold tier in a row (0 once one succeeds).",
    },
    (p) => p.cold?.consecutiveFailures ?? null,
  );

  const groups = exportedGroups(observation.groups);
  out
    .family(
      "esb_consumer_groups_unexported",
      "gauge",
      `Consumer groups left out of the per-group series (only the ${metricsGroupsMax} with the largest lag are exported).`,
    )
    .sample({}, observation.groups.length - groups.length);
  out.family("esb_consumer_group_members", "gauge", "Members of the consumer group.");
  for (const g of groups) out.sample({ group: g.group }, g.members.length);
  out.family(
    "esb_consumer_group_committed_offset",
    "gauge",
    "Committed offset (next offset to consume) of the group on the partition.",
  );
  for (const g of groups)
    for (const o of g.offsets)
      if (o.committed !== null)
        out.sample({ group: g.group, topic: o.topic, partition: String(o.partition) }, o.committed);
  out.family(
    "esb_consumer_group_lag_records",
    "gauge",
    "High watermark minus committed offset of the group on the partition (never negative).",
  );
  for (const g of groups)
    for (const o of g.offsets)
      if (o.lag !== null)
        out.sample(
          { group: g.group, topic: o.topic, partition: String(o.partition) },
          Math.max(0, o.lag),
        );
  if (mirror !== undefined)
    writeMirror(out, mirror, new Set(observation.partitions.map((p) => p.topic)));
  const replication = sources.replication?.();
  if (replication !== undefined) writeReplication(out, replication);
  return out.text();
}
