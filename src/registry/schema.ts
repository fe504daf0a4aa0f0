/**
 * A schema of either type the registry holds, parsed: its type, JSON value, canonical text
 * (`canonical.ts`: what makes two registrations the same schema) and the parsed form its type
 * needs (an avsc type, or a compiled JSON Schema). PROTOBUF is not supported (yet):
 * `GET /schemas/types` lists {@link schemaTypes}.
 */
import { quote } from "../lib/quote.ts";
import { type AvroType, avroValueChecker, parseAvro, type ValueFailure } from "./avro.ts";
import { type Json, parseSchemaJson } from "./canonical.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";
import { type CompiledJsonSchema, compileJsonSchema, jsonValueChecker } from "./json-schema.ts";

/** The schema types the registry takes, as Confluent names them. */
export const schemaTypes = ["AVRO", "JSON"] as const;

/** One of {@link schemaTypes}. */
export type SchemaType = (typeof schemaTypes)[number];

/** A parsed schema. */
export type ParsedSchema =
  | { type: "AVRO"; json: Json; canonical: string; avro: AvroType }
  | { type: "JSON"; json: Json; canonical: string; jsonSchema: CompiledJsonSchema };

/**
 * The schema type a request names (`schemaType`; absent or null = AVRO, as Confluent). The name
 * is case-sensitive, as in Confluent's registry (its providers are looked up by exact name, so
 * `"avro"` is "Invalid schema type"): a client that sends `"avro"` here would be refused there.
 * @throws RegistryError invalid_schema (42201) for another value.
 */
export function parseSchemaType(value: unknown, action: string): SchemaType {
  if (value === undefined || value === null) return "AVRO";
  if (typeof value === "string" && (schemaTypes as readonly string[]).includes(value))
    return value as SchemaType;
  const hint =
    typeof value === "string" && (schemaTypes as readonly string[]).includes(value.toUpperCase())
      ? `; schema types are case-sensitive: use ${quote(value.toUpperCase())}`
      : "";
  throw new RegistryError(
    RegistryErrors.invalidSchema,
    `${action}: schema type ${quote(value)} is not supported (supported: ${schemaTypes.join(", ")}; PROTOBUF is not)${hint}`,
  );
}

/**
 * Parses and checks a schema text of type `type`.
 * @throws RegistryError invalid_schema (42201): too large, too deep, not JSON, or not a valid schema.
 */
export function parseSchema(type: SchemaType, text: string, action: string): ParsedSchema {
  const { json, canonical } = parseSchemaJson(text, action);
  if (type === "AVRO") return { type, json, canonical, avro: parseAvro(json, action) };
  return { type, json, canonical, jsonSchema: compileJsonSchema(json, action) };
}

/**
 * The produce-time check of one value of this schema (Avro: binary encoding; JSON: UTF-8 JSON
 * text): null when valid, else the path and reason. The returned function never throws.
 */
export function valueChecker(schema: ParsedSchema): (bytes: Uint8Array) => ValueFailure | null {
  return schema.type === "AVRO"
    ? avroValueChecker(schema.avro)
    : jsonValueChecker(schema.jsonSchema);
}
