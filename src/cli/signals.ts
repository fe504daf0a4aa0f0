/**
 * The one rule for SIGINT and SIGTERM in every long-running command (`serve`, `produce`,
 * `consume`, `consume --group`; README "Command line", `--help`):
 *
 * - The first signal is a request to stop. The command stops taking new work, finishes what is
 *   under way (acknowledgements, commits, output) and exits 0: it did everything it reported,
 *   so a supervisor or a script sees a stop it asked for as a success.
 * - A second signal abandons that work and exits at once with 128 + the signal's number, as a
 *   shell reports a process a signal ended: 130 for SIGINT, 143 for SIGTERM. Work may be lost,
 *   and the exit code says so.
 * - A repeat of the first signal within {@link REPEAT_WINDOW_MS} of it is the same request, not a
 *   second one: a terminal's Ctrl-C reaches the whole process group, and a task runner in it
 *   (`deno task`, `bun run`) forwards the signal to its child too, so the command gets it twice
 *   within milliseconds. A person's second Ctrl-C meant as "now" comes later.
 *
 * The one-shot commands (`topics`, `groups`, `keys`, `schemas`, `check`, `cluster`) end at once on
 * the first signal, with the same 130 / 143 ({@link endOnStopSignals}).
 */

/** The signals a command treats as a request to stop. */
export type StopSignal = "SIGINT" | "SIGTERM";

/** Exit code of a process ended by `signal`, as shells report it (128 + the signal's number). */
export function signalExitCode(signal: StopSignal): number {
  return signal === "SIGINT" ? 130 : 143;
}

/**
 * Milliseconds after the first stop signal during which the same signal again is taken as the
 * same request (module comment; docs/runtimes.md "Graceful shutdown"): 1 s.
 */
export const REPEAT_WINDOW_MS = 1000;

/** Handlers of {@link onStopSignals}; `dispose` removes them. */
export interface StopSignals {
  /** The first signal received, or null while none came. */
  readonly received: StopSignal | null;
  /** Removes the handlers (the runtime's default, ending the process, applies again). */
  dispose(): void;
}

/**
 * Installs the stop rule (module comment): calls `onStop` once, on the first SIGINT or SIGTERM;
 * the same signal again within {@link REPEAT_WINDOW_MS} is the same request (a note on stderr);
 * any later one, or the other signal, writes `es-broker: second SIG…, exiting now` on stderr and
 * exits at once.
 */
export function onStopSignals(onStop: (signal: StopSignal) => void): StopSignals {
  let received: StopSignal | null = null;
  // performance.now(): monotonic, so a wall-clock step cannot widen or close the window.
  let receivedAt = 0;
  const handle = (signal: StopSignal) => {
    if (received !== null) {
      if (signal === received && performance.now() - receivedAt < REPEAT_WINDOW_MS) {
        process.stderr.write(
          `es-broker: ${signal} again within ${REPEAT_WINDOW_MS / 1000} s of the first: the same request to stop (send it again later to exit at once)\n`,
        );
        return;
      }
      process.stderr.write(`es-broker: second ${signal}, exiting now\n`);
      process.exit(signalExitCode(signal));
    }
    received = signal;
    receivedAt = performance.now();
    onStop(signal);
  };
  const onInt = () => handle("SIGINT");
  const onTerm = () => handle("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);
  return {
    get received() {
      return received;
    },
    dispose() {
      process.off("SIGINT", onInt);
      process.off("SIGTERM", onTerm);
    },
  };
}

/**
 * The one-shot commands' rule (module comment): the first SIGINT or SIGTERM exits at once with
 * 130 or 143. A handler of its own rather than the runtime's default, because a signal the
 * process inherited as ignored (a background job of a non-interactive shell ignores SIGINT) stays
 * ignored on Bun and the compiled binary, where Node and Deno reset it: a handler ends it on every
 * runtime.
 */
export function endOnStopSignals(): void {
  process.on("SIGINT", () => process.exit(signalExitCode("SIGINT")));
  process.on("SIGTERM", () => process.exit(signalExitCode("SIGTERM")));
}
