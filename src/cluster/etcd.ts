/**
 * The part of etcd's v3 API the cluster code uses, as an interface: key-value reads and writes,
 * transactions (compare-and-set), leases and watches (docs/cluster.md "Coordination in etcd").
 *
 * The real implementation is `runtime/etcd.ts` (etcd's JSON gateway over HTTP or HTTPS); simulations can
 * supply their own. Keys and values are UTF-8 strings (the cluster stores JSON). Revisions are
 * etcd's store revisions, JS numbers (etcd counts one per write: 2^53 is out of reach). Lease ids
 * are 64-bit and travel as decimal strings, never as numbers (they exceed 2^53).
 */

/** One stored key as etcd reports it. */
export interface EtcdKeyValue {
  key: string;
  value: string;
  /** Revision of the write that created the key (since its last deletion). */
  createRevision: number;
  /** Revision of the last write to the key. */
  modRevision: number;
  /** Writes to the key since it was created, 1 for a new key. */
  version: number;
  /** The lease the key is attached to, or "0" for none. */
  lease: string;
}

/** A condition of a transaction, on one key. A missing key has revisions and version 0. */
export type EtcdCompare =
  | { key: string; target: "value"; result: "equal" | "not_equal"; value: string }
  | {
      key: string;
      target: "version" | "create_revision" | "mod_revision";
      result: "equal" | "not_equal" | "greater" | "less";
      number: number;
    };

/** One operation inside a transaction branch. */
export type EtcdOp =
  | { put: { key: string; value: string; lease?: string } }
  | { delete: { key: string; prefix?: boolean } }
  | { get: { key: string; prefix?: boolean } };

/** The outcome of a transaction: which branch ran, and the reads it made (one list per `get`). */
export interface EtcdTxnResult {
  succeeded: boolean;
  /** The store revision after the transaction. */
  revision: number;
  /** For each `get` of the branch that ran, in order, the keys it found. */
  reads: EtcdKeyValue[][];
}

/** A change seen by a watch. A `delete` carries the key and the revision of the deletion only. */
export interface EtcdEvent {
  type: "put" | "delete";
  kv: EtcdKeyValue;
}

/** Callbacks of a watch. */
export interface EtcdWatchHandlers {
  /** Changes in revision order; each call holds every event of one or more whole revisions. */
  onEvents(events: EtcdEvent[]): void;
  /**
   * The watch cannot continue from where it was (etcd compacted the revisions it needed): the
   * watcher has stopped, and the caller must read the keys afresh and watch again.
   */
  onCompacted?(compactRevision: number): void;
}

/** A running watch. */
export interface EtcdWatch {
  /** Stops the watch; no callback runs after it resolves. */
  cancel(): Promise<void>;
  /**
   * Drops the current stream and opens a new one from the revision after the last event
   * delivered, on another member when there is one (`reason` is logged). Optional: without it,
   * `watch-guard.ts` cancels the watch and starts another.
   */
  reopen?(reason: string): void;
}

/** What {@link Etcd.changedSince} found. */
export interface EtcdChanges {
  /** Keys under the key or prefix at `revision` (all of them, changed or not). */
  count: number;
  /**
   * The keys among them last written after the given revision, without their values (`value`
   * is ""), in key order.
   */
  changed: EtcdKeyValue[];
  /** The store revision read: `atRevision` when given, else etcd's current one. */
  revision: number;
}

/** What etcd says about the member that answered. */
export interface EtcdStatus {
  /** etcd's own cluster id (decimal string): every endpoint of one etcd cluster reports the same. */
  clusterId: string;
  memberId: string;
  /** The member id of the raft leader, "0" while there is none. */
  leaderId: string;
  version: string;
  revision: number;
}

/**
 * etcd v3, narrowed to what es-broker needs. Every method rejects with {@link EtcdError}: code
 * `unavailable` when no endpoint answered, `indeterminate` when a write may or may not have
 * been applied (the connection broke after it was sent: read back before deciding), otherwise
 * the gRPC status name etcd answered with (`not_found` for a lease that has expired, ...).
 */
export interface Etcd {
  /** The key, or null if it does not exist. Linearizable. */
  get(key: string): Promise<EtcdKeyValue | null>;
  /** Every key starting with `prefix`, in key order, and the store revision of the read. */
  list(prefix: string): Promise<{ kvs: EtcdKeyValue[]; revision: number }>;
  /** Writes `value` under `key`, attached to `lease` when given; resolves with the new revision. */
  put(key: string, value: string, options?: { lease?: string }): Promise<number>;
  /** Deletes the key (or every key under the prefix); resolves with the number deleted. */
  delete(key: string, options?: { prefix?: boolean }): Promise<number>;
  /** Runs `success` if every comparison holds, else `failure`, atomically. */
  txn(request: {
    compare: EtcdCompare[];
    success: EtcdOp[];
    failure?: EtcdOp[];
  }): Promise<EtcdTxnResult>;
  /** Grants a lease of `ttlSeconds`; resolves with its id and the TTL etcd granted. */
  leaseGrant(ttlSeconds: number): Promise<{ id: string; ttlSeconds: number }>;
  /** Renews the lease once; resolves with its new TTL in seconds, 0 if it has expired or is unknown. */
  leaseKeepAlive(id: string): Promise<number>;
  /** Revokes the lease, deleting every key attached to it. An unknown lease is not an error. */
  leaseRevoke(id: string): Promise<void>;
  /**
   * Watches `key` (or every key under it with `prefix`) from `startRevision` on (inclusive; the
   * revision after a read sees every later change exactly once). Broken connections are retried,
   * on the next endpoint, from the revision after the last one delivered.
   */
  watch(
    request: { key: string; prefix?: boolean; startRevision: number },
    handlers: EtcdWatchHandlers,
  ): EtcdWatch;
  /**
   * How many keys `key` (or every key under it with `prefix`) holds, and which of them were
   * written after revision `after` (keys only), read at `atRevision` (default: now; linearizable).
   * One range request; the guard of deaf watches (`watch-guard.ts`) compares it with what a watch
   * delivered. Rejects with `out_of_range` when `atRevision` is compacted.
   */
  changedSince(request: {
    key: string;
    prefix?: boolean;
    after: number;
    atRevision?: number;
  }): Promise<EtcdChanges>;
  /** The status of the member that answered. */
  status(): Promise<EtcdStatus>;
  /** Stops every watch and request in flight. */
  close(): Promise<void>;
}

/** Kinds of {@link EtcdError}: ours first, then etcd's gRPC status names. */
export type EtcdErrorCode =
  | "unavailable"
  | "indeterminate"
  | "bad_response"
  | "invalid_argument"
  | "not_found"
  | "failed_precondition"
  | "out_of_range"
  | "resource_exhausted"
  | "permission_denied"
  | "unauthenticated"
  | "internal"
  /** The TLS handshake with etcd failed (certificate not trusted, client certificate refused). */
  | "tls";

/** A failed etcd call: what was asked, and why it failed. */
export class EtcdError extends Error {
  /**
   * @param code the kind of failure (see {@link Etcd}).
   * @param message names the call first, the cause after a colon.
   */
  constructor(
    readonly code: EtcdErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "EtcdError";
  }
}

/**
 * The key that is the exclusive upper end of every key starting with `prefix` (etcd's `range_end`
 * for a prefix): the prefix with its last byte incremented, bytes 0xff dropped first. An empty
 * prefix, or one of only 0xff bytes, means "every key": the single byte 0.
 */
export function prefixRangeEnd(prefix: Uint8Array): Uint8Array {
  for (let i = prefix.length - 1; i >= 0; i--) {
    if (prefix[i] < 0xff) {
      const end = prefix.slice(0, i + 1);
      end[i]++;
      return end;
    }
  }
  return new Uint8Array([0]);
}
