/**
 * Producer epochs in cluster mode (docs/cluster.md "Producer epochs", docs/decisions.md §20): a
 * cluster does not hand them out (an allocation kept in the controller's own producer state was
 * handed out again by the next controller after a SIGKILL: attack13 F4). Every broker answers
 * `unsupported_api`, and an IdempotentProducer with a router keeps the clock epoch. Two brokers in
 * process, each the cluster-mode broker (`clusterBroker`) over its own LocalBroker, behind its own
 * TCP transport; the cluster node is a stand-in that only says who the controller is.
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
  it("no broker hands out an epoch, the controller neither; a producer with a router keeps the clock epoch", async () => {
    const follower = await clusterMember(1, 2);
    const controller = await clusterMember(2, 2);
    for (const m of [follower, controller]) {
      const refused = await m.client.initProducerEpoch("p").then(
        () => null,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(ClientError);
      expect((refused as ClientError).code).toBe("unsupported_api");
      expect(m.local.producerStates.inspect("p")).toBeUndefined();
    }

    await controller.local.createTopic({ name: "t", partitions: 1 });
    const router: LeaderRouter = {
      leader: async () => controller.client,
      refresh: async () => {},
      partitionCount: async () => 1,
      coordinator: async () => controller.client,
    };
    const producer = new IdempotentProducer({
      connect: async () => follower.client as TcpClient,
      router,
      producerId: "p",
    });
    onTestFinished(() => producer.close());
    const before = Math.floor(Date.now() / 1000);
    await producer.send("t", [{ value: "a" }], { partition: 0 });
    expect(producer.epochSource).toBe("clock");
    expect(producer.epoch).toBeGreaterThanOrEqual(before);
    expect(controller.local.producerStates.inspect("p")?.epoch).toBe(producer.epoch);
  });
});
