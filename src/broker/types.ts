/**
 * The Broker interface the front doors call. HTTP and TCP only decode a request into one of these
 * calls and encode its result; neither holds logic of its own. Errors thrown are
 * {@link BrokerError}s with a row of the error table (`src/broker/errors.ts`).
 */
import type { AppendSink } from "../storage/group-commit.ts";
import type { EntryBatch } from "../storage/record.ts";
import type { StreamMeta } from "./streams/meta.ts";
import type { Streams } from "./streams/types.ts";

/** Cleanup policy of a topic (docs/storage.md "Retention and compaction"). */
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
  /** Largest timestamp lead over the broker clock accepted, in ms (default 1 hour; docs/decisions.md §5). */
  max_timestamp_skew_ms: number;
  /**
   * Which time a stored record carries, and so which time retention measures (docs/storage.md
   * "Retention", docs/decisions.md §16): "create_time" (the default) keeps the producer's
   * timestamp; "log_append_time" replaces every record's timestamp with the broker clock at append.
   * Absent (topics created before it existed) = "create_time".
   */
  timestamp_type: TimestampType;
  /**
   * With `--mirror-to`: true makes retention keep segments holding records the mirror has not
   * forwarded yet (docs/edge.md); absent or false deletes them anyway, reported as an error, and
   * the mirror stops that partition with a gap error.
   */
  mirror_hold_retention?: boolean;
  /**
   * Schema registry subject every record value must match (docs/registry.md "Produce-time
   * validation"); absent (the default) = values are not checked. The only optional fields: absent
   * until set, removed by setting them to null.
   */
  value_schema_subject?: string;
  /** Schema registry subject every record key must match; absent = keys are not checked. */
  key_schema_subject?: string;
  /**
   * How checked keys and values are encoded: "confluent" (the default: magic byte 0, the schema
   * id, then the encoded value) or "json" (plain JSON text, valid under the subject's latest version).
   */
  schema_format?: SchemaFormat;
  /**
   * Cluster mode (docs/cluster.md "Topics"): how many brokers hold each partition (1 to 16;
   * default min(3, live brokers)). Fixed at creation. Single-node mode stores it and keeps one copy.
   */
  replication_factor?: number;
  /**
   * Cluster mode: the fewest in-sync replicas with which a write is acknowledged (1 to
   * replication_factor; default min(2, replication_factor)). Fixed at creation.
   */
  min_insync_replicas?: number;
  /**
   * Cluster mode (docs/cluster.md "Replication"): a follower that has not been caught up to the
   * leader's log end for this many ms leaves the ISR (100 to 3 600 000; absent = 10 000). Applies
   * at once when changed; null removes it.
   */
  replica_lag_ms?: number;
}

/** Whose clock a topic's stored timestamps come from (`timestamp_type`). */
export type TimestampType = "create_time" | "log_append_time";

/** How a topic's checked keys and values are encoded (`schema_format`). */
export type SchemaFormat = "confluent" | "json";

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
  /** Present when the topic holds a Durable Stream (`broker/streams/meta.ts`, docs/durable-streams.md). */
  stream?: StreamMeta;
  /**
   * The cluster topic's incarnation as this copy records it (docs/cluster.md "Topic ids"), for
   * the cluster node; absent outside a cluster and on copies made before topic ids. The HTTP and
   * TCP apis do not show it.
   */
  topic_id?: string;
  /** The etcd create revision of the topic's record the copy took its id from (with `topic_id`). */
  topic_revision?: number;
}

/** Arguments of {@link Broker.createTopic}. */
export interface CreateTopicRequest {
  /** `[A-Za-z0-9._-]`, 1–249 characters, not "." or "..". */
  name: string;
  /** 1 … 4096. */
  partitions: number;
  /** Any subset of {@link TopicConfig}; unknown keys and bad values are refused (invalid_config). */
  config?: Record<string, unknown>;
  /**
   * The cluster topic's id (32 lowercase hex digits), written into `topic.json`: set only by the
   * cluster node creating its local copy (docs/cluster.md "Topic ids"), never from a client's
   * request. @throws invalid_request if malformed.
   */
  topic_id?: string;
  /**
   * With `topic_id`: the etcd create revision of the topic's record (a positive integer), written
   * into `topic.json` beside it. @throws invalid_request if malformed.
   */
  topic_revision?: number;
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
  /**
   * Makes the produce idempotent (Kafka's semantics; `broker/producers/sequence.ts` has the decision
   * table). Every record of the request must then go to one partition (@throws invalid_request
   * otherwise). A retry of a stored batch appends nothing and answers its original offsets with
   * `duplicate: true`.
   */
  producer?: ProducerIdentity;
}

/** Who sends an idempotent produce, and where the request sits in its sequence. */
export interface ProducerIdentity {
  /** Stable id chosen by the client: 1–249 characters of `[A-Za-z0-9._:-]`. */
  id: string;
  /** 0 … 2^31 − 1. A request with a higher epoch fences every older one; a new epoch starts at sequence 0. */
  epoch: number;
  /** Base sequence: the sequence number of the request's first record; every record counts one. */
  sequence: number;
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
  /** Idempotent produce only: true when the batch was already stored and nothing was appended. */
  duplicate?: boolean;
}

/**
 * How a produce started with {@link Broker.produceTo} ends: exactly one of its methods is called,
 * once. It must not throw.
 * - `appended(partition, baseOffset, count)`: every record went to `partition`, at
 *   `[baseOffset, baseOffset + count)` (a {@link ProduceResult} of one span, not a duplicate).
 * - `produced(result)`: any other success (several partitions, a duplicate).
 * - `failed(err)`: the errors {@link Broker.produce} rejects with, or a storage error not yet
 *   mapped to one: answer `toBrokerError(err)` (`broker/storage-failure.ts`).
 */
export interface ProduceSink extends AppendSink {
  produced(result: ProduceResult): void;
}

/** A partition of a topic. */
export interface TopicPartition {
  topic: string;
  partition: number;
}

/** Arguments of {@link Broker.joinGroup}. */
export interface JoinGroupRequest {
  /** Group name: 1–249 characters of `[A-Za-z0-9._-]`. */
  group: string;
  /** Topics the member consumes (each must exist); 1 … 1000. */
  topics: string[];
  /** Heartbeats must come within this many ms (100 … 3 600 000; default 30 000). */
  sessionTimeoutMs?: number;
  /** Rejoin as this existing member (after a rebalance, or to change topics) instead of joining as a new one. */
  memberId?: string;
}

/** What a member holds after joining or a heartbeat. */
export interface GroupAssignment {
  memberId: string;
  /** Bumped by every rebalance; commits must carry the current one. */
  generation: number;
  /** The partitions this member owns in this generation, sorted by topic then partition. */
  assignments: TopicPartition[];
  sessionTimeoutMs: number;
}

/** Result of {@link Broker.heartbeat}. */
export interface HeartbeatResult {
  generation: number;
  /** True when the generation the member reported is not the current one: it should rejoin (its assignment changed). */
  rejoin: boolean;
  /** The member's partitions in the current generation. */
  assignments: TopicPartition[];
}

/** Arguments of {@link Broker.commitOffsets}. */
export interface CommitOffsetsRequest {
  group: string;
  /** The committing member; may be omitted only while the group has no members (a standalone consumer). */
  memberId?: string;
  /** The member's generation; required with `memberId`. */
  generation?: number;
  /** Next offset to consume per partition: 0 … high watermark (docs/decisions.md §8). */
  offsets: { topic: string; partition: number; offset: number }[];
}

/** One member as a group description shows it. */
export interface GroupMemberDescription {
  memberId: string;
  topics: string[];
  sessionTimeoutMs: number;
  assignments: TopicPartition[];
}

/** One partition of a group description: its committed offset, lag and owner. */
export interface GroupOffsetDescription {
  topic: string;
  partition: number;
  /** Next offset to consume, as last committed; null if never committed. */
  committed: number | null;
  /** The partition's high watermark; null if its topic is unavailable. */
  highWatermark: number | null;
  /** high watermark − committed; null when either is unknown. */
  lag: number | null;
  /** The member that owns the partition in this generation, or null. */
  owner: string | null;
}

/** Result of {@link Broker.describeGroup}. */
export interface GroupDescription {
  group: string;
  generation: number;
  members: GroupMemberDescription[];
  /** Every partition the group subscribes to or has committed, sorted by topic then partition. */
  offsets: GroupOffsetDescription[];
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
 * Stored records exactly as on disk (docs/storage.md "Records"), back to back: `record_len`, offset, timestamp,
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
  /**
   * Gives the storage read's buffer, which `records.bytes` views, back for the next read to
   * reuse (docs/storage.md "Index and reads"). Calling it is optional; whoever calls it does so
   * once, after the last use of `records.bytes` and every view of it (the TCP transport: once
   * its socket write of the answer completed). Absent when there is nothing to give back.
   */
  release?: () => void;
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

/** A broker of the cluster as {@link ClusterMetadata} lists it. */
export interface ClusterBrokerInfo {
  node_id: number;
  /** `host:port` of its TCP listener (`--advertise-tcp`). */
  tcp: string;
  /** Base URL of its HTTP listener (`--advertise-http`). */
  http: string;
  /** `host:port` of its Kafka listener, when it has one (`--kafka-port`). */
  kafka?: string;
  /**
   * The id of the data directory it runs on, as it registered. In the HTTP answer
   * (`GET /v1/cluster`) only: with {@link ClusterPartitionInfo.forgotten} it says whether a node
   * is back on a forgotten directory.
   */
  data_dir_id?: string;
}

/**
 * A replica whose records are on a data directory its node no longer runs on (a start on an
 * empty directory took it out), or one an unclean election superseded: the partition state's
 * `forgotten` entry (docs/cluster.md "Unclean leader election").
 */
export interface ClusterForgottenReplica {
  node_id: number;
  /** The data directory that holds (or held) the records. */
  data_dir_id: string;
  /** The partition's leader epoch the entry holds for (for a superseded one: the election's). */
  leader_epoch: number;
  /** An unclean election elected another directory over this one. Absent: false. */
  superseded?: true;
  /** For a superseded entry: the same node's directory elected instead, when known. */
  replaced_by?: string;
}

/** One partition's replication state (docs/cluster.md "Partition state"). */
export interface ClusterPartitionInfo {
  partition: number;
  /** Node id of the leader, −1 while the partition is offline. */
  leader: number;
  leader_epoch: number;
  replicas: number[];
  isr: number[];
  elr: number[];
  /**
   * The topic's `min_insync_replicas`: with fewer ISR members the leader refuses writes. In the
   * HTTP answer (`GET /v1/cluster`) only; the TCP and Kafka Metadata answers leave it out.
   */
  min_insync_replicas?: number;
  /**
   * The partition state's forgotten or superseded data directories, when it has any: why an
   * offline partition waits (`es-broker cluster status`). In the HTTP answer only.
   */
  forgotten?: ClusterForgottenReplica[];
  /** Only in the leader's answer: its high watermark. */
  high_watermark?: number;
  /** Only in the leader's answer: its log end offset. */
  log_end_offset?: number;
  /** Only in the leader's answer: each follower's durable position, lag in records (−1 unknown). */
  followers?: { node_id: number; durable_offset: number; lag: number; caught_up_ms_ago: number }[];
}

/**
 * What a broker in cluster mode knows of the cluster (`Broker.clusterMetadata`): the live
 * brokers, the controller, and every topic's partitions with leaders. Clients route by it.
 */
export interface ClusterMetadata {
  cluster_id: string;
  /** The node id of the broker that answered. */
  node_id: number;
  /** Node id of the controller, −1 while there is none. */
  controller: number;
  brokers: ClusterBrokerInfo[];
  topics: { name: string; partitions: ClusterPartitionInfo[] }[];
  /**
   * The answering broker's replica-fetch links to the other live brokers it fetched from (in
   * `GET /v1/cluster`; the TCP and Kafka Metadata answers leave it out) (docs/cluster.md "TLS between brokers").
   */
  peer_links?: ClusterPeerLink[];
}

/** One link of {@link ClusterMetadata.peer_links}. */
export interface ClusterPeerLink {
  /** The peer's node id. */
  node_id: number;
  /** Its advertised TCP address. */
  tcp: string;
  /** Whether the link speaks TLS. */
  tls: boolean;
  /** Whether its last connection or fetch worked. */
  ok: boolean;
  /** Why not (null while ok). */
  error: string | null;
  /** The failure was in TLS (certificate not trusted or not naming the host, client certificate refused, plain peer). */
  tls_failure: boolean;
  /** Ms since it last changed between ok and failing. */
  since_ms_ago: number;
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
   * Cluster mode only (absent in single-node mode): brokers, controller and per-partition leaders
   * of `topics` (every topic when absent). @throws topic_not_found for a named topic that does not exist.
   */
  clusterMetadata?(topics?: readonly string[]): Promise<ClusterMetadata>;
  /**
   * Appends a batch; resolves once it is durable (with `--flush-every-records 1`, after the fsync
   * that covers it). All records of the request are appended or none is.
   * @throws topic_not_found, partition_not_found, invalid_timestamp, partition_fenced, storage_error, unsupported;
   *   with `producer`: out_of_order_sequence, producer_fenced, unknown_producer, duplicate_sequence.
   */
  produce(request: ProduceRequest): Promise<ProduceResult>;
  /**
   * {@link produce} answered through `sink` (exactly one call, once, possibly before this
   * returns; it never throws): the small-request path, without a promise and its reactions per
   * request (docs/benchmarks.md "Small requests (issue #22)"). Optional: `produceVia`
   * (`broker/produce-sink.ts`) falls back to {@link produce} for a broker without it.
   */
  produceTo?(request: ProduceRequest, sink: ProduceSink): void;
  /** Reads stored records. @throws topic_not_found, partition_not_found, offset_out_of_range, invalid_request. */
  fetch(request: FetchRequest): Promise<FetchResult>;
  /**
   * Log start offset and high watermark of one partition; with `timestampMs` (ms since the
   * epoch) also `offset`: the first offset whose record timestamp is at or after it, or the high
   * watermark when none is, and `offsetTimestampMs`, that record's timestamp (−1 when none is)
   * (Kafka's ListOffsets by timestamp), as
   * docs/storage.md "Finding an offset by timestamp" describes.
   * @throws topic_not_found, partition_not_found, invalid_request (a negative timestamp).
   */
  listOffsets(request: { topic: string; partition: number; timestampMs?: number }): Promise<{
    logStartOffset: number;
    highWatermark: number;
    offset?: number;
    offsetTimestampMs?: number;
  }>;
  /**
   * Joins a consumer group (or rejoins as `memberId`) and rebalances it (`broker/groups.ts`).
   * @throws invalid_request, topic_not_found, unknown_member, unavailable, storage_error.
   */
  joinGroup(request: JoinGroupRequest): Promise<GroupAssignment>;
  /** Keeps a member's session alive. @throws group_not_found, unknown_member, unavailable. */
  heartbeat(request: {
    group: string;
    memberId: string;
    generation?: number;
  }): Promise<HeartbeatResult>;
  /** Removes a member and rebalances. @throws group_not_found, unknown_member, unavailable, storage_error. */
  leaveGroup(request: { group: string; memberId: string }): Promise<void>;
  /**
   * Commits consumer offsets atomically and durably (all or none).
   * @throws invalid_request, invalid_offset, topic_not_found, partition_not_found, unknown_member,
   *   stale_generation, not_partition_owner, unavailable, storage_error.
   */
  commitOffsets(request: CommitOffsetsRequest): Promise<void>;
  /**
   * {@link commitOffsets}, calling `replicate` with the offsets once the commit passed every check
   * and before they are stored, holding the group's lock: if it throws, nothing is stored and the
   * commit fails with its error. Cluster mode writes etcd there, so an offset etcd did not take
   * is never shown as committed (docs/cluster.md "Consumer groups"). Optional.
   */
  commitOffsetsReplicated?(
    request: CommitOffsetsRequest,
    replicate: (
      offsets: readonly { topic: string; partition: number; offset: number }[],
    ) => Promise<void>,
  ): Promise<void>;
  /** A group's members, generation, and per-partition committed offsets and lag. @throws group_not_found, unavailable. */
  describeGroup(group: string): Promise<GroupDescription>;
  /** Every available group (name order). */
  listGroups(): Promise<GroupDescription[]>;
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
   * Records the cluster topic id of a local copy that has none (made before topic ids:
   * docs/cluster.md "Topic ids"), or has `replacing`; `topic.json` is rewritten atomically.
   * Optional: the cluster node's local broker has it. @throws topic_not_found, storage_error;
   * internal if the copy has another id.
   */
  setTopicId?(
    name: string,
    topicId: string,
    topicRevision?: number,
    replacing?: string,
  ): Promise<void>;
  /**
   * Runs retention and compaction on every partition of a topic now
   * (`POST /v1/admin/topics/{topic}/cleanup`). Optional, as above. @throws topic_not_found.
   */
  cleanup?(topic: string): Promise<CleanupReport>;
  /** Storage state of every partition (`GET /v1/admin/storage`). Optional, as above. */
  describeStorage?(): object;
  /**
   * The Durable Streams protocol over this broker's storage (`broker/streams/`,
   * docs/durable-streams.md). Optional: without it `/v1/stream/…` answers 404.
   */
  readonly streams?: Streams;
  /**
   * Joins a client-assigned group (`broker/groups.ts` "Client-assigned groups"); resolves once the
   * rebalance completes (every member rejoined, or the rebalance timeout passed). Optional.
   * @throws invalid_request, unknown_member, inconsistent_group_protocol, unavailable.
   */
  joinAssignedGroup?(request: AssignedJoinRequest): Promise<AssignedJoinResult>;
  /**
   * Moves a group's generation up to at least `floor`, never down; returns the generation after.
   * Cluster mode calls it when this broker becomes the group's coordinator (docs/cluster.md
   * "Consumer groups"). Optional. @throws invalid_request, unavailable, storage_error.
   */
  raiseGroupGeneration?(group: string, floor: number): Promise<number>;
  /**
   * Calls `listener` with a group's generation whenever the group's state is about to be written
   * (its generation may have moved: a member joined, left or expired, the group emptied). Cluster
   * mode records each new generation in etcd (docs/cluster.md "Consumer groups"). One listener;
   * a later call replaces it. Optional.
   */
  onGroupGeneration?(listener: (group: string, generation: number) => void): void;
  /**
   * Replaces the local topics as the consumer groups' view of partitions (cluster mode: every
   * topic of the cluster, with offsets known only where this broker leads; docs/cluster.md
   * "Consumer groups"). `view(topic, local)` returns the topic's partitions (`local()` gives this
   * broker's own) or throws BrokerError topic_not_found. Optional.
   */
  useGroupTopics?(view: GroupTopicsView): void;
  /**
   * Sets a group's committed offsets whatever its members and generation (a new coordinator
   * taking the offsets acknowledged in etcd; docs/cluster.md "Consumer groups"). Optional.
   * @throws invalid_request, unavailable, storage_error.
   */
  adoptGroupOffsets?(
    group: string,
    offsets: readonly { topic: string; partition: number; offset: number }[],
  ): Promise<void>;
  /**
   * Hands out the leader's assignment; a member's call resolves with its own assignment once the
   * leader's has arrived. Optional.
   * @throws unknown_member, stale_generation, rebalance_in_progress, group_not_found, unavailable.
   */
  syncAssignedGroup?(request: AssignedSyncRequest): Promise<{ assignment: Uint8Array }>;
  /**
   * Keeps a client-assigned member's session. Optional.
   * @throws unknown_member, stale_generation, rebalance_in_progress (rejoin), group_not_found.
   */
  heartbeatAssignedGroup?(request: {
    group: string;
    memberId: string;
    generation: number;
  }): Promise<void>;
  /**
   * A new idempotent producer identity for a client that has no id of its own (Kafka's
   * InitProducerId): a numeric id no producer state holds, at epoch 0. Optional.
   */
  initProducerId?(): Promise<{ producerId: number; epoch: number }>;
  /**
   * Hands out the next epoch of an idempotent producer id (docs/decisions.md §20; TCP api 15,
   * `POST /v1/producers/{producer_id}/epoch`): `max(stored + 1, atLeast)`, or for an id without
   * state `max(min(Unix second, 2^31 − 1 − 2^24), atLeast)`; durable (a fsynced snapshot of the
   * producer state) before it resolves, and the previous incarnation is fenced from then on.
   * `atLeast` 0 … 2^31 − 1, 0 = none. Optional: a broker without it answers `unsupported_api`
   * (TCP) or 404 (HTTP), and clients fall back to a clock epoch.
   * @throws invalid_request, producer_epoch_exhausted, unavailable; not_leader (cluster mode, on a
   *   broker other than the controller).
   */
  initProducerEpoch?(request: { producerId: string; atLeast?: number }): Promise<{ epoch: number }>;
  /**
   * Serves a follower's replica fetch (api 14, `protocol/apis/replica-fetch.ts`; cluster mode,
   * docs/cluster.md "Replication"). Optional: a broker without replication answers
   * `unsupported_api`.
   * @throws unauthenticated (no or a wrong broker credential), not_leader, fenced_leader_epoch,
   *   offset_out_of_range, topic_not_found, partition_not_found.
   */
  replicaFetch?(request: ReplicaFetchRequest): Promise<ReplicaFetchResult>;
}

/** One entry of a partition's leader-epoch history: the first offset written under `epoch`. */
export interface LeaderEpochEntry {
  epoch: number;
  startOffset: number;
}

/**
 * An idempotent producer's batch as the leader validated and journaled it, sent to followers with
 * the records it describes so that a new leader deduplicates retries (field failures #28). The
 * fields of the producer journal's entry (`storage/producer-journal.ts`) without topic and
 * partition.
 */
export interface ReplicatedProducerBatch {
  producerId: string;
  epoch: number;
  baseSequence: number;
  /** Records in the whole batch. */
  batchCount: number;
  /** Index in the batch of the first record this entry covers (0 unless a crash cut it short). */
  firstIndex: number;
  /** Records this entry covers, from `baseOffset`. */
  count: number;
  baseOffset: number;
  /** CRC-32 of the first record's key_len | key | value_len | value. */
  fingerprint: number;
  /** The leader's clock when it journaled the batch, ms since the epoch. */
  timestampMs: number;
}

/** A follower's fetch from the leader (api 14; docs/cluster.md "Replica fetch"). */
export interface ReplicaFetchRequest {
  topic: string;
  partition: number;
  /** The follower's node id. */
  replicaId: number;
  /** The leader epoch the follower believes current. */
  leaderEpoch: number;
  /** The follower's durable (fsynced) log end: where it wants records from, and its position. */
  fetchOffset: number;
  /** The epoch of the follower's last record per its epoch history; −1 for an empty history. */
  lastFetchedEpoch: number;
  /** Most bytes of records to answer (at least one record is answered if any is there). */
  maxBytes: number;
  /** Long-poll: how long the leader may wait when it has nothing at `fetchOffset`, in ms. */
  waitMs: number;
  /** The broker credential (the cluster secret), empty without one. */
  credential: Uint8Array;
  /**
   * The follower's incarnation: the lease id its registration in etcd names
   * (`Membership.incarnation`); "" from an older broker. A leader credits only the incarnation
   * registered now (docs/cluster.md "Replica fetch").
   */
  incarnation: string;
  /**
   * The topic id the follower's copy records (docs/cluster.md "Topic ids"; version 2). Absent or
   * "" (an older follower, or a copy without one): not compared. A leader whose copy has another
   * id refuses the fetch `inconsistent_topic_id`.
   */
  topicId?: string;
  /** Aborted when the connection closes. */
  signal?: AbortSignal;
}

/** The leader's answer to a {@link ReplicaFetchRequest}. */
export interface ReplicaFetchResult {
  /** The leader's epoch. */
  leaderEpoch: number;
  /** The high watermark: the smallest durable position in the ISR. */
  highWatermark: number;
  logStartOffset: number;
  /** The leader's log end offset (written, durable or not). */
  logEndOffset: number;
  /**
   * Set when the follower's log diverges from the leader's epoch history: the follower truncates
   * its log to `truncateTo` (and its history to epochs ≤ `epoch`) before fetching again; no
   * records are answered then.
   */
  diverging: { epoch: number; endOffset: number } | null;
  /** The leader's epoch history entries that cover the records answered (and the one before). */
  epochs: LeaderEpochEntry[];
  /** Idempotent producer batches starting inside the records answered. */
  producers: ReplicatedProducerBatch[];
  /** Stored records verbatim, from `fetchOffset` on. */
  records: RecordSet;
  /**
   * The leader's side only, when set: the records as chunks to send back to back (its kept recent
   * writes, `PartitionLog.readRecent`), `records.count` of them; `records.bytes` is then empty.
   * Never set on a decoded answer.
   */
  recordChunks?: readonly Uint8Array[];
}

/**
 * Arguments of {@link Broker.joinAssignedGroup}: a member of a group whose members assign the
 * partitions themselves (Kafka's JoinGroup; `broker/groups.ts` "Client-assigned groups").
 */
export interface AssignedJoinRequest {
  group: string;
  /** Rejoin as this member; omitted for a new member. */
  memberId?: string;
  /** The client's own name (Kafka's client_id), shown in descriptions and part of new member ids. */
  clientId: string;
  /** Heartbeats must come within this many ms (100 … 3 600 000). */
  sessionTimeoutMs: number;
  /** How long the coordinator waits for every member to rejoin once a rebalance starts, in ms. */
  rebalanceTimeoutMs: number;
  /** Kind of group (Kafka's protocol_type, e.g. "consumer"); every member must give the same. */
  protocolType: string;
  /** Assignment protocols the member supports, in its order of preference, with opaque metadata. */
  protocols: { name: string; metadata: Uint8Array }[];
  /** The topics the member subscribes to, if the transport could read them (for descriptions only). */
  topics: string[];
}

/** Result of {@link Broker.joinAssignedGroup}, once the rebalance it joined has completed. */
export interface AssignedJoinResult {
  memberId: string;
  generation: number;
  /** The protocol chosen for this generation. */
  protocol: string;
  /** The member that computes the assignment. */
  leader: string;
  /** Every member with its metadata for the chosen protocol; empty unless this member leads. */
  members: { memberId: string; metadata: Uint8Array }[];
}

/** Arguments of {@link Broker.syncAssignedGroup}. */
export interface AssignedSyncRequest {
  group: string;
  memberId: string;
  generation: number;
  /**
   * The leader's assignment: opaque bytes per member, with the partitions they name when the
   * transport could read them (owners in descriptions). Empty from other members.
   */
  assignments: { memberId: string; assignment: Uint8Array; partitions: TopicPartition[] }[];
}

/**
 * A cluster-mode broker's view of replication at a scrape (`ClusterNode.observeReplication`,
 * docs/operations.md "Metrics", replication): every partition it holds a replica of, with the
 * state etcd gives it and its own role.
 */
export interface ReplicationSnapshot {
  /** Whether this broker is the controller now. */
  controller: boolean;
  /** Whether this broker's membership lease is live (it may acknowledge writes). */
  membershipLive: boolean;
  /** Partitions of the cluster with no leader (every replica down or behind). */
  offlinePartitions: number;
  partitions: {
    topic: string;
    partition: number;
    role: "leader" | "follower" | "none";
    replicas: number;
    isr: number;
    /** The topic's `min_insync_replicas`: below it the leader refuses writes. */
    minInsyncReplicas: number;
    /** No leader now. */
    offline: boolean;
    leaderEpoch: number;
    /** As leader: the partition's high watermark; else null. */
    highWatermark: number | null;
    /** As follower: how far behind its leader (`ReplicaManager.fetchLag`); else null. */
    fetchLag: { records: number; ms: number } | null;
  }[];
  /** Links to live brokers this broker fetched from, and whether TLS failed on each (cluster/peer-links.ts). */
  peers?: { nodeId: number; tls: boolean; ok: boolean; tlsFailure: boolean }[];
  /** etcd watches found deaf and reopened since the start (cluster/watch-guard.ts). */
  etcdWatchesDeaf?: number;
}

/**
 * The partitions of `topic` as the consumer groups see them (`Broker.useGroupTopics`):
 * `highWatermark` / `logEndOffset` null where this broker does not know them. `local()` returns
 * this broker's own partitions of the topic, or throws topic_not_found.
 * @throws BrokerError topic_not_found.
 */
export type GroupTopicsView = (
  topic: string,
  local: () => readonly { highWatermark: number | null; logEndOffset: number | null }[],
) => readonly {
  highWatermark: number | null;
  logEndOffset: number | null;
  /** The largest offset a commit may name: absent, `highWatermark`; null, no bound known. */
  commitLimit?: number | null;
}[];
