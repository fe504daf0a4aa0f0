/**
 * An idempotent producer over the TCP client: it numbers its records per partition and retries
 * on its own, so a batch the broker acknowledges is stored once however often it was sent
 * (Kafka's idempotent producer; the broker's rules are the decision table in
 * `src/broker/producers/sequence.ts`).
 *
 * - Sequences: per partition, every record counts one; a batch carries the sequence of its first
 *   record. Batches of one partition leave in the order `send` was called, with consecutive
 *   sequences; a batch is numbered when its first try leaves.
 * - Several batches in flight (`maxInFlight`, default 5): up to that many batches of a partition
 *   are sent and unanswered at once on the connection, once this producer has had a batch
 *   acknowledged. The broker decides and appends a connection's requests for one partition in
 *   arrival order, so their sequences meet it in order. Any answer but a plain acknowledgement
 *   (an error, a lost connection, a duplicate) closes the window: that batch, and every later
 *   one whose first try fails too, waits until every earlier batch of the partition has settled,
 *   then goes on with the rules below, one batch at a time, each resent with the same epoch and
 *   sequence (a stored one is answered as a duplicate). An `out_of_order_sequence` answered to a
 *   batch sent behind unanswered ones only means an earlier one had not arrived: it is sent once
 *   more after they settle. A batch refused for good (nothing of it stored) while later ones
 *   were out ends the epoch, since those later ones sit past a gap: none of them can be stored
 *   under it, so each is renumbered in the new epoch, in order. No first try of a new epoch
 *   leaves behind a batch of the partition still numbered in an older one.
 * - Retries: on a lost connection, a timeout or a retriable server error, the same batch (same
 *   epoch and sequence) is sent again — over a new connection if needed — until it is answered or
 *   `deliveryTimeoutMs` passes. A resend of a batch that was in fact stored is answered with its
 *   original offsets (`duplicate: true`).
 * - `unknown_producer` (the broker forgot this producer after a long idle time): the producer
 *   starts a new epoch (epoch + 1), every partition's sequence restarts at 0, and the batch is sent
 *   again as the new epoch's first. A batch later refused as `producer_fenced` by that change
 *   (it was numbered in the old epoch) is renumbered and sent again — unless an earlier attempt
 *   of it may be stored (it went unanswered, or failed with anything but a refusal the broker
 *   makes before appending, such as `not_leader` from a leader deposed while the write waited),
 *   in which case `send` rejects rather than risk storing it twice.
 * - The epoch (docs/decisions.md §20): without `epoch`, the producer asks the broker for one before
 *   its first batch (`TcpClient.initProducerEpoch`, api 15; in cluster mode the controller, through
 *   the router's `coordinator()`): the broker answers above every epoch it has handed out or seen
 *   for the id, durably, and fences the previous incarnation at once. A broker that answers
 *   `unsupported_api` (an older one) gets the clock epoch: the current Unix second. In cluster
 *   mode a leader may hold a higher epoch than the controller handed out (a clock epoch of an
 *   older client, a previous controller's allocation): refused `producer_fenced` by it before
 *   anything was acknowledged, the producer asks the controller again with `at_least` above it.
 * - Another incarnation with the same id and epoch (the application restarted within the second
 *   its clock epoch was taken from): the very first try of a numbering can only be answered as
 *   a duplicate, or refused as `duplicate_sequence`, if another process stored a batch under that
 *   epoch and sequence. The producer then starts a new epoch (epoch + 1, which fences the other
 *   incarnation) and sends the batch again, instead of taking someone else's batch for its own.
 *   A retry after an unanswered try is different: its duplicate answer is this producer's batch.
 * - A producer on its default (clock) epoch that has had nothing acknowledged yet and is refused
 *   `producer_fenced` by an epoch above the current Unix second — which no start's clock epoch
 *   can be, so it is the move of a start within the same second (or of a host whose clock is
 *   ahead) — moves above it and sends again, unless an earlier try of the batch may be stored:
 *   the newest start of an application fences the older ones. Fenced by an epoch at or below
 *   the current second (a later start's), or once one of its batches is acknowledged, `send`
 *   rejects: a newer start fenced it.
 * - Other refusals (`out_of_order_sequence`, `duplicate_sequence`, `producer_fenced` by another
 *   incarnation, `topic_not_found`, …) reject `send` and hand the batch's sequence numbers back, so
 *   the next `send` does not leave a gap. A batch that stays unanswered until the delivery timeout
 *   (it may or may not be stored) rejects `send` and starts a new epoch.
 *
 * Partition choice must be known before sending (sequences are per partition): `partition`, or
 * else each record's key (murmur2, as the broker does) and, for keyless records, the producer id
 * — every record of one `send` must map to the same partition.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { ProduceResult } from "../broker/types.ts";
import { partitionForKey } from "../lib/murmur2.ts";
import { topicPartitionKey } from "../lib/topic-partition.ts";
import { EntryCursor, type EntryBatch } from "../storage/record.ts";
import type { TcpClient } from "./client.ts";
import { isRoutingError, type LeaderRouter } from "./cluster.ts";
import { ClientError } from "./errors.ts";
import { buildEntryBatch, type ProduceRecord } from "./records.ts";
import { Errors } from "../broker/errors.ts";
import { producerBatchesRemembered, producerEpochMax } from "../lib/limits.ts";

/** Options of {@link IdempotentProducer}. */
export interface IdempotentProducerOptions {
  /**
   * Opens a connection to the broker; called at first use and again after a connection is lost.
   * Pass the API key and TLS options there: `() => TcpClient.connect({ host, port, apiKey, tls })`.
   */
  connect: () => Promise<TcpClient>;
  /**
   * Cluster mode: send each partition's batches to its leader through this router (a
   * {@link ClusterClient}) instead of the `connect` connection, and read the metadata again after
   * `not_leader`, `fenced_leader_epoch`, `not_enough_replicas` or a lost connection. The batch
   * keeps its sequence across leaders, so a new leader answers a stored batch as a duplicate.
   */
  router?: LeaderRouter;
  /** The producer's stable id: 1–249 characters of `[A-Za-z0-9._:-]`. */
  producerId: string;
  /**
   * The epoch to start with, 0 … 2^31 − 1. Default: the broker hands one out before the first
   * batch (docs/decisions.md §20), above every earlier incarnation's, so each start of the
   * application fences older ones; against a broker without producer epochs, the current Unix
   * time in seconds (a start within the same second is told apart by its first batch, module
   * comment). Pass one only if the application keeps its own epochs.
   */
  epoch?: number;
  /** How long one `send` keeps retrying, in ms (default 120 000). */
  deliveryTimeoutMs?: number;
  /** Wait before the first retry, in ms; it doubles per attempt up to `retryBackoffMaxMs` (default 20). */
  retryBackoffMs?: number;
  /** Longest wait between retries, in ms (default 1000). */
  retryBackoffMaxMs?: number;
  /**
   * Batches of one partition that may be on their way at once (sent, not yet answered), 1 …
   * {@link producerBatchesRemembered} (the batches the broker remembers per producer and
   * partition, so every retry of an unanswered batch can still be answered as a duplicate).
   * Default {@link producerInFlightDefault} (5, Kafka's `max.in.flight.requests.per.connection`
   * with idempotence): batch k + 1 crosses the socket while batch k is written and fsynced, and
   * one fsync can cover several. 1 sends one batch at a time, as before this option existed.
   * The window opens only after this producer's first acknowledgement, and closes while any
   * batch of the partition is being retried (module comment, "Several batches in flight").
   */
  maxInFlight?: number;
}

/**
 * Default of {@link IdempotentProducerOptions.maxInFlight}: 5, Kafka's default with idempotence
 * and the most the broker remembers per producer and partition ({@link producerBatchesRemembered}),
 * so a resend of any unanswered batch is still recognized. More would not be safe; fewer gives
 * away overlap (docs/client.md "`IdempotentProducer`").
 */
export const producerInFlightDefault = producerBatchesRemembered;

/** One `send` of a partition, from the call until it settles. */
interface PendingBatch {
  /** The epoch it is numbered in now (the producer's epoch until its first try is sent). */
  epoch: number;
  /** Its first try has been handed to the connection: the next batch may send its own. */
  issued: boolean;
  /** Wakes it when its turn to send comes (set while it waits). */
  wake: (() => void) | null;
  /** Resolves once it has settled (acknowledged or rejected). */
  done: Promise<void>;
  markDone: () => void;
}

interface PartitionState {
  nextSequence: number;
  /** Batches of this partition not settled yet, in `send` order. */
  queue: PendingBatch[];
  /** Batches of the queue retrying, one after another: while any does, no first try leaves. */
  retrying: number;
  /**
   * Nothing of this epoch at or after this sequence can be stored: a batch there was refused
   * (nothing of it stored) while later ones were already sent, and the epoch was left behind so
   * that sequence is never sent again. Those later ones may then be renumbered.
   */
  unstorable: { epoch: number; sequence: number } | null;
}

const retriableCodes = new Set<string>(["connection_closed", "timeout"]);

/**
 * Refusals a broker answers before appending anything: after one, the batch is certainly not
 * stored by that try. Any other failure may follow an append (a leader deposed, or whose lease
 * ended, while the write waited for the ISR answers `not_leader` with the records already
 * fetched by the next leader), so the try counts as possibly stored.
 */
const refusedBeforeAppend = new Set<string>(
  [
    Errors.invalidRequest,
    Errors.topicNotFound,
    Errors.partitionNotFound,
    Errors.requestTooLarge,
    Errors.recordTooLarge,
    Errors.invalidTimestamp,
    Errors.invalidRecord,
    Errors.outOfOrderSequence,
    Errors.producerFenced,
    Errors.unknownProducer,
    Errors.duplicateSequence,
    Errors.unauthenticated,
    Errors.forbidden,
    Errors.keyRevoked,
  ].map((kind) => kind.code),
);

/** See the module comment. */
export class IdempotentProducer {
  readonly producerId: string;
  #epoch: number;
  #connect: () => Promise<TcpClient>;
  #router: LeaderRouter | undefined;
  #client: TcpClient | null = null;
  #connecting: Promise<TcpClient> | null = null;
  #partitions = new Map<string, PartitionState>();
  #partitionCounts = new Map<string, number>();
  #deliveryTimeoutMs: number;
  #retryBackoffMs: number;
  #retryBackoffMaxMs: number;
  #maxInFlight: number;
  #closed = false;
  /** The epoch came from the clock (no `epoch` option, a broker without epochs): it may move at start. */
  #clockEpoch: boolean;
  /** Where the epoch comes from: the option, the broker, the clock; "pending" until the broker is asked. */
  #epochSource: "option" | "broker" | "clock" | "pending";
  /** The broker's answer being awaited (the first `send`s wait for it). */
  #epochRequest: Promise<void> | null = null;
  /** Whether any batch of this producer was acknowledged (it is an incarnation from then on). */
  #acknowledged = false;

  constructor(options: IdempotentProducerOptions) {
    this.producerId = options.producerId;
    this.#clockEpoch = false;
    this.#epochSource = options.epoch === undefined ? "pending" : "option";
    this.#epoch = options.epoch ?? Math.min(Math.floor(Date.now() / 1000), producerEpochMax);
    this.#connect = options.connect;
    this.#router = options.router;
    this.#deliveryTimeoutMs = options.deliveryTimeoutMs ?? 120_000;
    this.#retryBackoffMs = options.retryBackoffMs ?? 20;
    this.#retryBackoffMaxMs = options.retryBackoffMaxMs ?? 1000;
    const maxInFlight = options.maxInFlight ?? producerInFlightDefault;
    if (
      !Number.isInteger(maxInFlight) ||
      maxInFlight < 1 ||
      maxInFlight > producerBatchesRemembered
    ) {
      throw ClientError.fromKind(
        Errors.invalidRequest,
        `Cannot create producer "${options.producerId}": maxInFlight must be an integer from 1 to ${producerBatchesRemembered} (the batches the broker remembers per producer and partition), got ${String(maxInFlight)}`,
      );
    }
    this.#maxInFlight = maxInFlight;
    // Made now, the producer is an incarnation from now: ask for its epoch at once.
    if (options.epoch === undefined) void this.start();
  }

  /** The epoch the producer sends with now (before the first `send`, see {@link start}). */
  get epoch(): number {
    return this.#epoch;
  }

  /**
   * Where {@link epoch} came from: `"option"` (the `epoch` option), `"broker"` (handed out by the
   * broker, docs/decisions.md §20), `"clock"` (the Unix second: the broker has no producer
   * epochs), or `"pending"` before the broker was asked.
   */
  get epochSource(): "option" | "broker" | "clock" | "pending" {
    return this.#epochSource;
  }

  /**
   * Without the `epoch` option: asks the broker for the epoch (module comment). The constructor
   * starts it, so the order of starts is the order of incarnations; `send` waits for it, and
   * after a failure asks again. Retries lost connections and routing errors until the delivery
   * timeout; a refusal rejects, and the next `start` or `send` asks again.
   * @throws ClientError `forbidden`, `producer_epoch_exhausted`, `invalid_request`, or the last
   *   error at the delivery timeout.
   */
  start(): Promise<void> {
    if (this.#epochSource !== "pending") return Promise.resolve();
    if (this.#epochRequest === null) {
      const request: Promise<void> = this.#askEpoch(0).finally(() => {
        if (this.#epochRequest === request) this.#epochRequest = null;
      });
      request.catch(() => {}); // a failed start is reported to whoever awaits it
      this.#epochRequest = request;
    }
    return this.#epochRequest;
  }

  /**
   * Asks the broker (the controller, with a router) for an epoch of at least `atLeast` and starts
   * it; `unsupported_api` leaves the clock epoch. Retries as {@link #withRetries}, reading the
   * metadata again after a routing error.
   */
  async #askEpoch(atLeast: number): Promise<void> {
    let epoch: number;
    try {
      epoch = await this.#withRetries(async () => {
        const client =
          this.#router?.coordinator === undefined
            ? await this.#clientNow()
            : await this.#router.coordinator();
        try {
          return await client.initProducerEpoch(this.producerId, { atLeast });
        } catch (err) {
          if (this.#router !== undefined && isRoutingError(err))
            await this.#router.refresh().catch(() => {});
          throw err;
        }
      });
    } catch (err) {
      if (
        err instanceof ClientError &&
        err.code === Errors.unsupportedApi.code &&
        this.#epochSource === "pending"
      ) {
        // The second this producer was made in (the constructor's), as before epochs were handed out.
        this.#epochSource = "clock";
        this.#clockEpoch = true;
        return;
      }
      throw err;
    }
    this.#epochSource = "broker";
    this.#startEpoch(epoch);
  }

  /** The next sequence of a partition (0 if nothing was sent to it in this epoch). */
  nextSequence(topic: string, partition: number): number {
    return this.#partitions.get(topicPartitionKey(topic, partition))?.nextSequence ?? 0;
  }

  /** The connection a batch of `topic`/`partition` goes to: the partition's leader in cluster mode. */
  #clientFor(topic: string, partition: number): Promise<TcpClient> {
    return this.#router === undefined ? this.#clientNow() : this.#router.leader(topic, partition);
  }

  async #clientNow(): Promise<TcpClient> {
    if (this.#closed) throw ClientError.connectionClosed("Cannot send: the producer is closed");
    if (this.#client !== null && !this.#client.closed) return this.#client;
    if (this.#connecting === null) {
      this.#connecting = this.#connect().finally(() => (this.#connecting = null));
    }
    this.#client = await this.#connecting;
    return this.#client;
  }

  async #partitionFor(
    topic: string,
    batch: EntryBatch,
    partition: number | undefined,
  ): Promise<number> {
    if (partition !== undefined && partition >= 0) return partition;
    let count = this.#partitionCounts.get(topic);
    if (count === undefined && this.#router !== undefined)
      count = await this.#withRetries(() => this.#router!.partitionCount(topic));
    if (count === undefined) {
      const [description] = await this.#withRetries(async () =>
        (await this.#clientNow()).metadata([topic]),
      );
      count = description.partitions.length;
    }
    this.#partitionCounts.set(topic, count);
    const cursor = new EntryCursor(batch);
    const idBytes = new TextEncoder().encode(this.producerId);
    let chosen = -1;
    while (cursor.next()) {
      const key = cursor.key();
      const p = partitionForKey(key ?? idBytes, count);
      if (chosen === -1) chosen = p;
      else if (p !== chosen) {
        throw ClientError.fromKind(
          Errors.invalidRequest,
          `Cannot send to topic "${topic}" as producer "${this.producerId}": the records' keys map to several partitions; give a partition or send them separately`,
        );
      }
    }
    return chosen;
  }

  /** Runs `fn`, retrying lost connections and timeouts until the delivery timeout. */
  async #withRetries<T>(fn: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + this.#deliveryTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (
          !(err instanceof ClientError) ||
          !(err.retriable || retriableCodes.has(err.code)) ||
          Date.now() >= deadline ||
          this.#closed
        )
          throw err;
        await sleep(
          Math.min(this.#retryBackoffMaxMs, this.#retryBackoffMs * 2 ** Math.min(attempt, 20)),
        );
      }
    }
  }

  /**
   * Sends records idempotently; resolves once they are durable, with where they went
   * (`duplicate: true` when an earlier attempt had already stored them).
   * @throws ClientError after the delivery timeout (the last error), or a refusal (module comment).
   */
  async send(
    topic: string,
    records: readonly ProduceRecord[] | EntryBatch,
    options: { partition?: number } = {},
  ): Promise<ProduceResult> {
    const batch = Array.isArray(records)
      ? buildEntryBatch(records as readonly ProduceRecord[])
      : (records as EntryBatch);
    if (batch.count === 0) return { spans: [], duplicate: false };
    if (this.#epochSource === "pending") await this.start();
    const partition = await this.#partitionFor(topic, batch, options.partition);
    const key = topicPartitionKey(topic, partition);
    let state = this.#partitions.get(key);
    if (state === undefined) {
      state = { nextSequence: 0, queue: [], retrying: 0, unstorable: null };
      this.#partitions.set(key, state);
    }
    let markDone!: () => void;
    const done = new Promise<void>((resolve) => (markDone = resolve));
    const pending: PendingBatch = { epoch: this.#epoch, issued: false, wake: null, done, markDone };
    state.queue.push(pending);
    try {
      return await this.#deliver(topic, partition, state, pending, batch);
    } finally {
      const at = state.queue.indexOf(pending);
      if (at !== -1) state.queue.splice(at, 1);
      pending.issued = true;
      markDone();
      this.#pumpAll();
    }
  }

  /**
   * May `pending`, at `index` of its partition's queue, send its first try now? The first of the
   * queue always may; a later one once the batch before it has sent its first try, while no
   * batch of the partition is retrying, every batch before it is numbered in the current epoch,
   * the window has room, and this producer has had an acknowledgement (before that, the first
   * answers tell an incarnation clash apart, module comment).
   */
  #mayIssue(state: PartitionState, index: number): boolean {
    if (index === 0) return true;
    if (index >= this.#maxInFlight || !this.#acknowledged || state.retrying > 0) return false;
    if (!state.queue[index - 1].issued) return false;
    for (let i = 0; i < index; i++) if (state.queue[i].epoch !== this.#epoch) return false;
    return true;
  }

  /** Wakes the next batch of each partition whose turn to send has come. */
  #pumpAll(): void {
    for (const state of this.#partitions.values()) {
      const queue = state.queue;
      for (let i = 0; i < queue.length; i++) {
        const p = queue[i];
        if (p.issued) continue;
        if (p.wake !== null && (this.#closed || this.#mayIssue(state, i))) {
          const wake = p.wake;
          p.wake = null;
          wake();
        }
        break;
      }
    }
  }

  async #deliver(
    topic: string,
    partition: number,
    state: PartitionState,
    pending: PendingBatch,
    batch: EntryBatch,
  ): Promise<ProduceResult> {
    if (!this.#closed && !this.#mayIssue(state, state.queue.indexOf(pending)))
      await new Promise<void>((resolve) => (pending.wake = resolve));
    const deadline = Date.now() + this.#deliveryTimeoutMs;
    let epoch = this.#epoch;
    let sequence = state.nextSequence;
    state.nextSequence += batch.count;
    pending.epoch = epoch;
    /** Batches of the partition before this one when its first try left. */
    const ahead = state.queue.slice(0, state.queue.indexOf(pending));
    let ambiguous = false;
    // Tries sent under the current (epoch, sequence): on the first, nothing of this producer's
    // can be stored there yet, so a duplicate answer names another incarnation's batch.
    let tries = 0;
    /** The first try's outcome, sent in the window; handled below once every batch ahead settled. */
    let first: { result: ProduceResult } | { error: unknown } | null = null;
    let retrying = false;
    try {
      try {
        const client = await this.#clientFor(topic, partition);
        tries++;
        const answer = client.produceIdempotent(topic, batch, {
          partition,
          producer: { id: this.producerId, epoch, sequence },
        });
        pending.issued = true;
        this.#pumpAll();
        const result = await answer;
        if (!result.duplicate) {
          this.#acknowledged = true;
          return result;
        }
        first = { result };
      } catch (err) {
        first = { error: err };
      }
      // Trouble: the window closes, and this batch waits for every batch ahead of it.
      retrying = true;
      state.retrying++;
      pending.issued = true;
      if (ahead.length > 0) await Promise.all(ahead.map((p) => p.done));
      if ("error" in first) {
        const err = first.error;
        if (!(err instanceof ClientError) || this.#closed) throw err;
        if (!refusedBeforeAppend.has(err.code)) ambiguous = true;
        if (
          err.code === Errors.outOfOrderSequence.code &&
          ahead.length > 0 &&
          epoch === this.#epoch
        ) {
          // Sent behind batches that had not arrived yet: they have settled now, so send it again.
          first = null;
        }
      }
      if (epoch !== this.#epoch && (!ambiguous || this.#unstorable(state, epoch, sequence))) {
        // An earlier batch ended the epoch while this one was out, and no try of it can be stored.
        [epoch, sequence] = this.#renumber(state, batch);
        pending.epoch = epoch;
        ambiguous = false;
        tries = 0;
        first = null;
        this.#pumpAll();
      }
      return await this.#retry(topic, partition, state, pending, batch, {
        deadline,
        epoch,
        sequence,
        ambiguous,
        tries,
        first,
      });
    } finally {
      if (retrying) state.retrying--;
    }
  }

  /** Whether (epoch, sequence) lies where nothing can be stored (see {@link PartitionState.unstorable}). */
  #unstorable(state: PartitionState, epoch: number, sequence: number): boolean {
    const u = state.unstorable;
    return u !== null && u.epoch === epoch && sequence >= u.sequence;
  }

  /** The retry loop of one batch, its first outcome given (module comment). */
  async #retry(
    topic: string,
    partition: number,
    state: PartitionState,
    pending: PendingBatch,
    batch: EntryBatch,
    start: {
      deadline: number;
      epoch: number;
      sequence: number;
      ambiguous: boolean;
      tries: number;
      first: { result: ProduceResult } | { error: unknown } | null;
    },
  ): Promise<ProduceResult> {
    const deadline = start.deadline;
    let { epoch, sequence, ambiguous, tries } = start;
    let outcome = start.first;
    const renumber = () => {
      [epoch, sequence] = this.#renumber(state, batch);
      pending.epoch = epoch;
      tries = 0;
    };
    for (let attempt = 0; ; attempt++) {
      if (outcome === null) {
        try {
          const client = await this.#clientFor(topic, partition);
          tries++;
          outcome = {
            result: await client.produceIdempotent(topic, batch, {
              partition,
              producer: { id: this.producerId, epoch, sequence },
            }),
          };
        } catch (err) {
          outcome = { error: err };
        }
      }
      const o = outcome;
      outcome = null;
      if ("result" in o) {
        const result = o.result;
        if (result.duplicate && tries === 1 && this.#leaveTakenEpoch(epoch)) {
          renumber();
          continue;
        }
        this.#acknowledged = true;
        return result;
      }
      const err = o.error;
      if (!(err instanceof ClientError) || this.#closed) throw err;
      if (
        err.code === Errors.duplicateSequence.code &&
        tries === 1 &&
        this.#leaveTakenEpoch(epoch)
      ) {
        renumber();
        continue;
      }
      if (err.code === Errors.unknownProducer.code) {
        // Forgotten by the broker: begin a new epoch, in which every partition starts at 0.
        if (this.#epoch === epoch) this.#startEpoch(epoch + 1);
        renumber();
        continue;
      }
      if (!refusedBeforeAppend.has(err.code)) ambiguous = true;
      const fencedAt = err.details?.expected_epoch;
      if (
        err.code === Errors.producerFenced.code &&
        epoch === this.#epoch &&
        this.#clockEpoch &&
        !this.#acknowledged &&
        !ambiguous &&
        typeof fencedAt === "number" &&
        Number.isSafeInteger(fencedAt) &&
        // Above the current second: a same-second start's move, never a later start's
        // clock epoch (a later start fences this one: attack8 F5).
        fencedAt > Math.floor(Date.now() / 1000) &&
        fencedAt < producerEpochMax
      ) {
        // A newer start of this application must not stay below an older one's epoch.
        this.#startEpoch(fencedAt + 1);
        renumber();
        continue;
      }
      if (
        err.code === Errors.producerFenced.code &&
        epoch === this.#epoch &&
        this.#epochSource === "broker" &&
        this.#router !== undefined &&
        !this.#acknowledged &&
        !ambiguous &&
        typeof fencedAt === "number" &&
        Number.isSafeInteger(fencedAt) &&
        fencedAt >= epoch &&
        fencedAt < producerEpochMax
      ) {
        // A leader holds an epoch the controller never handed out (docs/cluster.md "Producer
        // epochs"): ask the controller for one above it.
        await this.#askEpoch(fencedAt + 1);
        renumber();
        continue;
      }
      if (err.code === Errors.producerFenced.code && epoch < this.#epoch) {
        // Numbered in an epoch this producer itself left behind: renumber, unless it may be stored.
        if (ambiguous && !this.#unstorable(state, epoch, sequence)) throw err;
        renumber();
        continue;
      }
      if (
        this.#router === undefined &&
        err.code === Errors.notLeader.code &&
        typeof err.details?.leader === "number"
      ) {
        // Another broker of a cluster leads it: without a router every try goes to this one.
        const hopeless = new ClientError(
          err.code,
          err.tcp,
          false,
          `${err.message}; this producer has no router, so it would retry this broker until deliveryTimeoutMs: pass router: a ClusterClient (docs/client.md, IdempotentProducer's router)`,
          { cause: err, details: err.details },
        );
        throw this.#giveUp(hopeless, { state, epoch, sequence, count: batch.count, ambiguous });
      }
      const retriable = err.retriable || retriableCodes.has(err.code);
      if (!retriable || Date.now() >= deadline)
        throw this.#giveUp(err, { state, epoch, sequence, count: batch.count, ambiguous });
      await sleep(
        Math.min(this.#retryBackoffMaxMs, this.#retryBackoffMs * 2 ** Math.min(attempt, 20)),
      );
      // The same sequence goes to whoever leads now.
      if (this.#router !== undefined && isRoutingError(err))
        await this.#router.refresh().catch(() => {});
    }
  }

  /**
   * A batch that fails for good must not leave a gap that wedges the partition: a batch the
   * broker refused (nothing stored) hands its sequence numbers back, or, if later batches were
   * sent past it, ends the epoch; a batch that may be stored (answers lost until the delivery
   * timeout) ends the epoch, so the next batch starts a new one at sequence 0 instead of guessing.
   */
  #giveUp(
    err: ClientError,
    failed: {
      state: PartitionState;
      epoch: number;
      sequence: number;
      count: number;
      ambiguous: boolean;
    },
  ): ClientError {
    if (failed.epoch !== this.#epoch) return err;
    if (failed.ambiguous) this.#startEpoch(this.#epoch + 1);
    else if (failed.state.nextSequence === failed.sequence + failed.count)
      failed.state.nextSequence = failed.sequence;
    else if (this.#epoch < producerEpochMax) {
      // Later batches were sent past it: they can never be stored in this epoch (the broker takes
      // a sequence only right after the last stored one), so the epoch ends and they renumber.
      failed.state.unstorable = { epoch: failed.epoch, sequence: failed.sequence };
      this.#startEpoch(this.#epoch + 1);
    }
    return err;
  }

  /**
   * Another incarnation holds `epoch` (module comment): begins the next epoch, unless this
   * producer already left `epoch` (then only the batch is renumbered) or no epoch is left.
   */
  #leaveTakenEpoch(epoch: number): boolean {
    if (epoch !== this.#epoch) return true;
    if (epoch >= producerEpochMax) return false;
    this.#startEpoch(epoch + 1);
    return true;
  }

  #startEpoch(epoch: number): void {
    this.#epoch = epoch;
    for (const s of this.#partitions.values()) s.nextSequence = 0;
  }

  /** Gives `batch` the next sequence of its partition in the current epoch. */
  #renumber(state: PartitionState, batch: EntryBatch): [number, number] {
    const sequence = state.nextSequence;
    state.nextSequence += batch.count;
    return [this.#epoch, sequence];
  }

  /** Stops retrying and closes the connection. Sends in progress reject. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#pumpAll();
    await this.#client?.close();
    // A request for the epoch in flight ends with the connection (and is not retried once
    // closed); a connection it opened meanwhile is closed too.
    await this.#epochRequest?.catch(() => {});
    await this.#client?.close();
  }
}
