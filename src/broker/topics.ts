/**
 * The topic registry: which topics exist on one data directory, their config and their open
 * partitions. It loads them at start (finishing interrupted creations and deletions), creates and
 * deletes them, rewrites their config, and looks topics and partitions up for every request,
 * refusing those that are unavailable or being deleted. Produce routing, fetch and the other
 * services live elsewhere (`broker/broker.ts` composes them).
 *
 * Data directory (docs/storage.md "Files on disk"):
 * ```
 * <dataDir>/topics/<topic>/topic.json     name, partition count, config, topic id in a cluster (replaced atomically)
 * <dataDir>/topics/<topic>/<partition>/   segments
 * <dataDir>/trash/<ms>-<n>/               a deleted topic's directory (short name; its topic.json names the topic), removed at once or at the next start
 * <dataDir>/topics/<topic>/log_start_offsets.json  log start offsets moved by retention (see storage/log-start-offsets.ts)
 * <dataDir>/clean-stop.json                where each partition's log ended at a clean stop; removed at start (storage/clean-stop.ts)
 * ```
 * With `coldStorageDir`, retention moves sealed segments to `<cold>/topics/<topic>/<partition>/`
 * and fetches read them from there (`broker/cleanup.ts`, `storage/cold-store.ts`).
 *
 * A Durable Stream is a one-partition topic whose `topic.json` also holds a `stream` section
 * (`broker/streams/meta.ts`): it is loaded and rewritten with the rest of the file, never apart.
 *
 * Creating a topic writes `topic.json` first (the commit point), then the partition directories;
 * a start after a crash in between creates the missing partitions. A topic whose `topic.json` is
 * empty or unparseable is reported and made unavailable, never reset (docs/decisions.md §9).
 */
import {
  cleanStopFileName,
  readCleanStop,
  removeCleanStop,
  writeCleanStop,
  type CleanStop,
} from "../storage/clean-stop.ts";
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { Metrics } from "../lib/metrics.ts";
import { maxOpenSegmentsDefault, recoveryProgressMs } from "../lib/limits.ts";

/** Partitions of a topic opened (recovered, or created) at once. */
const partitionOpensAtOnce = 8;
import { Mutex } from "../lib/mutex.ts";
import { quote } from "../lib/quote.ts";
import { plural } from "../lib/text.ts";
import { partitionName } from "../lib/topic-partition.ts";
import { dirname, isFsError, joinPath, type FileSystem } from "../fs/types.ts";
import { readJsonFile, writeJsonAtomic } from "../storage/metadata.ts";
import {
  classifyTopicsEntry,
  classifyTopicWithoutMetadata,
  leftovers,
  removeMetadataTemps,
} from "../storage/leftovers.ts";
import { PartitionLog, type PartitionOptions } from "../storage/partition.ts";
import { SegmentHandleCache } from "../storage/segment-handles.ts";
import type { CleanupService } from "./cleanup.ts";
import {
  defaultTopicConfig,
  mergeTopicConfig,
  validatePartitionCount,
  validateTopicName,
} from "./config.ts";
import { BrokerError, Errors } from "./errors.ts";
import { coldStoreCause, storageFailure, storageFailureKind } from "./storage-failure.ts";
import { parseStreamMeta, type StreamMeta } from "./streams/meta.ts";
import type { CreateTopicRequest, PartitionInfo, TopicConfig, TopicDescription } from "./types.ts";

/** One partition's state as the metrics exposition shows it (`TopicRegistry.observePartitions`). */
export interface PartitionObservation {
  topic: string;
  partition: number;
  logStartOffset: number;
  highWatermark: number;
  logEndOffset: number;
  /** Bytes of the local segments' logs. */
  sizeBytes: number;
  segments: number;
  fenced: boolean;
  /** Found at start (docs/decisions.md §1, §11). */
  corruptSegments: number;
  strayFiles: number;
  /** Successful fsyncs of its log since it was opened. */
  fsyncs: number;
  /** The cold tier's side, or null without `--cold-storage-dir`. */
  cold: {
    segments: number;
    sizeBytes: number;
    /** Segments retention had to keep local for want of a cold copy (`storage/cleaner.ts`). */
    backlogSegments: number;
    /** Failed copies in a row (0 once one succeeds). */
    consecutiveFailures: number;
  } | null;
  /** Cleanup is stopped until a restart (an incomplete compaction swap). */
  cleanupStopped: boolean;
}

/** One served topic. */
export interface Topic {
  name: string;
  /** `<dataDir>/topics/<name>`. */
  dir: string;
  /** The current config (replaced, never mutated, by {@link TopicRegistry.updateConfig}). */
  config: TopicConfig;
  /** Open partitions, index = partition number. */
  partitions: PartitionLog[];
  /** Next partition for keyless records (round-robin, one partition per request; `broker/produce-routing.ts`). */
  roundRobin: number;
  /** Present when the topic is a Durable Stream (replaced, never mutated, by {@link TopicRegistry.updateStream}). */
  stream?: StreamMeta;
  /**
   * The cluster topic's incarnation (docs/cluster.md "Topic ids"): set by the cluster node at
   * creation or adopted later ({@link TopicRegistry.setTopicId}); absent on a topic of a broker
   * that is not in a cluster and on a copy made before topic ids existed.
   */
  topicId?: string;
  /**
   * The etcd create revision of the cluster topic's record when this copy took {@link topicId}
   * (docs/cluster.md "Topic ids"): tells a copy older than etcd's topic from one newer than it
   * (etcd restored from a snapshot). Absent when the id is; recorded with it at creation and at
   * adoption.
   */
  topicRevision?: number;
}

/**
 * Whether `value` is a topic id as es-broker writes them: 32 lowercase hex digits (128 random
 * bits; docs/cluster.md "Topic ids").
 */
export function isTopicId(value: unknown): value is string {
  return typeof value === "string" && /^[0-9a-f]{32}$/.test(value);
}

/** Options of {@link TopicRegistry.open}. */
export interface TopicRegistryOptions {
  fs: FileSystem;
  /** Root of the data directory (created 0700 if missing). */
  dataDir: string;
  clock: Clock;
  logger: Logger;
  /** Records per fsync of every partition (`--flush-every-records`). */
  flushEveryRecords: number;
  /** Longest wait for an fsync with flushEveryRecords > 1, in ms (`--flush-interval`). */
  flushIntervalMs: number;
  /** Retention and compaction: given every partition opened, told of every topic removed. */
  cleanup: CleanupService;
  /** Throws BrokerError unavailable once the broker is shutting down; every lookup calls it first. */
  checkOpen: () => void;
  /**
   * Forgets a deleted topic's state kept elsewhere (consumer groups, producer state), once its
   * directory is gone; {@link TopicRegistry.delete} awaits it (and throws what it throws) before
   * the name can be created again.
   */
  forgetTopic: (name: string) => Promise<void>;
  /** Handed to every partition (group commit counts its fsyncs there); default none. */
  metrics?: Metrics;
  /** Updated as recovery goes, for `GET /readyz`; see {@link RecoveryProgress}. */
  progress?: RecoveryProgress;
  /**
   * Sealed segments kept open at most over every partition (`--max-open-segments`,
   * `storage/segment-handles.ts`); default `maxOpenSegmentsDefault`.
   */
  maxOpenSegments?: number;
  /** Handed to every partition: appends wait while the disk reserve is given up (`storage/disk-reserve.ts`). */
  diskReserve?: PartitionOptions["diskReserve"];
}

/**
 * How far the start-up recovery has got (`GET /readyz` answers it while it runs). The registry
 * fills in the topics; `LocalBroker.open` sets the phase.
 */
export interface RecoveryProgress {
  /**
   * "topics" (partitions recovering), "groups", "producers", then "done"; with `serve --cluster`,
   * "cluster" after "done" while the broker joins its cluster (waits for etcd).
   */
  phase: "starting" | "topics" | "groups" | "producers" | "done" | "cluster";
  /** Entries of `topics/` to recover, and how many are done. */
  topicsTotal: number;
  topicsDone: number;
  /** Partitions recovered so far. */
  partitionsDone: number;
}

/** The topics of one data directory. See the module comment. */
export class TopicRegistry {
  #fs: FileSystem;
  #dataDir: string;
  #topicsDir: string;
  #trashDir: string;
  /**
   * The clean-stop record read at start (docs/decisions.md §17), by "topic/partition", until the
   * start's recovery is over.
   */
  #cleanStop: Map<string, CleanStop> | null = null;
  #clock: Clock;
  #logger: Logger;
  #flushEveryRecords: number;
  #flushIntervalMs: number;
  #cleanup: CleanupService;
  #checkOpen: () => void;
  #forgetTopic: (name: string) => Promise<void>;
  #metrics: Metrics | undefined;
  #progress: RecoveryProgress | undefined;
  /** Every partition's sealed segments share it: the bound on open files is the broker's. */
  #segmentHandles: SegmentHandleCache;
  #diskReserve: PartitionOptions["diskReserve"];
  #topics = new Map<string, Topic>();
  /** Topics that exist on disk but cannot be served, with the reason (docs/decisions.md §9). */
  #unavailable = new Map<string, string>();
  /** Names being created or deleted right now. */
  #busy = new Set<string>();
  /** Topics being deleted right now: still listed (until the rename commits), but every request is refused as unavailable. */
  #deleting = new Set<string>();
  #trashCounter = 0;
  /** Serialises topic config updates (`topic.json` rewrites). */
  #configWrites = new Mutex();

  private constructor(options: TopicRegistryOptions) {
    this.#fs = options.fs;
    this.#dataDir = options.dataDir;
    this.#topicsDir = joinPath(options.dataDir, "topics");
    this.#trashDir = joinPath(options.dataDir, "trash");
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#flushEveryRecords = options.flushEveryRecords;
    this.#flushIntervalMs = options.flushIntervalMs;
    this.#cleanup = options.cleanup;
    this.#checkOpen = options.checkOpen;
    this.#forgetTopic = options.forgetTopic;
    this.#metrics = options.metrics;
    this.#progress = options.progress;
    this.#diskReserve = options.diskReserve;
    this.#segmentHandles = new SegmentHandleCache(
      options.maxOpenSegments ?? maxOpenSegmentsDefault,
    );
  }

  /** Sealed segments whose files are open now, and the bound (`--max-open-segments`). */
  get openSegments(): { open: number; max: number; evictions: number } {
    const h = this.#segmentHandles;
    return { open: h.size, max: h.capacity, evictions: h.evictions };
  }

  /**
   * Opens the data directory and recovers every topic (docs/storage.md "Recovery after a crash"): empties the
   * trash, opens each topic's partitions, and marks unavailable (with the reason) each topic that
   * cannot be opened.
   * @throws FsError if the data directory itself cannot be created or read.
   */
  static async open(options: TopicRegistryOptions): Promise<TopicRegistry> {
    const registry = new TopicRegistry(options);
    await registry.#load();
    return registry;
  }

  async #load(): Promise<void> {
    const fs = this.#fs;
    // A directory this start creates (the data directory itself, `topics/`) is not durable until
    // its parent is fsynced; without that a crash could take every topic with it.
    const created: string[] = [];
    const missing = async (dir: string) =>
      (await fs
        .stat(dir)
        .catch((err: unknown) => (isFsError(err, "ENOENT") ? null : Promise.reject(err)))) === null;
    for (let dir = this.#topicsDir; await missing(dir); dir = dirname(dir)) {
      created.push(dir);
      if (dirname(dir) === dir) break;
    }
    await fs.mkdir(this.#topicsDir);
    for (const dir of created.reverse()) await fs.syncDir(dirname(dir));
    if ((await fs.stat(this.#trashDir)) !== null) await this.#emptyTrash();
    const cleanStop = await readCleanStop(fs, this.#dataDir);
    if (cleanStop !== null && "problem" in cleanStop)
      // Every partition is then recovered as after a crash (the torn-tail rule).
      this.#logger.log("warn", "recovery.clean_stop_unreadable", {
        file: joinPath(this.#dataDir, cleanStopFileName),
        reason: cleanStop.problem,
      });
    else this.#cleanStop = cleanStop;
    // Long recoveries say how far they got: one progress line at most every recoveryProgressMs.
    const names = await fs.readdir(this.#topicsDir);
    const started = this.#clock.nowMs();
    let lastProgress = started;
    let done = 0;
    if (this.#progress !== undefined) {
      this.#progress.phase = "topics";
      this.#progress.topicsTotal = names.length;
    }
    for (const name of names) {
      if (this.#progress !== undefined) this.#progress.topicsDone = done;
      const now = this.#clock.nowMs();
      if (now - lastProgress >= recoveryProgressMs) {
        lastProgress = now;
        this.#logger.log("info", "recovery.progress", {
          topics_done: done,
          topics_total: names.length,
          elapsed_ms: now - started,
        });
      }
      done++;
      if (classifyTopicsEntry(name) === "not_a_topic") {
        this.#logger.log("warn", "recovery.stray_file", {
          file: joinPath(this.#topicsDir, name),
          reason: leftovers.not_a_topic.what,
        });
        continue;
      }
      await this.#loadTopic(name);
    }
    if (this.#progress !== undefined) this.#progress.topicsDone = done;
    // Every partition's recovery is durable: from here on a crash is recovered as a crash.
    this.#cleanStop = null;
    if (cleanStop !== null) await removeCleanStop(fs, this.#dataDir);
  }

  /**
   * Finishes the deletions a crash or a failure interrupted (docs/storage.md "Files on disk"): each entry of
   * `trash/` is a deleted topic's directory under a short unique name, its `topic.json` naming the
   * topic. Its cold data goes first (unless a topic of that name exists again), then the whole
   * trash. Entries are never parsed by name, so older `<topic>.<ms>.<n>` entries are handled alike.
   * @throws FsError if the trash or a cold directory cannot be removed.
   */
  async #emptyTrash(): Promise<void> {
    const fs = this.#fs;
    if (this.#cleanup.cold !== null) {
      for (const entry of await fs.readdir(this.#trashDir)) {
        const read = await readJsonFile(fs, joinPath(this.#trashDir, entry, "topic.json"));
        const name =
          "value" in read && typeof read.value === "object" && read.value !== null
            ? (read.value as { name?: unknown }).name
            : undefined;
        if (typeof name !== "string") continue;
        try {
          validateTopicName(name);
        } catch {
          continue;
        }
        if ((await fs.stat(joinPath(this.#topicsDir, name))) !== null) continue;
        await this.#cleanup.removeColdData(name);
      }
    }
    await fs.removeTree(this.#trashDir);
    this.#logger.log("info", "broker.trash_removed", { dir: this.#trashDir });
  }

  /** True if an entry of `trash/` is a deleted topic named `name` (its cold data is garbage). */
  async #trashHolds(name: string): Promise<boolean> {
    let entries: string[];
    try {
      entries = await this.#fs.readdir(this.#trashDir);
    } catch (err) {
      if (isFsError(err, "ENOENT")) return false;
      throw err;
    }
    for (const entry of entries) {
      const read = await readJsonFile(this.#fs, joinPath(this.#trashDir, entry, "topic.json"));
      if ("value" in read && (read.value as { name?: unknown } | null)?.name === name) return true;
    }
    return false;
  }

  async #loadTopic(name: string): Promise<void> {
    const dir = joinPath(this.#topicsDir, name);
    const metaPath = joinPath(dir, "topic.json");
    const read = await readJsonFile(this.#fs, metaPath);
    // createTopic makes the directory durable before it writes topic.json, its commit point. A
    // directory holding nothing else is a creation a crash interrupted, never acknowledged:
    // remove it (reported) so the name can be created again (storage/leftovers.ts).
    if (
      "missing" in read &&
      classifyTopicWithoutMetadata(await this.#fs.readdir(dir)) === "incomplete_topic"
    ) {
      await this.#fs.removeTree(dir);
      await this.#fs.syncDir(this.#topicsDir);
      this.#logger.log("warn", "recovery.incomplete_topic_removed", {
        topic: name,
        dir,
        reason: leftovers.incomplete_topic.what,
      });
      return;
    }
    // Temp files of interrupted topic.json / log_start_offsets.json writes: removed, reported once.
    await removeMetadataTemps(this.#fs, dir, this.#logger);
    if ("missing" in read) {
      this.#unavailable.set(name, `${metaPath} is missing`);
      this.#logger.log("error", "recovery.topic_unavailable", {
        topic: name,
        file: metaPath,
        reason: leftovers.topic_without_metadata.what,
      });
      return;
    }
    if ("error" in read) {
      this.#unavailable.set(name, `${metaPath}: ${read.error}`);
      this.#logger.log("error", "recovery.topic_unavailable", {
        topic: name,
        file: metaPath,
        reason: read.error,
      });
      return;
    }
    let config: TopicConfig;
    let partitionCount: number;
    let stream: StreamMeta | undefined;
    let topicId: string | undefined;
    let topicRevision: number | undefined;
    try {
      ({ config, partitionCount, stream, topicId, topicRevision } = parseTopicFile(
        name,
        read.value,
      ));
    } catch (err) {
      const reason = errorMessage(err);
      this.#unavailable.set(name, `${metaPath}: ${reason}`);
      this.#logger.log("error", "recovery.topic_unavailable", {
        topic: name,
        file: metaPath,
        reason,
      });
      return;
    }
    const topic: Topic = {
      name,
      dir,
      config,
      partitions: [],
      roundRobin: 0,
      stream,
      topicId,
      topicRevision,
    };
    try {
      await this.#openPartitions(topic, partitionCount);
    } catch (err) {
      for (const partition of topic.partitions) await partition.close().catch(() => {});
      this.#unavailable.set(name, `cannot open its partitions: ${errorMessage(err)}`);
      this.#logger.log("error", "recovery.topic_unavailable", {
        topic: name,
        reason: errorMessage(err),
      });
      return;
    }
    this.#topics.set(name, topic);
  }

  /**
   * Opens a topic's partitions with what cleanup gives them (persisted log start offsets, the cold
   * tier), fsyncs the topic directory, and starts cleaning them.
   * @throws FsError, or Error if `log_start_offsets.json` is unreadable (docs/decisions.md §9).
   */
  async #openPartitions(topic: Topic, partitionCount: number): Promise<void> {
    const storage = await this.#cleanup.prepareTopic({
      topic: topic.name,
      dir: topic.dir,
      partitions: partitionCount,
    });
    if ("error" in storage) throw new Error(storage.error);
    try {
      // A few partitions at a time: each ends its recovery with fsyncs (its active segment, its
      // directory), and those of different partitions overlap on the disk instead of queueing.
      const opened: (PartitionLog | undefined)[] = new Array(partitionCount);
      let next = 0;
      let failure: { err: unknown } | null = null;
      const worker = async (): Promise<void> => {
        while (next < partitionCount && failure === null) {
          const p = next++;
          try {
            opened[p] = await this.#openPartition(
              topic,
              p,
              this.#cleanup.partitionOptions(storage, p),
            );
            if (this.#progress?.phase === "topics") this.#progress.partitionsDone++;
          } catch (err) {
            failure ??= { err };
          }
        }
      };
      await Promise.all(
        Array.from({ length: Math.min(partitionOpensAtOnce, partitionCount) }, worker),
      );
      // In partition order; on a failure the caller closes the ones that opened.
      for (const log of opened) if (log !== undefined) topic.partitions.push(log);
      if (failure !== null) throw (failure as { err: unknown }).err;
      await this.#fs.syncDir(topic.dir);
    } catch (err) {
      await this.#cleanup.discard(storage);
      throw err;
    }
    this.#cleanup.attach({
      topic: topic.name,
      storage,
      partitions: topic.partitions,
      config: () => topic.config,
    });
  }

  #openPartition(
    topic: Topic,
    partition: number,
    extra: Pick<PartitionOptions, "logStartOffset" | "lowerTier">,
  ): Promise<PartitionLog> {
    return PartitionLog.open({
      ...extra,
      fs: this.#fs,
      dir: joinPath(topic.dir, String(partition)),
      name: partitionName(topic.name, partition),
      clock: this.#clock,
      logger: this.#logger,
      config: () => ({
        segmentBytes: topic.config.segment_bytes,
        segmentMs: topic.config.segment_ms,
      }),
      flushEveryRecords: this.#flushEveryRecords,
      flushIntervalMs: this.#flushIntervalMs,
      metrics: this.#metrics,
      segmentHandles: this.#segmentHandles,
      diskReserve: this.#diskReserve,
      cleanStop: this.#cleanStop?.get(partitionName(topic.name, partition)) ?? null,
    });
  }

  /**
   * The topic named `name`, to serve a request.
   * @throws BrokerError unavailable (shutting down, being deleted, or unavailable on disk, with
   *   the reason), topic_not_found.
   */
  get(name: string): Topic {
    this.#checkOpen();
    const topic = this.#topics.get(name);
    if (topic !== undefined) {
      if (this.#deleting.has(name))
        throw new BrokerError(
          Errors.unavailable,
          `Cannot use topic "${name}": it is being deleted`,
        );
      return topic;
    }
    const reason = this.#unavailable.get(name);
    if (reason !== undefined)
      throw new BrokerError(
        Errors.unavailable,
        `Cannot use topic "${name}": it is unavailable: ${reason}`,
      );
    throw new BrokerError(Errors.topicNotFound, `Cannot find topic ${quote(name)}`);
  }

  /**
   * Partition `partition` of `topic`, checked as a request gave it.
   * @throws BrokerError invalid_request (not a non-negative integer), partition_not_found.
   */
  partition(topic: Topic, partition: unknown): PartitionLog {
    if (typeof partition !== "number" || !Number.isInteger(partition) || partition < 0) {
      throw new BrokerError(
        Errors.invalidRequest,
        `Invalid partition ${quote(partition)} for topic "${topic.name}": must be a non-negative integer`,
      );
    }
    const log = topic.partitions[partition];
    if (log === undefined) {
      throw new BrokerError(
        Errors.partitionNotFound,
        `Cannot find partition ${partition} of topic "${topic.name}": it has ${plural(topic.partitions.length, "partition")}`,
      );
    }
    return log;
  }

  /** The description of `topic` that the apis answer: its config (a copy) and its partitions' offsets and sizes. */
  describe(topic: Topic): TopicDescription {
    return {
      ...(topic.stream === undefined ? {} : { stream: structuredClone(topic.stream) }),
      ...(topic.topicId === undefined ? {} : { topic_id: topic.topicId }),
      ...(topic.topicRevision === undefined ? {} : { topic_revision: topic.topicRevision }),
      name: topic.name,
      config: { ...topic.config },
      partitions: topic.partitions.map(
        (log, partition): PartitionInfo => ({
          partition,
          logStartOffset: log.logStartOffset,
          highWatermark: log.highWatermark,
          sizeBytes: log.sizeBytes,
          segmentCount: log.segmentCount,
          fenced: log.fenced,
        }),
      ),
    };
  }

  /**
   * Creates a topic (the module comment: `topic.json` is the commit point); with `options.stream`,
   * a Durable Stream's topic (`broker/streams/`), its `stream` section in the same `topic.json`.
   * @throws BrokerError invalid_request / invalid_config for a bad name, count or config,
   *   topic_exists, unavailable (shutting down), storage_error or internal naming the failed step.
   */
  async create(
    request: CreateTopicRequest,
    options: { stream?: StreamMeta } = {},
  ): Promise<TopicDescription> {
    this.#checkOpen();
    const name = validateTopicName(request.name);
    const partitionCount = validatePartitionCount(request.partitions);
    const config = mergeTopicConfig(defaultTopicConfig, request.config);
    const topicId = request.topic_id;
    if (topicId !== undefined && !isTopicId(topicId))
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot create topic "${name}": its topic id ${quote(topicId)} is not 32 lowercase hex digits`,
      );
    const topicRevision = topicId === undefined ? undefined : request.topic_revision;
    if (topicRevision !== undefined && !isTopicRevision(topicRevision))
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot create topic "${name}": its topic revision ${quote(topicRevision)} is not a positive integer`,
      );
    if (this.#topics.has(name) || this.#unavailable.has(name) || this.#busy.has(name)) {
      throw new BrokerError(Errors.topicExists, `Cannot create topic "${name}": it already exists`);
    }
    this.#busy.add(name);
    try {
      const dir = joinPath(this.#topicsDir, name);
      if ((await this.#fs.stat(dir)) !== null) {
        throw new BrokerError(
          Errors.topicExists,
          `Cannot create topic "${name}": its directory ${dir} already exists`,
        );
      }
      await this.#fs.mkdir(dir);
      await this.#fs.syncDir(this.#topicsDir);
      // Cold data left by an earlier topic of this name whose deletion is still in the trash is
      // not this topic's. Cold data without such a trash entry is this topic's past (a lost data
      // directory): the partitions adopt it (rebuilt from a listing) and continue after it.
      if (this.#cleanup.cold !== null && (await this.#trashHolds(name)))
        await this.#cleanup.removeColdData(name);
      const stream = options.stream;
      const topic: Topic = {
        name,
        dir,
        config,
        partitions: [],
        roundRobin: 0,
        stream,
        topicId,
        topicRevision,
      };
      await writeJsonAtomic(
        this.#fs,
        joinPath(dir, "topic.json"),
        topicFile(topic, partitionCount),
      );
      try {
        await this.#openPartitions(topic, partitionCount);
      } catch (err) {
        for (const partition of topic.partitions) await partition.close().catch(() => {});
        // Nothing of the topic was ever acknowledged: take it back whole, so the name can be
        // created again once the cause (a full disk, an unreachable cold store) has passed.
        // Only if that fails too is it left on disk, unavailable until a delete or a restart.
        const removed = await this.#fs
          .removeTree(dir)
          .then(() => this.#fs.syncDir(this.#topicsDir))
          .then(
            () => true,
            () => false,
          );
        if (!removed)
          this.#unavailable.set(name, `creating its partitions failed: ${errorMessage(err)}`);
        this.#logger.log("warn", "topic.create_failed", {
          topic: name,
          error: errorMessage(err),
          removed,
        });
        if (coldStoreCause(err) !== null)
          throw new BrokerError(
            storageFailureKind(err),
            `Cannot create topic "${name}": its prefix in the cold tier must be listed before the topic is created (what a lost data directory left there is adopted, never overwritten), and the store did not answer; nothing was created: create it again once the store is reachable (${errorMessage(err)})`,
          );
        throw storageFailure(`Cannot create topic "${name}": creating its partitions failed`, err);
      }
      this.#topics.set(name, topic);
      this.#logger.log("info", "topic.created", { topic: name, partitions: partitionCount });
      return this.describe(topic);
    } catch (err) {
      throw storageFailure(`Cannot create topic "${name}"`, err);
    } finally {
      this.#busy.delete(name);
    }
  }

  /** Every served topic, by name. @throws BrokerError unavailable when shutting down. */
  list(): TopicDescription[] {
    this.#checkOpen();
    return [...this.#topics.values()]
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((t) => this.describe(t));
  }

  /**
   * Deletes a topic (docs/storage.md "Files on disk"; the module comment). Its directory is renamed into
   * `trash/` under a short unique name (`<ms>-<n>`, never longer than the file-system limit
   * whatever the topic's name; the topic's real name stays inside, in its `topic.json`) — that
   * rename is the commit point. Before it, nothing is lost: the partitions are closed so that no
   * write lands in a directory being moved, and if the rename fails they are opened again, so the
   * topic stays listed and usable and the error says what failed. After it, the topics directory
   * is fsynced; the topic's cold data and the trash entry are removed, and groups and producer
   * state forget the topic — a failure there is logged and finished at the next start
   * ({@link #load} removes the trash, first removing the cold data of each topic it held).
   * @throws BrokerError topic_not_found, unavailable (being created or deleted), storage_error or
   * internal (see {@link storageFailure}) naming the failed step.
   */
  async delete(name: string): Promise<void> {
    this.#checkOpen();
    const topic = this.#topics.get(name);
    const dir = joinPath(this.#topicsDir, name);
    if (topic === undefined && !this.#unavailable.has(name))
      throw new BrokerError(
        Errors.topicNotFound,
        `Cannot delete topic ${quote(name)}: it does not exist`,
      );
    if (this.#busy.has(name))
      throw new BrokerError(
        Errors.unavailable,
        `Cannot delete topic "${name}": it is being created or deleted`,
      );
    this.#busy.add(name);
    this.#deleting.add(name);
    try {
      const action = `Cannot delete topic "${name}"`;
      try {
        await this.#fs.mkdir(this.#trashDir);
      } catch (err) {
        throw storageFailure(`${action}: creating ${this.#trashDir} failed`, err);
      }
      const trash = joinPath(this.#trashDir, `${this.#clock.nowMs()}-${++this.#trashCounter}`);
      for (const partition of topic?.partitions ?? []) await partition.close().catch(() => {});
      await this.#cleanup.detach(name);
      try {
        await this.#fs.rename(dir, trash);
      } catch (err) {
        // Nothing moved: open the topic again (or mark it unavailable, with the reason, if that fails).
        this.#topics.delete(name);
        this.#unavailable.delete(name);
        await this.#loadTopic(name).catch((loadErr: unknown) => {
          // Its files are where they were; a restart opens it. Until then it says why it cannot be used.
          this.#unavailable.set(
            name,
            `opening it again after a failed delete failed: ${errorMessage(loadErr)}`,
          );
        });
        throw storageFailure(
          `${action}: moving ${dir} to ${trash} failed, the topic is unchanged`,
          err,
        );
      }
      this.#topics.delete(name);
      this.#unavailable.delete(name);
      try {
        await this.#fs.syncDir(this.#topicsDir);
      } catch (err) {
        throw storageFailure(
          `${action}: fsync of ${this.#topicsDir} failed after its directory was moved to ${trash}; the topic is gone but may come back after a restart`,
          err,
        );
      }
      try {
        await this.#cleanup.removeColdData(name);
        await this.#fs.removeTree(trash);
      } catch (err) {
        this.#logger.log("error", "topic.delete_cleanup_failed", {
          topic: name,
          trash,
          error: errorMessage(err),
          action: "finished at the next start",
        });
      }
      await this.#forgetTopic(name);
      this.#logger.log("info", "topic.deleted", { topic: name });
    } finally {
      this.#deleting.delete(name);
      this.#busy.delete(name);
    }
  }

  /**
   * A topic's partition, or why there is none: `"missing"` (no such topic or partition) or
   * `"unavailable"` (the topic is on disk but cannot be served). For producer recovery, which
   * must tell a deleted partition from one it cannot check.
   */
  lookup(topic: string, partition: number): PartitionLog | "missing" | "unavailable" {
    const t = this.#topics.get(topic);
    if (t === undefined) return this.#unavailable.has(topic) ? "unavailable" : "missing";
    return t.partitions[partition] ?? "missing";
  }

  /**
   * Per-partition storage state (segments, recovery outcome, corruption, fencing, strays, and the
   * last retention and compaction run with the cold tier's state under `cleanup`), for
   * `GET /v1/admin/storage`.
   */
  describeStorage(): {
    cold_storage_dir: string | null;
    topics: {
      name: string;
      partitions: (ReturnType<PartitionLog["describe"]> & {
        cleanup: ReturnType<CleanupService["describePartition"]>;
      })[];
    }[];
    unavailable: { name: string; reason: string }[];
  } {
    return {
      cold_storage_dir: this.#cleanup.cold?.location ?? null,
      topics: [...this.#topics.values()].map((t) => ({
        name: t.name,
        partitions: t.partitions.map((p, i) => ({
          ...p.describe(),
          cleanup: this.#cleanup.describePartition(t.name, i),
        })),
      })),
      unavailable: [...this.#unavailable].map(([name, reason]) => ({ name, reason })),
    };
  }

  /**
   * Every open partition's state now, for the metrics exposition (`LocalBroker.observe`): cheap
   * getters only (no per-segment listing), in topic then partition order.
   */
  observePartitions(): PartitionObservation[] {
    const out: PartitionObservation[] = [];
    for (const topic of this.#topics.values()) {
      if (this.#deleting.has(topic.name)) continue;
      topic.partitions.forEach((log, partition) => {
        if (log.closed) return;
        const cleanup = this.#cleanup.describePartition(topic.name, partition);
        out.push({
          topic: topic.name,
          partition,
          logStartOffset: log.logStartOffset,
          highWatermark: log.highWatermark,
          logEndOffset: log.logEndOffset,
          sizeBytes: log.sizeBytes,
          segments: log.segmentCount,
          fenced: log.fenced,
          corruptSegments: log.corruptSegmentCount,
          strayFiles: log.strayFileCount,
          fsyncs: log.stats.fsyncs,
          cold:
            cleanup?.cold == null
              ? null
              : {
                  segments: cleanup.cold.segments,
                  sizeBytes: cleanup.cold.size_bytes,
                  backlogSegments: cleanup.cold_backlog_segments,
                  consecutiveFailures: cleanup.cold_offload_failures,
                },
          cleanupStopped: cleanup?.stopped_reason != null,
        });
      });
    }
    return out;
  }

  /** How many topics exist on disk but cannot be served (docs/decisions.md §9). */
  get unavailableCount(): number {
    return this.#unavailable.size;
  }

  /** Storage counters summed over the partitions open now (see `LocalBroker.metrics`). */
  metrics(): {
    partitions: number;
    fsyncs: number;
    appends: number;
    writes: number;
    recordsAppended: number;
  } {
    const sum = { partitions: 0, fsyncs: 0, appends: 0, writes: 0, recordsAppended: 0 };
    for (const topic of this.#topics.values()) {
      for (const log of topic.partitions) {
        const s = log.stats;
        sum.partitions++;
        sum.fsyncs += s.fsyncs;
        sum.appends += s.appends;
        sum.writes += s.writes;
        sum.recordsAppended += s.recordsAppended;
      }
    }
    return sum;
  }

  /**
   * Changes a topic's config: `patch` is validated over the current config like a creation's
   * (unknown keys, wrong types and out-of-range values are refused, naming the key),
   * `topic.json` is rewritten atomically, and the new values apply at once (rolls read them on
   * every append, cleanup at every pass).
   * A Durable Stream's topic takes no schema subject (invalid_config naming the key).
   * @throws BrokerError topic_not_found, unavailable, invalid_config, storage_error.
   */
  async updateConfig(name: string, patch: unknown): Promise<TopicDescription> {
    this.get(name);
    return this.#configWrites.run(async () => {
      const topic = this.get(name);
      const config = mergeTopicConfig(topic.config, patch);
      // A stream's record is its append's messages joined by commas (broker/streams/json.ts), not
      // one value a schema could check: a schema subject would refuse every multi-message append.
      if (topic.stream !== undefined)
        for (const key of ["value_schema_subject", "key_schema_subject"] as const)
          if (config[key] !== undefined)
            throw new BrokerError(
              Errors.invalidConfig,
              `Cannot update the config of topic "${name}": ${key} is not supported on a Durable Stream's topic (its records hold several messages each)`,
              { key },
            );
      try {
        await writeJsonAtomic(
          this.#fs,
          joinPath(topic.dir, "topic.json"),
          topicFile({ ...topic, config }, topic.partitions.length),
        );
      } catch (err) {
        throw storageFailure(
          `Cannot update the config of topic "${name}": writing topic.json failed`,
          err,
        );
      }
      topic.config = config;
      this.#logger.log("info", "topic.config_updated", { topic: name, config: { ...config } });
      return this.describe(topic);
    });
  }

  /**
   * Replaces a Durable Stream's `stream` section (`broker/streams/meta.ts`): `topic.json` is
   * rewritten atomically (serialized with config updates) and the new section applies once the
   * rewrite is durable. Resolves with the new section.
   * @throws BrokerError topic_not_found, unavailable, storage_error; internal if the topic is not a stream.
   */
  async updateStream(
    name: string,
    update: (stream: StreamMeta) => StreamMeta,
  ): Promise<StreamMeta> {
    return this.#configWrites.run(async () => {
      const topic = this.get(name);
      if (topic.stream === undefined)
        throw new BrokerError(Errors.internal, `Cannot update topic "${name}": it is not a stream`);
      const stream = update(structuredClone(topic.stream));
      try {
        await writeJsonAtomic(
          this.#fs,
          joinPath(topic.dir, "topic.json"),
          topicFile({ ...topic, stream }, topic.partitions.length),
        );
      } catch (err) {
        throw storageFailure(
          `Cannot update stream "${stream.path}": writing topic.json failed`,
          err,
        );
      }
      topic.stream = stream;
      return stream;
    });
  }

  /**
   * Records the cluster topic id of a topic whose copy has none (made before topic ids existed:
   * docs/cluster.md "Topic ids"), or whose id is `replacing` (an id another broker's upgrade
   * gave the same record first), with the etcd create revision of the topic's record if given:
   * `topic.json` is rewritten atomically (serialized with config updates), and the id applies
   * once the rewrite is durable. Setting the id it already has does nothing.
   * @throws BrokerError topic_not_found, unavailable, storage_error; invalid_request for a
   *   malformed id; internal if the topic already has another id (another incarnation is never
   *   adopted: the caller moves such a copy aside instead).
   */
  async setTopicId(
    name: string,
    topicId: string,
    topicRevision?: number,
    replacing?: string,
  ): Promise<void> {
    if (!isTopicId(topicId))
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot set the topic id of topic "${name}": ${quote(topicId)} is not 32 lowercase hex digits`,
      );
    if (topicRevision !== undefined && !isTopicRevision(topicRevision))
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot set the topic id of topic "${name}": revision ${quote(topicRevision)} is not a positive integer`,
      );
    await this.#configWrites.run(async () => {
      const topic = this.get(name);
      if (topic.topicId === topicId) return;
      if (topic.topicId !== undefined && topic.topicId !== replacing)
        throw new BrokerError(
          Errors.internal,
          `Cannot set the topic id of topic "${name}" to ${topicId}: it has topic id ${topic.topicId} (another incarnation of the name)`,
        );
      try {
        await writeJsonAtomic(
          this.#fs,
          joinPath(topic.dir, "topic.json"),
          topicFile({ ...topic, topicId, topicRevision }, topic.partitions.length),
        );
      } catch (err) {
        throw storageFailure(
          `Cannot set the topic id of topic "${name}": writing topic.json failed`,
          err,
        );
      }
      this.#logger.log("info", "topic.id_adopted", {
        topic: name,
        topic_id: topicId,
        ...(topic.topicId === undefined ? {} : { replaced_topic_id: topic.topicId }),
      });
      topic.topicId = topicId;
      topic.topicRevision = topicRevision;
    });
  }

  /** Every served topic that is a Durable Stream. */
  streams(): Topic[] {
    return [...this.#topics.values()].filter((t) => t.stream !== undefined);
  }

  /**
   * Closes every partition (a failure is logged), then writes the clean-stop record naming every
   * partition that closed cleanly (docs/decisions.md §17; a failure to write it is logged, and the
   * next start recovers as after a crash). The topics stay listed until {@link clear}.
   */
  async close(): Promise<void> {
    for (const topic of this.#topics.values()) {
      await Promise.all(
        topic.partitions.map((p) =>
          p.close().catch((err: unknown) =>
            this.#logger.log("error", "partition.close_failed", {
              partition: p.name,
              error: errorMessage(err),
            }),
          ),
        ),
      );
    }
    const clean = new Map<string, CleanStop>();
    for (const topic of this.#topics.values())
      for (const p of topic.partitions) if (p.cleanStop !== null) clean.set(p.name, p.cleanStop);
    if (clean.size === 0) return;
    try {
      await writeCleanStop(this.#fs, this.#dataDir, clean);
    } catch (err) {
      this.#logger.log("warn", "broker.clean_stop_write_failed", {
        file: joinPath(this.#dataDir, cleanStopFileName),
        error: errorMessage(err),
      });
    }
  }

  /** Forgets every topic, after {@link close} and once nothing (the producer state's last snapshot) reads them. */
  clear(): void {
    this.#topics.clear();
  }
}

/**
 * Parses and checks the `topic.json` of the topic whose directory is `name`: start-up and
 * `es-broker check` both judge the file with it, a Durable Stream's `stream` section too
 * (`broker/streams/meta.ts`).
 * @throws Error naming the first problem (a name other than the directory's, a bad partition
 *   count or config).
 */
export function parseTopicFile(
  name: string,
  value: unknown,
): {
  partitionCount: number;
  config: TopicConfig;
  stream?: StreamMeta;
  topicId?: string;
  topicRevision?: number;
} {
  const meta = value as {
    name?: unknown;
    partitions?: unknown;
    config?: unknown;
    stream?: unknown;
    topic_id?: unknown;
    topic_revision?: unknown;
  };
  if (typeof meta !== "object" || meta === null) throw new Error("not an object");
  if (meta.name !== name)
    throw new Error(`names topic ${JSON.stringify(meta.name)}, but its directory is "${name}"`);
  // Absent: a copy made before topic ids existed, or a topic outside a cluster.
  if (meta.topic_id !== undefined && !isTopicId(meta.topic_id))
    throw new Error(`topic_id ${JSON.stringify(meta.topic_id)} is not 32 lowercase hex digits`);
  if (meta.topic_revision !== undefined && !isTopicRevision(meta.topic_revision))
    throw new Error(
      `topic_revision ${JSON.stringify(meta.topic_revision)} is not a positive integer`,
    );
  return {
    partitionCount: validatePartitionCount(meta.partitions),
    config: mergeTopicConfig(defaultTopicConfig, meta.config),
    ...(meta.stream === undefined ? {} : { stream: parseStreamMeta(meta.stream) }),
    ...(meta.topic_id === undefined ? {} : { topicId: meta.topic_id }),
    ...(meta.topic_revision === undefined ? {} : { topicRevision: meta.topic_revision }),
  };
}

function isTopicRevision(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0;
}

/** The content of a topic's `topic.json` (docs/storage.md "Files on disk"). */
function topicFile(
  topic: Pick<Topic, "name" | "config" | "stream" | "topicId" | "topicRevision">,
  partitions: number,
): Record<string, unknown> {
  return {
    name: topic.name,
    partitions,
    config: topic.config,
    ...(topic.stream === undefined ? {} : { stream: topic.stream }),
    ...(topic.topicId === undefined ? {} : { topic_id: topic.topicId }),
    ...(topic.topicRevision === undefined ? {} : { topic_revision: topic.topicRevision }),
  };
}
