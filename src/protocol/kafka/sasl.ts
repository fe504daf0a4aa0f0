/**
 * SaslHandshake v0–1 and SaslAuthenticate v0 (Kafka's `SaslHandshake*.json`,
 * `SaslAuthenticate*.json`) and the PLAIN token (RFC 4616):
 *
 * ```
 * SaslHandshake request v0–1   = mechanism string
 * SaslHandshake response v0–1  = error_code int16 | mechanisms [string]
 * SaslAuthenticate request v0  = auth_bytes bytes
 * SaslAuthenticate response v0 = error_code int16 | error_message nullable string | auth_bytes bytes
 * PLAIN token                  = authzid UTF-8 | NUL | authcid UTF-8 | NUL | passwd UTF-8
 * ```
 */
import { finishFrame, startResponse } from "./header.ts";
import { KafkaReader, type KafkaWriter } from "./wire.ts";

/** Longest SaslAuthenticate token accepted, in bytes (a PLAIN token of an API key is far smaller). */
export const saslTokenBytesMax = 1024;

/** Decodes a SaslHandshake request: the mechanism name. */
export function decodeSaslHandshakeRequest(body: Uint8Array): { mechanism: string } {
  const r = new KafkaReader(body, "SaslHandshake request");
  const mechanism = r.string("mechanism");
  r.end();
  return { mechanism };
}

/** Writes a SaslHandshake request body (the client side: tests, benchmarks). */
export function writeSaslHandshakeRequest(w: KafkaWriter, mechanism: string): void {
  w.string(mechanism);
}

/** Decodes a SaslHandshake response (the client side). */
export function decodeSaslHandshakeResponse(body: Uint8Array): {
  errorCode: number;
  mechanisms: string[];
} {
  const r = new KafkaReader(body, "SaslHandshake response");
  const errorCode = r.int16("error_code");
  const mechanisms = r.array("mechanisms", 2, () => r.string("mechanism"));
  r.end();
  return { errorCode, mechanisms };
}

/** Encodes a SaslHandshake response. */
export function encodeSaslHandshakeResponse(
  correlationId: number,
  p: { errorCode: number; mechanisms: string[] },
): Uint8Array {
  const w = startResponse(correlationId, 32);
  w.int16(p.errorCode).array(p.mechanisms, (m) => w.string(m));
  return finishFrame(w);
}

/** Decodes a SaslAuthenticate v0 request: the token (a view; a secret, never logged). */
export function decodeSaslAuthenticateRequest(body: Uint8Array): { authBytes: Uint8Array } {
  const r = new KafkaReader(body, "SaslAuthenticate v0 request");
  const authBytes = r.bytes("auth_bytes");
  r.end();
  return { authBytes };
}

/** Writes a SaslAuthenticate v0 request body (the client side). */
export function writeSaslAuthenticateRequest(w: KafkaWriter, authBytes: Uint8Array): void {
  w.bytes(authBytes);
}

/** Decodes a SaslAuthenticate v0 response (the client side). */
export function decodeSaslAuthenticateResponse(body: Uint8Array): {
  errorCode: number;
  errorMessage: string | null;
} {
  const r = new KafkaReader(body, "SaslAuthenticate v0 response");
  const errorCode = r.int16("error_code");
  const errorMessage = r.nullableString("error_message");
  r.bytes("auth_bytes");
  r.end();
  return { errorCode, errorMessage };
}

/** Encodes a SaslAuthenticate v0 response (auth_bytes empty). */
export function encodeSaslAuthenticateResponse(
  correlationId: number,
  p: { errorCode: number; errorMessage: string | null },
): Uint8Array {
  const w = startResponse(correlationId, 64);
  w.int16(p.errorCode).string(p.errorMessage).bytes(new Uint8Array(0));
  return finishFrame(w);
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Splits a PLAIN token into its three parts. Returns null for anything malformed: not exactly two
 * NULs, over {@link saslTokenBytesMax}, invalid UTF-8, an empty user or password, or an authzid
 * that is neither empty nor the user (no impersonation: docs/kafka.md "SASL/PLAIN and API keys").
 */
export function parsePlainToken(token: Uint8Array): { user: string; password: string } | null {
  if (token.length > saslTokenBytesMax) return null;
  const first = token.indexOf(0);
  if (first < 0) return null;
  const second = token.indexOf(0, first + 1);
  if (second < 0 || token.indexOf(0, second + 1) >= 0) return null;
  let authzid: string;
  let user: string;
  let password: string;
  try {
    authzid = strictUtf8.decode(token.subarray(0, first));
    user = strictUtf8.decode(token.subarray(first + 1, second));
    password = strictUtf8.decode(token.subarray(second + 1));
  } catch {
    return null;
  }
  if (user.length === 0 || password.length === 0) return null;
  if (authzid.length > 0 && authzid !== user) return null;
  return { user, password };
}
