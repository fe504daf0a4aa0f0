/**
 * Standard output as the commands write it. A reader that goes away (`es-broker consume t | head
 * -1`: head exits, the next write fails with EPIPE) is the reader asking the command to stop, as
 * kcat takes a SIGPIPE: the command stops reading, `consume --group` commits only the records
 * whose bytes stdout took and leaves the group, and it exits 0 without a message (as on SIGINT;
 * `main` turns {@link StdoutClosedError} into that). Any other write error fails the command.
 */

/** Thrown by {@link writeOut} and {@link flushOut} once the reader of stdout has gone away (EPIPE). */
export class StdoutClosedError extends Error {
  constructor() {
    super("standard output was closed (its reader went away)");
    this.name = "StdoutClosedError";
  }
}

let watching = false;
let closed = false;
let failure: Error | null = null;
/** Wake-ups of writers waiting for "drain" that an error must end too. */
const waiters = new Set<() => void>();

/**
 * Listens for stdout's errors (once per process): without a listener, Node and Bun end the process
 * with an unhandled 'error' event and a stack trace on the first EPIPE.
 */
export function watchStdout(): void {
  if (watching) return;
  watching = true;
  process.stdout.on("error", noteError);
}

/**
 * The errors that mean the reader went away: EPIPE from a pipe; ECONNRESET where stdout is one
 * end of a socket pair (a spawning Node process's `stdio: "pipe"`, seen on Bun when the parent
 * destroyed its end); a write after the stream was destroyed.
 */
const readerGone: ReadonlySet<string> = new Set(["EPIPE", "ECONNRESET", "ERR_STREAM_DESTROYED"]);

/** Deno's own error names for the same (its errors may carry no `code`). */
const readerGoneNames: ReadonlySet<string> = new Set(["BrokenPipe", "ConnectionReset"]);

/** Whether `err` says the reader of stdout went away (see {@link readerGone}). */
function isReaderGone(err: Error & { code?: string }): boolean {
  return (
    (err.code !== undefined && readerGone.has(err.code)) ||
    readerGoneNames.has(err.name) ||
    /\b(EPIPE|ECONNRESET)\b|broken pipe|connection reset by peer/i.test(err.message)
  );
}

/** Records a write error of stdout (from its 'error' event or a write's callback). */
function noteError(err: Error & { code?: string }): void {
  if (isReaderGone(err)) closed = true;
  else failure ??= err;
  for (const wake of [...waiters]) wake();
}

/** True once the reader of stdout went away. */
export function stdoutClosed(): boolean {
  return closed;
}

function check(): void {
  if (closed) throw new StdoutClosedError();
  if (failure !== null) throw failure;
}

/**
 * Writes to stdout, waiting while its buffer is full. `onWritten` runs once the OS took the
 * chunk (not when it failed). @throws StdoutClosedError once the reader went away (EPIPE), or
 * the write error.
 */
export async function writeOut(chunk: Uint8Array | string, onWritten?: () => void): Promise<void> {
  watchStdout();
  check();
  let ok: boolean;
  try {
    ok = process.stdout.write(chunk, (err?: Error | null) => {
      if (err !== null && err !== undefined) noteError(err);
      else onWritten?.();
    });
  } catch (err) {
    // A runtime may throw the write's error at once instead of reporting it.
    noteError(err instanceof Error ? err : new Error(String(err)));
    ok = true;
  }
  if (!ok) {
    await new Promise<void>((resolve) => {
      const wake = () => {
        waiters.delete(wake);
        process.stdout.off("drain", wake);
        resolve();
      };
      waiters.add(wake);
      process.stdout.once("drain", wake);
      if (closed || failure !== null) wake();
    });
  }
  check();
}

/**
 * Resolves once everything written to stdout so far has been handed to the OS.
 * @throws StdoutClosedError when the reader went away first, or the write error.
 */
export async function flushOut(): Promise<void> {
  watchStdout();
  check();
  await new Promise<void>((resolve) => {
    const wake = () => {
      waiters.delete(wake);
      resolve();
    };
    waiters.add(wake);
    try {
      process.stdout.write("", (err?: Error | null) => {
        if (err !== null && err !== undefined) noteError(err);
        wake();
      });
    } catch (err) {
      noteError(err instanceof Error ? err : new Error(String(err)));
      wake();
    }
  });
  check();
}
