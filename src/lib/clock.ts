/**
 * Time as an interface, so storage and broker code never read the wall clock or start timers
 * directly: tests drive a {@link ManualClock}, production uses the runtime's clock.
 */

/** A cancellable timer returned by {@link Clock.setTimer}. */
export interface Timer {
  /** Cancels the timer; calling it after it fired, or twice, does nothing. */
  cancel(): void;
}

/** Wall-clock time and timers. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  nowMs(): number;
  /** Runs `fn` once after `delayMs` milliseconds (at least 0). */
  setTimer(delayMs: number, fn: () => void): Timer;
  /**
   * Runs `fn` once, soon: after the I/O events the host has already received are handled (Node,
   * Deno, Bun: `setImmediate`), so work started by each of them is done first. Group commit uses it
   * to start the write loop, and then an fsync, only after every request that arrived together
   * was queued, so they share one write and one fsync.
   */
  afterIo(fn: () => void): void;
}

/**
 * A clock that only moves when told to. Timers fire, in due order, inside {@link ManualClock.advance}.
 */
export class ManualClock implements Clock {
  #now: number;
  #timers: { at: number; seq: number; fn: () => void; live: boolean }[] = [];
  #seq = 0;

  /** @param startMs the initial time in ms since the epoch. */
  constructor(startMs = 1_700_000_000_000) {
    this.#now = startMs;
  }

  nowMs(): number {
    return this.#now;
  }

  setTimer(delayMs: number, fn: () => void): Timer {
    const timer = { at: this.#now + Math.max(0, delayMs), seq: this.#seq++, fn, live: true };
    this.#timers.push(timer);
    return { cancel: () => void (timer.live = false) };
  }

  /** Runs `fn` in a microtask: a manual clock has no I/O of its own to let go first. */
  afterIo(fn: () => void): void {
    queueMicrotask(fn);
  }

  /** Moves time forward by `ms` and fires every timer that falls due, oldest first. */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (;;) {
      const due = this.#timers
        .filter((t) => t.live && t.at <= target)
        .sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      due.live = false;
      this.#now = Math.max(this.#now, due.at);
      due.fn();
    }
    this.#timers = this.#timers.filter((t) => t.live);
    this.#now = target;
  }
}
