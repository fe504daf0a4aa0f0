/**
 * Routing for clients of a cluster (docs/cluster.md "Clients"): bootstrap from any broker, learn
 * the partition leaders (Metadata version 1), keep one {@link TcpClient} per broker, and send
 * every partition's produce and fetch to its leader. On `not_leader`, `fenced_leader_epoch`,
 * `not_enough_replicas` or a lost connection it reads the metadata again and retries with
 * backoff until `retryTimeoutMs`.
 *
 * Works against a single node too: its metadata has no cluster, and every call goes to the
 * bootstrap broker.
 *
 * Retries and duplicates: a plain produce is retried only while it was certainly not stored
 * (refused before the leader appended it, or never sent); one whose answer was lost or that was
 * refused after the append (`details.may_be_stored`) fails, since a resend could store it twice.
 * Use {@link IdempotentProducer} with `router` for exactly-once appends: it keeps each batch's
 * sequence across retries, so a new leader answers a resent batch as a duplicate.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Errors } from "../broker/errors.ts";
import type {
  ClusterMetadata,
  CreateTopicRequest,
  ProduceResult,
  TopicDescription,
} from "../broker/types.ts";
import type { EntryBatch } from "../storage/record.ts";
import type { ListOffsetsResult, ListOffsetsResultV1 } from "../protocol/apis/list-offsets.ts";
import {
  type FetchOptions,
  type FetchResponse,
  TcpClient,
  type TcpClientOptions,
} from "./client.ts";
import { quote } from "../lib/quote.ts";
import { ClientError } from "./errors.ts";
import type { ProduceRecord } from "./records.ts";

/** What a producer or consumer needs to reach partition leaders (implemented by {@link ClusterClient}). */
export interface LeaderRouter {
  /** A connection to the current leader of the partition (the bootstrap broker on a single node). */
  leader(topic: string, partition: number): Promise<TcpClient>;
  /** Reads the metadata again (after a routing error). */
  refresh(): Promise<void>;
  /** The number of partitions of `topic`. */
  partitionCount(topic: string): Promise<number>;
  /** A connection to the broker coordinating consumer groups now (absent: groups stay where they are). */
  coordinator?(): Promise<TcpClient>;
}

/** Options of {@link ClusterClient.connect}. */
export interface ClusterClientOptions extends Omit<TcpClientOptions, "host" | "port"> {
  /** Brokers to ask for the metadata first, tried in order: `[{ host, port }, …]`. */
  bootstrap: { host: string; port: number }[];
  /** How long one call keeps retrying routing errors, in ms (default 30 000). */
  retryTimeoutMs?: number;
  /** Wait before the first retry, doubling up to 1 s (default 50 ms). */
  retryBackoffMs?: number;
  /** Called with the error before each retry (e.g. to tell a user why a call is taking long). */
  onRetry?: (err: unknown) => void;
}

/** Error codes after which the metadata is read again and the call retried. */
const routingCodes = new Set<string>([
  Errors.notLeader.code,
  Errors.fencedLeaderEpoch.code,
  Errors.notEnoughReplicas.code,
  "connection_closed",
  "timeout",
]);

/** Whether `err` means "ask the (new) leader again". */
export function isRoutingError(err: unknown): boolean {
  return err instanceof ClientError && routingCodes.has(err.code);
}

/**
 * Whether a produce that failed with `err` after it was sent may still have been stored: its
 * answer was lost (`connection_closed`, `timeout`), or the leader refused it after appending it
 * (`details.may_be_stored`: docs/cluster.md "What is guaranteed, and what is not").
 */
export function mayBeStored(err: unknown): boolean {
  return (
    err instanceof ClientError &&
    (err.code === "connection_closed" ||
      err.code === "timeout" ||
      err.details?.may_be_stored === true)
  );
}

/**
 * A broker address as the cluster advertises it, "host:port" or "[v6]:port".
 * @throws ClientError `invalid_response` for any other text (it came from a broker).
 */
export function parseHostPort(text: string): { host: string; port: number } {
  const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(text);
  if (m === null)
    throw ClientError.invalidResponse(`Cannot use broker address ${JSON.stringify(text)}`);
  return { host: m[1], port: Number(m[2]) };
}

/** `host:port`, `[v6]:port` for an IPv6 host. */
function formatHostPort(b: { host: string; port: number }): string {
  return b.host.includes(":") ? `[${b.host}]:${b.port}` : `${b.host}:${b.port}`;
}

/**
 * Why one bootstrap broker did not answer, short: the system's error code (`ECONNREFUSED`,
 * `ENOTFOUND`…) when the connect failed with one, else the message without its "Cannot connect
 * to host:port: " opening.
 */
function failureReason(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  const code = (cause as { code?: unknown } | undefined)?.code;
  if (typeof code === "string" && /^E[A-Z0-9_]+$/.test(code)) return code;
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(/^Cannot connect to \S+: /, "");
}

/** See the module comment. */
export class ClusterClient implements LeaderRouter {
  readonly #options: ClusterClientOptions;
  #metadata: ClusterMetadata | null = null;
  /** The broker the metadata came from (also every call's target on a single node). */
  #bootstrap: TcpClient;
  readonly #clients = new Map<number, Promise<TcpClient>>();
  #refreshing: Promise<void> | null = null;
  #closed = false;

  private constructor(options: ClusterClientOptions, bootstrap: TcpClient) {
    this.#options = options;
    this.#bootstrap = bootstrap;
  }

  /**
   * Connects to the first bootstrap broker that answers and reads the metadata. Each is tried
   * once, in order: the first connect is not retried.
   * @throws ClientError the first error no retry fixes (a refused key, a bad certificate) as
   *   that broker gave it; when none answers, the last error's code (`connection_closed`,
   *   `timeout`) with a message naming every broker tried and why ("none of 3 bootstrap brokers
   *   answered: 10.0.0.1:9092 (ECONNREFUSED), …"; one broker: its own error).
   */
  static async connect(options: ClusterClientOptions): Promise<ClusterClient> {
    if (options.bootstrap.length === 0)
      throw ClientError.fromKind(
        Errors.invalidRequest,
        "Cannot connect: no bootstrap broker given",
      );
    const failures: { address: string; error: unknown }[] = [];
    for (const b of options.bootstrap) {
      let client: TcpClient | null = null;
      try {
        client = await TcpClient.connect({ ...options, host: b.host, port: b.port });
        const cluster = new ClusterClient(options, client);
        await cluster.refresh();
        return cluster;
      } catch (err) {
        void client?.close().catch(() => {});
        if (!(err instanceof ClientError) || !err.retriable) throw err;
        failures.push({ address: formatHostPort(b), error: err });
      }
    }
    const last = failures[failures.length - 1].error as ClientError;
    if (failures.length === 1) throw last;
    const reasons = failures.map(({ address, error }) => `${address} (${failureReason(error)})`);
    throw new ClientError(
      last.code,
      last.tcp,
      last.retriable,
      `Cannot connect: none of ${failures.length} bootstrap brokers answered: ${reasons.join(", ")}`,
      { cause: last },
    );
  }

  /** The metadata last read (null on a single node). */
  get metadata(): ClusterMetadata | null {
    return this.#metadata;
  }

  /** Reads the metadata again from a live connection (the bootstrap broker, else any other). */
  refresh(): Promise<void> {
    this.#refreshing ??= this.#refresh().finally(() => (this.#refreshing = null));
    return this.#refreshing;
  }

  async #refresh(): Promise<void> {
    const candidates: (() => Promise<TcpClient>)[] = [async () => this.#bootstrap];
    for (const b of this.#metadata?.brokers ?? [])
      candidates.push(() => this.#clientFor(b.node_id));
    for (const b of this.#options.bootstrap)
      candidates.push(() => TcpClient.connect({ ...this.#options, host: b.host, port: b.port }));
    let last: unknown;
    for (const open of candidates) {
      try {
        const client = await open();
        if (client.closed) continue;
        const answer = await client.clusterMetadata();
        this.#metadata = answer.cluster;
        // The broker that answered serves metadata from now on (the old one failed).
        this.#bootstrap = client;
        // Connections to brokers that left the cluster are dropped.
        const live = new Set(this.#metadata?.brokers.map((b) => b.node_id) ?? []);
        for (const [id, c] of this.#clients)
          if (!live.has(id)) {
            this.#clients.delete(id);
            void c.then((x) => x.close()).catch(() => {});
          }
        return;
      } catch (err) {
        last = err;
      }
    }
    throw (
      last ?? ClientError.connectionClosed("Cannot read the cluster metadata: no broker answered")
    );
  }

  #clientFor(nodeId: number): Promise<TcpClient> {
    const existing = this.#clients.get(nodeId);
    if (existing !== undefined) {
      return existing.then((c) => {
        if (!c.closed) return c;
        this.#clients.delete(nodeId);
        return this.#clientFor(nodeId);
      });
    }
    const broker = this.#metadata?.brokers.find((b) => b.node_id === nodeId);
    if (broker === undefined)
      return Promise.reject(
        ClientError.fromKind(Errors.notLeader, `Cannot reach node ${nodeId}: it is not live`),
      );
    const opened = TcpClient.connect({ ...this.#options, ...parseHostPort(broker.tcp) });
    this.#clients.set(nodeId, opened);
    opened.catch(() => this.#clients.delete(nodeId));
    return opened;
  }

  /**
   * A connection to the leader of `topic`/`partition` as the metadata says (reads it again once
   * if the topic is unknown).
   * @throws ClientError `not_leader` while the partition has no leader, `topic_not_found`.
   */
  async leader(topic: string, partition: number): Promise<TcpClient> {
    if (this.#closed) throw ClientError.connectionClosed("Cannot send: the client is closed");
    if (this.#metadata === null) return this.#bootstrap;
    let t = this.#metadata.topics.find((x) => x.name === topic);
    if (t === undefined) {
      await this.refresh();
      if (this.#metadata === null) return this.#bootstrap;
      t = this.#metadata.topics.find((x) => x.name === topic);
    }
    if (t === undefined)
      throw ClientError.fromKind(
        Errors.topicNotFound,
        `Topic ${JSON.stringify(topic)} does not exist`,
      );
    const p = t.partitions.find((x) => x.partition === partition);
    if (p === undefined)
      throw ClientError.fromKind(
        Errors.partitionNotFound,
        `Partition ${partition} of topic ${JSON.stringify(topic)} does not exist`,
      );
    if (p.leader === -1)
      throw ClientError.fromKind(
        Errors.notLeader,
        `Cannot reach the leader of ${topic}/${partition}: it has none now`,
      );
    return this.#clientFor(p.leader);
  }

  /** The number of partitions of `topic` (from the metadata). @throws ClientError `topic_not_found`. */
  async partitionCount(topic: string): Promise<number> {
    const [d] = await this.withRetries(async () => (await this.#anyClient()).metadata([topic]));
    return d.partitions.length;
  }

  /** A connection to some live broker (for requests any broker answers: topics, metadata). */
  any(): Promise<TcpClient> {
    return this.#anyClient();
  }

  async #anyClient(): Promise<TcpClient> {
    if (!this.#bootstrap.closed) return this.#bootstrap;
    await this.refresh();
    return this.#bootstrap;
  }

  /**
   * Runs `fn` until it succeeds, reading the metadata again and backing off after each routing
   * error, until `retryTimeoutMs`. Other errors reject at once.
   */
  async withRetries<T>(
    fn: () => Promise<T>,
    retriable: (err: unknown) => boolean = isRoutingError,
  ): Promise<T> {
    const deadline = Date.now() + (this.#options.retryTimeoutMs ?? 30_000);
    const base = this.#options.retryBackoffMs ?? 50;
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (!retriable(err) || Date.now() >= deadline || this.#closed) throw err;
        this.#options.onRetry?.(err);
        await sleep(Math.min(1000, base * 2 ** Math.min(attempt, 10)));
        await this.refresh().catch(() => {});
      }
    }
  }

  /**
   * Produces to one partition through its leader, retried (as the module comment says) only
   * while the batch was certainly not stored: a refusal before the leader appended it, or no
   * connection to the leader. A batch whose answer was lost (the connection closed or the request
   * timed out after it was sent) or that the leader refused after appending it
   * (`details.may_be_stored`, e.g. `not_enough_replicas` once the ISR shrank) is not sent again:
   * it may be stored, and a second copy would be a duplicate. Use {@link IdempotentProducer} to
   * resend such batches safely. `options.partition` is required (docs/client.md
   * "`ClusterClient`"): each partition has its own leader, so the client cannot leave the choice
   * to a broker as with one broker (−1).
   * @throws ClientError `invalid_request` without a partition number (at once, nothing sent); as
   *   {@link TcpClient.produce}.
   */
  produce(
    topic: string,
    records: readonly ProduceRecord[] | EntryBatch,
    options: { partition: number },
  ): Promise<ProduceResult> {
    const partition: unknown = options?.partition;
    if (typeof partition !== "number" || !Number.isInteger(partition) || partition < 0)
      return Promise.reject(
        ClientError.fromKind(
          Errors.invalidRequest,
          `Cannot produce to topic ${JSON.stringify(topic)} through ClusterClient: the partition option is required (got ${partition === undefined ? "none" : quote(partition)}): each partition has its own leader; pick one by key (murmur2(key) % partitions, as a broker does) or round robin over partitionCount(topic)`,
        ),
      );
    let sent = false;
    return this.withRetries(
      async () => {
        const leader = await this.leader(topic, options.partition);
        sent = !leader.closed;
        return leader.produce(topic, records, options);
      },
      (err) => isRoutingError(err) && !(sent && mayBeStored(err)),
    );
  }

  /** Fetches from one partition's leader. @throws ClientError as {@link TcpClient.fetch}. */
  fetch(request: FetchOptions): Promise<FetchResponse> {
    return this.withRetries(async () =>
      (await this.leader(request.topic, request.partition)).fetch(request),
    );
  }

  /** Bounds of one partition, from its leader. */
  listOffsets(request: { topic: string; partition: number }): Promise<ListOffsetsResult> {
    return this.withRetries(async () =>
      (await this.leader(request.topic, request.partition)).listOffsets(request),
    );
  }

  /**
   * The first offset of a partition whose record timestamp is at or after `timestampMs`, with its
   * bounds, from its leader ({@link TcpClient.offsetForTimestamp}).
   */
  offsetForTimestamp(request: {
    topic: string;
    partition: number;
    timestampMs: number;
  }): Promise<ListOffsetsResultV1> {
    return this.withRetries(async () =>
      (await this.leader(request.topic, request.partition)).offsetForTimestamp(request),
    );
  }

  /** Creates a topic (any broker writes it to the cluster); reads the metadata again after. */
  async createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
    const created = await this.withRetries(async () =>
      (await this.#anyClient()).createTopic(request),
    );
    await this.refresh().catch(() => {});
    return created;
  }

  /**
   * The broker for a consumer group's requests: the controller in a cluster (every member
   * must reach the same broker: group state is not replicated, docs/cluster.md), else the
   * bootstrap broker.
   */
  async coordinator(): Promise<TcpClient> {
    return this.withRetries(async () => {
      const controller = this.#metadata?.controller ?? -1;
      if (this.#metadata === null) return this.#anyClient();
      if (controller === -1)
        throw ClientError.fromKind(
          Errors.notLeader,
          "Cannot reach the group coordinator: the cluster has no controller now",
        );
      return this.#clientFor(controller);
    });
  }

  /** Closes every connection. */
  async close(): Promise<void> {
    this.#closed = true;
    const all = await Promise.allSettled([...this.#clients.values()]);
    await Promise.all([
      this.#bootstrap.close(),
      ...all.map((r) => (r.status === "fulfilled" ? r.value.close() : undefined)),
    ]);
  }
}
