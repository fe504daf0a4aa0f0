/**
 * A cluster topic's incarnation (docs/cluster.md "Topic ids"; Kafka's topic id, KIP-516): 128
 * random bits, written as 32 lowercase hex digits, made when the topic is created and stored in
 * its record in etcd (`topics/<name>`, beside the config keys) and in every replica's
 * `topic.json`. Two topics of one name (deleted and created again) have different ids, so a copy
 * of the deleted one is never taken for a replica of the new one (attack15b F5).
 *
 * The record's JSON is the topic config plus `topic_id` and, for an id added to a topic created
 * before topic ids existed, `topic_id_origin: "upgrade"`. Every reader strips both before it uses
 * the rest as the config ({@link parseTopicRecord}).
 */
import { isTopicId } from "../broker/topics.ts";
import type { TopicConfig } from "../broker/types.ts";

export { isTopicId };

/**
 * Where a record's id came from: `creation` (made with the topic: every copy of this topic made
 * by a broker that knows topic ids records it), or `upgrade` (added later to a topic created
 * before topic ids existed: its copies may have none, and adopt it).
 */
export type TopicIdOrigin = "creation" | "upgrade";

/** A topic's record in etcd: its config and, when it has one, its id. */
export interface TopicRecord {
  config: TopicConfig;
  /** null: a topic created before topic ids existed, not yet given one. */
  topicId: string | null;
  origin: TopicIdOrigin;
}

/**
 * A new topic id from 16 random bytes (the runtime's CSPRNG in a broker).
 * @throws Error if `random` does not give 16 bytes.
 */
export function newTopicId(random: (count: number) => Uint8Array): string {
  const bytes = random(16);
  if (bytes.length !== 16) throw new Error(`a topic id needs 16 random bytes, got ${bytes.length}`);
  let hex = "";
  for (const b of bytes) hex += b.toString(16).padStart(2, "0");
  return hex;
}

/**
 * Parses the value of `topics/<name>`.
 * @throws Error (naming the field) if it is not a JSON object, or its `topic_id` is not 32
 *   lowercase hex digits, or its `topic_id_origin` is not "upgrade".
 */
export function parseTopicRecord(value: string): TopicRecord {
  const parsed = JSON.parse(value) as unknown;
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new Error("a topic record must be a JSON object");
  const {
    topic_id: topicId,
    topic_id_origin: origin,
    ...config
  } = parsed as Record<string, unknown>;
  if (topicId !== undefined && !isTopicId(topicId))
    throw new Error(`topic_id ${JSON.stringify(topicId)} is not 32 lowercase hex digits`);
  if (origin !== undefined && origin !== "upgrade")
    throw new Error(`topic_id_origin ${JSON.stringify(origin)} is not "upgrade"`);
  return {
    config: config as unknown as TopicConfig,
    topicId: topicId ?? null,
    origin: origin === "upgrade" ? "upgrade" : "creation",
  };
}

/** The value of `topics/<name>` for `record` (the inverse of {@link parseTopicRecord}). */
export function formatTopicRecord(record: TopicRecord): string {
  return JSON.stringify({
    ...record.config,
    ...(record.topicId === null ? {} : { topic_id: record.topicId }),
    ...(record.topicId !== null && record.origin === "upgrade"
      ? { topic_id_origin: "upgrade" }
      : {}),
  });
}

/**
 * How a local copy whose `topic.json` records `localId` (undefined: none), taken from a record
 * etcd created at `localRevision` (undefined: not recorded), relates to the topic etcd holds as
 * `record` (created at `record.createRevision`):
 * - `same`: the ids match;
 * - `adopt`: etcd's id was added to a topic created before topic ids (`upgrade`), and the copy
 *   has no id, or has another one taken from the same record (the same create revision: two
 *   brokers added ids to it at once, the record lost the first, e.g. to an etcd restore): the
 *   copy is of that topic and records etcd's id;
 * - `other`: another, older incarnation of the name (the ids differ, or the copy has none while
 *   etcd's id was made with the topic, which a copy made since would record): moved aside;
 * - `newer`: the ids differ and the copy's topic was created after etcd's (a higher create
 *   revision): etcd is older than the copy (restored from a snapshot taken before the name was
 *   deleted and created again), so the copy holds records of a topic etcd no longer knows: kept,
 *   never served, as a topic etcd does not know is (attack15b F8);
 * - `unknown`: etcd's topic has no id yet (created before topic ids): kept as before, until one
 *   is added ({@link upgradeTopicId}).
 */
export function compareIncarnation(
  localId: string | undefined,
  record: Pick<TopicRecord, "topicId" | "origin"> & { createRevision?: number },
  localRevision?: number,
): "same" | "adopt" | "other" | "newer" | "unknown" {
  if (record.topicId === null) return "unknown";
  if (localId === record.topicId) return "same";
  if (localId === undefined) return record.origin === "upgrade" ? "adopt" : "other";
  if (
    record.origin === "upgrade" &&
    localRevision !== undefined &&
    localRevision === record.createRevision
  )
    return "adopt";
  if (
    localRevision !== undefined &&
    record.createRevision !== undefined &&
    localRevision > record.createRevision
  )
    return "newer";
  return "other";
}

/**
 * The id to add to a topic etcd holds without one: the local copy's id if it records one (a copy
 * made by this version of a topic whose record lost its id, e.g. etcd restored from a snapshot
 * taken before the upgrade added it: the other copies have that id too), else a new one.
 */
export function upgradeTopicId(
  localId: string | undefined,
  random: (count: number) => Uint8Array,
): string {
  return localId ?? newTopicId(random);
}
