import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";
import { e2eTargets, nodeOnlyE2eFiles, serialE2eFiles } from "./test/e2e/targets.ts";
import { LongestFirstSequencer } from "./test/helpers/longest-first.ts";

// One project ("default") for everything but the end-to-end suite, and one project per runtime target of
// the end-to-end suite (test/e2e/targets.ts): the same scenarios run against the Node bundle,
// Deno, Bun and the compiled binary, each told its command through ES_BROKER_CMD. One target:
// `npx vitest run --project e2e:deno`. `npm test` builds dist/ first (the binary once per run).
//
// Files run in parallel: most of the suite waits (fsync, sockets, child processes), so on a
// 2-vCPU machine three workers keep both vCPUs busy where two left about a fifth of them idle
// (the clean-clone run of 2026-12-02 14:09: 25 CPU-minutes in 15.8 minutes). The benchmarks run
// there too: they assert that they measured, never how fast. The files whose assertions lean on
// timing under faults (etcd leases, SIGSTOP, signals, the Jepsen run, replication) run
// afterwards, four at a time and beside nothing else: their own projects `default-serial` and
// `e2e:<target>-serial` (`sequence.groupOrder` 1). Each of them mostly waits (for leases,
// elections, scheduled faults): one at a time they kept about a third of one vCPU busy and
// three at a time about one of the two, far from loading the machine as the parallel files
// (each starting processes of its own) do.
// Within each group the longest files start first (test/helpers/longest-first.ts), so that the
// workers finish together. When vitest is started with `--project`, the named projects keep all
// their files and run them one at a time as before, so
// `npx vitest run --project e2e:node test/e2e/cluster.test.ts` finds the file; name a `-serial`
// project (`--project default-serial`) to get the split.

/** Files of the default project that run in the serial group (see above). */
const serialFiles = [
  // The bounded Jepsen run: its faults are timed against etcd leases and broker timeouts.
  "test/cluster/jepsen.test.ts",
  // Scrapes every 200 ms across a leader SIGKILL and a broker restart (field failures #29d).
  "test/cluster/metrics-failover.test.ts",
  // Replication under SIGSTOP-like stalls, lease expiry and follower catch-up deadlines.
  "test/integration/replication.test.ts",
  // Real etcd: leases, elections, members killed or stopped (SIGSTOP) against deadlines.
  "test/integration/cluster-*.test.ts",
  "test/integration/etcd-*.test.ts",
];

/** The vitest `--project` values this run was started with (none: the whole suite). */
function projectFilters(argv: readonly string[]): string[] {
  const named: string[] = [];
  argv.forEach((arg, i) => {
    if (arg === "--project" && argv[i + 1] !== undefined) named.push(argv[i + 1] as string);
    else if (arg.startsWith("--project=")) named.push(arg.slice("--project=".length));
  });
  return named;
}

const named = projectFilters(process.argv);
/** Parallel workers with serial projects, or each project on its own as vitest has it. */
const split = named.length === 0 || named.some((name) => name.endsWith("-serial"));
/** Workers of the parallel projects: 3 on the 2-vCPU machine `npm test` must suit, more on more. */
const parallelWorkers = Math.max(3, availableParallelism() - 1);
/** Workers of the serial projects, all together (one vitest group; see above). */
const serialWorkers = 4;

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    sequence: { sequencer: LongestFirstSequencer },
    ...(split ? { maxWorkers: parallelWorkers } : {}),
    projects: [
      {
        extends: true as const,
        test: {
          name: "default",
          include: ["test/**/*.test.ts"],
          // The quick bench (test/bench/quick.test.ts) runs kcat: installed here or the run fails.
          globalSetup: ["test/e2e/kafka-tools.ts"],
          exclude: [...configDefaults.exclude, "test/e2e/**", ...(split ? serialFiles : [])],
        },
      },
      ...(split
        ? [
            {
              extends: true as const,
              test: {
                name: "default-serial",
                include: serialFiles,
                maxWorkers: serialWorkers,
                sequence: { groupOrder: 1 },
              },
            },
          ]
        : []),
      ...e2eTargets().flatMap((target) => {
        const project = (name: string, include: string[], exclude: string[]) => ({
          extends: true as const,
          test: {
            name,
            include,
            // Scenario files of the broker's own logic run on the node target only (targets.ts,
            // `nodeOnlyE2eFiles`): left out rather than skipped, so a run's skipped count means
            // only what a suite skips itself.
            exclude: [...configDefaults.exclude, ...nodeOnlyE2eFiles(target.name), ...exclude],
            globalSetup: [
              "test/e2e/global-setup.ts",
              "test/e2e/kafka-tools.ts",
              // Compiles the OpenAPI validators openapi-setup.ts checks every answer with.
              "test/e2e/openapi-validators.ts",
            ],
            setupFiles: ["test/e2e/openapi-setup.ts"],
            env: { ES_BROKER_TARGET: target.name, ES_BROKER_CMD: JSON.stringify(target.command) },
          },
        });
        const all = [
          "test/e2e/*.test.ts",
          ...(target.name === "binary" ? ["test/e2e/binary/*.test.ts"] : []),
        ];
        if (!split) return [project(`e2e:${target.name}`, all, [])];
        const serial = serialE2eFiles().filter((f) => !nodeOnlyE2eFiles(target.name).includes(f));
        const parallel = project(`e2e:${target.name}`, all, serial);
        if (serial.length === 0) return [parallel];
        const alone = project(`e2e:${target.name}-serial`, serial, []);
        return [
          parallel,
          {
            ...alone,
            test: { ...alone.test, maxWorkers: serialWorkers, sequence: { groupOrder: 1 } },
          },
        ];
      }),
    ],
  },
});
