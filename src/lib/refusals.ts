/**
 * Refusals of what clients send — TCP frames whose length is out of range, frames stalled past the
 * read timeout, HTTP the runtime's parser refuses — counted, and logged so that no client can
 * grow the log without bound: any unauthenticated peer can open connections and send garbage.
 *
 * Per kind of refusal:
 *
 * | refusal arrives                                   | logged                                      |
 * |---------------------------------------------------|---------------------------------------------|
 * | no line of this kind for `intervalMs` or more     | at once: its fields, `refused` 1            |
 * | within `intervalMs` of the last line of this kind | not now; counted; one timer armed for the kind |
 * | the kind's timer fires                            | one summary line: the last refusal's fields, `refused` = how many since the last line |
 *
 * So a kind logs at most one line per `intervalMs` whatever clients do, every refusal is in some
 * line's `refused`, and {@link RefusalLog.counts} (served by `GET /v1/admin/metrics`) has the
 * totals since start. Time comes through the {@link Clock}.
 */
import type { Clock, Timer } from "./clock.ts";
import { refusalLogIntervalMs } from "./limits.ts";
import type { LogFields, Logger } from "./logger.ts";

/** The kinds of refusal counted, each also the event name of its log lines. */
export const refusalKinds = [
  /** A TCP frame whose `length` is below the minimum or over `--max-request-bytes`; the connection closed. */
  "tcp.frame_refused",
  /** A TCP frame that did not arrive whole within `--read-timeout`; the connection closed. */
  "tcp.read_timeout",
  /** HTTP that the runtime's parser refused (a bad request line, header, chunk size…); answered 4xx, the connection closed. */
  "http.parse_error",
  /** A request or connection without a valid API key while the broker has keys (`auth/access.ts`): missing, malformed, unknown, or (TCP) no Authenticate in time. */
  "auth.failed",
  /** Plain text (HTTP, or the TCP protocol without TLS) sent to a TLS port; the connection closed (`runtime/tls.ts`). */
  "tls.plaintext_client",
  /** A TLS handshake that failed otherwise: no or a wrong client certificate, an unknown CA, a timeout. */
  "tls.handshake_failed",
  /** A TLS handshake sent to the plain HTTP port (Node's parser reports it). */
  "http.tls_on_plain_port",
  /** A Kafka request frame whose size is out of range, that breaks Kafka's grammar, or that names an api or version not served; the connection closed. */
  "kafka.request_refused",
  /** A Kafka request frame that did not arrive whole within `--read-timeout`; the connection closed. */
  "kafka.read_timeout",
  /** A connection accepted beyond `--max-connections` (HTTP, TCP or Kafka); closed at once (`lib/connection-limit.ts`). */
  "connection.refused",
  /**
   * A Kafka Produce record batch refused before it reached the broker (record headers, a
   * transactional batch, an unknown codec, a corrupt batch): Produce v3 carries no error message,
   * so this line is the only place the reason shows (docs/kafka.md "Records").
   */
  "kafka.produce_refused",
  /**
   * A Kafka group request naming a group id the broker cannot hold (outside `[A-Za-z0-9._-]`,
   * over 249 characters, "." or ".."): answered INVALID_GROUP_ID (24), which carries no message,
   * so this line holds the reason (docs/kafka.md "Consumer groups").
   */
  "kafka.group_refused",
] as const;

/** One of {@link refusalKinds}. */
export type RefusalKind = (typeof refusalKinds)[number];

/** Per kind: refusals since start. */
export type RefusalCounts = Record<RefusalKind, number>;

interface KindState {
  total: number;
  /** Refusals not yet in a log line. */
  pending: number;
  /** Fields of the latest of them. */
  lastFields: LogFields;
  /** When the last line of this kind was written (ms), or −∞ before the first. */
  lastLineMs: number;
  timer: Timer | null;
}

/** Counts refusals and rate-limits their log lines (module comment). */
export class RefusalLog {
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #kinds = new Map<RefusalKind, KindState>();

  /**
   * @param options.intervalMs at most one line per kind this often (default `refusalLogIntervalMs`, 5 s).
   * @throws RangeError if `intervalMs` is not a positive number.
   */
  constructor(options: { logger: Logger; clock: Clock; intervalMs?: number }) {
    this.#logger = options.logger;
    this.#clock = options.clock;
    this.#intervalMs = options.intervalMs ?? refusalLogIntervalMs;
    if (!(this.#intervalMs > 0))
      throw new RangeError(`intervalMs must be positive, got ${this.#intervalMs}`);
    for (const kind of refusalKinds)
      this.#kinds.set(kind, {
        total: 0,
        pending: 0,
        lastFields: {},
        lastLineMs: Number.NEGATIVE_INFINITY,
        timer: null,
      });
  }

  /**
   * Counts one refusal of `kind`; `fields` (bounded values: quote client input with
   * `src/lib/quote.ts`) describe it in the log line that reports it.
   */
  refuse(kind: RefusalKind, fields: LogFields = {}): void {
    const state = this.#kinds.get(kind)!;
    state.total++;
    state.pending++;
    state.lastFields = fields;
    const now = this.#clock.nowMs();
    const sinceLastLineMs = now - state.lastLineMs;
    if (sinceLastLineMs >= this.#intervalMs) {
      // A timer still armed is overdue (the event loop is late, as under a flood): this line
      // reports what it would have, and a second line must not follow within the interval.
      state.timer?.cancel();
      state.timer = null;
      return this.#line(kind, state, now);
    }
    state.timer ??= this.#clock.setTimer(this.#intervalMs - sinceLastLineMs, () => {
      state.timer = null;
      if (state.pending > 0) this.#line(kind, state, this.#clock.nowMs());
    });
  }

  /** Refusals of each kind since start (every kind present, 0 when none). */
  counts(): RefusalCounts {
    const out = {} as RefusalCounts;
    for (const [kind, state] of this.#kinds) out[kind] = state.total;
    return out;
  }

  /** Logs what is pending at once and cancels the timers (at shutdown). */
  flush(): void {
    const now = this.#clock.nowMs();
    for (const [kind, state] of this.#kinds) {
      state.timer?.cancel();
      state.timer = null;
      if (state.pending > 0) this.#line(kind, state, now);
    }
  }

  #line(kind: RefusalKind, state: KindState, now: number): void {
    this.#logger.log("warn", kind, {
      ...state.lastFields,
      refused: state.pending,
      refused_total: state.total,
    });
    state.pending = 0;
    state.lastLineMs = now;
  }
}
