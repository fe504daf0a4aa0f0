/**
 * Who is making a request. A transport authenticates the request (HTTP `Authorization: Bearer`,
 * the TCP authenticate api) and gets a {@link Principal}; the broker view of `auth/access.ts`
 * authorizes each call against the role table (`auth/roles.ts`).
 */
import type { NamePattern } from "./patterns.ts";

/** The roles a key can have (the role table, `auth/roles.ts`, says what each may do). */
export const roleNames = ["admin", "producer", "consumer"] as const;
/** One of {@link roleNames}. */
export type Role = (typeof roleNames)[number];

/** True if `value` is a role name. */
export function isRole(value: unknown): value is Role {
  return typeof value === "string" && (roleNames as readonly string[]).includes(value);
}

/** A request made with an API key. Frozen; the key store makes one per key and replaces it when the key changes. */
export interface KeyPrincipal {
  readonly kind: "key";
  /** The key's id part (not secret): what logs name. */
  readonly id: string;
  /** The key's name, unique in the key store: what audit logs name. */
  readonly name: string;
  readonly role: Role;
  /** Topics the key may use (producer, consumer); empty for admin, who may use every topic. */
  readonly topics: readonly NamePattern[];
  /** Groups the key may use (consumer); empty otherwise. */
  readonly groups: readonly NamePattern[];
}

/**
 * A request without a key while authentication is off (no `api_keys.json`): it may do everything,
 * as before keys existed. Never valid once a key store exists.
 */
export interface AnonymousPrincipal {
  readonly kind: "anonymous";
}

/** See the module comment. */
export type Principal = KeyPrincipal | AnonymousPrincipal;

/** The one anonymous principal. */
export const anonymousPrincipal: AnonymousPrincipal = Object.freeze({ kind: "anonymous" });

/** How logs and messages name a principal: `key "ingest"` or `anonymous`. */
export function principalLabel(principal: Principal): string {
  return principal.kind === "key" ? `key ${JSON.stringify(principal.name)}` : "anonymous";
}
