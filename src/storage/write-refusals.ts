/**
 * The log lines of a partition whose appends fail with a storage error (a full disk, an I/O
 * error; docs/operations.md "Full disk"): one `partition.writes_refused` error line when they start
 * failing, one `partition.writes_still_refused` error line at most every
 * {@link writeRefusalRepeatMs} while they keep failing, and one `partition.writes_resumed` line
 * when an append succeeds again, each with the number of refused requests and the time since the
 * first refusal. Without it a full disk leaves the log nearly silent while every produce fails.
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { errorMessage } from "../lib/errors.ts";

/** Least time between two `partition.writes_still_refused` lines of one partition, in ms. */
export const writeRefusalRepeatMs = 60_000;

/** See the module comment; one per partition. */
export class WriteRefusals {
  #partition: string;
  #clock: Clock;
  #logger: Logger;
  #sinceMs: number | null = null;
  #lastLineMs = 0;
  #requests = 0;
  #records = 0;

  constructor(partition: string, clock: Clock, logger: Logger) {
    this.#partition = partition;
    this.#clock = clock;
    this.#logger = logger;
  }

  /** True while appends are failing (since the last {@link succeeded}). */
  get refusing(): boolean {
    return this.#sinceMs !== null;
  }

  /** A group of `requests` append requests holding `records` records failed with `err`; nothing of it was stored. */
  refused(requests: number, records: number, err: unknown): void {
    const now = this.#clock.nowMs();
    this.#requests += requests;
    this.#records += records;
    if (this.#sinceMs === null) {
      this.#sinceMs = now;
      this.#lastLineMs = now;
      this.#logger.log("error", "partition.writes_refused", {
        partition: this.#partition,
        error: errorMessage(err),
        effect:
          "appends to this partition are refused (storage_error, nothing stored) until a write succeeds again",
      });
      return;
    }
    if (now - this.#lastLineMs < writeRefusalRepeatMs) return;
    this.#lastLineMs = now;
    this.#logger.log("error", "partition.writes_still_refused", {
      partition: this.#partition,
      refused_requests: this.#requests,
      refused_records: this.#records,
      refused_for_ms: now - this.#sinceMs,
      error: errorMessage(err),
    });
  }

  /** An append was written: ends a run of refusals with `partition.writes_resumed`. */
  succeeded(): void {
    if (this.#sinceMs === null) return;
    this.#logger.log("warn", "partition.writes_resumed", {
      partition: this.#partition,
      refused_requests: this.#requests,
      refused_records: this.#records,
      refused_for_ms: this.#clock.nowMs() - this.#sinceMs,
    });
    this.#sinceMs = null;
    this.#requests = 0;
    this.#records = 0;
  }
}
