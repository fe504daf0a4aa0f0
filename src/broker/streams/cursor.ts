/**
 * Durable Streams cursors (protocol §10.1): every live answer carries one (`Stream-Cursor`, SSE
 * `streamCursor`) and the client echoes it as `?cursor=`, so a CDN collapses readers waiting for
 * the same data under one cache key — and, because the cursor moves on, never serves the same
 * cached empty answer forever.
 *
 * The cursor is the number of 20-second intervals since 2024-10-09T00:00:00Z, in decimal. When
 * the client's cursor is already at or past the current interval (it polled twice within one),
 * the answer is the client's cursor plus a random jitter of 1 s … 1 h rounded up to whole
 * intervals (at least one), so it is strictly greater and cursors never go backwards.
 */
import type { Clock } from "../../lib/clock.ts";
import {
  streamCursorEpochMs,
  streamCursorIntervalMs,
  streamCursorJitterMsMax,
} from "../../lib/limits.ts";
import { Prng } from "../../lib/prng.ts";

/** Mints cursors from a clock and a seeded PRNG (module comment). */
export class StreamCursors {
  #clock: Clock;
  #prng: Prng;

  /** @param seed seeds the jitter; any safe integer. */
  constructor(clock: Clock, seed: number) {
    this.#clock = clock;
    this.#prng = new Prng(seed);
  }

  /** The current interval number. */
  interval(): number {
    return Math.max(
      0,
      Math.floor((this.#clock.nowMs() - streamCursorEpochMs) / streamCursorIntervalMs),
    );
  }

  /**
   * The cursor for a live answer, given the `cursor` the client echoed (ignored unless it is a
   * plain decimal number within the safe range).
   */
  next(clientCursor: string | undefined): string {
    const now = this.interval();
    const client =
      clientCursor !== undefined && /^[0-9]{1,15}$/.test(clientCursor) ? Number(clientCursor) : -1;
    if (client < now) return String(now);
    const jitterMs = 1000 + this.#prng.int(streamCursorJitterMsMax - 1000);
    return String(client + Math.max(1, Math.ceil(jitterMs / streamCursorIntervalMs)));
  }
}
