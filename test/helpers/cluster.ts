/**
 * A real cluster for end-to-end tests: one etcd (test/helpers/etcd.ts) and N broker processes
 * (test/e2e/harness.ts) on fixed ports, each with its own data directory under one temporary
 * root, sharing a cluster secret. Brokers can be stopped and started again on the same ports and
 * directory (or another directory: a disk not mounted), and etcd read and written directly.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type BrokerProcess, startBroker } from "../e2e/harness.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "./etcd.ts";

/** A running test cluster (see {@link startCluster}). */
export interface TestCluster {
  etcd: EtcdCluster;
  /** A client of the etcd, for reading and rewriting keys under `/es-broker`. */
  client: EtcdHttpClient;
  /** The temporary root: `n<id>` is broker id's data directory. */
  root: string;
  /** The running brokers by node id. */
  brokers: Map<number, BrokerProcess>;
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

/** Starts a one-member etcd and brokers 1..`brokers` (default 3), each on its own ports. */
export async function startCluster(options: { brokers?: number } = {}): Promise<TestCluster> {
  const n = options.brokers ?? 3;
  const etcd = await startEtcdCluster({ size: 1 });
  const client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000 });
  const root = mkdtempSync(join(tmpdir(), "es-broker-cluster-"));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "test-cluster-broker-credential-0123456789\n", { mode: 0o600 });
  const ports = await freePorts(2 * n);
  const brokers = new Map<number, BrokerProcess>();
  const args = (id: number): string[] => {
    const [http, tcp] = [ports[2 * id - 2], ports[2 * id - 1]];
    return [
      ...["--http-port", String(http), "--tcp-port", String(tcp)],
      ...["--cluster", etcd.clusterUrl, "--node-id", String(id)],
      ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
      ...["--cluster-secret-file", secretFile],
    ];
  };
  const start = async (id: number, dataDir = join(root, `n${id}`)) => {
    const b = await startBroker(dataDir, args(id));
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
