/**
 * The keys es-broker keeps in etcd, under the cluster prefix (docs/cluster.md "Coordination in etcd").
 * Every function takes the prefix without a trailing slash (default `/es-broker`).
 */

/** `controller`: `{node_id, incarnation}` of the elected controller, on its lease. */
export function controllerKey(prefix: string): string {
  return `${prefix}/controller`;
}

/** `topics/<name>`: the topic's config JSON (with `replication_factor`, `min_insync_replicas`). */
export function topicKey(prefix: string, topic: string): string {
  return `${prefix}/topics/${topic}`;
}

/**
 * `deleted_topics/<name>`: written with a topic's deletion, removed when a topic of that name is
 * created again. A broker that was down meanwhile deletes its copy at its next start only on it:
 * a local cluster topic etcd has never heard of (etcd restored from an older snapshot) is kept.
 */
export function deletedTopicKey(prefix: string, topic: string): string {
  return `${prefix}/deleted_topics/${topic}`;
}

/** `partitions/<topic>/<partition>`: the partition's {@link PartitionState} JSON. */
export function partitionKey(prefix: string, topic: string, partition: number): string {
  return `${prefix}/partitions/${topic}/${partition}`;
}

/**
 * `log_ends/<node id>`: `{incarnation, log_end_offsets: {"topic/partition": offset}}`, what a
 * broker's logs held when this incarnation started (read by the controller for ELR leaders).
 */
export function logEndsKey(prefix: string, nodeId: number): string {
  return `${prefix}/log_ends/${nodeId}`;
}

/**
 * `incarnations`: `{"<node id>": "<incarnation>"}`, the registrations the controller last
 * acted on, so that a new controller knows which brokers restarted while nobody watched.
 */
export function incarnationsKey(prefix: string): string {
  return `${prefix}/incarnations`;
}

/**
 * Splits a `partitions/<topic>/<partition>` key back into its topic and partition, or null if
 * the key is not one.
 */
export function parsePartitionKey(
  prefix: string,
  key: string,
): { topic: string; partition: number } | null {
  const head = `${prefix}/partitions/`;
  if (!key.startsWith(head)) return null;
  const rest = key.slice(head.length);
  const slash = rest.lastIndexOf("/");
  if (slash <= 0) return null;
  const partition = Number(rest.slice(slash + 1));
  if (!/^[0-9]+$/.test(rest.slice(slash + 1)) || !Number.isSafeInteger(partition)) return null;
  return { topic: rest.slice(0, slash), partition };
}

/**
 * `registry/index`: the cluster's schema registry without schema texts (`cluster-registry.ts`):
 * `{"changes": [<token>, …], "state": <schemas.json's JSON with schemas as {id, schema_type}>}`.
 */
export function registryIndexKey(prefix: string): string {
  return `${prefix}/registry/index`;
}

/** `registry/schemas/<id>`: `{id, schema_type, schema}`, written once with the index naming it, never changed. */
export function registrySchemaKey(prefix: string, id: number): string {
  return `${prefix}/registry/schemas/${id}`;
}

/** `auth/keys/<name>`: one API key's record (its hash, never the key: `cluster-keys.ts`). */
export function apiKeyKey(prefix: string, name: string): string {
  return `${prefix}/auth/keys/${name}`;
}

/** `auth/revoked/<key id>`: `{name, revoked_ms}` of a revoked key, so no broker imports it again. */
export function revokedKeyKey(prefix: string, id: string): string {
  return `${prefix}/auth/revoked/${id}`;
}

/** `auth/enabled`: present once the cluster has had a key: authentication is on for good. */
export function authEnabledKey(prefix: string): string {
  return `${prefix}/auth/enabled`;
}

/**
 * `elect_preferred`: `{"topic": <name or null>}`, an operator's request for a preferred leader
 * election now (docs/cluster.md "Preferred leader election"); the controller acts on every put.
 */
export function electPreferredKey(prefix: string): string {
  return `${prefix}/elect_preferred`;
}

/**
 * `elect_unclean`: `{"topic": <name>, "partition": <number or null>}`, an operator's request for
 * an unclean leader election of an offline partition (docs/cluster.md "Unclean leader
 * election"); the controller acts on every put.
 */
export function electUncleanKey(prefix: string): string {
  return `${prefix}/elect_unclean`;
}

/**
 * `data_dirs/<node id>`: the data directory id of the last broker that registered as that node
 * (no lease: it outlives the broker), so that a start on a new directory can record which one it
 * took the node's place from (docs/cluster.md "Replacing a broker's disk, backing up etcd").
 */
export function dataDirKey(prefix: string, nodeId: number): string {
  return `${prefix}/data_dirs/${nodeId}`;
}

/**
 * `elect_unclean_result`: the controller's answer to the last `elect_unclean` request,
 * `{"request_revision": <its put's revision>, "partitions": [{partition, leader, leader_epoch,
 * lost_below_committed, missing_replicas} or {partition, refused}]}` (docs/cluster.md "Unclean
 * leader election").
 */
export function electUncleanResultKey(prefix: string): string {
  return `${prefix}/elect_unclean_result`;
}
