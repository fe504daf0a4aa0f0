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
  /**
   * Runs `fn` once, at most `maxMs` milliseconds from now, leaving the event loop free to block in
   * its poll for I/O meanwhile (Node, Deno, Bun: a timer, at least 1 ms in Node); the caller
   * cancels it once the I/O it waits for came. Group commit uses it to wait for the producers the
   * last fsync answered (docs/storage.md "Writes and durability", "When the next fsync starts").
   */
  waitForIo(maxMs: number, fn: () => void): Timer;
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

  /**
   * As {@link ManualClock.afterIo}: this clock's time moves only when told, and no I/O of its own
   * would end the wait, so the wait runs out at once (after the I/O events of a scripted loop).
   */
  waitForIo(_maxMs: number, fn: () => void): Timer {
    let live = true;
    this.afterIo(() => {
      if (!live) return;
      live = false;
      fn();
    });
    return { cancel: () => void (live = false) };
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
