/**
 * MemoryFileSystem: a simulated disk that lies the way real ones do, for crash and fault tests
 * that replay from a seed. Pure TypeScript (no `node:*`), so it can sit below storage.
 *
 * ## The page-cache model
 *
 * Every file has *volatile* content (what reads see now: the page cache) and *durable* content
 * (what is on the platter). Every directory has volatile entries and durable entries
 * (name → inode). Nothing becomes durable by itself:
 *
 * - `FileHandle.sync()` makes that file's content and length durable (fdatasync). It does not make
 *   the file's name durable.
 * - `syncDir(dir)` makes that directory's entry changes durable: creates (including `mkdir` of a
 *   child directory), renames in or out, unlinks. A new directory's own entries need a `syncDir` of
 *   that directory.
 *
 * Since its last sync, each file keeps a log of its unsynced writes and truncates; that log is what
 * a crash picks from. Since their last `syncDir`, directory entries whose volatile inode differs
 * from their durable one are *pending*.
 *
 * ## Crashes
 *
 * {@link MemoryFileSystem.crash} turns this instance, in place, into what a machine would find
 * after power loss, and invalidates every handle opened before (they reject with EIO; `close()`
 * resolves). With `mode: "random"` (the default) a seeded generator decides:
 *
 * | pending change                          | outcomes after the crash                              |
 * |-----------------------------------------|-------------------------------------------------------|
 * | write since the file's last sync        | applied, dropped, or torn (a prefix of 1…len−1 bytes) |
 * | truncate since the file's last sync     | applied or dropped                                    |
 * | directory entry since the dir's syncDir | the new inode (or absence) or the durable one        |
 *
 * Each write is decided on its own, in order, over the durable content, so a dropped write followed
 * by a kept one leaves a zero-filled hole, as delayed allocation can. A rename is atomic across a
 * crash: its source and destination entries (and those of renames chained with it) are decided
 * together, so a renamed file is never lost from both names, and a file renamed over another is
 * either the new one or the old one. `mode: "dropAll"` keeps only durable state; `mode: "keepAll"`
 * keeps every pending change (equal to what reads saw before the crash, except data a failed fsync
 * dropped). A crash also disarms every fault. The outcome depends only on the seed and the
 * operations performed, so equal seeds give equal disks.
 *
 * ## Faults
 *
 * `fs.faults` ({@link MemoryFaults}) makes mutations fail. A *mutation* is one call of: handle
 * `write`, `sync`, `truncate`; `open` with `create` (op `"create"`); `rename`, `unlink`, `mkdir`,
 * `removeTree`, `syncDir`. Every call counts, whether or not it then succeeds
 * ({@link MemoryFileSystem.mutationCount}); reads, `stat`, `readdir`, `size`, `close` and opening
 * without `create` do not. A failed mutation changes nothing, except:
 *
 * - a failed write with `partialBytes: k` leaves its first k bytes in the file (volatile, unsynced),
 *   as a disk that fills up mid-write does (ENOSPC after k bytes);
 * - a failed `sync` drops the file's unsynced writes from the durable path unless the fault says
 *   `dropDirtyData: false` (Linux marks the dirty pages clean after a writeback error): reads still
 *   see the bytes, but no later sync makes them durable, and a crash loses them. A failed fsync is
 *   final for those bytes.
 *
 * ```ts
 * const fs = new MemoryFileSystem({ seed: 7 });
 * fs.faults.failNext({ op: "write", path: /\.log$/, code: "ENOSPC", partialBytes: 10 });
 * fs.faults.failNext({ op: "sync", code: "EIO" });          // and drop that file's dirty data
 * fs.faults.failNth({ n: 12, code: "EIO" });               // the 12th mutation from now fails
 * fs.crash({ seed: 99 });                                   // random outcome, replayable
 * fs.crash({ mode: "dropAll" });                            // only what was synced survives
 * ```
 *
 * ## Power cuts, boots and jitter
 *
 * A power cut is the countdown the crash tests sweep: `powerCutAtMutation: n` (or
 * {@link MemoryFileSystem.armPowerCut}) makes the n-th mutation through this instance not happen:
 * power is lost just before it. That call and every later call through this instance, and through
 * every handle it opened, rejects with EIO ("the simulated machine lost power"); `close()` still
 * resolves. With `crashAtPowerCut` the disk crashes at that moment ({@link MemoryFileSystem.crash});
 * without it the disk keeps its state until the test crashes it.
 *
 * An instance made with `disk: other` is another *boot* of `other`'s machine: it sees and changes the
 * same files (and mutation count and faults), but has its own power, counters, jitter and callbacks.
 * A process that died with its boot cannot touch the disk the next boot uses: its calls keep
 * failing. `crash()` restores the power of the instance it is called on (the machine came back).
 *
 * `jitter: { seed, maxTurns }` delays every call 0…maxTurns microtask turns (seeded) before it
 * reaches the disk, so the order in which concurrent requests reach it varies from seed to seed
 * while a run still replays exactly from its seed. Without jitter no call waits.
 *
 * ```ts
 * const disk = new MemoryFileSystem({ seed: 3 });
 * const boot = new MemoryFileSystem({ disk, powerCutAtMutation: 12 });
 * // … run a broker on `boot` until its 12th mutation fails with EIO …
 * disk.crash({ seed: 5 });                                  // then start again on `disk`
 * ```
 *
 * Other semantics follow POSIX as the conformance suite (test/fs/conformance.ts) checks them:
 * mode 0600 for files and 0700 for directories always, sorted readdir, unlinked and renamed-over
 * files stay readable and writable through handles opened before, short reads at the end of a file,
 * zero-filled gaps. Paths are "/"-separated; relative paths are taken from "/" and "." and ".." are
 * resolved by name (there are no links). A file may not grow past {@link memoryFileBytesMax} (EFBIG).
 */
import { assert } from "../lib/assert.ts";
import { Prng } from "../lib/prng.ts";
import {
  FsError,
  type FileHandle,
  type FileStat,
  type FileSystem,
  type OpenOptions,
} from "./types.ts";

/** Largest simulated file, in bytes; writes or truncates past it reject with EFBIG. */
export const memoryFileBytesMax = 1024 * 1024 * 1024;

/** The operations that count as mutations, for {@link MemoryFaults} and {@link MemoryFileSystem.mutationCount}. */
export type MutationOp =
  | "write"
  | "sync"
  | "truncate"
  | "create"
  | "rename"
  | "unlink"
  | "mkdir"
  | "removeTree"
  | "syncDir";

/** What an injected fault does when it fires. */
export interface FaultEffect {
  /** The errno name the operation rejects with, e.g. "EIO", "ENOSPC". */
  code: string;
  /** For a write: bytes of the write that land in the file before it fails (clamped to its length). Default 0. */
  partialBytes?: number;
  /** For a sync: whether the file's unsynced data is lost for good. Default: the file system's `failedSyncDropsDirtyData`. */
  dropDirtyData?: boolean;
}

/** Arms a fault on the next matching mutations; see {@link MemoryFaults.failNext}. */
export interface FailNextOptions extends FaultEffect {
  /** Which operation to fail. */
  op: MutationOp;
  /** Only calls on this path (exact string, or a pattern tested against it); for `rename`, either path. Default: any. */
  path?: string | RegExp;
  /** How many matching calls fail before the fault disarms itself; `Infinity` for a lasting fault. Default 1. */
  times?: number;
}

/** Arms a countdown fault; see {@link MemoryFaults.failNth}. */
export interface FailNthOptions extends FaultEffect {
  /** Which mutation from now fails: 1 is the next one. */
  n: number;
}

/** A fault that fired: which mutation (1-based, as {@link MemoryFileSystem.mutationCount} counts), on what. */
export interface FaultEvent {
  mutation: number;
  op: MutationOp;
  /** The path of the call (for a handle, the path it was opened with; for rename, the source). */
  path: string;
  code: string;
}

interface FaultRule {
  effect: FaultEffect;
  op?: MutationOp;
  path?: string | RegExp;
  /** For countdown rules: the absolute mutation number that fails. */
  mutation?: number;
  remaining: number;
}

/**
 * The fault plan of one {@link MemoryFileSystem}. Rules are checked in the order they were armed;
 * the first that matches a mutation fires and that mutation fails with its code.
 */
export class MemoryFaults {
  #rules: FaultRule[] = [];
  #fired: FaultEvent[] = [];
  readonly #mutationCount: () => number;

  /** @param mutationCount reads the owning file system's mutation counter. */
  constructor(mutationCount: () => number) {
    this.#mutationCount = mutationCount;
  }

  /**
   * Fails the next `times` (default 1) calls of `op` on `path` (default any) with `code`.
   * @throws AssertionError on a `times` that is not a positive integer or Infinity.
   */
  failNext(options: FailNextOptions): void {
    const times = options.times ?? 1;
    assert(
      times === Infinity || (Number.isInteger(times) && times >= 1),
      `times must be a positive integer or Infinity, got ${times}`,
    );
    this.#rules.push({
      effect: effectOf(options),
      op: options.op,
      path: options.path,
      remaining: times,
    });
  }

  /**
   * Fails exactly the `n`th mutation from now (n = 1: the next), whatever it is, with `code`. Sweep
   * `n` over 1…{@link MemoryFileSystem.mutationCount} of a fault-free run to fail every step.
   * @throws AssertionError unless `n` is a positive integer.
   */
  failNth(options: FailNthOptions): void {
    assert(
      Number.isInteger(options.n) && options.n >= 1,
      `n must be a positive integer, got ${options.n}`,
    );
    this.#rules.push({
      effect: effectOf(options),
      mutation: this.#mutationCount() + options.n,
      remaining: 1,
    });
  }

  /** Disarms every fault. The record of faults that fired is kept. */
  clear(): void {
    this.#rules = [];
  }

  /** Number of armed rules (a lasting rule counts once). */
  get armed(): number {
    return this.#rules.length;
  }

  /** Every fault that fired, oldest first. */
  get fired(): readonly FaultEvent[] {
    return this.#fired;
  }

  /**
   * Called by {@link MemoryFileSystem} once per mutation, after counting it: returns the effect of the
   * first matching rule (and uses it up), or null to let the mutation proceed.
   */
  take(op: MutationOp, paths: readonly string[], mutation: number): FaultEffect | null {
    for (let i = 0; i < this.#rules.length; i++) {
      const rule = this.#rules[i];
      if (rule.mutation !== undefined && rule.mutation < mutation) {
        this.#rules.splice(i--, 1); // an earlier rule took its mutation
        continue;
      }
      if (rule.mutation !== undefined ? rule.mutation !== mutation : rule.op !== op) continue;
      if (rule.path !== undefined && !paths.some((p) => pathMatches(rule.path!, p))) continue;
      rule.remaining -= 1;
      if (rule.remaining <= 0) this.#rules.splice(i, 1);
      this.#fired.push({ mutation, op, path: paths[0], code: rule.effect.code });
      return rule.effect;
    }
    return null;
  }
}

function effectOf(options: FaultEffect): FaultEffect {
  assert(
    typeof options.code === "string" && options.code.length > 0,
    "fault code must be a non-empty errno name",
  );
  const partialBytes = options.partialBytes ?? 0;
  assert(
    Number.isInteger(partialBytes) && partialBytes >= 0,
    `partialBytes must be a non-negative integer, got ${partialBytes}`,
  );
  return { code: options.code, partialBytes, dropDirtyData: options.dropDirtyData };
}

function pathMatches(pattern: string | RegExp, path: string): boolean {
  if (typeof pattern === "string") return pattern === path;
  pattern.lastIndex = 0;
  return pattern.test(path);
}

/** How {@link MemoryFileSystem.crash} decides pending changes. */
export type CrashMode = "random" | "dropAll" | "keepAll";

/** Options of {@link MemoryFileSystem.crash}. */
export interface CrashOptions {
  /** Seed for this crash's decisions. Default: the next draw from the file system's own generator. */
  seed?: number;
  /** Default "random". */
  mode?: CrashMode;
}

/** What a crash did to the pending changes it found (reachable files and directories only). */
export interface CrashReport {
  /** Unsynced writes that reached the disk whole. */
  writesApplied: number;
  /** Unsynced writes that left no byte behind. */
  writesDropped: number;
  /** Unsynced writes of which only a prefix reached the disk. */
  writesTorn: number;
  /** Unsynced truncates that took effect. */
  truncatesApplied: number;
  /** Unsynced truncates that did not. */
  truncatesDropped: number;
  /** Pending directory entries that kept their new inode (or absence). */
  entriesKept: number;
  /** Pending directory entries that went back to their durable inode (or absence). */
  entriesReverted: number;
}

/** Options of the {@link MemoryFileSystem} constructor. */
export interface MemoryFileSystemOptions {
  /** Seed of the generator crashes draw from when they get no seed of their own. Default 1. */
  seed?: number;
  /** Whether a failed `sync` loses the file's unsynced data for good (Linux behaviour). Default true. */
  failedSyncDropsDirtyData?: boolean;
  /**
   * Another instance whose disk (files, mutation count, faults, crash generator) this one uses: a
   * new boot of the same machine, with its own power, counters, jitter and callbacks. `seed` and
   * `failedSyncDropsDirtyData` then come from that disk.
   */
  disk?: MemoryFileSystem;
  /** The mutation through this instance (1-based) that never happens: power is lost just before it. */
  powerCutAtMutation?: number;
  /** Crash the disk with these options when the power is cut. Default: leave it for the test to crash. */
  crashAtPowerCut?: CrashOptions;
  /** Called once when a planned power cut happens, after the crash if one was asked for (not for {@link MemoryFileSystem.cutPower}). */
  onPowerCut?: (event: PowerCutEvent) => void;
  /** Called for every mutation through this instance as it is attempted (the one cut included). */
  onMutation?: (event: MutationEvent) => void;
  /** Delays every call 0…`maxTurns` microtask turns, drawn from `seed`. Default: no delay. */
  jitter?: { seed: number; maxTurns: number };
}

/** A mutation attempted through one instance; see {@link MemoryFileSystemOptions.onMutation}. */
export interface MutationEvent {
  /** Its number on the disk, as {@link MemoryFileSystem.mutationCount} will count it. */
  mutation: number;
  op: MutationOp;
  /** The path of the call (for a handle, the path it was opened with; for rename, the source). */
  path: string;
  /** e.g. " 120 bytes at 4096", " to 0", " to /d/b" (rename); "" when there is nothing to add. */
  detail: string;
}

/** The power cut of one instance; see {@link MemoryFileSystemOptions.onPowerCut}. */
export interface PowerCutEvent {
  /** The mutation through this instance that did not happen (1-based). */
  mutation: number;
  op: MutationOp;
  path: string;
  /** What the crash did, if the power cut crashed the disk. */
  report: CrashReport | null;
}

/** A growable byte buffer: `buf` holds at least `size` bytes; bytes past `size` are garbage. */
class Bytes {
  buf: Uint8Array;
  size: number;

  constructor(buf: Uint8Array = new Uint8Array(0), size = buf.length) {
    this.buf = buf;
    this.size = size;
  }

  clone(): Bytes {
    return new Bytes(this.buf.slice(0, this.size));
  }

  view(): Uint8Array {
    return this.buf.subarray(0, this.size);
  }

  #reserve(capacity: number): void {
    if (capacity <= this.buf.length) return;
    const next = new Uint8Array(Math.max(capacity, this.buf.length * 2, 64));
    next.set(this.buf.subarray(0, this.size));
    this.buf = next;
  }

  /** Writes `src` at `position`, zero-filling any gap after the current end. */
  write(src: Uint8Array, position: number): void {
    const end = position + src.length;
    if (end > this.size) {
      this.#reserve(end);
      // Bytes past `size` may be left over from a shrink; the gap must read as zeros.
      if (position > this.size) this.buf.fill(0, this.size, position);
      this.size = end;
    }
    this.buf.set(src, position);
  }

  truncate(length: number): void {
    if (length > this.size) {
      this.#reserve(length);
      this.buf.fill(0, this.size, length);
    }
    this.size = length;
  }

  read(dst: Uint8Array, position: number): number {
    if (position >= this.size) return 0;
    const n = Math.min(dst.length, this.size - position);
    dst.set(this.buf.subarray(position, position + n));
    return n;
  }
}

/** An unsynced change to a file: a write (a private copy of its bytes) or a truncate. */
type LogEntry =
  | { kind: "write"; position: number; bytes: Uint8Array }
  | { kind: "truncate"; length: number };

class FileNode {
  readonly kind = "file";
  /** What reads see. */
  data = new Bytes();
  /** What survives a crash. */
  durable = new Bytes();
  /** Changes since the last good sync, oldest first; replayed onto `durable` by sync. */
  log: LogEntry[] = [];
  constructor(readonly id: number) {}
}

class DirNode {
  readonly kind = "dir";
  entries = new Map<string, Node>();
  durableEntries = new Map<string, Node>();
  constructor(readonly id: number) {}
}

type Node = FileNode | DirNode;

/** Identifies a directory entry across renames: "<dir id>/<name>". */
function slotKey(dir: DirNode, name: string): string {
  return `${dir.id}/${name}`;
}

function isPending(dir: DirNode, name: string): boolean {
  return dir.entries.get(name) !== dir.durableEntries.get(name);
}

function fsError(code: string, action: string, path: string, detail: string): FsError {
  return new FsError(code, path, `${action} "${path}": ${detail} (${code})`);
}

function checkPosition(value: number, field: string, action: string, path: string): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw fsError("EINVAL", action, path, `${field} must be a non-negative integer, got ${value}`);
  }
}

function checkFileEnd(end: number, action: string, path: string): void {
  if (end > memoryFileBytesMax) {
    throw fsError(
      "EFBIG",
      action,
      path,
      `file would be ${end} bytes, over the simulated limit of ${memoryFileBytesMax}`,
    );
  }
}

/** The state handles share with their file system. */
class Disk {
  root = new DirNode(0);
  nextId = 1;
  /** Bumped by every crash; handles from an older epoch are dead. */
  epoch = 0;
  mutationCount = 0;
  openHandles = 0;
  /** Pairs of directory entries joined by a rename, decided together at a crash. */
  renameLinks: [DirNode, string, DirNode, string][] = [];
  readonly faults = new MemoryFaults(() => this.mutationCount);

  constructor(readonly failedSyncDropsDirtyData: boolean) {}

  /** Counts a mutation and returns the fault that fails it, if one is armed. */
  mutate(op: MutationOp, paths: readonly string[]): FaultEffect | null {
    this.mutationCount += 1;
    return this.faults.take(op, paths, this.mutationCount);
  }
}

/**
 * The power state of one instance (one boot of a disk): counts its mutations, cuts the power at
 * the planned one, and delays calls when jitter is on. Handles check the boot that opened them.
 */
class Boot {
  mutations = 0;
  poweredOff = false;
  cutAt: number | null = null;
  crashAtCut: CrashOptions | undefined;
  readonly #jitter: Prng | null;
  readonly #jitterMax: number;
  readonly onMutation: MemoryFileSystemOptions["onMutation"];
  readonly onPowerCut: MemoryFileSystemOptions["onPowerCut"];

  constructor(
    readonly disk: Disk,
    options: MemoryFileSystemOptions,
    readonly crashDisk: (options: CrashOptions) => CrashReport,
  ) {
    const jitter = options.jitter;
    this.#jitter = jitter !== undefined && jitter.maxTurns > 0 ? new Prng(jitter.seed) : null;
    this.#jitterMax = jitter?.maxTurns ?? 0;
    this.onMutation = options.onMutation;
    this.onPowerCut = options.onPowerCut;
    if (options.powerCutAtMutation !== undefined) {
      assert(
        Number.isInteger(options.powerCutAtMutation) && options.powerCutAtMutation >= 1,
        `powerCutAtMutation must be a positive integer, got ${options.powerCutAtMutation}`,
      );
      this.cutAt = options.powerCutAtMutation;
      this.crashAtCut = options.crashAtPowerCut;
    }
  }

  /** True if calls wait for jitter; callers then `await delay()` first. */
  get jittery(): boolean {
    return this.#jitter !== null;
  }

  /** Waits 0…maxTurns microtask turns (seeded). */
  async delay(): Promise<void> {
    const turns = this.#jitter!.int(this.#jitterMax + 1);
    for (let i = 0; i < turns; i++) await Promise.resolve();
  }

  /** Rejects every call once the power is off. */
  check(action: string, path: string): void {
    if (this.poweredOff) throw fsError("EIO", action, path, "the simulated machine lost power");
  }

  /** Cuts the power now, crashing the disk if asked. */
  cut(crash: CrashOptions | undefined): CrashReport | null {
    this.poweredOff = true;
    this.cutAt = null;
    return crash === undefined ? null : this.crashDisk(crash);
  }

  /**
   * Counts a mutation through this boot, cuts the power instead of it if planned, then counts it
   * on the disk and returns the fault that fails it, if one is armed.
   */
  mutate(
    op: MutationOp,
    paths: readonly string[],
    action: string,
    detail = "",
  ): FaultEffect | null {
    this.check(action, paths[0]);
    this.mutations += 1;
    this.onMutation?.({ mutation: this.disk.mutationCount + 1, op, path: paths[0], detail });
    if (this.cutAt !== null && this.mutations >= this.cutAt) {
      const report = this.cut(this.crashAtCut);
      this.onPowerCut?.({ mutation: this.mutations, op, path: paths[0], report });
      this.check(action, paths[0]);
    }
    return this.disk.mutate(op, paths);
  }
}

function injected(effect: FaultEffect, action: string, path: string): FsError {
  return fsError(effect.code, action, path, "injected fault");
}

class MemoryFileHandle implements FileHandle {
  #closed = false;
  readonly #epoch: number;

  readonly disk: Disk;

  constructor(
    readonly boot: Boot,
    readonly node: FileNode,
    readonly path: string,
    readonly writable: boolean,
  ) {
    this.disk = boot.disk;
    this.#epoch = boot.disk.epoch;
  }

  #live(action: string): FileNode {
    if (this.#closed) throw fsError("EBADF", action, this.path, "file handle is closed");
    this.boot.check(action, this.path);
    if (this.#epoch !== this.disk.epoch)
      throw fsError("EIO", action, this.path, "file handle was opened before a simulated crash");
    return this.node;
  }

  async read(buf: Uint8Array, position: number): Promise<number> {
    if (this.boot.jittery) await this.boot.delay();
    const node = this.#live("read");
    checkPosition(position, "position", "read", this.path);
    return node.data.read(buf, position);
  }

  async write(bytes: Uint8Array, position: number): Promise<void> {
    if (this.boot.jittery) await this.boot.delay();
    const node = this.#live("write");
    if (!this.writable)
      throw fsError("EBADF", "write", this.path, "file handle is open for reading only");
    checkPosition(position, "position", "write", this.path);
    checkFileEnd(position + bytes.length, "write", this.path);
    const fault = this.boot.mutate(
      "write",
      [this.path],
      "write",
      ` ${bytes.length} bytes at ${position}`,
    );
    const length = fault ? Math.min(fault.partialBytes ?? 0, bytes.length) : bytes.length;
    if (length > 0) {
      const landed = bytes.slice(0, length);
      node.data.write(landed, position);
      node.log.push({ kind: "write", position, bytes: landed });
    }
    if (fault) throw injected(fault, "write", this.path);
  }

  async sync(): Promise<void> {
    if (this.boot.jittery) await this.boot.delay();
    const node = this.#live("sync");
    const fault = this.boot.mutate("sync", [this.path], "sync");
    if (fault) {
      // Linux marks the pages clean after a writeback error: they stay readable, never reach the disk.
      if (fault.dropDirtyData ?? this.disk.failedSyncDropsDirtyData) node.log = [];
      throw injected(fault, "sync", this.path);
    }
    for (const entry of node.log) {
      if (entry.kind === "write") node.durable.write(entry.bytes, entry.position);
      else node.durable.truncate(entry.length);
    }
    node.log = [];
  }

  async truncate(length: number): Promise<void> {
    if (this.boot.jittery) await this.boot.delay();
    const node = this.#live("truncate");
    if (!this.writable)
      throw fsError("EINVAL", "truncate", this.path, "file handle is open for reading only");
    checkPosition(length, "length", "truncate", this.path);
    checkFileEnd(length, "truncate", this.path);
    const fault = this.boot.mutate("truncate", [this.path], "truncate", ` to ${length}`);
    if (fault) throw injected(fault, "truncate", this.path);
    node.data.truncate(length);
    node.log.push({ kind: "truncate", length });
  }

  async size(): Promise<number> {
    if (this.boot.jittery) await this.boot.delay();
    return this.#live("size").data.size;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#epoch === this.disk.epoch) this.disk.openHandles -= 1;
  }
}

/** The path split into names, with "." and ".." resolved; null for the empty string. */
/** Longest name of one directory entry, in UTF-8 bytes (NAME_MAX on Linux and macOS). */
const nameBytesMax = 255;

/** Rejects a path with a name over {@link nameBytesMax} with ENAMETOOLONG, as a real file system does. */
function checkNameLengths(names: readonly string[], action: string, path: string): void {
  for (const name of names) {
    // A UTF-16 code unit is at most 3 UTF-8 bytes, so short names need no encoding.
    if (name.length > nameBytesMax / 3 && new TextEncoder().encode(name).length > nameBytesMax)
      throw fsError(
        "ENAMETOOLONG",
        action,
        path,
        `name too long: "${name.slice(0, 32)}…" is over ${nameBytesMax} bytes`,
      );
  }
}

function splitPath(path: string): string[] | null {
  if (path.length === 0) return null;
  const names: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") names.pop();
    else names.push(part);
  }
  return names;
}

/** A simulated, seeded, fault-injecting {@link FileSystem}; see the module comment for the model. */
export class MemoryFileSystem implements FileSystem {
  readonly #disk: Disk;
  readonly #prng: Prng;
  readonly #boot: Boot;

  /**
   * @param options seed (default 1), failed-fsync behaviour (default: drops dirty data), the disk
   * of another instance to boot from, power cut, callbacks and jitter (see the module comment).
   * @throws AssertionError on a `powerCutAtMutation` that is not a positive integer.
   */
  constructor(options: MemoryFileSystemOptions = {}) {
    if (options.disk !== undefined) {
      this.#prng = options.disk.#prng;
      this.#disk = options.disk.#disk;
    } else {
      this.#prng = new Prng(options.seed ?? 1);
      this.#disk = new Disk(options.failedSyncDropsDirtyData ?? true);
    }
    this.#boot = new Boot(this.#disk, options, (crash) => this.#crashDisk(crash));
  }

  /** Mutations attempted through this instance (not others on its disk), the one cut included. */
  get bootMutationCount(): number {
    return this.#boot.mutations;
  }

  /** True once this instance's power was cut (until {@link crash} is called on it). */
  get poweredOff(): boolean {
    return this.#boot.poweredOff;
  }

  /**
   * Plans a power cut `inMutations` mutations through this instance from now (1: the next one),
   * crashing the disk then with `crash` if given; replaces any earlier plan. `null` disarms it.
   * @throws AssertionError unless `inMutations` is a positive integer.
   */
  armPowerCut(plan: { inMutations: number; crash?: CrashOptions } | null): void {
    if (plan === null) {
      this.#boot.cutAt = null;
      return;
    }
    assert(
      Number.isInteger(plan.inMutations) && plan.inMutations >= 1,
      `inMutations must be a positive integer, got ${plan.inMutations}`,
    );
    this.#boot.cutAt = this.#boot.mutations + plan.inMutations;
    this.#boot.crashAtCut = plan.crash;
  }

  /**
   * Cuts this instance's power now, between two calls; with `crash`, the disk crashes too.
   * @returns the crash's report, or null without one.
   */
  cutPower(crash?: CrashOptions): CrashReport | null {
    return this.#boot.cut(crash);
  }

  /** The fault plan: arm faults with `failNext` / `failNth`, disarm with `clear`. */
  get faults(): MemoryFaults {
    return this.#disk.faults;
  }

  /** Mutations attempted since this file system was made (crashes do not reset it); see the module comment. */
  get mutationCount(): number {
    return this.#disk.mutationCount;
  }

  /** Handles opened and not yet closed since the last crash (for leak checks). */
  get openHandleCount(): number {
    return this.#disk.openHandles;
  }

  /** Walks to the directory holding the last name of `path`; ENAMETOOLONG, ENOENT / ENOTDIR on the way. */
  #parentOf(path: string, action: string): { dir: DirNode; name: string | null } {
    const names = splitPath(path);
    if (names === null) throw fsError("ENOENT", action, path, "empty path");
    checkNameLengths(names, action, path);
    let dir = this.#disk.root;
    for (let i = 0; i < names.length - 1; i++) {
      const next = dir.entries.get(names[i]);
      if (next === undefined) throw fsError("ENOENT", action, path, "no such file or directory");
      if (next.kind !== "dir") throw fsError("ENOTDIR", action, path, "not a directory");
      dir = next;
    }
    if (names.length === 0) return { dir, name: null };
    return { dir, name: names[names.length - 1] };
  }

  /** The node at `path`, or undefined if the last name is missing. */
  #lookup(path: string, action: string): Node | undefined {
    const { dir, name } = this.#parentOf(path, action);
    return name === null ? dir : dir.entries.get(name);
  }

  async open(path: string, options: OpenOptions = {}): Promise<FileHandle> {
    if (this.#boot.jittery) await this.#boot.delay();
    const create = options.create ?? false;
    const writable = create || (options.write ?? false);
    if (create) {
      const fault = this.#boot.mutate("create", [path], "open");
      if (fault) throw injected(fault, "open", path);
    } else {
      this.#boot.check("open", path);
    }
    const { dir, name } = this.#parentOf(path, "open");
    if (name === null) throw fsError("EISDIR", "open", path, "is a directory");
    let node = dir.entries.get(name);
    if (node === undefined) {
      if (!create) throw fsError("ENOENT", "open", path, "no such file or directory");
      node = new FileNode(this.#disk.nextId++);
      dir.entries.set(name, node);
    } else {
      if (create && options.exclusive) throw fsError("EEXIST", "open", path, "file already exists");
      if (node.kind === "dir") throw fsError("EISDIR", "open", path, "is a directory");
    }
    this.#disk.openHandles += 1;
    return new MemoryFileHandle(this.#boot, node, path, writable);
  }

  async readdir(path: string): Promise<string[]> {
    if (this.#boot.jittery) await this.#boot.delay();
    this.#boot.check("readdir", path);
    const node = this.#lookup(path, "readdir");
    if (node === undefined) throw fsError("ENOENT", "readdir", path, "no such file or directory");
    if (node.kind !== "dir") throw fsError("ENOTDIR", "readdir", path, "not a directory");
    return [...node.entries.keys()].sort();
  }

  async mkdir(path: string): Promise<void> {
    if (this.#boot.jittery) await this.#boot.delay();
    const fault = this.#boot.mutate("mkdir", [path], "mkdir");
    if (fault) throw injected(fault, "mkdir", path);
    const names = splitPath(path);
    if (names === null) throw fsError("ENOENT", "mkdir", path, "empty path");
    checkNameLengths(names, "mkdir", path);
    let dir = this.#disk.root;
    for (let i = 0; i < names.length; i++) {
      let next = dir.entries.get(names[i]);
      if (next === undefined) {
        next = new DirNode(this.#disk.nextId++);
        dir.entries.set(names[i], next);
      } else if (next.kind !== "dir") {
        if (i === names.length - 1)
          throw fsError("EEXIST", "mkdir", path, "a file exists at this path");
        throw fsError("ENOTDIR", "mkdir", path, "not a directory");
      }
      dir = next;
    }
  }

  async rename(from: string, to: string): Promise<void> {
    if (this.#boot.jittery) await this.#boot.delay();
    const fault = this.#boot.mutate("rename", [from, to], "rename", ` to ${to}`);
    if (fault) throw injected(fault, "rename", from);
    const source = this.#parentOf(from, "rename");
    const target = this.#parentOf(to, "rename");
    if (source.name === null || target.name === null)
      throw fsError("EBUSY", "rename", from, "cannot rename the root directory");
    const node = source.dir.entries.get(source.name);
    if (node === undefined) throw fsError("ENOENT", "rename", from, "no such file or directory");
    const replaced = target.dir.entries.get(target.name);
    if (replaced === node) return; // Same inode: POSIX says do nothing.
    if (node.kind === "dir") {
      if (replaced?.kind === "file")
        throw fsError("ENOTDIR", "rename", from, `"${to}" is not a directory`);
      if (replaced?.kind === "dir" && replaced.entries.size > 0)
        throw fsError("ENOTEMPTY", "rename", from, `"${to}" is not empty`);
      const fromNames = splitPath(from)!;
      const toNames = splitPath(to)!;
      if (toNames.length > fromNames.length && fromNames.every((n, i) => toNames[i] === n)) {
        throw fsError("EINVAL", "rename", from, `cannot move a directory into itself ("${to}")`);
      }
    } else if (replaced?.kind === "dir") {
      throw fsError("EISDIR", "rename", from, `"${to}" is a directory`);
    }
    source.dir.entries.delete(source.name);
    target.dir.entries.set(target.name, node);
    this.#disk.renameLinks.push([source.dir, source.name, target.dir, target.name]);
  }

  async unlink(path: string): Promise<void> {
    if (this.#boot.jittery) await this.#boot.delay();
    const fault = this.#boot.mutate("unlink", [path], "unlink");
    if (fault) throw injected(fault, "unlink", path);
    const { dir, name } = this.#parentOf(path, "unlink");
    if (name === null) throw fsError("EISDIR", "unlink", path, "is a directory");
    const node = dir.entries.get(name);
    if (node === undefined) throw fsError("ENOENT", "unlink", path, "no such file or directory");
    if (node.kind === "dir") throw fsError("EISDIR", "unlink", path, "is a directory");
    dir.entries.delete(name);
  }

  async removeTree(path: string): Promise<void> {
    if (this.#boot.jittery) await this.#boot.delay();
    const fault = this.#boot.mutate("removeTree", [path], "removeTree");
    if (fault) throw injected(fault, "removeTree", path);
    let parent: { dir: DirNode; name: string | null };
    // Like `rm -rf`: a missing path (or a missing parent) is already removed.
    try {
      parent = this.#parentOf(path, "removeTree");
    } catch (err) {
      if (err instanceof FsError && err.code === "ENOENT") return;
      throw err;
    }
    const node = parent.name === null ? parent.dir : parent.dir.entries.get(parent.name);
    if (node === undefined) return;
    // Empty every directory below (not just unhook the top), so that a crash before the parent's
    // syncDir can bring the tree back partly removed, as a real recursive removal can.
    const stack: Node[] = [node];
    while (stack.length > 0) {
      const next = stack.pop()!;
      if (next.kind !== "dir") continue;
      for (const child of next.entries.values()) stack.push(child);
      next.entries.clear();
    }
    if (parent.name !== null) parent.dir.entries.delete(parent.name);
  }

  async stat(path: string): Promise<FileStat | null> {
    if (this.#boot.jittery) await this.#boot.delay();
    this.#boot.check("stat", path);
    const node = this.#lookup(path, "stat");
    if (node === undefined) return null;
    if (node.kind === "dir") return { size: 0, isDirectory: true, mode: 0o700 };
    return { size: node.data.size, isDirectory: false, mode: 0o600 };
  }

  async syncDir(path: string): Promise<void> {
    if (this.#boot.jittery) await this.#boot.delay();
    const fault = this.#boot.mutate("syncDir", [path], "syncDir");
    if (fault) throw injected(fault, "syncDir", path);
    const node = this.#lookup(path, "syncDir");
    if (node === undefined) throw fsError("ENOENT", "syncDir", path, "no such file or directory");
    if (node.kind !== "dir") throw fsError("ENOTDIR", "syncDir", path, "not a directory");
    node.durableEntries = new Map(node.entries);
    // A link matters while either of its entries is pending; chains through a synced entry are
    // kept so that both ends of a rename chain still decide together.
    this.#disk.renameLinks = this.#disk.renameLinks.filter(
      ([a, an, b, bn]) => isPending(a, an) || isPending(b, bn),
    );
  }

  /**
   * Simulates power loss: this instance becomes the post-crash disk (see the module comment for what
   * survives), every handle opened before rejects with EIO, and every fault is disarmed. This
   * instance's power comes back on and its planned power cut is disarmed (the machine restarted);
   * other boots of the disk stay as they are.
   * @returns counts of what happened to the pending changes.
   */
  crash(options: CrashOptions = {}): CrashReport {
    const report = this.#crashDisk(options);
    this.#boot.poweredOff = false;
    this.#boot.cutAt = null;
    return report;
  }

  /** The crash itself, shared by {@link crash} and a power cut that crashes the disk. */
  #crashDisk(options: CrashOptions): CrashReport {
    const mode = options.mode ?? "random";
    const prng = new Prng(options.seed ?? this.#prng.nextU32());
    const report: CrashReport = {
      writesApplied: 0,
      writesDropped: 0,
      writesTorn: 0,
      truncatesApplied: 0,
      truncatesDropped: 0,
      entriesKept: 0,
      entriesReverted: 0,
    };

    // Entries joined by renames decide together: union-find over slot keys.
    const parent = new Map<string, string>();
    const find = (key: string): string => {
      let root = key;
      while (parent.has(root) && parent.get(root) !== root) root = parent.get(root)!;
      parent.set(key, root);
      return root;
    };
    for (const [a, an, b, bn] of this.#disk.renameLinks) {
      const ra = find(slotKey(a, an));
      const rb = find(slotKey(b, bn));
      if (ra !== rb) parent.set(rb, ra);
    }
    const groupKeeps = new Map<string, boolean>();
    const keepEntry = (dir: DirNode, name: string): boolean => {
      const group = find(slotKey(dir, name));
      let keep = groupKeeps.get(group);
      if (keep === undefined) {
        keep = mode === "keepAll" ? true : mode === "dropAll" ? false : prng.chance(0.5);
        groupKeeps.set(group, keep);
      }
      return keep;
    };

    const seenFiles = new Set<FileNode>();
    const seenDirs = new Set<DirNode>();
    const recoverFile = (file: FileNode): void => {
      if (seenFiles.has(file)) return;
      seenFiles.add(file);
      const content = file.durable.clone();
      for (const entry of file.log) {
        if (entry.kind === "truncate") {
          const apply = mode === "keepAll" || (mode === "random" && prng.chance(0.5));
          if (apply) content.truncate(entry.length);
          report[apply ? "truncatesApplied" : "truncatesDropped"] += 1;
          continue;
        }
        const length = entry.bytes.length;
        const choice = mode === "keepAll" ? 0 : mode === "dropAll" ? 1 : prng.int(3);
        if (choice === 0) {
          content.write(entry.bytes, entry.position);
          report.writesApplied += 1;
        } else if (choice === 2 && length >= 2) {
          content.write(entry.bytes.subarray(0, 1 + prng.int(length - 1)), entry.position);
          report.writesTorn += 1;
        } else {
          report.writesDropped += 1;
        }
      }
      file.durable = content;
      file.data = content.clone();
      file.log = [];
    };
    const recoverDir = (dir: DirNode): void => {
      const names = [...new Set([...dir.durableEntries.keys(), ...dir.entries.keys()])].sort();
      const entries = new Map<string, Node>();
      for (const name of names) {
        let node = dir.durableEntries.get(name);
        if (isPending(dir, name)) {
          const keep = keepEntry(dir, name);
          report[keep ? "entriesKept" : "entriesReverted"] += 1;
          if (keep) node = dir.entries.get(name);
        }
        if (node === undefined) continue;
        if (node.kind === "dir") {
          // A directory reachable twice (possible only through odd chains of unsynced renames)
          // keeps its first name, so the tree stays a tree.
          if (seenDirs.has(node)) continue;
          seenDirs.add(node);
        }
        entries.set(name, node);
      }
      dir.entries = entries;
      dir.durableEntries = new Map(entries);
      for (const node of entries.values()) {
        if (node.kind === "dir") recoverDir(node);
        else recoverFile(node);
      }
    };
    seenDirs.add(this.#disk.root);
    recoverDir(this.#disk.root);

    this.#disk.renameLinks = [];
    this.#disk.epoch += 1;
    this.#disk.openHandles = 0;
    this.#disk.faults.clear();
    return report;
  }

  /**
   * Test helper: the current bytes of the file at `path` (what reads see), as a copy. Not a mutation.
   * @throws FsError ENOENT if missing, EISDIR for a directory.
   */
  readFileSync(path: string): Uint8Array {
    const node = this.#lookup(path, "readFileSync");
    if (node === undefined)
      throw fsError("ENOENT", "readFileSync", path, "no such file or directory");
    if (node.kind === "dir") throw fsError("EISDIR", "readFileSync", path, "is a directory");
    return node.data.view().slice();
  }

  /**
   * Test helper for fixtures (a corrupt segment, a torn index): makes `path` a file holding exactly
   * `bytes`, durably, creating missing parent directories durably too. Open handles to an existing
   * file see the new bytes. Not a mutation; faults do not apply.
   * @throws FsError ENOTDIR / EISDIR if the path runs through or onto something else.
   */
  writeFileSync(path: string, bytes: Uint8Array): void {
    const names = splitPath(path);
    if (names === null || names.length === 0)
      throw fsError("EISDIR", "writeFileSync", path, "is a directory");
    let dir = this.#disk.root;
    for (let i = 0; i < names.length - 1; i++) {
      let next = dir.entries.get(names[i]);
      if (next === undefined) {
        next = new DirNode(this.#disk.nextId++);
        dir.entries.set(names[i], next);
        dir.durableEntries.set(names[i], next);
      }
      if (next.kind !== "dir") throw fsError("ENOTDIR", "writeFileSync", path, "not a directory");
      dir = next;
    }
    const name = names[names.length - 1];
    let node = dir.entries.get(name);
    if (node === undefined) {
      node = new FileNode(this.#disk.nextId++);
      dir.entries.set(name, node);
    }
    if (node.kind === "dir") throw fsError("EISDIR", "writeFileSync", path, "is a directory");
    dir.durableEntries.set(name, node);
    node.data = new Bytes(bytes.slice());
    node.durable = new Bytes(bytes.slice());
    node.log = [];
  }

  /**
   * Test helper: every path under `path` (default "/"), sorted, directories with a trailing "/",
   * e.g. `["/data/", "/data/a.log"]`. Reflects the current (volatile) tree.
   * @throws FsError ENOENT if `path` is missing, ENOTDIR if it is a file.
   */
  listTree(path = "/"): string[] {
    const node = this.#lookup(path, "listTree");
    if (node === undefined) throw fsError("ENOENT", "listTree", path, "no such file or directory");
    if (node.kind !== "dir") throw fsError("ENOTDIR", "listTree", path, "not a directory");
    const out: string[] = [];
    const walk = (dir: DirNode, prefix: string): void => {
      for (const name of [...dir.entries.keys()].sort()) {
        const child = dir.entries.get(name)!;
        if (child.kind === "dir") {
          out.push(`${prefix}${name}/`);
          walk(child, `${prefix}${name}/`);
        } else {
          out.push(`${prefix}${name}`);
        }
      }
    };
    const names = splitPath(path) ?? [];
    walk(node, names.length === 0 ? "/" : `/${names.join("/")}/`);
    return out;
  }
}
