/**
 * Schema text → parsed JSON and its canonical text, the form that decides whether two schemas are
 * the same one (docs/registry.md "Identity, versions and deletion"). The canonical text is the compact JSON of
 * the parsed schema with the keys of every object sorted: whitespace, line endings (CRLF or LF)
 * and the order of an object's keys do not matter, the order of array elements does (an Avro
 * record's `fields` and an enum's `symbols` keep their order, since it changes the binary
 * encoding). Strings are compared exactly, `doc` included.
 *
 * Size and nesting are checked before any recursive code sees the text (`schemaBytesMax`,
 * `schemaDepthMax` in `lib/limits.ts`): the depth walk is iterative, so a schema nested a million
 * levels deep is refused with its depth named, never a stack overflow.
 */
import { schemaBytesMax, schemaDepthMax } from "../lib/limits.ts";
import { utf8 } from "../lib/bytes.ts";
import { errorMessage } from "../lib/errors.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";

/** A schema's JSON value (what `JSON.parse` returns). */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A parsed schema text: its JSON value and its canonical text. */
export interface ParsedJson {
  json: Json;
  canonical: string;
}

/**
 * Parses a schema text (the `schema` string of a request).
 * @throws RegistryError invalid_schema (42201) when the text is over `schemaBytesMax` bytes, not
 *   JSON, or nested deeper than `schemaDepthMax`, naming the limit or the parse error.
 */
export function parseSchemaJson(text: string, action: string): ParsedJson {
  // UTF-8 bytes are at most 3 per UTF-16 unit: only a long text needs counting.
  if (text.length * 3 > schemaBytesMax) {
    const sizeBytes = utf8(text).length;
    if (sizeBytes > schemaBytesMax)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: the schema is ${sizeBytes} bytes, over the limit of ${schemaBytesMax} bytes (schemaBytesMax)`,
        { limit_bytes: schemaBytesMax },
      );
  }
  let json: Json;
  try {
    json = JSON.parse(text) as Json;
  } catch (err) {
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: the schema is not valid JSON: ${errorMessage(err)}`,
    );
  }
  const depth = jsonDepth(json, schemaDepthMax);
  if (depth > schemaDepthMax)
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: the schema nests objects and arrays more than ${schemaDepthMax} levels deep (schemaDepthMax)`,
      { limit_depth: schemaDepthMax },
    );
  return { json, canonical: exactCanonical(text, json) };
}

/** Marks, inside a string, an integer literal the canonical text must keep digit for digit. */
const exactMark = "\u0000es-broker-integer:";

/**
 * {@link canonicalJson} of `text`, but integer literals past 2^53 keep their digits
 * (`JSON.parse` would round 9223372036854775807 to 9223372036854776000, giving schemas that
 * differ only there one id). Such literals are parsed a second time as marked strings and
 * written back bare; a text whose strings could hold the mark itself keeps the rounded form.
 */
function exactCanonical(text: string, json: Json): string {
  const marked = markWideIntegers(text);
  if (marked === null || text.includes("es-broker-integer:")) return canonicalJson(json);
  const canonical = canonicalJson(JSON.parse(marked) as Json);
  // In the canonical text a marked string reads `"\u0000es-broker-integer:<digits>"`.
  const written = JSON.stringify(exactMark)
    .slice(0, -1)
    .replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
  return canonical.replace(new RegExp(`${written}(-?[0-9]+)"`, "g"), "$1");
}

/** `text` with each integer literal outside strings that is not a safe integer turned into a marked string; null if it has none. */
function markWideIntegers(text: string): string | null {
  let out = "";
  let last = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') {
      inString = true;
      continue;
    }
    if (c !== "-" && (c < "0" || c > "9")) continue;
    let end = i + 1;
    while (end < text.length && /[0-9.eE+-]/.test(text[end])) end++;
    const literal = text.slice(i, end);
    if (/^-?[0-9]+$/.test(literal) && !Number.isSafeInteger(Number(literal))) {
      out += `${text.slice(last, i)}${JSON.stringify(exactMark).slice(0, -1)}${literal}"`;
      last = end;
    }
    i = end - 1;
  }
  return last === 0 ? null : out + text.slice(last);
}

/**
 * Nesting depth of `value` (a scalar is 0, `[]` and `{}` are 1), counted iteratively; stops
 * counting once past `stopAfter` and returns `stopAfter + 1`.
 */
export function jsonDepth(value: unknown, stopAfter: number): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (typeof item !== "object" || item === null) continue;
    const here = depth + 1;
    if (here > stopAfter) return stopAfter + 1;
    if (here > deepest) deepest = here;
    const children = Array.isArray(item) ? item : Object.values(item);
    for (const child of children) stack.push([child, here]);
  }
  return deepest;
}

/** Compact JSON of `value` with every object's keys sorted (by UTF-16 code units). Callers bound the depth first. */
export function canonicalJson(value: Json): string {
  if (typeof value !== "object" || value === null) return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
}

/** True when `a` and `b` are equal JSON values (object key order ignored). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bs = b as unknown[];
    return a.length === bs.length && a.every((x, i) => jsonEqual(x, bs[i]));
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  const keys = Object.keys(ao);
  if (keys.length !== Object.keys(bo).length) return false;
  return keys.every((k) => Object.hasOwn(bo, k) && jsonEqual(ao[k], bo[k]));
}
