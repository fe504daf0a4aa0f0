/**
 * The controller's pass over partitions with no way out before, on the in-memory etcd
 * (test/helpers/fake-etcd.ts) and a manual clock, with log ends published by hand as brokers
 * publish them (`log_ends/<id>`: docs/cluster.md "Controller"):
 * - a partition state older than the replicas' logs (etcd restored, newuser15 #0 b) is written
 *   offline with its epoch kept, then elected above every published epoch once every replica
 *   has published (docs/cluster.md "Partition state older than the replicas' logs").
 * The real processes: test/e2e/cluster-elect.test.ts.
 */
import { describe, expect, it } from "vitest";
import { parseElectUnclean } from "../../src/cluster/controller.ts";
import { forgetReplicaDataInCluster } from "../../src/cluster/fresh-replica.ts";
import {
  dataDirKey,
  electUncleanKey,
  electUncleanResultKey,
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
import { ManualClock } from "../../src/lib/clock.ts";
import { startTestMember, type TestMember } from "../helpers/cluster-node.ts";
import { FakeEtcd, settle, until } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
async function startBroker(
  etcd: FakeEtcd,
  clock: ManualClock,
  nodeId: number,
  dataDirId = `dir-${nodeId}`,
): Promise<TestMember> {
  const b = await startTestMember({
    etcd,
    clock,
    nodeId,
    join: { dataDirId },
    controller: { rebalanceMs: 0 },
  });
  return b;
}

async function readState(etcd: FakeEtcd, topic: string): Promise<PartitionState> {
  const key = partitionKey(prefix, topic, 0);
  const kv = await etcd.get(key);
  if (kv === null) throw new Error(`${key} is missing`);
  return parsePartitionState(key, kv.value);
}

/** Brokers `ids` with controllers; the incarnations recorded. */
async function cluster(ids = [1, 2, 3]) {
  const etcd = new FakeEtcd();
  const clock = new ManualClock();
  const brokers: TestMember[] = [];
  for (const id of ids) brokers.push(await startBroker(etcd, clock, id));
  await until("incarnations recorded", async () => {
    const kv = await etcd.get(incarnationsKey(prefix));
    return kv !== null && Object.keys(JSON.parse(kv.value)).length === ids.length;
  });
  /** Publishes broker `id`'s log end and last epoch of `topic`/0, as its node does. */
  const publish = async (id: number, topic: string, logEnd: number, lastEpoch: number) => {
    const b = brokers.find((x) => x.nodeId === id) as TestMember;
    await etcd.put(
      logEndsKey(prefix, id),
      JSON.stringify({
        incarnation: b.membership.incarnation,
        log_end_offsets: { [`${topic}/0`]: logEnd },
        last_epochs: { [`${topic}/0`]: lastEpoch },
      }),
      { lease: b.membership.leaseId },
    );
    await settle();
  };
  const logs = () => brokers.flatMap((b) => b.logger.events);
  return { etcd, clock, brokers, publish, logs };
}

/** The controller's answer in `elect_unclean_result` to the request put at `revision`. */
async function uncleanAnswer(etcd: FakeEtcd, revision: number) {
  let answer: { request_revision: number; partitions: Record<string, unknown>[] } | undefined;
  await until("the controller's answer", async () => {
    const kv = await etcd.get(electUncleanResultKey(prefix));
    answer = kv === null ? undefined : JSON.parse(kv.value);
    return answer?.request_revision === revision;
  });
  return answer as { request_revision: number; partitions: Record<string, unknown>[] };
}

describe("controller: a partition state older than the replicas' logs (newuser15 #0 b)", () => {
  it("goes offline with its epoch kept, then is elected above every published epoch once all replicas published", async () => {
    const { etcd, publish, logs } = await cluster();
    // As the snapshot held it: epoch 6, every replica in sync, committed_offset 2884.
    const restored = {
      ...initialPartitionState([1, 2, 3], 2),
      leader: 2,
      leader_epoch: 6,
      committed_offset: 2884,
    };
    await etcd.put(partitionKey(prefix, "rr", 0), formatPartitionState(restored));
    await settle();
    // Nothing published yet: the usual rules see nothing to do.
    expect(await readState(etcd, "rr")).toEqual(restored);
    // Node 1's log is at epoch 14: the state is older. Offline, epoch kept, no lists.
    await publish(1, "rr", 10864, 14);
    await until("rr offline", async () => (await readState(etcd, "rr")).leader === -1);
    expect(await readState(etcd, "rr")).toEqual({ ...restored, leader: -1, isr: [], elr: [] });
    const warn = logs().find((e) => e.event === "cluster.partition_state_restored");
    expect(warn?.level).toBe("warn");
    expect(warn?.fields).toMatchObject({ topic: "rr", leader_epoch: 6, newest_log_epoch: 14 });
    expect(String(warn?.fields.action)).toContain("etcd restored?");
    // Every replica publishes again (an offline state with no lists asks them to); with node 3's
    // missing, the partition waits.
    await publish(1, "rr", 10864, 14);
    await publish(2, "rr", 10864, 14);
    await settle();
    expect((await readState(etcd, "rr")).leader).toBe(-1);
    // Node 3 is behind (an older epoch, a longer log of it); 1 and 2 hold the newest log.
    await publish(3, "rr", 11000, 12);
    await until("rr led", async () => (await readState(etcd, "rr")).leader !== -1);
    expect(await readState(etcd, "rr")).toEqual({
      ...restored,
      leader: 1,
      leader_epoch: 15,
      isr: [1, 2],
      elr: [],
    });
  });
});

describe("controller: unclean leader election (attack15 F2 b)", () => {
  it("an elect_unclean request elects the live replica with the largest (last epoch, log end), logged at error with what is lost", async () => {
    // Node 3 never comes back: the ELR [1, 3] waits for it for good.
    const { etcd, clock, publish, logs } = await cluster([1, 2]);
    const stuck = {
      ...initialPartitionState([1, 2, 3], 2),
      leader: -1,
      leader_epoch: 7,
      isr: [],
      elr: [1, 3],
      committed_offset: 500,
    };
    await etcd.put(partitionKey(prefix, "t", 0), formatPartitionState(stuck));
    await settle();
    await publish(1, "t", 480, 6);
    await publish(2, "t", 450, 6);
    expect((await readState(etcd, "t")).leader).toBe(-1);
    // Offline past a resync: the controller says what it waits for and the way out (attack15b F3).
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      await settle();
    }
    const offline = logs().filter((e) => e.event === "cluster.partition_offline");
    expect(offline.length).toBe(1); // once a minute at most
    expect(offline[0].level).toBe("warn");
    expect(offline[0].fields).toMatchObject({ topic: "t", partition: 0, elr: [1, 3] });
    expect(String(offline[0].fields.reason)).toMatch(
      /^waiting for node 3 of the ELR: .*es-broker cluster elect --unclean --topic t --partition 0$/,
    );
    const put = await etcd.txn({
      compare: [],
      success: [{ put: { key: electUncleanKey(prefix), value: '{"topic":"t","partition":0}' } }],
    });
    const answer = await uncleanAnswer(etcd, put.revision);
    expect(answer.partitions).toEqual([
      {
        partition: 0,
        leader: 1,
        leader_epoch: 8,
        lost_below_committed: 20,
        missing_replicas: [3],
      },
    ]);
    expect(await readState(etcd, "t")).toEqual({
      ...stuck,
      leader: 1,
      leader_epoch: 8,
      isr: [1],
      elr: [],
      committed_offset: 480,
    });
    const line = logs().find((e) => e.event === "cluster.unclean_leader_elected");
    expect(line?.level).toBe("error");
    expect(line?.fields).toMatchObject({
      topic: "t",
      partition: 0,
      leader: 1,
      missing_replicas: [3],
    });
    expect(String(line?.fields.lost)).toMatch(/^20 records below committed_offset 500/);
    // A partition with a leader is refused, with the reason in the answer.
    const again = await etcd.txn({
      compare: [],
      success: [{ put: { key: electUncleanKey(prefix), value: '{"topic":"t","partition":0}' } }],
    });
    expect((await uncleanAnswer(etcd, again.revision)).partitions).toEqual([
      { partition: 0, refused: "it is not offline: node 1 leads it" },
    ]);
    // A malformed request is logged and ignored.
    await etcd.put(electUncleanKey(prefix), '{"topic":1}');
    await settle();
    expect(logs().some((e) => e.event === "cluster.bad_elect_unclean")).toBe(true);
  });
});

describe("controller: a forgotten replica's own data directory back (attack15 F2 a)", () => {
  it("the empty directory's start forgets node 3; the real directory's start makes it eligible and elected again", async () => {
    const { etcd, clock, brokers, logs } = await cluster([1, 2]);
    // solo/0: RF 1 on node 3, whose real directory is dir-3; node 3 died: offline, ELR [3].
    const offline = {
      ...initialPartitionState([3], 1),
      leader: -1,
      leader_epoch: 4,
      isr: [],
      elr: [3],
      committed_offset: 4000,
    };
    await etcd.put(partitionKey(prefix, "solo", 0), formatPartitionState(offline));
    await etcd.put(dataDirKey(prefix, 3), "dir-3");
    // An empty directory starts as node 3 (the disk not mounted): forgotten, never elected.
    expect(await forgetReplicaDataInCluster(etcd, prefix, 3)).toEqual(["solo/0"]);
    expect(await readState(etcd, "solo")).toEqual({
      ...offline,
      elr: [],
      forgotten: [{ node_id: 3, data_dir_id: "dir-3", leader_epoch: 4 }],
    });
    const empty = await startBroker(etcd, clock, 3, "empty-3");
    brokers.push(empty);
    await settle();
    expect((await readState(etcd, "solo")).elr).toEqual([]);
    // Stopped; the real directory starts as node 3.
    await empty.stop();
    clock.advance(5000);
    await settle();
    const real = await startBroker(etcd, clock, 3, "dir-3");
    brokers.push(real);
    await until("node 3 back in the ELR", async () =>
      (await readState(etcd, "solo")).elr.includes(3),
    );
    // It publishes its log end (an offline state naming it): elected by the ELR rule.
    await etcd.put(
      logEndsKey(prefix, 3),
      JSON.stringify({
        incarnation: real.membership.incarnation,
        log_end_offsets: { "solo/0": 4100 },
        last_epochs: { "solo/0": 3 },
      }),
      { lease: real.membership.leaseId },
    );
    await until("solo led", async () => (await readState(etcd, "solo")).leader === 3);
    expect(await readState(etcd, "solo")).toEqual({
      ...offline,
      leader: 3,
      leader_epoch: 5,
      isr: [3],
      elr: [],
    });
    expect(logs().some((e) => e.event === "cluster.partition_changed")).toBe(true);
  });
});

describe("controller: a forgotten directory and the unclean election (attack16 F4)", () => {
  it("names the forgotten directory, refuses the unclean election until the loss is accepted, and never elects the superseded directory by the rules", async () => {
    const { etcd, clock, brokers, logs } = await cluster([2]);
    // t10/0: RF 1 on node 1 (its records on dir-1), node 1 down: offline, ELR [1], epoch 1.
    await etcd.put(dataDirKey(prefix, 1), "dir-1");
    const offline = {
      ...initialPartitionState([1], 1),
      leader: -1,
      leader_epoch: 1,
      isr: [],
      elr: [1],
    };
    await etcd.put(partitionKey(prefix, "t10", 0), formatPartitionState(offline));
    // Node 1 starts on an empty directory (the disk not mounted).
    expect(await forgetReplicaDataInCluster(etcd, prefix, 1)).toEqual(["t10/0"]);
    const empty = await startBroker(etcd, clock, 1, "empty-1");
    brokers.push(empty);
    const publishAs = async (b: TestMember, logEnd: number, lastEpoch: number) => {
      await etcd.put(
        logEndsKey(prefix, 1),
        JSON.stringify({
          incarnation: b.membership.incarnation,
          log_end_offsets: { "t10/0": logEnd },
          last_epochs: { "t10/0": lastEpoch },
        }),
        { lease: b.membership.leaseId },
      );
      await settle();
    };
    await publishAs(empty, 0, -1);
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      await settle();
    }
    const warned = logs().filter((e) => e.event === "cluster.partition_offline");
    expect(String(warned.at(-1)?.fields.reason)).toBe(
      "node 1 runs on another data directory than the one that held this partition (forgotten directory dir-1): start it on that data directory; an unclean election now loses every record that directory held (es-broker cluster elect --unclean --topic t10 --partition 0 --accept-data-loss)",
    );
    const ask = async (value: string) => {
      const put = await etcd.txn({
        compare: [],
        success: [{ put: { key: electUncleanKey(prefix), value } }],
      });
      return (await uncleanAnswer(etcd, put.revision)).partitions;
    };
    expect(await ask('{"topic":"t10","partition":0}')).toEqual([
      {
        partition: 0,
        refused: expect.stringMatching(
          /^it would lose every record node 1's forgotten data directory dir-1 held .*--accept-data-loss/,
        ),
      },
    ]);
    expect((await readState(etcd, "t10")).leader).toBe(-1);
    const [elected] = await ask('{"topic":"t10","partition":0,"accept_data_loss":true}');
    expect(elected).toMatchObject({ partition: 0, leader: 1, leader_epoch: 2 });
    expect(elected.lost_directories).toEqual([
      "every record node 1's forgotten data directory dir-1 held (it held the partition until epoch 1; its log end was not published where etcd keeps it)",
    ]);
    const line = logs().find((e) => e.event === "cluster.unclean_leader_elected");
    expect(line?.level).toBe("error");
    expect(String(line?.fields.lost)).not.toMatch(
      /^0 records below committed_offset 0 the new leader lacks$/,
    );
    expect((await readState(etcd, "t10")).forgotten).toEqual([
      {
        node_id: 1,
        data_dir_id: "dir-1",
        leader_epoch: 2,
        superseded: true,
        replaced_by: "empty-1",
      },
    ]);
    // Records acknowledged on empty-1 at epoch 2; it stops, and dir-1 starts as node 1 again.
    await empty.stop();
    clock.advance(5000);
    await settle();
    const real = await startBroker(etcd, clock, 1, "dir-1");
    brokers.push(real);
    await until("t10/0 offline with node 1 in the ELR", async () => {
      const s = await readState(etcd, "t10");
      return s.leader === -1 && s.elr.includes(1);
    });
    await publishAs(real, 475, 0);
    for (let i = 0; i < 3; i++) {
      clock.advance(30_000);
      await settle();
    }
    // Not elected (attack16 F4 step 6: its records would replace those of epoch 2).
    expect(await readState(etcd, "t10")).toMatchObject({ leader: -1, elr: [1] });
    expect(
      String(
        logs()
          .filter((e) => e.event === "cluster.partition_offline")
          .at(-1)?.fields.reason,
      ),
    ).toMatch(
      /^node 1 runs on data directory dir-1, which an unclean election at epoch 2 superseded/,
    );
  });
});

describe("parseElectUnclean", () => {
  it("takes a topic and a partition or null, and nothing else", () => {
    expect(parseElectUnclean('{"topic":"t","partition":3}')).toEqual({
      topic: "t",
      partition: 3,
      acceptDataLoss: false,
    });
    expect(parseElectUnclean('{"topic":"t","partition":null,"accept_data_loss":true}')).toEqual({
      topic: "t",
      partition: null,
      acceptDataLoss: true,
    });
    expect(parseElectUnclean('{"topic":"t"}')).toEqual({
      topic: "t",
      partition: null,
      acceptDataLoss: false,
    });
    for (const bad of [
      '{"topic":null}',
      '{"topic":""}',
      '{"topic":"t","partition":-1}',
      '{"topic":"t","partition":"0"}',
      '{"topic":"t","accept_data_loss":"yes"}',
      "[]",
      "not json",
    ])
      expect(parseElectUnclean(bad), bad).toBeUndefined();
  });
});
