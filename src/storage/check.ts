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
 * | topic.json empty or unparseable (docs/decisions.md §9)        | corrupt  | make that topic unavailable           |
 * | torn tail of the active segment                      | warning  | cut it (never acknowledged)           |
 * | index missing, torn, zero-filled or wrong            | warning  | rebuild it from the log               |
 * | stray file, leftover temp file, base offset > 2^53−1 | warning  | report and ignore                     |
 * | compaction.marker present                            | warning  | finish or undo the interrupted swap   |
 */
import { joinPath, type FileSystem } from "../fs/types.ts";
import { MemoryLogger } from "../lib/logger.ts";
import { readJsonFile, isTempFileName } from "./metadata.ts";
import {
  Segment,
  describe,
  isSupportedBaseOffset,
  parseSegmentFileName,
  type SegmentCorruption,
  type SegmentRecoveryOutcome,
} from "./segment.ts";
import { swapMarkerName } from "./segment-swap.ts";

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
  /** Files recovery would report and ignore, with the reason. */
  strays: { name: string; reason: string }[];
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
  const report: CheckReport = { topics: [], segmentsChecked: 0, corrupt: 0, warnings: 0 };
  const topicsDir = joinPath(dataDir, "topics");
  let progress = { partitions: 0, bytes: 0 };
  for (const name of await fs.readdir(topicsDir)) {
    const dir = joinPath(topicsDir, name);
    const st = await fs.stat(dir);
    if (st === null || !st.isDirectory) continue;
    const topic: TopicCheck = { name, metadataProblem: "", partitions: [] };
    const meta = await readJsonFile(fs, joinPath(dir, "topic.json"));
    if ("missing" in meta) topic.metadataProblem = "topic.json is missing";
    else if ("error" in meta) topic.metadataProblem = `topic.json: ${meta.error}`;
    if (topic.metadataProblem !== "") report.corrupt++;
    const entries = (await fs.readdir(dir))
      .filter((n) => /^\d+$/.test(n))
      .sort((a, b) => Number(a) - Number(b));
    for (const p of entries) {
      const partition = await checkPartition(
        fs,
        joinPath(dir, p),
        `${name}/${p}`,
        options.nowMs ?? 0,
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
  return report;
}

async function checkPartition(
  fs: FileSystem,
  dir: string,
  partition: string,
  nowMs: number,
): Promise<PartitionCheck> {
  const result: PartitionCheck = { dir, segments: [], strays: [] };
  const bases: number[] = [];
  const names = await fs.readdir(dir);
  const logs = new Set(names.filter((n) => parseSegmentFileName(n)?.kind === "log"));
  for (const n of names) {
    const parsed = parseSegmentFileName(n);
    if (n === swapMarkerName)
      result.strays.push({
        name: n,
        reason: "an interrupted compaction swap; the next start finishes or undoes it",
      });
    else if (parsed === null)
      result.strays.push({
        name: n,
        reason: isTempFileName(n)
          ? "temporary file of an interrupted write"
          : "not a segment file name (20 digits + .log or .index)",
      });
    else if (!isSupportedBaseOffset(parsed.baseOffset))
      result.strays.push({
        name: n,
        reason: `base offset ${parsed.baseOffset} is above 2^53 − 1: unsupported`,
      });
    else if (parsed.kind === "log") bases.push(parsed.baseOffset);
    else if (!logs.has(n.replace(/\.index$/, ".log")))
      result.strays.push({ name: n, reason: "index without a log" });
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
      });
    } catch (err) {
      result.segments.push({
        file: joinPath(dir, `${String(bases[i]).padStart(20, "0")}.log`),
        baseOffset: bases[i],
        nextOffset: bases[i],
        sizeBytes: 0,
        severity: "corrupt",
        outcome: "corrupt",
        corruption: null,
        detail: `cannot be read: ${describe(err)}`,
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
              position: Number(torn?.position ?? 0),
              reason: String(torn?.reason ?? ""),
              highestSkippedOffset: -1,
            })
          : null,
      detail,
    });
    await segment.close();
  }
  return result;
}
