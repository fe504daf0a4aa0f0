/**
 * Topic records written straight into etcd as the controller writes them (docs/cluster.md
 * "Topic ids"), for tests that play the controller against a node: one partition led by node 2,
 * created and deleted each in one revision.
 */
import type { TopicConfig } from "../../src/broker/types.ts";
import type { Etcd } from "../../src/cluster/etcd.ts";
import { deletedTopicKey, partitionKey, topicKey } from "../../src/cluster/keys.ts";
import { formatPartitionState, type PartitionState } from "../../src/cluster/partition-state.ts";
import { formatTopicRecord } from "../../src/cluster/topic-id.ts";

/** The config of every topic these helpers create: three replicas, min ISR 1. */
export const testTopicConfig = {
  replication_factor: 3,
  min_insync_replicas: 1,
} as Partial<TopicConfig> as TopicConfig;

/** A partition state over replicas 1, 2, 3, all in sync, led by `leader` at `leaderEpoch`. */
export function testPartitionState(leader: number, leaderEpoch: number): PartitionState {
  return {
    replicas: [1, 2, 3],
    leader,
    leader_epoch: leaderEpoch,
    isr: [1, 2, 3],
    elr: [],
    committed_offset: 0,
    min_insync_replicas: 1,
  };
}

/** Creates topic `name` under `prefix` (one partition led by node 2) with `topicId`, in one revision. */
export async function createTestTopic(
  etcd: Pick<Etcd, "txn">,
  prefix: string,
  name: string,
  topicId: string,
): Promise<void> {
  await etcd.txn({
    compare: [],
    success: [
      {
        put: {
          key: topicKey(prefix, name),
          value: formatTopicRecord({ config: testTopicConfig, topicId, origin: "creation" }),
        },
      },
      {
        put: {
          key: partitionKey(prefix, name, 0),
          value: formatPartitionState(testPartitionState(2, 0)),
        },
      },
      { delete: { key: deletedTopicKey(prefix, name) } },
    ],
  });
}

/** Deletes topic `name` as the controller does: its keys go and a tombstone is written, in one revision. */
export async function deleteTestTopic(
  etcd: Pick<Etcd, "txn">,
  prefix: string,
  name: string,
): Promise<void> {
  await etcd.txn({
    compare: [],
    success: [
      { delete: { key: topicKey(prefix, name) } },
      { delete: { key: partitionKey(prefix, name, 0) } },
      { put: { key: deletedTopicKey(prefix, name), value: "{}" } },
    ],
  });
}
