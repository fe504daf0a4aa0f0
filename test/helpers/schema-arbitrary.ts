/**
 * fast-check arbitraries from the OpenAPI document's JSON Schemas (the subset it uses: `$ref`,
 * `const`, `enum`, `oneOf`, `type` (one or several), objects with `properties` / `required` /
 * `additionalProperties: false`, arrays, strings with `pattern` / lengths, integers with bounds,
 * booleans, null). {@link validValue} makes values the schema accepts; {@link invalidValue} values
 * it mostly does not (a field of the wrong type, one more field, any JSON at all).
 */
import fc from "fast-check";

type Schema = Record<string, any>;

/** The document's `components.schemas`, for `$ref`s. */
export type Components = Record<string, Schema>;

function resolve(schema: Schema, components: Components): Schema {
  let s = schema;
  while (typeof s.$ref === "string") s = components[s.$ref.replace("#/components/schemas/", "")];
  return s;
}

/** Arbitrary strings for a string schema: the pattern's language within the lengths. */
function stringFor(s: Schema): fc.Arbitrary<string> {
  const min = s.minLength ?? 0;
  const max = Math.min(s.maxLength ?? 24, 24);
  if (typeof s.pattern === "string") {
    const core = s.pattern.replace(/^\^/, "").replace(/\$$/, "");
    // "^[set]+$" patterns are bounded here by the lengths; others are used as they are.
    const bounded = /^\[[^\]]+\]\+$/.test(core)
      ? new RegExp(`^${core.slice(0, -1)}{${Math.max(min, 1)},${Math.max(max, 1)}}$`)
      : new RegExp(s.pattern);
    return fc.stringMatching(bounded).filter((x) => x.length >= min && x !== "." && x !== "..");
  }
  return fc.string({ minLength: min, maxLength: Math.max(min, max) });
}

/**
 * Arbitraries to use for object properties of these names instead of their schema's (a caller's
 * bias towards values the broker accepts beyond the schema: existing topics, timestamps near now).
 */
export type Overrides = Record<string, fc.Arbitrary<unknown>>;

/** Values `schema` accepts (for the subset of the module comment). */
export function validValue(
  schema: Schema,
  components: Components,
  overrides: Overrides = {},
  depth = 0,
): fc.Arbitrary<unknown> {
  const s = resolve(schema, components);
  if (s.contentEncoding === "base64" && s.type !== undefined) {
    const types: string[] = Array.isArray(s.type) ? s.type : [s.type];
    const base64 = fc.uint8Array({ maxLength: 12 }).map((b) => Buffer.from(b).toString("base64"));
    return types.includes("null") ? fc.option(base64, { nil: null }) : base64;
  }
  if ("const" in s) return fc.constant(s.const);
  if (Array.isArray(s.enum)) return fc.constantFrom(...s.enum);
  if (Array.isArray(s.oneOf)) {
    const base = { ...s };
    delete base.oneOf;
    const branches = (s.oneOf as Schema[]).map((b) => {
      // A branch that only adds `required` to its object: that object, without the properties
      // other branches require (so that exactly one branch holds).
      const others = (s.oneOf as Schema[])
        .filter((o) => o !== b)
        .flatMap((o) => (o.required ?? []) as string[])
        .filter((n) => !(b.required ?? []).includes(n));
      const properties = Object.fromEntries(
        Object.entries(base.properties ?? {}).filter(([n]) => !others.includes(n)),
      );
      const merged =
        base.type === "object" && resolve(b, components).type === undefined
          ? { ...base, properties, required: [...(base.required ?? []), ...(b.required ?? [])] }
          : b;
      return validValue(merged, components, overrides, depth + 1);
    });
    return fc.oneof(...branches);
  }
  const types: string[] = Array.isArray(s.type) ? s.type : s.type === undefined ? [] : [s.type];
  if (types.length > 1)
    return fc.oneof(
      ...types.map((type) => validValue({ ...s, type }, components, overrides, depth + 1)),
    );
  switch (types[0]) {
    case "null":
      return fc.constant(null);
    case "boolean":
      return fc.boolean();
    case "integer":
      return fc.integer({
        min: Math.max(s.minimum ?? -1000, Number.MIN_SAFE_INTEGER),
        max: Math.min(s.maximum ?? 1_000_000, Number.MAX_SAFE_INTEGER),
      });
    case "string":
      return stringFor(s);
    case "array":
      return fc.array(validValue(s.items ?? {}, components, overrides, depth + 1), {
        minLength: s.minItems ?? 0,
        maxLength: Math.min(s.maxItems ?? 4, depth > 2 ? 1 : 4),
      });
    case "object": {
      const properties: Record<string, Schema> = s.properties ?? {};
      const required: string[] = s.required ?? [];
      const record: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [name, p] of Object.entries(properties))
        record[name] = overrides[name] ?? validValue(p, components, overrides, depth + 1);
      // Keys not required are sometimes left out (fc.record does that for them); a `not:
      // {required: [a, b]}` (at most one of a and b) drops b when both came out.
      const exclusive: string[] = s.not?.required ?? [];
      return fc
        .record(record, { requiredKeys: required.filter((n) => n in properties) as never[] })
        .map((value) => {
          const v = value as Record<string, unknown>;
          if (exclusive.length > 1 && exclusive.every((n) => n in v)) delete v[exclusive.at(-1)!];
          return v;
        });
    }
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

/** Values that break `schema` in one way or another (or any JSON at all). */
export function invalidValue(
  schema: Schema,
  components: Components,
  overrides: Overrides = {},
): fc.Arbitrary<unknown> {
  const s = resolve(schema, components);
  const anyJson = fc.jsonValue({ maxDepth: 3 });
  if (s.type !== "object" || s.properties === undefined) return anyJson;
  const names = Object.keys(s.properties);
  return fc.oneof(
    anyJson,
    // One field of the wrong kind.
    fc
      .tuple(validValue(s, components, overrides), fc.constantFrom(...names), anyJson)
      .map(([v, name, bad]) => ({
        ...(v as object),
        [name]: bad,
      })),
    // A field the schema does not know.
    fc
      .tuple(
        validValue(s, components, overrides),
        fc.string({ minLength: 1, maxLength: 12 }),
        anyJson,
      )
      .map(([v, name, extra]) => ({ ...(v as object), [`x${name}`]: extra })),
  );
}
