/**
 * The JSON Schema compatibility check's cost is bounded (docs/registry.md "Limits"): each pair of
 * (sub)schemas is compared once, so the attack of session 18 (finding 2: `$ref` chains of `anyOf`
 * pairs, 2^N paths through N + 1 definitions) takes steps linear in N, and what is past the step or
 * nesting budget is refused as too complex (42201), never a stalled event loop or a stack overflow.
 * The assertions count steps (a small `stepsMax`), not time.
 */
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
