/**
 * Readers of a partition's tail, shared (issue #22; for clients: the fetch route of
 * docs/http-api.md, "Many readers of one partition"): when many
 * long-polls (TCP fetches, HTTP `wait_ms`, Server-Sent Event streams) wait on one partition, each
 * new record used to wake every one of them at once, and each then read the same stored bytes on
 * its own. Here:
 *
 * - **one subscription per partition**: the waiters of a partition share one listener on its log
 *   instead of one each;
 * - **wake-ups coalesced**: with {@link coalesceWaitersMin} or more waiters on a partition, a move
 *   of its high watermark wakes them after {@link coalesceDelayMs} (at most
 *   {@link coalesceDelayMsMax} ms), so the records of every fsync in that span reach each reader
 *   in one answer or one write rather than one per fsync. A single waiter (the usual consumer)
 *   wakes at once. A closed or fenced partition wakes every waiter at once;
 * - **readers at the tail held back with them**: on such a partition, a long-poll that finds a
 *   few records at the tail ({@link PartitionTails.holdBack}) waits for the next of those wake-ups
 *   (at most the same delay) instead of being answered at once, so a reader that comes back
 *   while records arrive joins the others' cycle rather than taking one answer per fsync;
 * - **one read per offset**: reads of the same partition, offset and limits that overlap in time
 *   share one storage read (the woken waiters of one partition usually stand at the same offset).
 *   The bytes of a read are never changed after it returns (`PartitionLog.read` hands out fresh
 *   bytes), so every reader may hold the same view.
 *
 * Acknowledgements are untouched: this is only the reading side, which serves records below the
 * high watermark, i.e. already durable.
 */
import type { Clock, Timer } from "../lib/clock.ts";
import type { PartitionLog, PartitionRead } from "../storage/partition.ts";

/** Fewest waiters on one partition for which wake-ups are coalesced; fewer wake at once. */
export const coalesceWaitersMin = 4;
/** Longest a wake-up is held back, in ms. */
export const coalesceDelayMsMax = 10;

/**
 * How long a move of the high watermark waits before waking `waiters` readers, in ms: 0 below
 * {@link coalesceWaitersMin}, else 0.1 ms per waiter up to {@link coalesceDelayMsMax} — roughly
 * what waking and answering them costs, so that a busy tail spends at most about half its time
 * waking readers.
 */
export function coalesceDelayMs(waiters: number): number {
  return waiters < coalesceWaitersMin ? 0 : Math.min(coalesceDelayMsMax, Math.ceil(waiters / 10));
}

interface Waiter {
  offset: number;
  finish(): void;
}

/** The waiters and in-flight reads of one partition. */
interface Tail {
  waiters: Set<Waiter>;
  unsubscribe: (() => void) | null;
  /** The pending coalesced wake-up, if any. */
  wake: Timer | null;
  /** In-flight reads by `offset:maxRecords:maxBytes`. */
  reads: Map<string, Promise<PartitionRead>>;
}

/** Shared tail reads and waits for every partition of a broker (module comment). */
export class PartitionTails {
  readonly #clock: Clock;
  readonly #tails = new WeakMap<PartitionLog, Tail>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  #tail(log: PartitionLog): Tail {
    let tail = this.#tails.get(log);
    if (tail === undefined) {
      tail = { waiters: new Set(), unsubscribe: null, wake: null, reads: new Map() };
      this.#tails.set(log, tail);
    }
    return tail;
  }

  /**
   * `log.read(request)`, sharing the read with any identical one in flight.
   * @throws whatever `log.read` throws (every sharer gets the same error).
   */
  read(
    log: PartitionLog,
    request: { offset: number; maxRecords: number; maxBytes: number },
  ): Promise<PartitionRead> {
    const tail = this.#tail(log);
    const key = `${request.offset}:${request.maxRecords}:${request.maxBytes}`;
    let read = tail.reads.get(key);
    if (read === undefined) {
      read = log.read(request);
      tail.reads.set(key, read);
      const done = () => {
        if (tail.reads.get(key) === read) tail.reads.delete(key);
      };
      read.then(done, done);
    }
    return read;
  }

  /**
   * Resolves when the high watermark passes `offset` (possibly up to {@link coalesceDelayMs}
   * later), after `waitMs`, on abort, or when the partition closes or is fenced. Never rejects.
   */
  wait(log: PartitionLog, offset: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const tail = this.#tail(log);
      const waiter: Waiter = {
        offset,
        finish: () => {
          if (!tail.waiters.delete(waiter)) return;
          timer.cancel();
          signal?.removeEventListener("abort", waiter.finish);
          if (tail.waiters.size === 0) {
            tail.unsubscribe?.();
            tail.unsubscribe = null;
            tail.wake?.cancel();
            tail.wake = null;
          }
          resolve();
        },
      };
      tail.waiters.add(waiter);
      tail.unsubscribe ??= log.subscribe(() => this.#moved(log, tail));
      const timer = this.#clock.setTimer(waitMs, waiter.finish);
      signal?.addEventListener("abort", waiter.finish);
    });
  }

  /**
   * True while {@link coalesceWaitersMin} or more readers wait on the partition of `log`: a busy
   * tail, whose wake-ups are coalesced.
   */
  busy(log: PartitionLog): boolean {
    return (this.#tails.get(log)?.waiters.size ?? 0) >= coalesceWaitersMin;
  }

  /**
   * Holds back a long-poll that found records at the tail of a {@link busy} partition (module
   * comment): resolves at the partition's next wake-up of its waiters, or after
   * {@link coalesceDelayMs} of the waiters now (at most {@link coalesceDelayMsMax} ms), on abort,
   * or when the partition closes or is fenced, whichever comes first. Never rejects.
   */
  holdBack(log: PartitionLog, signal?: AbortSignal): Promise<void> {
    const waiters = this.#tails.get(log)?.waiters.size ?? 0;
    // Offset −1: every wake-up finds the high watermark past it.
    return this.wait(log, -1, Math.max(1, coalesceDelayMs(waiters + 1)), signal);
  }

  #moved(log: PartitionLog, tail: Tail): void {
    if (log.closed || log.fenced) {
      for (const w of [...tail.waiters]) w.finish();
      return;
    }
    if (tail.wake !== null) return;
    const delay = coalesceDelayMs(tail.waiters.size);
    if (delay === 0) {
      this.#wakeReady(log, tail);
      return;
    }
    tail.wake = this.#clock.setTimer(delay, () => {
      tail.wake = null;
      this.#wakeReady(log, tail);
    });
  }

  #wakeReady(log: PartitionLog, tail: Tail): void {
    const highWatermark = log.highWatermark;
    const done = log.closed || log.fenced;
    for (const w of [...tail.waiters]) if (done || highWatermark > w.offset) w.finish();
  }
}
