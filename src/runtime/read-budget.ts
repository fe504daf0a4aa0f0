/**
 * How much file reading may block the event loop (docs/runtimes.md "File reads: synchronous
 * within a budget per turn"). A synchronous read of page-cached bytes is the cheapest read there
 * is, so small reads stay on the calling thread; but it blocks every connection while it runs,
 * and a read that misses the page cache blocks them for the disk's latency. So each event-loop
 * turn may read at most a budget of bytes synchronously; a read that would pass it waits for a
 * later turn (other connections' I/O runs in between), and a read larger than the whole budget
 * goes to the runtime's thread pool, at most a few at once so that fsyncs and other pool work
 * still find a free thread.
 */

/**
 * Counts the bytes read synchronously in the current event-loop turn, and queues the reads that
 * would pass the budget for later turns, in arrival order.
 *
 * `afterTurn(fn)` must call `fn` once the current turn's I/O callbacks have run (`setImmediate`
 * on the real runtimes; a fake in tests). There the count resets, and the reads waiting are let
 * through while the new turn's budget lasts (at least the first, whatever its size); a read
 * asked for while others wait queues behind them, so none waits forever.
 */
export class TurnReadBudget {
  #used = 0;
  #endScheduled = false;
  readonly #waiting: { bytes: number; go: () => void }[] = [];
  readonly #endTurn = (): void => {
    this.#endScheduled = false;
    this.#used = 0;
    for (;;) {
      const next = this.#waiting[0];
      if (next === undefined) break;
      if (this.#used > 0 && next.bytes > this.bytesPerTurn - this.#used) break;
      this.#waiting.shift();
      this.#used += next.bytes;
      next.go();
    }
    if (this.#used > 0 || this.#waiting.length > 0) this.#scheduleEnd();
  };

  /**
   * @param bytesPerTurn the most bytes read synchronously in one turn (> 0)
   * @param afterTurn schedules a function after the current turn (see the class comment)
   */
  constructor(
    readonly bytesPerTurn: number,
    private readonly afterTurn: (fn: () => void) => void,
  ) {}

  /** Bytes counted in the current turn so far. */
  get usedBytes(): number {
    return this.#used;
  }

  /** Reads waiting for a later turn. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /**
   * Counts a read of `bytes` against the budget: null if it may run synchronously now (nothing
   * waits and the turn has room), else a promise that resolves in a later turn, once the bytes
   * are counted there: read synchronously then.
   */
  reserve(bytes: number): Promise<void> | null {
    if (this.#waiting.length === 0 && bytes <= this.bytesPerTurn - this.#used) {
      if (bytes > 0) {
        this.#used += bytes;
        this.#scheduleEnd();
      }
      return null;
    }
    const turn = new Promise<void>((go) => this.#waiting.push({ bytes, go }));
    this.#scheduleEnd();
    return turn;
  }

  #scheduleEnd(): void {
    if (this.#endScheduled) return;
    this.#endScheduled = true;
    this.afterTurn(this.#endTurn);
  }
}

/**
 * Runs at most `maxInFlight` asynchronous jobs at once; the rest wait in arrival order. Each job's
 * outcome (value or error) is its caller's, unchanged.
 */
export class InFlightLimit {
  #inFlight = 0;
  readonly #waiting: (() => void)[] = [];

  /** @param maxInFlight the most jobs running at once (≥ 1) */
  constructor(readonly maxInFlight: number) {}

  /** Jobs running now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Jobs waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Runs `job` once a slot is free; resolves or rejects as it does. */
  async run<T>(job: () => Promise<T>): Promise<T> {
    if (this.#inFlight >= this.maxInFlight)
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else this.#inFlight++;
    try {
      return await job();
    } finally {
      // Hand the slot straight to the next waiter (the count stays), or free it.
      const next = this.#waiting.shift();
      if (next !== undefined) next();
      else this.#inFlight--;
    }
  }
}
