/** Small helpers for messages people read. */

/**
 * `count` with the noun in the right number: `plural(1, "member")` is "1 member",
 * `plural(2, "member")` is "2 members"; `pluralForm` for nouns that do not take an "s".
 */
export function plural(count: number, noun: string, pluralForm = `${noun}s`): string {
  return `${count} ${count === 1 ? noun : pluralForm}`;
}
