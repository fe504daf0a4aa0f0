/**
 * A broker that becomes a group's coordinator again takes the group's committed offsets from etcd
 * even when its own group file still lists members of its earlier tenure (docs/cluster.md
 * "Consumer groups"). The Jepsen run of seed 3060980001 found the opposite: after a pause moved
 * the coordinator away and a restart of every broker moved it back, the old coordinator kept the
 * offsets of its own file (its restored members made it skip etcd), so the group's members
 * resumed from offsets older than their last acknowledged commits.
 *
 * Real local broker and group code over a memory file system; the etcd side of the cluster node
 * is a small in-memory stand-in for the four group calls `clusterBroker` makes.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { clusterBroker } from "../../src/cluster/cluster-broker.ts";
import type { ClusterNode } from "../../src/cluster/node.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { abandonTestBroker, openTestBroker } from "../helpers/broker.ts";

type Offset = { topic: string; partition: number; offset: number };

/** etcd's group keys (`group_generations`, `group_offsets`) with mod_revisions, in memory. */
function etcdGroups() {
  let revision = 0;
  const generations = new Map<string, { value: number; modRevision: number }>();
  const offsets = new Map<string, Map<string, Offset>>();
  const put = (group: string, list: readonly Offset[]) => {
    const m = offsets.get(group) ?? new Map<string, Offset>();
    for (const o of list) m.set(`${o.topic}/${o.partition}`, { ...o });
    offsets.set(group, m);
    revision++;
  };
  // The topics the cluster has (etcd keeps the offsets of deleted ones): "t", one partition.
  const topics = new Map<string, number>([["t", 1]]);
  /** The next `saveGroupOffsets` calls throw this (etcd unreachable past the retries). */
  const failures: Error[] = [];
  let reads = 0;
  const node = {
    membership: { nodeId: 1 },
    controller: { isController: true, onChange: () => {} },
    partitionState: (topic: string, partition: number) =>
      partition < (topics.get(topic) ?? 0) ? { leader: 1, replicas: [1] } : undefined,
    topicConfig: (topic: string) => (topics.has(topic) ? {} : undefined),
    async claimGroupGeneration(group: string, generation: number) {
      const floor = Math.max(generations.get(group)?.value ?? 0, generation);
      generations.set(group, { value: floor, modRevision: ++revision });
      return { generation: floor, claim: revision };
    },
    async recordGroupGeneration(group: string, generation: number, claim: number) {
      if (generations.get(group)?.modRevision !== claim) return null;
      generations.set(group, { value: generation, modRevision: ++revision });
      return revision;
    },
    async saveGroupOffsets(group: string, list: readonly Offset[], claim: number) {
      const failure = failures.shift();
      if (failure !== undefined) throw failure;
      if (generations.get(group)?.modRevision !== claim) return false;
      put(group, list);
      return true;
    },
    async loadGroupOffsets(group: string) {
      reads++;
      return [...(offsets.get(group)?.values() ?? [])];
    },
    async loadGroupGeneration(group: string) {
      return generations.get(group)?.value ?? 0;
    },
    async loadStoredGroups() {
      reads++;
      const out = new Map<string, { generation: number; offsets: Offset[] }>();
      for (const group of new Set([...generations.keys(), ...offsets.keys()]))
        out.set(group, {
          generation: generations.get(group)?.value ?? 0,
          offsets: [...(offsets.get(group)?.values() ?? [])],
        });
      return out;
    },
  };
  return {
    node: node as unknown as ClusterNode,
    topics,
    failures,
    /** etcd reads of group offsets so far. */
    reads: () => reads,
    /** What etcd holds of a group: its generation key (value, mod_revision) and offsets. */
    stored(group: string) {
      return {
        generation: generations.get(group),
        offsets: [...(offsets.get(group)?.values() ?? [])],
      };
    },
    /** Another coordinator's acknowledged commit and generation, written meanwhile. */
    elsewhere(group: string, generation: number, list: readonly Offset[]) {
      generations.set(group, { value: generation, modRevision: ++revision });
      put(group, list);
    },
  };
}

async function fill(broker: LocalBroker, topic: string, count: number) {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) b.add(null, utf8(`r${i}`));
  await broker.produce({ topic, partition: 0, batch: b.build() });
}

function committed(offsets: { partition: number; committed: number | null }[]) {
  return offsets.find((o) => o.partition === 0)?.committed;
}

describe("cluster group offsets", () => {
  it("a returning coordinator resumes from etcd's commits, not its restored members' older ones", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    const etcd = etcdGroups();
    const first = await openTestBroker({ fs, clock, cleanupIntervalMs: 0 });
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await fill(first.broker, "t", 20);
    // Tenure 1 on this broker: a member commits 5 (acknowledged: etcd holds it too).
    const cb1 = clusterBroker(first.broker, etcd.node);
    const a = await cb1.joinGroup({ group: "g", topics: ["t"] });
    await cb1.commitOffsets({
      group: "g",
      memberId: a.memberId,
      generation: a.generation,
      offsets: [{ topic: "t", partition: 0, offset: 5 }],
    });
    // The coordinator moves away (this broker paused); the next one acknowledges up to 12.
    etcd.elsewhere("g", a.generation + 3, [{ topic: "t", partition: 0, offset: 12 }]);
    // Every broker restarts; this one becomes the coordinator again. Its group file still lists
    // member a (the session timeout has not run on the restored group yet).
    abandonTestBroker(first.broker);
    const second = await openTestBroker({ fs, clock, cleanupIntervalMs: 0 });
    expect((await second.broker.describeGroup("g")).members.length).toBe(1);
    expect(committed((await second.broker.describeGroup("g")).offsets)).toBe(5);
    const cb2 = clusterBroker(second.broker, etcd.node);
    const b = await cb2.joinGroup({ group: "g", topics: ["t"] });
    expect(b.generation).toBeGreaterThan(a.generation + 3); // above every generation handed out
    const seen = await cb2.describeGroup("g");
    expect(committed(seen.offsets)).toBe(12);
    // The stale member's commit is still fenced, and the new generation commits on from 12.
    const stale = await cb2
      .commitOffsets({
        group: "g",
        memberId: a.memberId,
        generation: a.generation,
        offsets: [{ topic: "t", partition: 0, offset: 6 }],
      })
      .then(
        () => "ok",
        (err) => (err instanceof BrokerError ? err.kind.code : String(err)),
      );
    expect(stale).not.toBe("ok");
    expect(committed((await cb2.describeGroup("g")).offsets)).toBe(12);
  });

  it("a new controller lists, describes and exports every group etcd holds offsets for, claiming none", async () => {
    const etcd = etcdGroups();
    etcd.topics.set("gone", 1);
    // Tenure 1, on broker 1: "idle" commits 5 (its consumer then exits); "g2" commits only
    // offsets of a topic deleted since (etcd keeps them: not a group to show).
    const first = await openTestBroker({ cleanupIntervalMs: 0 });
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await first.broker.createTopic({ name: "gone", partitions: 1 });
    await fill(first.broker, "t", 20);
    await fill(first.broker, "gone", 3);
    const cb1 = clusterBroker(first.broker, etcd.node);
    const a = await cb1.joinGroup({ group: "idle", topics: ["t"] });
    await cb1.commitOffsets({
      group: "idle",
      memberId: a.memberId,
      generation: a.generation,
      offsets: [{ topic: "t", partition: 0, offset: 5 }],
    });
    await cb1.commitOffsets({ group: "g2", offsets: [{ topic: "gone", partition: 0, offset: 2 }] });
    etcd.topics.delete("gone");
    const before = etcd.stored("idle").generation;
    expect(before?.value).toBe(a.generation);
    // The controller moves to broker 2, which never served these groups (its own group file
    // is empty): it takes them from etcd at once, members or not.
    const second = await openTestBroker({ cleanupIntervalMs: 0 });
    await second.broker.createTopic({ name: "t", partitions: 1 });
    await fill(second.broker, "t", 20);
    const cb2 = clusterBroker(second.broker, etcd.node);
    await cb2.storedGroupsLoaded();
    const listed = await cb2.listGroups();
    expect(listed.map((g) => g.group)).toEqual(["idle"]);
    expect(listed[0].generation).toBe(a.generation);
    expect(listed[0].members).toEqual([]);
    expect(committed(listed[0].offsets)).toBe(5);
    // The metrics (the local broker's observation) export it, with its lag.
    const seen = await second.broker.observe();
    const idle = seen.groups.find((g) => g.group === "idle");
    expect(idle?.offsets.find((o) => o.partition === 0)?.lag).toBe(15);
    // A describe reads etcd again (another coordinator may have written meanwhile) and bumps
    // nothing: etcd's generation key is as it was, not rewritten (no claim).
    etcd.elsewhere("idle", a.generation, [{ topic: "t", partition: 0, offset: 7 }]);
    const claimedElsewhere = etcd.stored("idle").generation;
    const described = await cb2.describeGroup("idle");
    expect(described.generation).toBe(a.generation);
    expect(committed(described.offsets)).toBe(7);
    await cb2.describeGroup("idle");
    expect((await cb2.listGroups())[0].generation).toBe(a.generation);
    expect(etcd.stored("idle").generation).toEqual(claimedElsewhere);
    // A join still claims: its generation is above every one stored.
    const b = await cb2.joinGroup({ group: "idle", topics: ["t"] });
    expect(b.generation).toBeGreaterThan(a.generation);
    expect(etcd.stored("idle").generation?.value).toBe(b.generation);
    expect(committed((await cb2.describeGroup("idle")).offsets)).toBe(7);
  });

  it("records the generations of leaves and expiries, so the next coordinator never goes back (attack15b F6)", async () => {
    const etcd = etcdGroups();
    const clock = new ManualClock();
    const first = await openTestBroker({ clock, cleanupIntervalMs: 0 });
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await fill(first.broker, "t", 20);
    const cb1 = clusterBroker(first.broker, etcd.node);
    const generationHere = async () => (await cb1.describeGroup("g")).generation;
    const stored = () => etcd.stored("g").generation?.value;
    const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
    // A member joins (its generation is written before it learns it) and leaves: the group,
    // empty now, moves to the next generation, which no member learns; etcd holds it too.
    const a = await cb1.joinGroup({ group: "g", topics: ["t"] });
    expect(stored()).toBe(a.generation);
    await cb1.leaveGroup({ group: "g", memberId: a.memberId });
    await settle();
    expect(await generationHere()).toBe(a.generation + 1);
    expect(stored()).toBe(a.generation + 1);
    // Another member joins, commits, and stops heartbeating: its session expires on the
    // coordinator's timer (no request at all), and that generation reaches etcd as well.
    const b = await cb1.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 1000 });
    expect(b.generation).toBeGreaterThan(a.generation + 1);
    await cb1.commitOffsets({
      group: "g",
      memberId: b.memberId,
      generation: b.generation,
      offsets: [{ topic: "t", partition: 0, offset: 6 }],
    });
    clock.advance(1001);
    await settle();
    const last = await generationHere();
    expect(last).toBe(b.generation + 1);
    expect((await cb1.describeGroup("g")).members).toEqual([]);
    expect(stored()).toBe(last);
    // The controller moves: the new one shows the group at the generation the old one reached,
    // not an older one, and hands out only later ones.
    const second = await openTestBroker({ cleanupIntervalMs: 0 });
    await second.broker.createTopic({ name: "t", partitions: 1 });
    await fill(second.broker, "t", 20);
    const cb2 = clusterBroker(second.broker, etcd.node);
    await cb2.storedGroupsLoaded();
    const listed = await cb2.listGroups();
    expect(listed.map((g) => [g.group, g.generation, committed(g.offsets)])).toEqual([
      ["g", last, 6],
    ]);
    const c = await cb2.joinGroup({ group: "g", topics: ["t"] });
    expect(c.generation).toBeGreaterThan(last);
  });

  it("a commit etcd did not take is not shown as committed, and the next one goes on", async () => {
    const etcd = etcdGroups();
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    await broker.createTopic({ name: "t", partitions: 1 });
    await fill(broker, "t", 20);
    const cb = clusterBroker(broker, etcd.node);
    const a = await cb.joinGroup({ group: "g", topics: ["t"] });
    const commit = (offset: number) =>
      cb
        .commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: a.generation,
          offsets: [{ topic: "t", partition: 0, offset }],
        })
        .then(
          () => "ok",
          (err) => (err instanceof BrokerError ? err.kind.code : String(err)),
        );
    expect(await commit(4)).toBe("ok");
    // etcd unreachable past the retries: the commit fails, and 9 is shown nowhere.
    etcd.failures.push(new BrokerError(Errors.unavailable, "Cannot replicate: etcd is down"));
    expect(await commit(9)).toBe("unavailable");
    expect(committed((await cb.describeGroup("g")).offsets)).toBe(4);
    expect(committed((await broker.describeGroup("g")).offsets)).toBe(4);
    expect(etcd.stored("g").offsets).toEqual([{ topic: "t", partition: 0, offset: 4 }]);
    // Another broker took the group over: refused, and again nothing shown.
    etcd.elsewhere("g", a.generation + 2, [{ topic: "t", partition: 0, offset: 4 }]);
    expect(await commit(11)).toBe("stale_generation");
    expect(committed((await broker.describeGroup("g")).offsets)).toBe(4);
    // A commit etcd refuses on validation never reaches it.
    const writesBefore = etcd.stored("g").generation?.modRevision;
    await cb.leaveGroup({ group: "g", memberId: a.memberId });
    const b = await cb.joinGroup({ group: "g", topics: ["t"] });
    const bad = await cb
      .commitOffsets({
        group: "g",
        memberId: b.memberId,
        generation: b.generation,
        offsets: [{ topic: "t", partition: 0, offset: 99 }],
      })
      .catch((err) => err);
    expect(bad).toBeInstanceOf(BrokerError);
    expect((bad as BrokerError).kind).toBe(Errors.invalidOffset);
    expect(etcd.stored("g").offsets).toEqual([{ topic: "t", partition: 0, offset: 4 }]);
    expect(etcd.stored("g").generation?.modRevision).toBeGreaterThan(writesBefore ?? 0);
    // Once etcd takes one, both copies hold it.
    const ok = await cb.commitOffsets({
      group: "g",
      memberId: b.memberId,
      generation: b.generation,
      offsets: [{ topic: "t", partition: 0, offset: 12 }],
    });
    expect(ok).toBeUndefined();
    expect(committed((await broker.describeGroup("g")).offsets)).toBe(12);
    expect(etcd.stored("g").offsets).toEqual([{ topic: "t", partition: 0, offset: 12 }]);
  });

  it("adopts offsets durably, refuses malformed ones, and makes a group it lacks", async () => {
    const fs = new MemoryFileSystem();
    const first = await openTestBroker({ fs, cleanupIntervalMs: 0 });
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await fill(first.broker, "t", 10); // recovery keeps committed offsets within the log
    await first.broker.joinGroup({ group: "g", topics: ["t"] });
    await first.broker.adoptGroupOffsets("g", [{ topic: "t", partition: 0, offset: 7 }]);
    await first.broker.adoptGroupOffsets("new", [{ topic: "t", partition: 0, offset: 3 }]);
    await expect(
      first.broker.adoptGroupOffsets("g", [{ topic: "t", partition: -1, offset: 1 }]),
    ).rejects.toThrow(/partition >= 0/);
    abandonTestBroker(first.broker);
    const second = await openTestBroker({ fs, cleanupIntervalMs: 0 });
    expect(committed((await second.broker.describeGroup("g")).offsets)).toBe(7);
    expect(committed((await second.broker.describeGroup("new")).offsets)).toBe(3);
  });
});
