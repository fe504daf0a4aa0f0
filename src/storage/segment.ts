/**
 * A segment: `NNNNNNNNNNNNNNNNNNNN.log` (records, docs/storage.md "Records") and `.index` (docs/storage.md
 * "Index and reads"), named after the offset of its first record padded to 20 digits.
 *
 * Durability: `append` resolving means the bytes are in the page cache (the file's volatile
 * state), not on disk; the partition's group commit calls `syncLog` and only then counts them as
 * durable. The index file is derived state: it is never fsynced on the append path; recovery
 * validates it and rebuilds it from the log when anything is off.
 *
 * Concurrency: one writer (the partition's write loop) and any number of readers. Readers only
 * read below a limit the partition gives them (the durable end), with positional reads on the
 * segment's own handle. A segment removed by retention or compaction stays readable for readers
 * that acquired it; the handle closes when the last one releases it.
 */
import { assert } from "../lib/assert.ts";
import {
  indexEntryBytes,
  indexIntervalBytes,
  indexPendingEntriesMax,
  readWindowBytes,
  readWindowSlackBytes,
  recordLengthPrefixBytes,
  recordOverEntryBytes,
  scanWindowBytes,
  segmentPreallocateBytes,
} from "../lib/limits.ts";
import { joinPath, type FileHandle, type FileSystem } from "../fs/types.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import { acquireAppendBuffer, releaseAppendBuffer } from "./append-buffers.ts";
import { OffsetIndex } from "./offset-index.ts";
import { indexFileName, logFileName } from "./segment-files.ts";
import { DecodeStatus, encodeEntries, type EntryBatch } from "./record.ts";
import { RecordScanner, ScanStatus } from "./record-scanner.ts";
import { StorageError } from "./errors.ts";

/** Where decoding of a segment stopped short of its end, and why (docs/storage.md "Recovery after a crash"). */
export interface SegmentCorruption {
  /** Byte position of the first record that failed its checks. */
  position: number;
  /** What failed. */
  reason: string;
  /** The highest valid offset found after the corrupt position (records skipped as corrupt), or −1. */
  highestSkippedOffset: number;
}

/** What recovery decided about one segment. */
export type SegmentRecoveryOutcome =
  | "trusted" // sealed, passed the index check without a full read
  | "scanned" // scanned in full, all valid (active segment, or sealed with a bad index)
  | "index_rebuilt" // scanned in full and its index file rewritten
  | "torn_tail_cut" // active segment: an incomplete tail was cut off
  | "corrupt"; // a corrupt record: the rest of the segment is skipped, the file left in place

/**
 * A prepared append: the encoded log bytes and the index entries they add. `logBytes` is a view of
 * a reused buffer (see {@link Segment.prepareAppend}): hand it back with `release()` once the write
 * has returned (or when the append is abandoned), and keep no reference to `logBytes` after that.
 */
export interface PreparedAppend {
  logBytes: Uint8Array;
  /** Returns `logBytes`' buffer for reuse by a later append. Idempotent. */
  release(): void;
  /** Interleaved (relative offset, position) pairs to add to the index. */
  indexEntries: number[];
  /** Offset of the first record. */
  baseOffset: number;
  /** One past the last record. */
  nextOffset: number;
  /** Largest timestamp among the records (ms). */
  maxTimestampMs: number;
}

/** The result of reading from one segment. */
export interface SegmentRead {
  /** Stored records, back to back, verbatim (a view of the read window). */
  bytes: Uint8Array;
  count: number;
  /** Offset of the last record returned, or −1 if none. */
  lastOffset: number;
  /**
   * "ok": records returned or the readable part holds none at/after the offset;
   * "bad_position": decoding failed where the index said a record starts (docs/decisions.md §2).
   */
  status: "ok" | "bad_position";
}

/** Records scanned sequentially from a position. */
interface ScanResult {
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
 * Looks for valid records after a corrupt position (docs/decisions.md §1 and §3): tries every byte position
 * after `from` for a record whose offset is at least `minOffset`, then follows valid records from
 * there, trying byte by byte again after each failure. Returns the first position where a valid
 * record was found (−1 if none) and the highest valid offset seen.
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

/** True if every byte of `file` from `from` to `end` is zero (preallocated space, `segmentPreallocateBytes`). */
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

/** `segmentPreallocateBytes` of zeros, the source of every write ahead (never written to). */
let zeroChunk: Uint8Array | null = null;

/** One segment of a partition. See the module comment for durability and concurrency. */
export class Segment {
  /** Offset of the first record (from the file name). */
  readonly baseOffset: number;
  readonly logPath: string;
  readonly indexPath: string;
  /** Bytes of log written (including bytes not yet fsynced); the file may be longer (zeros written ahead). */
  sizeBytes = 0;
  /** One past the offset of the last record (baseOffset when empty). */
  nextOffset: number;
  /** Bytes from the start that hold valid records; less than sizeBytes only for a corrupt segment. */
  readableEndBytes = 0;
  /** Set when recovery found a corrupt record: the rest of the segment is skipped. */
  corruption: SegmentCorruption | null = null;
  /** Largest record timestamp seen (ms), or −1 when unknown. */
  maxTimestampMs = -1;
  /** When the segment started, for `segment_ms` rolls (ms since the epoch). */
  createdMs: number;
  /** What recovery decided, for reports. */
  recovery: SegmentRecoveryOutcome = "scanned";
  /** Why the stored index was not trusted ("" if it was, or the segment was trusted by the fast path). */
  indexProblem = "";

  #fs: FileSystem;
  #log: FileHandle;
  #indexFile: FileHandle | null;
  #index: OffsetIndex;
  #indexOnDiskEntries: number;
  #indexWritable = true;
  /** Length of the log file: `sizeBytes` plus the zeros written ahead of it (segmentPreallocateBytes). */
  #fileEndBytes = 0;
  /** False after a write of zeros failed: the segment stops writing ahead. */
  #preallocate = true;
  #refs = 1;
  #closed = false;

  private constructor(init: {
    fs: FileSystem;
    dir: string;
    baseOffset: number;
    log: FileHandle;
    indexFile: FileHandle | null;
    index: OffsetIndex;
    createdMs: number;
  }) {
    this.#fs = init.fs;
    this.baseOffset = init.baseOffset;
    this.nextOffset = init.baseOffset;
    this.logPath = joinPath(init.dir, logFileName(init.baseOffset));
    this.indexPath = joinPath(init.dir, indexFileName(init.baseOffset));
    this.#log = init.log;
    this.#indexFile = init.indexFile;
    this.#index = init.index;
    this.#indexOnDiskEntries = init.index.count;
    this.createdMs = init.createdMs;
  }

  /** Number of index entries in memory. */
  get indexEntryCount(): number {
    return this.#index.count;
  }

  /** True if no record was ever appended. */
  get isEmpty(): boolean {
    return this.sizeBytes === 0;
  }

  /**
   * Creates a new, empty segment (log and index, mode 0600). The caller fsyncs the directory.
   * @throws FsError (EEXIST if a file of that name is already there).
   */
  static async create(
    fs: FileSystem,
    dir: string,
    baseOffset: number,
    nowMs: number,
  ): Promise<Segment> {
    assert(
      Number.isSafeInteger(baseOffset) && baseOffset >= 0,
      "segment base offset is a safe integer",
    );
    const log = await fs.open(joinPath(dir, logFileName(baseOffset)), {
      create: true,
      exclusive: true,
    });
    let indexFile: FileHandle;
    try {
      indexFile = await fs.open(joinPath(dir, indexFileName(baseOffset)), { create: true });
      await indexFile.truncate(0);
    } catch (err) {
      await log.close().catch(() => {});
      await fs.unlink(joinPath(dir, logFileName(baseOffset))).catch(() => {});
      throw err;
    }
    const segment = new Segment({
      fs,
      dir,
      baseOffset,
      log,
      indexFile,
      index: new OffsetIndex(),
      createdMs: nowMs,
    });
    return segment;
  }

  /**
   * Opens an existing segment and recovers it (docs/storage.md "Recovery after a crash"):
   * - sealed: the index is validated (docs/decisions.md §2); the first record and everything after the
   *   last index entry must decode, pass their CRC and end exactly at the end of the file. If so
   *   the segment is trusted without a full read; otherwise it is scanned in full and its index
   *   rebuilt. A corrupt record leaves the file in place, is reported, and the rest is skipped.
   * - active: always scanned in full. An incomplete tail with nothing valid after it is a torn
   *   write and is cut off (never acknowledged). A bad record followed by a valid one is
   *   corruption (docs/decisions.md §1): the file is left in place and the caller rolls a new segment.
   * A first record whose offset differs from the file name is corruption (docs/decisions.md §11).
   */
  static async open(
    fs: FileSystem,
    options: {
      dir: string;
      baseOffset: number;
      active: boolean;
      nowMs: number;
      logger: Logger;
      partition: string;
      /**
       * Check only (`es-broker check`): take every decision but change no file — a torn tail is
       * reported, not cut; an index is reported, not rewritten. The segment is for inspection, not appends.
       */
      inspectOnly?: boolean;
    },
  ): Promise<Segment> {
    const { dir, baseOffset, active, logger } = options;
    const inspectOnly = options.inspectOnly === true;
    const logPath = joinPath(dir, logFileName(baseOffset));
    const indexPath = joinPath(dir, indexFileName(baseOffset));
    const log = await fs.open(logPath, { write: active && !inspectOnly });
    try {
      const logSize = await log.size();
      let stored: OffsetIndex | null = null;
      let storedBytes: Uint8Array | null = null;
      let indexProblem = "";
      const indexStat = await fs.stat(indexPath);
      if (indexStat === null) {
        indexProblem = "index file is missing";
      } else if (
        indexStat.size >
        (Math.floor(logSize / indexIntervalBytes) + 2) * indexEntryBytes
      ) {
        indexProblem = `index is ${indexStat.size} bytes, more than a ${logSize}-byte log can need`;
      } else {
        const indexFile = await fs.open(indexPath);
        try {
          const bytes = new Uint8Array(indexStat.size);
          const got = await indexFile.read(bytes, 0);
          storedBytes = bytes.subarray(0, got);
          const decoded = OffsetIndex.decode(storedBytes, logSize);
          if ("index" in decoded) stored = decoded.index;
          // The active segment writes its index entries a few KiB at a time: an empty index file
          // is what a crash before the first of those writes leaves (the full scan rebuilds it).
          else if (active && storedBytes.length === 0) stored = new OffsetIndex();
          else indexProblem = decoded.problem;
        } finally {
          await indexFile.close();
        }
      }

      const segment = new Segment({
        fs,
        dir,
        baseOffset,
        log,
        indexFile: null,
        index: stored ?? new OffsetIndex(),
        createdMs: options.nowMs,
      });
      segment.sizeBytes = logSize;
      segment.readableEndBytes = logSize;
      segment.#fileEndBytes = logSize;
      segment.#storedIndexSnapshot = storedBytes;

      if (!active && stored !== null && logSize > 0) {
        if (await segment.#fastCheck(stored, logSize)) {
          segment.recovery = "trusted";
          return segment;
        }
        indexProblem = "records after the last index entry do not decode to the end of the file";
      }
      await segment.#fullScan({
        active,
        logger,
        partition: options.partition,
        indexProblem,
        inspectOnly,
      });
      return segment;
    } catch (err) {
      await log.close().catch(() => {});
      throw err;
    }
  }

  /** The sealed-segment check that avoids a full read. */
  async #fastCheck(index: OffsetIndex, logSize: number): Promise<boolean> {
    // The first record must be valid and carry the offset in the file name. One window is read:
    // a first record larger than it (Cut) is left to the full scan.
    const head = new RecordScanner(this.#log, { end: logSize, windowBytes: readWindowBytes });
    await head.fill(0);
    if (head.decode(0) !== ScanStatus.Ok || head.cursor.offset !== this.baseOffset) return false;
    const createdMs = head.cursor.timestampMs;
    const lastPos = index.lastPosition;
    const lastRel = index.lastRelativeOffset;
    let firstSeen = false;
    let ok = true;
    const tail = await scanRecords(
      this.#log,
      { start: lastPos, end: logSize, minOffset: this.baseOffset + lastRel },
      (offset) => {
        if (!firstSeen) {
          firstSeen = true;
          if (offset !== this.baseOffset + lastRel) ok = false;
        }
      },
    );
    if (!ok || tail.stop !== DecodeStatus.Ok || tail.endPosition !== logSize || tail.lastOffset < 0)
      return false;
    this.nextOffset = tail.lastOffset + 1;
    this.maxTimestampMs = tail.maxTimestampMs;
    this.createdMs = createdMs;
    return true;
  }

  /** Scans the whole log, rebuilding the index; handles torn tails and corruption. */
  async #fullScan(options: {
    active: boolean;
    logger: Logger;
    partition: string;
    indexProblem: string;
    inspectOnly: boolean;
  }): Promise<void> {
    const { active, logger, partition, inspectOnly } = options;
    this.indexProblem = options.indexProblem;
    const rebuilt = new OffsetIndex();
    let lastIndexed = -1;
    const scan = await scanRecords(
      this.#log,
      { start: 0, end: this.sizeBytes, minOffset: this.baseOffset },
      (offset, position) => {
        if (rebuilt.wants(position, lastIndexed)) {
          rebuilt.push(offset - this.baseOffset, position);
          lastIndexed = position;
        }
      },
    );
    if (!active) rebuilt.trim();
    this.#index = rebuilt;
    this.maxTimestampMs = scan.maxTimestampMs;
    if (scan.firstTimestampMs >= 0) this.createdMs = scan.firstTimestampMs;
    let firstOffsetWrong = false;
    if (scan.firstOffset >= 0 && scan.firstOffset !== this.baseOffset) {
      // docs/decisions.md §11: a first record whose offset differs from the file name is corrupt.
      firstOffsetWrong = true;
    }
    if (firstOffsetWrong) {
      this.#index = new OffsetIndex();
      this.#markCorrupt(
        0,
        `first record has offset ${scan.firstOffset}, but the file name says ${this.baseOffset}`,
        scan.lastOffset,
        logger,
        partition,
      );
      return;
    }
    this.nextOffset = scan.lastOffset >= 0 ? scan.lastOffset + 1 : this.baseOffset;

    if (
      scan.endPosition < this.sizeBytes &&
      (await isZeroRange(this.#log, scan.endPosition, this.sizeBytes))
    ) {
      // Zeros written ahead of the records (segmentPreallocateBytes), not a torn write: record_len 0
      // never decodes, and zeros are all that is there. The active segment keeps them to append into;
      // a sealed one (a crash between a roll and its seal) has them cut so its size is its records'.
      const zeroBytes = this.sizeBytes - scan.endPosition;
      this.sizeBytes = scan.endPosition;
      if (!active && !inspectOnly) await this.#cutFile(scan.endPosition, logger, partition);
      logger.log("debug", inspectOnly ? "check.preallocated_tail" : "recovery.preallocated_tail", {
        partition,
        segment: this.logPath,
        position: scan.endPosition,
        zero_bytes: zeroBytes,
      });
    }
    if (scan.endPosition < this.sizeBytes) {
      const after = await findValidAfter(this.#log, {
        from: scan.endPosition,
        end: this.sizeBytes,
        minOffset: this.nextOffset,
      });
      if (active && after.firstValidPosition < 0) {
        // A torn tail: bytes that never decode up to the end of the file. Never acknowledged.
        const cutBytes = this.sizeBytes - scan.endPosition;
        if (!inspectOnly) {
          await this.#log.truncate(scan.endPosition);
          await this.#log.sync();
        }
        logger.log("warn", inspectOnly ? "check.torn_tail" : "recovery.torn_tail_cut", {
          partition,
          segment: this.logPath,
          position: scan.endPosition,
          cut_bytes: cutBytes,
          reason: scan.reason,
        });
        this.sizeBytes = scan.endPosition;
        this.readableEndBytes = scan.endPosition;
        if (!inspectOnly) this.#fileEndBytes = scan.endPosition;
        this.recovery = "torn_tail_cut";
        if (!inspectOnly) await this.#rewriteIndexFile(active);
        return;
      }
      this.#markCorrupt(scan.endPosition, scan.reason, after.highestOffset, logger, partition);
      return;
    }
    this.readableEndBytes = this.sizeBytes;
    // A sealed segment's stored index must equal the rebuilt one. An active segment's may lag its
    // records (entries are written a few KiB at a time): a prefix of the rebuilt one is kept and
    // appended to.
    const storedPrefix = options.indexProblem === "" ? this.#storedPrefixEntries(rebuilt) : -1;
    const keep = active ? storedPrefix >= 0 : storedPrefix === rebuilt.count;
    if (!keep) {
      if (options.indexProblem) {
        logger.log("warn", inspectOnly ? "check.index_invalid" : "recovery.index_rebuilt", {
          partition,
          segment: this.indexPath,
          reason: options.indexProblem,
        });
      }
      if (!inspectOnly) await this.#rewriteIndexFile(active);
      this.recovery = options.indexProblem ? "index_rebuilt" : "scanned";
      return;
    }
    this.recovery = "scanned";
    if (active && !inspectOnly) {
      this.#indexFile = await this.#fs.open(this.indexPath, { write: true });
      this.#indexOnDiskEntries = storedPrefix;
    }
  }

  #storedIndexSnapshot: Uint8Array | null = null;

  /**
   * Entries of the index stored at open if it is a prefix of `rebuilt` (or equal to it), else −1
   * (also without a stored index: rewrite to be safe).
   */
  #storedPrefixEntries(rebuilt: OffsetIndex): number {
    const snap = this.#storedIndexSnapshot;
    if (snap === null) return -1;
    const enc = rebuilt.encode();
    if (snap.length > enc.length) return -1;
    for (let i = 0; i < snap.length; i++) if (enc[i] !== snap[i]) return -1;
    return snap.length / indexEntryBytes;
  }

  #markCorrupt(
    position: number,
    reason: string,
    highestSkippedOffset: number,
    logger: Logger,
    partition: string,
    event = "recovery.corrupt_segment",
  ): void {
    this.corruption = { position, reason, highestSkippedOffset };
    this.readableEndBytes = position;
    this.recovery = "corrupt";
    if (highestSkippedOffset >= this.nextOffset) this.nextOffset = highestSkippedOffset + 1;
    logger.log("error", event, {
      partition,
      segment: this.logPath,
      position,
      reason,
      size_bytes: this.sizeBytes,
      highest_skipped_offset: highestSkippedOffset,
    });
  }

  /**
   * Cuts the zeros off a sealed segment's log file (opened read-only) at `length` and fsyncs the
   * cut. Best effort, like the cut at a seal: the zeros are free space past every record (reads,
   * scans and the cold tier's copy stop at `sizeBytes`), so a failure is logged and the segment
   * serves its records all the same; the next start tries again.
   */
  async #cutFile(length: number, logger: Logger, partition: string): Promise<void> {
    try {
      const file = await this.#fs.open(this.logPath, { write: true });
      try {
        await file.truncate(length);
        await file.sync();
      } finally {
        await file.close().catch(() => {});
      }
      this.#fileEndBytes = length;
    } catch (err) {
      logger.log("warn", "recovery.preallocated_cut_failed", {
        partition,
        segment: this.logPath,
        position: length,
        error: errorMessage(err),
      });
    }
  }

  /** Rewrites the index file from memory and fsyncs it; keeps it open for appends if active. */
  async #rewriteIndexFile(active: boolean): Promise<void> {
    const file = await this.#fs.open(this.indexPath, { create: true });
    try {
      await file.truncate(0);
      const bytes = this.#index.encode();
      if (bytes.length > 0) await file.write(bytes, 0);
      await file.sync();
    } catch (err) {
      await file.close().catch(() => {});
      throw err;
    }
    if (active) {
      this.#indexFile = file;
      this.#indexOnDiskEntries = this.#index.count;
    } else {
      await file.close();
    }
  }

  /**
   * Encodes batches as stored records at the end of this segment, assigning offsets from
   * `nextOffset` and deciding index entries. Nothing is written yet. The bytes go into a reused
   * buffer (`append-buffers.ts`): the caller must call `release()` on the result once
   * {@link append} has returned or the append is abandoned, and not before.
   */
  prepareAppend(batches: readonly EntryBatch[], nowMs: number): PreparedAppend {
    let total = 0;
    for (const b of batches) total += b.bytes.length + b.count * recordOverEntryBytes;
    let buffer: Uint8Array | null = acquireAppendBuffer(total);
    const logBytes = buffer.subarray(0, total);
    const release = (): void => {
      if (buffer === null) return;
      releaseAppendBuffer(buffer);
      buffer = null;
    };
    const indexEntries: number[] = [];
    let lastIndexed = this.#index.lastPosition;
    const start = this.sizeBytes;
    const base = this.baseOffset;
    const index = this.#index;
    let offset = this.nextOffset;
    let pos = 0;
    let maxTs = -1;
    const onRecord = (recordOffset: number, p: number): void => {
      const filePos = start + p;
      if (index.wants(filePos, lastIndexed)) {
        indexEntries.push(recordOffset - base, filePos);
        lastIndexed = filePos;
      }
    };
    for (const batch of batches) {
      const ts = encodeEntries(batch, logBytes, {
        outPos: pos,
        baseOffset: offset,
        nowMs,
        onRecord,
      });
      if (ts > maxTs) maxTs = ts;
      pos += batch.bytes.length + batch.count * recordOverEntryBytes;
      offset += batch.count;
    }
    assert(pos === total, "encoded exactly the planned bytes");
    return {
      logBytes,
      release,
      indexEntries,
      baseOffset: this.nextOffset,
      nextOffset: offset,
      maxTimestampMs: maxTs,
    };
  }

  /**
   * Writes a prepared append: one write to the log (docs/storage.md "Writes and durability"). Index entries
   * wait in memory until `indexPendingEntriesMax` of them are pending (then one write to the
   * index) or the segment is sealed. When the log reaches the end of the zeros written ahead, one
   * more write puts `segmentPreallocateBytes` of zeros after the records (never past
   * `preallocateLimitBytes`, the partition's `segment_bytes`), so the next fdatasyncs flush data
   * only. On a failed log write the partial bytes are cut off, and the cut fsynced, before
   * the error returns; if that fails too, throws StorageError "fenced". An index write failure is not fatal: the
   * index is derived and recovery rebuilds it, so the segment stops writing its index file. A
   * failed write of zeros is not fatal either (the zeros are free space): the segment stops writing ahead.
   * @param syncCut makes the cut durable (default: fsync the log). The partition passes one that
   *   first waits for its own fsync in flight and refuses (throws) once the partition is fenced, so
   *   the cut is never a second fsync of the file beside the partition's, nor one after a failed
   *   fsync (which would make later writes durable behind the bytes that fsync lost).
   * @throws StorageError ("write_failed" after a clean cut, "fenced" otherwise).
   */
  async append(
    prepared: PreparedAppend,
    logger: Logger,
    partition: string,
    preallocateLimitBytes = 0,
    syncCut: () => Promise<void> = () => this.#log.sync(),
  ): Promise<void> {
    assert(
      prepared.baseOffset === this.nextOffset,
      "prepared append starts at the segment's next offset",
    );
    assert(this.#indexFile !== null, "only the active segment is appended to");
    const before = this.sizeBytes;
    try {
      await this.#log.write(prepared.logBytes, before);
    } catch (err) {
      try {
        await this.#log.truncate(before);
        this.#fileEndBytes = before;
        // The cut is made durable before the error says nothing was appended. Left unsynced, a
        // crash could bring the partial bytes back (whole records of a refused request), and a
        // roll before the next fsync would seal the segment with them inside, at offsets the
        // next segment then assigns again.
        await syncCut();
      } catch (cutErr) {
        throw new StorageError(
          "fenced",
          `Cannot append to partition "${partition}": a write failed (${errorMessage(err)}) and its partial bytes could not be cut off (${errorMessage(cutErr)}), restart required`,
          { cause: err },
        );
      }
      throw new StorageError(
        "write_failed",
        `Cannot append to partition "${partition}": write failed: ${errorMessage(err)}`,
        { cause: err },
      );
    }
    const end = before + prepared.logBytes.length;
    this.sizeBytes = end;
    this.readableEndBytes = end;
    if (end > this.#fileEndBytes) this.#fileEndBytes = end;
    this.nextOffset = prepared.nextOffset;
    if (prepared.maxTimestampMs > this.maxTimestampMs)
      this.maxTimestampMs = prepared.maxTimestampMs;
    for (let i = 0; i < prepared.indexEntries.length; i += 2)
      this.#index.push(prepared.indexEntries[i], prepared.indexEntries[i + 1]);
    if (this.#index.count - this.#indexOnDiskEntries >= indexPendingEntriesMax)
      await this.#writePendingIndex(logger, partition);
    if (this.#preallocate && end === this.#fileEndBytes && end < preallocateLimitBytes)
      await this.#writeZerosAhead(
        Math.min(end + segmentPreallocateBytes, preallocateLimitBytes),
        logger,
        partition,
      );
  }

  /** Writes zeros from the end of the log file to `target` (see {@link append}). */
  async #writeZerosAhead(target: number, logger: Logger, partition: string): Promise<void> {
    const from = this.#fileEndBytes;
    zeroChunk ??= new Uint8Array(segmentPreallocateBytes);
    try {
      await this.#log.write(zeroChunk.subarray(0, target - from), from);
      this.#fileEndBytes = target;
    } catch (err) {
      // Some of the zeros may be there (a disk that filled up mid-write): they are free space, and
      // recovery reads them so, but a file at rest should hold exactly its records, and the disk
      // is full. Give them back now; if that fails too, count the file as reaching `target`, so
      // the cut at the seal or a clean close still happens (it cut nothing before: the file was
      // thought to end at the records).
      this.#preallocate = false;
      this.#fileEndBytes = await this.#log.truncate(from).then(
        () => from,
        () => target,
      );
      logger.log("warn", "segment.preallocate_failed", {
        partition,
        segment: this.logPath,
        position: from,
        error: errorMessage(err),
      });
    }
  }

  /** Writes the index entries not yet in the index file; a failure stops index writes (see {@link append}). */
  async #writePendingIndex(logger: Logger, partition: string): Promise<void> {
    if (
      !this.#indexWritable ||
      this.#indexFile === null ||
      this.#index.count === this.#indexOnDiskEntries
    )
      return;
    const bytes = this.#index.encode(this.#indexOnDiskEntries);
    try {
      await this.#indexFile.write(bytes, this.#indexOnDiskEntries * indexEntryBytes);
      this.#indexOnDiskEntries = this.#index.count;
    } catch (err) {
      this.#indexWritable = false;
      await this.#indexFile.truncate(this.#indexOnDiskEntries * indexEntryBytes).catch(() => {});
      logger.log("warn", "segment.index_write_failed", {
        partition,
        segment: this.indexPath,
        error: errorMessage(err),
        entries_in_memory: this.#index.count,
      });
    }
  }

  /**
   * After a failed fsync fenced the partition (docs/decisions.md §7): cuts the log back to `position`, the
   * end of the last good fsync, in the page cache, and forgets the records past it (`nextOffset`
   * is one past the last durable record). Linux marks dirty pages clean after a writeback error,
   * so without the cut a restart without a reboot would read the unsynced bytes back as records
   * that are not on disk, serve them, and append after a hole that a later crash reveals.
   * Best effort: a failed cut is logged (the partition stays fenced either way).
   */
  async discardUnsynced(
    options: { position: number; nextOffset: number },
    logger: Logger,
    partition: string,
  ): Promise<void> {
    const { position, nextOffset } = options;
    if (position >= this.sizeBytes) return;
    try {
      await this.#log.truncate(position);
    } catch (err) {
      logger.log("error", "segment.discard_unsynced_failed", {
        partition,
        segment: this.logPath,
        position,
        error: errorMessage(err),
      });
      return;
    }
    logger.log("warn", "segment.unsynced_discarded", {
      partition,
      segment: this.logPath,
      position,
      cut_bytes: this.sizeBytes - position,
    });
    this.sizeBytes = position;
    this.#fileEndBytes = position;
    this.readableEndBytes = Math.min(this.readableEndBytes, position);
    this.nextOffset = nextOffset;
    let keep = this.#index.count;
    while (keep > 0 && this.#index.positionAt(keep - 1) >= position) keep--;
    this.#index.truncate(keep);
  }

  /** fsyncs the log (fdatasync). A rejection is final for the partition; never retry. */
  syncLog(): Promise<void> {
    return this.#log.sync();
  }

  /**
   * Seals the segment after its data is durable: cuts the zeros written ahead of the records,
   * writes the pending index entries and fsyncs the index so the next start can trust it, and
   * closes the index handle. Failures are logged, not fatal: recovery rebuilds an index, and
   * reads a zero tail as free space and cuts it.
   */
  async seal(logger: Logger, partition: string): Promise<void> {
    await this.trimPreallocated(logger, partition); // also writes the pending index entries
    this.#index.trim();
    const file = this.#indexFile;
    this.#indexFile = null;
    if (file === null) return;
    try {
      if (this.#indexWritable) await file.sync();
    } catch (err) {
      logger.log("warn", "segment.index_sync_failed", {
        partition,
        segment: this.indexPath,
        error: errorMessage(err),
      });
    } finally {
      await file.close().catch(() => {});
    }
  }

  /**
   * Cuts the zeros written ahead of the records (when sealing, or at a clean shutdown) and
   * writes pending index entries, so the files hold exactly the records and their index. The cut
   * is not fsynced: if a crash takes it back, recovery finds the zeros, reads them as free space
   * and cuts them then. Best effort: a failure is logged. Call only when everything written is durable.
   */
  async trimPreallocated(logger: Logger, partition: string): Promise<void> {
    if (this.#indexFile !== null) await this.#writePendingIndex(logger, partition);
    if (this.#fileEndBytes <= this.sizeBytes) return;
    try {
      await this.#log.truncate(this.sizeBytes);
      this.#fileEndBytes = this.sizeBytes;
    } catch (err) {
      logger.log("warn", "segment.preallocated_cut_failed", {
        partition,
        segment: this.logPath,
        position: this.sizeBytes,
        error: errorMessage(err),
      });
    }
  }

  /**
   * Reads records with offset ≥ `offset` from the bytes below `limitBytes`: finds the index entry
   * at or before the offset and scans forward with one large positional read (a second only if a
   * record straddles the window). Returns at least one record if any is readable, then stops
   * before `maxBytes` would be exceeded, at `maxRecords`, or before the first record at or past
   * `endOffset` (the high watermark the caller answers with).
   */
  async read(options: {
    offset: number;
    maxRecords: number;
    maxBytes: number;
    limitBytes: number;
    endOffset?: number;
  }): Promise<SegmentRead> {
    const { offset, maxRecords, maxBytes } = options;
    const endOffset = options.endOffset ?? Number.POSITIVE_INFINITY;
    const limit = Math.min(options.limitBytes, this.readableEndBytes);
    const empty: SegmentRead = { bytes: new Uint8Array(0), count: 0, lastOffset: -1, status: "ok" };
    if (offset >= this.nextOffset && this.corruption === null) return empty;
    const entry = this.#index.entryAtOrBefore(Math.max(0, offset - this.baseOffset));
    let start = entry < 0 ? 0 : this.#index.positionAt(entry);
    // The record an entry points at must carry the entry's offset (docs/decisions.md §2): an entry that
    // points at the start of a later record decodes fine, and the read would skip the records
    // before it without a word.
    let expectedFirst = entry < 0 ? -1 : this.baseOffset + this.#index.relativeOffsetAt(entry);
    if (start >= limit) {
      // The index points past what may be read (it cannot: entries precede the durable end), or
      // the segment's readable part ends before the entry; fall back to the nearest safe start.
      start = 0;
      expectedFirst = -1;
    }
    if (limit <= start) return empty;
    const scanner = new RecordScanner(this.#log, {
      end: limit,
      windowBytes: Math.max(readWindowBytes, maxBytes + readWindowSlackBytes),
    });
    const cursor = scanner.cursor;
    let pos = start;
    let first = -1;
    let count = 0;
    let bytesOut = 0;
    let lastOffset = -1;
    while (pos < scanner.dataEnd) {
      let status = scanner.decode(pos);
      if (status === ScanStatus.Cut) {
        // The records collected so far are views of this window: hand them out first.
        if (count > 0) break;
        status = await scanner.readRecordAt(pos);
      }
      if (status !== ScanStatus.Ok) {
        // The records collected so far decoded and passed their CRC: hand them out, and let the
        // read that starts at the bad record deal with it, rather than losing them all.
        if (count > 0) break;
        return { ...empty, status: "bad_position" };
      }
      if (expectedFirst >= 0) {
        if (cursor.offset !== expectedFirst) return { ...empty, status: "bad_position" };
        expectedFirst = -1;
      }
      const size = cursor.sizeBytes;
      if (cursor.offset < offset) {
        pos += size;
        continue;
      }
      if (cursor.offset >= endOffset) break;
      if (count > 0 && bytesOut + size > maxBytes) break;
      if (first < 0) first = pos;
      count++;
      bytesOut += size;
      lastOffset = cursor.offset;
      pos += size;
      if (count >= maxRecords) break;
    }
    if (count === 0) return empty;
    return { bytes: scanner.bytes(first, first + bytesOut), count, lastOffset, status: "ok" };
  }

  /**
   * Rebuilds the in-memory index from a full scan of the readable part (after a read found an
   * entry pointing into the middle of a record, docs/decisions.md §2). The index file of a sealed segment
   * is rewritten too; an active one's is rewritten and kept open.
   */
  async rebuildIndex(logger: Logger, partition: string): Promise<void> {
    const rebuilt = new OffsetIndex();
    let lastIndexed = -1;
    const scan = await scanRecords(
      this.#log,
      { start: 0, end: this.readableEndBytes, minOffset: this.baseOffset },
      (offset, position) => {
        if (rebuilt.wants(position, lastIndexed)) {
          rebuilt.push(offset - this.baseOffset, position);
          lastIndexed = position;
        }
      },
    );
    if (this.#indexFile === null) rebuilt.trim();
    this.#index = rebuilt;
    logger.log("warn", "segment.index_rebuilt", {
      partition,
      segment: this.indexPath,
      reason: "an index entry pointed into the middle of a record",
    });
    if (
      scan.endPosition < this.readableEndBytes &&
      this.#indexFile === null &&
      this.corruption === null
    ) {
      // A sealed segment that passed the start-up check (first record, tail after the last index
      // entry) can still hold a corrupt record in between. A scan from the start stopping short
      // means the log is bad there, not the index: skip the rest of the segment and report it
      // (docs/storage.md "Recovery after a crash"), instead of failing every read that reaches it.
      this.#markCorrupt(
        scan.endPosition,
        scan.reason || "the log ends early",
        -1,
        logger,
        partition,
        "read.corrupt_segment",
      );
    }
    if (this.corruption !== null) return;
    const wasActive = this.#indexFile !== null;
    if (wasActive) {
      await this.#indexFile!.close().catch(() => {});
      this.#indexFile = null;
    }
    try {
      await this.#rewriteIndexFile(wasActive);
      this.#indexWritable = true;
    } catch (err) {
      this.#indexWritable = false;
      logger.log("warn", "segment.index_write_failed", {
        partition,
        segment: this.indexPath,
        error: errorMessage(err),
      });
    }
  }

  /**
   * Takes a reference for a reader; pair with {@link release}. Returns false (and takes nothing)
   * if the segment's files are already closed: the reader must look the segment list up again.
   */
  acquire(): boolean {
    if (this.#refs === 0) return false;
    this.#refs++;
    return true;
  }

  /** Drops a reference; the files close when the last is gone (after {@link close}). */
  async release(): Promise<void> {
    assert(this.#refs > 0, "release balanced with acquire");
    this.#refs--;
    if (this.#refs === 0) await this.#closeFiles();
  }

  /** Drops the partition's own reference: closes now, or when the last reader releases. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.release();
  }

  async #closeFiles(): Promise<void> {
    const index = this.#indexFile;
    this.#indexFile = null;
    await index?.close().catch(() => {});
    await this.#log.close().catch(() => {});
  }

  /** Status of the segment for reports (`GET /v1/admin/storage`, `es-broker check`). */
  describe(): {
    base_offset: number;
    next_offset: number;
    size_bytes: number;
    index_entries: number;
    recovery: SegmentRecoveryOutcome;
    corruption: SegmentCorruption | null;
  } {
    return {
      base_offset: this.baseOffset,
      next_offset: this.nextOffset,
      size_bytes: this.sizeBytes,
      index_entries: this.#index.count,
      recovery: this.recovery,
      corruption: this.corruption,
    };
  }
}
