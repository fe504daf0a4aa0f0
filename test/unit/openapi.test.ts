/**
 * The OpenAPI document (`src/transport/http/openapi.ts`) is a valid OpenAPI 3.1 document, its
 * schemas compile in ajv's strict mode, and it names exactly the routes the HTTP app registers.
 * (The end-to-end suite checks every answer of the real process against it: test/helpers/openapi.ts.)
 */
import SwaggerParser from "@apidevtools/swagger-parser";
import { describe, expect, it } from "vitest";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { registerKeyRoutes } from "../../src/transport/http/keys.ts";
import { openApiDocument } from "../../src/transport/http/openapi.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Errors } from "../../src/broker/errors.ts";
import type { AuthorizedBroker } from "../../src/auth/access.ts";
import { FakeBroker } from "./http-fake-broker.ts";
import { SchemaRegistry } from "../../src/registry/registry.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import {
  documentAjv,
  documentedOperations,
  ResponseChecker,
  standaloneCheckerCode,
} from "../helpers/openapi.ts";
import { standaloneChecker } from "../helpers/openapi-answers.ts";

describe("the OpenAPI document", () => {
  it("is a valid OpenAPI 3.1 document (swagger-parser)", async () => {
    const copy = structuredClone(openApiDocument) as any;
    const api = await SwaggerParser.validate(copy);
    expect((api as { openapi?: string }).openapi).toBe("3.1.0");
    // It does check: a document without info, or with a response lacking its description, fails.
    await expect(SwaggerParser.validate({ ...copy, info: undefined })).rejects.toThrow();
    const broken = structuredClone(openApiDocument) as any;
    delete broken.paths["/healthz"].get.responses["200"].description;
    await expect(SwaggerParser.validate(broken)).rejects.toThrow();
  });

  it("compiles, schema by schema, in ajv's strict mode", () => {
    const ajv = documentAjv();
    for (const name of Object.keys(openApiDocument.components.schemas))
      expect(() => ajv.getSchema(`openapi#/$defs/${name}`), name).not.toThrow();
  });

  it("names exactly the routes the app registers", async () => {
    const broker = new FakeBroker();
    const registry = await SchemaRegistry.open({
      fs: new MemoryFileSystem(),
      dataDir: "/data",
      logger: new MemoryLogger(),
    });
    const app = createHttpApp({
      broker,
      logger: new MemoryLogger(),
      metricsText: async () => "",
      registry,
      routes: (built, helpers) =>
        registerKeyRoutes(built, { broker: broker as unknown as AuthorizedBroker, ...helpers }),
    });
    const registered = new Set(
      app.routes
        .filter((r) => r.method !== "ALL")
        .map(
          (r) =>
            `${r.method} ${r.path.replace(/:([A-Za-z_]+)/g, "{$1}").replace(/\/\*$/, "/{path}")}`,
        ),
    );
    // A documented HEAD is served by its GET route (Hono answers HEAD with the GET handler).
    const documented = new Set(
      documentedOperations
        .filter((o) => o.method !== "HEAD" || !registered.has(`GET ${o.template}`))
        .map((o) => `${o.method === "HEAD" ? "GET" : o.method} ${o.template}`),
    );
    expect(
      [...registered].filter((r) => !documented.has(r)),
      "routes missing from the document",
    ).toEqual([]);
    expect(
      [...documented].filter((d) => !registered.has(d)),
      "documented routes that do not exist",
    ).toEqual([]);
  });

  it("lists every error code of the error table, and one error schema", () => {
    const codes = (openApiDocument.components.schemas.ErrorCode as { enum: string[] }).enum;
    expect(codes.sort()).toEqual(
      Object.values(Errors)
        .map((k) => k.code)
        .sort(),
    );
  });

  it("declares offsets and timestamps as int64 integers no larger than 2^53 − 1", () => {
    const schemas = openApiDocument.components.schemas as Record<string, any>;
    for (const name of ["Offset", "Timestamp"]) {
      expect(schemas[name]).toMatchObject({ type: "integer", format: "int64" });
      expect(schemas[name].maximum).toBe(Number.MAX_SAFE_INTEGER);
    }
  });

  // The e2e setup file checks with the standalone validators (test/e2e/openapi-validators.ts).
  it.each([
    ["compiling each schema when first needed", () => new ResponseChecker()],
    ["with the standalone validators", () => standaloneChecker(standaloneCheckerCode())],
  ])("the checker %s accepts documented answers and names what is wrong with others", (_, make) => {
    const checker = make();
    const ok = (status: number, body: unknown, path = "/v1/topics/orders", method = "GET") =>
      checker.check({
        method,
        path,
        status,
        contentType: "application/json",
        body: JSON.stringify(body),
      });
    const topic = {
      name: "orders",
      partitions: [
        {
          partition: 0,
          log_start_offset: 0,
          high_watermark: 2 ** 53 - 1,
          size_bytes: 0,
          segments: 1,
          fenced: false,
        },
      ],
      config: {
        segment_bytes: 1024,
        segment_ms: 1,
        retention_ms: -1,
        retention_bytes: -1,
        cleanup_policy: "delete",
        tombstone_retention_ms: 0,
        cold_retention_ms: -1,
        max_timestamp_skew_ms: 0,
      },
    };
    expect(ok(200, topic)).toEqual([]);
    expect(ok(200, { ...topic, extra: 1 })[0]).toMatch(/additional properties/);
    expect(
      ok(200, { ...topic, partitions: [{ ...topic.partitions[0], high_watermark: "5" }] })[0],
    ).toMatch(/must be integer/);
    expect(
      ok(200, { ...topic, partitions: [{ ...topic.partitions[0], high_watermark: 2 ** 53 }] }),
    ).toContain(
      'GET /v1/topics/orders → 200: /partitions/0/high_watermark must match format "int64"',
    );
    expect(ok(418, topic)[0]).toMatch(/status not listed/);
    expect(
      ok(404, { error: { code: "topic_not_found", message: "Cannot describe topic: no" } }),
    ).toEqual([]);
    expect(ok(404, { error: { code: "no_such_code", message: "x" } })[0]).toMatch(
      /must be equal to one of the allowed values/,
    );
    expect(ok(404, { error: { code: "not_found", message: "Cannot GET /x" } }, "/nowhere")).toEqual(
      [],
    );
    expect(ok(404, { message: "not found" }, "/nowhere")[0]).toMatch(
      /must have required property 'error'/,
    );
  });
});
