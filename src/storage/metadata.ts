/**
 * Metadata files (topic.json, groups/*.json, producers.json, schemas.json, api_keys.json) are
 * replaced atomically (spec: Writes and durability): written to a unique temporary file in the
 * same directory, fsynced, renamed over the old one, and the directory fsynced. A crash at any
 * point leaves either the old file or the new one, never a mix. Leftover temporary files are
 * named `.<name>.tmp-<n>`; {@link listStaleTempFiles} finds them so they can be reported and ignored.
 */
import { basename, dirname, joinPath, readWholeFile, isFsError, type FileSystem } from "../fs/types.ts";
import { metadataFileBytesMax } from "../lib/limits.ts";
import { fromUtf8, utf8 } from "../lib/bytes.ts";

let tempCounter = 0;

/** True if `name` is a temporary file left by {@link writeFileAtomic}. */
export function isTempFileName(name: string): boolean {
  return /^\..+\.tmp-\d+$/.test(name);
}

/**
 * Replaces `path` with `bytes` atomically and durably. Resolves once the new content and the
 * directory entry are fsynced.
 * @throws FsError from any step; the old file is then still in place (the temp file may be left
 * behind and is ignored at start).
 */
export async function writeFileAtomic(fs: FileSystem, path: string, bytes: Uint8Array): Promise<void> {
  const dir = dirname(path);
  let tmp: string;
  let file;
  for (;;) {
    tmp = joinPath(dir, `.${basename(path)}.tmp-${++tempCounter}`);
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
  await writeFileAtomic(fs, path, utf8(JSON.stringify(value, null, 2) + "\n"));
}

/**
 * Reads a JSON metadata file. Resolves `{ missing: true }` if it does not exist, `{ error }` if it is
 * empty, too large or unparseable (DECISIONS 9: the caller reports it and makes that object
 * unavailable, never resets it), else `{ value }`.
 */
export async function readJsonFile(fs: FileSystem, path: string): Promise<{ value: unknown } | { missing: true } | { error: string }> {
  let bytes: Uint8Array;
  try {
    bytes = await readWholeFile(fs, path, metadataFileBytesMax);
  } catch (err) {
    if (isFsError(err, "ENOENT")) return { missing: true };
    return { error: err instanceof Error ? err.message : String(err) };
  }
  if (bytes.length === 0) return { error: "file is empty" };
  try {
    return { value: JSON.parse(fromUtf8(bytes)) };
  } catch (err) {
    return { error: `not valid JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/**
 * Names of temporary files left in `dir` by an interrupted {@link writeFileAtomic}. They are
 * reported and ignored (never loaded); the caller logs them.
 */
export async function listStaleTempFiles(fs: FileSystem, dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await fs.readdir(dir);
  } catch (err) {
    if (isFsError(err, "ENOENT")) return [];
    throw err;
  }
  return names.filter(isTempFileName);
}
