// `npm run sim -- --seed N` replays one seed of the crash-safety simulation, printing what happened;
// `npm run sim -- --seeds 100000` is the long run. Node 20 cannot run .ts files, so this bundles
// test/sim/cli.ts into a temporary .mjs, runs it with the same arguments, and removes it.
import { importBundled, withBundle } from "./bundle.mjs";

await withBundle({ sim: "test/sim/cli.ts" }, "es-broker-sim-", (out) => importBundled(out, "sim"));
