/**
 * Riding out a lost lease (docs/cluster.md "Riding out a lost lease"; attack finding F6) on the
 * in-memory etcd (test/helpers/fake-etcd.ts) and a manual clock: a broker whose lease etcd
 * revoked while its process ran registers again with the same incarnation, and the controller
 * neither moves its leaderships nor takes it out of an ISR for that; a broker that does not come
 * back within the grace, one that really restarted (a new incarnation), and one that left
 * cleanly are gone as before. The real processes under real etcd leader stalls:
 * test/e2e/cluster-lease.test.ts. And a state written without a leader (a leader gave its
 * leadership up) makes the controller elect another at once, not at its next resync.
 */
import { afterEach, describe, expect, it } from "vitest";
import { incarnationsKey, logEndsKey, partitionKey } from "../../src/cluster/keys.ts";
import {
  brokerKey,
  departedKey,
  type JoinOptions,
  joinCluster,
  parseRegistration,
} from "../../src/cluster/membership.ts";
import {
  controllerUpdate,
  formatPartitionState,
  initialPartitionState,
  type PartitionState,
  parsePartitionState,
  resignLeadership,
} from "../../src/cluster/partition-state.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { startTestMember, type TestMember, testJoinOptions } from "../helpers/cluster-node.ts";
import { FakeEtcd, settle, until } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
const graceMs = 3000;
const cleanups: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function startBroker(
  etcd: FakeEtcd,
  clock: ManualClock,
  nodeId: number,
  dataDir: JoinOptions["dataDir"] = null,
): Promise<TestMember> {
  const b = await startTestMember({
    etcd,
    clock,
    nodeId,
    join: { dataDir },
    controller: { lapseGraceMs: graceMs },
  });
  return b;
}

async function readState(etcd: FakeEtcd, topic: string): Promise<PartitionState> {
  const key = partitionKey(prefix, topic, 0);
  const kv = await etcd.get(key);
  if (kv === null) throw new Error(`${key} is missing`);
  return parsePartitionState(key, kv.value);
}

/**
 * Three brokers, a controller, and two partitions (replication factor 3, min ISR 2) led by
 * node 1 and node 2, with the controller's incarnations recorded.
 */
async function cluster() {
  const etcd = new FakeEtcd();
  const clock = new ManualClock();
  const brokers: TestMember[] = [];
  for (const id of [1, 2, 3]) brokers.push(await startBroker(etcd, clock, id));
  await etcd.put(
    partitionKey(prefix, "a", 0),
    formatPartitionState(initialPartitionState([1, 2, 3], 2)),
  );
  await etcd.put(
    partitionKey(prefix, "b", 0),
    formatPartitionState(initialPartitionState([2, 3, 1], 2)),
  );
  await until("incarnations recorded", async () => {
    const kv = await etcd.get(incarnationsKey(prefix));
    return kv !== null && Object.keys(JSON.parse(kv.value)).length === 3;
  });
  return { etcd, clock, brokers };
}

/**
 * A crash: the broker stops renewing and its registration goes with its lease, with no departure
 * recorded (before any watch event is delivered, the fake's watches being macrotasks).
 */
async function crash(etcd: FakeEtcd, b: TestMember): Promise<void> {
  await b.stop();
  await etcd.delete(departedKey(prefix, b.nodeId));
}

/** The controller's passes so far, over every broker. */
const passes = (brokers: TestMember[]) => brokers.reduce((n, b) => n + b.controller.passes, 0);

describe("a lost lease is not a restart", () => {
  it("a broker whose lease etcd revoked registers again with its incarnation and first revision", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock();
    const m = await joinCluster(testJoinOptions(etcd, clock, 1));
    cleanups.push(() => m.close());
    const changes: boolean[] = [];
    m.onLiveChange((live) => changes.push(live));
    const first = parseRegistration((await etcd.get(brokerKey(prefix, 1)))!);
    const firstRevision = m.registeredRevision;
    expect(first.incarnation).toBe(m.leaseId);
    expect(first.registered_revision).toBeUndefined();

    await etcd.leaseRevoke(m.leaseId);
    expect(await etcd.get(brokerKey(prefix, 1))).toBeNull();
    await m.checkNow();
    expect(changes).toEqual([false, true]);
    expect(m.live).toBe(true);
    expect(m.leaseId).not.toBe(first.incarnation);
    expect(m.incarnation).toBe(first.incarnation);
    expect(m.registeredRevision).toBe(firstRevision);
    const kv = (await etcd.get(brokerKey(prefix, 1)))!;
    expect(kv.lease).toBe(m.leaseId);
    expect(parseRegistration(kv)).toMatchObject({
      incarnation: first.incarnation,
      registered_revision: firstRevision,
    });
  });

  it("without the watch, the next renewal notices the revoked lease and registers again", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock();
    const m = await joinCluster(testJoinOptions(etcd, clock, 1));
    cleanups.push(() => m.close());
    const incarnation = m.incarnation;
    await etcd.leaseRevoke(m.leaseId);
    clock.advance(2000); // a third of the 6 s TTL
    await until("registered again", async () => (await etcd.get(brokerKey(prefix, 1))) !== null);
    expect(parseRegistration((await etcd.get(brokerKey(prefix, 1)))!).incarnation).toBe(
      incarnation,
    );
  });

  it("a restarted process on the same data directory is a new incarnation", async () => {
    const etcd = new FakeEtcd();
    const clock = new ManualClock();
    const a = await joinCluster(testJoinOptions(etcd, clock, 1));
    cleanups.push(() => a.close());
    const b = await joinCluster({
      ...testJoinOptions(etcd, clock, 1),
      dataDir: { clusterId: a.clusterId, nodeId: 1 },
    });
    cleanups.push(() => b.close());
    expect(b.incarnation).not.toBe(a.incarnation);
    expect(b.registeredRevision).toBeGreaterThan(a.registeredRevision);
    const reg = parseRegistration((await etcd.get(brokerKey(prefix, 1)))!);
    expect(reg.incarnation).toBe(b.incarnation);
    expect(reg.registered_revision).toBeUndefined();
    expect(await etcd.leaseKeepAlive(a.leaseId)).toBe(0);
  });
});

describe("controller: a lapsed registration keeps its place for the grace", () => {
  it("every lease revoked at once (an etcd leader change): no leader moves, no ISR shrinks", async () => {
    const { etcd, clock, brokers } = await cluster();
    const before = [await readState(etcd, "a"), await readState(etcd, "b")];
    const revisions = [
      (await etcd.get(partitionKey(prefix, "a", 0)))!.modRevision,
      (await etcd.get(partitionKey(prefix, "b", 0)))!.modRevision,
    ];
    // etcd's old leader revokes every lease: registrations and the controller key go together.
    for (const b of brokers) await etcd.leaseRevoke(b.membership.leaseId);
    await settle();
    // One broker comes back at once (its watch), the others at their next renewal; meanwhile the
    // controller key is free and the campaign on a revoked lease fails and retries.
    await brokers[2].membership.checkNow();
    clock.advance(1000);
    await settle();
    clock.advance(1000);
    await settle();
    await until("all registered again", async () => brokers.every((b) => b.membership.live));
    const passesBefore = passes(brokers);
    clock.advance(500);
    await until("a controller elected again, and a pass made", async () => {
      await settle(2);
      clock.advance(200);
      return brokers.some((b) => b.controller.isController) && passes(brokers) > passesBefore;
    });
    // The new controller saw registrations missing, and kept their places.
    expect(
      brokers.flatMap((b) => b.logger.named("cluster.registration_lapsed")).length,
    ).toBeGreaterThan(0);
    // Past the grace too: nothing lapsed is left to time out.
    clock.advance(graceMs + 1000);
    await settle();
    expect([await readState(etcd, "a"), await readState(etcd, "b")]).toEqual(before);
    expect([
      (await etcd.get(partitionKey(prefix, "a", 0)))!.modRevision,
      (await etcd.get(partitionKey(prefix, "b", 0)))!.modRevision,
    ]).toEqual(revisions);
    for (const b of brokers) {
      expect(b.logger.named("cluster.partition_changed")).toEqual([]);
      const reg = parseRegistration((await etcd.get(brokerKey(prefix, b.nodeId)))!);
      expect(reg.incarnation).toBe(b.membership.incarnation);
    }
    const recorded = JSON.parse((await etcd.get(incarnationsKey(prefix)))!.value);
    expect(recorded).toEqual(
      Object.fromEntries(brokers.map((b) => [String(b.nodeId), b.membership.incarnation])),
    );
  });

  it("a broker that does not come back within the grace is gone: leader moved, out of the ISR", async () => {
    const { etcd, clock, brokers } = await cluster();
    const two = brokers[1];
    // Node 2 vanishes and never registers again (a crash whose lease expired).
    await crash(etcd, two);
    await settle();
    clock.advance(graceMs - 500);
    await settle();
    expect(await readState(etcd, "b")).toMatchObject({ leader: 2, isr: [2, 3, 1] });
    expect(await readState(etcd, "a")).toMatchObject({ leader: 1, isr: [1, 2, 3] });
    clock.advance(1000);
    await until("node 2 gone", async () => (await readState(etcd, "b")).leader !== 2);
    expect(await readState(etcd, "b")).toMatchObject({ leader: 3, leader_epoch: 1, isr: [3, 1] });
    await until("node 2 out of a's ISR", async () => !(await readState(etcd, "a")).isr.includes(2));
    expect(await readState(etcd, "a")).toMatchObject({ leader: 1, leader_epoch: 0, isr: [1, 3] });
  });

  it("a broker that restarted within the grace (a new incarnation) is gone at once", async () => {
    const { etcd, clock, brokers } = await cluster();
    const three = brokers[2];
    await crash(etcd, three);
    await settle();
    // A new process on the same data directory, long before the grace is over.
    const again = await joinCluster({
      ...testJoinOptions(etcd, clock, 3),
      dataDir: { clusterId: three.membership.clusterId, nodeId: 3 },
    });
    cleanups.push(() => again.close());
    expect(again.incarnation).not.toBe(three.membership.incarnation);
    await until("node 3 out of both ISRs", async () => {
      const [a, b] = [await readState(etcd, "a"), await readState(etcd, "b")];
      return !a.isr.includes(3) && !b.isr.includes(3);
    });
    expect(await readState(etcd, "a")).toMatchObject({ leader: 1, isr: [1, 2] });
    expect(await readState(etcd, "b")).toMatchObject({ leader: 2, isr: [2, 1] });
    expect(clock.nowMs() - 1_700_000_000_000).toBeLessThan(graceMs);
  });

  it("the last ISR member, restarted, leads again in a new epoch (newuser9 F12)", async () => {
    const { etcd, clock, brokers } = await cluster();
    // Left by earlier stops: node 2 the only ISR member (min ISR 2, so node 3 went to the ELR).
    const stuck: PartitionState = {
      ...initialPartitionState([1, 2, 3], 2),
      leader: 2,
      leader_epoch: 3,
      isr: [2],
      elr: [3],
      committed_offset: 100,
    };
    await etcd.put(partitionKey(prefix, "c", 0), formatPartitionState(stuck));
    const two = brokers[1];
    await crash(etcd, two);
    await settle();
    const again = await joinCluster({
      ...testJoinOptions(etcd, clock, 2),
      dataDir: { clusterId: two.membership.clusterId, nodeId: 2 },
    });
    cleanups.push(() => again.close());
    // Its log end, as its replica manager publishes it: it holds every committed record.
    await etcd.put(
      logEndsKey(prefix, 2),
      JSON.stringify({ incarnation: again.incarnation, log_end_offsets: { "c/0": 100 } }),
    );
    // The partition goes offline first (an ELR member is elected only by log ends published
    // after that: docs/cluster.md "Partition state"); the ELR members publish again, as their
    // brokers do on an offline state naming them.
    await until("partition c offline", async () => (await readState(etcd, "c")).leader === -1);
    expect(await readState(etcd, "c")).toMatchObject({ leader_epoch: 4, isr: [], elr: [2, 3] });
    await etcd.put(
      logEndsKey(prefix, 2),
      JSON.stringify({ incarnation: again.incarnation, log_end_offsets: { "c/0": 100 } }),
    );
    await etcd.put(
      logEndsKey(prefix, 3),
      JSON.stringify({
        incarnation: brokers[2].membership.incarnation,
        log_end_offsets: { "c/0": 100 },
      }),
    );
    // The same replica is elected again from the ELR, and only a new epoch, written after its
    // registration, lets its new incarnation lead (before the fix: "no change", for ever).
    await until("partition c led in a new epoch", async () => {
      return (await readState(etcd, "c")).leader !== -1;
    });
    expect(await readState(etcd, "c")).toMatchObject({
      leader: 2,
      leader_epoch: 5,
      isr: [2],
      elr: [3],
    });
  });

  it("a broker that left cleanly is gone at once, without the grace", async () => {
    const { etcd, clock, brokers } = await cluster();
    const start = clock.nowMs();
    await brokers[0].stop();
    await until("node 1's leadership moved", async () => (await readState(etcd, "a")).leader !== 1);
    expect(await readState(etcd, "a")).toMatchObject({ leader: 2, leader_epoch: 1, isr: [2, 3] });
    await until("node 1 out of b's ISR", async () => !(await readState(etcd, "b")).isr.includes(1));
    // The controller retries on the manual clock only after a failure; no grace was waited.
    expect(clock.nowMs() - start).toBeLessThan(graceMs);
  });
});

describe("controllerUpdate with a lapsed replica", () => {
  const state = initialPartitionState([1, 2, 3], 2);
  const view = (alive: number[], lapsed: number[]) => (id: number) => ({
    alive: alive.includes(id),
    lapsed: lapsed.includes(id),
    logEndOffset: undefined,
  });

  it("a lapsed leader stays leader and a lapsed follower stays in the ISR", () => {
    expect(controllerUpdate(state, { gone: [], view: view([2, 3], [1]) })).toBeNull();
    expect(controllerUpdate(state, { gone: [], view: view([1, 3], [2]) })).toBeNull();
  });

  it("a lapsed ISR member is never elected: the next live one is", () => {
    // Leader 1 is gone; 2 is lapsed: 3 leads.
    const next = controllerUpdate(state, { gone: [1], view: view([3], [2]) });
    expect(next).toMatchObject({ leader: 3, leader_epoch: 1, isr: [2, 3] });
    // Nobody live: never a lapsed leader. Nothing changes until 2's grace is over (so that the
    // gone replicas leave the ISR together with it, if it is gone too: docs/cluster.md
    // "Partition state"); then all three are in the ELR and the partition is offline.
    expect(controllerUpdate(state, { gone: [1, 3], view: view([], [2]) })).toBeNull();
    const offline = controllerUpdate(state, { gone: [1, 2, 3], view: view([], []) });
    expect(offline).toMatchObject({ leader: -1, leader_epoch: 1, isr: [], elr: [1, 2, 3] });
  });
});

describe("a leader that gives its leadership up", () => {
  it("the controller elects another ISR member at once, without waiting for its resync", async () => {
    const { etcd, brokers } = await cluster();
    const key = partitionKey(prefix, "a", 0);
    await until("a led by node 1", async () => (await readState(etcd, "a")).leader === 1);
    const before = passes(brokers);
    // Node 1 refuses the leadership (its log lacks committed records: docs/cluster.md
    // "Partition state") and writes the state without a leader. The manual clock never moves,
    // so no resync pass runs.
    const given = resignLeadership(await readState(etcd, "a"), 1, { eligible: false })!;
    await etcd.put(key, formatPartitionState(given));
    await until("another leader", async () => (await readState(etcd, "a")).leader !== -1);
    const after = await readState(etcd, "a");
    expect(after).toMatchObject({ leader: 2, leader_epoch: given.leader_epoch + 1, isr: [2, 3] });
    expect(passes(brokers)).toBeGreaterThan(before);
  });
});
