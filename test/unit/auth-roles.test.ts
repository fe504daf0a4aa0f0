/**
 * The role table (src/auth/roles.ts), row by row, against an expectation written out here on its
 * own (not read from the table): every role × every operation × names its patterns match and
 * names they do not. Also the pattern rules (src/auth/patterns.ts).
 */
import { describe, expect, it } from "vitest";
import { BrokerError } from "../../src/broker/errors.ts";
import { matchesPattern, validatePattern, validatePatterns } from "../../src/auth/patterns.ts";
import { anonymousPrincipal, type KeyPrincipal, type Role } from "../../src/auth/principal.ts";
import { authorize, mayList, type Operation, operations, roleTable } from "../../src/auth/roles.ts";

/** What each role may do, and which names are checked: the issue's rules, written out by hand. */
const expected: Record<
  Operation,
  {
    admin: boolean;
    producer: boolean;
    consumer: boolean;
    names: "none" | "topic" | "group" | "group+topics" | "list-topics" | "list-groups";
  }
> = {
  create_topic: { admin: true, producer: false, consumer: false, names: "none" },
  delete_topic: { admin: true, producer: false, consumer: false, names: "none" },
  update_topic_config: { admin: true, producer: false, consumer: false, names: "none" },
  list_topics: { admin: true, producer: true, consumer: true, names: "list-topics" },
  describe_topic: { admin: true, producer: true, consumer: true, names: "topic" },
  produce: { admin: true, producer: true, consumer: false, names: "topic" },
  fetch: { admin: true, producer: false, consumer: true, names: "topic" },
  list_offsets: { admin: true, producer: false, consumer: true, names: "topic" },
  join_group: { admin: true, producer: false, consumer: true, names: "group+topics" },
  heartbeat: { admin: true, producer: false, consumer: true, names: "group" },
  leave_group: { admin: true, producer: false, consumer: true, names: "group" },
  commit_offsets: { admin: true, producer: false, consumer: true, names: "group+topics" },
  describe_group: { admin: true, producer: false, consumer: true, names: "group" },
  list_groups: { admin: true, producer: false, consumer: true, names: "list-groups" },
  cleanup: { admin: true, producer: false, consumer: false, names: "none" },
  describe_storage: { admin: true, producer: false, consumer: false, names: "none" },
  metrics: { admin: true, producer: false, consumer: false, names: "none" },
  create_key: { admin: true, producer: false, consumer: false, names: "none" },
  list_keys: { admin: true, producer: false, consumer: false, names: "none" },
  revoke_key: { admin: true, producer: false, consumer: false, names: "none" },
  read_schemas: { admin: true, producer: true, consumer: true, names: "none" },
  register_schema: { admin: true, producer: false, consumer: false, names: "none" },
  delete_schema: { admin: true, producer: false, consumer: false, names: "none" },
  update_schema_config: { admin: true, producer: false, consumer: false, names: "none" },
};

function key(role: Role): KeyPrincipal {
  return {
    kind: "key",
    id: "0123456789abcdef",
    name: `${role}-key`,
    role,
    topics: role === "admin" ? [] : ["orders", "logs.*"],
    groups: role === "consumer" ? ["billing", "team.*"] : [],
  };
}

const matchingTopics = ["orders", "logs.eu", "logs."];
/** Names no pattern of the keys matches: other names, case, a bare prefix, wildcard- and path-looking names. */
const otherTopics = [
  "payments",
  "Orders",
  "logs",
  "orders2",
  "*",
  "orders*",
  "logs/../x",
  "orders%2F..%2Fx",
  "orders\u0000x",
];
const matchingGroups = ["billing", "team.a"];
const otherGroups = ["billing2", "team", "Billing", "*"];

describe("the role table", () => {
  it("has exactly the operations the expectation lists, in one table", () => {
    expect([...operations].sort()).toEqual(Object.keys(expected).sort());
    expect(Object.keys(roleTable).sort()).toEqual(Object.keys(expected).sort());
  });

  for (const operation of Object.keys(expected) as Operation[]) {
    const row = expected[operation];
    for (const role of ["admin", "producer", "consumer"] as const) {
      const principal = key(role);
      const may = row[role];
      it(`${operation} by ${role}: ${may ? "allowed" : "refused"}${row.names === "none" || !may ? "" : ` on matching ${row.names}, refused on others unless admin`}`, () => {
        const names = (topics: string[], group: string) =>
          row.names === "topic"
            ? { topics }
            : row.names === "group"
              ? { group }
              : row.names === "group+topics"
                ? { group, topics }
                : {};
        for (const t of matchingTopics)
          for (const g of matchingGroups) {
            const decision = authorize(principal, operation, names([t], g));
            expect(decision.allowed, `${t} ${g}`).toBe(may);
            if (!may) expect(decision).toEqual({ allowed: false, reason: "role" });
          }
        if (!may) return;
        if (row.names === "topic" || row.names === "group+topics") {
          for (const t of otherTopics) {
            const topics = row.names === "topic" ? [t] : [matchingTopics[0], t];
            const decision = authorize(principal, operation, names(topics, matchingGroups[0]));
            if (role === "admin") expect(decision.allowed, t).toBe(true);
            else expect(decision, t).toEqual({ allowed: false, reason: "topic", name: t });
          }
        }
        if (row.names === "group" || row.names === "group+topics") {
          for (const g of otherGroups) {
            const decision = authorize(principal, operation, names(matchingTopics, g));
            if (role === "admin") expect(decision.allowed, g).toBe(true);
            else expect(decision, g).toEqual({ allowed: false, reason: "group", name: g });
          }
        }
        if (row.names === "list-topics") {
          for (const t of matchingTopics) expect(mayList(principal, operation, t), t).toBe(true);
          for (const t of otherTopics)
            expect(mayList(principal, operation, t), t).toBe(role === "admin");
        }
        if (row.names === "list-groups") {
          for (const g of matchingGroups) expect(mayList(principal, operation, g), g).toBe(true);
          for (const g of otherGroups)
            expect(mayList(principal, operation, g), g).toBe(role === "admin");
        }
      });
    }
  }

  it("a producer lists no groups at all (list_groups is not its operation)", () => {
    expect(mayList(key("producer"), "list_groups", "billing")).toBe(false);
  });

  it("a consumer key with no group patterns may fetch but use no group", () => {
    const reader: KeyPrincipal = { ...key("consumer"), groups: [] };
    expect(authorize(reader, "fetch", { topics: ["orders"] }).allowed).toBe(true);
    expect(authorize(reader, "join_group", { group: "billing", topics: ["orders"] })).toEqual({
      allowed: false,
      reason: "group",
      name: "billing",
    });
  });

  it("the anonymous principal (no keys configured) may do everything", () => {
    for (const operation of operations) {
      expect(authorize(anonymousPrincipal, operation, { topics: ["x"], group: "y" }).allowed).toBe(
        true,
      );
      expect(mayList(anonymousPrincipal, operation, "x")).toBe(true);
    }
  });
});

describe("patterns", () => {
  it("match exact names, prefixes ending in *, and * matches every name", () => {
    expect(matchesPattern("orders", "orders")).toBe(true);
    expect(matchesPattern("orders", "orders.eu")).toBe(false);
    expect(matchesPattern("orders.*", "orders.eu")).toBe(true);
    expect(matchesPattern("orders.*", "orders.")).toBe(true);
    expect(matchesPattern("orders.*", "orders")).toBe(false);
    expect(matchesPattern("orders*", "orders")).toBe(true);
    expect(matchesPattern("*", "anything")).toBe(true);
    expect(matchesPattern("orders", "Orders")).toBe(false);
  });

  it("refuse a * anywhere but at the end, empty patterns, other characters and non-strings, naming the pattern", () => {
    for (const bad of [
      "*orders",
      "or*ders",
      "**",
      "a**",
      "",
      "orders/x",
      "a b",
      "orders\u0000",
      "x".repeat(251),
    ]) {
      expect(() => validatePattern(bad, "topic"), JSON.stringify(bad)).toThrow(BrokerError);
    }
    expect(() => validatePattern(7, "group")).toThrow(/must be a string/);
    expect(() => validatePattern("a*b", "group")).toThrow(/"a\*b".*only at the end/);
    expect(validatePattern("*", "topic")).toBe("*");
    expect(validatePattern("x".repeat(249), "topic")).toHaveLength(249);
  });

  it("a list drops duplicates and is bounded", () => {
    expect(validatePatterns(["a", "b*", "a"], "topic")).toEqual(["a", "b*"]);
    expect(() => validatePatterns("a", "topic")).toThrow(/list/);
    expect(() =>
      validatePatterns(
        Array.from({ length: 101 }, (_, i) => `t${i}`),
        "topic",
      ),
    ).toThrow(/at most 100/);
  });
});
