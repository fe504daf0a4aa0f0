/**
 * Recovery of one segment when it is opened (docs/storage.md "Recovery after a crash"): what its
 * files hold, decided from the bytes, not trusted from the index. Used by the partition at start,
 * by the cold tier and compaction for the segments they open, and in inspect-only mode by
 * `es-broker check`.
 *
 * What {@link recoverSegment} decides; the first row that matches applies ("full scan": every
 * record read from the start and the index rebuilt in memory; no file changes when inspecting):
 *
 * | segment | what is found                               | outcome       | files changed     |
 * |---------|---------------------------------------------|---------------|-------------------|
 * | sealed  | the index validates (docs/decisions.md §2), | trusted       | none              |
 * |         | the first record carries the name's offset, |               |                   |
 * |         | the records after the last index entry      |               |                   |
 * |         | end exactly at the end of the file          |               |                   |
 * | any     | full scan: the first record's offset is     | corrupt       | none              |
 * |         | not the one in the file name                |               |                   |
 * |         | (docs/decisions.md §11)                     |               |                   |
 * | any     | full scan: only zeros after the last        | (then the     | sealed: log cut   |
 * |         | record (zeros written ahead)                | rows below)   | to its records    |
 * | active  | full scan: bytes after the last record      | torn_tail_cut | log cut, fsynced; |
 * |         | that never decode, and no valid record      |               | index rewritten   |
 * |         | after them, and no clean-stop record        |               |                   |
 * | active  | full scan after a clean stop (`clean-stop.  | corrupt       | none              |
 * |         | ts`): a tail that never decodes, or the log |               |                   |
 * |         | ending elsewhere than the record says       |               |                   |
 * |         | (docs/decisions.md §17)                     |               |                   |
 * | any     | full scan: a record fails its checks        | corrupt       | none; the rest    |
 * |         | (active: and a valid one follows it,        |               | is skipped        |
 * |         | docs/decisions.md §1)                       |               |                   |
 * | any     | full scan, all valid: the stored index      | scanned       | active: index     |
 * |         | equals (sealed) or is a prefix of           |               | file opened for   |
 * |         | (active) the rebuilt one                    |               | appends           |
 * | any     | full scan, all valid: the stored index      | index_rebuilt | index rewritten   |
 * |         | was rejected (on load or by the fast check) |               | and fsynced       |
 * | any     | full scan, all valid: any other index       | scanned       | index rewritten   |
 * |         |                                             |               | and fsynced       |
 *
 * Records skipped as corrupt still count for the next offset: it is one past the highest valid
 * offset found anywhere in the file (docs/decisions.md §3), so no offset is ever assigned twice.
 */
import { errorMessage } from "../lib/errors.ts";
import {
  indexEntryBytes,
  indexIntervalBytes,
  recordLengthPrefixBytes,
  scanWindowBytes,
} from "../lib/limits.ts";
import type { Logger } from "../lib/logger.ts";
import { isFsError, type FileHandle, type FileSystem } from "../fs/types.ts";
import { OffsetIndex } from "./offset-index.ts";
import { DecodeStatus } from "./record.ts";
import { RecordScanner, ScanStatus } from "./record-scanner.ts";

/**
 * Where decoding of a segment stopped short of its end, and why (docs/storage.md "Recovery after a
 * crash").
 */
export interface SegmentCorruption {
  /** Byte position of the first record that failed its checks. */
  position: number;
  /** What failed. */
  reason: string;
  /**
   * The highest valid offset found after the corrupt position (records skipped as corrupt), or −1.
   */
  highestSkippedOffset: number;
}

/** Where an active segment ended at a clean stop (docs/decisions.md §17). */
export interface SegmentCleanStop {
  /** One past its last record. */
  nextOffset: number;
  /** Bytes of its records. */
  sizeBytes: number;
}

/** What recovery decided about one segment. */
export type SegmentRecoveryOutcome =
  | "trusted" // sealed, passed the index check without a full read
  | "scanned" // scanned in full, all valid (active segment, or sealed with a bad index)
  | "index_rebuilt" // scanned in full and its index file rewritten
  | "torn_tail_cut" // active segment: an incomplete tail was cut off
  | "corrupt"; // a corrupt record: the rest of the segment is skipped, the file left in place

/** Where a segment's events are logged, and about what. */
export interface SegmentLogContext {
  logger: Logger;
  /** The partition's name, "topic/partition". */
  partition: string;
  logPath: string;
  indexPath: string;
}

/** The state recovery leaves a segment in: what {@link recoverSegment} found. */
export interface RecoveredSegment {
  /** The offset index in memory (validated, or rebuilt from the log). */
  index: OffsetIndex;
  /**
   * The active segment's index file, open for appends; null for a sealed one or when inspecting.
   */
  indexFile: FileHandle | null;
  /** Entries of `index` already in `indexFile`. */
  indexOnDiskEntries: number;
  /**
   * True when the index file holds exactly `index` (validated, or rewritten and fsynced): a sealed
   * segment may then drop its index from memory and read it back from the file (`Segment`).
   */
  indexFileExact: boolean;
  /** Bytes of records (zeros written ahead excluded). */
  sizeBytes: number;
  /** Bytes from the start that hold valid records; less than `sizeBytes` only when corrupt. */
  readableEndBytes: number;
  /** Length of the log file: `sizeBytes` plus any zeros written ahead that stay. */
  fileEndBytes: number;
  /** One past the highest valid offset found (records skipped as corrupt count). */
  nextOffset: number;
  /** Largest record timestamp seen (ms), or −1. */
  maxTimestampMs: number;
  /** The first record's timestamp, else the time of the open (ms). */
  createdMs: number;
  recovery: SegmentRecoveryOutcome;
  /** Why the stored index was not trusted ("" if it was, or the fast check trusted the segment). */
  indexProblem: string;
  corruption: SegmentCorruption | null;
}

/**
 * Decides what a segment's files hold (see the module's table) and repairs what the table says,
 * unless `inspectOnly`.
 * @param log the segment's log, open (for writing when active and not inspecting).
 * @throws FsError if a file cannot be read, or a repair's write or fsync fails.
 */
export async function recoverSegment(
  fs: FileSystem,
  log: FileHandle,
  options: SegmentLogContext & {
    baseOffset: number;
    active: boolean;
    nowMs: number;
    /** Take every decision but change no file (`es-broker check`). */
    inspectOnly: boolean;
    /**
     * Where the active segment ended at a clean stop (`clean-stop.ts`), if the broker's record
     * names this segment: a tail that does not decode is then corruption, not a torn write.
     */
    cleanStop?: SegmentCleanStop;
  },
): Promise<RecoveredSegment> {
  const { indexPath, active } = options;
  const logSize = await log.size();
  let stored: OffsetIndex | null = null;
  let storedBytes: Uint8Array | null = null;
  let indexProblem = "";
  // Opened without a stat first: a start over many segments makes one system call fewer each.
  let indexFile: FileHandle | null = null;
  try {
    indexFile = await fs.open(indexPath);
  } catch (err) {
    if (!isFsError(err, "ENOENT")) throw err;
  }
  if (indexFile === null) {
    indexProblem = "index file is missing";
  } else {
    try {
      const indexSize = await indexFile.size();
      if (indexSize > (Math.floor(logSize / indexIntervalBytes) + 2) * indexEntryBytes) {
        indexProblem = `index is ${indexSize} bytes, more than a ${logSize}-byte log can need`;
      } else {
        const bytes = new Uint8Array(indexSize);
        const got = await indexFile.read(bytes, 0);
        storedBytes = bytes.subarray(0, got);
        const decoded = OffsetIndex.decode(storedBytes, logSize);
        if ("index" in decoded) stored = decoded.index;
        // The active segment writes its index entries a few KiB at a time: an empty index file
        // is what a crash before the first of those writes leaves (the full scan rebuilds it).
        else if (active && storedBytes.length === 0) stored = new OffsetIndex();
        else indexProblem = decoded.problem;
      }
    } finally {
      await indexFile.close();
    }
  }
  const index = stored ?? new OffsetIndex();
  const state: RecoveredSegment = {
    index,
    indexFile: null,
    indexOnDiskEntries: index.count,
    indexFileExact: false,
    sizeBytes: logSize,
    readableEndBytes: logSize,
    fileEndBytes: logSize,
    nextOffset: options.baseOffset,
    maxTimestampMs: -1,
    createdMs: options.nowMs,
    recovery: "scanned",
    indexProblem: "",
    corruption: null,
  };
  if (!active && stored !== null && logSize > 0) {
    if (await fastCheck(log, state, options.baseOffset)) {
      state.recovery = "trusted";
      state.indexFileExact = !options.inspectOnly;
      return state;
    }
    indexProblem = "records after the last index entry do not decode to the end of the file";
  }
  await fullScan(fs, log, state, { ...options, indexProblem, storedBytes });
  return state;
}

/**
 * The sealed-segment check that avoids a full read: the first record is valid and carries the
 * base offset, and the records from the last index entry decode to exactly the end of the file.
 * On success sets the next offset, newest timestamp and creation time.
 */
async function fastCheck(
  log: FileHandle,
  state: RecoveredSegment,
  baseOffset: number,
): Promise<boolean> {
  const logSize = state.sizeBytes;
  // A small window (a start over many segments reads one per segment), read again at the first
  // record's checked length if that record is larger.
  const head = new RecordScanner(log, { end: logSize, windowBytes: indexIntervalBytes });
  await head.fill(0);
  let status = head.decode(0);
  if (status === ScanStatus.Cut) status = await head.readRecordAt(0);
  if (status !== ScanStatus.Ok || head.cursor.offset !== baseOffset) return false;
  const createdMs = head.cursor.timestampMs;
  const lastPos = state.index.lastPosition;
  const lastOffset = baseOffset + state.index.lastRelativeOffset;
  let firstSeen = false;
  let ok = true;
  const tail = await scanRecords(
    log,
    { start: lastPos, end: logSize, minOffset: lastOffset },
    (offset) => {
      if (!firstSeen) {
        firstSeen = true;
        if (offset !== lastOffset) ok = false;
      }
    },
  );
  if (!ok || tail.stop !== DecodeStatus.Ok || tail.endPosition !== logSize || tail.lastOffset < 0)
    return false;
  state.nextOffset = tail.lastOffset + 1;
  state.maxTimestampMs = tail.maxTimestampMs;
  state.createdMs = createdMs;
  return true;
}

/**
 * Scans the whole log, rebuilding the index; handles zeros written ahead, torn tails and
 * corruption.
 */
async function fullScan(
  fs: FileSystem,
  log: FileHandle,
  state: RecoveredSegment,
  options: SegmentLogContext & {
    baseOffset: number;
    active: boolean;
    inspectOnly: boolean;
    indexProblem: string;
    storedBytes: Uint8Array | null;
    cleanStop?: SegmentCleanStop;
  },
): Promise<void> {
  const { active, logger, partition, inspectOnly, baseOffset, cleanStop } = options;
  state.indexProblem = options.indexProblem;
  const { index: rebuilt, scan } = await scanAndIndex(log, { end: state.sizeBytes, baseOffset });
  if (!active) rebuilt.trim();
  state.index = rebuilt;
  state.maxTimestampMs = scan.maxTimestampMs;
  if (scan.firstTimestampMs >= 0) state.createdMs = scan.firstTimestampMs;
  if (scan.firstOffset >= 0 && scan.firstOffset !== baseOffset) {
    // docs/decisions.md §11: a first record whose offset differs from the file name is corrupt.
    state.index = new OffsetIndex();
    markCorrupt(state, options, {
      position: 0,
      reason: `first record has offset ${scan.firstOffset}, but the file name says ${baseOffset}`,
      highestSkippedOffset: scan.lastOffset,
    });
    return;
  }
  state.nextOffset = scan.lastOffset >= 0 ? scan.lastOffset + 1 : baseOffset;

  if (
    scan.endPosition < state.sizeBytes &&
    (await isZeroRange(log, scan.endPosition, state.sizeBytes))
  ) {
    // Zeros written ahead of the records (segmentPreallocateBytes), not a torn write: record_len 0
    // never decodes, and zeros are all that is there. The active segment keeps them to append into;
    // a sealed one (a crash between a roll and its seal) has them cut so its size is its records'.
    const zeroBytes = state.sizeBytes - scan.endPosition;
    state.sizeBytes = scan.endPosition;
    if (!active && !inspectOnly && (await cutZerosOff(fs, scan.endPosition, options)))
      state.fileEndBytes = scan.endPosition;
    logger.log("debug", inspectOnly ? "check.preallocated_tail" : "recovery.preallocated_tail", {
      partition,
      segment: options.logPath,
      position: scan.endPosition,
      zero_bytes: zeroBytes,
    });
  }
  if (scan.endPosition < state.sizeBytes) {
    const after = await findValidAfter(log, {
      from: scan.endPosition,
      end: state.sizeBytes,
      minOffset: state.nextOffset,
    });
    if (active && after.firstValidPosition < 0 && cleanStop === undefined) {
      // A torn tail: bytes that never decode up to the end of the file. Never acknowledged.
      const cutBytes = state.sizeBytes - scan.endPosition;
      if (!inspectOnly) {
        await log.truncate(scan.endPosition);
        await log.sync();
      }
      logger.log("warn", inspectOnly ? "check.torn_tail" : "recovery.torn_tail_cut", {
        partition,
        segment: options.logPath,
        position: scan.endPosition,
        cut_bytes: cutBytes,
        reason: scan.reason,
      });
      state.sizeBytes = scan.endPosition;
      state.readableEndBytes = scan.endPosition;
      if (!inspectOnly) state.fileEndBytes = scan.endPosition;
      state.recovery = "torn_tail_cut";
      if (!inspectOnly) await rewriteIndex(fs, state, options.indexPath, active);
      return;
    }
    markCorrupt(state, options, {
      position: scan.endPosition,
      reason:
        active && cleanStop !== undefined && after.firstValidPosition < 0
          ? `${scan.reason} (after a clean stop that recorded ${cleanStop.sizeBytes} bytes up to offset ${cleanStop.nextOffset}: not a torn write)`
          : scan.reason,
      highestSkippedOffset: after.highestOffset,
    });
    return;
  }
  state.readableEndBytes = state.sizeBytes;
  if (
    active &&
    cleanStop !== undefined &&
    (state.nextOffset !== cleanStop.nextOffset || state.sizeBytes !== cleanStop.sizeBytes)
  ) {
    // Every record decodes, but the log is not the one a clean stop left: records were lost or
    // added since (docs/decisions.md §17).
    markCorrupt(state, options, {
      position: state.sizeBytes,
      reason: `the log ends at offset ${state.nextOffset} after ${state.sizeBytes} bytes, but the clean stop recorded offset ${cleanStop.nextOffset} after ${cleanStop.sizeBytes} bytes`,
      highestSkippedOffset: -1,
    });
    return;
  }
  // A sealed segment's stored index must equal the rebuilt one. An active segment's may lag its
  // records (entries are written a few KiB at a time): a prefix of the rebuilt one is kept and
  // appended to.
  const storedPrefix =
    options.indexProblem === "" ? storedPrefixEntries(options.storedBytes, rebuilt) : -1;
  const keep = active ? storedPrefix >= 0 : storedPrefix === rebuilt.count;
  if (!keep) {
    if (options.indexProblem) {
      logger.log("warn", inspectOnly ? "check.index_invalid" : "recovery.index_rebuilt", {
        partition,
        segment: options.indexPath,
        reason: options.indexProblem,
      });
    }
    if (!inspectOnly) await rewriteIndex(fs, state, options.indexPath, active);
    state.recovery = options.indexProblem ? "index_rebuilt" : "scanned";
    return;
  }
  state.recovery = "scanned";
  state.indexFileExact = !active && !inspectOnly;
  if (active && !inspectOnly) {
    state.indexFile = await fs.open(options.indexPath, { write: true });
    state.indexOnDiskEntries = storedPrefix;
  }
}

/**
 * Rewrites `state`'s index file from memory (see {@link writeIndexFile}), keeping it open if
 * active.
 */
async function rewriteIndex(
  fs: FileSystem,
  state: RecoveredSegment,
  indexPath: string,
  active: boolean,
): Promise<void> {
  state.indexFile = await writeIndexFile(fs, indexPath, state.index, { keepOpen: active });
  if (active) state.indexOnDiskEntries = state.index.count;
  else state.indexFileExact = true;
}

/**
 * Entries of the index stored at open if it is a prefix of `rebuilt` (or equal to it), else −1
 * (also without a stored index: rewrite to be safe).
 */
function storedPrefixEntries(stored: Uint8Array | null, rebuilt: OffsetIndex): number {
  if (stored === null) return -1;
  const enc = rebuilt.encode();
  if (stored.length > enc.length) return -1;
  for (let i = 0; i < stored.length; i++) if (enc[i] !== stored[i]) return -1;
  return stored.length / indexEntryBytes;
}

/**
 * Records `corruption` on a segment's state (recovery's, or a live segment's after a read found
 * it): the rest of the segment after `corruption.position` is skipped, and the next offset moves
 * past the highest offset skipped. Logs `event` (default `recovery.corrupt_segment`).
 */
export function markCorrupt(
  target: {
    corruption: SegmentCorruption | null;
    readableEndBytes: number;
    recovery: SegmentRecoveryOutcome;
    nextOffset: number;
    readonly sizeBytes: number;
  },
  context: SegmentLogContext,
  corruption: SegmentCorruption,
  event = "recovery.corrupt_segment",
): void {
  target.corruption = corruption;
  target.readableEndBytes = corruption.position;
  target.recovery = "corrupt";
  if (corruption.highestSkippedOffset >= target.nextOffset)
    target.nextOffset = corruption.highestSkippedOffset + 1;
  context.logger.log("error", event, {
    partition: context.partition,
    segment: context.logPath,
    position: corruption.position,
    reason: corruption.reason,
    size_bytes: target.sizeBytes,
    highest_skipped_offset: corruption.highestSkippedOffset,
  });
}

/**
 * Cuts the zeros off a sealed segment's log file (opened read-only) at `length` and fsyncs the
 * cut. Best effort, like the cut at a seal: the zeros are free space past every record (reads,
 * scans and the cold tier's copy stop at `sizeBytes`), so a failure is logged and the segment
 * serves its records all the same; the next start tries again.
 * @returns true if the file now ends at `length`.
 */
async function cutZerosOff(
  fs: FileSystem,
  length: number,
  context: SegmentLogContext,
): Promise<boolean> {
  try {
    const file = await fs.open(context.logPath, { write: true });
    try {
      await file.truncate(length);
      await file.sync();
    } finally {
      await file.close().catch(() => {});
    }
    return true;
  } catch (err) {
    context.logger.log("warn", "recovery.preallocated_cut_failed", {
      partition: context.partition,
      segment: context.logPath,
      position: length,
      error: errorMessage(err),
    });
    return false;
  }
}

/**
 * Writes `index` as the whole index file at `path` and fsyncs it.
 * @returns the file, still open, with `keepOpen` (an active segment appends to it); else null.
 * @throws FsError if the open, write or fsync fails (the file is closed).
 */
export async function writeIndexFile(
  fs: FileSystem,
  path: string,
  index: OffsetIndex,
  options: { keepOpen: boolean },
): Promise<FileHandle | null> {
  const file = await fs.open(path, { create: true });
  try {
    await file.truncate(0);
    const bytes = index.encode();
    if (bytes.length > 0) await file.write(bytes, 0);
    await file.sync();
  } catch (err) {
    await file.close().catch(() => {});
    throw err;
  }
  if (options.keepOpen) return file;
  await file.close();
  return null;
}

/** Records scanned sequentially from a position. */
export interface ScanResult {
  /** Position where decoding stopped (end of the last valid record). */
  endPosition: number;
  /** Offset of the first valid record, or −1. */
  firstOffset: number;
  /** Offset of the last valid record, or −1. */
  lastOffset: number;
  /** Timestamp of the first valid record, or −1. */
  firstTimestampMs: number;
  /** Largest timestamp seen, or −1. */
  maxTimestampMs: number;
  /** Why decoding stopped before the end ("" if it reached `end`). */
  reason: string;
  /** Status at the stop: Ok if it reached `end`. */
  stop: DecodeStatus;
}

/**
 * Scans a segment's log from its start to `end` and builds its index from the records found (one
 * entry per `indexIntervalBytes`), stopping where {@link scanRecords} stops.
 */
export async function scanAndIndex(
  log: FileHandle,
  range: { end: number; baseOffset: number },
): Promise<{ index: OffsetIndex; scan: ScanResult }> {
  const index = new OffsetIndex();
  let lastIndexed = -1;
  const scan = await scanRecords(
    log,
    { start: 0, end: range.end, minOffset: range.baseOffset },
    (offset, position) => {
      if (index.wants(position, lastIndexed)) {
        index.push(offset - range.baseOffset, position);
        lastIndexed = position;
      }
    },
  );
  return { index, scan };
}

/**
 * Scans records sequentially from `start` to `end` through a {@link RecordScanner}, calling
 * `onRecord` for each valid one. Stops at the first record that is incomplete or invalid, or whose
 * offset does not increase, and where the file ends if it is shorter than `end`.
 */
async function scanRecords(
  file: FileHandle,
  range: { start: number; end: number; minOffset: number },
  onRecord?: (offset: number, position: number) => void,
): Promise<ScanResult> {
  const result: ScanResult = {
    endPosition: range.start,
    firstOffset: -1,
    lastOffset: -1,
    firstTimestampMs: -1,
    maxTimestampMs: -1,
    reason: "",
    stop: DecodeStatus.Ok,
  };
  const scanner = new RecordScanner(file, { end: range.end, windowBytes: scanWindowBytes });
  const cursor = scanner.cursor;
  let pos = range.start;
  let minOffset = range.minOffset;
  while (pos < scanner.dataEnd) {
    let status = scanner.decode(pos);
    if (status === ScanStatus.Cut) status = await scanner.readRecordAt(pos);
    if (pos >= scanner.dataEnd) break; // the file ends here, before `end`
    if (status === ScanStatus.Ok && cursor.offset >= minOffset) {
      if (result.firstOffset < 0) {
        result.firstOffset = cursor.offset;
        result.firstTimestampMs = cursor.timestampMs;
      }
      result.lastOffset = cursor.offset;
      if (cursor.timestampMs > result.maxTimestampMs) result.maxTimestampMs = cursor.timestampMs;
      onRecord?.(cursor.offset, pos);
      minOffset = cursor.offset + 1;
      pos += cursor.sizeBytes;
      continue;
    }
    result.stop = status === ScanStatus.Ok ? DecodeStatus.Invalid : status;
    result.reason =
      status === ScanStatus.Ok
        ? `offset ${cursor.offset} does not increase past ${minOffset - 1}`
        : cursor.reason;
    break;
  }
  result.endPosition = pos;
  return result;
}

/**
 * Looks for valid records after a corrupt position (docs/decisions.md §1 and §3): tries every byte
 * position after `from` for a record whose offset is at least `minOffset`, then follows valid
 * records from there, trying byte by byte again after each failure. Returns the first position
 * where a valid record was found (−1 if none) and the highest valid offset seen.
 */
async function findValidAfter(
  file: FileHandle,
  range: { from: number; end: number; minOffset: number },
): Promise<{ firstValidPosition: number; highestOffset: number }> {
  const scanner = new RecordScanner(file, { end: range.end, windowBytes: scanWindowBytes });
  const cursor = scanner.cursor;
  let firstValidPosition = -1;
  let highestOffset = -1;
  let pos = range.from + 1;
  let minOffset = range.minOffset;
  while (pos < scanner.dataEnd) {
    let status = scanner.decode(pos);
    if (status === ScanStatus.Cut) status = await scanner.readRecordAt(pos);
    if (status === ScanStatus.Ok && cursor.offset >= minOffset) {
      if (firstValidPosition < 0) firstValidPosition = pos;
      highestOffset = Math.max(highestOffset, cursor.offset);
      minOffset = cursor.offset + 1;
      pos += cursor.sizeBytes;
      continue;
    }
    // record_len 0 never decodes. Skip a run of zeros (preallocated space) in one step: a record
    // can start at most 3 bytes before the next non-zero byte.
    const zerosEnd = scanner.zerosEnd(pos);
    pos = zerosEnd < 0 ? pos + 1 : zerosEnd - (recordLengthPrefixBytes - 1);
  }
  return { firstValidPosition, highestOffset };
}

/**
 * True if every byte of `file` from `from` to `end` is zero (preallocated space,
 * `segmentPreallocateBytes`).
 */
async function isZeroRange(file: FileHandle, from: number, end: number): Promise<boolean> {
  const buf = new Uint8Array(Math.min(scanWindowBytes, end - from));
  let pos = from;
  while (pos < end) {
    const got = await file.read(buf.subarray(0, Math.min(buf.length, end - pos)), pos);
    if (got === 0) return false;
    for (let i = 0; i < got; i++) if (buf[i] !== 0) return false;
    pos += got;
  }
  return true;
}
