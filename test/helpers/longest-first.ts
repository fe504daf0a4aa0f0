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
  "e2e:node:test/e2e/idempotent.test.ts": 120,
  "test/e2e/idempotent.test.ts": 20,
  "test/e2e/durable-streams-conformance.test.ts": 82,
  "test/e2e/kafka-scenarios.test.ts": 75,
  "test/sim/sim-a.test.ts": 63,
  "test/sim/sim-b.test.ts": 60,
  "test/cluster/jepsen.test.ts": 58,
  "test/e2e/durable-streams-scenarios.test.ts": 48,
  "test/bench/quick.test.ts": 46,
  "test/e2e/cluster.test.ts": 45,
  "test/integration/etcd-watch-failover.test.ts": 32,
  "test/integration/replication.test.ts": 14,
  "test/e2e/tls.test.ts": 25,
  "test/e2e/cli-commands.test.ts": 24,
  "test/e2e/cluster-attack.test.ts": 22,
  "test/e2e/cold-storage.test.ts": 20,
  "test/e2e/cluster-lease.test.ts": 20,
  "test/e2e/openapi.test.ts": 19,
  "test/cluster/metrics-failover.test.ts": 19,
  "test/e2e/cluster-state.test.ts": 18,
  "test/e2e/auth.test.ts": 16,
  "test/e2e/cluster-tls.test.ts": 16,
  "test/e2e/cli.test.ts": 15,
  "test/e2e/core.test.ts": 14,
  "test/e2e/mirror.test.ts": 14,
  "test/e2e/registry.test.ts": 12,
  "test/e2e/cluster-etcd-tls.test.ts": 12,
  "test/e2e/groups.test.ts": 12,
  "test/e2e/check.test.ts": 11,
  "test/e2e/prometheus.test.ts": 11,
  "test/e2e/kafka.test.ts": 11,
  "test/e2e/runtime.test.ts": 10,
  "test/e2e/cold-multipart.test.ts": 12,
  "test/e2e/console.test.ts": 11,
  "test/sim/countdown.test.ts": 11,
  "test/unit/kafka-transport.test.ts": 11,
  "test/e2e/mirror-upstream.test.ts": 10,
  "test/cold/s3-store.test.ts": 10,
  "test/sim/producer-crash.test.ts": 10,
  "test/bench/metrics.test.ts": 10,
  "test/integration/etcd-client.test.ts": 9,
  "test/e2e/durable-streams.test.ts": 9,
  "test/e2e/hostile.test.ts": 8,
  "test/e2e/mirror-group.test.ts": 8,
  "test/integration/metrics-exposition.test.ts": 8,
  "test/sim/preallocation.test.ts": 8,
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
