/**
 * A guard against deaf watches (docs/cluster.md "A watch that goes deaf"): {@link guardWatches}
 * wraps an {@link Etcd} so that every watch it opens is checked, every `checkMs`, against what
 * etcd holds, and reopened when it missed changes. A watch's stream can stay open, its member
 * answering every probe, while no event comes through any more (attack15 F6: after an etcd
 * member was stopped and resumed, the controller key's deletion reached no broker).
 *
 * The check, for a watch that has delivered every change up to revision D and after which the
 * watched keys number N (counted from the events: a put of version 1 adds a key, a delete
 * removes one): one `changedSince` read (keys only) of the watched keys written after D, and
 * their count, now (revision H). A healthy watch that is up to date finds none written after D
 * and N keys; a put it missed shows as a key written after D, a deletion it missed as fewer keys
 * than N (a key created and deleted since D counts in neither, and changes nothing a reader of
 * the keys would see). What it finds may still be on its way to the watch: the guard waits
 * `graceMs`, then reads again at revision H (unless the watch has delivered H by then). Found
 * twice, the watch is deaf: `etcd.watch_deaf` (warn) is logged and the watch reopened from the
 * revision after D (on another member when the client has one), so etcd itself sends the missed
 * changes, once and in revision order, to the same handlers (or, when D+1 is compacted, the
 * caller is told `onCompacted` and lists again). Events at or below D are never delivered twice.
 *
 * Cost: one range request per watch per `checkMs` (etcd reads every key of the range; the
 * answer at rest is a header and a count), a second one only when changes were in flight at
 * the check.
 *
 * Layer rule: time through {@link Clock}; no `node:*`.
 */
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import {
  type Etcd,
  type EtcdChanges,
  EtcdError,
  type EtcdEvent,
  type EtcdWatch,
  type EtcdWatchHandlers,
} from "./etcd.ts";

/** Default period of the check, in ms: the controller's resync interval. */
export const watchGuardCheckMsDefault = 10_000;
/** Default wait for changes found in flight before a watch is called deaf, in ms. */
export const watchGuardGraceMsDefault = 1000;

/** Options of {@link guardWatches}. */
export interface WatchGuardOptions {
  clock: Clock;
  logger: Logger;
  /** How often each watch is checked, in ms (default {@link watchGuardCheckMsDefault}). */
  checkMs?: number;
  /** How long changes found may take to arrive, in ms (default {@link watchGuardGraceMsDefault}). */
  graceMs?: number;
  /** Called once per deaf watch found (a metric). */
  onDeaf?(): void;
}

/**
 * `etcd` with every watch guarded (see the module comment); every other call goes to `etcd`
 * unchanged. A deaf watch is found within `checkMs` + `graceMs` of the first change it missed
 * (plus two reads' time).
 */
export function guardWatches(etcd: Etcd, options: WatchGuardOptions): Etcd {
  return {
    get: (key) => etcd.get(key),
    list: (prefix) => etcd.list(prefix),
    put: (key, value, o) => etcd.put(key, value, o),
    delete: (key, o) => etcd.delete(key, o),
    txn: (request) => etcd.txn(request),
    leaseGrant: (ttl) => etcd.leaseGrant(ttl),
    leaseKeepAlive: (id) => etcd.leaseKeepAlive(id),
    leaseRevoke: (id) => etcd.leaseRevoke(id),
    changedSince: (request) => etcd.changedSince(request),
    status: () => etcd.status(),
    close: () => etcd.close(),
    watch: (request, handlers) => guardedWatch(etcd, options, request, handlers),
  };
}

function guardedWatch(
  etcd: Etcd,
  options: WatchGuardOptions,
  request: { key: string; prefix?: boolean; startRevision: number },
  handlers: EtcdWatchHandlers,
): EtcdWatch {
  const { clock, logger } = options;
  const checkMs = options.checkMs ?? watchGuardCheckMsDefault;
  const graceMs = options.graceMs ?? watchGuardGraceMsDefault;
  const range = { key: request.key, prefix: request.prefix };
  /** Every change up to this revision has been handed to `handlers`. */
  let delivered = request.startRevision - 1;
  /** Keys watched after `delivered`; null until first counted. */
  let count: number | null = null;
  /** While the first count is read: what the events delivered meanwhile changed it by. */
  let uncounted = 0;
  let stopped = false;
  /** Bumped at each restart: events of an older inner watch are dropped. */
  let generation = 0;
  let timer: { cancel(): void } | null = null;

  const open = (from: number): EtcdWatch => {
    const mine = ++generation;
    return etcd.watch(
      { ...request, startRevision: from },
      {
        onEvents: (events) => {
          if (stopped || mine !== generation) return;
          const fresh = events.filter((e) => e.kv.modRevision > delivered);
          if (fresh.length === 0) return;
          for (const e of fresh)
            if (count !== null) count += countDelta(e);
            else uncounted += countDelta(e);
          delivered = fresh[fresh.length - 1].kv.modRevision;
          handlers.onEvents(fresh);
        },
        onCompacted: (revision) => {
          if (stopped || mine !== generation) return;
          // The watch has ended; its caller lists and watches again (a new guarded watch).
          stop();
          handlers.onCompacted?.(revision);
        },
      },
    );
  };

  const stop = () => {
    stopped = true;
    timer?.cancel();
    timer = null;
  };

  let inner = open(request.startRevision);

  const check = async (): Promise<void> => {
    if (count === null) {
      const d = delivered;
      uncounted = 0;
      let r: EtcdChanges;
      try {
        // The count at d, plus the events delivered while it is read (all after d): exact
        // however busy the watch is.
        r = await etcd.changedSince({ ...range, after: d, atRevision: d });
      } catch (err) {
        if (!(err instanceof EtcdError) || err.code !== "out_of_range") throw err;
        // Revision d is compacted (the first count failed until then): count now, if nothing
        // was written since d; a deletion since d not delivered yet is then not seen, once.
        const now = await etcd.changedSince({ ...range, after: d });
        if (!stopped && d === delivered && now.changed.length === 0) count = now.count;
        return;
      }
      if (!stopped) count = r.count + uncounted;
      return;
    }
    const d0 = delivered;
    const n0 = count;
    const first = await etcd.changedSince({ ...range, after: d0 });
    if (stopped) return;
    // Up to date. (Events delivered meanwhile make the answer moot: the grace decides.)
    if (d0 === delivered && first.changed.length === 0 && first.count === n0) return;
    const at = first.revision;
    await new Promise<void>((resolve) => clock.setTimer(graceMs, resolve));
    if (stopped || delivered >= at) return;
    const d = delivered;
    const n = count;
    const r = await etcd.changedSince({ ...range, after: d, atRevision: at });
    if (stopped || d !== delivered || n === null) return;
    if (r.changed.length === 0 && r.count === n) return;
    const created = r.changed.filter((kv) => kv.createRevision > d).length;
    logger.log("warn", "etcd.watch_deaf", {
      key: request.key,
      prefix: request.prefix === true,
      delivered_revision: d,
      revision: at,
      behind_revisions: at - d,
      missed_puts: r.changed.length,
      missed_deletes: Math.max(0, n + created - r.count),
      action: `reopening the watch from revision ${d + 1}`,
    });
    options.onDeaf?.();
    if (inner.reopen !== undefined) inner.reopen(`it missed changes up to revision ${at}`);
    else {
      const old = inner;
      inner = open(d + 1);
      void old.cancel().catch(() => {});
    }
  };

  const schedule = (delayMs: number) => {
    if (stopped || checkMs <= 0) return;
    timer = clock.setTimer(delayMs, () => {
      timer = null;
      void check()
        .catch((err) => {
          // etcd unreachable or the revision compacted: the next check tries again.
          logger.log("debug", "etcd.watch_check_failed", {
            key: request.key,
            error: errorMessage(err),
          });
        })
        .finally(() => schedule(checkMs));
    });
  };
  // The first check only counts the keys: soon, while the start revision is surely not compacted.
  schedule(0);

  return {
    cancel: async () => {
      stop();
      await inner.cancel();
    },
    reopen: (reason) => inner.reopen?.(reason),
  };
}

/** How an event changes the number of keys watched: +1 for a new key, -1 for a deletion. */
function countDelta(e: EtcdEvent): number {
  if (e.type === "delete") return -1;
  return e.kv.version === 1 ? 1 : 0;
}
