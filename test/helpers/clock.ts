/** The real clock for tests that run real sockets, kept in test code so a test needs no runtime module. */
import type { Clock, Timer } from "../../src/lib/clock.ts";

/** Wall time, `setTimeout` timers and `setImmediate` for `afterIo`, as `src/runtime/clock.ts`. */
export const realClock: Clock = {
  nowMs: () => Date.now(),
  setTimer(delayMs: number, fn: () => void): Timer {
    const handle = setTimeout(fn, Math.max(0, delayMs));
    return { cancel: () => clearTimeout(handle) };
  },
  afterIo(fn: () => void): void {
    setImmediate(fn);
  },
  waitForIo(maxMs: number, fn: () => void): Timer {
    const handle = setTimeout(fn, Math.max(0, maxMs));
    return { cancel: () => clearTimeout(handle) };
  },
};
