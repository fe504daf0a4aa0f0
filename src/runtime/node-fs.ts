/**
 * {@link FileSystem} over `node:fs`. Runs unchanged on Node, Deno and Bun (docs/runtimes.md). Writes
 * and reads use the synchronous calls (faster for small appends and served from the page cache).
 * fsync of a file with little unsynced data (`inlineSyncBytesMax`) is synchronous too: the
 * partition starts it right after writing a batch (its write loop starts once the pending I/O
 * events are handled, `Clock.afterIo`), and requests arriving while it blocks are written
 * together after it, as the next group commit. A larger fsync uses the asynchronous call, so
 * that other requests proceed while the disk works. So does every fsync after the first of an
 * event-loop turn, and any while another is in the pool: many partitions syncing at once (each
 * its own file, which no group commit can share) then sync concurrently, and the file system
 * commits them together, instead of one after another on the calling thread (1,000 files, one
 * small write each: ~1–2 k fdatasyncs/s in turn, ~10–18 k at once on this machine's ext4).
 */
import * as fs from "node:fs";
import { inlineSyncBytesMax } from "../lib/limits.ts";
import {
  FsError,
  type FileHandle,
  type FileStat,
  type FileSystem,
  type OpenOptions,
} from "../fs/types.ts";

/**
 * A node:fs error as an FsError. Node's messages already start with the code
 * (`ENAMETOOLONG: name too long, rename '…' -> '…'`); the code is added only when missing.
 */
function wrap(err: unknown, path: string): FsError {
  const e = err as NodeJS.ErrnoException;
  if (e instanceof FsError) return e;
  const code = e?.code ?? "EIO";
  const message = e?.message ?? String(err);
  return new FsError(code, path, message.startsWith(`${code}:`) ? message : `${code}: ${message}`);
}

/** fdatasyncs of any file running in the thread pool now (see the module comment). */
let poolSyncsInFlight = 0;
/** An fdatasync ran on the calling thread in this turn of the event loop. */
let inlineSyncThisTurn = false;

/** fdatasync of a file in the thread pool, counted in {@link poolSyncsInFlight}. */
function pooledDataSync(fd: number, path: string): Promise<void> {
  poolSyncsInFlight++;
  return fsyncAsync(fd, path, true).finally(() => poolSyncsInFlight--);
}

function fsyncAsync(fd: number, path: string, data: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err: NodeJS.ErrnoException | null) => (err ? reject(wrap(err, path)) : resolve());
    if (data) fs.fdatasync(fd, done);
    else fs.fsync(fd, done);
  });
}

/**
 * Creates `path` and its missing parents one level at a time, each chmod-ed to 0700 before the
 * next is made inside it. (`mkdirSync` with `recursive` makes every level with the umask applied,
 * so a umask that removes the owner's write bit, e.g. 0o277, left a parent that a non-root process
 * could not create the next level in: EACCES.)
 */
function mkdirLevels(path: string): void {
  try {
    if (fs.statSync(path).isDirectory()) return;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    const i = path.lastIndexOf("/");
    if (i > 0) mkdirLevels(path.slice(0, i));
  }
  try {
    fs.mkdirSync(path, 0o700);
  } catch (err) {
    // Lost a race with another creator (fine), or a file is in the way (EEXIST stands).
    if ((err as NodeJS.ErrnoException).code === "EEXIST" && fs.statSync(path).isDirectory()) return;
    throw err;
  }
  fs.chmodSync(path, 0o700);
}

class NodeFileHandle implements FileHandle {
  #fd: number | null;
  /** Bytes written since the last fsync started (decides inline or thread-pool fsync). */
  #unsyncedBytes = 0;
  constructor(
    fd: number,
    readonly path: string,
  ) {
    this.#fd = fd;
  }

  #handle(): number {
    if (this.#fd === null)
      throw new FsError("EBADF", this.path, `EBADF: file is closed: ${this.path}`);
    return this.#fd;
  }

  async read(buf: Uint8Array, position: number): Promise<number> {
    const fd = this.#handle();
    try {
      let got = 0;
      while (got < buf.length) {
        const n = fs.readSync(fd, buf, got, buf.length - got, position + got);
        if (n === 0) break;
        got += n;
      }
      return got;
    } catch (err) {
      throw wrap(err, this.path);
    }
  }

  async write(bytes: Uint8Array, position: number): Promise<void> {
    const fd = this.#handle();
    try {
      let done = 0;
      while (done < bytes.length) {
        done += fs.writeSync(fd, bytes, done, bytes.length - done, position + done);
      }
      this.#unsyncedBytes += bytes.length;
    } catch (err) {
      throw wrap(err, this.path);
    }
  }

  // async, so that a closed handle rejects (EBADF) instead of throwing synchronously.
  async sync(): Promise<void> {
    const fd = this.#handle();
    const unsynced = this.#unsyncedBytes;
    this.#unsyncedBytes = 0;
    if (unsynced > inlineSyncBytesMax || inlineSyncThisTurn || poolSyncsInFlight > 0)
      return pooledDataSync(fd, this.path);
    inlineSyncThisTurn = true;
    setImmediate(() => {
      inlineSyncThisTurn = false;
    });
    try {
      fs.fdatasyncSync(fd);
    } catch (err) {
      throw wrap(err, this.path);
    }
  }

  async truncate(length: number): Promise<void> {
    try {
      fs.ftruncateSync(this.#handle(), length);
    } catch (err) {
      throw wrap(err, this.path);
    }
  }

  async size(): Promise<number> {
    try {
      return fs.fstatSync(this.#handle()).size;
    } catch (err) {
      throw wrap(err, this.path);
    }
  }

  async close(): Promise<void> {
    if (this.#fd === null) return;
    const fd = this.#fd;
    this.#fd = null;
    try {
      fs.closeSync(fd);
    } catch (err) {
      throw wrap(err, this.path);
    }
  }
}

/** The real file system. Files are created 0600 and directories 0700, chmod-ed after creation so that the umask cannot widen or narrow them. */
export class NodeFileSystem implements FileSystem {
  async open(path: string, options: OpenOptions = {}): Promise<FileHandle> {
    const write = options.write || options.create;
    let flags = write ? fs.constants.O_RDWR : fs.constants.O_RDONLY;
    if (options.create) flags |= fs.constants.O_CREAT;
    if (options.create && options.exclusive) flags |= fs.constants.O_EXCL;
    try {
      const fd = fs.openSync(path, flags, 0o600);
      if (options.create) fs.fchmodSync(fd, 0o600);
      return new NodeFileHandle(fd, path);
    } catch (err) {
      throw wrap(err, path);
    }
  }

  async readdir(path: string): Promise<string[]> {
    try {
      return fs.readdirSync(path).sort();
    } catch (err) {
      throw wrap(err, path);
    }
  }

  async mkdir(path: string): Promise<void> {
    try {
      mkdirLevels(path);
    } catch (err) {
      throw wrap(err, path);
    }
  }

  async rename(from: string, to: string): Promise<void> {
    try {
      fs.renameSync(from, to);
    } catch (err) {
      throw wrap(err, from);
    }
  }

  async unlink(path: string): Promise<void> {
    try {
      fs.unlinkSync(path);
    } catch (err) {
      throw wrap(err, path);
    }
  }

  async removeTree(path: string): Promise<void> {
    try {
      fs.rmSync(path, { recursive: true, force: true });
    } catch (err) {
      throw wrap(err, path);
    }
  }

  async stat(path: string): Promise<FileStat | null> {
    try {
      const s = fs.statSync(path);
      return {
        size: s.isDirectory() ? 0 : s.size,
        isDirectory: s.isDirectory(),
        mode: s.mode & 0o777,
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw wrap(err, path);
    }
  }

  async syncDir(path: string): Promise<void> {
    let fd: number;
    try {
      fd = fs.openSync(path, fs.constants.O_RDONLY);
    } catch (err) {
      throw wrap(err, path);
    }
    try {
      await fsyncAsync(fd, path, false);
    } finally {
      fs.closeSync(fd);
    }
  }
}
