/**
 * One `abort` listener per signal, however many waits share it. A connection's signal (TCP,
 * Kafka) or a Kafka fetch's is shared by every long-poll in flight on it; a listener of its own
 * per wait made Node print `MaxListenersExceededWarning` (not a JSON line: docs/operations.md
 * "Logs") from the 11th wait on, although each was removed when its wait ended. Here the first
 * wait on a signal adds the one listener and the last to leave removes it, so nothing stays on a
 * signal (a listener left on a combined signal, `AbortSignal.any`, keeps it alive for good).
 */

/** The callbacks waiting on one signal, and the listener that calls them. */
interface Waiters {
  readonly callbacks: Set<() => void>;
  readonly listener: () => void;
}

const waiting = new WeakMap<AbortSignal, Waiters>();

/**
 * Calls `callback` once when `signal` aborts, until the returned function is called (it may be
 * called any number of times, also from inside `callback`). As `addEventListener`: nothing is
 * called for a signal already aborted (callers check `signal.aborted` first). The same function
 * registered twice on one signal counts once.
 */
export function onAbort(signal: AbortSignal, callback: () => void): () => void {
  let entry = waiting.get(signal);
  if (entry === undefined) {
    const callbacks = new Set<() => void>();
    const listener = () => {
      waiting.delete(signal);
      for (const f of [...callbacks]) f();
      callbacks.clear();
    };
    entry = { callbacks, listener };
    waiting.set(signal, entry);
    signal.addEventListener("abort", listener, { once: true });
  }
  const { callbacks, listener } = entry;
  callbacks.add(callback);
  return () => {
    if (!callbacks.delete(callback) || callbacks.size > 0) return;
    if (waiting.get(signal)?.callbacks === callbacks) waiting.delete(signal);
    signal.removeEventListener("abort", listener);
  };
}
