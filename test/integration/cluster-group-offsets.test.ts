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
import { BrokerError } from "../../src/broker/errors.ts";
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
  const node = {
    membership: { nodeId: 1 },
    controller: { isController: true, onChange: () => {} },
    partitionState: () => undefined,
    topicConfig: () => undefined,
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
      if (generations.get(group)?.modRevision !== claim) return false;
      put(group, list);
      return true;
    },
    async loadGroupOffsets(group: string) {
      return [...(offsets.get(group)?.values() ?? [])];
    },
  };
  return {
    node: node as unknown as ClusterNode,
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
