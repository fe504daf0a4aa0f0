/**
 * A deadline for `fetch` that always fires (docs/runtimes.md "The runtime layer (`src/runtime/`)").
 *
 * Node's `fetch` holds its signal only weakly: a signal from `AbortSignal.timeout` that nothing
 * else references can be garbage-collected before it fires, and a server that stops answering
 * after the headers (a stalled body, a SIGSTOPped etcd member) then hangs the request for good.
 * Here the timer's callback holds the controller, so the signal lives until it fires or is cleared.
 */

/** A signal aborted with a `TimeoutError` after `ms`; call `clear` once the request is settled. */
export interface Deadline {
  readonly signal: AbortSignal;
  clear(): void;
}

/**
 * Starts a deadline of `ms` milliseconds (see the module comment for why not `AbortSignal.timeout`).
 * With `cancel`, the signal is also aborted (with `cancel`'s reason) as soon as `cancel` is: a
 * client that closes abandons its requests at once instead of waiting out their deadlines.
 */
export function deadline(ms: number, cancel?: AbortSignal): Deadline {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException(`no answer within ${ms} ms`, "TimeoutError")),
    ms,
  );
  if (cancel === undefined) return { signal: controller.signal, clear: () => clearTimeout(timer) };
  const onCancel = () => controller.abort(cancel.reason);
  if (cancel.aborted) onCancel();
  else cancel.addEventListener("abort", onCancel, { once: true });
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      cancel.removeEventListener("abort", onCancel);
    },
  };
}
