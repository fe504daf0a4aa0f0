import { describe, expect, it } from "vitest";
import {
  defaultTopicConfig,
  mergeTopicConfig,
  validatePartitionCount,
  validateTopicName,
} from "../../src/broker/config.ts";
import { BrokerError } from "../../src/broker/errors.ts";

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof BrokerError) return err.kind.code;
    throw err;
  }
  return "ok";
}

describe("topic config validation", () => {
  it("accepts names of letters, digits, dot, underscore and dash up to 249 characters", () => {
    for (const name of ["orders", "a", "A.b_c-9", "x".repeat(249), ".hidden", "..."])
      expect(
        codeOf(() => validateTopicName(name)),
        name,
      ).toBe("ok");
  });

  it("refuses empty, too long, reserved and badly charactered names", () => {
    for (const name of ["", "x".repeat(250), ".", "..", "a/b", "a b", "ü", "a\u0000", 7, null]) {
      expect(
        codeOf(() => validateTopicName(name)),
        String(name),
      ).toBe("invalid_topic_name");
    }
  });

  it("accepts partition counts from 1 to 4096 only", () => {
    expect(validatePartitionCount(1)).toBe(1);
    expect(validatePartitionCount(4096)).toBe(4096);
    for (const bad of [0, -1, 4097, 1.5, "3", null])
      expect(
        codeOf(() => validatePartitionCount(bad)),
        String(bad),
      ).toBe("invalid_config");
  });

  it("fills defaults and merges known keys", () => {
    const c = mergeTopicConfig(defaultTopicConfig, {
      segment_bytes: 1024,
      retention_ms: -1,
      cleanup_policy: "delete,compact",
    });
    expect(c.segment_bytes).toBe(1024);
    expect(c.retention_ms).toBe(-1);
    expect(c.cleanup_policy).toBe("compact,delete");
    expect(c.segment_ms).toBe(defaultTopicConfig.segment_ms);
    expect(mergeTopicConfig(defaultTopicConfig, undefined)).toEqual(defaultTopicConfig);
  });

  it("refuses unknown keys, wrong types and out-of-range values, naming the key", () => {
    const cases: [unknown, RegExp][] = [
      [{ segment_bytes: 1023 }, /segment_bytes/],
      [{ segment_bytes: "1024" }, /segment_bytes/],
      [{ retention_ms: -2 }, /retention_ms/],
      [{ retention_bytes: 0 }, /retention_bytes/],
      [{ segment_ms: 0 }, /segment_ms/],
      [{ cleanup_policy: "shred" }, /cleanup_policy/],
      [{ colour: 1 }, /unknown key "colour"/],
      [[1], /must be an object/],
      ["x", /must be an object/],
    ];
    for (const [patch, message] of cases) {
      expect(() => mergeTopicConfig(defaultTopicConfig, patch)).toThrow(message);
      expect(codeOf(() => mergeTopicConfig(defaultTopicConfig, patch))).toBe("invalid_config");
    }
  });
});

describe("schema keys of a topic config (docs/registry.md)", () => {
  it("are absent until set, set to a subject or format, removed by null, and refused when malformed", () => {
    expect(defaultTopicConfig).not.toHaveProperty("value_schema_subject");
    const set = mergeTopicConfig(defaultTopicConfig, {
      value_schema_subject: "orders-value",
      key_schema_subject: "orders-key",
      schema_format: "json",
    });
    expect(set).toMatchObject({
      value_schema_subject: "orders-value",
      key_schema_subject: "orders-key",
      schema_format: "json",
    });
    const removed = mergeTopicConfig(set, { key_schema_subject: null, schema_format: null });
    expect(removed).not.toHaveProperty("key_schema_subject");
    expect(removed).not.toHaveProperty("schema_format");
    expect(removed.value_schema_subject).toBe("orders-value");
    const cases: [unknown, RegExp][] = [
      [{ value_schema_subject: "" }, /value_schema_subject/],
      [{ value_schema_subject: 7 }, /value_schema_subject/],
      [{ key_schema_subject: "a\nb" }, /key_schema_subject.*control/],
      [{ value_schema_subject: "x".repeat(256) }, /1 to 255 characters/],
      [{ schema_format: "avro" }, /schema_format.*"confluent", "json"/],
    ];
    for (const [patch, message] of cases) {
      expect(() => mergeTopicConfig(defaultTopicConfig, patch)).toThrow(message);
      expect(codeOf(() => mergeTopicConfig(defaultTopicConfig, patch))).toBe("invalid_config");
    }
  });
});

describe("replica_lag_ms (cluster mode, docs/cluster.md)", () => {
  it("is absent until set, takes 100 … 3 600 000 ms, is removed by null, and refuses the rest", () => {
    expect(defaultTopicConfig).not.toHaveProperty("replica_lag_ms");
    const set = mergeTopicConfig(defaultTopicConfig, { replica_lag_ms: 2500 });
    expect(set.replica_lag_ms).toBe(2500);
    expect(mergeTopicConfig(set, { replica_lag_ms: null })).not.toHaveProperty("replica_lag_ms");
    for (const bad of [99, 3_600_001, 1.5, "1000", true])
      expect(() => mergeTopicConfig(defaultTopicConfig, { replica_lag_ms: bad })).toThrow(
        /"replica_lag_ms".*100 to 3600000 ms/,
      );
  });
});
