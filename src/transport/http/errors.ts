/**
 * HTTP error bodies. Every error a client sees has the shape
 *
 * ```json
 * { "error": { "code": "topic_not_found", "message": "Cannot …: …", "details": { … } } }
 * ```
 *
 * with the HTTP status from the error table (`src/broker/errors.ts`); `details` appears only when
 * the {@link BrokerError} carries some. Anything that is not a BrokerError is a bug and becomes
 * 500 `internal` (see `app.ts`, which logs it).
 */
import { BrokerError, Errors } from "../../broker/errors.ts";

/** JSON body of an HTTP error response. */
export interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, unknown> };
}

/** The JSON body for `error`: its code, message and, if present, details. */
export function errorBody(error: BrokerError): ErrorBody {
  const body: ErrorBody = { error: { code: error.kind.code, message: error.message } };
  if (error.details !== undefined) body.error.details = error.details;
  return body;
}

/**
 * A 400 `invalid_request` error: `action` names what failed ("Cannot fetch from partition
 * \"orders/3\""), `detail` says why, after a colon.
 */
export function invalidRequest(
  action: string,
  detail: string,
  details?: Record<string, unknown>,
): BrokerError {
  return new BrokerError(Errors.invalidRequest, `${action}: ${detail}`, details);
}
