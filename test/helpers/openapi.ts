/**
 * Checks HTTP answers against the OpenAPI document (`src/transport/http/openapi.ts`) with ajv in
 * strict mode (JSON Schema 2020-12, as OpenAPI 3.1 uses): the operation the method and path name,
 * the status listed for it, the content type listed for that status, and a JSON body valid
 * against its schema. An answer to a path the document does not name must be an error in the
 * document's one error shape.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import type { ValidateFunction } from "ajv";
import { openApiDocument } from "../../src/transport/http/openapi.ts";
import { registryMediaType } from "../../src/transport/http/registry/routes.ts";

type Json = unknown;
type Operation = {
  operationId: string;
  responses: Record<string, { content?: Record<string, { schema: Json }> }>;
  parameters?: { name: string; in: string; required?: boolean; schema: Json }[];
  requestBody?: { required?: boolean; content: Record<string, { schema: Json }> };
};

const doc = openApiDocument as unknown as {
  paths: Record<string, Record<string, Operation>>;
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

/** An ajv instance in strict mode knowing the document's schemas and formats. */
export function documentAjv(): Ajv2020 {
  const ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true });
  ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addSchema({ $id: "openapi", $defs: rewriteRefs(doc.components.schemas) as object });
  return ajv;
}

/** One documented operation and its path template. */
export interface DocumentedOperation {
  method: string;
  template: string;
  operation: Operation;
  match: RegExp;
}

/** Every operation of the document. */
export const documentedOperations: DocumentedOperation[] = Object.entries(doc.paths).flatMap(
  ([template, methods]) =>
    Object.entries(methods).map(([method, operation]) => ({
      method: method.toUpperCase(),
      template,
      operation,
      // A parameter named `path` (a Durable Stream's) spans slashes; the others are one segment.
      match: new RegExp(`^${template.replace(/\{path\}/g, ".+").replace(/\{[^}]+\}/g, "[^/]+")}$`),
    })),
);

/** The operation `method path` names, if the document has it. */
export function findOperation(method: string, path: string): DocumentedOperation | undefined {
  const upper = method.toUpperCase();
  return documentedOperations.find((o) => o.method === upper && o.match.test(path));
}

const errorSchemaRef = { $ref: "openapi#/$defs/Error" };

/** Validates answers against the document; one compiled validator per schema. */
export class ResponseChecker {
  readonly #ajv = documentAjv();
  readonly #compiled = new Map<Json, ValidateFunction>();

  #validator(schema: Json): ValidateFunction {
    let v = this.#compiled.get(schema);
    if (v === undefined) {
      v = this.#ajv.compile(rewriteRefs(schema) as object);
      this.#compiled.set(schema, v);
    }
    return v;
  }

  /** Whether `value` is valid against `schema` (a document schema); the errors if not. */
  validate(schema: Json, value: unknown): string[] {
    const v = this.#validator(schema);
    return v(value) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`);
  }

  /**
   * The mismatches of one answer (empty when it matches). `body` is the body's text, or undefined
   * when it was not read (an event stream).
   */
  check(answer: {
    method: string;
    path: string;
    status: number;
    contentType: string | null;
    body: string | undefined;
  }): string[] {
    const where = `${answer.method} ${answer.path} → ${answer.status}`;
    // A HEAD answer has the GET's headers and no body.
    if (answer.method === "HEAD") answer = { ...answer, body: undefined };
    const media = (answer.contentType ?? "").split(";")[0].trim().toLowerCase();
    const found = findOperation(answer.method, answer.path);
    let content: Record<string, { schema: Json }> | undefined;
    if (found === undefined) {
      if (answer.status < 400) return [`${where}: the document has no operation for it`];
      // The schema registry answers its own unknown routes in Confluent's shape.
      content = {
        "application/json": { schema: errorSchemaRef },
        ...(answer.path === "/registry" || answer.path.startsWith("/registry/")
          ? { [registryMediaType]: { schema: { $ref: "#/components/schemas/RegistryError" } } }
          : {}),
      };
    } else {
      const response = found.operation.responses[String(answer.status)];
      if (response === undefined)
        return [`${where}: status not listed for ${found.method} ${found.template}`];
      content = response.content;
    }
    if (content === undefined) {
      return answer.body === undefined || answer.body === ""
        ? []
        : [`${where}: the document lists no body, got ${JSON.stringify(answer.body.slice(0, 80))}`];
    }
    const listed = content[media] ?? content["*/*"];
    if (listed === undefined)
      return [
        `${where}: content type ${JSON.stringify(media)} not listed (${Object.keys(content).join(", ")})`,
      ];
    if ((media !== "application/json" && media !== registryMediaType) || answer.body === undefined)
      return [];
    // A Durable Stream's own data may be JSON; only a listed JSON schema judges it.
    if (content[media] === undefined) return [];
    let value: unknown;
    try {
      value = JSON.parse(answer.body);
    } catch {
      return [`${where}: the body is not JSON: ${JSON.stringify(answer.body.slice(0, 80))}`];
    }
    const schema =
      found === undefined && media === "application/json" ? errorSchemaRef : listed.schema;
    return this.validate(schema, value).map((e) => `${where}: ${e}`);
  }
}
