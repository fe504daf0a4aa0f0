import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  DecodeStatus,
  EntryBatchBuilder,
  EntryCursor,
  RecordCursor,
  RecordFormatError,
  checkEntryTimestamps,
  encodeEntries,
  encodeRecord,
  scanEntries,
} from "../../src/storage/record.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { recordLenMax } from "../../src/lib/limits.ts";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const unhex = (text: string) => new Uint8Array(Buffer.from(text.replace(/\s+/g, ""), "hex"));

// Built by hand from the spec's table: offset 5, timestamp 1000, key "k", value "hi".
// CRC-32 (IEEE) of offset…value computed independently (python zlib.crc32): 0x1d766fc8.
const golden = unhex(
  "0000001f" +
    "0000000000000005" +
    "00000000000003e8" +
    "00000001" +
    "6b" +
    "00000002" +
    "6869" +
    "1d766fc8",
);
// Layout: record_len 0x1f (31) | offset 5 | timestamp_ms 1000 | key_len 1, "k" | value_len 2, "hi" | crc32.

describe("record codec", () => {
  it("encodes one record exactly as the spec's table, byte for byte", () => {
    const bytes = encodeRecord({ offset: 5, timestampMs: 1000, key: utf8("k"), value: utf8("hi") });
    expect(hex(bytes)).toBe(hex(golden));
    expect(bytes.length).toBe(35);
  });

  it("encodes a keyless tombstone with key_len -1 and value_len 0", () => {
    const bytes = encodeRecord({ offset: 7, timestampMs: 1, key: null, value: new Uint8Array(0) });
    expect(hex(bytes)).toBe(
      "0000001c" + "0000000000000007" + "0000000000000001" + "ffffffff" + "00000000" + "0ef582be",
    );
  });

  it("decodes the golden record into its fields without copying", () => {
    const cursor = new RecordCursor().reset(golden);
    expect(cursor.decode(0)).toBe(DecodeStatus.Ok);
    expect(cursor.offset).toBe(5);
    expect(cursor.timestampMs).toBe(1000);
    expect(Buffer.from(cursor.key()!).toString()).toBe("k");
    expect(Buffer.from(cursor.value()).toString()).toBe("hi");
    expect(cursor.sizeBytes).toBe(35);
    expect(cursor.value().buffer).toBe(golden.buffer);
  });

  it("tells the empty key (key_len 0) from no key (key_len -1)", () => {
    const empty = encodeRecord({
      offset: 0,
      timestampMs: 0,
      key: new Uint8Array(0),
      value: utf8("v"),
    });
    const none = encodeRecord({ offset: 0, timestampMs: 0, key: null, value: utf8("v") });
    const c = new RecordCursor();
    c.reset(empty).decode(0);
    expect(c.key()).toEqual(new Uint8Array(0));
    c.reset(none).decode(0);
    expect(c.key()).toBeNull();
  });

  it("rejects a flipped byte anywhere in the record", () => {
    for (let i = 0; i < golden.length; i++) {
      const bad = golden.slice();
      bad[i] ^= 0x01;
      const status = new RecordCursor().reset(bad).decode(0);
      expect(status, `byte ${i}`).not.toBe(DecodeStatus.Ok);
    }
  });

  it("checks record_len before anything else: 0xFFFFFFFF and 27 are invalid, a short buffer is incomplete", () => {
    const huge = golden.slice();
    huge.set([0xff, 0xff, 0xff, 0xff], 0);
    const c = new RecordCursor();
    expect(c.reset(huge).decode(0)).toBe(DecodeStatus.Invalid);
    expect(c.reason).toMatch(/record_len/);
    const small = golden.slice();
    small.set([0, 0, 0, 27], 0);
    expect(c.reset(small).decode(0)).toBe(DecodeStatus.Invalid);
    expect(c.reset(golden.subarray(0, 34)).decode(0)).toBe(DecodeStatus.Incomplete);
    expect(c.reset(golden.subarray(0, 3)).decode(0)).toBe(DecodeStatus.Incomplete);
  });

  it("rejects key_len -2 and a key_len that overruns record_len", () => {
    const c = new RecordCursor();
    const minus2 = golden.slice();
    minus2.set([0xff, 0xff, 0xff, 0xfe], 20);
    expect(c.reset(minus2).decode(0)).toBe(DecodeStatus.Invalid);
    expect(c.reason).toMatch(/key_len -2/);
    const long = golden.slice();
    long.set([0, 0, 0, 9], 20);
    expect(c.reset(long).decode(0)).toBe(DecodeStatus.Invalid);
  });

  it("round-trips any batch of records through entries, storage and the cursor", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            key: fc.option(fc.uint8Array({ maxLength: 40 })),
            value: fc.uint8Array({ maxLength: 300 }),
            ts: fc.integer({ min: -1, max: 2 ** 42 }),
          }),
          { maxLength: 30 },
        ),
        fc.integer({ min: 0, max: 2 ** 50 }),
        (records, base) => {
          const builder = new EntryBatchBuilder(16);
          for (const r of records) builder.add(r.key, r.value, r.ts);
          const batch = builder.build();
          expect(scanEntries(batch.bytes)).toBe(records.length);
          const out = new Uint8Array(batch.bytes.length + batch.count * 16);
          const positions: number[] = [];
          encodeEntries(batch, out, {
            outPos: 0,
            baseOffset: base,
            nowMs: 777,
            onRecord: (_o, p) => positions.push(p),
          });
          const c = new RecordCursor().reset(out);
          let p = 0;
          records.forEach((r, i) => {
            expect(positions[i]).toBe(p);
            expect(c.decode(p)).toBe(DecodeStatus.Ok);
            expect(c.offset).toBe(base + i);
            expect(c.timestampMs).toBe(r.ts === -1 ? 777 : r.ts);
            expect(c.key()).toEqual(r.key);
            expect(c.value()).toEqual(r.value);
            p += c.sizeBytes;
          });
          expect(p).toBe(out.length);
        },
      ),
    );
  });

  it("never accepts random bytes as anything but Invalid or Incomplete unless the CRC matches", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 200 }), (bytes) => {
        const c = new RecordCursor().reset(bytes);
        const s = c.decode(0);
        if (s === DecodeStatus.Ok) expect(c.sizeBytes).toBeLessThanOrEqual(bytes.length);
      }),
    );
  });
});

describe("entry batches", () => {
  it("scanEntries names the record and field that is wrong", () => {
    const ok = new EntryBatchBuilder().add(utf8("a"), utf8("b")).add(null, utf8("c")).build();
    expect(scanEntries(ok.bytes)).toBe(2);
    const truncated = ok.bytes.subarray(0, ok.bytes.length - 1);
    expect(() => scanEntries(truncated)).toThrow(/record 1 .*value_len/);
    const badKey = ok.bytes.slice();
    new DataView(badKey.buffer).setInt32(8, -5);
    expect(() => scanEntries(badKey)).toThrow(/record 0 has key_len -5/);
    const badTs = ok.bytes.slice();
    new DataView(badTs.buffer).setBigInt64(0, -2n);
    expect(() => scanEntries(badTs)).toThrow(RecordFormatError);
    expect(() => scanEntries(new Uint8Array(5))).toThrow(/truncated/);
  });

  it("scanEntries refuses a claimed value length over the record limit without allocating it", () => {
    const b = new Uint8Array(16);
    new DataView(b.buffer).setInt32(8, -1);
    new DataView(b.buffer).setUint32(12, recordLenMax * 2);
    expect(() => scanEntries(b)).toThrow(/over the limit/);
  });

  it("EntryCursor walks keys and bounds in order", () => {
    const batch = new EntryBatchBuilder()
      .add(utf8("k1"), utf8("v"))
      .add(null, utf8("vv"))
      .add(new Uint8Array(0), utf8(""))
      .build();
    const c = new EntryCursor(batch);
    const keys: (string | null)[] = [];
    while (c.next()) keys.push(c.key() === null ? null : Buffer.from(c.key()!).toString());
    expect(keys).toEqual(["k1", null, ""]);
    expect(c.end).toBe(batch.bytes.length);
  });

  it("checkEntryTimestamps refuses timestamps too far ahead of the clock", () => {
    const batch = new EntryBatchBuilder()
      .add(null, utf8("a"), 1000)
      .add(null, utf8("b"), 5000)
      .build();
    let reads = 0;
    const now = () => {
      reads++;
      return 1000;
    };
    expect(() => checkEntryTimestamps(batch, now, 3999)).toThrow(/record 1 .*ahead.*\(1000\)/);
    expect(() => checkEntryTimestamps(batch, now, 4000)).not.toThrow();
    // The clock is read once per batch.
    expect(reads).toBe(2);
  });

  it("checkEntryTimestamps reads no clock for records stamped by the broker (-1), and still refuses below -1", () => {
    const stamped = new EntryBatchBuilder().add(null, utf8("a")).add(null, utf8("b")).build();
    const unread = () => {
      throw new Error("the clock was read");
    };
    expect(() => checkEntryTimestamps(stamped, unread, 0)).not.toThrow();
    const mixed = new EntryBatchBuilder().add(null, utf8("a")).add(null, utf8("b"), 7000).build();
    let reads = 0;
    const now = () => {
      reads++;
      return 1000;
    };
    expect(() => checkEntryTimestamps(mixed, now, 100)).toThrow(/record 1 .*ahead/);
    expect(reads).toBe(1);
    // One entry (no key, empty value) whose timestamp is -2.
    const bad = { bytes: new Uint8Array(16), count: 1 };
    const view = new DataView(bad.bytes.buffer);
    view.setBigInt64(0, -2n);
    view.setInt32(8, -1);
    expect(() => checkEntryTimestamps(bad, unread, 0)).toThrow(/record 0 has timestamp -2/);
  });
});
