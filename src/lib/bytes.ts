/** Small helpers for big-endian integers and byte buffers shared by storage and protocol codecs. */

/** Writes a non-negative safe integer as a big-endian u64 at `pos`. */
export function writeU64(view: DataView, pos: number, value: number): void {
  view.setUint32(pos, Math.floor(value / 0x1_0000_0000));
  view.setUint32(pos + 4, value >>> 0);
}

/**
 * Reads a big-endian u64 at `pos`. Returns a number; values above 2^53 − 1 come back as
 * `Number.NaN`-free but inexact numbers, so callers that accept offsets must check them against
 * `offsetMax` (docs/decisions.md §6).
 */
export function readU64(view: DataView, pos: number): number {
  return view.getUint32(pos) * 0x1_0000_0000 + view.getUint32(pos + 4);
}

/** Writes a safe integer (possibly negative) as a big-endian two's-complement i64 at `pos`. */
export function writeI64(view: DataView, pos: number, value: number): void {
  view.setBigInt64(pos, BigInt(value));
}

/** Reads a big-endian i64 at `pos`; callers must reject values outside the safe-integer range. */
export function readI64(view: DataView, pos: number): number {
  const hi = view.getInt32(pos);
  const lo = view.getUint32(pos + 4);
  return hi * 0x1_0000_0000 + lo;
}

/** A DataView over exactly the bytes of `bytes`. */
export function viewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Concatenates byte arrays into one new buffer. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const p of parts) total += p.length;
  const out = new Uint8Array(total);
  let pos = 0;
  for (const p of parts) {
    out.set(p, pos);
    pos += p.length;
  }
  return out;
}

/** True if two byte arrays hold the same bytes. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

/** UTF-8 encodes a string. */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** Decodes UTF-8 (invalid sequences become U+FFFD). */
export function fromUtf8(bytes: Uint8Array): string {
  return decoder.decode(bytes);
}

/** Formats an offset as the 20-digit, zero-padded segment file name stem. */
export function offsetFileStem(offset: number): string {
  return String(offset).padStart(20, "0");
}
