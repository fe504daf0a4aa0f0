/**
 * The cases of issue #22 the harness (`bench/harness.ts`) runs after the others, with their tables
 * and targets:
 *
 * - fan-out: one TCP producer, 1 record per request, writing one partition alone (`readers=none`),
 *   then while {@link fanoutReaders} Server-Sent Event streams tail it (`sse`), then while as many
 *   TCP consumers long-poll it (`long-poll`); two rounds, forward then backward. The figure is the
 *   producer's records/s; the readers' records/s (summed, and the slowest one's) show they kept up.
 * - runtimes: 64 × 1 and 1 × 1 produce over TCP and over HTTP JSON against a broker on each
 *   runtime (the Node bundle, Deno and Bun from sources, the compiled binary: `brokerCommand`),
 *   all four brokers started at once and the runtimes interleaved round by round, so each HTTP ÷ TCP
 *   ratio is of two figures measured minutes apart at most on the same broker.
 */
import { join } from "node:path";
import { runCase, valueBytes, type CaseResult, type Env, type TargetResult } from "./harness.ts";
import { parseBrokerRuntime, startEsBroker, type BrokerRuntime, type EsBroker } from "./servers.ts";

/** Readers of the fan-out cases: 100 (the issue's figure); 10 in `--quick` runs. */
export function fanoutReaders(quick: boolean): number {
  return quick ? 10 : 100;
}

/** The fan-out reader kinds, in round-1 order. */
export const fanoutKinds = ["none", "sse", "long-poll"] as const;

/** The key of a fan-out case: `fanout b=1 P=1 parts=1 readers=100 sse r1`. */
export function fanoutKey(kind: (typeof fanoutKinds)[number], readers: number, round: number) {
  return `fanout b=1 P=1 parts=1 readers=${kind === "none" ? "none" : `${readers} ${kind}`} r${round}`;
}

/**
 * The runtimes of the runtime cases, in round-1 order: Node, Deno, Bun, the binary; or the
 * comma-separated list in the environment variable `BENCH_RUNTIMES` (e.g.
 * `node,bun,bun-net,binary,binary-net`: Bun's socket adapter on and off, `servers.ts`).
 */
export const benchRuntimes: BrokerRuntime[] =
  process.env.BENCH_RUNTIMES === undefined
    ? ["node", "deno", "bun", "binary"]
    : process.env.BENCH_RUNTIMES.split(",")
        .filter(Boolean)
        .map((name) => parseBrokerRuntime(name, "BENCH_RUNTIMES"));

/**
 * The runtime README.md recommends for servers, chosen by these cases (docs/benchmarks.md, "HTTP
 * and fan-out"); the HTTP ÷ TCP target is evaluated on it.
 */
export const serverRuntime: BrokerRuntime = "node";

/** The produce shapes of the runtime cases: producers × records per request. */
export const runtimeShapes = [
  { producers: 64, batch: 1 },
  { producers: 1, batch: 1 },
] as const;

/** The key of a runtime case: `runtime b=1 P=64 parts=1 bun r1`. */
export function runtimeKey(
  shape: (typeof runtimeShapes)[number],
  runtime: BrokerRuntime,
  round: number,
): string {
  return `runtime b=${shape.batch} P=${shape.producers} parts=1 ${runtime} r${round}`;
}

/** Rounds of each case: 1 in `--quick` runs, else 2 (or `BENCH_HTTP_ROUNDS`, for experiments). */
function rounds(env: Env): number[] {
  const n = env.settings.quick ? 1 : Number(process.env.BENCH_HTTP_ROUNDS ?? 2);
  return Array.from({ length: n }, (_, i) => i + 1);
}

/**
 * `BENCH_FANOUT_PACE=N`: the fan-out producer sends at most N requests a second, so that builds
 * compare at the same pace (broker CPU per produced record, records per answer) when the
 * machine's load moves the unpaced rate.
 */
const fanoutPace =
  process.env.BENCH_FANOUT_PACE === undefined ? undefined : Number(process.env.BENCH_FANOUT_PACE);

/** The fan-out cases (module comment). */
export async function fanoutPoints(env: Env): Promise<void> {
  const s = env.settings;
  const readers = fanoutReaders(s.quick);
  for (const round of rounds(env)) {
    for (const kind of round % 2 === 1 ? fanoutKinds : [...fanoutKinds].reverse()) {
      await runCase(
        env,
        {
          key: fanoutKey(kind, readers, round),
          group: "fanout",
          system: "es-broker",
          transport: "tcp",
          batch: 1,
          producers: 1,
          partitions: 1,
        },
        (target) => {
          if (target.kind !== "es-tcp") throw new Error("fan-out: the producer is a TCP one");
          return {
            mode: "fanout",
            target,
            httpUrl: env.es.httpUrl,
            readerKind: kind,
            readers: kind === "none" ? 0 : readers,
            ...(fanoutPace === undefined ? {} : { paceRequestsPerSec: fanoutPace }),
            batch: 1,
            valueBytes,
            warmupMs: s.warmupMs,
            measureMs: s.quick ? 200 : s.measureMs,
            minRequests: s.minRequests,
            metricsUrl: `${env.es.httpUrl}/v1/admin/metrics`,
            serverPid: env.es.pid,
          };
        },
      );
    }
  }
}

/** The runtime cases (module comment): four brokers, each shape over TCP and HTTP JSON on each. */
export async function runtimePoints(env: Env): Promise<void> {
  const s = env.settings;
  const ids = runtimeShapes.flatMap((shape) =>
    benchRuntimes.flatMap((rt) =>
      rounds(env).flatMap((r) =>
        ["tcp", "http-json"].map((t) => `${runtimeKey(shape, rt, r)} es-broker/${t}`),
      ),
    ),
  );
  if (env.only && !ids.some((id) => env.only!.test(id))) return;
  const brokers = new Map<BrokerRuntime, EsBroker>();
  try {
    for (const runtime of benchRuntimes) {
      try {
        brokers.set(
          runtime,
          await startEsBroker({
            root: env.root,
            dataDir: join(env.dataRoot, `runtime-${runtime}`),
            runtime,
          }),
        );
      } catch (err) {
        env.failures.push({
          id: `runtime ${runtime}`,
          error: `cannot start es-broker on ${runtime}: ${err instanceof Error ? err.message : String(err)}`,
        });
      }
    }
    for (const round of rounds(env)) {
      for (const runtime of round % 2 === 1 ? benchRuntimes : [...benchRuntimes].reverse()) {
        const es = brokers.get(runtime);
        if (es === undefined) continue;
        for (const shape of runtimeShapes) {
          for (const transport of ["tcp", "http-json"] as const) {
            await runCase(
              env,
              {
                key: runtimeKey(shape, runtime, round),
                group: "runtime",
                system: "es-broker",
                transport,
                batch: shape.batch,
                producers: shape.producers,
                partitions: 1,
                es,
              },
              (target) => ({
                mode: "produce",
                target,
                batch: shape.batch,
                producers: shape.producers,
                partitions: 1,
                valueBytes,
                warmupMs: s.warmupMs,
                measureMs: s.measureMs,
                minRequests: s.minRequests,
                metricsUrl: `${es.httpUrl}/v1/admin/metrics`,
                serverPid: es.pid,
              }),
            );
          }
        }
      }
    }
  } finally {
    for (const es of brokers.values()) await es.stop();
  }
}

/** Mean of a figure over the cases whose key starts with `prefix` (one per round); null if none. */
function meanOf(
  results: CaseResult[],
  prefix: string,
  transport: string,
  figure: (c: CaseResult) => number | null | undefined,
): number | null {
  const runs = results.filter((c) => c.key.startsWith(prefix) && c.transport === transport);
  const values = runs.map(figure).filter((v): v is number => typeof v === "number");
  return values.length === 0 || values.length < runs.length
    ? null
    : values.reduce((a, b) => a + b, 0) / values.length;
}

const fmt = (n: number | null, digits = 0): string =>
  n === null || !Number.isFinite(n)
    ? "—"
    : n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
const fmtRatio = (r: number | null): string => (r === null ? "—" : `${r.toFixed(2)}×`);

/** Per runtime and shape: mean records/s over TCP and HTTP JSON, and HTTP's CPU per record. */
export function runtimeSummary(results: CaseResult[]) {
  const out = [];
  for (const runtime of benchRuntimes)
    for (const shape of runtimeShapes) {
      const prefix = `runtime b=${shape.batch} P=${shape.producers} parts=1 ${runtime} r`;
      const tcp = meanOf(results, prefix, "tcp", (c) => c.recordsPerSec);
      const http = meanOf(results, prefix, "http-json", (c) => c.recordsPerSec);
      if (tcp === null && http === null) continue;
      out.push({
        runtime,
        shape,
        tcp,
        http,
        ratio: tcp !== null && http !== null && tcp > 0 ? http / tcp : null,
        tcpCpu: meanOf(results, prefix, "tcp", (c) => c.serverCpuUsPerRecord),
        httpCpu: meanOf(results, prefix, "http-json", (c) => c.serverCpuUsPerRecord),
      });
    }
  return out;
}

/** Per reader kind: the producer's mean records/s, its share of `none`'s, and the readers' records/s. */
export function fanoutSummary(results: CaseResult[]) {
  const cases = results.filter((c) => c.group === "fanout");
  const out = [];
  const none = meanOf(
    cases,
    "fanout b=1 P=1 parts=1 readers=none r",
    "tcp",
    (c) => c.recordsPerSec,
  );
  for (const kind of fanoutKinds) {
    const prefixes = [
      ...new Set(
        cases
          .filter((c) =>
            (kind === "none" ? /readers=none/ : new RegExp(` ${kind} r\\d+$`)).test(c.key),
          )
          .map((c) => c.key.replace(/ r\d+$/, " r")),
      ),
    ];
    for (const prefix of prefixes) {
      const producer = meanOf(cases, prefix, "tcp", (c) => c.recordsPerSec);
      out.push({
        kind,
        label: prefix.replace("fanout b=1 P=1 parts=1 ", "").replace(/ r$/, ""),
        producer,
        share: kind === "none" || producer === null || !none ? null : producer / none,
        readersTotal: meanOf(cases, prefix, "tcp", (c) => c.readerRecordsPerSec?.total),
        readersMin: meanOf(cases, prefix, "tcp", (c) => c.readerRecordsPerSec?.min),
        perAnswer: meanOf(cases, prefix, "tcp", (c) => c.readerRecordsPerAnswer ?? undefined),
        deliveryP50: meanOf(cases, prefix, "tcp", (c) => c.deliveryLatencyMs?.p50),
        deliveryP99: meanOf(cases, prefix, "tcp", (c) => c.deliveryLatencyMs?.p99),
        cpu: meanOf(cases, prefix, "tcp", (c) => c.serverCpuUsPerRecord),
      });
    }
  }
  return out;
}

/** The Markdown tables of the runtime and fan-out cases (nothing when neither ran). */
export function httpTables(results: CaseResult[]): string[] {
  const lines: string[] = [];
  const runtimes = runtimeSummary(results);
  if (runtimes.length > 0) {
    lines.push(
      "",
      "### HTTP next to TCP on each runtime",
      "",
      "Means of the rounds, each runtime's broker measured over TCP and over HTTP JSON back to back. CPU is the broker's per record.",
      "",
      "| runtime | producers × records | TCP records/s | HTTP JSON records/s | HTTP ÷ TCP | TCP CPU µs/record | HTTP CPU µs/record |",
      "|---|---|--:|--:|--:|--:|--:|",
    );
    for (const r of runtimes)
      lines.push(
        `| ${r.runtime}${r.runtime === serverRuntime ? " (recommended)" : ""} | ${r.shape.producers} × ${r.shape.batch} | ${fmt(r.tcp)} | ${fmt(r.http)} | ${fmtRatio(r.ratio)} | ${fmt(r.tcpCpu, 1)} | ${fmt(r.httpCpu, 1)} |`,
      );
  }
  const fanout = fanoutSummary(results);
  if (fanout.length > 0) {
    lines.push(
      "",
      "### Fan-out: one producer (TCP, 1 record per request) while readers tail its partition",
      "",
      "Means of the rounds. Share: the producer's records/s ÷ its records/s with no reader. Readers' records/s: summed over every reader, and the slowest reader's. Records per answer: per fetch response (long-poll) or data chunk (SSE). Delivery: from the start of a record's produce request to a reader's receiving it.",
      "",
      "| readers | producer records/s | share | readers' records/s (sum) | slowest reader records/s | records per answer | delivery p50 / p99 ms | broker CPU µs/produced record |",
      "|---|--:|--:|--:|--:|--:|--:|--:|",
    );
    for (const f of fanout)
      lines.push(
        `| ${f.label} | ${fmt(f.producer)} | ${f.share === null ? "" : `${(f.share * 100).toFixed(0)} %`} | ${fmt(f.readersTotal)} | ${fmt(f.readersMin)} | ${fmt(f.perAnswer, 2)} | ${f.deliveryP50 === null ? "" : `${fmt(f.deliveryP50, 1)} / ${fmt(f.deliveryP99, 1)}`} | ${fmt(f.cpu, 1)} |`,
      );
  }
  return lines;
}

/** The targets of issue #22 that these cases and the HTTP fetch case measure. */
export function httpTargets(results: CaseResult[]): TargetResult[] {
  const targets: TargetResult[] = [];
  const runtimes = runtimeSummary(results);
  const on = (producers: number) =>
    runtimes.find((r) => r.runtime === serverRuntime && r.shape.producers === producers)?.ratio ??
    null;
  const others = runtimes
    .filter((r) => r.runtime !== serverRuntime)
    .map((r) => `${r.runtime} ${r.shape.producers}×1 ${fmtRatio(r.ratio)}`)
    .join(", ");
  const r64 = on(64);
  const r1 = on(1);
  targets.push({
    name: `HTTP JSON on the recommended runtime (${serverRuntime}): 64 × 1 ≥ 0.75× TCP, 1 × 1 ≥ 0.8× TCP`,
    measured: `64 × 1 ${fmtRatio(r64)}, 1 × 1 ${fmtRatio(r1)}${others ? ` (${others})` : ""}`,
    met: r64 === null || r1 === null ? null : r64 >= 0.75 && r1 >= 0.8,
  });
  // #22: "≥ 1 M over HTTP with encoding=base64 or NDJSON": the best of the three answers.
  const httpFetch = (transport: string) =>
    results.find((c) => c.key === "fetch b=1000 C=1 parts=1" && c.transport === transport)
      ?.recordsPerSec ?? null;
  const fetchFigures = [
    ["JSON base64", httpFetch("http-base64")],
    ["NDJSON utf8", httpFetch("http-ndjson")],
    ["NDJSON base64", httpFetch("http-ndjson-base64")],
  ] as const;
  const measuredFetch = fetchFigures.filter(([, v]) => v !== null) as [string, number][];
  targets.push({
    name: "Consumer fetch over HTTP (encoding=base64 or NDJSON), one consumer: ≥ 1 M records/s",
    measured: `${fetchFigures.map(([name, v]) => `${name} ${fmt(v)}`).join(", ")} records/s`,
    met: measuredFetch.length === 0 ? null : Math.max(...measuredFetch.map(([, v]) => v)) >= 1e6,
  });
  const fanout = fanoutSummary(results);
  const share = (kind: string) => fanout.find((f) => f.kind === kind)?.share ?? null;
  const sse = share("sse");
  const poll = share("long-poll");
  const readers = fanout.find((f) => f.kind === "sse")?.label ?? "readers";
  targets.push({
    name: "Fan-out: a producer keeps ≥ 50 % of its records/s while readers tail its partition (SSE; TCP long-poll)",
    measured: `${readers}: ${sse === null ? "—" : `${(sse * 100).toFixed(0)} %`}, long-poll: ${poll === null ? "—" : `${(poll * 100).toFixed(0)} %`}`,
    met: sse === null || poll === null ? null : sse >= 0.5 && poll >= 0.5,
  });
  return targets;
}
