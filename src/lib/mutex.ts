/**
 * An async mutex: {@link Mutex.run} runs its function once every earlier holder has finished,
 * in the order the calls were made (FIFO). A holder that throws releases the lock too.
 */
export class Mutex {
  #tail: Promise<void> = Promise.resolve();
  #held = false;
  #pending = 0;

  /** True while a holder runs. */
  get held(): boolean {
    return this.#held;
  }

  /** Calls of {@link run} not finished: the holder and those waiting behind it. */
  get pending(): number {
    return this.#pending;
  }

  /** Runs `fn` alone; resolves or rejects with its result. Not reentrant: calling run inside fn deadlocks. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const previous = this.#tail;
    let release!: () => void;
    this.#tail = new Promise<void>((resolve) => (release = resolve));
    this.#pending++;
    return previous.then(async () => {
      this.#held = true;
      try {
        return await fn();
      } finally {
        this.#held = false;
        this.#pending--;
        release();
      }
    });
  }
}
