/**
 * Runs a range of simulation seeds as vitest tests, in chunks of 100: one test per chunk (about
 * 3 s of CPU; the timeout leaves room for a loaded machine), so a failure report lists every
 * failing seed of its chunk with its replay command, and the first one's trace. The normal suite splits its seeds over two files so vitest runs them on both
 * cores; `SIM_SEEDS=N` changes how many seeds each file runs (e.g. `SIM_SEEDS=10 npx vitest run
 * test/sim` for a quick look), and `npm run sim -- --seeds 100000` is the long run.
 */
import { describe, it } from "vitest";
import { runSimulation, SimFailure } from "./harness.ts";

const chunk = 100;

/** Declares the tests for seeds `from` … `from + count − 1` (count overridable with SIM_SEEDS). */
export function describeSeeds(from: number, defaultCount: number): void {
  const count = process.env.SIM_SEEDS === undefined ? defaultCount : Number(process.env.SIM_SEEDS);
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
