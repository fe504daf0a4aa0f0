/**
 * The NDJSON produce decoder's line splitting (`decodeNdjsonProduce`, docs/http-api.md "`POST
 * /v1/topics/{topic}/records` — produce (NDJSON)"): every non-empty line is one record, LF ends a
 * line, one CR before it is dropped, empty lines (LF or CRLF) are skipped, and errors name the
 * 1-based line. Checked against a plain split of the body, on random bodies heavy in empty lines.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BrokerError } from "../../src/broker/errors.ts";
import { EntryCursor } from "../../src/storage/record.ts";
import { decodeNdjsonProduce } from "../../src/transport/http/produce.ts";

const action = 'Cannot produce to topic "t"';

function values(body: Uint8Array): string[] {
  const { batch } = decodeNdjsonProduce(body, { action, key: null, partition: undefined });
  const out: string[] = [];
  const cursor = new EntryCursor(batch);
  while (cursor.next()) {
    const valueStart = cursor.keyStart + Math.max(cursor.keyLen, 0) + 4;
    out.push(new TextDecoder().decode(batch.bytes.subarray(valueStart, cursor.end)));
  }
  return out;
}

/** The rule, written plainly: split at LF, drop one trailing CR, keep non-empty lines. */
function expected(text: string): string[] {
  return text
    .split("\n")
    .map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line))
    .filter((line) => line.length > 0);
}

describe("decodeNdjsonProduce lines", () => {
  it("skips runs of empty LF and CRLF lines and keeps every other line as it is", () => {
    const text = '\n\n\r\n{"a":1}\r\n\n\n\r\nx\r\r\n\n  \nlast';
    expect(values(new TextEncoder().encode(text))).toEqual(['{"a":1}', "x\r", "  ", "last"]);
  });

  it("matches a plain split on random bodies of lines, empty lines and CRs", () => {
    const piece = fc.constantFrom("\n", "\r\n", "\r", "a", "bc", "{}", " ");
    fc.assert(
      fc.property(fc.array(piece, { minLength: 1, maxLength: 60 }), (pieces) => {
        const text = pieces.join("");
        const want = expected(text);
        if (want.length === 0) {
          expect(() => values(new TextEncoder().encode(text))).toThrow(BrokerError);
          return;
        }
        expect(values(new TextEncoder().encode(text))).toEqual(want);
      }),
      { numRuns: 500 },
    );
  });

  it("names the line of an over-long record after many empty lines", () => {
    const body = new Uint8Array(1_000 + 8 * 1024 * 1024 + 1).fill(0x61);
    body.fill(0x0a, 0, 1_000);
    try {
      decodeNdjsonProduce(body, { action, key: null, partition: undefined });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(BrokerError);
      expect((err as BrokerError).details).toMatchObject({ record: 0, line: 1_001 });
    }
  });

  it("refuses a body of only empty lines as holding no records", () => {
    const body = new Uint8Array(1024 * 1024).fill(0x0a);
    expect(() => values(body)).toThrow(/no records/);
  });
});
