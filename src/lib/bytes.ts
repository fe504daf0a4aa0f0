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

/**
 * Writes a safe integer (possibly negative) as a big-endian two's-complement i64 at `pos`, as
 * two 32-bit halves (no BigInt allocated per call).
 */
export function writeI64(view: DataView, pos: number, value: number): void {
  const hi = Math.floor(value / 0x1_0000_0000);
  view.setInt32(pos, hi);
  view.setUint32(pos + 4, value - hi * 0x1_0000_0000);
}

/** Reads a big-endian i64 at `pos`; callers must reject values outside the safe-integer range. */
export function readI64(view: DataView, pos: number): number {
  const hi = view.getInt32(pos);
  const lo = view.getUint32(pos + 4);
  return hi * 0x1_0000_0000 + lo;
}

// Big-endian integers read and written on the bytes themselves, for hot paths that would
// otherwise make a DataView per call (a DataView is an allocation and a runtime call each:
// docs/benchmarks.md "Small requests (issue #22)").

/** Reads a big-endian u16 at `pos` of `bytes` (pos + 2 ≤ length, unchecked). */
export function u16At(bytes: Uint8Array, pos: number): number {
  return (bytes[pos] << 8) | bytes[pos + 1];
}

/** Reads a big-endian two's-complement i32 at `pos` of `bytes` (pos + 4 ≤ length, unchecked). */
export function i32At(bytes: Uint8Array, pos: number): number {
  return (bytes[pos] << 24) | (bytes[pos + 1] << 16) | (bytes[pos + 2] << 8) | bytes[pos + 3];
}

/** Reads a big-endian u32 at `pos` of `bytes` (pos + 4 ≤ length, unchecked). */
export function u32At(bytes: Uint8Array, pos: number): number {
  return i32At(bytes, pos) >>> 0;
}

/** Reads a big-endian i64 at `pos` of `bytes`, as {@link readI64} (pos + 8 ≤ length, unchecked). */
export function i64At(bytes: Uint8Array, pos: number): number {
  return i32At(bytes, pos) * 0x1_0000_0000 + u32At(bytes, pos + 4);
}

/** Writes `value` (taken mod 2^32) as a big-endian u32 at `pos` of `bytes`. */
export function setU32At(bytes: Uint8Array, pos: number, value: number): void {
  bytes[pos] = value >>> 24;
  bytes[pos + 1] = value >>> 16;
  bytes[pos + 2] = value >>> 8;
  bytes[pos + 3] = value;
}

/** Writes a non-negative safe integer as a big-endian u64 at `pos` of `bytes`. */
export function setU64At(bytes: Uint8Array, pos: number, value: number): void {
  setU32At(bytes, pos, Math.floor(value / 0x1_0000_0000));
  setU32At(bytes, pos + 4, value >>> 0);
}

/** Writes a safe integer (possibly negative) as a big-endian two's-complement i64 at `pos` of `bytes`. */
export function setI64At(bytes: Uint8Array, pos: number, value: number): void {
  const hi = Math.floor(value / 0x1_0000_0000);
  setU32At(bytes, pos, hi);
  setU32At(bytes, pos + 4, value - hi * 0x1_0000_0000);
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
