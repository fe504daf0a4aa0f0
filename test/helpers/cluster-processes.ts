/**
 * A real cluster for end-to-end tests: a test etcd (`startEtcdCluster`) and N broker processes
 * (`test/e2e/harness.ts` `startBroker`) on fixed loopback ports, each with its own data
 * directory under one temporary root, sharing a broker credential. Brokers can be stopped with
 * any signal and started again on the same ports and data directory.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrokerProcess, startBroker } from "../e2e/harness.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "./etcd.ts";

/** One partition as `GET /v1/cluster` answers it. */
export interface ClusterPartition {
  partition: number;
  leader: number;
  leader_epoch: number;
  replicas: number[];
  isr: number[];
}

/** A running test cluster; see {@link startClusterProcesses}. */
export interface ClusterProcesses {
  etcd: EtcdCluster;
  /** The temporary directory holding every data directory (`n<id>`) and the credential. */
  root: string;
  /** The running brokers by node id (a stopped one is absent). */
  brokers: Map<number, BrokerProcess>;
  /** The data directory of node `id`. */
  dataDir(id: number): string;
  /** Starts node `id` (again) on its ports and data directory. */
  start(id: number): Promise<BrokerProcess>;
  /** Stops node `id` with `signal` (SIGTERM by default) and forgets it; resolves with its exit. */
  stop(id: number, signal?: NodeJS.Signals): Promise<number | string>;
  /** Any running broker. @throws Error if none runs. */
  any(): BrokerProcess;
  /** The partitions of `topic` as `via` (default: any running broker) sees them. */
  partitions(topic: string, via?: BrokerProcess): Promise<ClusterPartition[]>;
  /** SIGKILLs every broker, stops etcd and removes the root. */
  close(): Promise<void>;
}

/** Options of {@link startClusterProcesses}. */
export interface ClusterProcessesOptions {
  /** Brokers, node ids 1 … n (default 3). */
  brokers?: number;
  /** etcd members (default 1). */
  etcdMembers?: number;
  /** Extra `serve` arguments for node `id`. */
  extraArgs?: (id: number) => string[];
  /** Prefix of the temporary root's name. */
  name?: string;
}

/**
 * Starts etcd and `brokers` brokers (node ids 1 … n), each with HTTP, TCP and Kafka on fixed free
 * ports (`freePorts`: within `ES_BROKER_TEST_PORTS` when set) advertised as 127.0.0.1.
 */
export async function startClusterProcesses(
  options: ClusterProcessesOptions = {},
): Promise<ClusterProcesses> {
  const count = options.brokers ?? 3;
  const etcd = await startEtcdCluster({ size: options.etcdMembers ?? 1 });
  const root = mkdtempSync(join(tmpdir(), `es-broker-${options.name ?? "cluster"}-`));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "e2e-broker-credential-0123456789abcdef\n", { mode: 0o600 });
  const ports = await freePorts(3 * count);
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
  const start = async (id: number) => {
    const b = await startBroker(dataDir(id), args(id));
    brokers.set(id, b);
    return b;
  };
  const cluster: ClusterProcesses = {
    etcd,
    root,
    brokers,
    dataDir,
    start,
    async stop(id, signal = "SIGTERM") {
      const b = brokers.get(id);
      if (b === undefined) throw new Error(`node ${id} is not running`);
      brokers.delete(id);
      return b.stop(signal);
    },
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
    async close() {
      await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
      brokers.clear();
      await etcd.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await Promise.all(Array.from({ length: count }, (_, i) => start(i + 1)));
  } catch (err) {
    await cluster.close();
    throw err;
  }
  return cluster;
}
