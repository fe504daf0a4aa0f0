/**
 * The replication data path (cluster/replica-manager.ts, cluster/follower.ts, the replica-fetch
 * api) with three in-process brokers on real files and loopback sockets, partition state in a
 * real three-member etcd: acknowledgement only after every ISR member fsynced, min ISR refusal
 * and recovery only after catch-up to the log end (field failures #27a), forged replica fetches
 * (#27e), a deposed leader, leader-epoch truncation, a corrupt record on the leader (#27d) and
 * idempotent producers across a leader change (#28).
 */
import { readFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import {
  type ClientError,
  ClusterClient,
  TcpClient,
  mayBeStored,
} from "../../src/client/client.ts";
import {
  formatPartitionState,
  initialPartitionState,
  type PartitionState,
} from "../../src/cluster/partition-state.ts";
import type { Etcd } from "../../src/cluster/etcd.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";
import { decodeRecords } from "../helpers/records.ts";
import { type ReplicatedCluster, startReplicatedCluster, waitFor } from "../helpers/replication.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import type { FileSystem } from "../../src/fs/types.ts";

let etcd: EtcdCluster;
let client: EtcdHttpClient;
let n = 0;

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000 });
});

afterAll(async () => {
  await client?.close();
  await etcd?.stop();
});

const freshPrefix = () => `/es-broker-replication-${process.pid}-${n++}`;

/** An Etcd forwarding every call to the suite's client, but for `overrides` (a test's faults). */
function etcdThrough(overrides: Partial<Etcd>): Etcd {
  return {
    get: (key) => client.get(key),
    list: (prefix) => client.list(prefix),
    put: (key, value, options) => client.put(key, value, options),
    delete: (key, options) => client.delete(key, options),
    leaseGrant: (ttl) => client.leaseGrant(ttl),
    leaseKeepAlive: (id) => client.leaseKeepAlive(id),
    leaseRevoke: (id) => client.leaseRevoke(id),
    txn: (request) => client.txn(request),
    changedSince: (request) => client.changedSince(request),
    watch: (request, handlers) => client.watch(request, handlers),
    status: () => client.status(),
    close: async () => {},
    ...overrides,
  };
}

function records(values: string[]) {
  return values.map((v) => ({ key: null, value: new TextEncoder().encode(v) }));
}

/** Every stored byte of partition 0 below the log end of `broker` (its durable part). */
async function storedBytes(broker: LocalBroker, topic: string): Promise<Uint8Array> {
  const log = broker.partitionLog(topic, 0);
  const parts: Uint8Array[] = [];
  let offset = log.logStartOffset;
  while (offset < log.highWatermark) {
    const r = await log.read({ offset, maxRecords: 1000, maxBytes: 1 << 20 });
    if (r.count === 0) break;
    parts.push(r.bytes.slice());
    offset = r.nextOffset;
  }
  return Buffer.concat(parts);
}

/** Three brokers on the suite's etcd under a fresh prefix; `options` add to or replace that. */
async function cluster3(
  options: Partial<Parameters<typeof startReplicatedCluster>[0]> = {},
): Promise<ReplicatedCluster> {
  return startReplicatedCluster({ count: 3, etcd: client, prefix: freshPrefix(), ...options });
}

/**
 * {@link cluster3} with node 1's fsyncs of "orders" held at will ({@link holdableFs}), "orders"
 * created led by node 1 at epoch 0 (ISR all three), and "a" acknowledged at offset 0 through
 * `one`, node 1's client.
 */
async function clusterWithHoldableLeaderDisk() {
  const disk = holdableFs("orders");
  const c = await cluster3({ fs: (id) => (id === 1 ? disk.fs : new NodeFileSystem()) });
  const initial = initialPartitionState([1, 2, 3], 2);
  await c.createTopic("orders", initial);
  const one = await c.node(1).client();
  await one.produce("orders", records(["a"]), { partition: 0 });
  return { disk, c, initial, one };
}

/** Whether an etcd transaction puts the state of "orders" partition 0 with node 3 in its ISR. */
function expandsNode3(request: Parameters<Etcd["txn"]>[0]): boolean {
  const op = request.success[0];
  return (
    op !== undefined &&
    "put" in op &&
    op.put.key.endsWith("/partitions/orders/0") &&
    (JSON.parse(op.put.value) as PartitionState).isr.includes(3)
  );
}

/**
 * {@link cluster3} on `etcd` with "orders" led by node 1, node 3 outside its ISR ([1, 2]), and
 * "a", "b" acknowledged through `leader`, node 1's client (node 3 then catches up and is expanded).
 */
async function clusterWithNode3Outside(etcd: Etcd) {
  const c = await cluster3({ etcd });
  await c.createTopic("orders", { ...initialPartitionState([1, 2, 3], 2), isr: [1, 2] });
  const leader = await c.node(1).client();
  await leader.produce("orders", records(["a", "b"]), { partition: 0 });
  return { c, leader };
}

/** Waits until nodes 1-3 each hold `expected` ("offset:value") below their high watermark. */
async function expectEveryNodeHolds(c: ReplicatedCluster, expected: string[]): Promise<void> {
  for (const id of [1, 2, 3]) {
    await waitFor(
      () => c.node(id).broker.partitionLog("orders", 0).highWatermark === expected.length,
      `node ${id} to hold ${expected.length} records`,
    );
    expect(await storedValues(c.node(id).broker, "orders")).toEqual(expected);
  }
}

async function expectCode(promise: Promise<unknown>, code: string): Promise<void> {
  await expect(promise).rejects.toMatchObject({ code });
}

/** A batch for the broker's own produce path (the leader side, without a client in between). */
function batchOf(values: string[]) {
  const b = new EntryBatchBuilder();
  for (const v of values) b.add(null, new TextEncoder().encode(v), Date.now());
  return b.build();
}

/** Rejects with a BrokerError refusing the write as a non-leader (not_leader / fenced_leader_epoch). */
async function expectFenced(promise: Promise<unknown>): Promise<void> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e as { kind?: { code?: string } },
  );
  expect(["not_leader", "fenced_leader_epoch"]).toContain(err?.kind?.code);
}

/** Holds a partition's write loop (once it resolves) until the function it resolves with is called. */
async function holdWriteLoop(broker: LocalBroker, topic: string): Promise<() => Promise<void>> {
  let release!: () => void;
  let holding!: () => void;
  const isHeld = new Promise<void>((r) => (holding = r));
  const held = broker.partitionLog(topic, 0).withWriteLock(
    () =>
      new Promise<void>((r) => {
        release = r;
        holding();
      }),
  );
  await isHeld;
  return async () => {
    release();
    await held;
  };
}

/** Every record value of node `broker`'s partition 0 up to its durable end, with its offset. */
async function storedValues(broker: LocalBroker, topic: string): Promise<string[]> {
  const log = broker.partitionLog(topic, 0);
  const out: string[] = [];
  let offset = log.logStartOffset;
  while (offset < log.highWatermark) {
    const r = await log.read({ offset, maxRecords: 1000, maxBytes: 1 << 20 });
    if (r.count === 0) break;
    for (const x of decodeRecords(r.bytes)) out.push(`${x.offset}:${x.value}`);
    offset = r.nextOffset;
  }
  return out;
}

/**
 * A real file system whose fsyncs of topic `topic`'s log files can be held (`hold`): held ones
 * wait until `release()` lets them run, or `fail(err)` fails them (a disk that never made the
 * records durable).
 */
function holdableFs(topic: string): {
  fs: FileSystem;
  hold(): void;
  readonly held: number;
  release(): void;
  fail(err: Error): void;
} {
  let holding = false;
  let waiting: { go: () => void; fail: (err: Error) => void }[] = [];
  const fs = wrapFileSystem(new NodeFileSystem(), {
    sync: (inner, path) => {
      if (!holding || !path.includes(`/topics/${topic}/`) || !path.endsWith(".log"))
        return inner.sync();
      return new Promise<void>((resolve, reject) => {
        waiting.push({ go: () => resolve(inner.sync()), fail: reject });
      });
    },
  });
  const drain = () => {
    holding = false;
    const w = waiting;
    waiting = [];
    return w;
  };
  return {
    fs,
    hold: () => {
      holding = true;
    },
    get held() {
      return waiting.length;
    },
    release: () => {
      for (const w of drain()) w.go();
    },
    fail: (err) => {
      for (const w of drain()) w.fail(err);
    },
  };
}

/** Whether `promise` is still pending after `ms`. */
async function stillPending(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const pending = Symbol("pending");
  const winner = await Promise.race([
    promise.then(
      () => null,
      () => null,
    ),
    new Promise((r) => setTimeout(() => r(pending), ms)),
  ]);
  return winner === pending;
}

describe("replication", () => {
  it("acknowledges a produce only once every ISR member has fsynced it; only the leader serves", async () => {
    const c = await cluster3();
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    for (let i = 0; i < 5; i++) {
      const r = await leader.produce("orders", records([`a${i}`, `b${i}`]), { partition: 0 });
      const end = r.spans[0].baseOffset + r.spans[0].count;
      // At the acknowledgement every follower's durable log end covers the records.
      for (const id of [2, 3])
        expect(c.node(id).broker.partitionLog("orders", 0).highWatermark).toBeGreaterThanOrEqual(
          end,
        );
    }
    const fetched = await leader.fetch({ topic: "orders", partition: 0, offset: 0 });
    expect(fetched.recordCount).toBe(10);
    expect(fetched.highWatermark).toBe(10);
    const follower = await c.node(2).client();
    await expectCode(follower.fetch({ topic: "orders", partition: 0, offset: 0 }), "not_leader");
    await expectCode(follower.produce("orders", records(["x"]), { partition: 0 }), "not_leader");
    const bytes = await storedBytes(c.node(1).broker, "orders");
    expect(await storedBytes(c.node(2).broker, "orders")).toEqual(bytes);
    expect(await storedBytes(c.node(3).broker, "orders")).toEqual(bytes);
    const [described] = c.node(1).manager.describe();
    expect(described).toMatchObject({
      topic: "orders",
      partition: 0,
      role: "leader",
      leader_epoch: 0,
      isr: [1, 2, 3],
      high_watermark: 10,
      log_end_offset: 10,
    });
    expect(described.followers.map((f) => [f.node_id, f.durable_offset, f.lag])).toEqual([
      [2, 10, 0],
      [3, 10, 0],
    ]);
    expect(c.node(2).manager.describe()[0]).toMatchObject({ role: "follower", leader: 1 });
    // A follower learns the high watermark from the leader's next answer (its ListOffsets shows it).
    await waitFor(
      () => c.node(2).manager.describe()[0].high_watermark === 10,
      "the follower to learn the high watermark",
    );
    // Each follower recorded the leader's epoch history.
    const epochs = JSON.parse(
      readFileSync(join(c.node(2).dataDir, "topics", "orders", "0", "leader-epochs.json"), "utf8"),
    );
    expect(epochs).toEqual({ version: 1, epochs: [{ epoch: 0, start_offset: 0 }] });
  });

  it("an idle follower learns a new high watermark without waiting out the leader's long-poll", async () => {
    const c = await cluster3({ fetchWaitMs: 20_000 });
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a"]), { partition: 0 });
    await waitFor(
      () => [2, 3].every((id) => c.node(id).manager.describe()[0].high_watermark === 1),
      "the followers to learn high watermark 1",
    );
    // Idle again: both followers long-poll; the next record's commit wakes them with the new
    // high watermark long before the 20 s long-poll ends.
    const started = Date.now();
    await leader.produce("orders", records(["b"]), { partition: 0 });
    await waitFor(
      () => [2, 3].every((id) => c.node(id).manager.describe()[0].high_watermark === 2),
      "the followers to learn high watermark 2",
    );
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("followers fetch records the leader has written before its fsync returns; the high watermark waits for that fsync", async () => {
    const { disk, c, one: leader } = await clusterWithHoldableLeaderDisk();
    disk.hold();
    const pending = leader.produce("orders", records(["b", "c"]), { partition: 0 });
    // Both followers wrote and fsynced b and c while the leader's fsync of them is held.
    await waitFor(
      () => [2, 3].every((id) => c.node(id).broker.partitionLog("orders", 0).highWatermark === 3),
      "the followers to hold b and c durably",
    );
    const log1 = c.node(1).broker.partitionLog("orders", 0);
    expect(disk.held).toBeGreaterThan(0);
    expect([log1.logEndOffset, log1.highWatermark]).toEqual([3, 1]);
    // Not acknowledged, not readable: the leader's own fsync has not covered them.
    expect(await stillPending(pending, 200)).toBe(true);
    expect(c.node(1).manager.describe()[0]).toMatchObject({ high_watermark: 1 });
    expect(
      c
        .node(1)
        .manager.describe()[0]
        .followers.map((f) => [f.node_id, f.durable_offset]),
    ).toEqual([
      [2, 3],
      [3, 3],
    ]);
    expect((await leader.fetch({ topic: "orders", partition: 0, offset: 0 })).recordCount).toBe(1);
    disk.release();
    expect((await pending).spans[0]).toMatchObject({ baseOffset: 1, count: 2 });
    expect(c.node(1).manager.describe()[0]).toMatchObject({ high_watermark: 3 });
    const bytes = await storedBytes(c.node(1).broker, "orders");
    expect(await storedBytes(c.node(2).broker, "orders")).toEqual(bytes);
    expect(await storedBytes(c.node(3).broker, "orders")).toEqual(bytes);
  });

  it("the leader's fsync fails after its followers took the records: a follower holding them leads, nothing acknowledged is lost", async () => {
    const { disk, c, initial, one } = await clusterWithHoldableLeaderDisk();
    disk.hold();
    const lost = one.produce("orders", records(["x", "y"]), { partition: 0 });
    await waitFor(
      () => [2, 3].every((id) => c.node(id).broker.partitionLog("orders", 0).highWatermark === 3),
      "the followers to hold x and y durably",
    );
    // The followers stop before their next fetch; the leader's disk never makes x, y durable:
    // its partition fences and cuts them (as a crash that lost its page cache would).
    await c.stopReplication(2);
    await c.stopReplication(3);
    disk.fail(new Error("EIO: the disk failed"));
    await expectCode(lost, "partition_fenced");
    const log1 = () => c.node(1).broker.partitionLog("orders", 0);
    await waitFor(() => log1().logEndOffset === 1, "node 1 to cut x and y");
    // Node 1 restarts; the controller moves the leadership to node 2, which holds x and y.
    await c.stopReplication(1);
    await c.restartNode(1, "orders");
    await c.setState("orders", { ...initial, leader: 2, leader_epoch: 1, isr: [2, 3] });
    await c.restartReplication(2, "orders");
    await c.restartReplication(3, "orders");
    await c.restartReplication(1, "orders");
    const two = await c.node(2).client();
    const r = await two.produce("orders", records(["d"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(3);
    const expected = ["0:a", "1:x", "2:y", "3:d"];
    await expectEveryNodeHolds(c, expected);
    expect(c.node(1).logger.named("replication.truncating")).toEqual([]);
    const values = (await two.fetch({ topic: "orders", partition: 0, offset: 0 })).records.map(
      (x) => new TextDecoder().decode(x.value),
    );
    expect(values).toEqual(["a", "x", "y", "d"]);
  });

  it("the leader's fsync fails after one follower took the records: a follower without them leads, the other truncates them", async () => {
    const { disk, c, initial, one } = await clusterWithHoldableLeaderDisk();
    await c.stopReplication(3);
    disk.hold();
    const lost = one.produce("orders", records(["x", "y"]), { partition: 0 });
    await waitFor(
      () => c.node(2).broker.partitionLog("orders", 0).highWatermark === 3,
      "node 2 to hold x and y durably",
    );
    await c.stopReplication(2);
    disk.fail(new Error("EIO: the disk failed"));
    await expectCode(lost, "partition_fenced");
    await c.stopReplication(1);
    await c.restartNode(1, "orders");
    // Node 3 (in the ISR, holding every committed record) leads at epoch 1 from offset 1.
    await c.setState("orders", { ...initial, leader: 3, leader_epoch: 1 });
    await c.restartReplication(3, "orders");
    await c.restartReplication(2, "orders");
    await c.restartReplication(1, "orders");
    const three = await c.node(3).client();
    const r = await three.produce("orders", records(["d", "e"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(1);
    // Node 2's x and y (epoch 0, never durable on their leader, never acknowledged) are cut:
    // offsets 1 and 2 hold d and e on every replica, never two records.
    const expected = ["0:a", "1:d", "2:e"];
    await expectEveryNodeHolds(c, expected);
    // The line says what the cut means: above the high watermark (1 here), nothing acknowledged
    // (newuser18 F8), so info; and so does the storage's own line.
    expect(c.node(2).logger.named("replication.truncating")).toMatchObject([
      {
        epoch: 0,
        leader_end_offset: 1,
        log_end_offset: 3,
        truncate_to: 1,
        acknowledged_records_cut: false,
      },
    ]);
    const truncation = c
      .node(2)
      .logger.events.filter(
        (e) => e.event === "replication.truncating" || e.event === "partition.truncated",
      );
    expect(truncation.map((e) => [e.event, e.level])).toEqual([
      ["replication.truncating", "info"],
      ["partition.truncated", "info"],
    ]);
    expect(truncation[1].fields).toMatchObject({ offset: 1, acknowledged_records_cut: false });
    expect(String(truncation[0].fields.note)).toMatch(
      /above the high watermark: never acknowledged/,
    );
    expect(truncation[0].fields.high_watermark).toBeLessThanOrEqual(1);
    const bytes = await storedBytes(c.node(3).broker, "orders");
    expect(await storedBytes(c.node(2).broker, "orders")).toEqual(bytes);
    expect(await storedBytes(c.node(1).broker, "orders")).toEqual(bytes);
  });

  it("a router resends a produce refused before the append, never one refused after it", async () => {
    const c = await cluster3({ replicaLagMs: 400 });
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const retries: string[] = [];
    const router = await ClusterClient.connect({
      bootstrap: [{ host: "127.0.0.1", port: c.node(1).port }],
      retryTimeoutMs: 1000,
      onRetry: (e) => retries.push((e as ClientError).code),
    });
    try {
      await router.produce("orders", records(["a"]), { partition: 0 });
      await c.stopReplication(2);
      await c.stopReplication(3);
      // In flight when the ISR shrinks: appended, not acknowledged, and not sent again.
      const appended = await router
        .produce("orders", records(["b"]), { partition: 0 })
        .catch((e: unknown) => e);
      expect(appended).toMatchObject({
        code: "not_enough_replicas",
        details: { may_be_stored: true },
      });
      expect(retries).toEqual([]);
      await waitFor(
        async () => (await c.state("orders")).state.isr.join() === "1",
        "the ISR to shrink to [1]",
      );
      // Refused before any append, on every try until the router's retry time runs out.
      const refused = await router
        .produce("orders", records(["c"]), { partition: 0 })
        .catch((e: unknown) => e);
      expect(refused).toMatchObject({ code: "not_enough_replicas" });
      expect((refused as ClientError).details?.may_be_stored).toBeUndefined();
      expect(retries.length).toBeGreaterThan(2);
      expect(new Set(retries)).toEqual(new Set(["not_enough_replicas"]));
      // "b" once, "c" never: the leader's log holds a and b.
      expect(c.node(1).broker.partitionLog("orders", 0).logEndOffset).toBe(2);
    } finally {
      await router.close();
    }
  });

  it("refuses writes below min ISR and takes a follower back only once it reached the log end (#27a)", async () => {
    const c = await cluster3({ replicaLagMs: 400 });
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b"]), { partition: 0 });
    await c.stopReplication(2);
    await c.stopReplication(3);
    // A write in flight when the ISR shrinks below its minimum fails, retriably: it never hangs.
    const waiting = leader.produce("orders", records(["c"]), { partition: 0 });
    // Refused after the leader appended it: the answer says it may be stored (broker.ts
    // `afterAppend`), so a client that does not resend idempotently does not resend it.
    await expect(waiting).rejects.toMatchObject({
      code: "not_enough_replicas",
      details: { may_be_stored: true },
      message: expect.stringMatching(/appended on the leader .* they may be stored/),
    });
    await waitFor(
      async () => (await c.state("orders")).state.isr.join() === "1",
      "the ISR to shrink to [1]",
    );
    const shrunk = (await c.state("orders")).state;
    expect(shrunk.elr.sort()).toEqual([2, 3]);
    expect(shrunk.committed_offset).toBe(2);
    // Refused before any append: nothing stored, no such mark, and a router may resend it.
    const before = await leader.produce("orders", records(["d"]), { partition: 0 }).catch((e) => e);
    expect(before).toMatchObject({ code: "not_enough_replicas" });
    expect(before.details?.may_be_stored).toBeUndefined();
    expect(mayBeStored(before)).toBe(false);
    const fetched = await leader.fetch({ topic: "orders", partition: 0, offset: 0 });
    expect(fetched.highWatermark).toBe(2);
    const leaderEnd = c.node(1).broker.partitionLog("orders", 0).logEndOffset;
    expect(leaderEnd).toBe(3); // "c" is stored, never acknowledged
    await c.restartReplication(2, "orders");
    await waitFor(async () => (await c.state("orders")).state.isr.includes(2), "node 2 to rejoin");
    // It rejoined holding everything up to the leader's log end, not just the high watermark.
    expect(c.node(2).broker.partitionLog("orders", 0).highWatermark).toBeGreaterThanOrEqual(
      leaderEnd,
    );
    const r = await leader.produce("orders", records(["e"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(3);
    expect(c.node(2).broker.partitionLog("orders", 0).highWatermark).toBe(4);
  });

  it("a follower that announced its leave catches up but does not rejoin the ISR (KIP-841)", async () => {
    const c = await cluster3({ replicaLagMs: 400 });
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b"]), { partition: 0 });
    await c.stopReplication(2);
    await c.stopReplication(3);
    await waitFor(
      async () => (await c.state("orders")).state.isr.join() === "1",
      "the ISR to shrink to [1]",
    );
    // Node 3 (incarnation "1", as registered) has begun to leave the cluster.
    await client.put(`${c.prefix}/leaving/3`, "1");
    await c.restartReplication(3, "orders");
    await c.restartReplication(2, "orders");
    const leaderEnd = c.node(1).broker.partitionLog("orders", 0).logEndOffset;
    // Node 2, not leaving, rejoins: the control.
    await waitFor(async () => (await c.state("orders")).state.isr.includes(2), "node 2 to rejoin");
    await waitFor(
      () => c.node(1).logger.named("replication.isr_expand_refused").length > 0,
      "node 3's expansion refused",
    );
    expect(c.node(1).logger.named("replication.isr_expand_refused")).toEqual([
      expect.objectContaining({
        partition: "orders/0",
        node_id: 3,
        incarnation: "1",
        reason: expect.stringMatching(/leaving the cluster/),
      }),
    ]);
    // Node 3 holds the leader's whole log, and fetches on, yet stays out: asked once, not again.
    expect(c.node(3).broker.partitionLog("orders", 0).logEndOffset).toBe(leaderEnd);
    await new Promise((r) => setTimeout(r, 1000));
    expect((await c.state("orders")).state.isr).toEqual([1, 2]);
    expect(c.node(1).logger.named("replication.isr_expand_refused")).toHaveLength(1);
  });

  it("a follower whose ISR expansion etcd holds counts for the high watermark before the leader applies it", async () => {
    // The leader writes an expansion, then applies it locally once etcd's answer is back. In
    // between, etcd's ISR holds the follower (the controller may elect it) while the leader's own
    // ISR did not: it acknowledged records the follower never fetched, and a failover to the
    // follower then truncated them from every replica. The pending member counts at once (Kafka's
    // "maximal ISR", KIP-497).
    const gate: { release?: () => void } = {};
    let caught!: () => void;
    const expansionWritten = new Promise<void>((r) => (caught = r));
    const etcd = etcdThrough({
      // The answer to the leader's expansion of node 3 is held (etcd applied it).
      txn: async (request) => {
        const result = await client.txn(request);
        const expands = expandsNode3(request);
        if (expands && result.succeeded && gate.release === undefined)
          await new Promise<void>((go) => {
            gate.release = go;
            caught();
          });
        return result;
      },
    });
    const { c, leader } = await clusterWithNode3Outside(etcd);
    // Node 3 caught up: its expansion is in etcd, the answer not yet back at the leader.
    await expansionWritten;
    expect((await c.state("orders")).state.isr).toEqual([1, 2, 3]);
    await c.stopReplication(3);
    const x = leader.produce("orders", records(["x"]), { partition: 0 });
    // Node 2 has fsynced "x"; node 3, in etcd's ISR, has not: "x" must not be acknowledged.
    await waitFor(
      () => c.node(2).broker.partitionLog("orders", 0).highWatermark === 3,
      "node 2 to fsync x",
    );
    expect(await stillPending(x, 500)).toBe(true);
    expect(c.node(3).broker.partitionLog("orders", 0).logEndOffset).toBe(2);
    gate.release?.();
    await c.restartReplication(3, "orders");
    const r = await x;
    expect(r.spans[0].baseOffset).toBe(2);
    // At its acknowledgement node 3 holds it too.
    expect(c.node(3).broker.partitionLog("orders", 0).highWatermark).toBeGreaterThanOrEqual(3);
  });

  it("an ISR expansion whose answer was lost can never apply later: the leader fences it in etcd", async () => {
    // The expansion's answer is lost (the request may still be in etcd's queue). Had the leader
    // only read the key back, unchanged, and stopped counting the follower, the late write could
    // still put it in etcd's ISR. The leader writes the state it knows back by compare-and-set
    // on the same revision, so the late write's compare fails.
    type TxnRequest = Parameters<Etcd["txn"]>[0];
    let held: TxnRequest | undefined;
    let heldCaught!: () => void;
    const caught = new Promise<void>((r) => (heldCaught = r));
    const gate: { release?: () => void } = {};
    let settledAfterLoss!: () => void;
    const settled = new Promise<void>((r) => (settledAfterLoss = r));
    const partitionKey = (key: string) => key.endsWith("/partitions/orders/0");
    const etcd = etcdThrough({
      get: async (key) => {
        const kv = await client.get(key);
        if (held !== undefined && partitionKey(key)) settledAfterLoss();
        return kv;
      },
      txn: async (request) => {
        const expands = expandsNode3(request);
        if (expands && held === undefined) {
          held = request;
          await new Promise<void>((go) => {
            gate.release = go;
            heldCaught();
          });
          throw new Error("etcd: the answer was lost");
        }
        const result = await client.txn(request);
        if (held !== undefined && request.compare.some((c) => partitionKey(c.key)))
          settledAfterLoss();
        return result;
      },
    });
    const { c, leader } = await clusterWithNode3Outside(etcd);
    await caught;
    // No new expansion from node 3's fetches while the lost one is settled.
    await c.stopReplication(3);
    gate.release?.();
    await settled;
    // The lost write reaches etcd late: it must not apply.
    const late = await client.txn(held!);
    expect(late.succeeded).toBe(false);
    expect((await c.state("orders")).state.isr).toEqual([1, 2]);
    // The leader still acknowledges on nodes 1 and 2.
    const r = await leader.produce("orders", records(["x"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(2);
  });

  it("an expansion whose answer is lost is settled: counted while etcd holds it, dropped when it does not", async () => {
    // `applied`: etcd takes the first expansion and its answer is lost; otherwise no expansion
    // ever reaches etcd (each answer lost on the way there).
    const lossy = (applied: boolean): Etcd => {
      let lost = false;
      return etcdThrough({
        txn: async (request) => {
          const expands = expandsNode3(request);
          if (!expands || (lost && applied)) return client.txn(request);
          lost = true;
          if (applied) await client.txn(request);
          throw Object.assign(new Error("the connection broke after the request was sent"), {
            code: "indeterminate",
          });
        },
      });
    };
    for (const applied of [true, false]) {
      const { c, leader } = await clusterWithNode3Outside(lossy(applied));
      await waitFor(
        () => c.node(1).logger.named("replication.isr_change_failed").length > 0,
        "the expansion's answer to be lost",
      );
      // The leader settles it by a compare-and-set of the state as it was, with no state handed
      // to it.
      await waitFor(
        () => c.node(1).manager.describe()[0].isr.includes(3) === applied,
        "the leader to take what etcd holds",
      );
      await c.stopReplication(3);
      const x = leader.produce("orders", records(["x"]), { partition: 0 });
      if (applied) {
        // etcd's ISR holds node 3, which lacks "x": not acknowledged until it has it.
        expect(await stillPending(x, 500)).toBe(true);
        await c.restartReplication(3, "orders");
        await x;
        expect(c.node(3).broker.partitionLog("orders", 0).highWatermark).toBeGreaterThanOrEqual(3);
      } else {
        // The write never happened: node 3 holds no acknowledgement back.
        expect((await c.state("orders")).state.isr).toEqual([1, 2]);
        expect((await x).spans[0].baseOffset).toBe(2);
      }
    }
  });

  it("refuses a forged replica fetch and changes neither the ISR nor the high watermark (#27e)", async () => {
    const c = await cluster3();
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b"]), { partition: 0 });
    const before = await c.state("orders");
    const raw = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    const forged = {
      topic: "orders",
      partition: 0,
      replicaId: 3,
      leaderEpoch: 0,
      fetchOffset: 1000,
      lastFetchedEpoch: 0,
      maxBytes: 0,
      waitMs: 0,
      incarnation: "1",
    };
    await expectCode(
      raw.replicaFetch({ ...forged, credential: new Uint8Array(0) }),
      "unauthenticated",
    );
    const again = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    await expectCode(
      again.replicaFetch({ ...forged, credential: new TextEncoder().encode("esb_not-the-secret") }),
      "unauthenticated",
    );
    // With the credential but claiming a position past the log end, or as a node that is no replica.
    const broker = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    await expectCode(
      broker.replicaFetch({ ...forged, credential: c.secret, lastFetchedEpoch: -1 }),
      "offset_out_of_range",
    );
    await expectCode(
      broker.replicaFetch({ ...forged, replicaId: 9, credential: c.secret }),
      "invalid_request",
    );
    await expectCode(
      broker.replicaFetch({ ...forged, leaderEpoch: 7, credential: c.secret }),
      "not_leader",
    );
    await new Promise((r) => setTimeout(r, 100));
    const after = await c.state("orders");
    expect(after.modRevision).toBe(before.modRevision);
    expect(after.state.isr).toEqual(before.state.isr);
    expect((await leader.listOffsets({ topic: "orders", partition: 0 })).highWatermark).toBe(2);
    await raw.close();
    await again.close();
    await broker.close();
  });

  it("a replica fetch naming a node that is not registered live never adds it to the ISR", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b"]), { partition: 0 });
    // Node 3 dies: its lease expires and the controller shrinks the ISR.
    await c.stopReplication(3);
    await c.unregister(3);
    await c.setState("orders", { ...initial, isr: [1, 2] });
    const before = await c.state("orders");
    // Someone with the credential poses as node 3, caught up to the log end.
    const forger = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    const logEnd = c.node(1).broker.partitionLog("orders", 0).logEndOffset;
    await forger.replicaFetch({
      topic: "orders",
      partition: 0,
      replicaId: 3,
      leaderEpoch: 0,
      fetchOffset: logEnd,
      lastFetchedEpoch: -1,
      maxBytes: 0,
      waitMs: 0,
      credential: c.secret,
      incarnation: "1",
    });
    await new Promise((r) => setTimeout(r, 200));
    const after = await c.state("orders");
    expect(after.state.isr).toEqual([1, 2]);
    expect(after.modRevision).toBe(before.modRevision);
    await forger.close();
  });

  it("an old process of a replaced node fetches as it: the leader credits it nothing, its successor joins the ISR (attack11 F4)", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b"]), { partition: 0 });
    // Node 3's process is paused past its lease and leaves the ISR; a new process (an empty
    // disk) registers as node 3, incarnation "2"; then the old one (incarnation "1") resumes.
    await c.stopReplication(3);
    await c.setState("orders", { ...initial, isr: [1, 2] });
    await c.reregister(3, "2");
    await c.restartReplication(3, "orders", "1");
    await waitFor(
      () =>
        c
          .node(3)
          .logger.named("replication.fetch_failed")
          .some((f) =>
            /incarnation "1" of node 3.*registered as incarnation "2"/.test(String(f.error)),
          ),
      "the old process's fetches to be refused",
    );
    // Its log holds every record, yet it is no ISR member: the registered node 3 has nothing.
    await new Promise((r) => setTimeout(r, 300));
    expect((await c.state("orders")).state.isr).toEqual([1, 2]);
    const raw = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    const logEnd = c.node(1).broker.partitionLog("orders", 0).logEndOffset;
    const fetch = {
      topic: "orders",
      partition: 0,
      replicaId: 3,
      leaderEpoch: 0,
      fetchOffset: logEnd,
      lastFetchedEpoch: -1,
      maxBytes: 0,
      waitMs: 0,
      credential: c.secret,
    };
    await expectCode(raw.replicaFetch({ ...fetch, incarnation: "1" }), "invalid_request");
    await expectCode(raw.replicaFetch({ ...fetch, incarnation: "" }), "invalid_request");
    expect((await c.state("orders")).state.isr).toEqual([1, 2]);
    await raw.close();
    // The registered incarnation is credited: it rejoins once caught up.
    await c.stopReplication(3);
    await c.restartReplication(3, "orders");
    await waitFor(
      async () => (await c.state("orders")).state.isr.join() === "1,2,3",
      "the registered node 3 to rejoin the ISR",
    );
  });

  it("a follower whose copy records another topic id is refused inconsistent_topic_id, takes nothing and earns no ISR place (attack15b F5)", async () => {
    const c = await cluster3();
    // Node 3 holds a replaced copy of a topic of this name (id B: it has applied a deletion and a
    // re-creation the leader has not seen yet), nodes 1 (leader) and 2 the other one (id A).
    const idA = "a".repeat(32);
    const idB = "b".repeat(32);
    const initial = { ...initialPartitionState([1, 2, 3], 2), isr: [1, 2] };
    for (const id of [1, 2, 3]) {
      await c.node(id).broker.createTopic({ name: "reborn", partitions: 1 });
      await c.node(id).broker.setTopicId("reborn", id === 3 ? idB : idA);
    }
    await c.setState("reborn", initial);
    const leader = await c.node(1).client();
    await leader.produce("reborn", records(["new-1", "new-2"]), { partition: 0 });
    await waitFor(
      () =>
        c
          .node(3)
          .logger.named("replication.fetch_failed")
          .some((f) => /topic id b{32}, this leader's of a{32}/.test(String(f.error))),
      "node 3's fetches to be refused",
    );
    const raw = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    const fetch = {
      topic: "reborn",
      partition: 0,
      replicaId: 3,
      leaderEpoch: 0,
      fetchOffset: 0,
      lastFetchedEpoch: -1,
      maxBytes: 0,
      waitMs: 0,
      credential: c.secret,
      incarnation: "1",
    };
    await expectCode(raw.replicaFetch({ ...fetch, topicId: idB }), "inconsistent_topic_id");
    await raw.close();
    await new Promise((r) => setTimeout(r, 500));
    expect((await c.state("reborn")).state.isr).not.toContain(3);
    // Nothing of the other incarnation's records reached node 3.
    expect(c.node(3).broker.partitionLog("reborn", 0).logEndOffset).toBe(0);
    // Node 2, of the same incarnation as the leader, holds the new records.
    await waitFor(
      () => c.node(2).broker.partitionLog("reborn", 0).logEndOffset === 2,
      "node 2 to fetch the new records",
    );
  });

  it("a leader on a copy of another topic of the name never writes the new topic's ISR (attack16 F6)", async () => {
    const c = await cluster3({ replicaLagMs: 400 });
    await c.createTopic("stale", initialPartitionState([1, 2, 3], 2));
    await waitFor(
      async () => (await c.state("stale")).state.isr.length === 3,
      "both followers in the ISR",
    );
    // The leader's copy was made from a topic record etcd no longer holds: the topic was deleted
    // and created again, and this broker's view missed it (a watch that dropped events).
    await c.node(1).broker.setTopicId("stale", "a".repeat(32), 1);
    await client.put(`${c.prefix}/topics/stale`, JSON.stringify({ topic_id: "b".repeat(32) }));
    await c.stopReplication(2);
    await c.stopReplication(3);
    await waitFor(
      () => c.node(1).logger.named("replication.isr_change_refused").length > 0,
      "the ISR shrink to be refused",
    );
    const state = (await c.state("stale")).state;
    expect(state.isr.sort()).toEqual([1, 2, 3]);
    expect(state.committed_offset).toBe(0);
  });

  it("an old process's fetches before the leader sees its successor's registration earn no ISR place (issue #16, window 1)", async () => {
    const c = await cluster3({ replicaLagMs: 400 });
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b"]), { partition: 0 });
    // Node 3's old process (incarnation "1") is paused and leaves the ISR; writes go on.
    await c.stopReplication(3);
    await c.setState("orders", { ...initial, isr: [1, 2] });
    await leader.produce("orders", records(["c"]), { partition: 0 });
    // A replacement on an empty disk registers as node 3 (incarnation "2") in etcd; the leader's
    // watch has not delivered it yet. Then the old process resumes and fetches as "1", the only
    // incarnation of node 3 the leader knows: it catches up to the log end.
    await c.reregister(3, "2", { unseen: true });
    await c.restartReplication(3, "orders", "1");
    await waitFor(
      async () =>
        (await c.state("orders")).state.isr.includes(3) ||
        c.node(1).logger.named("replication.isr_expand_refused").length > 0,
      "the leader to add node 3 to the ISR or refuse to",
    );
    // etcd names incarnation "2", which holds nothing: node 3 must not be in the ISR.
    expect((await c.state("orders")).state.isr).toEqual([1, 2]);
    expect(c.node(1).logger.named("replication.isr_expand_refused")[0]).toMatchObject({
      node_id: 3,
      incarnation: "1",
      registered: "2",
    });
    // The watch catches up: the old process is refused outright, its successor joins on its own.
    c.deliverRegistrations();
    await c.stopReplication(3);
    await c.restartReplication(3, "orders");
    await waitFor(
      async () => (await c.state("orders")).state.isr.join() === "1,2,3",
      "the registered node 3 to rejoin the ISR",
    );
    await leader.produce("orders", records(["d"]), { partition: 0 });
  });

  it("an elected replica whose log lacks committed records refuses to lead; nothing acknowledged is truncated (issue #16, window 2)", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    // Node 3 never fetched (its log is empty), but a state names it in the ISR: what a stale
    // credit, or a disk replaced under an ISR member, leaves behind.
    await c.stopReplication(3);
    await c.setState("orders", { ...initial, isr: [1, 2] });
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a", "b", "c"]), { partition: 0 });
    const acked = await storedValues(c.node(2).broker, "orders");
    expect(acked).toEqual(["0:a", "1:b", "2:c"]);
    // Node 1 dies; the controller elects node 3 from an ISR [2, 3] whose committed offset is 3.
    await c.stopReplication(1);
    await c.setState("orders", {
      ...initial,
      leader: 3,
      leader_epoch: 1,
      isr: [2, 3],
      committed_offset: 3,
    });
    await c.restartReplication(3, "orders");
    await waitFor(
      async () =>
        c.node(2).broker.partitionLog("orders", 0).logEndOffset < 3 ||
        (await c.state("orders")).state.leader_epoch > 1,
      "node 2 to truncate, or node 3 to give the leadership up",
    );
    // Node 2 still holds every acknowledged record; node 3 led nothing and left the ISR.
    expect(await storedValues(c.node(2).broker, "orders")).toEqual(acked);
    const after = (await c.state("orders")).state;
    expect(after).toMatchObject({ leader: -1, leader_epoch: 2, isr: [2], elr: [] });
    expect(c.node(3).logger.named("replication.leadership_refused")[0]).toMatchObject({
      durable_log_end: 0,
      committed_offset: 3,
    });
    expect(c.node(3).manager.describe()[0].role).toBe("none");
    // The controller's next pass elects node 2; node 3 fetches every record from it.
    await c.setState("orders", { ...after, leader: 2, leader_epoch: 3 });
    await waitFor(
      async () => (await c.state("orders")).state.isr.join() === "2,3",
      "node 3 to catch up and join the ISR",
    );
    expect(await storedValues(c.node(3).broker, "orders")).toEqual(acked);
  });

  it("with API keys on and no broker credential, a leader serves no replica fetch (attack7 F1)", async () => {
    const c = await cluster3({ withKeys: true, noSecret: true });
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const keyless = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    const refused = await keyless
      .replicaFetch({
        topic: "orders",
        partition: 0,
        replicaId: 2,
        leaderEpoch: 0,
        fetchOffset: 0,
        lastFetchedEpoch: -1,
        maxBytes: 0,
        waitMs: 0,
        credential: new Uint8Array(0),
        incarnation: "1",
      })
      .then(
        () => null,
        (err: unknown) => err as { code?: string; message?: string },
      );
    expect(refused?.code).toBe("unauthenticated");
    expect(refused?.message).toMatch(/no --cluster-secret-file/);
    await keyless.close();
    expect(c.node(1).logger.events.some((e) => e.event === "cluster.no_broker_credential")).toBe(
      true,
    );
  });

  it("with API keys on, brokers still replicate and no client key passes as the broker credential", async () => {
    const c = await cluster3({ withKeys: true });
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const admin = await c.node(1).client(c.adminKey);
    const r = await admin.produce("orders", records(["a"]), { partition: 0 });
    expect(r.spans[0].count).toBe(1);
    expect(c.node(2).broker.partitionLog("orders", 0).highWatermark).toBe(1);
    const fetch = {
      topic: "orders",
      partition: 0,
      replicaId: 2,
      leaderEpoch: 0,
      fetchOffset: 0,
      lastFetchedEpoch: -1,
      maxBytes: 0,
      waitMs: 0,
      incarnation: "1",
    };
    // An admin key, on an authenticated connection or as the credential itself, does not pass.
    await expectCode(
      admin.replicaFetch({ ...fetch, credential: new Uint8Array(0) }),
      "unauthenticated",
    );
    const keyless = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    await expectCode(
      keyless.replicaFetch({ ...fetch, credential: new TextEncoder().encode(c.adminKey) }),
      "unauthenticated",
    );
    await keyless.close();
    // A keyless connection may not use client apis either.
    const other = await TcpClient.connect({ host: "127.0.0.1", port: c.node(1).port });
    await expectCode(other.listOffsets({ topic: "orders", partition: 0 }), "unauthenticated");
    await other.close();
  });

  it("a deposed leader fails its pending acknowledgements and acknowledges nothing more", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["a"]), { partition: 0 });
    await c.stopReplication(2);
    await c.stopReplication(3);
    const pending = leader.produce("orders", records(["b"]), { partition: 0 });
    await new Promise((r) => setTimeout(r, 200));
    const next: PartitionState = { ...initial, leader: 2, leader_epoch: 1 };
    await c.setState("orders", next);
    await expectCode(pending, "not_leader");
    await expectCode(leader.produce("orders", records(["c"]), { partition: 0 }), "not_leader");
    await expectCode(leader.fetch({ topic: "orders", partition: 0, offset: 0 }), "not_leader");

    // A leader whose membership lease is not live acknowledges nothing either.
    const d = await cluster3();
    await d.createTopic("events", initialPartitionState([1, 2, 3], 2));
    const l2 = await d.node(1).client();
    await l2.produce("events", records(["a"]), { partition: 0 });
    await d.stopReplication(2);
    await d.stopReplication(3);
    const waiting = l2.produce("events", records(["b"]), { partition: 0 });
    await new Promise((r) => setTimeout(r, 100));
    d.node(1).manager.setMembershipLive(false);
    await expectCode(waiting, "not_leader");
    await expectCode(l2.produce("events", records(["c"]), { partition: 0 }), "not_leader");
    // Reads of committed records go on.
    expect((await l2.fetch({ topic: "events", partition: 0, offset: 0 })).recordCount).toBe(1);
  });

  it("truncates a deposed leader's unreplicated records after a leader change: the logs end identical", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    await one.produce("orders", records(["a", "b", "c"]), { partition: 0 });
    await c.stopReplication(2);
    await c.stopReplication(3);
    // Stored on node 1 only, never acknowledged.
    const lost = one.produce("orders", records(["lost-1", "lost-2"]), { partition: 0 });
    await waitFor(
      () => c.node(1).broker.partitionLog("orders", 0).highWatermark === 5,
      "node 1 to store 5",
    );
    // The controller moves the leadership to node 2 (in the ISR, it holds every committed record).
    await c.setState("orders", { ...initial, leader: 2, leader_epoch: 1, isr: [1, 2, 3] });
    await expectCode(lost, "not_leader");
    await c.restartReplication(2, "orders");
    await c.restartReplication(3, "orders");
    const two = await c.node(2).client();
    const r = await two.produce("orders", records(["d", "e", "f", "g"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(3);
    await waitFor(
      () => c.node(1).broker.partitionLog("orders", 0).highWatermark === 7,
      "node 1 to catch up after truncating",
    );
    const bytes = await storedBytes(c.node(2).broker, "orders");
    expect(await storedBytes(c.node(1).broker, "orders")).toEqual(bytes);
    await waitFor(
      () => c.node(3).broker.partitionLog("orders", 0).highWatermark === 7,
      "node 3 to catch up",
    );
    expect(await storedBytes(c.node(3).broker, "orders")).toEqual(bytes);
    const values = (await two.fetch({ topic: "orders", partition: 0, offset: 0 })).records.map(
      (x) => new TextDecoder().decode(x.value),
    );
    expect(values).toEqual(["a", "b", "c", "d", "e", "f", "g"]);
    expect(c.node(1).logger.named("replication.truncating").length > 0).toBe(true);
    const epochs = JSON.parse(
      readFileSync(join(c.node(1).dataDir, "topics", "orders", "0", "leader-epochs.json"), "utf8"),
    );
    expect(epochs.epochs).toEqual([
      { epoch: 0, start_offset: 0 },
      { epoch: 1, start_offset: 3 },
    ]);
  });

  it("a deposed leader restarted from its data directory truncates by its epoch history on disk", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    await one.produce("orders", records(["a", "b"]), { partition: 0 });
    await c.stopReplication(2);
    await c.stopReplication(3);
    const lost = one.produce("orders", records(["lost-1", "lost-2", "lost-3"]), { partition: 0 });
    // Never acknowledged: the broker goes away (the restart below) before the followers fetch.
    const lostRefused = expect(lost).rejects.toBeDefined();
    await waitFor(
      () => c.node(1).broker.partitionLog("orders", 0).highWatermark === 5,
      "node 1 to store 5",
    );
    // Node 1 stops; the controller moves the leadership; node 1 comes back from its files.
    await c.stopReplication(1);
    await c.restartNode(1, "orders");
    await lostRefused;
    await c.setState("orders", { ...initial, leader: 2, leader_epoch: 1 });
    await c.restartReplication(2, "orders");
    await c.restartReplication(3, "orders");
    await c.restartReplication(1, "orders");
    const two = await c.node(2).client();
    await two.produce("orders", records(["c"]), { partition: 0 });
    const node1 = () => c.node(1).broker.partitionLog("orders", 0);
    await waitFor(
      () => node1().logEndOffset === 3 && node1().highWatermark === 3,
      "node 1 to truncate and catch up",
    );
    expect(await storedBytes(c.node(1).broker, "orders")).toEqual(
      await storedBytes(c.node(2).broker, "orders"),
    );
    expect(c.node(1).logger.named("replication.truncating")).toMatchObject([
      { epoch: 0, leader_end_offset: 2, log_end_offset: 5, truncate_to: 2 },
    ]);
  });

  it("a produce admitted as leader that reaches the write loop after the switch to follower appends nothing; the logs end identical", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    await one.produce("orders", records(["a", "b", "c"]), { partition: 0 });
    const broker1 = c.node(1).broker;
    const log1 = broker1.partitionLog("orders", 0);
    // Produces node 1 admitted as leader, waiting in its write loop (held).
    const release = await holdWriteLoop(broker1, "orders");
    const plain = broker1.produce({ topic: "orders", partition: 0, batch: batchOf(["stray-1"]) });
    const idempotent = broker1.produce({
      topic: "orders",
      partition: 0,
      batch: batchOf(["stray-2"]),
      producer: { id: "p-1", epoch: 0, sequence: 0 },
    });
    // The controller moves the leadership to node 2 at epoch 1; node 1 hears it first.
    await client.put(
      `${c.prefix}/partitions/orders/0`,
      formatPartitionState({ ...initial, leader: 2, leader_epoch: 1, isr: [2, 3] }),
    );
    const { applied } = await c.applyTo(1, "orders");
    // Issued, not applied yet: this one is still admitted as leader.
    const racing = broker1.produce({ topic: "orders", partition: 0, batch: batchOf(["stray-3"]) });
    await waitFor(() => c.node(1).manager.describe()[0].role !== "leader", "node 1 to resign");
    // After the role change the leader-side produce path refuses at once.
    await expectFenced(
      broker1.produce({ topic: "orders", partition: 0, batch: batchOf(["stray-4"]) }),
    );
    // The role change waits for the write loop (the follower has not fetched yet).
    await new Promise((r) => setTimeout(r, 100));
    expect(c.node(1).manager.describe()[0].role).toBe("none");
    await release();
    await applied;
    await expectFenced(plain);
    await expectFenced(idempotent);
    await expectFenced(racing);
    // Nothing was appended, so there is nothing to truncate: node 2 is not leading yet, so node
    // 1's follower has not fetched anything either.
    expect(log1.logEndOffset).toBe(3);
    expect(log1.highWatermark).toBe(3);
    expect(c.node(1).manager.describe()[0]).toMatchObject({ role: "follower", leader: 2 });

    await c.sync("orders");
    const two = await c.node(2).client();
    const r = await two.produce("orders", records(["d", "e"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(3);
    await waitFor(() => log1.highWatermark === 5, "node 1 to replicate d, e");
    const expected = ["0:a", "1:b", "2:c", "3:d", "4:e"];
    await expectEveryNodeHolds(c, expected);
    expect(c.node(1).logger.named("replication.truncating")).toEqual([]);
    // The idempotent producer's retry goes to the new leader and is stored once there.
    const retried = await two.produceIdempotent("orders", records(["stray-2"]), {
      partition: 0,
      producer: { id: "p-1", epoch: 0, sequence: 0 },
    });
    expect(retried).toMatchObject({ duplicate: false, spans: [{ baseOffset: 5, count: 1 }] });
  });

  it("an append already in the write loop when a leader becomes a follower lands first, and is truncated before it fetches", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    await one.produce("orders", records(["a", "b", "c"]), { partition: 0 });
    const log1 = c.node(1).broker.partitionLog("orders", 0);
    // An append node 1 admitted as leader whose write is under way (held in its write loop):
    // what a produce looks like between its admission and its write.
    let releaseWrite!: () => void;
    const writeHeld = new Promise<void>((r) => (releaseWrite = r));
    const stray = log1.append(batchOf(["stray"]), {
      admit: () => {},
      beforeWrite: () => writeHeld,
    });
    await new Promise((r) => setTimeout(r, 20));
    // Node 2 leads at epoch 1 from offset 3 and acknowledges "d" there with node 3.
    await client.put(
      `${c.prefix}/partitions/orders/0`,
      formatPartitionState({ ...initial, leader: 2, leader_epoch: 1, isr: [2, 3] }),
    );
    await (await c.applyTo(2, "orders")).applied;
    await (await c.applyTo(3, "orders")).applied;
    const two = await c.node(2).client();
    const acked = await two.produce("orders", records(["d"]), { partition: 0 });
    expect(acked.spans[0].baseOffset).toBe(3);
    // Node 1 hears it: the role change waits for the append in its write loop before it follows.
    const { applied } = await c.applyTo(1, "orders");
    await waitFor(() => c.node(1).manager.describe()[0].role !== "leader", "node 1 to resign");
    await new Promise((r) => setTimeout(r, 100));
    expect(c.node(1).manager.describe()[0].role).toBe("none");
    expect(log1.logEndOffset).toBe(3);
    releaseWrite();
    expect(await stray).toEqual({ baseOffset: 3, count: 1 });
    await applied;
    // Its first fetch carries the stray record's epoch (0), which node 2's history ends at 3.
    await waitFor(
      () => c.node(1).logger.named("replication.truncating").length > 0,
      "node 1 to truncate",
    );
    expect(c.node(1).logger.named("replication.truncating")[0]).toMatchObject({
      epoch: 0,
      leader_end_offset: 3,
      log_end_offset: 4,
      truncate_to: 3,
    });
    await waitFor(() => log1.highWatermark === 4, "node 1 to replicate d");
    for (const id of [1, 2, 3])
      expect(await storedValues(c.node(id).broker, "orders")).toEqual(["0:a", "1:b", "2:c", "3:d"]);
    const bytes = await storedBytes(c.node(2).broker, "orders");
    expect(await storedBytes(c.node(1).broker, "orders")).toEqual(bytes);
  });

  it("a leader whose membership lease may have expired appends nothing, even a produce it admitted before", async () => {
    const c = await cluster3();
    await c.createTopic("orders", initialPartitionState([1, 2, 3], 2));
    const one = await c.node(1).client();
    await one.produce("orders", records(["a"]), { partition: 0 });
    const broker1 = c.node(1).broker;
    const log1 = broker1.partitionLog("orders", 0);
    const release = await holdWriteLoop(broker1, "orders");
    const admitted = broker1.produce({ topic: "orders", partition: 0, batch: batchOf(["x"]) });
    const idempotent = broker1.produce({
      topic: "orders",
      partition: 0,
      batch: batchOf(["y"]),
      producer: { id: "p-1", epoch: 0, sequence: 0 },
    });
    // Paused past its lease: the broker has not heard from etcd that the lease is gone.
    c.setLeaseExpiresAt(1, Date.now() - 1);
    await release();
    await expect(admitted).rejects.toMatchObject({ kind: { code: "not_leader" } });
    await expect(idempotent).rejects.toMatchObject({ kind: { code: "not_leader" } });
    await expectCode(one.produce("orders", records(["z"]), { partition: 0 }), "not_leader");
    expect(log1.logEndOffset).toBe(1);
    // Reads of committed records go on; a renewal makes it write again.
    expect((await one.fetch({ topic: "orders", partition: 0, offset: 0 })).recordCount).toBe(1);
    c.setLeaseExpiresAt(1, Date.now() + 60_000);
    const r = await one.produce("orders", records(["w"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(1);
  });

  it("a follower checks every CRC end to end and appends nothing of a corrupt answer (#27d)", async () => {
    // Followers 2 and 3 join the ISR at once; stopped, they leave it after 400 ms.
    const c = await cluster3({ replicaLagMs: 400 });
    await c.createTopic("orders", { ...initialPartitionState([1, 2, 3], 1), isr: [1] });
    await c.stopReplication(2);
    await c.stopReplication(3);
    const leader = await c.node(1).client();
    await leader.produce("orders", records(["good-1", "good-2"]), { partition: 0 });
    await leader.produce("orders", records(["will-be-flipped"]), { partition: 0 });
    // Between leader and follower, a link that flips one bit of that record's value.
    const marker = Buffer.from("will-be-flipped");
    const proxy = createServer((socket) => {
      const upstream = connect({ host: "127.0.0.1", port: c.node(1).port });
      socket.pipe(upstream);
      upstream.on("data", (chunk: Buffer) => {
        const at = chunk.indexOf(marker);
        if (at >= 0) chunk[at] ^= 0x01;
        socket.write(chunk);
      });
      upstream.on("end", () => socket.end());
      upstream.on("error", () => socket.destroy());
      socket.on("error", () => upstream.destroy());
      socket.on("close", () => upstream.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    onTestFinished(() => new Promise<void>((resolve) => proxy.close(() => resolve())));
    c.setAddress(1, `127.0.0.1:${(proxy.address() as { port: number }).port}`);
    await c.restartReplication(2, "orders");
    await waitFor(
      () => c.node(2).logger.named("replication.corrupt_records").length > 0,
      "the follower to report the corrupt answer",
    );
    const follower = c.node(2).broker.partitionLog("orders", 0);
    // Nothing of the answer was appended (the good records came in the same answer).
    expect(follower.logEndOffset).toBe(0);
    // The leader's own copy is intact: a direct link replicates everything.
    c.setAddress(1, c.node(1).tcp);
    await c.stopReplication(2);
    await c.restartReplication(2, "orders");
    await waitFor(() => follower.highWatermark === 3, "the follower to catch up over a clean link");
    expect(await storedBytes(c.node(2).broker, "orders")).toEqual(
      await storedBytes(c.node(1).broker, "orders"),
    );
  });

  it("a follower behind the leader's log start (retention) skips to it and replicates the rest", async () => {
    // Followers 2 and 3 join the ISR at once; stopped, they leave it after 400 ms.
    const c = await cluster3({ replicaLagMs: 400 });
    await c.createTopic(
      "orders",
      { ...initialPartitionState([1, 2, 3], 1), isr: [1] },
      { segment_bytes: 1024, retention_bytes: 1024 },
    );
    await c.stopReplication(2);
    await c.stopReplication(3);
    const leader = await c.node(1).client();
    for (let i = 0; i < 10; i++)
      await leader.produce(
        "orders",
        records(Array.from({ length: 5 }, (_, j) => `r${i}-${j}-${"x".repeat(30)}`)),
        { partition: 0 },
      );
    await c.node(1).broker.cleanup("orders");
    const leaderLog = c.node(1).broker.partitionLog("orders", 0);
    expect(leaderLog.logStartOffset).toBeGreaterThan(0);
    await c.restartReplication(2, "orders");
    const followerLog = c.node(2).broker.partitionLog("orders", 0);
    await waitFor(
      () => followerLog.highWatermark === 50,
      "the follower to replicate from the log start",
    );
    const fromStart = async (log: typeof leaderLog) =>
      (await log.read({ offset: leaderLog.logStartOffset, maxRecords: 100, maxBytes: 1 << 20 }))
        .bytes;
    expect(Buffer.from(await fromStart(followerLog))).toEqual(
      Buffer.from(await fromStart(leaderLog)),
    );
    await waitFor(
      async () => (await c.state("orders")).state.isr.includes(2),
      "node 2 to join the ISR",
    );
  });

  it("keeps healthy followers in the ISR across a leader change, and the topic's replica_lag_ms applies (#27b)", async () => {
    const c = await cluster3({ replicaLagMs: 300 });
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    await (await c.node(1).client()).produce("orders", records(["a"]), { partition: 0 });
    await c.setState("orders", { ...initial, leader: 2, leader_epoch: 1 });
    const two = await c.node(2).client();
    // Several lag periods pass: every follower fetched in time, none left.
    for (let i = 0; i < 8; i++) {
      await two.produce("orders", records([`b${i}`]), { partition: 0 });
      await new Promise((r) => setTimeout(r, 100));
    }
    const { state, modRevision } = await c.state("orders");
    expect(state.isr).toEqual([1, 2, 3]);
    // A stopped follower leaves after the topic's replica_lag_ms (2 s here), not the default 300 ms.
    await c.node(2).broker.updateTopicConfig("orders", { replica_lag_ms: 2000 });
    await c.stopReplication(3);
    const stoppedAt = Date.now();
    await new Promise((r) => setTimeout(r, 800));
    expect((await c.state("orders")).modRevision).toBe(modRevision);
    await waitFor(async () => !(await c.state("orders")).state.isr.includes(3), "node 3 to leave");
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(2000);
  });

  it("replicates a topic deleted and created again under the same name from scratch", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    await one.produce("orders", records(["old-1", "old-2"]), { partition: 0 });
    for (const n of c.nodes) await n.broker.deleteTopic("orders");
    await c.createTopic("orders", { ...initial, leader: 2, leader_epoch: 0 });
    const two = await c.node(2).client();
    const r = await two.produce("orders", records(["new"]), { partition: 0 });
    expect(r.spans[0].baseOffset).toBe(0);
    for (const id of [1, 3])
      expect(c.node(id).broker.partitionLog("orders", 0).highWatermark).toBe(1);
    expect(await storedBytes(c.node(1).broker, "orders")).toEqual(
      await storedBytes(c.node(2).broker, "orders"),
    );
  });

  it("a new leader deduplicates an idempotent producer's retry (#28)", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    const producer = { id: "p-1", epoch: 0, sequence: 0 };
    const first = await one.produceIdempotent("orders", records(["a", "b", "c"]), {
      partition: 0,
      producer,
    });
    expect(first.spans[0].baseOffset).toBe(0);
    await c.setState("orders", { ...initial, leader: 2, leader_epoch: 1 });
    const two = await c.node(2).client();
    const retry = await two.produceIdempotent("orders", records(["a", "b", "c"]), {
      partition: 0,
      producer,
    });
    expect(retry.duplicate).toBe(true);
    expect(retry.spans).toEqual(first.spans);
    const next = await two.produceIdempotent("orders", records(["d"]), {
      partition: 0,
      producer: { ...producer, sequence: 3 },
    });
    expect(next.spans[0].baseOffset).toBe(3);
    const fetched = await two.fetch({ topic: "orders", partition: 0, offset: 0 });
    expect(fetched.recordCount).toBe(4);
  });

  it("after truncation a replica answers a retry with the offsets the records really have (#28)", async () => {
    const c = await cluster3();
    const initial = initialPartitionState([1, 2, 3], 2);
    await c.createTopic("orders", initial);
    const one = await c.node(1).client();
    await one.produce("orders", records(["a"]), { partition: 0 });
    await c.stopReplication(2);
    await c.stopReplication(3);
    const producer = { id: "p-2", epoch: 0, sequence: 0 };
    // Stored on node 1 only (offsets 1-2), never acknowledged.
    const lost = one.produceIdempotent("orders", records(["x", "y"]), { partition: 0, producer });
    await waitFor(
      () => c.node(1).broker.partitionLog("orders", 0).highWatermark === 3,
      "node 1 to store it",
    );
    await c.setState("orders", { ...initial, leader: 2, leader_epoch: 1 });
    await expectCode(lost, "not_leader");
    await c.restartReplication(2, "orders");
    await c.restartReplication(3, "orders");
    const two = await c.node(2).client();
    // Other records take offsets 1-2 under the new leader.
    await two.produce("orders", records(["b", "c"]), { partition: 0 });
    await waitFor(
      () => c.node(1).broker.partitionLog("orders", 0).highWatermark === 3,
      "node 1 to converge",
    );
    // Node 1 leads again. The producer's retry must not be answered with offsets 1-2 (they hold
    // "b" and "c" now): it is appended.
    await c.setState("orders", { ...initial, leader: 1, leader_epoch: 2 });
    const retried = await one.produceIdempotent("orders", records(["x", "y"]), {
      partition: 0,
      producer,
    });
    expect(retried).toMatchObject({
      duplicate: false,
      spans: [{ partition: 0, baseOffset: 3, count: 2 }],
    });
    const again = await one.produceIdempotent("orders", records(["x", "y"]), {
      partition: 0,
      producer,
    });
    expect(again).toMatchObject({
      duplicate: true,
      spans: [{ partition: 0, baseOffset: 3, count: 2 }],
    });
    const values = (await one.fetch({ topic: "orders", partition: 0, offset: 0 })).records.map(
      (r) => new TextDecoder().decode(r.value),
    );
    expect(values).toEqual(["a", "b", "c", "x", "y"]);
  });
});
