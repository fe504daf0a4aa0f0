/**
 * A real cluster for end-to-end tests: a test etcd (test/helpers/etcd.ts, one member or more) and
 * N broker processes (test/e2e/harness.ts) on fixed loopback ports (HTTP, TCP and Kafka), each
 * with its own data directory under one temporary root, sharing a broker credential. Brokers can
 * be stopped with any signal and started again on the same ports and directory (or another
 * directory: a disk not mounted), and etcd read and written directly. The one place the cluster
 * e2e files that start brokers this way get them from.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type BrokerProcess, startBroker } from "../e2e/harness.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "./etcd.ts";

/**
 * A new temporary root (`es-broker-<name>-…`) for a cluster's data directories, with the broker
 * credential `secret` in `<root>/cluster.secret` (mode 0600): the start of a cluster e2e file that
 * starts its brokers itself.
 */
export function clusterRoot(name: string, secret: string): { root: string; secretFile: string } {
  const root = mkdtempSync(join(tmpdir(), `es-broker-${name}-`));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, `${secret}\n`, { mode: 0o600 });
  return { root, secretFile };
}

/**
 * The end of such a file: every broker SIGKILLed, then `etcd` stopped and `root` removed (each
 * skipped if its start never got that far).
 */
export async function tearDownCluster(
  brokers: Iterable<BrokerProcess>,
  etcd: EtcdCluster | undefined,
  root: string | undefined,
): Promise<void> {
  await Promise.all([...brokers].map((b) => b.stop("SIGKILL")));
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
}

/** One partition as `GET /v1/cluster` answers it. */
export interface ClusterPartition {
  partition: number;
  leader: number;
  leader_epoch: number;
  replicas: number[];
  isr: number[];
}

/** A running test cluster (see {@link startCluster}). */
export interface TestCluster {
  etcd: EtcdCluster;
  /** A client of the etcd, for reading and rewriting keys under `/es-broker`. */
  client: EtcdHttpClient;
  /** The temporary root: `n<id>` is broker id's data directory. */
  root: string;
  /** The running brokers by node id (a stopped one is absent). */
  brokers: Map<number, BrokerProcess>;
  /** The data directory of node `id` (`<root>/n<id>`). */
  dataDir(id: number): string;
  /** Any running broker. @throws Error if none runs. */
  any(): BrokerProcess;
  /** The partitions of `topic` as `via` (default: any running broker) sees them. */
  partitions(topic: string, via?: BrokerProcess): Promise<ClusterPartition[]>;
  /** `serve` arguments of broker `id` beyond `--data-dir` (ports, cluster, node id, secret). */
  args(id: number): string[];
  /** Starts broker `id` on `dataDir` (default `<root>/n<id>`), and waits for its listening line. */
  start(id: number, dataDir?: string): Promise<BrokerProcess>;
  /** Stops broker `id` with `signal` (default SIGTERM); resolves with its exit code. */
  stop(id: number, signal?: NodeJS.Signals): Promise<number | string>;
  /** The stored partition state of `topic`/`partition`, or undefined. */
  state(topic: string, partition?: number): Promise<StoredPartitionState | undefined>;
  /** Kills every broker and etcd, and removes the root. */
  close(): Promise<void>;
}

/** What a test reads of a stored partition state. */
export interface StoredPartitionState {
  replicas: number[];
  leader: number;
  leader_epoch: number;
  isr: number[];
  elr: number[];
  committed_offset: number;
  min_insync_replicas: number;
}

/** Options of {@link startCluster}. */
export interface TestClusterOptions {
  /** Brokers, node ids 1 … n, started one after the other (default 3). */
  brokers?: number;
  /** etcd members (default 1). */
  etcdMembers?: number;
  /** Extra `serve` arguments for node `id`. */
  extraArgs?: (id: number) => string[];
  /** Prefix of the temporary root's name. */
  name?: string;
}

/**
 * Starts etcd and brokers 1..`brokers` (default 3), each with HTTP, TCP and Kafka on fixed free
 * ports (`freePorts`: within `ES_BROKER_TEST_PORTS` when set) advertised as 127.0.0.1.
 */
export async function startCluster(options: TestClusterOptions = {}): Promise<TestCluster> {
  const n = options.brokers ?? 3;
  const etcd = await startEtcdCluster({ size: options.etcdMembers ?? 1 });
  const client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000 });
  const root = mkdtempSync(join(tmpdir(), `es-broker-${options.name ?? "cluster"}-`));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "test-cluster-broker-credential-0123456789\n", { mode: 0o600 });
  const ports = await freePorts(3 * n);
  const brokers = new Map<number, BrokerProcess>();
  const dataDir = (id: number) => join(root, `n${id}`);
  const args = (id: number): string[] => {
    const [http, tcp, kafka] = [ports[3 * id - 3], ports[3 * id - 2], ports[3 * id - 1]];
    return [
      ...["--http-port", String(http), "--tcp-port", String(tcp), "--kafka-port", String(kafka)],
      ...["--cluster", etcd.clusterUrl, "--node-id", String(id)],
      ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
      ...["--cluster-secret-file", secretFile],
      ...(options.extraArgs?.(id) ?? []),
    ];
  };
  const start = async (id: number, dir = dataDir(id)) => {
    const b = await startBroker(dir, args(id));
    brokers.set(id, b);
    return b;
  };
  const stop = async (id: number, signal: NodeJS.Signals = "SIGTERM") => {
    const b = brokers.get(id);
    brokers.delete(id);
    return b === undefined ? "not running" : b.stop(signal);
  };
  const cluster: TestCluster = {
    etcd,
    client,
    root,
    brokers,
    dataDir,
    any() {
      const b = brokers.values().next().value;
      if (b === undefined) throw new Error("no broker is running");
      return b;
    },
    async partitions(topic, via) {
      const res = await fetch(
        `${(via ?? cluster.any()).httpUrl}/v1/cluster?topic=${encodeURIComponent(topic)}`,
      );
      if (res.status !== 200) throw new Error(`GET /v1/cluster: ${res.status} ${await res.text()}`);
      const m = (await res.json()) as { topics: { partitions: ClusterPartition[] }[] };
      return m.topics[0].partitions;
    },
    args,
    start,
    stop,
    state: async (topic, partition = 0) => {
      const kv = await client.get(`/es-broker/partitions/${topic}/${partition}`);
      return kv === null ? undefined : (JSON.parse(kv.value) as StoredPartitionState);
    },
    close: async () => {
      await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
      brokers.clear();
      await client.close();
      await etcd.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    for (let id = 1; id <= n; id++) await start(id);
  } catch (err) {
    await cluster.close();
    throw err;
  }
  return cluster;
}
