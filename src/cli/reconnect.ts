/**
 * How `consume --follow`, `consume --group` and plain `produce` ride through a broker restart
 * (README "Command line", each command's `--help`): when the connection closes, they connect
 * again with a capped backoff ({@link reconnectBackoffMsMin} doubling to
 * {@link reconnectBackoffMsMax}), saying so on stderr in one line when they start retrying and in
 * one when they are connected again. They give up on an error no retry can fix (a refused key, a
 * topic that is gone), on a stop signal, or after `--reconnect-timeout-ms`.
 *
 * What each resumes at is the caller's business: `consume` at the next offset it has not printed,
 * `consume --group` by joining the group again (its committed offsets), `produce` by sending only
 * batches that never left (a batch whose answer was lost ends the command: see `produce`).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Errors } from "../broker/errors.ts";
import { ClientError, ClientErrorCodes } from "../client/client.ts";
import { errorMessage } from "../lib/errors.ts";

/** First wait before connecting again after a lost connection, in ms. */
export const reconnectBackoffMsMin = 100;
/** Longest wait between two attempts to connect again, in ms. */
export const reconnectBackoffMsMax = 2000;
/** Default `--reconnect-timeout-ms` of `produce` and of `consume` without `--follow`, in ms. */
export const reconnectTimeoutMsDefault = 30_000;

/**
 * Whether `err` means the connection to the broker is gone or the broker cannot serve now
 * (shutting down, electing a leader): a retriable {@link ClientError} (`connection_closed`,
 * `timeout`, or a retriable code of the error table such as `unavailable`). A refused key, a
 * missing topic, a bad request or a cold tier that does not answer (`cold_tier_unavailable`) are not.
 */
export function isReconnectable(err: unknown): boolean {
  // cold_tier_unavailable is retriable, but the connection is fine and a new one reads the same
  // hung store: the command ends naming the cold tier instead of looping on "reconnected".
  return err instanceof ClientError && err.retriable && err.code !== "cold_tier_unavailable";
}

/**
 * Whether `err` leaves a request's outcome unknown (the answer never came): the connection closed
 * or the request timed out after it was sent.
 */
export function isAnswerLost(err: unknown): boolean {
  return (
    err instanceof ClientError &&
    (err.code === ClientErrorCodes.connectionClosed || err.code === ClientErrorCodes.timeout)
  );
}

/** Options of {@link reconnect}. */
export interface ReconnectOptions {
  /** Why the connection was lost (printed in the first line). */
  cause: unknown;
  /** Longest time to keep trying, in ms; null: until a stop signal. */
  timeoutMs: number | null;
  /** True once a stop signal came: stop trying (resolves null). */
  stopped: () => boolean;
  /** Where the two lines go (default: stderr). */
  write?: (line: string) => void;
}

/**
 * Calls `connect` until it resolves, waiting {@link reconnectBackoffMsMin} ms first and doubling
 * up to {@link reconnectBackoffMsMax} ms between attempts; writes
 * `es-broker: connection to the broker lost (…): reconnecting …` (or, after a retriable answer,
 * `es-broker: the broker answered <code>, which a retry may fix (…): reconnecting …`) before the
 * first attempt and
 * `es-broker: reconnected after N ms` once one succeeds.
 * A stop signal does not wait for an attempt in flight, which can itself retry for long while
 * every broker is down (newuser18 F10: `consume --group --follow` needed a second SIGTERM):
 * `options.abandon` gets what such an attempt resolves with later, to close it.
 * @returns what `connect` resolved with, or null when a stop signal came first.
 * @throws the attempt's error when it is not {@link isReconnectable} (e.g. `unauthenticated`),
 *   or the last one, with the time spent in its message, after `timeoutMs`.
 */
export async function reconnect<T>(
  connect: () => Promise<T>,
  options: ReconnectOptions & { abandon?: (late: T) => void },
): Promise<T | null> {
  const write = options.write ?? ((line: string) => process.stderr.write(line));
  const startedAt = performance.now();
  const limit = options.timeoutMs === null ? "until stopped" : `for up to ${options.timeoutMs} ms`;
  // A retriable answer (`unavailable` while etcd elects a leader, ...) is no lost connection.
  const why =
    options.cause instanceof ClientError && !isAnswerLost(options.cause)
      ? `the broker answered ${options.cause.code}, which a retry may fix (${errorMessage(options.cause)})`
      : `connection to the broker lost (${errorMessage(options.cause)})`;
  // One attempt before saying anything: a connection the broker closed because the key was
  // revoked is refused at once, and the operator should read that, not "reconnecting" first
  // (newuser18 F10). Any other outcome prints what it always did.
  let first: { value: T } | null = null;
  try {
    const value = await untilStopped(connect(), options);
    if (value === stoppedMark) {
      write("es-broker: stop requested: no longer reconnecting\n");
      return null;
    }
    first = { value };
  } catch (err) {
    if (!isReconnectable(err)) throw revokedWhileRunning(err, options.cause);
  }
  write(`es-broker: ${why}: reconnecting ${limit} (--reconnect-timeout-ms)\n`);
  if (first !== null) {
    write(`es-broker: reconnected after ${Math.round(performance.now() - startedAt)} ms\n`);
    return first.value;
  }
  let waitMs = reconnectBackoffMsMin;
  for (;;) {
    // Waits in short steps, so that a stop signal ends the wait at once.
    const until = performance.now() + waitMs;
    while (performance.now() < until) {
      if (options.stopped()) return null;
      await sleep(Math.min(50, Math.max(1, until - performance.now())));
    }
    if (options.stopped()) return null;
    try {
      const connected = await untilStopped(connect(), options);
      if (connected === stoppedMark) {
        write("es-broker: stop requested: no longer reconnecting\n");
        return null;
      }
      write(`es-broker: reconnected after ${Math.round(performance.now() - startedAt)} ms\n`);
      return connected;
    } catch (err) {
      if (!isReconnectable(err)) throw revokedWhileRunning(err, options.cause);
      const spentMs = performance.now() - startedAt;
      if (options.timeoutMs !== null && spentMs >= options.timeoutMs) {
        const message = `${errorMessage(err)} (gave up reconnecting after ${Math.round(spentMs)} ms: --reconnect-timeout-ms ${options.timeoutMs})`;
        throw err instanceof ClientError
          ? new ClientError(err.code, err.tcp, err.retriable, message, {
              cause: err,
              details: err.details,
            })
          : err;
      }
      waitMs = Math.min(reconnectBackoffMsMax, waitMs * 2);
    }
  }
}

/** Least time between two stderr lines about the same run of refusals being retried, in ms. */
export const refusalLineEveryMs = 5000;

/**
 * Whether a produce refused with `err` stored nothing and a retry may succeed: a retriable answer
 * of the broker (`storage_error` for a full disk, `unavailable`, ...), neither a lost answer
 * ({@link isAnswerLost}) nor a refusal after the leader appended the batch (`may_be_stored`).
 */
export function isRetriableRefusal(err: unknown): boolean {
  return (
    err instanceof ClientError &&
    err.retriable &&
    !isAnswerLost(err) &&
    err.details?.may_be_stored !== true
  );
}

/**
 * Sends with `send` until it resolves, while it fails with {@link isRetriableRefusal}: waits
 * {@link reconnectBackoffMsMin} ms doubling to {@link reconnectBackoffMsMax} ms between tries, writes
 * `es-broker: the broker refused <what> with <code> (…): retrying …` at the first refusal and at
 * most every {@link refusalLineEveryMs} after it, and `es-broker: <what> was accepted after N ms of
 * retries` once it goes through (README "Command line", `produce --help`).
 * @param options.timeoutMs how long to keep trying (`--reconnect-timeout-ms`; 0 = not at all,
 *   null = until it goes through).
 * @throws the first error that is not a retriable refusal, or the last refusal, with the time
 *   spent in its message, after `timeoutMs`.
 */
export async function retryRefusals<T>(
  send: () => Promise<T>,
  options: { what: string; timeoutMs: number | null; write?: (line: string) => void },
): Promise<T> {
  const write = options.write ?? ((line: string) => process.stderr.write(line));
  let startedAt: number | null = null;
  let toldAt = Number.NEGATIVE_INFINITY;
  let waitMs = reconnectBackoffMsMin;
  for (;;) {
    try {
      const result = await send();
      if (startedAt !== null)
        write(
          `es-broker: ${options.what} was accepted after ${Math.round(performance.now() - startedAt)} ms of retries\n`,
        );
      return result;
    } catch (err) {
      if (!isRetriableRefusal(err) || options.timeoutMs === 0) throw err;
      const now = performance.now();
      startedAt ??= now;
      const spentMs = now - startedAt;
      if (options.timeoutMs !== null && spentMs >= options.timeoutMs) {
        const e = err as ClientError;
        throw new ClientError(
          e.code,
          e.tcp,
          e.retriable,
          `${e.message} (gave up retrying after ${Math.round(spentMs)} ms: --reconnect-timeout-ms ${options.timeoutMs})`,
          { cause: e, details: e.details },
        );
      }
      if (now - toldAt >= refusalLineEveryMs) {
        toldAt = now;
        const limit =
          options.timeoutMs === null ? "until stopped" : `for up to ${options.timeoutMs} ms`;
        write(
          `es-broker: the broker refused ${options.what} with ${(err as ClientError).code}, which stored nothing (${errorMessage(err)}): retrying ${limit} (--reconnect-timeout-ms)\n`,
        );
      }
      await sleep(waitMs);
      waitMs = Math.min(reconnectBackoffMsMax, waitMs * 2);
    }
  }
}

/**
 * `err` as `key_revoked` when it is `unauthenticated` on connecting again after a lost
 * connection: the key was accepted when the command connected, so it was revoked (or changed)
 * meanwhile, as `consume` is told when its key is revoked during a long-poll. Else `err`.
 */
function revokedWhileRunning(err: unknown, cause: unknown): unknown {
  if (!(err instanceof ClientError) || err.code !== Errors.unauthenticated.code) return err;
  if (!isAnswerLost(cause)) return err;
  return ClientError.fromKind(
    Errors.keyRevoked,
    `${err.message}; it was accepted when this command connected, so it was revoked or changed while the command ran (the broker closed the connection)`,
  );
}

const stoppedMark: unique symbol = Symbol("stopped");

/**
 * `attempt`, or {@link stoppedMark} as soon as `options.stopped()` turns true (polled every
 * 50 ms); an attempt abandoned so is handed to `options.abandon` when it resolves, and its
 * rejection ignored.
 */
async function untilStopped<T>(
  attempt: Promise<T>,
  options: ReconnectOptions & { abandon?: (late: T) => void },
): Promise<T | typeof stoppedMark> {
  let timer: ReturnType<typeof setInterval> | undefined;
  const stop = new Promise<typeof stoppedMark>((resolve) => {
    timer = setInterval(() => {
      if (options.stopped()) resolve(stoppedMark);
    }, 50);
  });
  try {
    const first = await Promise.race([attempt, stop]);
    if (first === stoppedMark)
      attempt.then(
        (late) => options.abandon?.(late),
        () => {},
      );
    return first;
  } finally {
    clearInterval(timer);
  }
}
