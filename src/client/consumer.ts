/**
 * A consumer-group member over the TCP client: it joins, heartbeats in the background, fetches
 * from the partitions the group assigns it, commits what it has handed out, and rejoins when the
 * group rebalances (the broker's side is `src/broker/groups.ts`).
 *
 * - Positions: each owned partition starts at the group's committed offset, or, if none, at the
 *   log start (`startFrom: "earliest"`, default) or the high watermark (`"latest"`) — and that
 *   starting position is committed at once, so a member that takes the partition over (after this
 *   one dies before its first commit) continues from it instead of from its own, later, high
 *   watermark. {@link poll} hands out records and advances positions; {@link commit} commits the
 *   positions of the partitions the member owns. Records handed out but not committed before a
 *   rebalance or a crash are read again by the next owner: delivery is at least once, and nothing
 *   is skipped. A partition kept over a rejoin keeps its position only if the group's commit is
 *   still this member's last one; otherwise another member had it meanwhile (this one missed a
 *   generation) and it starts again from the group's commit.
 * - Heartbeats every `heartbeatIntervalMs` (default a third of the session timeout). A heartbeat
 *   that reports a new generation makes the next {@link poll} or {@link commit} rejoin first (same
 *   member id); `unknown_member` (the session expired) makes it join again as a new member, and
 *   so does a join refused as `stale_generation` (the group moved to another coordinator).
 * - A commit refused by a rebalance (`stale_generation`, `not_partition_owner`, `unknown_member`,
 *   or the coordinator lost) is not dropped: {@link commit} rejoins at once and commits again the
 *   offsets of the partitions the member still owns without a break (they are its to commit in
 *   the new generation); only those of partitions it lost stay uncommitted, for their next owner
 *   to read again.
 * - Fetches: one per owned partition at a time, long-polling; {@link poll} returns as soon as any
 *   has records (or after `waitMs`), and fetches still running carry over to the next poll.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { TopicPartition } from "../broker/types.ts";
import { Errors } from "../broker/errors.ts";
import { topicPartitionKey } from "../lib/topic-partition.ts";
import type { FetchResponse, TcpClient } from "./client.ts";
import { ClientError } from "./errors.ts";
import { isRoutingError, type LeaderRouter } from "./cluster.ts";
import type { FetchedRecord } from "./records.ts";

/** Options of {@link GroupConsumer.join}. */
export interface GroupConsumerOptions {
  /**
   * A connected client; once the broker has keys, one made with an API key whose role is consumer
   * (or admin) and whose patterns match the group and topics: `TcpClient.connect({ host, port, apiKey, tls })`.
   */
  client: TcpClient;
  /**
   * Cluster mode: fetch each partition from its leader through this router (a
   * {@link ClusterClient}); `client` then serves the group's requests (join, heartbeat, commit),
   * and must be the same broker for every member (`ClusterClient.coordinator()`). A fetch refused
   * as `not_leader` (or a lost leader) reads the metadata again and fetches from the new leader.
   * When the connection to the coordinator is lost, the member joins again as a new member on
   * the router's coordinator then (its committed offsets are there: docs/cluster.md).
   */
  router?: LeaderRouter;
  group: string;
  topics: string[];
  /** Session timeout asked of the broker, in ms (default 10 000). */
  sessionTimeoutMs?: number;
  /** Heartbeat period, in ms (default a third of the session timeout). */
  heartbeatIntervalMs?: number;
  /** Where a partition without a committed offset starts (default "earliest"). */
  startFrom?: "earliest" | "latest";
  /** Records per fetch (default 1000). */
  maxRecords?: number;
  /** Called after every (re)join with the member's partitions. */
  onAssigned?: (assignments: TopicPartition[], generation: number) => void;
  /**
   * Join as this member (the id of an earlier {@link GroupConsumer} of this process, e.g. before
   * its connection was lost): the group keeps its partitions and needs no rebalance. A member the
   * group no longer knows (`unknown_member`) joins as a new one.
   */
  memberId?: string;
}

/** Records of one partition handed out by {@link GroupConsumer.poll}. */
export interface ConsumedBatch {
  topic: string;
  partition: number;
  records: FetchedRecord[];
}

interface Inflight {
  offset: number;
  done: boolean;
  result: FetchResponse | null;
  error: unknown;
  promise: Promise<void>;
}

function key(tp: TopicPartition): string {
  return topicPartitionKey(tp.topic, tp.partition);
}

/** See the module comment. Create with {@link GroupConsumer.join}. */
export class GroupConsumer {
  readonly group: string;
  readonly topics: string[];
  #client: TcpClient;
  #router: LeaderRouter | undefined;
  #sessionTimeoutMs: number;
  #heartbeatIntervalMs: number;
  #startFrom: "earliest" | "latest";
  #maxRecords: number;
  #onAssigned: GroupConsumerOptions["onAssigned"];
  #memberId = "";
  #generation = -1;
  #assignments: TopicPartition[] = [];
  /** Next offset to hand out, per owned partition. */
  #positions = new Map<string, number>();
  /** Last committed (by this member), per owned partition. */
  #committed = new Map<string, number>();
  #inflight = new Map<string, Inflight>();
  /** Per owned partition, when it was (last) assigned: an ownership without a break keeps it. */
  #tenure = new Map<string, number>();
  #tenures = 0;
  #rejoin: "none" | "same" | "fresh" = "none";
  #heartbeat: ReturnType<typeof setInterval> | null = null;
  #closed = false;

  private constructor(options: GroupConsumerOptions) {
    this.#client = options.client;
    this.#router = options.router;
    this.group = options.group;
    this.topics = [...options.topics];
    this.#sessionTimeoutMs = options.sessionTimeoutMs ?? 10_000;
    this.#heartbeatIntervalMs =
      options.heartbeatIntervalMs ?? Math.max(10, Math.floor(this.#sessionTimeoutMs / 3));
    this.#startFrom = options.startFrom ?? "earliest";
    this.#maxRecords = options.maxRecords ?? 1000;
    this.#onAssigned = options.onAssigned;
  }

  /** Joins the group and starts heartbeating. @throws ClientError from the join (e.g. `topic_not_found`). */
  static async join(options: GroupConsumerOptions): Promise<GroupConsumer> {
    const consumer = new GroupConsumer(options);
    if (options.memberId !== undefined && options.memberId !== "") {
      consumer.#memberId = options.memberId;
      try {
        await consumer.#join(true);
      } catch (err) {
        if (!(err instanceof ClientError && err.code === Errors.unknownMember.code)) throw err;
        await consumer.#join(false);
      }
    } else await consumer.#join(false);
    consumer.#heartbeat = setInterval(() => void consumer.#beat(), consumer.#heartbeatIntervalMs);
    consumer.#heartbeat.unref?.();
    return consumer;
  }

  /** This member's id. */
  get memberId(): string {
    return this.#memberId;
  }

  /** The generation this member's assignment belongs to. */
  get generation(): number {
    return this.#generation;
  }

  /** The partitions this member owns now. */
  get assignments(): TopicPartition[] {
    return [...this.#assignments];
  }

  /** The next offset this member will hand out for a partition it owns, or undefined. */
  position(tp: TopicPartition): number | undefined {
    return this.#positions.get(key(tp));
  }

  async #join(asSameMember: boolean): Promise<void> {
    const result = await this.#client.joinGroup({
      group: this.group,
      topics: this.topics,
      sessionTimeoutMs: this.#sessionTimeoutMs,
      ...(asSameMember && this.#memberId !== "" ? { memberId: this.#memberId } : {}),
    });
    this.#rejoin = "none";
    this.#memberId = result.memberId;
    this.#generation = result.generation;
    await this.#assign(result.assignments);
  }

  /**
   * Takes a new assignment: keeps the positions of partitions still owned without a break (the
   * group's commit is this member's last), starts the others from the committed offsets, and commits the starting position of each new one the group has never
   * committed (module comment). If that commit finds the group rebalanced, the next poll rejoins.
   */
  async #assign(assignments: TopicPartition[]): Promise<void> {
    const owned = new Set(assignments.map(key));
    for (const k of [...this.#positions.keys()]) {
      if (!owned.has(k)) {
        this.#positions.delete(k);
        this.#committed.delete(k);
        this.#inflight.delete(k);
        this.#tenure.delete(k);
      }
    }
    const neverCommitted: { topic: string; partition: number; offset: number }[] = [];
    if (assignments.length > 0) {
      const description = await this.#client.describeGroup(this.group);
      const committed = new Map(
        description.offsets
          .filter((o) => o.committed !== null)
          .map((o) => [key(o), o.committed as number]),
      );
      // A partition kept whose commit is not this member's last one was another member's
      // meanwhile (this one missed a generation): its position is stale, start it afresh.
      for (const tp of assignments) {
        const k = key(tp);
        if (this.#positions.has(k) && committed.get(k) !== this.#committed.get(k)) {
          this.#positions.delete(k);
          this.#committed.delete(k);
          this.#inflight.delete(k);
          this.#tenure.delete(k);
        }
      }
      for (const tp of assignments.filter((x) => !this.#positions.has(key(x)))) {
        let start = committed.get(key(tp));
        if (start === undefined) {
          const bounds = await this.#bounds(tp);
          start = this.#startFrom === "earliest" ? bounds.logStartOffset : bounds.highWatermark;
          neverCommitted.push({ ...tp, offset: start });
        } else {
          this.#committed.set(key(tp), start);
        }
        this.#positions.set(key(tp), start);
        this.#tenure.set(key(tp), ++this.#tenures);
      }
    }
    this.#assignments = [...assignments];
    if (neverCommitted.length > 0) await this.#commit(neverCommitted, 0);
    this.#onAssigned?.(this.assignments, this.#generation);
  }

  /**
   * A partition's bounds from its leader. With a router, a routing error (leadership moved, the
   * leader went) reads the metadata again and asks the new leader, with backoff, a few times.
   */
  async #bounds(tp: TopicPartition) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await (await this.#dataClient(tp)).listOffsets(tp);
      } catch (err) {
        if (this.#router === undefined || !isRoutingError(err) || attempt >= 10) throw err;
        await this.#router.refresh().catch(() => {});
        await sleep(Math.min(2000, 50 * 2 ** attempt));
      }
    }
  }

  /** Where a partition's records are read: its leader (with a router), else `client`. */
  #dataClient(tp: TopicPartition): Promise<TcpClient> {
    return this.#router === undefined
      ? Promise.resolve(this.#client)
      : this.#router.leader(tp.topic, tp.partition);
  }

  async #beat(): Promise<void> {
    if (this.#closed || this.#client.closed || this.#rejoin !== "none") return;
    try {
      const hb = await this.#client.heartbeat({
        group: this.group,
        memberId: this.#memberId,
        generation: this.#generation,
      });
      if (hb.rejoin && this.#rejoin === "none") this.#rejoin = "same";
    } catch (err) {
      if (
        err instanceof ClientError &&
        (err.code === Errors.unknownMember.code || err.code === Errors.groupNotFound.code)
      )
        this.#rejoin = "fresh";
      // Other failures (a lost connection) surface at the next poll or commit.
    }
  }

  /** Whether the group's requests must move to another coordinator (cluster mode, with a router). */
  #coordinatorLost(err: unknown): boolean {
    return this.#router?.coordinator !== undefined && !this.#closed && isRoutingError(err);
  }

  /** Connects to the router's coordinator now; the next poll or commit joins there afresh. */
  async #moveCoordinator(): Promise<void> {
    const router = this.#router!;
    await router.refresh().catch(() => {});
    this.#client = await router.coordinator!();
    this.#rejoin = "fresh";
  }

  /** Rejoins first if a rebalance or an expired session asked for it. */
  async #ensureMember(): Promise<void> {
    if (this.#closed)
      throw ClientError.connectionClosed(
        `Cannot consume from group "${this.group}": the consumer is closed`,
      );
    if (this.#router?.coordinator !== undefined && this.#client.closed)
      await this.#moveCoordinator();
    if (this.#rejoin === "none") return;
    const fresh = this.#rejoin === "fresh";
    try {
      await this.#join(!fresh);
    } catch (err) {
      if (
        err instanceof ClientError &&
        (err.code === Errors.unknownMember.code || err.code === Errors.staleGeneration.code)
      ) {
        // The member or its generation is gone here (a coordinator that lost the group answers
        // stale_generation): join as a new member, on the coordinator now (with a router).
        if (this.#router?.coordinator !== undefined) await this.#moveCoordinator();
        await this.#join(false);
      } else if (this.#coordinatorLost(err)) {
        await this.#moveCoordinator();
        await this.#join(false);
      } else throw err;
    }
  }

  /**
   * Hands out records from the member's partitions: waits up to `waitMs` (default 1000) for any,
   * and returns what has arrived (possibly nothing). Positions advance past what is returned.
   * @throws ClientError if a fetch fails for another reason than a rebalance.
   */
  async poll(options: { waitMs?: number } = {}): Promise<ConsumedBatch[]> {
    await this.#ensureMember();
    const waitMs = options.waitMs ?? 1000;
    for (const tp of this.#assignments) {
      const k = key(tp);
      if (this.#inflight.has(k)) continue;
      const offset = this.#positions.get(k)!;
      const entry: Inflight = {
        offset,
        done: false,
        result: null,
        error: null,
        promise: Promise.resolve(),
      };
      entry.promise = this.#dataClient(tp)
        .then((c) =>
          c.fetch({
            topic: tp.topic,
            partition: tp.partition,
            offset,
            maxRecords: this.#maxRecords,
            waitMs,
          }),
        )
        .then(
          (r) => void (entry.result = r),
          (e: unknown) => void (entry.error = e),
        )
        .finally(() => (entry.done = true));
      this.#inflight.set(k, entry);
    }
    const pending = [...this.#inflight.values()].map((e) => e.promise);
    if (pending.length === 0) {
      await sleep(Math.min(waitMs, 100));
      return [];
    }
    const timer = new AbortController();
    await Promise.race([
      Promise.race(pending),
      sleep(waitMs, undefined, { signal: timer.signal }).catch(() => {}),
    ]);
    timer.abort();
    const out: ConsumedBatch[] = [];
    for (const tp of this.#assignments) {
      const k = key(tp);
      const entry = this.#inflight.get(k);
      if (entry === undefined || !entry.done) continue;
      this.#inflight.delete(k);
      if (entry.error !== null) {
        if (
          entry.error instanceof ClientError &&
          entry.error.code === Errors.offsetOutOfRange.code
        ) {
          // Retention moved the log start past the position: continue from where the log starts now.
          const bounds = await this.#bounds(tp);
          this.#positions.set(
            k,
            entry.offset < bounds.logStartOffset ? bounds.logStartOffset : bounds.highWatermark,
          );
          continue;
        }
        if (this.#router !== undefined && isRoutingError(entry.error)) {
          // Leadership moved (or the leader went): the next poll fetches from the new leader.
          await this.#router.refresh().catch(() => {});
          continue;
        }
        throw entry.error;
      }
      const result = entry.result!;
      if (entry.offset !== this.#positions.get(k)) continue; // the position moved (reassigned) meanwhile
      this.#positions.set(k, result.nextOffset);
      if (result.records.length > 0)
        out.push({ topic: tp.topic, partition: tp.partition, records: result.records });
    }
    return out;
  }

  /**
   * Commits the positions of the partitions this member owns (only those that moved). A commit
   * refused by a rebalance rejoins at once and is sent again for the partitions still owned
   * without a break (module comment), a few times at most. Resolves true if everything wanted
   * is committed (or nothing to commit), false if the member lost some of those partitions
   * first (their next owner reads what was not committed again).
   * @param upTo commit these positions instead (a prefix of what was handed out), per partition.
   * @throws ClientError for other failures, and when the group keeps rebalancing.
   */
  async commit(
    upTo?: Map<string, number> | { topic: string; partition: number; offset: number }[],
  ): Promise<boolean> {
    return this.#commit(upTo, 4);
  }

  /** {@link commit}, sent again up to `retries` times after a rebalance; 0: rejoin at the next call. */
  async #commit(
    upTo: Map<string, number> | { topic: string; partition: number; offset: number }[] | undefined,
    retries: number,
  ): Promise<boolean> {
    const wanted = new Map<string, number>();
    if (upTo === undefined) for (const [k, v] of this.#positions) wanted.set(k, v);
    else if (upTo instanceof Map) for (const [k, v] of upTo) wanted.set(k, v);
    else for (const o of upTo) wanted.set(key(o), o.offset);
    // Handed out under this ownership: the member's to commit only while it lasts.
    const tenure = new Map([...wanted.keys()].map((k) => [k, this.#tenure.get(k)]));
    let complete = true;
    const keepOwned = () => {
      for (const k of [...wanted.keys()]) {
        const t = this.#tenure.get(k);
        if (t === undefined || t !== tenure.get(k)) {
          wanted.delete(k);
          complete = false;
        }
      }
    };
    await this.#ensureMember();
    keepOwned();
    for (let attempt = 0; ; attempt++) {
      const offsets: { topic: string; partition: number; offset: number }[] = [];
      for (const tp of this.#assignments) {
        const k = key(tp);
        const offset = wanted.get(k);
        if (offset === undefined || offset === this.#committed.get(k)) continue;
        offsets.push({ ...tp, offset });
      }
      if (offsets.length === 0) return complete;
      try {
        await this.#client.commitOffsets({
          group: this.group,
          memberId: this.#memberId,
          generation: this.#generation,
          offsets,
        });
      } catch (err) {
        if (
          err instanceof ClientError &&
          (err.code === Errors.staleGeneration.code || err.code === Errors.notPartitionOwner.code)
        )
          this.#rejoin = "same";
        else if (err instanceof ClientError && err.code === Errors.unknownMember.code)
          this.#rejoin = "fresh";
        else if (this.#coordinatorLost(err)) await this.#moveCoordinator();
        else throw err;
        if (retries === 0) return false;
        if (attempt >= retries) throw err;
        await this.#ensureMember();
        keepOwned();
        continue;
      }
      for (const o of offsets) this.#committed.set(key(o), o.offset);
      return complete;
    }
  }

  /** Key of a partition in the maps {@link commit} takes. */
  static partitionKey(tp: TopicPartition): string {
    return key(tp);
  }

  /** Stops heartbeating and leaves the group (its partitions go to the other members at once). */
  async close(options: { leave?: boolean } = {}): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#heartbeat !== null) clearInterval(this.#heartbeat);
    if (options.leave !== false && !this.#client.closed) {
      await this.#client
        .leaveGroup({ group: this.group, memberId: this.#memberId })
        .catch(() => {});
    }
  }
}
