/**
 * The envelope of the es-broker TCP protocol, version 0: the frame every api's body travels in,
 * and the error body of a failed response (full prose, limits and a worked example:
 * `docs/protocol.md`; each api's body: `apis/*.ts`, listed in `apis/index.ts`). All integers are
 * big-endian. `str16` = u16 byte length | that many bytes of UTF-8 (strict: invalid UTF-8 is
 * invalid_request). `u64` values above 2^53 − 1 are refused with `unsupported` (docs/decisions.md §6). A
 * body shorter or longer than its grammar is `invalid_request` naming the field.
 *
 * ```
 * request_frame   = length u32            bytes after this field (≥ 8, ≤ max request bytes)
 *                   api u16
 *                   version u16
 *                   correlation_id u32    echoed in the response
 *                   body                  length − 8 bytes, per api
 *
 * response_frame  = length u32            bytes after this field (≥ 6)
 *                   correlation_id u32
 *                   error u16             0 = success, else the TCP number of an error-table row
 *                   body                  success: per api; error: error_body
 *
 * error_body      = code str16            the row's code, e.g. "topic_not_found"
 *                   message_len u32
 *                   message [u8]          UTF-8, message_len bytes
 *                   [details_len u32      optional, present only when the error has
 *                    details [u8]]        machine-readable details: a JSON object, e.g.
 *                                         {"expected_sequence":4}
 * ```
 *
 * An unknown api or version is answered with `unsupported_api`; the connection stays open.
 *
 * Request encoders (in the api files) return a whole frame (length prefix included) and check the
 * caller's values, throwing {@link ProtocolError} `invalid_request` naming the field. Request
 * decoders take the body only (see {@link decodeRequestHeader}). Response encoders return a whole
 * frame; response decoders take the body (see {@link decodeResponseHeader}). Decoders return views
 * into the bytes they were given where a field is a byte range (entries, records), never copies.
 */
import type { ErrorKind } from "../broker/errors.ts";
import { parseJsonObject, requireInt, WireReader, WireWriter } from "./wire.ts";

export { ProtocolError } from "./wire.ts";

/** Bytes of the `length` prefix of every frame. */
export const frameLengthBytes = 4;
/** Smallest request `length`: api u16 + version u16 + correlation_id u32. */
export const requestLengthMin = 8;
/** Smallest response `length`: correlation_id u32 + error u16. */
export const responseLengthMin = 6;

/** The header of a request frame, with its body as a view. */
export interface RequestHeader {
  api: number;
  version: number;
  correlationId: number;
  /** The bytes after the header (a view of the frame). */
  body: Uint8Array;
}

/** The header of a response frame, with its body as a view. */
export interface ResponseHeader {
  correlationId: number;
  /** 0 for success, otherwise the TCP number of an error-table row. */
  error: number;
  /** The bytes after the header (a view of the frame). */
  body: Uint8Array;
}

/**
 * Splits a request frame (the bytes after `length`) into header and body.
 * @throws ProtocolError `invalid_request` if it is shorter than {@link requestLengthMin}.
 */
export function decodeRequestHeader(frame: Uint8Array): RequestHeader {
  const r = new WireReader(frame, "request header");
  const api = r.u16("api");
  const version = r.u16("version");
  const correlationId = r.u32("correlation_id");
  return { api, version, correlationId, body: r.rest() };
}

/**
 * Splits a response frame (the bytes after `length`) into header and body.
 * @throws ProtocolError `invalid_request` if it is shorter than {@link responseLengthMin}.
 */
export function decodeResponseHeader(frame: Uint8Array): ResponseHeader {
  const r = new WireReader(frame, "response header");
  const correlationId = r.u32("correlation_id");
  const error = r.u16("error");
  return { correlationId, error, body: r.rest() };
}

/**
 * Starts a request frame: reserves `length`, writes api, version (default 0), correlation id; the api's
 * encoder writes its body and {@link finishFrame} fills in `length`.
 * @throws ProtocolError `invalid_request` for a correlation id outside u32.
 */
export function startRequest(
  api: number,
  correlationId: number,
  capacityBytes: number,
  version = 0,
): WireWriter {
  requireInt(correlationId, 0, 0xffff_ffff, "correlation_id");
  return new WireWriter(capacityBytes).u32(0).u16(api).u16(version).u32(correlationId);
}

/** Starts a response frame: reserves `length`, writes correlation id and error (0 = success). */
export function startResponse(
  correlationId: number,
  error: number,
  capacityBytes: number,
): WireWriter {
  return new WireWriter(capacityBytes).u32(0).u32(correlationId).u16(error);
}

/** Fills in `length` and returns the frame. */
export function finishFrame(w: WireWriter): Uint8Array {
  w.patchU32(0, w.position - frameLengthBytes);
  return w.finish();
}

/** The decoded `error_body` of a failed response. */
export interface ErrorBody {
  /** The error-table code, e.g. `"topic_not_found"`. */
  code: string;
  /** The server's message. */
  message: string;
  /** Machine-readable details (e.g. `{ expected_sequence: 4 }`), when the error has any. */
  details?: Record<string, unknown>;
}

/**
 * Encodes a response frame carrying an error-table row and a message, and `details` (a JSON
 * object) when given and not empty.
 * @throws RangeError for the success row (number 0).
 */
export function encodeErrorResponse(
  correlationId: number,
  kind: ErrorKind,
  message: string,
  details?: Record<string, unknown>,
): Uint8Array {
  if (kind.tcp === 0) throw new RangeError("error number 0 means success");
  const w = startResponse(correlationId, kind.tcp, 64 + message.length * 3)
    .str16(kind.code)
    .str32(message);
  if (details !== undefined && Object.keys(details).length > 0) w.str32(JSON.stringify(details));
  return finishFrame(w);
}

/** Decodes an `error_body` (details optional). @throws ProtocolError `invalid_request` if malformed. */
export function decodeErrorBody(body: Uint8Array): ErrorBody {
  const r = new WireReader(body, "error response");
  const code = r.str16("code");
  const message = r.str32("message", "message_len");
  if (r.remainingBytes === 0) return { code, message };
  const details = parseJsonObject(r.str32("details", "details_len"), "error response", "details");
  r.end("details");
  return { code, message, details };
}

/** Encodes a success response with an empty body (LeaveGroup, CommitOffsets). */
export function encodeEmptyResponse(correlationId: number): Uint8Array {
  return finishFrame(startResponse(correlationId, 0, 10));
}

/** Decodes an empty success body. @throws ProtocolError if bytes follow. */
export function decodeEmptyResponse(body: Uint8Array): void {
  new WireReader(body, "response").end("error");
}
