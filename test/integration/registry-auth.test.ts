/**
 * The schema registry behind API keys (docs/registry.md "HTTP API", the rows of `auth/roles.ts`):
 * registering, deleting and changing compatibility need an admin key; reads need any key; no key
 * is 401. Refusals come in Confluent's error shape, `error_code` 40301 and 40101 as Confluent's.
 */
import { describe, expect, it, onTestFinished } from "vitest";
import { AccessControl } from "../../src/auth/access.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { createAuthenticatedHttpApp } from "../../src/transport/http/auth.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { openTestKeyStore } from "../helpers/keys.ts";

const avro = JSON.stringify({ type: "record", name: "R", fields: [{ name: "a", type: "int" }] });

async function setup() {
  const logger = new MemoryLogger();
  const { broker, fs } = await openTestBroker({ clock: realClock, logger });
  const { keys } = await openTestKeyStore({ fs, logger });
  onTestFinished(() => keys.close());
  const admin = (await keys.create({ name: "admin", role: "admin" })).key;
  const producer = (await keys.create({ name: "ingest", role: "producer", topics: ["orders"] }))
    .key;
  const consumer = (await keys.create({ name: "reader", role: "consumer", topics: ["orders"] }))
    .key;
  const access = new AccessControl({ broker, keys, logger });
  const app = createAuthenticatedHttpApp({ access, logger, registry: broker.registry });
  const call = async (method: string, path: string, key: string | undefined, body?: unknown) => {
    const headers = new Headers({ "content-type": "application/vnd.schemaregistry.v1+json" });
    if (key !== undefined) headers.set("authorization", `Bearer ${key}`);
    const res = await app.fetch(
      new Request(`http://broker/registry${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
      { remoteAddress: () => "203.0.113.9:4000" },
    );
    return { status: res.status, body: (await res.json()) as any };
  };
  return { call, admin, producer, consumer };
}

describe("the schema registry with API keys", () => {
  it("lets admin keys change it and every key read it", async () => {
    const { call, admin, producer, consumer } = await setup();
    expect(await call("POST", "/subjects/s/versions", admin, { schema: avro })).toEqual({
      status: 200,
      body: { id: 1 },
    });
    for (const key of [admin, producer, consumer]) {
      expect((await call("GET", "/subjects", key)).body).toEqual(["s"]);
      expect((await call("GET", "/schemas/ids/1", key)).status).toBe(200);
      expect(
        (await call("POST", "/compatibility/subjects/s/versions/latest", key, { schema: avro }))
          .body,
      ).toEqual({ is_compatible: true });
    }
    const refusals: [string, string, unknown, string][] = [
      ["POST", "/subjects/s/versions", { schema: '"int"' }, "register_schema"],
      ["DELETE", "/subjects/s", undefined, "delete_schema"],
      ["DELETE", "/subjects/s/versions/1", undefined, "delete_schema"],
      ["PUT", "/config", { compatibility: "NONE" }, "update_schema_config"],
      ["PUT", "/config/s", { compatibility: "NONE" }, "update_schema_config"],
      ["DELETE", "/config/s", undefined, "update_schema_config"],
    ];
    for (const key of [producer, consumer]) {
      for (const [method, path, body, operation] of refusals) {
        const refused = await call(method, path, key, body);
        expect(refused.status, `${method} ${path}`).toBe(403);
        expect(refused.body.error_code, `${method} ${path}`).toBe(40301);
        expect(refused.body.message, `${method} ${path}`).toMatch(
          new RegExp(`may not ${operation}`),
        );
      }
    }
    expect((await call("GET", "/subjects/s/versions", admin)).body).toEqual([1]);
    const anonymous = await call("GET", "/subjects", undefined);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error_code).toBe(40101);
  });
});
