/**
 * Crash-safety simulation, first half of the normal suite's seeds (seeds.ts). See harness.ts for what one
 * seed does and model.ts for the invariants. A failure prints `seed=N`; replay it with
 * `npm run sim -- --seed N` (scripts/sim.mjs bundles test/sim/cli.ts with esbuild, because
 * Node 20 cannot run .ts files, and prints every step, fault, crash and check; add `--fs` for
 * every disk mutation).
 */
import { describeSeeds } from "./seeds.ts";

describeSeeds(0);
