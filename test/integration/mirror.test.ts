/**
 * The mirror's exactly-once rules (src/mirror/mirror.ts, decision table) with two in-process
 * brokers, the upstream served over real TCP: a batch the upstream stored but the edge never
 * committed (a crash between the two) is answered from the upstream's producer state, whatever
 * the new batch size, so nothing is stored twice; records retention deleted before they were
 * forwarded stop the partition with a gap error instead of being skipped.
 */
import { describe, expect, it, onTestFinished } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import type { Broker, ProduceRequest, ProduceResult } from "../../src/broker/types.ts";
import { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { parseHostPort } from "../../src/client/cluster.ts";
import { bytesEqual, utf8 } from "../../src/lib/bytes.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { Mirror, type MirrorOptions } from "../../src/mirror/mirror.ts";
import type { Logger } from "../../src/lib/logger.ts";
import { MetricsRegistry } from "../../src/lib/metrics.ts";
import { openTestBroker, type TestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { serveTcp } from "../helpers/front-doors.ts";
import { fetchAll } from "../helpers/records.ts";

async function produce(
  broker: LocalBroker,
  partition: number,
  from: number,
  count: number,
): Promise<void> {
  const b = new EntryBatchBuilder();
  for (let i = from; i < from + count; i++)
    b.add(utf8(`k${i % 5}`), utf8(`v-${partition}-${i}`), 1_700_000_000_000 + i);
  await broker.produce({ topic: "t", partition, batch: b.build() });
}

async function until(
  check: () => Promise<boolean>,
  what: string,
  withinMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function sameLogs(
  edge: LocalBroker,
  central: LocalBroker,
  partition: number,
): Promise<boolean> {
  const a = await fetchAll(edge, "t", 0, { partition });
  const b = await fetchAll(central, "t", 0, { partition }).catch(() => null);
  if (b === null) return false;
  return (
    a.length === b.length &&
    a.every((r, i) => r.offset === b[i].offset && bytesEqual(r.bytes, b[i].bytes))
  );
}

/** A broker on the real clock ({@link openTestBroker}: in memory, closed after the test). */
const realBroker = () => openTestBroker({ clock: realClock });

/** A TCP client to `address` ("host:port"), closed when the test finishes. */
async function clientTo(address: string): Promise<TcpClient> {
  const client = await TcpClient.connect(parseHostPort(address));
  onTestFinished(() => client.close());
  return client;
}

/**
 * `broker` as node `nodeId` of cluster "c1" (Metadata version 1: no produceTo): `produce` in
 * place of its own if given, and its cluster metadata `metadata()`'s (default: no brokers, no
 * topics).
 */
function asNode(
  broker: LocalBroker,
  nodeId: number,
  produce?: (request: ProduceRequest) => Promise<ProduceResult>,
  metadata?: () => Promise<unknown>,
): LocalBroker {
  const none = async () => ({
    cluster_id: "c1",
    node_id: nodeId,
    controller: 1,
    brokers: [],
    topics: [],
  });
  return new Proxy(broker, {
    get(target, prop) {
      if (prop === "produce" && produce !== undefined) return produce;
      if (prop === "produceTo") return undefined;
      if (prop === "clusterMetadata") return metadata ?? none;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

/**
 * A mirror of `edge` (what {@link openTestBroker} opened) on the real clock, named "test",
 * forwarding topic "t" with producer ids from "0123456789abcdef"; `options` add to or replace these.
 */
function edgeMirror(
  edge: Pick<TestBroker, "broker" | "fs" | "dataDir"> & { logger: Logger },
  options: Partial<MirrorOptions> & Pick<MirrorOptions, "connect">,
): Mirror {
  return new Mirror({
    ...edge,
    clock: realClock,
    name: "test",
    topics: ["t"],
    randomHex: () => "0123456789abcdef",
    ...options,
  });
}

describe("the mirror", () => {
  it("sends a partition to the broker an upstream cluster's not_leader names, checked, and says when it cannot", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: a } = await realBroker();
    const { broker: b } = await realBroker();
    const { broker: stranger } = await realBroker();
    for (const broker of [edge, a, b, stranger])
      await broker.createTopic({ name: "t", partitions: 2 });
    const leaderB = await serveTcp(asNode(b, 2));
    // A broker outside the cluster, which a wrong --advertise-tcp could name.
    const outsider = await serveTcp(stranger);
    // Broker A (the --mirror-to one, node 1) leads partition 0 only. For partition 1 it answers
    // not_leader: first with no leader (an election), then naming the outsider as node 2, then B.
    let phase: "electing" | "wrong" | "right" = "electing";
    const upstreamA = await serveTcp(
      asNode(a, 1, (request) =>
        request.partition === 1
          ? Promise.reject(
              new BrokerError(
                Errors.notLeader,
                'Cannot produce to "t/1": this broker does not lead it',
                phase === "electing"
                  ? undefined
                  : {
                      leader: 2,
                      leader_tcp: `127.0.0.1:${(phase === "wrong" ? outsider : leaderB).port}`,
                    },
              ),
            )
          : a.produce(request),
      ),
    );
    for (const p of [0, 1]) await produce(edge, p, 0, 30);
    const connectedTo: string[] = [];
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        connect: upstreamA.connect,
        connectTo: async (address) => {
          connectedTo.push(address);
          return clientTo(address);
        },
        batchRecords: 10,
        recordsPerSecond: 0,
        rescanMs: 50,
      },
    );
    await mirror.start();
    await until(
      async () =>
        (await sameLogs(edge, a, 0)) && logger.named("mirror.upstream_not_leader").length > 0,
      "partition 0 on A, and the warning for partition 1",
    );
    expect(logger.named("mirror.upstream_not_leader")).toMatchObject([
      { mirror: "test", topic: "t", partition: 1 },
    ]);
    phase = "wrong";
    await until(
      async () => logger.named("mirror.upstream_leader_unreachable").length > 0,
      "the refused leader",
    );
    expect(logger.named("mirror.upstream_leader_unreachable")[0]).toMatchObject({
      topic: "t",
      partition: 1,
      leader: `127.0.0.1:${outsider.port}`,
      error: expect.stringMatching(/answers as a single broker, not as node 2 .*--advertise-tcp/),
    });
    expect((await stranger.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(0);
    phase = "right";
    await until(
      async () => (await sameLogs(edge, b, 1)) && mirror.describe().every((s) => s.position === 30),
      "partition 1 on B",
    );
    // Said once for all the retries while no leader was named; each leader named logged once.
    expect(logger.named("mirror.upstream_not_leader")).toHaveLength(1);
    expect(logger.named("mirror.upstream_leader_unreachable")).toHaveLength(1);
    expect(logger.named("mirror.upstream_leader").map((f) => f.leader)).toEqual([
      `127.0.0.1:${outsider.port}`,
      `127.0.0.1:${leaderB.port}`,
    ]);
    expect(new Set(connectedTo)).toEqual(
      new Set([`127.0.0.1:${outsider.port}`, `127.0.0.1:${leaderB.port}`]),
    );
    // Each partition on its leader only, once; nothing on the outsider.
    expect((await a.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(0);
    expect((await b.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(0);
    expect((await b.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(30);
    expect((await stranger.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(0);
    await mirror.stop();
  });

  it("says the upstream is reachable again once a batch gets through the leader a partition moved to (attack15b F7)", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    // One store for partition 1 (A's, which B takes over as its replica would) and B's own.
    const { broker: a } = await realBroker();
    const { broker: b } = await realBroker();
    for (const broker of [edge, a, b]) await broker.createTopic({ name: "t", partitions: 2 });
    // A (node 1, the --mirror-to broker) leads partition 1 and names B (node 2) for partition 0.
    // "paused": A answers nothing (SIGSTOP) and B still says A leads 1; "moved": B leads 1.
    let phase: "running" | "paused" | "moved" = "running";
    const never = () => new Promise<never>(() => {});
    let portA = 0;
    let portB = 0;
    const metadata = (nodeId: number) => ({
      cluster_id: "c1",
      node_id: nodeId,
      controller: 1,
      brokers: [
        { node_id: 1, tcp: `127.0.0.1:${portA}`, http: "http://127.0.0.1:1" },
        { node_id: 2, tcp: `127.0.0.1:${portB}`, http: "http://127.0.0.1:2" },
      ],
      topics: [
        {
          name: "t",
          partitions: [
            { partition: 0, leader: 2, leader_epoch: 0, replicas: [2, 1], isr: [2, 1], elr: [] },
            phase === "moved"
              ? { partition: 1, leader: 2, leader_epoch: 1, replicas: [1, 2], isr: [2], elr: [] }
              : {
                  partition: 1,
                  leader: 1,
                  leader_epoch: 0,
                  replicas: [1, 2],
                  isr: [1, 2],
                  elr: [],
                },
          ],
        },
      ],
    });
    const proxy = (broker: LocalBroker, nodeId: number, produce: Broker["produce"]) =>
      asNode(broker, nodeId, produce, () =>
        nodeId === 1 && phase !== "running" ? never() : Promise.resolve(metadata(nodeId)),
      );
    const upstreamA = await serveTcp(
      proxy(a, 1, (request) => {
        if (phase !== "running") return never();
        if (request.partition === 1) return a.produce(request);
        return Promise.reject(
          new BrokerError(Errors.notLeader, 'Cannot produce to "t/0": node 2 leads it', {
            leader: 2,
            leader_tcp: `127.0.0.1:${portB}`,
          }),
        );
      }),
    );
    const upstreamB = await serveTcp(
      proxy(b, 2, (request) => {
        if (request.partition === 0) return b.produce(request);
        if (phase === "moved") return a.produce(request);
        return Promise.reject(
          new BrokerError(Errors.notLeader, 'Cannot produce to "t/1": node 1 leads it', {
            leader: 1,
            leader_tcp: `127.0.0.1:${portA}`,
          }),
        );
      }),
    );
    portA = upstreamA.port;
    portB = upstreamB.port;
    for (const p of [0, 1]) await produce(edge, p, 0, 10);
    const client = async (port: number) => {
      const c = await TcpClient.connect({ host: "127.0.0.1", port, timeoutMs: 600 });
      onTestFinished(() => c.close());
      return c;
    };
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        connect: () => client(portA),
        connectTo: (address) => client(parseHostPort(address).port),
        upstreamAddress: `127.0.0.1:${portA}`,
        batchRecords: 10,
        recordsPerSecond: 0,
        rescanMs: 50,
        askLeaderMs: 300,
      },
    );
    await mirror.start();
    await until(
      async () => (await sameLogs(edge, b, 0)) && (await sameLogs(edge, a, 1)),
      "both partitions upstream",
    );
    phase = "paused";
    await produce(edge, 1, 10, 10);
    await until(
      async () => logger.named("mirror.upstream_unreachable").length > 0,
      "the --mirror-to broker unreachable",
    );
    expect(logger.named("mirror.upstream_reachable")).toEqual([]);
    phase = "moved";
    await until(
      async () => (await sameLogs(edge, a, 1)) && mirror.describe()[1].position === 20,
      "partition 1 upstream through B",
    );
    expect(logger.named("mirror.upstream_leader")).toContainEqual(
      expect.objectContaining({ partition: 1, leader: `127.0.0.1:${portB}` }),
    );
    // Said once, naming the broker that took the batch and the one that stayed silent.
    expect(logger.named("mirror.upstream_unreachable")).toHaveLength(1);
    expect(logger.named("mirror.upstream_reachable")).toEqual([
      { mirror: "test", broker: `127.0.0.1:${portB}`, unreachable: `127.0.0.1:${portA}` },
    ]);
    // Later batches add nothing: the episode is over.
    await produce(edge, 1, 20, 10);
    await until(async () => mirror.describe()[1].position === 30, "more of partition 1");
    expect(logger.named("mirror.upstream_reachable")).toHaveLength(1);
    expect((await a.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(30);
    await mirror.stop();
  });

  it("waits for a slow partition without calling the upstream unreachable or failing the others' batches", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: central } = await realBroker();
    await edge.createTopic({ name: "t", partitions: 2 });
    await central.createTopic({ name: "t", partitions: 2 });
    // Partition 1's first two produces are stored only after 2.5 s, past the mirror's 1 s limit
    // (a leader waiting for its in-sync replicas); the broker answers everything else at once.
    let slowLeft = 2;
    const upstream = await serveTcp(
      new Proxy(central, {
        get(target, prop) {
          if (prop === "produce")
            return async (request: ProduceRequest) => {
              if (request.partition === 1 && slowLeft > 0) {
                slowLeft--;
                await new Promise((r) => setTimeout(r, 2500));
              }
              return central.produce(request);
            };
          const v: unknown = Reflect.get(target, prop, target);
          return typeof v === "function" ? v.bind(target) : v;
        },
      }),
    );
    const connections: TcpClient[] = [];
    for (const p of [0, 1]) await produce(edge, p, 0, 10);
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        connect: async () => {
          const client = await TcpClient.connect({
            host: "127.0.0.1",
            port: upstream.port,
            timeoutMs: 1000,
          });
          connections.push(client);
          onTestFinished(() => client.close());
          return client;
        },
        upstreamAddress: `127.0.0.1:${upstream.port}`,
        batchRecords: 5,
        recordsPerSecond: 0,
        rescanMs: 50,
      },
    );
    await mirror.start();
    // Partition 0 keeps flowing on the one shared connection while partition 1 waits.
    let more = 10;
    await until(async () => {
      if (more < 60) await produce(edge, 0, more, 5);
      more = Math.min(60, more + 5);
      return more === 60 && (await sameLogs(edge, central, 0)) && slowLeft === 0;
    }, "partition 0 upstream while partition 1 is slow");
    await until(
      async () => (await sameLogs(edge, central, 1)) && mirror.describe()[1].position === 10,
      "partition 1 upstream",
    );
    // Said once, as slow, naming the partition and the broker; never as unreachable.
    expect(logger.named("mirror.upstream_slow")).toEqual([
      expect.objectContaining({
        topic: "t",
        partition: 1,
        broker: `127.0.0.1:${upstream.port}`,
        error: expect.stringMatching(/no answer within 1000 ms/),
      }),
    ]);
    expect(logger.named("mirror.upstream_unreachable")).toEqual([]);
    // And once its batch got through, said so, once (attack15b F7).
    expect(logger.named("mirror.upstream_reachable")).toEqual([
      {
        mirror: "test",
        topic: "t",
        partition: 1,
        broker: `127.0.0.1:${upstream.port}`,
        after: "mirror.upstream_slow",
      },
    ]);
    expect((await mirror.observe()).upstreamReachable).toBe(true);
    // The connection was never closed under partition 0: one connection, no failed batch there.
    expect(connections).toHaveLength(1);
    expect(connections[0].closed).toBe(false);
    expect(mirror.describe()[0].failures).toBe(0);
    // Exactly once: the resent batches were answered as duplicates.
    expect((await central.listOffsets({ topic: "t", partition: 1 })).highWatermark).toBe(10);
    expect((await central.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(60);
    await mirror.stop();
  });

  it("resumes from the upstream's producer state after a lost commit, storing nothing twice, whatever the batch size", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: central } = await realBroker();
    const upstream = await serveTcp(central);
    await edge.createTopic({ name: "t", partitions: 2 });
    for (const p of [0, 1]) await produce(edge, p, 0, 50);
    const mirror = (batchRecords: number) =>
      edgeMirror(
        { broker: edge, fs, dataDir, logger },
        {
          connect: upstream.connect,
          batchRecords,
          recordsPerSecond: 0,
          rescanMs: 50,
        },
      );
    const first = mirror(10);
    await first.start();
    await until(
      async () => (await sameLogs(edge, central, 0)) && (await sameLogs(edge, central, 1)),
      "the first catch-up",
    );
    await first.stop();

    // As if the edge died after the upstream stored these batches but before it committed them.
    await edge.commitOffsets({
      group: "mirror.test",
      offsets: [{ topic: "t", partition: 0, offset: 13 }],
    });
    await edge.commitOffsets({
      group: "mirror.test",
      offsets: [{ topic: "t", partition: 1, offset: 40 }],
    });
    for (const p of [0, 1]) await produce(edge, p, 50, 20);
    const second = mirror(7);
    await second.start();
    // The upstream's log shows a batch once its fsync is done, a moment before its answer reaches
    // the mirror: wait for the mirror's positions too.
    await until(
      async () =>
        (await sameLogs(edge, central, 0)) &&
        (await sameLogs(edge, central, 1)) &&
        second.describe().every((s) => s.position === 70),
      "the second catch-up",
    );
    // The upstream holds the last batch a moment before the mirror reads its answer.
    await until(
      async () => second.describe().every((s) => s.position === 70),
      "the mirror to see the upstream's answers",
    );
    expect(second.describe().map((s) => [s.partition, s.position, s.state])).toEqual([
      [0, 70, expect.stringMatching(/caught_up|forwarding/)],
      [1, 70, expect.stringMatching(/caught_up|forwarding/)],
    ]);
    expect(logger.named("mirror.resumed").length).toBeGreaterThanOrEqual(1);
    expect((await central.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(70);
    await second.stop();
    const group = await edge.describeGroup("mirror.test");
    expect(group.offsets.map((o) => [o.partition, o.committed, o.lag])).toEqual([
      [0, 70, 0],
      [1, 70, 0],
    ]);

    // The edge topic deleted and created again: its new records are forwarded under a new epoch,
    // appended upstream, never mistaken for the old ones the upstream holds.
    await edge.deleteTopic("t");
    await edge.createTopic({ name: "t", partitions: 2 });
    await produce(edge, 0, 1000, 5);
    const third = mirror(10);
    await third.start();
    await until(
      async () => (await central.listOffsets({ topic: "t", partition: 0 })).highWatermark === 75,
      "the new topic's records upstream",
    );
    expect(logger.named("mirror.partition_restarted").length).toBeGreaterThanOrEqual(1);
    const upstreamTail = (await fetchAll(central, "t", 70, { partition: 0 })).map((r) => r.value);
    expect(upstreamTail).toEqual(["v-0-1000", "v-0-1001", "v-0-1002", "v-0-1003", "v-0-1004"]);
    await third.stop();
  });

  it("keeps to --mirror-records-per-sec over any stretch of time, in batches of a tenth of a second's worth", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: central } = await realBroker();
    const upstream = await serveTcp(central);
    await edge.createTopic({ name: "t", partitions: 1 });
    await produce(edge, 0, 0, 300);
    const rate = 100;
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        name: "paced",
        connect: upstream.connect,
        randomHex: () => "00112233445566ff",
        recordsPerSecond: rate,
      },
    );
    const started = Date.now();
    await mirror.start();
    const samples: [number, number][] = [];
    while (Date.now() - started < 1200) {
      const hw =
        (await central.listOffsets({ topic: "t", partition: 0 }).catch(() => null))
          ?.highWatermark ?? 0;
      samples.push([Date.now() - started, hw]);
      await new Promise((r) => setTimeout(r, 50));
    }
    await mirror.stop();
    // At most the rate since the start, plus the one batch (rate / 10) sent at once.
    for (const [ms, hw] of samples)
      expect(hw, `at ${ms} ms`).toBeLessThanOrEqual((ms * rate) / 1000 + rate / 10);
    expect(samples.at(-1)![1]).toBeGreaterThan(0);
  });

  it("stops a partition with a gap error when retention deleted records before they were forwarded", async () => {
    const { broker: edge, fs, dataDir, logger, clock } = await openTestBroker();
    const { broker: central } = await realBroker();
    const upstream = await serveTcp(central);
    await edge.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_bytes: 1 },
    });
    await produce(edge, 0, 0, 5);
    clock.advance(2000);
    await produce(edge, 0, 5, 5);
    await edge.cleanup("t");
    expect((await edge.listOffsets({ topic: "t", partition: 0 })).logStartOffset).toBe(5);
    // The mirror's position says 0 was never forwarded.
    await edge.commitOffsets({
      group: "mirror.gap",
      offsets: [{ topic: "t", partition: 0, offset: 5 }],
    });
    await edge.commitOffsets({
      group: "mirror.gap",
      offsets: [{ topic: "t", partition: 0, offset: 0 }],
    });
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        name: "gap",
        connect: upstream.connect,
        randomHex: () => "fedcba9876543210",
        recordsPerSecond: 0,
      },
    );
    await mirror.start();
    await until(async () => mirror.describe()[0]?.state === "stopped", "the partition to stop");
    expect(mirror.describe()[0].error).toContain(
      "gap: edge records [0, 5) were deleted by retention",
    );
    expect(logger.named("mirror.partition_stopped")).toHaveLength(1);
    expect(
      (await central.listOffsets({ topic: "t", partition: 0 }).catch(() => null))?.highWatermark ??
        0,
    ).toBe(0);
    await mirror.stop();

    // The runbook's way back: restarted with --mirror-skip-gaps, the partition logs the loss and
    // forwards from the log start offset under a new epoch; the same run again resends nothing.
    const skipping = () =>
      edgeMirror(
        { broker: edge, fs, dataDir, logger },
        {
          name: "gap",
          connect: upstream.connect,
          randomHex: () => "fedcba9876543210",
          recordsPerSecond: 0,
          skipGaps: true,
        },
      );
    // The edge's long-polls wait on its manual clock: let it run.
    const ticker = setInterval(() => clock.advance(500), 20);
    onTestFinished(() => clearInterval(ticker));
    const resumed = skipping();
    await resumed.start();
    await until(async () => resumed.describe()[0]?.position === 10, "the records after the gap");
    const skipped = logger.named("mirror.gap_skipped");
    expect(skipped).toHaveLength(1);
    expect(skipped[0]).toMatchObject({ lost_from: 0, lost_to: 5, lost_records: 5 });
    expect((await fetchAll(central, "t", 0)).map((r) => r.value)).toEqual(
      [5, 6, 7, 8, 9].map((i) => `v-0-${i}`),
    );
    await resumed.stop();
    expect((await edge.describeGroup("mirror.gap")).offsets[0].committed).toBe(10);
    await produce(edge, 0, 10, 2);
    const again = skipping();
    await again.start();
    await until(async () => again.describe()[0]?.position === 12, "the next records");
    await again.stop();
    expect((await fetchAll(central, "t", 0)).map((r) => r.value)).toEqual(
      [5, 6, 7, 8, 9, 10, 11].map((i) => `v-0-${i}`),
    );
    expect(logger.named("mirror.gap_skipped")).toHaveLength(1);
  });

  it("logs a stopped partition once per cause and interval while it is retried, and says when each partition forwards (newuser17 F7, F9)", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: central } = await realBroker();
    const upstream = await serveTcp(central);
    await edge.createTopic({ name: "t", partitions: 2 });
    // The upstream lacks partition 1: its batches are refused, so it stops.
    await central.createTopic({ name: "t", partitions: 1 });
    await produce(edge, 0, 0, 3);
    await produce(edge, 1, 0, 3);
    // When each stop was logged: the interval is between log lines, not from when a poll saw one.
    const stoppedAt: number[] = [];
    const timed = {
      log: (...args: Parameters<typeof logger.log>) => {
        if (args[1] === "mirror.partition_stopped") stoppedAt.push(Date.now());
        logger.log(...args);
      },
    };
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger: timed },
      {
        name: "told",
        connect: upstream.connect,
        randomHex: () => "0badc0ffee000001",
        recordsPerSecond: 0,
        rescanMs: 20,
        stoppedLogEveryMs: 1500,
      },
    );
    await mirror.start();
    const p = (partition: number) => mirror.describe().find((s) => s.partition === partition)!;
    await until(
      async () => p(0)?.position === 3 && logger.named("mirror.partition_stopped").length > 0,
      "partition 0 forwarded, partition 1 stopped",
    );
    const firstStop = Date.now();
    // Retried every 20 ms, it stays "stopped" throughout (no flicker of esb_mirror_partition_stopped).
    const states = new Set<string>();
    while (Date.now() - firstStop < 600) {
      states.add(p(1).state);
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(states).toEqual(new Set(["stopped"]));
    expect(p(1).failures).toBeGreaterThan(5);
    const stops = logger.named("mirror.partition_stopped");
    if (Date.now() - firstStop < 1500) expect(stops).toHaveLength(1);
    expect(stops[0]).toMatchObject({
      topic: "t",
      partition: 1,
      error: expect.stringContaining("the upstream refused a batch"),
      retry: expect.stringContaining("logged again every 0.025 min while it stays stopped"),
    });
    // Partition 0's further batches add no forwarding line.
    await produce(edge, 0, 3, 2);
    await until(async () => p(0).position === 5, "more of partition 0");
    // Logged again once the interval passed, not at every retry.
    await until(
      async () => logger.named("mirror.partition_stopped").length >= 2,
      "the stop logged again",
    );
    const elapsed = Date.now() - firstStop;
    expect(stoppedAt[1] - stoppedAt[0]).toBeGreaterThanOrEqual(1500);
    expect(logger.named("mirror.partition_stopped").length).toBeLessThanOrEqual(
      1 + Math.ceil(elapsed / 1500),
    );

    // The cause goes away: partition 1 forwards again by itself, and says so.
    await central.deleteTopic("t");
    await central.createTopic({ name: "t", partitions: 2 });
    await until(async () => p(1).position === 3, "partition 1 forwarded");
    expect(p(1).state).not.toBe("stopped");
    const told = logger.named("mirror.partition_forwarding");
    expect(told.filter((f) => f.partition === 0)).toMatchObject([
      { mirror: "told", topic: "t", upstream_topic: "t", partition: 0, position: 3 },
    ]);
    expect(told.filter((f) => f.partition === 0)[0]).not.toHaveProperty("after");
    expect(told.filter((f) => f.partition === 1)).toMatchObject([
      { partition: 1, position: 3, state: "forwarding", after: "mirror.partition_stopped" },
    ]);
    // Further batches and empty fetches add no line.
    await produce(edge, 1, 3, 2);
    await until(async () => p(1).position === 5, "more of partition 1");
    await new Promise((r) => setTimeout(r, 100));
    expect(
      logger.named("mirror.partition_forwarding").filter((f) => f.partition === 1),
    ).toHaveLength(1);
    await mirror.stop();
  });

  it("retention keeps segments the mirror has not forwarded with mirror_hold_retention, and reports deleting them without", async () => {
    const metrics = new MetricsRegistry({ nowSeconds: () => 0 });
    const { broker: edge, clock, logger } = await openTestBroker({ metrics });
    const deleted = () =>
      metrics
        .read("esb_mirror_records_deleted_unforwarded_total")
        .map((s) => [s.labels.topic, s.labels.partition, s.value]);
    await edge.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_bytes: 1, mirror_hold_retention: true },
    });
    await produce(edge, 0, 0, 5);
    clock.advance(2000);
    await produce(edge, 0, 5, 5);
    clock.advance(2000);
    await produce(edge, 0, 10, 1);
    edge.setUnforwardedFrom((topic, partition) => (topic === "t" && partition === 0 ? 5 : null));
    await edge.cleanup("t");
    expect((await edge.listOffsets({ topic: "t", partition: 0 })).logStartOffset).toBe(5);
    expect(
      logger.events.filter((e) => e.event === "retention.deletes_unforwarded").map((e) => e.level),
    ).toEqual(["warn"]);
    // Held: nothing lost, but the series exists (at 0) for the alert's increase().
    expect(deleted()).toEqual([["t", "0", 0]]);

    await edge.updateTopicConfig("t", { mirror_hold_retention: false });
    await edge.cleanup("t");
    expect((await edge.listOffsets({ topic: "t", partition: 0 })).logStartOffset).toBe(10);
    expect(
      logger.events.filter((e) => e.event === "retention.deletes_unforwarded").map((e) => e.level),
    ).toEqual(["warn", "error"]);
    // Records [5, 10) are gone before the mirror forwarded them: counted at once (newuser17 F9).
    expect(deleted()).toEqual([["t", "0", 5]]);
    // A later pass with nothing more to delete counts nothing more.
    await edge.cleanup("t");
    expect(deleted()).toEqual([["t", "0", 5]]);
    await expect(edge.updateTopicConfig("t", { mirror_hold_retention: "yes" })).rejects.toThrow(
      'Invalid topic config "mirror_hold_retention"',
    );
  });

  it("counts a refused key as the upstream down, logs it once across leaders, and retries at once when told (newuser17 #4)", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: a } = await realBroker();
    const { broker: b } = await realBroker();
    for (const broker of [edge, a, b]) await broker.createTopic({ name: "t", partitions: 2 });
    // A (node 1, the --mirror-to broker) leads partition 1 and names B (node 2) for partition 0:
    // two leader connections, each refusing the revoked key while `refuse` holds.
    let refuse = false;
    let portB = 0;
    const revoked = () =>
      Promise.reject(
        new BrokerError(
          Errors.unauthenticated,
          "Cannot authenticate: API key 438b4f65652bb01e is not valid (unknown, revoked, or wrong secret)",
        ),
      );
    const upstreamA = await serveTcp(
      asNode(a, 1, (request) => {
        if (refuse) return revoked();
        if (request.partition === 1) return a.produce(request);
        return Promise.reject(
          new BrokerError(Errors.notLeader, 'Cannot produce to "t/0": node 2 leads it', {
            leader: 2,
            leader_tcp: `127.0.0.1:${portB}`,
          }),
        );
      }),
    );
    const upstreamB = await serveTcp(
      asNode(b, 2, (request) => (refuse ? revoked() : b.produce(request))),
    );
    portB = upstreamB.port;
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        connect: upstreamA.connect,
        connectTo: clientTo,
        upstreamAddress: `127.0.0.1:${upstreamA.port}`,
        batchRecords: 10,
        recordsPerSecond: 0,
        rescanMs: 50,
      },
    );
    for (const p of [0, 1]) await produce(edge, p, 0, 10);
    await mirror.start();
    await until(
      async () => (await sameLogs(edge, b, 0)) && (await sameLogs(edge, a, 1)),
      "both partitions on their leaders",
    );
    expect((await mirror.observe()).upstreamReachable).toBe(true);

    refuse = true;
    for (const p of [0, 1]) await produce(edge, p, 10, 10);
    // Eight refusals each: the next wait is 12.8 s or more (backoff 100 ms doubling, up to 30 s).
    await until(
      async () => mirror.describe().every((s) => s.failures >= 8),
      "eight refusals per partition",
      40_000,
    );
    const observed = await mirror.observe();
    expect(observed.upstreamReachable).toBe(false);
    expect(observed.partitions.map((s) => s.state)).toEqual([
      "upstream_refused",
      "upstream_refused",
    ]);
    // Once for the whole upstream, though both leaders refuse it, retry after retry.
    expect(logger.named("mirror.upstream_refused")).toEqual([
      expect.objectContaining({ mirror: "test", code: "unauthenticated" }),
    ]);
    expect(mirror.describe().map((s) => s.position)).toEqual([10, 10]);

    // The key fixed (SIGHUP reloaded it): the refused batches go again now, not after 12.8 s.
    refuse = false;
    const fixedAt = Date.now();
    mirror.retryRefused();
    await until(
      async () =>
        (await sameLogs(edge, b, 0)) &&
        (await sameLogs(edge, a, 1)) &&
        mirror.describe().every((s) => s.position === 20),
      "both partitions upstream again",
    );
    expect(Date.now() - fixedAt).toBeLessThan(8000);
    expect((await mirror.observe()).upstreamReachable).toBe(true);
    expect(logger.named("mirror.upstream_refused")).toHaveLength(1);
    expect(logger.named("mirror.upstream_reachable")).toHaveLength(1);
    await mirror.stop();
  }, 90_000);

  it("calls a connect that got no answer in time unreachable, not slow, though the broker answers the ask after (newuser17 #10)", async () => {
    const { broker: edge, fs, dataDir, logger } = await realBroker();
    const { broker: a } = await realBroker();
    const { broker: b } = await realBroker();
    for (const broker of [edge, a, b]) await broker.createTopic({ name: "t", partitions: 1 });
    const leaderB = await serveTcp(asNode(b, 2));
    // A (the --mirror-to broker) names B as the leader; the first connect to B gets no answer in
    // time (a paused broker resuming), the ask right after reaches it.
    const upstreamA = await serveTcp(
      asNode(a, 1, () =>
        Promise.reject(
          new BrokerError(Errors.notLeader, 'Cannot produce to "t/0": node 2 leads it', {
            leader: 2,
            leader_tcp: `127.0.0.1:${leaderB.port}`,
          }),
        ),
      ),
    );
    let connects = 0;
    const mirror = edgeMirror(
      { broker: edge, fs, dataDir, logger },
      {
        connect: upstreamA.connect,
        connectTo: async (address) => {
          if (connects++ === 0)
            throw ClientError.timeout(`Cannot connect to ${address}: no connection after 1000 ms`);
          return clientTo(address);
        },
        upstreamAddress: `127.0.0.1:${upstreamA.port}`,
        batchRecords: 10,
        recordsPerSecond: 0,
        rescanMs: 50,
        askLeaderMs: 1000,
      },
    );
    await produce(edge, 0, 0, 20);
    await mirror.start();
    await until(
      async () => (await sameLogs(edge, b, 0)) && mirror.describe()[0].position === 20,
      "partition 0 on B",
    );
    expect(connects).toBeGreaterThan(1);
    expect(logger.named("mirror.upstream_slow")).toEqual([]);
    expect(logger.named("mirror.upstream_leader_unreachable")).toEqual([
      expect.objectContaining({
        partition: 0,
        leader: `127.0.0.1:${leaderB.port}`,
        error: expect.stringContaining("Cannot connect to"),
      }),
    ]);
    await mirror.stop();
  });
});
