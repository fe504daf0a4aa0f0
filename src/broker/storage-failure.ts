/**
 * How a failed file-system step of a broker operation (creating or deleting a topic, rewriting a
 * metadata file) reaches a client: as one row of the error table, with a message naming the
 * failed action first and the file-system error after a colon.
 */
import { describe as describeError } from "../storage/segment.ts";
import { BrokerError, Errors } from "./errors.ts";

/**
 * The client-visible error for `err`, thrown by the step `action` describes (e.g.
 * `Cannot delete topic "t": moving … failed`). A BrokerError passes through unchanged.
 */
export function storageFailure(action: string, err: unknown): BrokerError {
  if (err instanceof BrokerError) return err;
  return new BrokerError(Errors.storageError, `${action}: ${describeError(err)}`);
}
