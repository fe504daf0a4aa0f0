/**
 * Metadata files (topic.json, groups/*.json, producers.json, schemas.json, api_keys.json) are
 * replaced atomically (docs/storage.md "Writes and durability"): written to a unique temporary file in the
 * same directory, fsynced, renamed over the old one, and the directory fsynced. A crash at any
 * point leaves either the old file or the new one, never a mix. Leftover temporary files are
 * named `.<name>.tmp-<n>`, where `<name>` is the file's name cut to {@link tempStemBytesMax} bytes
 * so that the temp name fits the file system's 255-byte limit whenever the file's own name does
 * (a group file `<group>.json` is up to 254 bytes). A start removes them, reporting each once
 * (`storage/leftovers.ts`): a temp file is a write interrupted before its rename, never the only
 * copy of anything acknowledged.
 */
import {
  basename,
  dirname,
  joinPath,
  readWholeFile,
  readdirIfExists,
  isFsError,
  type FileSystem,
} from "../fs/types.ts";
import { metadataFileBytesMax } from "../lib/limits.ts";
import { fromUtf8, utf8 } from "../lib/bytes.ts";
import { errorMessage } from "../lib/errors.ts";

let tempCounter = 0;

/**
 * Longest part of a file's name, in UTF-8 bytes, repeated in its temp file's name: with the dot,
 * `.tmp-` and a counter of up to 16 digits the temp name stays under 255 bytes (NAME_MAX on Linux
 * and macOS). Temp names of two files that share this prefix may coincide; the exclusive create
 * then moves on to the next counter.
 */
export const tempStemBytesMax = 200;

/** `name` cut (at a character boundary) to at most {@link tempStemBytesMax} UTF-8 bytes. */
function tempStem(name: string): string {
  let stem = name;
  while (utf8(stem).length > tempStemBytesMax)
    stem = stem.slice(0, Math.min(stem.length - 1, tempStemBytesMax));
  return stem;
}

/** True if `name` is a temporary file left by {@link writeFileAtomic}. */
export function isTempFileName(name: string): boolean {
  return /^\..+\.tmp-\d+$/.test(name);
}

/**
 * Unlinks each of `paths` in order (one already gone is skipped), then fsyncs `dir`, so that the
 * removals survive a power cut (docs/storage.md "Writes and durability").
 * @throws FsError from an unlink other than ENOENT, or from the directory fsync.
 */
export async function unlinkDurably(
  fs: FileSystem,
  dir: string,
  paths: readonly string[],
): Promise<void> {
  for (const path of paths) {
    try {
      await fs.unlink(path);
    } catch (err) {
      if (!isFsError(err, "ENOENT")) throw err;
    }
  }
  await fs.syncDir(dir);
}

/**
 * Space a data directory keeps for its metadata writes (`disk-reserve.ts`): given up when a write
 * under it fails for lack of space, so that the write can be tried once more.
 */
export interface SpaceReserve {
  /** Frees the reserved space for the write of `forPath` that failed with `err`; resolves false if there was none. */
  release(forPath: string, err: unknown): Promise<boolean>;
  /** Tries to reserve the space again (after the retried write); never throws. */
  replenish(): Promise<void>;
}

/** The reserves of each file system, with the directory each covers. */
const reserves = new WeakMap<FileSystem, { dir: string; reserve: SpaceReserve }[]>();

/**
 * Registers `reserve` for metadata writes under `dir` on `fs` (docs/storage.md "Full disk").
 * @returns the function that unregisters it.
 */
export function registerSpaceReserve(
  fs: FileSystem,
  dir: string,
  reserve: SpaceReserve,
): () => void {
  const entry = { dir, reserve };
  const list = reserves.get(fs) ?? [];
  list.push(entry);
  reserves.set(fs, list);
  return () => {
    const at = list.indexOf(entry);
    if (at >= 0) list.splice(at, 1);
  };
}

/** The reserve whose directory holds `path`, or null. */
function reserveFor(fs: FileSystem, path: string): SpaceReserve | null {
  for (const { dir, reserve } of reserves.get(fs) ?? [])
    if (path.startsWith(dir.endsWith("/") ? dir : `${dir}/`)) return reserve;
  return null;
}

/**
 * Replaces `path` with `bytes` atomically and durably. Resolves once the new content and the
 * directory entry are fsynced. If a step fails for lack of space (ENOSPC, EDQUOT) and a disk
 * reserve covers `path` ({@link registerSpaceReserve}), the reserve is given up and the write
 * tried once more from the start (docs/storage.md "Full disk"); `options.noReserve` (the
 * reserve's own file) skips that.
 * @throws FsError from any step; the old file is then still in place (the temp file may be left
 * behind; the next start removes it).
 */
export async function writeFileAtomic(
  fs: FileSystem,
  path: string,
  bytes: Uint8Array,
  options: { noReserve?: boolean } = {},
): Promise<void> {
  try {
    await writeFileAtomicOnce(fs, path, bytes);
  } catch (err) {
    if (options.noReserve === true || !(isFsError(err, "ENOSPC") || isFsError(err, "EDQUOT")))
      throw err;
    const reserve = reserveFor(fs, path);
    if (reserve === null || !(await reserve.release(path, err))) throw err;
    try {
      await writeFileAtomicOnce(fs, path, bytes);
    } finally {
      // At once: a disk that was full only for a moment gets its reserve back (and appends go
      // on); on a disk still full this fails and the reserve is retried later.
      await reserve.replenish();
    }
  }
}

async function writeFileAtomicOnce(fs: FileSystem, path: string, bytes: Uint8Array): Promise<void> {
  const dir = dirname(path);
  const stem = tempStem(basename(path));
  let tmp: string;
  let file;
  for (;;) {
    tmp = joinPath(dir, `.${stem}.tmp-${++tempCounter}`);
    try {
      file = await fs.open(tmp, { create: true, exclusive: true });
      break;
    } catch (err) {
      if (!isFsError(err, "EEXIST")) throw err;
    }
  }
  try {
    await file.write(bytes, 0);
    await file.sync();
  } catch (err) {
    await file.close().catch(() => {});
    await fs.unlink(tmp).catch(() => {});
    throw err;
  }
  await file.close();
  await fs.rename(tmp, path);
  await fs.syncDir(dir);
}

/** Writes `value` as pretty JSON with {@link writeFileAtomic}. */
export async function writeJsonAtomic(fs: FileSystem, path: string, value: unknown): Promise<void> {
  await writeFileAtomic(fs, path, utf8(`${JSON.stringify(value, null, 2)}\n`));
}

/**
 * Reads a JSON metadata file. Resolves `{ missing: true }` if it does not exist, `{ error }` if it is
 * empty, too large or unparseable (docs/decisions.md §9: the caller reports it and makes that object
 * unavailable, never resets it), else `{ value, bytes }` (the bytes parsed).
 * @param maxBytes the largest file read (default `metadataFileBytesMax`, 16 MiB); a file the
 *   broker writes larger than that (`producers.json`) passes its own write limit.
 */
export async function readJsonFile(
  fs: FileSystem,
  path: string,
  maxBytes: number = metadataFileBytesMax,
): Promise<{ value: unknown; bytes: Uint8Array } | { missing: true } | { error: string }> {
  let bytes: Uint8Array;
  try {
    bytes = await readWholeFile(fs, path, maxBytes);
  } catch (err) {
    if (isFsError(err, "ENOENT")) return { missing: true };
    return { error: errorMessage(err) };
  }
  if (bytes.length === 0) return { error: "file is empty" };
  try {
    return { value: JSON.parse(fromUtf8(bytes)), bytes };
  } catch (err) {
    return { error: `not valid JSON: ${errorMessage(err)}` };
  }
}

/**
 * Names of temporary files left in `dir` by an interrupted {@link writeFileAtomic} (never loaded;
 * `storage/leftovers.ts` decides what becomes of them).
 */
export async function listStaleTempFiles(fs: FileSystem, dir: string): Promise<string[]> {
  return ((await readdirIfExists(fs, dir)) ?? []).filter(isTempFileName);
}
