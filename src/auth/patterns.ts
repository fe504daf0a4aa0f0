/**
 * Topic and group patterns of an API key (`docs/security.md`): an exact name, or a prefix
 * ending in `*`. `orders` matches only `orders`; `orders.*` matches `orders.eu` and `orders.` but
 * not `orders`; a lone `*` matches every name. `*` anywhere else is refused, so no pattern is
 * accepted that would silently match nothing. Matching is case-sensitive, byte for byte:
 * topic and group names are `[A-Za-z0-9._-]` and can never contain `*`, `/` or `%`, so a name
 * that looks like a wildcard or a path is just a name that no pattern but its own (or a prefix
 * of it) matches.
 */
import { BrokerError, Errors } from "../broker/errors.ts";
import { apiKeyPatternsMax, topicNameCharsMax } from "../lib/limits.ts";
import { quote } from "../lib/quote.ts";

/** A validated pattern (see the module comment). */
export type NamePattern = string;

const patternSyntax = /^[A-Za-z0-9._-]*\*?$/;

/**
 * Checks one pattern.
 * @param what what the pattern is for, for messages ("topic" or "group").
 * @throws BrokerError invalid_request naming the pattern and what is wrong with it.
 */
export function validatePattern(pattern: unknown, what: "topic" | "group"): NamePattern {
  const action = `Cannot accept ${what} pattern`;
  if (typeof pattern !== "string")
    throw new BrokerError(Errors.invalidRequest, `${action}: it must be a string`);
  const shown = quote(pattern);
  if (pattern.length === 0)
    throw new BrokerError(
      Errors.invalidRequest,
      `${action} "": it is empty (use "*" for every ${what})`,
    );
  if (pattern.length > topicNameCharsMax + 1)
    throw new BrokerError(
      Errors.invalidRequest,
      `${action} ${shown}: it is longer than ${topicNameCharsMax + 1} characters`,
    );
  if (!patternSyntax.test(pattern))
    throw new BrokerError(
      Errors.invalidRequest,
      `${action} ${shown}: a pattern is a ${what} name of [A-Za-z0-9._-], optionally ending in "*" (a prefix); "*" is allowed only at the end`,
    );
  return pattern;
}

/**
 * Checks a list of patterns (each with {@link validatePattern}); duplicates are dropped, order kept.
 * @throws BrokerError invalid_request for a non-array, more than {@link apiKeyPatternsMax} patterns, or a bad pattern.
 */
export function validatePatterns(patterns: unknown, what: "topic" | "group"): NamePattern[] {
  if (!Array.isArray(patterns))
    throw new BrokerError(
      Errors.invalidRequest,
      `Cannot accept ${what} patterns: they must be a list of strings`,
    );
  if (patterns.length > apiKeyPatternsMax)
    throw new BrokerError(
      Errors.invalidRequest,
      `Cannot accept ${what} patterns: ${patterns.length} given, at most ${apiKeyPatternsMax} are allowed`,
    );
  return [...new Set(patterns.map((p) => validatePattern(p, what)))];
}

/** True if `name` matches `pattern` (module comment). */
export function matchesPattern(pattern: NamePattern, name: string): boolean {
  return pattern.endsWith("*") ? name.startsWith(pattern.slice(0, -1)) : pattern === name;
}

/** True if `name` matches any of `patterns`. */
export function matchesAny(patterns: readonly NamePattern[], name: string): boolean {
  for (const pattern of patterns) if (matchesPattern(pattern, name)) return true;
  return false;
}
