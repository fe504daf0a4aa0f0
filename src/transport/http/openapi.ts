/**
 * The OpenAPI 3.1 document of the whole HTTP API (`GET /v1/openapi.json`; docs/http-api.md is the
 * prose reference). It is kept true by tests rather than by hand: every response the end-to-end
 * suite receives is validated against it (`test/e2e/openapi-setup.ts`, with ajv), a property-based
 * fuzz drives every operation from it with valid and invalid input (`test/e2e/openapi.test.ts`),
 * and a unit test checks that it names every route the app registers, and only those.
 *
 * Conventions of the document:
 * - Offsets and timestamps are JSON integers declared `format: int64` with the broker's range
 *   (offsets 0 … 2^53 − 1, docs/decisions.md §6): exact in every JSON parser that reads integers
 *   up to 2^53, which is every one in practice; the broker refuses to go beyond.
 * - Every error body is the one `Error` schema, `{"error":{"code","message","details"?}}`, its
 *   `code` one of the error table's (`src/broker/errors.ts`), and every status an operation can
 *   answer is listed for it: its own, and those any request can get (400 from the HTTP parser,
 *   401/403 with keys, 408, 413 for bodies, 431, 503 while recovering or shutting down).
 * - Every GET route also answers HEAD (the GET's statuses and headers, no body): the document
 *   lists it as a `head` operation whose id is the GET's with `Head` appended.
 */
import { Errors } from "../../broker/errors.ts";
import { compatibilityLevels } from "../../registry/compatibility.ts";
import { RegistryErrors } from "../../registry/errors.ts";
import { registryMediaType } from "./registry/routes.ts";
import {
  fetchBytesMax,
  fetchRecordsMax,
  fetchWaitMsMax,
  groupNameCharsMax,
  offsetMax,
  partitionsMax,
  producerEpochMax,
  producerIdCharsMax,
  httpProduceRecordsMax,
  topicNameCharsMax,
} from "../../lib/limits.ts";

type Schema = Record<string, unknown>;

const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });
const integer = (minimum: number, maximum: number, description?: string): Schema => ({
  type: "integer",
  minimum,
  maximum,
  ...(description === undefined ? {} : { description }),
});
const int64 = (minimum: number, maximum: number, description: string): Schema => ({
  type: "integer",
  format: "int64",
  minimum,
  maximum,
  description,
});
/** An object whose listed properties are all required and nothing else is allowed. */
const exact = (properties: Record<string, Schema>, description?: string): Schema => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
  ...(description === undefined ? {} : { description }),
});
const nullable = (schema: Schema): Schema => ({ oneOf: [schema, { type: "null" }] });
const array = (items: Schema, description?: string): Schema => ({
  type: "array",
  items,
  ...(description === undefined ? {} : { description }),
});

const namePattern = "^[A-Za-z0-9._-]+$";
const offset = int64(0, offsetMax, "An offset (0 … 2^53 - 1).");
const timestamp = int64(0, Number.MAX_SAFE_INTEGER, "Milliseconds since the Unix epoch.");

const keyInfoProperties: Record<string, Schema> = {
  id: { type: "string", pattern: "^[0-9a-f]{16}$" },
  name: { type: "string", minLength: 1, maxLength: 64, pattern: namePattern },
  role: ref("KeyRole"),
  topics: array({ type: "string" }),
  groups: array({ type: "string" }),
  created_ms: timestamp,
  last_used_ms: nullable(timestamp),
};

const schemas: Record<string, Schema> = {
  Error: exact(
    {
      error: {
        type: "object",
        properties: {
          code: ref("ErrorCode"),
          message: {
            type: "string",
            minLength: 1,
            description: "Names the failed action first, then what was wrong, after a colon.",
          },
          details: {
            type: "object",
            description: "Machine-readable extras: the field, parameter, limit, expected sequence…",
          },
        },
        required: ["code", "message"],
        additionalProperties: false,
      },
    },
    "Every error answer (docs/http-api.md, Errors).",
  ),
  ErrorCode: {
    type: "string",
    enum: [...new Set(Object.values(Errors).map((k) => k.code))],
    description: "A row of the error table (`src/broker/errors.ts`).",
  },
  TopicName: {
    type: "string",
    minLength: 1,
    maxLength: topicNameCharsMax,
    pattern: namePattern,
    description: 'Letters, digits, ".", "_" and "-"; not "." or "..".',
  },
  GroupName: {
    type: "string",
    minLength: 1,
    maxLength: groupNameCharsMax,
    pattern: namePattern,
  },
  Offset: offset,
  Timestamp: timestamp,
  TopicConfig: {
    type: "object",
    properties: {
      segment_bytes: integer(
        1024,
        Number.MAX_SAFE_INTEGER,
        "Roll the active segment at this size.",
      ),
      segment_ms: integer(
        1,
        Number.MAX_SAFE_INTEGER,
        "Roll the active segment at this age, in ms.",
      ),
      retention_ms: integer(-1, Number.MAX_SAFE_INTEGER, "-1 = keep forever."),
      retention_bytes: integer(-1, Number.MAX_SAFE_INTEGER, "-1 = no limit."),
      cleanup_policy: { type: "string", enum: ["delete", "compact", "compact,delete"] },
      tombstone_retention_ms: integer(0, Number.MAX_SAFE_INTEGER),
      cold_retention_ms: integer(-1, Number.MAX_SAFE_INTEGER, "-1 = forever."),
      max_timestamp_skew_ms: integer(0, Number.MAX_SAFE_INTEGER),
      timestamp_type: {
        type: "string",
        enum: ["create_time", "log_append_time"],
        description:
          "create_time (default): records keep the producer's timestamp, and retention goes by it; log_append_time: the broker's clock at append replaces it.",
      },
      value_schema_subject: {
        type: "string",
        description: "Records' values must match this schema registry subject (absent: unchecked).",
      },
      key_schema_subject: {
        type: "string",
        description: "Records' keys must match this subject (absent: unchecked).",
      },
      schema_format: { type: "string", enum: ["confluent", "json"] },
      replication_factor: integer(1, 16, "Cluster mode: brokers holding each partition."),
      min_insync_replicas: integer(
        1,
        16,
        "Cluster mode: fewest in-sync replicas that acknowledge a write.",
      ),
      replica_lag_ms: integer(
        100,
        3_600_000,
        "Cluster mode: a follower not caught up to the leader's log end for this long leaves the ISR (absent: 10 000).",
      ),
    },
    required: [
      "segment_bytes",
      "segment_ms",
      "retention_ms",
      "retention_bytes",
      "cleanup_policy",
      "tombstone_retention_ms",
      "cold_retention_ms",
      "max_timestamp_skew_ms",
    ],
    additionalProperties: false,
  },
  TopicConfigPatch: {
    type: "object",
    description:
      "Any subset of TopicConfig; each key is validated as at creation (400 invalid_config).",
    properties: {
      segment_bytes: { type: "integer" },
      segment_ms: { type: "integer" },
      retention_ms: { type: "integer" },
      retention_bytes: { type: "integer" },
      cleanup_policy: { type: "string", enum: ["delete", "compact", "compact,delete"] },
      tombstone_retention_ms: { type: "integer" },
      cold_retention_ms: { type: "integer" },
      max_timestamp_skew_ms: { type: "integer" },
      timestamp_type: { type: "string", enum: ["create_time", "log_append_time"] },
      value_schema_subject: { type: ["string", "null"], description: "null removes it." },
      key_schema_subject: { type: ["string", "null"], description: "null removes it." },
      schema_format: { type: ["string", "null"], enum: ["confluent", "json", null] },
      replication_factor: {
        type: "integer",
        description: "Cluster mode: set at creation (default min(3, live brokers)), fixed after.",
      },
      min_insync_replicas: {
        type: "integer",
        description:
          "Cluster mode: set at creation (default min(2, replication_factor)), fixed after.",
      },
      replica_lag_ms: { type: ["integer", "null"], description: "null removes it (10 000)." },
    },
    additionalProperties: false,
  },
  ClusterMetadata: exact(
    {
      cluster_id: { type: "string" },
      node_id: integer(0, 2_147_483_647, "The broker that answered."),
      controller: integer(-1, 2_147_483_647, "The controller's node id, -1 while none."),
      brokers: array(
        {
          type: "object",
          properties: {
            node_id: integer(0, 2_147_483_647),
            tcp: { type: "string", description: "HOST:PORT (--advertise-tcp)." },
            http: { type: "string", description: "Base URL (--advertise-http)." },
            kafka: { type: "string", description: "HOST:PORT of its Kafka listener, if any." },
            data_dir_id: {
              type: "string",
              description: "The id of the data directory it registered with.",
            },
          },
          required: ["node_id", "tcp", "http"],
          additionalProperties: false,
        },
        "Live brokers, by node id.",
      ),
      topics: array(
        exact({
          name: { type: "string" },
          partitions: array({
            type: "object",
            properties: {
              partition: integer(0, partitionsMax - 1),
              leader: integer(-1, 2_147_483_647, "-1 while the partition is offline."),
              leader_epoch: integer(0, Number.MAX_SAFE_INTEGER),
              replicas: array(integer(0, 2_147_483_647)),
              isr: array(integer(0, 2_147_483_647), "In-sync replicas."),
              elr: array(integer(0, 2_147_483_647), "Eligible leader replicas."),
              min_insync_replicas: integer(
                1,
                2_147_483_647,
                "The topic's min_insync_replicas: with fewer ISR members the leader refuses writes.",
              ),
              forgotten: array(
                {
                  type: "object",
                  properties: {
                    node_id: integer(0, 2_147_483_647),
                    data_dir_id: {
                      type: "string",
                      description: "The data directory that holds (or held) the records.",
                    },
                    leader_epoch: integer(0, Number.MAX_SAFE_INTEGER),
                    superseded: {
                      type: "boolean",
                      enum: [true],
                      description: "An unclean election elected another directory over it.",
                    },
                    replaced_by: {
                      type: "string",
                      description: "The same node's directory elected instead.",
                    },
                  },
                  required: ["node_id", "data_dir_id", "leader_epoch"],
                  additionalProperties: false,
                },
                'Present when the partition state has some: replicas whose records are on a data directory their node no longer runs on, or that an unclean election superseded (docs/cluster.md "Unclean leader election").',
              ),
              high_watermark: integer(0, Number.MAX_SAFE_INTEGER, "Only from the leader."),
              log_end_offset: integer(0, Number.MAX_SAFE_INTEGER, "Only from the leader."),
              followers: array(
                exact({
                  node_id: integer(0, 2_147_483_647),
                  durable_offset: integer(
                    -1,
                    Number.MAX_SAFE_INTEGER,
                    "-1 before its first fetch.",
                  ),
                  lag: integer(
                    -1,
                    Number.MAX_SAFE_INTEGER,
                    "Records behind the leader's log end; -1 unknown.",
                  ),
                  caught_up_ms_ago: integer(0, Number.MAX_SAFE_INTEGER),
                }),
                "Only from the leader: what it knows of each follower.",
              ),
            },
            required: ["partition", "leader", "leader_epoch", "replicas", "isr", "elr"],
            additionalProperties: false,
          }),
        }),
      ),
      peer_links: array(
        exact({
          node_id: integer(0, 2_147_483_647),
          tcp: { type: "string", description: "The peer's HOST:PORT (--advertise-tcp)." },
          tls: { type: "boolean", description: "The link speaks TLS." },
          ok: { type: "boolean", description: "Its last connection or fetch worked." },
          error: nullable({ type: "string" }),
          tls_failure: {
            type: "boolean",
            description:
              "The failure was in TLS: the peer's certificate is not trusted or does not name its host, it refused this broker's certificate, or it speaks plain TCP.",
          },
          since_ms_ago: integer(0, Number.MAX_SAFE_INTEGER),
        }),
        'The answering broker\'s replica-fetch links to the live brokers it fetched from (docs/cluster.md "TLS between brokers").',
      ),
    },
    "Cluster mode: brokers, controller, and per-partition leaders (docs/cluster.md).",
  ),
  PartitionInfo: exact({
    partition: integer(0, partitionsMax - 1),
    log_start_offset: offset,
    high_watermark: {
      ...offset,
      description: "One past the last durable offset: reads stop here.",
    },
    size_bytes: integer(0, Number.MAX_SAFE_INTEGER),
    segments: integer(0, Number.MAX_SAFE_INTEGER),
    fenced: { type: "boolean" },
  }),
  Topic: {
    type: "object",
    properties: {
      name: ref("TopicName"),
      partitions: array(ref("PartitionInfo")),
      config: ref("TopicConfig"),
      stream: {
        type: "object",
        description: "Present when the topic holds a Durable Stream (docs/durable-streams.md).",
      },
    },
    required: ["name", "partitions", "config"],
    additionalProperties: false,
  },
  CreateTopic: {
    type: "object",
    properties: {
      name: ref("TopicName"),
      partitions: integer(1, partitionsMax),
      config: ref("TopicConfigPatch"),
    },
    required: ["name"],
    additionalProperties: false,
  },
  PatchTopic: exact({ config: ref("TopicConfigPatch") }),
  ProduceRecord: {
    type: "object",
    description: "Exactly one of value and value_b64; at most one of key and key_b64.",
    properties: {
      key: { type: ["string", "null"] },
      key_b64: { type: ["string", "null"], contentEncoding: "base64" },
      value: { type: "string" },
      value_b64: { type: "string", contentEncoding: "base64" },
      partition: { oneOf: [integer(0, partitionsMax - 1), { type: "null" }] },
      timestamp: {
        oneOf: [
          int64(-1, Number.MAX_SAFE_INTEGER, "-1 or absent: the broker's clock."),
          { type: "null" },
        ],
      },
    },
    oneOf: [
      { properties: { value: { type: "string" } }, required: ["value"] },
      { properties: { value_b64: { type: "string" } }, required: ["value_b64"] },
    ],
    not: {
      type: "object",
      properties: { key: true, key_b64: true },
      required: ["key", "key_b64"],
    },
    additionalProperties: false,
  },
  Produce: exact({
    records: {
      type: "array",
      items: ref("ProduceRecord"),
      minItems: 1,
      maxItems: httpProduceRecordsMax,
    },
  }),
  ProduceAnswer: {
    type: "object",
    properties: {
      offsets: array(
        exact({ partition: integer(0, partitionsMax - 1), offset }),
        "One per record, in request order.",
      ),
      duplicate: {
        type: "boolean",
        description: "Idempotent produce only: true when the batch was already stored.",
      },
    },
    required: ["offsets"],
    additionalProperties: false,
  },
  Record: exact({
    offset,
    timestamp,
    key: { type: ["string", "null"], description: 'null: no key; "": the empty key.' },
    value: { type: "string" },
  }),
  FetchAnswer: exact({
    records: array(ref("Record")),
    next_offset: offset,
    high_watermark: offset,
    log_start_offset: offset,
  }),
  Assignment: exact({ topic: ref("TopicName"), partition: integer(0, partitionsMax - 1) }),
  Join: {
    type: "object",
    properties: {
      topics: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 1000 },
      session_timeout_ms: { oneOf: [integer(100, 3_600_000), { type: "null" }] },
      member_id: { type: ["string", "null"] },
    },
    required: ["topics"],
    additionalProperties: false,
  },
  JoinAnswer: exact({
    member_id: { type: "string" },
    generation: integer(0, Number.MAX_SAFE_INTEGER),
    session_timeout_ms: integer(100, 3_600_000),
    assignments: array(ref("Assignment")),
  }),
  Heartbeat: {
    type: "object",
    properties: { generation: { type: ["integer", "null"] } },
    additionalProperties: false,
  },
  HeartbeatAnswer: exact({
    generation: integer(0, Number.MAX_SAFE_INTEGER),
    rejoin: { type: "boolean" },
    assignments: array(ref("Assignment")),
  }),
  ProducerEpochRequest: {
    type: "object",
    properties: {
      at_least: {
        type: ["integer", "null"],
        minimum: 0,
        maximum: producerEpochMax,
        description: "The lowest epoch the caller takes (0 or absent: none).",
      },
    },
    additionalProperties: false,
  },
  ProducerEpoch: exact({ epoch: integer(0, producerEpochMax) }),
  Commit: {
    type: "object",
    properties: {
      member_id: { type: ["string", "null"] },
      generation: { type: ["integer", "null"] },
      offsets: array(
        exact({ topic: ref("TopicName"), partition: integer(0, partitionsMax - 1), offset }),
      ),
    },
    required: ["offsets"],
    additionalProperties: false,
  },
  Group: exact({
    group: ref("GroupName"),
    generation: integer(0, Number.MAX_SAFE_INTEGER),
    members: array(
      exact({
        member_id: { type: "string" },
        topics: array({ type: "string" }),
        session_timeout_ms: integer(100, 3_600_000),
        assignments: array(ref("Assignment")),
      }),
    ),
    offsets: array(
      exact({
        topic: ref("TopicName"),
        partition: integer(0, partitionsMax - 1),
        committed: nullable(offset),
        high_watermark: nullable(offset),
        lag: nullable(int64(0, offsetMax, "high_watermark - committed")),
        owner: { type: ["string", "null"] },
      }),
    ),
  }),
  KeyRole: { type: "string", enum: ["admin", "producer", "consumer"] },
  KeyInfo: exact(keyInfoProperties),
  CreateKey: {
    type: "object",
    properties: {
      name: { type: "string" },
      role: ref("KeyRole"),
      topics: array({ type: "string" }),
      groups: array({ type: "string" }),
    },
    required: ["name", "role"],
    additionalProperties: false,
  },
  CreatedKey: exact({
    key: { type: "string", description: "The key's text, shown this once." },
    ...keyInfoProperties,
  }),
  AdminMetrics: {
    type: "object",
    properties: {
      partitions: { type: "integer" },
      fsyncs: { type: "integer" },
      appends: { type: "integer" },
      writes: { type: "integer" },
      records_appended: { type: "integer" },
      http_fetch_answers: { type: "integer", description: "HTTP fetch answers written." },
      http_fetch_answer_slices: {
        type: "integer",
        description: "Slices (event-loop turns) those answers were written in.",
      },
      refused: { type: "object", additionalProperties: { type: "integer" } },
    },
    required: ["partitions", "fsyncs", "appends", "writes", "records_appended"],
    additionalProperties: false,
  },
  RetentionResult: {
    type: "object",
    properties: {
      task: { const: "retention" },
      partition: { type: "string" },
      status: {
        type: "string",
        enum: ["ok", "nothing_to_do", "skipped", "cancelled", "offload_failed", "failed"],
      },
      reason: { type: "string" },
      started_ms: timestamp,
      duration_ms: { type: "integer" },
      log_start_offset_before: offset,
      log_start_offset_after: offset,
      offload_error: { type: ["string", "null"] },
    },
    required: ["task", "partition", "status", "reason", "started_ms", "duration_ms"],
  },
  CompactionResult: {
    type: "object",
    properties: {
      task: { const: "compaction" },
      partition: { type: "string" },
      status: { type: "string", enum: ["compacted", "skipped", "cancelled", "aborted", "failed"] },
      reason: { type: "string" },
      started_ms: timestamp,
      duration_ms: { type: "integer" },
      swap_incomplete: { type: "boolean" },
    },
    required: ["task", "partition", "status", "reason", "started_ms", "duration_ms"],
  },
  CleanupReport: exact({
    topic: ref("TopicName"),
    partitions: array({
      type: "object",
      properties: {
        partition: integer(0, partitionsMax - 1),
        retention: ref("RetentionResult"),
        compaction: ref("CompactionResult"),
        cold_compaction: {
          type: ["object", "null"],
          description:
            "The cold tier's last compaction pass (null without a cold tier or before the first).",
        },
      },
      required: ["partition", "retention", "compaction"],
      additionalProperties: false,
    }),
  }),
  StorageReport: exact({
    cold_storage_dir: { type: ["string", "null"] },
    topics: array(
      exact({
        name: ref("TopicName"),
        partitions: array({
          type: "object",
          properties: {
            partition: { type: "string", description: '"topic/partition"' },
            state: { type: "string", enum: ["ok", "fenced"] },
            fenced_reason: { type: ["string", "null"] },
            log_start_offset: offset,
            high_watermark: offset,
            log_end_offset: offset,
            size_bytes: { type: "integer" },
            segments: array({
              type: "object",
              properties: {
                base_offset: offset,
                next_offset: offset,
                size_bytes: { type: "integer" },
                index_entries: { type: "integer" },
              },
              required: ["base_offset", "next_offset", "size_bytes", "index_entries"],
            }),
            stray_files: array({ type: "object" }),
            cleanup: {
              oneOf: [
                { type: "null" },
                {
                  type: "object",
                  properties: {
                    last_retention: nullable(ref("RetentionResult")),
                    last_compaction: nullable(ref("CompactionResult")),
                    cold_offload_failures: { type: "integer" },
                    cold_offload_retry_at_ms: { type: "integer" },
                    stopped_reason: { type: ["string", "null"] },
                    cold_backlog_segments: { type: "integer" },
                    cold: { type: ["object", "null"] },
                  },
                  required: ["last_retention", "last_compaction", "stopped_reason"],
                },
              ],
            },
          },
          required: ["partition", "state", "log_start_offset", "high_watermark", "segments"],
        }),
      }),
    ),
    unavailable: array(exact({ name: { type: "string" }, reason: { type: "string" } })),
    disk: exact(
      {
        free_bytes: { type: ["integer", "null"] },
        total_bytes: { type: ["integer", "null"] },
        reserve: nullable(
          exact({
            path: { type: "string" },
            bytes: { type: "integer" },
            state: { type: "string", enum: ["kept", "given_up", "missing", "unavailable"] },
            held_since_ms: { type: ["integer", "null"] },
          }),
        ),
      },
      "The data directory's file system (statfs, as of the last look) and the disk reserve (docs/storage.md, Full disk).",
    ),
  }),
  RegistryError: exact(
    {
      error_code: {
        type: "integer",
        enum: [
          ...new Set([
            ...Object.values(RegistryErrors).map((k) => k.errorCode),
            404,
            408,
            413,
            431,
            503,
          ]),
        ],
        description: "Confluent's error code (or the HTTP status, for the broker's own refusals).",
      },
      message: { type: "string", minLength: 1 },
    },
    "Every error of the /registry routes, in Confluent Schema Registry's shape (its clients read it).",
  ),
  SchemaType: { type: "string", enum: ["AVRO", "JSON"] },
  RegistrySchema: {
    type: "object",
    properties: {
      schema: { type: "string" },
      schemaType: ref("SchemaType"),
      references: {
        type: "array",
        maxItems: 0,
        description:
          "Schema references are not supported: null or an empty list only (else 42201).",
      },
    },
    required: ["schema"],
  },
  SubjectVersion: {
    type: "object",
    properties: {
      subject: { type: "string" },
      version: integer(1, 0x7fff_ffff),
      id: integer(1, 0x7fff_ffff),
      schemaType: { type: "string", enum: ["JSON"], description: "Omitted for AVRO." },
      schema: { type: "string" },
    },
    required: ["subject", "version", "id", "schema"],
    additionalProperties: false,
  },
  CompatibilityLevel: { type: "string", enum: [...compatibilityLevels] },
  Health: exact({ status: { const: "ok" } }),
  Ready: {
    type: "object",
    properties: {
      status: { const: "ready" },
      api_keys: { type: "boolean", description: "Whether requests need an API key." },
    },
    required: ["status"],
    additionalProperties: false,
  },
  Recovering: exact({
    status: { const: "recovering" },
    recovery: exact({
      phase: {
        type: "string",
        enum: ["starting", "topics", "groups", "producers", "done", "cluster"],
      },
      topics_total: { type: "integer", minimum: 0 },
      topics_done: { type: "integer", minimum: 0 },
      partitions_done: { type: "integer", minimum: 0 },
      elapsed_ms: { type: "integer", minimum: 0 },
    }),
  }),
};

/** What each error status means, for the response descriptions. */
const statusText: Record<number, string> = {
  400: "Bad request (invalid_request, invalid_topic_name, invalid_config, invalid_timestamp, invalid_offset, unsupported).",
  401: "No valid API key while the broker has keys (unauthenticated); WWW-Authenticate: Bearer.",
  403: "The key's role or patterns do not allow this (forbidden); a browser's cross-site write (reason cross_site); a loopback broker without keys addressed by a name other than an IP address or localhost (reason host_not_allowed); producer_fenced on idempotent produce.",
  404: "No such topic, partition, group, key, or route.",
  408: "The request did not arrive whole in time (request_timeout; Node and Bun).",
  409: "Conflict with the state (topic_exists, key_exists, stale_generation, not_partition_owner, unknown_member, sequence errors, producer_epoch_exhausted, concurrent_update).",
  413: "Body over --max-request-bytes (request_too_large) or a record over the record limit (record_too_large).",
  415: "Unsupported media type: a body with a Content-Encoding other than identity (unsupported_media_type); in the registry, a Content-Type it does not take.",
  422: "A record does not match its topic's schema (invalid_record); in the registry, an invalid schema, version or level.",
  410: "The stream expired or was deleted (stream_gone).",
  416: "Offset below the log start offset or above the high watermark (offset_out_of_range).",
  431: "Request line and headers over 16 KiB (headers_too_large; Node and Bun).",
  500: "A bug (internal), logged; or an offloaded record that fails its checks in the cold tier (cold_data_corrupt).",
  307: "Cluster mode: another broker leads the partition, or coordinates consumer groups (not_leader); Location is the same request on the leader or the coordinator with redirected=1 added, never redirected again (curl -L follows it; with API keys curl --location-trusted, as curl and fetch drop Authorization on a redirect to another port).",
  503: "Cluster mode: no leader now, or too few in-sync replicas (not_leader, not_enough_replicas). Also: recovering at start, shutting down, a topic being deleted, or a fenced partition (unavailable, partition_fenced).",
  507: "A write failed and was cut off, e.g. the disk is full (storage_error).",
};

const errorResponse = (status: number): Schema => ({
  description: statusText[status] ?? "Error.",
  content: { "application/json": { schema: ref("Error") } },
});

/** Statuses every request may get: the parser's, authentication's, recovery's and shutdown's. */
const anyRequest = [400, 401, 403, 408, 431, 503];
/** Statuses a request with a body may also get. */
const withBody = [413, 415];

interface OperationSpec {
  operationId: string;
  summary: string;
  parameters?: Schema[];
  requestBody?: Schema;
  /** The success answers: status → response object. */
  ok: Record<number, Schema>;
  /** Error statuses beyond {@link anyRequest}. */
  errors?: number[];
  /** Needs no key even while the broker has keys. */
  public?: boolean;
}

function operation(definition: OperationSpec): Schema {
  const statuses = new Set([
    ...(definition.public === true ? [400, 408, 431, 503] : anyRequest),
    ...(definition.requestBody === undefined ? [] : withBody),
    ...(definition.errors ?? []),
  ]);
  const responses: Record<string, Schema> = {};
  for (const [status, response] of Object.entries(definition.ok)) responses[status] = response;
  for (const status of [...statuses].sort()) responses[String(status)] ??= errorResponse(status);
  return {
    operationId: definition.operationId,
    summary: definition.summary,
    ...(definition.public === true ? { security: [] } : {}),
    ...(definition.parameters === undefined ? {} : { parameters: definition.parameters }),
    ...(definition.requestBody === undefined ? {} : { requestBody: definition.requestBody }),
    responses,
  };
}

const json = (schema: Schema, description: string): Schema => ({
  description,
  content: { "application/json": { schema } },
});
const noContent = { description: "Done; empty body." };
const jsonBody = (schema: Schema): Schema => ({
  required: true,
  content: { "application/json": { schema } },
});

const pathParam = (name: string, schema: Schema, description: string): Schema => ({
  name,
  in: "path",
  required: true,
  schema,
  description,
});
const queryParam = (name: string, schema: Schema, description: string): Schema => ({
  name,
  in: "query",
  required: false,
  schema,
  description,
});
const topicParam = pathParam("topic", { type: "string" }, "The topic's name.");
const partitionParam = pathParam(
  "partition",
  { type: "string", pattern: "^[0-9]+$" },
  "The partition number (decimal).",
);
const groupParam = pathParam("group", { type: "string" }, "The consumer group's name.");
const memberParam = pathParam("member", { type: "string" }, "The member id the join answered.");
const offsetQuery = (required: boolean): Schema => ({
  name: "offset",
  in: "query",
  required,
  schema: { type: "string", pattern: "^([0-9]+|earliest|latest)$" },
  description: "An offset, `earliest` (the log start offset) or `latest` (the high watermark).",
});
const encodingQuery = queryParam(
  "encoding",
  { type: "string", enum: ["utf8", "base64"] },
  "How keys and values are shown: UTF-8 text (default) or base64.",
);
const decimal = (minimum: number, maximum: number): Schema => ({
  type: "string",
  pattern: "^[0-9]+$",
  description: `A decimal integer from ${minimum} to ${maximum}.`,
});

/** The error statuses of every /registry route, beyond its own. */
const registryAnyRequest = [400, 401, 403, 408, 431, 503];

/**
 * An operation of the Confluent-compatible schema registry under `/registry` (docs/registry.md):
 * answers in `application/vnd.schemaregistry.v1+json`, errors in Confluent's shape (401 and 403
 * too, with 40101 / 40301) — except those answered before the registry sees the request (the
 * parser's, recovery's), which are the broker's own `Error`.
 */
function registryOperation(definition: {
  operationId: string;
  summary: string;
  parameters?: Schema[];
  body?: Schema;
  ok: Schema;
  errors?: number[];
}): Schema {
  const registryJson = (schema: Schema) => ({ [registryMediaType]: { schema } });
  const responses: Record<string, Schema> = {
    200: { description: "Done.", content: registryJson(definition.ok) },
  };
  const statuses = new Set([
    ...registryAnyRequest,
    ...(definition.body === undefined ? [] : [413, 415]),
    ...(definition.errors ?? []),
  ]);
  for (const status of [...statuses].sort())
    responses[String(status)] = {
      description: statusText[status] ?? "Error.",
      content: {
        ...registryJson(ref("RegistryError")),
        "application/json": { schema: ref("Error") },
      },
    };
  const mediaTypes = [
    registryMediaType,
    "application/json",
    "application/vnd.schemaregistry+json",
    "application/octet-stream",
  ];
  return {
    operationId: definition.operationId,
    summary: definition.summary,
    tags: ["schema registry"],
    ...(definition.parameters === undefined ? {} : { parameters: definition.parameters }),
    ...(definition.body === undefined
      ? {}
      : {
          requestBody: {
            required: true,
            content: Object.fromEntries(mediaTypes.map((m) => [m, { schema: definition.body }])),
          },
        }),
    responses,
  };
}

const subject = pathParam("subject", { type: "string" }, "The subject's name.");
const version = pathParam(
  "version",
  { type: "string", pattern: "^([0-9]+|latest|-1)$" },
  "A version number, or `latest`.",
);
const schemaId = pathParam("id", { type: "string", pattern: "^[0-9]+$" }, "A schema id.");
const flagQuery = (name: string, description: string) =>
  queryParam(name, { type: "string", enum: ["true", "false"] }, description);
const deletedQuery = flagQuery("deleted", "Include soft-deleted subjects and versions.");
const permanentQuery = flagQuery("permanent", "Delete for good (after a soft delete).");
const anyJson = { description: "The schema's own JSON text." };

/** The `/registry` paths (docs/registry.md "HTTP API"). */
const registryPaths: Record<string, Record<string, Schema>> = {
  "/registry": {
    get: registryOperation({
      operationId: "registryRoot",
      summary: "The registry's root: `{}`.",
      ok: exact({}),
    }),
  },
  "/registry/schemas/types": {
    get: registryOperation({
      operationId: "schemaTypes",
      summary: "The schema types supported.",
      ok: array(ref("SchemaType")),
    }),
  },
  "/registry/schemas/ids/{id}": {
    get: registryOperation({
      operationId: "schemaById",
      summary: "A schema by its global id.",
      parameters: [schemaId],
      ok: {
        type: "object",
        properties: { schema: { type: "string" }, schemaType: ref("SchemaType") },
        required: ["schema"],
        additionalProperties: false,
      },
      errors: [404],
    }),
  },
  "/registry/schemas/ids/{id}/schema": {
    get: registryOperation({
      operationId: "rawSchemaById",
      summary: "A schema's text by id.",
      parameters: [schemaId],
      ok: anyJson,
      errors: [404],
    }),
  },
  "/registry/schemas/ids/{id}/subjects": {
    get: registryOperation({
      operationId: "subjectsOfId",
      summary: "Subjects using a schema id.",
      parameters: [schemaId, deletedQuery],
      ok: array({ type: "string" }),
      errors: [404],
    }),
  },
  "/registry/schemas/ids/{id}/versions": {
    get: registryOperation({
      operationId: "versionsOfId",
      summary: "Subject versions using a schema id.",
      parameters: [schemaId, deletedQuery],
      ok: array(exact({ subject: { type: "string" }, version: integer(1, 0x7fff_ffff) })),
      errors: [404],
    }),
  },
  "/registry/subjects": {
    get: registryOperation({
      operationId: "listSubjects",
      summary: "Every subject.",
      parameters: [
        deletedQuery,
        queryParam("subjectPrefix", { type: "string" }, "Only subjects starting with this."),
      ],
      ok: array({ type: "string" }),
    }),
  },
  "/registry/subjects/{subject}": {
    post: registryOperation({
      operationId: "lookUpSchema",
      summary: "Whether a schema is registered under the subject, and as which version.",
      parameters: [subject, deletedQuery],
      body: ref("RegistrySchema"),
      ok: ref("SubjectVersion"),
      errors: [404, 422],
    }),
    delete: registryOperation({
      operationId: "deleteSubject",
      summary: "Deletes a subject (soft, or permanent after a soft delete); answers its versions.",
      parameters: [subject, permanentQuery],
      ok: array(integer(1, 0x7fff_ffff)),
      errors: [404, 422],
    }),
  },
  "/registry/subjects/{subject}/versions": {
    get: registryOperation({
      operationId: "listVersions",
      summary: "A subject's versions.",
      parameters: [subject, deletedQuery],
      ok: array(integer(1, 0x7fff_ffff)),
      errors: [404],
    }),
    post: registryOperation({
      operationId: "registerSchema",
      summary:
        "Registers a schema under a subject (checked for compatibility); answers its global id.",
      parameters: [subject],
      body: ref("RegistrySchema"),
      ok: exact({ id: integer(1, 0x7fff_ffff) }),
      errors: [409, 422],
    }),
  },
  "/registry/subjects/{subject}/versions/{version}": {
    get: registryOperation({
      operationId: "getVersion",
      summary: "One version of a subject.",
      parameters: [subject, version, deletedQuery],
      ok: ref("SubjectVersion"),
      errors: [404, 422],
    }),
    delete: registryOperation({
      operationId: "deleteVersion",
      summary: "Deletes one version (soft, or permanent after a soft delete); answers its number.",
      parameters: [subject, version, permanentQuery],
      ok: integer(1, 0x7fff_ffff),
      errors: [404, 422],
    }),
  },
  "/registry/subjects/{subject}/versions/{version}/schema": {
    get: registryOperation({
      operationId: "getVersionSchema",
      summary: "The text of one version's schema.",
      parameters: [subject, version, deletedQuery],
      ok: anyJson,
      errors: [404, 422],
    }),
  },
  "/registry/subjects/{subject}/versions/{version}/referencedby": {
    get: registryOperation({
      operationId: "referencedBy",
      summary: "Schemas referencing this version: always none (references are not supported).",
      parameters: [subject, version],
      ok: array({ type: "integer" }, "Always empty."),
      errors: [404, 422],
    }),
  },
  "/registry/config": {
    get: registryOperation({
      operationId: "getGlobalCompatibility",
      summary: "The global compatibility level.",
      ok: exact({ compatibilityLevel: ref("CompatibilityLevel") }),
    }),
    put: registryOperation({
      operationId: "setGlobalCompatibility",
      summary: "Sets the global compatibility level.",
      body: exact({ compatibility: ref("CompatibilityLevel") }),
      ok: exact({ compatibility: ref("CompatibilityLevel") }),
      errors: [422],
    }),
    delete: registryOperation({
      operationId: "resetGlobalCompatibility",
      summary: "Resets the global level to the default; answers the one removed.",
      ok: exact({ compatibilityLevel: ref("CompatibilityLevel") }),
    }),
  },
  "/registry/config/{subject}": {
    get: registryOperation({
      operationId: "getSubjectCompatibility",
      summary: "A subject's compatibility level.",
      parameters: [subject, flagQuery("defaultToGlobal", "Fall back to the global level.")],
      ok: exact({ compatibilityLevel: ref("CompatibilityLevel") }),
      errors: [404, 422],
    }),
    put: registryOperation({
      operationId: "setSubjectCompatibility",
      summary: "Sets a subject's compatibility level.",
      parameters: [subject],
      body: exact({ compatibility: ref("CompatibilityLevel") }),
      ok: exact({ compatibility: ref("CompatibilityLevel") }),
      errors: [422],
    }),
    delete: registryOperation({
      operationId: "deleteSubjectCompatibility",
      summary: "Removes a subject's level; answers the one removed.",
      parameters: [subject],
      ok: exact({ compatibilityLevel: ref("CompatibilityLevel") }),
      errors: [404, 422],
    }),
  },
  "/registry/compatibility/subjects/{subject}/versions": {
    post: registryOperation({
      operationId: "testCompatibilityAll",
      summary: "Whether a schema is compatible with the subject's versions (per its level).",
      parameters: [subject, flagQuery("verbose", "Say why not.")],
      body: ref("RegistrySchema"),
      ok: {
        type: "object",
        properties: { is_compatible: { type: "boolean" }, messages: array({ type: "string" }) },
        required: ["is_compatible"],
        additionalProperties: false,
      },
      errors: [404, 422],
    }),
  },
  "/registry/compatibility/subjects/{subject}/versions/{version}": {
    post: registryOperation({
      operationId: "testCompatibility",
      summary: "Whether a schema is compatible with one version of the subject.",
      parameters: [subject, version, flagQuery("verbose", "Say why not.")],
      body: ref("RegistrySchema"),
      ok: {
        type: "object",
        properties: { is_compatible: { type: "boolean" }, messages: array({ type: "string" }) },
        required: ["is_compatible"],
        additionalProperties: false,
      },
      errors: [404, 422],
    }),
  },
  "/registry/mode": {
    get: registryOperation({
      operationId: "getMode",
      summary: "The registry's mode: always READWRITE.",
      ok: exact({ mode: { const: "READWRITE" } }),
    }),
  },
};

const streamPath = pathParam(
  "path",
  { type: "string" },
  "The stream's path: everything after /v1/stream/, slashes included (docs/durable-streams.md).",
);
const streamOk = (status: number, description: string): Record<number, Schema> => ({
  [status]: { description },
});
/** A single-valued protocol header (given twice: 400); `pattern` when its syntax is fixed. */
const streamHeader = (name: string, description: string, pattern?: string): Schema => ({
  name,
  in: "header",
  required: false,
  schema: pattern === undefined ? { type: "string" } : { type: "string", pattern },
  description,
});
const canonicalInteger = "^(0|[1-9][0-9]*)$";

/** The Durable Streams protocol under /v1/stream/ (docs/durable-streams.md). */
const streamPaths: Record<string, Record<string, Schema>> = {
  "/v1/stream/{path}": {
    put: operation({
      operationId: "streamCreate",
      summary:
        "Creates a stream (or confirms one with the same settings); forks with Stream-Forked-From.",
      parameters: [
        streamPath,
        streamHeader("Stream-TTL", "Seconds the stream lives idle, 1 or more.", "^[1-9][0-9]*$"),
        streamHeader("Stream-Expires-At", "When it expires (RFC 3339, in the future)."),
        streamHeader("Stream-Closed", "true (any case): created closed; other values are ignored."),
        streamHeader(
          "Stream-Forked-From",
          "The stream to fork: /v1/stream/{source}, or a URL of this broker's own origin.",
        ),
        streamHeader("Stream-Fork-Offset", "Where the fork starts."),
        streamHeader(
          "Stream-Fork-Sub-Offset",
          "Where in that message the fork starts.",
          canonicalInteger,
        ),
      ],
      requestBody: { required: false, content: { "*/*": { schema: { type: "string" } } } },
      ok: {
        ...streamOk(201, "Created (Location)."),
        ...streamOk(200, "It exists with these settings."),
      },
      errors: [404, 409, 410, 507],
    }),
    post: operation({
      operationId: "streamAppend",
      summary: "Appends to a stream; with Stream-Closed: true, appends and closes (or closes).",
      parameters: [
        streamPath,
        streamHeader(
          "Stream-Closed",
          "true (any case): close the stream; other values are ignored.",
        ),
        streamHeader("Stream-Seq", "The writer's sequence (strictly increasing)."),
        streamHeader("Producer-Id", "Idempotent producer id."),
        streamHeader("Producer-Epoch", "Idempotent producer epoch.", canonicalInteger),
        streamHeader("Producer-Seq", "Idempotent producer sequence.", canonicalInteger),
      ],
      requestBody: { required: false, content: { "*/*": { schema: { type: "string" } } } },
      ok: {
        ...streamOk(204, "Appended (Stream-Next-Offset)."),
        ...streamOk(200, "Appended by an idempotent producer (Producer-Epoch, Producer-Seq)."),
      },
      errors: [404, 409, 410, 507],
    }),
    get: operation({
      operationId: "streamRead",
      summary: "Reads from an offset: catch-up, live=long-poll, or live=sse.",
      parameters: [
        streamPath,
        queryParam(
          "offset",
          { type: "string" },
          "Where to read from (-1: the beginning; now: the tail).",
        ),
        queryParam(
          "live",
          { type: "string", enum: ["long-poll", "sse"] },
          "Wait for data, or stream it.",
        ),
        queryParam("cursor", { type: "string" }, "The cursor of the last answer (caching)."),
      ],
      ok: {
        200: {
          description:
            "The data from the offset (Stream-Next-Offset), in the stream's content type; or an SSE stream.",
          content: { "*/*": { schema: { type: "string" } } },
        },
        ...streamOk(204, "Nothing new within the long-poll (Stream-Next-Offset)."),
        ...streamOk(304, "Unchanged since the ETag sent."),
      },
      errors: [404, 410, 416],
    }),
    head: operation({
      operationId: "streamHead",
      summary: "A stream's metadata in headers: tail, content type, TTL, expiry, closure.",
      parameters: [streamPath],
      ok: streamOk(200, "The metadata, in headers."),
      errors: [404, 410],
    }),
    delete: operation({
      operationId: "streamDelete",
      summary: "Deletes a stream (soft while forks read it).",
      parameters: [streamPath],
      ok: streamOk(204, "Deleted."),
      errors: [404, 410, 507],
    }),
    options: operation({
      operationId: "streamPreflight",
      summary: "CORS preflight.",
      parameters: [streamPath],
      ok: streamOk(204, "The methods and headers allowed."),
      public: true,
    }),
  },
};

/**
 * Adds to `document` a `head` operation beside every `get` that has none: the server answers HEAD
 * with the GET's route (same statuses and headers, no body), and a client or checker reading the
 * document must find it. The operation id is the GET's with `Head` appended.
 * @returns `document`, changed in place.
 */
function withHeadOperations<D extends { paths: Record<string, Record<string, unknown>> }>(
  document: D,
): D {
  for (const methods of Object.values(document.paths)) {
    const get = methods.get as Schema | undefined;
    if (get === undefined || methods.head !== undefined) continue;
    const responses: Record<string, Schema> = {};
    for (const [status, response] of Object.entries(get.responses as Record<string, Schema>)) {
      const { content: _content, ...rest } = response;
      responses[status] = rest;
    }
    methods.head = {
      ...get,
      operationId: `${get.operationId as string}Head`,
      summary: `The headers of: ${get.summary as string} No body.`,
      responses,
    };
  }
  return document;
}

/**
 * The document (see the module comment). A plain JSON value: `GET /v1/openapi.json` answers it as
 * it is.
 */
export const openApiDocument = withHeadOperations({
  openapi: "3.1.0",
  info: {
    title: "es-broker HTTP API",
    version: "v1",
    description:
      "A durable event-streaming broker: topics, produce, fetch, live tail, consumer groups, API keys, metrics. Every acknowledgement of a produce follows the fsync that covers it. Prose reference: docs/http-api.md.",
  },
  servers: [{ url: "/" }],
  components: {
    schemas,
    securitySchemes: {
      apiKey: {
        type: "http",
        scheme: "bearer",
        description:
          "An es-broker API key (`esb_<16 hex>_<43 base64url>`), needed once the broker has keys.",
      },
    },
  },
  security: [{ apiKey: [] }, {}],
  paths: {
    "/healthz": {
      get: operation({
        operationId: "health",
        summary: "Whether the process is up (from before recovery to shutdown).",
        ok: { 200: json(ref("Health"), "The process serves HTTP.") },
        public: true,
      }),
    },
    "/readyz": {
      get: operation({
        operationId: "readiness",
        summary: "Whether the broker serves requests: 503 with progress while it recovers.",
        ok: {
          200: json(ref("Ready"), "Recovery is over and both ports serve."),
          503: {
            description: "Recovering the data directory (Retry-After: 1), or shutting down.",
            content: {
              "application/json": { schema: { oneOf: [ref("Recovering"), ref("Error")] } },
            },
          },
        },
        public: true,
      }),
    },
    "/metrics": {
      get: operation({
        operationId: "metrics",
        summary: "Every metric in the Prometheus text format 0.0.4 (admin key once keys exist).",
        ok: {
          200: {
            description: "The exposition (docs/operations.md, Metrics).",
            content: { "text/plain": { schema: { type: "string" } } },
          },
        },
        errors: [404],
      }),
    },
    "/console": {
      get: operation({
        operationId: "console",
        summary: "The web console's page (it holds no data; docs/console.md).",
        ok: {
          200: {
            description: "The page.",
            content: { "text/html": { schema: { type: "string" } } },
          },
        },
        public: true,
      }),
    },
    "/console/": {
      get: operation({
        operationId: "consoleSlash",
        summary: "Redirects to the web console's page (/console), keeping the query.",
        ok: {
          308: {
            description: "Location: /console (and the query).",
            headers: { location: { schema: { type: "string" } } },
          },
        },
        public: true,
      }),
    },
    "/console/app.js": {
      get: operation({
        operationId: "consoleScript",
        summary: "The web console's script, from the build.",
        ok: {
          200: {
            description: "The script.",
            content: { "text/javascript": { schema: { type: "string" } } },
          },
        },
        public: true,
      }),
    },
    "/console/app.css": {
      get: operation({
        operationId: "consoleStyles",
        summary: "The web console's styles, from the build.",
        ok: {
          200: {
            description: "The styles.",
            content: { "text/css": { schema: { type: "string" } } },
          },
        },
        public: true,
      }),
    },
    "/console/icon.svg": {
      get: operation({
        operationId: "consoleIcon",
        summary: "The web console's icon.",
        ok: {
          200: {
            description: "The icon.",
            content: { "image/svg+xml": { schema: { type: "string" } } },
          },
        },
        public: true,
      }),
    },
    "/v1/openapi.json": {
      get: operation({
        operationId: "openapi",
        summary: "This document.",
        ok: { 200: json({ type: "object" }, "The OpenAPI 3.1 document of the HTTP API.") },
        public: true,
      }),
    },
    "/v1/topics": {
      get: operation({
        operationId: "listTopics",
        summary: "Every topic the key may see, in name order.",
        ok: { 200: json(exact({ topics: array(ref("Topic")) }), "The topics.") },
      }),
      post: operation({
        operationId: "createTopic",
        summary: "Creates a topic and its partitions durably (admin).",
        requestBody: jsonBody(ref("CreateTopic")),
        ok: { 201: json(ref("Topic"), "The topic created.") },
        errors: [409, 507],
      }),
    },
    "/v1/cluster": {
      get: operation({
        operationId: "clusterMetadata",
        summary:
          "Cluster mode: live brokers, the controller, and every topic's partition leaders (404 in single-node mode).",
        parameters: [
          queryParam(
            "topic",
            { type: "string" },
            "Only this topic (repeatable); default every topic.",
          ),
        ],
        ok: { 200: json(ref("ClusterMetadata"), "What this broker knows of the cluster.") },
        errors: [404],
      }),
    },
    "/v1/topics/{topic}": {
      get: operation({
        operationId: "describeTopic",
        summary: "One topic: config and partitions.",
        parameters: [topicParam],
        ok: { 200: json(ref("Topic"), "The topic.") },
        errors: [404],
      }),
      delete: operation({
        operationId: "deleteTopic",
        summary: "Deletes a topic and its data (admin).",
        parameters: [topicParam],
        ok: { 204: noContent },
        errors: [404, 507],
      }),
      patch: operation({
        operationId: "updateTopicConfig",
        summary: "Changes a topic's config (admin); the values apply at once.",
        parameters: [topicParam],
        requestBody: jsonBody(ref("PatchTopic")),
        ok: { 200: json(ref("Topic"), "The topic with its new config.") },
        errors: [404, 409, 507],
      }),
    },
    "/v1/topics/{topic}/records": {
      post: operation({
        operationId: "produce",
        summary:
          "Appends records (JSON or NDJSON); answers once they are durable. Idempotent with Producer-Id, Producer-Epoch and Producer-Seq.",
        parameters: [
          topicParam,
          queryParam(
            "partition",
            decimal(0, partitionsMax - 1),
            "NDJSON only: every record to this partition.",
          ),
          queryParam("key", { type: "string" }, "NDJSON only: every record gets this key."),
          {
            name: "Producer-Id",
            in: "header",
            required: false,
            schema: {
              type: "string",
              minLength: 1,
              maxLength: producerIdCharsMax,
              pattern: "^[A-Za-z0-9._:-]+$",
            },
          },
          {
            name: "Producer-Epoch",
            in: "header",
            required: false,
            schema: decimal(0, producerEpochMax),
          },
          {
            name: "Producer-Seq",
            in: "header",
            required: false,
            schema: decimal(0, Number.MAX_SAFE_INTEGER),
          },
        ],
        requestBody: {
          required: true,
          content: {
            "application/json": { schema: ref("Produce") },
            "application/x-ndjson": {
              schema: {
                type: "string",
                description: "One record's value per line (bytes verbatim).",
              },
            },
          },
        },
        ok: { 200: json(ref("ProduceAnswer"), "Where each record went, in request order.") },
        errors: [307, 404, 409, 422, 507],
      }),
    },
    "/v1/topics/{topic}/partitions/{partition}/records": {
      get: operation({
        operationId: "fetch",
        summary: "Reads records from an offset; long-polls with wait_ms.",
        parameters: [
          topicParam,
          partitionParam,
          offsetQuery(true),
          queryParam(
            "max_records",
            decimal(1, fetchRecordsMax),
            "At most this many records (default 1000).",
          ),
          queryParam(
            "max_bytes",
            decimal(1, fetchBytesMax),
            "About this many bytes of stored records (default 1 MiB).",
          ),
          queryParam(
            "wait_ms",
            decimal(0, fetchWaitMsMax),
            "Long-poll: wait up to this long for a record.",
          ),
          encodingQuery,
          {
            name: "Accept",
            in: "header",
            required: false,
            schema: { type: "string" },
            description:
              "application/x-ndjson (or application/ndjson), at a quality above 0 and not below application/json's: the answer is NDJSON, one Record per line, the bounds in headers. Anything else: JSON.",
          },
        ],
        ok: {
          200: {
            description:
              "Records and the partition's bounds: a FetchAnswer (JSON), or one Record per line, each ending in a newline (NDJSON; no records, an empty body) with the bounds in the headers.",
            headers: {
              "Next-Offset": {
                description: "NDJSON answers only: next_offset, the offset to fetch next.",
                schema: decimal(0, offsetMax),
              },
              "High-Watermark": {
                description: "NDJSON answers only: high_watermark.",
                schema: decimal(0, offsetMax),
              },
              "Log-Start-Offset": {
                description: "NDJSON answers only: log_start_offset.",
                schema: decimal(0, offsetMax),
              },
            },
            content: {
              "application/json": { schema: ref("FetchAnswer") },
              "application/x-ndjson": {
                schema: {
                  type: "string",
                  description: "One Record as JSON per line (the objects of FetchAnswer.records).",
                },
              },
            },
          },
        },
        errors: [307, 404, 416, 500],
      }),
    },
    "/v1/topics/{topic}/partitions/{partition}/stream": {
      get: operation({
        operationId: "stream",
        summary:
          "A live tail of the partition as Server-Sent Events (`event: record`, data as Record).",
        parameters: [
          topicParam,
          partitionParam,
          offsetQuery(false),
          encodingQuery,
          {
            name: "Last-Event-ID",
            in: "header",
            required: false,
            schema: decimal(0, offsetMax - 1),
            description: "Resume after this offset.",
          },
        ],
        ok: {
          200: {
            description:
              "`id: <offset>`, `event: record`, `data: <Record as JSON>`; `event: error` with an Error if reading fails.",
            content: { "text/event-stream": { schema: { type: "string" } } },
          },
        },
        errors: [307, 404, 416],
      }),
    },
    "/v1/admin/metrics": {
      get: operation({
        operationId: "adminMetrics",
        summary: "Storage counters for the benchmark harness (admin).",
        ok: { 200: json(ref("AdminMetrics"), "Counters since start.") },
        errors: [404],
      }),
    },
    "/v1/admin/storage": {
      get: operation({
        operationId: "describeStorage",
        summary: "Every partition's segments, recovery outcome and cleanup state (admin).",
        ok: { 200: json(ref("StorageReport"), "The storage state.") },
        errors: [404],
      }),
    },
    "/v1/admin/topics/{topic}/cleanup": {
      post: operation({
        operationId: "cleanup",
        summary: "Runs retention and compaction on every partition of the topic now (admin).",
        parameters: [topicParam],
        ok: { 200: json(ref("CleanupReport"), "What each pass did.") },
        errors: [404],
      }),
    },
    "/v1/groups": {
      get: operation({
        operationId: "listGroups",
        summary: "Every consumer group the key may see, in name order.",
        ok: { 200: json(exact({ groups: array(ref("Group")) }), "The groups.") },
        errors: [307],
      }),
    },
    "/v1/groups/{group}": {
      get: operation({
        operationId: "describeGroup",
        summary: "A group's members, generation, committed offsets and lag.",
        parameters: [groupParam],
        ok: { 200: json(ref("Group"), "The group.") },
        errors: [307, 404],
      }),
    },
    "/v1/groups/{group}/members": {
      post: operation({
        operationId: "joinGroup",
        summary: "Joins (or rejoins) the group; the group rebalances.",
        parameters: [groupParam],
        requestBody: jsonBody(ref("Join")),
        ok: { 200: json(ref("JoinAnswer"), "The member's id, generation and partitions.") },
        errors: [307, 404, 409, 507],
      }),
    },
    "/v1/groups/{group}/members/{member}/heartbeat": {
      post: operation({
        operationId: "heartbeat",
        summary: "Keeps the member's session alive; says whether to rejoin.",
        parameters: [groupParam, memberParam],
        requestBody: {
          required: false,
          content: { "application/json": { schema: ref("Heartbeat") } },
        },
        ok: {
          200: json(ref("HeartbeatAnswer"), "The current generation and the member's partitions."),
        },
        errors: [404, 409],
      }),
    },
    "/v1/groups/{group}/members/{member}": {
      delete: operation({
        operationId: "leaveGroup",
        summary: "Removes the member; the group rebalances.",
        parameters: [groupParam, memberParam],
        ok: { 204: noContent },
        errors: [404, 409, 507],
      }),
    },
    "/v1/groups/{group}/offsets": {
      post: operation({
        operationId: "commitOffsets",
        summary: "Commits offsets durably, all or none.",
        parameters: [groupParam],
        requestBody: jsonBody(ref("Commit")),
        ok: { 204: noContent },
        errors: [307, 404, 409, 507],
      }),
    },
    "/v1/producers/{producer_id}/epoch": {
      post: operation({
        operationId: "initProducerEpoch",
        summary:
          "Hands out the producer id's next epoch, durable and fencing its previous incarnation (docs/decisions.md §20).",
        parameters: [
          pathParam(
            "producer_id",
            { type: "string", pattern: "^[A-Za-z0-9._:-]{1,249}$" },
            "The idempotent producer's id.",
          ),
        ],
        requestBody: {
          required: false,
          content: { "application/json": { schema: ref("ProducerEpochRequest") } },
        },
        ok: { 200: json(ref("ProducerEpoch"), "The epoch to produce with.") },
        errors: [307, 404, 409],
      }),
    },
    "/v1/admin/keys": {
      get: operation({
        operationId: "listKeys",
        summary: "Every API key's metadata, never a secret (admin).",
        ok: { 200: json(exact({ keys: array(ref("KeyInfo")) }), "The keys.") },
      }),
      post: operation({
        operationId: "createKey",
        summary: "Makes an API key; the answer holds its text, the only time it is shown (admin).",
        requestBody: jsonBody(ref("CreateKey")),
        ok: { 201: json(ref("CreatedKey"), "The key and its metadata.") },
        errors: [409, 507],
      }),
    },
    "/v1/admin/keys/{name}": {
      delete: operation({
        operationId: "revokeKey",
        summary: "Revokes a key: refused from its next request on (admin).",
        parameters: [pathParam("name", { type: "string" }, "The key's name.")],
        ok: { 204: noContent },
        errors: [404, 507],
      }),
    },
    ...streamPaths,
    ...registryPaths,
  },
} as const);
