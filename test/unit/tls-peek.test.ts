/**
 * `startsPlainHttp` (src/runtime/tls.ts): which first bytes on the HTTPS port are taken for a
 * plain-HTTP request (answered 400 naming https://) and which go on to the TLS handshake
 * (docs/security.md "TLS").
 */
import { describe, expect, it } from "vitest";
import { startsPlainHttp } from "../../src/runtime/tls.ts";

const byte = (text: string) => text.charCodeAt(0);

describe("startsPlainHttp", () => {
  it("takes a method in either case, and CR, LF, space or tab before a request line, for plain HTTP", () => {
    for (const first of ["G", "P", "D", "g", "p", "z", "A", "\r", "\n", " ", "\t"])
      expect(startsPlainHttp(byte(first)), JSON.stringify(first)).toBe(true);
  });

  it("leaves TLS records, an SSLv2 hello and other bytes to the TLS server", () => {
    // 0x14..0x18: TLS record content types (0x16 a handshake); 0x80: an SSLv2 hello.
    for (const b of [0x00, 0x14, 0x15, 0x16, 0x17, 0x18, 0x40, 0x5b, 0x60, 0x7b, 0x80, 0xc1, 0xff])
      expect(startsPlainHttp(b), b.toString(16)).toBe(false);
  });
});
