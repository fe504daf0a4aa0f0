/**
 * The broker-wide bound on open client connections (`--max-connections`, docs/operations.md
 * "Descriptors and connections"): every connection the HTTP, TCP and Kafka listeners accept counts
 * against one limit, so that clients cannot spend the descriptors storage needs for segments,
 * group files and topic creation. A connection accepted beyond the limit is closed at once, before
 * it is read (a plain-HTTP one after {@link httpRefusalAnswer}); the refusal is counted and logged
 * at most once per interval (`connection.refused`, `lib/refusals.ts`).
 */
import type { RefusalLog } from "./refusals.ts";

const refusalBody = JSON.stringify({
  error: {
    code: "unavailable",
    message:
      "Cannot serve this connection: the broker is at its --max-connections bound; retry later",
  },
});

/**
 * What a plain-HTTP connection refused at the bound is sent before it is closed: a complete 503
 * `unavailable` answer with `Retry-After: 1`, so that an HTTP client can tell the refusal from a
 * crash and back off (newuser14; Redis answers `-ERR max number of clients reached`). Sent where
 * plain HTTP is served on the raw socket (Node, `runtime/http-raw.ts`); TCP, Kafka and TLS
 * connections, and HTTP served by a runtime's own server, are closed without one.
 */
export const httpRefusalAnswer = `HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: ${refusalBody.length}\r\n\r\n${refusalBody}`;

/** Counts open connections against one limit (module comment). */
export class ConnectionLimit {
  /** Most connections open at once, over every listener. */
  readonly max: number;
  readonly #refusals: RefusalLog | undefined;
  #open = 0;

  /**
   * @param max most connections open at once (a positive integer).
   * @param refusals counts and logs the refused ones; without it they are only refused.
   * @throws RangeError if `max` is not a positive integer.
   */
  constructor(max: number, refusals?: RefusalLog) {
    if (!Number.isInteger(max) || max < 1)
      throw new RangeError(`max connections must be a positive integer, got ${max}`);
    this.max = max;
    this.#refusals = refusals;
  }

  /** Connections open now (admitted and not yet released). */
  get open(): number {
    return this.#open;
  }

  /**
   * Admits a connection just accepted by `listener`: true if it is counted (call
   * {@link release} once when it closes), false if the limit is reached (the caller closes it at
   * once; the refusal is counted and logged).
   */
  admit(listener: "http" | "tcp" | "kafka", remote: string): boolean {
    if (this.#open < this.max) {
      this.#open++;
      return true;
    }
    this.#refusals?.refuse("connection.refused", {
      listener,
      remote,
      max_connections: this.max,
      reason:
        listener === "http"
          ? "--max-connections reached: the connection was answered 503 (plain HTTP on Node) or closed at once"
          : "--max-connections reached: the connection was closed at once",
    });
    return false;
  }

  /** Releases a connection {@link admit} counted, when it closes. */
  release(): void {
    if (this.#open > 0) this.#open--;
  }
}
