/**
 * `tlsErrorMessage` (src/client/client.ts): a TLS alert is shown by its name, not as OpenSSL's
 * raw error line (newuser12 item 8).
 */
import { describe, expect, it } from "vitest";
import { tlsErrorMessage } from "../../src/client/client.ts";

describe("tlsErrorMessage", () => {
  it("names the alert of an OpenSSL error line", () => {
    const raw = new Error(
      "80EC8A8A4C7F0000:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert certificate required:../deps/openssl/openssl/ssl/record/rec_layer_s3.c:1601:SSL alert number 116\n",
    );
    expect(tlsErrorMessage(raw)).toBe('the broker sent TLS alert "certificate required"');
    const unknownCa = new Error(
      "40F7:error:0A000418:SSL routines:ssl3_read_bytes:tlsv1 alert unknown ca:ssl/record/rec_layer_s3.c:1605:SSL alert number 48",
    );
    expect(tlsErrorMessage(unknownCa)).toBe('the broker sent TLS alert "unknown ca"');
  });

  it("leaves other messages as they are", () => {
    expect(tlsErrorMessage(new Error("read ECONNRESET"))).toBe("read ECONNRESET");
  });
});
