/** The pure parts of broker/streams/: path ↔ topic name, offsets, JSON messages, stream metadata, cursors. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BrokerError } from "../../src/broker/errors.ts";
import { validateTopicName } from "../../src/broker/config.ts";
import { StreamCursors } from "../../src/broker/streams/cursor.ts";
import {
  jsonAppendValue,
  jsonRecordMessages,
  jsonValuePrefix,
} from "../../src/broker/streams/json.ts";
import { mediaType, parseStreamMeta } from "../../src/broker/streams/meta.ts";
import {
  streamPathFromTopicName,
  streamTopicName,
  validateStreamPath,
} from "../../src/broker/streams/names.ts";
import { formatStreamOffset, parseStreamOffset } from "../../src/broker/streams/offsets.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import {
  streamAppendMessagesMax,
  streamCursorEpochMs,
  streamCursorIntervalMs,
} from "../../src/lib/limits.ts";

const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof BrokerError) return err.kind.code;
    throw err;
  }
  return "ok";
}

/** Valid stream paths: segments of arbitrary Unicode without "/", not empty, "." or "..", no control characters. */
const segment = fc
  .string({ unit: "grapheme", minLength: 1, maxLength: 12 })
  .map((s) =>
    [...s]
      .map((ch) => (ch === "/" || ch.charCodeAt(0) < 0x20 || ch === "\u007f" ? "x" : ch))
      .join(""),
  )
  .filter((s) => s !== "." && s !== ".." && s !== "__ds");
const streamPath = fc.array(segment, { minLength: 1, maxLength: 5 }).map((s) => s.join("/"));

describe("stream paths and topic names", () => {
  it("maps the examples of the module comment", () => {
    expect(streamTopicName("chat/room-1")).toBe("chat.room-1");
    expect(streamTopicName("a.b")).toBe("a_2Eb");
    expect(streamTopicName("café")).toBe("caf_C3_A9");
    expect(streamTopicName("x_y")).toBe("x_5Fy");
  });

  it("gives every path a valid topic name that maps back to it, and distinct paths distinct names", () => {
    fc.assert(
      fc.property(streamPath, streamPath, (a, b) => {
        const name = streamTopicName(validateStreamPath(a));
        expect(validateTopicName(name)).toBe(name);
        if (name.length <= 249 && !name.includes("_h"))
          expect(streamPathFromTopicName(name)).toBe(a);
        if (a !== b) expect(streamTopicName(b)).not.toBe(name);
      }),
      { numRuns: 300 },
    );
  });

  it("hashes a path whose name would be too long, never cutting an escape, and keeps it unambiguous", () => {
    const long = "é".repeat(5000);
    const name = streamTopicName(long);
    expect(name.length).toBeLessThanOrEqual(249);
    expect(validateTopicName(name)).toBe(name);
    expect(name).toMatch(/^(_C3_A9)+_h[0-9a-f]{32}$/);
    expect(streamPathFromTopicName(name)).toBeNull();
    expect(streamTopicName(`${long}x`)).not.toBe(name);
    const ascii = "a".repeat(10_000);
    expect(streamTopicName(ascii)).toMatch(/^a{200}_h[0-9a-f]{32}$/);
  });

  it("refuses empty, dot and empty segments, control characters, __ds and over-long paths", () => {
    for (const bad of [
      "",
      "a//b",
      "/a",
      "a/",
      ".",
      "a/../b",
      "a/./b",
      "a\u0000b",
      "a\nb",
      "__ds/x",
    ])
      expect(
        codeOf(() => validateStreamPath(bad)),
        JSON.stringify(bad),
      ).toBe("invalid_request");
    expect(codeOf(() => validateStreamPath("é".repeat(8193)))).toBe("invalid_request");
    expect(codeOf(() => validateStreamPath("a".repeat(16_384)))).toBe("ok");
  });

  it("reads only valid escapings back", () => {
    expect(streamPathFromTopicName("a_2")).toBeNull();
    expect(streamPathFromTopicName("a_zz")).toBeNull();
    expect(streamPathFromTopicName("_FF")).toBeNull();
    expect(streamPathFromTopicName("orders")).toBe("orders");
  });
});

describe("stream offsets", () => {
  it("sort as their positions do, at every width", () => {
    fc.assert(
      fc.property(fc.maxSafeNat(), fc.maxSafeNat(), (a, b) => {
        const x = formatStreamOffset(a);
        const y = formatStreamOffset(b);
        expect(x < y).toBe(a < b);
        expect(parseStreamOffset(x, "offset")).toBe(a);
      }),
    );
    expect(formatStreamOffset(0)).toBe("0000000000000000_0000000000000000");
  });

  it("accept the sentinels -1 and now, refuse everything this server never mints", () => {
    expect(parseStreamOffset("-1", "offset")).toBe("start");
    expect(parseStreamOffset("now", "offset")).toBe("now");
    for (const bad of [
      "",
      "0",
      "0,1",
      "0 1",
      "-2",
      "NOW",
      "0000000000000001",
      "0000000000000001_0000000000000001",
      "9999999999999999_0000000000000000",
      "9999999999999999_9999999999999999",
      "000000000000001_0000000000000000",
    ])
      expect(
        codeOf(() => parseStreamOffset(bad, "offset")),
        bad,
      ).toBe("invalid_request");
  });
});

describe("JSON mode", () => {
  const value = (body: string) => {
    const r = jsonAppendValue(text(body), "test");
    return { value: str(r.value), messages: r.messages };
  };

  it("flattens one level of an array, keeping each message's bytes", () => {
    expect(value('{"a":1}')).toEqual({ value: '{"a":1}', messages: 1 });
    expect(value(' [ {"a":1} , {"b": [1, 2]} ] ')).toEqual({
      value: '{"a":1},{"b": [1, 2]}',
      messages: 2,
    });
    expect(value("[[1,2],[3,4]]")).toEqual({ value: "[1,2],[3,4]", messages: 2 });
    expect(value("[[[1,2,3]]]")).toEqual({ value: "[[1,2,3]]", messages: 1 });
    expect(value('["a]b\\"c,", 12345678901234567890, null]')).toEqual({
      value: '"a]b\\"c,",12345678901234567890,null',
      messages: 3,
    });
    expect(value("[]")).toEqual({ value: "", messages: 0 });
    expect(value("42")).toEqual({ value: "42", messages: 1 });
  });

  it("refuses what is not one JSON value in UTF-8", () => {
    for (const bad of ["{ invalid json }", "", "[1,]", "1 2", '{"a":1}{"b":2}'])
      expect(
        codeOf(() => jsonAppendValue(text(bad), "test")),
        bad,
      ).toBe("invalid_request");
    expect(codeOf(() => jsonAppendValue(new Uint8Array([0x22, 0xff, 0x22]), "test"))).toBe(
      "invalid_request",
    );
    // A byte-order mark before the value: stripped by the check but kept in the stored bytes, it
    // made every later read of the stream invalid JSON (found by the attacker of the streams work).
    expect(
      codeOf(() => jsonAppendValue(Uint8Array.of(0xef, 0xbb, 0xbf, 0x5b, 0x35, 0x5d), "test")),
    ).toBe("invalid_request");
  });

  it("takes at most streamAppendMessagesMax messages, counting only the outer array's elements", () => {
    const max = streamAppendMessagesMax;
    const ones = (n: number) => Array.from({ length: n }, () => "1").join(",");
    expect(value(`[${ones(max)}]`).messages).toBe(max);
    const over = (body: string) => {
      try {
        jsonAppendValue(text(body), "test");
      } catch (e) {
        if (e instanceof BrokerError) return e.details;
      }
      return null;
    };
    expect(over(` [${ones(max + 1)}] `)).toEqual({ limit_messages: max });
    // Refused before anything else is looked at: the rest need not even be JSON.
    expect(over(`[${ones(max + 1)} not json`)).toEqual({ limit_messages: max });
    // Commas inside strings, and elements of arrays and objects inside a message, do not count.
    expect(value(`["${",".repeat(2 * max)}"]`).messages).toBe(1);
    expect(value(`[[${ones(max + 1)}],{"a":[${ones(max + 1)}]}]`).messages).toBe(2);
    expect(value(`{"a":[${ones(max + 1)}]}`).messages).toBe(1);
  });

  it("splits any stored value back into the messages of the append", () => {
    fc.assert(
      fc.property(fc.array(fc.jsonValue(), { minLength: 1, maxLength: 6 }), (messages) => {
        const body = JSON.stringify(messages, null, 1);
        const stored = jsonAppendValue(text(body), "test").value;
        const ranges = jsonRecordMessages(stored);
        expect(ranges.map(([s, e]) => JSON.parse(str(stored.subarray(s, e))))).toEqual(
          JSON.parse(JSON.stringify(messages)),
        );
        for (let k = 0; k <= messages.length; k++)
          expect(JSON.parse(`[${str(jsonValuePrefix(stored, k))}]`)).toEqual(
            JSON.parse(JSON.stringify(messages.slice(0, k))),
          );
      }),
      { numRuns: 200 },
    );
  });
});

describe("stream metadata", () => {
  const base = {
    path: "a",
    id: "x",
    content_type: "text/plain",
    created_ms: 1,
    initial_records: 0,
  };

  it("reads back what the service writes", () => {
    const full = {
      ...base,
      ttl_seconds: 60,
      expires_at: "2030-01-01T00:00:00Z",
      expires_at_ms: 1_893_456_000_000,
      closed: { offset: 3, producer: { id: "p", epoch: 1, seq: 2 } },
      fork: { source: "s", source_path: "s", anchor: 2, sub_offset: 1, offset: 2 },
      deleted: true,
    };
    expect(parseStreamMeta(JSON.parse(JSON.stringify(full)))).toEqual(full);
  });

  it("refuses unknown fields and bad values, naming them", () => {
    expect(() => parseStreamMeta({ ...base, colour: 1 })).toThrow(/stream.colour/);
    expect(() => parseStreamMeta({ ...base, ttl_seconds: -1 })).toThrow(/ttl_seconds/);
    expect(() => parseStreamMeta({ ...base, closed: { offset: 1.5 } })).toThrow(/closed.offset/);
    expect(() => parseStreamMeta({ ...base, deleted: false })).toThrow(/deleted/);
    expect(() => parseStreamMeta(null)).toThrow();
  });

  it("compares content types by media type", () => {
    expect(mediaType("Application/JSON; charset=utf-8")).toBe("application/json");
    expect(mediaType(undefined)).toBe("");
  });
});

describe("stream cursors", () => {
  it("count 20 s intervals and move strictly past a client already at the current one", () => {
    const clock = new ManualClock(streamCursorEpochMs + 1000 * streamCursorIntervalMs + 5);
    const cursors = new StreamCursors(clock, 7);
    expect(cursors.next(undefined)).toBe("1000");
    expect(cursors.next("999")).toBe("1000");
    expect(cursors.next("garbage")).toBe("1000");
    for (const client of ["1000", "1050", "123456789"]) {
      const next = Number(cursors.next(client));
      expect(next).toBeGreaterThan(Number(client));
      expect(next).toBeLessThanOrEqual(Number(client) + 180);
    }
    clock.advance(streamCursorIntervalMs);
    expect(cursors.next("1000")).toBe("1001");
  });
});
