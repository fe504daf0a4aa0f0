/**
 * Field failure 29d (docs/operations.md "Under failover"): `/metrics` of every broker of a
 * real three-broker cluster (and a three-member etcd, `cluster-harness.ts`) scraped every
 * `scrapeMs` while a producer writes and a consumer group consumes and commits, across leader
 * failovers (the leader of partition 0 SIGKILLed, started again later) and broker restarts (a
 * clean SIGTERM and start). Each round scrapes every running broker and reads the partitions'
 * state from etcd at once, and checks:
 *
 * - `lag`: every `esb_consumer_group_lag_records` ≥ 0, and it is not a clamped negative: the
 *   committed offset a scrape shows is at most the high watermark the same scrape shows.
 * - `counters`: no counter (nor a histogram's `_bucket`, `_count`, `_sum`) of a broker is lower
 *   than in its previous scrape with the same `process_start_time_seconds`.
 * - `log_end`: every `esb_consumer_group_committed_offset` is at most the
 *   `esb_partition_log_end_offset` of the same scrape.
 * - `under_replicated`: the sum over brokers of `esb_cluster_under_replicated_partitions` equals
 *   the number of partitions with a leader whose ISR in etcd is smaller than their replica set
 *   within one interval: it lies between the lowest and the highest count etcd had in the round
 *   before, the same round and the round after (scrapes and the etcd read of a round run at once,
 *   so a round may catch some leaders before a change and some after). And per partition: the
 *   brokers' `esb_replica_under_replicated` sum to etcd's 0 or 1 for it in one of those rounds
 *   (never two brokers reporting one partition).
 *
 * Used by `test/cluster/metrics-failover.test.ts` (bounded, in `npm test`) and
 * `scripts/metrics-failover.mjs` (5 minutes by default).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { ClusterClient, GroupConsumer } from "../../src/client/client.ts";
import { type ClusterBroker, type TestCluster, startCluster } from "./cluster-harness.ts";

const topic = "metrics-failover";
const group = "metrics-failover-g";
const partitions = 3;
const etcdPrefix = "/es-broker";

/** The checks (module comment). */
export const metricsChecks = ["lag", "counters", "log_end", "under_replicated"] as const;
export type MetricsCheck = (typeof metricsChecks)[number];

/** One check that did not hold. */
export interface MetricsViolation {
  check: MetricsCheck;
  /** Ms since the run started. */
  atMs: number;
  round: number;
  node: number | null;
  detail: string;
}

/** A fault applied, with when (ms since the run started). */
export interface MetricsFaultEvent {
  atMs: number;
  what: string;
}

/** Options of {@link runMetricsFailover}. */
export interface MetricsFailoverOptions {
  /**
   * How long the workload and the scrapes run after the cluster is ready; longer if the faults
   * run late (a broker slow to start on a loaded machine): the scrapes go on until the last
   * fault is done.
   */
  durationMs: number;
  /** Time between rounds of scrapes (default 200). */
  scrapeMs?: number;
  /**
   * The faults, as ms since the run started. Default: every 60 s a leader failover at +5 s
   * (partition 0's leader SIGKILLed, started again at +25 s) and a restart of another broker
   * (SIGTERM, start) at +40 s.
   */
  faults?: { killLeaderAtMs: number; restartKilledAtMs: number; restartBrokerAtMs: number }[];
  /** Command words that start es-broker (default: the target's). */
  command?: string[];
  log?: (line: string) => void;
}

/** What {@link runMetricsFailover} found. */
export interface MetricsFailoverReport {
  rounds: number;
  scrapes: number;
  failedScrapes: number;
  violations: MetricsViolation[];
  /** Violations per check. */
  counts: Record<MetricsCheck, number>;
  faults: MetricsFaultEvent[];
  produced: number;
  commits: number;
  /** Rounds in which etcd showed an under-replicated partition (the check saw one). */
  underReplicatedRounds: number;
  /** Highest committed offset seen per partition (the group made progress). */
  committed: Record<string, number>;
  /** Counter series compared across consecutive scrapes of one process. */
  counterComparisons: number;
  /** Consumer-lag samples checked. */
  lagSamples: number;
  text: string;
}

/** One sample line of an exposition. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  labelText: string;
  value: number;
}

/** A parsed exposition: samples and each family's TYPE. */
interface Scrape {
  node: number;
  types: Map<string, string>;
  samples: Sample[];
}

/** Parses the Prometheus text format (what the exposition writes; not a general parser). */
export function parseExposition(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("# TYPE ")) {
      const [name, type] = line.slice(7).split(" ");
      types.set(name, type);
      continue;
    }
    if (line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line);
    if (m === null) throw new Error(`unparseable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1], labels, labelText: m[2] ?? "", value: Number(m[3]) });
  }
  return { types, samples };
}

/** The family a sample belongs to and whether it only grows (counters; histogram parts). */
function isMonotonic(name: string, types: Map<string, string>): boolean {
  if (types.get(name) === "counter") return true;
  for (const suffix of ["_bucket", "_count", "_sum"])
    if (name.endsWith(suffix) && types.get(name.slice(0, -suffix.length)) === "histogram")
      return true;
  return false;
}

/** Partition states under the prefix, from the first etcd member that answers (gRPC gateway). */
async function etcdPartitions(
  endpoints: readonly string[],
): Promise<{ partition: number; leader: number; replicas: number[]; isr: number[] }[] | null> {
  const key = `${etcdPrefix}/partitions/${topic}/`;
  const end = key.slice(0, -1) + String.fromCharCode(key.charCodeAt(key.length - 1) + 1);
  for (const endpoint of endpoints) {
    try {
      const res = await fetch(`${endpoint}/v3/kv/range`, {
        method: "POST",
        body: JSON.stringify({
          key: Buffer.from(key).toString("base64"),
          range_end: Buffer.from(end).toString("base64"),
        }),
        signal: AbortSignal.timeout(1000),
      });
      if (!res.ok) continue;
      const body = (await res.json()) as { kvs?: { key: string; value: string }[] };
      return (body.kvs ?? []).map((kv) => {
        const k = Buffer.from(kv.key, "base64").toString();
        const state = JSON.parse(Buffer.from(kv.value, "base64").toString()) as {
          leader: number;
          replicas: number[];
          isr: number[];
        };
        return { partition: Number(k.slice(key.length)), ...state };
      });
    } catch {}
  }
  return null;
}

async function scrapeBroker(b: ClusterBroker): Promise<Scrape | null> {
  try {
    const res = await fetch(`${b.httpUrl}/metrics`, { signal: AbortSignal.timeout(1500) });
    const text = await res.text();
    if (!res.ok) return null;
    return { node: b.nodeId, ...parseExposition(text) };
  } catch {
    return null;
  }
}

/** Every running broker's scrape and etcd's partition states, at once. */
async function round(cluster: TestCluster) {
  const [scrapes, etcd] = await Promise.all([
    Promise.all(cluster.brokers.filter((b) => b.state === "running").map(scrapeBroker)),
    etcdPartitions(cluster.etcd!.endpoints),
  ]);
  return { scrapes, etcd };
}

/** Runs the workload, the faults and the checks (module comment). */
export async function runMetricsFailover(
  options: MetricsFailoverOptions,
): Promise<MetricsFailoverReport> {
  const log = options.log ?? (() => {});
  const scrapeMs = options.scrapeMs ?? 200;
  const faultPlan =
    options.faults ??
    Array.from({ length: Math.floor(options.durationMs / 60_000) }, (_, i) => ({
      killLeaderAtMs: i * 60_000 + 5_000,
      restartKilledAtMs: i * 60_000 + 25_000,
      restartBrokerAtMs: i * 60_000 + 40_000,
    }));
  const cluster = await startCluster({ command: options.command });
  const violations: MetricsViolation[] = [];
  const faults: MetricsFaultEvent[] = [];
  const committedMax: Record<string, number> = {};
  let produced = 0;
  let commits = 0;
  let rounds = 0;
  let scrapes = 0;
  let failedScrapes = 0;
  let underReplicatedRounds = 0;
  let counterComparisons = 0;
  let lagSamples = 0;
  let stopped = false;
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    const admin = await ClusterClient.connect({
      bootstrap: cluster.brokers.map((b) => b.tcp),
      timeoutMs: 5000,
      retryTimeoutMs: 20_000,
    });
    await admin.createTopic({
      name: topic,
      partitions,
      config: { replication_factor: 3, min_insync_replicas: 2 },
    });
    await admin.close();
    await cluster.waitReady({ topic, inSync: true });
    log(`cluster ready after ${elapsed()} ms; running ${options.durationMs} ms`);
    const runStart = performance.now();
    const runElapsed = () => Math.round(performance.now() - runStart);

    const connect = () =>
      ClusterClient.connect({
        bootstrap: cluster.brokers.map((b) => b.tcp),
        timeoutMs: 3000,
        retryTimeoutMs: 15_000,
      });

    const producer = (async () => {
      let router: ClusterClient | null = null;
      for (let n = 0; !stopped; n++) {
        try {
          router ??= await connect();
          const partition = n % partitions;
          const leader = await router.leader(topic, partition);
          await leader.produce(
            topic,
            Array.from({ length: 5 }, (_, i) => ({ key: `k${i}`, value: `v-${n}-${i}` })),
            { partition },
          );
          produced += 5;
          await sleep(20);
        } catch {
          await router?.refresh().catch(() => {});
          await sleep(100);
        }
      }
      await router?.close().catch(() => {});
    })();

    const consumer = (async () => {
      let router: ClusterClient | null = null;
      let member: GroupConsumer | null = null;
      while (!stopped) {
        try {
          router ??= await connect();
          member ??= await GroupConsumer.join({
            client: await router.coordinator(),
            router,
            group,
            topics: [topic],
            sessionTimeoutMs: 6000,
            maxRecords: 100,
          });
          const batches = await member.poll({ waitMs: 100 });
          if (batches.length > 0 && (await member.commit())) commits++;
          await sleep(50);
        } catch {
          await member?.close({ leave: false }).catch(() => {});
          member = null;
          await router?.refresh().catch(() => {});
          await sleep(200);
        }
      }
      await member?.close({ leave: false }).catch(() => {});
      await router?.close().catch(() => {});
    })();

    let faultsDone = false;
    const faulting = (async () => {
      for (const f of faultPlan) {
        const at = async (ms: number) => {
          const wait = ms - runElapsed();
          if (wait > 0) await sleep(wait);
        };
        await at(f.killLeaderAtMs);
        if (stopped) return;
        const m = await cluster.metadata(topic).catch(() => null);
        const leaderId = m?.topics[0]?.partitions.find((p) => p.partition === 0)?.leader ?? -1;
        const victim =
          cluster.brokers.find((b) => b.nodeId === leaderId && b.state === "running") ??
          cluster.brokers.find((b) => b.state === "running")!;
        await victim.kill();
        faults.push({
          atMs: runElapsed(),
          what: `SIGKILL broker ${victim.nodeId} (leader of partition 0)`,
        });
        log(`${runElapsed()} ms: SIGKILL broker ${victim.nodeId}`);
        await at(f.restartKilledAtMs);
        await victim.start();
        faults.push({ atMs: runElapsed(), what: `start broker ${victim.nodeId}` });
        log(`${runElapsed()} ms: started broker ${victim.nodeId}`);
        await at(f.restartBrokerAtMs);
        if (stopped) return;
        const controller = (await cluster.metadata().catch(() => null))?.controller ?? -1;
        // The controller (the group coordinator) when it is not the broker just restarted.
        const other =
          cluster.brokers.find(
            (b) => b.nodeId === controller && b !== victim && b.state === "running",
          ) ?? cluster.brokers.find((b) => b !== victim && b.state === "running")!;
        await other.terminate();
        faults.push({ atMs: runElapsed(), what: `SIGTERM broker ${other.nodeId}` });
        await other.start();
        faults.push({ atMs: runElapsed(), what: `start broker ${other.nodeId}` });
        log(`${runElapsed()} ms: restarted broker ${other.nodeId}`);
      }
    })().finally(() => {
      faultsDone = true;
    });

    // Per broker: the counters of its last scrape and its process start time.
    const lastCounters = new Map<number, { start: number; values: Map<string, number> }>();
    // Per round: the metric's and etcd's under-replicated counts (null: unknown).
    const urp: {
      metric: number | null;
      metricPartitions: number[] | null;
      etcd: number | null;
      etcdPartitions: (number | null)[];
      offline: number;
      atMs: number;
    }[] = [];
    while (runElapsed() < options.durationMs || !faultsDone) {
      const roundStart = performance.now();
      const r = rounds++;
      const { scrapes: got, etcd } = await round(cluster);
      const atMs = runElapsed();
      const violation = (check: MetricsCheck, node: number | null, detail: string) =>
        violations.push({ check, atMs, round: r, node, detail });
      let metricUrp = 0;
      const metricPartitions: number[] = Array.from({ length: partitions }, () => 0);
      let complete = etcd !== null;
      for (const s of got) {
        scrapes++;
        if (s === null) {
          failedScrapes++;
          complete = false;
          continue;
        }
        const byName = (name: string) => s.samples.filter((x) => x.name === name);
        const tp = (x: Sample) => `${x.labels.topic}/${x.labels.partition}`;
        const hw = new Map(byName("esb_partition_high_watermark").map((x) => [tp(x), x.value]));
        const logEnd = new Map(byName("esb_partition_log_end_offset").map((x) => [tp(x), x.value]));
        for (const x of byName("esb_consumer_group_lag_records")) {
          lagSamples++;
          if (x.value < 0) violation("lag", s.node, `lag ${x.value} for ${x.labelText}`);
        }
        for (const x of byName("esb_consumer_group_committed_offset")) {
          const key = tp(x);
          committedMax[key] = Math.max(committedMax[key] ?? 0, x.value);
          const h = hw.get(key);
          if (h !== undefined && x.value > h)
            violation(
              "lag",
              s.node,
              `committed ${x.value} above the high watermark ${h} of the same scrape (lag clamped from ${h - x.value}) for ${x.labelText}`,
            );
          const e = logEnd.get(key);
          if (e !== undefined && x.value > e)
            violation(
              "log_end",
              s.node,
              `committed ${x.value} above the log end ${e} of the same scrape for ${x.labelText}`,
            );
        }
        const start = byName("process_start_time_seconds")[0]?.value ?? Number.NaN;
        const values = new Map<string, number>();
        for (const x of s.samples)
          if (isMonotonic(x.name, s.types)) values.set(`${x.name}${x.labelText}`, x.value);
        const before = lastCounters.get(s.node);
        if (before !== undefined && before.start === start)
          for (const [series, value] of values) {
            const was = before.values.get(series);
            if (was === undefined) continue;
            counterComparisons++;
            if (value < was)
              violation("counters", s.node, `${series} went from ${was} to ${value}`);
          }
        lastCounters.set(s.node, { start, values });
        metricUrp += byName("esb_cluster_under_replicated_partitions")[0]?.value ?? 0;
        for (const x of byName("esb_replica_under_replicated"))
          if (x.labels.topic === topic) {
            const p = Number(x.labels.partition);
            metricPartitions[p] = (metricPartitions[p] ?? 0) + x.value;
          }
      }
      const etcdUrp =
        etcd === null
          ? null
          : etcd.filter((p) => p.leader >= 0 && p.isr.length < p.replicas.length).length;
      if (etcdUrp !== null && etcdUrp > 0) underReplicatedRounds++;
      // A broker that did not answer may lead under-replicated partitions: no metric figure.
      const etcdPartitionsUrp: (number | null)[] = Array.from({ length: partitions }, (_, p) => {
        const state = etcd?.find((x) => x.partition === p);
        return state === undefined
          ? null
          : state.leader >= 0 && state.isr.length < state.replicas.length
            ? 1
            : 0;
      });
      urp.push({
        metric: complete ? metricUrp : null,
        metricPartitions: complete ? metricPartitions : null,
        etcd: etcdUrp,
        etcdPartitions: etcdPartitionsUrp,
        offline: etcd?.filter((p) => p.leader < 0).length ?? 0,
        atMs,
      });
      // Round r-1 is judged once round r is known (within one interval: rounds r-2, r-1, r).
      if (urp.length >= 3) {
        const [a, b, c] = urp.slice(-3);
        const near = [a.etcd, b.etcd, c.etcd].filter((x): x is number => x !== null);
        const judge = (detail: string) =>
          violations.push({
            check: "under_replicated",
            atMs: b.atMs,
            round: r - 1,
            node: null,
            detail,
          });
        if (
          b.metric !== null &&
          b.etcd !== null &&
          (b.metric < Math.min(...near) || b.metric > Math.max(...near))
        )
          judge(
            `the brokers report ${b.metric} under-replicated partitions, etcd has ${a.etcd ?? "?"}, ${b.etcd}, ${c.etcd ?? "?"} (rounds ${r - 2}..${r}; offline ${b.offline})`,
          );
        if (b.metricPartitions !== null)
          for (let p = 0; p < partitions; p++) {
            const m = b.metricPartitions[p];
            const e = [a, b, c].map((x) => x.etcdPartitions[p]);
            if (!e.includes(m))
              judge(
                `partition ${p}: the brokers report it under-replicated ${m} times, etcd says ${e.map((x) => x ?? "?").join(", ")} (rounds ${r - 2}..${r})`,
              );
          }
      }
      const rest = scrapeMs - (performance.now() - roundStart);
      if (rest > 0) await sleep(rest);
    }
    stopped = true;
    await Promise.all([producer, consumer, faulting]);
  } finally {
    stopped = true;
    await cluster.stop();
  }
  const counts = Object.fromEntries(
    metricsChecks.map((c) => [c, violations.filter((v) => v.check === c).length]),
  ) as Record<MetricsCheck, number>;
  const lines = [
    `rounds ${rounds} (every ${scrapeMs} ms), scrapes ${scrapes} (${failedScrapes} failed: brokers down or restarting)`,
    `workload: ${produced} records produced, ${commits} commits; committed offsets ${JSON.stringify(committedMax)}`,
    `faults: ${faults.map((f) => `${f.atMs} ms ${f.what}`).join("; ")}`,
    `under-replicated partitions in etcd during ${underReplicatedRounds} rounds; ${counterComparisons} counter comparisons; ${lagSamples} lag samples`,
    `violations: ${metricsChecks.map((c) => `${c} ${counts[c]}`).join(", ")}`,
    ...violations
      .slice(0, 20)
      .map((v) => `  ${v.check} @${v.atMs} ms round ${v.round} node ${v.node ?? "-"}: ${v.detail}`),
  ];
  return {
    rounds,
    scrapes,
    failedScrapes,
    violations,
    counts,
    faults,
    produced,
    commits,
    underReplicatedRounds,
    committed: committedMax,
    counterComparisons,
    lagSamples,
    text: lines.join("\n"),
  };
}

/** `scripts/metrics-failover.mjs`: `[--minutes 5] [--scrape-ms 200]`; exit code 1 on a violation. */
export async function main(argv: string[], extra: { command?: string[] } = {}): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      minutes: { type: "string", default: "5" },
      "scrape-ms": { type: "string", default: "200" },
    },
  });
  const report = await runMetricsFailover({
    durationMs: Number(values.minutes) * 60_000,
    scrapeMs: Number(values["scrape-ms"]),
    command: extra.command,
    log: (line) => console.log(line),
  });
  console.log(report.text);
  const ok = report.violations.length === 0;
  console.log(ok ? "OK: every check held" : "FAILED");
  return ok ? 0 : 1;
}
