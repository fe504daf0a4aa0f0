/**
 * The error table: every error a client can see, with its permanent code, its TCP error number,
 * its HTTP status and whether retrying can help. HTTP and TCP both map errors through this one
 * table. Codes are permanent; a retired code is never reused.
 *
 * Messages name the failed action first, values quoted, detail after a colon:
 * `Cannot append to partition "orders/3": partition is fenced after a failed fsync, restart required`.
 */

/** One row of the error table. */
export interface ErrorKind {
  /** Stable snake_case code, sent as `error.code` over HTTP. */
  readonly code: string;
  /** Error number in TCP responses (0 is success; never reused). */
  readonly tcp: number;
  /** HTTP status. */
  readonly http: number;
  /** True if the same request may succeed later without change. */
  readonly retriable: boolean;
}

function kind(code: string, tcp: number, http: number, retriable: boolean): ErrorKind {
  return Object.freeze({ code, tcp, http, retriable });
}

/** Every error kind, by name. */
export const Errors = Object.freeze({
  /** A malformed request: a missing or wrongly typed field, bad base64, bad JSON. */
  invalidRequest: kind("invalid_request", 1, 400, false),
  /** The topic does not exist. */
  topicNotFound: kind("topic_not_found", 2, 404, false),
  /** The topic exists but has no such partition. */
  partitionNotFound: kind("partition_not_found", 3, 404, false),
  /** A topic with that name already exists. */
  topicExists: kind("topic_exists", 4, 409, false),
  /** The fetch offset is below the log start offset or above the high watermark. */
  offsetOutOfRange: kind("offset_out_of_range", 5, 416, false),
  /** The request body or frame is over `--max-request-bytes`. */
  requestTooLarge: kind("request_too_large", 6, 413, false),
  /** One record's key and value are over the record size limit. */
  recordTooLarge: kind("record_too_large", 7, 413, false),
  /** The partition refuses writes after a failed fsync or an uncleanable failed write (docs/decisions.md §7). */
  partitionFenced: kind("partition_fenced", 8, 503, false),
  /** A write failed in a way that can pass (e.g. the disk is full; `broker/storage-failure.ts`) and its partial bytes were cut off; nothing was appended. */
  storageError: kind("storage_error", 9, 507, true),
  /** An invalid topic name. */
  invalidTopicName: kind("invalid_topic_name", 10, 400, false),
  /** An invalid topic config or partition count. */
  invalidConfig: kind("invalid_config", 11, 400, false),
  /** A record timestamp is negative (other than −1) or too far ahead of the broker clock. */
  invalidTimestamp: kind("invalid_timestamp", 12, 400, false),
  /** The TCP api number or version is not known. */
  unsupportedApi: kind("unsupported_api", 13, 400, false),
  /** No such HTTP route. */
  notFound: kind("not_found", 14, 404, false),
  /** The broker is shutting down or the object is unavailable (e.g. its metadata file is unreadable). */
  unavailable: kind("unavailable", 15, 503, true),
  /** The offset would exceed 2^53 − 1, or a stored offset is beyond it (docs/decisions.md §6). */
  unsupported: kind("unsupported", 16, 400, false),
  /**
   * A consumer-group request carries a generation older (or newer) than the group's: a rebalance
   * happened since the member last joined. The member rejoins and retries with the new generation.
   */
  staleGeneration: kind("stale_generation", 17, 409, false),
  /** A member commits an offset for a partition the group's current assignment gives to another member (or to none). */
  notPartitionOwner: kind("not_partition_owner", 18, 409, false),
  /** The member id is not (or no longer) in the group: it left or its session expired. It joins again for a new id. */
  unknownMember: kind("unknown_member", 19, 409, false),
  /** The consumer group does not exist (no member ever joined and nothing was ever committed). */
  groupNotFound: kind("group_not_found", 20, 404, false),
  /** A committed offset is negative or above the partition's high watermark (docs/decisions.md §8). */
  invalidOffset: kind("invalid_offset", 21, 400, false),
  /**
   * An idempotent produce skips sequence numbers: its base sequence is above the next one the
   * broker expects for that producer and partition (details: `expected_sequence`). Nothing was appended.
   */
  outOfOrderSequence: kind("out_of_order_sequence", 22, 409, false),
  /** An idempotent produce carries an epoch older than the producer's current one: a newer incarnation fenced it (details: `expected_epoch`). */
  producerFenced: kind("producer_fenced", 23, 403, false),
  /**
   * The broker holds no state for this producer id (never seen, or idle past the producer state
   * expiry and forgotten) and the request does not start at sequence 0. Recoverable: start a new
   * epoch at sequence 0 (details: `expected_sequence` 0).
   */
  unknownProducer: kind("unknown_producer", 24, 409, false),
  /**
   * An idempotent produce repeats a sequence already stored, but older than the batches the broker
   * still remembers, so its original offsets cannot be given back. Nothing was appended (details:
   * `expected_sequence`).
   */
  duplicateSequence: kind("duplicate_sequence", 25, 409, false),
  /**
   * (HTTP only) The request line and headers are over the HTTP server's limit (16 KiB). Answered by
   * the runtime layer (`src/runtime/http-connection-errors.ts`); the connection is closed after it.
   */
  headersTooLarge: kind("headers_too_large", 26, 431, false),
  /**
   * (HTTP only) The request did not arrive whole in time (Node's `headersTimeout`, 60 s, for the
   * request line and headers; `requestTimeout`, 300 s, for the whole request). The connection is
   * closed after the answer; the request was never handed to the broker.
   */
  requestTimeout: kind("request_timeout", 27, 408, true),
  /**
   * The request carries no API key, a malformed one, or one the broker does not know (revoked
   * keys included), while authentication is on (`docs/security.md`). HTTP adds `WWW-Authenticate`;
   * over TCP the connection is closed after this answer.
   */
  unauthenticated: kind("unauthenticated", 28, 401, false),
  /** The key's role or patterns do not allow the operation on that topic or group (details: `operation`, `topic` / `group`). */
  forbidden: kind("forbidden", 29, 403, false),
  /** No API key has that name (`keys revoke`). */
  keyNotFound: kind("key_not_found", 30, 404, false),
  /** An API key with that name already exists (`keys create`). */
  keyExists: kind("key_exists", 31, 409, false),
  /**
   * A produce to a topic whose config names a schema subject carries a record whose key or value
   * does not match it (docs/registry.md "Produce-time validation"). Nothing of the request was
   * appended. Details: `record_index`, `part` ("key" | "value"), `subject`, `schema_id`,
   * `version`, `path` (null when not known).
   */
  invalidRecord: kind("invalid_record", 32, 422, false),
  /**
   * The API key a TCP connection or an SSE stream authenticated with was revoked (or changed in
   * `api_keys.json` and reloaded) while it was open (`docs/security.md`, "Revocation"). Answers the
   * long-polls and the requests not yet started at the revocation; the connection is then closed.
   * A new connection with the same key is refused `unauthenticated` (revoked) or gets the key's
   * new role (changed). HTTP adds `WWW-Authenticate` like `unauthenticated`.
   */
  keyRevoked: kind("key_revoked", 33, 401, false),
  /**
   * (HTTP only) The request body carries a `Content-Encoding` other than `identity` (gzip, br, …):
   * the broker decodes no content coding, and storing the coded bytes as records would answer 200
   * for data it did not understand (details: `header`).
   */
  unsupportedMediaType: kind("unsupported_media_type", 34, 415, false),
  /**
   * The producer id's epoch is at 2^31 − 1, the largest there is: the broker cannot hand out a
   * higher one (docs/decisions.md §20). Use a new producer id.
   */
  producerEpochExhausted: kind("producer_epoch_exhausted", 35, 409, false),
  // Durable Streams (docs/durable-streams.md); numbered from 40 so other work can take 26… meanwhile.
  /** No Durable Stream at that path (never created, deleted, or expired). */
  streamNotFound: kind("stream_not_found", 40, 404, false),
  /** A stream exists at that path with another configuration (content type, TTL, expiry, closure, fork), or the path names a topic that is not a stream. */
  streamConflict: kind("stream_conflict", 41, 409, false),
  /** The stream is closed: it takes no more appends (details: `next_offset`, its final offset). */
  streamClosed: kind("stream_closed", 42, 409, false),
  /** The append's Content-Type differs from the stream's. */
  contentTypeMismatch: kind("content_type_mismatch", 43, 409, false),
  /** A `Stream-Seq` not above the stream's last one (byte-wise order). */
  streamSeqConflict: kind("stream_seq_conflict", 44, 409, false),
  /** The stream was deleted but forks still read it (soft-deleted), or the offset is below what retention kept. */
  streamGone: kind("stream_gone", 45, 410, false),
  // Consumer groups whose members assign partitions themselves (the Kafka listener,
  // docs/kafka.md "Consumer groups"); numbered from 50 so other work can take numbers below.
  /**
   * The group is rebalancing: the member must join again (JoinGroup) before it syncs, heartbeats
   * or commits in the new generation.
   */
  rebalanceInProgress: kind("rebalance_in_progress", 50, 409, true),
  /**
   * The member's protocol type or assignment protocols share nothing with the group's current
   * members (also: a Kafka member joining a group of native members, or the other way round).
   */
  inconsistentGroupProtocol: kind("inconsistent_group_protocol", 51, 409, false),
  // Cluster mode (docs/cluster.md); numbered from 60.
  /**
   * This broker does not lead the partition (it follows, or nobody leads now): ask the leader.
   * The message names the leader's node id when it is known (details: `leader`, −1 if none).
   * On a produce it can also mean the records were appended by this broker while it led and it
   * was deposed before acknowledging them: they may be stored (as after `not_enough_replicas`);
   * an idempotent producer's resend is answered as a duplicate.
   */
  notLeader: kind("not_leader", 60, 503, true),
  /**
   * The partition's in-sync replicas are fewer than its `min_insync_replicas` (or fell below it
   * while the write waited): the write is not acknowledged. It may have been stored; a retry
   * through an idempotent producer is safe.
   */
  notEnoughReplicas: kind("not_enough_replicas", 61, 503, true),
  /** A request carries an older leader epoch than the receiver knows (a deposed leader, or a follower behind): refresh the partition state and retry. */
  fencedLeaderEpoch: kind("fenced_leader_epoch", 62, 409, true),
  /**
   * A topic config change (`PATCH /v1/topics/{topic}`) kept meeting other changes to the same
   * topic that landed first, through other brokers: it was read again and reapplied several
   * times, and nothing of it was stored. Sending the same change again applies it.
   */
  concurrentUpdate: kind("concurrent_update", 63, 409, true),
  /**
   * A replica fetch from a follower whose copy of the topic is of another incarnation than the
   * leader's (their topic ids differ: docs/cluster.md "Topic ids"): the topic was deleted and
   * created again and one of the two has not applied that yet. Nothing is answered or recorded;
   * the follower tries again, and the broker holding the other incarnation's copy replaces it.
   */
  inconsistentTopicId: kind("inconsistent_topic_id", 64, 409, true),
  /** A bug: the broker hit a state it did not expect, or a file-system failure retrying cannot fix (a name too long, a permission; `broker/storage-failure.ts`). Never expected in normal operation. */
  /**
   * A fetch needs records offloaded to the cold tier (`--cold-storage`) and the cold tier's store
   * did not answer within `--cold-read-timeout-ms`, or refused or failed the read
   * (docs/operations.md "Cold tier unavailable"). Nothing is wrong with the connection or the
   * broker: records above the cold tier are still served; retry later.
   */
  coldTierUnavailable: kind("cold_tier_unavailable", 65, 503, true),
  /**
   * A fetch needs records offloaded to the cold tier and the object the store holds fails the
   * checks every record gets before it is served (CRC, framing, offsets; or a cold directory's
   * file shorter than its index says): nothing wrong is served, and retrying reads the same
   * bytes. The broker logs `cold.record_corrupt` naming the object (docs/operations.md "Cold tier
   * unavailable"). Records above the cold tier are still served.
   */
  coldDataCorrupt: kind("cold_data_corrupt", 66, 500, false),
  internal: kind("internal", 99, 500, false),
});

/** A name of a row in {@link Errors}. */
export type ErrorName = keyof typeof Errors;

/** An error a client should see: carries its row of the table and a message naming what was wrong. */
export class BrokerError extends Error {
  override name = "BrokerError";
  /**
   * @param kind the row of {@link Errors}.
   * @param message names the failed action first, then the detail after a colon.
   * @param details optional machine-readable extras (e.g. `{ expected_sequence: 4 }`), sent over HTTP.
   */
  constructor(
    readonly kind: ErrorKind,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

/** Looks up a row by TCP error number (clients use this); undefined for unknown numbers. */
export function errorKindByTcp(tcp: number): ErrorKind | undefined {
  return Object.values(Errors).find((k) => k.tcp === tcp);
}

/** Looks up a row by its code string; undefined for unknown codes. */
export function errorKindByCode(code: string): ErrorKind | undefined {
  return Object.values(Errors).find((k) => k.code === code);
}

/**
 * The Kafka error code of each row (docs/kafka.md "Errors"), by the row's `code`; the Kafka
 * listener answers a BrokerError with it. A row missing here is answered −1
 * (UNKNOWN_SERVER_ERROR); a test checks every row has one.
 */
export const kafkaErrorCodes: Readonly<Record<string, number>> = Object.freeze({
  invalid_request: 42, // INVALID_REQUEST
  topic_not_found: 3, // UNKNOWN_TOPIC_OR_PARTITION
  partition_not_found: 3, // UNKNOWN_TOPIC_OR_PARTITION
  topic_exists: 36, // TOPIC_ALREADY_EXISTS
  offset_out_of_range: 1, // OFFSET_OUT_OF_RANGE
  request_too_large: 10, // MESSAGE_TOO_LARGE
  record_too_large: 10, // MESSAGE_TOO_LARGE
  partition_fenced: 56, // KAFKA_STORAGE_ERROR
  storage_error: 56, // KAFKA_STORAGE_ERROR
  invalid_topic_name: 17, // INVALID_TOPIC_EXCEPTION
  invalid_config: 40, // INVALID_CONFIG
  invalid_timestamp: 32, // INVALID_TIMESTAMP
  unsupported_api: 35, // UNSUPPORTED_VERSION
  not_found: 42, // INVALID_REQUEST
  unavailable: 5, // LEADER_NOT_AVAILABLE (group apis: 15 COORDINATOR_NOT_AVAILABLE)
  unsupported: 42, // INVALID_REQUEST
  stale_generation: 22, // ILLEGAL_GENERATION
  not_partition_owner: 22, // ILLEGAL_GENERATION: the member's view of the group is stale
  unknown_member: 25, // UNKNOWN_MEMBER_ID
  group_not_found: 69, // GROUP_ID_NOT_FOUND
  invalid_offset: 42, // INVALID_REQUEST
  out_of_order_sequence: 45, // OUT_OF_ORDER_SEQUENCE_NUMBER
  producer_fenced: 47, // INVALID_PRODUCER_EPOCH
  unknown_producer: 59, // UNKNOWN_PRODUCER_ID
  duplicate_sequence: 46, // DUPLICATE_SEQUENCE_NUMBER
  producer_epoch_exhausted: 47, // INVALID_PRODUCER_EPOCH: no epoch above the current one
  headers_too_large: 42, // INVALID_REQUEST
  request_timeout: 7, // REQUEST_TIMED_OUT
  invalid_record: 87, // INVALID_RECORD: a record its topic's schema refuses
  key_revoked: 58, // SASL_AUTHENTICATION_FAILED: the connection's key was revoked
  unsupported_media_type: 42, // INVALID_REQUEST: HTTP only (Content-Encoding)
  unauthenticated: 58, // SASL_AUTHENTICATION_FAILED
  forbidden: 29, // TOPIC_AUTHORIZATION_FAILED (group apis: 30 GROUP_AUTHORIZATION_FAILED)
  key_not_found: 42, // INVALID_REQUEST: keys are not managed through Kafka
  key_exists: 42, // INVALID_REQUEST: keys are not managed through Kafka
  rebalance_in_progress: 27, // REBALANCE_IN_PROGRESS
  inconsistent_group_protocol: 23, // INCONSISTENT_GROUP_PROTOCOL
  not_leader: 6, // NOT_LEADER_OR_FOLLOWER
  not_enough_replicas: 19, // NOT_ENOUGH_REPLICAS
  fenced_leader_epoch: 74, // FENCED_LEADER_EPOCH
  concurrent_update: 42, // INVALID_REQUEST: topic configs are not changed through Kafka
  inconsistent_topic_id: 103, // INCONSISTENT_TOPIC_ID (replica fetch only, never over Kafka)
  cold_tier_unavailable: 56, // KAFKA_STORAGE_ERROR: retriable; the cold tier's store failed
  cold_data_corrupt: 2, // CORRUPT_MESSAGE: a cold object fails its record checks
  // Durable Streams rows: a stream's topic is a topic, so a Kafka produce to a closed stream
  // meets stream_closed; the rest come from /v1/stream/ routes and map to the nearest meaning.
  stream_not_found: 3, // UNKNOWN_TOPIC_OR_PARTITION
  stream_conflict: 36, // TOPIC_ALREADY_EXISTS
  stream_closed: 42, // INVALID_REQUEST
  content_type_mismatch: 42, // INVALID_REQUEST
  stream_seq_conflict: 42, // INVALID_REQUEST
  stream_gone: 3, // UNKNOWN_TOPIC_OR_PARTITION
  internal: -1, // UNKNOWN_SERVER_ERROR
});

/** The Kafka error code for a row of the table (−1, UNKNOWN_SERVER_ERROR, if it has none). */
export function kafkaErrorCode(kind: ErrorKind): number {
  return kafkaErrorCodes[kind.code] ?? -1;
}
