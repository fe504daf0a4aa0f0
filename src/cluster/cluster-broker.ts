/**
 * The broker the front doors (HTTP, TCP, Kafka) call in cluster mode (docs/cluster.md "Topics",
 * "Clients"): the local broker, with the topic operations going through etcd ({@link ClusterNode})
 * and with partitions this broker does not lead refused as `not_leader`, naming the leader.
 *
 * - createTopic / deleteTopic / updateTopicConfig write etcd (one transaction); every replica
 *   applies the change locally when it sees it. The answer comes once this broker has.
 * - listTopics / describeTopic list every topic of the cluster: the local description where this
 *   broker holds a replica, else the config with empty partitions (offsets 0: ask the leader).
 * - produce to an explicit partition, fetch and listOffsets check the leader in the cluster's
 *   partition state first; the replication layer (`broker/replication.ts`) checks again, with
 *   its own, authoritative view, inside the broker. A produce without a partition is placed
 *   here by the partition state (`routeProduce`): appended here, refused `not_leader` naming
 *   the one broker that leads its partitions, or refused `invalid_request` when they need
 *   several leaders (docs/cluster.md "Topics").
 * - clusterMetadata: brokers, controller, leaders ({@link ClusterNode.metadata}).
 * - Consumer groups (docs/cluster.md "Consumer groups"): kept by the coordinator, the
 *   controller (any other broker refuses group requests with `not_leader` naming it, reads
 *   included), and every commit is written to etcd, then stored locally, before it is
 *   acknowledged (a commit etcd did not take is never shown). A broker that becomes the
 *   controller loads every group etcd holds, unclaimed, for list, describe and the metrics
 *   (reads claim nothing); the first join or commit of a group it serves since then claims the
 *   group in etcd and takes its offsets from there, so commits
 *   outlive the coordinator. Generations are recorded in etcd before a member learns them (those
 *   no member learns, of a member leaving or expiring, right after) and the claim starts above
 *   all of them, so they never go backwards or repeat when the coordinator moves;
 *   a commit or join on a broker whose claim was taken over gets `stale_generation`.
 * - Durable Streams are not offered (`streams` is undefined: `/v1/stream/` answers 404): a
 *   stream's topic would be made locally, outside etcd, and never replicated.
 * - Producer epochs (docs/decisions.md §20, docs/cluster.md "Producer epochs") are not handed out
 *   in a cluster (`initProducerEpoch` is undefined: TCP `unsupported_api`, HTTP 404), so clients
 *   keep the clock epoch: a controller's own producer state cannot make epochs unique once the
 *   controller moves (attack13 F4).
 * - Everything else (producers, the registry) goes to the local broker as it is.
 */
import { mergeTopicConfig, validatePartitionCount, validateTopicName } from "../broker/config.ts";
import { defaultTopicConfig } from "../broker/config.ts";
import { BrokerError, Errors } from "../broker/errors.ts";
import { settleSink } from "../broker/produce-sink.ts";
import type {
  AssignedJoinRequest,
  Broker,
  ClusterMetadata,
  CommitOffsetsRequest,
  GroupAssignment,
  GroupDescription,
  JoinGroupRequest,
  CreateTopicRequest,
  FetchRequest,
  FetchResult,
  ProduceRequest,
  ProduceResult,
  ProduceSink,
  TopicConfig,
  TopicDescription,
} from "../broker/types.ts";
import type { ClusterNode } from "./node.ts";
import { noLeader } from "./partition-state.ts";
import { utf8 } from "../lib/bytes.ts";
import { partitionForKey } from "../lib/murmur2.ts";
import { EntryCursor } from "../storage/record.ts";

/** The cluster-mode broker ({@link clusterBroker}) and what the metrics need of it. */
export type ClusterBroker = Broker & {
  /**
   * Resolves once the consumer groups etcd knows are in the local group state, when this broker
   * is the controller (they load when it becomes it; docs/operations.md "Metrics"), so a
   * scrape exports every group with committed offsets. Never rejects: if etcd could not be read,
   * the next call tries again.
   */
  storedGroupsLoaded(): Promise<void>;
};

/**
 * Builds the cluster-mode broker around `local`. The result has every method `local` has
 * (optional ones included), so the front doors see the same capabilities.
 */
export function clusterBroker(local: Broker, node: ClusterNode): ClusterBroker {
  /**
   * A topic whose files this broker keeps although etcd does not know it (`cluster.topic_unknown`,
   * docs/cluster.md "Replacing a broker's disk, backing up etcd"): no topic of the cluster, so
   * listed nowhere and served to no one (attack15b F8: it broke Metadata for every topic).
   */
  const unknownCheck = (topic: string): void => {
    if (node.isUnknownTopic?.(topic) !== true) return;
    throw new BrokerError(
      Errors.topicNotFound,
      `Topic ${JSON.stringify(topic)} does not exist in the cluster: etcd does not know it (node ${node.membership.nodeId} keeps files of a topic of that name, not served: cluster.topic_unknown in its log)`,
    );
  };
  const leaderCheck = (topic: string, partition: number): void => {
    const state = node.partitionState(topic, partition);
    if (state === undefined) {
      unknownCheck(topic);
      return; // not a cluster topic (or no such partition): the broker says
    }
    const me = node.membership.nodeId;
    if (state.leader === me) return;
    const leader = state.leader === noLeader ? undefined : node.brokers.get(state.leader);
    throw new BrokerError(
      Errors.notLeader,
      state.leader === noLeader
        ? `Cannot serve ${topic}/${partition} on node ${me}: the partition has no leader now (its replicas ${state.replicas.join(", ")} are down or behind); retry later`
        : `Cannot serve ${topic}/${partition} on node ${me}: node ${state.leader} leads it${leader === undefined ? "" : ` (tcp ${leader.tcp}, http ${leader.http})`}`,
      {
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        ...(leader === undefined ? {} : { leader_tcp: leader.tcp, leader_http: leader.http }),
      },
    );
  };

  /**
   * etcd has the topic but this broker has not created it yet (it applies etcd's view a moment
   * after the topic is created through another broker): "retry" (`not_leader`, as Kafka answers
   * a partition its leader has not taken yet), never "no such topic".
   */
  const settling = <T>(topic: string, pending: Promise<T>): Promise<T> =>
    pending.catch((err: unknown) => {
      if (
        err instanceof BrokerError &&
        err.kind === Errors.topicNotFound &&
        node.topicConfig(topic) !== undefined
      )
        // not_leader (retriable, read the metadata again) with no leader address: HTTP answers
        // 503 rather than a redirect to this very broker.
        throw new BrokerError(
          Errors.notLeader,
          `Cannot serve topic ${JSON.stringify(topic)} on node ${node.membership.nodeId} yet: it was just created in the cluster and this broker is still creating its partitions; retry`,
          { leader: node.membership.nodeId },
        );
      throw err;
    });

  // Each topic's next round-robin position among the partitions this broker leads.
  const roundRobin = new Map<string, number>();
  // Each topic's next partition to redirect a keyless produce to, on a broker leading none.
  const redirectNext = new Map<string, number>();
  /**
   * Places every record of a produce that names no partition (or −1 for some records) by the
   * cluster's partition state (docs/cluster.md "Clients", "Produce without a partition"):
   * keyed records (and an idempotent producer's keyless ones) by murmur2 as on one broker;
   * keyless records on a partition of the broker that leads the keyed records' partitions,
   * else on one this broker leads. @returns the request with every record's partition set,
   * to append here.
   * @throws BrokerError not_leader naming the one broker that leads every partition the request
   *   needs (the HTTP front door answers 307 to it); invalid_request when the records need
   *   partitions led by different brokers (details.partitions: each with its leader, and its
   *   leader_tcp and leader_http when the leader is live);
   *   partition_not_found.
   */
  const routeProduce = (request: ProduceRequest): ProduceRequest => {
    const topic = request.topic;
    const me = node.membership.nodeId;
    let n = 0;
    while (node.partitionState(topic, n) !== undefined) n++;
    if (n === 0) return request;
    const check = (p: number) => {
      if (p < n) return;
      throw new BrokerError(
        Errors.partitionNotFound,
        `Cannot find partition ${p} of topic ${JSON.stringify(topic)}: it has ${n} partition${n === 1 ? "" : "s"}`,
      );
    };
    const fixed = request.partition ?? -1;
    if (fixed !== -1) check(fixed);
    const perRecord = request.partitions;
    const batch = request.batch;
    // Leave a malformed request (per-record partitions of the wrong length) to the broker's checks.
    if (perRecord !== undefined && perRecord.length !== batch.count) return request;
    const producerId = request.producer === undefined ? undefined : String(request.producer.id);
    const assignment = new Int32Array(batch.count);
    const needed = new Map<number, number>(); // partition → its leader
    let free = false;
    const cursor = new EntryCursor(batch);
    while (cursor.next()) {
      let p = perRecord !== undefined ? perRecord[cursor.index] : -1;
      if (p === -1) p = fixed;
      if (p === -1) {
        const key = cursor.key();
        if (key !== null) p = partitionForKey(key, n);
        else if (producerId !== undefined) p = partitionForKey(utf8(producerId), n);
      }
      assignment[cursor.index] = p;
      if (p === -1) {
        free = true;
        continue;
      }
      check(p);
      if (!needed.has(p)) needed.set(p, node.partitionState(topic, p)!.leader);
    }
    const leaders = new Set(needed.values());
    if (leaders.has(noLeader))
      for (const [p, l] of needed) if (l === noLeader) leaderCheck(topic, p); // 503, retriable
    if (leaders.size > 1) {
      const spread = [...needed].sort((a, b) => a[0] - b[0]);
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot produce to topic ${JSON.stringify(topic)} in one request: its records go to partitions led by different brokers (${spread
          .map(([p, l]) => `partition ${p}: node ${l}`)
          .join(
            ", ",
          )}); send each leader the records of its partitions (GET /v1/cluster names the leaders), or name one partition per request`,
        {
          field: "records",
          partitions: spread.map(([partition, leader]) => {
            const at = node.brokers.get(leader);
            return {
              partition,
              leader,
              ...(at === undefined ? {} : { leader_tcp: at.tcp, leader_http: at.http }),
            };
          }),
        },
      );
    }
    // The broker every record goes to: the keyed records' leader, else this one if it leads
    // any partition, else (one redirect) the leader of the next partition that has one.
    const target = leaders.size === 1 ? [...leaders][0] : me;
    const mine: number[] = [];
    for (let p = 0; p < n; p++) if (node.partitionState(topic, p)!.leader === target) mine.push(p);
    if (mine.length === 0) {
      const start = redirectNext.get(topic) ?? 0;
      for (let i = 0; i < n; i++) {
        const p = (start + i) % n;
        if (node.partitionState(topic, p)!.leader === noLeader) continue;
        redirectNext.set(topic, (p + 1) % n);
        leaderCheck(topic, p);
      }
      leaderCheck(topic, start % n); // no partition has a leader now: 503, retriable
    }
    if (target !== me) leaderCheck(topic, mine[0]);
    if (!free) return { ...request, partition: undefined, partitions: assignment };
    // Keyless records: one partition for all of them (as on one broker), round robin over ours.
    const next = roundRobin.get(topic) ?? 0;
    const chosen = mine[next % mine.length];
    roundRobin.set(topic, (next + 1) % mine.length);
    for (let i = 0; i < assignment.length; i++) if (assignment[i] === -1) assignment[i] = chosen;
    return { ...request, partition: undefined, partitions: assignment };
  };

  const describeRemote = (name: string, config: TopicConfig): TopicDescription => {
    const count = node.metadata([name]).topics[0].partitions.length;
    return {
      name,
      config,
      partitions: Array.from({ length: count }, (_, partition) => ({
        partition,
        logStartOffset: 0,
        highWatermark: 0,
        sizeBytes: 0,
        segmentCount: 0,
        fenced: false,
      })),
    };
  };

  const describe = async (name: string): Promise<TopicDescription> => {
    unknownCheck(name);
    const config = node.topicConfig(name);
    if (config === undefined || !node.holds(name)) {
      if (config === undefined) return local.describeTopic(name);
      return describeRemote(name, config);
    }
    return local.describeTopic(name);
  };

  // Groups this broker has claimed in etcd (and taken the offsets of) since it last became the
  // controller; `claims` holds each one's claim (docs/cluster.md "Consumer groups").
  const seeded = new Map<string, Promise<void>>();
  const claims = new Map<string, { claim: number; generation: number }>();
  // Every group etcd knows, taken into the local group state (unclaimed) once per tenure, so the
  // coordinator lists and exports groups that have no member now.
  let storedGroups: Promise<void> | null = null;
  let wasController = node.controller.isController;
  node.controller.onChange(() => {
    if (node.controller.isController !== wasController) {
      seeded.clear();
      claims.clear();
      storedGroups = null;
      if (node.controller.isController) loadStoredGroups().catch(() => {}); // retried on use
    }
    wasController = node.controller.isController;
  });
  /**
   * Group requests are served by the coordinator, the controller. Any other broker refuses them
   * with `not_leader` naming the controller (HTTP answers 307 there; TCP clients read the
   * metadata again; Kafka's are NOT_COORDINATOR): its group state is of an earlier tenure, and
   * serving a group would claim it in etcd, taking it from the real coordinator — so not even a
   * read (`GET /v1/groups/{g}`) is answered here (docs/cluster.md "Consumer groups").
   */
  const coordinatorCheck = (action: string): void => {
    if (node.controller.isController) return;
    const me = node.membership.nodeId;
    const controller = node.controller.current?.node_id ?? noLeader;
    const broker = controller === noLeader ? undefined : node.brokers.get(controller);
    throw new BrokerError(
      Errors.notLeader,
      controller === noLeader || controller === me
        ? `${action} on node ${me}: the cluster has no controller (the group coordinator) now; retry later`
        : `${action} on node ${me}: node ${controller}, the controller, coordinates consumer groups${broker === undefined ? "" : ` (tcp ${broker.tcp}, http ${broker.http})`}`,
      {
        leader: controller === me ? noLeader : controller,
        ...(broker === undefined || controller === me
          ? {}
          : { leader_tcp: broker.tcp, leader_http: broker.http }),
      },
    );
  };
  const describeHere = async (group: string): Promise<GroupDescription | null> => {
    try {
      return await local.describeGroup(group);
    } catch (err) {
      if (err instanceof BrokerError && err.kind === Errors.groupNotFound) return null;
      throw err;
    }
  };
  /** The offsets of topics and partitions the cluster has (etcd keeps those of deleted topics). */
  const existing = (offsets: readonly { topic: string; partition: number; offset: number }[]) =>
    offsets.filter(
      (o) =>
        node.topicConfig(o.topic) !== undefined &&
        node.partitionState(o.topic, o.partition) !== undefined,
    );
  /**
   * Takes a group as etcd holds it (`generation`, `offsets`) into the local group state without
   * claiming it: nothing is written to etcd and the generation shown is etcd's, not a new one
   * (a read must not bump it). Skipped once the group is served here: its claim took etcd's
   * offsets, and later commits are newer than `offsets`. Run inside `inOrder(group)`.
   */
  const takeStored = async (
    group: string,
    generation: number,
    offsets: readonly { topic: string; partition: number; offset: number }[],
  ): Promise<void> => {
    if (seeded.has(group) || !node.controller.isController) return;
    const here = await describeHere(group);
    const kept = existing(offsets);
    if (here === null && kept.length === 0) return; // no committed offset left: not a group now
    if (generation > (here?.generation ?? 0)) await local.raiseGroupGeneration?.(group, generation);
    const committed = new Map(
      (here?.offsets ?? []).map((o) => [`${o.topic}/${o.partition}`, o.committed]),
    );
    const differ = kept.filter((o) => committed.get(`${o.topic}/${o.partition}`) !== o.offset);
    if (differ.length > 0 && local.adoptGroupOffsets !== undefined)
      await local.adoptGroupOffsets(group, differ);
  };
  /**
   * Loads every group etcd knows into the local group state, once per tenure as the controller
   * (docs/cluster.md "Consumer groups"): list, describe and the metrics show them with no member
   * and no claim. A failure (etcd unreachable) is retried at the next call.
   */
  const loadStoredGroups = (): Promise<void> => {
    if (storedGroups === null) {
      const loading = (async () => {
        const stored = await node.loadStoredGroups();
        for (const [group, { generation, offsets }] of stored)
          await inOrder(group, () => takeStored(group, generation, offsets));
      })();
      storedGroups = loading;
      loading.catch(() => {
        if (storedGroups === loading) storedGroups = null;
      });
    }
    return storedGroups;
  };
  /** Takes one group from etcd as it is now (a describe of a group not served here yet). */
  const refreshStored = (group: string): Promise<void> =>
    inOrder(group, async () => {
      if (seeded.has(group)) return;
      const [generation, offsets] = await Promise.all([
        node.loadGroupGeneration(group),
        node.loadGroupOffsets(group),
      ]);
      await takeStored(group, generation, offsets);
    });
  const seed = (group: string): Promise<void> => {
    let done = seeded.get(group);
    if (done === undefined) {
      // In inOrder: after any takeStored of the group, which then finds it seeded and stops.
      done = inOrder(group, async () => {
        // Claim the group first: the generation starts above every one handed out before.
        const before = await describeHere(group);
        const claimed = await node.claimGroupGeneration(group, before?.generation ?? 0);
        if (claimed === null)
          throw new BrokerError(
            Errors.unavailable,
            `Cannot serve group ${JSON.stringify(group)} on node ${node.membership.nodeId}: another broker claimed it meanwhile; retry`,
          );
        // Strictly above: a member here rejoining under its old id keeps the raised generation,
        // which must not be one the previous coordinator handed out.
        if (claimed.generation > 0)
          await local.raiseGroupGeneration?.(group, claimed.generation + 1);
        claims.set(group, claimed);
        const stored = existing(await node.loadGroupOffsets(group));
        if (stored.length === 0) return;
        // etcd holds every acknowledged commit. Members found here (restored from this broker's
        // file) are of an earlier tenure, so their offsets may be older: etcd's win regardless.
        const here = await describeHere(group);
        const committed = new Map(
          (here?.offsets ?? []).map((o) => [`${o.topic}/${o.partition}`, o.committed]),
        );
        const missing = stored.filter(
          (o) => committed.get(`${o.topic}/${o.partition}`) !== o.offset,
        );
        if (missing.length === 0) return;
        if (local.adoptGroupOffsets !== undefined) await local.adoptGroupOffsets(group, missing);
        else await local.commitOffsets({ group, offsets: missing });
      });
      seeded.set(group, done);
      done.catch(() => seeded.delete(group));
    }
    return done;
  };
  /** Forgets a group another broker has claimed since. @returns the error to answer with. */
  const moved = (group: string, action: string): BrokerError => {
    seeded.delete(group);
    claims.delete(group);
    return new BrokerError(
      Errors.staleGeneration,
      `${action}: group ${JSON.stringify(group)} is now coordinated by another broker, whose generations are newer: find the coordinator, rejoin, then commit`,
    );
  };
  // One etcd write of a group at a time, so etcd holds them in the order the group took them.
  const chains = new Map<string, Promise<unknown>>();
  const inOrder = async <T>(group: string, step: () => Promise<T>): Promise<T> => {
    const previous = chains.get(group) ?? Promise.resolve();
    const run = previous.catch(() => {}).then(step);
    chains.set(group, run);
    try {
      return await run;
    } finally {
      if (chains.get(group) === run) chains.delete(group);
    }
  };
  /** Stores `generation` in etcd before a member learns it (the claim must still hold). */
  const record = (group: string, generation: number): Promise<void> =>
    inOrder(group, async () => {
      const action = `Cannot join group ${JSON.stringify(group)}`;
      const held = claims.get(group);
      if (held === undefined) throw moved(group, action);
      if (generation <= held.generation) return;
      const claim = await node.recordGroupGeneration(group, generation, held.claim);
      if (claim === null) throw moved(group, action);
      claims.set(group, { claim, generation });
    });
  // A generation the coordinator moves to without a join (the last member leaving or expiring,
  // a member expiring while others stay) reaches no member, but must not be handed out again
  // by the next coordinator: record it as well, after the fact (attack15b F6). A group not
  // claimed here (a read taking etcd's generation) has nothing to record.
  local.onGroupGeneration?.((group, generation) => {
    const held = claims.get(group);
    if (held === undefined || generation <= held.generation) return;
    record(group, generation).catch(() => {
      // Another broker claimed the group since (it starts above what etcd holds), or etcd
      // failed: the next join records a higher generation, and a claim starts above it.
    });
  });

  // Consumer groups see every partition of the cluster, not only the local replicas: a
  // coordinator (the controller) may hold no replica of a topic, or a follower's copy that is
  // behind (attack16 F3: commits refused "outside [0, high watermark 0]", joins "no such
  // topic"). It bounds commits only where it leads; elsewhere a commit is checked for a negative
  // offset only, as Kafka does, and lag is measured to its follower's high watermark, or not at
  // all without a replica (docs/cluster.md "Consumer groups").
  local.useGroupTopics?.((topic, own) => {
    unknownCheck(topic);
    let n = 0;
    while (node.partitionState(topic, n) !== undefined) n++;
    if (n === 0) return own(); // not a cluster topic: the local one, or topic_not_found
    let mine: ReturnType<typeof own> = [];
    try {
      mine = own();
    } catch {
      // No local replica of the topic at all.
    }
    const me = node.membership.nodeId;
    return Array.from({ length: n }, (_, p) => {
      const own = mine[p];
      if (own === undefined || node.partitionState(topic, p)?.replicas.includes(me) !== true)
        return { highWatermark: null, logEndOffset: null, commitLimit: null };
      if (node.partitionState(topic, p)?.leader === me) return own;
      return { highWatermark: own.highWatermark, logEndOffset: null, commitLimit: null };
    });
  });

  const overrides: Partial<Broker> = {
    async createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
      const name = validateTopicName(request.name);
      const partitions = validatePartitionCount(request.partitions);
      const config = mergeTopicConfig(defaultTopicConfig, request.config);
      await node.createTopic(name, partitions, config);
      return describe(name);
    },
    async deleteTopic(name: string): Promise<void> {
      if (node.topicConfig(name) === undefined) return local.deleteTopic(name);
      await node.deleteTopic(name);
    },
    async listTopics(): Promise<TopicDescription[]> {
      const locals = new Map((await local.listTopics()).map((t) => [t.name, t]));
      const names = new Set([...locals.keys(), ...node.topicNames()]);
      const out: TopicDescription[] = [];
      for (const name of [...names].sort()) {
        if (node.isUnknownTopic?.(name) === true) continue;
        const config = node.topicConfig(name);
        const l = locals.get(name);
        if (l !== undefined) out.push(l);
        else if (config !== undefined) out.push(describeRemote(name, config));
      }
      return out;
    },
    describeTopic: describe,
    async produce(request: ProduceRequest): Promise<ProduceResult> {
      unknownCheck(request.topic);
      if (request.partition !== undefined && request.partition >= 0 && !request.partitions) {
        leaderCheck(request.topic, request.partition);
        return settling(request.topic, local.produce(request));
      }
      if (node.topicConfig(request.topic) === undefined) return local.produce(request);
      return settling(request.topic, local.produce(routeProduce(request)));
    },
    // The TCP transport's produce (`Broker.produceTo`) must meet the leader check, routing and
    // settling above: without this the proxy would hand out the local broker's, which has none.
    produceTo(request: ProduceRequest, sink: ProduceSink): void {
      settleSink(overrides.produce!(request), sink);
    },
    async fetch(request: FetchRequest): Promise<FetchResult> {
      leaderCheck(request.topic, request.partition);
      return settling(request.topic, local.fetch(request));
    },
    async listOffsets(request: { topic: string; partition: number }) {
      leaderCheck(request.topic, request.partition);
      return settling(request.topic, local.listOffsets(request));
    },
    async joinGroup(request: JoinGroupRequest): Promise<GroupAssignment> {
      coordinatorCheck(`Cannot join group ${JSON.stringify(request.group)}`);
      await seed(request.group);
      const joined = await local.joinGroup(request);
      await record(request.group, joined.generation);
      return joined;
    },
    // Reads claim nothing: a group not served here yet is shown as etcd holds it now.
    async describeGroup(group: string): Promise<GroupDescription> {
      coordinatorCheck(`Cannot describe group ${JSON.stringify(group)}`);
      if (!seeded.has(group)) await refreshStored(group);
      await seeded.get(group);
      return local.describeGroup(group);
    },
    async listGroups(): Promise<GroupDescription[]> {
      coordinatorCheck("Cannot list consumer groups");
      await loadStoredGroups();
      return local.listGroups();
    },
    // etcd first, then the local store, under the group's lock (`commitOffsetsReplicated`): an
    // offset etcd did not take is never shown as committed (attack15 F3).
    async commitOffsets(request: CommitOffsetsRequest): Promise<void> {
      coordinatorCheck(`Cannot commit offsets of group ${JSON.stringify(request.group)}`);
      await seed(request.group);
      const action = `Cannot commit offsets of group ${JSON.stringify(request.group)}`;
      const replicate = async (
        offsets: readonly { topic: string; partition: number; offset: number }[],
      ): Promise<void> => {
        const held = claims.get(request.group);
        if (held === undefined) throw moved(request.group, action);
        if (!(await node.saveGroupOffsets(request.group, offsets, held.claim)))
          throw moved(request.group, action);
      };
      await inOrder(request.group, async () => {
        if (local.commitOffsetsReplicated !== undefined)
          return local.commitOffsetsReplicated(request, replicate);
        await local.commitOffsets(request);
        await replicate(request.offsets);
      });
    },
    async clusterMetadata(topics?: readonly string[]): Promise<ClusterMetadata> {
      return node.metadata(topics);
    },
  };
  if (local.joinAssignedGroup !== undefined) {
    const joinAssigned = local.joinAssignedGroup.bind(local);
    overrides.joinAssignedGroup = async (request: AssignedJoinRequest) => {
      coordinatorCheck(`Cannot join group ${JSON.stringify(request.group)}`);
      await seed(request.group);
      const joined = await joinAssigned(request);
      await record(request.group, joined.generation);
      return joined;
    };
  }
  // Not in a cluster (module comment): an allocation kept only in the controller's producer
  // state was handed out again by the next controller after a SIGKILL (attack13 F4).
  overrides.initProducerEpoch = undefined;
  // It stores a commit with no etcd write unless handed one: commitOffsets above is the way in.
  overrides.commitOffsetsReplicated = undefined;
  if (local.updateTopicConfig !== undefined) {
    overrides.updateTopicConfig = async (name: string, patch: Record<string, unknown>) => {
      if (node.topicConfig(name) === undefined) return local.updateTopicConfig!(name, patch);
      // Merged into etcd's current config, again if another broker's change landed first: a
      // PATCH names only the keys it changes (attack F4).
      await node.updateTopicConfig(name, (config) => {
        for (const key of ["replication_factor", "min_insync_replicas"])
          if (Object.hasOwn(patch ?? {}, key) && patch[key] !== config[key as keyof TopicConfig])
            throw new BrokerError(
              Errors.invalidConfig,
              `Invalid topic config "${key}": it is fixed when the topic is created (${config[key as keyof TopicConfig]})`,
            );
        return mergeTopicConfig(config, patch);
      });
      return describe(name);
    };
  }
  const extra = {
    storedGroupsLoaded: (): Promise<void> =>
      node.controller.isController ? loadStoredGroups().catch(() => {}) : Promise.resolve(),
  };
  if (node.controller.isController) loadStoredGroups().catch(() => {}); // retried on use
  return new Proxy(local, {
    get(target, prop) {
      if (prop === "storedGroupsLoaded") return extra.storedGroupsLoaded;
      if (Object.hasOwn(overrides, prop)) return overrides[prop as keyof Broker];
      // Durable Streams make their topics locally, outside etcd: not in a cluster (yet).
      if (prop === "streams") return undefined;
      // The target as receiver: LocalBroker's getters read private fields.
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  }) as ClusterBroker;
}
