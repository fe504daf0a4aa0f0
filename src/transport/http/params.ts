/**
 * Parsing of path parameters, query parameters and headers that carry integers. Every check fails
 * with a 400 `invalid_request` naming the parameter, its value and the accepted range, never with
 * a 500 and never by guessing: only plain decimal digits are integers here (no sign, no spaces,
 * no `1e3`, no `0x10`, no fraction).
 */
import type { BrokerError } from "../../broker/errors.ts";
import { quote } from "../../lib/quote.ts";
import { invalidRequest } from "./errors.ts";

/** Longest digit string accepted; 16 digits cover every safe integer, longer is refused before `Number()`. */
const integerDigitsMax = 16;
const digits = /^[0-9]+$/;

/** Describes one integer parameter for {@link parseInteger}. */
export interface IntegerParam {
  /** How the client names it in an error: `query parameter "max_bytes"`, `path parameter "partition"`. */
  label: string;
  /** The bare name, sent as `details.parameter`: `max_bytes`, `partition`, `Last-Event-ID`. */
  name: string;
  /** Smallest accepted value (inclusive). */
  min: number;
  /** Largest accepted value (inclusive). */
  max: number;
  /** The failed action, first in the message: `Cannot fetch from partition "orders/3"`. */
  action: string;
}

/**
 * Parses `text` as a decimal integer within [min, max].
 * @throws BrokerError invalid_request naming the parameter (in the message and as
 *   `details.parameter`) if it is not digits or out of range.
 */
export function parseInteger(text: string, param: IntegerParam): number {
  if (text.length === 0 || text.length > integerDigitsMax || !digits.test(text)) {
    throw rangeError(text, param);
  }
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < param.min || value > param.max)
    throw rangeError(text, param);
  return value;
}

function rangeError(text: string, param: IntegerParam): BrokerError {
  return invalidRequest(
    param.action,
    `${param.label} ${quote(text)} must be an integer from ${param.min} to ${param.max}`,
    { parameter: param.name },
  );
}
