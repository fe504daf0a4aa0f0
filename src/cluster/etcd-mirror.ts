/**
 * A broker's local copy of every key under one prefix of etcd, kept fresh by one watch
 * (docs/cluster.md "Schema registry and API keys in etcd"). The cluster's schema registry and API keys
 * are read from such a copy, so reads and produce-time checks never wait for etcd; writes go to
 * etcd as compare-and-set transactions (`cluster-registry.ts`, `cluster-keys.ts`) and their
 * outcome is taken into the copy at once ({@link EtcdMirror.absorb}), before the watch brings it.
 *
 * - Start: one linearizable `list` of the prefix, then a watch from the revision after it, so
 *   every later change is seen exactly once (`Etcd.watch`).
 * - A change is taken only if it is newer than what the copy holds for its key (its
 *   `mod_revision`, or the revision of the deletion the copy last saw), so a write absorbed from
 *   a transaction's answer is never undone by the watch delivering an older event late.
 * - A compacted watch start (`onCompacted`) lists the prefix again and watches from there,
 *   retrying with backoff (100 ms doubling to 5 s) while etcd cannot be reached.
 *
 * Layer rule: time through {@link Clock}; no `node:*`.
 */
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { Etcd, EtcdEvent, EtcdKeyValue, EtcdWatch } from "./etcd.ts";

/** Options of {@link EtcdMirror.start}. */
export interface EtcdMirrorOptions {
  etcd: Etcd;
  /** The prefix copied, e.g. `/es-broker/registry/`. */
  prefix: string;
  clock: Clock;
  logger: Logger;
  /** Named in logs (`cluster.mirror_*` events): what the copy is of, e.g. "registry". */
  name: string;
  /**
   * Called after the copy changed (watch, absorb, a list after a compaction; not the first list),
   * with the keys that changed. Runs
   * synchronously; an exception is logged, never thrown back into the watch.
   */
  onChange(changed: ReadonlySet<string>): void;
}

/** See the module comment. */
export class EtcdMirror {
  readonly #o: EtcdMirrorOptions;
  readonly #kvs = new Map<string, EtcdKeyValue>();
  /** Deleted keys and the revision of their deletion (older puts of them are ignored). */
  readonly #deleted = new Map<string, number>();
  #watch: EtcdWatch | null = null;
  /** Every change up to this revision (the list, or the last watch event) is in the copy. */
  #revision = 0;
  #closed = false;
  #reloading = false;

  private constructor(options: EtcdMirrorOptions) {
    this.#o = options;
  }

  /**
   * Lists the prefix and starts the watch.
   * @throws EtcdError if the list fails (the caller retries or refuses to start).
   */
  static async start(options: EtcdMirrorOptions): Promise<EtcdMirror> {
    const mirror = new EtcdMirror(options);
    await mirror.#load(false);
    return mirror;
  }

  /** The revision the watch has delivered up to (every change at or below it is in the copy). */
  get revision(): number {
    return this.#revision;
  }

  /** The key's copy, or undefined if it does not exist (as far as the copy knows). */
  get(key: string): EtcdKeyValue | undefined {
    return this.#kvs.get(key);
  }

  /** Every key of the copy starting with `prefix` (the whole copy by default), in no set order. */
  *values(prefix = ""): IterableIterator<EtcdKeyValue> {
    for (const [key, kv] of this.#kvs) if (key.startsWith(prefix)) yield kv;
  }

  /**
   * Takes a key as this broker read or wrote it (a transaction's answer, a `get`): kept only if
   * newer than the copy's. Calls `onChange` when it changed the copy. Returns whether it did.
   */
  absorb(kv: EtcdKeyValue): boolean {
    const changed = this.#put(kv);
    if (changed) this.#notify(new Set([kv.key]));
    return changed;
  }

  /** Takes a deletion at `revision` made by this broker; like {@link absorb}. */
  absorbDelete(key: string, revision: number): boolean {
    const changed = this.#delete(key, revision);
    if (changed) this.#notify(new Set([key]));
    return changed;
  }

  /** Stops the watch. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#watch?.cancel();
    this.#watch = null;
  }

  #put(kv: EtcdKeyValue): boolean {
    const held = this.#kvs.get(kv.key);
    if (held !== undefined && held.modRevision >= kv.modRevision) return false;
    const deletedAt = this.#deleted.get(kv.key);
    if (deletedAt !== undefined) {
      if (deletedAt >= kv.modRevision) return false;
      this.#deleted.delete(kv.key);
    }
    this.#kvs.set(kv.key, kv);
    return true;
  }

  #delete(key: string, revision: number): boolean {
    const held = this.#kvs.get(key);
    if (held !== undefined && held.modRevision > revision) return false;
    const deletedAt = this.#deleted.get(key) ?? 0;
    if (deletedAt >= revision) return false;
    this.#deleted.set(key, revision);
    return this.#kvs.delete(key);
  }

  #notify(changed: ReadonlySet<string>): void {
    if (changed.size === 0) return;
    try {
      this.#o.onChange(changed);
    } catch (err) {
      this.#o.logger.log("error", "cluster.mirror_apply_failed", {
        mirror: this.#o.name,
        error: errorMessage(err),
      });
    }
  }

  #onEvents(events: EtcdEvent[]): void {
    const changed = new Set<string>();
    for (const e of events) {
      const took = e.type === "put" ? this.#put(e.kv) : this.#delete(e.kv.key, e.kv.modRevision);
      if (took) changed.add(e.kv.key);
      this.#revision = Math.max(this.#revision, e.kv.modRevision);
    }
    // Deletions the watch has passed can no longer be undone by an older event.
    for (const [key, at] of this.#deleted) if (at <= this.#revision) this.#deleted.delete(key);
    this.#notify(changed);
  }

  /** Lists the prefix and watches from there; `notify`: tell `onChange` (not on the first load: nobody reads the copy yet). */
  async #load(notify: boolean): Promise<void> {
    const { etcd, prefix } = this.#o;
    const { kvs, revision } = await etcd.list(prefix);
    if (this.#closed) return;
    const changed = new Set<string>(this.#kvs.keys());
    const listed = new Set(kvs.map((kv) => kv.key));
    // Keys gone from the list were deleted at or before its revision.
    for (const key of [...this.#kvs.keys()]) if (!listed.has(key)) this.#delete(key, revision);
    for (const kv of kvs) if (this.#put(kv)) changed.add(kv.key);
    this.#revision = Math.max(this.#revision, revision);
    await this.#watch?.cancel();
    this.#watch = etcd.watch(
      { key: prefix, prefix: true, startRevision: revision + 1 },
      {
        onEvents: (events) => this.#onEvents(events),
        onCompacted: () => void this.#reload(),
      },
    );
    if (notify) this.#notify(changed);
  }

  /** Lists again after a compaction, retrying with backoff until it works or the copy is closed. */
  async #reload(): Promise<void> {
    if (this.#reloading) return;
    this.#reloading = true;
    let waitMs = 100;
    try {
      while (!this.#closed) {
        try {
          await this.#load(true);
          return;
        } catch (err) {
          this.#o.logger.log("warn", "cluster.mirror_reload_failed", {
            mirror: this.#o.name,
            error: errorMessage(err),
            retry_ms: waitMs,
          });
          await new Promise<void>((resolve) => this.#o.clock.setTimer(waitMs, resolve));
          waitMs = Math.min(waitMs * 2, 5000);
        }
      }
    } finally {
      this.#reloading = false;
    }
  }
}
