/**
 * The cluster benchmark of issue #16 (`node bench/cluster.mjs`; not a timed test): 64 producers ×
 * 100 records a request over TCP to one partition with replication factor 3 on three brokers (and a
 * three-member etcd) on this machine, next to a single broker in the same run, with the same load
 * generator (`bench/generator.ts`) and the same broker command. Rounds alternate single, cluster,
 * cluster, single, … so drift weighs on both alike. Prints records/s and p50/p99 per round, then
 * the cluster ÷ single ratios against the aims: ≥ 0.33× the records/s (three brokers share two
 * cores) and p99 ≤ 3× the single broker's.
 *
 * Every acknowledgement is fsynced on the single broker; in the cluster on the leader and every
 * ISR member (min ISR 2). Flags: `--quick` (tiny windows, for checking that it runs), `--rounds N`
 * (default 2), `--warmup-ms`, `--measure-ms` (default 1000, 5000), `--json FILE`, `--cpu-prof DIR`
 * (every broker, single and cluster, writes a V8 CPU profile to DIR when it stops; summarise
 * them with `node bench/profile-top.mjs DIR`). `BENCH_BROKER_BUNDLE=PATH` runs every broker from
 * another build (a lever on and off in one sitting), `BENCH_NODE_FLAGS` as for `npm run bench`.
 */
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { TcpClient } from "../src/client/client.ts";
import { startCluster, type TestCluster } from "../test/cluster/cluster-harness.ts";
import { brokerNodeFlags } from "./servers.ts";
import type { GeneratorResult, ProduceSpec } from "./spec.ts";

/** One measured round. */
export interface ClusterBenchRound {
  system: "single" | "cluster";
  round: number;
  recordsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  records: number;
  seconds: number;
}

/** What the run found: the rounds and the ratios against the aims. */
export interface ClusterBenchReport {
  rounds: ClusterBenchRound[];
  /** Mean cluster records/s ÷ mean single records/s. */
  throughputRatio: number;
  /** Mean cluster p99 ÷ mean single p99. */
  p99Ratio: number;
  aims: { throughput: boolean; p99: boolean };
}

const producers = 64;
const batch = 100;
const valueBytes = 256;
const topic = "bench-cluster";

function runGenerator(generatorPath: string, spec: ProduceSpec): Promise<GeneratorResult> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [generatorPath, JSON.stringify(spec)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
    proc.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-10_000)));
    proc.on("close", (code, signal) => {
      const last = out.trim().split("\n").at(-1) ?? "";
      if (code === 0 && last.startsWith("{")) resolve(JSON.parse(last) as GeneratorResult);
      else
        reject(new Error(`generator exited with ${code ?? signal}: ${err.trim() || out.trim()}`));
    });
  });
}

/**
 * The TCP address of the broker leading `topic`/0: the metadata's leader in a cluster
 * (`GET /v1/cluster`), the only broker otherwise.
 */
async function leaderAddress(cluster: TestCluster): Promise<{ host: string; port: number }> {
  if (cluster.etcd === null) return cluster.brokers[0].tcp;
  await cluster.waitReady({ topic });
  const m = (await cluster.metadata(topic))!;
  const leader = m.topics[0].partitions[0].leader;
  const broker = cluster.brokers.find((b) => b.nodeId === leader);
  if (broker === undefined)
    throw new Error(`no running leader for ${topic}/0: ${JSON.stringify(m)}`);
  return broker.tcp;
}

async function createTopic(cluster: TestCluster): Promise<void> {
  const client = await TcpClient.connect(cluster.brokers[0].tcp);
  try {
    await client.createTopic({
      name: topic,
      partitions: 1,
      ...(cluster.etcd === null
        ? {}
        : { config: { replication_factor: 3, min_insync_replicas: 2 } }),
    });
  } finally {
    await client.close();
  }
}

/** Runs the benchmark (module comment); returns the process exit code. */
export async function main(
  argv: string[],
  paths: { root: string; generatorPath: string },
): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: "boolean", default: false },
      rounds: { type: "string" },
      "warmup-ms": { type: "string" },
      "measure-ms": { type: "string" },
      json: { type: "string" },
      "cpu-prof": { type: "string" },
    },
  });
  const quick = values.quick;
  const rounds = Number(values.rounds ?? (quick ? 1 : 2));
  const warmupMs = Number(values["warmup-ms"] ?? (quick ? 100 : 1000));
  const measureMs = Number(values["measure-ms"] ?? (quick ? 300 : 5000));
  for (const [name, v] of [
    ["--rounds", rounds],
    ["--warmup-ms", warmupMs],
    ["--measure-ms", measureMs],
  ] as const) {
    if (!Number.isInteger(v) || v < (name === "--warmup-ms" ? 0 : 1))
      throw new Error(`${name} must be a positive integer, got ${v}`);
  }
  const profileDir = values["cpu-prof"];
  const profile = profileDir === undefined ? [] : ["--cpu-prof", "--cpu-prof-dir", profileDir];
  const command = [
    process.execPath,
    ...brokerNodeFlags,
    ...profile,
    process.env.BENCH_BROKER_BUNDLE ?? join(paths.root, "dist/es-broker.mjs"),
  ];
  const serveArgs = ["--log-level", "warn"];
  const single = await startCluster({ cluster: false, command, serveArgs });
  let cluster: TestCluster | null = null;
  try {
    cluster = await startCluster({ cluster: true, command, serveArgs });
    await createTopic(single);
    await createTopic(cluster);
    const systems = { single, cluster } as const;
    const results: ClusterBenchRound[] = [];
    process.stdout.write(
      `cluster benchmark: ${producers} producers × ${batch} records of ${valueBytes} bytes, TCP, 1 partition; ` +
        `cluster: replication factor 3, min ISR 2, 3 brokers + 3 etcd members on this machine\n`,
    );
    process.stdout.write(
      "| system | round | records/s | p50 ms | p99 ms |\n|---|--:|--:|--:|--:|\n",
    );
    for (let round = 1; round <= rounds; round++) {
      const order: ("single" | "cluster")[] =
        round % 2 === 1 ? ["single", "cluster"] : ["cluster", "single"];
      for (const system of order) {
        const target = await leaderAddress(systems[system]);
        const r = await runGenerator(paths.generatorPath, {
          mode: "produce",
          target: { kind: "es-tcp", host: target.host, port: target.port, topic },
          batch,
          producers,
          partitions: 1,
          valueBytes,
          warmupMs,
          measureMs,
          minRequests: producers,
        });
        const row: ClusterBenchRound = {
          system,
          round,
          recordsPerSec: r.records / r.seconds,
          p50Ms: r.latencyMs.p50,
          p99Ms: r.latencyMs.p99,
          records: r.records,
          seconds: r.seconds,
        };
        results.push(row);
        process.stdout.write(
          `| ${system} | ${round} | ${Math.round(row.recordsPerSec).toLocaleString("en-US")} | ${row.p50Ms.toFixed(2)} | ${row.p99Ms.toFixed(2)} |\n`,
        );
      }
    }
    const mean = (system: string, f: (r: ClusterBenchRound) => number) => {
      const xs = results.filter((r) => r.system === system).map(f);
      return xs.reduce((a, b) => a + b, 0) / xs.length;
    };
    const throughputRatio =
      mean("cluster", (r) => r.recordsPerSec) / mean("single", (r) => r.recordsPerSec);
    const p99Ratio = mean("cluster", (r) => r.p99Ms) / mean("single", (r) => r.p99Ms);
    const report: ClusterBenchReport = {
      rounds: results,
      throughputRatio,
      p99Ratio,
      aims: { throughput: throughputRatio >= 0.33, p99: p99Ratio <= 3 },
    };
    process.stdout.write(
      `\ncluster ÷ single: records/s ${throughputRatio.toFixed(2)}× (aim ≥ 0.33×: ${report.aims.throughput ? "met" : "not met"}), ` +
        `p99 ${p99Ratio.toFixed(2)}× (aim ≤ 3×: ${report.aims.p99 ? "met" : "not met"})\n`,
    );
    if (values.json) writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
    return 0;
  } catch (err) {
    process.stderr.write(
      `cluster benchmark failed: ${(err as Error).stack}\n${cluster?.logTail(20) ?? ""}\n`,
    );
    return 1;
  } finally {
    // A profile is written only on a clean exit: SIGTERM first when profiling.
    if (profileDir !== undefined)
      await Promise.all([...(cluster?.brokers ?? []), ...single.brokers].map((b) => b.terminate()));
    await cluster?.stop();
    await single.stop();
  }
}
