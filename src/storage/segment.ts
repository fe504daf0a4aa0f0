/**
 * A segment: a log of records (docs/storage.md "Records") and its offset index (docs/storage.md
 * "Index and reads"), named after the offset of its first record (`segment-files.ts`). This module
 * appends to it, reads from it and counts its readers; what its files hold at open is decided by
 * `segment-recovery.ts`.
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
 *
 * Open files (docs/storage.md "Index and reads"): the active segment keeps its log and index files
 * open and its index in memory. A sealed segment given a {@link SegmentHandleCache} holds its log
 * handle and its index only while the cache keeps it: they are opened (and the index read and
 * validated again) by the next read that needs them, and closed least recently used first by the
 * cache. A segment with readers, or retained for removal ({@link Segment.retainFiles}), is pinned:
 * its files stay open, so a reader never finds them closed or replaced under it. An index that
 * the index file does not hold exactly (a corrupt segment's, or one whose write failed) stays in
 * memory.
 */
import { assert } from "../lib/assert.ts";
import {
  indexEntryBytes,
  indexPendingEntriesMax,
  readWindowBytes,
  readWindowSlackBytes,
  segmentPreallocateBytes,
  segmentPreallocateMinBytes,
} from "../lib/limits.ts";
import { joinPath, type FileHandle, type FileSystem } from "../fs/types.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger, LogFields, LogLevel } from "../lib/logger.ts";
import { acquireAppendBuffer, releaseAppendBuffer } from "./append-buffers.ts";
import { OffsetIndex } from "./offset-index.ts";
import type { CachedSegmentFiles, SegmentHandleCache } from "./segment-handles.ts";
import { indexFileName, logFileName } from "./segment-files.ts";
import { crc32IsNative } from "../lib/crc32.ts";
import {
  type AppendRecords,
  DecodeStatus,
  RecordCursor,
  copyStored,
  encodeEntries,
  isStored,
  logBytesOf,
  recordCrcsMatch,
} from "./record.ts";
import { RecordScanner, ScanStatus } from "./record-scanner.ts";
import { fetchReadWindows } from "./read-windows.ts";
import {
  markCorrupt,
  recoverSegment,
  scanAndIndex,
  writeIndexFile,
  type RecoveredSegment,
  type SegmentCleanStop,
  type SegmentCorruption,
  type SegmentRecoveryOutcome,
} from "./segment-recovery.ts";
import { StorageError } from "./errors.ts";

/**
 * What a segment is told when it is made ({@link Segment.create}, {@link Segment.open}): where its
 * events go and, for the active segment, how its appends grow the file and make a failed write's
 * cut durable.
 */
export interface SegmentContext {
  /** Receives the segment's events (`segment.*`, `recovery.*`, `read.*`). */
  logger: Logger;
  /** The partition's name ("topic/partition"), in messages and events. */
  partition: string;
  /**
   * How far zeros may be written ahead of the records (bytes of log file): the partition's
   * `segment_bytes`, read at each append so that a config change applies at once. Default: 0,
   * nothing is written ahead.
   */
  preallocateLimitBytes?: () => number;
  /**
   * Runs `sync`, the fsync that makes a failed write's cut durable (see {@link Segment.append}).
   * The partition runs it as one of its own fsyncs (`group-commit.ts`): after the one in flight,
   * and never once a failed fsync fenced the partition (it throws then). Default: runs it at once.
   */
  syncCut?: (sync: () => Promise<void>) => Promise<void>;
  /**
   * The broker's cache of sealed segments' open files (`segment-handles.ts`). Without one, a
   * sealed segment keeps its log open and its index in memory until it is closed.
   */
  handles?: SegmentHandleCache | null;
}

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
  /**
   * The read window `bytes` views, taken from `fetchReadWindows` (`read-windows.ts`): its holder
   * may give it back there once nothing reads `bytes` any more. Absent when no record came.
   */
  window?: Uint8Array;
  /** Offset of the last record returned, or −1 if none. */
  lastOffset: number;
  /**
   * "ok": records returned or the readable part holds none at/after the offset;
   * "bad_position": decoding failed where the index said a record starts (docs/decisions.md §2).
   */
  status: "ok" | "bad_position";
}

/** `segmentPreallocateBytes` of zeros, the source of every write ahead (never written to). */
let zeroChunk: Uint8Array | null = null;

/** One segment of a partition. See the module comment for durability and concurrency. */
export class Segment implements CachedSegmentFiles {
  /** Offset of the first record (from the file name). */
  readonly baseOffset: number;
  /** The partition directory (one string shared by its segments). */
  readonly #dir: string;
  /**
   * Bytes of log written (including bytes not yet fsynced); the file may be longer (zeros written
   * ahead).
   */
  sizeBytes = 0;
  /** One past the offset of the last record (baseOffset when empty). */
  nextOffset: number;
  /**
   * Bytes from the start that hold valid records; less than sizeBytes only for a corrupt segment.
   */
  readableEndBytes = 0;
  /** Set when recovery found a corrupt record: the rest of the segment is skipped. */
  corruption: SegmentCorruption | null = null;
  /** Largest record timestamp seen (ms), or −1 when unknown. */
  maxTimestampMs = -1;
  /** When the segment started, for `segment_ms` rolls (ms since the epoch). */
  createdMs: number;
  /** What recovery decided, for reports. */
  recovery: SegmentRecoveryOutcome = "scanned";
  /**
   * Why the stored index was not trusted ("" if it was, or the segment was trusted by the fast
   * path).
   */
  indexProblem = "";

  #fs: FileSystem;
  #context: Required<SegmentContext>;
  /** The log's handle; null while a sealed segment's files are closed by the cache. */
  #log: FileHandle | null;
  #indexFile: FileHandle | null;
  /** The index in memory; null while a sealed segment's files are closed by the cache. */
  #index: OffsetIndex | null;
  /** Entries of the index, and its last one, kept while the index is out of memory. */
  #indexCount = 0;
  #indexLastRelativeOffset = -1;
  #indexLastPosition = -1;
  /**
   * True when the index file holds exactly the index in memory (validated or written and fsynced):
   * only then may the index leave memory, to be read back from the file.
   */
  #indexFileExact = false;
  /** Sealed (not appended to any more): its files may be closed by the cache. */
  #sealed = false;
  /** Retained for removal: the files stay open until the segment closes (see retainFiles). */
  #retained = false;
  /** The open of the files in progress (see #openFiles). */
  #opening: Promise<FileHandle> | null = null;
  #indexOnDiskEntries: number;
  #indexWritable = true;
  /**
   * Length of the log file: `sizeBytes` plus the zeros written ahead of it
   * (segmentPreallocateBytes).
   */
  #fileEndBytes = 0;
  /** False after a write of zeros failed: the segment stops writing ahead. */
  #preallocate = true;
  #refs = 1;
  #closed = false;

  private constructor(init: {
    fs: FileSystem;
    context: Required<SegmentContext>;
    dir: string;
    baseOffset: number;
    log: FileHandle;
    state: RecoveredSegment;
  }) {
    const { state } = init;
    this.#fs = init.fs;
    this.#context = init.context;
    this.baseOffset = init.baseOffset;
    this.#dir = init.dir;
    this.#log = init.log;
    this.#indexFile = state.indexFile;
    this.#index = state.index;
    this.#indexFileExact = state.indexFileExact;
    this.#indexOnDiskEntries = state.indexOnDiskEntries;
    this.sizeBytes = state.sizeBytes;
    this.readableEndBytes = state.readableEndBytes;
    this.#fileEndBytes = state.fileEndBytes;
    this.nextOffset = state.nextOffset;
    this.maxTimestampMs = state.maxTimestampMs;
    this.createdMs = state.createdMs;
    this.recovery = state.recovery;
    this.indexProblem = state.indexProblem;
    this.corruption = state.corruption;
  }

  /**
   * Path of the log file. Made on use rather than kept: a broker holds every segment it retains,
   * and two paths each were a third of what a sealed segment out of the cache costs in memory.
   */
  get logPath(): string {
    return joinPath(this.#dir, logFileName(this.baseOffset));
  }

  /** Path of the index file (made on use, like {@link logPath}). */
  get indexPath(): string {
    return joinPath(this.#dir, indexFileName(this.baseOffset));
  }

  /** Logs a segment event with the partition's name. */
  #event(level: LogLevel, event: string, fields: LogFields): void {
    this.#context.logger.log(level, event, { partition: this.#context.partition, ...fields });
  }

  /** Number of index entries (in memory or, for a sealed segment out of the cache, in its file). */
  get indexEntryCount(): number {
    return this.#index?.count ?? this.#indexCount;
  }

  /** Remembers what `index` holds, to check the index file against when it is read back. */
  #noteIndex(index: OffsetIndex): void {
    this.#indexCount = index.count;
    this.#indexLastRelativeOffset = index.lastRelativeOffset;
    this.#indexLastPosition = index.lastPosition;
  }

  /**
   * The index entries, in the on-disk format (docs/storage.md "Index and reads"): the validated
   * (or rebuilt) index, never the file's bytes, which may hold a torn or zero tail. The cold tier
   * uploads this as a segment's `.index` object. Reads the index back if the cache dropped it.
   * @throws FsError if the segment's files cannot be opened; StorageError "closed" after close.
   */
  async encodedIndex(): Promise<Uint8Array> {
    if (!this.acquire())
      throw new StorageError("closed", `Cannot read segment ${this.logPath}: it is closed`);
    try {
      await this.#openFiles();
      return this.#index!.encode();
    } finally {
      await this.release();
    }
  }

  /** True while the files must stay open: readers hold the segment, or it is retained. */
  get pinned(): boolean {
    return (
      this.#refs > (this.#closed ? 0 : 1) ||
      this.#retained ||
      this.#opening !== null ||
      !this.#sealed
    );
  }

  /**
   * Called by the cache only, when unpinned: closes the log handle and drops the index from
   * memory if its file holds it exactly.
   */
  evict(): void {
    if (this.pinned) return;
    const log = this.#log;
    this.#log = null;
    if (this.#indexFileExact && this.#index !== null) {
      this.#noteIndex(this.#index);
      this.#index = null;
    }
    void log?.close().catch(() => {});
  }

  /** Marks a sealed segment as the most recently used in the cache; returns `log`. */
  #touch(log: FileHandle): FileHandle {
    if (this.#sealed) this.#context.handles?.touched(this);
    return log;
  }

  /**
   * The log's handle, opened (and the index read back) if the cache closed them. Call while the
   * segment is acquired (a reader's reference pins the files until it releases them).
   * @throws FsError if the files cannot be opened or read.
   */
  async #openFiles(): Promise<FileHandle> {
    const handles = this.#context.handles;
    if (this.#log !== null && this.#index !== null) {
      if (this.#sealed) handles?.touched(this);
      return this.#log;
    }
    if (this.#opening !== null) return this.#opening;
    const opening = (async () => {
      const log = this.#log ?? (await this.#fs.open(this.logPath));
      this.#log = log;
      if (this.#index === null) this.#index = await this.#loadIndex(log);
      return log;
    })();
    this.#opening = opening;
    try {
      return await opening;
    } finally {
      this.#opening = null;
      if (this.#log !== null && this.#sealed) handles?.opened(this);
    }
  }

  /**
   * Reads a sealed segment's index back from its file (docs/decisions.md §2: validated on load),
   * and checks it is the index that was dropped; if not (the file changed or went missing), the
   * index is rebuilt from the log and the file rewritten, as a read that finds a bad entry does.
   */
  async #loadIndex(log: FileHandle): Promise<OffsetIndex> {
    let problem = "";
    try {
      const file = await this.#fs.open(this.indexPath);
      try {
        const bytes = new Uint8Array(this.#indexCount * indexEntryBytes);
        const size = await file.size();
        const got = size === bytes.length ? await file.read(bytes, 0) : -1;
        if (got !== bytes.length) problem = `index is ${size} bytes, not ${bytes.length}`;
        else {
          const decoded = OffsetIndex.decode(bytes, this.sizeBytes);
          if (!("index" in decoded)) problem = decoded.problem;
          else if (
            decoded.index.lastPosition !== this.#indexLastPosition ||
            decoded.index.lastRelativeOffset !== this.#indexLastRelativeOffset
          )
            problem = "index no longer matches the one validated at start";
          else return decoded.index;
        }
      } finally {
        await file.close().catch(() => {});
      }
    } catch (err) {
      problem = `index could not be read: ${errorMessage(err)}`;
    }
    const { index } = await scanAndIndex(log, {
      end: this.readableEndBytes,
      baseOffset: this.baseOffset,
    });
    index.trim();
    this.#event("warn", "segment.index_rebuilt", { segment: this.indexPath, reason: problem });
    this.#indexFileExact = false;
    if (this.corruption === null) {
      try {
        await writeIndexFile(this.#fs, this.indexPath, index, { keepOpen: false });
        this.#indexFileExact = true;
      } catch (err) {
        this.#event("warn", "segment.index_write_failed", {
          segment: this.indexPath,
          error: errorMessage(err),
        });
      }
    }
    this.#noteIndex(index);
    return index;
  }

  /**
   * Undoes {@link retainFiles} for a segment that stays in use (a compaction pass that ended before
   * its swap): the cache may close its files again.
   */
  unretainFiles(): void {
    if (!this.#retained) return;
    this.#retained = false;
    const handles = this.#context.handles;
    if (handles && handles.size > handles.capacity) handles.trim();
  }

  /**
   * Keeps the files open until the segment is closed and its last reader has let go, whatever the
   * cache's bound: called by retention and compaction before they unlink or rename over the
   * segment's files, so that readers already using it keep reading the same bytes
   * (docs/storage.md "Index and reads"). Opens them again first if the cache had closed them.
   * @throws FsError if they cannot be opened.
   */
  async retainFiles(): Promise<void> {
    if (this.#retained || !this.acquire()) return;
    try {
      this.#retained = true;
      await this.#openFiles();
    } catch (err) {
      this.#retained = false;
      throw err;
    } finally {
      await this.release();
    }
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
    options: SegmentContext & { dir: string; baseOffset: number; nowMs: number },
  ): Promise<Segment> {
    const { dir, baseOffset, nowMs } = options;
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
    return new Segment({
      fs,
      context: contextOf(options),
      dir,
      baseOffset,
      log,
      state: {
        index: new OffsetIndex(),
        indexFile,
        indexOnDiskEntries: 0,
        indexFileExact: false,
        sizeBytes: 0,
        readableEndBytes: 0,
        fileEndBytes: 0,
        nextOffset: baseOffset,
        maxTimestampMs: -1,
        createdMs: nowMs,
        recovery: "scanned",
        indexProblem: "",
        corruption: null,
      },
    });
  }

  /**
   * Opens an existing segment and recovers it (docs/storage.md "Recovery after a crash"): what its
   * files hold is decided from the bytes by `segment-recovery.ts` (trusted, scanned, index rebuilt,
   * torn tail cut, or corrupt: see the table there), and repaired unless `inspectOnly`. A corrupt
   * active segment is left in place; the caller rolls a new one after it (docs/decisions.md §1).
   * @throws FsError if a file cannot be opened or read, or a repair fails.
   */
  static async open(
    fs: FileSystem,
    options: SegmentContext & {
      dir: string;
      baseOffset: number;
      active: boolean;
      nowMs: number;
      /**
       * Check only (`es-broker check`): take every decision but change no file — a torn tail is
       * reported, not cut; an index is reported, not rewritten. The segment is for inspection,
       * not appends.
       */
      inspectOnly?: boolean;
      /** Where this active segment ended at a clean stop (`clean-stop.ts`), if it did. */
      cleanStop?: SegmentCleanStop;
    },
  ): Promise<Segment> {
    const { dir, baseOffset, active } = options;
    const inspectOnly = options.inspectOnly === true;
    const logPath = joinPath(dir, logFileName(baseOffset));
    const indexPath = joinPath(dir, indexFileName(baseOffset));
    const log = await fs.open(logPath, { write: active && !inspectOnly });
    try {
      const state = await recoverSegment(fs, log, {
        logger: options.logger,
        partition: options.partition,
        logPath,
        indexPath,
        baseOffset,
        active,
        nowMs: options.nowMs,
        inspectOnly,
        cleanStop: options.cleanStop,
      });
      const segment = new Segment({ fs, context: contextOf(options), dir, baseOffset, log, state });
      if (!active) {
        // A sealed segment's files join the cache, which closes the least recently used ones
        // beyond its bound: a start over many segments leaves only the newest open.
        segment.#sealed = true;
        segment.#context.handles?.opened(segment);
      }
      return segment;
    } catch (err) {
      await log.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Encodes batches as stored records at the end of this segment, assigning offsets from
   * `nextOffset` and deciding index entries; stored records ({@link StoredRecords}) are copied as
   * they are, and must start at the offset they are assigned (the caller makes sure: asserted).
   * Nothing is written yet. The bytes go into a reused
   * buffer (`append-buffers.ts`): the caller must call `release()` on the result once
   * {@link append} has returned or the append is abandoned, and not before.
   */
  prepareAppend(batches: readonly AppendRecords[], nowMs: number): PreparedAppend {
    let total = 0;
    for (const b of batches) total += logBytesOf(b);
    let buffer: Uint8Array | null = acquireAppendBuffer(total);
    const logBytes = buffer.subarray(0, total);
    const release = (): void => {
      if (buffer === null) return;
      releaseAppendBuffer(buffer);
      buffer = null;
    };
    const indexEntries: number[] = [];
    const index = this.#activeIndex();
    let lastIndexed = index.lastPosition;
    const start = this.sizeBytes;
    const base = this.baseOffset;
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
      let ts: number;
      if (isStored(batch)) {
        assert(batch.baseOffset === offset, "stored records are appended at their own offsets");
        ts = copyStored(batch, logBytes, { outPos: pos, onRecord });
      } else
        ts = encodeEntries(batch, logBytes, { outPos: pos, baseOffset: offset, nowMs, onRecord });
      if (ts > maxTs) maxTs = ts;
      pos += logBytesOf(batch);
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
   * Writes a prepared append: one write to the log (docs/storage.md "Writes and durability"). Index
   * entries wait in memory until `indexPendingEntriesMax` of them are pending (then one write to
   * the index) or the segment is sealed. When the log reaches the end of the zeros written ahead,
   * one more write puts zeros after the records — as many bytes as the log holds, at least
   * `segmentPreallocateMinBytes` and at most `segmentPreallocateBytes` — (never past
   * `preallocateLimitBytes`, the partition's `segment_bytes`), so the next fdatasyncs flush data
   * only. On a failed log write the partial bytes are cut off, and the cut fsynced (through the
   * context's `syncCut`: never a second fsync of the file beside the partition's, nor one after a
   * failed fsync, which would make later writes durable behind the bytes that fsync lost) before
   * the error returns; if that fails too, throws StorageError "fenced". An index write failure is
   * not fatal: the index is derived and recovery rebuilds it, so the segment stops writing its
   * index file. A failed write of zeros is not fatal either (the zeros are free space): the segment
   * stops writing ahead.
   * @throws StorageError ("write_failed" after a clean cut, "fenced" otherwise).
   */
  async append(prepared: PreparedAppend): Promise<void> {
    const { partition, preallocateLimitBytes, syncCut } = this.#context;
    assert(
      prepared.baseOffset === this.nextOffset,
      "prepared append starts at the segment's next offset",
    );
    assert(this.#indexFile !== null, "only the active segment is appended to");
    const before = this.sizeBytes;
    const log = this.#activeLog();
    try {
      await log.write(prepared.logBytes, before);
    } catch (err) {
      try {
        await log.truncate(before);
        this.#fileEndBytes = before;
        // The cut is made durable before the error says nothing was appended. Left unsynced, a
        // crash could bring the partial bytes back (whole records of a refused request), and a
        // roll before the next fsync would seal the segment with them inside, at offsets the
        // next segment then assigns again.
        await syncCut(() => log.sync());
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
    const index = this.#activeIndex();
    for (let i = 0; i < prepared.indexEntries.length; i += 2)
      index.push(prepared.indexEntries[i], prepared.indexEntries[i + 1]);
    if (index.count - this.#indexOnDiskEntries >= indexPendingEntriesMax)
      await this.#writePendingIndex();
    const limit = preallocateLimitBytes();
    if (this.#preallocate && end === this.#fileEndBytes && end < limit)
      await this.#writeZerosAhead(
        Math.min(
          end + Math.min(segmentPreallocateBytes, Math.max(segmentPreallocateMinBytes, end)),
          limit,
        ),
      );
  }

  /** Writes zeros from the end of the log file to `target` (see {@link append}). */
  async #writeZerosAhead(target: number): Promise<void> {
    const from = this.#fileEndBytes;
    zeroChunk ??= new Uint8Array(segmentPreallocateBytes);
    try {
      await this.#activeLog().write(zeroChunk.subarray(0, target - from), from);
      this.#fileEndBytes = target;
    } catch (err) {
      // Some of the zeros may be there (a disk that filled up mid-write): they are free space, and
      // recovery reads them so, but a file at rest should hold exactly its records, and the disk
      // is full. Give them back now; if that fails too, count the file as reaching `target`, so
      // the cut at the seal or a clean close still happens (it cut nothing before: the file was
      // thought to end at the records).
      this.#preallocate = false;
      this.#fileEndBytes = await this.#activeLog()
        .truncate(from)
        .then(
          () => from,
          () => target,
        );
      this.#event("warn", "segment.preallocate_failed", {
        segment: this.logPath,
        position: from,
        error: errorMessage(err),
      });
    }
  }

  /**
   * Writes the index entries not yet in the index file; a failure stops index writes (see {@link
   * append}).
   */
  async #writePendingIndex(): Promise<void> {
    const index = this.#index;
    if (
      !this.#indexWritable ||
      this.#indexFile === null ||
      index === null ||
      index.count === this.#indexOnDiskEntries
    )
      return;
    const bytes = index.encode(this.#indexOnDiskEntries);
    try {
      await this.#indexFile.write(bytes, this.#indexOnDiskEntries * indexEntryBytes);
      this.#indexOnDiskEntries = index.count;
    } catch (err) {
      this.#indexWritable = false;
      await this.#indexFile.truncate(this.#indexOnDiskEntries * indexEntryBytes).catch(() => {});
      this.#event("warn", "segment.index_write_failed", {
        segment: this.indexPath,
        error: errorMessage(err),
        entries_in_memory: index.count,
      });
    }
  }

  /**
   * After a failed fsync fenced the partition (docs/decisions.md §7): cuts the log back to
   * `position`, the end of the last good fsync, in the page cache, and forgets the records past it
   * (`nextOffset` is one past the last durable record). Linux marks dirty pages clean after a
   * writeback error, so without the cut a restart without a reboot would read the unsynced bytes
   * back as records that are not on disk, serve them, and append after a hole that a later crash
   * reveals. Best effort: a failed cut is logged (the partition stays fenced either way).
   */
  async discardUnsynced(options: { position: number; nextOffset: number }): Promise<void> {
    const { position, nextOffset } = options;
    if (position >= this.sizeBytes) return;
    try {
      await this.#activeLog().truncate(position);
    } catch (err) {
      this.#event("error", "segment.discard_unsynced_failed", {
        segment: this.logPath,
        position,
        error: errorMessage(err),
      });
      return;
    }
    this.#event("warn", "segment.unsynced_discarded", {
      segment: this.logPath,
      position,
      cut_bytes: this.sizeBytes - position,
    });
    this.sizeBytes = position;
    this.#fileEndBytes = position;
    this.readableEndBytes = Math.min(this.readableEndBytes, position);
    this.nextOffset = nextOffset;
    const index = this.#activeIndex();
    let keep = index.count;
    while (keep > 0 && index.positionAt(keep - 1) >= position) keep--;
    index.truncate(keep);
  }

  /**
   * Cuts the records at `offset` and after (leader-epoch truncation, cluster mode;
   * docs/cluster.md "Leader-epoch truncation"): the log is cut where the first such record starts
   * (or where a record fails its check) and the cut fsynced, then index entries at or after the cut
   * are dropped from memory and from the index file (rewritten for a sealed segment). Call under
   * the partition's write lock with nothing unsynced. `nextOffset` becomes `offset` when the cut
   * removed anything.
   * @throws FsError if the cut or its fsync fails (the caller fences the partition).
   */
  async truncateTo(offset: number): Promise<void> {
    if (!this.acquire())
      throw new StorageError("closed", `Cannot truncate segment ${this.logPath}: it is closed`);
    try {
      await this.#truncateOpen(offset, await this.#openFiles());
    } finally {
      await this.release();
    }
  }

  /** {@link truncateTo} with the files open and pinned by the caller's reference. */
  async #truncateOpen(offset: number, log: FileHandle): Promise<void> {
    const index = this.#index!;
    const position = await this.#positionOf(offset, log, index);
    if (position >= this.sizeBytes) return;
    if (this.#sealed) {
      // A sealed segment's log is open for reading only: the cut goes through a handle of its own.
      const file = await this.#fs.open(this.logPath, { write: true });
      try {
        await file.truncate(position);
        await file.sync();
      } finally {
        await file.close().catch(() => {});
      }
    } else {
      await log.truncate(position);
      await log.sync();
    }
    this.sizeBytes = position;
    this.#fileEndBytes = position;
    this.readableEndBytes = Math.min(this.readableEndBytes, position);
    this.nextOffset = Math.max(this.baseOffset, Math.min(this.nextOffset, offset));
    let keep = index.count;
    while (keep > 0 && index.positionAt(keep - 1) >= position) keep--;
    index.truncate(keep);
    if (this.#indexFile !== null) {
      this.#indexOnDiskEntries = Math.min(this.#indexOnDiskEntries, keep);
      await this.#indexFile
        .truncate(this.#indexOnDiskEntries * indexEntryBytes)
        .catch(() => (this.#indexWritable = false));
    } else {
      // A sealed segment's index is trusted at the next start: it must not point past the cut.
      // Until the file is rewritten the cache must keep the index in memory.
      this.#indexFileExact = false;
      await writeIndexFile(this.#fs, this.indexPath, index, { keepOpen: false }).then(
        () => (this.#indexFileExact = this.corruption === null),
        (err: unknown) =>
          this.#event("warn", "segment.index_write_failed", {
            segment: this.indexPath,
            error: errorMessage(err),
          }),
      );
    }
  }

  /** File position of the first record at or after `offset` (or of the first bad record; else the readable end). */
  async #positionOf(offset: number, log: FileHandle, index: OffsetIndex): Promise<number> {
    const end = this.readableEndBytes;
    if (offset <= this.baseOffset) return 0;
    if (offset >= this.nextOffset) return this.sizeBytes;
    const entry = index.entryAtOrBefore(offset - this.baseOffset);
    let pos = entry < 0 ? 0 : index.positionAt(entry);
    if (pos >= end) pos = 0;
    const scanner = new RecordScanner(log, { end, windowBytes: readWindowBytes });
    while (pos < scanner.dataEnd) {
      let status = scanner.decode(pos);
      if (status === ScanStatus.Cut) status = await scanner.readRecordAt(pos);
      if (status !== ScanStatus.Ok) return pos;
      if (scanner.cursor.offset >= offset) return pos;
      pos += scanner.cursor.sizeBytes;
    }
    return Math.min(pos, end);
  }

  /** fsyncs the log (fdatasync). A rejection is final for the partition; never retry. */
  syncLog(): Promise<void> {
    return this.#activeLog().sync();
  }

  /** The log's handle of a segment that is not sealed (always open). */
  #activeLog(): FileHandle {
    assert(this.#log !== null, "an unsealed segment keeps its log open");
    return this.#log;
  }

  /** The index of a segment that is not sealed (always in memory). */
  #activeIndex(): OffsetIndex {
    assert(this.#index !== null, "an unsealed segment keeps its index in memory");
    return this.#index;
  }

  /**
   * Seals the segment after its data is durable: cuts the zeros written ahead of the records,
   * writes the pending index entries and fsyncs the index so the next start can trust it, and
   * closes the index handle. Failures are logged, not fatal: recovery rebuilds an index, and
   * reads a zero tail as free space and cuts it.
   */
  async seal(): Promise<void> {
    await this.trimPreallocated(); // also writes the pending index entries
    const index = this.#activeIndex();
    index.trim();
    const file = this.#indexFile;
    this.#indexFile = null;
    let exact = false;
    if (file !== null) {
      try {
        if (this.#indexWritable) {
          await file.sync();
          exact = this.#indexOnDiskEntries === index.count;
        }
      } catch (err) {
        this.#event("warn", "segment.index_sync_failed", {
          segment: this.indexPath,
          error: errorMessage(err),
        });
      } finally {
        await file.close().catch(() => {});
      }
    }
    // From here the cache may close the log and drop the index (read back from the file only if
    // the file holds it exactly).
    this.#indexFileExact = exact && this.corruption === null;
    this.#sealed = true;
    if (!this.#closed) this.#context.handles?.opened(this);
  }

  /**
   * Cuts the zeros written ahead of the records (when sealing, or at a clean shutdown) and
   * writes pending index entries, so the files hold exactly the records and their index. The cut
   * is not fsynced: if a crash takes it back, recovery finds the zeros, reads them as free space
   * and cuts them then. Best effort: a failure is logged. Call only when everything written is
   * durable.
   */
  async trimPreallocated(): Promise<void> {
    if (this.#indexFile !== null) await this.#writePendingIndex();
    if (this.#fileEndBytes <= this.sizeBytes) return;
    try {
      await this.#activeLog().truncate(this.sizeBytes);
      this.#fileEndBytes = this.sizeBytes;
    } catch (err) {
      this.#event("warn", "segment.preallocated_cut_failed", {
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
    const log =
      this.#log !== null && this.#index !== null ? this.#touch(this.#log) : await this.#openFiles();
    const index = this.#index!;
    const entry = index.entryAtOrBefore(Math.max(0, offset - this.baseOffset));
    let start = entry < 0 ? 0 : index.positionAt(entry);
    // The record an entry points at must carry the entry's offset (docs/decisions.md §2): an entry
    // that points at the start of a later record decodes fine, and the read would skip the records
    // before it without a word.
    let expectedFirst = entry < 0 ? -1 : this.baseOffset + index.relativeOffsetAt(entry);
    if (start >= limit) {
      // The index points past what may be read (it cannot: entries precede the durable end), or
      // the segment's readable part ends before the entry; fall back to the nearest safe start.
      start = 0;
      expectedFirst = -1;
    }
    if (limit <= start) return empty;
    const scanner = new RecordScanner(log, {
      end: limit,
      windowBytes: Math.max(readWindowBytes, maxBytes + readWindowSlackBytes),
      windows: fetchReadWindows,
    });
    // The window goes back at once unless records are handed out as views of it.
    let handedOut = false;
    try {
      const read = await this.#readWindow(scanner, {
        offset,
        maxRecords,
        maxBytes,
        endOffset,
        start,
        expectedFirst,
      });
      handedOut = read.window !== undefined;
      return read;
    } finally {
      const window = scanner.window;
      if (!handedOut && window !== null) fetchReadWindows.give(window);
    }
  }

  /** The scan of {@link read} over `scanner`'s windows, from file position `start`. */
  async #readWindow(
    scanner: RecordScanner,
    bounds: {
      offset: number;
      maxRecords: number;
      maxBytes: number;
      endOffset: number;
      start: number;
      expectedFirst: number;
    },
  ): Promise<SegmentRead> {
    const { offset, maxRecords, maxBytes, endOffset, start } = bounds;
    let expectedFirst = bounds.expectedFirst;
    const empty: SegmentRead = { bytes: new Uint8Array(0), count: 0, lastOffset: -1, status: "ok" };
    const cursor = scanner.cursor;
    // With a native CRC-32, the CRCs of the records handed out are checked together after the
    // scan, one call over their bytes (recordCrcsMatch), instead of one per record.
    const crcAfter = crc32IsNative();
    cursor.checkCrc = !crcAfter;
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
    const bytes = scanner.bytes(first, first + bytesOut);
    const window = scanner.window!;
    if (crcAfter && !recordCrcsMatch(bytes, 0, bytes.length)) {
      // A record handed out is damaged: hand out those before it, as checking one by one does.
      const good = checkedPrefix(bytes);
      if (good.count === 0) return { ...empty, status: "bad_position" };
      return { ...good, status: "ok", window };
    }
    return { bytes, count, lastOffset, status: "ok", window };
  }

  /**
   * Rebuilds the in-memory index from a full scan of the readable part (after a read found an entry
   * pointing into the middle of a record, docs/decisions.md §2). The index file of a sealed segment
   * is rewritten too; an active one's is rewritten and kept open.
   */
  async rebuildIndex(): Promise<void> {
    const log = await this.#openFiles();
    const { index: rebuilt, scan } = await scanAndIndex(log, {
      end: this.readableEndBytes,
      baseOffset: this.baseOffset,
    });
    if (this.#indexFile === null) rebuilt.trim();
    this.#index = rebuilt;
    this.#indexFileExact = false;
    this.#event("warn", "segment.index_rebuilt", {
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
      markCorrupt(
        this,
        { ...this.#context, logPath: this.logPath, indexPath: this.indexPath },
        {
          position: scan.endPosition,
          reason: scan.reason || "the log ends early",
          highestSkippedOffset: -1,
        },
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
      this.#indexFile = await writeIndexFile(this.#fs, this.indexPath, rebuilt, {
        keepOpen: wasActive,
      });
      this.#indexOnDiskEntries = rebuilt.count;
      this.#indexWritable = true;
      this.#indexFileExact = this.#sealed;
    } catch (err) {
      this.#indexWritable = false;
      this.#event("warn", "segment.index_write_failed", {
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
    else if (!this.pinned) {
      // The cache may have gone past its bound while this segment was pinned.
      const handles = this.#context.handles;
      if (handles && handles.size > handles.capacity) handles.trim();
    }
  }

  /** Drops the partition's own reference: closes now, or when the last reader releases. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.release();
  }

  async #closeFiles(): Promise<void> {
    this.#context.handles?.closed(this);
    const index = this.#indexFile;
    this.#indexFile = null;
    const log = this.#log;
    this.#log = null;
    await index?.close().catch(() => {});
    await log?.close().catch(() => {});
  }

  /** Status of the segment for reports (`GET /v1/admin/storage`, `es-broker check`). */
  describe(): SegmentDescription {
    return {
      base_offset: this.baseOffset,
      next_offset: this.nextOffset,
      size_bytes: this.sizeBytes,
      index_entries: this.indexEntryCount,
      recovery: this.recovery,
      corruption:
        this.corruption === null
          ? null
          : {
              position: this.corruption.position,
              reason: this.corruption.reason,
              highest_skipped_offset: this.corruption.highestSkippedOffset,
            },
    };
  }
}

/** A segment's status as {@link Segment.describe} reports it (snake_case: it is shown as JSON). */
export interface SegmentDescription {
  base_offset: number;
  /** One past the last record. */
  next_offset: number;
  size_bytes: number;
  index_entries: number;
  /** What recovery decided at open. */
  recovery: SegmentRecoveryOutcome;
  /** Where decoding stopped short and why ({@link SegmentCorruption}, in snake_case), or null. */
  corruption: { position: number; reason: string; highest_skipped_offset: number } | null;
}

/** The context with its defaults filled in. */
function contextOf(options: SegmentContext): Required<SegmentContext> {
  return {
    logger: options.logger,
    partition: options.partition,
    preallocateLimitBytes: options.preallocateLimitBytes ?? (() => 0),
    syncCut: options.syncCut ?? ((sync) => sync()),
    handles: options.handles ?? null,
  };
}

/** The records at the start of `bytes` that pass every check, CRC included, up to the first that does not. */
function checkedPrefix(bytes: Uint8Array): {
  bytes: Uint8Array;
  count: number;
  lastOffset: number;
} {
  const cursor = new RecordCursor().reset(bytes);
  let pos = 0;
  let count = 0;
  let lastOffset = -1;
  while (pos < bytes.length && cursor.decode(pos) === DecodeStatus.Ok) {
    lastOffset = cursor.offset;
    pos += cursor.sizeBytes;
    count++;
  }
  return { bytes: bytes.subarray(0, pos), count, lastOffset };
}
