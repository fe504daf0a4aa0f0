/**
 * The broker-wide bound on open client connections (`--max-connections`, docs/operations.md
 * "Descriptors and connections"): every connection the HTTP, TCP and Kafka listeners accept counts
 * against one limit, so that clients cannot spend the descriptors storage needs for segments,
 * group files and topic creation. A connection accepted beyond the limit is closed at once, before
 * it is read; the refusal is counted and logged at most once per interval (`connection.refused`,
 * `lib/refusals.ts`).
 */
import type { RefusalLog } from "./refusals.ts";

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
      reason: "--max-connections reached: the connection was closed at once",
    });
    return false;
  }

  /** Releases a connection {@link admit} counted, when it closes. */
  release(): void {
    if (this.#open > 0) this.#open--;
  }
}
