/**
 * The broker over one data directory: {@link LocalBroker} implements the {@link Broker} interface
 * the transports call by composing the services that hold the state — the topic registry
 * (`broker/topics.ts`), produce routing (`broker/produce-routing.ts`, pure), idempotent producer
 * state (`broker/producers/`), consumer groups (`broker/groups.ts`) and retention and compaction
 * (`broker/cleanup.ts`) and the schema registry (`registry/`, whose checks produce applies to
 * topics that name a subject) — and serves fetch with long-poll itself. Every error it throws is
 * a {@link BrokerError} with a row of the error table.
 */
import type { ColdStore } from "../storage/cold-objects.ts";
import { onAbort } from "../lib/abort.ts";
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { type Metrics, noMetrics } from "../lib/metrics.ts";
import {
  cleanupIntervalMsDefault,
  fetchBytesDefault,
  fetchBytesMax,
  fetchRecordsDefault,
  fetchRecordsMax,
  fetchWaitMsMax,
  producerExpiryMsDefault,
} from "../lib/limits.ts";
import { quote } from "../lib/quote.ts";
import { plural } from "../lib/text.ts";
import type { FileSystem } from "../fs/types.ts";
import type { PartitionLog, PartitionRead } from "../storage/partition.ts";
import { removeMetadataTemps } from "../storage/leftovers.ts";
import { LeaderEpochHistory } from "../storage/leader-epochs.ts";
import {
  RecordFormatError,
  checkEntryTimestamps,
  stampBrokerTime,
  type EntryBatch,
} from "../storage/record.ts";
import { CleanupService, type PartitionCleanup } from "./cleanup.ts";
import { BrokerError, Errors } from "./errors.ts";
import { GroupCoordinator } from "./groups.ts";
import { routeRecords, spansInRequestOrder, splitByPartition } from "./produce-routing.ts";
import { settleSink } from "./produce-sink.ts";
import { ProducerStates } from "./producers/state.ts";
import type { ReplicationSeam } from "./replication.ts";
import { StreamService } from "./streams/service.ts";
import { toBrokerError } from "./storage-failure.ts";
import { PartitionTails } from "./tail.ts";
import {
  TopicRegistry,
  type PartitionObservation,
  type RecoveryProgress,
  type Topic,
} from "./topics.ts";
import { RegistryError } from "../registry/errors.ts";
import { type RecordRules, SchemaRegistry } from "../registry/registry.ts";
import { DiskReserve, type DiskReserveState } from "../storage/disk-reserve.ts";
import type {
  AssignedJoinRequest,
  AssignedJoinResult,
  AssignedSyncRequest,
  Broker,
  CommitOffsetsRequest,
  CreateTopicRequest,
  GroupAssignment,
  GroupDescription,
  GroupTopicsView,
  HeartbeatResult,
  JoinGroupRequest,
  FetchRequest,
  FetchResult,
  ProduceRequest,
  ProduceResult,
  ProduceSink,
  ReplicaFetchRequest,
  ReplicaFetchResult,
  TopicConfig,
  TopicDescription,
} from "./types.ts";

/** Options of {@link LocalBroker.open}. */
export interface LocalBrokerOptions {
  fs: FileSystem;
  /** Root of the data directory (created 0700 if missing). */
  dataDir: string;
  clock: Clock;
  logger: Logger;
  /** Records per fsync (`--flush-every-records`); 1, the default, acknowledges only durable data. */
  flushEveryRecords?: number;
  /** Longest wait for an fsync with flushEveryRecords > 1, in ms (`--flush-interval`). */
  flushIntervalMs?: number;
  /**
   * Sealed segments whose files stay open at most, over every partition (`--max-open-segments`,
   * docs/storage.md "Index and reads"); default 256.
   */
  maxOpenSegments?: number;
  /** Root of the cold tier (`--cold-storage-dir`); without it retention deletes segments outright. */
  coldStorageDir?: string;
  /** The cold tier's object store (`--cold-storage s3://…`, built by the CLI); wins over `coldStorageDir`. */
  coldStore?: ColdStore;
  /** Memory for chunks of cold objects read, in bytes (`--cold-cache-bytes`, default 64 MiB). */
  coldCacheBytes?: number;
  /** Upload rate cap to the cold tier, in bytes/s (`--cold-upload-bytes-per-sec`; 0 = none). */
  coldUploadBytesPerSec?: number;
  /** Period of the retention and of the compaction task, in ms (`--cleanup-interval-ms`, default 30 000; 0 = no background tasks). */
  cleanupIntervalMs?: number;
  /** Most distinct keys one compaction pass remembers (default `compactionKeysMax`; tests lower it). */
  compactionKeysMax?: number;
  /** Idle time after which an idempotent producer's state is forgotten, in ms (`--producer-expiry-ms`, default 7 days). */
  producerExpiryMs?: number;
  /** Most idempotent producer ids kept; past it the least recently active idle one is forgotten (`--producer-ids-max`, default 20 000). */
  producerIdsMax?: number;
  /**
   * This broker's node id in a cluster (`--node-id`; 0 alone): the low 10 bits of every Kafka
   * producer id it hands out (`initProducerId`), so brokers of one cluster whose node ids differ
   * modulo 1024 never hand out the same id (docs/kafka.md "Idempotent producers").
   */
  nodeId?: number;
  /**
   * Where storage and broker count (fsyncs, cleanup passes; `lib/metrics.ts`); a deleted
   * topic's series are forgotten. Default {@link noMetrics}.
   */
  metrics?: Metrics;
  /** Filled in as recovery goes (`GET /readyz`); `phase` is "done" once `open` resolves. */
  progress?: RecoveryProgress;
  /**
   * Size of the data directory's disk reserve in bytes (`storage/disk-reserve.ts`, docs/storage.md
   * "Full disk"); default `diskReserveBytesDefault` (1 MiB), 0 = none.
   */
  diskReserveBytes?: number;
}

/** `disk` of `GET /v1/admin/storage` (docs/storage.md "Full disk"). */
export interface DiskDescription {
  /** Bytes the broker can still write on the data directory's file system, or null if unknown. */
  free_bytes: number | null;
  /** Size of that file system in bytes, or null if unknown. */
  total_bytes: number | null;
  /** The disk reserve, or null before it is set up. */
  reserve: DiskReserveState | null;
}

/** The broker's state for the metrics exposition ({@link LocalBroker.observe}). */
export interface BrokerObservation {
  /** Every consumer group, read before the partitions (so a committed offset never exceeds the high watermark read after it). */
  groups: GroupDescription[];
  partitions: PartitionObservation[];
  /** Topics on disk that cannot be served, groups that could not be loaded. */
  unavailableTopics: number;
  unavailableGroups: number;
  /**
   * The data directory's file system: free bytes (for the broker's user) and size, or null when
   * the file system cannot say (docs/operations.md "Full disk"); absent while shutting down.
   */
  dataDir?: { freeBytes: number; totalBytes: number } | null;
  /** Whether the disk reserve is given up now (appends refused; docs/storage.md "Full disk"). */
  diskReserveGivenUp?: boolean;
  /** Idempotent producer ids with state, and those forgotten by `--producer-ids-max` since start. */
  producers?: { ids: number; evicted: number };
}

/**
 * Waits for replication to commit records this leader has appended (cluster mode). A refusal now
 * (`not_enough_replicas`, `not_leader`, a lost lease, ...) comes after the append: the records are
 * in the leader's log, unacknowledged, and may still be committed (the ISR grows back) or be
 * truncated (a new leader). The error says so, in its message and in `details.may_be_stored`
 * (docs/cluster.md "What is guaranteed, and what is not"), so a client that does not resend
 * idempotently knows a resend may store them twice; a refusal before the append (the leader
 * check) has no such mark.
 * Kafka answers the same case NOT_ENOUGH_REPLICAS_AFTER_APPEND.
 */
async function afterAppend(committed: Promise<void> | null): Promise<void> {
  if (committed === null) return;
  try {
    await committed;
  } catch (err) {
    if (!(err instanceof BrokerError)) throw err;
    throw new BrokerError(
      err.kind,
      `${err.message}; the records were appended on the leader before this and are not acknowledged: they may be stored (a resend with the same producer id and sequence is answered as a duplicate)`,
      { ...err.details, may_be_stored: true },
    );
  }
}

/** The broker over one data directory. See the module comment. */
export class LocalBroker implements Broker {
  #clock: Clock;
  /** The clock's `nowMs`, read only when a produce's records carry timestamps of their own. */
  readonly #clockNowMs = (): number => this.#clock.nowMs();
  /** Shared tail reads and coalesced long-poll wake-ups (`tail.ts`). */
  #tails: PartitionTails;
  #closed = false;
  #cleanup: CleanupService;
  /** The topics (`broker/topics.ts`); opened first. */
  #topics!: TopicRegistry;
  /** Consumer groups (`broker/groups.ts`); opened after the topics. */
  #groups!: GroupCoordinator;
  /** Cluster mode's view of the partitions groups may commit (see {@link useGroupTopics}). */
  #groupTopics: GroupTopicsView | null = null;
  /** Idempotent producer state (`broker/producers/`); opened after the topics. */
  #producers!: ProducerStates;
  /** The schema registry (`registry/`): `<dataDir>/schemas.json`. */
  #registry!: SchemaRegistry;
  /** Durable Streams (`broker/streams/`); opened last, null until then. */
  #streams: StreamService | null = null;
  /** The clock slot (ms) of the last id {@link initProducerId} handed out. */
  #lastProducerIdSlot = 0;
  /** The low 10 bits of every id {@link initProducerId} hands out (`LocalBrokerOptions.nodeId`). */
  #producerIdNode = 0;
  /** Replication (cluster mode, `broker/replication.ts`); null in single-node mode. */
  #replication: ReplicationSeam | null = null;

  /** The data directory's file system (the leader-epoch histories are read through it). */
  #fs: FileSystem;
  /** The data directory's disk reserve (docs/storage.md "Full disk"); made at the end of `open`. */
  #reserve: DiskReserve | null = null;
  #dataDir: string;
  /** The data directory's space at the last look ({@link LocalBroker.describeStorage}). */
  #space: { freeBytes: number; totalBytes: number } | null = null;

  private constructor(options: LocalBrokerOptions) {
    this.#clock = options.clock;
    this.#fs = options.fs;
    this.#dataDir = options.dataDir;
    this.#producerIdNode = (options.nodeId ?? 0) % 1024;
    this.#tails = new PartitionTails(options.clock);
    this.#cleanup = new CleanupService({
      fs: options.fs,
      clock: options.clock,
      logger: options.logger,
      coldStorageDir: options.coldStorageDir,
      coldStore: options.coldStore,
      coldCacheBytes: options.coldCacheBytes,
      coldUploadBytesPerSec: options.coldUploadBytesPerSec,
      intervalMs: options.cleanupIntervalMs ?? cleanupIntervalMsDefault,
      compactionKeysMax: options.compactionKeysMax,
      metrics: options.metrics,
    });
  }

  /**
   * Opens the data directory and recovers every topic (docs/storage.md "Recovery after a crash"), then the
   * consumer groups and the producer state, and starts the background cleanup.
   * @throws FsError if the data directory itself cannot be created or read.
   */
  static async open(options: LocalBrokerOptions): Promise<LocalBroker> {
    const broker = new LocalBroker(options);
    const metrics = options.metrics ?? noMetrics;
    const progress = options.progress;
    const topics = await TopicRegistry.open({
      // The reserve is made once the data directory's leftovers are gone (below).
      diskReserve: {
        appendRefusal: (partition) => broker.#reserve?.appendRefusal(partition) ?? null,
      },
      metrics,
      progress,
      fs: options.fs,
      dataDir: options.dataDir,
      clock: options.clock,
      logger: options.logger,
      flushEveryRecords: options.flushEveryRecords ?? 1,
      flushIntervalMs: options.flushIntervalMs ?? 1000,
      maxOpenSegments: options.maxOpenSegments,
      cleanup: broker.#cleanup,
      checkOpen: () => broker.#checkOpen(),
      forgetTopic: async (name) => {
        metrics.forgetTopic(name);
        broker.#streams?.forgetTopic(name);
        await broker.#groups.forgetTopic(name);
        await broker.#producers.forgetTopic(name);
      },
    });
    broker.#topics = topics;
    if (progress !== undefined) progress.phase = "groups";
    // Groups and producer state reconcile with the recovered logs, so they open after the topics
    // and before anything (cleanup included) can change a log.
    broker.#groups = await GroupCoordinator.open({
      fs: options.fs,
      dataDir: options.dataDir,
      clock: options.clock,
      logger: options.logger,
      topics: {
        partitions: (topic) => {
          const local = () => topics.get(topic).partitions;
          return broker.#groupTopics === null ? local() : broker.#groupTopics(topic, local);
        },
      },
    });
    if (progress !== undefined) progress.phase = "producers";
    broker.#producers = await ProducerStates.open({
      fs: options.fs,
      dataDir: options.dataDir,
      clock: options.clock,
      logger: options.logger,
      expiryMs: options.producerExpiryMs ?? producerExpiryMsDefault,
      ...(options.producerIdsMax === undefined ? {} : { idsMax: options.producerIdsMax }),
      partitions: { get: (topic, partition) => topics.lookup(topic, partition) },
    });
    // The data directory holds producers.json: temps of its interrupted writes go now.
    await removeMetadataTemps(options.fs, options.dataDir, options.logger);
    broker.#reserve = await DiskReserve.open({
      fs: options.fs,
      dataDir: options.dataDir,
      clock: options.clock,
      logger: options.logger,
      bytes: options.diskReserveBytes,
    });
    broker.#registry = await SchemaRegistry.open({
      fs: options.fs,
      dataDir: options.dataDir,
      logger: options.logger,
    });
    broker.#streams = await StreamService.open({
      topics,
      producers: broker.#producers,
      produce: (request) => broker.#produce(request),
      fetch: (request) => broker.fetch(request),
      clock: options.clock,
      logger: options.logger,
    });
    await broker.#refreshSpace();
    broker.#cleanup.start();
    if (progress !== undefined) progress.phase = "done";
    return broker;
  }

  /**
   * Installs replication (cluster mode; `broker/replication.ts`): from now on produce and fetch
   * serve only partitions this broker leads, produce acknowledges only committed records, and
   * reads stop at the high watermark. Single-node mode never calls it.
   */
  setReplication(seam: ReplicationSeam): void {
    this.#replication = seam;
  }

  /**
   * The log of one partition, for replication (`cluster/`): the leader reads it for followers, a
   * follower appends to it.
   * @throws BrokerError topic_not_found, partition_not_found, unavailable.
   */
  partitionLog(topic: string, partition: number): PartitionLog {
    return this.#topics.partition(this.#topics.get(topic), partition);
  }

  /**
   * Reads one partition's leader-epoch history (cluster mode; `storage/leader-epochs.ts`).
   * @throws BrokerError topic_not_found, partition_not_found; StorageError "invalid" for an
   *   unreadable history file.
   */
  openLeaderEpochHistory(topic: string, partition: number): Promise<LeaderEpochHistory> {
    const log = this.partitionLog(topic, partition);
    return LeaderEpochHistory.load(this.#fs, log.dir, log.logEndOffset);
  }

  /**
   * A topic's config as it is now (cluster mode reads `replica_lag_ms` from it).
   * @throws BrokerError topic_not_found, unavailable.
   */
  topicConfig(name: string): TopicConfig {
    return this.#topics.get(name).config;
  }

  /**
   * Every open partition's log end offset as far as its records are whole, keyed
   * "topic/partition" (cluster mode: published in `log_ends` for leader eligibility, docs/cluster.md
   * "Controller"). A partition whose recovery found a corrupt segment counts only up to that
   * segment's base offset: the records recovery skipped are missing below its log end, so this
   * copy does not hold what came after them either (field failures #27d).
   */
  logEndOffsets(): Map<string, number> {
    const out = new Map<string, number>();
    for (const p of this.#topics.observePartitions()) {
      const corrupt = this.partitionLog(p.topic, p.partition).firstCorruptSegmentOffset;
      out.set(
        `${p.topic}/${p.partition}`,
        corrupt === null ? p.logEndOffset : Math.min(corrupt, p.logEndOffset),
      );
    }
    return out;
  }

  /**
   * Serves a follower's replica fetch through the installed replication (api 14).
   * @throws BrokerError unsupported_api without replication; see `Broker.replicaFetch`.
   */
  async replicaFetch(request: ReplicaFetchRequest): Promise<ReplicaFetchResult> {
    this.#checkOpen();
    if (this.#replication === null)
      throw new BrokerError(
        Errors.unsupportedApi,
        "Cannot serve a replica fetch: this broker does not run in cluster mode",
      );
    return this.#replication.replicaFetch(request);
  }

  #checkOpen(): void {
    if (this.#closed)
      throw new BrokerError(
        Errors.unavailable,
        "Cannot serve the request: the broker is shutting down",
      );
  }

  async createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
    return this.#topics.create(request);
  }

  async listTopics(): Promise<TopicDescription[]> {
    return this.#topics.list();
  }

  async describeTopic(name: string): Promise<TopicDescription> {
    return this.#topics.describe(this.#topics.get(name));
  }

  /**
   * Deletes a topic; see {@link TopicRegistry.delete}. A Durable Stream's topic is deleted as the
   * stream is (`StreamService.deleteTopic`: softly while forks read it).
   */
  async deleteTopic(name: string): Promise<void> {
    if (this.#streams?.isStream(name)) return this.#streams.deleteTopic(name);
    return this.#topics.delete(name);
  }

  /** The Durable Streams of this broker (`broker/streams/`, docs/durable-streams.md). */
  get streams(): StreamService {
    if (this.#streams === null)
      throw new BrokerError(Errors.unavailable, "Cannot serve streams: the broker is not open");
    return this.#streams;
  }

  /**
   * Changes a topic's config (`PATCH /v1/topics/{topic}`); see {@link TopicRegistry.updateConfig}.
   * @throws BrokerError topic_not_found, unavailable, invalid_config, storage_error.
   */
  async updateTopicConfig(name: string, patch: unknown): Promise<TopicDescription> {
    return this.#topics.updateConfig(name, patch);
  }

  /**
   * The cluster topic id a topic's `topic.json` records (docs/cluster.md "Topic ids"), or
   * undefined for none; replica fetches carry and compare it.
   * @throws BrokerError topic_not_found, unavailable.
   */
  topicId(name: string): string | undefined {
    return this.#topics.get(name).topicId;
  }

  /**
   * The create revision of the etcd record the local copy of cluster topic `name` was made from
   * (`topic_revision` in topic.json; docs/cluster.md "Topic ids"), undefined for none.
   * @throws BrokerError topic_not_found.
   */
  topicRevision(name: string): number | undefined {
    return this.#topics.get(name).topicRevision;
  }

  /**
   * Records a local copy's cluster topic id (docs/cluster.md "Topic ids"); see
   * {@link TopicRegistry.setTopicId}.
   * @throws BrokerError topic_not_found, unavailable, storage_error; internal for another id.
   */
  async setTopicId(
    name: string,
    topicId: string,
    topicRevision?: number,
    replacing?: string,
  ): Promise<void> {
    return this.#topics.setTopicId(name, topicId, topicRevision, replacing);
  }

  /**
   * Appends a request's records: routed by `broker/produce-routing.ts` after every named
   * partition is checked (all or nothing), one append per partition; an idempotent request goes
   * through the producer state (`broker/producers/`) and must land in one partition.
   */
  produce(request: ProduceRequest): Promise<ProduceResult> {
    const streams = this.#streams;
    if (streams?.isStream(request.topic)) {
      // A stream's topic takes records only through its gate: never after its final record.
      return streams.guard(request.topic, () => this.#produce(request));
    }
    return this.#produce(request);
  }

  /**
   * `Broker.produceTo`: {@link produce} answered through `sink`. The common request (one
   * partition, not idempotent, no replication, not a stream's topic) goes to the partition's
   * `appendTo` with the sink itself (no promise); any other is {@link produce}'s promise settling it.
   */
  produceTo(request: ProduceRequest, sink: ProduceSink): void {
    if (this.#streams?.isStream(request.topic)) return settleSink(this.produce(request), sink);
    let response: Promise<ProduceResult> | undefined;
    try {
      response = this.#produceWith(request, false, sink);
    } catch (err) {
      return sink.failed(err);
    }
    if (response !== undefined) settleSink(response, sink);
  }

  /**
   * {@link produce} without the stream gate (the stream service calls it inside the gate). Not
   * async: the common request (one partition, not idempotent) is one promise from the partition's
   * append with one reaction, rather than a chain of async frames each adopting the next.
   */
  #produce(request: ProduceRequest): Promise<ProduceResult> {
    try {
      return this.#produceNow(request);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * The body of {@link #produce}: checks throw synchronously, the append answers by the promise.
   * `synced`: the registry was brought up to date for this request already (its second pass).
   */
  #produceNow(request: ProduceRequest, synced = false): Promise<ProduceResult> {
    return this.#produceWith(request, synced, undefined)!;
  }

  /**
   * {@link #produceNow}; with `sink`, a request of the common kind (`produceTo`) is handed to the
   * partition with the sink and undefined returned, any other answered by the promise returned.
   */
  #produceWith(
    request: ProduceRequest,
    synced: boolean,
    sink: ProduceSink | undefined,
  ): Promise<ProduceResult> | undefined {
    const topic = this.#topics.get(request.topic);
    const batch = request.batch;
    // log_append_time: the producer's clock is not used at all, so neither checked.
    if (topic.config.timestamp_type === "log_append_time") stampBrokerTime(batch);
    else
      try {
        checkEntryTimestamps(batch, this.#clockNowMs, topic.config.max_timestamp_skew_ms);
      } catch (err) {
        if (err instanceof RecordFormatError)
          throw new BrokerError(
            Errors.invalidTimestamp,
            `Cannot produce to topic "${topic.name}": ${err.message}`,
          );
        throw err;
      }
    const recheck = this.#checkSchemas(topic, batch, synced);
    // A registry shared by a cluster may not have seen a schema registered on another broker.
    if (recheck !== undefined) return recheck.then(() => this.#produceNow(request, true));
    const partition = request.partition ?? -1;
    if (partition !== -1) this.#topics.partition(topic, partition);
    const perRecord = request.partitions;
    if (perRecord !== undefined && perRecord.length !== batch.count) {
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot produce to topic "${topic.name}": ${plural(perRecord.length, "partition")} given for ${plural(batch.count, "record")}`,
      );
    }
    if (perRecord !== undefined)
      for (const p of perRecord) if (p !== -1) this.#topics.partition(topic, p);
    if (batch.count === 0) return Promise.resolve({ spans: [] });
    const producer = request.producer;
    const routed = routeRecords(batch, {
      partitionCount: topic.partitions.length,
      partition,
      partitions: perRecord,
      producerId: producer === undefined ? undefined : String(producer.id),
      roundRobin: topic.roundRobin,
    });
    topic.roundRobin = routed.roundRobin;
    const route = routed.route;
    const replication = this.#replication;
    // Cluster mode: each partition's leadership fence, checked again in its write loop.
    let fences: Map<number, () => void> | undefined;
    if (replication !== null) {
      fences = new Map();
      const targets = route.kind === "single" ? [route.partition] : new Set(route.assignment);
      for (const p of targets) fences.set(p, replication.admitWrite(topic.name, p));
    }

    if (producer !== undefined) {
      if (route.kind !== "single") {
        throw new BrokerError(
          Errors.invalidRequest,
          `Cannot produce idempotently to topic "${topic.name}": every record of an idempotent request must go to one partition, but these go to several`,
          { field: "partition" },
        );
      }
      return this.#produceIdempotent(
        topic,
        route.partition,
        producer,
        batch,
        replication,
        fences?.get(route.partition),
      );
    }

    // Returned, not awaited: a suspended async function keeps its locals alive, and the batch
    // (and the request frame or HTTP body it points into) would then live until the fsync
    // instead of until the partition has written it.
    if (route.kind === "single") {
      const single = route.partition;
      if (replication !== null)
        return this.#append(topic, single, batch, fences?.get(single)).then((r) =>
          this.#committed(replication, topic.name, single, r),
        );
      // The sink hears the partition's answer itself; a storage error reaches it unmapped.
      if (sink !== undefined) {
        topic.partitions[single].appendTo(batch, sink, single);
        return undefined;
      }
      return topic.partitions[single].append(batch).then(
        (r) => ({ spans: [{ partition: single, baseOffset: r.baseOffset, count: r.count }] }),
        (err: unknown) => {
          throw toBrokerError(err);
        },
      );
    }

    const batches = splitByPartition(batch, route.assignment, topic.partitions.length);
    const assignment = route.assignment;
    return Promise.all(
      batches.map((b, p) => {
        if (b === null) return Promise.resolve(null);
        const appended = this.#append(topic, p, b, fences?.get(p));
        if (replication === null) return appended;
        return appended.then(async (r) => {
          await afterAppend(replication.awaitCommitted(topic.name, p, r.baseOffset + r.count));
          return r;
        });
      }),
    ).then((results) => ({
      spans: spansInRequestOrder(
        assignment,
        results.map((r) => (r === null ? 0 : r.baseOffset)),
      ),
    }));
  }

  /**
   * An idempotent request's append (`broker/producers/`), acknowledged once committed in cluster
   * mode; `admit` is the partition's leadership fence there.
   */
  async #produceIdempotent(
    topic: Topic,
    partition: number,
    producer: NonNullable<ProduceRequest["producer"]>,
    batch: EntryBatch,
    replication: ReplicationSeam | null,
    admit: (() => void) | undefined,
  ): Promise<ProduceResult> {
    let result: ProduceResult;
    try {
      result = await this.#producers.produce({
        producer,
        topic: topic.name,
        partition,
        log: topic.partitions[partition],
        batch,
        admit,
      });
    } catch (err) {
      throw toBrokerError(err);
    }
    if (replication !== null) {
      // A duplicate too: its records may not be committed yet (the first try was not acknowledged).
      let end = 0;
      for (const span of result.spans) end = Math.max(end, span.baseOffset + span.count);
      await afterAppend(replication.awaitCommitted(topic.name, partition, end));
    }
    return result;
  }

  /**
   * Checks every record against the schema subjects the topic's config names, if any
   * (docs/registry.md "Produce-time validation"): a request with one bad record appends none.
   * A registry shared by a cluster (`SchemaRegistry.shared`) that refuses a record is first
   * brought up to date (`sync`, one etcd read) unless `synced`: the promise returned then asks
   * the caller to check again, so a schema registered on another broker is never refused.
   * @throws BrokerError invalid_record naming the record, schema id, version and path;
   *   unavailable when the registry cannot be read (produces fail closed).
   */
  #checkSchemas(topic: Topic, batch: EntryBatch, synced: boolean): Promise<void> | undefined {
    const config = topic.config;
    if (config.value_schema_subject === undefined && config.key_schema_subject === undefined)
      return;
    const format = config.schema_format ?? "confluent";
    const rules: RecordRules = {};
    if (config.value_schema_subject !== undefined)
      rules.value = { subject: config.value_schema_subject, format };
    if (config.key_schema_subject !== undefined)
      rules.key = { subject: config.key_schema_subject, format };
    let rejection: ReturnType<SchemaRegistry["checkBatch"]>;
    try {
      rejection = this.#registry.checkBatch(batch, rules);
    } catch (err) {
      if (err instanceof RegistryError)
        throw new BrokerError(
          Errors.unavailable,
          `Cannot produce to topic "${topic.name}": its records cannot be checked: ${err.message}`,
        );
      throw err;
    }
    if (rejection === null) return;
    if (!synced && this.#registry.shared) return this.#registry.sync();
    const r = rejection;
    const schema =
      r.schemaId === null
        ? ""
        : ` (schema id ${r.schemaId}${r.version === null ? "" : `, version ${r.version}`})`;
    // details.path is a JSON Pointer, "" for the whole value; the message says the same in words.
    const path = r.path === null ? "" : r.path === "" ? " (the whole value)" : ` at "${r.path}"`;
    throw new BrokerError(
      Errors.invalidRecord,
      `Cannot produce to topic "${topic.name}": record ${r.recordIndex} ${r.part} does not match subject "${r.subject}"${schema}${path}: ${r.reason}; nothing was appended`,
      {
        record_index: r.recordIndex,
        part: r.part,
        subject: r.subject,
        schema_id: r.schemaId,
        version: r.version,
        path: r.path,
      },
    );
  }

  /** The schema registry of this data directory, or of the cluster (its HTTP routes: `transport/http/registry/`). */
  get registry(): SchemaRegistry {
    return this.#registry;
  }

  /**
   * Cluster mode: every produce check and registry request uses `registry` (kept in etcd,
   * `cluster/cluster-registry.ts`) from now on; the data directory's own registry is closed.
   * Call before the front doors open.
   */
  async useRegistry(registry: SchemaRegistry): Promise<void> {
    const local = this.#registry;
    this.#registry = registry;
    await local.close();
  }

  /** The single-partition answer once replication has committed the records (cluster mode). */
  async #committed(
    replication: ReplicationSeam,
    topic: string,
    partition: number,
    r: { baseOffset: number; count: number },
  ): Promise<ProduceResult> {
    await afterAppend(replication.awaitCommitted(topic, partition, r.baseOffset + r.count));
    return { spans: [{ partition, baseOffset: r.baseOffset, count: r.count }] };
  }

  /**
   * Appends `batch` to one partition; storage errors become BrokerErrors. `admit`: cluster mode's
   * leadership fence, run in the write loop. Not async, so nothing here holds the batch until its
   * fsync.
   */
  #append(
    topic: Topic,
    partition: number,
    batch: EntryBatch,
    admit: (() => void) | undefined,
  ): Promise<{ baseOffset: number; count: number }> {
    const log = topic.partitions[partition];
    const appended = admit === undefined ? log.append(batch) : log.append(batch, { admit });
    return appended.catch((err: unknown) => {
      throw toBrokerError(err);
    });
  }

  async fetch(request: FetchRequest): Promise<FetchResult> {
    const topic = this.#topics.get(request.topic);
    const log = this.#topics.partition(topic, request.partition);
    const offset = checkInteger("offset", request.offset, 0, Number.MAX_SAFE_INTEGER, 0);
    const maxRecords = checkInteger(
      "max_records",
      request.maxRecords,
      1,
      fetchRecordsMax,
      fetchRecordsDefault,
    );
    const maxBytes = checkInteger(
      "max_bytes",
      request.maxBytes,
      1,
      fetchBytesMax,
      fetchBytesDefault,
    );
    const waitMs = checkInteger("wait_ms", request.waitMs, 0, fetchWaitMsMax, 0);
    const replication = this.#replication;
    if (replication !== null) {
      replication.checkLeader(topic.name, request.partition);
      return this.#fetchCommitted(replication, topic.name, request.partition, log, {
        offset,
        maxRecords,
        maxBytes,
        waitMs,
        signal: request.signal,
      });
    }
    try {
      const tails = this.#tails;
      const highWatermark = log.highWatermark;
      const mayWait =
        waitMs > 0 &&
        !log.closed &&
        !log.fenced &&
        offset >= log.logStartOffset &&
        !request.signal?.aborted;
      // What a read at `offset` gives when the partition closes during a long-poll: nothing yet.
      const nothingYet = (): PartitionRead => ({
        bytes: new Uint8Array(0),
        count: 0,
        nextOffset: offset,
        highWatermark: log.highWatermark,
        logStartOffset: log.logStartOffset,
      });
      let result: PartitionRead;
      if (mayWait && offset === highWatermark) {
        // Nothing to read yet: wait before reading rather than read nothing first.
        await tails.wait(log, offset, waitMs, request.signal);
        result = log.closed
          ? nothingYet()
          : await tails.read(log, { offset, maxRecords, maxBytes });
      } else if (
        mayWait &&
        offset < highWatermark &&
        highWatermark - offset < maxRecords &&
        tails.busy(log)
      ) {
        // A long-poll that comes back for the last few records of a partition many readers tail
        // goes out with the others' next coalesced wake-up, with what arrived meanwhile, and is
        // read for only then, with them (tail.ts).
        await tails.holdBack(log, request.signal);
        result = log.closed
          ? nothingYet()
          : await tails.read(log, { offset, maxRecords, maxBytes });
      } else {
        result = await tails.read(log, { offset, maxRecords, maxBytes });
        if (
          result.count === 0 &&
          waitMs > 0 &&
          offset >= result.highWatermark &&
          !request.signal?.aborted
        ) {
          await tails.wait(log, offset, waitMs, request.signal);
          if (!log.closed) result = await tails.read(log, { offset, maxRecords, maxBytes });
        }
      }
      const answer: FetchResult = {
        records: { bytes: result.bytes, count: result.count },
        nextOffset: result.nextOffset,
        highWatermark: result.highWatermark,
        logStartOffset: result.logStartOffset,
      };
      if (result.release !== undefined) answer.release = result.release;
      return answer;
    } catch (err) {
      throw toBrokerError(err);
    }
  }

  /**
   * {@link fetch} in cluster mode: never a record at or above the replication high watermark
   * (`ReplicationSeam.readLimit`); a long-poll waits for it to pass `offset`. An offset between
   * that high watermark and the local durable end is answered empty (the records are stored but
   * not committed yet), never out of range.
   */
  async #fetchCommitted(
    replication: ReplicationSeam,
    topic: string,
    partition: number,
    log: PartitionLog,
    request: {
      offset: number;
      maxRecords: number;
      maxBytes: number;
      waitMs: number;
      signal: AbortSignal | undefined;
    },
  ): Promise<FetchResult> {
    const { offset, waitMs, signal } = request;
    const limit = (): number =>
      Math.min(replication.readLimit(topic, partition) ?? Infinity, log.highWatermark);
    try {
      if (offset >= limit() && offset <= log.highWatermark && waitMs > 0 && !signal?.aborted) {
        await new Promise<void>((resolve) => {
          let done = false;
          const finish = () => {
            if (done) return;
            done = true;
            unsubscribeLog();
            unsubscribeSeam();
            timer.cancel();
            unsubscribeAbort?.();
            resolve();
          };
          const check = () => {
            if (limit() > offset || log.closed || log.fenced) finish();
          };
          const unsubscribeLog = log.subscribe(check);
          const unsubscribeSeam = replication.watchReadLimit(topic, partition, check);
          const timer = this.#clock.setTimer(waitMs, finish);
          // One listener per signal (lib/abort.ts): a connection's long-polls share its signal.
          const unsubscribeAbort = signal === undefined ? null : onAbort(signal, finish);
        });
        replication.checkLeader(topic, partition);
      }
      const highWatermark = limit();
      if (offset >= highWatermark && offset <= log.highWatermark) {
        return {
          records: { bytes: new Uint8Array(0), count: 0 },
          nextOffset: offset,
          highWatermark,
          logStartOffset: log.logStartOffset,
        };
      }
      const result = await log.read({
        offset,
        maxRecords: request.maxRecords,
        maxBytes: request.maxBytes,
        endOffset: highWatermark,
      });
      return {
        records: { bytes: result.bytes, count: result.count },
        nextOffset: result.nextOffset,
        highWatermark: result.highWatermark,
        logStartOffset: result.logStartOffset,
      };
    } catch (err) {
      throw toBrokerError(err);
    }
  }

  async listOffsets(request: { topic: string; partition: number; timestampMs?: number }): Promise<{
    logStartOffset: number;
    highWatermark: number;
    offset?: number;
    offsetTimestampMs?: number;
  }> {
    const { timestampMs } = request;
    if (timestampMs !== undefined && !(Number.isSafeInteger(timestampMs) && timestampMs >= 0))
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot list offsets by timestamp ${timestampMs}: give ms since the epoch, ≥ 0`,
      );
    const log = this.#topics.partition(this.#topics.get(request.topic), request.partition);
    const limit = this.#replication?.readLimit(request.topic, request.partition);
    const highWatermark =
      limit === undefined ? log.highWatermark : Math.min(limit, log.highWatermark);
    if (timestampMs === undefined) return { logStartOffset: log.logStartOffset, highWatermark };
    try {
      const found = await log.offsetForTimestamp(timestampMs, highWatermark);
      return {
        logStartOffset: log.logStartOffset,
        highWatermark,
        offset: found.offset,
        offsetTimestampMs: found.timestampMs,
      };
    } catch (err) {
      throw toBrokerError(err);
    }
  }

  /**
   * Per-partition storage state for `GET /v1/admin/storage`; see {@link TopicRegistry.describeStorage}.
   * @throws BrokerError unavailable when shutting down.
   */
  describeStorage(): ReturnType<TopicRegistry["describeStorage"]> & { disk: DiskDescription } {
    this.#checkOpen();
    // The free space as of the last look (at start, the last scrape or the last call): a call
    // answers at once and starts the next look.
    void this.#refreshSpace();
    return {
      ...this.#topics.describeStorage(),
      disk: {
        free_bytes: this.#space?.freeBytes ?? null,
        total_bytes: this.#space?.totalBytes ?? null,
        reserve: this.#reserve?.describe() ?? null,
      },
    };
  }

  /** Looks at the data directory's free space again (statfs); null when the file system cannot say. */
  async #refreshSpace(): Promise<{ freeBytes: number; totalBytes: number } | null> {
    const statfs = this.#fs.statfs?.bind(this.#fs);
    this.#space = statfs === undefined ? null : await statfs(this.#dataDir).catch(() => null);
    return this.#space;
  }

  /**
   * Storage counters summed over the partitions open now (`GET /v1/admin/metrics`, used by the
   * benchmark harness): fsyncs, appends (produce requests), writes (system calls to the logs) and
   * records appended, each counted since its partition was opened. A deleted topic's counts leave
   * the sum, so compare two readings only while the same topics exist.
   */
  metrics(): ReturnType<TopicRegistry["metrics"]> {
    return this.#topics.metrics();
  }

  /**
   * Tells retention where a mirror's forwarding stands (docs/edge.md "Retention and the mirror"):
   * `fn(topic, partition)` is the lowest offset not forwarded yet, or null.
   */
  setUnforwardedFrom(fn: (topic: string, partition: number) => number | null): void {
    this.#cleanup.setUnforwardedFrom(fn);
  }

  /**
   * The state the metrics exposition shows (`transport/http/prometheus.ts`): consumer groups
   * first, then every open partition, so that a committed offset read here is never above the
   * high watermark read after it (both only grow). An empty observation while shutting down.
   */
  async observe(): Promise<BrokerObservation> {
    if (this.#closed)
      return { groups: [], partitions: [], unavailableTopics: 0, unavailableGroups: 0 };
    // Before the groups: nothing may wait between the groups and the partitions (see above).
    const space = await this.#refreshSpace();
    const groups = await this.#groups.list();
    return {
      groups,
      partitions: this.#topics.observePartitions(),
      unavailableTopics: this.#topics.unavailableCount,
      unavailableGroups: this.#groups.unavailable.length,
      dataDir: space,
      diskReserveGivenUp: this.#reserve?.describe().state === "given_up",
      producers: { ids: this.#producers.producerCount, evicted: this.#producers.evictedCount },
    };
  }

  /**
   * Runs retention (trying the cold tier at once, despite any backoff) and then compaction on every
   * partition of `topic` now (`POST /v1/admin/topics/{topic}/cleanup`), and reports what each pass
   * did; each task follows the topic's cleanup policy.
   * @throws BrokerError topic_not_found, unavailable.
   */
  async cleanup(name: string): Promise<{ topic: string; partitions: PartitionCleanup[] }> {
    const topic = this.#topics.get(name);
    return { topic: topic.name, partitions: (await this.#cleanup.runTopic(topic.name)) ?? [] };
  }

  /** Joins a consumer group; see {@link Broker.joinGroup} and `broker/groups.ts`. */
  async joinGroup(request: JoinGroupRequest): Promise<GroupAssignment> {
    this.#checkOpen();
    return this.#groups.join(request);
  }

  async heartbeat(request: {
    group: string;
    memberId: string;
    generation?: number;
  }): Promise<HeartbeatResult> {
    this.#checkOpen();
    return this.#groups.heartbeat(request);
  }

  async leaveGroup(request: { group: string; memberId: string }): Promise<void> {
    this.#checkOpen();
    return this.#groups.leave(request);
  }

  async commitOffsets(request: CommitOffsetsRequest): Promise<void> {
    this.#checkOpen();
    return this.#groups.commit(request);
  }

  /** See {@link Broker.commitOffsetsReplicated} and `GroupCoordinator.commit`. */
  async commitOffsetsReplicated(
    request: CommitOffsetsRequest,
    replicate: (
      offsets: readonly { topic: string; partition: number; offset: number }[],
    ) => Promise<void>,
  ): Promise<void> {
    this.#checkOpen();
    return this.#groups.commit(request, replicate);
  }

  async describeGroup(group: string): Promise<GroupDescription> {
    this.#checkOpen();
    return this.#groups.describe(group);
  }

  async listGroups(): Promise<GroupDescription[]> {
    this.#checkOpen();
    return this.#groups.list();
  }

  /** See {@link Broker.useGroupTopics}. */
  useGroupTopics(view: GroupTopicsView): void {
    this.#groupTopics = view;
  }

  /** See {@link Broker.onGroupGeneration} and `GroupCoordinator.onGeneration`. */
  onGroupGeneration(listener: (group: string, generation: number) => void): void {
    this.#groups.onGeneration(listener);
  }

  /** See {@link Broker.raiseGroupGeneration} and `GroupCoordinator.raiseGeneration`. */
  async raiseGroupGeneration(group: string, floor: number): Promise<number> {
    this.#checkOpen();
    return this.#groups.raiseGeneration(group, floor);
  }

  /** See {@link Broker.adoptGroupOffsets} and `GroupCoordinator.adoptOffsets`. */
  async adoptGroupOffsets(
    group: string,
    offsets: readonly { topic: string; partition: number; offset: number }[],
  ): Promise<void> {
    this.#checkOpen();
    return this.#groups.adoptOffsets(group, offsets);
  }

  /** Joins a client-assigned group; see {@link Broker.joinAssignedGroup} and `broker/groups.ts`. */
  async joinAssignedGroup(request: AssignedJoinRequest): Promise<AssignedJoinResult> {
    this.#checkOpen();
    return this.#groups.joinAssigned(request);
  }

  async syncAssignedGroup(request: AssignedSyncRequest): Promise<{ assignment: Uint8Array }> {
    this.#checkOpen();
    return this.#groups.syncAssigned(request);
  }

  async heartbeatAssignedGroup(request: {
    group: string;
    memberId: string;
    generation: number;
  }): Promise<void> {
    this.#checkOpen();
    return this.#groups.heartbeatAssigned(request);
  }

  /**
   * A fresh numeric producer id for a Kafka client's InitProducerId, at epoch 0: a slot (the
   * clock in ms, made strictly increasing within the process) times 1024 plus this broker's node
   * id modulo 1024, skipping any id the producer state holds. A restart takes more than a
   * millisecond, so ids do not repeat across restarts; the node id keeps the brokers of a cluster
   * apart, each checking only its own state (attack13 F3: 27 ids handed out twice in 600
   * concurrent calls on three brokers). Its producer state is keyed by the id's decimal text, in
   * the same table as the TCP and HTTP producers' ids.
   */
  async initProducerId(): Promise<{ producerId: number; epoch: number }> {
    this.#checkOpen();
    for (;;) {
      const slot = Math.max(this.#lastProducerIdSlot + 1, this.#clock.nowMs());
      this.#lastProducerIdSlot = slot;
      const id = slot * 1024 + this.#producerIdNode;
      if (this.#producers.inspect(String(id)) === undefined) return { producerId: id, epoch: 0 };
    }
  }

  /**
   * The next epoch of an idempotent producer id, durable before it resolves (`Broker.initProducerEpoch`,
   * docs/decisions.md §20; the rule and its durability: `broker/producers/state.ts`).
   * @throws BrokerError invalid_request, producer_epoch_exhausted, unavailable.
   */
  async initProducerEpoch(request: {
    producerId: string;
    atLeast?: number;
  }): Promise<{ epoch: number }> {
    this.#checkOpen();
    return this.#producers.allocateEpoch({
      producerId: request.producerId,
      atLeast: request.atLeast ?? 0,
    });
  }

  /** The consumer-group coordinator (tests drive its session expiries with `settled()`). */
  get groups(): GroupCoordinator {
    return this.#groups;
  }

  /** The idempotent producer state (tests and reports inspect it). */
  get producerStates(): ProducerStates {
    return this.#producers;
  }

  /** Stops serving (later requests get `unavailable`), then closes groups, cleanup, partitions and producer state. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#streams?.close();
    await this.#groups.close();
    await this.#registry.close();
    await this.#cleanup.close();
    await this.#topics.close();
    await this.#producers.close();
    await this.#reserve?.close();
    this.#topics.clear();
  }
}

/** Checks an optional integer parameter; undefined gives `fallback`. @throws BrokerError invalid_request naming it. */
function checkInteger(
  name: string,
  value: unknown,
  min: number,
  max: number,
  fallback: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid "${name}" ${quote(value)}: must be an integer from ${min} to ${max}`,
    );
  }
  return value;
}
