/**
 * Checks HTTP answers against the OpenAPI document (`src/transport/http/openapi.ts`) with ajv in
 * strict mode (JSON Schema 2020-12, as OpenAPI 3.1 uses): the operation the method and path name,
 * the status listed for it, the content type listed for that status, and a JSON body valid
 * against its schema. An answer to a path the document does not name must be an error in the
 * document's one error shape. The check itself is openapi-answers.ts; this module gives it the
 * document and ajv, compiling each schema when first needed ({@link ResponseChecker}) or all of
 * them at once into standalone code ({@link standaloneCheckerCode}).
 */
import { _, type ValidateFunction } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import ajvStandalone from "ajv/dist/standalone/index.js";
import { openApiDocument } from "../../src/transport/http/openapi.ts";
import { registryMediaType } from "../../src/transport/http/registry/routes.ts";
import {
  AnswerChecker,
  type DocumentedOperation,
  type DocumentPaths,
  errorSchemaRef,
  type Json,
  operationsOf,
  registryErrorSchemaRef,
} from "./openapi-answers.ts";

export type { DocumentedOperation } from "./openapi-answers.ts";

const doc = openApiDocument as unknown as {
  paths: DocumentPaths;
  components: { schemas: Record<string, Json> };
};

/** `#/components/schemas/X` → `openapi#/$defs/X`, so ajv resolves refs in a schema of its own. */
function rewriteRefs(value: Json): Json {
  if (Array.isArray(value)) return value.map(rewriteRefs);
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, Json> = {};
  for (const [k, v] of Object.entries(value))
    out[k] =
      k === "$ref" && typeof v === "string"
        ? v.replace("#/components/schemas/", "openapi#/$defs/")
        : rewriteRefs(v);
  return out;
}

/**
 * An ajv instance in strict mode knowing the document's schemas and formats. With `standalone`,
 * it also keeps each compiled validator's source for {@link standaloneCheckerCode}.
 */
export function documentAjv(standalone = false): Ajv2020 {
  const ajv = new Ajv2020({
    strict: true,
    allErrors: true,
    allowUnionTypes: true,
    // The standalone code names the formats by this expression (a function is not source).
    ...(standalone
      ? {
          code: {
            source: true,
            formats: _`{ int64: { type: "number", validate: Number.isSafeInteger } }`,
          },
        }
      : {}),
  });
  ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addSchema({ $id: "openapi", $defs: rewriteRefs(doc.components.schemas) as object });
  return ajv;
}

/** Every operation of the document. */
export const documentedOperations: DocumentedOperation[] = operationsOf(doc.paths);

/** The operation `method path` names, if the document has it. */
export function findOperation(method: string, path: string): DocumentedOperation | undefined {
  const upper = method.toUpperCase();
  return documentedOperations.find((o) => o.method === upper && o.match.test(path));
}

/** Validates answers against the document; one compiled validator per schema, compiled when first needed. */
export class ResponseChecker extends AnswerChecker {
  constructor() {
    const ajv = documentAjv();
    const compiled = new Map<Json, ValidateFunction>();
    super(doc.paths, registryMediaType, (schema) => {
      let v = compiled.get(schema);
      if (v === undefined) {
        v = ajv.compile(rewriteRefs(schema) as object);
        compiled.set(schema, v);
      }
      return v;
    });
  }
}

/**
 * Every schema an answer's body can be judged by: each JSON (or schema registry) body schema of
 * each response of the document, and the two error shapes of answers to paths it does not name.
 */
export function answerSchemas(): Json[] {
  const schemas: Json[] = [errorSchemaRef, registryErrorSchemaRef];
  for (const op of documentedOperations)
    for (const response of Object.values(op.operation.responses))
      for (const [media, { schema }] of Object.entries(response.content ?? {}))
        if (media === "application/json" || media === registryMediaType) schemas.push(schema);
  return schemas;
}

/**
 * A CommonJS module's source (ajv's standalone code; it `require`s ajv's runtime helpers) that
 * exports what `standaloneChecker` (openapi-answers.ts) needs to check answers without this module, the document's
 * module or ajv's compiler: `paths` (the document's), `registryMediaType`, and `validators`, one
 * per schema of {@link answerSchemas} keyed by the schema's JSON text.
 */
export function standaloneCheckerCode(): string {
  const ajv = documentAjv(true);
  const names = new Map<string, string>();
  for (const schema of answerSchemas()) {
    const key = JSON.stringify(schema);
    if (names.has(key)) continue;
    const name = `v${names.size}`;
    names.set(key, name);
    // Its name is its $id: ajv's standalone code exports schemas by id.
    ajv.addSchema({ $id: name, ...(rewriteRefs(schema) as object) });
  }
  const validators = [...names].map(([key, name]) => `${JSON.stringify(key)}: exports.${name}`);
  return [
    // The CommonJS module itself is the function, also as its `default` (which TypeScript sees).
    ajvStandalone.default(ajv, Object.fromEntries([...names.values()].map((name) => [name, name]))),
    `exports.paths = ${JSON.stringify(doc.paths)};`,
    `exports.registryMediaType = ${JSON.stringify(registryMediaType)};`,
    `exports.validators = {${validators.join(",\n")}};`,
  ].join("\n");
}
