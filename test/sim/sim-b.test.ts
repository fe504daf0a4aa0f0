/**
 * Crash-safety simulation, second half of the normal suite's seeds (see sim-a.test.ts).
 * Replay a failing seed with `npm run sim -- --seed N`.
 */
import { describeSeeds } from "./seeds.ts";

describeSeeds(1);
