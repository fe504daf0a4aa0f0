/**
 * The countdown sweep: a small fixed workload (start, create a topic of two partitions with
 * 1 KiB segments, produce requests alone and concurrently so group commits and rolls happen, a
 * request spanning both partitions), run once without faults to count its mutations M, then
 * once for every N in 1…M with the Nth mutation failing — whatever it is: a create, a log or
 * index write, an fsync, a directory fsync, a rename of topic.json, a truncate — and after each
 * run a clean restart, or a crash (random, seeded by N; or dropping everything unsynced), then
 * recovery and the full checks of `model.ts`. In the run itself, right after the fault, the
 * fenced rules are checked: a fenced partition refuses appends and still serves what it
 * acknowledged, the other partitions accept appends.
 */
import { Simulation, SimFailure, drainMicrotasks } from "./harness.ts";
import type { CrashMode } from "../../src/fs/memory.ts";

/** How the Nth mutation fails. */
export interface CountdownVariant {
  name: string;
  code: string;
  /** For a write: bytes that land before the failure. */
  partialBytes?: number;
  /** For an fsync: whether the dirty pages are lost (default: yes). */
  dropDirtyData?: boolean;
}

/** The fault flavours the sweep runs. */
export const countdownVariants: readonly CountdownVariant[] = [
  { name: "EIO", code: "EIO" },
  { name: "ENOSPC after 200 bytes", code: "ENOSPC", partialBytes: 200 },
  { name: "EIO, a failed fsync keeps the dirty pages", code: "EIO", dropDirtyData: false },
];

/** What follows the faulty run. */
export type CountdownAfter = { kind: "restart" } | { kind: "crash"; mode: CrashMode; seed: number };

const afters: readonly CountdownAfter[] = [
  { kind: "restart" },
  { kind: "crash", mode: "random", seed: 1 },
  { kind: "crash", mode: "random", seed: 2 },
  { kind: "crash", mode: "dropAll", seed: 0 },
];

function newSimulation(log?: (line: string) => void): Simulation {
  return new Simulation({
    seed: 1,
    steps: 0,
    log,
    config: {
      partitionCount: 2,
      segmentBytes: 1024,
      segmentMs: undefined,
      flushEveryRecords: 1,
      jitterMax: 0,
      failedSyncDropsDirtyData: true,
    },
  });
}

/** The fixed workload. Stops early (quietly) when the start or the topic creation fails. */
async function workload(sim: Simulation): Promise<void> {
  if (!(await sim.openBroker()) || sim.broker === null) return;
  if (!(await sim.createTopic("cd", 2))) return;
  await sim.produceConcurrently("cd", [[0, 0, 0]]);
  await sim.produceConcurrently("cd", [[1, 1]]);
  await sim.produceConcurrently("cd", [
    [0, 0, 0, 0],
    [0, 0],
    [1, 1, 1],
  ]);
  await sim.produceConcurrently("cd", [[0, 0, 0, 0, 0]]);
  await sim.produceConcurrently("cd", [[0, 1, 0, 1], [0]]);
  await sim.produceConcurrently("cd", [[1, 1, 1, 1, 1, 1], [1]]);
}

/**
 * Runs the sweep for one fault flavour.
 * @returns the number of runs and the workload's mutation count.
 * @throws SimFailure naming N, the flavour and what followed.
 */
export async function runCountdown(options: {
  variant: CountdownVariant;
  /** Receives the trace of the runs picked by `only`. */
  log?: (line: string) => void;
  /** Runs only this N and this follow-up (an index into the restart / crash list), with a trace. */
  only?: { n: number; after: number };
}): Promise<{ runs: number; mutations: number }> {
  const base = newSimulation();
  await workload(base);
  const mutations = base.mem.mutationCount;
  let runs = 0;
  for (let n = 1; n <= mutations; n++) {
    for (let a = 0; a < afters.length; a++) {
      if (options.only && (options.only.n !== n || options.only.after !== a)) continue;
      const after = afters[a];
      const sim = newSimulation(options.only ? options.log : undefined);
      try {
        sim.mem.faults.failNth({
          n,
          code: options.variant.code,
          partialBytes: options.variant.partialBytes,
          dropDirtyData: options.variant.dropDirtyData,
        });
        await workload(sim);
        await drainMicrotasks();
        if (sim.broker !== null) await sim.afterStep();
        sim.mem.faults.clear();
        if (after.kind === "restart") {
          if (sim.broker !== null) await sim.closeBroker("restart after the countdown");
          sim.fs.cutPower();
        } else {
          sim.fs.cutPower({ seed: n * 1000 + after.seed, mode: after.mode });
          sim.trace(`POWER LOSS (${after.mode}, seed ${n * 1000 + after.seed})`);
        }
        sim.broker = null;
        if (!(await sim.openBroker())) throw new Error("the start after the countdown died");
        await sim.verifyAfterRecovery();
        // Recovery left every partition able to take durable appends.
        const before = sim.model.requests.length;
        await sim.produceConcurrently("cd", [[0], [1]]);
        for (const r of sim.model.requests.slice(before)) {
          if (r.status !== "acked")
            throw new Error(`an append to cd/${r.partition} after recovery was not acknowledged`);
        }
        sim.fs.cutPower({ seed: n, mode: "dropAll" });
        sim.trace("POWER LOSS (dropAll) after appends that followed recovery");
        sim.broker = null;
        if (!(await sim.openBroker())) throw new Error("the second start after the countdown died");
        await sim.verifyAfterRecovery();
        await sim.closeBroker("end");
      } catch (err) {
        const label = `countdown n=${n} of ${mutations} (${options.variant.name}; then ${after.kind === "restart" ? "a clean restart" : `a ${after.mode} crash, seed ${n * 1000 + after.seed}`})`;
        const failure = new SimFailure(1, err, sim.traceTail());
        const variant = countdownVariants.indexOf(options.variant);
        const replay = `npm run sim -- --countdown --variant ${variant} --n ${n} --after ${a}`;
        failure.message = `${label}: ${failure.message.replace(/^seed=1 failed: /, "").replace(/npm run sim -- --seed 1/, replay)}`;
        throw failure;
      }
      runs++;
    }
  }
  return { runs, mutations };
}
