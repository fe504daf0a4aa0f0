/**
 * JSON Schemas through the npm `ajv` library (with `ajv-formats`): draft-07 and 2020-12, picked by
 * the schema's `$schema` (absent means draft-07, as Confluent's serializers write). A schema is
 * checked against its draft's meta-schema and compiled; compiling is what refuses a `$ref` that
 * does not resolve inside the schema (references to other documents are not fetched). Keywords
 * the drafts do not define (Confluent's `connect.*` annotations, for one) are ignored, as the
 * specification says.
 *
 * Ajv is loaded on first need (`libraries.ts`). One Ajv instance per draft, made on first use, compiles every schema; compiled schemas are not
 * kept in the instance (`addUsedSchema: false`, removed after compiling), so a schema's `$id`
 * never collides with another's and memory is held only by the registry's validator cache.
 */
import { quote } from "../lib/quote.ts";
import type { Ajv, ValidateFunction } from "ajv";
import { errorMessage } from "../lib/errors.ts";
import { jsonNestingFault } from "../lib/json-nesting.ts";
import { jsonSchemaPropertiesMax, schemaValueDepthMax } from "../lib/limits.ts";
import type { Json } from "./canonical.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";
import type { ValueFailure } from "./avro.ts";
import { schemaLibraries } from "./libraries.ts";

/** The JSON Schema drafts the registry compiles. */
export type JsonSchemaDraft = "draft-07" | "2020-12";

/** A compiled JSON Schema. */
export interface CompiledJsonSchema {
  draft: JsonSchemaDraft;
  validate: ValidateFunction;
}

const draftOf: Record<string, JsonSchemaDraft> = {
  "http://json-schema.org/draft-07/schema": "draft-07",
  "http://json-schema.org/draft-07/schema#": "draft-07",
  "https://json-schema.org/draft/2020-12/schema": "2020-12",
  "https://json-schema.org/draft/2020-12/schema#": "2020-12",
};

const instances = new Map<JsonSchemaDraft, Ajv>();

/**
 * Ajv's regular-expression engine for schema patterns: re2js (RE2 semantics, linear time). A
 * pattern is searched for anywhere in the string, as JSON Schema's `pattern` is. The `u` flag is
 * RE2's default (it matches code points).
 * @throws Error for a pattern RE2 cannot compile; ajv reports it as an invalid schema.
 */
function linearRegExp(pattern: string): { test: (s: string) => boolean; toString(): string } {
  const re = schemaLibraries().RE2JS.compile(pattern);
  // ajv keys its cache of compiled patterns by the object's toString: one per pattern.
  return { test: (s) => re.matcher(s).find(), toString: () => `re2js:${pattern}` };
}
// ajv reads `code` only to emit standalone validators, which the registry never does.
linearRegExp.code = "re2js";

function ajvFor(draft: JsonSchemaDraft): Ajv {
  let ajv = instances.get(draft);
  if (ajv === undefined) {
    const options = {
      strict: false,
      allErrors: false,
      addUsedSchema: false,
      validateSchema: true,
      logger: false as const,
      // Patterns (`pattern`, `patternProperties`, `propertyNames`) come from whoever registers a
      // schema and run on every produced value: on JavaScript's backtracking engine `^(a+)+$`
      // took seconds per value and stalled the whole broker. RE2 matches in linear time; a
      // pattern outside its syntax (lookaround, backreferences) makes the schema invalid.
      code: { regExp: linearRegExp },
    };
    const libraries = schemaLibraries();
    ajv = draft === "2020-12" ? new libraries.Ajv2020(options) : new libraries.Ajv(options);
    libraries.addFormats(ajv);
    instances.set(draft, ajv);
  }
  return ajv;
}

/** The draft a schema declares with `$schema` (draft-07 without one). @throws RegistryError invalid_schema for any other. */
export function jsonSchemaDraft(json: Json, action: string): JsonSchemaDraft {
  if (typeof json === "boolean") return "draft-07";
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: a JSON Schema must be an object or a boolean, got ${json === null ? "null" : Array.isArray(json) ? "an array" : typeof json}`,
    );
  const declared = json.$schema;
  if (declared === undefined) return "draft-07";
  const draft = typeof declared === "string" ? draftOf[declared] : undefined;
  if (draft === undefined)
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: "$schema" ${quote(declared)} is not a supported draft (supported: ${Object.keys(
        draftOf,
      )
        .filter((k) => !k.endsWith("#"))
        .join(", ")})`,
    );
  return draft;
}

/**
 * The first `properties` object with more than `jsonSchemaPropertiesMax` names (its JSON Pointer
 * and count), or null. Iterative: the depth is bounded already, the width is not.
 */
function crowdedProperties(json: Json): { path: string; count: number } | null {
  const stack: [Json, string][] = [[json, ""]];
  while (stack.length > 0) {
    const [value, path] = stack.pop()!;
    if (typeof value !== "object" || value === null) continue;
    const entries: [string, Json][] = Array.isArray(value)
      ? value.map((v, i) => [String(i), v])
      : Object.entries(value);
    for (const [key, child] of entries) {
      const at = `${path}/${key.replace(/~/g, "~0").replace(/\//g, "~1")}`;
      if (
        key === "properties" &&
        !Array.isArray(value) &&
        typeof child === "object" &&
        child !== null &&
        !Array.isArray(child)
      ) {
        const count = Object.keys(child).length;
        if (count > jsonSchemaPropertiesMax) return { path: at, count };
      }
      stack.push([child, at]);
    }
  }
  return null;
}

/** The base URI a schema without `$id` is compiled with (see {@link compileJsonSchema}). */
const rootBaseId = "urn:es-broker:schema";

/**
 * Checks and compiles a JSON Schema.
 * @throws RegistryError invalid_schema (42201) naming what Ajv refused.
 */
export function compileJsonSchema(json: Json, action: string): CompiledJsonSchema {
  const draft = jsonSchemaDraft(json, action);
  const crowded = crowdedProperties(json);
  if (crowded !== null)
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: "properties" at "${crowded.path}" names ${crowded.count} properties, over the limit of ${jsonSchemaPropertiesMax} per object (jsonSchemaPropertiesMax)`,
      { limit_properties: jsonSchemaPropertiesMax },
    );
  const ajv = ajvFor(draft);
  let validate: ValidateFunction;
  // Without an `$id` ajv cannot resolve `"$ref": "#"` (the root; the registry never adds schemas
  // to ajv by id): a root without one gets a base of its own, which resolves nothing else.
  const root =
    typeof json === "object" && json !== null && !Array.isArray(json) && !("$id" in json)
      ? { ...json, $id: rootBaseId }
      : json;
  try {
    validate = ajv.compile(root as object | boolean);
  } catch (err) {
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: not a valid JSON Schema (${draft}): ${errorMessage(err).slice(0, 300)}`,
    );
  } finally {
    if (typeof root === "object" && root !== null) ajv.removeSchema(root);
  }
  return { draft, validate };
}

/** The reason a value nested past {@link schemaValueDepthMax} is refused. */
const valueTooDeep = `the value nests arrays and objects more than ${schemaValueDepthMax} levels deep (schemaValueDepthMax)`;

// ignoreBOM keeps a leading byte-order mark in the text, where JSON.parse refuses it: stripped
// here, it would pass the check while the stored bytes (which keep it) are no JSON text.
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * A function that checks one JSON text (UTF-8 bytes) against a compiled schema. Returns null when
 * it is valid, else the failing path (JSON Pointer into the value, "" for the root) and the
 * reason. Never throws.
 */
export function jsonValueChecker(
  compiled: CompiledJsonSchema,
): (bytes: Uint8Array) => ValueFailure | null {
  const validate = compiled.validate;
  return (bytes) => {
    let value: unknown;
    try {
      const text = strictUtf8.decode(bytes);
      // Only a text of more than 2 × the limit can nest past it: short ones skip the scan.
      if (text.length > 2 * schemaValueDepthMax && jsonNestingFault(text, schemaValueDepthMax))
        return { path: "", reason: valueTooDeep };
      value = JSON.parse(text);
    } catch (err) {
      return { path: "", reason: `not JSON text: ${errorMessage(err).slice(0, 200)}` };
    }
    try {
      if (validate(value)) return null;
    } catch (err) {
      // e.g. deep-equal checks of very deep data overflowing the stack.
      return { path: "", reason: `could not be validated: ${errorMessage(err).slice(0, 200)}` };
    }
    const error = validate.errors?.[0];
    if (error === undefined) return { path: "", reason: "does not match the schema" };
    const params =
      error.keyword === "additionalProperties"
        ? ` (${quote((error.params as { additionalProperty?: string }).additionalProperty)})`
        : "";
    return { path: error.instancePath, reason: `${error.message ?? error.keyword}${params}` };
  };
}
