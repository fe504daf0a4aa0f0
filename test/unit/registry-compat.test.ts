/**
 * The compatibility matrix (docs/registry.md "Compatibility"; field failure 32): for every level
 * and each evolution of an Avro or a JSON schema, the verdict expected per row, checked three
 * ways that must agree — `POST /compatibility/…/versions/latest`, `…/versions` (no version) and
 * registration itself (409, consuming no id or version). Avro verdicts are also checked against
 * an oracle: avsc's `createResolver` plus sample records written with one schema and read with
 * the other.
 */
import avsc from "avsc";
import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import {
  type CompatibilityLevel,
  compatibilityLevels,
  isTransitive,
} from "../../src/registry/compatibility.ts";
import { RegistryError } from "../../src/registry/errors.ts";
import { SchemaRegistry } from "../../src/registry/registry.ts";

/** Verdicts in the order of `compatibilityLevels`: NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE. */
type Verdicts = string;

interface Row {
  name: string;
  type: "AVRO" | "JSON";
  /** Versions registered first, oldest first (each must be accepted at every level). */
  old: object[];
  /** The schema whose verdict the row gives. */
  candidate: object;
  /** ✓ compatible, ✗ incompatible, per level. */
  expected: Verdicts;
}

const rec = (...fields: object[]) => ({ type: "record", name: "R", fields });
const enumOf = (symbols: string[], extra: object = {}) => ({
  type: "record",
  name: "R",
  fields: [{ name: "e", type: { type: "enum", name: "E", symbols, ...extra } }],
});
const obj = (properties: object, extra: object = {}) => ({ type: "object", properties, ...extra });

const rows: Row[] = [
  {
    name: "v2 adds f2 with a default, v3 drops the default (#209)",
    type: "AVRO",
    old: [
      rec({ name: "f1", type: "string" }),
      rec({ name: "f1", type: "string" }, { name: "f2", type: "string", default: "x" }),
    ],
    candidate: rec({ name: "f1", type: "string" }, { name: "f2", type: "string" }),
    expected: "✓✓✗✓✓✓✗",
  },
  {
    name: 'adding ["null","int"] without a default (redpanda#16649)',
    type: "AVRO",
    old: [rec({ name: "f1", type: "string" })],
    candidate: rec({ name: "f1", type: "string" }, { name: "f2", type: ["null", "int"] }),
    expected: "✓✗✗✓✓✗✗",
  },
  {
    name: 'adding ["null","int"] with default null (redpanda#4120)',
    type: "AVRO",
    old: [rec({ name: "f1", type: "string" })],
    candidate: rec(
      { name: "f1", type: "string" },
      { name: "f2", type: ["null", "int"], default: null },
    ),
    expected: "✓✓✓✓✓✓✓",
  },
  {
    name: "renaming a field through aliases",
    type: "AVRO",
    old: [rec({ name: "f1", type: "string" })],
    candidate: rec({ name: "g", type: "string", aliases: ["f1"] }),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "promoting int to long",
    type: "AVRO",
    old: [rec({ name: "a", type: "int" })],
    candidate: rec({ name: "a", type: "long" }),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "narrowing long to int",
    type: "AVRO",
    old: [rec({ name: "a", type: "long" })],
    candidate: rec({ name: "a", type: "int" }),
    expected: "✓✗✗✓✓✗✗",
  },
  {
    name: "adding an enum symbol, no enum default",
    type: "AVRO",
    old: [enumOf(["A", "B"])],
    candidate: enumOf(["A", "B", "C"]),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "adding an enum symbol, with an enum default",
    type: "AVRO",
    old: [enumOf(["A", "B"], { default: "A" })],
    candidate: enumOf(["A", "B", "C"], { default: "A" }),
    expected: "✓✓✓✓✓✓✓",
  },
  {
    name: "removing an enum symbol, no enum default",
    type: "AVRO",
    old: [enumOf(["A", "B", "C"])],
    candidate: enumOf(["A", "B"]),
    expected: "✓✗✗✓✓✗✗",
  },
  {
    name: "removing an enum symbol, with an enum default",
    type: "AVRO",
    old: [enumOf(["A", "B", "C"], { default: "A" })],
    candidate: enumOf(["A", "B"], { default: "A" }),
    expected: "✓✓✓✓✓✓✓",
  },
  {
    name: "changing the record's name",
    type: "AVRO",
    old: [rec({ name: "a", type: "int" })],
    candidate: { type: "record", name: "S", fields: [{ name: "a", type: "int" }] },
    expected: "✓✗✗✗✗✗✗",
  },
  {
    name: "removing an optional property, open content model",
    type: "JSON",
    old: [obj({ a: { type: "string" }, b: { type: "integer" } })],
    candidate: obj({ a: { type: "string" } }),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "removing an optional property, additionalProperties false",
    type: "JSON",
    old: [obj({ a: { type: "string" }, b: { type: "integer" } }, { additionalProperties: false })],
    candidate: obj({ a: { type: "string" } }, { additionalProperties: false }),
    expected: "✓✗✗✓✓✗✗",
  },
  {
    name: "adding a required property",
    type: "JSON",
    old: [obj({ a: { type: "string" } }, { required: ["a"] })],
    candidate: obj({ a: { type: "string" }, c: { type: "string" } }, { required: ["a", "c"] }),
    expected: "✓✗✗✓✓✗✗",
  },
  {
    name: "making a required property optional",
    type: "JSON",
    old: [obj({ a: { type: "string" } }, { required: ["a"] })],
    candidate: obj({ a: { type: "string" } }),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "adding an optional property to an open content model",
    type: "JSON",
    old: [obj({ a: { type: "string" } })],
    candidate: obj({ a: { type: "string" }, c: { type: "string" } }),
    expected: "✓✗✗✓✓✗✗",
  },
  {
    name: "adding an optional property to a closed content model",
    type: "JSON",
    old: [obj({ a: { type: "string" } }, { additionalProperties: false })],
    candidate: obj(
      { a: { type: "string" }, c: { type: "string" } },
      { additionalProperties: false },
    ),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "widening integer to number",
    type: "JSON",
    old: [obj({ a: { type: "integer" } })],
    candidate: obj({ a: { type: "number" } }),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "adding an enum value",
    type: "JSON",
    old: [obj({ a: { enum: ["x", "y"] } })],
    candidate: obj({ a: { enum: ["x", "y", "z"] } }),
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "v2 removes b from a closed model (accepted forward), v3 adds it back as a number",
    type: "JSON",
    old: [
      obj({ a: { type: "string" }, b: { type: "string" } }, { additionalProperties: false }),
      obj({ a: { type: "string" } }, { additionalProperties: false }),
    ],
    candidate: obj(
      { a: { type: "string" }, b: { type: "number" } },
      { additionalProperties: false },
    ),
    expected: "✓✓✗✗✗✗✗",
  },
  {
    // oneOf wants exactly one branch: 5 is a number and an integer, so the new schema refuses it
    // (found by the attacker of the registry, who had this accepted as backward compatible).
    name: "integer becomes oneOf [number, integer]: overlapping branches refuse old values",
    type: "JSON",
    old: [{ type: "integer" }],
    candidate: { oneOf: [{ type: "number" }, { type: "integer" }] },
    expected: "✓✗✗✗✗✗✗",
  },
  {
    name: "integer becomes oneOf [integer, string]: branches of types that cannot overlap",
    type: "JSON",
    old: [{ type: "integer" }],
    candidate: { oneOf: [{ type: "integer" }, { type: "string" }] },
    expected: "✓✓✓✗✗✗✗",
  },
  {
    name: "the same draft-07 schema through a local $ref",
    type: "JSON",
    old: [obj({ a: { $ref: "#/definitions/s" } }, { definitions: { s: { type: "string" } } })],
    candidate: obj({ a: { type: "string" } }),
    expected: "✓✓✓✓✓✓✓",
  },
];

async function registryWith(row: Row, level: CompatibilityLevel) {
  const fs = new MemoryFileSystem();
  await fs.mkdir("/data");
  const registry = await SchemaRegistry.open({ fs, dataDir: "/data", logger: silentLogger });
  await registry.setCompatibility("s", "NONE");
  for (const schema of row.old)
    await registry.register("s", { schemaType: row.type, schema: JSON.stringify(schema) });
  await registry.setCompatibility("s", level);
  return registry;
}

/** Can data written with `writer` be read with `reader`? avsc's resolver, then 20 sample records round-tripped. */
function avroOracle(reader: object, writer: object): boolean {
  const r = avsc.Type.forSchema(reader as avsc.Schema);
  const w = avsc.Type.forSchema(writer as avsc.Schema);
  let resolver: avsc.Resolver;
  try {
    resolver = r.createResolver(w);
  } catch {
    return false;
  }
  for (let i = 0; i < 20; i++) {
    const value = w.random();
    try {
      r.fromBuffer(w.toBuffer(value), resolver);
    } catch {
      return false;
    }
  }
  return true;
}

function oracleVerdict(row: Row, level: CompatibilityLevel): boolean {
  if (level === "NONE") return true;
  const olds = isTransitive(level) ? row.old : row.old.slice(-1);
  const backward = level.startsWith("BACKWARD") || level.startsWith("FULL");
  const forward = level.startsWith("FORWARD") || level.startsWith("FULL");
  return olds.every(
    (old) =>
      (!backward || avroOracle(row.candidate, old)) && (!forward || avroOracle(old, row.candidate)),
  );
}

describe("compatibility matrix", () => {
  for (const row of rows) {
    describe(`${row.type}: ${row.name}`, () => {
      compatibilityLevels.forEach((level, i) => {
        const compatible = [...row.expected][i] === "✓";
        it(`is ${compatible ? "compatible" : "incompatible"} under ${level}`, async () => {
          const registry = await registryWith(row, level);
          const input = { schemaType: row.type, schema: JSON.stringify(row.candidate) };
          const latest = await registry.testCompatibility("s", "latest", input);
          const all = await registry.testCompatibility("s", undefined, input);
          expect(latest.compatible, latest.reasons.join("; ")).toBe(compatible);
          expect(all.compatible).toBe(compatible);
          if (!compatible) expect(latest.reasons.length).toBeGreaterThan(0);
          if (row.type === "AVRO")
            expect(oracleVerdict(row, level), "the avsc oracle").toBe(compatible);
          const versionsBefore = registry.versions("s");
          let registered: { id: number; version: number } | RegistryError;
          try {
            registered = await registry.register("s", input);
          } catch (err) {
            registered = err as RegistryError;
          }
          if (compatible) {
            expect(registered).toEqual({ id: row.old.length + 1, version: row.old.length + 1 });
          } else {
            expect(registered).toBeInstanceOf(RegistryError);
            expect((registered as RegistryError).kind.errorCode).toBe(409);
            expect(registry.versions("s")).toEqual(versionsBefore);
            // No id was consumed: the next new schema gets the next id.
            await registry.setCompatibility("s", "NONE");
            expect((await registry.register("s", { schema: '"boolean"' })).id).toBe(
              row.old.length + 1,
            );
          }
        });
      });
    });
  }
});
