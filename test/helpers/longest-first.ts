/**
 * The order vitest starts test files in (vitest.config.ts, `sequence.sequencer`): within each
 * group (`sequence.groupOrder`), the files known to take longest first, so that the group's
 * workers finish together instead of one of them starting a minute-long file last. vitest's own
 * order keeps each project's files together in project-name order and, on a clean clone (no
 * results cache), in discovery order: in `npm test` the Node target's longest files came last.
 * Files not in {@link expectedSeconds} keep vitest's order, after the listed ones. The figures
 * only order files; a stale one makes a run slower, never wrong.
 */
import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Seconds a file took in a clean-clone `npm test` on 2 vCPUs, for the files of 8 s or more,
 * keyed `project:path` where one target differs from the others, else by path.
 */
export const expectedSeconds: Readonly<Record<string, number>> = {
  "test/e2e/kafka-scenarios.test.ts": 71,
  "test/e2e/cluster.test.ts": 60,
  "test/cluster/jepsen.test.ts": 57,
  "test/bench/quick.test.ts": 48,
  "test/e2e/durable-streams-scenarios.test.ts": 47,
  "test/e2e/cluster-state.test.ts": 37,
  "test/e2e/durable-streams-conformance.test.ts": 34,
  "test/e2e/cluster-attack.test.ts": 34,
  "test/integration/etcd-watch-failover.test.ts": 31,
  "test/e2e/tls.test.ts": 28,
  "test/e2e/cli.test.ts": 28,
  "test/cluster/metrics-failover.test.ts": 27,
  "test/e2e/cli-commands.test.ts": 25,
  // Estimated: half its 2026-12-02 figure, for half the rounds.
  "e2e:node:test/e2e/idempotent.test.ts": 25,
  // Estimated: a third of their 2026-12-02 figures, for a third of the seeds (seeds.ts).
  "test/sim/sim-b.test.ts": 24,
  "test/sim/sim-a.test.ts": 21,
  "test/e2e/cluster-tls.test.ts": 21,
  "test/e2e/cluster-lease.test.ts": 20,
  "test/e2e/mirror-upstream.test.ts": 18,
  "test/e2e/auth.test.ts": 17,
  "test/e2e/groups.test.ts": 17,
  "test/e2e/runtime.test.ts": 16,
  "e2e:deno:test/e2e/idempotent.test.ts": 15,
  "test/e2e/openapi.test.ts": 15,
  "test/e2e/http-keep-alive.test.ts": 14,
  "test/e2e/console.test.ts": 13,
  "e2e:bun:test/e2e/idempotent.test.ts": 13,
  "test/e2e/cluster-etcd-tls.test.ts": 13,
  "test/integration/replication.test.ts": 13,
  "test/e2e/registry.test.ts": 12,
  "test/cold/s3-store.test.ts": 12,
  "test/sim/preallocation.test.ts": 12,
  "test/e2e/cold-storage.test.ts": 11,
  "test/e2e/idempotent.test.ts": 11,
  "test/e2e/kafka.test.ts": 11,
  "test/e2e/prometheus.test.ts": 11,
  "test/unit/kafka-transport.test.ts": 11,
  "test/e2e/check.test.ts": 10,
  "test/e2e/core.test.ts": 10,
  "test/e2e/mirror.test.ts": 10,
  "test/e2e/durable-streams.test.ts": 9,
  "test/e2e/hostile.test.ts": 9,
  "test/integration/metrics-exposition.test.ts": 8,
};

/** {@link expectedSeconds} of one file of one project (0 when not listed). */
export function expectedSecondsOf(project: string, path: string): number {
  return expectedSeconds[`${project}:${path}`] ?? expectedSeconds[path] ?? 0;
}

/** vitest's sequencer, with the longest files of each group first (module comment). */
export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const root = this.ctx.config.root;
    const weight = (file: TestSpecification) =>
      expectedSecondsOf(file.project.name, relative(root, file.moduleId));
    // Array.prototype.sort is stable: files of equal weight keep vitest's order.
    return [...sorted].sort(
      (a, b) =>
        a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder ||
        weight(b) - weight(a),
    );
  }
}
