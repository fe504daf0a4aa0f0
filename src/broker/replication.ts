/**
 * How the broker sees replication (docs/cluster.md "Replication"): one interface the cluster's
 * `ReplicaManager` (`cluster/replica-manager.ts`) implements and {@link LocalBroker.setReplication}
 * installs. Single-node mode never installs one, and the broker then calls nothing of it: no
 * extra promise, no extra check on the hot path.
 *
 * With a seam installed:
 * - produce refuses a partition this broker does not lead ({@link ReplicationSeam.admitWrite}),
 *   checked again in the partition's write loop, atomically with the append; after the local append (its fsync included) waits for
 *   {@link ReplicationSeam.awaitCommitted} before it acknowledges;
 * - fetch (every transport: TCP, HTTP, Kafka, Durable Streams, SSE tails) refuses a partition this
 *   broker does not lead, and never answers a record at or above
 *   {@link ReplicationSeam.readLimit}, the high watermark (the smallest durable position in the
 *   ISR); a long-poll waits for it to move ({@link ReplicationSeam.watchReadLimit});
 * - the replica-fetch api (api 14) is served by {@link ReplicationSeam.replicaFetch}.
 */
import type { ReplicaFetchRequest, ReplicaFetchResult } from "./types.ts";

/** What the broker calls of replication. See the module comment. */
export interface ReplicationSeam {
  /**
   * After the local append of records up to `nextOffset` (exclusive) resolved: a promise that
   * resolves once the high watermark covers them and the ISR has at least
   * `min_insync_replicas` members, or null when nothing needs waiting for.
   * @throws (the promise rejects) BrokerError not_enough_replicas (the ISR is or fell below its
   *   minimum), not_leader (this broker was deposed, or its membership lease is not live).
   */
  awaitCommitted(topic: string, partition: number, nextOffset: number): Promise<void> | null;
  /** The high watermark of a partition this broker leads; undefined = the local log end (no cap). */
  readLimit(topic: string, partition: number): number | undefined;
  /**
   * Throws unless this broker leads the partition now; for a write (`write` true) also unless
   * the ISR has at least `min_insync_replicas` members and this broker's membership is live, so
   * that a write that cannot be acknowledged is refused before it is stored.
   * @throws BrokerError not_leader naming the leader's node id when known; not_enough_replicas.
   */
  checkLeader(topic: string, partition: number, write?: boolean): void;
  /**
   * {@link checkLeader} for a write, and the fence of that write: a synchronous check the
   * partition's write loop runs right before it assigns the records' offsets
   * (`AppendOptions.admit`), which throws unless this broker still leads the partition under
   * the epoch this call saw and its membership lease is still held. So a produce admitted as
   * leader but reaching the write loop after a role change or a lost lease appends nothing
   * (docs/cluster.md "Replication").
   * @throws BrokerError not_leader, not_enough_replicas (now, as checkLeader does); the returned
   *   check throws not_leader or fenced_leader_epoch.
   */
  admitWrite(topic: string, partition: number): () => void;
  /**
   * Calls `listener` whenever the partition's {@link readLimit} may have moved, or its leadership
   * changed. @returns a function that unsubscribes.
   */
  watchReadLimit(topic: string, partition: number, listener: () => void): () => void;
  /** Serves a follower's replica fetch (see `Broker.replicaFetch`). */
  replicaFetch(request: ReplicaFetchRequest): Promise<ReplicaFetchResult>;
}
