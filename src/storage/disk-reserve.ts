/**
 * The data directory's disk reserve (docs/storage.md "Full disk"; docs/decisions.md §22): a
 * file, `<dataDir>/disk_reserve.bin`, of {@link diskReserveBytesDefault} bytes the broker keeps so
 * that a full disk can be relieved through the broker. Retention must persist the new log start
 * offset (an atomic replace: a new file) before it deletes a segment, and lowering `retention_bytes`
 * rewrites `topic.json`; on a full disk both fail with ENOSPC. When a metadata write fails with
 * ENOSPC or EDQUOT, the writer (`metadata.ts`, {@link registerSpaceReserve}) has the reserve
 * deleted and tries once more, in the space it freed.
 *
 * | state    | the file | appends                                                          |
 * |----------|----------|------------------------------------------------------------------|
 * | kept     | present  | as usual                                                         |
 * | given up | deleted  | refused (`write_failed` with ENOSPC, a `storage_error` for the client): the freed space is for metadata writes, not records |
 * | missing  | not made at start for lack of space | as usual (there is nothing to protect yet) |
 *
 * The reserve is made again right after the retried write (a disk full only for a moment gets it
 * back at once), then every {@link diskReserveRetryMs} while it is given up or missing; once it is
 * whole again, appends resume. The content is
 * pseudo-random, not zeros: a file system that compresses or skips zero blocks would otherwise
 * reserve nothing. The file holds no data of the broker; deleting it by hand is harmless (it is
 * made again at the next start). It is written with the atomic writer, so a crash leaves the whole
 * file or a temp file that the next start removes.
 */
import { FsError, joinPath, isFsError, type FileSystem } from "../fs/types.ts";
import type { Clock, Timer } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { errorMessage } from "../lib/errors.ts";
import { Prng } from "../lib/prng.ts";
import { StorageError } from "./errors.ts";
import { registerSpaceReserve, writeFileAtomic, type SpaceReserve } from "./metadata.ts";

/** The reserve's file name in the data directory. */
export const diskReserveFileName = "disk_reserve.bin";

/** Size of the reserve: 1 MiB, a few hundred metadata writes' worth of blocks. */
export const diskReserveBytesDefault = 1024 * 1024;

/** How often a reserve given up (or missing for lack of space) is made again, in ms. */
export const diskReserveRetryMs = 5000;

/** errno codes that mean "no space" (a full disk, or the user's quota). */
function isNoSpace(err: unknown): boolean {
  return isFsError(err, "ENOSPC") || isFsError(err, "EDQUOT");
}

/** What {@link DiskReserve.describe} returns (`GET /v1/admin/storage`, `disk.reserve`). */
export interface DiskReserveState {
  path: string;
  bytes: number;
  /** "kept": the file is there; "given_up": deleted for a metadata write, appends refused; "missing": not made at start for lack of space (retried); "unavailable": not made for another reason, or size 0 (no reserve). */
  state: "kept" | "given_up" | "missing" | "unavailable";
  /** When it was given up or found missing (ms since the epoch), or null while kept. */
  held_since_ms: number | null;
}

/** See the module comment. */
export class DiskReserve implements SpaceReserve {
  readonly path: string;
  readonly bytes: number;
  readonly dir: string;
  #fs: FileSystem;
  #clock: Clock;
  #logger: Logger;
  #state: DiskReserveState["state"] = "unavailable";
  #heldSinceMs: number | null = null;
  #releasing: Promise<boolean> | null = null;
  #making: Promise<void> | null = null;
  #timer: Timer | null = null;
  #closed = false;
  #unregister: () => void = () => {};

  private constructor(options: {
    fs: FileSystem;
    dataDir: string;
    clock: Clock;
    logger: Logger;
    bytes: number;
  }) {
    this.#fs = options.fs;
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.dir = options.dataDir;
    this.bytes = options.bytes;
    this.path = joinPath(options.dataDir, diskReserveFileName);
  }

  /**
   * Makes (or finds) the reserve of the data directory `dataDir` and registers it with the
   * metadata writer. Never throws for a failure to make it: without space it is retried (and
   * appends wait), for any other error the broker runs without one (logged).
   * @param options.bytes size in bytes (default {@link diskReserveBytesDefault}); 0 = no reserve.
   */
  static async open(options: {
    fs: FileSystem;
    dataDir: string;
    clock: Clock;
    logger: Logger;
    bytes?: number;
  }): Promise<DiskReserve> {
    const reserve = new DiskReserve({
      ...options,
      bytes: options.bytes ?? diskReserveBytesDefault,
    });
    if (reserve.bytes > 0) {
      reserve.#unregister = registerSpaceReserve(options.fs, options.dataDir, reserve);
      await reserve.#make();
    }
    return reserve;
  }

  /** The state, for the storage description and the console. */
  describe(): DiskReserveState {
    return {
      path: this.path,
      bytes: this.bytes,
      state: this.#state,
      held_since_ms: this.#heldSinceMs,
    };
  }

  /**
   * The error an append to `partition` is refused with while the reserve is given up, or null
   * when appends may go ahead.
   */
  appendRefusal(partition: string): StorageError | null {
    if (this.#state !== "given_up") return null;
    return new StorageError(
      "write_failed",
      `Cannot append to partition "${partition}": the data directory is full (its ${this.bytes}-byte disk reserve was given up so that retention and metadata writes could go through); appends resume once the reserve can be made again (tried every ${diskReserveRetryMs / 1000} s)`,
      { cause: new FsError("ENOSPC", this.path) },
    );
  }

  /**
   * Deletes the reserve so that the write of `forPath`, which failed with `err` (ENOSPC, EDQUOT),
   * can be tried once more. Resolves true if space was freed (by this call or one running), false
   * if there was no reserve to give up.
   */
  release(forPath: string, err: unknown): Promise<boolean> {
    if (this.#releasing !== null) return this.#releasing;
    if (this.#state !== "kept") return Promise.resolve(false);
    this.#releasing = (async () => {
      try {
        await this.#fs.unlink(this.path);
      } catch (unlinkErr) {
        if (!isFsError(unlinkErr, "ENOENT")) {
          this.#logger.log("error", "storage.reserve_release_failed", {
            path: this.path,
            error: errorMessage(unlinkErr),
          });
          return false;
        }
      }
      // Not made durable: after a crash the reserve is simply there again, or made at the start.
      this.#state = "given_up";
      this.#heldSinceMs = this.#clock.nowMs();
      this.#logger.log("error", "storage.reserve_given_up", {
        path: this.path,
        bytes: this.bytes,
        for_file: forPath,
        error: errorMessage(err),
        appends: `refused until the reserve can be made again (tried every ${diskReserveRetryMs} ms): free space by lowering retention_bytes or retention_ms and running cleanup (docs/operations.md)`,
      });
      this.#schedule();
      return true;
    })().finally(() => {
      this.#releasing = null;
    });
    return this.#releasing;
  }

  /** Tries to make the reserve again now (after the write it was given up for); never throws. */
  replenish(): Promise<void> {
    return this.#make();
  }

  /** Stops retrying and unregisters from the metadata writer; the file stays. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#timer?.cancel();
    this.#timer = null;
    this.#unregister();
    await this.#making;
  }

  #schedule(): void {
    if (this.#closed || this.#timer !== null) return;
    this.#timer = this.#clock.setTimer(diskReserveRetryMs, () => {
      this.#timer = null;
      void this.#make();
    });
  }

  /** Makes the file if it is not there whole; on ENOSPC retries later (see the module comment). */
  #make(): Promise<void> {
    this.#making ??= this.#makeOnce().finally(() => {
      this.#making = null;
    });
    return this.#making;
  }

  async #makeOnce(): Promise<void> {
    if (this.#closed) return;
    try {
      const stat = await this.#fs.stat(this.path);
      if (stat === null || stat.size !== this.bytes)
        await writeFileAtomic(this.#fs, this.path, reserveContent(this.bytes), { noReserve: true });
    } catch (err) {
      if (isNoSpace(err)) {
        if (this.#state !== "given_up" && this.#state !== "missing") {
          this.#heldSinceMs = this.#clock.nowMs();
          this.#logger.log("warn", "storage.reserve_missing", {
            path: this.path,
            bytes: this.bytes,
            error: errorMessage(err),
            effect: `no disk reserve until there is room for it (tried every ${diskReserveRetryMs} ms): a full disk may then need space freed outside the broker`,
          });
        }
        if (this.#state !== "given_up") this.#state = "missing";
        this.#schedule();
        return;
      }
      this.#state = "unavailable";
      this.#heldSinceMs = null;
      this.#logger.log("warn", "storage.reserve_unavailable", {
        path: this.path,
        error: errorMessage(err),
        effect: "no disk reserve: a full disk must be relieved by freeing space outside the broker",
      });
      return;
    }
    if (this.#heldSinceMs !== null)
      this.#logger.log("warn", "storage.reserve_restored", {
        path: this.path,
        bytes: this.bytes,
        [this.#state === "given_up" ? "appends_refused_ms" : "missing_ms"]:
          this.#clock.nowMs() - this.#heldSinceMs,
      });
    this.#state = "kept";
    this.#heldSinceMs = null;
  }
}

let contentCache: Uint8Array | null = null;

/** `bytes` pseudo-random bytes (fixed seed): content no file system compresses away. Made once. */
function reserveContent(bytes: number): Uint8Array {
  if (contentCache?.length === bytes) return contentCache;
  contentCache = makeContent(bytes);
  return contentCache;
}

function makeContent(bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  const prng = new Prng(0x5eed);
  const words = new DataView(out.buffer);
  let i = 0;
  for (; i + 4 <= bytes; i += 4) words.setUint32(i, prng.nextU32());
  for (; i < bytes; i++) out[i] = prng.nextU32() & 0xff;
  return out;
}
