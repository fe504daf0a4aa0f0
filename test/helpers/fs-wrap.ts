/**
 * Test doubles over a real {@link FileSystem}: every call goes to the inner one, and chosen file
 * handle calls can be replaced (to delay, fail or count them) per opened path.
 */
import type { FileHandle, FileSystem } from "../../src/fs/types.ts";

/** The handle calls a test may replace; each receives the path the handle was opened with. */
export type HandleOverrides = Partial<{
  [K in keyof FileHandle]: (
    inner: FileHandle,
    path: string,
    ...args: Parameters<FileHandle[K]>
  ) => ReturnType<FileHandle[K]>;
}>;

/** A handle that forwards every call to `inner`, except those `overrides` replaces. */
export function wrapHandle(
  inner: FileHandle,
  path: string,
  overrides: HandleOverrides,
): FileHandle {
  return {
    read: (buf, position) =>
      overrides.read ? overrides.read(inner, path, buf, position) : inner.read(buf, position),
    write: (bytes, position) =>
      overrides.write
        ? overrides.write(inner, path, bytes, position)
        : inner.write(bytes, position),
    sync: () => (overrides.sync ? overrides.sync(inner, path) : inner.sync()),
    truncate: (length) =>
      overrides.truncate ? overrides.truncate(inner, path, length) : inner.truncate(length),
    size: () => (overrides.size ? overrides.size(inner, path) : inner.size()),
    close: () => (overrides.close ? overrides.close(inner, path) : inner.close()),
  };
}

/**
 * A file system that forwards everything to `inner`, wrapping every opened handle with `overrides`;
 * `fsOverrides` replaces whole file-system calls (e.g. a `rename` that fails), and may call `inner` itself.
 */
export function wrapFileSystem(
  inner: FileSystem,
  overrides: HandleOverrides,
  fsOverrides: Partial<Omit<FileSystem, "open">> = {},
): FileSystem {
  return {
    open: async (path, options) => wrapHandle(await inner.open(path, options), path, overrides),
    readdir: (path) => inner.readdir(path),
    mkdir: (path) => inner.mkdir(path),
    rename: (from, to) => inner.rename(from, to),
    unlink: (path) => inner.unlink(path),
    removeTree: (path) => inner.removeTree(path),
    stat: (path) => inner.stat(path),
    syncDir: (path) => inner.syncDir(path),
    ...fsOverrides,
  };
}
