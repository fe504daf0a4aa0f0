/**
 * The replication data path of one broker (docs/cluster.md "Replication"): for every partition
 * this broker holds a replica of, it leads, follows, or neither, as etcd's partition state says
 * ({@link ReplicaManager.applyPartitionState}); it is the broker's {@link ReplicationSeam}.
 *
 * **Leader** (Kafka's ISR design, written our own):
 * - Followers fetch with the replica-fetch api; the offset a follower fetches at is its durable
 *   (fsynced) log end, recorded as its position. A fetch is refused, and nothing recorded,
 *   without the broker credential (a constant-time compare with the cluster secret; API keys
 *   never match it: field failures #27e), from a node that is not a replica, under another
 *   leader epoch, or at an offset past the leader's log end. The answer holds the records up to
 *   the leader's log end, those whose fsync is still running included, so a follower's write and
 *   fsync overlap the leader's; records that then never become durable here (a failed fsync
 *   cuts them) were never acknowledged, and leader-epoch truncation cuts them from followers.
 * - The high watermark is the smallest durable position in the ISR (the leader's own fsynced end
 *   included: it never passes what this broker's fsync covered; a follower whose ISR expansion
 *   is in flight included too, since etcd's ISR may hold it first) and never goes down while this
 *   broker leads; while the ISR is below `min_insync_replicas` it
 *   does not move (the ELR must hold every committed record). A produce is acknowledged once the high
 *   watermark covers it and the ISR has at least `min_insync_replicas` members
 *   ({@link ReplicaManager.awaitCommitted}); a write waiting while the ISR falls below that fails
 *   `not_enough_replicas` (retriable), so a produce never hangs forever.
 * - A follower that has not caught up to the leader's log end for `replica_lag_ms` (the topic's
 *   config, else the manager's default, 10 s) leaves the ISR; one whose durable position reaches the leader's log end (not a stale high watermark:
 *   #27a) rejoins. Both are compare-and-set writes in etcd under the key's mod_revision
 *   (`partition-state.ts` `shrinkIsr` / `expandIsr`), with `committed_offset` = the high
 *   watermark. After a leader change every follower counts as caught up at that moment, so none
 *   is expelled before it could fetch (#27b).
 * - Deposed (the state names another leader or epoch) or with its membership lease not live
 *   (or past its expiry: {@link ReplicaManagerOptions.leaseExpiresAtMs}), it fails every pending
 *   acknowledgement `not_leader` and appends and acknowledges nothing more: every produce append
 *   is checked again in the write loop, atomically with the append ({@link ReplicaManager.admitWrite}).
 * - A role change fences produce appends first, then waits for those the write loop already
 *   admitted (`PartitionLog.settle`), and only then takes the new role, so a follower's first
 *   fetch carries its real log end and last epoch (docs/cluster.md "Leader-epoch truncation").
 * - Becoming leader of epoch E, it first records (E, log end) in the partition's leader-epoch
 *   history (`storage/leader-epochs.ts`, fsynced). Elected with a durable log end below the
 *   state's `committed_offset` or the last high watermark a leader told it, it refuses: it takes
 *   no role and writes the state without a leader, itself out of the ISR and ELR (issue #16).
 * - An ISR expansion is written only while etcd's registration of the node names the incarnation
 *   whose fetches caught up (read, then compared by `mod_revision` in the same transaction): a
 *   successor this broker's watch has not delivered yet never joins on its predecessor's fetches.
 *   Nor while `leaving/<node id>` names that incarnation (read too; its absence compared): a
 *   broker about to go would hold acknowledgements back once it stops fetching (as Kafka's
 *   KIP-841 keeps a shutting-down broker out of the ISR).
 * - Leaving (SIGTERM: {@link ReplicaManager.leave}; docs/cluster.md "Leaving the cluster"): it
 *   admits no produce append any more (`not_leader`, retriable, naming no leader), never shrinks
 *   an ISR, and keeps serving replica fetches until every ISR follower holds its whole log (or a
 *   bound passes), so what was appended is acknowledged and the controller elects from a full
 *   ISR once the broker departs; then {@link ReplicaManager.close}.
 *
 * **Follower**: `follower.ts`, one fetch loop per partition to the leader's advertised TCP
 * address (from {@link ReplicaManager.setBrokers}). Its reads are capped at the leader's high
 * watermark as last fetched.
 */
import { BrokerError, Errors } from "../broker/errors.ts";
import type { ProducerStates } from "../broker/producers/state.ts";
import type { ReplicationSeam } from "../broker/replication.ts";
import type { ReplicaFetchRequest, ReplicaFetchResult } from "../broker/types.ts";
import { onAbort } from "../lib/abort.ts";
import type { Clock, Timer } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import { fetchBytesDefault, fetchRecordsMax, replicaRecentBytesMax } from "../lib/limits.ts";
import type { Logger } from "../lib/logger.ts";
import { Mutex } from "../lib/mutex.ts";
import type { Prng } from "../lib/prng.ts";
import type { LeaderEpochHistory } from "../storage/leader-epochs.ts";
import type { PartitionLog } from "../storage/partition.ts";
import type { Etcd, EtcdCompare } from "./etcd.ts";
import { Follower, type ReplicaFetchConnection } from "./follower.ts";
import { brokerKey, leavingKey, parseRegistration, type BrokerRegistration } from "./membership.ts";
import {
  expandIsr,
  formatPartitionState,
  noLeader,
  parsePartitionState,
  resignLeadership,
  shrinkIsr,
  type PartitionState,
} from "./partition-state.ts";

export type { ReplicaFetchConnection } from "./follower.ts";

/** What the replica manager needs of the local broker (`LocalBroker` has it). */
export interface ReplicaHost {
  setReplication(seam: ReplicationSeam): void;
  partitionLog(topic: string, partition: number): PartitionLog;
  openLeaderEpochHistory(topic: string, partition: number): Promise<LeaderEpochHistory>;
  logEndOffsets(): Map<string, number>;
  /** The topic's config now (`replica_lag_ms`). */
  topicConfig(topic: string): { replica_lag_ms?: number };
  /** The topic id the local copy records (docs/cluster.md "Topic ids"), undefined for none. */
  topicId?(topic: string): string | undefined;
  /**
   * The create revision of the `topics/<name>` record the local copy was made from, undefined
   * for none (a copy made before topic ids).
   */
  topicRevision?(topic: string): number | undefined;
  readonly producerStates: ProducerStates;
}

/** Options of {@link ReplicaManager}. */
export interface ReplicaManagerOptions {
  broker: ReplicaHost;
  etcd: Etcd;
  /** Key prefix of the cluster in etcd, without a trailing slash. */
  prefix: string;
  nodeId: number;
  /**
   * This broker's incarnation (`Membership.incarnation`: the lease id of this run's first
   * registration), named in its replica fetches. Leaders credit a fetch only from the incarnation
   * registered now for its node id.
   */
  incarnation: string;
  clock: Clock;
  prng: Prng;
  logger: Logger;
  /** The broker credential followers present and the leader checks; undefined = none (an empty one). */
  clusterSecret: Uint8Array | undefined;
  /** Opens a replica-fetch connection to `host:port` (the runtime's TCP client). */
  connect: (tcpAddress: string) => ReplicaFetchConnection;
  /**
   * How long a follower may stay behind the leader's log end before it leaves the ISR, in ms,
   * for topics whose config has no `replica_lag_ms`. Default 10 000.
   */
  replicaLagMs?: number;
  /** The leader's long-poll on a replica fetch, in ms. Default 500. */
  fetchWaitMs?: number;
  /** Bytes of records per replica fetch. Default 1 MiB. */
  fetchMaxBytes?: number;
  /**
   * When this broker's membership lease may have expired in etcd, in ms of `clock`
   * (`Membership.leaseExpiresAtMs`: the send time of the last successful grant or renewal plus
   * the TTL). From then on, until a renewal moves it, this broker appends and acknowledges
   * nothing for the partitions it leads, even before it hears that the lease is gone: a broker
   * paused past its lease writes nothing when it resumes. Absent: only
   * {@link ReplicaManager.setMembershipLive} counts.
   */
  leaseExpiresAtMs?: () => number;
  /**
   * The etcd revision at which this broker's incarnation first registered
   * (`Membership.registeredRevision`; kept when it registers again after a lost lease, since its
   * process and logs never stopped). A partition state naming this broker leader with an older
   * `mod_revision` was written for an earlier incarnation (a restart, whose log may have lost its
   * unsynced tail): this broker takes no role by it and waits for the controller, which counts a
   * restarted replica as gone first (field failures #27c). Absent: 0 (every state counts).
   */
  registeredRevision?: () => number;
  /**
   * Whether API keys are on now (they can be turned on while the broker runs). With keys on and
   * no `clusterSecret`, this broker serves no replica fetch: an empty credential would let any
   * client read every partition and pose as a follower (docs/cluster.md "Replica fetch").
   * Absent: keys are off.
   */
  authEnabled?: () => boolean;
}

/** One partition in {@link ReplicaManager.describe} (snake_case: shown as JSON). */
export interface ReplicaDescription {
  topic: string;
  partition: number;
  role: "leader" | "follower" | "none";
  leader: number;
  leader_epoch: number;
  isr: number[];
  high_watermark: number;
  log_end_offset: number;
  /** As leader: each follower's durable position, lag and ms since it was last caught up. */
  followers: { node_id: number; durable_offset: number; lag: number; caught_up_ms_ago: number }[];
}

/** Default `replica_lag_ms`. */
export const replicaLagMsDefault = 10_000;

/** What the leader knows of one follower. */
interface FollowerPosition {
  /** Its durable log end as its last fetch said; −1 before its first fetch under this leadership. */
  durable: number;
  /** The incarnation whose fetch reported `durable` (undefined before the first). */
  incarnation?: string;
  /** When it last was caught up to the leader's log end (a leader change counts: #27b). */
  lastCaughtUpMs: number;
  /** The leader's log end in its last answer, and when it was sent. */
  lastLogEndSent: number;
  lastAnswerMs: number;
  /** The high watermark in its last answer; −1 before the first. */
  highWatermarkSent: number;
}

interface Waiter {
  nextOffset: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** One partition this broker holds a replica of. */
interface Replica {
  topic: string;
  partition: number;
  name: string;
  state: PartitionState;
  modRevision: number;
  role: "leader" | "follower" | "none";
  /** The epoch the role was taken under. */
  epoch: number;
  log: PartitionLog;
  history: LeaderEpochHistory;
  lock: Mutex;
  listeners: Set<() => void>;
  // Leader.
  followers: Map<number, FollowerPosition>;
  highWatermark: number;
  waiters: Waiter[];
  unsubscribeLog: (() => void) | null;
  lagTimer: Timer | null;
  isrChange: Promise<void> | null;
  /**
   * A follower whose ISR expansion this leader has sent to etcd and not yet seen the outcome of
   * (a state applied with a newer mod_revision than `sinceRevision`, or a definite refusal):
   * etcd's ISR may already hold it, so the high watermark counts it (Kafka's maximal ISR).
   */
  joining: { nodeId: number; sinceRevision: number } | null;
  // Follower.
  follower: Follower | null;
  leaderHighWatermark: number;
  /** The leader's high watermark in its last answer, and when this replica last held all of it. */
  fetchedHighWatermark: number;
  caughtUpMs: number;
}

/**
 * Default bound of {@link ReplicaManager.leave}'s wait for the followers, in ms: a follower that
 * fetches at all catches up within a fetch round trip and an fsync; one that does not (stalled,
 * cut off) is given up on after this, and the broker leaves anyway.
 */
export const leaveDrainMsDefault = 3_000;

/** What {@link ReplicaManager.leave} found (shown in the `cluster.left` log line). */
export interface LeaveDrain {
  /** Partitions this broker led when it began to leave. */
  led: number;
  /** "topic/partition" of those whose ISR followers had not caught up when the bound passed. */
  behind: string[];
  /** How long the wait took, ms. */
  waitedMs: number;
}

/** One partition this broker follows, in {@link ReplicaManager.fetchLag}. */
export interface FollowerFetchLag {
  topic: string;
  partition: number;
  /** The leader's high watermark in its last answer minus this replica's log end (>= 0). */
  records: number;
  /** 0 while caught up, else ms since this replica last held the leader's high watermark. */
  ms: number;
}

/** The replication of one broker. See the module comment. */
export class ReplicaManager implements ReplicationSeam {
  readonly #o: ReplicaManagerOptions;
  readonly #replicaLagMs: number;
  readonly #credential: Uint8Array;
  #warnedNoSecret = false;
  #brokers: ReadonlyMap<number, BrokerRegistration> = new Map();
  /**
   * Node id → the incarnation it last registered with: kept while its registration is missing
   * (a lease etcd revoked: it comes back with the same incarnation), replaced when another
   * registers. Only fetches naming it are credited.
   */
  #incarnations = new Map<number, string>();
  /** Node id → the incarnation an ISR expansion found leaving (`leaving/<id>`): not tried again. */
  #leavingFollowers = new Map<number, string>();
  #replicas = new Map<string, Replica>();
  #opening = new Map<string, Promise<Replica>>();
  #live = true;
  #closed = false;
  /** Set by {@link leave}: no produce is admitted, no ISR is shrunk. */
  #leaving = false;
  /** While {@link leave} waits: checks whether every led partition has drained. */
  #leaveCheck: (() => void) | null = null;

  constructor(options: ReplicaManagerOptions) {
    this.#o = options;
    this.#replicaLagMs = options.replicaLagMs ?? replicaLagMsDefault;
    this.#credential = options.clusterSecret ?? new Uint8Array(0);
    options.broker.setReplication(this);
  }

  /** Live brokers' registrations (addresses). Called by the node on every membership change. */
  setBrokers(brokers: ReadonlyMap<number, BrokerRegistration>): void {
    this.#brokers = brokers;
    for (const [id, registration] of brokers) {
      const known = this.#incarnations.get(id);
      if (known === registration.incarnation) continue;
      this.#incarnations.set(id, registration.incarnation);
      if (known === undefined) continue;
      // Another process registered as `id`: what the old one fetched is not its position.
      for (const r of this.#replicas.values()) {
        const f = r.followers.get(id);
        if (f !== undefined) {
          f.durable = -1;
          f.incarnation = undefined;
        }
      }
    }
  }

  /** This broker's log end offset per "topic/partition" (published for ELR eligibility). */
  logEndOffsets(): Map<string, number> {
    return this.#o.broker.logEndOffsets();
  }

  /**
   * For each "topic/partition" of `ends` whose replica this manager holds (its leader-epoch
   * history is open), the leader epoch of the last record below that end, -1 for none: published
   * beside the log ends, so that an ELR election compares (last epoch, log end) as KIP-966 does
   * (docs/cluster.md "Partition state").
   */
  lastEpochs(ends: ReadonlyMap<string, number>): Map<string, number> {
    const out = new Map<string, number>();
    for (const r of this.#replicas.values()) {
      const end = ends.get(r.name);
      if (end === undefined) continue;
      out.set(r.name, recordEpoch(r, end));
    }
    return out;
  }

  /**
   * The leader epoch of the last record of `topic`/`partition` (what {@link lastEpochs}
   * publishes), -1 for none, or
   * undefined when this manager has not opened that replica (docs/cluster.md "Partition state
   * older than the replicas' logs": a log ahead of its partition state publishes its log ends).
   */
  lastEpoch(topic: string, partition: number): number | undefined {
    const r = this.#replicas.get(`${topic}/${partition}`);
    return r === undefined ? undefined : recordEpoch(r);
  }

  /**
   * Membership lease lost / regained: while lost, nothing new is appended or acknowledged for the
   * partitions this broker leads.
   */
  setMembershipLive(live: boolean): void {
    this.#live = live;
    if (live) return;
    for (const r of this.#replicas.values())
      this.#failWaiters(r, this.#notLeader(r, "its membership lease in etcd is not live"));
  }

  /**
   * Become leader / follower / neither for one partition; called on every etcd change of
   * `partitions/<topic>/<p>` that names this node in `replicas`, with the key's mod_revision
   * (an older revision than one already applied is ignored). The topic must exist locally.
   * @throws BrokerError topic_not_found / partition_not_found if it does not; FsError if the
   *   leader-epoch history cannot be written (the role is then not taken; call again).
   */
  async applyPartitionState(
    topic: string,
    partition: number,
    state: PartitionState,
    modRevision: string,
  ): Promise<void> {
    if (this.#closed) return;
    const r = await this.#replica(topic, partition, state);
    await r.lock.run(() => this.#apply(r, state, Number(modRevision)));
  }

  async #replica(topic: string, partition: number, state: PartitionState): Promise<Replica> {
    const key = `${topic}/${partition}`;
    const existing = this.#replicas.get(key);
    if (existing !== undefined && !existing.log.closed) return existing;
    if (existing !== undefined) {
      // The topic was deleted (and maybe created again): its old partition is gone for good.
      this.#replicas.delete(key);
      await existing.lock.run(async () => {
        if (existing.role === "leader")
          this.#resign(existing, { ...existing.state, leader: noLeader });
        existing.role = "none";
        this.#notify(existing);
        const f = existing.follower;
        existing.follower = null;
        await f?.stop();
      });
    }
    let opening = this.#opening.get(key);
    if (opening === undefined) {
      opening = (async () => {
        const log = this.#o.broker.partitionLog(topic, partition);
        const history = await this.#o.broker.openLeaderEpochHistory(topic, partition);
        const r: Replica = {
          topic,
          partition,
          name: key,
          state,
          modRevision: -1,
          role: "none",
          epoch: -1,
          log,
          history,
          lock: new Mutex(),
          listeners: new Set(),
          followers: new Map(),
          highWatermark: 0,
          waiters: [],
          unsubscribeLog: null,
          lagTimer: null,
          isrChange: null,
          joining: null,
          follower: null,
          leaderHighWatermark: Math.min(state.committed_offset, log.highWatermark),
          fetchedHighWatermark: 0,
          caughtUpMs: this.#o.clock.nowMs(),
        };
        this.#replicas.set(key, r);
        return r;
      })().finally(() => this.#opening.delete(key));
      this.#opening.set(key, opening);
    }
    return opening;
  }

  /**
   * Whether this broker may still append and acknowledge as a leader: its membership is live and
   * its lease cannot have expired in etcd yet (see {@link ReplicaManagerOptions.leaseExpiresAtMs}).
   */
  #leaseHeld(): boolean {
    if (!this.#live) return false;
    const expiresAt = this.#o.leaseExpiresAtMs;
    return expiresAt === undefined || this.#o.clock.nowMs() < expiresAt();
  }

  #leaseLost(r: Replica): BrokerError {
    return this.#notLeader(
      r,
      this.#live
        ? "its membership lease in etcd may have expired (not renewed within its TTL)"
        : "its membership lease in etcd is not live",
    );
  }

  async #apply(r: Replica, state: PartitionState, modRevision: number): Promise<void> {
    if (modRevision <= r.modRevision || this.#closed) return;
    const nodeId = this.#o.nodeId;
    // Leadership recorded before this incarnation registered is not this incarnation's (#27c).
    const staleLeader =
      state.leader === nodeId && modRevision < (this.#o.registeredRevision?.() ?? 0);
    // Elected, yet this log lacks records known committed: the high watermark etcd recorded
    // (`committed_offset`), or the last one a leader told this replica. Leading would truncate
    // them from every follower; refuse, and give the leadership back (docs/cluster.md
    // "Partition state").
    const durableEnd = r.log.highWatermark;
    const committed = Math.max(state.committed_offset, r.fetchedHighWatermark);
    const lacking =
      !staleLeader &&
      state.leader === nodeId &&
      durableEnd < committed &&
      (r.role !== "leader" || state.leader_epoch !== r.epoch);
    // Elected by a state older than this log (etcd restored from an older snapshot): leading in
    // an epoch the log already went past would mix epochs and make followers that know the newer
    // one fail. The controller elects again above every published epoch (docs/cluster.md
    // "Partition state older than the replicas' logs"); this broker's log ends say it is due.
    const lastEpoch = recordEpoch(r);
    const behind =
      !staleLeader && !lacking && state.leader === nodeId && state.leader_epoch < lastEpoch;
    if (behind)
      this.#o.logger.log("error", "replication.leadership_behind_log", {
        partition: r.name,
        leader_epoch: state.leader_epoch,
        log_epoch: lastEpoch,
        action:
          "partition state older than this replica's log (etcd restored?): it does not lead by it; the controller elects a leader above every epoch the replicas' logs hold",
      });
    const role: Replica["role"] =
      staleLeader || lacking || behind
        ? "none"
        : state.leader === nodeId
          ? "leader"
          : state.leader !== noLeader && state.replicas.includes(nodeId)
            ? "follower"
            : "none";
    if (staleLeader)
      this.#o.logger.log("info", "replication.stale_leadership", {
        partition: r.name,
        leader_epoch: state.leader_epoch,
        mod_revision: modRevision,
        registered_revision: this.#o.registeredRevision?.() ?? 0,
      });
    if (lacking) {
      this.#o.logger.log("error", "replication.leadership_refused", {
        partition: r.name,
        leader_epoch: state.leader_epoch,
        durable_log_end: durableEnd,
        committed_offset: state.committed_offset,
        high_watermark_known: r.fetchedHighWatermark,
        action:
          "this replica's log lacks committed records: it does not lead (that would truncate them from the followers) and leaves the ISR; the controller elects another in-sync replica, or keeps the partition offline until one holding them is back",
      });
      void this.#giveUpLeadership(r, state, modRevision);
    }
    const changed = role !== r.role || state.leader_epoch !== r.epoch;
    r.state = state;
    r.modRevision = modRevision;
    // A newer state says whether a pending expansion was written (its ISR is the truth now).
    if (r.joining !== null && modRevision > r.joining.sinceRevision) r.joining = null;
    if (changed) {
      // Fence first: from here on the write loop refuses produce appends admitted under the old
      // role (`admitWrite`), and the follower loop is gone; then wait for the appends the loop
      // already admitted, so the next role starts from the log they leave (a follower's fetch
      // position and last epoch, a leader's epoch start). docs/cluster.md "Leader-epoch truncation".
      const wasLeader = r.role === "leader";
      if (wasLeader) this.#resign(r, state);
      r.role = "none";
      if (r.follower !== null) {
        const f = r.follower;
        r.follower = null;
        await f.stop();
      }
      if (wasLeader)
        await r.log.settle().catch((err: unknown) =>
          this.#o.logger.log("warn", "replication.settle_failed", {
            partition: r.name,
            error: errorMessage(err),
          }),
        );
      r.epoch = state.leader_epoch;
      if (role === "leader") {
        try {
          await this.#lead(r);
        } catch (err) {
          // The same state applied again retries the leadership.
          r.modRevision = -1;
          r.epoch = -1;
          throw err;
        }
      } else if (role === "follower") this.#follow(r);
      this.#o.logger.log("info", "replication.role", {
        partition: r.name,
        role,
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        isr: state.isr,
      });
    } else if (r.role === "leader") {
      this.#updateHighWatermark(r);
      this.#settle(r);
    }
    this.#notify(r);
  }

  /** Takes the leadership of `r.state`'s epoch (the module comment, Leader). */
  async #lead(r: Replica): Promise<void> {
    const log = r.log;
    await r.history.assign(r.state.leader_epoch, log.logEndOffset);
    const now = this.#o.clock.nowMs();
    r.followers = new Map();
    for (const id of r.state.replicas) {
      if (id === this.#o.nodeId) continue;
      r.followers.set(id, {
        durable: -1,
        lastCaughtUpMs: now,
        lastLogEndSent: log.logEndOffset,
        lastAnswerMs: now,
        highWatermarkSent: -1,
      });
    }
    // Every ISR member held the committed offset and the last high watermark this broker
    // learned as a follower; never more than this log holds durably.
    r.highWatermark = Math.min(
      log.highWatermark,
      Math.max(r.state.committed_offset, r.leaderHighWatermark),
    );
    r.role = "leader";
    log.keepRecentWrites(replicaRecentBytesMax);
    r.unsubscribeLog = log.subscribe(() => {
      this.#updateHighWatermark(r);
      this.#settle(r);
      this.#notify(r);
    });
    this.#scheduleLagCheck(r);
    this.#updateHighWatermark(r);
  }

  /** Leaves the leadership: every pending acknowledgement fails `not_leader`. */
  #resign(r: Replica, next: PartitionState): void {
    r.role = "none";
    r.log.keepRecentWrites(0);
    r.unsubscribeLog?.();
    r.unsubscribeLog = null;
    r.lagTimer?.cancel();
    r.lagTimer = null;
    r.leaderHighWatermark = r.highWatermark;
    const why =
      next.leader === noLeader
        ? "the partition has no leader now"
        : `node ${next.leader} leads it at epoch ${next.leader_epoch}`;
    this.#failWaiters(
      r,
      new BrokerError(
        Errors.notLeader,
        `Cannot acknowledge the write to partition "${r.name}": this broker (node ${this.#o.nodeId}) no longer leads it: ${why}`,
        { leader: next.leader },
      ),
    );
  }

  #follow(r: Replica): void {
    const leaderId = r.state.leader;
    r.role = "follower";
    r.leaderHighWatermark = Math.min(r.leaderHighWatermark, r.log.highWatermark);
    r.fetchedHighWatermark = r.leaderHighWatermark;
    r.caughtUpMs = this.#o.clock.nowMs();
    const follower = new Follower({
      topic: r.topic,
      partition: r.partition,
      nodeId: this.#o.nodeId,
      incarnation: this.#o.incarnation,
      leaderId,
      leaderEpoch: r.state.leader_epoch,
      log: r.log,
      history: r.history,
      producers: this.#o.broker.producerStates,
      connect: () => {
        const registration = this.#brokers.get(leaderId);
        if (registration === undefined)
          throw new Error(`the address of the leader, node ${leaderId}, is not known yet`);
        return this.#o.connect(registration.tcp);
      },
      credential: this.#credential,
      topicId: () => this.#o.broker.topicId?.(r.topic),
      clock: this.#o.clock,
      prng: this.#o.prng,
      logger: this.#o.logger,
      maxBytes: this.#o.fetchMaxBytes ?? 1024 * 1024,
      waitMs: this.#o.fetchWaitMs ?? 500,
      highWatermark: () => r.leaderHighWatermark,
      onHighWatermark: (hw) => {
        r.fetchedHighWatermark = hw;
        if (r.log.logEndOffset >= hw) r.caughtUpMs = this.#o.clock.nowMs();
        const next = Math.min(hw, r.log.highWatermark);
        if (next > r.leaderHighWatermark) {
          r.leaderHighWatermark = next;
          this.#notify(r);
        }
      },
    });
    r.follower = follower;
    follower.start();
  }

  // ReplicationSeam.

  /** See {@link ReplicationSeam.checkLeader}. */
  checkLeader(topic: string, partition: number, write = false): void {
    this.#checkLeader(topic, partition, write);
  }

  #checkLeader(topic: string, partition: number, write: boolean): Replica {
    const r = this.#replicas.get(`${topic}/${partition}`);
    if (r === undefined || r.role !== "leader")
      throw this.#notLeader(r, undefined, `${topic}/${partition}`);
    if (!write) return r;
    if (this.#leaving) throw this.#notLeader(r);
    if (!this.#leaseHeld()) throw this.#leaseLost(r);
    if (r.state.isr.length < r.state.min_insync_replicas) throw this.#notEnoughReplicas(r);
    return r;
  }

  /**
   * See {@link ReplicationSeam.admitWrite}: the returned check passes only while this replica
   * leads under the epoch seen now and the membership lease is held. It runs in the partition's
   * write loop under the write lock, so {@link ReplicaManager.applyPartitionState} (which makes
   * the role "none" first, then waits for the write lock: `PartitionLog.settle`) never sees an
   * append of the old role land after it.
   */
  admitWrite(topic: string, partition: number): () => void {
    const r = this.#checkLeader(topic, partition, true);
    const epoch = r.epoch;
    return () => {
      if (r.role !== "leader" || this.#replicas.get(r.name) !== r) throw this.#notLeader(r);
      if (r.epoch !== epoch)
        throw new BrokerError(
          Errors.fencedLeaderEpoch,
          `Cannot append to partition "${r.name}": it was admitted under leader epoch ${epoch}, and this broker now leads it at epoch ${r.epoch}; nothing was appended`,
          { leader_epoch: r.epoch },
        );
      // Checked here too: a produce admitted just before the broker began to leave appends
      // nothing, so the log end the followers must reach stops moving.
      if (this.#leaving) throw this.#notLeader(r);
      if (!this.#leaseHeld()) throw this.#leaseLost(r);
    };
  }

  /** See {@link ReplicationSeam.readLimit}: the high watermark (a follower's: the leader's as last fetched). */
  readLimit(topic: string, partition: number): number | undefined {
    const r = this.#replicas.get(`${topic}/${partition}`);
    if (r === undefined) return 0;
    return r.role === "leader" ? r.highWatermark : r.leaderHighWatermark;
  }

  /** See {@link ReplicationSeam.watchReadLimit}. */
  watchReadLimit(topic: string, partition: number, listener: () => void): () => void {
    const r = this.#replicas.get(`${topic}/${partition}`);
    if (r === undefined) return () => {};
    r.listeners.add(listener);
    return () => r.listeners.delete(listener);
  }

  /** See {@link ReplicationSeam.awaitCommitted}. */
  awaitCommitted(topic: string, partition: number, nextOffset: number): Promise<void> | null {
    const r = this.#replicas.get(`${topic}/${partition}`);
    if (r === undefined || r.role !== "leader")
      return Promise.reject(this.#notLeader(r, undefined, `${topic}/${partition}`));
    if (!this.#leaseHeld()) return Promise.reject(this.#leaseLost(r));
    if (r.state.isr.length < r.state.min_insync_replicas)
      return Promise.reject(this.#notEnoughReplicas(r));
    if (r.highWatermark >= nextOffset) return null;
    return new Promise((resolve, reject) => {
      r.waiters.push({ nextOffset, resolve, reject });
    });
  }

  /** See {@link ReplicationSeam.replicaFetch} and the module comment (Leader). */
  async replicaFetch(request: ReplicaFetchRequest): Promise<ReplicaFetchResult> {
    const name = `${request.topic}/${request.partition}`;
    if (this.#credential.length === 0 && this.#o.authEnabled?.() === true) {
      this.#warnNoSecret();
      throw new BrokerError(
        Errors.unauthenticated,
        `Cannot serve a replica fetch of partition "${name}": API keys are on but this broker has no --cluster-secret-file; restart every broker with one`,
      );
    }
    if (!credentialMatches(request.credential, this.#credential))
      throw new BrokerError(
        Errors.unauthenticated,
        `Cannot serve a replica fetch of partition "${name}": the broker credential is missing or wrong`,
      );
    const r = this.#replicas.get(name);
    if (r === undefined || r.role !== "leader") throw this.#notLeader(r, undefined, name);
    // Another incarnation of the topic name (deleted and created again; one side has not applied
    // it yet): its records are never answered, nor its position recorded (attack15b F5).
    const topicId = this.#o.broker.topicId?.(request.topic);
    if (request.topicId && topicId !== undefined && request.topicId !== topicId)
      throw new BrokerError(
        Errors.inconsistentTopicId,
        `Cannot serve a replica fetch of partition "${name}": the follower's copy is of topic id ${request.topicId}, this leader's of ${topicId} (the topic was deleted and created again, and one of them has not applied it yet); nothing was answered`,
        { topic_id: topicId },
      );
    const epoch = r.state.leader_epoch;
    if (request.leaderEpoch < epoch)
      throw new BrokerError(
        Errors.fencedLeaderEpoch,
        `Cannot serve a replica fetch of partition "${name}": leader epoch ${request.leaderEpoch} is older than the current ${epoch}`,
        { leader_epoch: epoch },
      );
    if (request.leaderEpoch > epoch || request.lastFetchedEpoch > epoch)
      throw this.#notLeader(
        r,
        `it does not know epoch ${Math.max(request.leaderEpoch, request.lastFetchedEpoch)} yet`,
      );
    const position = r.followers.get(request.replicaId);
    if (position === undefined)
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot serve a replica fetch of partition "${name}": node ${request.replicaId} is not a follower of it (replicas ${r.state.replicas.join(", ")})`,
      );
    const registered =
      this.#brokers.get(request.replicaId)?.incarnation ??
      this.#incarnations.get(request.replicaId);
    if (request.incarnation !== registered)
      // Checked before anything is recorded: an old process of a replaced node (or one whose
      // registration was refused) must never earn its successor an ISR place (attack11 F4).
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot serve a replica fetch of partition "${name}": it names incarnation ${JSON.stringify(request.incarnation)} of node ${request.replicaId}, but ${registered === undefined ? "no registration of that node is known here yet" : `node ${request.replicaId} is registered as incarnation ${JSON.stringify(registered)}`}; a broker replicates only as the registration it holds`,
      );
    const log = r.log;
    const base = {
      leaderEpoch: epoch,
      logStartOffset: log.logStartOffset,
      epochs: r.history.entries,
      producers: [],
      records: { bytes: new Uint8Array(0), count: 0 },
    };
    if (request.lastFetchedEpoch >= 0) {
      const end = r.history.endOffsetFor(request.lastFetchedEpoch, log.logEndOffset);
      if (end.epoch !== request.lastFetchedEpoch || end.endOffset < request.fetchOffset) {
        return {
          ...base,
          highWatermark: r.highWatermark,
          logEndOffset: log.logEndOffset,
          diverging: { epoch: Math.max(end.epoch, 0), endOffset: end.endOffset },
        };
      }
    }
    if (request.fetchOffset > log.logEndOffset)
      throw new BrokerError(
        Errors.offsetOutOfRange,
        `Cannot serve a replica fetch of partition "${name}" at offset ${request.fetchOffset}: past the leader's log end ${log.logEndOffset}`,
      );
    this.#recordPosition(r, request.replicaId, position, request.fetchOffset, request.incarnation);
    // Long-poll while there is nothing new for this follower: neither records (written: their
    // fsync may still run) nor a high watermark above the one it was last told (followers cap
    // their reads at it).
    if (
      request.fetchOffset >= log.logEndOffset &&
      r.highWatermark <= position.highWatermarkSent &&
      request.waitMs > 0
    )
      await this.#waitForData(r, position, request.fetchOffset, request.waitMs, request.signal);
    if (r.role !== "leader" || r.state.leader_epoch !== epoch) throw this.#notLeader(r);
    if (request.fetchOffset < log.logStartOffset) {
      // Retention removed what the follower lacks: it skips to the log start (no records).
      position.highWatermarkSent = r.highWatermark;
      return {
        ...base,
        highWatermark: r.highWatermark,
        logStartOffset: log.logStartOffset,
        logEndOffset: log.logEndOffset,
        diverging: null,
      };
    }
    // Up to the log end, not the local durable end: the follower's write and fsync overlap this
    // broker's fsync. The high watermark still waits for this broker's own fsync (it is at most
    // `log.highWatermark`), and records that never become durable here are cut from the follower
    // by leader-epoch truncation (docs/cluster.md "Replica fetch").
    // The records just written come from the copies kept in memory (`readRecent`); anything
    // older from the log.
    const maxBytes = request.maxBytes === 0 ? fetchBytesDefault : request.maxBytes;
    const recent = log.readRecent(request.fetchOffset, maxBytes, fetchRecordsMax);
    let answered: Pick<ReplicaFetchResult, "records" | "recordChunks">;
    let end: number;
    if (recent !== null) {
      answered = {
        records: { bytes: new Uint8Array(0), count: recent.count },
        recordChunks: recent.chunks,
      };
      end = recent.nextOffset;
    } else {
      const read = await log.read({
        offset: request.fetchOffset,
        maxRecords: fetchRecordsMax,
        maxBytes,
        unsynced: true,
      });
      answered = { records: { bytes: read.bytes, count: read.count } };
      end = read.count === 0 ? request.fetchOffset : read.nextOffset;
    }
    position.lastLogEndSent = log.logEndOffset;
    position.lastAnswerMs = this.#o.clock.nowMs();
    position.highWatermarkSent = r.highWatermark;
    return {
      ...base,
      highWatermark: r.highWatermark,
      logEndOffset: position.lastLogEndSent,
      diverging: null,
      producers: this.#o.broker.producerStates.replicatedBatches(
        r.topic,
        r.partition,
        request.fetchOffset,
        end,
      ),
      ...answered,
    };
  }

  /** Logs, once, why this broker refuses every replica fetch (keys on, no broker credential). */
  #warnNoSecret(): void {
    if (this.#warnedNoSecret) return;
    this.#warnedNoSecret = true;
    this.#o.logger.log("error", "cluster.no_broker_credential", {
      reason:
        "API keys are on but this broker was started without --cluster-secret-file: it serves no replica fetch (followers of its partitions leave the ISR) until restarted with one",
    });
  }

  /** Records a follower's durable position; moves the high watermark; maybe expands the ISR. */
  #recordPosition(
    r: Replica,
    id: number,
    f: FollowerPosition,
    durable: number,
    incarnation: string,
  ): void {
    const now = this.#o.clock.nowMs();
    const logEnd = r.log.logEndOffset;
    f.durable = durable;
    f.incarnation = incarnation;
    this.#forgetFetched(r);
    if (durable >= logEnd) f.lastCaughtUpMs = now;
    else if (durable >= f.lastLogEndSent)
      f.lastCaughtUpMs = Math.max(f.lastCaughtUpMs, f.lastAnswerMs);
    this.#updateHighWatermark(r);
    this.#settle(r);
    this.#leaveCheck?.();
    if (
      !r.state.isr.includes(id) &&
      // Only a broker registered live in etcd joins the ISR: never a node id a fetch merely claims.
      this.#brokers.get(id)?.incarnation === incarnation &&
      this.#leavingFollowers.get(id) !== incarnation &&
      durable >= logEnd &&
      durable >= r.highWatermark &&
      this.#live
    ) {
      this.#changeIsr(
        r,
        (state) =>
          expandIsr(state, {
            leader: this.#o.nodeId,
            add: id,
            followerDurableOffset: durable,
            leaderLogEndOffset: logEnd,
            highWatermark: r.highWatermark,
          }),
        { nodeId: id, incarnation },
      );
    }
  }

  /** Drops the kept recent writes (`PartitionLog.keepRecentWrites`) every follower has made durable. */
  #forgetFetched(r: Replica): void {
    let least = Number.POSITIVE_INFINITY;
    for (const f of r.followers.values()) least = Math.min(least, f.durable);
    if (least > 0 && least !== Number.POSITIVE_INFINITY) r.log.forgetRecentBelow(least);
  }

  /**
   * Resolves once the leader has written records past `offset` (durable or not), or its high
   * watermark passed the one `f` was last told, or the role ended, or after `waitMs` or an abort:
   * woken by the log's writes, its fsyncs and fences, and every high watermark move, never by
   * polling.
   */
  #waitForData(
    r: Replica,
    f: FollowerPosition,
    offset: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<void> {
    return new Promise((resolve) => {
      let done = false;
      let unsubscribeAbort: (() => void) | null = null;
      const finish = () => {
        if (done) return;
        done = true;
        unsubscribe();
        unsubscribeWrites();
        r.listeners.delete(check);
        timer.cancel();
        unsubscribeAbort?.();
        resolve();
      };
      const check = () => {
        if (
          r.log.logEndOffset > offset ||
          r.highWatermark > f.highWatermarkSent ||
          r.log.closed ||
          r.log.fenced ||
          r.role !== "leader"
        )
          finish();
      };
      const unsubscribe = r.log.subscribe(check);
      const unsubscribeWrites = r.log.subscribeWrites(check);
      r.listeners.add(check);
      const timer = this.#o.clock.setTimer(waitMs, finish);
      // One listener per signal (lib/abort.ts): waits in flight on a connection share its signal.
      if (signal !== undefined) unsubscribeAbort = onAbort(signal, finish);
      if (signal?.aborted) finish();
    });
  }

  /** Recomputes the high watermark (the module comment); it never goes down while leading. */
  #updateHighWatermark(r: Replica): void {
    // Below min ISR nothing new is committed: the replicas that left the ISR then (the ELR) must
    // still hold every committed record (docs/cluster.md "Partition state").
    if (r.role !== "leader" || r.state.isr.length < r.state.min_insync_replicas) return;
    let hw = r.log.highWatermark;
    // A follower whose expansion may be in etcd already counts: the controller may elect it from
    // etcd's ISR before this leader applies the write (docs/cluster.md "Replica fetch").
    const members =
      r.joining === null || r.state.isr.includes(r.joining.nodeId)
        ? r.state.isr
        : [...r.state.isr, r.joining.nodeId];
    for (const id of members) {
      if (id === this.#o.nodeId) continue;
      const f = r.followers.get(id);
      if (f === undefined || f.durable < 0) return;
      hw = Math.min(hw, f.durable);
    }
    if (hw > r.highWatermark) {
      r.highWatermark = hw;
      this.#notify(r);
    }
  }

  /** Answers the waiters the high watermark covers, or fails them all while the ISR is below its minimum. */
  #settle(r: Replica): void {
    if (r.waiters.length === 0) return;
    if (!this.#leaseHeld()) {
      this.#failWaiters(r, this.#leaseLost(r));
      return;
    }
    if (r.state.isr.length < r.state.min_insync_replicas) {
      this.#failWaiters(r, this.#notEnoughReplicas(r));
      return;
    }
    const hw = r.highWatermark;
    const still: Waiter[] = [];
    for (const w of r.waiters) {
      if (w.nextOffset <= hw) w.resolve();
      else still.push(w);
    }
    r.waiters = still;
  }

  #failWaiters(r: Replica, err: BrokerError): void {
    const waiters = r.waiters;
    r.waiters = [];
    for (const w of waiters) w.reject(err);
  }

  #notify(r: Replica): void {
    for (const l of [...r.listeners]) l();
    this.#leaveCheck?.();
  }

  /** ISR shrink (the module comment): checked every half `replica_lag_ms` while leading. */
  /** The partition's `replica_lag_ms`: its topic's config, else the manager's default. */
  #lagMs(r: Replica): number {
    try {
      return this.#o.broker.topicConfig(r.topic).replica_lag_ms ?? this.#replicaLagMs;
    } catch {
      return this.#replicaLagMs;
    }
  }

  #scheduleLagCheck(r: Replica): void {
    r.lagTimer = this.#o.clock.setTimer(Math.max(1, this.#lagMs(r) / 2), () => {
      r.lagTimer = null;
      if (r.role !== "leader" || this.#closed || r.log.closed) return;
      this.#checkLag(r);
      this.#scheduleLagCheck(r);
    });
  }

  #checkLag(r: Replica): void {
    // A leaving broker never shrinks an ISR: its followers stop being served because it stops,
    // not because they fell behind, and the controller must elect from the full ISR.
    if (!this.#live || this.#leaving) return;
    const now = this.#o.clock.nowMs();
    const lagMs = this.#lagMs(r);
    const remove = r.state.isr.filter((id) => {
      if (id === this.#o.nodeId) return false;
      const f = r.followers.get(id);
      return f === undefined || now - f.lastCaughtUpMs > lagMs;
    });
    if (remove.length === 0) return;
    this.#changeIsr(r, (state) =>
      shrinkIsr(state, { leader: this.#o.nodeId, remove, highWatermark: r.highWatermark }),
    );
  }

  /**
   * Writes an ISR change to etcd by compare-and-set on the key's mod_revision (one at a time per
   * partition); takes it locally once written. A failed compare reads the key back and applies
   * what is there (a new leader or epoch deposes this one).
   *
   * An expansion names the incarnation whose fetches earned it (`joining`): etcd's registration
   * of that node id is read first and must be that incarnation, and the transaction also compares
   * the registration's mod_revision, so a node id that another process registered meanwhile (one
   * this leader's watch has not delivered yet) is never added on its predecessor's fetches
   * (docs/cluster.md "Replica fetch"). From the decision until the outcome is known (a newer
   * state applied, or a write that certainly did not happen), the joining follower counts for the
   * high watermark (`Replica.joining`): etcd's ISR may hold it before this leader's does. An
   * answer lost on the way is settled by a compare-and-set of the state as it was
   * (`#resolveJoining`).
   */
  #changeIsr(
    r: Replica,
    change: (state: PartitionState) => PartitionState,
    joining?: { nodeId: number; incarnation: string },
  ): void {
    if (r.isrChange !== null || this.#closed) return;
    const epoch = r.state.leader_epoch;
    const pending =
      joining === undefined ? null : { nodeId: joining.nodeId, sinceRevision: r.modRevision };
    if (pending !== null) r.joining = pending;
    r.isrChange = (async () => {
      const key = `${this.#o.prefix}/partitions/${r.topic}/${r.partition}`;
      const compare: EtcdCompare[] = [
        { key, target: "mod_revision", result: "equal", number: r.modRevision },
      ];
      // Only for the topic the local copy is of: a broker whose view missed the topic's deletion
      // and creation (a watch that dropped events) must not write the new topic's ISR and
      // committed offset from its old copy (attack16 F6; docs/cluster.md "Topic ids").
      let topicRevision: number | undefined;
      try {
        topicRevision = this.#o.broker.topicRevision?.(r.topic);
      } catch {
        topicRevision = undefined;
      }
      if (topicRevision !== undefined)
        compare.push({
          key: `${this.#o.prefix}/topics/${r.topic}`,
          target: "create_revision",
          result: "equal",
          number: topicRevision,
        });
      if (joining !== undefined) {
        const registrationKey = brokerKey(this.#o.prefix, joining.nodeId);
        const markerKey = leavingKey(this.#o.prefix, joining.nodeId);
        const [kv, marker] = await Promise.all([
          this.#o.etcd.get(registrationKey),
          this.#o.etcd.get(markerKey),
        ]);
        const registered = kv === null ? null : parseRegistration(kv).incarnation;
        if (kv === null || registered !== joining.incarnation) {
          this.#refuseExpansion(r, joining, registered);
          return;
        }
        if (marker !== null && marker.value === joining.incarnation) {
          this.#leavingFollowers.set(joining.nodeId, joining.incarnation);
          this.#o.logger.log("info", "replication.isr_expand_refused", {
            partition: r.name,
            node_id: joining.nodeId,
            incarnation: joining.incarnation,
            reason:
              "this follower is leaving the cluster (leaving/<node id>): it does not join the ISR, where it would hold acknowledgements back once it stops",
          });
          return;
        }
        compare.push(
          { key: registrationKey, target: "mod_revision", result: "equal", number: kv.modRevision },
          marker === null
            ? { key: markerKey, target: "version", result: "equal", number: 0 }
            : {
                key: markerKey,
                target: "mod_revision",
                result: "equal",
                number: marker.modRevision,
              },
        );
      }
      let next: PartitionState;
      try {
        next = change(r.state);
      } catch (err) {
        this.#o.logger.log("warn", "replication.isr_change_refused", {
          partition: r.name,
          error: errorMessage(err),
        });
        return;
      }
      if (next.isr.join() === r.state.isr.join()) return;
      // Taken before the transaction: this broker's own watch may apply the write first.
      const isrBefore = r.state.isr;
      let result: Awaited<ReturnType<Etcd["txn"]>>;
      try {
        result = await this.#o.etcd.txn({
          compare,
          success: [{ put: { key, value: formatPartitionState(next) } }],
          failure: [{ get: { key } }],
        });
      } catch (err) {
        if (pending !== null) await this.#resolveJoining(r, pending, key);
        throw err;
      }
      await r.lock.run(async () => {
        if (result.succeeded) {
          this.#o.logger.log("info", "replication.isr_changed", {
            partition: r.name,
            leader_epoch: epoch,
            isr_before: isrBefore,
            isr: next.isr,
            high_watermark: r.highWatermark,
          });
          await this.#apply(r, next, result.revision);
          return;
        }
        const kv = result.reads[0]?.[0];
        if (
          joining === undefined &&
          topicRevision !== undefined &&
          kv?.modRevision === r.modRevision
        )
          this.#o.logger.log("warn", "replication.isr_change_refused", {
            partition: r.name,
            topic_revision: topicRevision,
            error:
              "etcd's record of the topic is not the one the local copy was made from (the topic was deleted and created again, and this broker's view missed it): the ISR is left as it is until the view is repaired and the copy replaced",
          });
        if (joining !== undefined && kv?.modRevision === r.modRevision)
          // The partition did not change: the registration did, between the read and the write.
          this.#refuseExpansion(r, joining, undefined);
        if (kv !== undefined)
          await this.#apply(r, parsePartitionState(kv.key, kv.value), kv.modRevision);
      });
    })()
      .catch((err: unknown) =>
        this.#o.logger.log("warn", "replication.isr_change_failed", {
          partition: r.name,
          error: errorMessage(err),
        }),
      )
      .finally(() => {
        r.isrChange = null;
        if (pending === null || r.joining !== pending) return;
        // The expansion certainly did not happen: the high watermark goes back to the ISR alone.
        r.joining = null;
        this.#updateHighWatermark(r);
        this.#settle(r);
      });
  }

  /**
   * After an expansion's answer was lost: writes the state as it was, compared on the revision the
   * expansion compared, until an answer comes. That makes the outcome final even if the expansion
   * is still on its way inside etcd: either it is there (this write fails and reads it, and it is
   * applied, which ends `pending`) or it can never apply any more (its compare fails from now on).
   * Ends early once this broker no longer leads or closes.
   */
  async #resolveJoining(
    r: Replica,
    pending: NonNullable<Replica["joining"]>,
    key: string,
  ): Promise<void> {
    while (r.joining === pending && r.role === "leader" && !this.#closed) {
      const before = r.state;
      try {
        const result = await this.#o.etcd.txn({
          compare: [
            { key, target: "mod_revision", result: "equal", number: pending.sinceRevision },
          ],
          success: [{ put: { key, value: formatPartitionState(before) } }],
          failure: [{ get: { key } }],
        });
        const kv = result.reads[0]?.[0];
        await r.lock.run(async () => {
          if (result.succeeded) await this.#apply(r, before, result.revision);
          else if (kv !== undefined)
            await this.#apply(r, parsePartitionState(kv.key, kv.value), kv.modRevision);
        });
        return;
      } catch {
        // Lost again: the next try's compare tells whether this write or the expansion landed.
        await new Promise<void>((resolve) => this.#o.clock.setTimer(1000, resolve));
      }
    }
  }

  /**
   * An ISR expansion that etcd's registration of the node does not back (another incarnation,
   * or none, registered now): logged, and the position its fetches earned is forgotten.
   */
  #refuseExpansion(
    r: Replica,
    joining: { nodeId: number; incarnation: string },
    registered: string | null | undefined,
  ): void {
    const f = r.followers.get(joining.nodeId);
    if (f !== undefined && f.incarnation === joining.incarnation) {
      f.durable = -1;
      f.incarnation = undefined;
    }
    this.#o.logger.log("warn", "replication.isr_expand_refused", {
      partition: r.name,
      node_id: joining.nodeId,
      incarnation: joining.incarnation,
      registered: registered === undefined ? "changed during the write" : registered,
      reason:
        "etcd's registration of this node id is not the incarnation whose fetches caught up: it does not join the ISR on them",
    });
  }

  /**
   * Gives up, by compare-and-set on `modRevision`, a leadership this replica refused because its
   * log lacks committed records (see {@link ReplicaManager.applyPartitionState}): no leader, the
   * epoch bumped, this replica out of the ISR and the ELR. A write that fails (etcd unreachable,
   * or an answer lost) is tried again every second while that state is still the last one
   * applied: the controller keeps a leader that is alive, so the state must not stay naming this
   * one. Never throws.
   */
  async #giveUpLeadership(r: Replica, state: PartitionState, modRevision: number): Promise<void> {
    const next = resignLeadership(state, this.#o.nodeId, { eligible: false });
    if (next === null || this.#closed || r.modRevision > modRevision) return;
    const key = `${this.#o.prefix}/partitions/${r.topic}/${r.partition}`;
    try {
      const result = await this.#o.etcd.txn({
        compare: [{ key, target: "mod_revision", result: "equal", number: modRevision }],
        success: [{ put: { key, value: formatPartitionState(next) } }],
      });
      if (result.succeeded)
        this.#o.logger.log("warn", "cluster.leadership_given_up", {
          partition: r.name,
          leader_epoch: next.leader_epoch,
          isr: next.isr,
          elr: next.elr,
        });
    } catch (err) {
      this.#o.logger.log("warn", "cluster.leadership_give_up_failed", {
        partition: r.name,
        error: errorMessage(err),
      });
      // A lost answer may have been applied: the compare on `modRevision` then fails harmlessly.
      this.#o.clock.setTimer(1000, () => void this.#giveUpLeadership(r, state, modRevision));
    }
  }

  #notLeader(r: Replica | undefined, why?: string, name?: string): BrokerError {
    const partition = r?.name ?? name ?? "?";
    const stated = r?.state.leader ?? noLeader;
    // Leaving, the state still names this broker until the controller moves the leadership: name
    // no leader (HTTP answers 503 rather than a redirect back here; clients read the metadata).
    const departing = (this.#leaving || this.#closed) && stated === this.#o.nodeId;
    const leader = departing ? noLeader : stated;
    const detail =
      why ??
      (departing
        ? "this broker is leaving the cluster (shutting down); the controller moves the leadership to another in-sync replica within moments: read the metadata again and retry"
        : leader === noLeader
          ? "it has no leader now"
          : leader === this.#o.nodeId
            ? "this broker is taking over its leadership"
            : `this broker is not its leader; the leader is node ${leader}`);
    const address = leader === noLeader ? undefined : this.#brokers.get(leader);
    return new BrokerError(
      Errors.notLeader,
      `Cannot serve partition "${partition}" on node ${this.#o.nodeId}: ${detail}`,
      {
        leader,
        ...(r === undefined ? {} : { leader_epoch: r.state.leader_epoch }),
        ...(address === undefined ? {} : { leader_tcp: address.tcp, leader_http: address.http }),
      },
    );
  }

  #notEnoughReplicas(r: Replica): BrokerError {
    return new BrokerError(
      Errors.notEnoughReplicas,
      `Cannot acknowledge writes to partition "${r.name}": ${r.state.isr.length} in-sync replicas (${r.state.isr.join(", ")}), below its min_insync_replicas ${r.state.min_insync_replicas}`,
      { isr: r.state.isr, min_insync_replicas: r.state.min_insync_replicas },
    );
  }

  /**
   * What this broker knows of each partition it holds a replica of, for `cluster status` and
   * metrics: its role and epoch, the high watermark (a follower's: the leader's as last fetched),
   * its log end, and as leader each follower's durable position, lag (the leader's log end minus
   * it; −1 before its first fetch) and ms since it was last caught up. Sorted by topic, partition.
   */
  describe(): ReplicaDescription[] {
    const now = this.#o.clock.nowMs();
    const out: ReplicaDescription[] = [];
    for (const r of this.#replicas.values()) {
      if (r.log.closed) continue;
      const logEnd = r.log.logEndOffset;
      out.push({
        topic: r.topic,
        partition: r.partition,
        role: r.role,
        leader: r.state.leader,
        leader_epoch: r.state.leader_epoch,
        isr: [...r.state.isr],
        high_watermark: r.role === "leader" ? r.highWatermark : r.leaderHighWatermark,
        log_end_offset: logEnd,
        followers:
          r.role !== "leader"
            ? []
            : [...r.followers].map(([id, f]) => ({
                node_id: id,
                durable_offset: f.durable,
                lag: f.durable < 0 ? -1 : Math.max(0, logEnd - f.durable),
                caught_up_ms_ago: now - f.lastCaughtUpMs,
              })),
      });
    }
    return out.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  }

  /**
   * How far behind its leader each partition this broker follows is, for `/metrics`
   * (docs/operations.md "Metrics", replication): records of the leader's high watermark (as its
   * last answer said) not yet here, and ms since they all were. Sorted by topic, partition.
   */
  fetchLag(): FollowerFetchLag[] {
    const now = this.#o.clock.nowMs();
    const out: FollowerFetchLag[] = [];
    for (const r of this.#replicas.values()) {
      if (r.log.closed || r.role !== "follower") continue;
      const records = Math.max(0, r.fetchedHighWatermark - r.log.logEndOffset);
      out.push({
        topic: r.topic,
        partition: r.partition,
        records,
        ms: records === 0 ? 0 : Math.max(0, now - r.caughtUpMs),
      });
    }
    return out.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  }

  /**
   * The first step of leaving the cluster (module comment, Leaving; docs/cluster.md "Leaving the
   * cluster"): from now on no produce append is admitted on the partitions this broker leads
   * (`not_leader` naming no leader: retriable) and no ISR is shrunk; replica fetches are still
   * served. Resolves once, on every partition it leads, the appends already admitted have
   * finished, its own fsync covers its log end, every ISR follower's durable position has reached
   * that log end and so no acknowledgement is pending (or they failed: the ISR fell below its
   * minimum) — or after `drainMs`, whichever comes first. Call {@link close} next, then record
   * the departure. Never throws.
   */
  async leave(drainMs: number = leaveDrainMsDefault): Promise<LeaveDrain> {
    const started = this.#o.clock.nowMs();
    this.#leaving = true;
    const leaders = [...this.#replicas.values()].filter((r) => r.role === "leader");
    let settled = false;
    const behind = () =>
      leaders
        .filter((r) => r.role === "leader" && !r.log.closed && !(settled && this.#drained(r)))
        .map((r) => r.name)
        .sort();
    if (!this.#closed && drainMs > 0 && behind().length > 0)
      await new Promise<void>((resolve) => {
        const done = () => {
          this.#leaveCheck = null;
          timer.cancel();
          resolve();
        };
        const timer = this.#o.clock.setTimer(drainMs, done);
        this.#leaveCheck = () => {
          if (behind().length === 0) done();
        };
        // Appends admitted before `#leaving` was set may still be writing: wait for them, so
        // the log end checked is the last one.
        void Promise.all(leaders.map((r) => r.log.settle().catch(() => 0))).then(() => {
          settled = true;
          this.#leaveCheck?.();
        });
      });
    return { led: leaders.length, behind: behind(), waitedMs: this.#o.clock.nowMs() - started };
  }

  /**
   * Whether a led partition holds nothing a departure could cost: its fsync covers its log end,
   * every ISR follower has that log end durably, and no acknowledgement waits.
   */
  #drained(r: Replica): boolean {
    const end = r.log.logEndOffset;
    if (r.waiters.length > 0 || r.log.highWatermark < end) return false;
    for (const id of r.state.isr) {
      if (id === this.#o.nodeId) continue;
      const f = r.followers.get(id);
      if (f === undefined || f.durable < end) return false;
    }
    return true;
  }

  /** Stops every follower loop, fails pending acknowledgements `not_leader`, and stops the timers. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const stops: Promise<void>[] = [];
    for (const r of this.#replicas.values()) {
      if (r.role === "leader") this.#resign(r, { ...r.state, leader: noLeader });
      r.role = "none";
      this.#notify(r);
      if (r.follower !== null) stops.push(r.follower.stop());
      r.follower = null;
    }
    await Promise.all(stops);
  }
}

/**
 * Compares a presented credential with the secret in time that depends only on the secret's
 * length, never on where they differ.
 */
function credentialMatches(given: Uint8Array, secret: Uint8Array): boolean {
  let diff = given.length ^ secret.length;
  for (let i = 0; i < secret.length; i++) diff |= secret[i] ^ (given[i] ?? 0);
  return diff === 0;
}

/** The leader epoch of the last record below `end` (default: the log end) of `r`, -1 for none. */
function recordEpoch(r: Replica, end = r.log.logEndOffset): number {
  let epoch = -1;
  for (const e of r.history.entries) if (e.startOffset < end) epoch = e.epoch;
  return epoch;
}
