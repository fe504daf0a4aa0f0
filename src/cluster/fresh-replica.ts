/**
 * A broker starting on a data directory that never joined the cluster, under a node id the
 * cluster knows, has lost that node's logs (its disk was replaced, or the directory deleted):
 * before it registers, it takes itself out of every partition's ISR and ELR (and leadership)
 * in etcd, so no controller elects it on a log end that is merely short (docs/cluster.md
 * "Replacing a broker's disk, backing up etcd"; attack13 F1: elected with an empty log after a
 * full-cluster restart, it made the other replicas truncate every acknowledged record).
 */
import type { Etcd } from "./etcd.ts";
import { dataDirKey, parsePartitionKey } from "./keys.ts";
import { brokerKey, parseRegistration, registeredElsewhere } from "./membership.ts";
import { forgetReplicaData, formatPartitionState, parsePartitionState } from "./partition-state.ts";

/**
 * Removes `nodeId` from the ISR, the ELR and the leadership of every partition under `prefix`
 * (recording, in each, the data directory id `data_dirs/<nodeId>` names, if any: the one it
 * held before),
 * each by compare-and-set on the key's mod_revision (read again and retried when it changed) and
 * on `nodeId` being registered by no broker: a broker that runs under that node id (an operator
 * gave two brokers one `--node-id`) holds its logs, and taking it out of its ISRs would leave a
 * partition whose only replica it is without a leader for good.
 * Resolves with the partitions changed, as `topic/partition`.
 * @throws ClusterJoinError if a broker is registered under `nodeId` (before any change, or at the
 *   change that found it); what etcd throws (the caller does not register then: safe to start
 *   again).
 */
export async function forgetReplicaDataInCluster(
  etcd: Etcd,
  prefix: string,
  nodeId: number,
): Promise<string[]> {
  const changed: string[] = [];
  const registrationKey = brokerKey(prefix, nodeId);
  const registered = await etcd.get(registrationKey);
  if (registered !== null) throw registeredElsewhere(nodeId, parseRegistration(registered));
  // The directory this one takes the place of (written by every registration since
  // 2026-12-03): recorded in each partition changed, so that it is eligible again if it comes
  // back before anything was committed without it (a disk that was not mounted: attack15 F2).
  const old = (await etcd.get(dataDirKey(prefix, nodeId)))?.value;
  const { kvs } = await etcd.list(`${prefix}/partitions/`);
  for (let kv of kvs) {
    const at = parsePartitionKey(prefix, kv.key);
    if (at === null) continue;
    for (;;) {
      const next = forgetReplicaData(parsePartitionState(kv.key, kv.value), nodeId, old);
      if (next === null) break;
      const result = await etcd.txn({
        compare: [
          { key: kv.key, target: "mod_revision", result: "equal", number: kv.modRevision },
          { key: registrationKey, target: "create_revision", result: "equal", number: 0 },
        ],
        success: [{ put: { key: kv.key, value: formatPartitionState(next) } }],
        failure: [{ get: { key: kv.key } }, { get: { key: registrationKey } }],
      });
      if (result.succeeded) {
        changed.push(`${at.topic}/${at.partition}`);
        break;
      }
      const other = result.reads[1]?.[0];
      if (other !== undefined) throw registeredElsewhere(nodeId, parseRegistration(other));
      const now = result.reads[0]?.[0];
      if (now === undefined) break;
      kv = now;
    }
  }
  return changed;
}
