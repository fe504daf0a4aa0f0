/**
 * Several in-process brokers replicating through `cluster/replica-manager.ts`: each a
 * LocalBroker on real files in its own temporary directory, its TCP transport on a loopback port,
 * and a ReplicaManager whose followers fetch over real sockets. Partition state lives in etcd (a
 * real one from `etcd.ts`); the tests play the controller and the node's watch: they write the
 * state and hand it to every node ({@link ReplicatedCluster.sync}). Registrations are written to
 * etcd too (`brokers/<id>`, no lease), since a leader checks them there before an ISR expansion,
 * and handed to every manager as the node's watch would.
 */
import { onTestFinished } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { TcpClient } from "../../src/client/client.ts";
import type { Etcd } from "../../src/cluster/etcd.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import type { BrokerRegistration } from "../../src/cluster/membership.ts";
import {
  formatPartitionState,
  parsePartitionState,
  type PartitionState,
} from "../../src/cluster/partition-state.ts";
import { ReplicaManager } from "../../src/cluster/replica-manager.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { replicaConnector } from "../../src/runtime/replica-connection.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";
import { AccessControl } from "../../src/auth/access.ts";
import { realClock } from "./clock.ts";
import { openTestKeyStore } from "./keys.ts";
import { tempDir } from "./tmp.ts";

/** One broker of a {@link ReplicatedCluster}. */
export interface ReplicaNode {
  nodeId: number;
  broker: LocalBroker;
  /** The current replica manager (replaced by {@link ReplicatedCluster.restartReplication}). */
  manager: ReplicaManager;
  logger: MemoryLogger;
  tcp: string;
  port: number;
  dataDir: string;
  /** A client connection to this broker's TCP port (with `apiKey` when keys are on). */
  client(apiKey?: string): Promise<TcpClient>;
}

/** A few brokers over one etcd prefix. */
export interface ReplicatedCluster {
  nodes: ReplicaNode[];
  prefix: string;
  secret: Uint8Array;
  /** With `withKeys`: an admin API key of node 1. */
  readonly adminKey: string;
  node(id: number): ReplicaNode;
  /** Creates the topic on every node and writes its partition-0 state to etcd, then syncs. */
  createTopic(
    topic: string,
    state: PartitionState,
    config?: Record<string, unknown>,
  ): Promise<void>;
  /** Writes `state` (unconditionally, as the controller would) and syncs every node. */
  setState(topic: string, state: PartitionState): Promise<void>;
  /** The stored state of partition 0. */
  state(topic: string): Promise<{ state: PartitionState; modRevision: number }>;
  /** Reads partition 0's state from etcd and applies it on every node whose manager runs. */
  sync(topic: string): Promise<void>;
  /**
   * Reads partition 0's state from etcd and applies it on node `id` alone; resolves once that
   * node's state is read and the apply is issued, with the apply's own promise (not awaited).
   */
  applyTo(id: number, topic: string): Promise<{ applied: Promise<void> }>;
  /** What node `id`'s manager takes as its membership lease's expiry (ms since the epoch; default never). */
  setLeaseExpiresAt(id: number, ms: number): void;
  /**
   * Registers node `id` again as `incarnation` (another process took the node id: a replacement
   * on an empty disk) in etcd and tells every manager; the node's own manager keeps the
   * incarnation it was made with (the old process) until {@link restartReplication}. With
   * `unseen`, etcd holds the new registration but no manager is told (their watches have not
   * delivered it yet); {@link deliverRegistrations} tells them later.
   */
  reregister(id: number, incarnation: string, options?: { unseen?: boolean }): Promise<void>;
  /** Tells every manager the registrations in etcd now (the watches catch up). */
  deliverRegistrations(): void;
  /** Stops a node's replication (its follower loops): a follower that stopped fetching. */
  stopReplication(id: number): Promise<void>;
  /**
   * Closes a node's broker and opens it again on the same data directory (a restart: recovery,
   * the leader-epoch history read back from disk), on a new port; applies the topic's state to
   * it unless its replication is stopped.
   */
  restartNode(id: number, topic: string): Promise<void>;
  /** Changes the TCP address followers use for a node (a proxy in front of it). */
  setAddress(id: number, tcp: string): void;
  /** Drops node `id`'s registration in etcd and at every manager, as when its membership lease expires. */
  unregister(id: number): Promise<void>;
  /**
   * Starts a new replica manager on the node and applies the topic's state to it; it fetches as
   * `incarnation` (default: the one registered now).
   */
  restartReplication(id: number, topic: string, incarnation?: string): Promise<void>;
}

/**
 * Starts `count` brokers (node ids 1…count) with replication, closed after the test.
 * @param options.replicaLagMs the managers' `replica_lag_ms` (default 10 000).
 */
export async function startReplicatedCluster(options: {
  count: number;
  etcd: Etcd;
  prefix: string;
  replicaLagMs?: number;
  /** The leader's long-poll on a replica fetch, in ms (default 200). */
  fetchWaitMs?: number;
  /** Turns API keys on at every broker; the admin key of node 1 is returned in `adminKey`. */
  withKeys?: boolean;
  /** Starts the managers without a broker credential (`--cluster-secret-file` left out). */
  noSecret?: boolean;
  /** The file system of node `nodeId` (default: the real one), e.g. one whose fsyncs can be held. */
  fs?: (nodeId: number) => FileSystem;
}): Promise<ReplicatedCluster> {
  const secret = new TextEncoder().encode(`secret-${options.prefix}`);
  const realFs = new NodeFileSystem();
  const nodes: ReplicaNode[] = [];
  /** What the managers were told; `stored`: what etcd holds. */
  const registrations = new Map<number, BrokerRegistration>();
  const stored = new Map<number, BrokerRegistration>();
  const registrationKey = (id: number) => `${options.prefix}/brokers/${id}`;
  const stopped = new Set<number>();
  const leaseExpiry = new Map<number, number>();
  let adminKey = "";
  const makeManager = (
    node: Omit<ReplicaNode, "manager">,
    incarnation?: string,
  ): ReplicaManager => {
    const manager = new ReplicaManager({
      broker: node.broker,
      etcd: options.etcd,
      prefix: options.prefix,
      nodeId: node.nodeId,
      incarnation: incarnation ?? registrations.get(node.nodeId)?.incarnation ?? "1",
      clock: realClock,
      prng: new Prng(node.nodeId),
      logger: node.logger,
      clusterSecret: options.noSecret === true ? undefined : secret,
      authEnabled: () => options.withKeys === true,
      connect: replicaConnector({ timeoutMs: 5000 }),
      replicaLagMs: options.replicaLagMs,
      fetchWaitMs: options.fetchWaitMs ?? 200,
      leaseExpiresAtMs: () => leaseExpiry.get(node.nodeId) ?? Number.POSITIVE_INFINITY,
    });
    manager.setBrokers(registrations);
    return manager;
  };
  const shutdowns = new Map<number, () => Promise<void>>();
  /** Opens node `nodeId`'s broker on `dir` with its transport and replica manager. */
  const startNode = async (nodeId: number, dir: string): Promise<ReplicaNode> => {
    const logger = new MemoryLogger();
    const broker = await LocalBroker.open({
      fs: options.fs?.(nodeId) ?? realFs,
      dataDir: dir,
      clock: realClock,
      logger,
      cleanupIntervalMs: 0,
    });
    let access: AccessControl | undefined;
    let closeKeys = async () => {};
    if (options.withKeys === true) {
      const { keys } = await openTestKeyStore({ logger, seed: nodeId });
      closeKeys = () => keys.close();
      const admin = await keys.create({ name: "admin", role: "admin" });
      if (nodeId === 1) adminKey = admin.key;
      access = new AccessControl({ broker, keys, logger });
    }
    const transport = createTcpTransport({ broker, access, clock: realClock, logger });
    const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
      transport.handleConnection(socket),
    );
    const tcp = `127.0.0.1:${listener.port}`;
    const registration: BrokerRegistration = {
      node_id: nodeId,
      cluster_id: "test",
      data_dir_id: `dir-${nodeId}`,
      incarnation: "1",
      tcp,
      http: "http://127.0.0.1:1",
    };
    registrations.set(nodeId, registration);
    stored.set(nodeId, registration);
    await options.etcd.put(registrationKey(nodeId), JSON.stringify(registration));
    const clients: TcpClient[] = [];
    const base = {
      nodeId,
      broker,
      logger,
      tcp,
      port: listener.port,
      dataDir: dir,
      client: async (apiKey?: string) => {
        const c = await TcpClient.connect({ host: "127.0.0.1", port: listener.port, apiKey });
        clients.push(c);
        return c;
      },
    };
    const node: ReplicaNode = { ...base, manager: makeManager(base) };
    // As the node's watch does: every manager hears of each registration.
    for (const n of nodes) n.manager.setBrokers(registrations);
    shutdowns.set(nodeId, async () => {
      await node.manager.close();
      for (const c of clients) await c.close();
      const closing = listener.close();
      await transport.close({ graceMs: 100 });
      await closing;
      await broker.close();
      await closeKeys();
    });
    return node;
  };
  for (let nodeId = 1; nodeId <= options.count; nodeId++) {
    const { dir } = tempDir(`es-broker-replication-${nodeId}-`);
    nodes.push(await startNode(nodeId, dir));
    onTestFinished(() => shutdowns.get(nodeId)!());
  }
  const key = (topic: string) => `${options.prefix}/partitions/${topic}/0`;
  const cluster: ReplicatedCluster = {
    nodes,
    prefix: options.prefix,
    secret,
    get adminKey() {
      return adminKey;
    },
    node: (id) => nodes[id - 1],
    async createTopic(topic, state, config) {
      for (const n of nodes) await n.broker.createTopic({ name: topic, partitions: 1, config });
      await options.etcd.put(key(topic), formatPartitionState(state));
      await cluster.sync(topic);
    },
    async setState(topic, state) {
      await options.etcd.put(key(topic), formatPartitionState(state));
      await cluster.sync(topic);
    },
    async state(topic) {
      const kv = await options.etcd.get(key(topic));
      if (kv === null) throw new Error(`no state for ${topic}`);
      return { state: parsePartitionState(kv.key, kv.value), modRevision: kv.modRevision };
    },
    async sync(topic) {
      const kv = await options.etcd.get(key(topic));
      if (kv === null) throw new Error(`no state for ${topic}`);
      const state = parsePartitionState(kv.key, kv.value);
      for (const n of nodes) {
        if (stopped.has(n.nodeId)) continue;
        await n.manager.applyPartitionState(topic, 0, state, String(kv.modRevision));
      }
    },
    async applyTo(id, topic) {
      const kv = await options.etcd.get(key(topic));
      if (kv === null) throw new Error(`no state for ${topic}`);
      const state = parsePartitionState(kv.key, kv.value);
      const applied = cluster
        .node(id)
        .manager.applyPartitionState(topic, 0, state, String(kv.modRevision));
      return { applied };
    },
    setLeaseExpiresAt(id, ms) {
      leaseExpiry.set(id, ms);
    },
    async stopReplication(id) {
      stopped.add(id);
      await cluster.node(id).manager.close();
    },
    async restartNode(id, topic) {
      const old = cluster.node(id);
      await shutdowns.get(id)!();
      nodes[id - 1] = await startNode(id, old.dataDir);
      if (!stopped.has(id)) await cluster.sync(topic);
    },
    setAddress(id, tcp) {
      registrations.set(id, { ...registrations.get(id)!, tcp });
      stored.set(id, { ...stored.get(id)!, tcp });
    },
    async reregister(id, incarnation, how = {}) {
      const registration = { ...stored.get(id)!, incarnation };
      stored.set(id, registration);
      await options.etcd.put(registrationKey(id), JSON.stringify(registration));
      if (how.unseen !== true) cluster.deliverRegistrations();
    },
    deliverRegistrations() {
      registrations.clear();
      for (const [id, r] of stored) registrations.set(id, r);
      for (const n of nodes) n.manager.setBrokers(new Map(registrations));
    },
    async unregister(id) {
      stored.delete(id);
      await options.etcd.delete(registrationKey(id));
      cluster.deliverRegistrations();
    },
    async restartReplication(id, topic, incarnation) {
      stopped.delete(id);
      const n = cluster.node(id);
      n.manager = makeManager(n, incarnation);
      await cluster.sync(topic);
    },
  };
  return cluster;
}

/** Polls `condition` every 20 ms until it holds, or fails after `timeoutMs`. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
