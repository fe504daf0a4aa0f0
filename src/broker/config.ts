/**
 * Validation of topic names, partition counts and topic configs. Every rejection is a
 * {@link BrokerError} naming the field and the allowed range.
 */
import { BrokerError, Errors } from "./errors.ts";
import { isSubjectName } from "../registry/registry.ts";
import type { CleanupPolicy, SchemaFormat, TimestampType, TopicConfig } from "./types.ts";
import {
  subjectCharsMax,
  partitionsMax,
  segmentBytesDefault,
  segmentBytesMax,
  segmentBytesMin,
  segmentMsDefault,
  timestampSkewMsDefault,
  topicNameCharsMax,
} from "../lib/limits.ts";
import { quote } from "../lib/quote.ts";
import { isTempFileName } from "../storage/metadata.ts";

const day = 24 * 3600 * 1000;

/** The config a topic gets for every field its creator leaves out. */
export const defaultTopicConfig: Readonly<TopicConfig> = Object.freeze({
  segment_bytes: segmentBytesDefault,
  segment_ms: segmentMsDefault,
  retention_ms: 7 * day,
  retention_bytes: -1,
  cleanup_policy: "delete" as CleanupPolicy,
  tombstone_retention_ms: day,
  cold_retention_ms: -1,
  max_timestamp_skew_ms: timestampSkewMsDefault,
  timestamp_type: "create_time" as TimestampType,
});

/**
 * Checks a topic name: `[A-Za-z0-9._-]`, 1–249 characters, not "." or "..", not of the form
 * `.<name>.tmp-<digits>` (the metadata writer's temp files).
 * @throws BrokerError invalid_topic_name.
 */
export function validateTopicName(name: unknown): string {
  if (typeof name !== "string")
    throw new BrokerError(Errors.invalidTopicName, `Invalid topic name: "name" must be a string`);
  if (name.length < 1 || name.length > topicNameCharsMax) {
    throw new BrokerError(
      Errors.invalidTopicName,
      `Invalid topic name ${quote(name)}: must be 1 to ${topicNameCharsMax} characters, got ${name.length}`,
    );
  }
  if (name === "." || name === "..")
    throw new BrokerError(
      Errors.invalidTopicName,
      `Invalid topic name "${name}": "." and ".." are reserved`,
    );
  if (!/^[A-Za-z0-9._-]+$/.test(name)) {
    throw new BrokerError(
      Errors.invalidTopicName,
      `Invalid topic name ${quote(name)}: only letters, digits, ".", "_" and "-" are allowed`,
    );
  }
  // A directory of that form would read as a leftover temp file at the next start (storage/leftovers.ts).
  if (isTempFileName(name))
    throw new BrokerError(
      Errors.invalidTopicName,
      `Invalid topic name ${quote(name)}: names of the form ".<name>.tmp-<digits>" are reserved for temporary files`,
    );
  return name;
}

/** Checks a partition count: an integer in [1, 4096]. @throws BrokerError invalid_config. */
export function validatePartitionCount(partitions: unknown): number {
  if (
    typeof partitions !== "number" ||
    !Number.isInteger(partitions) ||
    partitions < 1 ||
    partitions > partitionsMax
  ) {
    throw new BrokerError(
      Errors.invalidConfig,
      `Invalid partition count ${quote(partitions)}: must be an integer from 1 to ${partitionsMax}`,
    );
  }
  return partitions;
}

type Rule = { min: number; max: number; allowMinusOne?: boolean; unit: string };

/** The optional schema keys of a topic config (docs/registry.md "Produce-time validation"). */
const schemaKeys = ["value_schema_subject", "key_schema_subject", "schema_format"] as const;
const schemaFormats: readonly SchemaFormat[] = ["confluent", "json"];

const numericRules: Record<
  Exclude<
    keyof TopicConfig,
    | "cleanup_policy"
    | "timestamp_type"
    | "mirror_hold_retention"
    | "replication_factor"
    | "min_insync_replicas"
    | "replica_lag_ms"
    | (typeof schemaKeys)[number]
  >,
  Rule
> = {
  segment_bytes: { min: segmentBytesMin, max: segmentBytesMax, unit: "bytes" },
  segment_ms: { min: 1, max: Number.MAX_SAFE_INTEGER, unit: "ms" },
  retention_ms: { min: 1, max: Number.MAX_SAFE_INTEGER, allowMinusOne: true, unit: "ms" },
  retention_bytes: { min: 1, max: Number.MAX_SAFE_INTEGER, allowMinusOne: true, unit: "bytes" },
  tombstone_retention_ms: { min: 0, max: Number.MAX_SAFE_INTEGER, unit: "ms" },
  cold_retention_ms: { min: 1, max: Number.MAX_SAFE_INTEGER, allowMinusOne: true, unit: "ms" },
  max_timestamp_skew_ms: { min: 0, max: Number.MAX_SAFE_INTEGER, unit: "ms" },
};

/** Bounds of `replica_lag_ms`, in ms. */
export const replicaLagMsMin = 100;
export const replicaLagMsMax = 3_600_000;

/** Largest `replication_factor` a topic may ask for. */
export const replicationFactorMax = 16;

const policies: readonly CleanupPolicy[] = ["delete", "compact", "compact,delete"];
const timestampTypes: readonly TimestampType[] = ["create_time", "log_append_time"];

/**
 * Validates a partial config and merges it over `base`. Unknown keys, wrong types and values out
 * of range are refused; "delete,compact" is accepted as "compact,delete".
 * @throws BrokerError invalid_config naming the key and the allowed range.
 */
export function mergeTopicConfig(base: TopicConfig, patch: unknown): TopicConfig {
  if (patch === undefined || patch === null) return { ...base };
  if (typeof patch !== "object" || Array.isArray(patch))
    throw new BrokerError(Errors.invalidConfig, `Invalid topic config: "config" must be an object`);
  const out: TopicConfig = { ...base };
  for (const [key, value] of Object.entries(patch as Record<string, unknown>)) {
    if (key === "cleanup_policy") {
      const normalised =
        typeof value === "string"
          ? value
              .split(",")
              .map((s) => s.trim())
              .sort()
              .join(",")
          : value;
      if (typeof normalised !== "string" || !policies.includes(normalised as CleanupPolicy)) {
        throw new BrokerError(
          Errors.invalidConfig,
          `Invalid topic config "cleanup_policy": ${quote(value)} is not one of "delete", "compact", "compact,delete"`,
        );
      }
      out.cleanup_policy = normalised as CleanupPolicy;
      continue;
    }
    if (key === "timestamp_type") {
      if (!timestampTypes.includes(value as TimestampType))
        throw new BrokerError(
          Errors.invalidConfig,
          `Invalid topic config "timestamp_type": ${quote(value)} is not one of "create_time" (keep the producer's timestamp), "log_append_time" (the broker's clock at append)`,
        );
      out.timestamp_type = value as TimestampType;
      continue;
    }
    if (key === "mirror_hold_retention") {
      // Optional like the schema keys: absent (= false) until set, removed by null.
      if (value === null) delete out.mirror_hold_retention;
      else if (typeof value === "boolean") out.mirror_hold_retention = value;
      else
        throw new BrokerError(
          Errors.invalidConfig,
          `Invalid topic config "mirror_hold_retention": ${typeof value === "string" ? `the string ${quote(value)}` : quote(value)} is not a boolean: give true, false or null (JSON, not quoted)`,
        );
      continue;
    }
    if (key === "replication_factor" || key === "min_insync_replicas") {
      // Optional: absent until set (cluster mode sets both at creation; docs/cluster.md "Topics").
      const max = replicationFactorMax;
      if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > max)
        throw new BrokerError(
          Errors.invalidConfig,
          `Invalid topic config "${key}": ${quote(value)} must be an integer from 1 to ${max}`,
        );
      out[key] = value;
      continue;
    }
    if (key === "replica_lag_ms") {
      // Optional like the schema keys: absent (the replication's default) until set, removed by null.
      if (value === null) delete out.replica_lag_ms;
      else if (
        typeof value === "number" &&
        Number.isSafeInteger(value) &&
        value >= replicaLagMsMin &&
        value <= replicaLagMsMax
      )
        out.replica_lag_ms = value;
      else
        throw new BrokerError(
          Errors.invalidConfig,
          `Invalid topic config "replica_lag_ms": ${quote(value)} must be an integer from ${replicaLagMsMin} to ${replicaLagMsMax} ms, or null`,
        );
      continue;
    }
    if ((schemaKeys as readonly string[]).includes(key)) {
      mergeSchemaKey(out, key as (typeof schemaKeys)[number], value);
      continue;
    }
    if (!Object.hasOwn(numericRules, key)) {
      throw new BrokerError(
        Errors.invalidConfig,
        `Invalid topic config: unknown key ${quote(key)} (known: ${[...Object.keys(numericRules), "cleanup_policy", "timestamp_type", "mirror_hold_retention", "replication_factor", "min_insync_replicas", "replica_lag_ms", ...schemaKeys].join(", ")})`,
      );
    }
    const rule = numericRules[key as keyof typeof numericRules];
    const ok =
      typeof value === "number" &&
      Number.isSafeInteger(value) &&
      ((value >= rule.min && value <= rule.max) || (rule.allowMinusOne === true && value === -1));
    if (!ok) {
      const range = `an integer from ${rule.min} to ${rule.max} ${rule.unit}${rule.allowMinusOne ? ", or -1 for no limit" : ""}`;
      throw new BrokerError(
        Errors.invalidConfig,
        `Invalid topic config "${key}": ${quote(value)} must be ${range}`,
      );
    }
    out[key as keyof typeof numericRules] = value as number;
  }
  return out;
}

/**
 * Sets (or, with null, removes) one schema key of `out`: a subject is 1 to `subjectCharsMax`
 * characters without control characters; a format is "confluent" or "json".
 * @throws BrokerError invalid_config naming the key.
 */
function mergeSchemaKey(out: TopicConfig, key: (typeof schemaKeys)[number], value: unknown): void {
  if (value === null) {
    delete out[key];
    return;
  }
  if (key === "schema_format") {
    if (!schemaFormats.includes(value as SchemaFormat))
      throw new BrokerError(
        Errors.invalidConfig,
        `Invalid topic config "schema_format": ${quote(value)} is not one of "confluent", "json" (or null to remove it)`,
      );
    out.schema_format = value as SchemaFormat;
    return;
  }
  if (typeof value !== "string" || !isSubjectName(value))
    throw new BrokerError(
      Errors.invalidConfig,
      `Invalid topic config "${key}": ${quote(value)} must be a subject name of 1 to ${subjectCharsMax} characters without control characters (or null to remove it)`,
    );
  out[key] = value;
}
