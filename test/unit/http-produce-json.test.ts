import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { BrokerError } from "../../src/broker/errors.ts";
import { decodeJsonProduce } from "../../src/transport/http/produce.ts";
import type { DecodedProduce } from "../../src/transport/http/produce.ts";
import { scanJsonProduce } from "../../src/transport/http/produce-json.ts";

const action = 'Cannot produce to topic "t"';
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

/** The general path, as app.ts runs it: strict UTF-8, JSON.parse, decodeJsonProduce; "error" when it refuses. */
function general(bytes: Uint8Array): DecodedProduce | "error" {
  let body: unknown;
  try {
    body = JSON.parse(strictUtf8.decode(bytes));
  } catch {
    return "error";
  }
  try {
    return decodeJsonProduce(body, { action, sizeHintBytes: bytes.length });
  } catch (e) {
    if (e instanceof BrokerError) return "error";
    throw e;
  }
}

/** Comparable form of a decoded request. */
function shape(d: DecodedProduce) {
  return {
    bytes: Array.from(d.batch.bytes),
    count: d.batch.count,
    partition: d.partition,
    partitions: d.partitions === undefined ? undefined : Array.from(d.partitions),
  };
}

/** The fast path must give the general path's answer whenever it gives one. */
function expectAgreement(bytes: Uint8Array): DecodedProduce | undefined {
  const fast = scanJsonProduce(bytes);
  if (fast !== undefined) {
    const slow = general(bytes);
    expect(slow, new TextDecoder().decode(bytes)).not.toBe("error");
    expect(shape(fast)).toEqual(shape(slow as DecodedProduce));
  }
  return fast;
}

const bytesOf = (text: string) => encoder.encode(text);

/** A JSON string literal of `text`, each character written raw or escaped in one of JSON's ways. */
function jsonString(text: string, escapes: number[]): string {
  let out = '"';
  let i = 0;
  for (const ch of text) {
    const mode = escapes[i++ % escapes.length] ?? 0;
    const code = ch.codePointAt(0)!;
    const short: Record<string, string> = {
      '"': '\\"',
      "\\": "\\\\",
      "/": "\\/",
      "\b": "\\b",
      "\f": "\\f",
      "\n": "\\n",
      "\r": "\\r",
      "\t": "\\t",
    };
    if (mode === 1 && short[ch] !== undefined) out += short[ch];
    else if (mode === 2 || code < 0x20 || ch === '"' || ch === "\\") {
      for (let j = 0; j < ch.length; j++) {
        const hex = ch.charCodeAt(j).toString(16).padStart(4, "0");
        out += `\\u${mode === 3 ? hex.toUpperCase() : hex}`;
      }
    } else out += ch;
  }
  return `${out}"`;
}

const textArb = fc
  .array(
    fc.oneof(
      fc.string({ unit: "binary-ascii", maxLength: 6 }),
      fc.string({ unit: "binary", maxLength: 3 }),
      fc.constantFrom("\ud800", "\udc00", "\ud83d\ude00", "é", "/", '"', "\\", "\n", "\u2028"),
    ),
    { maxLength: 5 },
  )
  .map((parts) => parts.join(""));

const base64Arb = fc.oneof(
  fc.uint8Array({ maxLength: 8 }).map((b) => Buffer.from(b).toString("base64")),
  fc.constantFrom("QQ", "QR==", "Q===", "-_8=", "AA==\n", "", "A\\/8="),
);

/** A member as JSON text: a known field (sometimes a typo) with a value of a likely or unlikely type. */
const memberArb = fc.oneof(
  fc
    .tuple(
      fc.constantFrom("key", "value"),
      textArb,
      fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 4 }),
    )
    .map(([f, t, e]) => `"${f}":${jsonString(t, e)}`),
  fc
    .tuple(fc.constantFrom("key_b64", "value_b64"), base64Arb)
    .map(([f, t]) => `"${f}":${t.includes("\\") ? `"${t}"` : JSON.stringify(t)}`),
  fc
    .tuple(
      fc.constantFrom("partition", "timestamp"),
      fc.constantFrom(
        "0",
        "1",
        "3",
        "-1",
        "-2",
        "01",
        "1.0",
        "1e2",
        "2147483647",
        "2147483648",
        "999999999999999",
        "9999999999999999",
        "1700000000000",
        "-0",
      ),
    )
    .map(([f, n]) => `"${f}":${n}`),
  fc
    .tuple(
      fc.constantFrom(
        "key",
        "key_b64",
        "value",
        "value_b64",
        "partition",
        "timestamp",
        "kye",
        "records",
      ),
      fc.constantFrom("null", "true", "{}", "[]", '""', "0"),
    )
    .map(([f, v]) => `"${f}":${v}`),
);

const wsArb = fc.constantFrom("", "", " ", "\n", "\t ", "\r\n");

const stringMember = (field: string) =>
  fc
    .tuple(textArb, fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 4 }))
    .map(([t, e]) => `"${field}":${jsonString(t, e)}`);
const b64Member = (field: string) =>
  fc.uint8Array({ maxLength: 8 }).map((b) => `"${field}":"${Buffer.from(b).toString("base64")}"`);

/** Mostly well-formed records (fields in any order), some with one arbitrary member more. */
const recordArb = fc
  .tuple(
    fc.oneof(stringMember("value"), b64Member("value_b64")),
    fc.option(
      fc.oneof(
        stringMember("key"),
        b64Member("key_b64"),
        fc.constantFrom('"key":null', '"key_b64":null'),
      ),
    ),
    fc.option(
      fc.constantFrom(
        '"partition":0',
        '"partition":2',
        '"partition":null',
        '"partition":2147483647',
      ),
    ),
    fc.option(
      fc.constantFrom(
        '"timestamp":0',
        '"timestamp":-1',
        '"timestamp":1700000000000',
        '"timestamp":null',
      ),
    ),
    fc.oneof({ arbitrary: fc.constant(null), weight: 3 }, { arbitrary: memberArb, weight: 1 }),
    fc.nat(),
    wsArb,
  )
  .map(([value, key, partition, timestamp, extra, order, ws]) => {
    const members = [value, key, partition, timestamp, extra].filter(
      (m): m is string => m !== null,
    );
    const rotated = [
      ...members.slice(order % members.length),
      ...members.slice(0, order % members.length),
    ];
    return `{${ws}${rotated.join(`,${ws}`)}${ws}}`;
  });

const bodyArb = fc
  .tuple(
    fc.array(recordArb, { minLength: 0, maxLength: 6 }),
    wsArb,
    fc.constantFrom("", "", "", "", " ", "x", ",", '"records"'),
  )
  .map(
    ([records, ws, tail]) =>
      `${ws}{${ws}"records"${ws}:${ws}[${records.join(`${ws},`)}]${ws}}${ws}${tail}`,
  );

describe("scanJsonProduce (the byte-level fast path of JSON produce)", () => {
  it("decodes the common shapes itself, like the general path", () => {
    const value = "x".repeat(256);
    const bodies = [
      `{"records":[${Array.from({ length: 100 }, () => JSON.stringify({ value, partition: 0 })).join(",")}]}`,
      '{"records":[{"key":"customer-7","value":"{\\"total\\":12}"},{"value":"no key","partition":0}]}',
      '{"records":[{"key_b64":"AAEC","value_b64":"3q2+7w==","partition":2,"timestamp":1700000000000}]}',
      '{ "records" : [ { "key" : null , "value" : "" , "timestamp" : -1 } ] }\n',
      '{"records":[{"key":"","value":"caf\\u00e9 \\ud83d\\ude00 é \\/ \\n"}]}',
    ];
    for (const body of bodies) expect(expectAgreement(bytesOf(body)), body).toBeDefined();
    const decoded = scanJsonProduce(bytesOf(bodies[0]))!;
    expect(decoded.batch.count).toBe(100);
    expect(decoded.partition).toBe(0);
  });

  it("leaves every body it cannot vouch for to the general path", () => {
    const bodies = [
      '{"records":[]}',
      '{"records":[{"value":"a","value":"b"}]}',
      '{"records":[{"value":"a","kye":"k"}]}',
      '{"records":[{"value":"\\ud800"}]}',
      '{"records":[{"value":"a","partition":-1}]}',
      '{"records":[{"value":"a","partition":1.0}]}',
      '{"records":[{"value":"a"}],"x":1}',
      '{"records":[{"value":"a"}]} x',
      '{"records":[{"value_b64":"QR=="}]}',
      '{"records":[{"key":"k","key_b64":"AA=="}]}',
      '{"records":[{"value":null}]}',
      '{"records":[{"value":"\\x"}]}',
    ];
    for (const body of bodies) expect(scanJsonProduce(bytesOf(body)), body).toBeUndefined();
    // Bytes that are not strict UTF-8 inside a string.
    const bad = bytesOf('{"records":[{"value":"ab"}]}');
    bad[22] = 0xff;
    expect(scanJsonProduce(bad)).toBeUndefined();
    const surrogate = Uint8Array.from([
      ...bytesOf('{"records":[{"value":"'),
      0xed,
      0xa0,
      0x80,
      ...bytesOf('"}]}'),
    ]);
    expect(scanJsonProduce(surrogate)).toBeUndefined();
  });

  it("leaves every batch it built as it was while it decodes more bodies (small batches share a slab)", () => {
    const body = (value: string) => encoder.encode(JSON.stringify({ records: [{ value }] }));
    const kept: { batch: DecodedProduce; expected: ReturnType<typeof shape> }[] = [];
    for (let i = 0; i < 200; i++) {
      // Bodies it gives up on (an unknown field) and larger ones in between.
      expect(scanJsonProduce(encoder.encode(`{"records":[{"value":"x","other":${i}}]}`))).toBe(
        undefined,
      );
      const value = `${i}:${"v".repeat(i % 3 === 0 ? 3000 : i)}`;
      const batch = scanJsonProduce(body(value))!;
      kept.push({ batch, expected: shape(general(body(value)) as DecodedProduce) });
    }
    for (const { batch, expected } of kept) expect(shape(batch)).toEqual(expected);
  });

  it("agrees with the general path on generated bodies, valid and not", () => {
    let decodedFast = 0;
    let decodedGeneral = 0;
    fc.assert(
      fc.property(bodyArb, (body) => {
        if (expectAgreement(bytesOf(body)) !== undefined) decodedFast++;
        if (general(bytesOf(body)) !== "error") decodedGeneral++;
      }),
      { numRuns: 3000 },
    );
    // The generator reaches both sides: bodies the fast path takes, and valid ones it leaves.
    expect(decodedFast).toBeGreaterThan(300);
    expect(decodedGeneral).toBeGreaterThan(decodedFast);
  });

  it("agrees with the general path on bodies with a byte changed or cut short", () => {
    fc.assert(
      fc.property(
        bodyArb,
        fc.nat(),
        fc.integer({ min: 0, max: 255 }),
        fc.boolean(),
        (body, at, byte, cut) => {
          const bytes = bytesOf(body);
          if (bytes.length === 0) return;
          const i = at % bytes.length;
          expectAgreement(cut ? bytes.subarray(0, i) : bytes.map((b, j) => (j === i ? byte : b)));
        },
      ),
      { numRuns: 3000 },
    );
  });
});
