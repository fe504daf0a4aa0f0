/**
 * api 13 Authenticate, version 0: authenticates the connection with an API key
 * (`ApiConnection.authenticate`; `docs/protocol.md`, "13 Authenticate"; `docs/security.md`).
 *
 * ```
 * request       = key str16             the API key, esb_<id>_<secret> (64 characters; refused
 *                                       past 256 bytes)
 * response      = key_id str16          the key's id part
 *                 name str16            the key's name
 *                 role str16            "admin", "producer" or "consumer"
 * ```
 *
 * The rules around it live in the transport (`transport/tcp/transport.ts`): while the broker has
 * keys it must be the first request on a connection, frames before it may be at most
 * `authenticateFrameBytesMax` (1 KiB), and a refused key closes the connection. The key is a
 * secret: nothing here logs it, and no error message quotes it.
 */
import { Errors } from "../../broker/errors.ts";
import { utf8 } from "../../lib/bytes.ts";
import { apiKeyTextBytesMax } from "../../lib/limits.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { ProtocolError, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** Who the broker took the key for (the response). */
export interface AuthenticateResult {
  keyId: string;
  name: string;
  role: string;
}

/** Authenticate: decode, `connection.authenticate`, encode. */
export const authenticateApi = defineApi({
  key: 13,
  name: "Authenticate",
  versionMax: 0,
  serve(body, correlationId, connection) {
    const { key } = decodeAuthenticateRequest(body);
    const result = connection.authenticate(key);
    return { response: Promise.resolve(encodeAuthenticateResponse(correlationId, result)) };
  },
});

/**
 * Encodes an Authenticate request frame.
 * @throws ProtocolError `invalid_request` if the key is over {@link apiKeyTextBytesMax} bytes (the message does not show it).
 */
export function encodeAuthenticateRequest(correlationId: number, key: string): Uint8Array {
  const bytes = utf8(key);
  if (bytes.length > apiKeyTextBytesMax)
    throw new ProtocolError(
      Errors.invalidRequest,
      "authenticate.key",
      `Cannot encode Authenticate request: the key is ${bytes.length} bytes, at most ${apiKeyTextBytesMax} are allowed`,
    );
  const w = startRequest(authenticateApi.key, correlationId, 12 + 2 + bytes.length);
  w.u16(bytes.length).bytes(bytes);
  return finishFrame(w);
}

/**
 * Decodes an Authenticate request body to the key text. The text is a secret: the caller must
 * not log it, and no error here quotes it.
 * @throws ProtocolError `invalid_request` for a malformed body or a key over {@link apiKeyTextBytesMax} bytes.
 */
export function decodeAuthenticateRequest(body: Uint8Array): { key: string } {
  const r = new WireReader(body, "Authenticate request");
  const length = r.u16("key.length");
  if (length > apiKeyTextBytesMax)
    throw new ProtocolError(
      Errors.invalidRequest,
      "key",
      `Cannot decode Authenticate request: the key is ${length} bytes, at most ${apiKeyTextBytesMax} are allowed`,
    );
  const bytes = r.bytes("key", length);
  r.end("key");
  let key: string;
  try {
    key = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ProtocolError(
      Errors.invalidRequest,
      "key",
      'Cannot decode Authenticate request: field "key" is not valid UTF-8',
    );
  }
  return { key };
}

/** Encodes an Authenticate response frame. */
export function encodeAuthenticateResponse(
  correlationId: number,
  result: AuthenticateResult,
): Uint8Array {
  const w = startResponse(correlationId, 0, 64);
  w.str16(result.keyId).str16(result.name).str16(result.role);
  return finishFrame(w);
}

/** Decodes an Authenticate response body. @throws ProtocolError `invalid_request` if malformed. */
export function decodeAuthenticateResponse(body: Uint8Array): AuthenticateResult {
  const r = new WireReader(body, "Authenticate response");
  const keyId = r.str16("key_id");
  const name = r.str16("name");
  const role = r.str16("role");
  r.end("role");
  return { keyId, name, role };
}
