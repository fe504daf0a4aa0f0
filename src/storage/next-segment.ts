/**
 * The next segment's log file, prepared ahead (docs/storage.md "Writes and durability", its
 * paragraph "The next segment, prepared ahead"): while the active segment fills, a file of zeros is written and
 * fsynced in the background under a temporary name, and the directory fsynced; a roll renames it
 * to the new segment's log name instead of creating an empty file. Every append into that segment
 * then lands in zeros already on disk, so the fsyncs acknowledgements wait for flush data only and
 * never commit a new file size to the file system's journal.
 *
 * | step                                   | on failure                       | after a crash                    |
 * |----------------------------------------|----------------------------------|----------------------------------|
 * | create `next.log.zeros`, write zeros   | file removed, event logged; the  | a leftover: removed and reported |
 * | (background handle), fsync it, fsync   | roll creates an empty log as     | at start (`leftovers.ts`,        |
 * | the directory                          | without it; never fences         | `prepared_segment`)              |
 * | roll: rename it to `<base>.log`, fsync | see `Segment.create`             | either name: the old one is a    |
 * | the directory (the roll's own)         |                                  | leftover, the new one an empty   |
 * |                                        |                                  | segment of zeros (free space)    |
 *
 * Its writes and fsync are not the log's: they go through a handle of their own, so a failure
 * here is not a failed fsync of acknowledged data and does not fence the partition
 * (docs/decisions.md §7 is about the log's fsync). Nothing is ever appended to the file under its
 * temporary name, so it never holds a record, and recovery never reads it as a segment.
 */
import { segmentPreallocateBytes } from "../lib/limits.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import { joinPath, type FileSystem } from "../fs/types.ts";

/** Name of the prepared next segment's log file in a partition directory. */
export const preparedSegmentName = "next.log.zeros";

/** `segmentPreallocateBytes` of zeros, the source of every prepared file's writes. */
let zeros: Uint8Array | null = null;

/**
 * A partition's next segment file: at most one prepared or being prepared at a time. Used by the
 * partition's write loop only (`partition.ts`): {@link start} when the active segment passes half
 * of `segment_bytes`, {@link take} at a roll, {@link close} at a clean close.
 */
export class NextSegmentFile {
  readonly #fs: FileSystem;
  readonly #dir: string;
  readonly #logger: Logger;
  readonly #partition: string;
  /** The prepare in progress, or null. */
  #task: Promise<void> | null = null;
  /** Length of the prepared file when one is ready (written, fsynced, directory fsynced), else 0. */
  #readyBytes = 0;
  #closed = false;

  /**
   * @param options.dir the partition directory.
   * @param options.partition "topic/partition", in events.
   */
  constructor(fs: FileSystem, options: { dir: string; logger: Logger; partition: string }) {
    this.#fs = fs;
    this.#dir = options.dir;
    this.#logger = options.logger;
    this.#partition = options.partition;
  }

  /** Path of the prepared file. */
  get path(): string {
    return joinPath(this.#dir, preparedSegmentName);
  }

  /** True while a file is ready or being prepared: {@link start} would do nothing. */
  get pending(): boolean {
    return this.#task !== null || this.#readyBytes > 0;
  }

  /**
   * Starts preparing a file of `bytes` zeros in the background, unless one is ready or in progress
   * or the partition is closing. Never throws and is never awaited by an append: a failure is
   * logged (`segment.prepare_failed`), the file removed, and the next roll creates its log as
   * without it.
   */
  start(bytes: number): void {
    if (this.pending || this.#closed || bytes <= 0) return;
    const task = this.#prepare(bytes).finally(() => {
      if (this.#task === task) this.#task = null;
    });
    this.#task = task;
  }

  /**
   * Takes the prepared file for a roll: its path, for the caller to rename to the new segment's
   * log name, or null if none is ready (a prepare still running finishes for the roll after).
   */
  take(): string | null {
    if (this.#readyBytes === 0) return null;
    this.#readyBytes = 0;
    return this.path;
  }

  /**
   * At a clean close: stops preparing (waits for the step in progress) and removes a prepared
   * file, so a directory at rest holds only segments. Best effort: a file left behind is removed
   * by the next start.
   */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#task;
    if (this.#readyBytes === 0) return;
    this.#readyBytes = 0;
    await this.#fs.unlink(this.path).catch(() => {});
  }

  async #prepare(bytes: number): Promise<void> {
    const path = this.path;
    zeros ??= new Uint8Array(segmentPreallocateBytes);
    let created = false;
    try {
      // A leftover of an earlier prepare that failed to remove is replaced (create truncates).
      const file = await this.#fs.open(path, { create: true, background: true });
      created = true;
      try {
        await file.truncate(0);
        for (let pos = 0; pos < bytes && !this.#closed; pos += zeros.length)
          await file.write(zeros.subarray(0, Math.min(zeros.length, bytes - pos)), pos);
        if (!this.#closed) await file.sync();
      } finally {
        await file.close().catch(() => {});
      }
      if (!this.#closed) await this.#fs.syncDir(this.#dir);
      if (this.#closed) {
        await this.#fs.unlink(path).catch(() => {});
        return;
      }
      this.#readyBytes = bytes;
      this.#logger.log("debug", "segment.prepared", {
        partition: this.#partition,
        file: path,
        bytes,
      });
    } catch (err) {
      if (created) await this.#fs.unlink(path).catch(() => {});
      this.#logger.log("warn", "segment.prepare_failed", {
        partition: this.#partition,
        file: path,
        error: errorMessage(err),
      });
    }
  }
}
