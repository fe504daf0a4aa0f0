/**
 * A partition's leader-epoch history (cluster mode; docs/storage.md "Files on disk",
 * docs/cluster.md "Leader-epoch truncation"): for each leader epoch under which records were
 * written to this replica, the first offset written under it. Stored in the partition directory
 * as `leader-epochs.json`, replaced atomically and fsynced through the metadata writer
 * (`metadata.ts`):
 *
 * ```
 * { "version": 1, "epochs": [ { "epoch": 3, "start_offset": 0 }, { "epoch": 5, "start_offset": 1200 } ] }
 * ```
 *
 * Epochs strictly increase down the list, start offsets never decrease. A leader adds its epoch
 * (at its log end) before it accepts a write under it; a follower adds the leader's entries as it
 * appends the records they cover. Comparing a follower's last epoch with the leader's history
 * finds where their logs stop agreeing ({@link LeaderEpochHistory.endOffsetFor}), and the
 * follower truncates there (Kafka's KIP-101 / KIP-279).
 */
import { joinPath, type FileSystem } from "../fs/types.ts";
import { Mutex } from "../lib/mutex.ts";
import { StorageError } from "./errors.ts";
import { readJsonFile, writeJsonAtomic } from "./metadata.ts";

/** File name of the history inside a partition directory. */
export const leaderEpochsFileName = "leader-epochs.json";

/** True for the history file and the temp files of its interrupted writes (not segment files). */
export function isLeaderEpochsFile(name: string): boolean {
  return name === leaderEpochsFileName || /^\.leader-epochs\.json\.tmp-\d+$/.test(name);
}

/** One entry: the first offset written under `epoch`. */
export interface EpochStart {
  epoch: number;
  startOffset: number;
}

/** The history of one partition replica. See the module comment. */
export class LeaderEpochHistory {
  #fs: FileSystem;
  #path: string;
  #entries: EpochStart[];
  #lock = new Mutex();

  private constructor(fs: FileSystem, path: string, entries: EpochStart[]) {
    this.#fs = fs;
    this.#path = path;
    this.#entries = entries;
  }

  /**
   * Reads the history of the partition directory `dir` (empty if it has none), keeping only the
   * entries that start at or below `logEndOffset` (an entry written before a crash took the
   * records it announced is dropped).
   * @throws StorageError "invalid" naming the file if it cannot be read.
   */
  static async load(
    fs: FileSystem,
    dir: string,
    logEndOffset: number,
  ): Promise<LeaderEpochHistory> {
    const path = joinPath(dir, leaderEpochsFileName);
    const read = await readJsonFile(fs, path);
    if ("missing" in read) return new LeaderEpochHistory(fs, path, []);
    if ("error" in read) throw new StorageError("invalid", `Cannot read ${path}: ${read.error}`);
    const entries = parseEntries(read.value, path);
    return new LeaderEpochHistory(
      fs,
      path,
      entries.filter((e) => e.startOffset <= logEndOffset),
    );
  }

  /** The entries, oldest first (a copy). */
  get entries(): EpochStart[] {
    return this.#entries.map((e) => ({ ...e }));
  }

  /** The latest epoch, −1 for an empty history. */
  get latestEpoch(): number {
    return this.#entries.at(-1)?.epoch ?? -1;
  }

  /**
   * Where the records of `epoch` end in this history: the largest epoch at or below it that the
   * history holds, and the start of the entry after that one (`logEndOffset` if it is the last).
   * For an epoch older than every entry: epoch −1 and the first entry's start offset.
   */
  endOffsetFor(epoch: number, logEndOffset: number): { epoch: number; endOffset: number } {
    const entries = this.#entries;
    let i = entries.length - 1;
    while (i >= 0 && entries[i].epoch > epoch) i--;
    if (i < 0) return { epoch: -1, endOffset: entries[0]?.startOffset ?? logEndOffset };
    const next = entries[i + 1];
    return {
      epoch: entries[i].epoch,
      endOffset: next === undefined ? logEndOffset : next.startOffset,
    };
  }

  /**
   * Adds `epoch` starting at `startOffset`, durably, if it is newer than the latest entry (an
   * older or equal epoch changes nothing).
   * @throws FsError if the file cannot be written (the history in memory is then unchanged).
   */
  async assign(epoch: number, startOffset: number): Promise<void> {
    await this.#lock.run(async () => {
      const last = this.#entries.at(-1);
      if (last !== undefined && epoch <= last.epoch) return;
      const start = Math.max(startOffset, last?.startOffset ?? 0);
      await this.#write([...this.#entries, { epoch, startOffset: start }]);
    });
  }

  /**
   * Forgets what a truncation to `offset` removed: entries with a later epoch than `epoch`, and
   * entries starting at or after `offset` (docs/cluster.md "Leader-epoch truncation").
   * @throws FsError if the file cannot be written.
   */
  async truncate(epoch: number, offset: number): Promise<void> {
    await this.#lock.run(async () => {
      const kept = this.#entries.filter((e) => e.epoch <= epoch && e.startOffset < offset);
      if (kept.length !== this.#entries.length) await this.#write(kept);
    });
  }

  async #write(entries: EpochStart[]): Promise<void> {
    await writeJsonAtomic(this.#fs, this.#path, {
      version: 1,
      epochs: entries.map((e) => ({ epoch: e.epoch, start_offset: e.startOffset })),
    });
    this.#entries = entries;
  }
}

function parseEntries(value: unknown, path: string): EpochStart[] {
  const bad = (why: string) => new StorageError("invalid", `Cannot read ${path}: ${why}`);
  const v = value as { version?: unknown; epochs?: unknown } | null;
  if (v === null || typeof v !== "object" || v.version !== 1 || !Array.isArray(v.epochs))
    throw bad('not {"version": 1, "epochs": [...]}');
  const entries: EpochStart[] = [];
  for (const raw of v.epochs as unknown[]) {
    const e = raw as { epoch?: unknown; start_offset?: unknown } | null;
    const epoch = e?.epoch;
    const start = e?.start_offset;
    if (
      typeof epoch !== "number" ||
      typeof start !== "number" ||
      !Number.isSafeInteger(epoch) ||
      !Number.isSafeInteger(start) ||
      epoch < 0 ||
      start < 0
    )
      throw bad("an entry is not {epoch, start_offset} of non-negative integers");
    const last = entries.at(-1);
    if (last !== undefined && (epoch <= last.epoch || start < last.startOffset))
      throw bad("epochs must increase and start offsets must not decrease");
    entries.push({ epoch, startOffset: start });
  }
  return entries;
}
