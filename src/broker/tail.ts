/**
 * Readers of a partition's tail, shared (issue #22; for clients: the fetch route of
 * docs/http-api.md, "Many readers of one partition"): when many
 * long-polls (TCP fetches, HTTP `wait_ms`, Server-Sent Event streams) wait on one partition, each
 * new record used to wake every one of them at once, and each then read the same stored bytes on
 * its own. Here:
 *
 * - **one subscription per partition**: the waiters of a partition share one listener on its log
 *   instead of one each;
 * - **wake-ups coalesced**: on a partition with {@link coalesceWaitersMin} or more readers (those
 *   waiting now, or those its last wake-up answered, who are on their way back), a move of the
 *   high watermark wakes its waiters {@link coalesceDelayMs} of those readers later (at most
 *   {@link coalesceDelayMsMax} ms), so the records of every fsync in that span reach each reader
 *   in one answer or one write rather than one per fsync. Counting the readers on their way back
 *   matters: the first few to come back after a wake-up would otherwise, being few, be woken at
 *   once and split the readers into cycles of their own. Fewer readers (the usual consumer) wake
 *   at once. A closed or fenced partition wakes every waiter at once;
 * - **readers at the tail held back with them**: on such a partition, a long-poll that comes back
 *   for the last few records ({@link PartitionTails.holdBack}) joins the next wake-up instead of
 *   being answered (and read for) at once, so the readers answered together come back to be
 *   answered together, one cycle per span, rather than drifting into cycles of their own;
 * - **one read per offset**: reads of the same partition, offset and limits that overlap in time
 *   share one storage read (the woken waiters of one partition usually stand at the same offset).
 *   The bytes of a read are never changed after it returns (`PartitionLog.read` hands out fresh
 *   bytes), so every reader may hold the same view.
 *
 * Acknowledgements are untouched: this is only the reading side, which serves records below the
 * high watermark, i.e. already durable.
 */
import { onAbort } from "../lib/abort.ts";
import type { Clock, Timer } from "../lib/clock.ts";
import type { PartitionLog, PartitionRead } from "../storage/partition.ts";

/** Fewest waiters on one partition for which wake-ups are coalesced; fewer wake at once. */
export const coalesceWaitersMin = 4;
/** Longest a wake-up is held back, in ms. */
export const coalesceDelayMsMax = 10;

/**
 * How long a move of the high watermark waits before waking `waiters` readers, in ms: 0 below
 * {@link coalesceWaitersMin}, else 0.1 ms per waiter up to {@link coalesceDelayMsMax} — several
 * times what waking and answering one costs (about 10 µs on a quiet core), so that a busy tail
 * spends a small part of its time waking readers.
 */
export function coalesceDelayMs(waiters: number): number {
  return waiters < coalesceWaitersMin ? 0 : Math.min(coalesceDelayMsMax, Math.ceil(waiters / 10));
}

interface Waiter {
  offset: number;
  finish(): void;
}

/** One in-flight read and how many callers were handed it. */
interface SharedRead {
  result: Promise<PartitionRead>;
  sharers: number;
}

/** The waiters and in-flight reads of one partition. */
interface Tail {
  waiters: Set<Waiter>;
  unsubscribe: (() => void) | null;
  /** The pending coalesced wake-up, if any. */
  wake: Timer | null;
  /**
   * Readers on their way back for the next wake-up: those the last one finished, or, when it
   * finished fewer, the count before it less an eighth (so it fades as readers leave).
   */
  lastWoken: number;
  /** In-flight reads by `offset:maxRecords:maxBytes`, with how many callers share each. */
  reads: Map<string, SharedRead>;
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
      tail = {
        waiters: new Set(),
        unsubscribe: null,
        wake: null,
        lastWoken: 0,
        reads: new Map(),
      };
      this.#tails.set(log, tail);
    }
    return tail;
  }

  /**
   * `log.read(request)`, sharing the read with any identical one in flight. A shared read's
   * `release` gives its window back once every sharer has called it (sharers join only while
   * the read is in flight, so their count is final when the first release can come).
   * @throws whatever `log.read` throws (every sharer gets the same error).
   */
  read(
    log: PartitionLog,
    request: { offset: number; maxRecords: number; maxBytes: number },
  ): Promise<PartitionRead> {
    const tail = this.#tail(log);
    const key = `${request.offset}:${request.maxRecords}:${request.maxBytes}`;
    const joined = tail.reads.get(key);
    if (joined !== undefined) {
      joined.sharers++;
      return joined.result;
    }
    const shared: SharedRead = {
      sharers: 1,
      result: log.read(request).then((read) => {
        const release = read.release;
        if (release !== undefined && shared.sharers > 1) {
          let left = shared.sharers;
          read.release = () => {
            if (--left === 0) release();
          };
        }
        return read;
      }),
    };
    tail.reads.set(key, shared);
    const done = () => {
      if (tail.reads.get(key) === shared) tail.reads.delete(key);
    };
    shared.result.then(done, done);
    return shared.result;
  }

  /**
   * Resolves when the high watermark passes `offset` (possibly up to {@link coalesceDelayMs}
   * later), after `waitMs`, on abort, or when the partition closes or is fenced. Never rejects.
   */
  wait(log: PartitionLog, offset: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    return this.#add(log, this.#tail(log), offset, waitMs, signal);
  }

  /** Adds a waiter at `offset`; `waitMs` null: no timer of its own (a wake-up is due). */
  #add(
    log: PartitionLog,
    tail: Tail,
    offset: number,
    waitMs: number | null,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) {
        resolve();
        return;
      }
      let unsubscribeAbort: (() => void) | null = null;
      const waiter: Waiter = {
        offset,
        finish: () => {
          if (!tail.waiters.delete(waiter)) return;
          timer?.cancel();
          // Removed, not left for the signal's abort: a listener left on a combined signal
          // (`AbortSignal.any`, as the access view passes) keeps that signal alive for good.
          unsubscribeAbort?.();
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
      const timer = waitMs === null ? null : this.#clock.setTimer(waitMs, waiter.finish);
      // One listener per signal (lib/abort.ts): a connection's long-polls share its signal.
      if (signal !== undefined) unsubscribeAbort = onAbort(signal, waiter.finish);
    });
  }

  /** Readers of a partition: those waiting now, or those its last wake-up answered if more. */
  #readers(tail: Tail): number {
    return Math.max(tail.waiters.size, tail.lastWoken);
  }

  /**
   * True while the partition of `log` has {@link coalesceWaitersMin} or more readers (waiting
   * now, or answered by its last wake-up): a busy tail, whose wake-ups are coalesced.
   */
  busy(log: PartitionLog): boolean {
    const tail = this.#tails.get(log);
    return tail !== undefined && this.#readers(tail) >= coalesceWaitersMin;
  }

  /**
   * Holds back a long-poll that comes back for the last records of a {@link busy} partition
   * (module comment): resolves at the partition's next wake-up of its waiters (one is scheduled
   * {@link coalesceDelayMs} of its readers from now if none is pending: at most
   * {@link coalesceDelayMsMax} ms), on abort, or when the partition closes or is fenced,
   * whichever comes first. Never rejects.
   */
  holdBack(log: PartitionLog, signal?: AbortSignal): Promise<void> {
    const tail = this.#tail(log);
    // Offset −1: every wake-up finds the high watermark past it.
    const held = this.#add(log, tail, -1, null, signal);
    if (tail.wake === null) this.#schedule(log, tail);
    return held;
  }

  #moved(log: PartitionLog, tail: Tail): void {
    if (log.closed || log.fenced) {
      for (const w of [...tail.waiters]) w.finish();
      return;
    }
    if (tail.wake === null) this.#schedule(log, tail);
  }

  /** Wakes the waiters {@link coalesceDelayMs} of the partition's readers from now. */
  #schedule(log: PartitionLog, tail: Tail): void {
    const delay = coalesceDelayMs(this.#readers(tail));
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
    let woken = 0;
    for (const w of [...tail.waiters])
      if (done || highWatermark > w.offset) {
        w.finish();
        woken++;
      }
    if (woken === 0) return;
    // Readers on their way back: those just woken, or most of the last count (a wake-up that
    // caught only a few early comers must not make the others look gone).
    tail.lastWoken = Math.max(woken, tail.lastWoken - Math.ceil(tail.lastWoken / 8));
  }
}
