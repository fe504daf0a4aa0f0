/**
 * `isLoopback` (src/cli/args.ts): what decides whether `serve` may listen without API keys, and
 * whether an etcd password may travel over plain HTTP. Only loopback IP literals and the name
 * `localhost` count; a name that merely starts with "127." may resolve anywhere (attack8 F1).
 * parseCli's hints for options of Kafka's tools, and the HTTP address hint of commands given --broker.
 */
import { describe, expect, it } from "vitest";
import { UsageError, isLoopback, parseCli } from "../../src/cli/args.ts";
import { httpAddressHint } from "../../src/cli/connection.ts";

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

/** The message parseCli's UsageError gives for `args` with `options`. */
function usage(
  options: Record<string, { type: "string" | "boolean"; multiple?: boolean }>,
  args: string[],
): string {
  try {
    parseCli({ args, options, allowPositionals: true });
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as Error).message;
  }
  throw new Error(`no usage error for ${args.join(" ")}`);
}

describe("parseCli's unknown options that Kafka's tools take (newuser report 8)", () => {
  const topics = {
    broker: { type: "string" },
    partitions: { type: "string" },
    config: { type: "string", multiple: true },
  } as const;
  const consume = {
    broker: { type: "string" },
    partition: { type: "string" },
    "max-records": { type: "string" },
  } as const;

  it("names es-broker's equivalent, with the value given", () => {
    expect(usage(topics, ["create", "t", "--partitions", "2", "--replication-factor", "2"])).toBe(
      "unknown option --replication-factor (Kafka's tools take it; es-broker takes --config replication_factor=2)",
    );
    expect(usage(topics, ["create", "t", "--min-insync-replicas=2"])).toBe(
      "unknown option --min-insync-replicas (Kafka's tools take it; es-broker takes --config min_insync_replicas=2)",
    );
    expect(usage(consume, ["t", "--bootstrap-server", "10.0.0.1:9092"])).toBe(
      "unknown option --bootstrap-server (Kafka's tools take it; es-broker takes --broker 10.0.0.1:9092)",
    );
    expect(usage(consume, ["t", "--max-messages", "5"])).toBe(
      "unknown option --max-messages (Kafka's tools take it; es-broker takes --max-records 5)",
    );
    expect(usage(consume, ["--topic", "orders"])).toBe(
      "unknown option --topic (Kafka's tools take it; es-broker takes the topic as a plain argument: es-broker produce|consume|topics create orders)",
    );
    expect(usage(topics, ["--create", "t"])).toBe(
      "unknown option --create (Kafka's tools take it; es-broker takes the action as an argument: es-broker topics create)",
    );
  });

  it("gives a placeholder without a value, and no hint where the equivalent is not an option", () => {
    expect(usage(topics, ["create", "t", "--replication-factor"])).toBe(
      "unknown option --replication-factor (Kafka's tools take it; es-broker takes --config replication_factor=N)",
    );
    expect(usage(topics, ["create", "t", "--replication-factor", "--partitions", "2"])).toBe(
      "unknown option --replication-factor (Kafka's tools take it; es-broker takes --config replication_factor=N)",
    );
    // consume has no --config; groups no --max-records; nobody has --nope.
    expect(usage(consume, ["t", "--replication-factor", "2"])).toBe(
      "unknown option --replication-factor",
    );
    expect(usage({ broker: { type: "string" } }, ["g", "--max-messages", "5"])).toBe(
      "unknown option --max-messages",
    );
    expect(usage(topics, ["--nope"])).toBe("unknown option --nope");
    expect(usage(topics, ["--constructor"])).toBe("unknown option --constructor");
  });
});

describe("httpAddressHint (newuser report 8)", () => {
  it("says https:// when TLS options are given, else http(s)://, with the --broker host", () => {
    expect(httpAddressHint({ "tls-ca": "ca.pem" }, "broker1.internal:9092")).toBe(
      "https://broker1.internal:HTTP_PORT (the broker's --http-port, default 8080)",
    );
    expect(httpAddressHint({ tls: true }, "[::1]:9092", "/registry")).toBe(
      "https://[::1]:HTTP_PORT/registry (the broker's --http-port, default 8080)",
    );
    expect(httpAddressHint({}, "10.0.0.1:9092,10.0.0.2:9092")).toBe(
      "http(s)://10.0.0.1:HTTP_PORT (the broker's --http-port, default 8080; https:// when the broker serves TLS)",
    );
    expect(httpAddressHint({}, "nonsense")).toBe(
      "http(s)://HOST:HTTP_PORT (the broker's --http-port, default 8080; https:// when the broker serves TLS)",
    );
  });
});
