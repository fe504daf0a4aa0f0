/**
 * The cold tier (`--cold-storage-dir DIR`, docs/storage.md "Retention"): where retention moves sealed
 * segments instead of deleting them, and where fetches of those offsets are served from,
 * transparently (the partition reads it as its {@link LowerTier}).
 *
 * Layout, mirroring the data directory:
 * ```
 * <cold>/topics/<topic>/<partition>/NNNNNNNNNNNNNNNNNNNN.log      complete copies only
 * <cold>/topics/<topic>/<partition>/NNNNNNNNNNNNNNNNNNNN.index
 * <cold>/topics/<topic>/<partition>/NNNNNNNNNNNNNNNNNNNN.log.partial    a copy in progress
 * ```
 *
 * An offload ({@link ColdPartition.offload}) copies the index and then the log under `.partial`
 * names, fsyncs both, renames the index and then the log to their final names and fsyncs the
 * directory; only then may the caller delete the local copy. The final `.log` name appearing is
 * the completeness mark: a crash at any point leaves either no `.log` (the partial files are
 * removed at the next open) or a complete, durable one. Files are 0600 and directories 0700, as
 * everywhere (the FileSystem creates them so).
 *
 * Cold segments are opened lazily as read-only {@link Segment}s (their index validated or rebuilt
 * as at recovery) and kept in a small per-partition cache; a segment removed by the tier's
 * retention keeps serving readers that hold it. How long the tier keeps data is the topic's
 * `cold_retention_ms` (−1 = forever), applied by retention (`retention.ts`).
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { offsetFileStem, viewOf } from "../lib/bytes.ts";
import { coldSegmentsOpenMax } from "../lib/limits.ts";
import { partitionName } from "../lib/topic-partition.ts";
import { lastAtOrBelow } from "../lib/search.ts";
import {
  dirname,
  isFsError,
  joinPath,
  readdirIfExists,
  type FileHandle,
  type FileSystem,
} from "../fs/types.ts";
import type { LowerTier } from "./partition.ts";
import { Segment } from "./segment.ts";
import {
  indexFileName,
  isSupportedBaseOffset,
  logFileName,
  parseSegmentFileName,
} from "./segment-files.ts";
import { newestTimestampMs } from "./segment-scan.ts";
import { RecordHeader } from "./record.ts";

/** Suffix of a cold copy in progress. */
const partialSuffix = ".partial";

/** Bytes copied per read/write while offloading. */
const copyChunkBytes = 1024 * 1024;

/** The cold tier's root: hands out one {@link ColdPartition} per partition. */
export class ColdStore {
  readonly root: string;
  #fs: FileSystem;
  #clock: Clock;
  #logger: Logger;

  constructor(options: { fs: FileSystem; root: string; clock: Clock; logger: Logger }) {
    this.root = options.root;
    this.#fs = options.fs;
    this.#clock = options.clock;
    this.#logger = options.logger;
  }

  /** Directory of a topic's cold data. */
  topicDir(topic: string): string {
    return joinPath(this.root, "topics", topic);
  }

  /**
   * Opens the cold side of one partition: lists its complete segments, removes partial copies
   * (reported). A missing directory is an empty tier (it is created at the first offload).
   * @throws FsError if the directory exists but cannot be read.
   */
  async openPartition(topic: string, partition: number): Promise<ColdPartition> {
    const cold = new ColdPartition({
      fs: this.#fs,
      root: this.root,
      relativeDir: ["topics", topic, String(partition)],
      name: partitionName(topic, partition),
      clock: this.#clock,
      logger: this.#logger,
    });
    await cold.load();
    return cold;
  }

  /**
   * Removes every cold segment of a topic (topic deletion, or leftovers found when a topic of that
   * name is created). Succeeds if there is none.
   * @throws FsError.
   */
  async removeTopic(topic: string): Promise<void> {
    const dir = this.topicDir(topic);
    if (!(await exists(this.#fs, dir))) return;
    await this.#fs.removeTree(dir);
    await this.#fs.syncDir(joinPath(this.root, "topics"));
    this.#logger.log("info", "cold.topic_removed", { topic, dir });
  }
}

/** One partition's segments in the cold tier. See the module comment. */
export class ColdPartition implements LowerTier {
  readonly dir: string;
  readonly name: string;
  #fs: FileSystem;
  #clock: Clock;
  #logger: Logger;
  /** Base offsets of complete segments, ascending. */
  #bases: number[] = [];
  #sizes = new Map<number, number>();
  #newest = new Map<number, number>();
  /** Open segments, least recently used first. */
  #open = new Map<number, Promise<Segment>>();
  #dirReady = false;
  #closed = false;

  constructor(options: {
    fs: FileSystem;
    root: string;
    relativeDir: string[];
    name: string;
    clock: Clock;
    logger: Logger;
  }) {
    this.#fs = options.fs;
    this.dir = joinPath(options.root, ...options.relativeDir);
    this.name = options.name;
    this.#clock = options.clock;
    this.#logger = options.logger;
  }

  /** Reads the directory (see {@link ColdStore.openPartition}). */
  async load(): Promise<void> {
    const names = await readdirIfExists(this.#fs, this.dir);
    if (names === null) return;
    const logs = new Set<number>();
    const removed: string[] = [];
    for (const name of names) {
      if (name.endsWith(partialSuffix)) {
        await this.#fs.unlink(joinPath(this.dir, name));
        removed.push(name);
        continue;
      }
      const parsed = parseSegmentFileName(name);
      if (parsed === null || !isSupportedBaseOffset(parsed.baseOffset)) {
        this.#logger.log("warn", "cold.stray_file", {
          partition: this.name,
          file: joinPath(this.dir, name),
          reason: "not a segment file name",
        });
        continue;
      }
      if (parsed.kind === "log") logs.add(parsed.baseOffset);
    }
    if (removed.length > 0) {
      await this.#fs.syncDir(this.dir);
      this.#logger.log("warn", "cold.partial_copies_removed", {
        partition: this.name,
        dir: this.dir,
        files: removed,
      });
    }
    this.#bases = [...logs].sort((a, b) => a - b);
    for (const base of this.#bases)
      this.#sizes.set(
        base,
        (await this.#fs.stat(joinPath(this.dir, logFileName(base))))?.size ?? 0,
      );
    this.#dirReady = this.#bases.length > 0;
  }

  /** Base offset of the first cold segment, or −1. */
  get firstOffset(): number {
    return this.#bases[0] ?? -1;
  }

  /** Base offsets of the cold segments, ascending (a copy). */
  get baseOffsets(): number[] {
    return [...this.#bases];
  }

  /** Bytes of all cold logs. */
  get sizeBytes(): number {
    let total = 0;
    for (const size of this.#sizes.values()) total += size;
    return total;
  }

  /** Size in bytes of one cold segment's log (0 if unknown). */
  sizeOf(baseOffset: number): number {
    return this.#sizes.get(baseOffset) ?? 0;
  }

  /** Creates the partition's cold directory and makes every new level durable (once). */
  async #ensureDir(): Promise<void> {
    if (this.#dirReady) return;
    // Every directory this creates is durable only once its parent is fsynced.
    const missing: string[] = [];
    for (let path = this.dir; !(await exists(this.#fs, path)); path = dirname(path)) {
      missing.push(path);
      if (dirname(path) === path) break;
    }
    if (missing.length > 0) await this.#fs.mkdir(this.dir);
    for (const path of missing.reverse()) await this.#fs.syncDir(dirname(path));
    this.#dirReady = true;
  }

  /**
   * Copies a sealed local segment (log and index) into the tier durably (see the module comment).
   * Resolves once the complete copy is durable; only then may the local copy go. Copying a segment
   * that is already there replaces it the same way.
   * @throws FsError (the partial copy is removed as far as possible; nothing local is touched).
   */
  async offload(segment: Segment): Promise<{ bytes: number }> {
    if (this.#closed)
      throw new Error(`Cannot offload to the cold tier of "${this.name}": it is closed`);
    await this.#ensureDir();
    const base = segment.baseOffset;
    const logTemp = joinPath(this.dir, logFileName(base) + partialSuffix);
    const indexTemp = joinPath(this.dir, indexFileName(base) + partialSuffix);
    try {
      const hasIndex = await exists(this.#fs, segment.indexPath);
      if (hasIndex) await copyFile(this.#fs, segment.indexPath, indexTemp, -1);
      const copied = await copyFile(this.#fs, segment.logPath, logTemp, segment.sizeBytes);
      if (hasIndex) await this.#fs.rename(indexTemp, joinPath(this.dir, indexFileName(base)));
      await this.#fs.rename(logTemp, joinPath(this.dir, logFileName(base)));
      await this.#fs.syncDir(this.dir);
      await this.#forget(base);
      this.#newest.delete(base);
      if (!this.#bases.includes(base)) {
        this.#bases.push(base);
        this.#bases.sort((a, b) => a - b);
      }
      this.#sizes.set(base, copied);
      return { bytes: copied };
    } catch (err) {
      for (const temp of [logTemp, indexTemp]) await this.#fs.unlink(temp).catch(() => {});
      throw err;
    }
  }

  /**
   * Reads records with `offset` ≤ offset < `endOffset` from the cold segments (a gap continues at
   * the next one), verbatim; count 0 when the tier holds none there.
   * @throws FsError.
   */
  async read(request: {
    offset: number;
    endOffset: number;
    maxRecords: number;
    maxBytes: number;
  }): Promise<{ bytes: Uint8Array; count: number; lastOffset: number }> {
    const none = { bytes: new Uint8Array(0), count: 0, lastOffset: -1 };
    let offset = request.offset;
    let i = baseAtOrBelow(this.#bases, offset);
    for (
      let attempts = 0;
      i < this.#bases.length && this.#bases[i] < request.endOffset && offset < request.endOffset;
    ) {
      const base = this.#bases[i];
      const segment = await this.#segment(base);
      if (!segment.acquire()) {
        // Evicted or removed meanwhile: open it again, or move on if it is gone.
        if (++attempts > 3) return none;
        i = baseAtOrBelow(this.#bases, offset);
        continue;
      }
      let r;
      try {
        const limitBytes = segment.readableEndBytes;
        r = await segment.read({
          offset,
          maxRecords: request.maxRecords,
          maxBytes: request.maxBytes,
          limitBytes,
        });
        if (r.status === "bad_position") {
          await segment.rebuildIndex();
          r = await segment.read({
            offset,
            maxRecords: request.maxRecords,
            maxBytes: request.maxBytes,
            limitBytes,
          });
        }
      } finally {
        await segment.release();
      }
      if (r.status === "bad_position")
        this.#logger.log("error", "cold.read_bad_position", {
          partition: this.name,
          segment: segment.logPath,
          offset,
        });
      if (r.count > 0) {
        const clipped = clipBelow(r.bytes, request.endOffset);
        if (clipped.count > 0) return clipped;
        return none;
      }
      i++;
      if (i < this.#bases.length) offset = Math.max(offset, this.#bases[i]);
    }
    return none;
  }

  /**
   * The newest record timestamp of a cold segment (ms; −1 if it holds none), scanned once and
   * remembered.
   * @throws FsError, SegmentUnreadableError.
   */
  async newestTimestampMs(baseOffset: number): Promise<number> {
    const known = this.#newest.get(baseOffset);
    if (known !== undefined) return known;
    let segment = await this.#segment(baseOffset);
    if (!segment.acquire()) {
      // Evicted between opening and acquiring: open it once more.
      segment = await this.#segment(baseOffset);
      if (!segment.acquire())
        throw new Error(
          `Cannot read cold segment ${joinPath(this.dir, logFileName(baseOffset))}: it was closed twice while opening`,
        );
    }
    try {
      const newest = await newestTimestampMs(this.#fs, segment);
      this.#newest.set(baseOffset, newest);
      return newest;
    } finally {
      await segment.release();
    }
  }

  /**
   * Deletes cold segments (their index, then log), then fsyncs the directory. Readers holding one
   * keep reading it. The caller has already raised the log start offset past them.
   * @throws FsError (segments not yet unlinked stay listed).
   */
  async remove(baseOffsets: readonly number[]): Promise<void> {
    for (const base of baseOffsets) {
      await this.#forget(base);
      for (const name of [indexFileName(base), logFileName(base)]) {
        try {
          await this.#fs.unlink(joinPath(this.dir, name));
        } catch (err) {
          if (!isFsError(err, "ENOENT")) throw err;
        }
      }
      this.#bases = this.#bases.filter((b) => b !== base);
      this.#sizes.delete(base);
      this.#newest.delete(base);
    }
    if (baseOffsets.length > 0) await this.#fs.syncDir(this.dir);
  }

  /** Closes the open cold segments (readers holding one keep it). */
  async close(): Promise<void> {
    this.#closed = true;
    for (const base of [...this.#open.keys()]) await this.#forget(base);
  }

  /** Drops a cached open segment (closing it once its readers let go). */
  async #forget(base: number): Promise<void> {
    const open = this.#open.get(base);
    if (open === undefined) return;
    this.#open.delete(base);
    const segment = await open.catch(() => null);
    await segment?.close();
  }

  /** The open segment for `base`, opening it (and evicting the least recently used) if needed. */
  async #segment(base: number): Promise<Segment> {
    let open = this.#open.get(base);
    if (open !== undefined) {
      this.#open.delete(base);
      this.#open.set(base, open);
    } else {
      open = Segment.open(this.#fs, {
        dir: this.dir,
        baseOffset: base,
        active: false,
        nowMs: this.#clock.nowMs(),
        logger: this.#logger,
        partition: `${this.name} (cold)`,
      });
      this.#open.set(base, open);
      open.catch(() => this.#open.get(base) === open && this.#open.delete(base));
      while (this.#open.size > coldSegmentsOpenMax) {
        const oldest = this.#open.keys().next().value as number;
        await this.#forget(oldest);
      }
    }
    return open;
  }

  /** Status for `GET /v1/admin/storage`. */
  describe(): {
    dir: string;
    segments: number;
    size_bytes: number;
    first_offset: number;
    base_offsets: string[];
  } {
    return {
      dir: this.dir,
      segments: this.#bases.length,
      size_bytes: this.sizeBytes,
      first_offset: this.firstOffset,
      base_offsets: this.#bases.slice(0, 20).map(offsetFileStem),
    };
  }
}

/**
 * Copies `from` to a new file `to` (created 0600, replacing a leftover) in chunks, fsyncs it and
 * closes both. With `expectedBytes` ≥ 0, copies exactly that many bytes (the file may be longer:
 * zeros written ahead that a seal failed to cut) and fails if the file holds fewer.
 * @returns bytes copied.
 * @throws FsError, or Error on a size mismatch.
 */
async function copyFile(
  fs: FileSystem,
  from: string,
  to: string,
  expectedBytes: number,
): Promise<number> {
  const source = await fs.open(from);
  let target: FileHandle | null = null;
  try {
    target = await fs.open(to, { create: true });
    await target.truncate(0);
    const buf = new Uint8Array(copyChunkBytes);
    let pos = 0;
    for (;;) {
      // A sealed segment's file can be longer than its records (zeros written ahead that its seal
      // failed to cut): copy the records only.
      const want = expectedBytes >= 0 ? Math.min(buf.length, expectedBytes - pos) : buf.length;
      if (want === 0) break;
      const got = await source.read(buf.subarray(0, want), pos);
      if (got === 0) break;
      await target.write(got === buf.length ? buf : buf.subarray(0, got), pos);
      pos += got;
    }
    if (expectedBytes >= 0 && pos !== expectedBytes)
      throw new Error(`Cannot copy ${from}: read ${pos} bytes, the segment holds ${expectedBytes}`);
    await target.sync();
    return pos;
  } finally {
    await target?.close().catch(() => {});
    await source.close().catch(() => {});
  }
}

/** True if `path` exists (a missing parent directory counts as missing, whichever way the FileSystem reports it). */
async function exists(fs: FileSystem, path: string): Promise<boolean> {
  try {
    return (await fs.stat(path)) !== null;
  } catch (err) {
    if (isFsError(err, "ENOENT")) return false;
    throw err;
  }
}

/** Index of the last base ≤ `offset`, or 0 if every base is above it. */
function baseAtOrBelow(bases: readonly number[], offset: number): number {
  return Math.max(
    0,
    lastAtOrBelow(bases.length, (i) => bases[i], offset),
  );
}

/** The records of `bytes` (back to back, already checked) with offset < `endOffset`. */
function clipBelow(
  bytes: Uint8Array,
  endOffset: number,
): { bytes: Uint8Array; count: number; lastOffset: number } {
  const view = viewOf(bytes);
  const header = new RecordHeader();
  let p = 0;
  let count = 0;
  let lastOffset = -1;
  while (p < bytes.length) {
    header.parse(view, p);
    if (header.offset >= endOffset) break;
    lastOffset = header.offset;
    count++;
    p += header.sizeBytes;
  }
  return { bytes: bytes.subarray(0, p), count, lastOffset };
}
