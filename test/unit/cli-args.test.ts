/**
 * `isLoopback` (src/cli/args.ts): what decides whether `serve` may listen without API keys, and
 * whether an etcd password may travel over plain HTTP. Only loopback IP literals and the name
 * `localhost` count; a name that merely starts with "127." may resolve anywhere (attack8 F1).
 */
import { describe, expect, it } from "vitest";
import { isLoopback } from "../../src/cli/args.ts";

describe("isLoopback", () => {
  it("takes loopback IP literals and localhost", () => {
    for (const host of [
      "127.0.0.1",
      "127.1.2.3",
      "::1",
      "[::1]",
      "0:0:0:0:0:0:0:1",
      "::ffff:127.0.0.1",
      "localhost",
      "LOCALHOST",
    ])
      expect(isLoopback(host), host).toBe(true);
  });

  it("refuses names that look like loopback, and every other address", () => {
    for (const host of [
      "127.attacker.example",
      "127.0.0.1.nip.io",
      "127.0.0.1.",
      "localhost.attacker.example",
      "127.0.0.256",
      "10.1.2.3",
      "0.0.0.0",
      "::",
      "::ffff:10.0.0.1",
      "example.net",
      "",
    ])
      expect(isLoopback(host), host).toBe(false);
  });
});
