/**
 * The controller (docs/cluster.md "Controller"): one broker at a time, elected through etcd,
 * chooses partition leaders when brokers come and go.
 *
 * Election: the key `controller` is created if absent (`create_revision` = 0) on the candidate's
 * membership lease. Its `create_revision` is the **controller epoch**: every write the controller
 * makes compares it, so a controller that was deposed (its lease expired, another took over)
 * can write nothing. Every broker watches the key and campaigns again when it is deleted, and
 * also every `resyncMs` while it is not the controller (a deaf watch misses the deletion:
 * attack15 F6), and when it is deposed.
 *
 * What it does while elected, on every change of `brokers/` (a registration gone, or a new
 * incarnation: the broker restarted), of `log_ends/` (a restarted broker published its log ends),
 * on a partition's creation, on a partition state written without a leader (a leader gave its
 * leadership up: it could not take it, or its log lacks committed records), and every
 * `resyncMs`: lists `partitions/` and applies
 * {@link controllerUpdate} to each, one transaction per partition comparing the partition key's
 * `mod_revision` and the controller epoch. A broker is "gone" for a partition when it is not
 * registered, or registered with another incarnation than the one recorded in `incarnations`
 * (written by the controller after each pass, so a new controller knows who restarted meanwhile).
 *
 * A registration that vanished is **lapsed** first, not gone, for `lapseGraceMs` from when this
 * controller first saw it missing: etcd 3.4 revokes leases across its own leader changes
 * (etcd-io/etcd#15247), and a broker whose process and logs never stopped registers again with
 * the same incarnation within a round trip or a renewal period. A lapsed broker keeps its place
 * (leader, ISR member) but is never elected; if it is back with the same incarnation nothing
 * changes, else it is gone once the grace is over. A broker that left cleanly (`departed/<id>`
 * names its incarnation) is gone at once. docs/cluster.md "Riding out a lost lease".
 *
 * A broker that has begun to leave (`leaving/<id>` names its registered incarnation, written at
 * the start of its leave on its lease) keeps its places but is elected nowhere, preferred
 * leader included, like a lapsed one: docs/cluster.md "Leaving the cluster".
 *
 * Preferred leader election (docs/cluster.md "Preferred leader election"): every
 * `rebalanceMs` (default 30 s; 0 turns it off) the controller moves the leadership of up to
 * `rebalanceMaxMoves` partitions back to their preferred replica ({@link preferredLeaderMove}),
 * each only if the move already applied at the previous check with the same incarnation of the
 * preferred replica (so a broker must stay registered and in the ISR for a whole period first:
 * a flapping one moves nothing). A put of `elect_preferred` (an operator's `etcdctl put`,
 * docs/cluster.md "Preferred leader election") runs one check at once, without the wait and the
 * limit.
 *
 * Time and randomness come through {@link Clock} and {@link Prng} (layer rule): the controller
 * can be driven by a simulation with an in-memory {@link Etcd}.
 */
import type { Clock, Timer } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import { clip } from "../lib/quote.ts";
import type { Prng } from "../lib/prng.ts";
import type { Etcd, EtcdEvent, EtcdKeyValue, EtcdWatch } from "./etcd.ts";
import {
  controllerKey,
  electPreferredKey,
  electUncleanKey,
  electUncleanResultKey,
  incarnationsKey,
  parsePartitionKey,
} from "./keys.ts";
import {
  type BrokerRegistration,
  incarnationRevision,
  leavingKey,
  parseRegistration,
} from "./membership.ts";
import {
  controllerUpdate,
  formatPartitionState,
  newestEpochAbove,
  noLeader,
  offlineReason,
  type PartitionState,
  parsePartitionState,
  preferredLeaderMove,
  type ReplicaView,
  restoredStateUpdate,
  uncleanElection,
} from "./partition-state.ts";

/** The value of the `controller` key. */
export interface ControllerRecord {
  node_id: number;
  incarnation: string;
}

/** Options of {@link Controller}. */
export interface ControllerOptions {
  etcd: Etcd;
  clock: Clock;
  /** Jitter of retry pauses. */
  prng: Prng;
  logger: Logger;
  /** Key prefix of the cluster, without a trailing slash. */
  prefix: string;
  nodeId: number;
  /** The broker's current membership lease id (its incarnation); the controller key lives on it. */
  lease: () => string;
  /**
   * How often an elected controller goes over every partition even without a change, and a
   * broker that is not the controller campaigns (or reads who is), ms. Default 10000.
   */
  resyncMs?: number;
  /** Pause before retrying after etcd failed, ms (jittered ±20 %). Default 500. */
  retryMs?: number;
  /**
   * How long a broker whose registration vanished keeps its place before it counts as gone, ms
   * from when this controller first saw it missing (the module comment). Default
   * {@link lapseGraceMsDefault}.
   */
  lapseGraceMs?: number;
  /**
   * Period of the preferred leader check, ms; 0 turns automatic moves off (an `elect_preferred`
   * request still runs). Default {@link rebalanceMsDefault}.
   */
  rebalanceMs?: number;
  /** Most leaderships one periodic check moves. Default 4. */
  rebalanceMaxMoves?: number;
}

/**
 * Default {@link ControllerOptions.rebalanceMs}: Kafka checks every 300 s; a shorter period
 * brings leadership back sooner after a rolling restart, and the two-check rule keeps a
 * flapping broker from taking it.
 */
export const rebalanceMsDefault = 30_000;

/**
 * Default {@link ControllerOptions.lapseGraceMs}: a broker notices a revoked lease through its
 * watch within milliseconds, or at its next renewal (a third of the 6 s TTL) at worst, and
 * registers again in one or two round trips; 3 s covers the worst case with a margin. It is
 * added to the failover time after a broker dies (the lease TTL, then this, then an election).
 */
export const lapseGraceMsDefault = 3000;

/**
 * How long a partition stays offline before the controller logs it (`cluster.partition_offline`,
 * then at most once a minute), ms: a resync period, so a failover's passes say nothing.
 */
const offlineWarnAfterMs = 10_000;

/** The controller's published log end of one replica, for ELR leaders. */
interface LogEnds {
  incarnation: string;
  log_end_offsets: Record<string, number>;
  /**
   * The leader epoch of each partition's last record (brokers since attack13 F1 B; absent from
   * older ones, whose log ends are then compared alone).
   */
  last_epochs?: Record<string, number>;
  /** The etcd revision it was published at (the key's mod_revision), not part of the value. */
  revision: number;
}

/** Reads a `log_ends/<node>` value, or null if it is not one. */
function parseLogEnds(text: string): Omit<LogEnds, "revision"> | null {
  try {
    const v = JSON.parse(text) as Omit<LogEnds, "revision">;
    if (typeof v?.incarnation !== "string" || typeof v.log_end_offsets !== "object") return null;
    if (
      v.last_epochs !== undefined &&
      (typeof v.last_epochs !== "object" || v.last_epochs === null)
    )
      return null;
    return v;
  } catch {
    return null;
  }
}

/**
 * The log end (and last epoch) `ends` gives for `partition` ("topic/partition") if it was
 * published after the partition state `state` was written, else an undefined log end
 * (docs/cluster.md "Partition state": an ELR member is elected only by a log end published since
 * the partition went offline, which covers every committed record it holds; an older one may
 * predate records it fetched and fsynced). Each live ELR member publishes again on every offline
 * state naming it ("Controller", Log ends). A broker that publishes last epochs but has none for
 * this partition yet (its start-up publication, before its histories are open) has not
 * published: its next publication has both.
 */
function publishedSince(
  ends: LogEnds | undefined,
  state: EtcdKeyValue,
  partition: string,
): { logEndOffset: number | undefined; lastEpoch?: number } {
  const none = { logEndOffset: undefined };
  if (ends === undefined || ends.revision <= state.modRevision) return none;
  const end = ends.log_end_offsets[partition];
  if (typeof end !== "number" || !Number.isSafeInteger(end) || end < 0) return none;
  if (ends.last_epochs === undefined) return { logEndOffset: end };
  const epoch = ends.last_epochs[partition];
  if (typeof epoch !== "number" || !Number.isSafeInteger(epoch) || epoch < -1) return none;
  return { logEndOffset: end, lastEpoch: epoch };
}

/**
 * One broker's candidacy for, and term as, the controller. {@link start} campaigns; the instance
 * keeps campaigning whenever the key goes, until {@link close}.
 */
export class Controller {
  readonly #o: ControllerOptions;
  readonly #prefix: string;
  /** The controller epoch while this broker is the controller, else null. */
  #epoch: number | null = null;
  #current: ControllerRecord | null = null;
  #closed = false;
  /** Set by {@link retire}: no campaign from now on (a term under way goes on). */
  #retired = false;
  #watches: EtcdWatch[] = [];
  #brokerWatch: EtcdWatch | null = null;
  #timer: Timer | null = null;
  /** The serial queue every campaign and pass runs on (one at a time, in order). */
  #queue: Promise<void> = Promise.resolve();
  #passWanted = false;
  #passes = 0;
  /** Brokers this controller found unregistered, and since when (ms of the clock). */
  readonly #absentSince = new Map<number, number>();
  #graceTimer: Timer | null = null;
  readonly #listeners = new Set<() => void>();
  #rebalanceTimer: Timer | null = null;
  /** `topic/partition` → the preferred replica's incarnation, where a move applied at the last check. */
  #movableBefore = new Map<string, string>();
  #moves = 0;
  /** `topic/partition` → when a state older than its replicas' logs was last logged (ms). */
  readonly #restoredWarned = new Map<string, number>();
  /** `topic/partition` → when it was last logged offline (ms). */
  readonly #offlineWarned = new Map<string, number>();
  /** `topic/partition` → when a pass first found it offline (ms). */
  readonly #offlineSince = new Map<string, number>();
  /** Node id → the incarnation last logged as leaving (`cluster.broker_leaving`), once each. */
  readonly #leavingLogged = new Map<number, string>();

  constructor(options: ControllerOptions) {
    this.#o = options;
    this.#prefix = options.prefix;
  }

  /** The controller epoch (the `controller` key's create_revision) while this broker holds it. */
  get epoch(): number | null {
    return this.#epoch;
  }

  /** Whether this broker is the controller (as far as it knows). */
  get isController(): boolean {
    return this.#epoch !== null;
  }

  /** The controller the key names, as last seen (this broker or another), or null. */
  get current(): ControllerRecord | null {
    return this.#current;
  }

  /** Passes over the partitions completed while elected (for tests and status). */
  get passes(): number {
    return this.#passes;
  }

  /** Leaderships moved to the preferred replica while this broker was the controller. */
  get preferredMoves(): number {
    return this.#moves;
  }

  /** Calls `fn` after every change of {@link current} or {@link isController}, and after every pass. */
  onChange(fn: () => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #changed(): void {
    for (const fn of this.#listeners) fn();
  }

  /** Starts campaigning (resolves once the first campaign has run; the rest runs in the background). */
  async start(): Promise<void> {
    const key = controllerKey(this.#prefix);
    const { revision } = await this.#o.etcd.list(key);
    this.#watches.push(
      this.#o.etcd.watch(
        { key, startRevision: revision + 1 },
        {
          onEvents: (events) => {
            const last = events[events.length - 1];
            if (last.type === "delete") {
              this.#current = null;
              if (this.#epoch !== null) this.#deposed("the controller key was deleted");
              this.#enqueue(() => this.#campaign());
            } else this.#current = this.#parseRecord(last.kv);
            this.#changed();
          },
          onCompacted: () => this.#enqueue(() => this.#campaign()),
        },
      ),
    );
    await this.#enqueue(() => this.#campaign());
    this.#schedule();
    this.#scheduleRebalance();
  }

  #scheduleRebalance(): void {
    const period = this.#o.rebalanceMs ?? rebalanceMsDefault;
    if (this.#closed || period <= 0) return;
    this.#rebalanceTimer = this.#o.clock.setTimer(period, () => {
      if (this.#epoch !== null) void this.#enqueue(() => this.#rebalance(null));
      this.#scheduleRebalance();
    });
  }

  #parseRecord(kv: EtcdKeyValue): ControllerRecord | null {
    try {
      return JSON.parse(kv.value) as ControllerRecord;
    } catch {
      return null;
    }
  }

  #enqueue(task: () => Promise<void>): Promise<void> {
    const run = this.#queue.then(async () => {
      if (this.#closed) return;
      try {
        await task();
      } catch (err) {
        // A pass abandoned by close (the leave gave up waiting on etcd) fails as the client
        // closes: nothing to report, nothing to retry.
        if (this.#closed) return;
        this.#o.logger.log("warn", "cluster.controller_failed", {
          node_id: this.#o.nodeId,
          error: errorMessage(err),
        });
        this.#retrySoon();
      }
    });
    this.#queue = run;
    return run;
  }

  #retrySoon(): void {
    if (this.#closed) return;
    const base = this.#o.retryMs ?? 500;
    const wait = Math.round(base * (0.8 + (0.4 * this.#o.prng.nextU32()) / 2 ** 32));
    this.#o.clock.setTimer(wait, () => {
      this.#enqueue(() => (this.#epoch === null ? this.#campaign() : this.#pass()));
    });
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = this.#o.clock.setTimer(this.#o.resyncMs ?? 10_000, () => {
      if (this.#epoch !== null) this.#requestPass();
      // Whatever the key's watch said: a watch can go deaf (an etcd member paused and resumed
      // keeps answering probes but feeds the stream no more), and the key's deletion then
      // reaches nobody, leaving the cluster without a controller for good (attack15 F6). A
      // campaign is one compare-and-create: it wins if the key is gone, else reads who holds it.
      else this.#enqueue(() => this.#campaign());
      this.#schedule();
    });
  }

  /**
   * Campaigns no more (a broker leaving the cluster: docs/cluster.md "Leaving the cluster"). A
   * term under way goes on until {@link close}; a broker that is not the controller stays out of
   * the elections, so the controller key does not land on a broker that is about to go (which
   * would win, then resign at its close, and cost every group a coordinator move).
   */
  retire(): void {
    this.#retired = true;
  }

  /** Creates the key if absent; on success becomes the controller and starts its work. */
  async #campaign(): Promise<void> {
    if (this.#epoch !== null || this.#retired) return;
    const { etcd, nodeId } = this.#o;
    const key = controllerKey(this.#prefix);
    const lease = this.#o.lease();
    const record: ControllerRecord = { node_id: nodeId, incarnation: lease };
    const result = await etcd.txn({
      compare: [{ key, target: "create_revision", result: "equal", number: 0 }],
      success: [{ put: { key, value: JSON.stringify(record), lease } }, { get: { key } }],
      failure: [{ get: { key } }],
    });
    const kv = result.reads[0]?.[0];
    if (!result.succeeded) {
      this.#current = kv === undefined ? null : this.#parseRecord(kv);
      // Our own key from an earlier term on this same lease (a retry after an indeterminate write).
      if (kv !== undefined && kv.lease === lease && this.#current?.node_id === nodeId) {
        this.#elected(kv.createRevision);
      } else if (kv === undefined) {
        this.#retrySoon();
      }
      this.#changed();
      return;
    }
    this.#current = record;
    this.#elected(kv?.createRevision ?? result.revision);
    this.#changed();
  }

  #elected(epoch: number): void {
    this.#epoch = epoch;
    this.#o.logger.log("info", "cluster.controller_elected", {
      node_id: this.#o.nodeId,
      controller_epoch: epoch,
    });
    this.#watchForPasses();
  }

  #deposed(reason: string): void {
    this.#o.logger.log("warn", "cluster.controller_deposed", {
      node_id: this.#o.nodeId,
      controller_epoch: this.#epoch,
      reason,
    });
    this.#epoch = null;
    this.#movableBefore = new Map();
    const w = this.#brokerWatch;
    this.#brokerWatch = null;
    void w?.cancel();
    // Who holds the key now, or nobody: campaign (it reads the holder when it loses).
    this.#current = null;
    this.#enqueue(() => this.#campaign());
  }

  /** Watches the whole prefix for what a controller acts on (brokers, log ends, new partitions). */
  #watchForPasses(): void {
    const p = this.#prefix;
    void (async () => {
      const { revision } = await this.#o.etcd.list(controllerKey(p));
      if (this.#epoch === null || this.#closed) return;
      this.#brokerWatch = this.#o.etcd.watch(
        { key: `${p}/`, prefix: true, startRevision: revision + 1 },
        {
          onEvents: (events) => {
            if (events.some((e) => this.#relevant(e))) this.#requestPass();
            const request = events.find(
              (e) => e.type === "put" && e.kv.key === electPreferredKey(p),
            );
            if (request !== undefined) {
              const topic = parseElectPreferred(request.kv.value);
              // A request that names no topic correctly asked for one topic, not for every
              // partition at once (attack9 F2): ignored, and said so.
              if (topic === undefined)
                this.#o.logger.log("warn", "cluster.bad_elect_preferred", {
                  value: clip(request.kv.value, 200),
                  expected: '{"topic": "NAME"} or {"topic": null} for every topic',
                });
              else void this.#enqueue(() => this.#rebalance({ topic }));
            }
            const unclean = events.find((e) => e.type === "put" && e.kv.key === electUncleanKey(p));
            if (unclean !== undefined) {
              const request = parseElectUnclean(unclean.kv.value);
              if (request === undefined)
                this.#o.logger.log("warn", "cluster.bad_elect_unclean", {
                  value: clip(unclean.kv.value, 200),
                  expected:
                    '{"topic": "NAME", "partition": N} or {"topic": "NAME", "partition": null} for every partition',
                });
              else void this.#enqueue(() => this.#unclean(request, unclean.kv.modRevision));
            }
          },
          onCompacted: () => {
            if (this.#epoch !== null) this.#watchForPasses();
          },
        },
      );
      // After the watch exists: the pass reads at or after its start, so nothing falls between.
      this.#requestPass();
    })().catch(() => this.#retrySoon());
  }

  #relevant(e: EtcdEvent): boolean {
    const k = e.kv.key;
    const p = this.#prefix;
    if (
      k.startsWith(`${p}/brokers/`) ||
      k.startsWith(`${p}/log_ends/`) ||
      k.startsWith(`${p}/departed/`) ||
      k.startsWith(`${p}/leaving/`)
    )
      return true;
    if (e.type !== "put" || parsePartitionKey(p, k) === null) return false;
    if (e.kv.version === 1) return true;
    // A leader that gave its leadership up wrote the state without one: elect another now rather
    // than at the next resync. (The controller's own offline writes cost one pass that changes nothing.)
    try {
      return parsePartitionState(k, e.kv.value).leader === noLeader;
    } catch {
      return false;
    }
  }

  /** Asks for a pass over every partition; passes asked for while one waits are one pass. */
  #requestPass(): void {
    if (this.#passWanted) return;
    this.#passWanted = true;
    void this.#enqueue(async () => {
      this.#passWanted = false;
      await this.#pass();
    });
  }

  /** One pass: the controller's update of every partition, then the incarnations it acted on. */
  async #pass(): Promise<void> {
    const epoch = this.#epoch;
    if (epoch === null) return;
    const { etcd, logger } = this.#o;
    const p = this.#prefix;
    const [brokers, logEnds, seen, partitions, departedKvs, leavingKvs] = await Promise.all([
      etcd.list(`${p}/brokers/`),
      etcd.list(`${p}/log_ends/`),
      etcd.get(incarnationsKey(p)),
      etcd.list(`${p}/partitions/`),
      etcd.list(`${p}/departed/`),
      etcd.list(`${p}/leaving/`),
    ]);
    const live = new Map<number, BrokerRegistration>();
    const registeredAt = new Map<number, number>();
    for (const kv of brokers.kvs) {
      try {
        const r = parseRegistration(kv);
        live.set(r.node_id, r);
        registeredAt.set(r.node_id, incarnationRevision(kv, r));
      } catch (err) {
        logger.log("warn", "cluster.bad_registration", { key: kv.key, error: errorMessage(err) });
      }
    }
    let recorded: Record<string, string> = {};
    try {
      if (seen !== null) recorded = JSON.parse(seen.value) as Record<string, string>;
    } catch {}
    const restarted = new Set<number>();
    for (const [id, r] of live) {
      const before = recorded[String(id)];
      if (before !== undefined && before !== r.incarnation) restarted.add(id);
      this.#absentSince.delete(id);
    }
    // Known brokers whose registration is missing: lapsed within the grace, else gone.
    const departed = new Map<number, string>();
    for (const kv of departedKvs.kvs)
      departed.set(Number(kv.key.slice(`${p}/departed/`.length)), kv.value);
    const lapsed = new Map<number, string>();
    const now = this.#o.clock.nowMs();
    const graceMs = this.#o.lapseGraceMs ?? lapseGraceMsDefault;
    let nextExpiry = Number.POSITIVE_INFINITY;
    for (const [key, incarnation] of Object.entries(recorded)) {
      const id = Number(key);
      if (live.has(id) || departed.get(id) === incarnation) {
        if (!live.has(id)) this.#absentSince.delete(id);
        continue;
      }
      const since = this.#absentSince.get(id) ?? now;
      this.#absentSince.set(id, since);
      if (now - since < graceMs) {
        lapsed.set(id, incarnation);
        nextExpiry = Math.min(nextExpiry, since + graceMs);
      }
    }
    for (const id of this.#absentSince.keys())
      if (!live.has(id) && !lapsed.has(id) && recorded[String(id)] === undefined)
        this.#absentSince.delete(id);
    if (lapsed.size > 0) {
      // A broker gone without a leave (crash, kill, cut off) is the line an operator greps for:
      // warn when a node newly lapses; the passes after it within the grace repeat it at debug.
      const fresh = [...lapsed.keys()].some((id) => this.#absentSince.get(id) === now);
      logger.log(fresh ? "warn" : "debug", "cluster.registration_lapsed", {
        node_ids: [...lapsed.keys()],
        grace_ms: graceMs,
        reason:
          "their membership lease ended without a leave (a crash, a kill, a pause or a network cut)",
        action:
          "unless they register again within grace_ms, they leave the ISRs and their leaderships move",
      });
      this.#graceTimer?.cancel();
      this.#graceTimer = this.#o.clock.setTimer(Math.max(1, nextExpiry - now), () => {
        this.#graceTimer = null;
        if (this.#epoch !== null) this.#requestPass();
      });
    }
    const leaving = this.#leaving(leavingKvs.kvs, live);
    const ends = new Map<number, LogEnds>();
    for (const kv of logEnds.kvs) {
      const v = parseLogEnds(kv.value);
      const id = Number(kv.key.slice(`${p}/log_ends/`.length));
      if (v !== null && live.get(id)?.incarnation === v.incarnation)
        ends.set(id, { ...v, revision: kv.modRevision });
    }
    for (const kv of partitions.kvs) {
      if (this.#epoch !== epoch) return;
      const where = parsePartitionKey(p, kv.key);
      if (where === null) continue;
      await this.#updatePartition(
        epoch,
        kv,
        where,
        live,
        lapsed,
        restarted,
        ends,
        registeredAt,
        leaving,
      );
    }
    // Everything above is applied: from now on these incarnations are the known ones (a lapsed
    // broker's too: it may come back with it, or another, which is then a restart).
    const next: Record<string, string> = {};
    for (const [id, incarnation] of lapsed) next[String(id)] = incarnation;
    for (const [id, r] of live) next[String(id)] = r.incarnation;
    const written = await etcd.txn({
      compare: [
        { key: controllerKey(p), target: "create_revision", result: "equal", number: epoch },
      ],
      success: [{ put: { key: incarnationsKey(p), value: JSON.stringify(next) } }],
    });
    if (!written.succeeded) {
      if (this.#epoch === epoch) this.#deposed("the controller key changed under it");
      return;
    }
    this.#passes++;
    this.#changed();
  }

  /**
   * The registered brokers that have begun to leave: a `leaving/<id>` naming the incarnation
   * registered now (the key is on that incarnation's lease; the comparison also keeps an older
   * incarnation's marker, not yet expired, from counting). Each is logged once per incarnation
   * (`cluster.broker_leaving`, info).
   */
  #leaving(
    kvs: readonly EtcdKeyValue[],
    live: ReadonlyMap<number, BrokerRegistration>,
  ): Set<number> {
    const out = new Set<number>();
    for (const kv of kvs) {
      const id = Number(kv.key.slice(`${this.#prefix}/leaving/`.length));
      const incarnation = live.get(id)?.incarnation;
      if (incarnation === undefined || kv.key !== leavingKey(this.#prefix, id)) continue;
      if (kv.value !== incarnation) continue;
      out.add(id);
      if (this.#leavingLogged.get(id) === incarnation) continue;
      this.#leavingLogged.set(id, incarnation);
      this.#o.logger.log("info", "cluster.broker_leaving", {
        node_id: id,
        incarnation,
        controller_epoch: this.#epoch,
        effect:
          "it keeps its places until it departs but is elected leader of no partition, preferred leadership included",
      });
    }
    return out;
  }

  async #updatePartition(
    epoch: number,
    first: EtcdKeyValue,
    where: { topic: string; partition: number },
    live: Map<number, BrokerRegistration>,
    lapsed: Map<number, string>,
    restarted: Set<number>,
    ends: Map<number, LogEnds>,
    registeredAt: Map<number, number>,
    leaving: ReadonlySet<number>,
  ): Promise<void> {
    const { etcd, logger } = this.#o;
    const p = this.#prefix;
    let kv: EtcdKeyValue | null = first;
    for (let attempt = 0; attempt < 5 && kv !== null; attempt++) {
      let state: PartitionState;
      try {
        state = parsePartitionState(kv.key, kv.value);
      } catch (err) {
        logger.log("error", "cluster.bad_partition_state", {
          key: kv.key,
          error: errorMessage(err),
        });
        return;
      }
      // A restarted replica is "gone" first (it leaves the ISR), then alive again: it can lead
      // only from the ELR, with a published log end reaching committed_offset.
      // A leader or ISR member registered after this state was written is another incarnation
      // than the one the state describes, whatever `incarnations` recorded: the replica manager
      // refuses to lead by such a state (#27c), so the controller must treat it as gone too, or
      // the partition would stay without a working leader; and a removal the update put off
      // while a lapsed ISR member's fate was open (controllerUpdate) is still due after this
      // pass has recorded the new incarnation.
      const read = kv;
      const stale = (id: number) =>
        (state.leader === id || state.isr.includes(id)) &&
        read.modRevision < (registeredAt.get(id) ?? 0);
      const view = (id: number): ReplicaView => ({
        alive: live.has(id),
        lapsed: lapsed.has(id),
        leaving: leaving.has(id),
        dataDirId: live.get(id)?.data_dir_id,
        ...publishedSince(ends.get(id), read, `${where.topic}/${where.partition}`),
      });
      // A state older than the replicas' logs (etcd restored from an older snapshot) is never
      // updated by the usual rules: its ISR and ELR are old news (docs/cluster.md "Partition
      // state older than the replicas' logs").
      const newest = newestEpochAbove(state, view);
      if (newest !== null) this.#warnRestored(where, state, newest, view);
      const final =
        newest !== null
          ? restoredStateUpdate(state, view)
          : controllerUpdate(state, {
              gone: state.replicas.filter(
                (id) => (!live.has(id) && !lapsed.has(id)) || restarted.has(id) || stale(id),
              ),
              view,
            });
      this.#warnOffline(
        where,
        final ?? state,
        (id) => live.has(id),
        (id) => live.get(id)?.data_dir_id,
      );
      if (final === null) return;
      const result = await etcd.txn({
        compare: [
          { key: kv.key, target: "mod_revision", result: "equal", number: kv.modRevision },
          { key: controllerKey(p), target: "create_revision", result: "equal", number: epoch },
        ],
        success: [{ put: { key: kv.key, value: formatPartitionState(final) } }],
        failure: [{ get: { key: controllerKey(p) } }, { get: { key: kv.key } }],
      });
      if (result.succeeded) {
        logger.log("info", "cluster.partition_changed", {
          topic: where.topic,
          partition: where.partition,
          leader: final.leader,
          leader_epoch: final.leader_epoch,
          isr: final.isr,
          elr: final.elr,
          controller_epoch: epoch,
        });
        return;
      }
      const controllerNow = result.reads[0]?.[0];
      if (controllerNow === undefined || controllerNow.createRevision !== epoch) {
        this.#deposed("a newer controller holds the key");
        throw new Error(
          `Controller epoch ${epoch} is over: the update of ${where.topic}/${where.partition} was refused`,
        );
      }
      kv = result.reads[1]?.[0] ?? null;
    }
  }

  /**
   * An operator's unclean leader election ({@link uncleanElection}) of `request.topic`'s offline
   * partitions (or the one named), each written by compare-and-set like a pass's, and logged:
   * `cluster.unclean_leader_elected` (error: what may be lost) or
   * `cluster.unclean_election_refused` (warn: why).
   */
  async #unclean(
    request: { topic: string; partition: number | null; acceptDataLoss: boolean },
    requestRevision: number,
  ): Promise<void> {
    const epoch = this.#epoch;
    if (epoch === null) return;
    const { etcd, logger } = this.#o;
    const p = this.#prefix;
    const [brokers, logEnds, partitions] = await Promise.all([
      etcd.list(`${p}/brokers/`),
      etcd.list(`${p}/log_ends/`),
      etcd.list(`${p}/partitions/${request.topic}/`),
    ]);
    const live = new Map<number, BrokerRegistration>();
    for (const kv of brokers.kvs) {
      try {
        const r = parseRegistration(kv);
        live.set(r.node_id, r);
      } catch {}
    }
    const ends = new Map<number, LogEnds>();
    for (const kv of logEnds.kvs) {
      const v = parseLogEnds(kv.value);
      const id = Number(kv.key.slice(`${p}/log_ends/`.length));
      if (v !== null && live.get(id)?.incarnation === v.incarnation)
        ends.set(id, { ...v, revision: kv.modRevision });
    }
    let matched = 0;
    const answers: Record<string, unknown>[] = [];
    const refuse = (partition: number, reason: string) => {
      answers.push({ partition, refused: reason });
      logger.log("warn", "cluster.unclean_election_refused", {
        topic: request.topic,
        partition,
        reason,
      });
    };
    for (const kv of partitions.kvs) {
      const where = parsePartitionKey(p, kv.key);
      if (where === null || where.topic !== request.topic) continue;
      if (request.partition !== null && where.partition !== request.partition) continue;
      matched++;
      const name = `${where.topic}/${where.partition}`;
      let state: PartitionState;
      try {
        state = parsePartitionState(kv.key, kv.value);
      } catch (err) {
        logger.log("error", "cluster.bad_partition_state", {
          key: kv.key,
          error: errorMessage(err),
        });
        continue;
      }
      // Only an offline partition's is asked for: one whose leader is named stays as it is.
      if (request.partition === null && state.leader !== noLeader) continue;
      const outcome = uncleanElection(
        state,
        (id) => ({
          alive: live.has(id) && !this.#absentSince.has(id),
          dataDirId: live.get(id)?.data_dir_id,
          ...publishedSince(ends.get(id), kv, name),
        }),
        { acceptDataLoss: request.acceptDataLoss },
      );
      if ("refused" in outcome) {
        refuse(where.partition, outcome.refused);
        continue;
      }
      const result = await etcd.txn({
        compare: [
          { key: kv.key, target: "mod_revision", result: "equal", number: kv.modRevision },
          { key: controllerKey(p), target: "create_revision", result: "equal", number: epoch },
        ],
        success: [{ put: { key: kv.key, value: formatPartitionState(outcome.state) } }],
      });
      if (!result.succeeded) {
        refuse(
          where.partition,
          "its state changed meanwhile (or the controller changed): ask again",
        );
        continue;
      }
      answers.push({
        partition: where.partition,
        leader: outcome.state.leader,
        leader_epoch: outcome.state.leader_epoch,
        lost_below_committed: outcome.missingCommitted,
        missing_replicas: outcome.missing,
        ...(outcome.lostDirectories.length === 0
          ? {}
          : { lost_directories: outcome.lostDirectories }),
      });
      logger.log("error", "cluster.unclean_leader_elected", {
        topic: where.topic,
        partition: where.partition,
        leader: outcome.state.leader,
        leader_epoch: outcome.state.leader_epoch,
        log_end_offset: outcome.logEndOffset,
        last_epoch: outcome.lastEpoch ?? null,
        committed_offset: state.committed_offset,
        missing_replicas: outcome.missing,
        forgotten: state.forgotten ?? [],
        accept_data_loss: request.acceptDataLoss,
        lost: outcome.lost,
        controller_epoch: epoch,
      });
    }
    if (matched === 0 && request.partition !== null) refuse(request.partition, "no such partition");
    await etcd.txn({
      compare: [
        { key: controllerKey(p), target: "create_revision", result: "equal", number: epoch },
      ],
      success: [
        {
          put: {
            key: electUncleanResultKey(p),
            value: JSON.stringify({ request_revision: requestRevision, partitions: answers }),
          },
        },
      ],
    });
    this.#changed();
  }

  /**
   * Logs (warn, at most once a minute per partition) an offline partition: what it waits for and
   * what would bring it back ({@link offlineReason}; attack15b F3).
   */
  #warnOffline(
    where: { topic: string; partition: number },
    state: PartitionState,
    live: (id: number) => boolean,
    dataDirOf: (id: number) => string | undefined,
  ): void {
    const name = `${where.topic}/${where.partition}`;
    const reason = offlineReason(state, live, where, dataDirOf);
    if (reason === null) {
      this.#offlineWarned.delete(name);
      this.#offlineSince.delete(name);
      return;
    }
    // A partition offline for a moment (between a failover's two passes) is no news.
    const now = this.#o.clock.nowMs();
    const since = this.#offlineSince.get(name) ?? now;
    this.#offlineSince.set(name, since);
    if (now - since < offlineWarnAfterMs) return;
    const last = this.#offlineWarned.get(name);
    if (last !== undefined && now - last < 60_000) return;
    this.#offlineWarned.set(name, now);
    this.#o.logger.log("warn", "cluster.partition_offline", {
      topic: where.topic,
      partition: where.partition,
      leader_epoch: state.leader_epoch,
      isr: state.isr,
      elr: state.elr,
      reason,
    });
  }

  /**
   * Logs (warn, at most once a minute per partition) a partition state older than its replicas'
   * logs, and what the election of {@link restoredStateUpdate} waits for.
   */
  #warnRestored(
    where: { topic: string; partition: number },
    state: PartitionState,
    newest: number,
    view: (id: number) => ReplicaView,
  ): void {
    const name = `${where.topic}/${where.partition}`;
    const now = this.#o.clock.nowMs();
    const last = this.#restoredWarned.get(name);
    if (last !== undefined && now - last < 60_000) return;
    this.#restoredWarned.set(name, now);
    const waiting = state.replicas.filter((id) => {
      const v = view(id);
      return !v.alive || v.lapsed === true || v.lastEpoch === undefined;
    });
    this.#o.logger.log("warn", "cluster.partition_state_restored", {
      topic: where.topic,
      partition: where.partition,
      leader_epoch: state.leader_epoch,
      newest_log_epoch: newest,
      waiting_for: waiting,
      action:
        "partition state older than the replicas' logs: etcd restored? It is elected again, above every epoch the logs hold, once every replica has published its log end" +
        (waiting.length === 0
          ? ""
          : ` (missing: node ${waiting.join(", ")}: start it; if it will never come back, es-broker cluster elect --unclean --topic ${where.topic} --partition ${where.partition})`),
    });
  }

  /**
   * One preferred leader check (the module comment): `forced` (an `elect_preferred` request,
   * optionally for one topic) moves every partition it may at once; a periodic check (null)
   * moves at most `rebalanceMaxMoves`, each only if it applied at the previous check too.
   */
  async #rebalance(forced: { topic: string | null } | null): Promise<void> {
    const epoch = this.#epoch;
    if (epoch === null) return;
    const { etcd, logger } = this.#o;
    const p = this.#prefix;
    const [brokers, partitions, leavingKvs] = await Promise.all([
      etcd.list(`${p}/brokers/`),
      etcd.list(`${p}/partitions/`),
      etcd.list(`${p}/leaving/`),
    ]);
    const live = new Map<number, { incarnation: string; registeredAt: number }>();
    const registrations = new Map<number, BrokerRegistration>();
    for (const kv of brokers.kvs) {
      try {
        const r = parseRegistration(kv);
        live.set(r.node_id, {
          incarnation: r.incarnation,
          registeredAt: incarnationRevision(kv, r),
        });
        registrations.set(r.node_id, r);
      } catch {}
    }
    const leaving = this.#leaving(leavingKvs.kvs, registrations);
    const movable = new Map<string, string>();
    const limit = forced === null ? (this.#o.rebalanceMaxMoves ?? 4) : Number.POSITIVE_INFINITY;
    let moved = 0;
    for (const kv of partitions.kvs) {
      if (this.#epoch !== epoch) return;
      const where = parsePartitionKey(p, kv.key);
      if (
        where === null ||
        (forced !== null && forced.topic !== null && where.topic !== forced.topic)
      )
        continue;
      let state: PartitionState;
      try {
        state = parsePartitionState(kv.key, kv.value);
      } catch {
        continue; // the pass logs it
      }
      const preferred = live.get(state.replicas[0]);
      // An ISR written before the preferred replica's incarnation registered describes an
      // earlier one (it restarted; the pass takes it out of the ISR): never a move by it.
      if (preferred === undefined || kv.modRevision < preferred.registeredAt) continue;
      const next = preferredLeaderMove(state, (id) => ({
        alive: live.has(id) && !this.#absentSince.has(id),
        leaving: leaving.has(id),
        logEndOffset: undefined,
      }));
      if (next === null) continue;
      const name = `${where.topic}/${where.partition}`;
      movable.set(name, preferred.incarnation);
      if (forced === null && this.#movableBefore.get(name) !== preferred.incarnation) continue;
      if (moved >= limit) continue;
      const result = await etcd.txn({
        compare: [
          { key: kv.key, target: "mod_revision", result: "equal", number: kv.modRevision },
          { key: controllerKey(p), target: "create_revision", result: "equal", number: epoch },
        ],
        success: [{ put: { key: kv.key, value: formatPartitionState(next) } }],
        failure: [{ get: { key: controllerKey(p) } }],
      });
      if (!result.succeeded) {
        const controllerNow = result.reads[0]?.[0];
        if (controllerNow === undefined || controllerNow.createRevision !== epoch) {
          this.#deposed("a newer controller holds the key");
          return;
        }
        continue; // the state changed meanwhile (an ISR change): the next check sees it
      }
      moved++;
      this.#moves++;
      movable.delete(name);
      logger.log("info", "cluster.preferred_leader_elected", {
        topic: where.topic,
        partition: where.partition,
        leader: next.leader,
        previous_leader: state.leader,
        leader_epoch: next.leader_epoch,
        controller_epoch: epoch,
        requested: forced !== null,
      });
    }
    if (forced === null) this.#movableBefore = movable;
    if (moved > 0) this.#changed();
  }

  /** Stops campaigning and watching. The key (on the membership lease) goes with the lease. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#timer?.cancel();
    this.#graceTimer?.cancel();
    this.#rebalanceTimer?.cancel();
    const watches = [...this.#watches, ...(this.#brokerWatch ? [this.#brokerWatch] : [])];
    this.#watches = [];
    this.#brokerWatch = null;
    await Promise.all(watches.map((w) => w.cancel()));
    await this.#queue.catch(() => {});
    this.#epoch = null;
    this.#listeners.clear();
  }
}

/**
 * The topic an `elect_preferred` value asks for: a name, null for every topic, or undefined when
 * the value is not `{"topic": string | null}` (docs/cluster.md "Preferred leader election").
 */
export function parseElectPreferred(value: string): string | null | undefined {
  try {
    const v = JSON.parse(value) as unknown;
    if (typeof v !== "object" || v === null || Array.isArray(v) || !("topic" in v))
      return undefined;
    const topic = (v as { topic: unknown }).topic;
    return typeof topic === "string" || topic === null ? topic : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The partitions an `elect_unclean` value asks for: `{topic, partition}` (partition null: every
 * offline partition of the topic), and whether it accepts losing what a forgotten or superseded
 * data directory holds (`accept_data_loss`, default false), or undefined when the value is not
 * `{"topic": string, "partition": number | null, "accept_data_loss"?: boolean}`
 * (docs/cluster.md "Unclean leader election").
 */
export function parseElectUnclean(
  value: string,
): { topic: string; partition: number | null; acceptDataLoss: boolean } | undefined {
  try {
    const v = JSON.parse(value) as {
      topic?: unknown;
      partition?: unknown;
      accept_data_loss?: unknown;
    } | null;
    if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
    if (typeof v.topic !== "string" || v.topic === "") return undefined;
    const partition = v.partition ?? null;
    if (partition !== null && !(Number.isSafeInteger(partition) && (partition as number) >= 0))
      return undefined;
    const accept = v.accept_data_loss ?? false;
    if (typeof accept !== "boolean") return undefined;
    return { topic: v.topic, partition: partition as number | null, acceptDataLoss: accept };
  } catch {
    return undefined;
  }
}
