/**
 * Starting and stopping the servers the benchmark measures: es-broker and its peers (Redis, NATS
 * JetStream, the Durable Streams reference server). Each listens on loopback only, keeps its data
 * in a private directory the harness made, and is stopped by the harness at the end. A peer that
 * is not installed is reported as missing (with the reason), never as a failure.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import { join } from "node:path";
import { NatsConnection } from "./clients/nats.ts";
import { RedisConnection } from "./clients/resp.ts";

/** A server process the harness started. */
export interface ServerProcess {
  name: string;
  pid: number;
  /** Version string, for the report. */
  version: string;
  /** Sends SIGTERM, waits up to 15 s, then SIGKILL. Resolves once the process exited. */
  stop(): Promise<void>;
}

/** es-broker with its addresses. */
export interface EsBroker extends ServerProcess {
  httpUrl: string;
  tcp: { host: string; port: number };
  /** The Kafka listener, when started with `--kafka-port`. */
  kafka?: { host: string; port: number };
}

/** A peer with its address. */
export interface PeerServer extends ServerProcess {
  host: string;
  port: number;
  /** Base URL for HTTP peers. */
  url?: string;
}

/** Where an executable is, searching PATH and the sbin directories Debian installs servers to. */
export function findExecutable(name: string): string | null {
  const dirs = [...(process.env.PATH ?? "").split(":"), "/usr/sbin", "/usr/local/sbin", "/sbin"];
  for (const dir of dirs) {
    if (dir === "") continue;
    const path = join(dir, name);
    try {
      fs.accessSync(path, fs.constants.X_OK);
      return path;
    } catch {
      // keep looking
    }
  }
  return null;
}

/** A free loopback TCP port (bound and released; the server binds it right after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function track(
  name: string,
  proc: ChildProcess,
  version: string,
): ServerProcess & { output(): string; exited: Promise<void> } {
  let output = "";
  proc.stdout?.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-20_000)));
  proc.stderr?.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-20_000)));
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  return {
    name,
    pid: proc.pid!,
    version,
    output: () => output,
    exited,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Waits for `probe` to succeed, up to `timeoutMs`; throws with the server's output otherwise. */
async function waitReady(
  what: string,
  probe: () => Promise<void>,
  server: { output(): string; exited: Promise<void> },
  timeoutMs = 20_000,
): Promise<void> {
  let exited = false;
  void server.exited.then(() => (exited = true));
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline && !exited) {
    try {
      await probe();
      return;
    } catch (err) {
      last = err;
      await sleep(100);
    }
  }
  throw new Error(
    `${what} did not become ready${exited ? " (it exited)" : ""}: ${last instanceof Error ? last.message : String(last)}\n${server.output()}`,
  );
}

/**
 * Node's flags for the broker, as `npm start` passes them (package.json `scripts.start`): a young
 * generation of 4 MiB semi-spaces instead of 16, which kept the peak RSS of the 64-producer cases
 * 20–30 % lower at the same CPU per record (docs/runtimes.md). The environment variable
 * `BENCH_NODE_FLAGS` (space-separated) replaces them, for experiments.
 */
export const brokerNodeFlags = process.env.BENCH_NODE_FLAGS
  ? process.env.BENCH_NODE_FLAGS.split(" ").filter(Boolean)
  : ["--max-semi-space-size=4"];

/** Extra `serve` options from the environment variable `BENCH_BROKER_ARGS` (space-separated), for experiments. */
const brokerExtraArgs = (process.env.BENCH_BROKER_ARGS ?? "").split(" ").filter(Boolean);

/**
 * With the environment variable `BENCH_BROKER_BUNDLE=PATH`, the Node runtime runs that bundle
 * instead of `dist/es-broker.mjs`: a build of another commit, to measure a change on and off in
 * one sitting.
 */

/**
 * The ways to run es-broker (docs/runtimes.md): the Node bundle, Deno and Bun from sources, the
 * compiled binary; and, for measuring Bun's socket adapter on and off in one run, Bun and the
 * binary with plain TCP on Bun's `node:net` (`ES_BROKER_BUN_LISTEN=0`, src/runtime/tcp.ts).
 */
export type BrokerRuntime = "node" | "deno" | "bun" | "binary" | "bun-net" | "binary-net";

/** Every {@link BrokerRuntime}, for checking names given in the environment. */
export const brokerRuntimes: readonly BrokerRuntime[] = [
  "node",
  "deno",
  "bun",
  "binary",
  "bun-net",
  "binary-net",
];

/** `name` as a {@link BrokerRuntime}. @throws Error naming `what` and the runtimes there are. */
export function parseBrokerRuntime(name: string, what: string): BrokerRuntime {
  if ((brokerRuntimes as readonly string[]).includes(name)) return name as BrokerRuntime;
  throw new Error(`${what}: unknown runtime "${name}" (one of ${brokerRuntimes.join(", ")})`);
}

/**
 * The runtime of every broker the harness starts without naming one (the produce, consumer,
 * auth and Kafka cases): `node`, or the environment variable `BENCH_BROKER_RUNTIME` (e.g.
 * `binary`, to compare the compiled binary with Redis in one run).
 */
export const defaultBrokerRuntime: BrokerRuntime =
  process.env.BENCH_BROKER_RUNTIME === undefined
    ? "node"
    : parseBrokerRuntime(process.env.BENCH_BROKER_RUNTIME, "BENCH_BROKER_RUNTIME");

/** The command that runs es-broker on `runtime` (before `serve` and its options), as docs/runtimes.md starts it. */
export function brokerCommand(
  root: string,
  runtime: BrokerRuntime,
  cpuProfileDir?: string,
): string[] {
  const need = (path: string) => {
    if (!fs.existsSync(path)) throw new Error(`${path} is missing: run "npm run build" / "npm ci"`);
    return path;
  };
  const src = join(root, "src/main.ts");
  switch (runtime) {
    case "node":
      return [
        process.execPath,
        ...brokerNodeFlags,
        ...(cpuProfileDir ? ["--cpu-prof", "--cpu-prof-dir", cpuProfileDir] : []),
        need(process.env.BENCH_BROKER_BUNDLE ?? join(root, "dist/es-broker.mjs")),
      ];
    case "deno":
      return [
        need(join(root, "tools/node_modules/.bin/deno")),
        "run",
        "--allow-all",
        `--config=${join(root, "deno.json")}`,
        src,
      ];
    case "bun":
    case "bun-net":
      return [need(join(root, "tools/node_modules/.bin/bun")), src];
    case "binary":
    case "binary-net":
      return [need(join(root, "dist/es-broker"))];
  }
}

/**
 * Starts `node --max-semi-space-size=4 dist/es-broker.mjs serve` (as `npm start` does; or another
 * runtime, {@link brokerCommand}) on loopback with a private data dir.
 * @param options.cpuProfileDir if set, the broker (on Node) runs under `--cpu-prof` and writes its profile there on exit.
 */
export async function startEsBroker(options: {
  root: string;
  dataDir: string;
  cpuProfileDir?: string;
  /** More `serve` options (e.g. `--tls-cert`, `--tls-key` for the auth cases). */
  extraArgs?: string[];
  /** Default {@link defaultBrokerRuntime}. */
  runtime?: BrokerRuntime;
}): Promise<EsBroker> {
  const runtime = options.runtime ?? defaultBrokerRuntime;
  const [command, ...commandArgs] = brokerCommand(options.root, runtime, options.cpuProfileDir);
  const proc = spawn(
    command,
    [
      ...commandArgs,
      "serve",
      "--data-dir",
      options.dataDir,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
      "--log-level",
      "warn",
      ...brokerExtraArgs,
      ...(options.extraArgs ?? []),
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env:
        runtime === "bun-net" || runtime === "binary-net"
          ? { ...process.env, ES_BROKER_BUN_LISTEN: "0" }
          : process.env,
    },
  );
  const server = track("es-broker", proc, "");
  const line = await new Promise<string>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(
      () => reject(new Error(`es-broker did not start within 30 s:\n${server.output()}`)),
      30_000,
    );
    proc.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, nl));
      }
    });
    void server.exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`es-broker exited before listening:\n${server.output()}`));
    });
  });
  const m = /^(\S+ \S+).*http=(https?:\/\/[^\s]+) tcp=([^\s]+):(\d+)/.exec(line);
  if (!m) throw new Error(`es-broker printed an unexpected start-up line: ${line}`);
  const k = / kafka=([^\s]+):(\d+)/.exec(line);
  return {
    ...server,
    version: m[1],
    httpUrl: m[2],
    tcp: { host: m[3], port: Number(m[4]) },
    ...(k ? { kafka: { host: k[1], port: Number(k[2]) } } : {}),
  };
}

/** Why a peer is not available, or null when it is. */
export function peerMissing(peer: "redis" | "nats" | "ds", root: string): string | null {
  if (peer === "redis")
    return findExecutable("redis-server")
      ? null
      : "redis-server is not installed (scripts/install-peers.sh)";
  if (peer === "nats")
    return findExecutable("nats-server")
      ? null
      : "nats-server is not installed (scripts/install-peers.sh)";
  return fs.existsSync(join(root, "bench/peers/node_modules/@durable-streams/server/package.json"))
    ? null
    : "@durable-streams/server is not installed in bench/peers (scripts/install-peers.sh)";
}

/**
 * Redis 7 with the append-only file fsynced before every reply (`appendfsync always`), no RDB
 * snapshots, and automatic AOF rewrites off (the harness rewrites between cases, when idle).
 */
export async function startRedis(dataDir: string): Promise<PeerServer> {
  const bin = findExecutable("redis-server")!;
  const version = /v=(\S+)/.exec(spawnSync(bin, ["--version"]).stdout.toString())?.[1] ?? "?";
  const port = await freePort();
  fs.mkdirSync(dataDir, { recursive: true });
  const proc = spawn(
    bin,
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--dir",
      dataDir,
      "--daemonize",
      "no",
      "--protected-mode",
      "no",
      "--appendonly",
      "yes",
      "--appendfsync",
      "always",
      "--save",
      "",
      "--auto-aof-rewrite-percentage",
      "0",
      "--logfile",
      "",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const server = track("redis", proc, `Redis ${version}`);
  await waitReady(
    "redis-server",
    async () => {
      const c = await RedisConnection.connect({ host: "127.0.0.1", port });
      try {
        await c.call("PING");
      } finally {
        c.close();
      }
    },
    server,
  );
  return { ...server, host: "127.0.0.1", port };
}

/** NATS with JetStream, file storage in `dataDir` (default sync interval: not a per-publish fsync). */
export async function startNats(dataDir: string): Promise<PeerServer> {
  const bin = findExecutable("nats-server")!;
  const version = spawnSync(bin, ["--version"]).stdout.toString().trim();
  const port = await freePort();
  fs.mkdirSync(dataDir, { recursive: true });
  const proc = spawn(bin, ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", dataDir], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const server = track("nats", proc, version);
  await waitReady(
    "nats-server",
    async () => {
      const c = await NatsConnection.connect({ host: "127.0.0.1", port });
      try {
        const info = await c.api("$JS.API.INFO", {});
        if ("error" in info) throw new Error(JSON.stringify(info.error));
      } finally {
        c.close();
      }
    },
    server,
  );
  return { ...server, host: "127.0.0.1", port };
}

/** The Durable Streams reference server in file mode (`bench/peers/ds-server.mjs`). */
export async function startDurableStreams(root: string, dataDir: string): Promise<PeerServer> {
  const pkg = JSON.parse(
    fs.readFileSync(
      join(root, "bench/peers/node_modules/@durable-streams/server/package.json"),
      "utf8",
    ),
  ) as { version: string };
  fs.mkdirSync(dataDir, { recursive: true });
  const proc = spawn(process.execPath, [join(root, "bench/peers/ds-server.mjs"), dataDir], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const server = track("ds", proc, `@durable-streams/server ${pkg.version}`);
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`Durable Streams server did not start:\n${server.output()}`)),
      30_000,
    );
    let out = "";
    proc.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /listening: (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    void server.exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`Durable Streams server exited:\n${server.output()}`));
    });
  });
  const u = new URL(url);
  return { ...server, host: u.hostname, port: Number(u.port), url };
}

/** The loopback ceiling's bare socket server (`bench/loopback-server.mjs`): no broker, nothing stored. */
export async function startLoopback(root: string): Promise<PeerServer> {
  const proc = spawn(process.execPath, [join(root, "bench/loopback-server.mjs")], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const server = track("loopback", proc, `node ${process.versions.node} net`);
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`loopback server did not start:\n${server.output()}`)),
      10_000,
    );
    let out = "";
    proc.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /listening: (\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    void server.exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`loopback server exited:\n${server.output()}`));
    });
  });
  return { ...server, host: "127.0.0.1", port };
}
