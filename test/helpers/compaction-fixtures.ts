import { LocalBroker, type LocalBrokerOptions } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileHandle, FileStat, FileSystem, OpenOptions } from "../../src/fs/types.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";

/** One record to produce: key null = no key; value "" = a tombstone when keyed; ts −1 = broker clock. */
export interface Rec {
  key: string | null;
  value: string;
  ts?: number;
}

/** A broker on `fs` at /data with no background cleanup unless `cleanupIntervalMs` is given. */
export async function openBroker(
  fs: FileSystem,
  clock: ManualClock,
  extra: Partial<LocalBrokerOptions> = {},
): Promise<{ broker: LocalBroker; logger: MemoryLogger }> {
  const logger = (extra.logger as MemoryLogger | undefined) ?? new MemoryLogger();
  const broker = await LocalBroker.open({
    fs,
    dataDir: "/data",
    clock,
    logger,
    cleanupIntervalMs: 0,
    ...extra,
  });
  return { broker, logger };
}

/** Produces `records` to partition 0 of `topic` in one request; returns the base offset. */
export async function produce(
  broker: LocalBroker,
  topic: string,
  records: readonly Rec[],
): Promise<number> {
  const b = new EntryBatchBuilder();
  for (const r of records) b.add(r.key === null ? null : utf8(r.key), utf8(r.value), r.ts ?? -1);
  const result = await broker.produce({ topic, partition: 0, batch: b.build() });
  return result.spans[0].baseOffset;
}

/** The code of a BrokerError a promise rejects with. */
export async function rejectionCode(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof BrokerError) return err.kind.code;
    throw err;
  }
  throw new Error("expected a rejection");
}

/** Files under a directory of a MemoryFileSystem with their bytes, for before/after comparisons. */
export function snapshotFiles(fs: MemoryFileSystem, dir: string): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  for (const path of fs.listTree(dir))
    if (!path.endsWith("/")) out.set(path, fs.readFileSync(path));
  return out;
}

/** Names in a partition directory that belong to an unfinished swap. */
export function swapLeftovers(fs: MemoryFileSystem, dir: string): string[] {
  return fs
    .listTree(dir)
    .filter(
      (p) => p.endsWith(".cleaned") || p.endsWith("compaction.marker") || p.endsWith(".partial"),
    );
}

export { ManualClock, MemoryFileSystem };
export { decodeRecords, fetchAll, type ReadRecord } from "./records.ts";

/**
 * A FileSystem over another that can hold reads at a gate: {@link hold} holds the next `count`
 * reads of matching paths (later reads pass), {@link waiting} resolves once all of them are held,
 * {@link release} lets them go.
 */
export class GatedFs implements FileSystem {
  #pattern: RegExp | null = null;
  #remaining = 0;
  #gate: Promise<void> = Promise.resolve();
  #open: () => void = () => {};
  #arrived: () => void = () => {};
  /** Resolves when the reads asked for by {@link hold} are held. */
  waiting: Promise<void> = Promise.resolve();
  constructor(readonly inner: FileSystem) {}

  hold(pattern: RegExp, count = 1): void {
    this.#pattern = pattern;
    this.#remaining = count;
    this.#gate = new Promise((resolve) => (this.#open = resolve));
    this.waiting = new Promise((resolve) => (this.#arrived = resolve));
  }

  release(): void {
    this.#pattern = null;
    this.#open();
  }

  async open(path: string, options?: OpenOptions): Promise<FileHandle> {
    const handle = await this.inner.open(path, options);
    const self = this;
    return {
      async read(buf, position) {
        if (self.#pattern !== null && self.#remaining > 0 && self.#pattern.test(path)) {
          const gate = self.#gate;
          if (--self.#remaining === 0) self.#arrived();
          await gate;
        }
        return handle.read(buf, position);
      },
      write: (bytes, position) => handle.write(bytes, position),
      sync: () => handle.sync(),
      truncate: (length) => handle.truncate(length),
      size: () => handle.size(),
      close: () => handle.close(),
    };
  }
  readdir(path: string): Promise<string[]> {
    return this.inner.readdir(path);
  }
  mkdir(path: string): Promise<void> {
    return this.inner.mkdir(path);
  }
  rename(from: string, to: string): Promise<void> {
    return this.inner.rename(from, to);
  }
  unlink(path: string): Promise<void> {
    return this.inner.unlink(path);
  }
  removeTree(path: string): Promise<void> {
    return this.inner.removeTree(path);
  }
  stat(path: string): Promise<FileStat | null> {
    return this.inner.stat(path);
  }
  syncDir(path: string): Promise<void> {
    return this.inner.syncDir(path);
  }
}
