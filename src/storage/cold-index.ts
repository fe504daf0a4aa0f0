/**
 * `topics/<topic>/cold_index.json`: the durable index of a topic's cold tier (docs/storage.md
 * "Cold tier") — for each partition, which objects hold which offsets. One file per topic, in the
 * data directory (so a start never needs the object store to know its offsets), replaced
 * atomically ({@link writeJsonAtomic}); writers are serialised.
 *
 * ```json
 * {"version":1,"partitions":{"0":{"segments":[
 *   {"base":0,"next":147,"log_bytes":65536,"index_bytes":32,"newest_ms":1700000000000,"gen":0}]}}}
 * ```
 *
 * A segment is listed only once its objects (log and index) are stored and verified, and a local
 * segment is deleted only once the entry naming its copy is durable here. An object the index does
 * not list is garbage (an upload a crash interrupted, or the replaced side of a swap) or foreign.
 * When the file is missing (a data directory from before the index, or a lost one) the partition
 * rebuilds its entries from a listing of the store (`cold-store.ts`).
 *
 * `swap` records a cold compaction's plan between publishing its outputs and deleting the objects
 * they replace (`cold-compaction.ts`): the file is its marker, written once the outputs are stored.
 */
import { joinPath, type FileSystem } from "../fs/types.ts";
import { Mutex } from "../lib/mutex.ts";
import { readJsonFile, writeJsonAtomic } from "./metadata.ts";

/** File name inside the topic directory. */
export const coldIndexFileName = "cold_index.json";

/** One cold segment: its objects and the offsets they hold. */
export interface ColdSegmentEntry {
  /** Offset the segment is named after (its first record, or the first record it replaced). */
  base: number;
  /** One past the last offset it covers (the next segment starts at or after it). */
  next: number;
  /** Size of the `.log` object in bytes. */
  log_bytes: number;
  /** Size of the `.index` object in bytes. */
  index_bytes: number;
  /** Largest record timestamp in ms, or −1 when not known yet (scanned on first need). */
  newest_ms: number;
  /** Generation: 0 for an offloaded segment, n for the output of the n-th cold compaction that wrote it. */
  gen: number;
}

/** The swap a cold compaction is finishing (see the module comment). */
export interface ColdSwapPlan {
  /** Entries that leave the index (their objects are deleted after the swap). */
  replaced: ColdSegmentEntry[];
}

/** One partition's part of the file. */
export interface ColdPartitionIndex {
  segments: ColdSegmentEntry[];
  /** Objects of replaced segments still to delete, if a swap is in progress. */
  swap?: ColdSwapPlan;
  /** Highest generation ever written (so a new compaction's names never collide). */
  gen_max?: number;
}

/** The cold index of one topic, in memory and on disk. */
export class ColdIndexFile {
  readonly path: string;
  /** False when the file was missing at load: partitions rebuild from a listing. */
  readonly existed: boolean;
  #fs: FileSystem;
  #partitions: Map<number, ColdPartitionIndex>;
  #writes = new Mutex();

  private constructor(
    fs: FileSystem,
    path: string,
    partitions: Map<number, ColdPartitionIndex>,
    existed: boolean,
  ) {
    this.#fs = fs;
    this.path = path;
    this.#partitions = partitions;
    this.existed = existed;
  }

  /**
   * Reads the file of the topic in `topicDir`.
   * @returns the file (empty, `existed` false, when missing), or `{ error }` when it is unreadable
   *   or malformed (docs/decisions.md §9: the topic is made unavailable and reported, never reset).
   */
  static async load(fs: FileSystem, topicDir: string): Promise<ColdIndexFile | { error: string }> {
    const path = joinPath(topicDir, coldIndexFileName);
    const read = await readJsonFile(fs, path);
    if ("missing" in read) return new ColdIndexFile(fs, path, new Map(), false);
    if ("error" in read) return { error: `${path}: ${read.error}` };
    const value = read.value as { version?: unknown; partitions?: unknown };
    if (
      typeof value !== "object" ||
      value === null ||
      value.version !== 1 ||
      typeof value.partitions !== "object" ||
      value.partitions === null
    )
      return { error: `${path}: not {"version":1,"partitions":{…}}` };
    const partitions = new Map<number, ColdPartitionIndex>();
    for (const [key, raw] of Object.entries(value.partitions as Record<string, unknown>)) {
      const partition = Number(key);
      if (!/^\d+$/.test(key) || !Number.isSafeInteger(partition))
        return { error: `${path}: partition ${JSON.stringify(key)} is not a partition number` };
      const problem = checkPartitionIndex(raw);
      if (problem !== null) return { error: `${path}: partition ${key}: ${problem}` };
      partitions.set(partition, raw as ColdPartitionIndex);
    }
    return new ColdIndexFile(fs, path, partitions, true);
  }

  /** Partition `p`'s entries (a copy), or undefined if the file names none for it. */
  get(partition: number): ColdPartitionIndex | undefined {
    const p = this.#partitions.get(partition);
    return p === undefined ? undefined : structuredClone(p);
  }

  /**
   * Persists partition `p`'s entries (the whole file is rewritten atomically and durably).
   * Concurrent calls run one after another.
   * @throws FsError; the stored value is then unchanged, in memory and on disk.
   */
  set(partition: number, index: ColdPartitionIndex): Promise<void> {
    return this.#writes.run(async () => {
      const before = this.#partitions.get(partition);
      this.#partitions.set(partition, structuredClone(index));
      try {
        await writeJsonAtomic(this.#fs, this.path, {
          version: 1,
          partitions: Object.fromEntries([...this.#partitions].sort((a, b) => a[0] - b[0])),
        });
      } catch (err) {
        if (before === undefined) this.#partitions.delete(partition);
        else this.#partitions.set(partition, before);
        throw err;
      }
    });
  }
}

function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

function checkEntry(e: unknown): string | null {
  if (typeof e !== "object" || e === null) return "a segment is not an object";
  const s = e as Record<string, unknown>;
  for (const k of ["base", "next", "log_bytes", "index_bytes", "gen"])
    if (!isCount(s[k]))
      return `segment field ${k} is ${JSON.stringify(s[k])}, not a non-negative integer`;
  if (typeof s.newest_ms !== "number" || !Number.isSafeInteger(s.newest_ms) || s.newest_ms < -1)
    return `segment field newest_ms is ${JSON.stringify(s.newest_ms)}`;
  if ((s.next as number) < (s.base as number))
    return `segment ${s.base} ends (${s.next}) before it starts`;
  return null;
}

/** Why a partition's part of the file is malformed, or null. */
function checkPartitionIndex(raw: unknown): string | null {
  if (typeof raw !== "object" || raw === null) return "not an object";
  const p = raw as { segments?: unknown; swap?: unknown; gen_max?: unknown };
  if (!Array.isArray(p.segments)) return "segments is not an array";
  let lastNext = -1;
  for (const e of p.segments) {
    const problem = checkEntry(e);
    if (problem !== null) return problem;
    const s = e as ColdSegmentEntry;
    if (s.base < lastNext)
      return `segment ${s.base} overlaps the one before it (which ends at ${lastNext})`;
    lastNext = s.next;
  }
  if (p.gen_max !== undefined && !isCount(p.gen_max))
    return "gen_max is not a non-negative integer";
  if (p.swap !== undefined) {
    const swap = p.swap as { replaced?: unknown };
    if (typeof swap !== "object" || swap === null || !Array.isArray(swap.replaced))
      return "swap is not {replaced:[…]}";
    for (const e of swap.replaced) {
      const problem = checkEntry(e);
      if (problem !== null) return `swap: ${problem}`;
    }
  }
  return null;
}
