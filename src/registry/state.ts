/**
 * The registry's state and its file, `<dataDir>/schemas.json` (docs/registry.md "State"):
 *
 * ```json
 * { "format": 1,
 *   "next_id": 4,                       // ids are never reused: the next one is past every id ever assigned
 *   "compatibility": "BACKWARD",        // the global level
 *   "schemas": [ { "id": 1, "schema_type": "AVRO", "schema": "<canonical text>" } ],
 *   "subjects": [ { "subject": "orders-value", "next_version": 3,
 *                   "versions": [ { "version": 1, "id": 1, "deleted": false } ] } ],
 *   "subject_compatibility": { "orders-value": "FULL" } }
 * ```
 *
 * Every id ever assigned keeps its schema in `schemas`, even after every version using it was
 * deleted permanently: the same schema registered again gets the same id, and an id never names
 * two schemas. A state is immutable; a change builds a new one (`registry.ts` writes it whole
 * with the atomic metadata writer, then swaps it in). {@link decodeState} checks every invariant
 * of a file it reads and says which one fails.
 */
import { quote } from "../lib/quote.ts";
import {
  type CompatibilityLevel,
  compatibilityDefault,
  isCompatibilityLevel,
} from "./compatibility.ts";
import { type SchemaType, schemaTypes } from "./schema.ts";

/** A schema by id: its type and canonical text. */
export interface SchemaEntry {
  readonly id: number;
  readonly type: SchemaType;
  readonly schema: string;
}

/** One version of a subject. */
export interface VersionEntry {
  readonly version: number;
  readonly id: number;
  /** Soft-deleted: kept (readable with `deleted=true`, its id still resolves) but not live. */
  readonly deleted: boolean;
}

/** A subject: its versions, ascending, and the next version number (never reused while the subject exists). */
export interface SubjectEntry {
  readonly name: string;
  readonly nextVersion: number;
  readonly versions: readonly VersionEntry[];
}

/** The whole registry state. */
export interface RegistryState {
  readonly nextId: number;
  readonly compatibility: CompatibilityLevel;
  readonly schemas: ReadonlyMap<number, SchemaEntry>;
  readonly subjects: ReadonlyMap<string, SubjectEntry>;
  readonly subjectCompatibility: ReadonlyMap<string, CompatibilityLevel>;
}

/** The state of a registry that never held anything. */
export const emptyState: RegistryState = Object.freeze({
  nextId: 1,
  compatibility: compatibilityDefault,
  schemas: new Map(),
  subjects: new Map(),
  subjectCompatibility: new Map(),
});

/** Version of the file format written in `format`. */
export const stateFormat = 1;

/** The JSON value of `schemas.json` for `state`. */
export function encodeState(state: RegistryState): object {
  return {
    format: stateFormat,
    next_id: state.nextId,
    compatibility: state.compatibility,
    schemas: [...state.schemas.values()].map((s) => ({
      id: s.id,
      schema_type: s.type,
      schema: s.schema,
    })),
    subjects: [...state.subjects.values()].map((s) => ({
      subject: s.name,
      next_version: s.nextVersion,
      versions: s.versions.map((v) => ({ version: v.version, id: v.id, deleted: v.deleted })),
    })),
    subject_compatibility: Object.fromEntries(state.subjectCompatibility),
  };
}

function fail(reason: string): never {
  throw new Error(reason);
}

function positiveInteger(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1)
    fail(`${what} ${quote(value)} is not a positive integer`);
  return value;
}

function record(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    fail(`${what} is not an object`);
  return value as Record<string, unknown>;
}

function array(value: unknown, what: string): unknown[] {
  if (!Array.isArray(value)) fail(`${what} is not an array`);
  return value;
}

/**
 * Reads a state from the JSON value of `schemas.json`, checking every invariant: ids below
 * `next_id` and unique, versions ascending and below `next_version`, every version's id in
 * `schemas`, levels and types known, subject names unique.
 * @throws Error naming the first violation (the caller makes the registry unavailable with it).
 */
export function decodeState(value: unknown): RegistryState {
  const root = record(value, "the file");
  if (root.format !== stateFormat) fail(`"format" ${quote(root.format)} is not ${stateFormat}`);
  const nextId = positiveInteger(root.next_id, '"next_id"');
  if (!isCompatibilityLevel(root.compatibility))
    fail(`"compatibility" ${quote(root.compatibility)} is not a compatibility level`);
  const schemas = new Map<number, SchemaEntry>();
  array(root.schemas, '"schemas"').forEach((item, i) => {
    const s = record(item, `schemas[${i}]`);
    const id = positiveInteger(s.id, `schemas[${i}].id`);
    if (id >= nextId) fail(`schemas[${i}].id ${id} is not below "next_id" ${nextId}`);
    if (schemas.has(id)) fail(`schema id ${id} appears twice`);
    if (!(schemaTypes as readonly unknown[]).includes(s.schema_type))
      fail(`schemas[${i}].schema_type ${quote(s.schema_type)} is not a schema type`);
    if (typeof s.schema !== "string") fail(`schemas[${i}].schema is not a string`);
    schemas.set(id, { id, type: s.schema_type as SchemaType, schema: s.schema });
  });
  const subjects = new Map<string, SubjectEntry>();
  array(root.subjects, '"subjects"').forEach((item, i) => {
    const s = record(item, `subjects[${i}]`);
    if (typeof s.subject !== "string" || s.subject === "")
      fail(`subjects[${i}].subject is not a non-empty string`);
    if (subjects.has(s.subject)) fail(`subject ${quote(s.subject)} appears twice`);
    const nextVersion = positiveInteger(s.next_version, `subjects[${i}].next_version`);
    let previous = 0;
    const versions = array(s.versions, `subjects[${i}].versions`).map((v, j) => {
      const entry = record(v, `subjects[${i}].versions[${j}]`);
      const version = positiveInteger(entry.version, `subjects[${i}].versions[${j}].version`);
      if (version <= previous || version >= nextVersion)
        fail(
          `subjects[${i}].versions[${j}].version ${version} is not ascending and below "next_version" ${nextVersion}`,
        );
      previous = version;
      const id = positiveInteger(entry.id, `subjects[${i}].versions[${j}].id`);
      if (!schemas.has(id)) fail(`subjects[${i}].versions[${j}].id ${id} has no schema`);
      if (typeof entry.deleted !== "boolean")
        fail(`subjects[${i}].versions[${j}].deleted is not a boolean`);
      return { version, id, deleted: entry.deleted };
    });
    subjects.set(s.subject, { name: s.subject, nextVersion, versions });
  });
  const subjectCompatibility = new Map<string, CompatibilityLevel>();
  for (const [subject, level] of Object.entries(
    record(root.subject_compatibility, '"subject_compatibility"'),
  )) {
    if (!isCompatibilityLevel(level))
      fail(`the level of subject ${quote(subject)} ${quote(level)} is not a compatibility level`);
    subjectCompatibility.set(subject, level);
  }
  return {
    nextId,
    compatibility: root.compatibility,
    schemas,
    subjects,
    subjectCompatibility,
  };
}
