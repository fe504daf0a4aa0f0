/**
 * An in-memory etcd for unit tests of the cluster's etcd users (`src/cluster/etcd.ts`'s `Etcd`):
 * one store revision counted per write, keys with create/mod revisions and versions,
 * transactions, prefix watches delivering whole revisions in order (asynchronously, on a
 * macrotask, as the network would), and faults:
 * - `down`: every call rejects with `unavailable` (nothing applied);
 * - `indeterminateNext(n, applied)`: the next `n` writes reject with `indeterminate`, applied
 *   first (the answer was lost) or not (the request was);
 * - `holdWatches()` / `releaseWatches()`: events queue up instead of being delivered (a slow
 *   watch), so tests can interleave writes and deliveries;
 * - `compact()`: every watch started below the current revision is told `onCompacted`;
 * - `deafenWatches(which?)`: the watches open now (those on keys `which` accepts) drop every
 *   later event silently, as a stream etcd stopped feeding does (attack15 F6); watches opened
 *   after it hear normally. `changedSince` still answers (the guard's check, `watch-guard.ts`);
 * - `dropNextRevisions(n)`: every watch silently skips the events of the next `n` revisions
 *   written and delivers later ones, as etcd 3.4's lost-event bugs do (etcd-io/etcd#18089).
 *
 * Leases are granted with unique ids and never expire by time; `leaseRevoke` ends one (etcd's own
 * expiry or revocation, e.g. across an etcd leader change) and deletes its keys in one revision;
 * a renewal of a revoked lease answers 0 and a write on it is refused (`not_found`, "requested
 * lease not found"), as etcd does.
 */
import {
  type Etcd,
  type EtcdChanges,
  type EtcdCompare,
  EtcdError,
  type EtcdEvent,
  type EtcdKeyValue,
  type EtcdOp,
  type EtcdStatus,
  type EtcdTxnResult,
  type EtcdWatch,
  type EtcdWatchHandlers,
} from "../../src/cluster/etcd.ts";

interface Watcher {
  key: string;
  prefix: boolean;
  handlers: EtcdWatchHandlers;
  next: number;
  live: boolean;
  /** Drops every event from now on (see `deafenWatches`). */
  deaf: boolean;
}

export class FakeEtcd implements Etcd {
  readonly kvs = new Map<string, EtcdKeyValue>();
  revision = 1;
  down = false;
  #indeterminate = 0;
  #indeterminateApplied = true;
  #held = false;
  /** Every event ever, in order (a real etcd's history, uncompacted). */
  readonly #history: EtcdEvent[] = [];
  #compactedAt = 0;
  readonly #watchers = new Set<Watcher>();
  /** Revisions whose events no watch delivers (see `dropNextRevisions`). */
  readonly #dropped = new Set<number>();
  #leasesGranted = 0;
  readonly #revokedLeases = new Set<string>();
  /** Writes made (puts, deletes, successful txns), for tests counting round trips. */
  writes = 0;
  txns = 0;
  /** `changedSince` reads answered (the watch guard's cost). */
  changesReads = 0;

  indeterminateNext(n = 1, applied = true): void {
    this.#indeterminate = n;
    this.#indeterminateApplied = applied;
  }

  #lostBefore(what: string): void {
    if (this.#indeterminate > 0 && !this.#indeterminateApplied) {
      this.#indeterminate--;
      throw new EtcdError("indeterminate", `${what}: the connection broke after sending`);
    }
  }

  holdWatches(): void {
    this.#held = true;
  }

  releaseWatches(): void {
    this.#held = false;
    this.#deliverSoon();
  }

  /**
   * Makes the open watches on keys `which` accepts (all by default) deaf: their events are
   * dropped from now on, silently. Returns how many it deafened.
   */
  deafenWatches(which: (key: string) => boolean = () => true): number {
    let n = 0;
    for (const w of this.#watchers)
      if (w.live && !w.deaf && which(w.key)) {
        w.deaf = true;
        n++;
      }
    return n;
  }

  /** Makes every watch skip the events of the next `n` revisions written (see the module comment). */
  dropNextRevisions(n = 1): void {
    for (let i = 1; i <= n; i++) this.#dropped.add(this.revision + i);
  }

  /** Open watches, deaf or not (a test checks a deaf one was replaced). */
  get watchCount(): number {
    return this.#watchers.size;
  }

  /** Compacts the history up to now: watches that still need older events are told. */
  compact(): void {
    this.#compactedAt = this.revision;
    for (const w of this.#watchers)
      if (w.live && w.next <= this.#compactedAt) {
        w.live = false;
        this.#watchers.delete(w);
        w.handlers.onCompacted?.(this.#compactedAt);
      }
  }

  #check(what: string): void {
    if (this.down) throw new EtcdError("unavailable", `${what}: no endpoint answered`);
  }

  #afterWrite(what: string): void {
    this.#deliverSoon();
    if (this.#indeterminate > 0) {
      this.#indeterminate--;
      throw new EtcdError("indeterminate", `${what}: the connection broke after sending`);
    }
  }

  async get(key: string): Promise<EtcdKeyValue | null> {
    await Promise.resolve();
    this.#check("get");
    return this.kvs.get(key) ?? null;
  }

  async list(prefix: string): Promise<{ kvs: EtcdKeyValue[]; revision: number }> {
    await Promise.resolve();
    this.#check("list");
    const kvs = [...this.kvs.values()]
      .filter((kv) => kv.key.startsWith(prefix))
      .sort((a, b) => (a.key < b.key ? -1 : 1));
    return { kvs, revision: this.revision };
  }

  async put(key: string, value: string, options: { lease?: string } = {}): Promise<number> {
    await Promise.resolve();
    this.#check("put");
    this.#checkLease(options.lease);
    this.#lostBefore("put");
    this.revision++;
    this.#put(key, value, options.lease ?? "0");
    this.writes++;
    this.#afterWrite("put");
    return this.revision;
  }

  async delete(key: string, options: { prefix?: boolean } = {}): Promise<number> {
    await Promise.resolve();
    this.#check("delete");
    const keys = [...this.kvs.keys()].filter((k) =>
      options.prefix ? k.startsWith(key) : k === key,
    );
    if (keys.length === 0) return 0;
    this.revision++;
    for (const k of keys) this.#delete(k);
    this.writes++;
    this.#afterWrite("delete");
    return keys.length;
  }

  async txn(request: {
    compare: EtcdCompare[];
    success: EtcdOp[];
    failure?: EtcdOp[];
  }): Promise<EtcdTxnResult> {
    await Promise.resolve();
    this.#check("txn");
    this.#lostBefore("txn");
    this.txns++;
    const succeeded = request.compare.every((c) => this.#holds(c));
    const ops = succeeded ? request.success : (request.failure ?? []);
    for (const op of ops) if ("put" in op) this.#checkLease(op.put.lease);
    const writes = ops.some((op) => !("get" in op));
    if (writes) this.revision++;
    const reads: EtcdKeyValue[][] = [];
    for (const op of ops) {
      if ("put" in op) this.#put(op.put.key, op.put.value, op.put.lease ?? "0");
      else if ("delete" in op) {
        for (const k of [...this.kvs.keys()])
          if (op.delete.prefix ? k.startsWith(op.delete.key) : k === op.delete.key) this.#delete(k);
      } else
        reads.push(
          [...this.kvs.values()].filter((kv) =>
            op.get.prefix ? kv.key.startsWith(op.get.key) : kv.key === op.get.key,
          ),
        );
    }
    if (writes) {
      this.writes++;
      this.#afterWrite("txn");
    }
    return { succeeded, revision: this.revision, reads };
  }

  #holds(c: EtcdCompare): boolean {
    const kv = this.kvs.get(c.key);
    if (c.target === "value") {
      const equal = kv !== undefined && kv.value === c.value;
      return c.result === "equal" ? equal : !equal;
    }
    const actual =
      kv === undefined
        ? 0
        : c.target === "version"
          ? kv.version
          : c.target === "create_revision"
            ? kv.createRevision
            : kv.modRevision;
    switch (c.result) {
      case "equal":
        return actual === c.number;
      case "not_equal":
        return actual !== c.number;
      case "greater":
        return actual > c.number;
      case "less":
        return actual < c.number;
    }
  }

  #put(key: string, value: string, lease: string): void {
    const old = this.kvs.get(key);
    const kv: EtcdKeyValue = {
      key,
      value,
      createRevision: old?.createRevision ?? this.revision,
      modRevision: this.revision,
      version: (old?.version ?? 0) + 1,
      lease,
    };
    this.kvs.set(key, kv);
    this.#history.push({ type: "put", kv });
  }

  #delete(key: string): void {
    if (!this.kvs.delete(key)) return;
    this.#history.push({
      type: "delete",
      kv: { key, value: "", createRevision: 0, modRevision: this.revision, version: 0, lease: "0" },
    });
  }

  #checkLease(lease: string | undefined): void {
    if (lease !== undefined && this.#revokedLeases.has(lease))
      throw new EtcdError("not_found", "put: etcdserver: requested lease not found");
  }

  async leaseGrant(ttlSeconds: number): Promise<{ id: string; ttlSeconds: number }> {
    await Promise.resolve();
    this.#check("lease grant");
    return { id: String(7_000_000 + ++this.#leasesGranted), ttlSeconds };
  }

  async leaseKeepAlive(id: string): Promise<number> {
    await Promise.resolve();
    this.#check("lease keepalive");
    return this.#revokedLeases.has(id) ? 0 : 6;
  }

  async leaseRevoke(id: string): Promise<void> {
    await Promise.resolve();
    this.#check("lease revoke");
    if (id === "0" || this.#revokedLeases.has(id)) return;
    this.#revokedLeases.add(id);
    const keys = [...this.kvs.values()].filter((kv) => kv.lease === id).map((kv) => kv.key);
    if (keys.length === 0) return;
    this.revision++;
    for (const k of keys) this.#delete(k);
    this.writes++;
    this.#deliverSoon();
  }

  watch(
    request: { key: string; prefix?: boolean; startRevision: number },
    handlers: EtcdWatchHandlers,
  ): EtcdWatch {
    const watcher: Watcher = {
      key: request.key,
      prefix: request.prefix === true,
      handlers,
      next: request.startRevision,
      live: true,
      deaf: false,
    };
    this.#watchers.add(watcher);
    this.#deliverSoon();
    return {
      cancel: async () => {
        watcher.live = false;
        this.#watchers.delete(watcher);
      },
    };
  }

  #deliverSoon(): void {
    setTimeout(() => this.#deliver(), 0);
  }

  #deliver(): void {
    if (this.#held) return;
    for (const w of [...this.#watchers]) {
      if (!w.live) continue;
      if (w.next <= this.#compactedAt) {
        w.live = false;
        this.#watchers.delete(w);
        w.handlers.onCompacted?.(this.#compactedAt);
        continue;
      }
      const events = this.#history.filter(
        (e) =>
          e.kv.modRevision >= w.next &&
          !this.#dropped.has(e.kv.modRevision) &&
          (w.prefix ? e.kv.key.startsWith(w.key) : e.kv.key === w.key),
      );
      w.next = this.revision + 1;
      if (events.length > 0 && !w.deaf) w.handlers.onEvents(events);
    }
  }

  async changedSince(request: {
    key: string;
    prefix?: boolean;
    after: number;
    atRevision?: number;
  }): Promise<EtcdChanges> {
    await Promise.resolve();
    this.#check("changedSince");
    this.changesReads++;
    const at = request.atRevision ?? this.revision;
    if (at < this.#compactedAt)
      throw new EtcdError("out_of_range", "range: mvcc: required revision has been compacted");
    const matches = (key: string) =>
      request.prefix ? key.startsWith(request.key) : key === request.key;
    // The keys as they were at `at`, replayed from the history.
    const state = new Map<string, EtcdKeyValue>();
    for (const e of this.#history) {
      if (e.kv.modRevision > at) break;
      if (!matches(e.kv.key)) continue;
      if (e.type === "put") state.set(e.kv.key, e.kv);
      else state.delete(e.kv.key);
    }
    const changed = [...state.values()]
      .filter((kv) => kv.modRevision > request.after)
      .sort((a, b) => (a.key < b.key ? -1 : 1))
      .map((kv) => ({ ...kv, value: "" }));
    return { count: state.size, changed, revision: at };
  }

  async status(): Promise<EtcdStatus> {
    this.#check("status");
    return {
      clusterId: "1",
      memberId: "1",
      leaderId: "1",
      version: "3.4-fake",
      revision: this.revision,
    };
  }

  async close(): Promise<void> {
    for (const w of this.#watchers) w.live = false;
    this.#watchers.clear();
  }
}

/**
 * A {@link FakeEtcd} that, once `silent` is set, never answers a read, a write, a lease renewal
 * or a revocation (a member without a quorum: attack15b F4); until then it is the fake etcd.
 */
export class SilentEtcd extends FakeEtcd {
  silent = false;
  #never<T>(answer: () => Promise<T>): Promise<T> {
    return this.silent ? new Promise<T>(() => {}) : answer();
  }
  override get(key: string): Promise<EtcdKeyValue | null> {
    return this.#never(() => super.get(key));
  }
  override put(key: string, value: string, options?: { lease?: string }): Promise<number> {
    return this.#never(() => super.put(key, value, options));
  }
  override leaseRevoke(id: string): Promise<void> {
    return this.#never(() => super.leaseRevoke(id));
  }
  override leaseKeepAlive(id: string): Promise<number> {
    return this.#never(() => super.leaseKeepAlive(id));
  }
}

/** Lets the fake etcd's watches (macrotasks) and the promise chains behind them run. */
export async function settle(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setTimeout(r, 0));
}

/**
 * Settles until `probe` holds, polling every 5 ms (at most ~2 s of real time).
 * @throws Error "timed out waiting for <what>".
 */
export async function until(what: string, probe: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}
