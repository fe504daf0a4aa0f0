/**
 * Compatibility levels and the check a registration (and `POST /compatibility/…`) runs
 * (docs/registry.md "Compatibility"):
 *
 * | level                 | the new schema is checked against       | rule                                   |
 * |-----------------------|-----------------------------------------|----------------------------------------|
 * | NONE                  | nothing                                 | —                                      |
 * | BACKWARD              | the latest live version                 | new reads what old wrote               |
 * | BACKWARD_TRANSITIVE   | every live version                      | new reads what each old wrote          |
 * | FORWARD               | the latest live version                 | old reads what new writes              |
 * | FORWARD_TRANSITIVE    | every live version                      | each old reads what new writes         |
 * | FULL                  | the latest live version                 | both                                   |
 * | FULL_TRANSITIVE       | every live version                      | both, with each                        |
 *
 * "Live" versions are those not soft-deleted. Transitive levels compare the new schema with each
 * old one, never old ones with each other. Avro "reads" is Avro schema resolution (`avro.ts`);
 * JSON Schema "reads" is inclusion (`json-compat.ts`): what the writer's schema accepts, the
 * reader's accepts. A schema of another type than the version it is compared with is incompatible.
 */
import { quote } from "../lib/quote.ts";
import { avroReadable } from "./avro.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";
import { jsonSchemaIncludes } from "./json-compat.ts";
import type { ParsedSchema } from "./schema.ts";

/** Every compatibility level, as Confluent names them. */
export const compatibilityLevels = [
  "NONE",
  "BACKWARD",
  "BACKWARD_TRANSITIVE",
  "FORWARD",
  "FORWARD_TRANSITIVE",
  "FULL",
  "FULL_TRANSITIVE",
] as const;

/** One of {@link compatibilityLevels}. */
export type CompatibilityLevel = (typeof compatibilityLevels)[number];

/** The global level until one is set (Confluent's default). */
export const compatibilityDefault: CompatibilityLevel = "BACKWARD";

/** True if `value` names a level (exactly, upper case). */
export function isCompatibilityLevel(value: unknown): value is CompatibilityLevel {
  return typeof value === "string" && (compatibilityLevels as readonly string[]).includes(value);
}

/**
 * A level from a request (any letter case).
 * @throws RegistryError invalid_compatibility (42203) naming the valid levels.
 */
export function parseCompatibilityLevel(value: unknown, action: string): CompatibilityLevel {
  const upper = typeof value === "string" ? value.toUpperCase() : value;
  if (isCompatibilityLevel(upper)) return upper;
  throw new RegistryError(
    RegistryErrors.invalidCompatibility,
    `${action}: compatibility level ${quote(value)} is not one of ${compatibilityLevels.join(", ")}`,
  );
}

/** True for the `_TRANSITIVE` levels, which compare with every live version. */
export function isTransitive(level: CompatibilityLevel): boolean {
  return level.endsWith("_TRANSITIVE");
}

/** A version to compare with. */
export interface VersionToCompare {
  version: number;
  schema: ParsedSchema;
}

/**
 * Checks `candidate` against `versions` (the versions the level selects: the caller passes the
 * latest live one, or every live one for transitive levels, oldest first) by the rule of `level`.
 * @returns the reasons it is incompatible, each naming the version; empty when compatible.
 */
export function incompatibilities(
  candidate: ParsedSchema,
  versions: readonly VersionToCompare[],
  level: CompatibilityLevel,
): string[] {
  if (level === "NONE") return [];
  const backward = level.startsWith("BACKWARD") || level.startsWith("FULL");
  const forward = level.startsWith("FORWARD") || level.startsWith("FULL");
  const reasons: string[] = [];
  for (const { version, schema: old } of versions) {
    if (old.type !== candidate.type) {
      reasons.push(
        `version ${version}: its schema type is ${old.type}, the new schema's is ${candidate.type}`,
      );
      continue;
    }
    if (backward)
      for (const reason of readable(candidate, old, { reader: "new", writer: "old" }))
        reasons.push(
          `version ${version} (${level}: the new schema must read data written with it): ${reason}`,
        );
    if (forward)
      for (const reason of readable(old, candidate, { reader: "old", writer: "new" }))
        reasons.push(
          `version ${version} (${level}: it must read data written with the new schema): ${reason}`,
        );
  }
  return reasons;
}

/** Reasons why data written with `writer` may not be readable with `reader` (same type). */
function readable(
  reader: ParsedSchema,
  writer: ParsedSchema,
  labels: { reader: string; writer: string },
): string[] {
  if (reader.type === "AVRO" && writer.type === "AVRO") {
    const reason = avroReadable(reader.avro, writer.avro);
    return reason === null ? [] : [reason];
  }
  return jsonSchemaIncludes(writer.json, reader.json, {
    narrow: labels.writer,
    wide: labels.reader,
  });
}
