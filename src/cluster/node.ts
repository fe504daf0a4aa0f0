/**
 * One broker as a member of a cluster (docs/cluster.md "How to run three brokers and a
 * three-member etcd", "Topics"): it joins (membership), runs for controller, publishes its log
 * ends, keeps a view of the cluster's keys in etcd (brokers, controller, topics, partitions) from
 * one watch, creates and deletes its local topics as the keys say, and feeds the replication
 * layer ({@link ReplicaSink}) every partition state that names it.
 *
 * Keys it reads and writes (under the cluster prefix): `brokers/<id>` (its registration, through
 * membership.ts), `log_ends/<id>` (on its lease), `controller` (controller.ts), `topics/<name>`
 * (the topic config JSON, with `replication_factor` and `min_insync_replicas`, and the topic id:
 * topic-id.ts) and
 * `partitions/<name>/<p>` (partition-state.ts), both written by {@link ClusterNode.createTopic}
 * in one transaction.
 *
 * Layer rule: time through {@link Clock}, randomness through {@link Prng}; no `node:*`.
 */
import { defaultTopicConfig } from "../broker/config.ts";
import { BrokerError, Errors } from "../broker/errors.ts";
import type {
  Broker,
  ClusterMetadata,
  ClusterPartitionInfo,
  TopicConfig,
  ReplicationSnapshot,
} from "../broker/types.ts";
import type { Clock, Timer } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { Prng } from "../lib/prng.ts";
import { Controller, lapseGraceMsDefault } from "./controller.ts";
import { type LeaveDrain, leaveDrainMsDefault } from "./replica-manager.ts";
import type { PeerLinkStatus } from "./peer-links.ts";
import {
  type Etcd,
  EtcdError,
  type EtcdEvent,
  type EtcdKeyValue,
  type EtcdOp,
  type EtcdWatch,
} from "./etcd.ts";
import {
  dataDirKey,
  deletedTopicKey,
  logEndsKey,
  parsePartitionKey,
  partitionKey,
  topicKey,
} from "./keys.ts";
import {
  type BrokerRegistration,
  type JoinOptions,
  joinCluster,
  incarnationRevision,
  boundedStep,
  leaveEtcdStepMsDefault,
  type Membership,
  parseRegistration,
  type StepOutcome,
} from "./membership.ts";
import {
  compareIncarnation,
  formatTopicRecord,
  newTopicId,
  parseTopicRecord,
  type TopicIdOrigin,
  upgradeTopicId,
} from "./topic-id.ts";
import {
  formatPartitionState,
  initialPartitionState,
  noLeader,
  type PartitionState,
  parsePartitionState,
  resignLeadership,
} from "./partition-state.ts";

/**
 * What the node feeds the replication layer (the contract of `cluster/replica-manager.ts`'s
 * `ReplicaManager`; docs/cluster.md "Replication").
 */
export interface ReplicaSink {
  /** Live brokers' registrations; called on every membership change. */
  setBrokers(brokers: ReadonlyMap<number, BrokerRegistration>): void;
  /** Become leader / follower / neither for one partition whose state names this node. */
  applyPartitionState(
    topic: string,
    partition: number,
    state: PartitionState,
    modRevision: string,
  ): Promise<void>;
  /** This broker's log end offset per "topic/partition" (published for ELR eligibility). */
  logEndOffsets(): Map<string, number>;
  /**
   * The leader epoch of the last record below each given end, for the partitions whose
   * leader-epoch history is open (published beside the log ends: docs/cluster.md "Partition
   * state"). Absent: none are published.
   */
  lastEpochs?(ends: ReadonlyMap<string, number>): Map<string, number>;
  /**
   * The newest leader epoch in one partition's leader-epoch history (-1: none), undefined if it
   * is not open (`ReplicaManager.lastEpoch`).
   */
  lastEpoch?(topic: string, partition: number): number | undefined;
  /** Membership lease lost / regained: while lost, nothing new is acknowledged. */
  setMembershipLive(live: boolean): void;
  /**
   * Leaving (`ReplicaManager.leave`): admit no produce and shrink no ISR, and resolve once the
   * followers of every led partition hold its log (or after `drainMs`).
   */
  leave?(drainMs: number): Promise<LeaveDrain>;
  /** Drops a partition whose topic was deleted (called before the local topic is deleted). */
  forgetPartition?(topic: string, partition: number): Promise<void>;
  /** What this broker knows of its replicas (as leader: each follower's position and lag). */
  describe?(): {
    topic: string;
    partition: number;
    role: string;
    high_watermark: number;
    log_end_offset: number;
    followers: { node_id: number; durable_offset: number; lag: number; caught_up_ms_ago: number }[];
  }[];
  /** As follower: how far behind the leader each partition is (`ReplicaManager.fetchLag`). */
  fetchLag?(): { topic: string; partition: number; records: number; ms: number }[];
  close(): Promise<void>;
}

/** Options of {@link ClusterNode.start}. */
export interface ClusterNodeOptions
  extends Omit<JoinOptions, "clock" | "prng" | "logger" | "etcd"> {
  etcd: Etcd;
  clock: Clock;
  prng: Prng;
  logger: Logger;
  /** The local broker (its topics are this node's replicas). */
  broker: Broker;
  /**
   * Makes the replication layer once the node has joined (it needs the membership), or
   * undefined for none (the control plane alone).
   */
  replicas?: (membership: Membership) => ReplicaSink;
  /** Controller resync period, ms (default 10000). */
  resyncMs?: number;
  /** How long a vanished registration keeps its place before it counts as gone, ms (`ControllerOptions.lapseGraceMs`). */
  lapseGraceMs?: number;
  /** Preferred leader check period while this broker is the controller, ms; 0: off (`ControllerOptions.rebalanceMs`). */
  rebalanceMs?: number;
  /** This broker's replica-fetch links to other brokers (`PeerLinks.snapshot`), for metadata and metrics. */
  peerLinks?: () => PeerLinkStatus[];
  /**
   * Random bytes for topic ids (docs/cluster.md "Topic ids"): the runtime's CSPRNG in a broker.
   * Default: drawn from `prng` (tests).
   */
  randomBytes?: (count: number) => Uint8Array;
  /**
   * How long each etcd step of {@link ClusterNode.leave} may take, ms (default
   * `leaveEtcdStepMsDefault`, 1.5 s).
   */
  leaveEtcdStepMs?: number;
  /** etcd watches found deaf and reopened so far (`guardWatches`' `onDeaf`), for metrics. */
  deafWatches?: () => number;
  /**
   * How often the view's keys are compared with etcd's and what differs repaired, in ms
   * (default {@link viewRelistMsDefault}; 0: never). See {@link ClusterNode}.
   */
  relistMs?: number;
  /**
   * How long a difference found may take to arrive by the watch before it is repaired, in ms
   * (default {@link viewRelistGraceMsDefault}).
   */
  relistGraceMs?: number;
  /** Stops the join's retries while etcd is unreachable (a signal during start-up). */
  signal?: { aborted: boolean };
  /**
   * Called once replication has stopped after registering again was refused (another process
   * registered this node id: `Membership.refused`); the caller shuts the broker down.
   */
  onRefused?: (err: Error) => void;
}

/** JSON of `config` with its keys sorted, to compare two configs. */
function canonical(config: TopicConfig): string {
  return JSON.stringify(
    Object.fromEntries(Object.entries(config).sort(([a], [b]) => (a < b ? -1 : 1))),
  );
}

interface PartitionEntry {
  state: PartitionState;
  modRevision: number;
}

/** A topic as etcd holds it (`topics/<name>`: topic-id.ts). */
interface TopicEntry {
  config: TopicConfig;
  modRevision: number;
  /** null: created before topic ids, none added yet. */
  topicId: string | null;
  origin: TopicIdOrigin;
  /** The record's etcd create revision (written into the copies' `topic.json` with the id). */
  createRevision: number;
}

/**
 * How long a group commit's etcd write is tried again after etcd failed it (an election, or a
 * member that failed after the write was sent), in ms: within the clients' 30 s request
 * timeout, beyond etcd's usual elections (docs/cluster.md "Consumer groups").
 */
export const groupOffsetsRetryMs = 12_000;

/**
 * How many times {@link ClusterNode.updateTopicConfig} puts a topic's config when other changes
 * keep landing first (docs/http-api.md "Errors", `concurrent_update`). The first attempt can lose
 * to changes this broker's watch has not brought yet; every later one reads etcd first and loses
 * only to a change that landed since, each landing at most once: so 7 changes of one topic sent
 * at once (and no more) all land.
 */
export const topicConfigAttempts = 8;

/** Default period of the view's comparison with etcd's keys, in ms. */
export const viewRelistMsDefault = 60_000;
/** Default wait for differences found in flight on the watch before they are repaired, in ms. */
export const viewRelistGraceMsDefault = 1000;

/**
 * A broker's membership of the cluster and its view of the cluster's keys. Start with
 * {@link ClusterNode.start}; {@link close} leaves (revokes the lease).
 *
 * The view converges even when the watch dropped single events and kept delivering later ones
 * (etcd 3.4 bugs; docs/cluster.md "A watch that goes deaf"): every `relistMs` one keys-only
 * range of the prefix is compared, key by key, with the mod_revision the view holds; a key
 * written later than the view's copy is read and applied as a put, a key the view holds (at or
 * below the range's revision) that etcd lacks as a deletion, through the code that applies
 * the watch's events, with `etcd.view_repaired` (warn). No event or repair older than what the
 * view holds for a key is applied.
 */
export class ClusterNode {
  readonly membership: Membership;
  readonly controller: Controller;
  readonly #o: ClusterNodeOptions;
  readonly #prefix: string;
  readonly #brokers = new Map<number, BrokerRegistration>();
  readonly #topics = new Map<string, TopicEntry>();
  /** `name:local id:etcd id` of copies newer than etcd's topic already logged. */
  readonly #newerLogged = new Set<string>();
  /** `name@mod_revision` of topic records without an id this broker has tried to give one. */
  readonly #upgradesTried = new Set<string>();
  readonly #partitions = new Map<string, Map<number, PartitionEntry>>();
  /** Partitions deleted from etcd since the last reconcile: their last state, and the deletion's revision. */
  readonly #deleted = new Map<string, Map<number, PartitionEntry>>();
  /** Per group: the claim and the `group_commits/<group>` mod_revision of this broker's last commit. */
  readonly #lastCommits = new Map<string, { claim: number; revision: number }>();
  #commitSeq = 0;
  /** Topic names etcd records as deleted (`deleted_topics/`). */
  readonly #tombstones = new Set<string>();
  /** Local cluster topics etcd neither knows nor records as deleted, already logged. */
  readonly #unknownLogged = new Set<string>();
  #replicas: ReplicaSink | null = null;
  /** `topic/partition@mod_revision` of offline states this broker (in their ELR) published log ends for. */
  readonly #offlinePublished = new Set<string>();
  /** The etcd revision each registered broker's incarnation first registered at. */
  readonly #registeredAt = new Map<number, number>();
  #republishTimer: Timer | null = null;
  /**
   * Topics this data directory held before it joined the cluster (no `replication_factor` in
   * their config): they stay local, and no cluster topic ever adopts their logs (attack11 F5).
   */
  readonly #localTopics = new Set<string>();
  /** Local topics whose name a cluster topic also has, already logged. */
  readonly #conflictsLogged = new Set<string>();
  #watch: EtcdWatch | null = null;
  /** Per key of the view (brokers, topics, tombstones, partition states): its mod_revision. */
  readonly #keyRevisions = new Map<string, number>();
  /** Keys of the view seen deleted since the last comparison with etcd, and the deletion's revision. */
  readonly #keyDeletions = new Map<string, number>();
  #relistTimer: Timer | null = null;
  #closed = false;
  /** {@link leave}, once begun. */
  #leaving: Promise<void> | null = null;
  #closing: Promise<void> | null = null;
  /** Applies local changes one at a time, in etcd's order. */
  #applying: Promise<void> = Promise.resolve();
  #viewRevision = 0;
  readonly #revisionWaiters = new Set<{ revision: number; resolve: () => void }>();

  private constructor(options: ClusterNodeOptions, membership: Membership) {
    this.#o = options;
    this.#prefix = membership.prefix;
    this.membership = membership;
    this.controller = new Controller({
      etcd: options.etcd,
      clock: options.clock,
      prng: options.prng,
      logger: options.logger,
      prefix: this.#prefix,
      nodeId: options.nodeId,
      lease: () => membership.leaseId,
      resyncMs: options.resyncMs,
      lapseGraceMs: options.lapseGraceMs,
      rebalanceMs: options.rebalanceMs,
    });
  }

  /** The etcd client the node uses (the cluster's registry and keys share it: `cluster-state.ts`). */
  get etcd(): Etcd {
    return this.#o.etcd;
  }

  /**
   * Joins the cluster (retrying while etcd is unreachable), publishes the log ends, reads the
   * cluster's keys, applies them locally, and starts watching and campaigning.
   * @throws ClusterJoinError for a refusal to join (duplicate node id, another cluster's data
   *   directory, ...); EtcdError if etcd fails after the join.
   */
  static async start(options: ClusterNodeOptions): Promise<ClusterNode> {
    const membership = await joinCluster(options, options.signal);
    const node = new ClusterNode(options, membership);
    try {
      await node.#begin();
    } catch (err) {
      await node.close();
      throw err;
    }
    return node;
  }

  async #begin(): Promise<void> {
    const { logger } = this.#o;
    this.#replicas = this.#o.replicas?.(this.membership) ?? null;
    for (const t of await this.#o.broker.listTopics())
      if (t.config.replication_factor === undefined) this.#localTopics.add(t.name);
    if (this.#localTopics.size > 0)
      logger.log("warn", "cluster.local_topics", {
        topics: [...this.#localTopics].sort(),
        action:
          "made on this data directory before it joined the cluster: served by this broker alone, not replicated; no cluster topic of these names can be created while this broker is registered",
      });
    await this.#publishLogEnds();
    this.membership.onRefused((err) => {
      // Not this node any more: stop following and leading at once (attack11 F4), then let the
      // caller shut down; close() later finds replication already closed.
      void (this.#replicas?.close() ?? Promise.resolve())
        .catch((e: unknown) =>
          logger.log("error", "cluster.replication_close_failed", { error: errorMessage(e) }),
        )
        .finally(() => this.#o.onRefused?.(err));
    });
    this.membership.onLiveChange((live) => {
      this.#replicas?.setMembershipLive(live);
      // `log_ends/` lives on the lease: publish it again on the new one.
      if (live) void this.#republishUntilDone();
    });
    await this.#load();
    this.#scheduleRelist();
    await this.controller.start();
    // Which data directory holds this node now (no lease: it outlives this process), for a
    // later start on a new directory to record whose place it takes (docs/cluster.md
    // "Replacing a broker's disk, backing up etcd").
    await this.#o.etcd
      .put(dataDirKey(this.#prefix, this.#o.nodeId), this.#o.dataDirId)
      .catch((err: unknown) =>
        logger.log("warn", "cluster.data_dir_record_failed", { error: errorMessage(err) }),
      );
  }

  /** Reads every key of the cluster, applies them, and watches from there on. */
  async #load(): Promise<void> {
    const { etcd } = this.#o;
    const { kvs, revision } = await etcd.list(`${this.#prefix}/`);
    this.#brokers.clear();
    this.#registeredAt.clear();
    this.#topics.clear();
    this.#partitions.clear();
    this.#tombstones.clear();
    this.#keyRevisions.clear();
    this.#keyDeletions.clear();
    for (const kv of kvs) this.#take({ type: "put", kv });
    this.#viewRevision = revision;
    this.#replicas?.setBrokers(this.#brokers);
    await this.#enqueue(() => this.#reconcile(null));
    await this.#watch?.cancel();
    this.#watch = etcd.watch(
      { key: `${this.#prefix}/`, prefix: true, startRevision: revision + 1 },
      {
        onEvents: (events) => this.#onEvents(events),
        onCompacted: () => void this.#load().catch(() => {}),
      },
    );
  }

  #onEvents(events: EtcdEvent[]): void {
    const revision = events[events.length - 1].kv.modRevision;
    void this.#apply(events).done.then(() => {
      this.#viewRevision = Math.max(this.#viewRevision, revision);
      for (const w of this.#revisionWaiters) {
        if (w.revision <= this.#viewRevision) {
          this.#revisionWaiters.delete(w);
          w.resolve();
        }
      }
    });
  }

  /**
   * Takes events into the view (each only if newer than what the view holds for its key: a
   * repair may have brought it already) and reconciles the topics they touched. Returns the keys
   * taken, and `done`, resolved once reconciled.
   */
  #apply(events: EtcdEvent[]): { taken: string[]; done: Promise<void> } {
    let brokersChanged = false;
    const touched = new Set<string>();
    const taken: string[] = [];
    for (const e of events) {
      if (this.#inView(e.kv.key)) {
        const held = this.#keyRevisions.get(e.kv.key) ?? this.#keyDeletions.get(e.kv.key) ?? 0;
        if (e.kv.modRevision <= held) continue;
      }
      taken.push(e.kv.key);
      const what = this.#take(e);
      if (what === "broker") brokersChanged = true;
      else if (what !== null) touched.add(what);
    }
    if (brokersChanged) this.#replicas?.setBrokers(this.#brokers);
    return { taken, done: this.#enqueue(() => this.#reconcile(touched)) };
  }

  /** Whether `key` is one the view holds (see {@link #take}). */
  #inView(key: string): boolean {
    const p = this.#prefix;
    return (
      key.startsWith(`${p}/brokers/`) ||
      key.startsWith(`${p}/deleted_topics/`) ||
      key.startsWith(`${p}/topics/`) ||
      parsePartitionKey(p, key) !== null
    );
  }

  /** Compares the view with etcd every `relistMs` (see {@link ClusterNode}). */
  #scheduleRelist(): void {
    const periodMs = this.#o.relistMs ?? viewRelistMsDefault;
    if (this.#closed || periodMs <= 0) return;
    this.#relistTimer = this.#o.clock.setTimer(periodMs, () => {
      this.#relistTimer = null;
      void this.#relist()
        .catch((err: unknown) =>
          // etcd unreachable: the next period tries again.
          this.#o.logger.log("debug", "etcd.view_relist_failed", { error: errorMessage(err) }),
        )
        .finally(() => this.#scheduleRelist());
    });
  }

  /** One comparison of the view with etcd's keys, and the repair of what differs. */
  async #relist(): Promise<void> {
    const { etcd, clock, logger } = this.#o;
    const listed = await etcd.changedSince({ key: `${this.#prefix}/`, prefix: true, after: 0 });
    if (this.#closed) return;
    const at = listed.revision;
    let differ = this.#differences(listed.changed, at);
    if (differ.puts.length + differ.deletes.length > 0) {
      // Possibly still on its way to the watch: give it the grace, then compare again.
      const graceMs = this.#o.relistGraceMs ?? viewRelistGraceMsDefault;
      await new Promise<void>((resolve) => clock.setTimer(graceMs, resolve));
      if (this.#closed) return;
      differ = this.#differences(listed.changed, at);
    }
    const events: EtcdEvent[] = [];
    for (const key of differ.puts) {
      const kv = await etcd.get(key);
      // Deleted since the range: the watch brings that, or the next comparison.
      if (kv !== null) events.push({ type: "put", kv });
    }
    for (const key of differ.deletes)
      events.push({
        type: "delete",
        kv: { key, value: "", createRevision: 0, modRevision: at, version: 0, lease: "0" },
      });
    if (this.#closed) return;
    const { taken, done } = events.length === 0 ? { taken: [], done: null } : this.#apply(events);
    // Deletions at or below `at` are in the range: no older put of their key can come back.
    for (const [key, revision] of this.#keyDeletions)
      if (revision <= at) this.#keyDeletions.delete(key);
    if (taken.length > 0)
      logger.log("warn", "etcd.view_repaired", {
        revision: at,
        keys: taken.sort(),
        action:
          "the watch missed these changes (a dropped event) and kept delivering later ones: applied them now",
      });
    await done;
  }

  /**
   * Keys of etcd's range (keys only, read at revision `at`) written later than the view's copy
   * or deletion of them (`puts`), and keys the view holds, written at or below `at`, that the
   * range lacks (`deletes`).
   */
  #differences(listed: EtcdKeyValue[], at: number): { puts: string[]; deletes: string[] } {
    const puts: string[] = [];
    const deletes: string[] = [];
    const present = new Set<string>();
    for (const kv of listed) {
      if (!this.#inView(kv.key)) continue;
      present.add(kv.key);
      const held = this.#keyRevisions.get(kv.key) ?? this.#keyDeletions.get(kv.key) ?? 0;
      if (kv.modRevision > held) puts.push(kv.key);
    }
    for (const [key, revision] of this.#keyRevisions)
      if (!present.has(key) && revision <= at) deletes.push(key);
    return { puts, deletes };
  }

  /** Updates the view with one event; returns "broker", a touched topic name, or null. */
  #take(e: EtcdEvent): string | null {
    const p = this.#prefix;
    const key = e.kv.key;
    if (this.#inView(key)) {
      if (e.type === "delete") {
        this.#keyRevisions.delete(key);
        this.#keyDeletions.set(key, e.kv.modRevision);
      } else {
        this.#keyRevisions.set(key, e.kv.modRevision);
        this.#keyDeletions.delete(key);
      }
    }
    try {
      if (key.startsWith(`${p}/brokers/`)) {
        const id = Number(key.slice(`${p}/brokers/`.length));
        if (e.type === "delete") {
          this.#brokers.delete(id);
          this.#registeredAt.delete(id);
          // Our own registration gone while we run: etcd revoked the lease (it does so across
          // its leader changes). Register again now, with the same incarnation, rather than at
          // the next renewal (docs/cluster.md "Riding out a lost lease").
          if (id === this.#o.nodeId && !this.#closed)
            void this.membership.checkNow().catch(() => {});
        } else {
          const registration = parseRegistration(e.kv);
          this.#brokers.set(id, registration);
          this.#registeredAt.set(id, incarnationRevision(e.kv, registration));
          // Joining refuses this (membership.ts); two brokers starting at once can still race.
          if (
            id !== this.#o.nodeId &&
            (registration.tls === true) !== (this.#o.advertise.tls === true)
          )
            this.#o.logger.log("error", "cluster.tls_mismatch", {
              peer: id,
              peer_tcp: registration.tcp,
              peer_tls: registration.tls === true,
              tls: this.#o.advertise.tls === true,
              action:
                "these brokers cannot replicate from each other (never over plain TCP): start every broker with --tls-cert, --tls-key and --cluster-tls-ca, or none",
            });
        }
        return "broker";
      }
      if (key.startsWith(`${p}/deleted_topics/`)) {
        const name = key.slice(`${p}/deleted_topics/`.length);
        if (e.type === "delete") this.#tombstones.delete(name);
        else this.#tombstones.add(name);
        return name;
      }
      if (key.startsWith(`${p}/topics/`)) {
        const name = key.slice(`${p}/topics/`.length);
        if (e.type === "delete") this.#topics.delete(name);
        else
          this.#topics.set(name, {
            ...parseTopicRecord(e.kv.value),
            modRevision: e.kv.modRevision,
            createRevision: e.kv.createRevision,
          });
        return name;
      }
      const where = parsePartitionKey(p, key);
      if (where !== null) {
        let map = this.#partitions.get(where.topic);
        if (e.type === "delete") {
          const last = map?.get(where.partition);
          if (last !== undefined) {
            let gone = this.#deleted.get(where.topic);
            if (gone === undefined) this.#deleted.set(where.topic, (gone = new Map()));
            gone.set(where.partition, { state: last.state, modRevision: e.kv.modRevision });
          }
          map?.delete(where.partition);
          if (map?.size === 0) this.#partitions.delete(where.topic);
        } else {
          if (map === undefined) {
            map = new Map();
            this.#partitions.set(where.topic, map);
          }
          map.set(where.partition, {
            state: parsePartitionState(key, e.kv.value),
            modRevision: e.kv.modRevision,
          });
        }
        return where.topic;
      }
    } catch (err) {
      this.#o.logger.log("error", "cluster.bad_key", { key, error: errorMessage(err) });
    }
    return null;
  }

  #enqueue(task: () => Promise<void>): Promise<void> {
    const run = this.#applying.then(task).catch((err) => {
      this.#o.logger.log("error", "cluster.apply_failed", { error: errorMessage(err) });
    });
    this.#applying = run;
    return run;
  }

  /** Whether this node holds a replica of some partition of `topic`. */
  #holds(topic: string): boolean {
    const map = this.#partitions.get(topic);
    if (map === undefined) return false;
    for (const { state } of map.values()) if (state.replicas.includes(this.#o.nodeId)) return true;
    return false;
  }

  /**
   * Makes the local topics agree with the view for `topics` (every topic when null): creates
   * the ones this node holds a replica of, deletes the ones etcd no longer has, and hands every
   * partition state naming this node to the replication layer.
   */
  async #reconcile(topics: Set<string> | null): Promise<void> {
    if (this.#closed) return;
    const { broker, logger, nodeId } = this.#o;
    const copies = new Map((await broker.listTopics()).map((t) => [t.name, t]));
    const local = new Map([...copies].map(([name, t]) => [name, t.config]));
    const names = topics ?? new Set([...this.#topics.keys(), ...local.keys()]);
    let republish = false;
    for (const name of names) {
      const topic = this.#topics.get(name);
      const map = this.#partitions.get(name);
      if (topic === undefined) {
        // Deleted in etcd. A local topic without replication_factor was made before this data
        // directory joined a cluster: it is kept (and served by this broker alone).
        if (
          local.get(name)?.replication_factor !== undefined &&
          !this.#deleted.has(name) &&
          !this.#tombstones.has(name)
        ) {
          // Neither seen deleted nor recorded as deleted: etcd has never heard of it (restored
          // from a snapshot older than the topic, or the wrong etcd). Its records are kept.
          if (!this.#unknownLogged.has(name)) {
            this.#unknownLogged.add(name);
            // Other brokers refuse to create a topic of this name while these files are here.
            void this.#publishLogEnds().catch((err: unknown) =>
              logger.log("warn", "cluster.log_ends_failed", { error: errorMessage(err) }),
            );
            logger.log("error", "cluster.topic_unknown", {
              topic: name,
              action:
                "etcd has no such topic and no record of its deletion (was etcd restored from an older snapshot?): its files are kept on this data directory, not served (docs/cluster.md, on restoring etcd from a snapshot)",
            });
          }
          continue;
        }
        if (local.get(name)?.replication_factor !== undefined) {
          // Replication lets go of the partitions first (leader -1: neither leader nor follower),
          // those the local copy has: the deletions seen may include an earlier incarnation's
          // partitions beyond its count (attack16 F5).
          const localPartitions = copies.get(name)?.partitions.length ?? 0;
          for (const [partition, last] of this.#deleted.get(name) ?? []) {
            if (partition >= localPartitions) continue;
            if (this.#replicas === null || !last.state.replicas.includes(nodeId)) continue;
            await this.#replicas.applyPartitionState(
              name,
              partition,
              {
                ...last.state,
                leader: -1,
                leader_epoch: last.state.leader_epoch + 1,
                isr: [],
                elr: [],
              },
              String(last.modRevision),
            );
            await this.#replicas.forgetPartition?.(name, partition);
          }
          this.#deleted.delete(name);
          await broker.deleteTopic(name).catch((err) => {
            if (!(err instanceof BrokerError && err.kind === Errors.topicNotFound)) throw err;
          });
          logger.log("info", "cluster.topic_deleted_locally", { topic: name });
        }
        continue;
      }
      if (map === undefined || !this.#holds(name)) {
        // No replica here: a copy of another incarnation is moved aside all the same, so that
        // its log ends are never published under the new topic's partitions (attack16 F2).
        if (
          map !== undefined &&
          !this.#localTopics.has(name) &&
          local.get(name)?.replication_factor !== undefined &&
          (await this.#dropOtherIncarnation(name, copies.get(name), topic, map))
        )
          republish = true;
        continue;
      }
      if (this.#localTopics.has(name)) {
        // A cluster topic of a local topic's name (created before this broker's log_ends said
        // so): its local log is not the cluster topic's. This broker takes no replica of it and
        // hands on any leadership.
        if (!this.#conflictsLogged.has(name)) {
          this.#conflictsLogged.add(name);
          logger.log("error", "cluster.topic_conflict", {
            topic: name,
            node_id: nodeId,
            action: `this broker holds a local topic ${JSON.stringify(name)} made before it joined the cluster: it takes no replica of the cluster topic of that name (its partitions lack this replica) and keeps the local one; delete one of them`,
          });
        }
        for (const [partition, entry] of map)
          await this.#giveUp(name, partition, entry, { eligible: false });
        continue;
      }
      let localConfig = local.get(name);
      if (localConfig !== undefined) {
        // Is the local copy of this topic, or of another of its name (deleted and created again
        // while this broker was down or its watch behind: attack15b F5)?
        let moved: boolean;
        try {
          const copy = copies.get(name);
          moved = await this.#checkIncarnation(
            name,
            copy?.topic_id,
            copy?.topic_revision,
            copy?.partitions.length ?? 0,
            topic,
            map,
          );
        } catch (err) {
          // The copy could not be compared or moved aside (its storage failed): none of its
          // partitions is applied, so it is neither served nor followed; tried at the next change.
          for (const [partition, entry] of map)
            if (entry.state.replicas.includes(nodeId))
              await this.#cannotLead(name, partition, entry, err);
          continue;
        }
        if (moved) {
          localConfig = undefined;
          republish = true;
        }
      }
      // No copy here: only a broker holding one adds an id (its copy's, if it has one), so a
      // random id never races the id the copies already carry.
      if (localConfig !== undefined && canonical(localConfig) !== canonical(topic.config)) {
        // A key etcd no longer holds was removed (PATCH with null): null resets it here too. A
        // key every topic has (segment_bytes, ...) refuses null: absent from etcd (a config
        // written by an older version, or by hand) it means the default.
        const patch: Record<string, unknown> = { ...topic.config };
        const defaults: Record<string, unknown> = { ...defaultTopicConfig };
        for (const key of Object.keys(localConfig))
          if (!Object.hasOwn(patch, key))
            patch[key] = Object.hasOwn(defaults, key) ? defaults[key] : null;
        try {
          await broker.updateTopicConfig?.(name, patch);
        } catch (err) {
          // The partitions' states still apply: a config it cannot take must not stop them.
          logger.log("error", "cluster.topic_config_failed", {
            topic: name,
            error: errorMessage(err),
          });
        }
      }
      if (localConfig === undefined) {
        try {
          await broker.createTopic({
            name,
            partitions: map.size,
            config: { ...topic.config },
            ...(topic.topicId === null
              ? {}
              : { topic_id: topic.topicId, topic_revision: topic.createRevision }),
          });
          logger.log("info", "cluster.topic_created_locally", {
            topic: name,
            partitions: map.size,
          });
        } catch (err) {
          if (!(err instanceof BrokerError && err.kind === Errors.topicExists)) {
            // No replica here (e.g. ENOSPC): hand on the leaderships, go on with other topics.
            for (const [partition, entry] of map)
              await this.#cannotLead(name, partition, entry, err);
            continue;
          }
        }
      }
      if (this.#replicas !== null) {
        for (const [partition, entry] of map) {
          if (!entry.state.replicas.includes(nodeId)) continue;
          try {
            await this.#replicas.applyPartitionState(
              name,
              partition,
              entry.state,
              String(entry.modRevision),
            );
          } catch (err) {
            await this.#cannotLead(name, partition, entry, err);
          }
          // Offline with this broker eligible (ELR): the controller can elect it only from a
          // published log end, and the one published at registration may predate the topic.
          // Even when the apply failed: an ELR election waits for every member's log end, so one
          // that never came would keep the others from leading (attack11 F4's give-up included).
          // Every replica, not only the ELR's: a state older than the replicas' logs waits for
          // every replica's log end, and an unclean election compares every live one's; and
          // when this log is ahead of the state, its log ends tell the controller so
          // (docs/cluster.md "Partition state older than the replicas' logs").
          const offline = `${name}/${partition}@${entry.modRevision}`;
          const s = entry.state;
          const due =
            s.leader === -1 || (this.#replicas.lastEpoch?.(name, partition) ?? -1) > s.leader_epoch;
          if (due && !this.#offlinePublished.has(offline)) {
            this.#offlinePublished.add(offline);
            republish = true;
          }
        }
      }
    }
    if (republish) await this.#republishUntilDone();
  }

  /**
   * For a topic this broker holds no replica of: moves the local copy aside if it is of another
   * incarnation than etcd's (docs/cluster.md "Topic ids"), after replication let go of any of
   * its partitions it still runs, with `cluster.topic_incarnation_replaced` (warn). Resolves with
   * true when it did. A failure is logged (`cluster.apply_failed`); the next change tries again.
   */
  async #dropOtherIncarnation(
    name: string,
    copy: { topic_id?: string; topic_revision?: number } | undefined,
    topic: TopicEntry,
    map: Map<number, PartitionEntry>,
  ): Promise<boolean> {
    const { broker, logger } = this.#o;
    const localId = copy?.topic_id;
    if (compareIncarnation(localId, topic, copy?.topic_revision) !== "other") return false;
    try {
      const running = (this.#replicas?.describe?.() ?? []).filter((r) => r.topic === name);
      for (const { partition } of running) {
        const entry = map.get(partition);
        if (this.#replicas === null || entry === undefined) continue;
        await this.#replicas.applyPartitionState(
          name,
          partition,
          { ...entry.state, leader: -1, isr: [], elr: [] },
          String(entry.modRevision),
        );
      }
      await broker.deleteTopic(name).catch((err) => {
        if (!(err instanceof BrokerError && err.kind === Errors.topicNotFound)) throw err;
      });
    } catch (err) {
      logger.log("error", "cluster.apply_failed", { topic: name, error: errorMessage(err) });
      return false;
    }
    logger.log("warn", "cluster.topic_incarnation_replaced", {
      topic: name,
      local_topic_id: localId ?? null,
      topic_id: topic.topicId,
      action:
        "the local copy is of another topic of this name (deleted and created again while this broker was away), and this broker holds no replica of the new one: moved aside like a deleted topic's copy",
    });
    return true;
  }

  /**
   * Compares the topic id of the local copy of `name` with etcd's (docs/cluster.md "Topic ids";
   * topic-id.ts `compareIncarnation`): the same: nothing; etcd's added by an upgrade to the
   * copy's topic: the copy records it; an older incarnation: the copy is moved aside as a deleted
   * topic's is (replication lets go of its partitions, the local topic is deleted: `trash/`, then
   * removed), with a warning naming both ids, and the caller creates the new empty replica; a
   * newer incarnation than etcd's (etcd restored): kept, an error logged once, and this throws so
   * that no state of the topic is applied; etcd's topic without an id: one is added
   * ({@link #upgradeTopic}) and the copy is kept meanwhile, as before topic ids.
   * Resolves with true when the copy was moved aside.
   * @throws Error for a newer copy; what recording the id or deleting the local topic throws (the
   *   caller gives up the topic's leaderships; the next change tries again).
   */
  async #checkIncarnation(
    name: string,
    localId: string | undefined,
    localRevision: number | undefined,
    localPartitions: number,
    topic: TopicEntry,
    map: Map<number, PartitionEntry>,
  ): Promise<boolean> {
    const { broker, logger, nodeId } = this.#o;
    const relation = compareIncarnation(localId, topic, localRevision);
    if (relation === "same") return false;
    if (relation === "unknown") {
      this.#upgradeTopic(name, localId, topic);
      return false;
    }
    if (relation === "adopt") {
      await broker.setTopicId?.(name, topic.topicId!, topic.createRevision, localId);
      return false;
    }
    if (relation === "newer") {
      // etcd is older than the copy (restored from a snapshot): its records are of a topic etcd
      // no longer knows. Kept, never served or followed, as an unknown topic's (attack15b F8).
      const logged = `${name}:${localId}:${topic.topicId}`;
      if (!this.#newerLogged.has(logged)) {
        this.#newerLogged.add(logged);
        logger.log("error", "cluster.topic_incarnation_newer", {
          topic: name,
          local_topic_id: localId ?? null,
          local_topic_revision: localRevision ?? null,
          topic_id: topic.topicId,
          topic_revision: topic.createRevision,
          action: `the local copy is of a later topic of this name than the one etcd holds (was etcd restored from an older snapshot?): its files are kept on this data directory, not served, and this broker takes no replica of the topic etcd holds; stop this broker and move topics/${name} out of its data directory (after copying it if its records matter) to let it replicate that topic`,
        });
      }
      throw new Error(
        `Cannot replicate topic ${JSON.stringify(name)}: the local copy (topic id ${localId}) is of a later topic of this name than etcd's (topic id ${topic.topicId}); kept, not served`,
      );
    }
    // Another incarnation: never served, never adopted, never followed from. Replication lets
    // go of the partitions the copy has; the new topic may have more (attack16 F5).
    for (const [partition, entry] of map) {
      if (partition >= localPartitions) continue;
      if (this.#replicas === null || !entry.state.replicas.includes(nodeId)) continue;
      await this.#replicas.applyPartitionState(
        name,
        partition,
        { ...entry.state, leader: -1, isr: [], elr: [] },
        String(entry.modRevision),
      );
    }
    await broker.deleteTopic(name).catch((err) => {
      if (!(err instanceof BrokerError && err.kind === Errors.topicNotFound)) throw err;
    });
    logger.log("warn", "cluster.topic_incarnation_replaced", {
      topic: name,
      local_topic_id: localId ?? null,
      topic_id: topic.topicId,
      action:
        localId === undefined
          ? "the local copy has no topic id, so it predates the topic etcd holds (made with one): it is another topic of this name, deleted and created again while this broker was away; moved aside like a deleted topic's copy, and an empty replica follows the new topic"
          : "the local copy is of another topic of this name (deleted and created again while this broker was away): moved aside like a deleted topic's copy, and an empty replica follows the new topic",
    });
    return true;
  }

  /**
   * Adds a topic id to a topic etcd holds without one (created before topic ids), by
   * compare-and-set on the record's mod_revision, once per revision; the local copy's id if it
   * has one (topic-id.ts `upgradeTopicId`). A failure is logged; the watch brings the id that
   * another broker added meanwhile.
   */
  #upgradeTopic(name: string, localId: string | undefined, topic: TopicEntry): void {
    const tried = `${name}@${topic.modRevision}`;
    if (this.#upgradesTried.has(tried) || this.#closed) return;
    this.#upgradesTried.add(tried);
    const key = topicKey(this.#prefix, name);
    const topicId = upgradeTopicId(localId, this.#randomBytes);
    const value = formatTopicRecord({ config: topic.config, topicId, origin: "upgrade" });
    void this.#o.etcd
      .txn({
        compare: [{ key, target: "mod_revision", result: "equal", number: topic.modRevision }],
        success: [{ put: { key, value } }],
      })
      .then(
        (result) => {
          if (result.succeeded)
            this.#o.logger.log("info", "cluster.topic_id_added", {
              topic: name,
              topic_id: topicId,
            });
        },
        (err: unknown) =>
          this.#o.logger.log("warn", "cluster.topic_id_add_failed", {
            topic: name,
            error: errorMessage(err),
            action: "tried again at the next change of the topic",
          }),
      );
  }

  /** Random bytes for topic ids: the option's, else from the node's prng. */
  #randomBytes = (count: number): Uint8Array => {
    if (this.#o.randomBytes !== undefined) return this.#o.randomBytes(count);
    const out = new Uint8Array(count);
    for (let i = 0; i < count; i++) out[i] = this.#o.prng.nextU32() & 0xff;
    return out;
  };

  /**
   * Publishes the log ends for an offline partition naming this broker in its ELR; on failure
   * (etcd unreachable) tries again every second until it succeeds or the node closes. An ELR
   * election waits for every member's log end published after the partition went offline
   * (docs/cluster.md "Partition state"), and no other write may come to ask again: one lost
   * publication would keep the partition offline while every replica is up.
   */
  async #republishUntilDone(): Promise<void> {
    try {
      await this.#publishLogEnds();
    } catch (err) {
      this.#o.logger.log("warn", "cluster.log_ends_failed", {
        error: errorMessage(err),
        action: "tried again in 1 s",
      });
      if (this.#closed || this.#republishTimer !== null) return;
      this.#republishTimer = this.#o.clock.setTimer(1000, () => {
        this.#republishTimer = null;
        if (!this.#closed) void this.#republishUntilDone();
      });
    }
  }

  /**
   * A partition state this broker could not apply (its storage failed: ENOSPC, EIO): logged as an
   * error, and if it names this broker leader, the leadership is given up in etcd
   * ({@link resignLeadership}, compare-and-set on the state's revision) so the controller's next
   * pass elects another replica rather than the partition staying without a working leader
   * (attack11 F4). Never throws.
   */
  async #cannotLead(
    topic: string,
    partition: number,
    entry: { state: PartitionState; modRevision: number },
    err: unknown,
  ): Promise<void> {
    const { logger, nodeId } = this.#o;
    const next = resignLeadership(entry.state, nodeId);
    logger.log("error", "cluster.apply_failed", {
      partition: `${topic}/${partition}`,
      leader_epoch: entry.state.leader_epoch,
      error: errorMessage(err),
      action: next === null ? "tried again at the next change" : "leadership given up",
    });
    await this.#giveUp(topic, partition, entry);
  }

  /** Gives up this broker's leadership of a partition in etcd, if the state names it; never throws. */
  async #giveUp(
    topic: string,
    partition: number,
    entry: { state: PartitionState; modRevision: number },
    options: { eligible?: boolean } = {},
  ): Promise<void> {
    const { etcd, logger, nodeId } = this.#o;
    // ISR members not registered, or registered after the state was written (restarted), leave
    // with this broker: otherwise it could be left out of the ISR and the ELR while they make
    // the ISR look full (docs/cluster.md "Partition state").
    const gone = entry.state.isr.filter(
      (id) => (this.#registeredAt.get(id) ?? Number.POSITIVE_INFINITY) > entry.modRevision,
    );
    const next = resignLeadership(entry.state, nodeId, { ...options, gone });
    if (next === null) return;
    const key = partitionKey(this.#prefix, topic, partition);
    try {
      const result = await etcd.txn({
        compare: [{ key, target: "mod_revision", result: "equal", number: entry.modRevision }],
        success: [{ put: { key, value: formatPartitionState(next) } }],
      });
      if (result.succeeded)
        logger.log("warn", "cluster.leadership_given_up", {
          partition: `${topic}/${partition}`,
          leader_epoch: next.leader_epoch,
          isr: next.isr,
          elr: next.elr,
        });
    } catch (e) {
      logger.log("warn", "cluster.leadership_give_up_failed", {
        partition: `${topic}/${partition}`,
        error: errorMessage(e),
      });
    }
  }

  /** Publishes `log_ends/<id>` on the current lease: what this incarnation's logs hold. */
  async #publishLogEnds(): Promise<void> {
    const { etcd, broker, nodeId } = this.#o;
    let ends: Record<string, number> = {};
    // With replication, always an object (empty at start-up, before any history is open): it
    // tells the controller that this broker publishes last epochs, so a log end without one is
    // waited on (the next publication has it), not compared by length alone.
    let lastEpochs: Record<string, number> | undefined;
    if (this.#replicas !== null) {
      const map = this.#replicas.logEndOffsets();
      ends = Object.fromEntries(map);
      const epochs = this.#replicas.lastEpochs?.(map);
      if (epochs !== undefined) lastEpochs = Object.fromEntries(epochs);
    } else
      for (const t of await broker.listTopics())
        for (const p of t.partitions) ends[`${t.name}/${p.partition}`] = p.highWatermark;
    // A local topic's log is no replica of anything: never a claim to lead a cluster topic.
    for (const key of Object.keys(ends))
      if (this.#localTopics.has(key.slice(0, key.lastIndexOf("/")))) {
        delete ends[key];
        if (lastEpochs !== undefined) delete lastEpochs[key];
      }
    const lease = this.membership.leaseId;
    await etcd.put(
      logEndsKey(this.#prefix, nodeId),
      JSON.stringify({
        incarnation: this.membership.incarnation,
        log_end_offsets: ends,
        ...(lastEpochs === undefined ? {} : { last_epochs: lastEpochs }),
        ...(this.#localTopics.size === 0 ? {} : { local_topics: [...this.#localTopics].sort() }),
        ...(this.#unknownLogged.size === 0
          ? {}
          : { unknown_topics: [...this.#unknownLogged].sort() }),
      }),
      { lease },
    );
  }

  /** Resolves once the view (and the local topics) reflect etcd up to `revision`. */
  async #caughtUp(revision: number, timeoutMs = 10_000): Promise<void> {
    if (this.#viewRevision >= revision) return;
    await new Promise<void>((resolve, reject) => {
      const waiter = {
        revision,
        resolve: () => {
          timer.cancel();
          resolve();
        },
      };
      this.#revisionWaiters.add(waiter);
      const timer = this.#o.clock.setTimer(timeoutMs, () => {
        if (!this.#revisionWaiters.delete(waiter)) return;
        reject(
          new BrokerError(
            Errors.unavailable,
            `Cannot confirm the change: this broker has not seen etcd revision ${revision} within ${timeoutMs} ms`,
          ),
        );
      });
    });
  }

  /** Live brokers by node id (registrations as etcd holds them). */
  get brokers(): ReadonlyMap<number, BrokerRegistration> {
    return this.#brokers;
  }

  /** The topic config etcd holds for `name`, or undefined. */
  topicConfig(name: string): TopicConfig | undefined {
    return this.#topics.get(name)?.config;
  }

  /**
   * Whether `name` is a topic this broker keeps the files of although etcd neither knows it nor
   * records its deletion (`cluster.topic_unknown`): not a topic of the cluster, not served.
   */
  isUnknownTopic(name: string): boolean {
    return this.#unknownLogged.has(name) && !this.#topics.has(name);
  }

  /** Topic names in etcd, sorted. */
  topicNames(): string[] {
    return [...this.#topics.keys()].sort();
  }

  /** The state of one partition, or undefined if etcd has none. */
  partitionState(topic: string, partition: number): PartitionState | undefined {
    return this.#partitions.get(topic)?.get(partition)?.state;
  }

  /** What `/metrics` shows of replication (see {@link ReplicationSnapshot}). */
  observeReplication(): ReplicationSnapshot {
    const key = (topic: string, partition: number) => `${topic}\u0000${partition}`;
    const roles = new Map(
      (this.#replicas?.describe?.() ?? []).map((d) => [key(d.topic, d.partition), d]),
    );
    const lags = new Map(
      (this.#replicas?.fetchLag?.() ?? []).map((l) => [key(l.topic, l.partition), l]),
    );
    const me = this.#o.nodeId;
    let offlinePartitions = 0;
    const partitions: ReplicationSnapshot["partitions"] = [];
    for (const [topic, map] of [...this.#partitions].sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0,
    ))
      for (const [partition, { state }] of [...map].sort(([a], [b]) => a - b)) {
        const offline = state.leader === noLeader;
        if (offline) offlinePartitions++;
        if (!state.replicas.includes(me)) continue;
        const d = roles.get(key(topic, partition));
        const role = d?.role === "leader" || d?.role === "follower" ? d.role : "none";
        const lag = lags.get(key(topic, partition));
        partitions.push({
          topic,
          partition,
          role,
          replicas: state.replicas.length,
          isr: state.isr.length,
          minInsyncReplicas: state.min_insync_replicas,
          offline,
          leaderEpoch: state.leader_epoch,
          highWatermark: role === "leader" ? (d?.high_watermark ?? null) : null,
          fetchLag:
            role === "follower" && lag !== undefined ? { records: lag.records, ms: lag.ms } : null,
        });
      }
    return {
      controller: this.controller.isController,
      membershipLive: this.membership.live,
      offlinePartitions,
      ...(this.#o.deafWatches === undefined ? {} : { etcdWatchesDeaf: this.#o.deafWatches() }),
      partitions,
      peers: this.#peerLinks().map((l) => ({
        nodeId: l.node_id,
        tls: l.tls,
        ok: l.ok,
        tlsFailure: l.tls_failure,
      })),
    };
  }

  /** This broker's replica-fetch links to the live brokers, by node id. */
  #peerLinks(): NonNullable<ClusterMetadata["peer_links"]> {
    const byAddress = new Map([...this.#brokers.values()].map((r) => [r.tcp, r.node_id]));
    const out: NonNullable<ClusterMetadata["peer_links"]> = [];
    for (const l of this.#o.peerLinks?.() ?? []) {
      const id = byAddress.get(l.tcp);
      if (id !== undefined && id !== this.#o.nodeId) out.push({ node_id: id, ...l });
    }
    return out.sort((a, b) => a.node_id - b.node_id);
  }

  /** Whether this node holds `topic` locally (it is a replica of one of its partitions). */
  holds(topic: string): boolean {
    return this.#holds(topic);
  }

  /**
   * Brokers, controller, and the partitions of `topics` (every topic when absent).
   * @throws BrokerError topic_not_found for a named topic etcd does not have.
   */
  metadata(topics?: readonly string[]): ClusterMetadata {
    const names = topics ?? this.topicNames();
    const led = new Map(
      (this.#replicas?.describe?.() ?? [])
        .filter((d) => d.role === "leader")
        .map((d) => [`${d.topic}/${d.partition}`, d]),
    );
    return {
      cluster_id: this.membership.clusterId,
      node_id: this.#o.nodeId,
      controller: this.controller.current?.node_id ?? -1,
      brokers: [...this.#brokers.values()]
        .sort((a, b) => a.node_id - b.node_id)
        .map((r) => ({
          node_id: r.node_id,
          tcp: r.tcp,
          http: r.http,
          ...(r.kafka === undefined ? {} : { kafka: r.kafka }),
          data_dir_id: r.data_dir_id,
        })),
      topics: names.map((name) => {
        const map = this.#partitions.get(name);
        if (!this.#topics.has(name) || map === undefined)
          throw new BrokerError(
            Errors.topicNotFound,
            `Topic ${JSON.stringify(name)} does not exist`,
          );
        const partitions: ClusterPartitionInfo[] = [...map.entries()]
          .sort((a, b) => a[0] - b[0])
          .map(([partition, { state }]) => {
            const mine = led.get(`${name}/${partition}`);
            return {
              partition,
              leader: state.leader,
              leader_epoch: state.leader_epoch,
              replicas: state.replicas,
              isr: state.isr,
              elr: state.elr,
              min_insync_replicas: state.min_insync_replicas,
              ...(state.forgotten === undefined ? {} : { forgotten: state.forgotten }),
              ...(mine === undefined
                ? {}
                : {
                    high_watermark: mine.high_watermark,
                    log_end_offset: mine.log_end_offset,
                    followers: mine.followers,
                  }),
            };
          });
        return { name, partitions };
      }),
      peer_links: this.#peerLinks(),
    };
  }

  /**
   * Creates a topic in the cluster: `topics/<name>` and every `partitions/<name>/<p>` in one
   * transaction, replicas assigned round-robin over the live brokers from a random offset.
   * Resolves once this broker's view has the topic (and its local replica exists).
   * @throws BrokerError invalid_config (replication_factor above the live brokers, min ISR above
   *   the replication factor), topic_exists, unavailable (etcd unreachable).
   */
  async createTopic(name: string, partitions: number, config: TopicConfig): Promise<TopicConfig> {
    const { etcd, prng } = this.#o;
    const live = [...this.#brokers.keys()].sort((a, b) => a - b);
    const rf = config.replication_factor ?? Math.min(3, live.length);
    if (rf > live.length)
      throw new BrokerError(
        Errors.invalidConfig,
        `Invalid topic config "replication_factor": ${rf} needs ${rf} live brokers, ${live.length} ${live.length === 1 ? "is" : "are"} live (node ${live.join(", ")})`,
      );
    if (rf < 1)
      throw new BrokerError(Errors.unavailable, "Cannot create a topic: no broker is live");
    const minIsr = config.min_insync_replicas ?? Math.min(2, rf);
    if (minIsr > rf)
      throw new BrokerError(
        Errors.invalidConfig,
        `Invalid topic config "min_insync_replicas": ${minIsr} is more than replication_factor ${rf}`,
      );
    const stored: TopicConfig = { ...config, replication_factor: rf, min_insync_replicas: minIsr };
    await this.#refuseLocalName(name);
    const start = prng.nextU32() % live.length;
    const tKey = topicKey(this.#prefix, name);
    const topicId = newTopicId(this.#randomBytes);
    const puts: EtcdOp[] = [
      {
        put: {
          key: tKey,
          value: formatTopicRecord({ config: stored, topicId, origin: "creation" }),
        },
      },
      { delete: { key: deletedTopicKey(this.#prefix, name) } },
    ];
    for (let p = 0; p < partitions; p++) {
      const replicas = Array.from({ length: rf }, (_, i) => live[(start + p + i) % live.length]);
      puts.push({
        put: {
          key: partitionKey(this.#prefix, name, p),
          value: formatPartitionState(initialPartitionState(replicas, minIsr)),
        },
      });
    }
    const result = await this.#etcdCall(`create topic ${JSON.stringify(name)}`, () =>
      etcd.txn({
        compare: [{ key: tKey, target: "create_revision", result: "equal", number: 0 }],
        success: puts,
      }),
    );
    if (!result.succeeded)
      throw new BrokerError(Errors.topicExists, `Topic ${JSON.stringify(name)} already exists`);
    await this.#caughtUp(result.revision);
    return stored;
  }

  /**
   * Refuses a cluster topic named like a local topic of some broker (made on its data directory
   * before it joined: `local_topics` in its `log_ends/`), whose records it would otherwise take
   * for the new topic's (attack11 F5).
   * @throws BrokerError topic_exists naming the broker; unavailable if etcd cannot be read.
   */
  async #refuseLocalName(name: string): Promise<void> {
    const holders = this.#localTopics.has(name) ? [this.#o.nodeId] : [];
    const keepers = this.#unknownLogged.has(name) ? [this.#o.nodeId] : [];
    const { kvs } = await this.#etcdCall("read the brokers' local topics", () =>
      this.#o.etcd.list(`${this.#prefix}/log_ends/`),
    );
    for (const kv of kvs) {
      let local: unknown;
      let unknown: unknown;
      try {
        ({ local_topics: local, unknown_topics: unknown } = JSON.parse(kv.value) as {
          local_topics?: unknown;
          unknown_topics?: unknown;
        });
      } catch {
        continue;
      }
      const id = Number(kv.key.slice(`${this.#prefix}/log_ends/`.length));
      if (Array.isArray(local) && local.includes(name) && !holders.includes(id)) holders.push(id);
      if (Array.isArray(unknown) && unknown.includes(name) && !keepers.includes(id))
        keepers.push(id);
    }
    if (keepers.length > 0)
      // Their files are of an earlier topic of this name (etcd restored from an older snapshot):
      // a new topic would take them for its own replicas and serve their records (attack15b F8).
      throw new BrokerError(
        Errors.topicExists,
        `Cannot create topic ${JSON.stringify(name)}: ${keepers.length === 1 ? "node" : "nodes"} ${keepers.sort((a, b) => a - b).join(", ")} ${keepers.length === 1 ? "keeps" : "keep"} the files of a topic of that name that etcd does not know (cluster.topic_unknown: etcd restored from an older snapshot?), which a new topic would take for its own; stop that broker and remove topics/${name} from its data directory (after copying it if its records matter), or choose another name`,
      );
    if (holders.length === 0) return;
    throw new BrokerError(
      Errors.topicExists,
      `Cannot create topic ${JSON.stringify(name)}: node ${holders.sort((a, b) => a - b).join(", ")} holds a local topic of that name, made on its data directory before it joined the cluster (served by that broker alone, not replicated); choose another name`,
    );
  }

  /**
   * Deletes a topic from the cluster (its topic key and every partition key, one transaction);
   * each replica deletes its local copy when it sees that. Resolves once this broker has.
   * @throws BrokerError topic_not_found, unavailable.
   */
  async deleteTopic(name: string): Promise<void> {
    const { etcd } = this.#o;
    const tKey = topicKey(this.#prefix, name);
    const result = await this.#etcdCall(`delete topic ${JSON.stringify(name)}`, () =>
      etcd.txn({
        compare: [{ key: tKey, target: "create_revision", result: "greater", number: 0 }],
        success: [
          { delete: { key: tKey } },
          { delete: { key: `${this.#prefix}/partitions/${name}/`, prefix: true } },
          // So that a broker down now deletes its copy when it starts (keys.ts).
          { put: { key: deletedTopicKey(this.#prefix, name), value: "{}" } },
        ],
      }),
    );
    if (!result.succeeded)
      throw new BrokerError(Errors.topicNotFound, `Topic ${JSON.stringify(name)} does not exist`);
    await this.#caughtUp(result.revision);
  }

  /**
   * Changes the topic config etcd holds: `change` maps the current config to the new one, which
   * is put with a compare-and-set on the key's mod_revision. When another broker changed the
   * topic meanwhile (a PATCH of other keys through it), the config is read again from etcd and
   * `change` applied to that, up to {@link topicConfigAttempts} times, so concurrent patches of
   * different keys all land and none undoes another (attack F4: one of them was answered 503).
   * Replicas apply the result when they see it; resolves once this broker has.
   * @throws BrokerError topic_not_found (also when deleted meanwhile); concurrent_update when
   *   every attempt met another change; unavailable if etcd cannot be reached; whatever `change`
   *   throws (invalid_config).
   */
  async updateTopicConfig(
    name: string,
    change: (current: TopicConfig) => TopicConfig,
  ): Promise<void> {
    const { etcd } = this.#o;
    const what = `change topic ${JSON.stringify(name)}`;
    const missing = () =>
      new BrokerError(Errors.topicNotFound, `Topic ${JSON.stringify(name)} does not exist`);
    let current = this.#topics.get(name);
    if (current === undefined) throw missing();
    const tKey = topicKey(this.#prefix, name);
    for (let attempt = 1; ; attempt++) {
      const next = change(current.config);
      const modRevision = current.modRevision;
      // The topic id stays: the compare-and-set keeps it to the record it was read with.
      const value = formatTopicRecord({ ...current, config: next });
      const result = await this.#etcdCall(what, () =>
        etcd.txn({
          compare: [{ key: tKey, target: "mod_revision", result: "equal", number: modRevision }],
          success: [{ put: { key: tKey, value } }],
        }),
      );
      if (result.succeeded) {
        await this.#caughtUp(result.revision);
        return;
      }
      if (attempt === topicConfigAttempts)
        throw new BrokerError(
          Errors.concurrentUpdate,
          `Cannot change topic ${JSON.stringify(name)}: other changes to its config landed first ${attempt} times in a row; send the change again`,
        );
      // This broker's copy is older than etcd's (its watch has not brought the other change).
      const kv = await this.#etcdCall(what, () => etcd.get(tKey));
      if (kv === null) throw missing();
      current = {
        ...parseTopicRecord(kv.value),
        modRevision: kv.modRevision,
        createRevision: kv.createRevision,
      };
    }
  }

  /**
   * Stores a consumer group's committed offsets in etcd (`group_offsets/<group>/<topic>/<p>`,
   * one transaction): the copy that outlives the broker coordinating the group
   * (docs/cluster.md "Consumer groups"), if this broker's `claim` on the group
   * ({@link claimGroupGeneration}) still holds. Each commit also writes `group_commits/<group>`
   * (a commit id of this broker) and compares that key's mod_revision with the one this broker's
   * last commit left, so commits apply in order and only once: a copy etcd applies late (a
   * member that was paused with it, attack15 F5) finds the key moved on and changes nothing. A
   * transaction that etcd may or may not have applied (`indeterminate`) or that no member took
   * (`unavailable`: an etcd election) is sent again, with backoff, for up to
   * {@link groupOffsetsRetryMs}; a copy that finds the key holding its own commit id was applied
   * (attack13 F2).
   * @returns false when another broker has claimed the group since (nothing written).
   * @throws BrokerError unavailable if etcd does not take it within that time.
   */
  async saveGroupOffsets(
    group: string,
    offsets: readonly { topic: string; partition: number; offset: number }[],
    claim: number,
  ): Promise<boolean> {
    const { etcd, clock } = this.#o;
    const claimKey = `${this.#prefix}/group_generations/${group}`;
    const commitsKey = `${this.#prefix}/group_commits/${group}`;
    const what = `replicate the offsets of group ${JSON.stringify(group)}`;
    const commitId = `${this.#o.nodeId}:${this.membership.incarnation}:${++this.#commitSeq}`;
    const giveUpAtMs = clock.nowMs() + groupOffsetsRetryMs;
    let last = this.#lastCommits.get(group);
    let moved = 0;
    for (let waitMs = 100; ; ) {
      try {
        if (last === undefined || last.claim !== claim) {
          // First commit under this claim: where the group's commits stand now.
          last = { claim, revision: (await etcd.get(commitsKey))?.modRevision ?? 0 };
          this.#lastCommits.set(group, last);
        }
        const result = await etcd.txn({
          compare: [
            { key: claimKey, target: "mod_revision", result: "equal", number: claim },
            { key: commitsKey, target: "mod_revision", result: "equal", number: last.revision },
          ],
          success: [
            ...offsets.map((o) => ({
              put: {
                key: `${this.#prefix}/group_offsets/${group}/${o.topic}/${o.partition}`,
                value: String(o.offset),
              },
            })),
            { put: { key: commitsKey, value: commitId } },
          ],
          failure: [{ get: { key: claimKey } }, { get: { key: commitsKey } }],
        });
        if (result.succeeded) {
          last.revision = result.revision;
          return true;
        }
        if ((result.reads[0]?.[0]?.modRevision ?? 0) !== claim) return false;
        const commits = result.reads[1]?.[0];
        last.revision = commits?.modRevision ?? 0;
        // An earlier copy of this commit (its answer lost) was applied.
        if (commits?.value === commitId) return true;
        // Another tenure's commits moved the key on (this broker held the claim before): they
        // are all behind this claim, so this commit goes on top of them.
        if (++moved > 3)
          throw new BrokerError(
            Errors.unavailable,
            `Cannot ${what}: the group's commits kept changing under this coordinator; try again`,
          );
      } catch (err) {
        if (err instanceof BrokerError) throw err;
        const again =
          err instanceof EtcdError &&
          (err.code === "indeterminate" || err.code === "unavailable") &&
          !this.#closed &&
          clock.nowMs() + waitMs < giveUpAtMs;
        if (!again)
          throw new BrokerError(Errors.unavailable, `Cannot ${what}: ${errorMessage(err)}`);
        this.#o.logger.log("warn", "cluster.group_offsets_retry", {
          group,
          retry_in_ms: waitMs,
          error: errorMessage(err),
        });
        await new Promise<void>((resolve) => clock.setTimer(waitMs, resolve));
        waitMs = Math.min(1000, waitMs * 2);
      }
    }
  }

  /**
   * Makes this broker the coordinator of `group` in etcd (`group_generations/<group>`): the
   * stored generation floor becomes max(stored, `generation`) and the key's new mod_revision is
   * the claim that {@link recordGroupGeneration} and {@link saveGroupOffsets} compare against, so
   * a previous coordinator's later writes fail (docs/cluster.md "Consumer groups").
   * @returns the floor (every generation any coordinator handed out is <= it) and the claim;
   *   null when another broker claimed it meanwhile. @throws BrokerError unavailable.
   */
  async claimGroupGeneration(
    group: string,
    generation: number,
  ): Promise<{ generation: number; claim: number } | null> {
    const key = `${this.#prefix}/group_generations/${group}`;
    const what = `claim the coordination of group ${JSON.stringify(group)}`;
    const kv = await this.#etcdCall(what, () => this.#o.etcd.get(key));
    const stored = kv === null ? 0 : Number(kv.value);
    const floor = Math.max(Number.isSafeInteger(stored) ? stored : 0, generation);
    const result = await this.#etcdCall(what, () =>
      this.#o.etcd.txn({
        compare: [{ key, target: "mod_revision", result: "equal", number: kv?.modRevision ?? 0 }],
        success: [{ put: { key, value: String(floor) } }],
      }),
    );
    return result.succeeded ? { generation: floor, claim: result.revision } : null;
  }

  /**
   * Stores a generation this coordinator is about to hand out, if its `claim` still holds.
   * @returns the new claim (the key's mod_revision), or null when another broker has claimed
   *   the group since. @throws BrokerError unavailable.
   */
  async recordGroupGeneration(
    group: string,
    generation: number,
    claim: number,
  ): Promise<number | null> {
    const key = `${this.#prefix}/group_generations/${group}`;
    const result = await this.#etcdCall(
      `record generation ${generation} of group ${JSON.stringify(group)}`,
      () =>
        this.#o.etcd.txn({
          compare: [{ key, target: "mod_revision", result: "equal", number: claim }],
          success: [{ put: { key, value: String(generation) } }],
        }),
    );
    return result.succeeded ? result.revision : null;
  }

  /**
   * Every consumer group etcd knows (docs/cluster.md "Consumer groups"): its stored generation
   * (`group_generations/<group>`, 0 if none) and committed offsets (`group_offsets/<group>/...`),
   * by group name. Two reads, nothing written: a new controller lists, describes and exports these
   * groups without claiming them. @throws BrokerError unavailable.
   */
  async loadStoredGroups(): Promise<
    Map<
      string,
      { generation: number; offsets: { topic: string; partition: number; offset: number }[] }
    >
  > {
    const genHead = `${this.#prefix}/group_generations/`;
    const offHead = `${this.#prefix}/group_offsets/`;
    const what = "read the consumer groups";
    const [generations, offsets] = await Promise.all([
      this.#etcdCall(what, () => this.#o.etcd.list(genHead)),
      this.#etcdCall(what, () => this.#o.etcd.list(offHead)),
    ]);
    const out = new Map<
      string,
      { generation: number; offsets: { topic: string; partition: number; offset: number }[] }
    >();
    const entry = (group: string) => {
      let e = out.get(group);
      if (e === undefined) out.set(group, (e = { generation: 0, offsets: [] }));
      return e;
    };
    for (const kv of generations.kvs) {
      const group = kv.key.slice(genHead.length);
      const generation = Number(kv.value);
      if (group.length === 0 || group.includes("/") || !Number.isSafeInteger(generation)) continue;
      entry(group).generation = Math.max(0, generation);
    }
    for (const kv of offsets.kvs) {
      const parts = kv.key.slice(offHead.length).split("/");
      const partition = Number(parts[2]);
      const offset = Number(kv.value);
      if (parts.length !== 3 || parts[0].length === 0 || parts[1].length === 0) continue;
      if (!Number.isSafeInteger(partition) || !Number.isSafeInteger(offset)) continue;
      entry(parts[0]).offsets.push({ topic: parts[1], partition, offset });
    }
    return out;
  }

  /** A group's generation as etcd holds it (0 if none). @throws BrokerError unavailable. */
  async loadGroupGeneration(group: string): Promise<number> {
    const key = `${this.#prefix}/group_generations/${group}`;
    const kv = await this.#etcdCall(`read the generation of group ${JSON.stringify(group)}`, () =>
      this.#o.etcd.get(key),
    );
    const generation = kv === null ? 0 : Number(kv.value);
    return Number.isSafeInteger(generation) && generation > 0 ? generation : 0;
  }

  /** A group's committed offsets as etcd holds them. @throws BrokerError unavailable. */
  async loadGroupOffsets(
    group: string,
  ): Promise<{ topic: string; partition: number; offset: number }[]> {
    const head = `${this.#prefix}/group_offsets/${group}/`;
    const { kvs } = await this.#etcdCall(`read the offsets of group ${JSON.stringify(group)}`, () =>
      this.#o.etcd.list(head),
    );
    const out: { topic: string; partition: number; offset: number }[] = [];
    for (const kv of kvs) {
      const rest = kv.key.slice(head.length);
      const slash = rest.lastIndexOf("/");
      const partition = Number(rest.slice(slash + 1));
      const offset = Number(kv.value);
      if (slash <= 0 || !Number.isSafeInteger(partition) || !Number.isSafeInteger(offset)) continue;
      out.push({ topic: rest.slice(0, slash), partition, offset });
    }
    return out;
  }

  async #etcdCall<T>(what: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      throw new BrokerError(Errors.unavailable, `Cannot ${what}: ${errorMessage(err)}`);
    }
  }

  /**
   * Leaves the cluster, in the order docs/cluster.md "Leaving the cluster" gives: the node
   * announces the leave (`leaving/<node id>` on its lease, so that the controller elects it
   * nowhere meanwhile: `cluster.leaving`), replication
   * stops admitting produces and shrinking ISRs and keeps serving replica fetches until the
   * followers of every partition this broker leads hold its log (at most `drainMs`,
   * {@link leaveDrainMsDefault} by default); then the node stops campaigning (and controlling),
   * closes replication (what is still unacknowledged fails `not_leader`, retriable), records its
   * departure and revokes its lease, so the controller moves the leaderships at once, electing
   * from the ISRs as they were. Every step that waits on etcd waits at most
   * {@link ClusterNodeOptions.leaveEtcdStepMs}: one given up is logged
   * (`cluster.leave_step_failed`, warn, saying when the controller will notice instead), and
   * `cluster.left` is then a warn with `departure_recorded` / `lease_revoked` false. The view of
   * etcd (metadata) and the etcd client stay until {@link close}. Idempotent; never throws.
   */
  leave(drainMs: number = leaveDrainMsDefault): Promise<void> {
    this.#leaving ??= this.#leave(drainMs);
    return this.#leaving;
  }

  async #leave(drainMs: number): Promise<void> {
    const { clock, logger, nodeId } = this.#o;
    const stepMs = this.#o.leaveEtcdStepMs ?? leaveEtcdStepMsDefault;
    const started = clock.nowMs();
    // From the first moment of the leave: a broker about to go never becomes the controller.
    this.controller.retire();
    // ... nor a leader: the controller elects no broker `leaving/<id>` names. Not waited for
    // (bounded on its own): the drain goes on meanwhile, and a leave without etcd takes no longer.
    let departing = false;
    void this.membership.markLeaving(stepMs).then((marked) => {
      // Once the departure is being recorded, a marker that did not land is moot.
      if (marked === null || (!marked.ok && departing)) return;
      if (marked.ok)
        logger.log("info", "cluster.leaving", {
          node_id: nodeId,
          incarnation: this.membership.incarnation,
          ms: marked.ms,
        });
      else this.#leaveStepFailed("mark_leaving", marked);
    });
    const drain = (await this.#replicas?.leave?.(drainMs)) ?? { led: 0, behind: [], waitedMs: 0 };
    // No reconcile from here on, and no registering again when the revoked lease's key goes.
    this.#closed = true;
    this.#republishTimer?.cancel();
    this.#relistTimer?.cancel();
    // A controller pass or a metadata change being applied may be waiting on etcd.
    const stopped = await boundedStep(clock, stepMs, async () => {
      await this.controller.close().catch(() => {});
      await this.#applying.catch(() => {});
    });
    if (!stopped.ok) this.#leaveStepFailed("stop_controlling", stopped);
    await this.#replicas
      ?.close()
      .catch((err: unknown) =>
        logger.log("error", "cluster.replication_close_failed", { error: errorMessage(err) }),
      );
    departing = true;
    const { departure, revoke } = await this.membership.close({
      stepMs,
      onStepFailed: (step, outcome) => this.#leaveStepFailed(step, outcome),
    });
    const departureRecorded = departure?.ok === true;
    logger.log(departureRecorded && revoke.ok ? "info" : "warn", "cluster.left", {
      node_id: nodeId,
      led: drain.led,
      drain_ms: drain.waitedMs,
      ...(drain.behind.length === 0
        ? {}
        : {
            not_caught_up: drain.behind,
            reason: `their in-sync followers had not fetched this broker's whole log within ${drainMs} ms: what they lack was never acknowledged, and its writers were answered not_leader`,
          }),
      departure_recorded: departureRecorded,
      lease_revoked: revoke.ok,
      ms: clock.nowMs() - started,
    });
  }

  /** Logs a step of {@link leave} that etcd failed or did not answer in time, and what follows. */
  #leaveStepFailed(
    step: "mark_leaving" | "stop_controlling" | "record_departure" | "revoke_lease",
    outcome: StepOutcome & { ok: false },
  ): void {
    const { clock, logger, nodeId } = this.#o;
    const leaseS = Math.max(
      0,
      Math.ceil((this.membership.leaseExpiresAtMs - clock.nowMs()) / 1000),
    );
    const graceS = (this.#o.lapseGraceMs ?? lapseGraceMsDefault) / 1000;
    const effect = {
      mark_leaving:
        "until its departure is recorded, the controller may still elect this broker leader of a partition whose leader fails, or move a preferred leadership to it",
      stop_controlling:
        "a controller pass or metadata change still waiting for etcd is abandoned; this broker's controller key goes with its lease",
      record_departure: `the controller will count this broker gone only when its lease expires (in about ${leaseS} s) and its ${graceS} s grace for a vanished registration is over, then move its leaderships`,
      revoke_lease: `its registration stays until its lease expires (in about ${leaseS} s): only then will the controller move its leaderships`,
    }[step];
    logger.log("warn", "cluster.leave_step_failed", {
      node_id: nodeId,
      step,
      outcome: outcome.timedOut ? "timeout" : "failed",
      error: outcome.error,
      ms: outcome.ms,
      effect,
    });
  }

  /**
   * Leaves the cluster without waiting for followers ({@link leave} with no drain, unless it
   * began already), stops watching, and closes the etcd client (the node owns it from
   * {@link ClusterNode.start} on). Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.leave(0);
      await this.#watch?.cancel();
      await this.#o.etcd.close();
    })();
    return this.#closing;
  }
}
