import { describe, expect, it } from "vitest";
import { murmur3x86_128 } from "../../src/lib/murmur3.ts";
import { utf8 } from "../../src/lib/bytes.ts";

// Golden values from the reference MurmurHash3_x86_128 (SMHasher), compiled with gcc.
const strings: [string, number, number[]][] = [
  ["", 0, [0x00000000, 0x00000000, 0x00000000, 0x00000000]],
  ["a", 0, [0xa794933c, 0x5556b01b, 0x5556b01b, 0x5556b01b]],
  ["ab", 0, [0x158451df, 0x25be3010, 0x25be3010, 0x25be3010]],
  ["abc", 0, [0x75cdc6d1, 0xa2b006a5, 0xa2b006a5, 0xa2b006a5]],
  ["abcd", 0, [0x96b6ccaa, 0x45afc62e, 0x45afc62e, 0x45afc62e]],
  ["hello", 0, [0x2b2444a0, 0xdb91def7, 0x9adb31b6, 0x9adb31b6]],
  ["hello, world", 0, [0x8b21605c, 0xb9b98a1e, 0x93273a83, 0xeb5957c7]],
  [
    "The quick brown fox jumps over the lazy dog",
    0,
    [0x2f1583c3, 0xecee2c67, 0x5d7bf66c, 0xe5e91d2c],
  ],
  ["0123456789abcdef", 0, [0xfb7d4409, 0x36aed30a, 0x48ad1d9b, 0x572b3bfd]],
  ["0123456789abcdefX", 0, [0x1c4db777, 0x1a9aa2d3, 0xc20e1624, 0x5b179223]],
  ["0123456789abcdef0123456789abcde", 0, [0xa9557e29, 0x787f5b82, 0x72e2d0c7, 0xc4945e57]],
  ["", 0x9747b28c, [0xf7bed5a1, 0x5b576a1c, 0x5b576a1c, 0x5b576a1c]],
  ["a", 0x9747b28c, [0x084ef944, 0x21a1186e, 0x21a1186e, 0x21a1186e]],
  ["hello", 0x9747b28c, [0x90935c71, 0x322922b5, 0xd498b585, 0xd498b585]],
  [
    "The quick brown fox jumps over the lazy dog",
    0x9747b28c,
    [0x8ad4d55e, 0x4cb86171, 0x8ea73a9c, 0xcdb6793e],
  ],
];

// Prefixes of the bytes 0, 1, …, 255 (every tail length and high bytes in every position).
const prefixes: [number, number[]][] = [
  [17, [0x6ac99cdb, 0x359c940b, 0xae1673ad, 0xa275ab51]],
  [34, [0x4feb1790, 0x222781ab, 0xfcfe1743, 0x1cb736fa]],
  [51, [0x2b0c1da1, 0x5f5f4e11, 0x02d9cbe3, 0x4e058277]],
  [68, [0x0aac1c7d, 0xe60b345b, 0x1517da95, 0x12ba932e]],
  [85, [0xc535dab5, 0x4c39e453, 0xfadd3c18, 0x59545ddc]],
  [102, [0xf4a98f09, 0x34701b51, 0x266b1797, 0xcb11b007]],
  [119, [0x4e58a24c, 0x7a16c495, 0x57b16d16, 0x3f4dee56]],
  [136, [0xbcf12cd2, 0xcc2e6ec6, 0x3c58236f, 0x9edea53b]],
  [153, [0x9dffa026, 0x912e0d71, 0x173fd530, 0x4ac36c37]],
  [170, [0x0702d548, 0x0efa1fdb, 0xd5d36d16, 0xe9649dd5]],
  [187, [0xfc46f619, 0xcbde10ca, 0xa7ed9eee, 0x66c71bb0]],
  [204, [0xdef92d3a, 0xed443cf3, 0x5a28d116, 0xf232eff5]],
  [221, [0x48bc67bd, 0xedaf7423, 0xa4c648c3, 0xbeb5c5ce]],
  [238, [0x70e2b5b2, 0xafced915, 0xb7965cde, 0xf4554ddb]],
  [255, [0xea84c820, 0x6cb45a87, 0xa8748b05, 0xf8dd9307]],
];

describe("murmur3x86_128 (the compaction key digest)", () => {
  it.each(strings)("hashes %j with seed %d to the reference digest", (text, seed, expected) => {
    const out = new Uint32Array(4);
    const bytes = utf8(text);
    murmur3x86_128(bytes, { start: 0, end: bytes.length, seed }, out);
    expect([...out]).toEqual(expected);
  });

  it.each(prefixes)(
    "hashes the first %d of the bytes 0…255 to the reference digest",
    (length, expected) => {
      const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
      const out = new Uint32Array(4);
      murmur3x86_128(bytes, { start: 0, end: length }, out);
      expect([...out]).toEqual(expected);
    },
  );

  it("hashes a range inside a larger buffer the same as the range on its own", () => {
    const key = utf8("The quick brown fox jumps over the lazy dog");
    const padded = new Uint8Array(key.length + 13).fill(0xee);
    padded.set(key, 7);
    const a = new Uint32Array(4);
    const b = new Uint32Array(4);
    murmur3x86_128(key, { start: 0, end: key.length }, a);
    murmur3x86_128(padded, { start: 7, end: 7 + key.length }, b);
    expect([...b]).toEqual([...a]);
  });
});
