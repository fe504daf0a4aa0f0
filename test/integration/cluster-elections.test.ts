/**
 * The controller's pass over partitions with no way out before, on the in-memory etcd
 * (test/helpers/fake-etcd.ts) and a manual clock, with log ends published by hand as brokers
 * publish them (`log_ends/<id>`: docs/cluster.md "Controller"):
 * - a partition state older than the replicas' logs (etcd restored, newuser15 #0 b) is written
 *   offline with its epoch kept, then elected above every published epoch once every replica
 *   has published (docs/cluster.md "Partition state older than the replicas' logs").
 * The real processes: test/e2e/cluster-elect.test.ts.
 */
import { afterEach, describe, expect, it } from "vitest";
import { Controller } from "../../src/cluster/controller.ts";
import { incarnationsKey, logEndsKey, partitionKey } from "../../src/cluster/keys.ts";
import { joinCluster, type Membership } from "../../src/cluster/membership.ts";
import {
  formatPartitionState,
  initialPartitionState,
  type PartitionState,
  parsePartitionState,
} from "../../src/cluster/partition-state.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { FakeEtcd, settle, until } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

interface TestBroker {
  nodeId: number;
  membership: Membership;
  controller: Controller;
  logger: MemoryLogger;
}

async function startBroker(
  etcd: FakeEtcd,
  clock: ManualClock,
  nodeId: number,
): Promise<TestBroker> {
  const logger = new MemoryLogger();
  const membership = await joinCluster({
    etcd,
    clock,
    prng: new Prng(nodeId),
    logger,
    prefix,
    nodeId,
    advertise: { tcp: `127.0.0.1:${9000 + nodeId}`, http: `http://127.0.0.1:${8000 + nodeId}` },
    dataDirId: `dir-${nodeId}`,
    dataDir: null,
    newClusterId: "cluster-a",
  });
  const controller = new Controller({
    etcd,
    clock,
    prng: new Prng(100 + nodeId),
    logger,
    prefix,
    nodeId,
    lease: () => membership.leaseId,
    retryMs: 100,
    rebalanceMs: 0,
  });
  await controller.start();
  cleanups.push(async () => {
    await controller.close();
    await membership.close();
  });
  return { nodeId, membership, controller, logger };
}

async function readState(etcd: FakeEtcd, topic: string): Promise<PartitionState> {
  const key = partitionKey(prefix, topic, 0);
  const kv = await etcd.get(key);
  if (kv === null) throw new Error(`${key} is missing`);
  return parsePartitionState(key, kv.value);
}

/** Three brokers with controllers; the incarnations recorded. */
async function cluster() {
  const etcd = new FakeEtcd();
  const clock = new ManualClock();
  const brokers: TestBroker[] = [];
  for (const id of [1, 2, 3]) brokers.push(await startBroker(etcd, clock, id));
  await until("incarnations recorded", async () => {
    const kv = await etcd.get(incarnationsKey(prefix));
    return kv !== null && Object.keys(JSON.parse(kv.value)).length === 3;
  });
  /** Publishes broker `id`'s log end and last epoch of `topic`/0, as its node does. */
  const publish = async (id: number, topic: string, logEnd: number, lastEpoch: number) => {
    const b = brokers[id - 1];
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
