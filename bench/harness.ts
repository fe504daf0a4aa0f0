/**
 * The benchmark harness (`npm run bench`; `bench/run.mjs` bundles this file and the generator and
 * calls {@link main}). It starts es-broker and every installed peer on loopback with private data
 * directories, runs each case by spawning a load generator process (`bench/generator.ts`), and
 * prints what it measured: records/s, payload MB/s, p50/p99/max request latency, fsyncs/s,
 * records per fsync and the server's peak RSS, then es-broker next to each peer as ratios for the
 * same case, then the targets of the benchmark issue, met or not.
 *
 * Cases (values of 256 bytes, fsync before acknowledgement everywhere but NATS):
 * - produce: batch 1 | 10 | 100 | 1000 records per request × 1 | 8 | 64 producers × 1 | 4
 *   partitions, over es-broker TCP, HTTP JSON and HTTP NDJSON; the same batches against Redis
 *   (pipelined XADD), NATS JetStream (publish with ack) and Durable Streams (one JSON array per
 *   append); es-broker over the Durable Streams protocol with the same load generator as that
 *   peer (`es-broker/durable-streams`: one stream per partition); the disk limit (an in-process
 *   write + fdatasync loop) per batch size, measured again before each producer count so that it
 *   sits next to the cases it is compared with.
 * - 50 connections × 100 records (the HTTP target), over every transport and peer.
 * - consumer: fetch throughput from the page cache (TCP, HTTP, Redis XRANGE) and end-to-end
 *   latency, produce → consumer sees it (TCP, HTTP long-poll, Redis XREAD BLOCK).
 * - soak: 64 producers × 100 records over TCP for 60 s, sampling the broker's RSS every second.
 * - kafka: the Kafka listener (docs/kafka.md) next to the TCP protocol on one broker started with
 *   `--kafka-port`: kcat (librdkafka) producing a file of 256-byte lines in batches of 1000
 *   (`-l`, batch.num.messages=1000, acks all) next to 1 TCP producer × 1000 records, and kafkajs,
 *   8 producers × 100 records a send, next to 8 TCP producers × 100 records; two rounds, forward
 *   then backward. The figure compared is the broker's CPU per record (user + system, from
 *   `/proc`: the clients' CPU is theirs), with the target Kafka ≤ 1.5× TCP.
 * - auth: what API keys and TLS cost (docs/security.md): 64 producers × 1 record over TCP and
 *   50 connections × 100 records over HTTP JSON, each against three fresh brokers — no keys
 *   ("plain"), an API key ("key"), an API key over TLS ("key+tls", certificates made with the
 *   `openssl` CLI) — in two rounds, forward then backward, so drift weighs on every variant alike.
 *
 * Peers and es-broker run interleaved, case by case, because runs on this 2-vCPU machine drift
 * by up to 2× between runs: only ratios measured in the same run mean something.
 *
 * Flags: `--quick` (tiny version of every case, for CI; peers at fewer points, see
 * {@link quickPeerPoint}), `--json FILE` (every figure),
 * `--markdown FILE` (the tables), `--only REGEX` (case ids), `--no-peers`, `--cpu-prof DIR`
 * (profile the broker and the generators), `--measure-ms`, `--warmup-ms`, `--soak-ms`,
 * `--data-root DIR`, `--from-json FILE` (print the tables of a saved run, measuring nothing).
 */
import {
  execFileSync,
  spawn,
  spawnSync,
  type ChildProcessWithoutNullStreams,
} from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import * as os from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { NatsConnection } from "./clients/nats.ts";
import { RedisConnection } from "./clients/resp.ts";
import {
  peerMissing,
  startDurableStreams,
  startEsBroker,
  startNats,
  startLoopback,
  startRedis,
  type EsBroker,
  type PeerServer,
  type ServerProcess,
} from "./servers.ts";
import { growthCases, growthTable, growthTargets, type StartupFigures } from "./growth.ts";
import { RssWatch } from "./proc.ts";
import { fanoutPoints, httpTables, httpTargets, runtimePoints } from "./http-cases.ts";
import type { GeneratorResult, GeneratorSpec, LatencySummary, Target } from "./spec.ts";

/** Systems a case can run against. */
export type SystemName = "es-broker" | "limit" | "loopback" | "redis" | "nats" | "ds";
/** How the load reaches the system. */
export type Transport =
  | "tcp"
  | "tcp-idempotent"
  | "tcp-inflight4"
  | "http-json"
  | "http-ndjson"
  | "in-process"
  | "resp"
  | "nats"
  | "http"
  | "durable-streams"
  | "kafka-kcat"
  | "kafka-kafkajs"
  | "http-base64"
  | "http-ndjson-base64";
/** Case families. */
export type Group =
  | "produce"
  | "fetch"
  | "e2e"
  | "soak"
  | "auth"
  | "kafka"
  | "growth"
  | "fanout"
  | "runtime";

/** One measured case, as printed and as written by `--json`. */
export interface CaseResult {
  /** Unique id, e.g. `produce b=100 P=64 parts=4 es-broker/tcp`. */
  id: string;
  /** The comparison key shared by every system measured for the same case, e.g. `produce b=100 P=64 parts=4`. */
  key: string;
  group: Group;
  system: SystemName;
  transport: Transport;
  /** Records per request (produce) or per fetch. */
  batch: number;
  /** Concurrent producers (or consumers). */
  producers: number;
  partitions: number;
  recordsPerSec: number;
  /** Value bytes per second / 10^6. */
  payloadMBps: number;
  latencyMs: LatencySummary;
  /** e2e: produce request → ack, in ms. */
  ackLatencyMs?: LatencySummary;
  /** null when the system does not tell (peers). */
  fsyncsPerSec: number | null;
  recordsPerFsync: number | null;
  /** Peak RSS of the server process during the window, MiB; null for the in-process limit. */
  serverRssPeakMiB: number | null;
  /**
   * CPU the server process used per record in the window (user + system), in µs; null when
   * unknown. Less sensitive to a shared machine than records/s: it shows the cost of the work, not
   * how much CPU the server happened to get.
   */
  serverCpuUsPerRecord?: number | null;
  /** The user part of {@link serverCpuUsPerRecord} (the rest is the kernel's), in µs; null when unknown. */
  serverUserCpuUsPerRecord?: number | null;
  /**
   * CPU the generator process (every producer's client, in one process) used per record in the
   * window (user + system), in µs: what the clients cost, on the same two cores as the server.
   * Absent where the generator does not measure it (the in-process limit).
   */
  generatorCpuUsPerRecord?: number;
  /** The user part of {@link generatorCpuUsPerRecord}, in µs. */
  generatorUserCpuUsPerRecord?: number;
  requests: number;
  records: number;
  seconds: number;
  /** Soak: RSS samples `[ms, MiB]`. */
  rssSamplesMiB?: [number, number][];
  /** Growth cases: the server's open file descriptors when the window closed. */
  serverFds?: number | null;
  /** Growth cases: the server's RSS with the topic made and no load yet, MiB. */
  rssIdleMiB?: number | null;
  /** Fan-out: records/s the readers received, summed over them, and the slowest reader's. */
  readerRecordsPerSec?: { total: number; min: number };
  /** Fan-out: records per reader answer (fetch response, SSE data chunk), over every reader. */
  readerRecordsPerAnswer?: number | null;
  /** Fan-out: produce request start → a reader receives the record, ms. */
  deliveryLatencyMs?: LatencySummary;
  /** Growth partitions cases: spawn → listening of a restart over those partitions, ms. */
  restartMs?: number | null;
  note?: string;
}

/** A target of the benchmark issue, evaluated on one run. */
export interface TargetResult {
  name: string;
  measured: string;
  /** null when a figure it needs is missing (peer not installed, case filtered out). */
  met: boolean | null;
}

/** Everything `--json` writes. */
export interface BenchReport {
  quick: boolean;
  startedAt: string;
  machine: Record<string, string>;
  servers: Record<string, string>;
  skipped: { system: string; reason: string }[];
  cases: CaseResult[];
  failures: { id: string; error: string }[];
  targets: TargetResult[];
  /** The growth cases' start-up figures (`bench/growth.ts`); absent when not measured. */
  growthStartup?: StartupFigures | null;
}

/** Bytes of every record's value. */
export const valueBytes = 256;
const batches = [1, 10, 100, 1000];
const producerCounts = [1, 8, 64];
const partitionCounts = [1, 4];

/** How long cases run (`--quick` or the full run). */
export interface Settings {
  quick: boolean;
  warmupMs: number;
  measureMs: number;
  soakMs: number;
  minRequests: number;
  fetchRecords: number;
}

/** What every case runs against and where its results go. */
export interface Env {
  root: string;
  generatorPath: string;
  dataRoot: string;
  settings: Settings;
  es: EsBroker;
  /** The loopback ceiling's bare socket server (`bench/loopback-server.mjs`). */
  loopback: PeerServer;
  redis: PeerServer | null;
  nats: PeerServer | null;
  ds: PeerServer | null;
  only: RegExp | null;
  /** The long-lived generator of `--quick` runs. */
  worker: GeneratorWorker | null;
  /** With `--cpu-prof DIR`: the broker's profile goes to DIR, the generators' to DIR/generators. */
  cpuProfileDir: string | undefined;
  results: CaseResult[];
  failures: { id: string; error: string }[];
  counter: number;
  /** Versions of clients the run used (kcat), for the report's `servers`. */
  versions: Record<string, string>;
  /** What the growth cases' start-up case measured. */
  growthStartup: StartupFigures | null;
}

const natsNote = "NATS 2.9 JetStream does not fsync per publish: not a durable peer";

// ---------------------------------------------------------------------------------------------
// Running one case

function runGenerator(env: Env, spec: GeneratorSpec): Promise<GeneratorResult> {
  if (env.settings.quick) return env.worker!.run(spec);
  const limitMs = spec.warmupMs + spec.measureMs + 300_000;
  return new Promise((resolve, reject) => {
    const profile = env.cpuProfileDir
      ? ["--cpu-prof", "--cpu-prof-dir", join(env.cpuProfileDir, "generators")]
      : [];
    const proc = spawn(process.execPath, [...profile, env.generatorPath, JSON.stringify(spec)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
    proc.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-10_000)));
    const timer = setTimeout(() => proc.kill("SIGKILL"), limitMs);
    proc.on("close", (code, signal) => {
      clearTimeout(timer);
      const last = out.trim().split("\n").at(-1) ?? "";
      if (code === 0 && last.startsWith("{")) resolve(JSON.parse(last) as GeneratorResult);
      else
        reject(new Error(`generator exited with ${code ?? signal}: ${err.trim() || out.trim()}`));
    });
  });
}

/**
 * One long-lived generator process (`generator.mjs --serve`) that runs specs one at a time: what
 * `--quick` uses, so that a tiny case does not pay a process start. Full runs start a fresh
 * process per case, so no case inherits another's heap.
 */
class GeneratorWorker {
  readonly #proc: ChildProcessWithoutNullStreams;
  #out = "";
  #err = "";
  #waiting: { resolve(r: GeneratorResult): void; reject(e: Error): void } | null = null;
  #exited = false;

  constructor(generatorPath: string, profileDir?: string) {
    const profile = profileDir
      ? ["--cpu-prof", "--cpu-prof-dir", join(profileDir, "generators")]
      : [];
    this.#proc = spawn(process.execPath, [...profile, generatorPath, "--serve"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.#proc.stdout.on("data", (d: Buffer) => {
      this.#out += d.toString();
      const nl = this.#out.indexOf("\n");
      if (nl < 0 || this.#waiting === null) return;
      const line = this.#out.slice(0, nl);
      this.#out = this.#out.slice(nl + 1);
      const waiting = this.#waiting;
      this.#waiting = null;
      const answer = JSON.parse(line) as { result?: GeneratorResult; error?: string };
      if (answer.result) waiting.resolve(answer.result);
      else waiting.reject(new Error(`generator: ${answer.error}`));
    });
    this.#proc.stderr.on(
      "data",
      (d: Buffer) => (this.#err = (this.#err + d.toString()).slice(-10_000)),
    );
    this.#proc.on("close", (code, signal) => {
      this.#exited = true;
      this.#waiting?.reject(
        new Error(`generator exited with ${code ?? signal}: ${this.#err.trim()}`),
      );
      this.#waiting = null;
    });
  }

  run(spec: GeneratorSpec): Promise<GeneratorResult> {
    if (this.#exited) return Promise.reject(new Error(`generator exited: ${this.#err.trim()}`));
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject };
      this.#proc.stdin.write(`${JSON.stringify(spec)}\n`);
    });
  }

  /** Closes stdin and waits for the process to finish. */
  close(): Promise<void> {
    if (this.#exited) return Promise.resolve();
    return new Promise((resolve) => {
      this.#proc.once("close", () => resolve());
      this.#proc.stdin.end();
    });
  }
}

export function toCase(
  base: Pick<
    CaseResult,
    "key" | "group" | "system" | "transport" | "batch" | "producers" | "partitions"
  > & { note?: string },
  r: GeneratorResult,
): CaseResult {
  const seconds = r.seconds > 0 ? r.seconds : Number.EPSILON;
  const appended = r.recordsAppended ?? r.records;
  return {
    id: `${base.key} ${base.system}/${base.transport}`,
    ...base,
    recordsPerSec: r.records / seconds,
    payloadMBps: (r.records * valueBytes) / seconds / 1e6,
    latencyMs: r.latencyMs,
    ...(r.ackLatencyMs ? { ackLatencyMs: r.ackLatencyMs } : {}),
    fsyncsPerSec: r.fsyncs === null ? null : r.fsyncs / seconds,
    recordsPerFsync: r.fsyncs === null || r.fsyncs === 0 ? null : appended / r.fsyncs,
    serverRssPeakMiB: r.rssPeakBytes === null ? null : r.rssPeakBytes / 1048576,
    serverCpuUsPerRecord:
      r.serverCpuMs === null || r.serverCpuMs === undefined || r.records === 0
        ? null
        : (r.serverCpuMs * 1000) / r.records,
    serverUserCpuUsPerRecord:
      r.serverUserCpuMs === null || r.serverUserCpuMs === undefined || r.records === 0
        ? null
        : (r.serverUserCpuMs * 1000) / r.records,
    ...(r.generatorCpuMs !== undefined && r.generatorUserCpuMs !== undefined && r.records > 0
      ? {
          generatorCpuUsPerRecord: (r.generatorCpuMs * 1000) / r.records,
          generatorUserCpuUsPerRecord: (r.generatorUserCpuMs * 1000) / r.records,
        }
      : {}),
    requests: r.requests,
    records: r.records,
    seconds: r.seconds,
    ...(r.readerRecords
      ? {
          readerRecordsPerSec: {
            total: r.readerRecords.total / seconds,
            min: r.readerRecords.min / seconds,
          },
          readerRecordsPerAnswer:
            r.readerRecords.answers === 0 ? null : r.readerRecords.total / r.readerRecords.answers,
        }
      : {}),
    ...(r.deliveryLatencyMs ? { deliveryLatencyMs: r.deliveryLatencyMs } : {}),
    ...(r.rssSamples
      ? { rssSamplesMiB: r.rssSamples.map(([t, b]): [number, number] => [t, b / 1048576]) }
      : {}),
  };
}

function fmt(n: number | null | undefined, digits = 0): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "—";
  return n.toLocaleString("en-US", {
    maximumFractionDigits: digits,
    minimumFractionDigits: digits,
  });
}

function printCase(c: CaseResult): void {
  const l = c.latencyMs;
  process.stdout.write(
    `${c.id.padEnd(52)} ${fmt(c.recordsPerSec).padStart(10)} rec/s ${fmt(c.payloadMBps, 1).padStart(7)} MB/s  p50 ${fmt(l.p50, 2)} p99 ${fmt(l.p99, 2)} max ${fmt(l.max, 1)} ms` +
      `  fsync/s ${fmt(c.fsyncsPerSec)} rec/fsync ${fmt(c.recordsPerFsync, 1)}  rss ${fmt(c.serverRssPeakMiB, 1)} MiB  cpu ${fmt(c.serverCpuUsPerRecord, 1)} µs/rec (user ${fmt(c.serverUserCpuUsPerRecord, 1)})` +
      (c.generatorCpuUsPerRecord === undefined
        ? ""
        : `  clients ${fmt(c.generatorCpuUsPerRecord, 1)} µs/rec (user ${fmt(c.generatorUserCpuUsPerRecord, 1)})`) +
      "\n",
  );
}

/**
 * One HTTP request on a fresh connection that is closed afterwards (no keep-alive pool in the
 * harness, so a server's graceful shutdown never waits on an idle connection of ours).
 */
function httpCall(
  method: string,
  url: string,
  body?: unknown,
  contentType = "application/json",
  security: { apiKey?: string; caPem?: string } = {},
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = { "content-type": contentType };
    if (payload) headers["content-length"] = String(payload.length);
    if (security.apiKey !== undefined) headers.authorization = `Bearer ${security.apiKey}`;
    const send = url.startsWith("https:")
      ? (u: string, o: http.RequestOptions, cb: (res: http.IncomingMessage) => void) =>
          https.request(u, { ...o, ca: security.caPem }, cb)
      : http.request;
    const req = send(url, { method, agent: false, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(payload);
  });
}

async function esRequest(
  env: Env,
  method: string,
  path: string,
  body?: unknown,
  variant?: AuthVariant,
): Promise<string> {
  const base = variant?.es.httpUrl ?? env.es.httpUrl;
  const res = await httpCall(method, `${base}${path}`, body, "application/json", {
    apiKey: variant?.adminKey,
    caPem: variant?.caPem,
  });
  if (res.status < 200 || res.status > 299)
    throw new Error(`${method} ${path}: HTTP ${res.status} ${res.text}`);
  return res.text;
}

/**
 * Runs one case against one system: makes its topic / keys / streams, runs the generator, removes
 * them again. A failure is recorded and reported, and the run goes on.
 */
export async function runCase(
  env: Env,
  base: Pick<
    CaseResult,
    "key" | "group" | "system" | "transport" | "batch" | "producers" | "partitions"
  > & { note?: string; variant?: AuthVariant; es?: EsBroker },
  makeSpec: (target: Target) => GeneratorSpec,
): Promise<CaseResult | null> {
  const id = `${base.key} ${base.system}/${base.transport}`;
  if (env.only && !env.only.test(id)) return null;
  const n = ++env.counter;
  const name = `bench${n}`;
  let target: Target;
  let teardown: () => Promise<void> = async () => {};
  try {
    switch (base.system) {
      case "es-broker": {
        if (base.transport === "durable-streams") {
          // es-broker speaking the Durable Streams protocol to the same load generator as the
          // reference server: one stream per partition, `<name>-<p>`.
          for (let p = 0; p < base.partitions; p++) {
            const res = await httpCall("PUT", `${env.es.httpUrl}/v1/stream/${name}-${p}`);
            if (res.status !== 201)
              throw new Error(`stream create: HTTP ${res.status} ${res.text}`);
          }
          teardown = async () => {
            for (let p = 0; p < base.partitions; p++)
              await esRequest(env, "DELETE", `/v1/stream/${name}-${p}`);
          };
          target = { kind: "ds", url: env.es.httpUrl, stream: name };
          break;
        }
        const variant = base.variant;
        const es = variant?.es ?? base.es ?? env.es;
        const security = { apiKey: variant?.producerKey, caPem: variant?.caPem };
        const on = variant ?? (base.es ? { name: "plain" as const, es: base.es } : undefined);
        await esRequest(env, "POST", "/v1/topics", { name, partitions: base.partitions }, on);
        teardown = async () =>
          void (await esRequest(env, "DELETE", `/v1/topics/${name}`, undefined, on));
        if (base.transport === "kafka-kafkajs") {
          if (es.kafka === undefined) throw new Error("this broker has no Kafka listener");
          target = { kind: "kafka-kafkajs", host: es.kafka.host, port: es.kafka.port, topic: name };
          break;
        }
        const inFlight =
          base.transport === "tcp-inflight4"
            ? 4
            : base.transport === "tcp-idempotent"
              ? 1
              : undefined;
        target =
          base.transport === "tcp" || inFlight !== undefined
            ? {
                kind: "es-tcp",
                host: es.tcp.host,
                port: es.tcp.port,
                topic: name,
                ...(inFlight === undefined ? {} : { idempotentInFlight: inFlight }),
                ...security,
              }
            : {
                kind: "es-http",
                url: es.httpUrl,
                topic: name,
                body: base.transport === "http-json" ? "json" : "ndjson",
                ...security,
              };
        break;
      }
      case "limit": {
        const dir = join(env.dataRoot, "limit");
        fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
        target = { kind: "limit", dir };
        break;
      }
      case "loopback": {
        target = {
          kind: "loopback",
          host: env.loopback.host,
          port: env.loopback.port,
          topic: name,
        };
        break;
      }
      case "redis": {
        const redis = env.redis!;
        target = { kind: "redis", host: redis.host, port: redis.port, key: name };
        teardown = async () => {
          const c = await RedisConnection.connect(redis);
          try {
            await c.call(
              "DEL",
              ...Array.from({ length: base.partitions }, (_, p) => `${name}:${p}`),
            );
            if (env.settings.quick) return;
            // Keep the append-only file small between cases (automatic rewrites are off).
            await c.call("BGREWRITEAOF");
            for (let i = 0; i < 600; i++) {
              const info = String(await c.call("INFO", "persistence"));
              if (/aof_rewrite_in_progress:0/.test(info) && /aof_rewrite_scheduled:0/.test(info))
                break;
              await new Promise((r) => setTimeout(r, 50));
            }
          } finally {
            c.close();
          }
        };
        break;
      }
      case "nats": {
        const nats = env.nats!;
        const c = await NatsConnection.connect(nats);
        try {
          for (let p = 0; p < base.partitions; p++) {
            const reply = await c.api(`$JS.API.STREAM.CREATE.${name}_${p}`, {
              name: `${name}_${p}`,
              subjects: [`${name}.${p}`],
              storage: "file",
              retention: "limits",
              discard: "old",
              num_replicas: 1,
            });
            if ("error" in reply)
              throw new Error(`NATS stream create: ${JSON.stringify(reply.error)}`);
          }
        } finally {
          c.close();
        }
        target = { kind: "nats", host: nats.host, port: nats.port, stream: name };
        teardown = async () => {
          const d = await NatsConnection.connect(nats);
          try {
            for (let p = 0; p < base.partitions; p++)
              await d.api(`$JS.API.STREAM.DELETE.${name}_${p}`, {});
          } finally {
            d.close();
          }
        };
        break;
      }
      case "ds": {
        const ds = env.ds!;
        for (let p = 0; p < base.partitions; p++) {
          const res = await httpCall("PUT", `${ds.url}/v1/stream/${name}-${p}`);
          if (res.status !== 201 && res.status !== 200)
            throw new Error(`Durable Streams create: HTTP ${res.status}`);
        }
        target = { kind: "ds", url: ds.url!, stream: name };
        teardown = async () => {
          for (let p = 0; p < base.partitions; p++)
            await httpCall("DELETE", `${ds.url}/v1/stream/${name}-${p}`).catch(() => {});
        };
        break;
      }
    }
    const result = await runGenerator(env, makeSpec(target));
    const { variant: _variant, es: _es, ...described } = base;
    const c = toCase(described, result);
    if (base.note) c.note = base.note;
    env.results.push(c);
    printCase(c);
    return c;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    env.failures.push({ id, error: message });
    process.stdout.write(`${id.padEnd(52)} FAILED: ${message.split("\n")[0]}\n`);
    return null;
  } finally {
    await teardown().catch((err: unknown) =>
      process.stdout.write(`${id}: cleanup failed: ${String(err)}\n`),
    );
  }
}

export function serverPid(env: Env, system: SystemName): number | undefined {
  if (system === "es-broker") return env.es.pid;
  if (system === "redis") return env.redis?.pid;
  if (system === "loopback") return env.loopback.pid;
  if (system === "nats") return env.nats?.pid;
  if (system === "ds") return env.ds?.pid;
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// The case list

async function producePoint(
  env: Env,
  batch: number,
  producers: number,
  partitions: number,
  systems: { transport: Transport; system: SystemName }[],
): Promise<void> {
  const s = env.settings;
  const key = `produce b=${batch} P=${producers} parts=${partitions}`;
  for (const { system, transport } of systems) {
    if (system === "redis" && !env.redis) continue;
    if (system === "nats" && !env.nats) continue;
    if (system === "ds" && !env.ds) continue;
    // Quick runs measure peers, and es-broker's Durable Streams front door (compared with a
    // peer), only at the quick points.
    const peerLike = system !== "es-broker" || transport === "durable-streams";
    if (s.quick && peerLike && !quickPeerPoint(producers, partitions)) continue;
    await runCase(
      env,
      {
        key,
        group: "produce",
        system,
        transport,
        batch,
        producers,
        partitions,
        ...(system === "nats" ? { note: natsNote } : {}),
      },
      (target) => ({
        mode: "produce",
        target,
        batch,
        producers,
        partitions,
        valueBytes,
        warmupMs: s.warmupMs,
        measureMs: s.measureMs,
        minRequests: s.minRequests,
        ...(system === "es-broker" ? { metricsUrl: `${env.es.httpUrl}/v1/admin/metrics` } : {}),
        serverPid: serverPid(env, system),
      }),
    );
  }
}

/**
 * In `--quick` runs, peers are measured only with 8 producers on 1 partition (every batch size)
 * and in the 50-connection case: that exercises every peer client path (pipelines of each size,
 * concurrency) at a sixth of the cost. es-broker and the disk limit run every case.
 */
export function quickPeerPoint(producers: number, partitions: number): boolean {
  return partitions === 1 && (producers === 8 || producers === 50);
}

const everySystem: { transport: Transport; system: SystemName }[] = [
  { system: "es-broker", transport: "tcp" },
  { system: "es-broker", transport: "http-json" },
  { system: "es-broker", transport: "http-ndjson" },
  { system: "es-broker", transport: "durable-streams" },
  { system: "redis", transport: "resp" },
  { system: "nats", transport: "nats" },
  { system: "ds", transport: "http" },
];

/**
 * One producer × 1 000 records only (issue #22's "Large batches"): the client's
 * IdempotentProducer with one batch in flight, and with four (`maxInFlight` 4, four sends
 * outstanding), beside plain `produce` with one.
 */
const pipelineSystems: { transport: Transport; system: SystemName }[] = [
  { system: "es-broker", transport: "tcp-idempotent" },
  { system: "es-broker", transport: "tcp-inflight4" },
];

/**
 * The disk limit for `batch`, measured right before the cases it is compared with (the cases of
 * `producers` producers): its key is `limit b=<batch> P=<producers>`, though the loop itself has
 * one writer. Measuring it again per producer count keeps each ratio's two figures minutes apart
 * at most, on a machine whose disk speed drifts.
 */
async function limitPoint(env: Env, batch: number, producers: number): Promise<void> {
  const s = env.settings;
  await runCase(
    env,
    {
      key: `limit b=${batch} P=${producers}`,
      group: "produce",
      system: "limit",
      transport: "in-process",
      batch,
      producers: 1,
      partitions: 1,
    },
    (target) => ({
      mode: "produce",
      target,
      batch,
      producers: 1,
      partitions: 1,
      valueBytes,
      warmupMs: s.warmupMs,
      measureMs: s.measureMs,
      minRequests: s.minRequests,
    }),
  );
}

/**
 * The loopback ceiling for `batch` records from one producer, measured right before the cases it
 * is compared with: the same Produce frames es-broker gets, from the same load generator, through
 * a bare socket round trip to a server that stores nothing and answers each frame with a
 * 30-byte Produce response (`bench/loopback-server.mjs`). What one closed-loop connection can
 * move on this machine with no broker at all.
 */
async function loopbackPoint(env: Env, batch: number): Promise<void> {
  const s = env.settings;
  await runCase(
    env,
    {
      key: `loopback b=${batch} P=1`,
      group: "produce",
      system: "loopback",
      transport: "tcp",
      batch,
      producers: 1,
      partitions: 1,
    },
    (target) => ({
      mode: "produce",
      target,
      batch,
      producers: 1,
      partitions: 1,
      valueBytes,
      warmupMs: s.warmupMs,
      measureMs: s.measureMs,
      minRequests: s.minRequests,
      serverPid: serverPid(env, "loopback"),
    }),
  );
}

async function runAll(env: Env): Promise<void> {
  const s = env.settings;
  for (const batch of batches) {
    for (const producers of producerCounts) {
      await limitPoint(env, batch, producers);
      if (producers === 1) await loopbackPoint(env, batch);
      for (const partitions of partitionCounts)
        await producePoint(
          env,
          batch,
          producers,
          partitions,
          batch === 1000 && producers === 1 && partitions === 1
            ? [...everySystem, ...pipelineSystems]
            : everySystem,
        );
    }
  }
  // The HTTP target's case: 50 connections × 100 records.
  await limitPoint(env, 100, 50);
  await producePoint(env, 100, 50, 1, everySystem);

  // Consumers: fetch throughput from the page cache.
  for (const [partitions, consumers] of [
    [1, 1],
    [4, 4],
  ] as const) {
    const key = `fetch b=1000 C=${consumers} parts=${partitions}`;
    for (const [system, transport] of [
      ["es-broker", "tcp"],
      ["es-broker", "http-json"],
      ["es-broker", "http-base64"],
      ["es-broker", "http-ndjson"],
      ["es-broker", "http-ndjson-base64"],
      ["redis", "resp"],
    ] as const) {
      if (system === "redis" && !env.redis) continue;
      await runCase(
        env,
        { key, group: "fetch", system, transport, batch: 1000, producers: consumers, partitions },
        (target) => ({
          mode: "fetch",
          target,
          partitions,
          consumers,
          records: s.fetchRecords,
          batch: 1000,
          valueBytes,
          warmupMs: s.warmupMs,
          measureMs: s.measureMs,
          minRequests: s.minRequests,
          serverPid: serverPid(env, system),
          tcp: env.es.tcp,
          ...(transport === "http-base64" || transport === "http-ndjson-base64"
            ? { encoding: "base64" as const }
            : {}),
          ...(transport === "http-ndjson" || transport === "http-ndjson-base64"
            ? { ndjson: true }
            : {}),
        }),
      );
    }
  }

  // End-to-end latency: produce → consumer sees it.
  for (const [system, transport] of [
    ["es-broker", "tcp"],
    ["es-broker", "http-ndjson"],
    ["redis", "resp"],
  ] as const) {
    if (system === "redis" && !env.redis) continue;
    await runCase(
      env,
      {
        key: "e2e b=1 P=1 parts=1",
        group: "e2e",
        system,
        transport,
        batch: 1,
        producers: 1,
        partitions: 1,
      },
      (target) => ({
        mode: "e2e",
        target,
        valueBytes,
        warmupMs: s.warmupMs,
        measureMs: s.measureMs,
        minRequests: s.minRequests,
        serverPid: serverPid(env, system),
      }),
    );
  }

  await authPoints(env);
  await kafkaPoints(env);
  await growthPoints(env);
  // Issue #22: fan-out (SSE and TCP long-poll readers) and the HTTP cases on every runtime.
  await fanoutPoints(env);
  await runtimePoints(env);

  // Soak: the broker's RSS over a long 64-producer run.
  await runCase(
    env,
    {
      key: `soak b=100 P=64 parts=1 ${s.soakMs / 1000}s`,
      group: "soak",
      system: "es-broker",
      transport: "tcp",
      batch: 100,
      producers: 64,
      partitions: 1,
    },
    (target) => ({
      mode: "produce",
      target,
      batch: 100,
      producers: 64,
      partitions: 1,
      valueBytes,
      warmupMs: s.warmupMs,
      measureMs: s.soakMs,
      minRequests: s.minRequests,
      metricsUrl: `${env.es.httpUrl}/v1/admin/metrics`,
      serverPid: env.es.pid,
      rssSampleMs: s.quick ? 100 : 1000,
    }),
  );
}

/** The growth cases (`bench/growth.ts`): partitions, connections, start-up over many segments. */
async function growthPoints(env: Env): Promise<void> {
  const s = env.settings;
  await growthCases({
    quick: s.quick,
    root: env.root,
    dataRoot: env.dataRoot,
    warmupMs: s.warmupMs,
    measureMs: s.measureMs,
    only: env.only,
    run: (spec) => runGenerator(env, spec),
    measured: (g) => {
      if (g.startup) {
        env.growthStartup = g.startup;
        const f = g.startup;
        process.stdout.write(
          `${g.key.padEnd(52)} start ${fmt(f.startMs)} ms (empty ${fmt(f.emptyStartMs)} ms), fds ${fmt(f.fdsAfterStart)} → ${fmt(f.fdsAfterReadingAll)} after reading every segment\n`,
        );
        return;
      }
      const c = toCase(
        {
          key: g.key,
          group: "growth",
          system: "es-broker",
          transport: "tcp",
          batch: 1,
          producers: g.producers,
          partitions: g.partitions,
        },
        g.result!,
      );
      c.serverFds = g.result!.serverFds ?? null;
      c.rssIdleMiB = g.rssIdleMiB;
      c.restartMs = g.restartMs ?? null;
      env.results.push(c);
      printCase(c);
    },
    failed: (id, error) => env.failures.push({ id, error }),
  });
}

/** One broker of the auth cases and how to reach it. */
interface AuthVariant {
  name: "plain" | "key" | "key+tls";
  es: EsBroker;
  /** Makes and deletes the cases' topics; absent without keys. */
  adminKey?: string;
  /** Produces: a producer key on `bench*`; absent without keys. */
  producerKey?: string;
  /** PEM of the CA of the broker's certificate; absent without TLS. */
  caPem?: string;
}

/** The auth cases: (case, variant) pairs the auth table and target compare. */
const authCases = [
  { batch: 1, producers: 64, transport: "tcp" },
  { batch: 100, producers: 50, transport: "http-json" },
] as const;

/** A CA and a server certificate for 127.0.0.1, made with the openssl CLI in `dir`. */
function makeBenchCertificates(dir: string): { cert: string; key: string; caPem: string } {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run([
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    "/CN=bench CA",
  ]);
  run(["req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
  fs.writeFileSync(join(dir, "san.ext"), "subjectAltName=IP:127.0.0.1\n");
  run([
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.pem",
    "-days",
    "2",
    "-extfile",
    "san.ext",
  ]);
  return {
    cert: join(dir, "server.pem"),
    key: join(dir, "server.key"),
    caPem: fs.readFileSync(join(dir, "ca.pem"), "utf8"),
  };
}

/**
 * The auth cases (module comment): starts the three brokers, makes their keys over HTTP (the
 * first key of a broker without keys may be made from loopback without one), runs each case
 * against each broker in two interleaved rounds, and stops the brokers.
 */
async function authPoints(env: Env): Promise<void> {
  const s = env.settings;
  const ids = authCases.flatMap((c) =>
    ["plain", "key", "key+tls"].flatMap((v) =>
      [1, 2].map((r) => `${authKey(c, v, r)} es-broker/${c.transport}`),
    ),
  );
  if (env.only && !ids.some((id) => env.only!.test(id))) return;
  const started: EsBroker[] = [];
  try {
    const start = async (name: AuthVariant["name"], extraArgs: string[] = []) => {
      const es = await startEsBroker({
        root: env.root,
        dataDir: join(env.dataRoot, `auth-${name}`),
        extraArgs,
      });
      started.push(es);
      return es;
    };
    const withKeys = async (variant: AuthVariant): Promise<AuthVariant> => {
      const make = async (body: unknown, apiKey?: string) =>
        (
          JSON.parse(
            await httpCallChecked("POST", `${variant.es.httpUrl}/v1/admin/keys`, body, {
              apiKey,
              caPem: variant.caPem,
            }),
          ) as { key: string }
        ).key;
      const adminKey = await make({ name: "bench-admin", role: "admin" });
      const producerKey = await make(
        { name: "bench-producer", role: "producer", topics: ["bench*"] },
        adminKey,
      );
      return { ...variant, adminKey, producerKey };
    };
    const variants: AuthVariant[] = [{ name: "plain", es: await start("plain") }];
    variants.push(await withKeys({ name: "key", es: await start("key") }));
    let certs: { cert: string; key: string; caPem: string } | null = null;
    try {
      certs = makeBenchCertificates(join(env.dataRoot, "auth-certs"));
    } catch (err) {
      env.failures.push({
        id: "auth key+tls",
        error: `cannot make certificates with openssl: ${err instanceof Error ? err.message : String(err)}`,
      });
    }
    if (certs !== null) {
      const es = await start("key+tls", ["--tls-cert", certs.cert, "--tls-key", certs.key]);
      variants.push(await withKeys({ name: "key+tls", es, caPem: certs.caPem }));
    }
    for (const c of authCases) {
      for (const round of [1, 2]) {
        for (const variant of round === 1 ? variants : [...variants].reverse()) {
          await runCase(
            env,
            {
              key: authKey(c, variant.name, round),
              group: "auth",
              system: "es-broker",
              transport: c.transport,
              batch: c.batch,
              producers: c.producers,
              partitions: 1,
              variant,
            },
            (target) => ({
              mode: "produce",
              target,
              batch: c.batch,
              producers: c.producers,
              partitions: 1,
              valueBytes,
              warmupMs: s.warmupMs,
              measureMs: s.measureMs,
              minRequests: s.minRequests,
              // Metrics need an admin key on the keyed brokers; fsync counts are the other cases' business.
              ...(variant.name === "plain"
                ? { metricsUrl: `${variant.es.httpUrl}/v1/admin/metrics` }
                : {}),
              serverPid: variant.es.pid,
            }),
          );
        }
      }
    }
  } finally {
    for (const es of started.reverse()) await es.stop();
  }
}

/** The Kafka cases (module comment): each Kafka client's case and its TCP counterpart. */
const kafkaCases = [
  { client: "kcat", transport: "kafka-kcat", batch: 1000, producers: 1 },
  { client: "kafkajs", transport: "kafka-kafkajs", batch: 100, producers: 8 },
] as const;

/** The key of a Kafka case: `kafka b=1000 P=1 parts=1 kcat r1` (or `… tcp r1` for its counterpart). */
function kafkaKey(c: (typeof kafkaCases)[number], path: string, round: number): string {
  return `kafka b=${c.batch} P=${c.producers} parts=1 ${path} r${round}`;
}

/** Records in kcat's input file: large enough that start-up and connection set-up do not count. */
function kcatRecords(s: Settings): number {
  return s.quick ? 50_000 : 400_000;
}

/**
 * Writes kcat's input: `count` lines of `valueBytes` printable characters (the record values),
 * each different in its first bytes. Returns the path.
 */
function writeKcatFile(dir: string, count: number): string {
  const path = join(dir, "kcat-records.txt");
  const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const line = Buffer.alloc(valueBytes + 1, "x");
  line[valueBytes] = 0x0a;
  const fd = fs.openSync(path, "w", 0o600);
  try {
    const chunk = Buffer.alloc((valueBytes + 1) * 1000);
    for (let written = 0; written < count; ) {
      const n = Math.min(1000, count - written);
      for (let i = 0; i < n; i++) {
        let x = written + i;
        for (let j = 0; j < 8; j++, x = Math.floor(x / alphabet.length))
          line[j] = alphabet.charCodeAt(x % alphabet.length);
        line.copy(chunk, i * (valueBytes + 1));
      }
      fs.writeSync(fd, chunk, 0, n * (valueBytes + 1));
      written += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  return path;
}

/** Why kcat cannot run here, or null when it can. */
function kcatMissing(): string | null {
  const r = spawnSync("kcat", ["-V"], { encoding: "utf8" });
  return r.status === 0
    ? null
    : "kcat is not installed: install the Debian package kcat (apt-get install -y kcat)";
}

/** kcat's and librdkafka's versions, from `kcat -V` (`Version 1.7.1 (…, librdkafka 2.0.2 …)`). */
function kcatVersion(): string {
  const r = spawnSync("kcat", ["-V"], { encoding: "utf8" });
  const out = `${r.stdout ?? ""}${r.stderr ?? ""}`;
  const kcat = /Version (\S+)/.exec(out)?.[1] ?? "?";
  const rdkafka = /librdkafka (\S+)/.exec(out)?.[1] ?? "?";
  return `kcat ${kcat} (librdkafka ${rdkafka})`;
}

/**
 * One kcat run: `kcat -P -l FILE` into a new single-partition topic of `es`, timed from spawn to
 * exit, with the broker's CPU time and peak RSS over the same span ({@link RssWatch}). The run
 * counts only if kcat exits 0 and the partition then holds exactly the file's records.
 */
async function runKcat(
  env: Env,
  es: EsBroker,
  key: string,
  file: string,
  records: number,
): Promise<CaseResult | null> {
  const id = `${key} es-broker/kafka-kcat`;
  if (env.only && !env.only.test(id)) return null;
  const name = `bench${++env.counter}`;
  const url = (path: string) => `${es.httpUrl}${path}`;
  try {
    await httpCallChecked("POST", url("/v1/topics"), { name, partitions: 1 }, {});
    try {
      const metrics = async () =>
        JSON.parse(await httpCallChecked("GET", url("/v1/admin/metrics"), undefined, {})) as {
          fsyncs: number;
        };
      const before = await metrics();
      const watch = new RssWatch(es.pid);
      watch.start();
      const started = performance.now();
      const run = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const proc = spawn(
          "kcat",
          [
            "-P",
            "-b",
            `${es.kafka!.host}:${es.kafka!.port}`,
            "-t",
            name,
            "-p",
            "0",
            "-X",
            "batch.num.messages=1000",
            "-X",
            "acks=all",
            "-l",
            file,
          ],
          { stdio: ["ignore", "ignore", "pipe"] },
        );
        let stderr = "";
        proc.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
        proc.on("close", (code) => resolve({ code, stderr }));
      });
      const ms = performance.now() - started;
      const cpuMs = watch.cpuMs();
      const rss = watch.peak();
      const fsyncs = (await metrics()).fsyncs - before.fsyncs;
      if (run.code !== 0) throw new Error(`kcat exited with ${run.code}: ${run.stderr.trim()}`);
      const topic = JSON.parse(
        await httpCallChecked("GET", url(`/v1/topics/${name}`), undefined, {}),
      ) as {
        partitions: { high_watermark: number }[];
      };
      const stored = topic.partitions[0].high_watermark;
      if (stored !== records)
        throw new Error(`kcat sent ${records} records but the partition holds ${stored}`);
      const c = toCase(
        {
          key,
          group: "kafka",
          system: "es-broker",
          transport: "kafka-kcat",
          batch: 1000,
          producers: 1,
          partitions: 1,
        },
        {
          records,
          requests: 1,
          seconds: ms / 1000,
          latencyMs: { p50: ms, p99: ms, max: ms, count: 1 },
          fsyncs,
          recordsAppended: records,
          rssPeakBytes: rss,
          serverCpuMs: cpuMs,
        },
      );
      c.note = "one kcat run: records/s and latency over the whole run, start-up included";
      env.results.push(c);
      printCase(c);
      return c;
    } finally {
      await httpCallChecked("DELETE", url(`/v1/topics/${name}`), undefined, {}).catch(() => {});
    }
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    env.failures.push({ id, error: message });
    process.stdout.write(`${id.padEnd(52)} FAILED: ${message.split("\n")[0]}\n`);
    return null;
  }
}

/**
 * The Kafka cases (module comment): one broker with `--kafka-port`, every case against it in two
 * rounds. Each Kafka client's run is followed by TCP at the rate the client reached ("tcp-paced":
 * the same records per second give the broker the same number of records per fsync, which is
 * most of its CPU per record, so the comparison is of the two protocols and not of the clients'
 * speed), and flanked by TCP as fast as it goes ("tcp"): after it in round 1, before it in round 2.
 */
async function kafkaPoints(env: Env): Promise<void> {
  const s = env.settings;
  const ids = kafkaCases.flatMap((c) =>
    [1, 2].flatMap((r) => [
      `${kafkaKey(c, c.client, r)} es-broker/${c.transport}`,
      `${kafkaKey(c, "tcp-paced", r)} es-broker/tcp`,
      `${kafkaKey(c, "tcp", r)} es-broker/tcp`,
    ]),
  );
  if (env.only && !ids.some((id) => env.only!.test(id))) return;
  const missing = kcatMissing();
  if (missing !== null) {
    // Never skipped quietly: the run fails, naming the package.
    env.failures.push({ id: "kafka kcat", error: missing });
    process.stdout.write(`kafka cases: ${missing}\n`);
  }
  const es = await startEsBroker({
    root: env.root,
    dataDir: join(env.dataRoot, "kafka"),
    extraArgs: ["--kafka-port", "0"],
    cpuProfileDir: env.cpuProfileDir,
  });
  try {
    if (missing === null) env.versions.kcat = kcatVersion();
    const records = kcatRecords(s);
    const file = writeKcatFile(env.dataRoot, records);
    const variant: AuthVariant = { name: "plain", es };
    // Long enough for the broker's CPU time (10 ms ticks) to mean something in quick runs too.
    const measureMs = s.quick ? 500 : s.measureMs;
    const tcp = (c: (typeof kafkaCases)[number], round: number, recordsPerSec?: number) =>
      runCase(
        env,
        {
          key: kafkaKey(c, recordsPerSec === undefined ? "tcp" : "tcp-paced", round),
          group: "kafka",
          system: "es-broker",
          transport: "tcp",
          batch: c.batch,
          producers: c.producers,
          partitions: 1,
          variant,
        },
        (target) => ({
          mode: "produce",
          target,
          batch: c.batch,
          producers: c.producers,
          partitions: 1,
          valueBytes,
          warmupMs: s.warmupMs,
          measureMs,
          minRequests: s.minRequests,
          metricsUrl: `${es.httpUrl}/v1/admin/metrics`,
          serverPid: es.pid,
          recordsPerSec,
        }),
      );
    const kafkaRun = async (c: (typeof kafkaCases)[number], round: number) => {
      if (c.client === "kcat")
        return missing === null
          ? runKcat(env, es, kafkaKey(c, "kcat", round), file, records)
          : null;
      return runCase(
        env,
        {
          key: kafkaKey(c, c.client, round),
          group: "kafka",
          system: "es-broker",
          transport: c.transport,
          batch: c.batch,
          producers: c.producers,
          partitions: 1,
          variant,
        },
        (target) => ({
          mode: "produce",
          target,
          batch: c.batch,
          producers: c.producers,
          partitions: 1,
          valueBytes,
          warmupMs: s.warmupMs,
          measureMs,
          minRequests: s.minRequests,
          metricsUrl: `${es.httpUrl}/v1/admin/metrics`,
          serverPid: es.pid,
        }),
      );
    };
    for (const round of [1, 2]) {
      for (const c of round === 1 ? kafkaCases : [...kafkaCases].reverse()) {
        if (round === 2) await tcp(c, round);
        const measured = await kafkaRun(c, round);
        if (measured !== null) await tcp(c, round, measured.recordsPerSec);
        else if (missing === null)
          env.failures.push({
            id: `${kafkaKey(c, "tcp-paced", round)} es-broker/tcp`,
            error: `no ${c.client} rate to pace at: its run failed`,
          });
        if (round === 1) await tcp(c, round);
      }
    }
  } finally {
    await es.stop();
  }
}

/** Means of runs' records/s, broker CPU µs/record and records/fsync (null when one lacks it). */
interface KafkaMeans {
  recordsPerSec: number;
  cpuUsPerRecord: number | null;
  recordsPerFsync: number | null;
  rounds: number;
}

/** The Kafka cases of a run: per Kafka client, the means of its rounds and of its TCP counterparts'. */
function kafkaSummary(
  results: CaseResult[],
): { label: string; kafka: KafkaMeans; paced: KafkaMeans | null; tcp: KafkaMeans | null }[] {
  const out = [];
  const meanOf = (runs: CaseResult[]): KafkaMeans | null => {
    if (runs.length === 0) return null;
    const mean = (f: (r: CaseResult) => number | null | undefined) =>
      runs.every((r) => typeof f(r) === "number")
        ? runs.reduce((n, r) => n + (f(r) as number), 0) / runs.length
        : null;
    return {
      recordsPerSec: mean((r) => r.recordsPerSec)!,
      cpuUsPerRecord: mean((r) => r.serverCpuUsPerRecord),
      recordsPerFsync: mean((r) => r.recordsPerFsync),
      rounds: runs.length,
    };
  };
  for (const c of kafkaCases) {
    const runsOf = (path: string) =>
      results.filter(
        (r) =>
          r.group === "kafka" &&
          r.key.startsWith(`kafka b=${c.batch} P=${c.producers} parts=1 ${path} r`),
      );
    const kafka = meanOf(runsOf(c.client));
    if (kafka === null) continue;
    out.push({
      label: `${c.client} ${c.producers} × ${c.batch}`,
      kafka,
      paced: meanOf(runsOf("tcp-paced")),
      tcp: meanOf(runsOf("tcp")),
    });
  }
  return out;
}

/** The key of an auth case: `auth b=1 P=64 parts=1 key+tls r2`. */
function authKey(c: (typeof authCases)[number], variant: string, round: number): string {
  return `auth b=${c.batch} P=${c.producers} parts=1 ${variant} r${round}`;
}

/** {@link httpCall} that throws on a status other than 2xx; resolves with the body. */
async function httpCallChecked(
  method: string,
  url: string,
  body: unknown,
  security: { apiKey?: string; caPem?: string },
): Promise<string> {
  const res = await httpCall(method, url, body, "application/json", security);
  if (res.status < 200 || res.status > 299)
    throw new Error(`${method} ${url}: HTTP ${res.status} ${res.text}`);
  return res.text;
}

/** The auth cases of a run, per case and variant: the mean of the rounds' figures. */
function authSummary(results: CaseResult[]): {
  label: string;
  variant: string;
  recordsPerSec: number;
  p50: number;
  p99: number;
  cpuUsPerRecord: number | null;
  rounds: number;
}[] {
  const out = [];
  for (const c of authCases) {
    for (const variant of ["plain", "key", "key+tls"]) {
      const runs = results.filter(
        (r) =>
          r.group === "auth" &&
          r.key.startsWith(`auth b=${c.batch} P=${c.producers} parts=1 ${variant} r`),
      );
      if (runs.length === 0) continue;
      const mean = (f: (r: CaseResult) => number) =>
        runs.reduce((n, r) => n + f(r), 0) / runs.length;
      const cpu = runs.every((r) => typeof r.serverCpuUsPerRecord === "number")
        ? mean((r) => r.serverCpuUsPerRecord as number)
        : null;
      out.push({
        label: `${c.producers} × ${c.batch} ${c.transport === "tcp" ? "TCP" : "HTTP JSON"}`,
        variant,
        recordsPerSec: mean((r) => r.recordsPerSec),
        p50: mean((r) => r.latencyMs.p50),
        p99: mean((r) => r.latencyMs.p99),
        cpuUsPerRecord: cpu,
        rounds: runs.length,
      });
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tables and targets

function find(
  results: CaseResult[],
  key: string,
  system: SystemName,
  transport?: Transport,
): CaseResult | undefined {
  return results.find(
    (c) =>
      c.key === key &&
      c.system === system &&
      (transport === undefined || c.transport === transport),
  );
}

function ratio(a: CaseResult | undefined, b: CaseResult | undefined): number | null {
  if (!a || !b || b.recordsPerSec === 0) return null;
  return a.recordsPerSec / b.recordsPerSec;
}

function fmtRatio(r: number | null): string {
  return r === null ? "—" : `${r.toFixed(2)}×`;
}

/** The tables of a run, as Markdown. */
export function markdownTables(report: BenchReport): string {
  const results = report.cases;
  const lines: string[] = [];
  lines.push(
    "### Produce: records/s, and es-broker as a ratio of each system in the same case",
    "",
  );
  lines.push(
    "Ratios above 1 mean es-broker is faster. `limit` is the in-process write + fdatasync loop for the same batch size. NATS\\* does not fsync per publish (not a durable peer).",
    "",
  );
  lines.push(
    "| case | es tcp | es http json | es http ndjson | es durable streams | limit | redis | nats\\* | durable streams | tcp ÷ limit | tcp ÷ redis | tcp ÷ nats\\* | json ÷ ds | ndjson ÷ ds | es ds ÷ ds |",
  );
  lines.push("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
  const keys = [
    ...new Set(
      results
        .filter((c) => c.group === "produce" && c.system !== "limit" && c.system !== "loopback")
        .map((c) => c.key),
    ),
  ];
  for (const key of keys) {
    const batch = Number(/b=(\d+)/.exec(key)![1]);
    const tcp = find(results, key, "es-broker", "tcp");
    const json = find(results, key, "es-broker", "http-json");
    const ndjson = find(results, key, "es-broker", "http-ndjson");
    const esDs = find(results, key, "es-broker", "durable-streams");
    const limit = find(results, `limit b=${batch} P=${/P=(\d+)/.exec(key)![1]}`, "limit");
    const redis = find(results, key, "redis");
    const nats = find(results, key, "nats");
    const ds = find(results, key, "ds");
    const r = (c: CaseResult | undefined) => fmt(c?.recordsPerSec);
    lines.push(
      `| ${key.replace("produce ", "")} | ${r(tcp)} | ${r(json)} | ${r(ndjson)} | ${r(esDs)} | ${r(limit)} | ${r(redis)} | ${r(nats)} | ${r(ds)} | ${fmtRatio(ratio(tcp, limit))} | ${fmtRatio(ratio(tcp, redis))} | ${fmtRatio(ratio(tcp, nats))} | ${fmtRatio(ratio(json, ds))} | ${fmtRatio(ratio(ndjson, ds))} | ${fmtRatio(ratio(esDs, ds))} |`,
    );
  }
  lines.push("");
  lines.push("### Consumers", "");
  lines.push(
    "Last column: fetch, es-broker TCP records/s ÷ this system's; e2e, es-broker TCP p50 latency ÷ this system's (below 1 is better for es-broker).",
    "",
  );
  lines.push(
    "| case | system | records/s | MB/s | p50 ms | p99 ms | max ms | ack p50/p99 ms | server RSS MiB | es tcp ÷ this |",
  );
  lines.push("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|");
  for (const c of results.filter((x) => x.group === "fetch" || x.group === "e2e")) {
    const es = find(results, c.key, "es-broker", "tcp");
    // fetch: es-broker's records/s ÷ this system's; e2e: es-broker's p50 latency ÷ this system's (lower is better).
    const rel =
      c.system === "es-broker"
        ? ""
        : c.group === "e2e"
          ? `${fmtRatio(es && c.latencyMs.p50 > 0 ? es.latencyMs.p50 / c.latencyMs.p50 : null)} latency`
          : fmtRatio(ratio(es, c));
    lines.push(
      `| ${c.key} | ${c.system}/${c.transport} | ${fmt(c.recordsPerSec)} | ${fmt(c.payloadMBps, 1)} | ${fmt(c.latencyMs.p50, 2)} | ${fmt(c.latencyMs.p99, 2)} | ${fmt(c.latencyMs.max, 1)} | ${c.ackLatencyMs ? `${fmt(c.ackLatencyMs.p50, 2)} / ${fmt(c.ackLatencyMs.p99, 2)}` : ""} | ${fmt(c.serverRssPeakMiB, 1)} | ${rel} |`,
    );
  }
  lines.push("");
  lines.push("### Every case", "");
  lines.push(
    "| case | system | records/s | MB/s | p50 ms | p99 ms | max ms | fsyncs/s | records/fsync | server RSS MiB | server CPU µs/record |",
  );
  lines.push("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
  for (const c of results) {
    lines.push(
      `| ${c.key} | ${c.system}/${c.transport} | ${fmt(c.recordsPerSec)} | ${fmt(c.payloadMBps, 1)} | ${fmt(c.latencyMs.p50, 2)} | ${fmt(c.latencyMs.p99, 2)} | ${fmt(c.latencyMs.max, 1)} | ${fmt(c.fsyncsPerSec)} | ${fmt(c.recordsPerFsync, 1)} | ${fmt(c.serverRssPeakMiB, 1)} | ${fmt(c.serverCpuUsPerRecord, 1)} |`,
    );
  }
  const soak = results.find((c) => c.group === "soak");
  if (soak?.rssSamplesMiB && soak.rssSamplesMiB.length > 0) {
    lines.push(
      "",
      `### Soak: es-broker RSS (MiB) every ${soak.rssSamplesMiB.length > 1 ? soak.rssSamplesMiB[1][0] - soak.rssSamplesMiB[0][0] : 0} ms`,
      "",
    );
    lines.push(soak.rssSamplesMiB.map(([, m]) => m.toFixed(0)).join(" "));
  }
  const auth = authSummary(results);
  if (auth.length > 0) {
    lines.push(
      "",
      "### What API keys and TLS cost: the same case against a broker without keys, with a key, and with a key over TLS",
      "",
      "Means of the rounds (each variant measured forward, then backward). Ratios are each variant ÷ plain; for CPU µs/record below 1 is cheaper.",
      "",
    );
    lines.push(
      "| case | variant | records/s | ÷ plain | p50 ms | p99 ms | server CPU µs/record | ÷ plain | rounds |",
    );
    lines.push("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for (const a of auth) {
      const plain = auth.find((b) => b.label === a.label && b.variant === "plain");
      lines.push(
        `| ${a.label} | ${a.variant} | ${fmt(a.recordsPerSec)} | ${fmtRatio(plain ? a.recordsPerSec / plain.recordsPerSec : null)} | ${fmt(a.p50, 2)} | ${fmt(a.p99, 2)} | ${fmt(a.cpuUsPerRecord, 1)} | ${fmtRatio(plain?.cpuUsPerRecord && a.cpuUsPerRecord !== null ? a.cpuUsPerRecord / plain.cpuUsPerRecord : null)} | ${a.rounds} |`,
      );
    }
  }
  const kafka = kafkaSummary(results);
  if (kafka.length > 0) {
    lines.push(
      "",
      "### The Kafka listener next to the TCP protocol: the same 256-byte records on one broker",
      "",
      "Means of the rounds. Broker CPU is the broker process's user + system time per record (the clients' CPU is not in it). `tcp paced` is the TCP protocol at the records/s the Kafka client reached (the same records per fsync, which are most of the broker's CPU per record); `tcp` as fast as it goes. The target compares Kafka with tcp paced.",
      "",
    );
    lines.push(
      "| Kafka client | path | records/s | records/fsync | broker CPU µs/record | Kafka CPU ÷ this | rounds |",
    );
    lines.push("|---|---|--:|--:|--:|--:|--:|");
    for (const k of kafka)
      for (const [path, m] of [
        ["kafka", k.kafka],
        ["tcp paced", k.paced],
        ["tcp", k.tcp],
      ] as const) {
        if (m === null) continue;
        const cpuRatio =
          path === "kafka" || k.kafka.cpuUsPerRecord === null || !m.cpuUsPerRecord
            ? ""
            : fmtRatio(k.kafka.cpuUsPerRecord / m.cpuUsPerRecord);
        lines.push(
          `| ${k.label} | ${path} | ${fmt(m.recordsPerSec)} | ${fmt(m.recordsPerFsync, 1)} | ${fmt(m.cpuUsPerRecord, 2)} | ${cpuRatio} | ${m.rounds} |`,
        );
      }
  }
  lines.push(...growthTable(results, report.growthStartup ?? null));
  lines.push(...httpTables(results));
  lines.push("", "### Targets", "");
  lines.push("| target | measured | met |");
  lines.push("|---|---|---|");
  for (const t of report.targets)
    lines.push(
      `| ${t.name} | ${t.measured} | ${t.met === null ? "not measured" : t.met ? "yes" : "**no**"} |`,
    );
  if (report.skipped.length > 0) {
    lines.push("", `Skipped: ${report.skipped.map((s) => `${s.system} (${s.reason})`).join("; ")}`);
  }
  if (report.failures.length > 0) {
    lines.push(
      "",
      "Failed cases: " +
        report.failures.map((f) => `${f.id}: ${f.error.split("\n")[0]}`).join("; "),
    );
  }
  return `${lines.join("\n")}\n`;
}

/** The targets of the benchmark issue, evaluated on this run's figures. */
export function evaluateTargets(results: CaseResult[]): TargetResult[] {
  const targets: TargetResult[] = [];
  const add = (
    name: string,
    parts: { label: string; value: number | null; ok: (v: number) => boolean; unit?: string }[],
  ) => {
    const measured = parts
      .map(
        (p) =>
          `${p.label} ${p.value === null ? "—" : p.unit ? `${fmt(p.value, 1)} ${p.unit}` : `${p.value.toFixed(2)}×`}`,
      )
      .join(", ");
    const met = parts.some((p) => p.value === null) ? null : parts.every((p) => p.ok(p.value!));
    targets.push({ name, measured, met });
  };
  const tcp = (key: string) => find(results, key, "es-broker", "tcp");
  const p1b1 = "produce b=1 P=1 parts=1";
  add("1 producer × 1 record: ≥ 0.8× the fdatasync limit, ≥ 2× Redis", [
    {
      label: "÷ limit",
      value: ratio(tcp(p1b1), find(results, "limit b=1 P=1", "limit")),
      ok: (v) => v >= 0.8,
    },
    { label: "÷ redis", value: ratio(tcp(p1b1), find(results, p1b1, "redis")), ok: (v) => v >= 2 },
  ]);
  const p64b1 = "produce b=1 P=64 parts=1";
  add("64 producers × 1 record: ≥ 2× Redis", [
    {
      label: "÷ redis",
      value: ratio(tcp(p64b1), find(results, p64b1, "redis")),
      ok: (v) => v >= 2,
    },
  ]);
  const p64b100 = "produce b=100 P=64 parts=1";
  add("64 producers × 100 records over TCP: ≥ 1.0× the limit, ≥ 1.5× Redis", [
    {
      label: "÷ limit",
      value: ratio(tcp(p64b100), find(results, "limit b=100 P=64", "limit")),
      ok: (v) => v >= 1,
    },
    {
      label: "÷ redis",
      value: ratio(tcp(p64b100), find(results, p64b100, "redis")),
      ok: (v) => v >= 1.5,
    },
  ]);
  const p50 = "produce b=100 P=50 parts=1";
  for (const body of ["http-json", "http-ndjson"] as const) {
    const h = find(results, p50, "es-broker", body);
    add(
      `HTTP (${body.slice(5)}) 100 records × 50 connections: ≥ 0.5× TCP, ahead of Durable Streams`,
      [
        { label: "÷ tcp", value: ratio(h, tcp(p50)), ok: (v) => v >= 0.5 },
        { label: "÷ durable streams", value: ratio(h, find(results, p50, "ds")), ok: (v) => v > 1 },
      ],
    );
  }
  const fetch = tcp("fetch b=1000 C=1 parts=1");
  add("Consumer fetch over TCP from the page cache: ≥ 1 M records/s", [
    {
      label: "1 consumer",
      value: fetch?.recordsPerSec ?? null,
      ok: (v) => v >= 1e6,
      unit: "records/s",
    },
  ]);
  const p8b10 = tcp("produce b=10 P=8 parts=1");
  const limit10 = find(results, "limit b=10 P=8", "limit");
  add("p99 latency at 8 producers × 10 records ≤ 2× the disk's p99 fsync latency", [
    {
      label: "p99 ÷ limit p99",
      value:
        p8b10 && limit10 && limit10.latencyMs.p99 > 0
          ? p8b10.latencyMs.p99 / limit10.latencyMs.p99
          : null,
      ok: (v) => v <= 2,
    },
  ]);
  const rss64 = results.filter(
    (c) =>
      c.system === "es-broker" &&
      c.group !== "auth" &&
      c.producers === 64 &&
      c.serverRssPeakMiB !== null,
  );
  const peak = rss64.length === 0 ? null : Math.max(...rss64.map((c) => c.serverRssPeakMiB!));
  const soak = results.find((c) => c.group === "soak");
  const samples = soak?.rssSamplesMiB ?? [];
  let growth: number | null = null;
  if (samples.length >= 4) {
    // Flat: the largest RSS of the last quarter is no more than 10 % above the largest of the second quarter.
    const q = Math.floor(samples.length / 4);
    const second = Math.max(...samples.slice(q, 2 * q).map(([, m]) => m));
    const last = Math.max(...samples.slice(3 * q).map(([, m]) => m));
    growth = second > 0 ? last / second : null;
  }
  add(
    `Broker RSS under 64 producers ≤ 150 MB, flat over the soak run (${soak ? Math.round(soak.seconds) : "?"} s)`,
    [
      {
        label: "peak over 64-producer cases",
        value: peak === null ? null : (peak * 1048576) / 1e6,
        ok: (v) => v <= 150,
        unit: "MB",
      },
      { label: "soak last quarter ÷ second quarter", value: growth, ok: (v) => v <= 1.1 },
    ],
  );
  // Issue #22, the TCP request path: small requests against Redis in the same run, large batches
  // against the loopback ceiling, fetch throughput.
  const redis = (key: string) => find(results, key, "redis");
  const cpu = (c: CaseResult | undefined) => c?.serverCpuUsPerRecord ?? null;
  const p64Cpu = cpu(tcp(p64b1));
  const p64RedisCpu = cpu(redis(p64b1));
  add("#22: 64 × 1 over TCP ≥ 1.0× Redis, broker CPU per record ≤ Redis's", [
    { label: "÷ redis", value: ratio(tcp(p64b1), redis(p64b1)), ok: (v) => v >= 1 },
    {
      label: "CPU/record ÷ redis",
      value: p64Cpu !== null && p64RedisCpu ? p64Cpu / p64RedisCpu : null,
      ok: (v) => v <= 1,
    },
  ]);
  add("#22: 1 × 1 over TCP ≥ 1.0× Redis, ≥ 0.7× the in-process fdatasync limit", [
    { label: "÷ redis", value: ratio(tcp(p1b1), redis(p1b1)), ok: (v) => v >= 1 },
    {
      label: "÷ limit",
      value: ratio(tcp(p1b1), find(results, "limit b=1 P=1", "limit")),
      ok: (v) => v >= 0.7,
    },
  ]);
  const p8b10Key = "produce b=10 P=8 parts=1";
  const redis8 = redis(p8b10Key);
  add("#22: p99 at 8 × 10 over TCP ≤ Redis's p99", [
    {
      label: "p99 ÷ redis p99",
      value:
        p8b10 && redis8 && redis8.latencyMs.p99 > 0
          ? p8b10.latencyMs.p99 / redis8.latencyMs.p99
          : null,
      ok: (v) => v <= 1,
    },
  ]);
  const p1b1000 = tcp("produce b=1000 P=1 parts=1");
  const loopback1000 = find(results, "loopback b=1000 P=1", "loopback");
  const limit1000 = find(results, "limit b=1000 P=1", "limit");
  // One request in flight: a round trip and a write + fdatasync cannot overlap, so the fastest a
  // durable broker can be is both one after the other (shown next to the target, not part of it).
  const serial =
    loopback1000 && limit1000 && loopback1000.recordsPerSec > 0 && limit1000.recordsPerSec > 0
      ? 1 / (1 / loopback1000.recordsPerSec + 1 / limit1000.recordsPerSec)
      : null;
  add("#22: 1 × 1000 over TCP ≥ 0.8× the loopback ceiling", [
    { label: "÷ loopback", value: ratio(p1b1000, loopback1000), ok: (v) => v >= 0.8 },
  ]);
  add("#22 (context): 1 × 1000 over TCP ÷ loopback and fdatasync limit one after the other", [
    {
      label: "÷ serial bound",
      value: p1b1000 && serial ? p1b1000.recordsPerSec / serial : null,
      ok: () => true,
    },
  ]);
  // The same with the idempotent producer keeping four batches in flight (its pipeline).
  const p1b1000Piped = find(results, "produce b=1000 P=1 parts=1", "es-broker", "tcp-inflight4");
  add("#22: 1 × 1000 over TCP, four batches in flight ≥ 0.8× the loopback ceiling", [
    { label: "÷ loopback", value: ratio(p1b1000Piped, loopback1000), ok: (v) => v >= 0.8 },
    {
      label: "÷ serial bound",
      value: p1b1000Piped && serial ? p1b1000Piped.recordsPerSec / serial : null,
      ok: () => true,
    },
  ]);
  add("#22: consumer fetch over TCP from the page cache ≥ 1.5 M records/s (1 consumer)", [
    {
      label: "1 consumer",
      value: fetch?.recordsPerSec ?? null,
      ok: (v) => v >= 1.5e6,
      unit: "records/s",
    },
  ]);
  const auth = authSummary(results);
  const keyed = (label: string) => {
    const plain = auth.find((a) => a.label === label && a.variant === "plain");
    const key = auth.find((a) => a.label === label && a.variant === "key");
    return plain && key && plain.recordsPerSec > 0 ? key.recordsPerSec / plain.recordsPerSec : null;
  };
  add(
    "Authentication costs ≤ 5 %: records/s with an API key ÷ without (64 × 1 TCP, 50 × 100 HTTP JSON)",
    [
      { label: "64 × 1 TCP", value: keyed("64 × 1 TCP"), ok: (v) => v >= 0.95 },
      { label: "50 × 100 HTTP JSON", value: keyed("50 × 100 HTTP JSON"), ok: (v) => v >= 0.95 },
    ],
  );
  const kafka = kafkaSummary(results);
  const kafkaCpu = (client: string) => {
    const k = kafka.find((x) => x.label.startsWith(`${client} `));
    return k && k.kafka.cpuUsPerRecord !== null && k.paced?.cpuUsPerRecord
      ? k.kafka.cpuUsPerRecord / k.paced.cpuUsPerRecord
      : null;
  };
  add(
    "The Kafka listener costs the broker ≤ 1.5× the TCP protocol's CPU per record at the same pace (kcat 1 × 1000, kafkajs 8 × 100)",
    [
      { label: "kcat", value: kafkaCpu("kcat"), ok: (v) => v <= 1.5 },
      { label: "kafkajs", value: kafkaCpu("kafkajs"), ok: (v) => v <= 1.5 },
    ],
  );
  targets.push(...httpTargets(results));
  return targets;
}

function describeMachine(dataRoot: string): Record<string, string> {
  const cpus = os.cpus();
  const findmnt = spawnSync("findmnt", ["-no", "FSTYPE,SOURCE,OPTIONS", "-T", dataRoot]);
  return {
    cpu: `${cpus[0]?.model ?? "?"} × ${cpus.length} vCPU`,
    memory: `${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    kernel: `${os.type()} ${os.release()}`,
    node: process.version,
    dataFs: findmnt.status === 0 ? findmnt.stdout.toString().trim() : "?",
    // Other work on the machine skews absolute figures (ratios within one run much less).
    loadAverageAtEnd: os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" "),
  };
}

// ---------------------------------------------------------------------------------------------

/** Runs the harness. Resolves with the exit code (1 if any case failed or measured nothing). */
export async function main(
  argv: string[],
  paths: { root: string; generatorPath: string },
): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: "boolean", default: false },
      json: { type: "string" },
      markdown: { type: "string" },
      only: { type: "string" },
      "no-peers": { type: "boolean", default: false },
      "cpu-prof": { type: "string" },
      "warmup-ms": { type: "string" },
      "measure-ms": { type: "string" },
      "soak-ms": { type: "string" },
      "data-root": { type: "string" },
      "from-json": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(
      "Usage: npm run bench -- [--quick] [--json FILE] [--markdown FILE] [--only REGEX] [--no-peers]\n" +
        "                       [--cpu-prof DIR] [--warmup-ms MS] [--measure-ms MS] [--soak-ms MS] [--data-root DIR]\n" +
        "       npm run bench -- --from-json FILE [--markdown FILE]   (tables of a saved run)\n",
    );
    return 0;
  }
  if (values["from-json"]) {
    // Re-render the tables (and re-evaluate the targets) of a saved run without measuring.
    const saved = JSON.parse(fs.readFileSync(values["from-json"], "utf8")) as BenchReport;
    const tables = markdownTables({
      ...saved,
      targets: [
        ...evaluateTargets(saved.cases),
        ...growthTargets(saved.cases, saved.growthStartup ?? null),
      ],
    });
    process.stdout.write(tables);
    if (values.markdown) fs.writeFileSync(values.markdown, tables);
    return 0;
  }
  const quick = values.quick!;
  const num = (v: string | undefined, fallback: number) => (v === undefined ? fallback : Number(v));
  const settings: Settings = {
    quick,
    warmupMs: num(values["warmup-ms"], quick ? 10 : 1000),
    measureMs: num(values["measure-ms"], quick ? 50 : 3000),
    soakMs: num(values["soak-ms"], quick ? 300 : 60_000),
    minRequests: 1,
    fetchRecords: quick ? 2000 : 100_000,
  };
  const dataRoot = fs.mkdtempSync(join(values["data-root"] ?? os.tmpdir(), "es-bench-"));
  const skipped: { system: string; reason: string }[] = [];
  const servers: ServerProcess[] = [];
  const startedAt = new Date().toISOString();
  const loadAtStart = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
  const profileDir = values["cpu-prof"];
  if (profileDir) fs.mkdirSync(profileDir, { recursive: true });
  let env: Env | null = null;
  try {
    const es = await startEsBroker({
      root: paths.root,
      dataDir: join(dataRoot, "es-broker"),
      cpuProfileDir: profileDir,
    });
    servers.push(es);
    const startPeer = async (peer: "redis" | "nats" | "ds"): Promise<PeerServer | null> => {
      if (values["no-peers"]) {
        skipped.push({ system: peer, reason: "--no-peers" });
        return null;
      }
      const missing = peerMissing(peer, paths.root);
      if (missing) {
        skipped.push({ system: peer, reason: missing });
        return null;
      }
      try {
        const server =
          peer === "redis"
            ? await startRedis(join(dataRoot, "redis"))
            : peer === "nats"
              ? await startNats(join(dataRoot, "nats"))
              : await startDurableStreams(paths.root, join(dataRoot, "durable-streams"));
        servers.push(server);
        return server;
      } catch (err) {
        skipped.push({
          system: peer,
          reason: `failed to start: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`,
        });
        return null;
      }
    };
    const loopback = await startLoopback(paths.root);
    servers.push(loopback);
    const redis = await startPeer("redis");
    const nats = await startPeer("nats");
    const ds = await startPeer("ds");
    for (const s of skipped) process.stdout.write(`skipping ${s.system}: ${s.reason}\n`);
    process.stdout.write(
      `servers: ${servers.map((s) => `${s.name} (${s.version}, pid ${s.pid})`).join(", ")}\ndata: ${dataRoot}\n`,
    );
    env = {
      root: paths.root,
      generatorPath: paths.generatorPath,
      dataRoot,
      settings,
      es,
      loopback,
      redis,
      nats,
      ds,
      only: values.only ? new RegExp(values.only) : null,
      cpuProfileDir: profileDir,
      worker: quick ? new GeneratorWorker(paths.generatorPath, profileDir) : null,
      results: [],
      failures: [],
      counter: 0,
      versions: {},
      growthStartup: null,
    };
    await runAll(env);
  } finally {
    await env?.worker?.close();
    for (const s of servers.reverse()) await s.stop();
    fs.rmSync(dataRoot, { recursive: true, force: true });
  }
  const report: BenchReport = {
    quick,
    startedAt,
    machine: {
      ...describeMachine(values["data-root"] ?? os.tmpdir()),
      loadAverageAtStart: loadAtStart,
    },
    servers: {
      ...Object.fromEntries(servers.map((s) => [s.name, s.version])),
      ...env.versions,
    },
    skipped,
    cases: env.results,
    failures: env.failures,
    targets: [...evaluateTargets(env.results), ...growthTargets(env.results, env.growthStartup)],
    growthStartup: env.growthStartup,
  };
  const tables = markdownTables(report);
  process.stdout.write(`\n${tables}`);
  if (values.json) fs.writeFileSync(values.json, `${JSON.stringify(report, null, 2)}\n`);
  if (values.markdown) fs.writeFileSync(values.markdown, tables);
  const empty = env.results.filter((c) => c.records === 0 || c.requests === 0);
  if (env.failures.length > 0 || empty.length > 0) {
    process.stdout.write(
      `\n${env.failures.length} case(s) failed, ${empty.length} measured nothing\n`,
    );
    return 1;
  }
  return 0;
}
