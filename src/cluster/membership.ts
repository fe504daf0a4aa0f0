/**
 * Broker membership through etcd (docs/cluster.md "Membership"): the cluster's identity, and one
 * registration per broker kept alive by a lease.
 *
 * Keys, under the cluster prefix (default `/es-broker`):
 * - `cluster_id`: the cluster's id, written once by the first broker ever to start
 *   (create-if-absent); every data directory records the id of the cluster it belongs to.
 * - `brokers/<node id>`: `{"node_id", "cluster_id", "data_dir_id", "incarnation", "tcp", "http"}`
 *   (and `"tls": true` when its TCP listener serves TLS) on the broker's lease, so it vanishes
 *   when the broker stops renewing. `incarnation` is the id of the lease this run of the broker
 *   first registered with: a broker that restarted (a new process, its logs opened again) has a
 *   new one, which the controller treats as "gone and back" (it left the ISR when it died,
 *   whatever it says now). A broker that merely lost its lease (etcd revoked it, or it could not
 *   renew for a TTL) registers again on a new lease with the **same** incarnation and
 *   `"registered_revision"`, the etcd revision of its first registration: its process and logs
 *   never stopped, so it is not a restart (docs/cluster.md "Riding out a lost lease").
 * - `departed/<node id>`: the incarnation of a broker that left cleanly (SIGTERM), written just
 *   before it revokes its lease, so the controller moves its partitions at once rather than
 *   after the grace it gives a lapsed registration.
 * - `leaving/<node id>`: the incarnation of a broker that has begun to leave (SIGTERM), written
 *   at the start of the leave on its lease (gone with the lease: at the end of the leave, or
 *   when a broker dies mid-leave), so the controller elects it nowhere while it drains.
 *
 * Start-up refusals (a {@link ClusterJoinError}, not retried): a data directory of another
 * cluster or of another node id; a node id registered by a live broker with another data
 * directory; a data directory of a cluster etcd does not know (etcd's data was lost or another
 * etcd was given); a TCP listener with TLS while a live broker's has none, or the reverse (brokers
 * replicate over their TCP listeners and never fall back to plain TCP: docs/cluster.md "TLS
 * between brokers"). A registration with this data directory's id is this broker's own previous
 * run (the data directory lock guarantees it is dead): it is taken over at once rather than
 * waiting for its lease to expire. etcd unreachable: retried with backoff ({@link joinCluster}).
 */
import type { Clock, Timer } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { Prng } from "../lib/prng.ts";
import { type Etcd, EtcdError, type EtcdKeyValue } from "./etcd.ts";

/**
 * How long each etcd step of leaving the cluster (recording the departure, revoking the lease)
 * may take, ms: a healthy etcd answers in milliseconds, and the lease renewal gives one member
 * 1.5 s too. Past it the step is given up (logged) and the broker goes on exiting; the
 * controller then learns of the departure from the lease's expiry (docs/cluster.md "Leaving the
 * cluster").
 */
export const leaveEtcdStepMsDefault = 1_500;

/** How one bounded step ended: done, failed (`error`, etcd's message), or no answer in time. */
export type StepOutcome =
  | { ok: true; ms: number }
  | { ok: false; timedOut: boolean; error: string; ms: number };

/** What {@link Membership.close} achieved: each step's outcome (`departure` null when refused). */
export interface MembershipCloseReport {
  departure: StepOutcome | null;
  revoke: StepOutcome;
}

/**
 * Runs `step` and waits for it at most `ms` (a timer of `clock`): resolves with its outcome,
 * never throws. A step given up keeps running in the background (closing the etcd client
 * aborts it).
 */
export function boundedStep(
  clock: Clock,
  ms: number,
  step: () => Promise<unknown>,
): Promise<StepOutcome> {
  const started = clock.nowMs();
  return new Promise<StepOutcome>((resolve) => {
    let settled = false;
    const finish = (outcome: StepOutcome) => {
      if (settled) return;
      settled = true;
      timer.cancel();
      resolve(outcome);
    };
    const timer = clock.setTimer(ms, () =>
      finish({
        ok: false,
        timedOut: true,
        error: `no answer within ${ms} ms`,
        ms: clock.nowMs() - started,
      }),
    );
    let run: Promise<unknown>;
    try {
      run = step();
    } catch (err) {
      run = Promise.reject(err);
    }
    run.then(
      () => finish({ ok: true, ms: clock.nowMs() - started }),
      (err: unknown) =>
        finish({
          ok: false,
          timedOut: false,
          error: errorMessage(err),
          ms: clock.nowMs() - started,
        }),
    );
  });
}

/** A refusal to join that retrying cannot fix: the message says what is wrong and what to do. */
export class ClusterJoinError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClusterJoinError";
  }
}

/** What a broker's registration holds. */
export interface BrokerRegistration {
  node_id: number;
  cluster_id: string;
  data_dir_id: string;
  /** The lease id of this run's first registration: kept when it registers again after losing its lease. */
  incarnation: string;
  /**
   * With a registration written again after a lost lease: the etcd revision of this
   * incarnation's first registration (absent on the first one, whose own revision it is).
   */
  registered_revision?: number;
  /** `host:port` of the TCP listener other brokers and clients use. */
  tcp: string;
  /** Base URL of the HTTP listener. */
  http: string;
  /** `host:port` of the Kafka listener, when the broker has one. */
  kafka?: string;
  /** True when its TCP listener serves TLS (absent: plain TCP). */
  tls?: boolean;
}

/** Options of {@link joinCluster}. */
export interface JoinOptions {
  etcd: Etcd;
  clock: Clock;
  /** Jitter of retry delays. */
  prng: Prng;
  logger: Logger;
  /** Key prefix of this cluster in etcd, without a trailing slash. Default `/es-broker`. */
  prefix?: string;
  nodeId: number;
  /** Where this broker is reached; `tls` when its TCP listener serves TLS. */
  advertise: { tcp: string; http: string; kafka?: string; tls?: boolean };
  /** The data directory's own id (random, made when it was created). */
  dataDirId: string;
  /** What the data directory recorded of the cluster, null for a directory that never joined one. */
  dataDir: { clusterId: string; nodeId: number } | null;
  /** The id to give the cluster if this broker is the first ever (random, from the caller). */
  newClusterId: string;
  /** Lease TTL in seconds: how long a dead broker stays registered. Default 6. */
  leaseTtlSeconds?: number;
  /** Longest pause between two attempts while etcd is unreachable, in ms. Default 5000. */
  retryMaxMs?: number;
  /**
   * Called with the cluster id once the identity checks passed and before the broker first
   * registers: the data directory records the cluster it joins (`cluster.json`) before anyone
   * can see it as a member. A rejection stops the join.
   */
  beforeRegister?: (clusterId: string) => Promise<void>;
}

/** Default prefix of the cluster's keys in etcd. */
export const defaultClusterPrefix = "/es-broker";

/** The key recording that a broker left cleanly: its incarnation (no lease). */
export function departedKey(prefix: string, nodeId: number): string {
  return `${prefix}/departed/${nodeId}`;
}

/**
 * The key announcing that a broker has begun to leave the cluster: its incarnation, on its
 * lease (docs/cluster.md "Leaving the cluster"). The controller elects no broker it names, and
 * a leader adds none it names to an ISR.
 */
export function leavingKey(prefix: string, nodeId: number): string {
  return `${prefix}/leaving/${nodeId}`;
}

/**
 * The etcd revision at which a registration's incarnation first registered: its
 * `registered_revision` when it registered again after a lost lease, else the key's own
 * `mod_revision`. A partition state written before it was written for an earlier incarnation.
 */
export function incarnationRevision(kv: EtcdKeyValue, r: BrokerRegistration): number {
  return r.registered_revision ?? kv.modRevision;
}

/**
 * The refusal of a node id that a broker with another data directory holds in etcd (a live
 * broker, or a killed one whose lease has not expired yet; docs/cluster.md "Membership").
 */
export function registeredElsewhere(nodeId: number, other: BrokerRegistration): ClusterJoinError {
  return new ClusterJoinError(
    `Cannot join the cluster as node ${nodeId}: node ${nodeId} is registered by a broker with another data directory (tcp ${other.tcp}, http ${other.http}): if that broker runs, give each broker its own --node-id; if it was killed or lost its disk, its registration lasts until its etcd lease expires (about 10 s with the default lease): start this one again after that, with the same --node-id`,
  );
}

/**
 * The refusal a running broker gets when it registers again (its lease lapsed: paused, or cut
 * off from etcd) and finds its node id taken by a broker on another data directory (attack15
 * F7): unlike {@link registeredElsewhere}, written for a starting broker, it says what the
 * cluster did to this data directory and how to give the node its records back
 * (docs/cluster.md "Replacing a broker's disk, backing up etcd").
 */
export function displacedBy(nodeId: number, other: BrokerRegistration): ClusterJoinError {
  return new ClusterJoinError(
    `Node ${nodeId} was taken over by a broker on another data directory (tcp ${other.tcp}, http ${other.http}) while this process could not renew its registration (paused, or cut off from etcd): this process stops serving as node ${nodeId}. The cluster no longer counts this data directory's records as node ${nodeId}'s: a start on a new directory takes the node out of every in-sync and eligible replica list. Keep this data directory. If that broker was started by mistake (an empty directory, a disk not mounted), stop it and start this directory again as node ${nodeId}: partitions that stayed offline since take it back; the others catch it up. If that broker is the node's new disk, this directory's records are no longer needed, unless a partition stays offline for lack of them (es-broker cluster status says so)`,
  );
}

/** The key of a broker's registration. */
export function brokerKey(prefix: string, nodeId: number): string {
  return `${prefix}/brokers/${nodeId}`;
}

/**
 * Parses a stored registration.
 * @throws Error naming the key if the value is not a registration.
 */
export function parseRegistration(kv: EtcdKeyValue): BrokerRegistration {
  let r: BrokerRegistration;
  try {
    r = JSON.parse(kv.value) as BrokerRegistration;
  } catch {
    throw new Error(`Cannot read broker registration ${JSON.stringify(kv.key)}: not JSON`);
  }
  if (
    !Number.isSafeInteger(r?.node_id) ||
    typeof r.cluster_id !== "string" ||
    typeof r.data_dir_id !== "string" ||
    typeof r.incarnation !== "string" ||
    (r.registered_revision !== undefined && !Number.isSafeInteger(r.registered_revision)) ||
    typeof r.tcp !== "string" ||
    typeof r.http !== "string" ||
    (r.kafka !== undefined && typeof r.kafka !== "string") ||
    (r.tls !== undefined && typeof r.tls !== "boolean")
  ) {
    throw new Error(
      `Cannot read broker registration ${JSON.stringify(kv.key)}: a field is missing or of the wrong type`,
    );
  }
  return r;
}

/**
 * This broker's membership: its registration, renewed on a timer through the Clock. When the
 * lease is lost (etcd says it expired, or no renewal succeeded for a whole TTL, or the
 * registration vanished: {@link checkNow}) the membership is not live: the broker must stop
 * acknowledging replicated writes. It then registers again with a new lease and the same
 * incarnation (its process and logs never stopped), retrying until it succeeds or is closed.
 */
export class Membership {
  readonly clusterId: string;
  readonly nodeId: number;
  /** The incarnation: the first lease's id, for the whole life of this object. */
  readonly incarnation: string;
  #lease: string;
  #registeredRevision: number;
  /** The renewal (or check) running now, so two never overlap. */
  #renewing: Promise<void> | null = null;
  #checkWanted = false;
  #live = true;
  #closed = false;
  #refused: ClusterJoinError | null = null;
  /** Set by {@link markLeaving}: a registration on a new lease carries the marker again. */
  #leaving = false;
  #timer: Timer | null = null;
  #lastRenewalMs: number;
  #expiresAtMs: number;
  readonly #ttlSeconds: number;
  readonly #options: JoinOptions;
  readonly #prefix: string;
  readonly #listeners = new Set<(live: boolean) => void>();
  readonly #refusedListeners = new Set<(err: ClusterJoinError) => void>();

  /** Use {@link joinCluster}. */
  constructor(
    options: JoinOptions,
    joined: {
      clusterId: string;
      lease: string;
      ttlSeconds: number;
      sentMs?: number;
      revision?: number;
    },
  ) {
    this.#options = options;
    this.#prefix = options.prefix ?? defaultClusterPrefix;
    this.clusterId = joined.clusterId;
    this.nodeId = options.nodeId;
    this.#lease = joined.lease;
    this.incarnation = joined.lease;
    this.#registeredRevision = joined.revision ?? 0;
    this.#ttlSeconds = joined.ttlSeconds;
    this.#lastRenewalMs = options.clock.nowMs();
    this.#expiresAtMs = (joined.sentMs ?? this.#lastRenewalMs) + joined.ttlSeconds * 1000;
    this.#schedule();
  }

  /**
   * The earliest time (ms of the Clock) at which etcd may expire the current lease: the send time
   * of the last grant or renewal that succeeded, plus the TTL it returned. etcd counts the TTL from
   * when it received that request, later than it was sent, so before this time the lease is
   * certainly held (a broker paused past it must assume another leads its partitions: the
   * replication layer appends nothing more until a renewal moves it).
   */
  get leaseExpiresAtMs(): number {
    return this.#expiresAtMs;
  }

  /** The lease id of the current registration (the broker's incarnation). */
  get leaseId(): string {
    return this.#lease;
  }

  /**
   * The etcd store revision at which this incarnation first registered (0 if unknown); a
   * registration written again after a lost lease keeps it. A partition state with an older
   * `mod_revision` was written for an earlier incarnation of this broker: it must not lead by it
   * (field failures #27c; docs/cluster.md "Replication").
   */
  get registeredRevision(): number {
    return this.#registeredRevision;
  }

  /** Whether the registration is known to be held: false from a lost lease until re-registered. */
  get live(): boolean {
    return this.#live;
  }

  /**
   * Why registering again was refused (another broker registered this node id meanwhile: this
   * process was paused or cut off past its lease and replaced), or null. Once refused, the
   * membership never registers again: this process must stop replicating and serving as the node
   * (docs/cluster.md "Replacing a broker's disk, backing up etcd").
   */
  get refused(): ClusterJoinError | null {
    return this.#refused;
  }

  /** Calls `fn` once if registering again is refused ({@link refused}). Returns a function that removes it. */
  onRefused(fn: (err: ClusterJoinError) => void): () => void {
    this.#refusedListeners.add(fn);
    return () => this.#refusedListeners.delete(fn);
  }

  /** Calls `fn` whenever {@link live} changes. Returns a function that removes it. */
  onLiveChange(fn: (live: boolean) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #setLive(live: boolean): void {
    if (this.#live === live) return;
    this.#live = live;
    this.#options.logger.log(
      live ? "info" : "warn",
      live ? "cluster.registered" : "cluster.lease_lost",
      {
        node_id: this.nodeId,
        lease: this.#lease,
      },
    );
    for (const fn of this.#listeners) fn(live);
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer?.cancel();
    this.#timer = this.#options.clock.setTimer(
      (this.#ttlSeconds * 1000) / 3,
      () => void this.#run(false),
    );
  }

  /**
   * Checks at once, without waiting for the next renewal, that the registration is still held:
   * renews the lease and reads the registration back; if either is gone, the membership is not
   * live and registers again. The cluster node calls it when its watch sees this broker's
   * registration deleted (etcd revoked the lease), so the gap lasts a round trip or two, not a
   * renewal period (docs/cluster.md "Riding out a lost lease").
   */
  checkNow(): Promise<void> {
    return this.#run(true);
  }

  #run(check: boolean): Promise<void> {
    if (this.#renewing !== null) {
      if (check) this.#checkWanted = true;
      return this.#renewing;
    }
    this.#timer?.cancel();
    this.#renewing = this.#renew(check).finally(() => {
      this.#renewing = null;
      if (this.#checkWanted && !this.#closed) {
        this.#checkWanted = false;
        void this.#run(true);
      }
    });
    return this.#renewing;
  }

  async #renew(check: boolean): Promise<void> {
    const { etcd, clock, logger } = this.#options;
    if (this.#closed) return;
    if (this.#live) {
      try {
        const sentMs = clock.nowMs();
        const ttl = await etcd.leaseKeepAlive(this.#lease);
        if (ttl > 0) {
          this.#lastRenewalMs = clock.nowMs();
          this.#expiresAtMs = sentMs + ttl * 1000;
          if (check) {
            const kv = await etcd.get(brokerKey(this.#prefix, this.nodeId));
            if (kv === null || kv.lease !== this.#lease) this.#setLive(false);
          }
        } else this.#setLive(false);
      } catch (err) {
        logger.log("warn", "cluster.lease_renewal_failed", {
          lease: this.#lease,
          error: errorMessage(err),
        });
        // Etcd may already have expired the lease: past a TTL without renewal, assume it did.
        if (clock.nowMs() - this.#lastRenewalMs >= this.#ttlSeconds * 1000) this.#setLive(false);
      }
    }
    if (!this.#live && !this.#closed) {
      try {
        const { lease, ttlSeconds, sentMs } = await register(
          this.#options,
          this.clusterId,
          this.#ttlSeconds,
          { incarnation: this.incarnation, revision: this.#registeredRevision },
        );
        if (this.#closed) {
          await etcd.leaseRevoke(lease).catch(() => {});
          return;
        }
        this.#lease = lease;
        this.#lastRenewalMs = clock.nowMs();
        this.#expiresAtMs = sentMs + ttlSeconds * 1000;
        // The marker went with the lost lease; the broker is still leaving.
        if (this.#leaving) void this.markLeaving();
        this.#setLive(true);
      } catch (err) {
        if (err instanceof ClusterJoinError) {
          // Another process holds this node id now: never register (nor replicate) as it again.
          this.#refused = err;
          this.#closed = true;
          this.#timer?.cancel();
          logger.log("error", "cluster.registration_refused", {
            node_id: this.nodeId,
            incarnation: this.incarnation,
            error: err.message,
            action:
              "this process stops replicating and serving as this node and shuts down (exit 1)",
          });
          for (const fn of this.#refusedListeners) fn(err);
          this.#refusedListeners.clear();
          return;
        }
        // Given up by the leave (the client closed under it): no failure to report.
        if (this.#closed) return;
        logger.log("warn", "cluster.register_failed", {
          node_id: this.nodeId,
          error: errorMessage(err),
        });
      }
    }
    this.#schedule();
  }

  /**
   * Announces that this broker has begun to leave (`leaving/<node id>` = its incarnation, on the
   * current lease: it goes with the lease, so a broker that dies mid-leave leaves no marker
   * behind), waiting at most `stepMs` ({@link leaveEtcdStepMsDefault}); written again on the
   * new lease if the broker registers again meanwhile (a lost lease). Nothing is written after
   * a refusal (the node id is another process's). Never throws: the outcome says what happened
   * (null when refused).
   */
  markLeaving(stepMs: number = leaveEtcdStepMsDefault): Promise<StepOutcome | null> {
    if (this.#refused !== null) return Promise.resolve(null);
    this.#leaving = true;
    const { etcd, clock } = this.#options;
    const lease = this.#lease;
    return boundedStep(clock, stepMs, () =>
      etcd.put(leavingKey(this.#prefix, this.nodeId), this.incarnation, { lease }),
    );
  }

  /**
   * Stops renewing, records the departure (`departed/<node id>`: the controller moves this
   * broker's partitions at once, without the grace a lapsed registration gets; not after a
   * refusal, when the node id is another process's) and revokes the lease, so the registration
   * goes at once (a clean shutdown). Each of the two etcd steps waits at most `stepMs`
   * ({@link leaveEtcdStepMsDefault}; docs/cluster.md "Leaving the cluster"): an etcd without a
   * quorum never answers, and the broker must still exit. The outcome of each step is returned
   * (the caller logs what failed); never throws.
   */
  async close(
    options: {
      stepMs?: number;
      /** Called at once when a step fails or runs out of time (to log it). */
      onStepFailed?: (
        step: "record_departure" | "revoke_lease",
        outcome: StepOutcome & { ok: false },
      ) => void;
    } = {},
  ): Promise<MembershipCloseReport> {
    this.#closed = true;
    this.#timer?.cancel();
    const { etcd, clock } = this.#options;
    const stepMs = options.stepMs ?? leaveEtcdStepMsDefault;
    // A refused membership is no longer the node: its departure would name another's id.
    const departure =
      this.#refused === null
        ? await boundedStep(clock, stepMs, () =>
            etcd.put(departedKey(this.#prefix, this.nodeId), this.incarnation),
          )
        : null;
    if (departure !== null && !departure.ok) options.onStepFailed?.("record_departure", departure);
    const revoke = await boundedStep(clock, stepMs, () => etcd.leaseRevoke(this.#lease));
    if (!revoke.ok) options.onStepFailed?.("revoke_lease", revoke);
    this.#listeners.clear();
    return { departure, revoke };
  }

  /** The key prefix of this cluster. */
  get prefix(): string {
    return this.#prefix;
  }
}

/** Reads or creates the cluster id and checks it against the data directory. */
async function clusterIdentity(options: JoinOptions): Promise<string> {
  const { etcd, dataDir, nodeId } = options;
  const prefix = options.prefix ?? defaultClusterPrefix;
  const key = `${prefix}/cluster_id`;
  if (dataDir !== null && dataDir.nodeId !== nodeId) {
    throw new ClusterJoinError(
      `Cannot join the cluster as node ${nodeId}: the data directory belongs to node ${dataDir.nodeId} of cluster ${JSON.stringify(dataDir.clusterId)}; start it with --node-id ${dataDir.nodeId}, or give this node an empty data directory`,
    );
  }
  const existing = await etcd.get(key);
  if (existing === null) {
    if (dataDir !== null) {
      throw new ClusterJoinError(
        `Cannot join the cluster: the data directory belongs to cluster ${JSON.stringify(dataDir.clusterId)}, but etcd holds no es-broker cluster under ${JSON.stringify(prefix)} (was etcd's data lost, or is this the wrong etcd?)`,
      );
    }
    const created = await etcd.txn({
      compare: [{ key, target: "create_revision", result: "equal", number: 0 }],
      success: [{ put: { key, value: options.newClusterId } }],
      failure: [{ get: { key } }],
    });
    return created.succeeded ? options.newClusterId : created.reads[0][0].value;
  }
  if (dataDir !== null && dataDir.clusterId !== existing.value) {
    throw new ClusterJoinError(
      `Cannot join the cluster: the data directory belongs to cluster ${JSON.stringify(dataDir.clusterId)}, but etcd under ${JSON.stringify(prefix)} holds cluster ${JSON.stringify(existing.value)}; give this broker an empty data directory or the etcd of its own cluster`,
    );
  }
  return existing.value;
}

/**
 * Refuses to join a cluster whose live brokers serve their TCP listeners otherwise (TLS against
 * plain TCP): a follower connects with TLS exactly when its own listener serves it, so the two
 * could never replicate from each other. The registrations of other node ids are compared; a
 * registration of this node id is this broker's previous run.
 * @throws ClusterJoinError naming the first broker that differs and the fix.
 */
async function checkListenerTls(options: JoinOptions): Promise<void> {
  const prefix = options.prefix ?? defaultClusterPrefix;
  const mine = options.advertise.tls === true;
  const { kvs } = await options.etcd.list(`${prefix}/brokers/`);
  for (const kv of kvs) {
    let other: BrokerRegistration;
    try {
      other = parseRegistration(kv);
    } catch {
      continue;
    }
    if (other.node_id === options.nodeId || (other.tls === true) === mine) continue;
    throw new ClusterJoinError(
      `Cannot join the cluster as node ${options.nodeId}: this broker's TCP listener serves ${mine ? "TLS" : "plain TCP"}, but node ${other.node_id} (tcp ${other.tcp}) serves ${mine ? "plain TCP" : "TLS"}. Brokers replicate over their TCP listeners and never fall back to plain TCP, so every broker of a cluster serves TLS (--tls-cert, --tls-key, --cluster-tls-ca) or none does; to switch, stop every broker and start them all the new way (docs/cluster.md "TLS between brokers")`,
    );
  }
}

/**
 * Grants a lease and writes the registration on it, taking over this data directory's old one.
 * `same`: registering again after a lost lease, keeping this run's incarnation and the revision
 * of its first registration.
 */
async function register(
  options: JoinOptions,
  clusterId: string,
  ttlSeconds: number,
  same?: { incarnation: string; revision: number },
): Promise<{ lease: string; ttlSeconds: number; sentMs: number; revision: number }> {
  const { etcd, nodeId } = options;
  const key = brokerKey(options.prefix ?? defaultClusterPrefix, nodeId);
  const sentMs = options.clock.nowMs();
  const lease = await etcd.leaseGrant(ttlSeconds);
  const registration: BrokerRegistration = {
    node_id: nodeId,
    cluster_id: clusterId,
    data_dir_id: options.dataDirId,
    incarnation: same?.incarnation ?? lease.id,
    ...(same === undefined ? {} : { registered_revision: same.revision }),
    tcp: options.advertise.tcp,
    http: options.advertise.http,
    ...(options.advertise.kafka === undefined ? {} : { kafka: options.advertise.kafka }),
    ...(options.advertise.tls === true ? { tls: true } : {}),
  };
  const value = JSON.stringify(registration);
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      const created = await etcd.txn({
        compare: [{ key, target: "create_revision", result: "equal", number: 0 }],
        success: [{ put: { key, value, lease: lease.id } }],
        failure: [{ get: { key } }],
      });
      if (created.succeeded)
        return {
          lease: lease.id,
          ttlSeconds: lease.ttlSeconds,
          sentMs,
          revision: created.revision,
        };
      const current = created.reads[0][0];
      if (current === undefined) continue; // it expired in between: try again
      const other = parseRegistration(current);
      if (other.data_dir_id !== options.dataDirId)
        throw same === undefined ? registeredElsewhere(nodeId, other) : displacedBy(nodeId, other);
      // Our own previous run advertised what we advertise (its ports are free again: it is
      // gone). At other addresses it may be a copy of this data directory running on another
      // host: taking its place would make the two take it from each other (attack15 F1).
      if (
        same === undefined &&
        (other.tcp !== options.advertise.tcp || other.http !== options.advertise.http)
      )
        throw new ClusterJoinError(
          `Cannot join the cluster as node ${nodeId}: node ${nodeId} is registered with this data directory's id (cluster.json) at other addresses (tcp ${other.tcp}, http ${other.http}; this broker advertises tcp ${options.advertise.tcp}, http ${options.advertise.http}): either a copy of this data directory runs there — two brokers must never share one: give the copy its own empty data directory and node id — or it is this broker's previous run under those addresses, whose registration lasts until its etcd lease expires (about 10 s with the default lease): start this one again after that`,
        );
      // Our own previous run (the data directory lock says it is gone): take its place.
      const taken = await etcd.txn({
        compare: [{ key, target: "mod_revision", result: "equal", number: current.modRevision }],
        success: [{ put: { key, value, lease: lease.id } }],
      });
      if (taken.succeeded) {
        if (current.lease !== "0" && current.lease !== lease.id)
          await etcd.leaseRevoke(current.lease).catch(() => {});
        return { lease: lease.id, ttlSeconds: lease.ttlSeconds, sentMs, revision: taken.revision };
      }
    }
    throw new EtcdError(
      "unavailable",
      `Cannot register node ${nodeId}: its registration kept changing under us`,
    );
  } catch (err) {
    await etcd.leaseRevoke(lease.id).catch(() => {});
    throw err;
  }
}

/**
 * Joins the cluster: checks identity, registers this broker under a new lease and starts renewing
 * it. While etcd cannot be reached it retries, with exponential backoff (100 ms doubling to
 * `retryMaxMs`, ±20 % jitter), logging `cluster.etcd_unreachable` at each failure; `signal`
 * stops it.
 * @throws ClusterJoinError at once for a refusal (see the module comment).
 */
export async function joinCluster(
  options: JoinOptions,
  signal?: { aborted: boolean },
): Promise<Membership> {
  const ttlSeconds = options.leaseTtlSeconds ?? 6;
  const retryMaxMs = options.retryMaxMs ?? 5000;
  let delayMs = 100;
  for (let attempt = 1; ; attempt++) {
    try {
      const clusterId = await clusterIdentity(options);
      await checkListenerTls(options);
      await options.beforeRegister?.(clusterId);
      const joined = await register(options, clusterId, ttlSeconds);
      return new Membership(options, {
        clusterId,
        lease: joined.lease,
        ttlSeconds: joined.ttlSeconds,
        sentMs: joined.sentMs,
        revision: joined.revision,
      });
    } catch (err) {
      if (!(err instanceof EtcdError) || !["unavailable", "indeterminate"].includes(err.code))
        throw err;
      if (signal?.aborted) throw err;
      const waitMs = Math.round(delayMs * (0.8 + (0.4 * options.prng.nextU32()) / 2 ** 32));
      options.logger.log("warn", "cluster.etcd_unreachable", {
        attempt,
        retry_in_ms: waitMs,
        error: `Cannot reach etcd to join the cluster: ${err.message}; retrying in ${waitMs} ms`,
      });
      await new Promise<void>((resolve) => options.clock.setTimer(waitMs, resolve));
      delayMs = Math.min(retryMaxMs, delayMs * 2);
    }
  }
}
