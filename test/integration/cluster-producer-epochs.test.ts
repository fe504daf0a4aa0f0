/**
 * Producer epochs in cluster mode (docs/cluster.md "Producer epochs", docs/decisions.md §20): the
 * controller hands them out; a broker that is not the controller refuses the call over TCP with
 * `not_leader` naming it, and an IdempotentProducer with a router asks the coordinator (the
 * controller) instead. Two brokers in process, each the cluster-mode broker (`clusterBroker`) over
 * its own LocalBroker, behind its own TCP transport; the cluster node is a stand-in that only says
 * who the controller is (etcd, elections and replication are other tests' business).
 */
import { describe, expect, it, onTestFinished } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import type { Broker } from "../../src/broker/types.ts";
import { ClientError, IdempotentProducer, type TcpClient } from "../../src/client/client.ts";
import type { LeaderRouter } from "../../src/client/cluster.ts";
import { clusterBroker } from "../../src/cluster/cluster-broker.ts";
import type { ClusterNode } from "../../src/cluster/node.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { serveTcp } from "../helpers/front-doors.ts";

/** A cluster node that only knows that node `controller` is the controller and this is `me`. */
function nodeStandIn(me: number, controller: number): ClusterNode {
  return {
    membership: { nodeId: me },
    controller: {
      isController: me === controller,
      current: { node_id: controller },
      onChange() {},
    },
    brokers: new Map([
      [1, { tcp: "127.0.0.1:1", http: "http://127.0.0.1:1" }],
      [2, { tcp: "127.0.0.1:2", http: "http://127.0.0.1:2" }],
    ]),
    partitionState: () => undefined,
    topicConfig: () => undefined,
  } as unknown as ClusterNode;
}

async function clusterMember(me: number, controller: number) {
  const { broker } = await openTestBroker({ clock: new ManualClock(), cleanupIntervalMs: 0 });
  const member = clusterBroker(broker, nodeStandIn(me, controller));
  const served = await serveTcp(member as unknown as LocalBroker);
  return { local: broker, member: member as Broker, client: await served.connect() };
}

describe("producer epochs in cluster mode", () => {
  it("a broker that is not the controller refuses the call naming the controller; a producer with a router asks the controller", async () => {
    const follower = await clusterMember(1, 2);
    const controller = await clusterMember(2, 2);
    const refused = await follower.client.initProducerEpoch("p").then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(ClientError);
    expect((refused as ClientError).code).toBe("not_leader");
    expect((refused as ClientError).details).toMatchObject({ leader: 2 });
    expect(follower.local.producerStates.inspect("p")).toBeUndefined();

    await controller.local.createTopic({ name: "t", partitions: 1 });
    const router: LeaderRouter = {
      leader: async () => controller.client,
      refresh: async () => {},
      partitionCount: async () => 1,
      coordinator: async () => controller.client,
    };
    const producer = new IdempotentProducer({
      // Bootstrapped on the follower: the epoch must still come from the controller.
      connect: async () => follower.client as TcpClient,
      router,
      producerId: "p",
    });
    onTestFinished(() => producer.close());
    await producer.send("t", [{ value: "a" }], { partition: 0 });
    expect(producer.epochSource).toBe("broker");
    expect(controller.local.producerStates.inspect("p")?.epoch).toBe(producer.epoch);
    expect(follower.local.producerStates.inspect("p")).toBeUndefined();
  });

  it("a leader holding a higher epoch than the controller handed out makes the producer ask again above it", async () => {
    const controller = await clusterMember(2, 2);
    const leader = await clusterMember(1, 2);
    await leader.local.createTopic({ name: "t", partitions: 1 });
    // The leader saw a clock epoch of an older client far above what the controller will hand out.
    const seen = 1_900_000_000;
    await leader.client.produceIdempotent("t", [{ value: "old" }], {
      partition: 0,
      producer: { id: "p", epoch: seen, sequence: 0 },
    });
    const router: LeaderRouter = {
      leader: async () => leader.client,
      refresh: async () => {},
      partitionCount: async () => 1,
      coordinator: async () => controller.client,
    };
    const producer = new IdempotentProducer({
      connect: async () => controller.client,
      router,
      producerId: "p",
    });
    onTestFinished(() => producer.close());
    await producer.send("t", [{ value: "new" }], { partition: 0 });
    expect(producer.epoch).toBe(seen + 1);
    expect(controller.local.producerStates.inspect("p")?.epoch).toBe(seen + 1);
    expect(leader.local.producerStates.inspect("p")?.epoch).toBe(seen + 1);
  });
});
