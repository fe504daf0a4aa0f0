/**
 * A broker on a new data directory under a known node id leaves every ISR and ELR before it
 * registers (docs/cluster.md "Replacing a broker's disk, backing up etcd"; attack13 F1): the pure
 * transition
 * `forgetReplicaData` and the etcd pass `forgetReplicaDataInCluster`.
 */
import { describe, expect, it } from "vitest";
import { forgetReplicaDataInCluster } from "../../src/cluster/fresh-replica.ts";
import { type BrokerRegistration, ClusterJoinError } from "../../src/cluster/membership.ts";
import {
  checkPartitionState,
  controllerUpdate,
  forgetReplicaData,
  formatPartitionState,
  initialPartitionState,
  noLeader,
  type PartitionState,
  parsePartitionState,
  type ReplicaView,
} from "../../src/cluster/partition-state.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";

const views =
  (table: Record<number, [alive: boolean, logEnd?: number]>) =>
  (id: number): ReplicaView => ({ alive: table[id]?.[0] ?? false, logEndOffset: table[id]?.[1] });

describe("a replica whose data directory is new", () => {
  it("leaves the ISR, the ELR and a leadership etcd still names it for, in a new epoch", () => {
    const s: PartitionState = {
      ...initialPartitionState([3, 1, 2], 2),
      leader: 1,
      leader_epoch: 4,
      isr: [1],
      elr: [2],
    };
    const next = forgetReplicaData(s, 1)!;
    expect(next).toMatchObject({ leader: noLeader, leader_epoch: 5, isr: [], elr: [2] });
    expect(checkPartitionState(next)).toEqual([]);
    expect(forgetReplicaData(s, 3)).toBeNull();
    const inElr = forgetReplicaData(s, 2)!;
    expect(inElr).toMatchObject({ leader: 1, leader_epoch: 4, isr: [1], elr: [] });
  });

  it("is then never elected on its empty log after a full outage (attack13 F1, reproduction A)", () => {
    // Replicas 3,1,2; all killed; etcd kept ISR [] and ELR [1,2] from the outage.
    const s: PartitionState = {
      ...initialPartitionState([3, 1, 2], 2),
      leader: noLeader,
      leader_epoch: 2,
      isr: [],
      elr: [1, 2],
    };
    // Node 1 comes back first on an empty disk (log end 0 ≥ committed_offset 0). Before the ELR
    // election waited for every member's log end (attack13 F1 B) it led here; now it waits for
    // node 2, and would then lose to node 2's longer log even without the pass below.
    expect(controllerUpdate(s, { gone: [], view: views({ 1: [true, 0] }) })).toBeNull();
    expect(
      controllerUpdate(s, { gone: [], view: views({ 1: [true, 0], 2: [true, 50] }) })?.leader,
    ).toBe(2);
    const forgotten = forgetReplicaData(s, 1)!;
    const after = controllerUpdate(forgotten, { gone: [], view: views({ 1: [true, 0] }) });
    expect(after?.leader ?? forgotten.leader).toBe(noLeader);
    // Node 2, which held every record, leads once it is back.
    expect(
      controllerUpdate(forgotten, { gone: [], view: views({ 1: [true, 0], 2: [true, 50] }) })
        ?.leader,
    ).toBe(2);
  });

  it("the etcd pass changes every partition naming the node, by compare-and-set, and no other", async () => {
    const etcd = new FakeEtcd();
    const prefix = "/es-broker";
    const states: Record<string, PartitionState> = {
      "a/0": { ...initialPartitionState([1, 2, 3], 2), isr: [1, 2], elr: [] },
      "a/1": { ...initialPartitionState([2, 3, 1], 2), leader: 2, isr: [2], elr: [1, 3] },
      "b/0": { ...initialPartitionState([2, 3], 1), leader: 2, isr: [2, 3] },
    };
    for (const [k, s] of Object.entries(states))
      await etcd.put(`${prefix}/partitions/${k}`, formatPartitionState(s));
    const changed = await forgetReplicaDataInCluster(etcd, prefix, 1);
    expect(changed.sort()).toEqual(["a/0", "a/1"]);
    const read = async (k: string) =>
      parsePartitionState(k, (await etcd.get(`${prefix}/partitions/${k}`))!.value);
    expect(await read("a/0")).toMatchObject({ leader: noLeader, leader_epoch: 1, isr: [2] });
    expect(await read("a/1")).toMatchObject({ leader: 2, isr: [2], elr: [3] });
    expect(await read("b/0")).toEqual(states["b/0"]);
    expect(await forgetReplicaDataInCluster(etcd, prefix, 1)).toEqual([]);
  });

  it("changes nothing while another broker is registered under the node id (a duplicate --node-id)", async () => {
    // CI, 2026-12-03: a refused duplicate of node 2 had first taken node 2, alive, out of every
    // ISR, and the partition whose only replica it was stayed without a leader for good.
    const etcd = new FakeEtcd();
    const prefix = "/es-broker";
    const solo = { ...initialPartitionState([2], 1), leader: 2, isr: [2] };
    await etcd.put(`${prefix}/partitions/solo/0`, formatPartitionState(solo));
    const live: BrokerRegistration = {
      node_id: 2,
      cluster_id: "c",
      data_dir_id: "the-live-one",
      incarnation: "7",
      tcp: "127.0.0.1:9092",
      http: "http://127.0.0.1:8080",
    };
    await etcd.put(`${prefix}/brokers/2`, JSON.stringify(live));
    const refused = await forgetReplicaDataInCluster(etcd, prefix, 2).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ClusterJoinError);
    expect((refused as Error).message).toMatch(
      /node 2 is registered by a broker with another data directory \(tcp 127\.0\.0\.1:9092/,
    );
    const read = async () =>
      parsePartitionState("solo/0", (await etcd.get(`${prefix}/partitions/solo/0`))!.value);
    expect(await read()).toEqual(solo);

    // Registered between the pass's first read and its write: the write's compare refuses it.
    await etcd.delete(`${prefix}/brokers/2`);
    const list = etcd.list.bind(etcd);
    etcd.list = async (...args: Parameters<FakeEtcd["list"]>) => {
      const listed = await list(...args);
      await etcd.put(`${prefix}/brokers/2`, JSON.stringify(live));
      return listed;
    };
    await expect(forgetReplicaDataInCluster(etcd, prefix, 2)).rejects.toThrow(ClusterJoinError);
    expect(await read()).toEqual(solo);

    // Nobody registered: the pass runs.
    etcd.list = list;
    await etcd.delete(`${prefix}/brokers/2`);
    expect(await forgetReplicaDataInCluster(etcd, prefix, 2)).toEqual(["solo/0"]);
    expect(await read()).toMatchObject({ leader: noLeader, isr: [] });
  });
});
