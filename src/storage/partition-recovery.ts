/**
 * Recovery of a partition directory at open (docs/storage.md "Recovery after a crash"): an
 * interrupted segment swap is finished or undone first (docs/storage.md "Replacing segments
 * safely"; `segment-swap.ts`), stray files are reported and ignored, never deleted
 * (docs/decisions.md §11, with the reasons of `leftovers.ts`), every segment is recovered
 * (`segment-recovery.ts`: sealed ones checked against their index, the active one scanned in
 * full), and the partition gets an active segment to append to:
 *
 * | newest segment found       | what happens                                                   |
 * |----------------------------|----------------------------------------------------------------|
 * | none (a new partition)     | an active segment is created at offset 0                       |
 * | corrupt                    | left in place and sealed (docs/decisions.md §1); a new active  |
 * |                            | segment is created after every offset found in it, so none is  |
 * |                            | assigned twice                                                 |
 * | recovered                  | it stays the active segment; its log and the directory are     |
 * |                            | fsynced, so everything recovered is durable before it is read  |
 *
 * The next offset never goes backwards (docs/decisions.md §3): it is one past the highest valid
 * record on disk (records skipped as corrupt count), and at least the active segment's base offset.
 *
 * After a clean stop (the broker's `clean-stop.json`, `clean-stop.ts`; docs/decisions.md §17)
 * the active segment the record names must end where it says: a tail that does not decode is
 * corruption, not a torn write, and the next offset is at least the recorded log end offset (an
 * active segment short of it is sealed and a new one rolled there). The caller removes the record
 * once every partition's decisions are durable, before anything is appended.
 */
import { assert } from "../lib/assert.ts";
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { joinPath, type FileSystem } from "../fs/types.ts";
import { Segment, type SegmentContext } from "./segment.ts";
import { leftovers } from "./leftovers.ts";
import { isLeaderEpochsFile } from "./leader-epochs.ts";
import {
  indexFileName,
  isSupportedBaseOffset,
  parseSegmentFileName,
  type StrayFile,
} from "./segment-files.ts";
import { recoverSegmentSwap } from "./segment-swap.ts";
import type { CleanStop } from "./clean-stop.ts";

/** What {@link recoverPartition} found and made ready. */
export interface RecoveredPartition {
  /** Oldest first; the last is the active segment. */
  segments: Segment[];
  /** Files reported and ignored. */
  strays: StrayFile[];
  /** One past the last record: everything recovered is durable, so this is the high watermark. */
  nextOffset: number;
  /** Bytes of the active segment, all durable. */
  durablePosition: number;
  /** The first offset a read may ask for. */
  logStartOffset: number;
}

/**
 * Opens (creating if needed) a partition directory and recovers it (see the module comment).
 * @param options.logStartOffset the log start offset persisted by retention, if any; without it
 *   the log starts at the lower tier's first offset, else at the first local segment's base.
 * @throws FsError if the directory cannot be read, a segment cannot be recovered, or a new
 *   segment cannot be created and made durable.
 */
export async function recoverPartition(
  fs: FileSystem,
  options: {
    dir: string;
    /** "topic/partition", in logs. */
    name: string;
    clock: Clock;
    logger: Logger;
    /** What every segment of the partition is made with. */
    segmentContext: SegmentContext;
    logStartOffset: number | undefined;
    /** Base offset of the lower tier's first segment, or −1 when there is none. */
    lowerTierFirstOffset: number;
    /** One past the lower tier's last offset, or −1: with no local segment, the log continues there. */
    lowerTierEndOffset?: number;
    /** Where the log ended at the last clean stop, or null (a crash: the torn-tail rule). */
    cleanStop?: CleanStop | null;
  },
): Promise<RecoveredPartition> {
  const { dir, name, logger } = options;
  await fs.mkdir(dir);
  await recoverSegmentSwap(fs, { dir, logger, partition: name });
  const strays: StrayFile[] = [];
  const stray = (file: string, reason: string): void => {
    strays.push({ name: file, reason });
    logger.log("warn", "recovery.stray_file", {
      partition: name,
      file: joinPath(dir, file),
      reason,
    });
  };
  const logs = new Set<number>();
  const indexes = new Set<number>();
  for (const file of await fs.readdir(dir)) {
    // Cluster mode's leader-epoch history lives beside the segments (`leader-epochs.ts`).
    if (isLeaderEpochsFile(file)) continue;
    const parsed = parseSegmentFileName(file);
    if (parsed === null) {
      stray(file, leftovers.not_a_segment_file.what);
      continue;
    }
    if (!isSupportedBaseOffset(parsed.baseOffset)) {
      stray(file, leftovers.unsupported_base_offset.what);
      continue;
    }
    if (parsed.kind === "log") logs.add(parsed.baseOffset);
    else indexes.add(parsed.baseOffset);
  }
  for (const base of indexes)
    if (!logs.has(base)) stray(indexFileName(base), leftovers.index_without_log.what);
  const cleanStop = options.cleanStop ?? null;
  const bases = [...logs].sort((a, b) => a - b);
  const now = options.clock.nowMs();
  const started = now;
  const segments: Segment[] = [];
  for (let i = 0; i < bases.length; i++) {
    segments.push(
      await Segment.open(fs, {
        ...options.segmentContext,
        dir,
        baseOffset: bases[i],
        active: i === bases.length - 1,
        nowMs: now,
        cleanStop:
          cleanStop !== null && cleanStop.activeBaseOffset === bases[i]
            ? { nextOffset: cleanStop.logEndOffset, sizeBytes: cleanStop.activeSizeBytes }
            : undefined,
      }),
    );
  }
  /** Creates the active segment at `baseOffset` and makes its name durable. */
  const createActive = async (baseOffset: number): Promise<void> => {
    const segment = await Segment.create(fs, {
      ...options.segmentContext,
      dir,
      baseOffset,
      nowMs: options.clock.nowMs(),
    });
    try {
      await fs.syncDir(dir);
    } catch (err) {
      await segment.close();
      throw err;
    }
    segments.push(segment);
  };
  // docs/decisions.md §17: no offset below a clean stop's log end is assigned again.
  const floor = cleanStop?.logEndOffset ?? 0;
  let nextOffset = floor;
  for (const s of segments) nextOffset = Math.max(nextOffset, s.nextOffset);
  const last = segments.at(-1);
  if (last === undefined) {
    // Never restart offsets below what the cold tier holds (a lost data directory).
    await createActive(Math.max(floor, options.lowerTierEndOffset ?? -1));
  } else if (last.corruption !== null) {
    // docs/decisions.md §1: leave the corrupt active segment in place and roll a new one after it.
    await last.seal();
    await createActive(Math.max(nextOffset, last.baseOffset + 1));
  } else if (last.nextOffset < floor) {
    // The segment the clean stop ended in is gone (only older ones are left): keep what is there
    // and continue after the recorded log end.
    logger.log("error", "recovery.clean_stop_log_end_missing", {
      partition: name,
      segment: last.logPath,
      next_offset: last.nextOffset,
      clean_stop_log_end_offset: floor,
    });
    await last.seal();
    await createActive(floor);
  } else {
    // Everything recovered is made durable before it becomes readable: the active segment's
    // bytes, and the directory entries of the files found (a roll whose directory fsync failed
    // before the restart left a segment whose name only a directory fsync makes durable).
    await last.syncLog();
    await fs.syncDir(dir);
    nextOffset = Math.max(nextOffset, last.baseOffset);
  }
  const active = segments[segments.length - 1];
  assert(active.nextOffset >= nextOffset, "the next offset never goes backwards");
  const derived =
    options.lowerTierFirstOffset >= 0
      ? Math.min(options.lowerTierFirstOffset, segments[0].baseOffset)
      : segments[0].baseOffset;
  const logStartOffset = Math.min(options.logStartOffset ?? derived, active.nextOffset);
  const corrupt = segments.filter((s) => s.corruption !== null).length;
  // A partition with nothing on disk (a topic just created) had nothing to recover: said at debug
  // level, so that `clean_stop: false` is not read as an unclean stop (newuser14).
  const fresh = last === undefined && cleanStop === null;
  logger.log(corrupt > 0 ? "warn" : fresh ? "debug" : "info", "recovery.partition", {
    partition: name,
    segments: segments.length,
    corrupt_segments: corrupt,
    stray_files: strays.length,
    clean_stop: cleanStop !== null,
    next_offset: active.nextOffset,
    log_start_offset: logStartOffset,
    duration_ms: options.clock.nowMs() - started,
  });
  return {
    segments,
    strays,
    nextOffset: active.nextOffset,
    durablePosition: active.sizeBytes,
    logStartOffset,
  };
}
