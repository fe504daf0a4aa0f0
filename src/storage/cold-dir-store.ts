/**
 * A {@link ColdStore} in a directory (`--cold-storage-dir DIR`, docs/storage.md "Cold tier"): the
 * object `a/b/c` is the file `DIR/a/b/c`. It goes through the FileSystem interface, so the
 * simulations crash it with the data directory (MemoryFileSystem power cuts) and the real broker
 * runs it over `NodeFileSystem`.
 *
 * A put writes `<file>.partial` (created 0600, in chunks), fsyncs it, renames it over `<file>`
 * and fsyncs the directory (and every directory level it created), so the final name appearing
 * is the completeness mark: a crash leaves no file or a whole one. It then reads the file back and
 * compares its size and CRC-32 with what it wrote. `.partial` files are this store's own leftovers:
 * a listing skips them and removes them (reported).
 */
import { crc32Continue as crcUpdate } from "../lib/crc32.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import { dirname, isFsError, joinPath, type FileHandle, type FileSystem } from "../fs/types.ts";
import {
  ColdStoreError,
  isValidObjectKey,
  type ColdObjectInfo,
  type ColdObjectSource,
  type ColdStore,
} from "./cold-objects.ts";

/** Suffix of a put in progress. */
const partialSuffix = ".partial";

/** Bytes copied per read and write. */
const chunkBytes = 1024 * 1024;

/** See the module comment. */
export class DirectoryColdStore implements ColdStore {
  readonly location: string;
  #fs: FileSystem;
  #root: string;
  #logger: Logger;

  constructor(options: { fs: FileSystem; root: string; logger: Logger }) {
    this.#fs = options.fs;
    this.#root = options.root;
    this.location = options.root;
    this.#logger = options.logger;
  }

  #path(key: string): string {
    if (!isValidObjectKey(key))
      throw new ColdStoreError("invalid", `Invalid cold object key ${JSON.stringify(key)}`);
    return joinPath(this.#root, key);
  }

  #fail(action: string, key: string, err: unknown): never {
    if (err instanceof ColdStoreError) throw err;
    const kind = isFsError(err, "ENOENT") ? "not_found" : "unavailable";
    throw new ColdStoreError(
      kind,
      `Cannot ${action} cold object "${key}" in ${this.#root}: ${errorMessage(err)}`,
      { cause: err },
    );
  }

  async put(key: string, source: ColdObjectSource): Promise<ColdObjectInfo> {
    const path = this.#path(key);
    const temp = path + partialSuffix;
    let written = 0;
    let crc = 0;
    try {
      await this.#ensureDir(dirname(path));
      let file: FileHandle | null = null;
      try {
        file = await this.#fs.open(temp, { create: true });
        await file.truncate(0);
        while (written < source.sizeBytes) {
          const chunk = await source.read(
            written,
            Math.min(chunkBytes, source.sizeBytes - written),
          );
          if (chunk.length === 0)
            throw new ColdStoreError(
              "invalid",
              `Cannot store cold object "${key}": its source ended at byte ${written} of ${source.sizeBytes}`,
            );
          await file.write(chunk, written);
          crc = crcUpdate(crc, chunk);
          written += chunk.length;
        }
        await file.sync();
      } finally {
        await file?.close().catch(() => {});
      }
      await this.#fs.rename(temp, path);
      await this.#fs.syncDir(dirname(path));
      const read = await this.#checksum(path);
      if (read.sizeBytes !== written || read.crc32 !== crc)
        throw new ColdStoreError(
          "corrupt",
          `Cannot store cold object "${key}" in ${this.#root}: read back ${read.sizeBytes} bytes with CRC ${read.crc32.toString(16)}, wrote ${written} with CRC ${crc.toString(16)}`,
        );
      return { key, sizeBytes: written };
    } catch (err) {
      await this.#fs.unlink(temp).catch(() => {});
      this.#fail("store", key, err);
    }
  }

  /** Size and CRC-32 of a stored file, read in chunks. */
  async #checksum(path: string): Promise<{ sizeBytes: number; crc32: number }> {
    const file = await this.#fs.open(path);
    try {
      const buf = new Uint8Array(chunkBytes);
      let pos = 0;
      let crc = 0;
      for (;;) {
        const got = await file.read(buf, pos);
        if (got === 0) break;
        crc = crcUpdate(crc, buf.subarray(0, got));
        pos += got;
      }
      return { sizeBytes: pos, crc32: crc };
    } finally {
      await file.close().catch(() => {});
    }
  }

  async get(key: string, range?: { start: number; end: number }): Promise<Uint8Array> {
    const path = this.#path(key);
    try {
      const file = await this.#fs.open(path);
      try {
        const size = await file.size();
        const start = range?.start ?? 0;
        const end = range?.end ?? size;
        if (
          !(Number.isSafeInteger(start) && Number.isSafeInteger(end) && 0 <= start && start <= end)
        )
          throw new ColdStoreError(
            "invalid",
            `Cannot read cold object "${key}": invalid range [${start}, ${end})`,
          );
        if (end > size)
          throw new ColdStoreError(
            "corrupt",
            `Cannot read cold object "${key}" in ${this.#root}: bytes [${start}, ${end}) asked, the object holds ${size}`,
          );
        const out = new Uint8Array(end - start);
        let got = 0;
        while (got < out.length) {
          const n = await file.read(out.subarray(got), start + got);
          if (n === 0) break;
          got += n;
        }
        if (got !== out.length)
          throw new ColdStoreError(
            "corrupt",
            `Cannot read cold object "${key}" in ${this.#root}: got ${got} of ${out.length} bytes`,
          );
        return out;
      } finally {
        await file.close().catch(() => {});
      }
    } catch (err) {
      this.#fail("read", key, err);
    }
  }

  async list(prefix: string): Promise<ColdObjectInfo[]> {
    const out: ColdObjectInfo[] = [];
    // Walk from the deepest directory the prefix names completely.
    const cut = prefix.lastIndexOf("/");
    const startKey = cut < 0 ? "" : prefix.slice(0, cut);
    const walk = async (relative: string): Promise<void> => {
      const dir = relative === "" ? this.#root : joinPath(this.#root, relative);
      let names: string[];
      try {
        names = await this.#fs.readdir(dir);
      } catch (err) {
        if (isFsError(err, "ENOENT") || isFsError(err, "ENOTDIR")) return;
        throw err;
      }
      for (const name of names) {
        const key = relative === "" ? name : `${relative}/${name}`;
        if (!key.startsWith(prefix) && !prefix.startsWith(`${key}/`)) continue;
        const path = joinPath(dir, name);
        const stat = await this.#fs.stat(path);
        if (stat === null) continue;
        if (stat.isDirectory) {
          await walk(key);
        } else if (name.endsWith(partialSuffix)) {
          await this.#fs.unlink(path).catch(() => {});
          this.#logger.log("warn", "cold.partial_copy_removed", { file: path });
        } else {
          out.push({ key, sizeBytes: stat.size });
        }
      }
    };
    try {
      await walk(startKey);
    } catch (err) {
      this.#fail("list", `${prefix}*`, err);
    }
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async delete(key: string): Promise<void> {
    const path = this.#path(key);
    try {
      await this.#fs.unlink(path);
      await this.#fs.syncDir(dirname(path));
    } catch (err) {
      if (isFsError(err, "ENOENT")) return;
      this.#fail("delete", key, err);
    }
  }

  /**
   * Removes the directories under `prefix` (a `/`-terminated key prefix) that hold no file any
   * more, deepest first, and fsyncs each parent.
   * @throws ColdStoreError.
   */
  async prune(prefix: string): Promise<void> {
    const top = joinPath(this.#root, prefix.replace(/\/$/, ""));
    /** Removes `dir` if nothing but empty directories is below it; @returns whether it did. */
    const prune = async (dir: string): Promise<boolean> => {
      let names: string[];
      try {
        names = await this.#fs.readdir(dir);
      } catch (err) {
        if (isFsError(err, "ENOENT")) return true;
        throw err;
      }
      let empty = true;
      for (const name of names) {
        const path = joinPath(dir, name);
        const stat = await this.#fs.stat(path);
        if (stat?.isDirectory === true) empty = (await prune(path)) && empty;
        else if (stat !== null) empty = false;
      }
      if (!empty) return false;
      await this.#fs.removeTree(dir);
      await this.#fs.syncDir(dirname(dir));
      return true;
    };
    try {
      await prune(top);
    } catch (err) {
      this.#fail("remove the directories of", prefix, err);
    }
  }

  /** Creates `dir` (0700) and makes each level it created durable by fsyncing its parent. */
  async #ensureDir(dir: string): Promise<void> {
    const missing: string[] = [];
    for (let path = dir; (await this.#stat(path)) === null; path = dirname(path)) {
      missing.push(path);
      if (dirname(path) === path) break;
    }
    if (missing.length === 0) return;
    await this.#fs.mkdir(dir);
    for (const path of missing.reverse()) await this.#fs.syncDir(dirname(path));
  }

  async #stat(path: string) {
    try {
      return await this.#fs.stat(path);
    } catch (err) {
      if (isFsError(err, "ENOENT") || isFsError(err, "ENOTDIR")) return null;
      throw err;
    }
  }
}
