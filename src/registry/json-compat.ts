/**
 * JSON Schema compatibility as set inclusion: {@link jsonSchemaIncludes}(narrow, wide) lists the
 * reasons why a value valid under `narrow` might be invalid under `wide`; no reason means every
 * value `narrow` accepts, `wide` accepts too. BACKWARD asks it with (old, new) — a consumer on the
 * new schema reads what producers on the old one wrote — FORWARD with (new, old), FULL both ways.
 * These are Confluent's published JSON Schema rules seen from what they protect; docs/registry.md
 * "Compatibility" lists them row by row.
 *
 * The check is sound and incomplete: whatever it accepts is an inclusion, and what it cannot prove
 * it refuses, naming the keyword. The rules:
 *
 * | keyword (in `wide`)                | `narrow` must …                                                   |
 * |------------------------------------|-------------------------------------------------------------------|
 * | `type`                             | allow only types `wide` allows ("integer" is within "number")     |
 * | `enum` / `const`                   | have an `enum`/`const` whose values are all in `wide`'s            |
 * | `required`                         | require every property `wide` requires                            |
 * | `properties`, `additionalProperties` | per property: `narrow`'s schema for it (its own, else its `additionalProperties`; none if closed) within `wide`'s (its own, else `wide`'s `additionalProperties`) |
 * | `minimum` … `maxLength`, `minItems` … `maxProperties` | have a bound at least as tight                       |
 * | `multipleOf`                       | have a multiple of it                                              |
 * | `items` (one schema)               | have items within it                                               |
 * | `anyOf` / `oneOf`                  | be within one branch, or have every branch of its own within `wide` |
 * | `allOf`, `$ref` (inside the document) | be within each part                                              |
 * | `pattern`, `format`, `patternProperties`, tuple `items`/`prefixItems`, `additionalItems`, `contains`, `propertyNames`, `dependencies`, `dependentRequired`, `dependentSchemas`, `if`/`then`/`else`, `not`, `unevaluated*` | have the same value |
 *
 * A keyword only `narrow` has narrows it further and never breaks inclusion, except those that
 * change what others mean (`patternProperties`, tuple forms), which must be equal on both sides.
 * A schema with both `anyOf` and `oneOf` must pass both: each is a part of a conjunction.
 * `multipleOf` is compared as ajv tests it, in floating point: only equal values or integers.
 * Annotations (`title`, `description`, `default`, `$comment`, `definitions`, …) are ignored; any
 * other keyword (ajv-formats' `formatMinimum`, another vocabulary's) must have the same value.
 */
import { jsonCompatDepthMax, jsonCompatStepsMax } from "../lib/limits.ts";
import { quote } from "../lib/quote.ts";
import { type Json, jsonEqual } from "./canonical.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";

type Schema = Json;
type SchemaObject = { [key: string]: Json };

/** Labels of the two schemas in reasons, e.g. `{ narrow: "old", wide: "new" }`. */
export interface InclusionLabels {
  narrow: string;
  wide: string;
}

const allTypes = ["null", "boolean", "object", "array", "number", "integer", "string"] as const;

/** Keywords that must be equal when `wide` has them (not modelled further). */
const equalWhenWide = [
  "pattern",
  "format",
  "contains",
  "minContains",
  "maxContains",
  "propertyNames",
  "dependencies",
  "dependentRequired",
  "dependentSchemas",
  "if",
  "then",
  "else",
  "not",
  "unevaluatedProperties",
  "unevaluatedItems",
  "$dynamicRef",
  "$recursiveRef",
];
/** Keywords that change what other keywords mean: equal on both sides, whichever has them. */
const equalEitherSide = ["patternProperties", "prefixItems", "additionalItems"];
/** Keywords that do not constrain on their own or are handled as combinators. */
const lowerBounds = ["minimum", "minLength", "minItems", "minProperties"];
const upperBounds = ["maximum", "maxLength", "maxItems", "maxProperties"];

/** Most reasons one comparison of two (sub)schemas keeps: the first ones name the problem. */
const reasonsKeptMax = 8;

/**
 * Reasons why a value valid under `narrow` may be invalid under `wide` (empty: none). Local
 * `$ref`s ("#/…") resolve inside each schema's own document; others are refused.
 *
 * Each pair of (sub)schemas is compared once per call (memoized by identity: the schemas are
 * immutable), so the work is polynomial in their sizes; it is also bounded by `jsonCompatStepsMax`
 * comparisons (docs/registry.md "Limits").
 * @throws RegistryError invalid_schema (42201) when the comparison needs more than
 *   `jsonCompatStepsMax` steps ("too complex to check").
 */
export function jsonSchemaIncludes(
  narrow: Schema,
  wide: Schema,
  labels: InclusionLabels,
  stepsMax: number = jsonCompatStepsMax,
): string[] {
  return new Inclusion(narrow, wide, labels, stepsMax).check(narrow, wide, "#");
}

/** A memoized comparison: its reasons, and the depth of the shallowest pair assumed to hold. */
interface Outcome {
  reasons: string[];
  /** Infinity: final. Otherwise it holds only if the pair at this depth of the stack holds. */
  dependsOn: number;
}

class Inclusion {
  /** Pairs being compared (narrow → wide → depth on the stack). */
  #inProgress = new Map<object, Map<object, number>>();
  #depth = 0;
  /** Shallowest in-progress pair assumed to hold while computing the current pair. */
  #assumed = Number.POSITIVE_INFINITY;
  #memo = new Map<object, Map<object, Outcome>>();
  /** Outcomes that hold only if a pair still on the stack holds, in the order they were made. */
  #provisional: [object, object, Outcome][] = [];
  #steps = 0;
  #withoutCache = new WeakMap<object, Map<string, SchemaObject>>();
  #hasRefCache = new WeakMap<object, boolean>();

  constructor(
    readonly narrowRoot: Schema,
    readonly wideRoot: Schema,
    readonly labels: InclusionLabels,
    readonly stepsMax: number,
  ) {}

  check(a: Schema, b: Schema, path: string): string[] {
    const { narrow, wide } = this.labels;
    if (b === true || isTrivial(b)) return [];
    if (a === false) return [];
    if (b === false) return [`at "${path}": the ${wide} schema allows no value`];
    if (a === true || typeof a !== "object" || a === null || Array.isArray(a))
      return typeof a === "object" && a !== null && !Array.isArray(a)
        ? []
        : [`at "${path}": the ${narrow} schema allows any value, the ${wide} schema does not`];
    if (typeof b !== "object" || b === null || Array.isArray(b))
      return [`at "${path}": the ${wide} schema is not a schema`];
    const known = this.#memo.get(a)?.get(b);
    if (known !== undefined) {
      this.#assumed = Math.min(this.#assumed, known.dependsOn);
      return [...known.reasons];
    }
    // Coinduction: a pair already being compared further up holds unless something else fails.
    let seen = this.#inProgress.get(a);
    const onStack = seen?.get(b);
    if (onStack !== undefined) {
      this.#assumed = Math.min(this.#assumed, onStack);
      return [];
    }
    if (++this.#steps > this.stepsMax)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `the schema is too complex to check for compatibility: comparing it takes more than ${this.stepsMax} steps (jsonCompatStepsMax)`,
        { limit_steps: this.stepsMax },
      );
    // $ref chains nest comparisons past the text's own depth: bounded before the stack is.
    if (this.#depth >= jsonCompatDepthMax)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `the schema is too complex to check for compatibility: comparing it nests more than ${jsonCompatDepthMax} comparisons (through $ref, allOf, anyOf, oneOf, properties or items; jsonCompatDepthMax)`,
        { limit_depth: jsonCompatDepthMax },
      );
    if (seen === undefined) this.#inProgress.set(a, (seen = new Map()));
    const depth = this.#depth++;
    seen.set(b, depth);
    const outer = this.#assumed;
    const start = this.#provisional.length;
    this.#assumed = Number.POSITIVE_INFINITY;
    let reasons: string[];
    try {
      reasons = this.#checkObjects(a, b, path);
      if (reasons.length > reasonsKeptMax) reasons = reasons.slice(0, reasonsKeptMax);
    } finally {
      seen.delete(b);
      this.#depth--;
    }
    const assumed = this.#assumed;
    this.#assumed = Math.min(outer, assumed);
    this.#settle(start, depth, reasons.length === 0, assumed);
    // A failure is final (assuming more pairs hold only adds successes); a success is final
    // unless it assumed a pair still further up the stack.
    const dependsOn = reasons.length === 0 && assumed < depth ? assumed : Number.POSITIVE_INFINITY;
    const outcome: Outcome = { reasons, dependsOn };
    let row = this.#memo.get(a);
    if (row === undefined) this.#memo.set(a, (row = new Map()));
    row.set(b, outcome);
    if (dependsOn !== Number.POSITIVE_INFINITY) this.#provisional.push([a, b, outcome]);
    return [...reasons];
  }

  /**
   * Settles the provisional outcomes made while the pair at `depth` was compared: those that
   * assumed it (or a pair below it) are dropped if it failed, final if it held on its own, and
   * otherwise now depend on the shallower pair it assumed.
   */
  #settle(start: number, depth: number, held: boolean, assumed: number): void {
    const kept: [object, object, Outcome][] = [];
    for (const entry of this.#provisional.splice(start)) {
      const [a, b, outcome] = entry;
      if (outcome.dependsOn < depth) kept.push(entry);
      else if (!held) this.#memo.get(a)?.delete(b);
      else if (assumed >= depth) outcome.dependsOn = Number.POSITIVE_INFINITY;
      else {
        outcome.dependsOn = assumed;
        kept.push(entry);
      }
    }
    this.#provisional.push(...kept);
  }

  /** `without(s, keys)`, the same object for the same arguments (so that pairs memoize). */
  #without(s: SchemaObject, keys: string[]): SchemaObject {
    let row = this.#withoutCache.get(s);
    if (row === undefined) this.#withoutCache.set(s, (row = new Map()));
    const key = keys.join(",");
    let out = row.get(key);
    if (out === undefined) row.set(key, (out = without(s, keys)));
    return out;
  }

  #hasRef(s: SchemaObject): boolean {
    let found = this.#hasRefCache.get(s);
    if (found === undefined) this.#hasRefCache.set(s, (found = hasRef(s)));
    return found;
  }

  #checkObjects(a: SchemaObject, b: SchemaObject, path: string): string[] {
    const { narrow, wide } = this.labels;
    if (!this.#hasRef(a) && !this.#hasRef(b) && jsonEqual(a, b)) return [];
    // `wide` as a conjunction: a must be within every part.
    if (typeof b.$ref === "string" || Array.isArray(b.allOf)) {
      const reasons: string[] = [];
      if (typeof b.$ref === "string") {
        const target = resolveRef(this.wideRoot, b.$ref);
        if (target === undefined)
          return [
            `at "${path}": the ${wide} schema's $ref ${quote(b.$ref)} cannot be resolved inside it`,
          ];
        reasons.push(...this.check(a, target, path));
      }
      if (Array.isArray(b.allOf))
        b.allOf.forEach((part, i) => reasons.push(...this.check(a, part, `${path}/allOf/${i}`)));
      reasons.push(...this.check(a, this.#without(b, ["$ref", "allOf"]), path));
      return reasons;
    }
    // `narrow` as a conjunction: enough that one part is within b.
    if (typeof a.$ref === "string" || Array.isArray(a.allOf)) {
      const parts: Schema[] = [this.#without(a, ["$ref", "allOf"])];
      if (typeof a.$ref === "string") {
        const target = resolveRef(this.narrowRoot, a.$ref);
        if (target === undefined)
          return [
            `at "${path}": the ${narrow} schema's $ref ${quote(a.$ref)} cannot be resolved inside it`,
          ];
        parts.push(target);
      }
      if (Array.isArray(a.allOf)) parts.push(...a.allOf);
      return this.#firstThatHolds(parts, (part) => this.check(part, b, path));
    }
    // Both anyOf and oneOf: a value must pass each, so each is a part of a conjunction.
    if (Array.isArray(b.anyOf) && Array.isArray(b.oneOf))
      return [
        ...this.check(a, this.#without(b, ["oneOf"]), path),
        ...this.check(a, this.#without(b, ["anyOf"]), path),
      ];
    if (Array.isArray(a.anyOf) && Array.isArray(a.oneOf))
      return this.#firstThatHolds(
        [this.#without(a, ["oneOf"]), this.#without(a, ["anyOf"])],
        (part) => this.check(part, b, path),
      );
    // `narrow` as a disjunction: enough that its other keywords are within b, or every branch is.
    const aBranches = branchesOf(a);
    if (aBranches !== null) {
      const base = this.#without(a, ["anyOf", "oneOf"]);
      const baseReasons = this.check(base, b, path);
      if (baseReasons.length === 0) return [];
      const reasons: string[] = [];
      aBranches.forEach((branch, i) =>
        reasons.push(...this.check(branch, b, `${path}/anyOf/${i}`)),
      );
      return reasons;
    }
    // `wide` as a disjunction: a within one branch, and within its other keywords.
    const bBranches = branchesOf(b);
    if (bBranches !== null) {
      const reasons = this.check(a, this.#without(b, ["anyOf", "oneOf"]), path);
      const holds = bBranches.map((branch) => this.check(a, branch, path));
      const i = holds.findIndex((r) => r.length === 0);
      if (i < 0)
        reasons.push(
          `at "${path}": no branch of the ${wide} schema's anyOf/oneOf accepts every value of the ${narrow} schema (${holds[0]?.[0] ?? "no branches"})`,
        );
      // oneOf wants exactly one branch: a value of `narrow` must also fail every other branch.
      // That is proven only where the types cannot overlap; otherwise it is refused.
      else if (Array.isArray(b.oneOf))
        bBranches.forEach((branch, j) => {
          if (j !== i && !typesDisjoint(a, branch))
            reasons.push(
              `at "${path}/oneOf/${j}": a value of the ${narrow} schema may match this branch as well as branch ${i} of the ${wide} schema's oneOf, which then refuses it (only branches of types that cannot overlap are known exclusive)`,
            );
        });
      return reasons;
    }
    return this.#checkKeywords(a, b, path);
  }

  /** [] if `check` holds for some part, else the reasons of the first part. */
  #firstThatHolds(parts: Schema[], check: (part: Schema) => string[]): string[] {
    let first: string[] | null = null;
    for (const part of parts) {
      const reasons = check(part);
      if (reasons.length === 0) return [];
      first ??= reasons;
    }
    return first ?? [];
  }

  #checkKeywords(a: SchemaObject, b: SchemaObject, path: string): string[] {
    const { narrow, wide } = this.labels;
    const reasons: string[] = [];
    const at = `at "${path}"`;
    for (const k of equalWhenWide)
      if (k in b && !jsonEqual(a[k], b[k]))
        reasons.push(
          `${at}: "${k}" differs (${describe(a[k])} in the ${narrow} schema, ${describe(b[k])} in the ${wide}), and a change of it is not compared`,
        );
    // Keywords the check does not model (ajv-formats' formatMinimum …, vocabularies of others):
    // a validator may enforce them, so any change of one is not provably compatible.
    for (const k of Object.keys(b))
      if (!constraining.has(k) && !annotations.has(k) && !jsonEqual(a[k], b[k]))
        reasons.push(
          `${at}: "${k}" differs (${describe(a[k])} in the ${narrow} schema, ${describe(b[k])} in the ${wide}), and the check does not know this keyword, so it cannot prove the change compatible`,
        );
    for (const k of equalEitherSide)
      if ((k in a || k in b) && !jsonEqual(a[k], b[k]))
        reasons.push(
          `${at}: "${k}" differs between the schemas, and a change of it is not compared`,
        );

    // Values: enum / const.
    const bValues = valuesOf(b);
    const aValues = valuesOf(a);
    if (bValues !== null) {
      if (aValues === null)
        reasons.push(
          `${at}: the ${wide} schema allows only ${describe(bValues)}, the ${narrow} schema allows other values`,
        );
      else
        for (const v of aValues)
          if (!bValues.some((w) => jsonEqual(v, w)))
            reasons.push(
              `${at}: value ${describe(v)} is allowed by the ${narrow} schema, not by the ${wide}`,
            );
    }

    // Types.
    const aTypes = typesOf(a, aValues);
    const bTypes = typesOf(b, bValues);
    for (const t of aTypes) {
      if (bTypes.has(t) || (t === "integer" && bTypes.has("number"))) continue;
      if (t === "number" && bTypes.has("integer")) {
        reasons.push(
          `${at}: type "number" of the ${narrow} schema is narrowed to "integer" in the ${wide}`,
        );
        continue;
      }
      reasons.push(`${at}: type "${t}" is allowed by the ${narrow} schema, not by the ${wide}`);
    }
    const shared = (t: string) =>
      aTypes.has(t) && (bTypes.has(t) || (t === "integer" && bTypes.has("number")));

    // Bounds (numbers, strings, arrays, objects).
    const applies = (k: string) =>
      k.includes("Length")
        ? shared("string")
        : k.includes("Items")
          ? shared("array")
          : k.includes("Properties")
            ? shared("object")
            : shared("number") || shared("integer");
    for (const k of lowerBounds) {
      if (typeof b[k] !== "number" || !applies(k)) continue;
      const lower = lowerBound(a, k);
      if (lower === null || lower < (b[k] as number))
        reasons.push(
          `${at}: "${k}" ${b[k]} of the ${wide} schema is tighter than the ${narrow} schema's (${lower ?? "none"})`,
        );
    }
    for (const k of upperBounds) {
      if (typeof b[k] !== "number" || !applies(k)) continue;
      const upper = upperBound(a, k);
      if (upper === null || upper > (b[k] as number))
        reasons.push(
          `${at}: "${k}" ${b[k]} of the ${wide} schema is tighter than the ${narrow} schema's (${upper ?? "none"})`,
        );
    }
    for (const [k, bound] of [
      ["exclusiveMinimum", "minimum"],
      ["exclusiveMaximum", "maximum"],
    ] as const) {
      if (typeof b[k] !== "number" || !applies(bound)) continue;
      const mine = typeof a[k] === "number" ? (a[k] as number) : null;
      const inclusive = typeof a[bound] === "number" ? (a[bound] as number) : null;
      const ok =
        k === "exclusiveMinimum"
          ? (mine !== null && mine >= (b[k] as number)) ||
            (inclusive !== null && inclusive > (b[k] as number))
          : (mine !== null && mine <= (b[k] as number)) ||
            (inclusive !== null && inclusive < (b[k] as number));
      if (!ok)
        reasons.push(
          `${at}: "${k}" ${b[k]} of the ${wide} schema is tighter than the ${narrow} schema's`,
        );
    }
    if (typeof b.multipleOf === "number" && (shared("number") || shared("integer"))) {
      const m = typeof a.multipleOf === "number" ? a.multipleOf : aTypes.has("number") ? null : 1;
      if (m === null || !isMultiple(m, b.multipleOf))
        reasons.push(
          `${at}: "multipleOf" ${b.multipleOf} of the ${wide} schema does not hold for every value of the ${narrow} schema`,
        );
    }
    if (b.uniqueItems === true && a.uniqueItems !== true && shared("array"))
      reasons.push(
        `${at}: the ${wide} schema requires unique items, the ${narrow} schema does not`,
      );

    // Array items (one schema for every item).
    if (shared("array")) {
      if (Array.isArray(a.items) || Array.isArray(b.items)) {
        if (!jsonEqual(a.items, b.items))
          reasons.push(
            `${at}: tuple "items" differ between the schemas, and a change of them is not compared`,
          );
      } else if ("items" in b) {
        reasons.push(...this.check(a.items ?? true, b.items, `${path}/items`));
      }
    }

    // Objects.
    if (shared("object")) reasons.push(...this.#checkObjectKeywords(a, b, path));
    return reasons;
  }

  #checkObjectKeywords(a: SchemaObject, b: SchemaObject, path: string): string[] {
    const { narrow, wide } = this.labels;
    const reasons: string[] = [];
    const aRequired = new Set(stringsOf(a.required));
    for (const name of stringsOf(b.required))
      if (!aRequired.has(name))
        reasons.push(
          `at "${path}": property ${quote(name)} is required by the ${wide} schema, not by the ${narrow}`,
        );
    const aProps = objectOf(a.properties);
    const bProps = objectOf(b.properties);
    const aExtra = a.additionalProperties ?? true;
    const bExtra = b.additionalProperties ?? true;
    for (const name of new Set([...Object.keys(aProps), ...Object.keys(bProps)])) {
      const mine = Object.hasOwn(aProps, name) ? aProps[name] : aExtra;
      if (mine === false) continue; // the narrow schema never has this property
      const theirs = Object.hasOwn(bProps, name) ? bProps[name] : bExtra;
      const where = `${path}/properties/${escapePointer(name)}`;
      const found = this.check(mine, theirs, where);
      if (found.length > 0 && !Object.hasOwn(bProps, name) && bExtra === false)
        reasons.push(
          `at "${where}": property ${quote(name)} is allowed by the ${narrow} schema, and the ${wide} schema does not allow it (additionalProperties false)`,
        );
      else if (found.length > 0 && !Object.hasOwn(aProps, name))
        reasons.push(
          `at "${where}": property ${quote(name)} may hold any value under the ${narrow} schema (open content model), the ${wide} schema constrains it`,
        );
      else reasons.push(...found);
    }
    reasons.push(...this.check(aExtra, bExtra, `${path}/additionalProperties`));
    return reasons;
  }
}

function isTrivial(s: Schema): boolean {
  if (typeof s !== "object" || s === null || Array.isArray(s)) return false;
  return Object.keys(s).every((k) => annotations.has(k));
}

/** Keywords that never constrain a value: annotations, identifiers, definitions. */
const annotations = new Set([
  "$schema",
  "$id",
  "id",
  "$anchor",
  "$dynamicAnchor",
  "$recursiveAnchor",
  "$vocabulary",
  "$comment",
  "definitions",
  "$defs",
  "title",
  "description",
  "default",
  "examples",
  "readOnly",
  "writeOnly",
  "deprecated",
  "contentMediaType",
  "contentEncoding",
  "contentSchema",
]);

const constraining = new Set([
  "type",
  "enum",
  "const",
  "multipleOf",
  "maximum",
  "exclusiveMaximum",
  "minimum",
  "exclusiveMinimum",
  "maxLength",
  "minLength",
  "pattern",
  "format",
  "items",
  "additionalItems",
  "prefixItems",
  "maxItems",
  "minItems",
  "uniqueItems",
  "contains",
  "minContains",
  "maxContains",
  "maxProperties",
  "minProperties",
  "required",
  "properties",
  "patternProperties",
  "additionalProperties",
  "dependencies",
  "dependentRequired",
  "dependentSchemas",
  "propertyNames",
  "unevaluatedItems",
  "unevaluatedProperties",
  "if",
  "then",
  "else",
  "allOf",
  "anyOf",
  "oneOf",
  "not",
  "$ref",
  "$dynamicRef",
  "$recursiveRef",
  "nullable",
]);

function without(s: SchemaObject, keys: string[]): SchemaObject {
  const out: SchemaObject = {};
  for (const [k, v] of Object.entries(s)) if (!keys.includes(k)) out[k] = v;
  return out;
}

/**
 * True if no value can be valid under both: each declares `type` and the sets share no type
 * (`integer` counts as a `number`). A schema without `type` may take any type, so it overlaps.
 */
function typesDisjoint(a: Schema, b: Schema): boolean {
  const typesOf = (s: Schema): Set<string> | null => {
    if (typeof s !== "object" || s === null || Array.isArray(s)) return null;
    const t = (s as SchemaObject).type;
    const list = typeof t === "string" ? [t] : Array.isArray(t) ? t : null;
    if (list === null || !list.every((x) => typeof x === "string")) return null;
    const set = new Set(list as string[]);
    if (set.has("integer")) set.add("number");
    if (set.has("number")) set.add("integer");
    return set;
  };
  const ta = typesOf(a);
  const tb = typesOf(b);
  if (ta === null || tb === null) return false;
  for (const t of ta) if (tb.has(t)) return false;
  return true;
}

function branchesOf(s: SchemaObject): Schema[] | null {
  const any = Array.isArray(s.anyOf) ? s.anyOf : null;
  const one = Array.isArray(s.oneOf) ? s.oneOf : null;
  if (any !== null && one !== null) return null; // both: compared as keywords (must be equal below)
  return any ?? one;
}

function hasRef(value: Json): boolean {
  const stack: Json[] = [value];
  while (stack.length > 0) {
    const v = stack.pop()!;
    if (typeof v !== "object" || v === null) continue;
    if (Array.isArray(v)) stack.push(...v);
    else {
      if ("$ref" in v || "$dynamicRef" in v || "$recursiveRef" in v) return true;
      stack.push(...Object.values(v));
    }
  }
  return false;
}

/** Resolves "#", "#/a/b" (JSON Pointer, ~0 ~1 and %-escapes) inside `root`; undefined otherwise. */
function resolveRef(root: Schema, ref: string): Schema | undefined {
  if (!ref.startsWith("#")) return undefined;
  let pointer: string;
  try {
    pointer = decodeURIComponent(ref.slice(1));
  } catch {
    return undefined;
  }
  if (pointer === "") return root;
  if (!pointer.startsWith("/")) return undefined;
  let at: Json | undefined = root;
  for (const raw of pointer.slice(1).split("/")) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof at !== "object" || at === null) return undefined;
    at = Array.isArray(at) ? at[Number(key)] : Object.hasOwn(at, key) ? at[key] : undefined;
  }
  return at;
}

function valuesOf(s: SchemaObject): Json[] | null {
  if ("const" in s) return [s.const];
  return Array.isArray(s.enum) ? s.enum : null;
}

function jsonTypeOf(v: Json): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

function typesOf(s: SchemaObject, values: Json[] | null): Set<string> {
  const types = declaredTypes(s, values);
  // ajv's OpenAPI `nullable: true` adds "null" to `type`.
  if (s.nullable === true && "type" in s) types.add("null");
  return types;
}

function declaredTypes(s: SchemaObject, values: Json[] | null): Set<string> {
  if (typeof s.type === "string") return new Set([s.type]);
  if (Array.isArray(s.type))
    return new Set(s.type.filter((t): t is string => typeof t === "string"));
  if (values !== null) return new Set(values.map(jsonTypeOf));
  return new Set(allTypes);
}

function lowerBound(s: SchemaObject, k: string): number | null {
  const v = s[k];
  if (typeof v === "number") return v;
  if (k === "minimum" && typeof s.exclusiveMinimum === "number") return s.exclusiveMinimum;
  return null;
}

function upperBound(s: SchemaObject, k: string): number | null {
  const v = s[k];
  if (typeof v === "number") return v;
  if (k === "maximum" && typeof s.exclusiveMaximum === "number") return s.exclusiveMaximum;
  return null;
}

/**
 * True if every multiple of `m` passes ajv's `multipleOf: of`, which tests `(x / of) % 1 === 0`
 * in floating point, exactly: proven only for `m === of`, or integers where `of` divides `m`
 * (an integer multiple of an integer divides exactly). Fractions are refused: `3 / 0.1` is not
 * 30 in floating point.
 */
function isMultiple(m: number, of: number): boolean {
  if (m === of) return true;
  return Number.isSafeInteger(m) && Number.isSafeInteger(of) && of !== 0 && m % of === 0;
}

function stringsOf(v: Json | undefined): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
}

function objectOf(v: Json | undefined): SchemaObject {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? v : {};
}

function escapePointer(name: string): string {
  return name.replace(/~/g, "~0").replace(/\//g, "~1");
}

function describe(v: Json | undefined): string {
  return v === undefined ? "none" : quote(v);
}
