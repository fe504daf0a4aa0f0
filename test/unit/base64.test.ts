import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { Base64Error, decodeBase64, encodeBase64 } from "../../src/lib/base64.ts";

const text = (s: string) => new TextEncoder().encode(s);

describe("encodeBase64", () => {
  it("encodes the RFC 4648 test vectors with padding", () => {
    expect(encodeBase64(text(""))).toBe("");
    expect(encodeBase64(text("f"))).toBe("Zg==");
    expect(encodeBase64(text("fo"))).toBe("Zm8=");
    expect(encodeBase64(text("foo"))).toBe("Zm9v");
    expect(encodeBase64(text("foob"))).toBe("Zm9vYg==");
    expect(encodeBase64(text("fooba"))).toBe("Zm9vYmE=");
    expect(encodeBase64(text("foobar"))).toBe("Zm9vYmFy");
  });

  it("uses + and / from the standard alphabet, never - or _", () => {
    expect(encodeBase64(new Uint8Array([0xfb, 0xff, 0xbf]))).toBe("+/+/");
  });

  it("matches Node's Buffer encoding for arbitrary bytes, including values longer than one chunk", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        expect(encodeBase64(bytes)).toBe(Buffer.from(bytes).toString("base64"));
      }),
    );
    const big = new Uint8Array(100_003).map((_, i) => (i * 7919) & 0xff);
    expect(encodeBase64(big)).toBe(Buffer.from(big).toString("base64"));
  });
});

describe("decodeBase64", () => {
  it("decodes the RFC 4648 test vectors", () => {
    expect(decodeBase64("")).toEqual(new Uint8Array(0));
    expect(decodeBase64("Zg==")).toEqual(text("f"));
    expect(decodeBase64("Zm8=")).toEqual(text("fo"));
    expect(decodeBase64("Zm9v")).toEqual(text("foo"));
    expect(decodeBase64("Zm9vYmE=")).toEqual(text("fooba"));
    expect(decodeBase64("+/+/")).toEqual(new Uint8Array([0xfb, 0xff, 0xbf]));
  });

  it("round-trips every byte string through encodeBase64", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        expect(decodeBase64(encodeBase64(bytes))).toEqual(bytes);
      }),
    );
  });

  it("rejects the URL-safe alphabet", () => {
    expect(() => decodeBase64("-_-_")).toThrow(Base64Error);
    expect(() => decodeBase64("-_-_")).toThrow(
      /character "-" at position 0 is not in the standard base64 alphabet/,
    );
  });

  it("rejects missing padding", () => {
    expect(() => decodeBase64("Zg")).toThrow(
      /length 2 is not a multiple of 4: padding "=" is required/,
    );
    expect(() => decodeBase64("Zm8")).toThrow(Base64Error);
    expect(() => decodeBase64("Zm9vYg")).toThrow(Base64Error);
  });

  it("rejects whitespace and line breaks anywhere", () => {
    for (const bad of [" Zm9v", "Zm9v ", "Zm 9", "Zm9v\nYmFy", "Zm9v\r\n", "Zm\t9"]) {
      expect(() => decodeBase64(bad), JSON.stringify(bad)).toThrow(Base64Error);
    }
  });

  it("rejects non-canonical trailing bits", () => {
    // "Zg==" is "f"; "Zh==" carries bits below the last byte that the encoder never sets.
    expect(() => decodeBase64("Zh==")).toThrow(/position 1 has non-zero trailing bits/);
    // "Zm8=" is "fo"; "Zm9=" sets the two spare bits.
    expect(() => decodeBase64("Zm9=")).toThrow(/position 2 has non-zero trailing bits/);
  });

  it("rejects padding that is not at the end", () => {
    for (const bad of ["====", "Z===", "Zg=a", "Zg==Zm9v", "=Zm9", "Zm=v"]) {
      expect(() => decodeBase64(bad), bad).toThrow(Base64Error);
    }
  });

  it("rejects characters outside ASCII and other symbols", () => {
    for (const bad of ["Zm9é", "Zm9%", "Zm9.", "Zm9\u0000", "Zm9😀"]) {
      expect(() => decodeBase64(bad), bad).toThrow(Base64Error);
    }
  });

  it("names the offending position in the error", () => {
    try {
      decodeBase64("Zm9vYm*y");
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(Base64Error);
      expect((e as Base64Error).position).toBe(6);
    }
  });

  it("accepts exactly what Node's decoder accepts among canonical padded strings, and no lenient forms", () => {
    fc.assert(
      fc.property(
        fc.string({
          unit: fc.constantFrom(
            ..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/= -_\n",
          ),
          maxLength: 16,
        }),
        (s) => {
          let decoded: Uint8Array | null = null;
          try {
            decoded = decodeBase64(s);
          } catch (e) {
            expect(e).toBeInstanceOf(Base64Error);
          }
          // Accepted exactly when re-encoding reproduces the input: the canonical form is the only form.
          const canonical = Buffer.from(Buffer.from(s, "base64").toString("base64"));
          if (decoded !== null) {
            expect(encodeBase64(decoded)).toBe(s);
          } else {
            expect(
              canonical.toString() === s && s.length % 4 === 0 && !/[^A-Za-z0-9+/=]/.test(s),
            ).toBe(false);
          }
        },
      ),
    );
  });
});
