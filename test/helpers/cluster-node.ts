/**
 * One broker's cluster side, in-process, for tests on an etcd of the test's choosing (the
 * in-memory one of test/helpers/fake-etcd.ts, or a real test etcd): a whole `ClusterNode`
 * ({@link startTestNode}), or just a membership and its controller ({@link startTestMember}).
 * Node `id` advertises `127.0.0.1:<9000 + id>` (TCP) and `http://127.0.0.1:<8000 + id>`, its
 * data directory id is `dir-<id>`, and it joins under `/es-broker` unless told otherwise. The real
 * processes: test/helpers/cluster.ts.
 */
import { onTestFinished } from "vitest";
import type { Broker } from "../../src/broker/types.ts";
import { Controller, type ControllerOptions } from "../../src/cluster/controller.ts";
import type { Etcd } from "../../src/cluster/etcd.ts";
import { type JoinOptions, joinCluster, type Membership } from "../../src/cluster/membership.ts";
import { ClusterNode, type ClusterNodeOptions, type ReplicaSink } from "../../src/cluster/node.ts";
import type { Clock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { openTestBroker } from "./broker.ts";

/**
 * What node `nodeId` of a test cluster joins with ({@link joinCluster}): the defaults of this
 * module, a `prng` seeded `nodeId`, a new {@link MemoryLogger}, cluster id "c1" if it is the first.
 */
export function testJoinOptions(etcd: Etcd, clock: Clock, nodeId: number): JoinOptions {
  return {
    etcd,
    clock,
    prng: new Prng(nodeId),
    logger: new MemoryLogger(),
    prefix: "/es-broker",
    nodeId,
    advertise: { tcp: `127.0.0.1:${9000 + nodeId}`, http: `http://127.0.0.1:${8000 + nodeId}` },
    dataDirId: `dir-${nodeId}`,
    dataDir: null,
    newClusterId: "c1",
  };
}

/**
 * A replication layer that replicates nothing and records every partition state the node hands
 * it, in order, as `<topic>/<partition>@<leader epoch> leader <leader>` in `applied`.
 */
export function recordingReplicas(): { replicas: ReplicaSink; applied: string[] } {
  const applied: string[] = [];
  const replicas: ReplicaSink = {
    setBrokers() {},
    async applyPartitionState(topic, partition, state) {
      applied.push(`${topic}/${partition}@${state.leader_epoch} leader ${state.leader}`);
    },
    logEndOffsets: () => new Map(),
    setMembershipLive() {},
    async close() {},
  };
  return { replicas, applied };
}

/** Options of {@link startTestNode}: `etcd`, and any {@link ClusterNodeOptions} to override. */
export type TestNodeOptions = Partial<ClusterNodeOptions> & { etcd: Etcd; logger?: MemoryLogger };

/** A node started by {@link startTestNode}. */
export interface TestNode {
  node: ClusterNode;
  logger: MemoryLogger;
  /** The states handed to the default replication layer ({@link recordingReplicas}); empty if `replicas` was given. */
  applied: string[];
}

/**
 * Starts a {@link ClusterNode} on `options.etcd` and closes it when the current test finishes
 * (call it inside a test). Defaults beyond {@link testJoinOptions}' (node 1): the system clock,
 * `broker` a fresh `openTestBroker()` (closed after the node), `replicas`
 * {@link recordingReplicas}, a 30 s lease, `rebalanceMs` 0 (no preferred leader moves); every
 * other option is the node's own default.
 * @throws whatever {@link ClusterNode.start} throws (no node to close then).
 */
export async function startTestNode(options: TestNodeOptions): Promise<TestNode> {
  const nodeId = options.nodeId ?? 1;
  const logger = options.logger ?? new MemoryLogger();
  const { replicas, applied } = recordingReplicas();
  const broker: Broker = options.broker ?? (await openTestBroker()).broker;
  const clock = options.clock ?? systemClock;
  const node = await ClusterNode.start({
    ...testJoinOptions(options.etcd, clock, nodeId),
    leaseTtlSeconds: 30,
    replicas: () => replicas,
    rebalanceMs: 0,
    ...options,
    clock,
    broker,
    logger,
  });
  onTestFinished(() => node.close());
  return { node, logger, applied };
}

/** Options of {@link startLeaveTestNode}. */
export interface LeaveTestNodeOptions {
  etcd: Etcd;
  clock: Clock;
  logger: MemoryLogger;
  /** The replication layer: what the tests of the leave watch (its `leave` drain, its `close`). */
  replicas: ReplicaSink;
  /** `ClusterNodeOptions.leaveEtcdStepMs`; the node's default if not given. */
  leaveEtcdStepMs?: number;
}

/**
 * Node 1 of {@link testJoinOptions} as a whole {@link ClusterNode} for the tests of its leave
 * (`ClusterNode.leave`): a broker with no topics, `options.replicas` as its replication layer, and
 * every other option the node's default. The caller closes it (after a leave, `close()` does not
 * leave again; with etcd silent it may wait its bounds).
 * @throws whatever {@link ClusterNode.start} throws.
 */
export function startLeaveTestNode(options: LeaveTestNodeOptions): Promise<ClusterNode> {
  const { etcd, clock, logger, replicas, leaveEtcdStepMs } = options;
  return ClusterNode.start({
    ...testJoinOptions(etcd, clock, 1),
    logger,
    broker: { listTopics: async () => [] } as unknown as Broker,
    replicas: () => replicas,
    ...(leaveEtcdStepMs === undefined ? {} : { leaveEtcdStepMs }),
  });
}

/** Options of {@link startTestMember}. */
export interface TestMemberOptions {
  /** The etcd the membership uses (and the controller, unless `controllerEtcd` is given). */
  etcd: Etcd;
  clock: Clock;
  nodeId: number;
  /** {@link JoinOptions} to override (`prefix` is the controller's too). */
  join?: Partial<JoinOptions>;
  /** {@link ControllerOptions} to override. */
  controller?: Partial<ControllerOptions>;
  /** The etcd the controller uses, if not `etcd` (a faulty view of it). */
  controllerEtcd?: Etcd;
}

/** A broker's membership and controller, started by {@link startTestMember}. */
export interface TestMember {
  nodeId: number;
  membership: Membership;
  controller: Controller;
  /** The one logger of the membership and the controller. */
  logger: MemoryLogger;
  /**
   * A clean stop: the controller closed, then the membership (the departure recorded, the lease
   * revoked). A second call does nothing.
   */
  stop(): Promise<void>;
}

/**
 * Joins node `nodeId` to the cluster ({@link joinCluster}, {@link testJoinOptions} and
 * `options.join`) and starts its {@link Controller} on the membership's lease, with `prng` seeded
 * `100 + nodeId` and `retryMs` 100. It is stopped when the current test finishes, if the test did
 * not stop it (call it inside a test); an error stopping it then is ignored, as etcd may be down.
 * @throws whatever {@link joinCluster} or {@link Controller.start} throws.
 */
export async function startTestMember(options: TestMemberOptions): Promise<TestMember> {
  const { etcd, clock, nodeId } = options;
  const logger = new MemoryLogger();
  const join: JoinOptions = { ...testJoinOptions(etcd, clock, nodeId), logger, ...options.join };
  const membership = await joinCluster(join);
  const controller = new Controller({
    etcd: options.controllerEtcd ?? etcd,
    clock,
    prng: new Prng(100 + nodeId),
    logger,
    prefix: join.prefix ?? "/es-broker",
    nodeId,
    lease: () => membership.leaseId,
    retryMs: 100,
    ...options.controller,
  });
  try {
    await controller.start();
  } catch (err) {
    await membership.close().catch(() => {});
    throw err;
  }
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await controller.close();
    await membership.close();
  };
  onTestFinished(() => stop().catch(() => {}));
  return { nodeId, membership, controller, logger, stop };
}
