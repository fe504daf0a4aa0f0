/**
 * An idempotent producer over the TCP client: it numbers its records per partition and retries
 * on its own, so a batch the broker acknowledges is stored once however often it was sent
 * (Kafka's idempotent producer; the broker's rules are the decision table in
 * `src/broker/producers/sequence.ts`).
 *
 * - Sequences: per partition, every record counts one; a batch carries the sequence of its first
 *   record. Batches of one partition are sent one at a time, in the order `send` was called.
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
 * - Another incarnation with the same id and epoch (the application restarted within the second
 *   its default epoch was taken from): the very first try of a numbering can only be answered as
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
import { producerEpochMax } from "../lib/limits.ts";

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
   * The epoch to start with, 0 … 2^31 − 1. Default: the current Unix time in seconds (as the
   * CLI's `produce --producer-id`), so each start of the application is a new incarnation that
   * fences older ones; a start within the same second is told apart by its first batch (module
   * comment). Pass one only if the application keeps its own epochs.
   */
  epoch?: number;
  /** How long one `send` keeps retrying, in ms (default 120 000). */
  deliveryTimeoutMs?: number;
  /** Wait before the first retry, in ms; it doubles per attempt up to `retryBackoffMaxMs` (default 20). */
  retryBackoffMs?: number;
  /** Longest wait between retries, in ms (default 1000). */
  retryBackoffMaxMs?: number;
}

interface PartitionState {
  nextSequence: number;
  /** Sends of this partition run one after another. */
  tail: Promise<unknown>;
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
  #closed = false;
  /** The epoch came from the clock (no `epoch` option): this producer may move it at start. */
  readonly #clockEpoch: boolean;
  /** Whether any batch of this producer was acknowledged (it is an incarnation from then on). */
  #acknowledged = false;

  constructor(options: IdempotentProducerOptions) {
    this.producerId = options.producerId;
    this.#clockEpoch = options.epoch === undefined;
    this.#epoch = options.epoch ?? Math.min(Math.floor(Date.now() / 1000), producerEpochMax);
    this.#connect = options.connect;
    this.#router = options.router;
    this.#deliveryTimeoutMs = options.deliveryTimeoutMs ?? 120_000;
    this.#retryBackoffMs = options.retryBackoffMs ?? 20;
    this.#retryBackoffMaxMs = options.retryBackoffMaxMs ?? 1000;
  }

  /** The epoch the producer sends with now. */
  get epoch(): number {
    return this.#epoch;
  }

  /** The next sequence of a partition (0 if nothing was sent to it in this epoch). */
  nextSequence(topic: string, partition: number): number {
    return this.#partitions.get(topicPartitionKey(topic, partition))?.nextSequence ?? 0;
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
    const partition = await this.#partitionFor(topic, batch, options.partition);
    const key = topicPartitionKey(topic, partition);
    let state = this.#partitions.get(key);
    if (state === undefined) {
      state = { nextSequence: 0, tail: Promise.resolve() };
      this.#partitions.set(key, state);
    }
    const s = state;
    const run = s.tail.then(
      () => this.#deliver(topic, partition, s, batch),
      () => this.#deliver(topic, partition, s, batch),
    );
    s.tail = run.catch(() => {});
    return run;
  }

  async #deliver(
    topic: string,
    partition: number,
    state: PartitionState,
    batch: EntryBatch,
  ): Promise<ProduceResult> {
    const deadline = Date.now() + this.#deliveryTimeoutMs;
    let epoch = this.#epoch;
    let sequence = state.nextSequence;
    state.nextSequence += batch.count;
    let ambiguous = false;
    // Tries sent under the current (epoch, sequence): on the first, nothing of this producer's
    // can be stored there yet, so a duplicate answer names another incarnation's batch.
    let tries = 0;
    for (let attempt = 0; ; attempt++) {
      try {
        const client =
          this.#router === undefined
            ? await this.#clientNow()
            : await this.#router.leader(topic, partition);
        tries++;
        const result = await client.produceIdempotent(topic, batch, {
          partition,
          producer: { id: this.producerId, epoch, sequence },
        });
        if (result.duplicate && tries === 1 && this.#leaveTakenEpoch(epoch)) {
          [epoch, sequence] = this.#renumber(state, batch);
          tries = 0;
          continue;
        }
        this.#acknowledged = true;
        return result;
      } catch (err) {
        if (!(err instanceof ClientError) || this.#closed) throw err;
        if (
          err.code === Errors.duplicateSequence.code &&
          tries === 1 &&
          this.#leaveTakenEpoch(epoch)
        ) {
          [epoch, sequence] = this.#renumber(state, batch);
          tries = 0;
          continue;
        }
        if (err.code === Errors.unknownProducer.code) {
          // Forgotten by the broker: begin a new epoch, in which every partition starts at 0.
          if (this.#epoch === epoch) this.#startEpoch(epoch + 1);
          [epoch, sequence] = this.#renumber(state, batch);
          tries = 0;
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
          [epoch, sequence] = this.#renumber(state, batch);
          tries = 0;
          continue;
        }
        if (err.code === Errors.producerFenced.code && epoch < this.#epoch) {
          // Numbered in an epoch this producer itself left behind: renumber, unless it may be stored.
          if (ambiguous) throw err;
          [epoch, sequence] = this.#renumber(state, batch);
          tries = 0;
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
  }

  /**
   * A batch that fails for good must not leave a gap that wedges the partition: a batch the
   * broker refused (nothing stored) hands its sequence numbers back; a batch that may be stored
   * (answers lost until the delivery timeout) ends the epoch, so the next batch starts a new one
   * at sequence 0 instead of guessing.
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
    await this.#client?.close();
  }
}
