/**
 * The benchmark harness cannot rot: `bench/run.mjs --quick` runs a tiny version of every case
 * against the built broker (`npm test` builds dist/ first) and this test checks that every case
 * produced figures. It asserts that the harness measured, never how fast: speed is the full
 * run's business (`npm run bench`, docs/benchmarks.md). Peers that are not installed are skipped
 * by the harness with a note; es-broker, the in-process disk limit and the Kafka listener's cases
 * (kcat and kafkajs next to TCP) always run.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { quickPeerPoint, type BenchReport, type CaseResult } from "../../bench/harness.ts";
import {
  benchRuntimes,
  fanoutKey,
  fanoutKinds,
  fanoutReaders,
  runtimeKey,
  runtimeShapes,
} from "../../bench/http-cases.ts";
import { tempDir } from "../helpers/tmp.ts";

const root = resolve(import.meta.dirname, "../..");

/** The case ids the quick run must report for each system (es-broker: the full matrix; peers: the quick points). */
function expectedIds(): Record<
  "es-broker" | "limit" | "loopback" | "redis" | "nats" | "ds",
  string[]
> {
  const produce: string[] = [];
  const peerProduce: string[] = [];
  const point = (b: number, p: number, parts: number) => {
    produce.push(`produce b=${b} P=${p} parts=${parts}`);
    if (quickPeerPoint(p, parts)) peerProduce.push(`produce b=${b} P=${p} parts=${parts}`);
  };
  for (const b of [1, 10, 100, 1000])
    for (const p of [1, 8, 64]) for (const parts of [1, 4]) point(b, p, parts);
  point(100, 50, 1);
  const fetch = ["fetch b=1000 C=1 parts=1", "fetch b=1000 C=4 parts=4"];
  const e2e = "e2e b=1 P=1 parts=1";
  return {
    "es-broker": [
      ...produce.flatMap((k) => [
        `${k} es-broker/tcp`,
        `${k} es-broker/http-json`,
        `${k} es-broker/http-ndjson`,
      ]),
      ...peerProduce.map((k) => `${k} es-broker/durable-streams`),
      // The idempotent producer, one batch in flight and four (issue #22's "Large batches").
      "produce b=1000 P=1 parts=1 es-broker/tcp-idempotent",
      "produce b=1000 P=1 parts=1 es-broker/tcp-inflight4",
      ...fetch.flatMap((k) => [
        `${k} es-broker/tcp`,
        `${k} es-broker/http-json`,
        `${k} es-broker/http-base64`,
        `${k} es-broker/http-ndjson`,
        `${k} es-broker/http-ndjson-base64`,
      ]),
      `${e2e} es-broker/tcp`,
      `${e2e} es-broker/http-ndjson`,
      // What keys and TLS cost: each variant in two rounds (openssl is installed on these machines).
      ...["plain", "key", "key+tls"].flatMap((v) =>
        [1, 2].flatMap((r) => [
          `auth b=1 P=64 parts=1 ${v} r${r} es-broker/tcp`,
          `auth b=100 P=50 parts=1 ${v} r${r} es-broker/http-json`,
        ]),
      ),
      ...kafkaIds,
      ...fanoutIds,
      ...runtimeIds,
    ],
    limit: [
      ...[1, 10, 100, 1000].flatMap((b) =>
        [1, 8, 64].map((p) => `limit b=${b} P=${p} limit/in-process`),
      ),
      "limit b=100 P=50 limit/in-process",
    ],
    // The loopback ceiling (a bare socket round trip, no broker), next to each one-producer case.
    loopback: [1, 10, 100, 1000].map((b) => `loopback b=${b} P=1 loopback/tcp`),
    redis: [
      ...peerProduce.map((k) => `${k} redis/resp`),
      ...fetch.map((k) => `${k} redis/resp`),
      `${e2e} redis/resp`,
    ],
    nats: peerProduce.map((k) => `${k} nats/nats`),
    ds: peerProduce.map((k) => `${k} ds/http`),
  };
}

/** The Kafka listener's cases (kcat and kafkajs) and their TCP counterparts, two rounds each. */
const kafkaIds = [1, 2].flatMap((r) => [
  `kafka b=1000 P=1 parts=1 kcat r${r} es-broker/kafka-kcat`,
  `kafka b=1000 P=1 parts=1 tcp-paced r${r} es-broker/tcp`,
  `kafka b=1000 P=1 parts=1 tcp r${r} es-broker/tcp`,
  `kafka b=100 P=8 parts=1 kafkajs r${r} es-broker/kafka-kafkajs`,
  `kafka b=100 P=8 parts=1 tcp-paced r${r} es-broker/tcp`,
  `kafka b=100 P=8 parts=1 tcp r${r} es-broker/tcp`,
]);

/** Issue #22's fan-out cases (one round in quick runs; the producer's figure is over TCP). */
const fanoutIds = fanoutKinds.map((k) => `${fanoutKey(k, fanoutReaders(true), 1)} es-broker/tcp`);

/** 64 × 1 and 1 × 1 over TCP and HTTP JSON against a broker on each runtime (one round). */
const runtimeIds = runtimeShapes.flatMap((shape) =>
  benchRuntimes.flatMap((rt) =>
    ["tcp", "http-json"].map((t) => `${runtimeKey(shape, rt, 1)} es-broker/${t}`),
  ),
);

function expectMeasured(c: CaseResult): void {
  expect(c.requests, c.id).toBeGreaterThan(0);
  expect(c.records, c.id).toBeGreaterThan(0);
  expect(c.seconds, c.id).toBeGreaterThan(0);
  expect(c.recordsPerSec, c.id).toBeGreaterThan(0);
  expect(c.payloadMBps, c.id).toBeGreaterThan(0);
  expect(c.latencyMs.count, c.id).toBeGreaterThan(0);
  expect(c.latencyMs.p50, c.id).toBeGreaterThan(0);
  expect(c.latencyMs.p99, c.id).toBeGreaterThanOrEqual(c.latencyMs.p50);
  expect(c.latencyMs.max, c.id).toBeGreaterThanOrEqual(c.latencyMs.p99);
}

describe("benchmark harness, quick run", () => {
  it("measures every case: records/s, MB/s, latencies, fsyncs and RSS for es-broker, the disk limit and each installed peer", {
    timeout: 300_000,
  }, () => {
    expect(
      existsSync(join(root, "dist/es-broker.mjs")),
      "dist/es-broker.mjs exists (npm test builds it)",
    ).toBe(true);
    const { dir, cleanup } = tempDir("es-bench-quick-");
    try {
      const jsonPath = join(dir, "quick.json");
      const run = spawnSync(
        process.execPath,
        [join(root, "bench/run.mjs"), "--quick", "--json", jsonPath],
        {
          cwd: root,
          encoding: "utf8",
          timeout: 280_000,
        },
      );
      expect(run.status, `harness output:\n${run.stdout}\n${run.stderr}`).toBe(0);
      const report = JSON.parse(readFileSync(jsonPath, "utf8")) as BenchReport;
      expect(report.quick).toBe(true);
      expect(report.failures).toEqual([]);

      const byId = new Map(report.cases.map((c) => [c.id, c]));
      const skipped = new Set(report.skipped.map((s) => s.system));
      const expected = expectedIds();
      for (const [system, ids] of Object.entries(expected)) {
        if (skipped.has(system)) {
          // A skipped peer is named with its reason and has no cases at all.
          expect(report.skipped.find((s) => s.system === system)!.reason.length).toBeGreaterThan(0);
          expect(report.cases.filter((c) => c.system === system)).toEqual([]);
          continue;
        }
        for (const id of ids) {
          const c = byId.get(id);
          expect(c, `case "${id}" was measured`).toBeDefined();
          expectMeasured(c!);
          if (system !== "limit")
            expect(c!.serverRssPeakMiB, `${id} server RSS`).toBeGreaterThan(0);
          if (c!.group === "produce" && (system === "es-broker" || system === "limit")) {
            expect(c!.fsyncsPerSec, `${id} fsyncs/s`).toBeGreaterThan(0);
            expect(c!.recordsPerFsync, `${id} records per fsync`).toBeGreaterThan(0);
          }
        }
      }
      expect(skipped.has("es-broker")).toBe(false);
      expect(skipped.has("limit")).toBe(false);

      // The Kafka cases measured the broker's CPU per record and its fsyncs (kcat is never
      // skipped: the setup installs it or the run fails).
      expect(report.servers.kcat, "kcat's version is in the report").toMatch(/^kcat \d+\.\d+/);
      for (const id of kafkaIds) {
        const c = byId.get(id)!;
        expect(c.serverCpuUsPerRecord, `${id} broker CPU per record`).toBeGreaterThan(0);
        expect(c.recordsPerFsync, `${id} records per fsync`).toBeGreaterThan(0);
      }

      // The fan-out readers received records (every reader, while the producer wrote), in
      // answers counted, each record's delivery timed.
      for (const id of fanoutIds.filter((i) => !i.includes("readers=none"))) {
        const c = byId.get(id)!;
        expect(c.readerRecordsPerSec?.min, `${id}: the slowest reader's records/s`).toBeGreaterThan(
          0,
        );
        expect(c.readerRecordsPerAnswer, `${id}: records per reader answer`).toBeGreaterThan(0);
        expect(c.deliveryLatencyMs?.count, `${id}: delivery latency samples`).toBeGreaterThan(0);
      }

      // The soak case samples the broker's RSS over its window.
      const soak = report.cases.find((c) => c.group === "soak");
      expect(soak).toBeDefined();
      expectMeasured(soak!);
      expect(soak!.rssSamplesMiB!.length).toBeGreaterThan(1);

      // The growth cases (bench/growth.ts) at small scale: partitions with a producer each, idle
      // connections, and a start-up over sealed segments followed by a read of every one of them.
      for (const id of [
        "growth parts=4 P=4 b=1 es-broker/tcp",
        "growth conns=20 P=1 b=1 es-broker/tcp",
      ]) {
        const c = byId.get(id);
        expect(c, `case "${id}" was measured`).toBeDefined();
        expectMeasured(c!);
        expect(c!.serverRssPeakMiB, `${id} server RSS`).toBeGreaterThan(0);
        expect(c!.rssIdleMiB, `${id} RSS at rest`).toBeGreaterThan(0);
        expect(c!.serverFds, `${id} open fds`).toBeGreaterThan(0);
      }
      expect(byId.get("growth parts=4 P=4 b=1 es-broker/tcp")!.restartMs).toBeGreaterThan(0);
      const startup = report.growthStartup!;
      expect(startup, "the start-up case measured").toBeTruthy();
      expect(startup.sealedSegments).toBe(20);
      expect(startup.startMs).toBeGreaterThan(0);
      expect(startup.emptyStartMs).toBeGreaterThan(0);
      expect(startup.fdsAfterStart).toBeGreaterThan(0);
      expect(startup.fdsAfterReadingAll).toBeGreaterThan(0);
      expect(run.stdout).toContain("### Growth: start-up over 20 sealed segments");

      // Every target of the issue is evaluated: met or not, or null where it needs a peer figure
      // (quick runs measure peers at fewer points).
      expect(report.targets).toHaveLength(21);
      for (const t of report.targets) {
        if (!/Redis|Durable Streams/.test(t.name)) expect(t.met, t.name).not.toBeNull();
      }
      expect(run.stdout).toContain("### Targets");
    } finally {
      cleanup();
    }
  });
});
