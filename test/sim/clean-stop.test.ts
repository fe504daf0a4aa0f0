/**
 * The clean-stop record under power cuts (docs/storage.md "Clean stop"; docs/decisions.md §17):
 * power lost before each mutation of a broker's clean close, and before each mutation of the
 * start that consumes the record, in every crash mode, with the active segment's last record
 * intact or damaged after the stop. After every cut the next start serves every acknowledged
 * record it can, never gives an offset that a record held to another one once the record was
 * durable, and reads a damaged tail as corruption exactly when the record is there.
 */
import { describe, expect, it } from "vitest";
import { MemoryFileSystem, type CrashMode } from "../../src/fs/memory.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { LocalBroker } from "../../src/broker/broker.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor } from "../../src/storage/record.ts";
import { cleanStopFileName } from "../../src/storage/clean-stop.ts";
import { fetchAll } from "../helpers/records.ts";

const crashModes: { mode: CrashMode; seed: number }[] = [
  { mode: "random", seed: 1 },
  { mode: "random", seed: 2 },
  { mode: "dropAll", seed: 0 },
  { mode: "keepAll", seed: 0 },
];

const dataDir = "/data";
const dir = `${dataDir}/topics/t/0`;
const recordPath = `${dataDir}/${cleanStopFileName}`;
/** Records acknowledged before the stop, one request each; segments roll every few. */
const count = 12;

function open(fs: MemoryFileSystem, logger = new MemoryLogger()): Promise<LocalBroker> {
  return LocalBroker.open({ fs, dataDir, clock: new ManualClock(), logger });
}

async function produce(broker: LocalBroker, value: string): Promise<number> {
  const r = await broker.produce({
    topic: "t",
    partition: 0,
    batch: new EntryBatchBuilder().add(null, utf8(value)).build(),
  });
  return r.spans[0].baseOffset;
}

/** A disk whose topic "t" holds `count` acknowledged records, and the open broker (not closed). */
async function written(): Promise<{
  mem: MemoryFileSystem;
  boot: MemoryFileSystem;
  broker: LocalBroker;
}> {
  const mem = new MemoryFileSystem({ seed: 1 });
  const boot = new MemoryFileSystem({ disk: mem });
  const broker = await open(boot);
  await broker.createTopic({ name: "t", partitions: 1, config: { segment_bytes: 1024 } });
  for (let i = 0; i < count; i++)
    expect(await produce(broker, `record-${i}-${"x".repeat(200)}`)).toBe(i);
  return { mem, boot, broker };
}

/** True if the data directory holds the clean-stop record. */
async function hasCleanStop(mem: MemoryFileSystem): Promise<boolean> {
  return (await mem.stat(recordPath)) !== null;
}

/** The newest segment log in the partition directory. */
async function activeLog(mem: MemoryFileSystem): Promise<string> {
  const logs = (await mem.readdir(dir)).filter((n) => n.endsWith(".log")).sort();
  return `${dir}/${logs.at(-1)}`;
}

/** Flips one bit of the last record's value in the active log (zeros written ahead stay). */
async function damageLastRecord(mem: MemoryFileSystem): Promise<void> {
  const path = await activeLog(mem);
  const bytes = mem.readFileSync(path).slice();
  const cursor = new RecordCursor().reset(bytes);
  let valueStart = -1;
  for (let p = 0; p < bytes.length && cursor.decode(p) === DecodeStatus.Ok; p += cursor.sizeBytes)
    valueStart = cursor.valueStart;
  expect(valueStart).toBeGreaterThan(0);
  bytes[valueStart + 2] ^= 0x01;
  mem.writeFileSync(path, bytes);
}

/**
 * Starts on `mem` and checks the outcome: with `damaged`, record count−1 is lost and its offset
 * is never reused if the start saw a durable clean-stop record (`cleanStop`), else cut as torn;
 * the next append gets the offset that follows.
 */
async function expectStart(
  mem: MemoryFileSystem,
  options: { damaged: boolean; cleanStop: boolean; what: string },
): Promise<void> {
  const logger = new MemoryLogger();
  const broker = await open(new MemoryFileSystem({ disk: mem }), logger);
  const values = new Map((await fetchAll(broker, "t")).map((r) => [r.offset, r.value]));
  const kept = options.damaged ? count - 1 : count;
  const expected = new Map(
    Array.from({ length: kept }, (_, i) => [i, `record-${i}-${"x".repeat(200)}`]),
  );
  expect(values, options.what).toEqual(expected);
  expect(await hasCleanStop(mem), `${options.what}: the record is consumed`).toBe(false);
  const corrupt = logger.named("recovery.corrupt_segment").length;
  const torn = logger.named("recovery.torn_tail_cut").length;
  if (!options.damaged) expect([corrupt, torn], options.what).toEqual([0, 0]);
  else if (options.cleanStop) expect([corrupt, torn], options.what).toEqual([1, 0]);
  else expect([corrupt, torn], options.what).toEqual([0, 1]);
  const next = options.damaged && !options.cleanStop ? count - 1 : count;
  expect(await produce(broker, "after"), options.what).toBe(next);
  await broker.close();
}

describe("clean-stop record under power cuts (docs/decisions.md §17)", () => {
  it("power lost before each mutation of a clean close: the next start reads a damaged tail as corruption exactly when the record is durable", async () => {
    const probe = await written();
    const before = probe.boot.bootMutationCount;
    await probe.broker.close();
    const closeMutations = probe.boot.bootMutationCount - before;
    expect(closeMutations).toBeGreaterThanOrEqual(5); // the record: create, write, sync, rename, syncDir
    let recorded = 0;
    for (let k = 1; k <= closeMutations + 1; k++) {
      for (const { mode, seed } of crashModes) {
        for (const damaged of [false, true]) {
          const { mem, boot, broker } = await written();
          boot.armPowerCut({ inMutations: k, crash: { seed, mode } });
          const closed = await broker.close().then(
            () => true,
            () => false,
          );
          if (closed) mem.crash({ seed, mode }); // power lost right after the close resolved
          const cleanStop = await hasCleanStop(mem);
          if (k > closeMutations)
            expect(cleanStop, "a finished close leaves the record").toBe(true);
          if (cleanStop) recorded++;
          if (damaged) await damageLastRecord(mem);
          await expectStart(mem, {
            damaged,
            cleanStop,
            what: `power lost before close mutation ${k} (${mode} ${seed}), damaged ${damaged}`,
          });
        }
      }
    }
    expect(recorded).toBeGreaterThan(0);
  });

  it("power lost before each mutation of the start that consumes the record: the next start still never reuses the damaged record's offset", async () => {
    const stopped = async (damaged: boolean): Promise<MemoryFileSystem> => {
      const { mem, broker } = await written();
      await broker.close();
      mem.crash({ mode: "dropAll", seed: 0 }); // only what is durable
      if (damaged) await damageLastRecord(mem);
      return mem;
    };
    for (const damaged of [false, true]) {
      const probeDisk = await stopped(damaged);
      const probe = new MemoryFileSystem({ disk: probeDisk });
      await (await open(probe)).close();
      // Opening plus the close's own mutations bound the start's.
      const mutations = probe.bootMutationCount;
      for (let k = 1; k <= mutations + 1; k++) {
        for (const { mode, seed } of crashModes) {
          const mem = await stopped(damaged);
          const boot = new MemoryFileSystem({
            disk: mem,
            powerCutAtMutation: k,
            crashAtPowerCut: { seed, mode },
          });
          const broker = await open(boot).catch(() => null);
          if (broker !== null) {
            // Started: power lost before it closed (or during the close).
            boot.armPowerCut({ inMutations: 1, crash: { seed, mode } });
            await broker.close().catch(() => {});
          }
          mem.crash({ seed, mode });
          const what = `power lost before start mutation ${k} (${mode} ${seed}), damaged ${damaged}`;
          // The damage was seen after a clean stop at least once: it stays corruption (the
          // damaged segment is sealed, or the record is still there), never a torn tail.
          await expectStart(mem, { damaged, cleanStop: true, what });
        }
      }
    }
  });
});
