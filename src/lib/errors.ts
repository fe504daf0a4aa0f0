/**
 * Turning a caught value into text for a message or a log line. A `catch` receives `unknown`:
 * usually an `Error` (an `FsError` carries its errno code in its message), but a rejected promise
 * can carry anything, so every path that reports a caught value goes through here.
 */

/** The message of a caught value: `err.message` for an `Error`, `String(err)` for anything else. */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The stack of a caught `Error`, for a log line; undefined for anything else. */
export function errorStack(err: unknown): string | undefined {
  return err instanceof Error ? err.stack : undefined;
}
