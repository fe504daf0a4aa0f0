import { describe, expect, it } from "vitest";
import { lastAtOrBelow } from "../../src/lib/search.ts";

/** The same answer by walking the keys, to check the search against. */
function linear(keys: number[], target: number): number {
  let found = -1;
  for (let i = 0; i < keys.length; i++) if (keys[i] <= target) found = i;
  return found;
}

describe("lastAtOrBelow", () => {
  const keys = [0, 10, 20, 20, 35];
  const at = (i: number) => keys[i];

  it("finds the last key at or below the target, and the last of equal keys", () => {
    expect(lastAtOrBelow(keys.length, at, 0)).toBe(0);
    expect(lastAtOrBelow(keys.length, at, 9)).toBe(0);
    expect(lastAtOrBelow(keys.length, at, 10)).toBe(1);
    expect(lastAtOrBelow(keys.length, at, 20)).toBe(3);
    expect(lastAtOrBelow(keys.length, at, 34)).toBe(3);
    expect(lastAtOrBelow(keys.length, at, 1e15)).toBe(4);
  });

  it("answers −1 when every key is above the target or there are none", () => {
    expect(lastAtOrBelow(keys.length, at, -1)).toBe(-1);
    expect(lastAtOrBelow(0, at, 100)).toBe(-1);
  });

  it("agrees with a linear walk for every target over many sorted key lists", () => {
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    for (let round = 0; round < 200; round++) {
      const list: number[] = [];
      let k = next() % 5;
      for (let i = next() % 20; i > 0; i--) list.push((k += next() % 4));
      for (let t = -2; t <= k + 2; t++)
        expect(lastAtOrBelow(list.length, (i) => list[i], t)).toBe(linear(list, t));
    }
  });
});
