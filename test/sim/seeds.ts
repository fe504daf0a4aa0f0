/**
 * Runs a range of simulation seeds as vitest tests, in chunks of 100: one test per chunk (about
 * 4 s of CPU; the timeout leaves room for a loaded machine), so a failure report lists every
 * failing seed of its chunk with its replay command, and the first one's trace. `npm test` runs
 * seeds 1…{@link defaultSeeds}, split over two files (sim-a, sim-b) so vitest runs them on both
 * cores. `SIM_SEEDS=N` changes that total, each file keeping its half of 1…N: e.g.
 * `SIM_SEEDS=10 npx vitest run test/sim` for a quick look, `SIM_SEEDS=3000 npx vitest run
 * test/sim/sim-a.test.ts test/sim/sim-b.test.ts` for the 3000 seeds `npm test` ran until
 * 2026-12, and `npm run sim -- --seeds 100000` is the long run (the same seeds, the same checks).
 */
import { describe, it } from "vitest";
import { runSimulation, SimFailure } from "./harness.ts";

const chunk = 100;

/**
 * Seeds `npm test` runs over both files. Each seed costs about 40 ms of CPU; the countdown sweep
 * (countdown.test.ts) covers every disk mutation deterministically beside them, and the long runs
 * above take the seeds beyond.
 */
export const defaultSeeds = 1000;

/**
 * Declares the tests for half `half` (0: the first, 1: the second) of seeds 1…N, N being
 * `SIM_SEEDS` or {@link defaultSeeds}.
 */
export function describeSeeds(half: 0 | 1): void {
  const total = process.env.SIM_SEEDS === undefined ? defaultSeeds : Number(process.env.SIM_SEEDS);
  const firstHalf = Math.ceil(total / 2);
  const from = half === 0 ? 1 : firstHalf + 1;
  const count = half === 0 ? firstHalf : total - firstHalf;
  describe(`simulation seeds ${from}…${from + count - 1}: crashes and faults at seeded points, then recovery`, () => {
    for (let first = from; first < from + count; first += chunk) {
      const last = Math.min(from + count, first + chunk) - 1;
      it(`keeps every invariant of model.ts for seeds ${first}…${last}`, async () => {
        const failures: SimFailure[] = [];
        for (let seed = first; seed <= last; seed++) {
          try {
            await runSimulation({ seed });
          } catch (err) {
            if (!(err instanceof SimFailure)) throw err;
            failures.push(err);
          }
        }
        if (failures.length > 0) {
          const list = failures
            .map((f) => `  ${f.message.split("\n")[0]}  →  npm run sim -- --seed ${f.seed}`)
            .join("\n");
          throw new Error(
            `${failures.length} of ${last - first + 1} seeds failed:\n${list}\n\nFirst failure:\n${failures[0].message}`,
          );
        }
      }, 300_000);
    }
  });
}
