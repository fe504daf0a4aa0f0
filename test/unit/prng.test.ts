import { describe, expect, it } from "vitest";
import { AssertionError } from "../../src/lib/assert.ts";
import { Prng } from "../../src/lib/prng.ts";

function draws(prng: Prng, count: number): number[] {
  return Array.from({ length: count }, () => prng.nextU32());
}

describe("Prng", () => {
  it("keeps its sequences across versions, so recorded seeds still replay", () => {
    expect(draws(new Prng(0), 4)).toEqual([3809008728, 1219411154, 2874742318, 3019234641]);
    expect(draws(new Prng(42), 4)).toEqual([2837322924, 2689157697, 135565847, 3108665369]);
    expect(draws(new Prng(-1), 4)).toEqual([835879718, 784925103, 3909372582, 938962456]);
  });

  it("gives equal sequences for equal seeds and different ones for seeds that differ only in their high bits", () => {
    expect(draws(new Prng(123), 100)).toEqual(draws(new Prng(123), 100));
    expect(draws(new Prng(5), 8)).not.toEqual(draws(new Prng(5 + 2 ** 32), 8));
    expect(draws(new Prng(0), 8)).not.toEqual(draws(new Prng(1), 8));
  });

  it("nextU32 returns unsigned 32-bit integers", () => {
    for (const x of draws(new Prng(9), 1000)) {
      expect(Number.isInteger(x)).toBe(true);
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThan(2 ** 32);
    }
  });

  it("int stays in range and reaches every value about equally often", () => {
    const prng = new Prng(17);
    const counts = new Array<number>(6).fill(0);
    for (let i = 0; i < 60_000; i++) counts[prng.int(6)] += 1;
    for (const c of counts) {
      expect(c).toBeGreaterThan(9_500);
      expect(c).toBeLessThan(10_500);
    }
    expect(new Prng(3).int(1)).toBe(0);
    const wide = new Prng(4).int(2 ** 32);
    expect(wide).toBeGreaterThanOrEqual(0);
    expect(wide).toBeLessThan(2 ** 32);
  });

  it("chance(0) is never true, chance(1) always, and chance(p) about p of the time", () => {
    const prng = new Prng(8);
    let hits = 0;
    for (let i = 0; i < 1000; i++) {
      expect(prng.chance(0)).toBe(false);
      expect(prng.chance(1)).toBe(true);
    }
    for (let i = 0; i < 10_000; i++) if (prng.chance(0.25)) hits += 1;
    expect(hits).toBeGreaterThan(2_300);
    expect(hits).toBeLessThan(2_700);
  });

  it("rejects arguments outside their ranges as programmer errors", () => {
    const prng = new Prng(1);
    expect(() => new Prng(1.5)).toThrow(AssertionError);
    expect(() => new Prng(2 ** 53)).toThrow(AssertionError);
    expect(() => prng.int(0)).toThrow(AssertionError);
    expect(() => prng.int(2.5)).toThrow(AssertionError);
    expect(() => prng.int(2 ** 32 + 1)).toThrow(AssertionError);
    expect(() => prng.chance(-0.1)).toThrow(AssertionError);
    expect(() => prng.chance(1.1)).toThrow(AssertionError);
  });
});
