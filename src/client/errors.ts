/**
 * Errors the TCP client rejects with. A server error keeps its row of the error table
 * (`src/broker/errors.ts`): `code`, `tcp` number and `retriable`, plus the server's message.
 * Conditions the client detects itself carry codes outside the table and `tcp` −1.
 */
import { errorKindByTcp, type ErrorKind } from "../broker/errors.ts";

/**
 * Codes the client itself produces (never sent by a server):
 * - `connection_closed`: the connection closed or failed before the answer came; the request may
 *   or may not have been carried out (a retried produce can append twice). Retriable.
 * - `timeout`: no answer within the request's time limit; same uncertainty. Retriable.
 * - `invalid_response`: the server's answer broke the protocol (malformed body, a record failing
 *   its CRC, offsets out of order). Not retriable.
 */
export const ClientErrorCodes = Object.freeze({
  connectionClosed: "connection_closed",
  timeout: "timeout",
  invalidResponse: "invalid_response",
} as const);

/** Why a client call failed. */
export class ClientError extends Error {
  override name = "ClientError";
  /**
   * @param code an error-table code (e.g. `"topic_not_found"`) or one of {@link ClientErrorCodes}.
   * @param tcp the TCP error number, or −1 for conditions the client detected itself.
   * @param retriable true if the same request may succeed later without change.
   * @param message the server's message, or the client's description.
   * @param options.details the server's machine-readable details (e.g. `{ expected_sequence: 4 }`), if any.
   */
  constructor(
    readonly code: string,
    readonly tcp: number,
    readonly retriable: boolean,
    message: string,
    options?: { cause?: unknown; details?: Record<string, unknown> },
  ) {
    super(message, options);
    this.details = options?.details;
  }

  /** The server's machine-readable details, when the error carries some (e.g. `expected_sequence`, `expected_epoch`). */
  readonly details: Record<string, unknown> | undefined;

  /** An error for a row of the error table (used for local argument checks and server errors). */
  static fromKind(kind: ErrorKind, message: string): ClientError {
    return new ClientError(kind.code, kind.tcp, kind.retriable, message);
  }

  /**
   * An error for a server response with error number `tcp`. An unknown number (a newer server)
   * keeps the server's code and is not retriable.
   */
  static fromServer(
    tcp: number,
    serverCode: string,
    message: string,
    details?: Record<string, unknown>,
  ): ClientError {
    const kind = errorKindByTcp(tcp);
    if (kind) return new ClientError(kind.code, kind.tcp, kind.retriable, message, { details });
    return new ClientError(serverCode || `error_${tcp}`, tcp, false, message, { details });
  }

  /** The connection closed before an answer came. */
  static connectionClosed(message: string, cause?: unknown): ClientError {
    return new ClientError(ClientErrorCodes.connectionClosed, -1, true, message, { cause });
  }

  /** No answer within the time limit. */
  static timeout(message: string): ClientError {
    return new ClientError(ClientErrorCodes.timeout, -1, true, message);
  }

  /** The server's answer broke the protocol. */
  static invalidResponse(message: string, cause?: unknown): ClientError {
    return new ClientError(ClientErrorCodes.invalidResponse, -1, false, message, { cause });
  }
}
