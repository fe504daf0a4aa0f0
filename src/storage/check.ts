/**
 * Offline verification of a stopped data directory (`es-broker check`, the equivalent of Kafka's
 * DumpLogSegments): every segment goes through the same checks as recovery at start-up (docs/storage.md "Recovery after a crash") in inspect-only mode, so nothing on disk is changed, and each decision
 * is reported instead of applied. Sealed segments are always scanned in full here, not trusted by
 * the index fast path: a check is meant to find what the fast path would not read.
 *
 * Severity of each finding:
 * | finding                                              | severity | what a start would do                 |
 * |------------------------------------------------------|----------|---------------------------------------|
 * | corrupt record in a segment (incl. first-offset name mismatch, docs/decisions.md §11) | corrupt | skip the rest of the segment, report |
 * | torn tail of the active segment (no clean-stop record) | warning | cut it (never acknowledged)          |
 * | after a clean stop (`clean-stop.ts`, docs/decisions.md §17): a bad tail, or an active segment ending elsewhere than the record says | corrupt | leave it, roll a new segment at the recorded log end |
 * | an unreadable clean-stop record                      | warning  | ignore it: apply the torn-tail rule   |
 * | index missing, torn, zero-filled or wrong            | warning  | rebuild it from the log               |
 * | a leftover: temp files, strays, an interrupted create, a swap, `trash/`, a missing or unreadable topic.json | the table of `storage/leftovers.ts` | the same table: start-up classifies with the same functions |
 */
import { joinPath, type FileSystem } from "../fs/types.ts";
import { MemoryLogger } from "../lib/logger.ts";
import { errorMessage } from "../lib/errors.ts";
import {
  classifyGroupsEntry,
  classifyMetadataTemp,
  classifyPartitionEntry,
  classifyTopicsEntry,
  classifyTopicWithoutMetadata,
  leftovers,
  type LeftoverKind,
} from "./leftovers.ts";
import { isTempFileName, readJsonFile } from "./metadata.ts";
import { LogStartOffsetFile } from "./log-start-offsets.ts";
import { Segment } from "./segment.ts";
import type { SegmentCorruption, SegmentRecoveryOutcome } from "./segment-recovery.ts";
import { logFileName, parseSegmentFileName } from "./segment-files.ts";
import { isLeaderEpochsFile } from "./leader-epochs.ts";
import { cleanStopFileName, readCleanStop, type CleanStop } from "./clean-stop.ts";

/** How bad a finding is; any "corrupt" makes `es-broker check` exit non-zero. */
export type CheckSeverity = "ok" | "warning" | "corrupt";

/** The verdict on one segment. */
export interface SegmentCheck {
  /** Path of the segment's log. */
  file: string;
  baseOffset: number;
  /** One past the last valid record found. */
  nextOffset: number;
  sizeBytes: number;
  severity: CheckSeverity;
  /** What recovery would decide: "scanned" (all valid), "index_rebuilt", "torn_tail_cut", "corrupt". */
  outcome: SegmentRecoveryOutcome;
  /** Where decoding stopped and why, for a corrupt segment. */
  corruption: SegmentCorruption | null;
  /** Human-readable detail of any finding ("" when all is well). */
  detail: string;
}

/** The verdict on one partition directory. */
export interface PartitionCheck {
  dir: string;
  segments: SegmentCheck[];
  /** Leftovers in it (`storage/leftovers.ts`): their kind, and what it is. */
  strays: { name: string; kind: LeftoverKind; reason: string }[];
  /**
   * Where the broker's clean-stop record says this partition's log ended (docs/decisions.md §17),
   * or null: not named (the last stop was a crash for it).
   */
  cleanStop: CleanStop | null;
}

/** A leftover outside partition directories (data directory, `topics/`, topic directories, `groups/`). */
export interface LeftoverFinding {
  /** The file or directory. */
  path: string;
  kind: LeftoverKind;
  /** The table's rating of the kind. */
  severity: "warning" | "corrupt";
  /** What it is and what a start does with it, from the table. */
  detail: string;
}

/** The verdict on one topic. */
export interface TopicCheck {
  name: string;
  /** A problem with topic.json, or "". */
  metadataProblem: string;
  partitions: PartitionCheck[];
}

/** The whole report. */
export interface CheckReport {
  topics: TopicCheck[];
  /** Leftovers outside partition directories. */
  leftovers: LeftoverFinding[];
  /** Partitions the data directory's clean-stop record names, or null without a record. */
  cleanStopPartitions: number | null;
  /** Why the clean-stop record cannot be read ("" if it can or there is none): a warning. */
  cleanStopProblem: string;
  /** Counts over every segment and metadata file. */
  segmentsChecked: number;
  corrupt: number;
  warnings: number;
}

/**
 * Checks a stopped data directory without changing it.
 * @param onProgress called after each partition with the partitions done so far and the bytes read.
 * @throws FsError if the data directory itself cannot be read.
 */
export async function checkDataDir(
  fs: FileSystem,
  dataDir: string,
  options: {
    onProgress?: (done: { partitions: number; bytes: number }) => void;
    nowMs?: number;
  } = {},
): Promise<CheckReport> {
  const report: CheckReport = {
    topics: [],
    leftovers: [],
    cleanStopPartitions: null,
    cleanStopProblem: "",
    segmentsChecked: 0,
    corrupt: 0,
    warnings: 0,
  };
  const found = (path: string, kind: LeftoverKind): void => {
    const rule = leftovers[kind];
    report.leftovers.push({
      path,
      kind,
      severity: rule.check,
      detail: `${rule.what}; ${rule.startup}`,
    });
    if (rule.check === "corrupt") report.corrupt++;
    else report.warnings++;
  };
  /** Temp files of the metadata writer in `dir` (whose entries are `names`). */
  const temps = async (dir: string, names: readonly string[]): Promise<void> => {
    for (const name of names.filter(isTempFileName))
      found(joinPath(dir, name), await classifyMetadataTemp(fs, dir, name, names));
  };
  const rootNames = await fs.readdir(dataDir);
  await temps(dataDir, rootNames);
  let cleanStop: Map<string, CleanStop> | null = null;
  const readStop = await readCleanStop(fs, dataDir);
  if (readStop !== null && "problem" in readStop) {
    report.cleanStopProblem = `${joinPath(dataDir, cleanStopFileName)}: ${readStop.problem}; a start ignores it and recovers every partition as after a crash`;
    report.warnings++;
  } else if (readStop !== null) {
    cleanStop = readStop;
    report.cleanStopPartitions = readStop.size;
  }
  // An empty `trash/` is what a delete leaves once it has finished: nothing left to do.
  if (rootNames.includes("trash")) {
    const trash = joinPath(dataDir, "trash");
    const entries = await fs.readdir(trash).catch(() => null);
    if (entries === null || entries.length > 0) found(trash, "deleted_topics");
  }
  const topicsDir = joinPath(dataDir, "topics");
  let progress = { partitions: 0, bytes: 0 };
  for (const name of await fs.readdir(topicsDir)) {
    const dir = joinPath(topicsDir, name);
    if (classifyTopicsEntry(name) === "not_a_topic") {
      found(dir, "not_a_topic");
      continue;
    }
    const st = await fs.stat(dir);
    const names = st?.isDirectory ? await fs.readdir(dir) : [];
    const topic: TopicCheck = { name, metadataProblem: "", partitions: [] };
    const meta = await readJsonFile(fs, joinPath(dir, "topic.json"));
    if ("missing" in meta) {
      if (classifyTopicWithoutMetadata(names) === "incomplete_topic") {
        found(dir, "incomplete_topic");
        continue;
      }
      topic.metadataProblem = leftovers.topic_without_metadata.what;
    } else if ("error" in meta)
      topic.metadataProblem = `${leftovers.unreadable_topic_metadata.what}: ${meta.error}`;
    else {
      const offsets = await LogStartOffsetFile.load(fs, dir);
      if ("error" in offsets)
        topic.metadataProblem = `${leftovers.unreadable_log_start_offsets.what}: ${offsets.error}; ${leftovers.unreadable_log_start_offsets.startup}`;
    }
    if (topic.metadataProblem !== "") report.corrupt++;
    await temps(dir, names);
    const entries = names.filter((n) => /^\d+$/.test(n)).sort((a, b) => Number(a) - Number(b));
    for (const p of entries) {
      const partition = await checkPartition(
        fs,
        joinPath(dir, p),
        `${name}/${p}`,
        options.nowMs ?? 0,
        cleanStop?.get(`${name}/${p}`) ?? null,
      );
      topic.partitions.push(partition);
      for (const s of partition.segments) {
        report.segmentsChecked++;
        if (s.severity === "corrupt") report.corrupt++;
        if (s.severity === "warning") report.warnings++;
        progress = { partitions: progress.partitions, bytes: progress.bytes + s.sizeBytes };
      }
      report.warnings += partition.strays.length;
      progress = { partitions: progress.partitions + 1, bytes: progress.bytes };
      options.onProgress?.(progress);
    }
    report.topics.push(topic);
  }
  const groupsDir = joinPath(dataDir, "groups");
  if (rootNames.includes("groups")) {
    const names = await fs.readdir(groupsDir);
    await temps(groupsDir, names);
    for (const name of names)
      if (classifyGroupsEntry(name) === "not_a_group_file")
        found(joinPath(groupsDir, name), "not_a_group_file");
  }
  return report;
}

async function checkPartition(
  fs: FileSystem,
  dir: string,
  partition: string,
  nowMs: number,
  cleanStop: CleanStop | null,
): Promise<PartitionCheck> {
  const result: PartitionCheck = { dir, segments: [], strays: [], cleanStop };
  const bases: number[] = [];
  const names = await fs.readdir(dir);
  const all = new Set(names);
  for (const n of names) {
    if (isLeaderEpochsFile(n)) continue;
    const kind = classifyPartitionEntry(n, all);
    if (kind !== null) {
      const rule = leftovers[kind];
      result.strays.push({ name: n, kind, reason: `${rule.what}; ${rule.startup}` });
      continue;
    }
    const parsed = parseSegmentFileName(n);
    if (parsed?.kind === "log") bases.push(parsed.baseOffset);
  }
  bases.sort((a, b) => a - b);
  for (let i = 0; i < bases.length; i++) {
    const logger = new MemoryLogger();
    let segment: Segment;
    try {
      // Sealed segments are opened as if active, so they are scanned in full rather than trusted.
      segment = await Segment.open(fs, {
        dir,
        baseOffset: bases[i],
        active: true,
        nowMs,
        logger,
        partition,
        inspectOnly: true,
        // Only the active segment is judged by the record: an older one ends where it was sealed.
        cleanStop:
          cleanStop !== null && i === bases.length - 1 && cleanStop.activeBaseOffset === bases[i]
            ? { nextOffset: cleanStop.logEndOffset, sizeBytes: cleanStop.activeSizeBytes }
            : undefined,
      });
    } catch (err) {
      result.segments.push({
        file: joinPath(dir, logFileName(bases[i])),
        baseOffset: bases[i],
        nextOffset: bases[i],
        sizeBytes: 0,
        severity: "corrupt",
        outcome: "corrupt",
        corruption: null,
        detail: `cannot be read: ${errorMessage(err)}`,
      });
      continue;
    }
    const active = i === bases.length - 1;
    let outcome = segment.recovery;
    let severity: CheckSeverity = "ok";
    let detail = "";
    const torn = logger.named("check.torn_tail")[0];
    if (outcome === "corrupt") {
      severity = "corrupt";
      detail = `corrupt record at position ${segment.corruption?.position}: ${segment.corruption?.reason}`;
    } else if (torn !== undefined && !active) {
      // A sealed segment never has a torn tail: what the active-style scan called torn is corruption.
      outcome = "corrupt";
      severity = "corrupt";
      detail = `sealed segment ends in ${torn.cut_bytes} bytes that do not decode, at position ${torn.position}: ${torn.reason}`;
    } else if (torn !== undefined) {
      severity = "warning";
      detail = `torn tail of ${torn.cut_bytes} bytes at position ${torn.position} (${torn.reason}); a start cuts it`;
    } else if (active && cleanStop !== null && segment.nextOffset < cleanStop.logEndOffset) {
      // The segment the clean stop ended in is gone: records up to the recorded log end are lost.
      outcome = "corrupt";
      severity = "corrupt";
      detail = `the log ends at offset ${segment.nextOffset}, but the clean stop recorded log end offset ${cleanStop.logEndOffset}; a start rolls a new segment there`;
    } else if (segment.indexProblem !== "") {
      outcome = "index_rebuilt";
      severity = "warning";
      detail = `index: ${segment.indexProblem}; a start rebuilds it`;
    }
    result.segments.push({
      file: segment.logPath,
      baseOffset: segment.baseOffset,
      nextOffset: segment.nextOffset,
      sizeBytes:
        torn !== undefined ? Number(torn.position) + Number(torn.cut_bytes) : segment.sizeBytes,
      severity,
      outcome,
      corruption:
        outcome === "corrupt"
          ? (segment.corruption ?? {
              position: torn !== undefined ? Number(torn.position) : segment.sizeBytes,
              reason: torn !== undefined ? String(torn.reason) : detail,
              highestSkippedOffset: -1,
            })
          : null,
      detail,
    });
    await segment.close();
  }
  return result;
}
