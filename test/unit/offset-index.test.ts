import { describe, expect, it } from "vitest";
import { OffsetIndex } from "../../src/storage/offset-index.ts";

function build(entries: [number, number][]): OffsetIndex {
  const index = new OffsetIndex();
  for (const [rel, pos] of entries) index.push(rel, pos);
  return index;
}

describe("OffsetIndex", () => {
  it("keeps every entry exact across growth, values at and past 2^32, and trim", () => {
    const index = new OffsetIndex(1);
    const entries: [number, number][] = [];
    for (let i = 0; i < 1000; i++) entries.push([i * 7, i * 4096]);
    // Past 2^32 the array widens to 64-bit floats without losing what was there.
    entries.push([2 ** 32 - 1 + 7000, 2 ** 32 + 5], [2 ** 40, 2 ** 45]);
    for (const [rel, pos] of entries) index.push(rel, pos);
    const check = () => {
      expect(index.count).toBe(entries.length);
      entries.forEach(([rel, pos], i) => {
        expect(index.relativeOffsetAt(i)).toBe(rel);
        expect(index.positionAt(i)).toBe(pos);
      });
    };
    check();
    index.trim();
    check();
    const decoded = OffsetIndex.decode(index.encode(), 2 ** 46);
    expect("index" in decoded && decoded.index.positionAt(entries.length - 1)).toBe(2 ** 45);
    const narrow = build([
      [0, 0],
      [2 ** 32 - 1, 2 ** 32 - 1],
    ]);
    narrow.trim();
    expect(narrow.lookup(2 ** 32 - 1)).toBe(2 ** 32 - 1);
  });

  it("wants an entry for the first record and then once 4 KiB have passed", () => {
    const index = new OffsetIndex();
    expect(index.wants(0)).toBe(true);
    index.push(0, 0);
    expect(index.wants(4095)).toBe(false);
    expect(index.wants(4096)).toBe(true);
    index.push(40, 4100);
    expect(index.wants(8195)).toBe(false);
    expect(index.wants(8196)).toBe(true);
  });

  it("lookup returns the position of the entry at or before the offset", () => {
    const index = build([
      [0, 0],
      [10, 4200],
      [25, 8400],
    ]);
    expect(index.lookup(0)).toBe(0);
    expect(index.lookup(9)).toBe(0);
    expect(index.lookup(10)).toBe(4200);
    expect(index.lookup(24)).toBe(4200);
    expect(index.lookup(25)).toBe(8400);
    expect(index.lookup(1_000_000)).toBe(8400);
    expect(new OffsetIndex().lookup(5)).toBe(0);
  });

  it("grows past its initial capacity and keeps every entry", () => {
    const index = new OffsetIndex();
    for (let i = 0; i < 10_000; i++) index.push(i * 3, i * 4096);
    expect(index.count).toBe(10_000);
    expect(index.lookup(3 * 5000 + 1)).toBe(5000 * 4096);
    expect(index.lastRelativeOffset).toBe(29_997);
  });

  it("encodes 16-byte big-endian entries and decodes them back", () => {
    const index = build([
      [0, 0],
      [7, 4100],
      [2 ** 40, 2 ** 33],
    ]);
    const bytes = index.encode();
    expect(bytes.length).toBe(48);
    expect(Buffer.from(bytes.subarray(16, 32)).toString("hex")).toBe(
      "0000000000000007" + "0000000000001004",
    );
    const decoded = OffsetIndex.decode(bytes, 2 ** 34);
    expect("index" in decoded && decoded.index.count).toBe(3);
    expect(Buffer.from(index.encode(1)).equals(Buffer.from(bytes.subarray(16)))).toBe(true);
  });

  it("rejects a torn, zero-filled, non-increasing or out-of-range index (docs/decisions.md §2)", () => {
    const good = build([
      [0, 0],
      [7, 4100],
    ]).encode();
    expect(OffsetIndex.decode(good.subarray(0, 25), 10_000)).toMatchObject({
      problem: expect.stringMatching(/whole number/),
    });
    expect(OffsetIndex.decode(new Uint8Array(32), 10_000)).toMatchObject({
      problem: expect.stringMatching(/does not increase/),
    });
    expect(OffsetIndex.decode(good, 4100)).toMatchObject({
      problem: expect.stringMatching(/past the log/),
    });
    const notFirst = build([[3, 0]]).encode();
    expect(OffsetIndex.decode(notFirst, 100)).toMatchObject({
      problem: expect.stringMatching(/not \(0, 0\)/),
    });
    expect(OffsetIndex.decode(new Uint8Array(0), 100)).toMatchObject({
      problem: expect.stringMatching(/empty/),
    });
    expect(OffsetIndex.decode(new Uint8Array(0), 0)).toHaveProperty("index");
  });
});
