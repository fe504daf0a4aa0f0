/**
 * Structured logging: one JSON line per event, so recovery decisions and corruption reports can be
 * grepped and parsed. Storage and broker code receive a {@link Logger}; the runtime decides where
 * lines go.
 */

/** Severity of a log event. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Fields of one event; values must be JSON-serialisable. */
export type LogFields = Record<string, unknown>;

/** Receives structured events. `event` is a stable dotted name such as `recovery.torn_tail`. */
export interface Logger {
  log(level: LogLevel, event: string, fields?: LogFields): void;
}

/** A logger that drops everything (tests that do not inspect logs). */
export const silentLogger: Logger = { log() {} };

/** A logger that keeps every event in memory, for tests that assert on what was reported. */
export class MemoryLogger implements Logger {
  readonly events: { level: LogLevel; event: string; fields: LogFields }[] = [];
  log(level: LogLevel, event: string, fields: LogFields = {}): void {
    this.events.push({ level, event, fields });
  }
  /** Events whose name equals `event`. */
  named(event: string): LogFields[] {
    return this.events.filter((e) => e.event === event).map((e) => e.fields);
  }
}

/** A logger writing one JSON line per event through `write`, with an ISO time stamp from `nowMs`. */
export function jsonLineLogger(
  write: (line: string) => void,
  nowMs: () => number,
  minLevel: LogLevel = "info",
): Logger {
  const order: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };
  return {
    log(level, event, fields = {}) {
      if (order[level] < order[minLevel]) return;
      write(
        `${JSON.stringify({ time: new Date(nowMs()).toISOString(), level, event, ...fields })}\n`,
      );
    },
  };
}
