import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { crc32IsNative, crc32Portable, setCrc32Implementation } from "../../src/lib/crc32.ts";
import { installFastCrc32 } from "../../src/runtime/crc.ts";
import type { FetchResult } from "../../src/broker/types.ts";
import { ClientError } from "../../src/client/errors.ts";
import {
  checkFetchedRecordChunks,
  checkFetchedRecords,
  decodeFetchedRecords,
  FetchedRecordCursor,
} from "../../src/client/records.ts";
import { encodeRecord } from "../../src/storage/record.ts";

const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array | null) => (b === null ? null : new TextDecoder().decode(b));

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function result(bytes: Uint8Array, count: number, nextOffset: number): FetchResult {
  return { records: { bytes, count }, nextOffset, highWatermark: nextOffset, logStartOffset: 0 };
}

/** Records at offsets 7, 8 and 2^40 with no key, the empty key, a key; a tombstone; a large timestamp. */
function sample(): FetchResult {
  const bytes = concat(
    encodeRecord({ offset: 7, timestampMs: 1_700_000_000_000, key: null, value: text("no key") }),
    encodeRecord({
      offset: 8,
      timestampMs: 2 ** 40 + 3,
      key: new Uint8Array(0),
      value: text("empty key"),
    }),
    encodeRecord({ offset: 2 ** 40, timestampMs: 0, key: text("k"), value: new Uint8Array(0) }),
  );
  return result(bytes, 3, 2 ** 40 + 1);
}

function invalid(fn: () => unknown): ClientError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ClientError);
    expect((error as ClientError).code).toBe("invalid_response");
    return error as ClientError;
  }
  throw new Error("expected invalid_response");
}

// Portable CRC-32: each record checked on its own; the runtime's native one: each run of records
// checked in one pass (`recordCrcsMatch`), record by record again only to name a bad one.
for (const native of [false, true])
  describe(`fetched records${native ? ", CRCs checked together (native CRC-32)" : ""}`, () => {
    beforeAll(() => {
      if (native) installFastCrc32();
      expect(crc32IsNative()).toBe(native);
    });
    afterAll(() => setCrc32Implementation(crc32Portable));

    it("a cursor walks checked records with offsets, time stamps, keys and values as decodeFetchedRecords gives them", () => {
      const fetched = sample();
      checkFetchedRecords(fetched, 7);
      const seen: unknown[] = [];
      for (const c = new FetchedRecordCursor(fetched.records); c.next(); ) {
        seen.push([
          c.offset,
          c.timestampMs,
          c.keyLength,
          str(c.key()),
          c.valueLength,
          str(c.value()),
        ]);
      }
      expect(seen).toEqual([
        [7, 1_700_000_000_000, -1, null, 6, "no key"],
        [8, 2 ** 40 + 3, 0, "", 9, "empty key"],
        [2 ** 40, 0, 1, "k", 0, ""],
      ]);
      expect(
        decodeFetchedRecords(fetched, 7).map((r) => [
          r.offset,
          r.timestampMs,
          str(r.key),
          str(r.value),
        ]),
      ).toEqual([
        [7, 1_700_000_000_000, null, "no key"],
        [8, 2 ** 40 + 3, "", "empty key"],
        [2 ** 40, 0, "k", ""],
      ]);
    });

    it("keys and values from the cursor are views of the response bytes, not copies", () => {
      const fetched = sample();
      const c = new FetchedRecordCursor(fetched.records);
      expect(c.next()).toBe(true);
      expect(c.value().buffer).toBe(fetched.records.bytes.buffer);
      expect(c.next() && c.next()).toBe(true);
      expect(c.key()!.buffer).toBe(fetched.records.bytes.buffer);
      expect(c.next()).toBe(false);
      expect(c.next()).toBe(false);
    });

    it("a cursor over no records stops at once", () => {
      expect(new FetchedRecordCursor({ bytes: new Uint8Array(0), count: 0 }).next()).toBe(false);
      expect(() => checkFetchedRecords(result(new Uint8Array(0), 0, 4), 4)).not.toThrow();
    });

    it("a flipped byte anywhere in a record's checked range fails its CRC, naming the record", () => {
      const fetched = sample();
      const first = encodeRecord({
        offset: 7,
        timestampMs: 1_700_000_000_000,
        key: null,
        value: text("no key"),
      }).length;
      for (const at of [4, 12, 20, first - 5, first + 4, fetched.records.bytes.length - 5]) {
        const bytes = fetched.records.bytes.slice();
        bytes[at] ^= 0x40;
        const error = invalid(() => checkFetchedRecords(result(bytes, 3, 2 ** 40 + 1), 7));
        expect(error.message).toMatch(/fetched record [0-2]/);
      }
    });

    it("refuses offsets below the request, not increasing, or at next_offset, and counts that disagree with the bytes", () => {
      const fetched = sample();
      expect(invalid(() => checkFetchedRecords(fetched, 8)).message).toContain("does not follow");
      expect(
        invalid(() => checkFetchedRecords(result(fetched.records.bytes, 3, 2 ** 40), 7)).message,
      ).toContain("next_offset");
      expect(
        invalid(() => checkFetchedRecords(result(fetched.records.bytes, 2, 2 ** 40 + 1), 7))
          .message,
      ).toContain("bytes follow");
      invalid(() => checkFetchedRecords(result(fetched.records.bytes, 4, 2 ** 40 + 1), 7));
      const twice = concat(
        encodeRecord({ offset: 3, timestampMs: 1, key: null, value: text("a") }),
        encodeRecord({ offset: 3, timestampMs: 1, key: null, value: text("b") }),
      );
      expect(invalid(() => checkFetchedRecords(result(twice, 2, 4), 0)).message).toContain(
        "does not follow",
      );
      expect(
        invalid(() => checkFetchedRecords(result(new Uint8Array(0), 0, 2), 3)).message,
      ).toContain("below the requested offset");
    });

    it("records that arrived in chunks read the same at every split, with each straddling record copied whole", () => {
      const fetched = sample();
      const bytes = fetched.records.bytes;
      const expected = decodeFetchedRecords(fetched, 7).map((r) => [
        r.offset,
        r.timestampMs,
        str(r.key),
        str(r.value),
      ]);
      for (let a = 1; a < bytes.length; a++) {
        for (const b of [a, Math.min(bytes.length, a + 1), Math.min(bytes.length, a + 30)]) {
          const chunks = [bytes.subarray(0, a), bytes.subarray(a, b), bytes.subarray(b)].filter(
            (c) => c.length > 0,
          );
          const runs = checkFetchedRecordChunks(chunks, fetched, 7);
          expect(runs.reduce((n, r) => n + r.count, 0)).toBe(3);
          for (const run of runs)
            expect(checkFetchedRecords({ ...fetched, records: run }, 0)).toBeUndefined();
          const seen: unknown[] = [];
          for (const c = new FetchedRecordCursor(runs); c.next(); )
            seen.push([c.offset, c.timestampMs, str(c.key()), str(c.value())]);
          expect(seen, `split at ${a}, ${b}`).toEqual(expected);
        }
      }
    });

    it("records in chunks keep every check: a flipped byte, a short tail, extra bytes, a bad record_len across the edge", () => {
      const fetched = sample();
      const bytes = fetched.records.bytes;
      for (let a = 1; a < bytes.length; a += 7) {
        const flipped = bytes.slice();
        flipped[a] ^= 0x01;
        invalid(() =>
          checkFetchedRecordChunks([flipped.subarray(0, a), flipped.subarray(a)], fetched, 7),
        );
        const short = bytes.subarray(0, bytes.length - 1);
        invalid(() =>
          checkFetchedRecordChunks(
            [
              short.subarray(0, Math.min(a, short.length - 1)),
              short.subarray(Math.min(a, short.length - 1)),
            ],
            fetched,
            7,
          ),
        );
        const extra = new Uint8Array(bytes.length + 3);
        extra.set(bytes);
        expect(
          invalid(() =>
            checkFetchedRecordChunks([extra.subarray(0, a), extra.subarray(a)], fetched, 7),
          ).message,
        ).toContain("bytes follow");
      }
      const huge = bytes.slice();
      new DataView(huge.buffer).setUint32(0, 0xffff_fff0);
      expect(
        invalid(() => checkFetchedRecordChunks([huge.subarray(0, 2), huge.subarray(2)], fetched, 7))
          .message,
      ).toContain("record_len");
    });
  });
