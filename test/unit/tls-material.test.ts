/**
 * `misplacedPem` (src/runtime/tls.ts): the start-up message for a certificate and key that
 * `node:tls` refuses says which file holds the wrong kind of PEM block, and when the two were
 * given the other way round (newuser12 item 15b).
 */
import { describe, expect, it } from "vitest";
import { misplacedPem } from "../../src/runtime/tls.ts";

const block = (label: string) =>
  Buffer.from(`-----BEGIN ${label}-----\nAAAA\n-----END ${label}-----\n`, "latin1");

describe("misplacedPem", () => {
  it("says a swapped pair is likely swapped", () => {
    expect(misplacedPem(block("PRIVATE KEY"), block("CERTIFICATE"))).toBe(
      "the --tls-cert file holds no certificate but a private key: are --tls-cert and --tls-key swapped?",
    );
    expect(misplacedPem(block("EC PRIVATE KEY"), block("CERTIFICATE"))).toContain("swapped?");
  });

  it("names the file without the right block when the pair is not simply swapped", () => {
    expect(misplacedPem(block("CERTIFICATE"), block("CERTIFICATE"))).toBe(
      "the --tls-key file holds no private key but a certificate",
    );
    expect(misplacedPem(block("PUBLIC KEY"), block("PRIVATE KEY"))).toBe(
      "the --tls-cert file holds no certificate",
    );
  });

  it("has nothing to say of a certificate and a key in their places", () => {
    expect(misplacedPem(block("CERTIFICATE"), block("RSA PRIVATE KEY"))).toBeNull();
  });
});
