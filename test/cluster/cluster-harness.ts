/**
 * Real processes for the Jepsen-style run (issue #16): a three-member etcd
 * (`test/helpers/etcd.ts`) and three brokers started with `serve --cluster`, each on fixed
 * loopback ports and its own data directory, so that a broker killed and started again comes back
 * at the address it advertised. Brokers can be SIGKILLed, SIGSTOPped, SIGCONTed and restarted,
 * one or all at once; everything each process writes is kept for the failure report.
 *
 * `brokers: 1, cluster: false` starts one plain single-node broker (no etcd), the same faults
 * applying to it: the workload and the checker run against it before cluster mode exists, and
 * stay a reference afterwards.
 *
 * The broker command is the node target's (`dist/es-broker.mjs`, built by `npm test`), or
 * `ES_BROKER_CMD` when set (test/e2e/targets.ts).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { currentTarget, repoRoot } from "../e2e/targets.ts";

/** Most output lines kept per process (the tail is what a failure report needs). */
const logLinesMax = 20_000;

/** A broker process of the test cluster. */
export interface ClusterBroker {
  /** Its `--node-id` (1, 2, 3). */
  nodeId: number;
  tcp: { host: string; port: number };
  /** `host:port`, as advertised. */
  tcpAddress: string;
  httpUrl: string;
  dataDir: string;
  /** "running", "paused" (SIGSTOP) or "down" (killed or exited). */
  readonly state: "running" | "paused" | "down";
  /** Its process id while running or paused. */
  readonly pid: number | undefined;
  /** Every line it wrote on stdout and stderr, over all its runs (the last {@link logLinesMax}). */
  log: string[];
  /**
   * How many lines of each structured event (`"event":"<name>"`) it wrote over all its runs,
   * counted before {@link log} drops old lines, so a count never loses an early line.
   */
  eventCounts: Map<string, number>;
  /** SIGKILL, then wait for the exit. No-op when down. */
  kill(): Promise<void>;
  /** SIGTERM (a clean shutdown), then wait for the exit; SIGKILL after 20 s. No-op when down. */
  terminate(): Promise<void>;
  /** SIGSTOP (it stops answering, its connections stay open). */
  pause(): void;
  /** SIGCONT after {@link pause}. */
  resume(): void;
  /** Starts it again on its data directory and ports; resolves once it prints its listening line. */
  start(): Promise<void>;
}

/** `GET /v1/cluster` of a broker in cluster mode (docs/cluster.md; `ClusterMetadata` in src/broker/types.ts). */
export interface ClusterMetadataAnswer {
  cluster_id: string;
  node_id: number;
  controller: number;
  brokers: { node_id: number; tcp: string; http: string }[];
  topics: {
    name: string;
    partitions: {
      partition: number;
      leader: number;
      leader_epoch: number;
      replicas: number[];
      isr: number[];
    }[];
  }[];
}

/** A running test cluster. */
export interface TestCluster {
  /** The etcd cluster, or null for a single plain broker. */
  etcd: EtcdCluster | null;
  brokers: ClusterBroker[];
  /** Every broker's TCP address (`host:port`), the clients' bootstrap list. */
  bootstrap: string[];
  /** The root of every data directory. */
  root: string;
  /**
   * The cluster's metadata (`GET /v1/cluster[?topic=]`) from the first running broker that
   * answers; null for a single plain broker.
   * @throws Error if no running broker answers.
   */
  metadata(topic?: string): Promise<ClusterMetadataAnswer | null>;
  /**
   * Waits until a running broker reports every broker live and a controller, and (with `topic`)
   * every partition of it led by a running broker (and, with `inSync`, every replica in the ISR);
   * single broker: until it answers `/v1/topics`.
   * @throws Error after `timeoutMs` (default 60 000), with the last answer.
   */
  waitReady(options?: { topic?: string; inSync?: boolean; timeoutMs?: number }): Promise<void>;
  /** SIGKILL every broker at once, then start them all again. */
  restartAll(options?: { downMs?: number }): Promise<void>;
  /**
   * Writes every process's output (and `extra` files, e.g. the history) into a new directory
   * under the OS temp dir, kept after the run, and returns its path.
   */
  saveLogs(extra?: Record<string, string>): string;
  /** The tail of every process's output, for an assertion message. */
  logTail(lines?: number): string;
  /** Stops everything (SIGCONT first, then SIGKILL) and removes the data directories. */
  stop(): Promise<void>;
}

/** Options of {@link startCluster}. */
export interface ClusterOptions {
  /** Number of brokers (default 3). */
  brokers?: number;
  /** false: one plain broker, no etcd (default true). */
  cluster?: boolean;
  /** Extra `serve` options for every broker. */
  serveArgs?: string[];
  /** Command words that start es-broker (default: the target's, see the module comment). */
  command?: string[];
}

function brokerCommandWords(options: ClusterOptions): string[] {
  if (options.command) return options.command;
  const target = currentTarget();
  for (const f of target.requires) {
    if (!existsSync(f)) {
      throw new Error(
        `Cannot start the test cluster: ${f} is missing (\`node scripts/build.mjs --bundle-only\` builds it; npm test does)`,
      );
    }
  }
  return target.command;
}

/**
 * Starts etcd (three members) and the brokers, and waits until every broker prints its listening
 * line. On failure everything started is stopped and the error carries the processes' output.
 */
export async function startCluster(options: ClusterOptions = {}): Promise<TestCluster> {
  const clustered = options.cluster ?? true;
  const count = clustered ? (options.brokers ?? 3) : 1;
  const [cmd, ...pre] = brokerCommandWords(options);
  const root = mkdtempSync(join(tmpdir(), "es-broker-jepsen-"));
  const etcd = clustered ? await startEtcdCluster() : null;
  const ports = await freePorts(count * 2);
  // The broker credential replica fetches and forwarded requests carry (docs/cluster.md).
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, `jepsen-${process.pid}-${ports[0]}-broker-credential\n`, {
    mode: 0o600,
  });
  const brokers: ClusterBroker[] = [];
  for (let i = 0; i < count; i++) {
    const nodeId = i + 1;
    const host = "127.0.0.1";
    const tcpPort = ports[2 * i];
    const httpPort = ports[2 * i + 1];
    const dataDir = join(root, `broker-${nodeId}`);
    mkdirSync(dataDir, { recursive: true });
    const args = [
      ...pre,
      "serve",
      "--data-dir",
      dataDir,
      "--host",
      host,
      "--tcp-port",
      String(tcpPort),
      "--http-port",
      String(httpPort),
      ...(etcd === null
        ? []
        : [
            "--cluster",
            etcd.clusterUrl,
            "--node-id",
            String(nodeId),
            "--advertise-tcp",
            `${host}:${tcpPort}`,
            "--advertise-http",
            `http://${host}:${httpPort}`,
            "--cluster-secret-file",
            secretFile,
          ]),
      ...(options.serveArgs ?? []),
    ];
    brokers.push(makeBroker({ nodeId, host, tcpPort, httpPort, dataDir, cmd, args }));
  }

  const everything = (lines: number) =>
    [
      ...brokers.map(
        (b) => `--- broker ${b.nodeId} (${b.state}) ---\n${b.log.slice(-lines).join("\n")}`,
      ),
      ...(etcd?.members ?? []).map(
        (m) => `--- ${m.name} ---\n${m.output.join("").split("\n").slice(-lines).join("\n")}`,
      ),
    ].join("\n");

  const stop = async () => {
    await Promise.all(
      brokers.map(async (b) => {
        if (b.state === "paused") b.resume();
        await b.kill();
      }),
    );
    await etcd?.stop();
    rmSync(root, { recursive: true, force: true });
  };

  try {
    await Promise.all(brokers.map((b) => b.start()));
  } catch (err) {
    const tail = everything(40);
    await stop();
    throw new Error(`${(err as Error).message}\n${tail}`);
  }

  const metadata = async (topic?: string): Promise<ClusterMetadataAnswer | null> => {
    if (etcd === null) return null;
    let last: unknown = new Error("no broker is running");
    for (const b of brokers) {
      if (b.state !== "running") continue;
      try {
        const res = await fetch(
          `${b.httpUrl}/v1/cluster${topic === undefined ? "" : `?topic=${encodeURIComponent(topic)}`}`,
          { signal: AbortSignal.timeout(2000) },
        );
        if (res.ok) return (await res.json()) as ClusterMetadataAnswer;
        last = new Error(
          `broker ${b.nodeId}: GET /v1/cluster answered ${res.status} ${await res.text()}`,
        );
      } catch (err) {
        last = err;
      }
    }
    throw last;
  };

  const waitReady = async ({
    topic,
    inSync = false,
    timeoutMs = 60_000,
  }: {
    topic?: string;
    inSync?: boolean;
    timeoutMs?: number;
  } = {}) => {
    const deadline = Date.now() + timeoutMs;
    let last = "";
    for (;;) {
      try {
        if (etcd === null) {
          const res = await fetch(`${brokers[0].httpUrl}/v1/topics`, {
            signal: AbortSignal.timeout(2000),
          });
          if (res.ok) return;
          last = `GET /v1/topics answered ${res.status}`;
        } else {
          const m = (await metadata(topic))!;
          last = JSON.stringify(m);
          const running = new Set(
            brokers.filter((b) => b.state === "running").map((b) => b.nodeId),
          );
          const led =
            topic === undefined ||
            (m.topics.length > 0 &&
              m.topics[0].partitions.every(
                (p) => running.has(p.leader) && (!inSync || p.isr.length === p.replicas.length),
              ));
          if (m.controller >= 0 && m.brokers.length === brokers.length && led) return;
        }
      } catch (err) {
        last = (err as Error).message;
      }
      if (Date.now() > deadline)
        throw new Error(`the cluster was not ready within ${timeoutMs} ms: ${last}`);
      await sleep(100);
    }
  };

  return {
    etcd,
    brokers,
    metadata,
    waitReady,
    bootstrap: brokers.map((b) => b.tcpAddress),
    root,
    async restartAll({ downMs = 0 } = {}) {
      await Promise.all(
        brokers.map(async (b) => {
          if (b.state === "paused") b.resume();
          await b.kill();
        }),
      );
      if (downMs > 0) await sleep(downMs);
      await Promise.all(brokers.map((b) => b.start()));
    },
    saveLogs(extra = {}) {
      const dir = mkdtempSync(join(tmpdir(), "es-broker-jepsen-logs-"));
      for (const b of brokers) writeFileSync(join(dir, `broker-${b.nodeId}.log`), b.log.join("\n"));
      for (const m of etcd?.members ?? [])
        writeFileSync(join(dir, `${m.name}.log`), m.output.join(""));
      for (const [name, text] of Object.entries(extra)) writeFileSync(join(dir, name), text);
      return dir;
    },
    logTail: (lines = 30) => everything(lines),
    stop,
  };
}

function makeBroker(launch: {
  nodeId: number;
  host: string;
  tcpPort: number;
  httpPort: number;
  dataDir: string;
  cmd: string;
  args: string[];
}): ClusterBroker {
  let proc: ChildProcess | null = null;
  let paused = false;
  const log: string[] = [];
  const eventCounts = new Map<string, number>();
  // A pipe's chunk can end inside a line: the rest of each stream waits for its newline.
  const partial = new Map<string, string>();
  const push = (prefix: string, chunk: string) => {
    const lines = ((partial.get(prefix) ?? "") + chunk).split("\n");
    partial.set(prefix, lines.pop() ?? "");
    for (const line of lines) {
      if (line === "") continue;
      log.push(`${prefix}${line}`);
      const event = /"event":"([^"]+)"/.exec(line)?.[1];
      if (event !== undefined) eventCounts.set(event, (eventCounts.get(event) ?? 0) + 1);
    }
    if (log.length > logLinesMax) log.splice(0, log.length - logLinesMax);
  };
  const broker: ClusterBroker = {
    nodeId: launch.nodeId,
    tcp: { host: launch.host, port: launch.tcpPort },
    tcpAddress: `${launch.host}:${launch.tcpPort}`,
    httpUrl: `http://${launch.host}:${launch.httpPort}`,
    dataDir: launch.dataDir,
    log,
    eventCounts,
    get state() {
      if (proc === null) return "down";
      return paused ? "paused" : "running";
    },
    get pid() {
      return proc?.pid;
    },
    async kill() {
      const p = proc;
      if (p === null) return;
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGKILL");
      await exited;
    },
    async terminate() {
      const p = proc;
      if (p === null) return;
      if (paused) broker.resume();
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGTERM");
      const timer = setTimeout(() => p.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    },
    pause() {
      if (proc === null || paused) return;
      proc.kill("SIGSTOP");
      paused = true;
    },
    resume() {
      if (proc === null || !paused) return;
      proc.kill("SIGCONT");
      paused = false;
    },
    async start() {
      if (proc !== null) throw new Error(`broker ${launch.nodeId} is already running`);
      log.push(`=== start ${new Date().toISOString()}`);
      const p = spawn(launch.cmd, launch.args, {
        cwd: repoRoot,
        stdio: ["ignore", "pipe", "pipe"],
      });
      proc = p;
      paused = false;
      p.on("error", () => {}); // a spawn failure shows up as the exit below
      let stdout = "";
      const listening = new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(
              new Error(`broker ${launch.nodeId} did not print its listening line within 60 s`),
            ),
          60_000,
        );
        p.stdout!.on("data", (d) => {
          const text = String(d);
          push("out ", text);
          stdout += text;
          if (stdout.includes(" listening: ")) {
            clearTimeout(timer);
            resolve();
          }
        });
        p.once("exit", (code, signal) => {
          clearTimeout(timer);
          reject(new Error(`broker ${launch.nodeId} exited (${code ?? signal}) before listening`));
        });
      });
      p.stderr!.on("data", (d) => push("err ", String(d)));
      p.once("exit", (code, signal) => {
        log.push(`=== exit ${code ?? signal} ${new Date().toISOString()}`);
        if (proc === p) {
          proc = null;
          paused = false;
        }
      });
      await listening;
    },
  };
  return broker;
}
