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
 * Reads are synchronous within a budget of bytes per event-loop turn (`syncReadBytesPerTurn`);
 * beyond it they wait for a later turn, and one larger than the budget runs in the thread pool
 * (docs/runtimes.md "File reads: synchronous within a budget per turn"). Close and truncate wait
 * for the reads started before them, so that a file descriptor is never closed (and reused) or
 * cut under a read still to run.
 */
import * as fs from "node:fs";
import { inlineSyncBytesMax, poolReadsInFlightMax, syncReadBytesPerTurn } from "../lib/limits.ts";
import {
  FsError,
  type FileHandle,
  type FileStat,
  type FileSystem,
  type OpenOptions,
} from "../fs/types.ts";
import { InFlightLimit, TurnReadBudget } from "./read-budget.ts";

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

/** Bytes read synchronously in this event-loop turn, by every handle (one loop, one budget). */
const syncReads = new TurnReadBudget(syncReadBytesPerTurn, (fn) => setImmediate(fn));
/** Reads in the thread pool, by every handle. */
const poolReads = new InFlightLimit(poolReadsInFlightMax);

/** Reads `buf.length` bytes at `position` in the thread pool, fewer at the end of the file. */
function readAsync(fd: number, buf: Uint8Array, position: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    let got = 0;
    const next = (): void => {
      try {
        fs.read(fd, buf, got, buf.length - got, position + got, (err, n) => {
          if (err) return reject(wrap(err, path));
          got += n;
          if (n === 0 || got >= buf.length) resolve(got);
          else next();
        });
      } catch (err) {
        reject(wrap(err, path));
      }
    };
    next();
  });
}

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
  /** Reads of this file waiting for a later turn or in the pool (each settles, never rejects). */
  readonly #laterReads = new Set<Promise<unknown>>();
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
    if (buf.length > syncReads.bytesPerTurn)
      return this.#later(poolReads.run(() => readAsync(fd, buf, position, this.path)));
    const turn = syncReads.reserve(buf.length);
    if (turn === null) return this.#readNow(fd, buf, position);
    return this.#later(turn.then(() => this.#readNow(fd, buf, position)));
  }

  #readNow(fd: number, buf: Uint8Array, position: number): number {
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

  /** Tracks `read` in {@link #laterReads} until it settles; returns it. */
  #later(read: Promise<number>): Promise<number> {
    const settled: Promise<unknown> = read.then(
      () => this.#laterReads.delete(settled),
      () => this.#laterReads.delete(settled),
    );
    this.#laterReads.add(settled);
    return read;
  }

  /** Resolves once the reads of this file not yet done now have settled (not those started after). */
  async #laterReadsSettled(): Promise<void> {
    await Promise.all([...this.#laterReads]);
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
    // A read started before the truncate sees the bytes before it, as a synchronous one would.
    if (this.#laterReads.size > 0) {
      this.#handle();
      await this.#laterReadsSettled();
    }
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
    // Reads started before the close finish on this descriptor; closing it first could let a new
    // open reuse its number under them.
    if (this.#laterReads.size > 0) await this.#laterReadsSettled();
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

  async statfs(path: string): Promise<{ freeBytes: number; totalBytes: number }> {
    try {
      // Node 18.15+, Deno 2 and Bun 1.1+ all have it (node:fs compatibility).
      const s = await fs.promises.statfs(path);
      return {
        freeBytes: Number(s.bavail) * Number(s.bsize),
        totalBytes: Number(s.blocks) * Number(s.bsize),
      };
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
