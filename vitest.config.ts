import { configDefaults, defineConfig } from "vitest/config";
import { e2eTargets } from "./test/e2e/targets.ts";

// One project ("default") for everything but the end-to-end suite, and one project per runtime target of
// the end-to-end suite (test/e2e/targets.ts): the same scenarios run against the Node bundle,
// Deno, Bun and the compiled binary, each told its command through ES_BROKER_CMD. One target:
// `npx vitest run --project e2e:deno`. `npm test` builds dist/ first (the binary once per run).
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    projects: [
      {
        extends: true as const,
        test: {
          name: "default",
          include: ["test/**/*.test.ts"],
          // The quick bench (test/bench/quick.test.ts) runs kcat: installed here or the run fails.
          globalSetup: ["test/e2e/kafka-tools.ts"],
          exclude: [...configDefaults.exclude, "test/e2e/**"],
        },
      },
      ...e2eTargets().map((target) => ({
        extends: true as const,
        test: {
          name: `e2e:${target.name}`,
          include: [
            "test/e2e/*.test.ts",
            ...(target.name === "binary" ? ["test/e2e/binary/*.test.ts"] : []),
          ],
          // The Durable Streams conformance suite (~340 tests, minutes) runs on the node target;
          // ES_BROKER_STREAMS_CONFORMANCE=all adds the others (docs/durable-streams.md). Left out
          // rather than skipped, so a run's skipped count means only what the suite skips itself.
          exclude: [
            ...configDefaults.exclude,
            ...(target.name === "node" || process.env.ES_BROKER_STREAMS_CONFORMANCE === "all"
              ? []
              : ["test/e2e/durable-streams-conformance.test.ts"]),
            // Cluster mode is runtime-neutral above the runtime layer: the node target covers it.
            ...(target.name === "node" ? [] : ["test/e2e/cluster.test.ts"]),
          ],
          globalSetup: ["test/e2e/global-setup.ts", "test/e2e/kafka-tools.ts"],
          setupFiles: ["test/e2e/openapi-setup.ts"],
          env: { ES_BROKER_TARGET: target.name, ES_BROKER_CMD: JSON.stringify(target.command) },
        },
      })),
    ],
  },
});
