/**
 * The opaque offsets of the Durable Streams protocol (protocol §8) as es-broker mints them
 * (docs/durable-streams.md "Offsets"):
 *
 * ```
 * PPPPPPPPPPPPPPPP_0000000000000000
 * ```
 *
 * `P` is the *stream position* as 16 decimal digits, zero-padded: the number of appends before
 * this point. A stream's position p is record offset p of its topic, or, for a fork whose own
 * records start at position B (its fork point), record offset p − B of the fork's topic for
 * p ≥ B and position p of its source below B. The second field is reserved and always zeros: it
 * keeps the shape of the reference server's offsets, so the zero offset
 * `0000000000000000_0000000000000000` that clients and the conformance suite write by hand means
 * the start of a stream here too.
 *
 * Fixed width makes byte-wise order equal numeric order; positions are record offsets, which
 * are durable and never reused, so offsets survive restarts; 16 digits hold every offset up to
 * 2^53 − 1. `-1` (the start) and `now` (the tail) are the protocol's sentinels and never minted.
 */
import { offsetMax } from "../../lib/limits.ts";
import { BrokerError, Errors } from "../errors.ts";

const reserved = "0000000000000000";
const pattern = /^([0-9]{16})_([0-9]{16})$/;

/** A position a read asks for: a stream position, or one of the protocol's sentinels. */
export type StreamPosition = number | "start" | "now";

/** The offset token of stream position `position` (0 … 2^53 − 1). */
export function formatStreamOffset(position: number): string {
  return `${String(position).padStart(16, "0")}_${reserved}`;
}

/**
 * Parses an offset token: `-1` (start), `now` (tail), or a token {@link formatStreamOffset} mints.
 * @param what names the token in the error ("query parameter \"offset\"", "header \"Stream-Fork-Offset\"").
 * @throws BrokerError invalid_request naming the token and the expected form.
 */
export function parseStreamOffset(text: string, what: string): StreamPosition {
  if (text === "-1") return "start";
  if (text === "now") return "now";
  const match = pattern.exec(text);
  const position = match === null ? Number.NaN : Number(match[1]);
  if (
    match === null ||
    match[2] !== reserved ||
    !Number.isSafeInteger(position) ||
    position > offsetMax
  ) {
    const shown = text.length > 48 ? `${text.slice(0, 48)}…` : text;
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid ${what} ${JSON.stringify(shown)}: an offset is "-1", "now", or a value this server returned in Stream-Next-Offset (16 digits, "_", 16 zeros)`,
      { parameter: what },
    );
  }
  return position;
}
