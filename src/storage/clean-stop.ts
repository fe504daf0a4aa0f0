/**
 * The broker's clean-stop record (docs/storage.md "Clean stop"; docs/decisions.md §17):
 * `clean-stop.json` in the data directory, written when the broker closes its topics cleanly,
 * after every partition is fsynced and closed, naming where each cleanly closed partition's log
 * ended; read at the next start before any partition is opened, and removed once every partition
 * has been recovered (its decisions durable), before anything is appended.
 *
 * Recovery reads a torn tail as a write in flight at a crash (docs/storage.md "Recovery after a
 * crash"). After a clean stop no write was in flight: a tail that does not decode, or an active
 * segment that ends anywhere but where the record says, is corruption (docs/decisions.md §1), and
 * the next offset never falls below the recorded log end offset (docs/decisions.md §3). A
 * partition the record does not name (a crash, a fenced partition, a close that could not write
 * the record) is recovered by the torn-tail rule.
 *
 * Written with {@link writeJsonAtomic} (temp file, fsync, rename, directory fsync): a power cut
 * leaves the record whole or absent, and a temp file left behind is a metadata temp file that the
 * next start removes (`leftovers.ts`).
 */
import { joinPath, type FileSystem } from "../fs/types.ts";
import { readJsonFile, unlinkDurably, writeJsonAtomic } from "./metadata.ts";

/** The record's file name in the data directory. */
export const cleanStopFileName = "clean-stop.json";

/** Where a cleanly closed partition's log ended. */
export interface CleanStop {
  /** One past the last record: the log end offset at the close (all of it durable). */
  logEndOffset: number;
  /** Base offset of the active segment at the close. */
  activeBaseOffset: number;
  /** Bytes of records in the active segment at the close. */
  activeSizeBytes: number;
}

/**
 * Writes the record for `partitions` ("topic/partition" → where its log ended), atomically and
 * durably.
 * @throws FsError from the write, fsync, rename or directory fsync.
 */
export async function writeCleanStop(
  fs: FileSystem,
  dataDir: string,
  partitions: ReadonlyMap<string, CleanStop>,
): Promise<void> {
  const out: Record<string, unknown> = {};
  for (const [name, p] of partitions)
    out[name] = {
      log_end_offset: p.logEndOffset,
      active_segment: p.activeBaseOffset,
      active_size_bytes: p.activeSizeBytes,
    };
  await writeJsonAtomic(fs, joinPath(dataDir, cleanStopFileName), { partitions: out });
}

/**
 * Reads the record: `null` if there is none (the last stop was a crash), `{ problem }` if it
 * cannot be read or is not a record (the caller reports it and applies the crash rule), else
 * where each partition's log ended.
 */
export async function readCleanStop(
  fs: FileSystem,
  dataDir: string,
): Promise<Map<string, CleanStop> | null | { problem: string }> {
  const read = await readJsonFile(fs, joinPath(dataDir, cleanStopFileName));
  if ("missing" in read) return null;
  if ("error" in read) return { problem: read.error };
  const partitions = (read.value as { partitions?: unknown } | null)?.partitions;
  if (typeof partitions !== "object" || partitions === null || Array.isArray(partitions))
    return { problem: "not a clean-stop record: no partitions object" };
  const out = new Map<string, CleanStop>();
  for (const [name, value] of Object.entries(partitions)) {
    const v = value as Record<string, unknown> | null;
    const field = (key: string): number | null => {
      const x = typeof v === "object" && v !== null ? v[key] : undefined;
      return typeof x === "number" && Number.isSafeInteger(x) && x >= 0 ? x : null;
    };
    const logEndOffset = field("log_end_offset");
    const activeBaseOffset = field("active_segment");
    const activeSizeBytes = field("active_size_bytes");
    if (
      logEndOffset === null ||
      activeBaseOffset === null ||
      activeSizeBytes === null ||
      activeBaseOffset > logEndOffset
    )
      return {
        problem: `not a clean-stop record: partition ${JSON.stringify(name)} lacks log_end_offset, active_segment or active_size_bytes`,
      };
    out.set(name, { logEndOffset, activeBaseOffset, activeSizeBytes });
  }
  return out;
}

/**
 * Removes the record and fsyncs the data directory, so that a crash from here on is recovered as
 * a crash.
 * @throws FsError if the unlink (other than ENOENT) or the directory fsync fails.
 */
export async function removeCleanStop(fs: FileSystem, dataDir: string): Promise<void> {
  await unlinkDurably(fs, dataDir, [joinPath(dataDir, cleanStopFileName)]);
}
