/**
 * The JSON Schema compatibility check's cost is bounded (docs/registry.md "Limits"): each pair of
 * (sub)schemas is compared once, so the attack of session 18 (finding 2: `$ref` chains of `anyOf`
 * pairs, 2^N paths through N + 1 definitions) takes steps linear in N, and what is past the step or
 * nesting budget is refused as too complex (42201), never a stalled event loop or a stack overflow.
 * The assertions count steps (a small `stepsMax`), not time.
 */
import { Ajv } from "ajv";
import * as formats from "ajv-formats";
import { describe, expect, it } from "vitest";
import { jsonCompatDepthMax } from "../../src/lib/limits.ts";
import { RegistryError } from "../../src/registry/errors.ts";
import { jsonSchemaIncludes } from "../../src/registry/json-compat.ts";
import type { Json } from "../../src/registry/canonical.ts";

const labels = { narrow: "old", wide: "new" };

/** d_i = anyOf [$ref d_{i+1}, $ref d_{i+1}], d_n = `last`: a DAG of n + 1 nodes, 2^n paths. */
function chain(n: number, last: Json): Json {
  const definitions: Record<string, Json> = {};
  for (let i = 0; i < n; i++)
    definitions[`d${i}`] = {
      anyOf: [{ $ref: `#/definitions/d${i + 1}` }, { $ref: `#/definitions/d${i + 1}` }],
    };
  definitions[`d${n}`] = last;
  return { definitions, $ref: "#/definitions/d0" };
}

function refusal(run: () => unknown): RegistryError {
  try {
    run();
  } catch (err) {
    if (err instanceof RegistryError) return err;
    throw err;
  }
  throw new Error("expected a refusal");
}

describe("JSON Schema compatibility cost", () => {
  it("checks the attacker's anyOf chain (depth 21 took 21 s, depth 40 would take days) within 1 000 steps, on either side", () => {
    for (const n of [21, 40]) {
      const attack = chain(n, { type: "string" });
      const wide = jsonSchemaIncludes({ type: "object" }, attack, labels, 1000);
      expect(wide.length).toBeGreaterThan(0);
      expect(wide[0]).toContain("no branch of the new schema's anyOf/oneOf");
      const narrow = jsonSchemaIncludes(attack, { type: "object" }, labels, 1000);
      expect(narrow.length).toBeGreaterThan(0);
      expect(narrow.every((r) => r.includes('type "'))).toBe(true);
    }
  });

  it("checks recursive schemas through the same chain within 1 000 steps, and still finds what breaks", () => {
    const tree: Json = {
      type: "object",
      properties: { child: { $ref: "#" } },
    };
    const same = chain(40, {
      type: "object",
      properties: { child: { $ref: "#/definitions/d0" } },
    });
    expect(jsonSchemaIncludes(tree, same, labels, 1000)).toEqual([]);
    const requiring = chain(40, {
      type: "object",
      required: ["x"],
      properties: { child: { $ref: "#/definitions/d0" } },
    });
    const reasons = jsonSchemaIncludes(tree, requiring, labels, 1000);
    expect(reasons.join("\n")).toContain('property "x" is required by the new schema');
  });

  it("refuses a comparison past the step budget as too complex (42201, the limit named)", () => {
    const err = refusal(() =>
      jsonSchemaIncludes({ type: "object" }, chain(40, { type: "string" }), labels, 30),
    );
    expect(err.kind.errorCode).toBe(42201);
    expect(err.message).toContain("too complex to check");
    expect(err.message).toContain("more than 30 steps (jsonCompatStepsMax)");
  });

  it("refuses a $ref chain nested past jsonCompatDepthMax as too complex, not a stack overflow", () => {
    const definitions: Record<string, Json> = {};
    const n = 20_000;
    for (let i = 0; i < n; i++) definitions[`d${i}`] = { $ref: `#/definitions/d${i + 1}` };
    definitions[`d${n}`] = { type: "string" };
    const deep: Json = { definitions, $ref: "#/definitions/d0" };
    for (const [a, b] of [
      [{ type: "object" }, deep],
      [deep, { type: "object" }],
    ] as [Json, Json][]) {
      const err = refusal(() => jsonSchemaIncludes(a, b, labels));
      expect(err.kind.errorCode).toBe(42201);
      expect(err.message).toContain(`more than ${jsonCompatDepthMax} comparisons`);
    }
  });
});

describe("JSON Schema compatibility soundness (session 18, finding 6)", () => {
  /** ajv as the registry configures it (formats on, strict off): the oracle of validity. */
  const ajv = new Ajv({ strict: false, allErrors: false });
  // A CommonJS module: its function is the namespace's default (as libraries.ts loads it).
  (formats as unknown as { default: (a: Ajv) => Ajv }).default(ajv);
  const valid = (schema: Json, value: unknown) => ajv.validate(schema as object, value) === true;

  const cases: { name: string; old: Json; new: Json; value: unknown }[] = [
    {
      name: "anyOf and oneOf in one schema (both were ignored)",
      old: { type: "object" },
      new: {
        anyOf: [{ type: "object", required: ["x"] }],
        oneOf: [{ type: "object" }],
      },
      value: { y: 1 },
    },
    {
      name: "ajv-formats' formatMinimum (was ignored)",
      old: { type: "string", format: "date" },
      new: { type: "string", format: "date", formatMinimum: "2020-01-01" },
      value: "2019-05-05",
    },
    {
      name: "formatExclusiveMaximum (was ignored)",
      old: { type: "string", format: "date" },
      new: { type: "string", format: "date", formatExclusiveMaximum: "2030-01-01" },
      value: "2031-01-01",
    },
    {
      name: "multipleOf 0.3 within 0.1 (a 1e-9 tolerance, ajv is exact)",
      old: { type: "number", multipleOf: 0.3 },
      new: { type: "number", multipleOf: 0.1 },
      value: 0.3,
    },
    {
      name: "an unknown keyword only the new schema has, alone",
      old: { type: "string" },
      new: { formatMaximum: "2020-01-01", format: "date" },
      value: "x",
    },
    {
      name: "nullable: true in the old schema (ajv adds null to its type)",
      old: { type: "string", nullable: true },
      new: { type: "string" },
      value: null,
    },
  ];

  for (const c of cases)
    it(`refuses ${c.name}`, () => {
      // The counterexample is real: valid under the old schema, refused under the new.
      expect(valid(c.old, c.value)).toBe(true);
      expect(valid(c.new, c.value)).toBe(false);
      expect(jsonSchemaIncludes(c.old, c.new, labels)).not.toEqual([]);
    });

  it("still accepts what is provable: equal multipleOf, integer multiples, anyOf+oneOf both within, annotations", () => {
    expect(
      jsonSchemaIncludes({ multipleOf: 0.1, type: "number" }, { multipleOf: 0.1 }, labels),
    ).toEqual([]);
    expect(
      jsonSchemaIncludes(
        { type: "integer", multipleOf: 6 },
        { type: "integer", multipleOf: 3 },
        labels,
      ),
    ).toEqual([]);
    expect(
      jsonSchemaIncludes(
        { type: "string", minLength: 2 },
        { anyOf: [{ type: "string" }], oneOf: [{ type: "string" }, { type: "integer" }] },
        labels,
      ),
    ).toEqual([]);
    expect(
      jsonSchemaIncludes(
        { type: "string", formatMinimum: "2020-01-01", format: "date" },
        { type: "string", title: "t", description: "d", $comment: "c", format: "date" },
        labels,
      ),
    ).toEqual([]);
  });
});
