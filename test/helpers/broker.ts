/**
 * A broker for tests, closed when the test finishes: `openTestBroker()` opens a
 * {@link LocalBroker} on a fresh simulated disk at `/data` with a manual clock and a memory
 * logger, unless the test hands in its own (a real file system and a temporary directory, a disk
 * it crashes, a clock it drives). Every broker it opens is closed after the test, before the
 * temporary directories the test made earlier are removed; a close that fails fails the test. A
 * broker the test abandons (a simulated crash: the disk it ran on is crashed and reopened) is
 * passed to {@link abandonTestBroker} so that it never touches that disk again.
 */
import { onTestFinished } from "vitest";
import { LocalBroker, type LocalBrokerOptions } from "../../src/broker/broker.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { type Clock, ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";

/** {@link LocalBrokerOptions}, every field optional; the defaults are in {@link openTestBroker}. */
export type TestBrokerOptions = Partial<Omit<LocalBrokerOptions, "logger" | "clock">> & {
  clock?: Clock;
  logger?: MemoryLogger;
};

/** A broker opened by {@link openTestBroker}, with what it runs on. */
export interface TestBroker<C extends Clock = ManualClock> {
  broker: LocalBroker;
  fs: FileSystem;
  dataDir: string;
  clock: C;
  logger: MemoryLogger;
}

const abandoned = new WeakSet<LocalBroker>();

/** Leaves `broker` as it is after the test, never closed: a process that died. */
export function abandonTestBroker(broker: LocalBroker): void {
  abandoned.add(broker);
}

/**
 * Opens a broker, closed when the current test finishes. Defaults: `fs` a new
 * {@link MemoryFileSystem}, `dataDir` "/data", `clock` a new {@link ManualClock}, `logger` a new
 * {@link MemoryLogger}; every other option is LocalBroker's own default. Call it inside a test.
 * @throws whatever {@link LocalBroker.open} throws (nothing is registered then).
 */
export async function openTestBroker<C extends Clock = ManualClock>(
  options: TestBrokerOptions & { clock?: C } = {},
): Promise<TestBroker<C>> {
  const fs = options.fs ?? new MemoryFileSystem();
  const dataDir = options.dataDir ?? "/data";
  const clock = (options.clock ?? new ManualClock()) as C;
  const logger = options.logger ?? new MemoryLogger();
  const broker = await LocalBroker.open({ ...options, fs, dataDir, clock, logger });
  onTestFinished(async () => {
    if (!abandoned.has(broker)) await broker.close();
  });
  return { broker, fs, dataDir, clock, logger };
}
