/**
 * Real etcd for tests: a cluster of `etcd` processes (Debian `etcd-server` 3.4) on loopback, each
 * with a private data directory, started by the test and stopped when it finishes. Members can be
 * killed, stopped (SIGSTOP) and restarted, so tests can take etcd away under the brokers.
 *
 * With `tls`, members serve their client port with TLS (`--cert-file`, `--key-file`, and with
 * `clientCertAuth` also `--trusted-ca-file --client-cert-auth`); with `auth`, users, roles and
 * `auth enable` are set up through `etcdctl` once the members are healthy (docs/cluster.md "etcd
 * with TLS and authentication").
 *
 * If `etcd` is not installed the helper fails, naming the package: cluster tests never skip
 * silently. `npm test` installs it first (scripts/install-system-deps.sh).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePorts } from "./ports.ts";

/** The etcd binary, checked once. */
function etcdBinary(): string {
  for (const candidate of ["etcd", "/usr/bin/etcd", "/usr/sbin/etcd"]) {
    try {
      execFileSync(candidate, ["--version"], { stdio: "ignore" });
      return candidate;
    } catch {}
  }
  throw new Error(
    "etcd is not installed: the cluster tests need Debian's etcd-server package " +
      "(run scripts/install-system-deps.sh as root, or apt-get install -y etcd-server etcd-client)",
  );
}

/** Free ports for the members and for brokers on fixed ports (ports.ts). */
export { freePorts };

/** One member of a test etcd cluster. */
export interface EtcdMember {
  name: string;
  /** `http://127.0.0.1:PORT` */
  clientUrl: string;
  /** The running process, or null while the member is down. */
  process: ChildProcess | null;
  /** Everything the member has written on stdout and stderr (for failure messages). */
  output: string[];
  /** Sends `signal` (SIGKILL by default) and, for a fatal signal, waits for the exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts the member again on its data directory (after a kill). */
  restart(): Promise<void>;
  /** Resolves once the member reports healthy (a leader and a quorum read), within `timeoutMs`. */
  healthy(timeoutMs?: number): Promise<void>;
}

/** A running test etcd cluster. */
export interface EtcdCluster {
  members: EtcdMember[];
  /** Client URLs of every member. */
  endpoints: string[];
  /** The `--cluster` value brokers take: `etcd://127.0.0.1:P1,127.0.0.1:P2,...` (`etcds://` with TLS). */
  clusterUrl: string;
  /** Kills every member and removes the data directories. */
  stop(): Promise<void>;
}

/** Options of {@link startEtcdCluster}. */
export interface EtcdClusterOptions {
  size?: number;
  /** Serve the client port with TLS: the server certificate (naming 127.0.0.1) and its key. */
  tls?: {
    cert: string;
    key: string;
    /** CA of client certificates (and of `client` below); required with `clientCertAuth`. */
    ca: string;
    /** Require client certificates signed by `ca` (`--client-cert-auth`). */
    clientCertAuth?: boolean;
    /** The certificate the helper itself presents (health checks, etcdctl). */
    client?: { cert: string; key: string };
  };
  /** Users (each with a role allowed readwrite on `prefix`), then `auth enable` (root's password: `rootPassword`). */
  auth?: {
    rootPassword: string;
    users: { name: string; password: string; prefix: string }[];
    /** `--auth-token-ttl` in seconds (etcd's default 300). */
    tokenTtlSeconds?: number;
  };
}

/** GETs `url`'s JSON (over HTTPS with the helper's TLS options). */
function getJson(url: string, tls: EtcdClusterOptions["tls"]): Promise<unknown> {
  if (tls === undefined)
    return fetch(url, { signal: AbortSignal.timeout(1000) }).then((r) => r.json());
  return new Promise((resolve, reject) => {
    const req = https.get(
      url,
      {
        ca: readFileSync(tls.ca),
        ...(tls.client === undefined
          ? {}
          : { cert: readFileSync(tls.client.cert), key: readFileSync(tls.client.key) }),
        timeout: 1000,
      },
      (res) => {
        let text = "";
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () => {
          try {
            resolve(JSON.parse(text));
          } catch (err) {
            reject(err);
          }
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", reject);
  });
}

async function waitHealthy(
  url: string,
  member: EtcdMember,
  timeoutMs: number,
  tls: EtcdClusterOptions["tls"],
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const body = (await getJson(`${url}/health`, tls)) as { health?: string };
      if (body.health === "true") return;
    } catch {}
    // A member that exited (e.g. its port was taken) will not become healthy: say so at once.
    if (Date.now() > deadline || member.process === null) {
      throw new Error(
        `etcd member ${member.name} at ${url} did not become healthy:\n${member.output.join("").slice(-2000)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Starts an etcd cluster of `size` members (3 by default) on loopback and waits until every
 * member reports healthy. Call `stop()` when done (tests: in `afterAll`/`onTestFinished`).
 */
export async function startEtcdCluster(options: EtcdClusterOptions = {}): Promise<EtcdCluster> {
  // A free port can be taken by another test's process between its choice and etcd's bind:
  // start again on fresh ports then (the failed members were stopped).
  for (let attempt = 1; ; attempt++) {
    try {
      return await startEtcdClusterOnce(options);
    } catch (err) {
      if (attempt >= 3 || !/address already in use/.test(String(err))) throw err;
    }
  }
}

async function startEtcdClusterOnce(options: EtcdClusterOptions): Promise<EtcdCluster> {
  const tls = options.tls;
  const scheme = tls === undefined ? "http" : "https";
  const binary = etcdBinary();
  const size = options.size ?? 3;
  const root = mkdtempSync(join(tmpdir(), "es-broker-etcd-"));
  const ports = await freePorts(size * 2);
  const names = Array.from({ length: size }, (_, i) => `etcd${i}`);
  const peerUrl = (i: number) => `http://127.0.0.1:${ports[2 * i + 1]}`;
  const initialCluster = names.map((n, i) => `${n}=${peerUrl(i)}`).join(",");
  const token = `es-broker-test-${process.pid}-${ports[0]}`;

  const members: EtcdMember[] = names.map((name, i) => {
    const clientUrl = `${scheme}://127.0.0.1:${ports[2 * i]}`;
    const args = [
      "--name",
      name,
      "--data-dir",
      join(root, name),
      "--listen-client-urls",
      clientUrl,
      "--advertise-client-urls",
      clientUrl,
      "--listen-peer-urls",
      peerUrl(i),
      "--initial-advertise-peer-urls",
      peerUrl(i),
      "--initial-cluster",
      initialCluster,
      "--initial-cluster-token",
      token,
      "--initial-cluster-state",
      "new",
      // As docs/cluster.md runs etcd: old revisions compacted, so the tests see the same watches.
      "--auto-compaction-mode",
      "revision",
      "--auto-compaction-retention",
      "1000",
      // Loopback: short raft timers make elections (after a member is killed) take ~1 s, not ~5 s.
      "--heartbeat-interval",
      "50",
      "--election-timeout",
      "500",
      "--log-level",
      "warn",
      ...(tls === undefined ? [] : ["--cert-file", tls.cert, "--key-file", tls.key]),
      ...(tls?.clientCertAuth ? ["--trusted-ca-file", tls.ca, "--client-cert-auth"] : []),
      ...(options.auth?.tokenTtlSeconds === undefined
        ? []
        : ["--auth-token-ttl", String(options.auth.tokenTtlSeconds)]),
    ];
    const member: EtcdMember = {
      name,
      clientUrl,
      process: null,
      output: [],
      async kill(signal: NodeJS.Signals = "SIGKILL") {
        const p = member.process;
        if (!p || p.exitCode !== null) return;
        const exited = new Promise((r) => p.once("exit", r));
        p.kill(signal);
        if (signal === "SIGKILL" || signal === "SIGTERM") {
          await exited;
          member.process = null;
        }
      },
      async restart() {
        if (member.process) throw new Error(`etcd member ${name} is still running`);
        launch();
        await waitHealthy(clientUrl, member, 20_000, tls);
      },
      healthy(timeoutMs = 20_000) {
        return waitHealthy(clientUrl, member, timeoutMs, tls);
      },
    };
    const launch = () => {
      const p = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
      p.stdout?.on("data", (d) => member.output.push(String(d)));
      p.stderr?.on("data", (d) => member.output.push(String(d)));
      p.once("exit", () => {
        if (member.process === p) member.process = null;
      });
      member.process = p;
    };
    launch();
    return member;
  });

  const stop = async () => {
    await Promise.all(
      members.map(async (m) => {
        m.process?.kill("SIGCONT");
        await m.kill("SIGKILL");
      }),
    );
    rmSync(root, { recursive: true, force: true });
  };
  try {
    await Promise.all(members.map((m) => waitHealthy(m.clientUrl, m, 20_000, tls)));
    if (options.auth !== undefined) enableAuth(members, options.auth, tls);
  } catch (err) {
    await stop();
    throw err;
  }
  const endpoints = members.map((m) => m.clientUrl);
  return {
    members,
    endpoints,
    clusterUrl: `${tls === undefined ? "etcd" : "etcds"}://${endpoints.map((e) => e.replace(/^https?:\/\//, "")).join(",")}`,
    stop,
  };
}

/** Adds root and `auth.users` (a role each, readwrite on its prefix) with etcdctl, then `auth enable`. */
function enableAuth(
  members: EtcdMember[],
  auth: NonNullable<EtcdClusterOptions["auth"]>,
  tls: EtcdClusterOptions["tls"],
): void {
  const base = [
    "--endpoints",
    members.map((m) => m.clientUrl).join(","),
    ...(tls === undefined ? [] : ["--cacert", tls.ca]),
    ...(tls?.client === undefined ? [] : ["--cert", tls.client.cert, "--key", tls.client.key]),
  ];
  const ctl = (...args: string[]) =>
    execFileSync("etcdctl", [...base, ...args], { stdio: "pipe", env: { ETCDCTL_API: "3" } });
  ctl("user", "add", "root", `--new-user-password=${auth.rootPassword}`);
  ctl("user", "grant-role", "root", "root");
  for (const u of auth.users) {
    ctl("role", "add", `${u.name}-role`);
    ctl("role", "grant-permission", `${u.name}-role`, "--prefix=true", "readwrite", u.prefix);
    ctl("user", "add", u.name, `--new-user-password=${u.password}`);
    ctl("user", "grant-role", u.name, `${u.name}-role`);
  }
  ctl("auth", "enable");
}
