import { describe, expect, it } from "vitest";
import { unmappedHost } from "../../src/lib/address.ts";

describe("unmappedHost", () => {
  it("reads an IPv4 address mapped into IPv6 as plain IPv4", () => {
    expect(unmappedHost("::ffff:127.0.0.1")).toBe("127.0.0.1");
    expect(unmappedHost("::ffff:10.1.2.3")).toBe("10.1.2.3");
  });
  it("keeps IPv6 and IPv4 addresses as they are", () => {
    expect(unmappedHost("::1")).toBe("::1");
    expect(unmappedHost("fe80::1")).toBe("fe80::1");
    expect(unmappedHost("192.168.0.7")).toBe("192.168.0.7");
    // an IPv6 address in the ::ffff: range written in hex is not an IPv4 address
    expect(unmappedHost("::ffff:7f00:1")).toBe("::ffff:7f00:1");
  });
  it("is undefined when the runtime does not know the address", () => {
    expect(unmappedHost(undefined)).toBeUndefined();
    expect(unmappedHost("")).toBeUndefined();
  });
});
