/** The real clock: wall time and timers of the host runtime. */
import type { Clock, Timer } from "../lib/clock.ts";

/**
 * {@link Clock} over `Date.now()`, `setTimeout` and `setImmediate`. Timers of `setTimer` do not
 * keep the process alive on their own; a `waitForIo` wait does (a write waits on it).
 */
export const systemClock: Clock = {
  nowMs: () => Date.now(),
  setTimer(delayMs: number, fn: () => void): Timer {
    const handle = setTimeout(fn, Math.max(0, delayMs));
    (handle as { unref?: () => void }).unref?.();
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
