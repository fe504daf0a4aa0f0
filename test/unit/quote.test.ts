import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { clip, quote } from "../../src/lib/quote.ts";
import { formatJsonPath, jsonNestingFault, jsonShapeFault } from "../../src/lib/json-nesting.ts";
import {
  jsonNestingDepthMax,
  quotedCharsMax,
  quotedNestingDepthMax,
} from "../../src/lib/limits.ts";

/** An array nested `depth` levels deep: `[[[…]]]`. */
function nested(depth: number): unknown {
  let value: unknown = [];
  for (let i = 1; i < depth; i++) value = [value];
  return value;
}

describe("quote()", () => {
  it("quotes a short string as a JSON string literal", () => {
    expect(quote("orders")).toBe('"orders"');
    expect(quote('a"b\n')).toBe('"a\\"b\\n"');
  });

  it("shows a long string by its first quotedCharsMax characters and its length", () => {
    const shown = quote("x".repeat(200_000));
    expect(shown).toBe(`"${"x".repeat(quotedCharsMax)}…"… (200000 characters)`);
  });

  it("never cuts between the halves of a surrogate pair", () => {
    const text = `${"a".repeat(quotedCharsMax - 1)}😀tail`;
    const shown = clip(text);
    expect(shown).toBe(`${"a".repeat(quotedCharsMax - 1)}…`);
    expect(/[\ud800-\udbff](?![\udc00-\udfff])/.test(shown)).toBe(false);
  });

  it("quotes numbers, booleans, null and undefined as JSON would", () => {
    expect(quote(42)).toBe("42");
    expect(quote(-1.5)).toBe("-1.5");
    expect(quote(true)).toBe("true");
    expect(quote(null)).toBe("null");
    expect(quote(undefined)).toBe("undefined");
  });

  it("shows small arrays and objects as JSON", () => {
    expect(quote([1, "a", null])).toBe('[1,"a",null]');
    expect(quote({ retention_ms: [1, 2] })).toBe('{"retention_ms":[1,2]}');
    expect(quote([])).toBe("[]");
    expect(quote({})).toBe("{}");
  });

  it("shows an array nested 5,000 levels deep to quotedNestingDepthMax levels, without recursing into it", () => {
    const shown = quote(nested(5000));
    expect(shown).toBe(
      `${"[".repeat(quotedNestingDepthMax)}[…]${"]".repeat(quotedNestingDepthMax)}`,
    );
  });

  it("bounds the rendering of wide and large values", () => {
    const wide = Array.from({ length: 100_000 }, (_, i) => i);
    expect(quote(wide).length).toBeLessThan(quotedCharsMax * 2);
    expect(quote(wide).endsWith(",…]")).toBe(true);
    const manyKeys = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, i]));
    expect(quote(manyKeys).length).toBeLessThan(quotedCharsMax * 2);
    expect(quote({ ["k".repeat(100_000)]: "v".repeat(100_000) }).length).toBeLessThan(
      quotedCharsMax * 3,
    );
  });

  it("is bounded and never throws, whatever JSON value it is given (property)", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), (value) => {
        const shown = quote(value);
        expect(typeof shown).toBe("string");
        // A few characters of brackets and separators per level and element on top of the budget.
        expect(shown.length).toBeLessThan(quotedCharsMax * 8 + 64);
      }),
      { seed: 13, numRuns: 500 },
    );
  });
});

describe("jsonNestingFault()", () => {
  it("accepts JSON nested exactly to the limit, and refuses one level more", () => {
    const atLimit = `${"[".repeat(jsonNestingDepthMax)}${"]".repeat(jsonNestingDepthMax)}`;
    expect(jsonNestingFault(atLimit)).toBeNull();
    const over = `[${atLimit}]`;
    expect(jsonNestingFault(over)?.path).toHaveLength(jsonNestingDepthMax);
  });

  it("names the keys and indices leading to the value nested too deep", () => {
    const text = `{"name":"t","config":{"segment_ms":1,"retention_ms":${"[".repeat(5000)}${"]".repeat(5000)}}}`;
    const fault = jsonNestingFault(text);
    expect(fault?.path.slice(0, 3)).toEqual(["config", "retention_ms", 0]);
    expect(formatJsonPath(fault!.path)).toBe("config.retention_ms[0][0]…");
  });

  it("counts array elements and ignores brackets inside strings, escaped quotes included", () => {
    const text = `{"records":[{"value":"[[[[\\"{{{{"},{"value":1},${"[".repeat(40)}${"]".repeat(40)}]}`;
    const fault = jsonNestingFault(text);
    expect(fault?.path.slice(0, 2)).toEqual(["records", 2]);
    expect(jsonNestingFault(JSON.stringify({ v: "[".repeat(10_000) }))).toBeNull();
  });

  it("never throws on malformed text (JSON.parse reports it afterwards)", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom("[", "]", "{", "}", '"', "\\", ",", ":", "a") }),
        (text) => {
          const fault = jsonNestingFault(text, 4);
          if (fault !== null) expect(fault.path.length).toBe(4);
        },
      ),
      { seed: 13, numRuns: 1000 },
    );
  });

  it("agrees with the nesting of parsed JSON values (property)", () => {
    const depthOf = (v: unknown): number =>
      typeof v === "object" && v !== null
        ? 1 + Math.max(0, ...Object.values(v as object).map(depthOf))
        : 0;
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 10 }), fc.integer({ min: 1, max: 10 }), (v, limit) => {
        const fault = jsonNestingFault(JSON.stringify(v), limit);
        expect(fault === null).toBe(depthOf(v) <= limit);
      }),
      { seed: 13, numRuns: 1000 },
    );
  });
});

describe("jsonShapeFault()", () => {
  it("finds an array of more than elementsMax elements at its elementsMax-th comma, naming its path", () => {
    expect(jsonShapeFault("[1,2,3]", { elementsMax: 3 })).toBeNull();
    expect(jsonShapeFault("[1,2,3,4]", { elementsMax: 3 })).toEqual({ path: [], elementsMax: 3 });
    // Found without reading past the comma: the malformed rest is never looked at.
    expect(jsonShapeFault('{"records":[{},{},{},{} ]]]"', { elementsMax: 3 })).toEqual({
      path: ["records"],
      elementsMax: 3,
    });
    expect(
      jsonShapeFault('{"records":[{"key":[1,2],"value":"a"},{"key":[1,2,3,4]}]}', {
        elementsMax: 3,
      }),
    ).toEqual({ path: ["records", 1, "key"], elementsMax: 3 });
  });

  it("does not count commas in strings, or an object's members", () => {
    const text = JSON.stringify({ a: 1, b: 2, c: 3, d: 4, v: [",,,,", "x"] });
    expect(jsonShapeFault(text, { elementsMax: 3 })).toBeNull();
  });

  it("counts the members of all objects together, finding the one past membersMax at its key", () => {
    expect(jsonShapeFault('{"a":1,"b":{"c":2}}', { membersMax: 3 })).toBeNull();
    expect(jsonShapeFault('{"a":1,"b":{"c":2,"d":3}}', { membersMax: 3 })).toEqual({
      path: ["b"],
      membersMax: 3,
    });
    // One-member objects count too (a key, not a comma, is a member); the object is named.
    expect(
      jsonShapeFault('{"records":[{"value":"a"},{"f0":1},{"f1":1}]}', { membersMax: 3 }),
    ).toEqual({ path: ["records", 2], membersMax: 3 });
    expect(jsonShapeFault('{"a":1,"b":2,"c":3,"d":4}', { membersMax: 3 })).toEqual({
      path: [],
      membersMax: 3,
    });
    // Found at the key: the malformed rest is never looked at.
    expect(jsonShapeFault('{"a":1,"b":2,"c":3,"d" ]]]', { membersMax: 3 })).toEqual({
      path: [],
      membersMax: 3,
    });
    // Strings that are values or array elements, and quotes inside strings, are no members.
    const text = JSON.stringify({ a: "b", c: ["d", "e", '"f":1,"g":2'] });
    expect(jsonShapeFault(text, { membersMax: 2 })).toBeNull();
  });

  it("agrees with the member count of parsed objects (property)", () => {
    const members = (v: unknown): number =>
      typeof v === "object" && v !== null
        ? (Array.isArray(v) ? 0 : Object.keys(v).length) +
          Object.values(v as object).reduce((sum: number, e) => sum + members(e), 0)
        : 0;
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), fc.integer({ min: 0, max: 12 }), (v, max) => {
        const fault = jsonShapeFault(JSON.stringify(v), { membersMax: max, depthMax: 64 });
        expect(fault !== null).toBe(members(v) > max);
      }),
      { seed: 23, numRuns: 500 },
    );
  });

  it("agrees with the lengths of parsed arrays (property)", () => {
    const longest = (v: unknown): number =>
      typeof v === "object" && v !== null
        ? Math.max(Array.isArray(v) ? v.length : 0, ...Object.values(v as object).map(longest))
        : 0;
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), fc.integer({ min: 1, max: 6 }), (v, max) => {
        const fault = jsonShapeFault(JSON.stringify(v), { elementsMax: max, depthMax: 64 });
        expect(fault !== null).toBe(longest(v) > max);
      }),
      { seed: 19, numRuns: 500 },
    );
  });
});
