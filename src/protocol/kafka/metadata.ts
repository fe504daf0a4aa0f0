/**
 * Metadata v1 and FindCoordinator v0 (Kafka's `MetadataRequest.json`, `MetadataResponse.json`,
 * `FindCoordinatorRequest.json`, `FindCoordinatorResponse.json`):
 *
 * ```
 * Metadata request v1  = topics nullable [name string]                 null = every topic
 * Metadata response v1 = brokers [node_id int32 | host string | port int32 | rack nullable string]
 *                        | controller_id int32
 *                        | topics [error_code int16 | name string | is_internal boolean
 *                                  | partitions [error_code int16 | partition_index int32
 *                                                | leader_id int32 | replica_nodes [int32]
 *                                                | isr_nodes [int32]]]
 * FindCoordinator request v0  = key string                             the group id
 * FindCoordinator response v0 = error_code int16 | node_id int32 | host string | port int32
 * ```
 *
 * A single es-broker is node 0, leader of every partition and coordinator of every group. In
 * cluster mode (docs/cluster.md "Clients") the answer lists every live broker with a Kafka
 * listener, and each partition's real leader, replicas and ISR.
 */
import { finishFrame, startResponse } from "./header.ts";
import { KafkaReader, type KafkaWriter } from "./wire.ts";

/** The one broker's address as clients must reach it. */
export interface KafkaNode {
  nodeId: number;
  host: string;
  port: number;
}

/** Decodes a Metadata v1 request: the topic names, or null for every topic. */
export function decodeMetadataRequest(body: Uint8Array): { topics: string[] | null } {
  const r = new KafkaReader(body, "Metadata v1 request");
  const topics = r.nullableArray("topics", 2, (i) => r.string(`topics[${i}].name`));
  r.end();
  return { topics };
}

/** Writes a Metadata v1 request body. */
export function writeMetadataRequest(w: KafkaWriter, topics: string[] | null): void {
  if (topics === null) w.int32(-1);
  else w.array(topics, (t) => w.string(t));
}

/** One partition of a Metadata response in cluster mode. */
export interface MetadataPartition {
  /** 0, or LEADER_NOT_AVAILABLE (5) while the partition has no leader. */
  errorCode: number;
  partition: number;
  /** −1 while offline. */
  leader: number;
  replicas: number[];
  isr: number[];
}

/** One topic of a Metadata response. */
export interface MetadataTopic {
  errorCode: number;
  name: string;
  /** Partition numbers (each led by the one node), or in cluster mode each partition's state. */
  partitions: number[] | MetadataPartition[];
}

/**
 * Encodes a Metadata v1 response: one broker (`node`) leading everything, or in cluster mode
 * `brokers` and the partitions' own leaders (with `controllerId`).
 */
export function encodeMetadataResponse(
  correlationId: number,
  p: { node: KafkaNode; topics: MetadataTopic[]; brokers?: KafkaNode[]; controllerId?: number },
): Uint8Array {
  const w = startResponse(correlationId, 128);
  w.array(p.brokers ?? [p.node], (n) =>
    w.int32(n.nodeId).string(n.host).int32(n.port).string(null),
  );
  w.int32(p.controllerId ?? p.node.nodeId);
  w.array(p.topics, (t) => {
    w.int16(t.errorCode).string(t.name).boolean(false);
    w.array(t.partitions as (number | MetadataPartition)[], (partition) => {
      if (typeof partition === "number") {
        w.int16(0).int32(partition).int32(p.node.nodeId);
        w.int32(1).int32(p.node.nodeId);
        w.int32(1).int32(p.node.nodeId);
        return;
      }
      w.int16(partition.errorCode).int32(partition.partition).int32(partition.leader);
      w.array(partition.replicas, (id) => w.int32(id));
      w.array(partition.isr, (id) => w.int32(id));
    });
  });
  return finishFrame(w);
}

/** Decodes a Metadata v1 response body (tests). */
export function decodeMetadataResponse(body: Uint8Array): {
  brokers: KafkaNode[];
  controllerId: number;
  topics: {
    errorCode: number;
    name: string;
    partitions: { partition: number; leader: number }[];
  }[];
} {
  const r = new KafkaReader(body, "Metadata v1 response");
  const brokers = r.array("brokers", 12, () => {
    const node = { nodeId: r.int32("node_id"), host: r.string("host"), port: r.int32("port") };
    r.nullableString("rack");
    return node;
  });
  const controllerId = r.int32("controller_id");
  const topics = r.array("topics", 9, () => {
    const errorCode = r.int16("error_code");
    const name = r.string("name");
    r.boolean("is_internal");
    const partitions = r.array("partitions", 18, () => {
      r.int16("error_code");
      const partition = r.int32("partition_index");
      const leader = r.int32("leader_id");
      r.array("replica_nodes", 4, () => r.int32("replica"));
      r.array("isr_nodes", 4, () => r.int32("isr"));
      return { partition, leader };
    });
    return { errorCode, name, partitions };
  });
  r.end();
  return { brokers, controllerId, topics };
}

/** Decodes a FindCoordinator v0 request: the group id. */
export function decodeFindCoordinatorRequest(body: Uint8Array): { key: string } {
  const r = new KafkaReader(body, "FindCoordinator v0 request");
  const key = r.string("key");
  r.end();
  return { key };
}

/** Encodes a FindCoordinator v0 response. */
export function encodeFindCoordinatorResponse(
  correlationId: number,
  p: { errorCode: number; node: KafkaNode },
): Uint8Array {
  const w = startResponse(correlationId, 64);
  w.int16(p.errorCode).int32(p.node.nodeId).string(p.node.host).int32(p.node.port);
  return finishFrame(w);
}
