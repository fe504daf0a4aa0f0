/**
 * The registry's HTTP routes (`transport/http/registry/routes.ts`, docs/registry.md "HTTP API"):
 * Confluent's shapes, media type and error codes through the Hono app; bad input is always a
 * 4xx with a Confluent error body, never a 500; every route asks the authorization hook first.
 */
import { describe, expect, it } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import type { RegistryOperation } from "../../src/transport/http/registry/routes.ts";
import { openTestBroker } from "../helpers/broker.ts";

const mediaType = "application/vnd.schemaregistry.v1+json";

async function app(
  options: { authorize?: (op: RegistryOperation) => void; maxRequestBytes?: number } = {},
) {
  const { broker } = await openTestBroker();
  const logger = new MemoryLogger();
  const http = createHttpApp({
    broker,
    logger,
    registry: broker.registry,
    authorizeRegistry: options.authorize,
    maxRequestBytes: options.maxRequestBytes,
  });
  const call = async (method: string, path: string, body?: unknown, contentType = mediaType) => {
    const res = await http.request(`/registry${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": contentType },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    expect(res.headers.get("content-type"), `${method} ${path}`).toBe(mediaType);
    const text = await res.text();
    return { status: res.status, body: text === "" ? null : JSON.parse(text) };
  };
  return { call, logger };
}

const avro = JSON.stringify({ type: "record", name: "R", fields: [{ name: "a", type: "int" }] });

describe("registry HTTP routes", () => {
  it("serve Confluent's shapes", async () => {
    const { call } = await app();
    expect(await call("GET", "/schemas/types")).toEqual({ status: 200, body: ["AVRO", "JSON"] });
    expect(await call("POST", "/subjects/s/versions", { schema: avro })).toEqual({
      status: 200,
      body: { id: 1 },
    });
    const json = JSON.stringify({ type: "object" });
    expect(
      await call(
        "POST",
        "/subjects/j/versions",
        { schema: json, schemaType: "JSON" },
        "application/json",
      ),
    ).toEqual({ status: 200, body: { id: 2 } });
    expect((await call("GET", "/subjects/s/versions/latest")).body).toEqual({
      subject: "s",
      version: 1,
      id: 1,
      schema: expect.any(String),
    });
    expect((await call("GET", "/subjects/j/versions/1")).body).toMatchObject({
      schemaType: "JSON",
      id: 2,
    });
    expect((await call("GET", "/subjects/s/versions/1/schema")).body).toEqual(JSON.parse(avro));
    expect((await call("GET", "/schemas/ids/1")).body).toEqual({ schema: expect.any(String) });
    expect((await call("GET", "/schemas/ids/2")).body).toEqual({
      schemaType: "JSON",
      schema: '{"type":"object"}',
    });
    expect((await call("GET", "/schemas/ids/1/schema")).body).toEqual(JSON.parse(avro));
    expect((await call("GET", "/schemas/ids/1/subjects")).body).toEqual(["s"]);
    expect((await call("GET", "/schemas/ids/1/versions")).body).toEqual([
      { subject: "s", version: 1 },
    ]);
    expect((await call("GET", "/subjects")).body).toEqual(["j", "s"]);
    expect((await call("GET", "/subjects?subjectPrefix=j")).body).toEqual(["j"]);
    expect((await call("GET", "/subjects/s/versions")).body).toEqual([1]);
    expect((await call("POST", "/subjects/s", { schema: avro })).body).toMatchObject({
      subject: "s",
      id: 1,
      version: 1,
    });
    expect((await call("GET", "/config")).body).toEqual({ compatibilityLevel: "BACKWARD" });
    expect((await call("PUT", "/config/s", { compatibility: "full" })).body).toEqual({
      compatibility: "FULL",
    });
    expect((await call("GET", "/config/s")).body).toEqual({ compatibilityLevel: "FULL" });
    expect((await call("DELETE", "/config/s")).body).toEqual({ compatibilityLevel: "FULL" });
    expect((await call("GET", "/config/s?defaultToGlobal=true")).body).toEqual({
      compatibilityLevel: "BACKWARD",
    });
    expect(
      (await call("POST", "/compatibility/subjects/s/versions/latest", { schema: '"int"' })).body,
    ).toEqual({ is_compatible: false });
    const verbose = await call("POST", "/compatibility/subjects/s/versions?verbose=true", {
      schema: avro,
    });
    expect(verbose.body).toEqual({ is_compatible: true, messages: [] });
    expect((await call("GET", "/subjects/s/versions/1/referencedby")).body).toEqual([]);
    expect((await call("DELETE", "/subjects/s/versions/latest")).body).toBe(1);
    expect((await call("GET", "/subjects/s/versions?deleted=true")).body).toEqual([1]);
    expect((await call("DELETE", "/subjects/s/versions/1?permanent=true")).body).toBe(1);
    expect((await call("GET", "/mode")).body).toEqual({ mode: "READWRITE" });
  });

  it("answer bad input with Confluent error codes, never 500", async () => {
    const { call, logger } = await app({ maxRequestBytes: 64 * 1024 });
    await call("POST", "/subjects/s/versions", { schema: avro });
    const cases: [string, string, unknown, number, number, string?][] = [
      ["GET", "/subjects/nope/versions", undefined, 404, 40401],
      ["GET", "/subjects/s/versions/9", undefined, 404, 40402],
      ["GET", "/schemas/ids/99", undefined, 404, 40403],
      ["GET", "/schemas/ids/abc", undefined, 404, 40403],
      ["GET", "/config/s", undefined, 404, 40408],
      ["POST", "/subjects/s/versions", { schema: '{"type":"record"}' }, 422, 42201],
      ["POST", "/subjects/s/versions", { schema: "{" }, 422, 42201],
      ["POST", "/subjects/s/versions", { schema: '"int"', id: 5 }, 422, 42201],
      ["GET", "/subjects/s/versions/-2", undefined, 422, 42202],
      ["GET", "/subjects/s/versions/99999999999", undefined, 422, 42202],
      ["PUT", "/config", { compatibility: "MOSTLY" }, 422, 42203],
      ["PUT", "/config", { compatibility: "FULL", extra: 1 }, 422, 42203],
      ["POST", "/subjects/s/versions", "not json", 400, 400],
      ["POST", "/subjects/s/versions", "[1]", 400, 400],
      ["POST", "/subjects/s/versions", { schema: avro }, 415, 415, "text/plain"],
      ["POST", "/subjects/s/versions", { schema: "x".repeat(100 * 1024) }, 413, 413],
      ["GET", "/no/such/route", undefined, 404, 404],
    ];
    for (const [method, path, body, status, code, type] of cases) {
      const res = await call(method, path, body, type);
      expect(res.status, `${method} ${path}`).toBe(status);
      expect(res.body.error_code, `${method} ${path}`).toBe(code);
      expect(res.body.message, `${method} ${path}`).toEqual(expect.any(String));
    }
    expect(logger.named("http.internal_error")).toEqual([]);
  });

  it("ask the authorization hook with each route's operation before doing anything", async () => {
    const asked: RegistryOperation[] = [];
    const { call } = await app({
      authorize: (op) => {
        asked.push(op);
        if (op !== "read_schemas")
          throw new BrokerError(Errors.unavailable, `Refused ${op}: not allowed in this test`);
      },
    });
    expect((await call("GET", "/subjects")).status).toBe(200);
    const refused = await call("POST", "/subjects/s/versions", { schema: avro });
    expect(refused).toEqual({
      status: 503,
      body: { error_code: 503, message: expect.stringMatching(/register_schema/) },
    });
    await call("DELETE", "/subjects/s");
    await call("PUT", "/config", { compatibility: "NONE" });
    expect(asked).toEqual([
      "read_schemas",
      "register_schema",
      "delete_schema",
      "update_schema_config",
    ]);
    expect((await call("GET", "/subjects")).body).toEqual([]);
  });
});
