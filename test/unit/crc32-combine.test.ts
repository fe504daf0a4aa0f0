/**
 * CRC-32 combination (`src/lib/crc32.ts`: `crc32Shift`, `crc32Combine`, `crc32ContinueRange`)
 * against the CRC of the concatenated bytes, across the shift tables' digit boundaries and past
 * them (the bit-by-bit path above 16 MiB); and `recordCrcsMatch` (`src/storage/record.ts`), the
 * check of many stored records' CRCs with one CRC over their range: true for good records, false
 * for any damaged byte, whichever record it is in.
 */
import { describe, expect, it } from "vitest";
import { Prng } from "../../src/lib/prng.ts";
import {
  crc32,
  crc32Combine,
  crc32ContinueRange,
  crc32Portable,
  crc32Shift,
} from "../../src/lib/crc32.ts";
import { recordOverEntryBytes } from "../../src/lib/limits.ts";
import {
  DecodeStatus,
  EntryBatchBuilder,
  RecordCursor,
  encodeEntries,
  recordCrcsMatch,
} from "../../src/storage/record.ts";

function randomBytes(prng: Prng, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = prng.int(256);
  return out;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Stored records (offsets from 100) of random keys and values of up to `valueBytesMax` bytes. */
function storedRecords(prng: Prng, count: number, valueBytesMax: number): Uint8Array {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++)
    b.add(
      prng.int(3) === 0 ? null : randomBytes(prng, prng.int(20)),
      randomBytes(prng, prng.int(valueBytesMax)),
      1_700_000_000_000 + i,
    );
  const batch = b.build();
  const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
  encodeEntries(batch, bytes, { outPos: 0, baseOffset: 100, nowMs: 5 });
  return bytes;
}

describe("crc32Combine", () => {
  it("gives the CRC of the concatenation, across every digit boundary of the shift tables", () => {
    const prng = new Prng(7);
    const lengths = [
      0, 1, 2, 3, 7, 8, 63, 64, 65, 127, 4095, 4096, 4097, 262_143, 262_144, 300_001,
    ];
    for (const lengthB of lengths) {
      for (const lengthA of [0, 1, 33]) {
        const a = randomBytes(prng, lengthA);
        const b = randomBytes(prng, lengthB);
        const whole = crc32Portable(concat(a, b));
        expect(
          crc32Combine(crc32Portable(a), crc32Portable(b), lengthB),
          `${lengthA}+${lengthB}`,
        ).toBe(whole);
      }
    }
  });

  it("shifts past the tables' 16 MiB bit by bit, and continues over a range in place", () => {
    const prng = new Prng(8);
    const a = randomBytes(prng, 100);
    const zeros = new Uint8Array(2 ** 24 + 5);
    expect(crc32Shift(crc32Portable(a), zeros.length) ^ crc32Portable(zeros)).toBe(
      crc32Portable(concat(a, zeros)) ^ 0,
    );
    const bytes = randomBytes(prng, 500);
    expect(crc32ContinueRange(crc32(bytes, 0, 123), bytes, 123, 500)).toBe(crc32(bytes));
    expect(crc32ContinueRange(0, bytes, 10, 10)).toBe(0);
  });
});

describe("recordCrcsMatch", () => {
  it("is true for good records of every size mix, one record and none included", () => {
    const prng = new Prng(9);
    for (const [count, valueBytesMax] of [
      [0, 1],
      [1, 10],
      [2, 300],
      [50, 5],
      [200, 700],
      [20, 70_000],
    ]) {
      const bytes = storedRecords(prng, count, valueBytesMax);
      expect(recordCrcsMatch(bytes, 0, bytes.length), `${count} × ${valueBytesMax}`).toBe(true);
    }
  });

  it("is false for a damaged byte anywhere, and the record-by-record check finds that record", () => {
    const prng = new Prng(10);
    const bytes = storedRecords(prng, 40, 60);
    const cursor = new RecordCursor();
    for (let round = 0; round < 400; round++) {
      const damaged = bytes.slice();
      const at = prng.int(damaged.length);
      damaged[at] ^= 1 << prng.int(8);
      expect(recordCrcsMatch(damaged, 0, damaged.length), `byte ${at}`).toBe(false);
      cursor.reset(damaged);
      let pos = 0;
      let status: DecodeStatus = DecodeStatus.Ok;
      while (pos < damaged.length && (status = cursor.decode(pos)) === DecodeStatus.Ok)
        pos += cursor.sizeBytes;
      expect(status, `byte ${at}`).not.toBe(DecodeStatus.Ok);
    }
  });

  it("is false for a range that does not hold whole plausible records", () => {
    const bytes = storedRecords(new Prng(11), 5, 30);
    expect(recordCrcsMatch(bytes, 0, bytes.length - 1)).toBe(false);
    expect(recordCrcsMatch(bytes, 1, bytes.length)).toBe(false);
    expect(recordCrcsMatch(new Uint8Array(3), 0, 3)).toBe(false);
    expect(recordCrcsMatch(bytes, 7, 7)).toBe(true);
  });
});
