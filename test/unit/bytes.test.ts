import { describe, expect, it } from "vitest";
import {
  i32At,
  i64At,
  readI64,
  setI64At,
  setU32At,
  setU64At,
  u16At,
  u32At,
  writeI64,
} from "../../src/lib/bytes.ts";

// The byte-level readers and writers must agree with DataView (big-endian) on every edge value,
// at an offset inside a larger buffer.
const i64Values = [
  0,
  1,
  -1,
  255,
  256,
  0x7fff_ffff,
  0x8000_0000,
  0xffff_ffff,
  0x1_0000_0000,
  -0x8000_0000,
  -0x8000_0001,
  -0x1_0000_0000,
  1_796_184_000_123,
  Number.MAX_SAFE_INTEGER,
  Number.MIN_SAFE_INTEGER,
];

describe("big-endian integers on bytes", () => {
  it("reads u16, i32 and u32 as DataView does", () => {
    const bytes = new Uint8Array(16).map((_, i) => (i * 37 + 200) & 0xff);
    const view = new DataView(bytes.buffer);
    for (let pos = 0; pos <= 12; pos++) {
      expect(u16At(bytes, pos)).toBe(view.getUint16(pos));
      expect(i32At(bytes, pos)).toBe(view.getInt32(pos));
      expect(u32At(bytes, pos)).toBe(view.getUint32(pos));
    }
  });

  it("writes u32 and u64 as DataView does", () => {
    for (const value of [0, 1, 0x7f, 0x80, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff]) {
      const bytes = new Uint8Array(8);
      setU32At(bytes, 3, value);
      expect(new DataView(bytes.buffer).getUint32(3)).toBe(value);
    }
    for (const value of [0, 1, 0xffff_ffff, 0x1_0000_0000, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER]) {
      const bytes = new Uint8Array(12);
      setU64At(bytes, 2, value);
      expect(new DataView(bytes.buffer).getBigUint64(2)).toBe(BigInt(value));
    }
  });

  it("writes and reads i64 as BigInt64 does, negatives included", () => {
    for (const value of i64Values) {
      const bytes = new Uint8Array(12);
      setI64At(bytes, 3, value);
      const view = new DataView(bytes.buffer);
      expect(view.getBigInt64(3)).toBe(BigInt(value));
      expect(i64At(bytes, 3)).toBe(value);
      expect(readI64(view, 3)).toBe(value);
      const other = new DataView(new ArrayBuffer(12));
      writeI64(other, 3, value);
      expect(other.getBigInt64(3)).toBe(BigInt(value));
    }
  });
});
