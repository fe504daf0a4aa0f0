/**
 * Confluent Schema Registry's REST API over the broker's schema registry, mounted under
 * `/registry` (a client's base URL is `http://host:8080/registry`). Like the rest of the HTTP
 * front door the routes only decode, call the {@link SchemaRegistry} and encode; shapes and
 * errors follow Confluent's, so its clients work unchanged (docs/registry.md "HTTP API").
 *
 * | method & path                                              | operation            | success                                   |
 * |------------------------------------------------------------|----------------------|-------------------------------------------|
 * | `GET /schemas/types`                                       | read_schemas         | `["AVRO","JSON"]`                         |
 * | `GET /schemas/ids/{id}` (`/schema`, `/subjects`, `/versions`) | read_schemas      | `{"schema","schemaType"?}` / raw schema / `[subject]` / `[{"subject","version"}]` |
 * | `GET /subjects` (`?deleted`, `?subjectPrefix`)             | read_schemas         | `[subject]`                               |
 * | `POST /subjects/{s}` `{"schema","schemaType"?}` (`?deleted`) | read_schemas       | `{"subject","id","version","schema","schemaType"?}` |
 * | `GET /subjects/{s}/versions` (`?deleted`)                  | read_schemas         | `[version]`                               |
 * | `GET /subjects/{s}/versions/{v\|latest}` (`/schema`)       | read_schemas         | `{"subject","id","version","schema","schemaType"?}` / raw schema |
 * | `GET /subjects/{s}/versions/{v}/referencedby`              | read_schemas         | `[]` (references are not supported)       |
 * | `POST /subjects/{s}/versions` `{"schema","schemaType"?}`   | register_schema      | `{"id"}`                                  |
 * | `DELETE /subjects/{s}` (`?permanent=true`)                 | delete_schema        | `[version]`                               |
 * | `DELETE /subjects/{s}/versions/{v}` (`?permanent=true`)    | delete_schema        | `version`                                 |
 * | `GET /config`, `GET /config/{s}` (`?defaultToGlobal`)      | read_schemas         | `{"compatibilityLevel"}`                  |
 * | `PUT /config`, `PUT /config/{s}` `{"compatibility"}`       | update_schema_config | `{"compatibility"}`                       |
 * | `DELETE /config`, `DELETE /config/{s}`                     | update_schema_config | `{"compatibilityLevel"}` (the one removed) |
 * | `POST /compatibility/subjects/{s}/versions[/{v\|latest}]` (`?verbose`) | read_schemas | `{"is_compatible","messages"?}`   |
 * | `GET /mode`                                                | read_schemas         | `{"mode":"READWRITE"}`                    |
 *
 * `schemaType` is omitted for AVRO, as Confluent does. Every answer is
 * `application/vnd.schemaregistry.v1+json`; request bodies may be that, `application/json`,
 * `application/vnd.schemaregistry+json`, `application/octet-stream` or untyped (others: 415).
 * Errors are `{"error_code": n, "message": "…"}` with Confluent's codes (`registry/errors.ts`);
 * errors of the broker's own table (a body over `--max-request-bytes`) keep their HTTP status,
 * which is also their `error_code`.
 *
 * Authorization: every route first calls `authorize(operation)` with its operation of the table
 * (reads; registering; deleting; changing compatibility), before it reads a body. With API keys
 * (`transport/http/auth.ts`, the rows of `auth/roles.ts`) registering, deleting and changing
 * compatibility need an admin key and reads any key: 401 or 403 in Confluent's shape, `error_code`
 * 40101 or 40301 (also for the front door's refusals under `/registry`, `auth.ts`).
 */
import { clip, quote } from "../../../lib/quote.ts";
import { jsonNestingFault } from "../../../lib/json-nesting.ts";
import { foreignMessageCharsMax, jsonNestingDepthMax } from "../../../lib/limits.ts";
import { type Context, Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { BrokerError, Errors } from "../../../broker/errors.ts";
import { parseCompatibilityLevel } from "../../../registry/compatibility.ts";
import { RegistryError, RegistryErrors } from "../../../registry/errors.ts";
import type { SchemaInput, SchemaRegistry, SubjectVersion } from "../../../registry/registry.ts";
import { errorMessage, errorStack } from "../../../lib/errors.ts";
import type { Logger } from "../../../lib/logger.ts";

/** The operations a registry route performs, for authorization (module table). */
export type RegistryOperation =
  | "read_schemas"
  | "register_schema"
  | "delete_schema"
  | "update_schema_config";

/** Options of {@link createRegistryApp}. */
export interface RegistryRoutesOptions {
  registry: SchemaRegistry;
  logger: Logger;
  /** The app's body reader: at most `--max-request-bytes` (413 past it). */
  readBody: (c: Context, action: string) => Promise<Uint8Array>;
  /** The app's check of a declared Content-Length against the cap, before reading. */
  limitBody: (c: Context) => void;
  /**
   * Called first by every route with its operation; throws (a BrokerError, e.g. 403) to refuse.
   * Absent: everything is allowed (no API keys).
   */
  authorize?: (operation: RegistryOperation) => void | Promise<void>;
}

/** The media type of every registry answer. */
export const registryMediaType = "application/vnd.schemaregistry.v1+json";

const acceptedBodyTypes = new Set([
  "",
  registryMediaType,
  "application/vnd.schemaregistry+json",
  "application/json",
  "application/octet-stream",
]);

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The `error_code` of an error of the broker's own table on a registry route: Confluent's 40101
 * and 40301 for 401 and 403 (what its authorizer answers, and what its clients look for), else
 * the HTTP status.
 */
export function registryErrorCode(status: number): number {
  if (status === 401) return RegistryErrors.unauthorized.errorCode;
  if (status === 403) return RegistryErrors.forbidden.errorCode;
  return status;
}

/**
 * Whether `path` (a URL path, no query) is under `/registry`, whose errors take Confluent's shape
 * (`auth.ts` answers authentication's 401 and the cross-site 403 there with
 * {@link registryErrorResponse}).
 */
export function isRegistryPath(path: string): boolean {
  return path === "/registry" || path.startsWith("/registry/");
}

/**
 * An error answer in Confluent's shape, `{"error_code","message"}` in the registry's media type,
 * for code outside the registry's app; `headers` are added (`WWW-Authenticate`, …).
 */
export function registryErrorResponse(
  status: number,
  message: string,
  headers: Record<string, string> = {},
): Response {
  return new Response(JSON.stringify({ error_code: registryErrorCode(status), message }), {
    status,
    headers: { ...headers, "content-type": registryMediaType },
  });
}

/** Confluent's error body. */
function errorResponse(c: Context, status: number, errorCode: number, message: string): Response {
  return c.body(
    JSON.stringify({ error_code: errorCode, message }),
    status as ContentfulStatusCode,
    {
      "content-type": registryMediaType,
    },
  );
}

function answer(c: Context, value: unknown, status: ContentfulStatusCode = 200): Response {
  return c.body(JSON.stringify(value), status, { "content-type": registryMediaType });
}

function invalidRequest(message: string): RegistryError {
  return new RegistryError(RegistryErrors.invalidRequest, message);
}

function flag(c: Context, name: string): boolean {
  return c.req.query(name)?.toLowerCase() === "true";
}

/** A subject version as Confluent shows it (`schemaType` omitted for AVRO). */
function versionJson(v: SubjectVersion): Record<string, unknown> {
  const out: Record<string, unknown> = { subject: v.subject, version: v.version, id: v.id };
  if (v.schemaType !== "AVRO") out.schemaType = v.schemaType;
  out.schema = v.schema;
  return out;
}

/** A schema id from the path. @throws RegistryError schema_not_found naming the text. */
function idParam(c: Context): number {
  const text = c.req.param("id") ?? "";
  if (/^[1-9]\d{0,9}$/.test(text) && Number(text) <= 0x7fff_ffff) return Number(text);
  throw new RegistryError(
    RegistryErrors.schemaNotFound,
    `Cannot find schema id ${quote(text)}: ids are integers from 1 to ${0x7fff_ffff}`,
  );
}

/** The raw schema text as a body: it is JSON itself. */
function rawSchema(c: Context, schema: string): Response {
  return c.body(schema, 200, { "content-type": registryMediaType });
}

/**
 * Builds the registry's Hono app (routes of the module table, relative to the mount point); the
 * HTTP app mounts it at `/registry`.
 */
export function createRegistryApp(options: RegistryRoutesOptions): Hono {
  const { registry, logger, readBody, limitBody } = options;
  const authorize = options.authorize ?? (() => {});
  const app = new Hono();

  app.onError((err, c) => {
    if (err instanceof RegistryError)
      return errorResponse(c, err.kind.http, err.kind.errorCode, err.message);
    if (err instanceof BrokerError) {
      // A key revoked while its request ran (auth.ts answers the other 401s itself).
      if (err.kind === Errors.unauthenticated)
        c.header("www-authenticate", 'Bearer realm="es-broker", error="invalid_token"');
      return errorResponse(c, err.kind.http, registryErrorCode(err.kind.http), err.message);
    }
    logger.log("error", "http.internal_error", {
      method: c.req.method,
      path: c.req.path,
      error: errorMessage(err),
      stack: errorStack(err),
    });
    return errorResponse(
      c,
      500,
      50001,
      `Cannot complete ${c.req.method} ${c.req.path}: internal error (logged)`,
    );
  });

  /** The JSON object of a request body. @throws RegistryError 415, 400; BrokerError 413. */
  const jsonBody = async (c: Context, action: string): Promise<Record<string, unknown>> => {
    const type = (c.req.header("content-type") ?? "").split(";", 1)[0].trim().toLowerCase();
    if (!acceptedBodyTypes.has(type))
      throw new RegistryError(
        RegistryErrors.unsupportedMediaType,
        `${action}: Content-Type ${quote(type)} is not accepted (use ${registryMediaType} or application/json)`,
      );
    limitBody(c);
    const bytes = await readBody(c, action);
    let value: unknown;
    try {
      const text = strictUtf8.decode(bytes);
      const fault = jsonNestingFault(text);
      if (fault !== null)
        throw new Error(`it nests arrays and objects more than ${jsonNestingDepthMax} levels deep`);
      value = JSON.parse(text);
    } catch (err) {
      throw invalidRequest(
        `${action}: the body is not UTF-8 JSON: ${clip(errorMessage(err), foreignMessageCharsMax)}`,
      );
    }
    if (typeof value !== "object" || value === null || Array.isArray(value))
      throw invalidRequest(`${action}: the body must be a JSON object`);
    return value as Record<string, unknown>;
  };

  /** The schema fields of a body; refuses fields Confluent's import mode uses. */
  const schemaBody = async (c: Context, action: string): Promise<SchemaInput> => {
    const body = await jsonBody(c, action);
    for (const field of Object.keys(body)) {
      if (["schema", "schemaType", "references"].includes(field)) continue;
      if (["metadata", "ruleSet"].includes(field) && body[field] === null) continue;
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: field ${quote(field)} is not supported (expected schema, schemaType, references)`,
      );
    }
    return { schema: body.schema, schemaType: body.schemaType, references: body.references };
  };

  const subjectParam = (c: Context) => c.req.param("subject") ?? "";
  const versionParam = (c: Context) => c.req.param("version") ?? "";

  // A registry shared by a cluster answers every request with each change acknowledged before
  // it on any broker (one etcd read first; nothing to do on a single node).
  app.use("*", async (_c, next) => {
    await registry.sync();
    await next();
  });

  app.get("/", async (c) => {
    await authorize("read_schemas");
    return answer(c, {});
  });

  app.get("/schemas/types", async (c) => {
    await authorize("read_schemas");
    return answer(c, registry.schemaTypes());
  });

  app.get("/schemas/ids/:id", async (c) => {
    await authorize("read_schemas");
    const found = registry.schemaById(idParam(c));
    return answer(
      c,
      found.schemaType === "AVRO"
        ? { schema: found.schema }
        : { schemaType: found.schemaType, schema: found.schema },
    );
  });

  app.get("/schemas/ids/:id/schema", async (c) => {
    await authorize("read_schemas");
    return rawSchema(c, registry.schemaById(idParam(c)).schema);
  });

  app.get("/schemas/ids/:id/subjects", async (c) => {
    await authorize("read_schemas");
    const id = idParam(c);
    registry.schemaById(id);
    const subjects = registry
      .versionsOfId(id, { deleted: flag(c, "deleted") })
      .map((v) => v.subject);
    return answer(c, [...new Set(subjects)]);
  });

  app.get("/schemas/ids/:id/versions", async (c) => {
    await authorize("read_schemas");
    const id = idParam(c);
    registry.schemaById(id);
    return answer(c, registry.versionsOfId(id, { deleted: flag(c, "deleted") }));
  });

  app.get("/subjects", async (c) => {
    await authorize("read_schemas");
    return answer(
      c,
      registry.subjects({ deleted: flag(c, "deleted"), prefix: c.req.query("subjectPrefix") }),
    );
  });

  app.post("/subjects/:subject", async (c) => {
    await authorize("read_schemas");
    const subject = subjectParam(c);
    const input = await schemaBody(c, `Cannot look up a schema under subject ${quote(subject)}`);
    return answer(
      c,
      versionJson(await registry.lookup(subject, input, { deleted: flag(c, "deleted") })),
    );
  });

  app.delete("/subjects/:subject", async (c) => {
    await authorize("delete_schema");
    return answer(
      c,
      await registry.deleteSubject(subjectParam(c), { permanent: flag(c, "permanent") }),
    );
  });

  app.get("/subjects/:subject/versions", async (c) => {
    await authorize("read_schemas");
    return answer(c, registry.versions(subjectParam(c), { deleted: flag(c, "deleted") }));
  });

  app.post("/subjects/:subject/versions", async (c) => {
    await authorize("register_schema");
    const subject = subjectParam(c);
    const input = await schemaBody(c, `Cannot register a schema under subject ${quote(subject)}`);
    const { id } = await registry.register(subject, input);
    return answer(c, { id });
  });

  app.get("/subjects/:subject/versions/:version", async (c) => {
    await authorize("read_schemas");
    const found = registry.version(subjectParam(c), versionParam(c), {
      deleted: flag(c, "deleted"),
    });
    return answer(c, versionJson(found));
  });

  app.get("/subjects/:subject/versions/:version/schema", async (c) => {
    await authorize("read_schemas");
    const found = registry.version(subjectParam(c), versionParam(c), {
      deleted: flag(c, "deleted"),
    });
    return rawSchema(c, found.schema);
  });

  app.get("/subjects/:subject/versions/:version/referencedby", async (c) => {
    await authorize("read_schemas");
    registry.version(subjectParam(c), versionParam(c), { deleted: true });
    return answer(c, []);
  });

  app.delete("/subjects/:subject/versions/:version", async (c) => {
    await authorize("delete_schema");
    return answer(
      c,
      await registry.deleteVersion(subjectParam(c), versionParam(c), {
        permanent: flag(c, "permanent"),
      }),
    );
  });

  const configBody = async (c: Context, action: string) => {
    const body = await jsonBody(c, action);
    for (const field of Object.keys(body))
      if (field !== "compatibility")
        throw new RegistryError(
          RegistryErrors.invalidCompatibility,
          `${action}: field ${quote(field)} is not supported (expected compatibility)`,
        );
    return parseCompatibilityLevel(body.compatibility, action);
  };

  app.get("/config", async (c) => {
    await authorize("read_schemas");
    return answer(c, { compatibilityLevel: registry.compatibility() });
  });

  app.put("/config", async (c) => {
    await authorize("update_schema_config");
    const level = await configBody(c, "Cannot set the global compatibility level");
    return answer(c, { compatibility: await registry.setCompatibility(undefined, level) });
  });

  app.delete("/config", async (c) => {
    await authorize("update_schema_config");
    return answer(c, { compatibilityLevel: await registry.deleteCompatibility() });
  });

  app.get("/config/:subject", async (c) => {
    await authorize("read_schemas");
    const level = registry.compatibility(subjectParam(c), {
      defaultToGlobal: flag(c, "defaultToGlobal"),
    });
    return answer(c, { compatibilityLevel: level });
  });

  app.put("/config/:subject", async (c) => {
    await authorize("update_schema_config");
    const subject = subjectParam(c);
    const level = await configBody(
      c,
      `Cannot set the compatibility level of subject ${quote(subject)}`,
    );
    return answer(c, { compatibility: await registry.setCompatibility(subject, level) });
  });

  app.delete("/config/:subject", async (c) => {
    await authorize("update_schema_config");
    return answer(c, { compatibilityLevel: await registry.deleteCompatibility(subjectParam(c)) });
  });

  const compatibility = async (c: Context, version: string | undefined) => {
    await authorize("read_schemas");
    const subject = subjectParam(c);
    const input = await schemaBody(c, `Cannot test compatibility with subject ${quote(subject)}`);
    const result = await registry.testCompatibility(subject, version, input);
    return answer(
      c,
      flag(c, "verbose")
        ? { is_compatible: result.compatible, messages: result.reasons }
        : { is_compatible: result.compatible },
    );
  };

  app.post("/compatibility/subjects/:subject/versions", (c) => compatibility(c, undefined));
  app.post("/compatibility/subjects/:subject/versions/:version", (c) =>
    compatibility(c, versionParam(c)),
  );

  app.get("/mode", async (c) => {
    await authorize("read_schemas");
    return answer(c, { mode: "READWRITE" });
  });

  app.all("*", (c) =>
    errorResponse(c, 404, 404, `Cannot ${c.req.method} ${c.req.path}: no such registry route`),
  );

  return app;
}
