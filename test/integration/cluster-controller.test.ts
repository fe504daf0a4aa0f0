/**
 * cluster/controller.ts against a real three-member etcd: one controller elected, leaders moved
 * when brokers die or restart, failover of the controller itself, and a deposed controller whose
 * writes etcd refuses.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Etcd, EtcdWatch } from "../../src/cluster/etcd.ts";
import {
  controllerKey,
  incarnationsKey,
  logEndsKey,
  partitionKey,
} from "../../src/cluster/keys.ts";
import {
  formatPartitionState,
  initialPartitionState,
  type PartitionState,
  parsePartitionState,
} from "../../src/cluster/partition-state.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { startTestMember } from "../helpers/cluster-node.ts";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";

let etcd: EtcdCluster;
let client: EtcdHttpClient;
let n = 0;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000, watchCheckMs: 1000 });
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  await client?.close();
  await etcd?.stop();
});

const freshPrefix = () => `/es-broker-ctl-${process.pid}-${n++}`;

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false>) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== null && v !== false) return v as T;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Broker `nodeId` on `client` under `prefix`, its controller on `etcdFor`, a 2 s lease, a 1 s
 * resync. Stopping it (`stop`) is as a crash past its lease would be: controller and
 * registration go.
 */
async function startBroker(prefix: string, nodeId: number, etcdFor: Etcd = client) {
  const b = await startTestMember({
    etcd: client,
    controllerEtcd: etcdFor,
    clock: systemClock,
    nodeId,
    join: { prefix, newClusterId: `cluster-${prefix}`, leaseTtlSeconds: 2 },
    controller: { resyncMs: 1000 },
  });
  return b;
}

async function createPartition(prefix: string, replicas: number[], minIsr: number) {
  const key = partitionKey(prefix, "t", 0);
  await client.put(key, formatPartitionState(initialPartitionState(replicas, minIsr)));
  return key;
}

/**
 * Node `id` of cluster `clusterId` under `prefix` as a bare registration (no broker behind it) on a
 * 10 s lease this suite holds and revokes at its end; resolves with the lease id (the incarnation).
 */
async function registerBare(prefix: string, clusterId: string, id: number): Promise<string> {
  const lease = await client.leaseGrant(10);
  const reg = {
    node_id: id,
    cluster_id: clusterId,
    data_dir_id: `dir-${id}`,
    incarnation: lease.id,
    tcp: `127.0.0.1:${9000 + id}`,
    http: `http://127.0.0.1:${8000 + id}`,
  };
  await client.put(`${prefix}/brokers/${id}`, JSON.stringify(reg), { lease: lease.id });
  cleanups.push(() => client.leaseRevoke(lease.id));
  return lease.id;
}

async function readState(key: string): Promise<PartitionState> {
  const kv = await client.get(key);
  if (kv === null) throw new Error(`${key} is missing`);
  return parsePartitionState(key, kv.value);
}

async function controllerOf(prefix: string): Promise<number | undefined> {
  const kv = await client.get(controllerKey(prefix));
  return kv === null ? undefined : (JSON.parse(kv.value) as { node_id: number }).node_id;
}

/** `client` with a watch of the controller key that never delivers (a deaf stream). */
function deafToController(prefix: string): Etcd {
  const key = controllerKey(prefix);
  return {
    get: (k) => client.get(k),
    list: (p) => client.list(p),
    put: (k, v, o) => client.put(k, v, o),
    delete: (k, o) => client.delete(k, o),
    txn: (r) => client.txn(r),
    leaseGrant: (t) => client.leaseGrant(t),
    leaseKeepAlive: (id) => client.leaseKeepAlive(id),
    leaseRevoke: (id) => client.leaseRevoke(id),
    changedSince: (r) => client.changedSince(r),
    watch: (request, handlers) =>
      request.key === key && request.prefix !== true
        ? { cancel: async () => {} }
        : client.watch(request, handlers),
    status: () => client.status(),
    close: async () => {},
  };
}

describe("controller", () => {
  it("a controller key deleted without any watch hearing it is taken again within a resync (attack15 F6)", async () => {
    const prefix = freshPrefix();
    const brokers = await Promise.all(
      [1, 2, 3].map((id) => startBroker(prefix, id, deafToController(prefix))),
    );
    const first = await waitFor("a controller", async () =>
      brokers.find((b) => b.controller.isController),
    );
    const before = (await client.get(controllerKey(prefix)))!;
    // The key goes and no broker hears of it (as when the etcd member their watches go through
    // was paused): before, nobody campaigned again, ever.
    await client.delete(controllerKey(prefix));
    const after = await waitFor(
      "a controller key again",
      async () => (await client.get(controllerKey(prefix))) ?? undefined,
    );
    expect(after.createRevision).toBeGreaterThan(before.createRevision);
    const holder = (JSON.parse(after.value) as { node_id: number }).node_id;
    // Exactly one controller, and every broker knows which (the old one was deposed).
    await waitFor("every broker to know the controller", async () =>
      brokers.every((b) => b.controller.current?.node_id === holder) &&
      brokers.filter((b) => b.controller.isController).length === 1
        ? true
        : undefined,
    );
    expect(brokers.find((b) => b.controller.isController)!.nodeId).toBe(holder);
    expect(first.controller.epoch === null || first.nodeId === holder).toBe(true);
  });

  it("exactly one broker is elected; its epoch is the key's create_revision", async () => {
    const prefix = freshPrefix();
    const brokers = await Promise.all([1, 2, 3].map((id) => startBroker(prefix, id)));
    const elected = await waitFor("a controller", async () => {
      const e = brokers.filter((b) => b.controller.isController);
      return e.length > 0 ? e : undefined;
    });
    expect(elected).toHaveLength(1);
    const kv = await client.get(controllerKey(prefix));
    expect(kv?.createRevision).toBe(elected[0].controller.epoch);
    expect(kv?.lease).toBe(elected[0].membership.leaseId);
    // Every broker knows who it is.
    for (const b of brokers) {
      await waitFor("the controller known", async () =>
        b.controller.current?.node_id === elected[0].nodeId ? true : undefined,
      );
    }
    // The incarnations it acted on are recorded.
    await waitFor("incarnations recorded", async () => {
      const v = await client.get(incarnationsKey(prefix));
      return v !== null && Object.keys(JSON.parse(v.value)).length === 3;
    });
  });

  it("a dead leader is replaced from the ISR with the epoch bumped; a dead follower leaves the ISR", async () => {
    const prefix = freshPrefix();
    const brokers = await Promise.all([1, 2, 3].map((id) => startBroker(prefix, id)));
    await waitFor("a controller", async () => brokers.some((b) => b.controller.isController));
    const key = await createPartition(prefix, [3, 1, 2], 2);
    // Kill a non-controller leader where possible, so this is the "broker gone" path alone.
    const controllerId = await controllerOf(prefix);
    const leader = brokers.find((b) => b.nodeId === 3)!;
    await leader.stop();
    const after = await waitFor("a new leader", async () => {
      const s = await readState(key);
      return s.leader !== 3 ? s : undefined;
    });
    if (controllerId !== 3) {
      expect(after).toMatchObject({ leader: 1, leader_epoch: 1, isr: [1, 2], elr: [] });
    } else {
      // The controller died with the leader: the new controller did it after its election.
      expect(after).toMatchObject({ leader: 1, leader_epoch: 1, isr: [1, 2] });
    }
    // A follower dies: the ISR shrinks below min ISR, and the follower joins the ELR.
    await brokers.find((b) => b.nodeId === 2)!.stop();
    const shrunk = await waitFor("node 2 out of the ISR", async () => {
      const s = await readState(key);
      return s.isr.includes(2) ? undefined : s;
    });
    expect(shrunk).toMatchObject({ leader: 1, leader_epoch: 1, isr: [1], elr: [2] });
  });

  it("controller failover: the next broker takes the key with a higher epoch and carries on", async () => {
    const prefix = freshPrefix();
    const brokers = await Promise.all([1, 2, 3].map((id) => startBroker(prefix, id)));
    const first = await waitFor("a controller", async () =>
      brokers.find((b) => b.controller.isController),
    );
    const epoch1 = first.controller.epoch!;
    const replicas = [
      first.nodeId,
      ...brokers.map((b) => b.nodeId).filter((id) => id !== first.nodeId),
    ];
    const key = await createPartition(prefix, replicas, 1);
    await first.stop();
    const second = await waitFor("a second controller", async () =>
      brokers.find((b) => b !== first && b.controller.isController),
    );
    expect(second.controller.epoch!).toBeGreaterThan(epoch1);
    const s = await waitFor("the partition moved", async () => {
      const st = await readState(key);
      return st.leader === replicas[1] ? st : undefined;
    });
    expect(s).toMatchObject({ leader: replicas[1], leader_epoch: 1, isr: replicas.slice(1) });
    // Under load the second controller may lose and win its key again (a later epoch) after the
    // move: the move was made under an epoch above the first controller's.
    expect(
      second.logger
        .named("cluster.partition_changed")
        .some((f) => (f.controller_epoch as number) > epoch1),
    ).toBe(true);
  });

  it("a deposed controller that never heard it was deposed cannot write", async () => {
    const prefix = freshPrefix();
    // Node 1's controller sees no watch events at all: it keeps believing it is the controller.
    const deaf: Etcd = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop === "watch") return (): EtcdWatch => ({ cancel: async () => {} });
        const v = Reflect.get(target, prop, receiver);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    const a = await startBroker(prefix, 1, deaf);
    expect(a.controller.isController).toBe(true);
    const epochA = a.controller.epoch!;
    const b = await startBroker(prefix, 2);
    const c = await startBroker(prefix, 3);
    const key = await createPartition(prefix, [3, 2, 1], 1);
    // Take the key away from node 1 behind its back (as an expired lease would) and let 2 win it.
    await client.delete(controllerKey(prefix));
    const epochB = await waitFor("node 2 or 3 elected", async () => {
      const e = [b, c].find((x) => x.controller.isController);
      return e?.controller.epoch ?? undefined;
    });
    expect(epochB).toBeGreaterThan(epochA);
    // Node 3 dies: both controllers act; only the one holding the key may write.
    await c.stop();
    await waitFor("node 1 learns it is deposed", async () =>
      a.logger.named("cluster.controller_deposed").length > 0 ? true : undefined,
    );
    expect(a.controller.isController).toBe(false);
    expect(a.logger.named("cluster.partition_changed")).toEqual([]);
    const s = await waitFor("the partition moved", async () => {
      const st = await readState(key);
      return st.leader !== 3 ? st : undefined;
    });
    expect(s.leader).toBe(2);
  });

  it("a restarted broker (new incarnation) leaves the ISR; an offline partition takes an ELR leader whose log end reaches committed_offset", async () => {
    const prefix = freshPrefix();
    const one = await startBroker(prefix, 1);
    await waitFor("controller", async () => one.controller.isController);
    // Brokers 2 and 3 are bare registrations on leases this test holds.
    const register = (id: number) => registerBare(prefix, one.membership.clusterId, id);
    await register(2);
    const lease3 = await register(3);
    const key = partitionKey(prefix, "t", 0);
    await client.put(
      key,
      formatPartitionState({ ...initialPartitionState([2, 3, 1], 2), committed_offset: 50 }),
    );
    await waitFor("incarnations recorded", async () => {
      const v = await client.get(incarnationsKey(prefix));
      return v !== null && Object.keys(JSON.parse(v.value)).length === 3;
    });
    // Broker 3 restarts: same node, new lease, registration replaced without a gap.
    const lease3b = await register(3);
    expect(lease3b).not.toBe(lease3);
    const s1 = await waitFor("3 out of the ISR", async () => {
      const s = await readState(key);
      return s.isr.includes(3) ? undefined : s;
    });
    expect(s1).toMatchObject({ leader: 2, leader_epoch: 0, isr: [2, 1], elr: [] });
    // Now 2 (the leader) and 1's view... stop broker 2: ISR [1] < min ISR 2, 2 joins the ELR.
    await client.delete(`${prefix}/brokers/2`);
    const s2 = await waitFor("2 gone", async () => {
      const s = await readState(key);
      return s.leader !== 2 ? s : undefined;
    });
    expect(s2).toMatchObject({ leader: 1, leader_epoch: 1, isr: [1], elr: [2] });
    // 2 comes back with a log ending short of committed_offset: it may not lead. Then 1 dies.
    const lease2 = await register(2);
    await client.put(
      logEndsKey(prefix, 2),
      JSON.stringify({ incarnation: lease2, log_end_offsets: { "t/0": 40 } }),
    );
    await one.stop();
    const two = await startBroker(prefix, 4); // a controller that does not hold the partition
    await waitFor("controller 4", async () => two.controller.isController);
    const s3 = await waitFor("offline", async () => {
      const s = await readState(key);
      return s.leader === -1 ? s : undefined;
    });
    expect(s3).toMatchObject({ leader: -1, leader_epoch: 2, isr: [], elr: [2, 1] });
    // 2 publishes a log end that reaches committed_offset. Node 1, the other ELR member, is
    // not back: it may hold records acknowledged after committed_offset was written, so 2 does
    // not lead yet (attack13 F1 B).
    const passes = two.controller.passes;
    await client.put(
      logEndsKey(prefix, 2),
      JSON.stringify({ incarnation: lease2, log_end_offsets: { "t/0": 50 } }),
    );
    await waitFor("two more passes", async () => two.controller.passes >= passes + 2);
    expect(await readState(key)).toMatchObject({ leader: -1, leader_epoch: 2, elr: [2, 1] });
    // 1 comes back with a shorter log: 2, the longest, leads from the ELR.
    const lease1 = await register(1);
    await client.put(
      logEndsKey(prefix, 1),
      JSON.stringify({ incarnation: lease1, log_end_offsets: { "t/0": 45 } }),
    );
    const s4 = await waitFor("2 leads", async () => {
      const s = await readState(key);
      return s.leader === 2 ? s : undefined;
    });
    expect(s4).toMatchObject({ leader: 2, leader_epoch: 3, isr: [2], elr: [1] });
  });

  it("a whole-cluster outage (attack13 F1 B): the first broker back stays eligible, and an older copy is never elected over the newer records", async () => {
    const prefix = freshPrefix();
    const ctl = await startBroker(prefix, 4); // the controller; not a replica
    await waitFor("controller", async () => ctl.controller.isController);
    const register = (id: number) => registerBare(prefix, ctl.membership.clusterId, id);
    const publish = (id: number, lease: string, end: number) =>
      client.put(
        logEndsKey(prefix, id),
        JSON.stringify({ incarnation: lease, log_end_offsets: { "t/0": end } }),
        { lease },
      );
    const leases = [await register(1), await register(2), await register(3)];
    // committed_offset 100 from the last ISR change; 100..199 acknowledged since on all three.
    const key = partitionKey(prefix, "t", 0);
    await client.put(
      key,
      formatPartitionState({ ...initialPartitionState([1, 2, 3], 2), committed_offset: 100 }),
    );
    await waitFor("incarnations recorded", async () => {
      const v = await client.get(incarnationsKey(prefix));
      return v !== null && Object.keys(JSON.parse(v.value)).length === 4;
    });
    // SIGKILL of brokers 1, 2 and 3: their registrations go. Broker 2 is back first (a new
    // incarnation, every record on its disk) while the controller still counts 1 and 3 lapsed.
    for (const lease of leases) await client.leaseRevoke(lease);
    const lease2 = await register(2);
    await publish(2, lease2, 200);
    await waitFor("1 and 3 lapsed", async () =>
      ctl.logger.named("cluster.registration_lapsed").some((e) => {
        const ids = (e as { node_ids?: number[] }).node_ids ?? [];
        return ids.includes(1) && ids.includes(3);
      }),
    );
    // A crash is a warning on the controller, once per newly lapsed node (newuser18 F8: it was
    // info); later passes within the grace repeat it at debug.
    const lapses = ctl.logger.events.filter((e) => e.event === "cluster.registration_lapsed");
    expect(lapses[0]?.level).toBe("warn");
    expect(lapses.filter((e) => e.level === "warn").length).toBeLessThanOrEqual(3);
    // Within the grace (3 s; a pass every second) nothing changes: node 2 does not leave the
    // ISR alone.
    const lapsedAt = ctl.controller.passes;
    await waitFor("a pass within the grace", async () => ctl.controller.passes > lapsedAt);
    expect(await readState(key)).toMatchObject({ leader: 1, isr: [1, 2, 3], elr: [] });
    // The grace ends: all three leave together, node 2 included; nobody can be elected yet.
    const offline = await waitFor("offline", async () => {
      const s = await readState(key);
      return s.leader === -1 ? s : undefined;
    });
    expect(offline).toMatchObject({ leader: -1, leader_epoch: 1, isr: [], elr: [1, 2, 3] });
    // Node 2 publishes again on the offline state (as a broker does); node 3 is back on an older
    // copy of its data directory: log end 100, which reaches committed_offset. Node 1 is missing.
    await publish(2, lease2, 200);
    const lease3 = await register(3);
    await publish(3, lease3, 100);
    const passes = ctl.controller.passes;
    await waitFor("two more passes", async () => ctl.controller.passes >= passes + 2);
    expect(await readState(key)).toMatchObject({ leader: -1, elr: [1, 2, 3] });
    // Node 1 is back: every ELR member has published; the longest log leads, never node 3's.
    const lease1 = await register(1);
    await publish(1, lease1, 190);
    const elected = await waitFor("a leader", async () => {
      const s = await readState(key);
      return s.leader !== -1 ? s : undefined;
    });
    expect(elected).toMatchObject({ leader: 2, leader_epoch: 2, isr: [2], elr: [1, 3] });
  });

  it("an ELR election compares last epochs first, and waits for a broker whose publication lacks one", async () => {
    const prefix = freshPrefix();
    const ctl = await startBroker(prefix, 4);
    await waitFor("controller", async () => ctl.controller.isController);
    const register = (id: number) => registerBare(prefix, ctl.membership.clusterId, id);
    const publish = (id: number, lease: string, end: number, epochs: Record<string, number>) =>
      client.put(
        logEndsKey(prefix, id),
        JSON.stringify({
          incarnation: lease,
          log_end_offsets: { "t/0": end },
          last_epochs: epochs,
        }),
        { lease },
      );
    const [lease1, lease2] = [await register(1), await register(2)];
    const key = partitionKey(prefix, "t", 0);
    await client.put(
      key,
      formatPartitionState({
        ...initialPartitionState([1, 2], 1),
        leader: -1,
        leader_epoch: 5,
        isr: [],
        elr: [1, 2],
        committed_offset: 200,
      }),
    );
    // Node 1 (a copy with a deposed leader's tail: log end 250, last epoch 4) has published;
    // node 2's publication has no last epoch for t/0 yet (its start-up one): nobody leads.
    await publish(1, lease1, 250, { "t/0": 4 });
    await publish(2, lease2, 230, {});
    const passes = ctl.controller.passes;
    await waitFor("two more passes", async () => ctl.controller.passes >= passes + 2);
    expect(await readState(key)).toMatchObject({ leader: -1, elr: [1, 2] });
    // Node 2 publishes its last epoch, 5: it leads, though its log is shorter.
    await publish(2, lease2, 230, { "t/0": 5 });
    const elected = await waitFor("a leader", async () => {
      const s = await readState(key);
      return s.leader !== -1 ? s : undefined;
    });
    expect(elected).toMatchObject({ leader: 2, leader_epoch: 6, isr: [2], elr: [] });
  });
});
