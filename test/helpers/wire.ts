/**
 * Helpers for tests of the TCP wire format (`src/protocol/`, docs/protocol.md): golden frames
 * written as annotated hex, the bodies of request and response frames, and grammar violations.
 */
import { readFileSync } from "node:fs";
import { expect } from "vitest";
import { decodeRequestHeader, decodeResponseHeader } from "../../src/protocol/envelope.ts";
import { ProtocolError } from "../../src/protocol/wire.ts";

/** UTF-8 bytes of `s`. */
export const text = (s: string): Uint8Array => new TextEncoder().encode(s);

/**
 * The hex digits of annotated hex: on each line, the leading whitespace-separated tokens that
 * are hex digits; the first other token starts a comment (as in docs/protocol.md's examples).
 */
export function annotatedHex(annotated: string): string {
  let clean = "";
  for (const line of annotated.split("\n")) {
    for (const token of line.trim().split(/\s+/)) {
      if (!/^[0-9a-f]+$/i.test(token)) break;
      clean += token;
    }
  }
  return clean;
}

/** Bytes from annotated hex ({@link annotatedHex}). @throws Error for an odd number of digits. */
export function hex(annotated: string): Uint8Array {
  const clean = annotatedHex(annotated);
  if (clean.length % 2 !== 0) throw new Error("odd hex");
  return Uint8Array.from(clean.match(/../g) ?? [], (b) => parseInt(b, 16));
}

/** Lower-case hex of `bytes`, for comparing frames with goldens. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString("hex");
}

/**
 * The hex of the example `<!-- example:NAME -->` of docs/protocol.md: the annotated hex of the
 * fenced block that follows the marker.
 */
export function protocolDocExample(name: string): string {
  const doc = readFileSync(new URL("../../docs/protocol.md", import.meta.url), "utf8");
  const marker = doc.indexOf(`<!-- example:${name}`);
  expect(marker, `marker example:${name} in docs/protocol.md`).toBeGreaterThanOrEqual(0);
  const open = doc.indexOf("```", marker);
  const close = doc.indexOf("```", open + 3);
  return annotatedHex(doc.slice(open + 3, close));
}

/** Expects the frame's `length` prefix to count the rest of it. */
function expectLengthPrefix(frame: Uint8Array): void {
  expect(new DataView(frame.buffer, frame.byteOffset).getUint32(0)).toBe(frame.length - 4);
}

/**
 * The body of a whole request frame (after length, api, version, correlation id), checking the
 * length prefix, and the api number when `api` is given.
 */
export function requestBody(frame: Uint8Array, api?: number): Uint8Array {
  expectLengthPrefix(frame);
  const header = decodeRequestHeader(frame.subarray(4));
  if (api !== undefined) expect(header.api).toBe(api);
  return header.body;
}

/** The body of a whole success response frame (after length, correlation id, error 0). */
export function responseBody(frame: Uint8Array): Uint8Array {
  expectLengthPrefix(frame);
  const header = decodeResponseHeader(frame.subarray(4));
  expect(header.error).toBe(0);
  return header.body;
}

/** The ProtocolError `fn` throws. @throws Error if it throws anything else, or nothing. */
export function protocolError(fn: () => unknown): ProtocolError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ProtocolError) return error;
    throw new Error(`expected a ProtocolError, got ${String(error)}`);
  }
  throw new Error("expected a ProtocolError, nothing was thrown");
}
