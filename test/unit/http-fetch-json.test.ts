/**
 * The fetch answer written into one buffer (`src/transport/http/fetch-json.ts`) is byte for byte
 * `JSON.stringify(fetchJson(...))` (`encode.ts`), in both encodings, on generated records: no key,
 * the empty key, printable ASCII, quotes and backslashes, control bytes, multi-byte UTF-8,
 * invalid UTF-8 (U+FFFD), every length modulo 3 for base64, negative and large timestamps. The
 * NDJSON answer is the same record objects, one per line; `acceptsNdjson` picks it from `Accept`.
 * Written a slice at a time (`FetchAnswer`), with keys and values past `fieldPieceBytes` in
 * pieces, the bytes are the same however it is sliced (control bytes, multi-byte and invalid UTF-8,
 * BOMs where a piece starts).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FetchResult } from "../../src/broker/types.ts";
import { Prng } from "../../src/lib/prng.ts";
import { recordOverEntryBytes } from "../../src/lib/limits.ts";
import { EntryBatchBuilder, encodeEntries } from "../../src/storage/record.ts";
import { fetchJson } from "../../src/transport/http/encode.ts";
import { acceptsNdjson } from "../../src/transport/http/app.ts";
import {
  AnswerBuffers,
  answerChunkBytes,
  FetchAnswer,
  fieldPieceBytes,
  fetchJsonBytes,
  fetchNdjsonBytes,
} from "../../src/transport/http/fetch-json.ts";

const samples: Uint8Array[] = [
  new Uint8Array(0),
  new TextEncoder().encode("hello"),
  new TextEncoder().encode('say "hi" \\ back'),
  new TextEncoder().encode("line\nbreak\ttab\u0001\u001f\u007f"),
  new TextEncoder().encode("ünïcødé → 🎉"),
  new Uint8Array([0xff, 0xfe, 0x41, 0xc3]),
  new Uint8Array([0xed, 0xa0, 0x80]),
];

function randomBytes(prng: Prng, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = prng.int(256);
  return out;
}

function result(prng: Prng, count: number): FetchResult {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) {
    const pick = (): Uint8Array =>
      prng.int(3) === 0 ? randomBytes(prng, prng.int(40)) : samples[prng.int(samples.length)];
    const key = prng.int(4) === 0 ? null : pick();
    const ts = [0, 1_700_000_000_123, 8_640_000_000_000_000, 12][prng.int(4)];
    b.add(key, pick(), ts);
  }
  const batch = b.build();
  const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
  const base = [0, 41, 2 ** 53 - 1 - count][prng.int(3)];
  encodeEntries(batch, bytes, { outPos: 0, baseOffset: base, nowMs: 5 });
  return {
    records: { bytes, count },
    nextOffset: base + count,
    highWatermark: base + count + 3,
    logStartOffset: 7,
  };
}

describe("fetchJsonBytes", () => {
  it("writes exactly what JSON.stringify of fetchJson writes, in utf8 and base64", () => {
    const prng = new Prng(22);
    const decoder = new TextDecoder();
    for (let round = 0; round < 300; round++) {
      const r = result(prng, prng.int(30));
      for (const encoding of ["utf8", "base64"] as const) {
        const expected = JSON.stringify(fetchJson(r, encoding));
        expect(decoder.decode(fetchJsonBytes(r, encoding)), `round ${round} ${encoding}`).toBe(
          expected,
        );
      }
    }
  });

  it("copies a value as it is only when every byte may stand in a JSON string, at every position", () => {
    // Every byte value at each place of a 4-byte word, before and in the bytes left after the words.
    const decoder = new TextDecoder();
    for (let b = 0; b < 256; b++) {
      const builder = new EntryBatchBuilder();
      for (let at = 0; at < 11; at++) {
        const value = new TextEncoder().encode("abcdefghijk");
        value[at] = b;
        builder.add(null, value, 1);
      }
      const batch = builder.build();
      const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
      encodeEntries(batch, bytes, { outPos: 0, baseOffset: 2 ** 31 - 5, nowMs: 5 });
      const r: FetchResult = {
        records: { bytes, count: batch.count },
        nextOffset: 2 ** 31 - 5 + batch.count,
        highWatermark: 2 ** 31 + 6,
        logStartOffset: 0,
      };
      expect(decoder.decode(fetchJsonBytes(r, "utf8")), `byte ${b}`).toBe(
        JSON.stringify(fetchJson(r, "utf8")),
      );
    }
  });

  it("escapes every ASCII byte in one value as JSON.stringify does, straight from the bytes", () => {
    const value = new Uint8Array(256);
    for (let i = 0; i < 256; i++) value[i] = i % 128;
    const builder = new EntryBatchBuilder();
    builder.add(value.subarray(0, 40), value, 1);
    const batch = builder.build();
    const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
    encodeEntries(batch, bytes, { outPos: 0, baseOffset: 7, nowMs: 5 });
    const r: FetchResult = {
      records: { bytes, count: 1 },
      nextOffset: 8,
      highWatermark: 8,
      logStartOffset: 0,
    };
    expect(new TextDecoder().decode(fetchJsonBytes(r, "utf8"))).toBe(
      JSON.stringify(fetchJson(r, "utf8")),
    );
  });

  it("stops adding records once the answer passes its bound, naming the first left out (attack10 F5)", () => {
    // Values of control bytes: each byte is six in the answer (\u0001).
    const builder = new EntryBatchBuilder();
    for (let i = 0; i < 8; i++) builder.add(null, new Uint8Array(1000).fill(1), 1);
    const batch = builder.build();
    const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
    encodeEntries(batch, bytes, { outPos: 0, baseOffset: 100, nowMs: 5 });
    const r: FetchResult = {
      records: { bytes, count: batch.count },
      nextOffset: 108,
      highWatermark: 108,
      logStartOffset: 0,
    };
    const decoder = new TextDecoder();
    const whole = JSON.parse(decoder.decode(fetchJsonBytes(r, "utf8")));
    expect(whole.records).toHaveLength(8);
    expect(whole.next_offset).toBe(108);
    // About 6 kB a record: a bound of 13 kB stops after the third record.
    const cut = JSON.parse(decoder.decode(fetchJsonBytes(r, "utf8", 13_000)));
    expect(cut.records.map((x: { offset: number }) => x.offset)).toEqual([100, 101, 102]);
    expect(cut.next_offset).toBe(103);
    expect(cut.records[2]).toEqual(whole.records[2]);
    const lines = fetchNdjsonBytes(r, "utf8", 13_000);
    expect(decoder.decode(lines.bytes).split("\n")).toHaveLength(4);
    expect(lines.nextOffset).toBe(103);
    // One record is always written, whatever the bound.
    const one = JSON.parse(decoder.decode(fetchJsonBytes(r, "utf8", 1)));
    expect(one.records).toHaveLength(1);
    expect(one.next_offset).toBe(101);
  });

  it("refuses stored bytes that do not decode as the records counted, as fetchJson does", () => {
    const r = result(new Prng(1), 3);
    const broken = { ...r, records: { ...r.records, count: 4 } };
    expect(() => fetchJsonBytes(broken, "utf8")).toThrow(/record 3 of 4 does not decode/);
    const extra = { ...r, records: { ...r.records, count: 2 } };
    expect(() => fetchJsonBytes(extra, "base64")).toThrow(/bytes left after 2 fetched records/);
  });
});

describe("fetchNdjsonBytes", () => {
  it("writes one line per record, each the JSON answer's record object, split at every \\n byte", () => {
    const prng = new Prng(2222);
    const decoder = new TextDecoder();
    for (let round = 0; round < 300; round++) {
      const r = result(prng, prng.int(30));
      for (const encoding of ["utf8", "base64"] as const) {
        const { bytes, nextOffset } = fetchNdjsonBytes(r, encoding);
        expect(nextOffset).toBe(r.nextOffset);
        const expected = fetchJson(r, encoding).records;
        // Split on the raw bytes, as a reader that never decodes the whole body would.
        const lines: string[] = [];
        let start = 0;
        for (let i = 0; i < bytes.length; i++) {
          if (bytes[i] !== 0x0a) continue;
          lines.push(decoder.decode(bytes.subarray(start, i)));
          start = i + 1;
        }
        expect(start, `round ${round} ${encoding}: the body ends in a newline`).toBe(bytes.length);
        expect(
          lines.map((l) => JSON.parse(l)),
          `round ${round} ${encoding}`,
        ).toEqual(expected);
        expect(lines, `round ${round} ${encoding}: the same bytes as the JSON answer's`).toEqual(
          expected.map((record) => JSON.stringify(record)),
        );
      }
    }
  });

  it("is empty for no records, and refuses stored bytes that do not decode as counted", () => {
    const r = result(new Prng(3), 3);
    expect(
      fetchNdjsonBytes({ ...r, records: { bytes: new Uint8Array(0), count: 0 } }, "utf8").bytes,
    ).toEqual(new Uint8Array(0));
    const broken = { ...r, records: { ...r.records, count: 4 } };
    expect(() => fetchNdjsonBytes(broken, "base64")).toThrow(/record 3 of 4 does not decode/);
    const extra = { ...r, records: { ...r.records, count: 2 } };
    expect(() => fetchNdjsonBytes(extra, "utf8")).toThrow(/bytes left after 2 fetched records/);
  });
});

describe("answer digits and kept buffers", () => {
  /** `count` records from offset `base`, timestamps in runs (as a produce stamps its records). */
  function run(base: number, count: number, timestamps: number[]): FetchResult {
    const b = new EntryBatchBuilder();
    for (let i = 0; i < count; i++)
      b.add(null, new TextEncoder().encode(`v${i}`), timestamps[i % timestamps.length]);
    const batch = b.build();
    const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
    encodeEntries(batch, bytes, { outPos: 0, baseOffset: base, nowMs: 5 });
    return {
      records: { bytes, count },
      nextOffset: base + count,
      highWatermark: base + count,
      logStartOffset: 0,
    };
  }

  it("writes offsets across every carry (9 → 10, 99 → 100, …) and repeated timestamps exactly", () => {
    const decoder = new TextDecoder();
    const cases = [
      run(0, 120, [0]),
      run(995, 10, [1_700_000_000_999, 1_700_000_000_999, 1_700_000_001_000]),
      run(99_999_995, 10, [9, 9, 10, 99, 100]),
      run(2 ** 31 - 3, 6, [2 ** 31 - 1, 2 ** 31]),
      run(9_999_999_999_995, 10, [8_640_000_000_000_000]),
    ];
    for (const r of cases) {
      for (const encoding of ["utf8", "base64"] as const)
        expect(decoder.decode(fetchJsonBytes(r, encoding))).toBe(
          JSON.stringify(fetchJson(r, encoding)),
        );
    }
  });

  it("writes into kept buffers exactly what it writes into new ones, stale bytes never shown", () => {
    const prng = new Prng(77);
    const decoder = new TextDecoder();
    const buffers = new AnswerBuffers();
    // A kept buffer full of stale bytes: every answer below must overwrite what it shows.
    buffers.give(new Uint8Array(64 * 1024).fill(0x41));
    for (let round = 0; round < 200; round++) {
      const r = result(prng, prng.int(40));
      const encoding = prng.int(2) === 0 ? "utf8" : "base64";
      const kept = fetchNdjsonBytes(r, encoding, Number.POSITIVE_INFINITY, buffers).bytes;
      expect(decoder.decode(kept)).toBe(decoder.decode(fetchNdjsonBytes(r, encoding).bytes));
      const json = fetchJsonBytes(r, encoding, Number.POSITIVE_INFINITY, buffers);
      expect(decoder.decode(json)).toBe(decoder.decode(fetchJsonBytes(r, encoding)));
      buffers.give(kept);
      buffers.give(json);
    }
  });

  it("hands a kept buffer out again, and keeps neither more nor larger buffers than its caps", () => {
    const buffers = new AnswerBuffers();
    const first = buffers.take(1000);
    buffers.give(first.subarray(0, 10));
    expect(buffers.take(500).buffer).toBe(first.buffer);
    const huge = new Uint8Array(3 * 1024 * 1024);
    buffers.give(huge);
    expect(buffers.take(3 * 1024 * 1024).buffer).not.toBe(huge.buffer);
    const given = [1, 2, 3, 4, 5].map((k) => new Uint8Array(k * 1000));
    for (const b of given) buffers.give(b);
    // Four kept: the four largest; the smallest (1000 bytes) was dropped.
    const taken = [1, 2, 3, 4].map(() => buffers.take(1));
    expect(taken.map((b) => b.length).sort((a, b) => a - b)).toEqual([2000, 3000, 4000, 5000]);
    expect(buffers.take(1).length).toBe(1);
  });
});

describe("acceptsNdjson", () => {
  it("picks NDJSON only when Accept names it first in quality", () => {
    const yes = [
      "application/x-ndjson",
      "application/ndjson",
      "Application/X-NDJSON; charset=utf-8",
      "text/html, application/x-ndjson;q=0.5",
      "application/json;q=0.5, application/x-ndjson",
      "application/json, application/ndjson",
      "*/*;q=0.5, application/x-ndjson",
      "application/x-ndjson, */*",
      "application/x-ndjson;q=0.5, */*;q=0.5",
      "application/x-ndjson;q=1.000",
    ];
    const no = [
      undefined,
      "",
      "*/*",
      "application/*",
      "application/json",
      "application/x-ndjson;q=0",
      "application/x-ndjson;q=0.000",
      "application/x-ndjson;q=nope",
      "application/x-ndjson;q=2",
      "application/json, application/x-ndjson;q=0.9",
      "application/x-ndjson-seq",
      "text/event-stream",
      // A wildcard at a higher quality than NDJSON: anything else is preferred (attack10 F6).
      "*/*, application/x-ndjson;q=0.1",
      "application/*;q=0.9, application/x-ndjson;q=0.5",
      // Not qvalues: counted as q=0.
      "application/x-ndjson;q=0x1",
      "application/x-ndjson;q=1e-9",
      "application/x-ndjson;q=0.0001",
      "application/x-ndjson;q=1.5",
    ];
    for (const accept of yes) expect(acceptsNdjson(accept), String(accept)).toBe(true);
    for (const accept of no) expect(acceptsNdjson(accept), String(accept)).toBe(false);
  });
});

describe("answers written a slice at a time (FetchAnswer)", () => {
  const bom = [0xef, 0xbb, 0xbf];
  /** `n` bytes of one kind; pieces of large ones end where the kinds differ in how they split. */
  function bytesOf(prng: Prng, kind: number, n: number): Uint8Array {
    const out = new Uint8Array(n);
    const utf8 = new TextEncoder().encode('aé€🎉\u0001"\\\n');
    for (let i = 0; i < n; i++) {
      if (kind === 0) out[i] = 0x20 + prng.int(95);
      else if (kind === 1) out[i] = prng.int(0x20);
      else if (kind === 2) out[i] = utf8[prng.int(utf8.length)];
      else if (kind === 3) out[i] = prng.int(256);
      else out[i] = prng.int(2) === 0 ? 0x80 + prng.int(64) : bom[i % 3];
    }
    if (kind === 2) return new TextEncoder().encode(new TextDecoder().decode(out)).subarray(0, n);
    // A BOM where a piece starts, and one at the start of the value: text the first keeps.
    if (kind === 4 && n > fieldPieceBytes + 3) out.set(bom, fieldPieceBytes);
    if (kind === 4 && n >= 3) out.set(bom, 0);
    return out;
  }

  function bigResult(prng: Prng, count: number): FetchResult {
    const b = new EntryBatchBuilder();
    for (let i = 0; i < count; i++) {
      const size = (): number =>
        [0, 5, fieldPieceBytes, fieldPieceBytes + 1, 2 * fieldPieceBytes + 2, prng.int(150_000)][
          prng.int(6)
        ];
      const key = prng.int(3) === 0 ? null : bytesOf(prng, prng.int(5), size());
      b.add(key, bytesOf(prng, prng.int(5), size()), 1_700_000_000_000 + i);
    }
    const batch = b.build();
    const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
    encodeEntries(batch, bytes, { outPos: 0, baseOffset: 100, nowMs: 5 });
    return {
      records: { bytes, count },
      nextOffset: 100 + count,
      highWatermark: 200,
      logStartOffset: 3,
    };
  }

  it("writes the bytes of the answer in one go, however it is sliced; a slice ends soon after its size", () => {
    const decoder = new TextDecoder();
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.integer({ min: 1, max: 400_000 }),
        fc.constantFrom("utf8", "base64"),
        fc.constantFrom("json", "ndjson"),
        (seed, sliceBytes, encoding: "utf8" | "base64", form: "json" | "ndjson") => {
          const r = bigResult(new Prng(seed), 1 + (seed % 6));
          const answer = new FetchAnswer(r, encoding, form);
          let before = answer.size;
          while (!answer.writeSlice(sliceBytes)) {
            // A slice stops past its size by at most what one record's key and value written
            // whole (48 KiB each at most, six bytes for each) or one piece of either add.
            expect(answer.size - before).toBeLessThan(sliceBytes + 12 * fieldPieceBytes + 200);
            expect(answer.size - before).toBeGreaterThanOrEqual(sliceBytes);
            before = answer.size;
          }
          const whole = form === "json" ? JSON.stringify(fetchJson(r, encoding)) : null;
          const text = decoder.decode(answer.bytes);
          if (whole !== null) expect(text).toBe(whole);
          else expect(text).toBe(decoder.decode(fetchNdjsonBytes(r, encoding).bytes));
          expect(answer.chunks.reduce((n, c) => n + c.length, 0)).toBe(answer.size);
        },
      ),
      { numRuns: 60 },
    );
  });

  it("writes an answer past answerChunkBytes into several buffers, the same bytes in order", () => {
    const b = new EntryBatchBuilder();
    // 40 values of 120 KiB of control bytes: ~28 MiB of `\u00xx` escapes.
    for (let i = 0; i < 40; i++) b.add(null, new Uint8Array(120 * 1024).fill(1 + (i % 31)));
    const batch = b.build();
    const bytes = new Uint8Array(batch.bytes.length + batch.count * recordOverEntryBytes);
    encodeEntries(batch, bytes, { outPos: 0, baseOffset: 0, nowMs: 5 });
    const r: FetchResult = {
      records: { bytes, count: 40 },
      nextOffset: 40,
      highWatermark: 40,
      logStartOffset: 0,
    };
    const answer = new FetchAnswer(r, "utf8", "json");
    while (!answer.writeSlice(1024 * 1024));
    expect(answer.chunks.length).toBeGreaterThan(answer.size / answerChunkBytes - 1);
    expect(answer.chunks.length).toBeGreaterThan(3);
    expect(new TextDecoder().decode(answer.bytes)).toBe(JSON.stringify(fetchJson(r, "utf8")));
  });

  it("stops adding records past answerBytesMax, next_offset naming the first left out", () => {
    const prng = new Prng(5);
    const r = bigResult(prng, 12);
    const all = fetchJson(r, "utf8").records;
    const answer = new FetchAnswer(r, "utf8", "json", 100_000);
    while (!answer.writeSlice(30_000));
    const cut = JSON.parse(new TextDecoder().decode(answer.bytes)) as {
      records: unknown[];
      next_offset: number;
    };
    expect(cut.records.length).toBeGreaterThan(0);
    expect(cut.records).toEqual(all.slice(0, cut.records.length));
    expect(cut.next_offset).toBe(100 + cut.records.length);
  });
});
