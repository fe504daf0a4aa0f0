/**
 * Repeating a client's values in error messages, error details and log lines, bounded: a value
 * is shown by at most {@link quotedCharsMax} characters of it (and, for a cut string, its
 * length), an array or object by at most {@link quotedNestingDepthMax} levels of it. Every place
 * that repeats something a client sent goes through {@link quote} (inside a sentence) or
 * {@link clip} (a bare string in `details` or a log field), so no client can make an answer or a
 * log line as large as its request, and no message ever recurses over a client's value.
 */
import { quotedCharsMax, quotedNestingDepthMax } from "./limits.ts";

/**
 * `text` cut to at most `maxChars` UTF-16 code units (never between the halves of a surrogate
 * pair), with "…" appended when it was cut; `text` itself when it fits.
 */
export function clip(text: string, maxChars: number = quotedCharsMax): string {
  if (text.length <= maxChars) return text;
  let end = Math.max(0, maxChars);
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${text.slice(0, end)}…`;
}

/**
 * A client's value as it appears in a message: a string as a JSON string literal of at most
 * {@link quotedCharsMax} of its characters, followed by `… (N characters)` when it was cut
 * (`"abc"`, `"aaaa…"… (200000 characters)`); a number, boolean or null as JSON; an array or object
 * as JSON shown to {@link quotedNestingDepthMax} levels and about {@link quotedCharsMax}
 * characters (`[[[…]]]`, `{"a":1,…}`); anything else by its type. Never throws.
 */
export function quote(value: unknown): string {
  if (typeof value === "string") {
    if (value.length <= quotedCharsMax) return JSON.stringify(value);
    return `${JSON.stringify(clip(value))}… (${value.length} characters)`;
  }
  return render(value, 0, { left: quotedCharsMax });
}

/** Bounded JSON-like rendering: `budget.left` characters still to spend, `depth` levels above. */
function render(value: unknown, depth: number, budget: { left: number }): string {
  let text: string;
  if (value === null) text = "null";
  else if (typeof value === "string") text = JSON.stringify(clip(value, Math.max(budget.left, 8)));
  else if (typeof value === "number" || typeof value === "boolean") text = String(value);
  else if (typeof value === "bigint") text = `${value}n`;
  else if (typeof value !== "object") text = typeof value;
  else if (Array.isArray(value)) {
    if (depth >= quotedNestingDepthMax) text = value.length === 0 ? "[]" : "[…]";
    else {
      const parts: string[] = [];
      for (let i = 0; i < value.length; i++) {
        if (budget.left <= 0) {
          parts.push("…");
          break;
        }
        parts.push(render(value[i], depth + 1, budget));
      }
      text = `[${parts.join(",")}]`;
    }
  } else {
    let empty = true;
    for (const key in value) {
      if (Object.hasOwn(value, key)) {
        empty = false;
        break;
      }
    }
    if (depth >= quotedNestingDepthMax) text = empty ? "{}" : "{…}";
    else {
      const parts: string[] = [];
      for (const key in value) {
        if (!Object.hasOwn(value, key)) continue;
        if (budget.left <= 0) {
          parts.push("…");
          break;
        }
        const shownKey = JSON.stringify(clip(key, Math.max(budget.left, 8)));
        budget.left -= shownKey.length + 1;
        parts.push(
          `${shownKey}:${render((value as Record<string, unknown>)[key], depth + 1, budget)}`,
        );
      }
      text = `{${parts.join(",")}}`;
    }
  }
  budget.left -= text.length;
  return text;
}
