/**
 * Leftovers in a data directory — files a crash, an interrupted operation or a person left behind —
 * in one table: what each kind is, what a start does with it, and what `es-broker check` says.
 * Start-up (`broker/broker.ts`, `broker/groups.ts`, `storage/partition.ts`) and the offline check
 * (`storage/check.ts`) both classify with the functions below and take their words from
 * {@link leftovers}, so the two never judge the same file differently (docs/storage.md "Files on disk";
 * docs/decisions.md §9, §11).
 *
 * | kind                      | what it is                                                   | a start                                   | `check`  |
 * |---------------------------|--------------------------------------------------------------|-------------------------------------------|----------|
 * | `metadata_temp`           | `.<name>.tmp-<n>` of the atomic metadata writer (`metadata.ts`), beside a target that reads as JSON or is absent | removes it, reports it once (`recovery.temp_file_removed`) | warning |
 * | `metadata_temp_kept`      | the same, beside a target that exists but does not read as JSON | keeps it for whoever repairs the target, reports it | warning |
 * | `incomplete_topic`        | a topic directory without `topic.json` holding nothing but the writer's temps: a create interrupted before its commit point, never acknowledged | removes the directory (`recovery.incomplete_topic_removed`) | warning |
 * | `topic_without_metadata`  | a topic directory without `topic.json` that holds partitions or other files | makes the topic unavailable | corrupt |
 * | `unreadable_topic_metadata` | `topic.json` empty, unparseable, or not a topic description | makes the topic unavailable | corrupt |
 * | `not_a_topic`             | an entry of `topics/` whose name is not a topic name (a file, `.x.tmp-1`, `bad name`) | reports and ignores it | warning |
 * | `not_a_group_file`        | an entry of `groups/` that is not `<group>.json`             | reports and ignores it                    | warning  |
 * | `deleted_topics`          | `trash/` holding entries: topics being deleted at the stop   | finishes deleting them                    | warning  |
 * | `not_a_segment_file`      | a file in a partition directory that is not a segment's log or index (20 digits) | reports and ignores it | warning |
 * | `unsupported_base_offset` | a segment named above 2^53 − 1 (docs/decisions.md §6)                 | reports and ignores it                    | warning  |
 * | `index_without_log`       | a segment index whose log is missing                         | reports and ignores it                    | warning  |
 * | `swap_marker`             | `compaction.marker`: a segment swap a crash interrupted      | finishes or undoes the swap               | warning  |
 * | `swap_temp`               | `<segment>.cleaned`: an output of an interrupted swap        | renames it into place or removes it, finishing or undoing the swap | warning |
 * | `unreadable_log_start_offsets` | `log_start_offsets.json` of a topic that cannot be read or parsed (`log-start-offsets.ts`) | makes the topic unavailable | corrupt |
 * | `unusable_key_file`       | `api_keys.json` that cannot be read, parsed or used (`auth/key-store.ts`) | refuses to run | corrupt |
 * | `unreadable_group_file`   | `groups/<group>.json` that cannot be read or parsed (`broker/groups.ts`) | makes the group unavailable | corrupt |
 * | `unreadable_schema_registry` | `schemas.json` that cannot be read, parsed or compiled (`registry/registry.ts`) | makes the schema registry unavailable | corrupt |
 * | `unreadable_producer_state` | `producers.json` that cannot be read or parsed (`broker/producers/snapshot.ts`) | makes idempotent produce unavailable | corrupt |
 * | `producer_journal_torn_tail` | bytes after the last whole entry of `producers.journal` where no entry decodes: its last write, torn (`producer-journal.ts`) | cuts them off (`producers.journal_torn_tail`) | warning |
 * | `corrupt_producer_journal` | a bad entry or header of `producers.journal` with a valid entry after it (`scanJournal`, docs/decisions.md §1) | leaves the file, makes idempotent produce unavailable | corrupt |
 *
 * The five before the last two are not leftovers but metadata files, and the last two the
 * producer journal; `check` judges them with the functions start-up uses (all but the first in
 * `cli/check.ts`, as `storage/` does not parse the metadata) and words them from this table.
 *
 * A temp file of the metadata writer is never the only copy of anything acknowledged: the rename
 * over its target is the write's commit point, so a temp left behind is a write that never
 * happened, and removing it loses nothing. It is kept only while its target is unreadable, as
 * evidence for whoever repairs the target. Files of other names are not the broker's to delete.
 */
import { joinPath, readdirIfExists, type FileSystem } from "../fs/types.ts";
import { utf8 } from "../lib/bytes.ts";
import type { Logger } from "../lib/logger.ts";
import { isTempFileName, readJsonFile, tempStemBytesMax } from "./metadata.ts";
import { isSupportedBaseOffset, parseSegmentFileName } from "./segment-files.ts";
import { parseSwapTempName, swapMarkerName } from "./segment-swap.ts";

/** A row of the table in the module comment. */
export type LeftoverKind =
  | "metadata_temp"
  | "metadata_temp_kept"
  | "incomplete_topic"
  | "topic_without_metadata"
  | "unreadable_topic_metadata"
  | "not_a_topic"
  | "not_a_group_file"
  | "deleted_topics"
  | "not_a_segment_file"
  | "unsupported_base_offset"
  | "index_without_log"
  | "swap_marker"
  | "swap_temp"
  | "unreadable_log_start_offsets"
  | "unusable_key_file"
  | "unreadable_group_file"
  | "unreadable_schema_registry"
  | "unreadable_producer_state"
  | "producer_journal_torn_tail"
  | "corrupt_producer_journal";

/** What the table says of one kind. */
export interface LeftoverRule {
  /** What the leftover is: the `reason` of its log line and of its `check` line. */
  what: string;
  /** What a start does with it, for `check` to say. */
  startup: string;
  /** How `check` rates it: "corrupt" makes `check` exit 1. */
  check: "warning" | "corrupt";
}

/** The table of the module comment. */
export const leftovers: Readonly<Record<LeftoverKind, LeftoverRule>> = Object.freeze({
  metadata_temp: {
    what: "temporary file of an interrupted metadata write",
    startup: "a start removes it",
    check: "warning",
  },
  metadata_temp_kept: {
    what: "temporary file of an interrupted metadata write, beside a target that cannot be read",
    startup: "a start keeps it until the target is repaired",
    check: "warning",
  },
  incomplete_topic: {
    what: "topic directory without topic.json and without partitions: a create interrupted before it was acknowledged",
    startup: "a start removes it",
    check: "warning",
  },
  topic_without_metadata: {
    what: "topic.json is missing",
    startup: "a start makes the topic unavailable",
    check: "corrupt",
  },
  unreadable_topic_metadata: {
    what: "topic.json cannot be read",
    startup: "a start makes the topic unavailable",
    check: "corrupt",
  },
  not_a_topic: {
    what: "not a topic directory (its name is not a topic name)",
    startup: "a start reports and ignores it",
    check: "warning",
  },
  not_a_group_file: {
    what: "not <group>.json with a valid group name",
    startup: "a start reports and ignores it",
    check: "warning",
  },
  deleted_topics: {
    what: "topics being deleted when the broker stopped",
    startup: "a start finishes deleting them",
    check: "warning",
  },
  not_a_segment_file: {
    what: "not a segment file name (20 digits + .log or .index)",
    startup: "a start reports and ignores it",
    check: "warning",
  },
  unsupported_base_offset: {
    what: "base offset is above 2^53 - 1: unsupported",
    startup: "a start reports and ignores it",
    check: "warning",
  },
  index_without_log: {
    what: "index without a log",
    startup: "a start reports and ignores it",
    check: "warning",
  },
  swap_marker: {
    what: "an interrupted compaction swap",
    startup: "a start finishes or undoes it",
    check: "warning",
  },
  swap_temp: {
    what: "an output of an interrupted compaction swap",
    startup: "a start renames it into place or removes it, finishing or undoing the swap",
    check: "warning",
  },
  unreadable_log_start_offsets: {
    what: "log_start_offsets.json cannot be read",
    startup: "a start makes the topic unavailable",
    check: "corrupt",
  },
  unusable_key_file: {
    what: "the API key file cannot be used",
    startup: "a start refuses to run, so the broker is unavailable until the file is repaired",
    check: "corrupt",
  },
  unreadable_group_file: {
    what: "a consumer group file cannot be read",
    startup: "a start makes the group unavailable",
    check: "corrupt",
  },
  unreadable_schema_registry: {
    what: "the schema registry's file cannot be used",
    startup: "a start makes the schema registry unavailable",
    check: "corrupt",
  },
  unreadable_producer_state: {
    what: "the idempotent producer snapshot cannot be read",
    startup: "a start makes idempotent produce unavailable",
    check: "corrupt",
  },
  producer_journal_torn_tail: {
    what: "the idempotent producer journal ends in a torn write",
    startup: "a start cuts it off",
    check: "warning",
  },
  corrupt_producer_journal: {
    what: "the idempotent producer journal has a bad entry with valid entries after it",
    startup: "a start leaves the file as it is and makes idempotent produce unavailable",
    check: "corrupt",
  },
});

/**
 * True if `name` can be a topic's or a consumer group's name: 1–249 of `[A-Za-z0-9._-]`, not "."
 * or ".." (the rule of `validateTopicName` and `validateGroupName` in `broker/`).
 */
export function isObjectName(name: string): boolean {
  return (
    name.length >= 1 &&
    name.length <= 249 &&
    name !== "." &&
    name !== ".." &&
    /^[A-Za-z0-9._-]+$/.test(name)
  );
}

/**
 * How an entry of `topics/` is taken: a topic to load, or a leftover. A name of the metadata
 * writer's temp form is never a topic (`validateTopicName` refuses such names).
 */
export function classifyTopicsEntry(name: string): "topic" | "not_a_topic" {
  return isObjectName(name) && !isTempFileName(name) ? "topic" : "not_a_topic";
}

/** How an entry of `groups/` is taken: a group file to load (its group name), or a leftover. */
export function classifyGroupsEntry(
  name: string,
): { group: string } | "metadata_temp" | "not_a_group_file" {
  if (isTempFileName(name)) return "metadata_temp";
  const group = name.endsWith(".json") ? name.slice(0, -5) : "";
  return isObjectName(group) ? { group } : "not_a_group_file";
}

/**
 * A topic directory without `topic.json`, by what it holds (`entries`, its file names): nothing
 * but the writer's temps is an interrupted create; anything else is a topic missing its metadata.
 */
export function classifyTopicWithoutMetadata(
  entries: readonly string[],
): "incomplete_topic" | "topic_without_metadata" {
  return entries.every(isTempFileName) ? "incomplete_topic" : "topic_without_metadata";
}

/**
 * How an entry of a partition directory is taken: null for a segment's log or index to load,
 * else the leftover kind. `names` are all of the directory's entries (to find an index's log).
 */
export function classifyPartitionEntry(
  name: string,
  names: ReadonlySet<string>,
): LeftoverKind | null {
  if (name === swapMarkerName) return "swap_marker";
  if (parseSwapTempName(name) !== null) return "swap_temp";
  const parsed = parseSegmentFileName(name);
  if (parsed === null) return "not_a_segment_file";
  if (!isSupportedBaseOffset(parsed.baseOffset)) return "unsupported_base_offset";
  if (parsed.kind === "index" && !names.has(name.replace(/\.index$/, ".log")))
    return "index_without_log";
  return null;
}

/**
 * Judges the metadata writer's temp file `name` in `dir` (`names` = the directory's entries):
 * `metadata_temp_kept` if its target (the file it was to replace; a long name is cut in the temp's
 * name, so every entry it prefixes) exists and does not read as JSON, else `metadata_temp`.
 */
export async function classifyMetadataTemp(
  fs: FileSystem,
  dir: string,
  name: string,
  names: readonly string[],
): Promise<"metadata_temp" | "metadata_temp_kept"> {
  const stem = /^\.(.+)\.tmp-\d+$/.exec(name)?.[1] ?? "";
  // The writer cuts a long name (at a character boundary, so up to 3 bytes short of the cap).
  const cut = utf8(stem).length > tempStemBytesMax - 4;
  for (const target of names) {
    if (isTempFileName(target) || !(target === stem || (cut && target.startsWith(stem)))) continue;
    if ("error" in (await readJsonFile(fs, joinPath(dir, target)))) return "metadata_temp_kept";
  }
  return "metadata_temp";
}

/**
 * At start, once `dir` is known good (opened, its targets loaded or found unreadable): removes
 * every temp file of the metadata writer in it whose target reads (`metadata_temp`), reporting
 * each once as `recovery.temp_file_removed`, and fsyncs `dir` if it removed any; reports the ones
 * it keeps (`metadata_temp_kept`) as `recovery.stray_file`. Other files are left alone.
 * @returns the names removed.
 * @throws FsError if `dir` cannot be listed or a removal or the fsync fails.
 */
export async function removeMetadataTemps(
  fs: FileSystem,
  dir: string,
  logger: Logger,
): Promise<string[]> {
  const names = (await readdirIfExists(fs, dir)) ?? [];
  const removed: string[] = [];
  for (const name of names) {
    if (!isTempFileName(name)) continue;
    const kind = await classifyMetadataTemp(fs, dir, name, names);
    const file = joinPath(dir, name);
    if (kind === "metadata_temp_kept") {
      logger.log("warn", "recovery.stray_file", { file, reason: leftovers[kind].what });
      continue;
    }
    await fs.unlink(file);
    removed.push(name);
    logger.log("warn", "recovery.temp_file_removed", { file, reason: leftovers[kind].what });
  }
  if (removed.length > 0) await fs.syncDir(dir);
  return removed;
}
