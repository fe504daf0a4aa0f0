/**
 * The role table: what each role may do, and which names of a request are checked against the
 * key's patterns. Every broker call a transport makes goes through {@link authorize} (from the
 * broker view of `auth/access.ts`), on HTTP and TCP alike, so a principal gets the same decision
 * on every front door. Tests walk it row by row (`test/unit/auth-roles.test.ts`) and through the
 * real process (`test/e2e/auth.test.ts`).
 *
 * | operation             | admin | producer | consumer | names checked against the key's patterns    |
 * |-----------------------|:-----:|:--------:|:--------:|----------------------------------------------|
 * | `create_topic`        |   ✓   |          |          | —                                            |
 * | `delete_topic`        |   ✓   |          |          | —                                            |
 * | `update_topic_config` |   ✓   |          |          | —                                            |
 * | `list_topics`         |   ✓   |    ✓     |    ✓     | the answer lists only topics the key matches |
 * | `describe_topic`      |   ✓   |    ✓     |    ✓     | the topic                                    |
 * | `produce`             |   ✓   |    ✓     |          | the topic (plain and idempotent produce)     |
 * | `fetch`               |   ✓   |          |    ✓     | the topic (also SSE streams)                 |
 * | `list_offsets`        |   ✓   |          |    ✓     | the topic                                    |
 * | `join_group`          |   ✓   |          |    ✓     | the group and every topic subscribed         |
 * | `heartbeat`           |   ✓   |          |    ✓     | the group                                    |
 * | `leave_group`         |   ✓   |          |    ✓     | the group                                    |
 * | `commit_offsets`      |   ✓   |          |    ✓     | the group and every topic committed          |
 * | `describe_group`      |   ✓   |          |    ✓     | the group; the answer shows only topics the key matches |
 * | `list_groups`         |   ✓   |          |    ✓     | the answer lists only groups the key matches, showing only topics it matches |
 * | `cleanup`             |   ✓   |          |          | —                                            |
 * | `describe_storage`    |   ✓   |          |          | —                                            |
 * | `metrics`             |   ✓   |          |          | —                                            |
 * | `create_key`          |   ✓   |          |          | —                                            |
 * | `list_keys`           |   ✓   |          |          | —                                            |
 * | `revoke_key`          |   ✓   |          |          | —                                            |
 * | `read_schemas`        |   ✓   |    ✓     |    ✓     | — (every schema registry read, docs/registry.md) |
 * | `register_schema`     |   ✓   |          |          | —                                            |
 * | `delete_schema`       |   ✓   |          |          | —                                            |
 * | `update_schema_config` |  ✓   |          |          | —                                            |
 *
 * An admin key has no patterns and may use every topic and group. Deny by default: an operation
 * missing from the table is refused to everyone but admin, and a role missing from a row is refused.
 * Describing a topic is allowed to consumers too (the CLI's `consume` needs the partition count).
 * The anonymous principal (authentication off: no `api_keys.json`) is allowed everything.
 */
import type { Principal, Role } from "./principal.ts";
import { matchesAny } from "./patterns.ts";

/** What one row of the table says. */
export interface OperationRule {
  /** Roles that may perform the operation. */
  readonly roles: readonly Role[];
  /** Names of a request checked against the key's patterns (admin skips them). */
  readonly checks: readonly ("topic" | "group")[];
  /** A listing: instead of refusing, its answer is cut to the names the key matches. */
  readonly filters?: "topic" | "group";
}

const adminOnly: OperationRule = { roles: ["admin"], checks: [] };

/** The table of the module comment, row by row. */
export const roleTable = Object.freeze({
  create_topic: adminOnly,
  delete_topic: adminOnly,
  update_topic_config: adminOnly,
  list_topics: { roles: ["admin", "producer", "consumer"], checks: [], filters: "topic" },
  describe_topic: { roles: ["admin", "producer", "consumer"], checks: ["topic"] },
  produce: { roles: ["admin", "producer"], checks: ["topic"] },
  fetch: { roles: ["admin", "consumer"], checks: ["topic"] },
  list_offsets: { roles: ["admin", "consumer"], checks: ["topic"] },
  join_group: { roles: ["admin", "consumer"], checks: ["group", "topic"] },
  heartbeat: { roles: ["admin", "consumer"], checks: ["group"] },
  leave_group: { roles: ["admin", "consumer"], checks: ["group"] },
  commit_offsets: { roles: ["admin", "consumer"], checks: ["group", "topic"] },
  describe_group: { roles: ["admin", "consumer"], checks: ["group"] },
  list_groups: { roles: ["admin", "consumer"], checks: [], filters: "group" },
  cleanup: adminOnly,
  describe_storage: adminOnly,
  metrics: adminOnly,
  create_key: adminOnly,
  list_keys: adminOnly,
  revoke_key: adminOnly,
  read_schemas: { roles: ["admin", "producer", "consumer"], checks: [] },
  register_schema: adminOnly,
  delete_schema: adminOnly,
  update_schema_config: adminOnly,
} satisfies Record<string, OperationRule>);

/** An operation of the table. */
export type Operation = keyof typeof roleTable;

/** Every operation, in table order. */
export const operations = Object.keys(roleTable) as Operation[];

/** The names a request touches, for the table's `checks`. */
export interface RequestNames {
  /** The one topic a request names (most requests). */
  topic?: string;
  /** Every topic a request names when there are several (a join's subscriptions, a commit's topics). */
  topics?: readonly string[];
  group?: string;
}

/** The outcome of {@link authorize}. */
export type Decision =
  | { readonly allowed: true }
  /** `reason` says what failed: the role, or a topic or group name (given in `name`) no pattern matches. */
  | { readonly allowed: false; readonly reason: "role" }
  | { readonly allowed: false; readonly reason: "topic" | "group"; readonly name: string };

const allowed: Decision = Object.freeze({ allowed: true });
const roleRefused: Decision = Object.freeze({ allowed: false, reason: "role" });

/** Decides whether `principal` may perform `operation` on `names` (the module's table). */
export function authorize(
  principal: Principal,
  operation: Operation,
  names: RequestNames = {},
): Decision {
  if (principal.kind === "anonymous") return allowed;
  const rule: OperationRule | undefined = roleTable[operation];
  if (rule === undefined) return principal.role === "admin" ? allowed : roleRefused;
  if (!rule.roles.includes(principal.role)) return roleRefused;
  if (principal.role === "admin") return allowed;
  for (const check of rule.checks) {
    if (check === "group") {
      const group = names.group ?? "";
      if (!matchesAny(principal.groups, group))
        return { allowed: false, reason: "group", name: group };
    } else {
      if (names.topic !== undefined && !matchesAny(principal.topics, names.topic))
        return { allowed: false, reason: "topic", name: names.topic };
      for (const topic of names.topics ?? [])
        if (!matchesAny(principal.topics, topic))
          return { allowed: false, reason: "topic", name: topic };
    }
  }
  return allowed;
}

/**
 * True if a listing `operation` may show `name` to `principal` (rows with `filters`): admin and
 * anonymous see everything, others the names their patterns match.
 */
export function mayList(principal: Principal, operation: Operation, name: string): boolean {
  if (principal.kind === "anonymous" || principal.role === "admin") return true;
  const rule: OperationRule = roleTable[operation];
  if (!rule.roles.includes(principal.role)) return false;
  return rule.filters === "group"
    ? matchesAny(principal.groups, name)
    : matchesAny(principal.topics, name);
}
