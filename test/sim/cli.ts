/**
 * The replay command of the crash-safety simulation:
 *
 *   npm run sim -- --seed N          replays seed N, printing every step, fault, crash and check
 *   npm run sim -- --seed N --fs     … and every disk mutation
 *   npm run sim -- --seeds 100000    runs seeds 1…100000 (the long run), printing failures
 *   npm run sim -- --seeds 500 --from 7000
 *   npm run sim -- --countdown       runs the countdown sweep (countdown.ts)
 *   npm run sim -- --countdown --variant 1 --n 30 --after 2   replays one run of it, with its trace
 *
 * Node 20 cannot run .ts files, so `scripts/sim.mjs` bundles this file with esbuild into a
 * temporary .mjs and runs it; Deno and Bun can run it directly (`bun test/sim/cli.ts --seed 7`).
 * Exit status: 0 if every seed passed, 1 otherwise.
 */
import { parseArgs } from "node:util";
import { runSimulation, SimFailure } from "./harness.ts";
import { runCountdown, countdownVariants } from "./countdown.ts";

const usage =
  "usage: npm run sim -- --seed N [--fs] | --seeds COUNT [--from FIRST] | --countdown [--variant V --n N --after A]";

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      seed: { type: "string" },
      seeds: { type: "string" },
      from: { type: "string" },
      steps: { type: "string" },
      countdown: { type: "boolean" },
      variant: { type: "string" },
      n: { type: "string" },
      after: { type: "string" },
      fs: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const steps = values.steps === undefined ? undefined : positive("--steps", values.steps);
  if (values.countdown) {
    let failed = 0;
    const only =
      values.n === undefined
        ? undefined
        : {
            n: positive("--n", values.n),
            after: values.after === undefined ? 0 : integer("--after", values.after),
          };
    const variants =
      values.variant === undefined
        ? countdownVariants
        : [countdownVariants[integer("--variant", values.variant)]];
    for (const variant of variants) {
      if (variant === undefined)
        throw new Error(`--variant must be 0…${countdownVariants.length - 1}\n${usage}`);
      const result = await runCountdown({ variant, only, log: (line) => console.log(line) }).catch(
        (err: unknown) => {
          failed++;
          console.log(err instanceof Error ? err.message : String(err));
          return null;
        },
      );
      if (result)
        console.log(
          `countdown ${variant.name}: ${result.runs} runs over ${result.mutations} mutations passed`,
        );
    }
    return failed === 0 ? 0 : 1;
  }
  if (values.seed !== undefined) {
    const seed = integer("--seed", values.seed);
    try {
      const summary = await runSimulation({
        seed,
        steps,
        log: (line) => console.log(line),
        logMutations: values.fs ?? false,
      });
      console.log(`seed=${seed} passed: ${JSON.stringify(summary)}`);
      return 0;
    } catch (err) {
      console.log(err instanceof SimFailure ? err.stack : String(err));
      return 1;
    }
  }
  const count = values.seeds === undefined ? 100 : positive("--seeds", values.seeds);
  const from = values.from === undefined ? 1 : integer("--from", values.from);
  const started = performance.now();
  let failed = 0;
  const totals: Record<string, number> = {};
  for (let seed = from; seed < from + count; seed++) {
    try {
      const summary = await runSimulation({ seed, steps });
      for (const [key, value] of Object.entries(summary))
        if (key !== "seed") totals[key] = (totals[key] ?? 0) + value;
    } catch (err) {
      failed++;
      console.log(err instanceof Error ? err.message.split("\n")[0] : String(err));
    }
    const done = seed - from + 1;
    if (done % 1000 === 0)
      console.log(
        `… ${done} seeds, ${failed} failed, ${((performance.now() - started) / 1000).toFixed(0)} s`,
      );
  }
  console.log(`totals over the passing seeds: ${JSON.stringify(totals)}`);
  console.log(
    `${count - failed} passed, ${failed} failed (seeds ${from}…${from + count - 1}, ${((performance.now() - started) / 1000).toFixed(1)} s)`,
  );
  return failed === 0 ? 0 : 1;
}

function integer(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n))
    throw new Error(`${flag} must be an integer, got "${text}"\n${usage}`);
  return n;
}

function positive(flag: string, text: string): number {
  const n = integer(flag, text);
  if (n < 1) throw new Error(`${flag} must be at least 1, got "${text}"\n${usage}`);
  return n;
}

process.exitCode = await main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  return 2;
});
