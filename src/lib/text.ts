/** Small helpers for messages people read. */

/**
 * `count` with the noun in the right number: `plural(1, "member")` is "1 member",
 * `plural(2, "member")` is "2 members"; `pluralForm` for nouns that do not take an "s".
 */
export function plural(count: number, noun: string, pluralForm = `${noun}s`): string {
  return `${count} ${count === 1 ? noun : pluralForm}`;
}

/** `recordsAppended` → `records_appended`: the snake_case the HTTP API and the CLI's JSON use. */
export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * A copy of `value` for JSON output with every object key in snake_case ({@link snakeCase}), at
 * every depth; arrays and other values are kept as they are. For reports built from internal
 * camelCase objects (`GET /v1/admin/metrics`, `es-broker check --json`).
 */
export function snakeCaseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(snakeCaseKeys);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) out[snakeCase(key)] = snakeCaseKeys(inner);
  return out;
}
