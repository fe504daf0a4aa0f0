/**
 * The broker: topics and their partitions on one data directory, produce routing, fetch with
 * long-poll. Transports call it through the {@link Broker} interface; every error it throws is a
 * {@link BrokerError} with a row of the error table.
 *
 * Data directory (docs/storage.md "Files on disk"):
 * ```
 * <dataDir>/topics/<topic>/topic.json     name, partition count, config (replaced atomically)
 * <dataDir>/topics/<topic>/<partition>/   segments
 * <dataDir>/trash/<ms>-<n>/               a deleted topic's directory (short name; its topic.json names the topic), removed at once or at the next start
 * <dataDir>/topics/<topic>/log_start_offsets.json  log start offsets moved by retention (see storage/log-start-offsets.ts)
 * ```
 * With `coldStorageDir`, retention moves sealed segments to `<cold>/topics/<topic>/<partition>/`
 * and fetches read them from there (`broker/cleanup.ts`, `storage/cold-store.ts`).
 *
 * Creating a topic writes `topic.json` first (the commit point), then the partition directories;
 * a start after a crash in between creates the missing partitions. A topic whose `topic.json` is
 * empty or unparseable is reported and made unavailable, never reset (docs/decisions.md §9).
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { assert } from "../lib/assert.ts";
import { partitionForKey } from "../lib/murmur2.ts";
import {
  recoveryProgressMs,
  fetchBytesDefault,
  fetchBytesMax,
  fetchRecordsDefault,
  fetchRecordsMax,
  fetchWaitMsMax,
} from "../lib/limits.ts";
import { FsError, dirname, isFsError, joinPath, type FileSystem } from "../fs/types.ts";
import { PartitionLog, type PartitionOptions } from "../storage/partition.ts";
import { StorageError } from "../storage/errors.ts";
import {
  RecordFormatError,
  EntryCursor,
  checkEntryTimestamps,
  type EntryBatch,
} from "../storage/record.ts";
import {
  isTempFileName,
  listStaleTempFiles,
  readJsonFile,
  writeJsonAtomic,
} from "../storage/metadata.ts";
import { errorMessage } from "../lib/errors.ts";
import { partitionName } from "../lib/topic-partition.ts";
import { BrokerError, Errors } from "./errors.ts";
import { storageFailure, storageFailureKind } from "./storage-failure.ts";
import { CleanupService, type PartitionCleanup } from "./cleanup.ts";
import { Mutex } from "../lib/mutex.ts";
import { cleanupIntervalMsDefault } from "../lib/limits.ts";
import {
  defaultTopicConfig,
  mergeTopicConfig,
  validatePartitionCount,
  validateTopicName,
} from "./config.ts";
import { GroupCoordinator } from "./groups.ts";
import { ProducerStates } from "./producers.ts";
import { producerExpiryMsDefault } from "../lib/limits.ts";
import { utf8 } from "../lib/bytes.ts";
import { plural } from "../lib/text.ts";
import type {
  Broker,
  CommitOffsetsRequest,
  CreateTopicRequest,
  GroupAssignment,
  GroupDescription,
  HeartbeatResult,
  JoinGroupRequest,
  FetchRequest,
  FetchResult,
  PartitionInfo,
  ProduceRequest,
  ProduceResult,
  ProduceSpan,
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
  /** Root of the cold tier (`--cold-storage-dir`); without it retention deletes segments outright. */
  coldStorageDir?: string;
  /** Period of the retention and of the compaction task, in ms (`--cleanup-interval-ms`, default 30 000; 0 = no background tasks). */
  cleanupIntervalMs?: number;
  /** Most distinct keys one compaction pass remembers (default `compactionKeysMax`; tests lower it). */
  compactionKeysMax?: number;
  /** Idle time after which an idempotent producer's state is forgotten, in ms (`--producer-expiry-ms`, default 7 days). */
  producerExpiryMs?: number;
}

interface Topic {
  name: string;
  dir: string;
  config: TopicConfig;
  partitions: PartitionLog[];
  /** Next partition for keyless records (round-robin, one partition per request). */
  roundRobin: number;
}

/** Storage errors as the error table's rows. */
export function toBrokerError(err: unknown): unknown {
  if (err instanceof FsError) {
    // A disk read or write failed outside the append path's own handling (e.g. a fetch's read):
    // storage_error if retrying can help, else internal (storage-failure.ts).
    return storageFailure("Cannot complete the request", err);
  }
  if (!(err instanceof StorageError)) return err;
  switch (err.kind) {
    case "fenced":
      return new BrokerError(Errors.partitionFenced, err.message);
    case "write_failed":
      return new BrokerError(storageFailureKind(err), err.message);
    case "out_of_range":
      return new BrokerError(Errors.offsetOutOfRange, err.message);
    case "unsupported":
      return new BrokerError(Errors.unsupported, err.message);
    case "closed":
      return new BrokerError(Errors.unavailable, err.message);
    case "invalid":
      return new BrokerError(Errors.invalidRequest, err.message);
  }
}

/** The broker over one data directory. */
export class LocalBroker implements Broker {
  #fs: FileSystem;
  #dataDir: string;
  #topicsDir: string;
  #trashDir: string;
  #clock: Clock;
  #logger: Logger;
  #flushEveryRecords: number;
  #flushIntervalMs: number;
  #topics = new Map<string, Topic>();
  /** Topics that exist on disk but cannot be served, with the reason (docs/decisions.md §9). */
  #unavailable = new Map<string, string>();
  /** Names being created or deleted right now. */
  #busy = new Set<string>();
  /** Topics being deleted right now: still listed (until the rename commits), but every request is refused as unavailable. */
  #deleting = new Set<string>();
  #closed = false;
  #trashCounter = 0;
  #cleanup: CleanupService;
  /** Serialises topic config updates (`topic.json` rewrites). */
  #configWrites = new Mutex();
  /** Consumer groups (`broker/groups.ts`); opened after the topics. */
  #groups!: GroupCoordinator;
  /** Idempotent producer state (`broker/producers.ts`); opened after the topics. */
  #producers!: ProducerStates;
  #producerExpiryMs: number;

  private constructor(options: LocalBrokerOptions) {
    this.#fs = options.fs;
    this.#dataDir = options.dataDir;
    this.#topicsDir = joinPath(options.dataDir, "topics");
    this.#trashDir = joinPath(options.dataDir, "trash");
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#flushEveryRecords = options.flushEveryRecords ?? 1;
    this.#flushIntervalMs = options.flushIntervalMs ?? 1000;
    this.#producerExpiryMs = options.producerExpiryMs ?? producerExpiryMsDefault;
    this.#cleanup = new CleanupService({
      fs: options.fs,
      clock: options.clock,
      logger: options.logger,
      coldStorageDir: options.coldStorageDir,
      intervalMs: options.cleanupIntervalMs ?? cleanupIntervalMsDefault,
      compactionKeysMax: options.compactionKeysMax,
    });
  }

  /**
   * Opens the data directory and recovers every topic (docs/storage.md "Recovery after a crash").
   * @throws FsError if the data directory itself cannot be created or read.
   */
  static async open(options: LocalBrokerOptions): Promise<LocalBroker> {
    const broker = new LocalBroker(options);
    await broker.#load();
    // Groups and producer state reconcile with the recovered logs, so they open after the topics
    // and before anything (cleanup included) can change a log.
    broker.#groups = await GroupCoordinator.open({
      fs: options.fs,
      dataDir: options.dataDir,
      clock: options.clock,
      logger: options.logger,
      topics: { partitions: (topic) => broker.#topic(topic).partitions },
    });
    broker.#producers = await ProducerStates.open({
      fs: options.fs,
      dataDir: options.dataDir,
      clock: options.clock,
      logger: options.logger,
      expiryMs: broker.#producerExpiryMs,
      partitions: {
        get: (topic, partition) => {
          const t = broker.#topics.get(topic);
          if (t === undefined) return broker.#unavailable.has(topic) ? "unavailable" : "missing";
          return t.partitions[partition] ?? "missing";
        },
      },
    });
    broker.#cleanup.start();
    return broker;
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
    // Long recoveries say how far they got: one progress line at most every recoveryProgressMs.
    const names = await fs.readdir(this.#topicsDir);
    const started = this.#clock.nowMs();
    let lastProgress = started;
    let done = 0;
    for (const name of names) {
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
      if (isTempFileName(name)) {
        this.#logger.log("warn", "recovery.stray_file", {
          file: joinPath(this.#topicsDir, name),
          reason: "temporary file of an interrupted write",
        });
        continue;
      }
      try {
        validateTopicName(name);
      } catch {
        this.#logger.log("warn", "recovery.stray_file", {
          file: joinPath(this.#topicsDir, name),
          reason: "not a valid topic name",
        });
        continue;
      }
      await this.#loadTopic(name);
    }
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

  async #loadTopic(name: string): Promise<void> {
    const dir = joinPath(this.#topicsDir, name);
    const metaPath = joinPath(dir, "topic.json");
    for (const stale of await listStaleTempFiles(this.#fs, dir)) {
      this.#logger.log("warn", "recovery.stray_file", {
        file: joinPath(dir, stale),
        reason: "temporary file of an interrupted write",
      });
    }
    const read = await readJsonFile(this.#fs, metaPath);
    if ("missing" in read) {
      // createTopic makes the directory durable before it writes topic.json, its commit point. A
      // directory holding nothing else is a creation a crash interrupted, never acknowledged:
      // remove it (reported) so the name can be created again.
      const entries = (await this.#fs.readdir(dir)).filter((n) => !isTempFileName(n));
      if (entries.length === 0) {
        await this.#fs.removeTree(dir);
        await this.#fs.syncDir(this.#topicsDir);
        this.#logger.log("warn", "recovery.incomplete_topic_removed", {
          topic: name,
          dir,
          reason: "topic.json is missing and the directory holds no partition",
        });
        return;
      }
      this.#unavailable.set(name, `${metaPath} is missing`);
      this.#logger.log("error", "recovery.topic_unavailable", {
        topic: name,
        file: metaPath,
        reason: "topic.json is missing",
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
    try {
      const meta = read.value as { name?: unknown; partitions?: unknown; config?: unknown };
      if (typeof meta !== "object" || meta === null) throw new Error("not an object");
      if (meta.name !== name)
        throw new Error(`names topic ${JSON.stringify(meta.name)}, but its directory is "${name}"`);
      partitionCount = validatePartitionCount(meta.partitions);
      config = mergeTopicConfig(defaultTopicConfig, meta.config);
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
    const topic: Topic = { name, dir, config, partitions: [], roundRobin: 0 };
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
      for (let p = 0; p < partitionCount; p++)
        topic.partitions.push(
          await this.#openPartition(topic, p, this.#cleanup.partitionOptions(storage, p)),
        );
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
    });
  }

  #checkOpen(): void {
    if (this.#closed)
      throw new BrokerError(
        Errors.unavailable,
        "Cannot serve the request: the broker is shutting down",
      );
  }

  #topic(name: string): Topic {
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
    throw new BrokerError(Errors.topicNotFound, `Cannot find topic "${name}"`);
  }

  #partition(topic: Topic, partition: unknown): PartitionLog {
    if (typeof partition !== "number" || !Number.isInteger(partition) || partition < 0) {
      throw new BrokerError(
        Errors.invalidRequest,
        `Invalid partition ${JSON.stringify(partition)} for topic "${topic.name}": must be a non-negative integer`,
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

  #describe(topic: Topic): TopicDescription {
    return {
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

  async createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
    this.#checkOpen();
    const name = validateTopicName(request.name);
    const partitionCount = validatePartitionCount(request.partitions);
    const config = mergeTopicConfig(defaultTopicConfig, request.config);
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
      // Cold data left by an earlier topic of this name (a deletion interrupted by a crash) is not this topic's.
      await this.#cleanup.removeColdData(name);
      await writeJsonAtomic(this.#fs, joinPath(dir, "topic.json"), {
        name,
        partitions: partitionCount,
        config,
      });
      const topic: Topic = { name, dir, config, partitions: [], roundRobin: 0 };
      try {
        await this.#openPartitions(topic, partitionCount);
      } catch (err) {
        for (const partition of topic.partitions) await partition.close().catch(() => {});
        this.#unavailable.set(name, `creating its partitions failed: ${errorMessage(err)}`);
        throw storageFailure(`Cannot create topic "${name}": creating its partitions failed`, err);
      }
      this.#topics.set(name, topic);
      this.#logger.log("info", "topic.created", { topic: name, partitions: partitionCount });
      return this.#describe(topic);
    } catch (err) {
      throw storageFailure(`Cannot create topic "${name}"`, err);
    } finally {
      this.#busy.delete(name);
    }
  }

  async listTopics(): Promise<TopicDescription[]> {
    this.#checkOpen();
    return [...this.#topics.values()]
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((t) => this.#describe(t));
  }

  async describeTopic(name: string): Promise<TopicDescription> {
    return this.#describe(this.#topic(name));
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
  async deleteTopic(name: string): Promise<void> {
    this.#checkOpen();
    const topic = this.#topics.get(name);
    const dir = joinPath(this.#topicsDir, name);
    if (topic === undefined && !this.#unavailable.has(name))
      throw new BrokerError(
        Errors.topicNotFound,
        `Cannot delete topic "${name}": it does not exist`,
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
      await this.#groups.forgetTopic(name);
      await this.#producers.forgetTopic(name);
      this.#logger.log("info", "topic.deleted", { topic: name });
    } finally {
      this.#deleting.delete(name);
      this.#busy.delete(name);
    }
  }

  async produce(request: ProduceRequest): Promise<ProduceResult> {
    const topic = this.#topic(request.topic);
    const batch = request.batch;
    const n = topic.partitions.length;
    try {
      checkEntryTimestamps(batch, this.#clock.nowMs(), topic.config.max_timestamp_skew_ms);
    } catch (err) {
      if (err instanceof RecordFormatError)
        throw new BrokerError(
          Errors.invalidTimestamp,
          `Cannot produce to topic "${topic.name}": ${err.message}`,
        );
      throw err;
    }
    const fixed = request.partition ?? -1;
    if (fixed !== -1) this.#partition(topic, fixed);
    const perRecord = request.partitions;
    if (perRecord !== undefined && perRecord.length !== batch.count) {
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot produce to topic "${topic.name}": ${plural(perRecord.length, "partition")} given for ${plural(batch.count, "record")}`,
      );
    }
    if (batch.count === 0) return { spans: [] };
    const producer = request.producer;

    // Decide each record's partition (request order). Fast path: one partition for all.
    let single = perRecord === undefined && fixed !== -1 ? fixed : -2;
    let assignment: Int32Array | null = null;
    if (single === -2) {
      assignment = new Int32Array(batch.count);
      const cursor = new EntryCursor(batch);
      let keyless = -1;
      let first = -1;
      let same = true;
      while (cursor.next()) {
        const i = cursor.index;
        let p = perRecord !== undefined ? perRecord[i] : -1;
        if (p === -1) p = fixed;
        if (p === -1) {
          const key = cursor.key();
          if (key !== null) p = partitionForKey(key, n);
          else {
            if (keyless === -1 && producer !== undefined) {
              // A retry must land where the original did: an idempotent producer's keyless
              // records go to the partition of its id, not round-robin.
              keyless = partitionForKey(utf8(String(producer.id)), n);
            } else if (keyless === -1) {
              keyless = topic.roundRobin % n;
              topic.roundRobin = (topic.roundRobin + 1) % n;
            }
            p = keyless;
          }
        } else {
          this.#partition(topic, p);
        }
        assignment[i] = p;
        if (first === -1) first = p;
        else if (p !== first) same = false;
      }
      if (same) single = first;
    }

    if (producer !== undefined) {
      if (single < 0) {
        throw new BrokerError(
          Errors.invalidRequest,
          `Cannot produce idempotently to topic "${topic.name}": every record of an idempotent request must go to one partition, but these go to several`,
          { field: "partition" },
        );
      }
      try {
        return await this.#producers.produce({
          producer,
          topic: topic.name,
          partition: single,
          log: topic.partitions[single],
          batch,
        });
      } catch (err) {
        throw toBrokerError(err);
      }
    }

    // Returned, not awaited: a suspended async function keeps its locals alive, and the batch
    // (and the request frame or HTTP body it points into) would then live until the fsync
    // instead of until the partition has written it.
    if (single >= 0)
      return this.#append(topic, single, batch).then((r) => ({
        spans: [{ partition: single, baseOffset: r.baseOffset, count: r.count }],
      }));

    assert(assignment !== null, "per-record assignment exists when records span partitions");
    const batches = splitByPartition(batch, assignment, n);
    const results = await Promise.all(
      batches.map((b, p) => (b === null ? Promise.resolve(null) : this.#append(topic, p, b))),
    );
    // Spans in request order: consecutive records of one partition at consecutive offsets merge.
    const nextOffset = results.map((r) => (r === null ? 0 : r.baseOffset));
    const spans: ProduceSpan[] = [];
    for (let i = 0; i < assignment.length; i++) {
      const p = assignment[i];
      const offset = nextOffset[p]++;
      const last = spans.at(-1);
      if (last !== undefined && last.partition === p && last.baseOffset + last.count === offset)
        last.count++;
      else spans.push({ partition: p, baseOffset: offset, count: 1 });
    }
    return { spans };
  }

  /** Appends `batch` to one partition; storage errors become BrokerErrors. Not async, so nothing here holds the batch until its fsync. */
  #append(
    topic: Topic,
    partition: number,
    batch: EntryBatch,
  ): Promise<{ baseOffset: number; count: number }> {
    return topic.partitions[partition].append(batch).catch((err: unknown) => {
      throw toBrokerError(err);
    });
  }

  async fetch(request: FetchRequest): Promise<FetchResult> {
    const topic = this.#topic(request.topic);
    const log = this.#partition(topic, request.partition);
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
    try {
      let result = await log.read({ offset, maxRecords, maxBytes });
      if (
        result.count === 0 &&
        waitMs > 0 &&
        offset >= result.highWatermark &&
        !request.signal?.aborted
      ) {
        await this.#waitForRecords(log, offset, waitMs, request.signal);
        if (!log.closed) result = await log.read({ offset, maxRecords, maxBytes });
      }
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

  /** Resolves when the high watermark passes `offset`, after `waitMs`, on abort, or on close. */
  #waitForRecords(
    log: PartitionLog,
    offset: number,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<void> {
    return new Promise((resolve) => {
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        unsubscribe();
        timer.cancel();
        signal?.removeEventListener("abort", finish);
        resolve();
      };
      const unsubscribe = log.subscribe(() => {
        if (log.highWatermark > offset || log.closed || log.fenced) finish();
      });
      const timer = this.#clock.setTimer(waitMs, finish);
      signal?.addEventListener("abort", finish);
    });
  }

  async listOffsets(request: {
    topic: string;
    partition: number;
  }): Promise<{ logStartOffset: number; highWatermark: number }> {
    const log = this.#partition(this.#topic(request.topic), request.partition);
    return { logStartOffset: log.logStartOffset, highWatermark: log.highWatermark };
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
    this.#checkOpen();
    return {
      cold_storage_dir: this.#cleanup.cold?.root ?? null,
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
   * Storage counters summed over the partitions open now (`GET /v1/admin/metrics`, used by the
   * benchmark harness): fsyncs, appends (produce requests), writes (system calls to the logs) and
   * records appended, each counted since its partition was opened. A deleted topic's counts leave
   * the sum, so compare two readings only while the same topics exist.
   */
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
   * Changes a topic's config (`PATCH /v1/topics/{topic}`): `patch` is validated over the current
   * config like a creation's (unknown keys, wrong types and out-of-range values are refused,
   * naming the key), `topic.json` is rewritten atomically, and the new values apply at once
   * (rolls read them on every append, cleanup at every pass).
   * @throws BrokerError topic_not_found, unavailable, invalid_config, storage_error.
   */
  async updateTopicConfig(name: string, patch: unknown): Promise<TopicDescription> {
    this.#topic(name);
    return this.#configWrites.run(async () => {
      const topic = this.#topic(name);
      const config = mergeTopicConfig(topic.config, patch);
      try {
        await writeJsonAtomic(this.#fs, joinPath(topic.dir, "topic.json"), {
          name,
          partitions: topic.partitions.length,
          config,
        });
      } catch (err) {
        throw storageFailure(
          `Cannot update the config of topic "${name}": writing topic.json failed`,
          err,
        );
      }
      topic.config = config;
      this.#logger.log("info", "topic.config_updated", { topic: name, config: { ...config } });
      return this.#describe(topic);
    });
  }

  /**
   * Runs retention (trying the cold tier at once, despite any backoff) and then compaction on every
   * partition of `topic` now (`POST /v1/admin/topics/{topic}/cleanup`), and reports what each pass
   * did; each task follows the topic's cleanup policy.
   * @throws BrokerError topic_not_found, unavailable.
   */
  async cleanup(name: string): Promise<{ topic: string; partitions: PartitionCleanup[] }> {
    const topic = this.#topic(name);
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

  async describeGroup(group: string): Promise<GroupDescription> {
    this.#checkOpen();
    return this.#groups.describe(group);
  }

  async listGroups(): Promise<GroupDescription[]> {
    this.#checkOpen();
    return this.#groups.list();
  }

  /** The consumer-group coordinator (tests drive its session expiries with `settled()`). */
  get groups(): GroupCoordinator {
    return this.#groups;
  }

  /** The idempotent producer state (tests and reports inspect it). */
  get producerStates(): ProducerStates {
    return this.#producers;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#groups.close();
    await this.#cleanup.close();
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
    await this.#producers.close();
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
      `Invalid "${name}" ${JSON.stringify(value)}: must be an integer from ${min} to ${max}`,
    );
  }
  return value;
}

/** Copies each record's entry bytes into one batch per partition (null where a partition gets none). */
function splitByPartition(
  batch: EntryBatch,
  assignment: Int32Array,
  partitions: number,
): (EntryBatch | null)[] {
  const sizes = new Array<number>(partitions).fill(0);
  const counts = new Array<number>(partitions).fill(0);
  const cursor = new EntryCursor(batch);
  while (cursor.next()) {
    sizes[assignment[cursor.index]] += cursor.end - cursor.start;
    counts[assignment[cursor.index]]++;
  }
  const buffers = sizes.map((s, p) => (counts[p] > 0 ? new Uint8Array(s) : null));
  const used = new Array<number>(partitions).fill(0);
  const again = new EntryCursor(batch);
  while (again.next()) {
    const p = assignment[again.index];
    const buf = buffers[p];
    if (buf === null) continue;
    buf.set(batch.bytes.subarray(again.start, again.end), used[p]);
    used[p] += again.end - again.start;
  }
  return buffers.map((bytes, p) =>
    counts[p] === 0 || bytes === null ? null : { bytes, count: counts[p] },
  );
}
