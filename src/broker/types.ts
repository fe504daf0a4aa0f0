/**
 * The Broker interface the front doors call. HTTP and TCP only decode a request into one of these
 * calls and encode its result; neither holds logic of its own. Errors thrown are
 * {@link BrokerError}s with a row of the error table (`src/broker/errors.ts`).
 */
import type { EntryBatch } from "../storage/record.ts";

/** Cleanup policy of a topic (spec: Retention and compaction). */
export type CleanupPolicy = "delete" | "compact" | "compact,delete";

/**
 * A topic's config as stored in `topic.json` and shown over HTTP (snake_case, like Kafka's).
 * Every field is always present once validated; defaults fill what the creator left out.
 */
export interface TopicConfig {
  /** Roll the active segment once it reaches this many bytes (≥ 1024; default 128 MiB). */
  segment_bytes: number;
  /** Roll the active segment once it is this old, in ms (default 7 days). */
  segment_ms: number;
  /** Delete sealed segments whose newest record is older than this, in ms; −1 = forever (default 7 days). */
  retention_ms: number;
  /** Delete oldest sealed segments while the partition is larger than this, in bytes; −1 = no limit (default). */
  retention_bytes: number;
  /** Which background task runs: "delete" (retention), "compact", or both. Default "delete". */
  cleanup_policy: CleanupPolicy;
  /** How long a tombstone survives compaction, in ms (default 1 day). */
  tombstone_retention_ms: number;
  /**
   * With `--cold-storage-dir`: how long the cold tier keeps a segment that retention moved there,
   * by its newest record, in ms; −1 = forever (default).
   */
  cold_retention_ms: number;
  /** Largest timestamp lead over the broker clock accepted, in ms (default 1 hour; DECISIONS 5). */
  max_timestamp_skew_ms: number;
}

/** Size and bounds of one partition. Offsets are JS numbers (exact to 2^53 − 1). */
export interface PartitionInfo {
  partition: number;
  /** First offset still stored. */
  logStartOffset: number;
  /** One past the last offset an fsync has covered: what consumers may read up to. */
  highWatermark: number;
  /** Bytes of all segments' logs. */
  sizeBytes: number;
  /** Number of segments. */
  segmentCount: number;
  /** True once a failed fsync or uncleanable write has fenced the partition (restart required). */
  fenced: boolean;
}

/** A topic with its config and partitions. */
export interface TopicDescription {
  name: string;
  config: TopicConfig;
  partitions: PartitionInfo[];
}

/** Arguments of {@link Broker.createTopic}. */
export interface CreateTopicRequest {
  /** `[A-Za-z0-9._-]`, 1–249 characters, not "." or "..". */
  name: string;
  /** 1 … 4096. */
  partitions: number;
  /** Any subset of {@link TopicConfig}; unknown keys and bad values are refused (invalid_config). */
  config?: Record<string, unknown>;
}

/** Arguments of {@link Broker.produce}. */
export interface ProduceRequest {
  topic: string;
  /**
   * The partition for every record. Omitted (or −1): each keyed record goes to
   * `murmur2(key) % partitions` (Kafka's partitioner); keyless records of one request all go to
   * the next partition in round-robin order.
   */
  partition?: number;
  /**
   * Optional per-record partitions, one entry per record of `batch` in order (length must equal
   * `batch.count`): entry i ≥ 0 sends record i to that partition; −1 lets the broker pick for that
   * record exactly as if `partition` were omitted (murmur2 of the key, or round-robin for keyless
   * records). When given, it takes precedence over `partition`. Added for HTTP produce, where one
   * request may name a different partition for each record. Still all-or-nothing: every named
   * partition is checked before anything is appended (@throws partition_not_found).
   */
  partitions?: Int32Array;
  /** The records, validated with `scanEntries`. */
  batch: EntryBatch;
}

/** A run of records of one request that went to one partition at consecutive offsets. */
export interface ProduceSpan {
  partition: number;
  /** Offset of the first record of the run. */
  baseOffset: number;
  /** Number of records in the run. */
  count: number;
}

/** Where the records of a produce request went, as runs in request order. */
export interface ProduceResult {
  spans: ProduceSpan[];
}

/** Arguments of {@link Broker.fetch}. */
export interface FetchRequest {
  topic: string;
  partition: number;
  /** First offset wanted; must be within [log start offset, high watermark]. */
  offset: number;
  /** At most this many records (1 … 100 000; default 1000). */
  maxRecords?: number;
  /** At most about this many bytes of stored records (default 1 MiB); at least one record is returned even if larger. */
  maxBytes?: number;
  /** If no record is available at `offset`, wait up to this many ms for one (0 … 60 000; default 0). */
  waitMs?: number;
  /** Aborting ends a long-poll wait early with an empty result. */
  signal?: AbortSignal;
}

/**
 * Stored records exactly as on disk (spec: Records), back to back: `record_len`, offset, timestamp,
 * key, value, CRC. Decode with `RecordCursor`; send verbatim so a client can check CRCs end to end.
 */
export interface RecordSet {
  bytes: Uint8Array;
  count: number;
}

/** Result of {@link Broker.fetch}. */
export interface FetchResult {
  records: RecordSet;
  /** The offset to fetch next: one past the last record returned, or past a skipped gap. */
  nextOffset: number;
  highWatermark: number;
  logStartOffset: number;
}

/**
 * What {@link Broker.cleanup} did: per partition, the retention pass and the compaction pass, as
 * `storage/retention.ts` (`RetentionResult`) and `storage/compaction.ts` (`CompactionResult`)
 * describe them (snake_case fields, as shown over HTTP).
 */
export interface CleanupReport {
  topic: string;
  partitions: { partition: number; retention: object; compaction: object }[];
}

/** The operations both front doors offer. */
export interface Broker {
  /** Creates a topic and its partition directories durably. @throws topic_exists, invalid_topic_name, invalid_config. */
  createTopic(request: CreateTopicRequest): Promise<TopicDescription>;
  /** Every topic (name order), with partitions. */
  listTopics(): Promise<TopicDescription[]>;
  /** One topic. @throws topic_not_found. */
  describeTopic(name: string): Promise<TopicDescription>;
  /** Deletes a topic and its data. @throws topic_not_found. */
  deleteTopic(name: string): Promise<void>;
  /**
   * Appends a batch; resolves once it is durable (with `--flush-every-records 1`, after the fsync
   * that covers it). All records of the request are appended or none is.
   * @throws topic_not_found, partition_not_found, invalid_timestamp, partition_fenced, storage_error, unsupported.
   */
  produce(request: ProduceRequest): Promise<ProduceResult>;
  /** Reads stored records. @throws topic_not_found, partition_not_found, offset_out_of_range, invalid_request. */
  fetch(request: FetchRequest): Promise<FetchResult>;
  /** Log start offset and high watermark of one partition. @throws topic_not_found, partition_not_found. */
  listOffsets(request: { topic: string; partition: number }): Promise<{ logStartOffset: number; highWatermark: number }>;
  /** Flushes and closes every partition; pending long-polls end. Further calls throw unavailable. */
  close(): Promise<void>;
  /**
   * Changes a topic's config (`PATCH /v1/topics/{topic}`): any subset of {@link TopicConfig},
   * validated like a creation's; `topic.json` is rewritten atomically and the values apply at once.
   * Optional: a broker without it answers 404 on that route.
   * @throws topic_not_found, invalid_config, storage_error.
   */
  updateTopicConfig?(name: string, config: Record<string, unknown>): Promise<TopicDescription>;
  /**
   * Runs retention and compaction on every partition of a topic now
   * (`POST /v1/admin/topics/{topic}/cleanup`). Optional, as above. @throws topic_not_found.
   */
  cleanup?(topic: string): Promise<CleanupReport>;
  /** Storage state of every partition (`GET /v1/admin/storage`). Optional, as above. */
  describeStorage?(): object;
}
