/**
 * The FileSystem interface: everything storage does to disk goes through it, so every durability
 * rule can be tested against a simulated disk that drops, tears and fails writes.
 *
 * Semantics every implementation must follow (one conformance suite checks both):
 * - Paths are POSIX strings joined with "/". No implementation resolves "~" or relative segments.
 * - Files and directories are created with mode 0600 / 0700, whatever the process umask.
 * - `write` writes all of `bytes` or throws. After a failed write a prefix of the bytes may be in
 *   the file (ENOSPC after k bytes); the caller must cut it off with `truncate`.
 * - Data written is not durable until `sync()` resolves on that file; a new, renamed or unlinked
 *   directory entry is not durable until `syncDir()` resolves on its parent.
 * - A failed `sync()` is final: the written data since the last good sync may be lost even if a
 *   later sync succeeds. Callers never retry it.
 * - A file unlinked or renamed over stays readable through handles opened before.
 * - Errors are {@link FsError} with a `code` (ENOENT, EEXIST, ENOSPC, EIO, ENOTDIR, ENOTEMPTY, …).
 */

/** An error from a FileSystem call. `code` follows POSIX errno names. */
export class FsError extends Error {
  override name = "FsError";
  /** @param code errno name, e.g. "ENOENT", "ENOSPC", "EIO". @param path the path the call was about. */
  constructor(
    readonly code: string,
    readonly path: string,
    message?: string,
  ) {
    super(message ?? `${code}: ${path}`);
  }
}

/** True if `err` is an {@link FsError} (or a Node error) with the given errno code. */
export function isFsError(err: unknown, code?: string): err is FsError {
  if (typeof err !== "object" || err === null) return false;
  const c = (err as { code?: unknown }).code;
  return typeof c === "string" && (code === undefined || c === code);
}

/** How {@link FileSystem.open} opens a file. */
export interface OpenOptions {
  /** Open for writing as well as reading. Default false. */
  write?: boolean;
  /** Create the file (mode 0600) if it does not exist. Implies `write`. Default false. */
  create?: boolean;
  /** With `create`: fail with EEXIST if the file exists. Default false. */
  exclusive?: boolean;
}

/** An open file. Positions and lengths are in bytes. */
export interface FileHandle {
  /**
   * Reads up to `buf.length` bytes at `position` into `buf`; resolves with the count read, which is
   * less than `buf.length` only at the end of the file (0 at or past it).
   */
  read(buf: Uint8Array, position: number): Promise<number>;
  /** Writes all of `bytes` at `position` (not durable until `sync`). See the module note on failures. */
  write(bytes: Uint8Array, position: number): Promise<void>;
  /** Makes this file's data durable (fdatasync). A rejection is final; never retry. */
  sync(): Promise<void>;
  /** Sets the file's length to `length` bytes (not durable until `sync`). */
  truncate(length: number): Promise<void>;
  /** The file's current length in bytes, including unsynced writes. */
  size(): Promise<number>;
  /** Closes the handle; further calls throw. Closing twice is allowed and does nothing. */
  close(): Promise<void>;
}

/** Result of {@link FileSystem.stat}. */
export interface FileStat {
  /** Size in bytes (0 for directories). */
  size: number;
  isDirectory: boolean;
  /** Permission bits, e.g. 0o600. */
  mode: number;
}

/** The file-system operations storage needs; small on purpose. */
export interface FileSystem {
  /** Opens a file. Rejects with ENOENT if it is missing and `create` is not set. */
  open(path: string, options?: OpenOptions): Promise<FileHandle>;
  /** Names (not paths) of the entries in a directory, sorted. Rejects with ENOENT if missing. */
  readdir(path: string): Promise<string[]>;
  /** Creates a directory and any missing parents, each mode 0700. Succeeds if it exists. */
  mkdir(path: string): Promise<void>;
  /** Renames `from` to `to`, replacing `to` if it is a file (atomic on POSIX). */
  rename(from: string, to: string): Promise<void>;
  /** Removes a file. Rejects with ENOENT if missing. */
  unlink(path: string): Promise<void>;
  /** Removes a directory and everything in it. Succeeds if it is missing. */
  removeTree(path: string): Promise<void>;
  /** Stats a path; resolves null if it does not exist. */
  stat(path: string): Promise<FileStat | null>;
  /** Makes the directory's entries (creates, renames, unlinks in it) durable. A rejection is final. */
  syncDir(path: string): Promise<void>;
  /**
   * Space of the file system holding `path` (statfs): bytes an unprivileged writer can still use
   * (`bavail` × block size) and the file system's size, in bytes. Optional: a file system without
   * it has no free-space metric (docs/operations.md "Full disk").
   */
  statfs?(path: string): Promise<{ freeBytes: number; totalBytes: number }>;
}

/** Joins path segments with "/", collapsing duplicate separators. */
export function joinPath(...parts: string[]): string {
  return parts.join("/").replace(/\/{2,}/g, "/");
}

/** The parent directory of a path ("/" for a top-level entry, "." for a bare name). */
export function dirname(path: string): string {
  const i = path.lastIndexOf("/");
  if (i < 0) return ".";
  if (i === 0) return "/";
  return path.slice(0, i);
}

/** The last segment of a path. */
export function basename(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** Reads a whole file, refusing files over `maxBytes` before allocating (ERANGE as FsError). */
export async function readWholeFile(
  fs: FileSystem,
  path: string,
  maxBytes: number,
): Promise<Uint8Array> {
  const file = await fs.open(path);
  try {
    const size = await file.size();
    if (size > maxBytes)
      throw new FsError("EFBIG", path, `file is ${size} bytes, over the limit of ${maxBytes}`);
    return await readPrefix(file, size);
  } finally {
    await file.close();
  }
}

/**
 * Reads the first `size` bytes of an open file (its size, checked against a limit by the
 * caller, who allocates nothing larger), in as many reads as it takes. A file that turns out
 * shorter (cut meanwhile) gives the bytes it had: a view of that length.
 * @throws FsError if a read fails.
 */
export async function readPrefix(file: FileHandle, size: number): Promise<Uint8Array> {
  const buf = new Uint8Array(size);
  let got = 0;
  while (got < size) {
    const n = await file.read(buf.subarray(got), got);
    if (n === 0) break;
    got += n;
  }
  return got === size ? buf : buf.subarray(0, got);
}

/**
 * The names in directory `dir`, or null if it does not exist (a directory not made yet, or
 * removed: callers treat it as empty).
 * @throws FsError for any other failure to list it.
 */
export async function readdirIfExists(fs: FileSystem, dir: string): Promise<string[] | null> {
  try {
    return await fs.readdir(dir);
  } catch (err) {
    if (isFsError(err, "ENOENT")) return null;
    throw err;
  }
}
