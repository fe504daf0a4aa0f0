/**
 * The fetch answer written into one buffer (`src/transport/http/fetch-json.ts`) is byte for byte
 * `JSON.stringify(fetchJson(...))` (`encode.ts`), in both encodings, on generated records: no key,
 * the empty key, printable ASCII, quotes and backslashes, control bytes, multi-byte UTF-8,
 * invalid UTF-8 (U+FFFD), every length modulo 3 for base64, negative and large timestamps.
 */
import { describe, expect, it } from "vitest";
import type { FetchResult } from "../../src/broker/types.ts";
import { Prng } from "../../src/lib/prng.ts";
import { recordOverEntryBytes } from "../../src/lib/limits.ts";
import { EntryBatchBuilder, encodeEntries } from "../../src/storage/record.ts";
import { fetchJson } from "../../src/transport/http/encode.ts";
import { fetchJsonBytes } from "../../src/transport/http/fetch-json.ts";

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

  it("refuses stored bytes that do not decode as the records counted, as fetchJson does", () => {
    const r = result(new Prng(1), 3);
    const broken = { ...r, records: { ...r.records, count: 4 } };
    expect(() => fetchJsonBytes(broken, "utf8")).toThrow(/record 3 of 4 does not decode/);
    const extra = { ...r, records: { ...r.records, count: 2 } };
    expect(() => fetchJsonBytes(extra, "base64")).toThrow(/bytes left after 2 fetched records/);
  });
});
