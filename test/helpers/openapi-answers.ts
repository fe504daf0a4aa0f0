/**
 * The part of the OpenAPI answer check (test/helpers/openapi.ts) that needs neither the document's
 * module nor ajv: matching an answer to its operation, status and content type, and judging its
 * JSON body with a validator per schema that the caller supplies. The end-to-end setup file
 * (test/e2e/openapi-setup.ts) builds it from validators compiled once per run
 * (test/e2e/openapi-validators.ts), so that a test file does not import and compile them itself.
 */
import { createRequire } from "node:module";

/** A JSON value of the document. */
export type Json = unknown;

/** One operation of the document, as far as the check reads it. */
export type Operation = {
  operationId: string;
  responses: Record<string, { content?: Record<string, { schema: Json }> }>;
  parameters?: { name: string; in: string; required?: boolean; schema: Json }[];
  requestBody?: { required?: boolean; content: Record<string, { schema: Json }> };
};

/** The document's `paths`: path template → lower-case method → operation. */
export type DocumentPaths = Record<string, Record<string, Operation>>;

/** A validator of one schema, as ajv compiles it (standalone or not). */
export type Validator = ((value: unknown) => boolean) & {
  errors?: { instancePath: string; message?: string }[] | null;
};

/** One documented operation and its path template. */
export interface DocumentedOperation {
  method: string;
  template: string;
  operation: Operation;
  match: RegExp;
}

/** Every operation of `paths`. */
export function operationsOf(paths: DocumentPaths): DocumentedOperation[] {
  return Object.entries(paths).flatMap(([template, methods]) =>
    Object.entries(methods).map(([method, operation]) => ({
      method: method.toUpperCase(),
      template,
      operation,
      // A parameter named `path` (a Durable Stream's) spans slashes; the others are one segment.
      match: new RegExp(`^${template.replace(/\{path\}/g, ".+").replace(/\{[^}]+\}/g, "[^/]+")}$`),
    })),
  );
}

/** The schema of the document's one error shape. */
export const errorSchemaRef = { $ref: "#/components/schemas/Error" };
/** The schema of the schema registry's errors (Confluent's shape). */
export const registryErrorSchemaRef = { $ref: "#/components/schemas/RegistryError" };

/** One answer to check: `body` is its text, or undefined when it was not read (an event stream). */
export interface Answer {
  method: string;
  path: string;
  status: number;
  contentType: string | null;
  body: string | undefined;
}

/** Checks answers against a document's operations, with the validators `validatorOf` gives. */
export class AnswerChecker {
  readonly #operations: DocumentedOperation[];
  readonly #registryMediaType: string;
  readonly #validatorOf: (schema: Json) => Validator;

  /**
   * @param paths the document's `paths`.
   * @param registryMediaType the schema registry's media type (src/transport/http/registry/routes.ts).
   * @param validatorOf the validator of a schema of the document (`#/components/schemas/…` refs),
   *   including {@link errorSchemaRef} and {@link registryErrorSchemaRef}.
   */
  constructor(
    paths: DocumentPaths,
    registryMediaType: string,
    validatorOf: (schema: Json) => Validator,
  ) {
    this.#operations = operationsOf(paths);
    this.#registryMediaType = registryMediaType;
    this.#validatorOf = validatorOf;
  }

  /** The operation `method path` names, if the document has it. */
  findOperation(method: string, path: string): DocumentedOperation | undefined {
    const upper = method.toUpperCase();
    return this.#operations.find((o) => o.method === upper && o.match.test(path));
  }

  /** Whether `value` is valid against `schema` (a document schema); the errors if not. */
  validate(schema: Json, value: unknown): string[] {
    const v = this.#validatorOf(schema);
    return v(value) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`);
  }

  /** The mismatches of one answer (empty when it matches). */
  check(answer: Answer): string[] {
    const where = `${answer.method} ${answer.path} → ${answer.status}`;
    // A HEAD answer has the GET's headers and no body.
    if (answer.method === "HEAD") answer = { ...answer, body: undefined };
    const media = (answer.contentType ?? "").split(";")[0].trim().toLowerCase();
    const registryMedia = this.#registryMediaType;
    const found = this.findOperation(answer.method, answer.path);
    let content: Record<string, { schema: Json }> | undefined;
    if (found === undefined) {
      if (answer.status < 400) return [`${where}: the document has no operation for it`];
      // The schema registry answers its own unknown routes in Confluent's shape.
      content = {
        "application/json": { schema: errorSchemaRef },
        ...(answer.path === "/registry" || answer.path.startsWith("/registry/")
          ? { [registryMedia]: { schema: registryErrorSchemaRef } }
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
    if ((media !== "application/json" && media !== registryMedia) || answer.body === undefined)
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

/**
 * The checker of the module `code` (test/helpers/openapi.ts, `standaloneCheckerCode`): the same
 * check as `ResponseChecker`, with validators compiled beforehand.
 * @throws Error when an answer needs a schema the module has no validator for.
 */
export function standaloneChecker(code: string): AnswerChecker {
  const module = { exports: {} as Record<string, unknown> };
  // Its `require`s are of ajv's runtime helpers, resolved from the repository as ajv would be.
  new Function("exports", "require", "module", code)(
    module.exports,
    createRequire(import.meta.url),
    module,
  );
  const { paths, registryMediaType, validators } = module.exports as {
    paths: DocumentPaths;
    registryMediaType: string;
    validators: Record<string, Validator>;
  };
  const bySchema = new WeakMap<object, Validator>();
  return new AnswerChecker(paths, registryMediaType, (schema) => {
    let v = bySchema.get(schema as object);
    if (v === undefined) {
      v = validators[JSON.stringify(schema)];
      if (v === undefined)
        throw new Error(`no compiled validator for the schema ${JSON.stringify(schema)}`);
      bySchema.set(schema as object, v);
    }
    return v;
  });
}
