/**
 * `topics/<topic>/log_start_offsets.json`: each partition's log start offset, once something has
 * moved it away from the first segment's base (retention, the cold tier's retention) or could
 * (a compaction that removes the first segment's head records). One file per topic, outside the
 * partition directories, replaced atomically ({@link writeJsonAtomic}); writers are serialised.
 *
 * ```json
 * {"version":1,"partitions":{"0":1200,"3":0}}
 * ```
 *
 * Why it exists: a segment is named after its first record (docs/decisions.md §11), so when compaction
 * removes the first records of the log, or retention removes whole segments, the first segment's
 * base no longer says where the log starts. Retention writes the new value *before* it deletes
 * anything, so a crash in between leaves segments wholly below the log start offset, which the
 * next retention pass deletes.
 */
import { joinPath, type FileSystem } from "../fs/types.ts";
import { Mutex } from "../lib/mutex.ts";
import { readJsonFile, writeJsonAtomic } from "./metadata.ts";

/** File name inside the topic directory. */
export const logStartOffsetsFileName = "log_start_offsets.json";

/** The log start offsets of one topic's partitions, in memory and on disk. */
export class LogStartOffsetFile {
  readonly path: string;
  #fs: FileSystem;
  #offsets: Map<number, number>;
  #writes = new Mutex();

  private constructor(fs: FileSystem, path: string, offsets: Map<number, number>) {
    this.#fs = fs;
    this.path = path;
    this.#offsets = offsets;
  }

  /**
   * Reads the file of the topic in `topicDir`; a missing file means no partition has one yet.
   * @returns the file, or `{ error }` if it is unreadable or malformed (docs/decisions.md §9: the caller
   * makes the topic unavailable and reports it, never resets it).
   */
  static async load(
    fs: FileSystem,
    topicDir: string,
  ): Promise<LogStartOffsetFile | { error: string }> {
    const path = joinPath(topicDir, logStartOffsetsFileName);
    const read = await readJsonFile(fs, path);
    if ("missing" in read) return new LogStartOffsetFile(fs, path, new Map());
    if ("error" in read) return { error: `${path}: ${read.error}` };
    const value = read.value as { version?: unknown; partitions?: unknown };
    if (
      typeof value !== "object" ||
      value === null ||
      value.version !== 1 ||
      typeof value.partitions !== "object" ||
      value.partitions === null
    ) {
      return { error: `${path}: not {"version":1,"partitions":{…}}` };
    }
    const offsets = new Map<number, number>();
    for (const [key, offset] of Object.entries(value.partitions as Record<string, unknown>)) {
      const partition = Number(key);
      if (!/^\d+$/.test(key) || !Number.isSafeInteger(partition))
        return { error: `${path}: partition ${JSON.stringify(key)} is not a partition number` };
      if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset < 0) {
        return {
          error: `${path}: log start offset ${JSON.stringify(offset)} of partition ${key} is not a non-negative integer`,
        };
      }
      offsets.set(partition, offset);
    }
    return new LogStartOffsetFile(fs, path, offsets);
  }

  /** The persisted log start offset of `partition`, or undefined if none was written. */
  get(partition: number): number | undefined {
    return this.#offsets.get(partition);
  }

  /**
   * Persists `offset` for `partition` (the whole file is rewritten atomically and durably).
   * Resolves once it is durable; concurrent calls run one after another. A value below the one
   * stored is ignored: the log start offset never moves back.
   * @throws FsError; the stored value is then unchanged, in memory and on disk.
   */
  set(partition: number, offset: number): Promise<void> {
    return this.#writes.run(async () => {
      const before = this.#offsets.get(partition);
      if (before !== undefined && before >= offset) return;
      this.#offsets.set(partition, offset);
      try {
        await writeJsonAtomic(this.#fs, this.path, {
          version: 1,
          partitions: Object.fromEntries([...this.#offsets].sort((a, b) => a[0] - b[0])),
        });
      } catch (err) {
        if (before === undefined) this.#offsets.delete(partition);
        else this.#offsets.set(partition, before);
        throw err;
      }
    });
  }
}
