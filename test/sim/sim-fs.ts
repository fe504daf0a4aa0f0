/**
 * SimFs: the FileSystem one incarnation of the broker runs on in the simulation. It wraps a
 * {@link MemoryFileSystem} (which outlives incarnations, like a disk outlives a process) and adds
 * two things, both driven by a seeded {@link Prng} so a run replays exactly from its seed:
 *
 * - **Jitter.** Before each call reaches the disk it waits 0–`jitterMax` microtask turns, so the
 *   order in which concurrent requests reach the disk varies from seed to seed (a write landing
 *   while an fsync is in flight, a read racing a roll). Only microtasks: no timers, no real I/O,
 *   so the interleaving depends on the seed alone.
 * - **Power loss at a mutation.** With `crashAtMutation: k`, the k-th mutation made through this
 *   SimFs does not happen: the disk crashes just before it (`MemoryFileSystem.crash` with the given
 *   seed and mode) and from then on every call through this SimFs, and through every handle it
 *   opened, rejects with EIO. The process is dead; the harness abandons the broker and starts a
 *   new incarnation on a new SimFs over the same disk.
 *
 * Mutations are counted as `MemoryFileSystem` counts them: handle write/sync/truncate, open with
 * `create`, rename, unlink, mkdir, removeTree, syncDir.
 */
import {
  FsError,
  type FileHandle,
  type FileStat,
  type FileSystem,
  type OpenOptions,
} from "../../src/fs/types.ts";
import type { CrashMode, CrashReport, MemoryFileSystem } from "../../src/fs/memory.ts";
import { Prng } from "../../src/lib/prng.ts";

/** When and how the disk loses power. */
export interface CrashPlan {
  /** 1-based count of mutations through this SimFs: the disk crashes instead of this one. */
  atMutation: number;
  seed: number;
  mode: CrashMode;
}

/** Options of {@link SimFs}. */
export interface SimFsOptions {
  /** Seed of the jitter generator. */
  seed: number;
  /** Most microtask turns a call waits before it reaches the disk (0 disables jitter). */
  jitterMax: number;
  crash?: CrashPlan;
  /** Called once when the planned crash happens. */
  onCrash?: (report: CrashReport, at: { mutation: number; op: string; path: string }) => void;
  /** Called for every mutation as it reaches the disk (the replay command's `--fs`). */
  onMutation?: (line: string) => void;
}

/** See the module comment. */
export class SimFs implements FileSystem {
  readonly mem: MemoryFileSystem;
  #prng: Prng;
  #jitterMax: number;
  #crash: CrashPlan | undefined;
  #onCrash: SimFsOptions["onCrash"];
  #onMutation: SimFsOptions["onMutation"];
  #mutations = 0;
  #dead = false;

  constructor(mem: MemoryFileSystem, options: SimFsOptions) {
    this.mem = mem;
    this.#prng = new Prng(options.seed);
    this.#jitterMax = options.jitterMax;
    this.#crash = options.crash;
    this.#onCrash = options.onCrash;
    this.#onMutation = options.onMutation;
  }

  /** True once the planned crash happened (or {@link kill} was called). */
  get dead(): boolean {
    return this.#dead;
  }

  /** Mutations made (or attempted) through this SimFs. */
  get mutations(): number {
    return this.#mutations;
  }

  /** Arms a crash `inMutations` mutations from now (1 = the next one). */
  planCrash(plan: { inMutations: number; seed: number; mode: CrashMode }): void {
    this.#crash = {
      atMutation: this.#mutations + plan.inMutations,
      seed: plan.seed,
      mode: plan.mode,
    };
  }

  /** Crashes the disk now (between operations) and kills this SimFs. */
  crashNow(options: { seed: number; mode: CrashMode }): CrashReport {
    this.#dead = true;
    return this.mem.crash(options);
  }

  /** Kills this SimFs without touching the disk (a clean stop already happened). */
  kill(): void {
    this.#dead = true;
  }

  async #enter(action: string, path: string): Promise<void> {
    if (this.#jitterMax > 0) {
      const turns = this.#prng.int(this.#jitterMax + 1);
      for (let i = 0; i < turns; i++) await Promise.resolve();
    }
    if (this.#dead)
      throw new FsError("EIO", path, `${action} "${path}": the simulated machine lost power (EIO)`);
  }

  /** Counts a mutation; crashes the disk instead of it if the plan says so. */
  async #mutate(op: string, path: string, detail = ""): Promise<void> {
    await this.#enter(op, path);
    this.#mutations++;
    this.#onMutation?.(`fs: #${this.mem.mutationCount + 1} ${op} ${path}${detail}`);
    if (this.#crash !== undefined && this.#mutations >= this.#crash.atMutation) {
      const plan = this.#crash;
      this.#crash = undefined;
      this.#dead = true;
      const report = this.mem.crash({ seed: plan.seed, mode: plan.mode });
      this.#onCrash?.(report, { mutation: this.#mutations, op, path });
      throw new FsError("EIO", path, `${op} "${path}": the simulated machine lost power (EIO)`);
    }
  }

  async open(path: string, options: OpenOptions = {}): Promise<FileHandle> {
    if (options.create) await this.#mutate("create", path);
    else await this.#enter("open", path);
    const handle = await this.mem.open(path, options);
    return new SimHandle(this, handle, path);
  }

  async readdir(path: string): Promise<string[]> {
    await this.#enter("readdir", path);
    return this.mem.readdir(path);
  }

  async mkdir(path: string): Promise<void> {
    await this.#mutate("mkdir", path);
    return this.mem.mkdir(path);
  }

  async rename(from: string, to: string): Promise<void> {
    await this.#mutate("rename", from, ` to ${to}`);
    return this.mem.rename(from, to);
  }

  async unlink(path: string): Promise<void> {
    await this.#mutate("unlink", path);
    return this.mem.unlink(path);
  }

  async removeTree(path: string): Promise<void> {
    await this.#mutate("removeTree", path);
    return this.mem.removeTree(path);
  }

  async stat(path: string): Promise<FileStat | null> {
    await this.#enter("stat", path);
    return this.mem.stat(path);
  }

  async syncDir(path: string): Promise<void> {
    await this.#mutate("syncDir", path);
    return this.mem.syncDir(path);
  }

  /** @internal used by SimHandle. */
  enter(action: string, path: string): Promise<void> {
    return this.#enter(action, path);
  }

  /** @internal used by SimHandle. */
  mutate(op: string, path: string, detail = ""): Promise<void> {
    return this.#mutate(op, path, detail);
  }
}

class SimHandle implements FileHandle {
  constructor(
    readonly fs: SimFs,
    readonly inner: FileHandle,
    readonly path: string,
  ) {}

  async read(buf: Uint8Array, position: number): Promise<number> {
    await this.fs.enter("read", this.path);
    return this.inner.read(buf, position);
  }

  async write(bytes: Uint8Array, position: number): Promise<void> {
    await this.fs.mutate("write", this.path, ` ${bytes.length} bytes at ${position}`);
    return this.inner.write(bytes, position);
  }

  async sync(): Promise<void> {
    await this.fs.mutate("sync", this.path);
    return this.inner.sync();
  }

  async truncate(length: number): Promise<void> {
    await this.fs.mutate("truncate", this.path, ` to ${length}`);
    return this.inner.truncate(length);
  }

  async size(): Promise<number> {
    await this.fs.enter("size", this.path);
    return this.inner.size();
  }

  async close(): Promise<void> {
    // Closing never fails, even after power loss (the process is gone anyway).
    return this.inner.close();
  }
}
