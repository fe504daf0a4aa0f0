/**
 * The follower's fetch loop (cluster/follower.ts) against a scripted leader connection: it sends
 * its copy's topic id (docs/cluster.md "Topic ids"), falls back to fetching without one from a
 * leader that answers `unsupported_api` (an older es-broker), and a refusal that persists is
 * logged again every `fetchFailureRelogMs`, not once (attack15b F5: "logged once, then silent").
 */
import { describe, expect, it } from "vitest";
import type { ReplicaFetchResult } from "../../src/broker/types.ts";
import { Follower, type ReplicaFetchConnection } from "../../src/cluster/follower.ts";
import { type Clock, ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import type { ReplicaFetchRequestFields } from "../../src/protocol/apis/replica-fetch.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { waitFor } from "../helpers/replication.ts";

const topicId = "0123456789abcdef0123456789abcdef";

const emptyAnswer: ReplicaFetchResult = {
  leaderEpoch: 0,
  highWatermark: 0,
  logStartOffset: 0,
  logEndOffset: 0,
  diverging: null,
  epochs: [],
  producers: [],
  records: { bytes: new Uint8Array(0), count: 0 },
};

/** A connection whose every fetch `answer` decides (after a short real pause, so no loop spins). */
function scripted(answer: (request: ReplicaFetchRequestFields) => Promise<ReplicaFetchResult>) {
  const requests: ReplicaFetchRequestFields[] = [];
  const connection: ReplicaFetchConnection = {
    async replicaFetch(request) {
      requests.push(request);
      await new Promise((r) => setTimeout(r, 2));
      return answer(request);
    },
    async close() {},
  };
  return { connection, requests };
}

async function follower(
  connection: ReplicaFetchConnection,
  clock: Clock,
  extra: { fetchFailureRelogMs?: number; leaderChangeQuietMs?: number } = {},
) {
  const t = await openTestBroker({ cleanupIntervalMs: 0 });
  await t.broker.createTopic({ name: "f", partitions: 1, topic_id: topicId });
  const logger = new MemoryLogger();
  const f = new Follower({
    topic: "f",
    partition: 0,
    nodeId: 2,
    incarnation: "i",
    leaderId: 1,
    leaderEpoch: 0,
    log: t.broker.partitionLog("f", 0),
    history: await t.broker.openLeaderEpochHistory("f", 0),
    producers: t.broker.producerStates,
    connect: () => connection,
    credential: new Uint8Array(0),
    topicId: () => t.broker.topicId("f"),
    clock,
    prng: new Prng(1),
    logger,
    maxBytes: 1024,
    waitMs: 0,
    onHighWatermark: () => {},
    ...extra,
  });
  return { f, logger };
}

describe("follower: topic ids in replica fetches", () => {
  it("sends its copy's topic id, and none from then on to a leader that answers unsupported_api", async () => {
    const { connection, requests } = scripted(async (request) => {
      if (request.topicId !== undefined)
        throw Object.assign(new Error("Cannot serve api 14 version 2"), {
          code: "unsupported_api",
        });
      return emptyAnswer;
    });
    const { f, logger } = await follower(connection, systemClock);
    f.start();
    await waitFor(() => requests.length >= 3, "three fetches");
    await f.stop();
    expect(requests[0].topicId).toBe(topicId);
    expect(requests.slice(1).every((r) => r.topicId === undefined)).toBe(true);
    expect(logger.named("replication.leader_without_topic_ids")).toEqual([
      { partition: "f/0", leader: 1 },
    ]);
    expect(logger.named("replication.fetch_failed")).toEqual([]);
  });
});

describe("follower: a refusal that persists", () => {
  it("a leader change (not_leader) is info while young and one warn once it lasts (newuser18 F8)", async () => {
    const clock = new ManualClock();
    const refusals = [
      'Cannot serve partition "f/0" on node 1: this broker is leaving the cluster (shutting down)',
      'Cannot serve partition "f/0" on node 1: it has no leader now',
    ];
    let n = 0;
    const { connection, requests } = scripted(async () => {
      throw Object.assign(new Error(refusals[Math.min(n++, 1)]), { code: "not_leader" });
    });
    const { f, logger } = await follower(connection, clock, {
      fetchFailureRelogMs: 300_000,
      leaderChangeQuietMs: 15_000,
    });
    f.start();
    const levels = () =>
      logger.events.filter((e) => e.event === "replication.fetch_failed").map((e) => e.level);
    const advance = async (toMs: number) => {
      for (let ms = 0; ms < toMs; ms += 500) {
        const before = requests.length;
        clock.advance(500);
        if (requests.length === before) await new Promise((r) => setTimeout(r, 5));
      }
    };
    await waitFor(() => levels().length === 1, "the first line");
    // The first seconds: a leaving leader, then no leader (each message logged once), at info.
    await advance(5_000);
    await waitFor(() => levels().length === 2, "two lines");
    expect(levels()).toEqual(["info", "info"]);
    await advance(15_000);
    await waitFor(() => levels().length === 3, "the warning");
    await new Promise((r) => setTimeout(r, 20));
    await f.stop();
    expect(levels()).toEqual(["info", "info", "warn"]);
    const warned = logger.named("replication.fetch_failed")[2];
    expect(warned.no_leader_for_ms).toBeGreaterThanOrEqual(15_000);
  });

  it("is logged when it appears and again every fetchFailureRelogMs with how long it has lasted", async () => {
    const clock = new ManualClock();
    const refusal = 'Cannot serve a replica fetch of partition "f/0": it does not know epoch 2 yet';
    const { connection, requests } = scripted(async () => {
      throw Object.assign(new Error(refusal), { code: "not_leader" });
    });
    const { f, logger } = await follower(connection, clock, {
      fetchFailureRelogMs: 10_000,
      leaderChangeQuietMs: 60_000,
    });
    f.start();
    await waitFor(() => logger.named("replication.fetch_failed").length === 1, "the first line");
    // 25 s of retries (backoff at most 1.2 s each), every retry refused the same way.
    for (let ms = 0; ms < 25_000; ms += 500) {
      const before = requests.length;
      clock.advance(500);
      if (requests.length === before) await new Promise((r) => setTimeout(r, 5));
    }
    await waitFor(() => logger.named("replication.fetch_failed").length === 3, "two more lines");
    await new Promise((r) => setTimeout(r, 20));
    await f.stop();
    const lines = logger.named("replication.fetch_failed");
    expect(requests.length).toBeGreaterThan(10);
    expect(lines).toHaveLength(3);
    expect(lines[0]).toEqual({ partition: "f/0", leader: 1, error: refusal });
    expect(lines[1]).toMatchObject({ error: refusal });
    expect(lines[1].failing_for_ms).toBeGreaterThanOrEqual(10_000);
    expect(lines[2].failing_for_ms).toBeGreaterThanOrEqual(20_000);
  });
});
