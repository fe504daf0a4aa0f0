/**
 * End-to-end: the schema registry of the real process through a real Confluent client, npm
 * `@kafkajs/confluent-schema-registry` (docs/registry.md). It registers Avro and JSON schemas,
 * encodes values; the values are produced to topics with `confluent` validation on (over HTTP and
 * over the TCP client), consumed, and decoded by the same client; its compatibility errors
 * surface as it expects; ids survive a restart; and `es-broker schemas` drives the same API.
 */
import { COMPATIBILITY, SchemaRegistry, SchemaType } from "@kafkajs/confluent-schema-registry";
import { readFileSync, writeFileSync } from "node:fs";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, runCli, startBroker, target } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function start(dataDir: string): Promise<BrokerProcess> {
  const broker = await startBroker(dataDir);
  running.push(broker);
  return broker;
}

async function connect(broker: BrokerProcess): Promise<TcpClient> {
  const client = await TcpClient.connect(broker.tcp);
  onTestFinished(() => void client.close());
  return client;
}

const orderV1 = {
  type: "record",
  name: "Order",
  namespace: "shop",
  fields: [
    { name: "id", type: "long" },
    { name: "total", type: "double" },
  ],
};
const orderV2 = {
  ...orderV1,
  fields: [...orderV1.fields, { name: "note", type: ["null", "string"], default: null }],
};
const eventSchema = {
  $schema: "http://json-schema.org/draft-07/schema#",
  type: "object",
  properties: { kind: { type: "string" }, count: { type: "integer" } },
  required: ["kind"],
  additionalProperties: false,
};

async function produceHttp(broker: BrokerProcess, topic: string, values: Buffer[]) {
  const res = await fetch(`${broker.httpUrl}/v1/topics/${topic}/records`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ records: values.map((v) => ({ value_b64: v.toString("base64") })) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

describe(`[${target}] schema registry with a Confluent client`, () => {
  it("registers, encodes, validates at produce time, consumes and decodes Avro and JSON values", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const client = await connect(broker);
    const registry = new SchemaRegistry({ host: `${broker.httpUrl}/registry` });
    await client.createTopic({
      name: "orders",
      partitions: 1,
      config: { value_schema_subject: "orders-value" },
    });
    await client.createTopic({
      name: "events",
      partitions: 1,
      config: { value_schema_subject: "events-value" },
    });

    const { id: v1 } = await registry.register(
      { type: SchemaType.AVRO, schema: JSON.stringify(orderV1) },
      { subject: "orders-value" },
    );
    const { id: v2 } = await registry.register(
      { type: SchemaType.AVRO, schema: JSON.stringify(orderV2) },
      { subject: "orders-value" },
    );
    expect(v2).toBeGreaterThan(v1);
    const { id: ev } = await registry.register(
      { type: SchemaType.JSON, schema: JSON.stringify(eventSchema) },
      { subject: "events-value" },
    );
    expect(await registry.getLatestSchemaId("orders-value")).toBe(v2);
    expect(await registry.getRegistryId("orders-value", 1)).toBe(v1);

    const a = await registry.encode(v1, { id: 1, total: 9.5 });
    const b = await registry.encode(v2, { id: 2, total: 3, note: "gift" });
    expect(await produceHttp(broker, "orders", [a])).toMatchObject({ status: 200 });
    await client.produce("orders", [{ value: b }]);
    const e = await registry.encode(ev, { kind: "click", count: 3 });
    await client.produce("events", [{ value: e }]);

    // A value encoded for the other subject, and a payload that is not the schema's, are refused.
    const refused = await produceHttp(broker, "orders", [a, e]);
    expect(refused.status).toBe(422);
    expect(refused.body.error).toMatchObject({
      code: "invalid_record",
      details: { record_index: 1, schema_id: ev, version: null },
    });
    const badJson = Buffer.concat([e.subarray(0, 5), Buffer.from('{"kind":"x","extra":1}')]);
    await expect(client.produce("events", [{ value: badJson }])).rejects.toMatchObject({
      code: "invalid_record",
      details: { record_index: 0, schema_id: ev, version: 1 },
    });

    // 64-bit longs past 2^53 (refused as a "potential precision loss" before): Long.MAX_VALUE and
    // -2^63 as id, framed by hand (the client's avsc would refuse to encode them), over HTTP and TCP.
    await client.createTopic({
      name: "ids",
      partitions: 1,
      config: { value_schema_subject: "orders-value" },
    });
    const total = Buffer.alloc(8);
    total.writeDoubleLE(1.5);
    const header = Buffer.from([0, 0, 0, 0, 0]);
    header.writeUInt32BE(v1, 1);
    const longMax = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    const longMin = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    const big = (varint: number[]) => Buffer.concat([header, Buffer.from(varint), total]);
    expect(await produceHttp(broker, "ids", [big(longMax)])).toMatchObject({ status: 200 });
    await client.produce("ids", [{ value: big(longMin) }]);
    const past64 = await produceHttp(broker, "ids", [big([...longMax.slice(0, 9), 0x02])]);
    expect(past64.status).toBe(422);
    expect(past64.body.error.message).toContain("does not fit 64 bits");
    expect((await client.fetch({ topic: "ids", partition: 0, offset: 0 })).records).toHaveLength(2);

    const orders = await client.fetch({ topic: "orders", partition: 0, offset: 0 });
    const decoded = [];
    for (const r of orders.records) decoded.push(await registry.decode(Buffer.from(r.value)));
    expect(decoded).toEqual([
      { id: 1, total: 9.5 },
      { id: 2, total: 3, note: "gift" },
    ]);
    const events = await client.fetch({ topic: "events", partition: 0, offset: 0 });
    expect(events.records).toHaveLength(1);
    expect(await registry.decode(Buffer.from(events.records[0].value))).toEqual({
      kind: "click",
      count: 3,
    });
  });

  it("surfaces incompatibility as the client expects, and keeps ids across a restart", async () => {
    const { dir } = tempDir();
    let broker = await start(`${dir}/data`);
    let registry = new SchemaRegistry({ host: `${broker.httpUrl}/registry` });
    const { id } = await registry.register(
      { type: SchemaType.AVRO, schema: JSON.stringify(orderV1) },
      { subject: "s-value" },
    );
    // The client set the subject's level to its default (BACKWARD) on the first registration.
    const config = await fetch(`${broker.httpUrl}/registry/config/s-value`);
    expect(await config.json()).toEqual({ compatibilityLevel: "BACKWARD" });
    const incompatible = { ...orderV1, fields: [...orderV1.fields, { name: "x", type: "int" }] };
    await expect(
      registry.register(
        { type: SchemaType.AVRO, schema: JSON.stringify(incompatible) },
        { subject: "s-value" },
      ),
    ).rejects.toMatchObject({ status: 409, message: expect.stringMatching(/incompatible/) });
    await expect(
      registry.register(
        { type: SchemaType.AVRO, schema: JSON.stringify(orderV2) },
        { subject: "s-value", compatibility: COMPATIBILITY.FULL },
      ),
    ).rejects.toThrow(/Compatibility does not match the configuration \(FULL != BACKWARD\)/);
    const encoded = await registry.encode(id, { id: 5, total: 1 });

    await broker.stop("SIGTERM");
    running.splice(running.indexOf(broker), 1);
    broker = await start(`${dir}/data`);
    registry = new SchemaRegistry({ host: `${broker.httpUrl}/registry` });
    expect(await registry.decode(encoded)).toEqual({ id: 5, total: 1 });
    const again = await registry.register(
      { type: SchemaType.AVRO, schema: JSON.stringify(orderV1, null, 4) },
      { subject: "other-value" },
    );
    expect(again.id).toBe(id);
  });

  it("es-broker schemas registers, lists, gets and checks schemas", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const url = `${broker.httpUrl}/registry`;
    const v1 = `${dir}/order.avsc`;
    const bad = `${dir}/bad.avsc`;
    const event = `${dir}/event.json`;
    writeFileSync(v1, JSON.stringify(orderV1));
    writeFileSync(bad, JSON.stringify({ ...orderV1, fields: [{ name: "id", type: "string" }] }));
    writeFileSync(event, JSON.stringify(eventSchema));
    const cli = (...args: string[]) => runCli(["schemas", ...args, "--registry", url]);

    const registered = await cli("register", "orders-value", v1);
    expect(registered.stderr).toBe("");
    expect(JSON.parse(registered.stdout.toString())).toEqual({ id: 1, version: 1 });
    expect(JSON.parse((await cli("register", "events-value", event)).stdout.toString())).toEqual({
      id: 2,
      version: 1,
    });
    expect((await cli("list")).stdout.toString()).toBe("events-value\norders-value\n");
    expect((await cli("list", "orders-value")).stdout.toString()).toBe("1\n");
    expect(JSON.parse((await cli("get", "events-value")).stdout.toString())).toMatchObject({
      schemaType: "JSON",
      id: 2,
    });
    expect(JSON.parse((await cli("get", "--id", "1")).stdout.toString()).schema).toContain("Order");
    const check = await cli("check", "orders-value", bad);
    expect(check.code).toBe(1);
    expect(check.stdout.toString()).toMatch(/^incompatible\n {2}version 1/);
    expect((await cli("check", "orders-value", v1)).stdout.toString()).toBe("compatible\n");
    const refused = await cli("register", "orders-value", bad);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^es-broker: .*incompatible.*\(error_code 409\)\n$/);
    const missing = await cli("get", "nope");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/error_code 40401/);
    const usage = await cli("register", "only-subject");
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/usage: es-broker schemas register SUBJECT FILE/);
  });

  it("with API keys: admin keys register, other keys read, through the Confluent client and the CLI", async () => {
    const { dir } = tempDir();
    const dataDir = `${dir}/data`;
    const made = await runCli([
      "keys",
      "create",
      "--data-dir",
      dataDir,
      "--name",
      "root",
      "--role",
      "admin",
      "--out",
      `${dir}/admin.key`,
    ]);
    expect(made.code, made.stderr).toBe(0);
    const broker = await start(dataDir);
    const url = `${broker.httpUrl}/registry`;
    const admin = readFileSync(`${dir}/admin.key`, "utf8").trim();
    const created = await fetch(`${broker.httpUrl}/v1/admin/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "ingest", role: "producer", topics: ["orders"] }),
    });
    expect(created.status).toBe(201);
    writeFileSync(`${dir}/producer.key`, ((await created.json()) as { key: string }).key, {
      mode: 0o600,
    });
    const bearer = (key: string) => [
      () => ({
        request: (req: any) => req.enhance({ headers: { Authorization: `Bearer ${key}` } }),
      }),
    ];
    const asAdmin = new SchemaRegistry({ host: url, middlewares: bearer(admin) as any });
    const asProducer = new SchemaRegistry({
      host: url,
      middlewares: bearer(readFileSync(`${dir}/producer.key`, "utf8")) as any,
    });
    const { id } = await asAdmin.register(
      { type: SchemaType.AVRO, schema: JSON.stringify(orderV1) },
      { subject: "orders-value" },
    );
    expect(await asProducer.getLatestSchemaId("orders-value")).toBe(id);
    await expect(
      asProducer.register(
        { type: SchemaType.AVRO, schema: JSON.stringify(orderV2) },
        { subject: "orders-value" },
      ),
    ).rejects.toMatchObject({
      status: 403,
      message: expect.stringMatching(/^Confluent_Schema_Registry - .*may not register_schema/),
    });
    // No key: 401 in Confluent's shape under /registry, so the client shows the message…
    const anonymous = new SchemaRegistry({ host: url });
    await expect(anonymous.getLatestSchemaId("orders-value")).rejects.toMatchObject({
      status: 401,
      unauthorized: true,
      message: expect.stringMatching(/^Confluent_Schema_Registry - Cannot authenticate/),
    });
    for (const [path, init, status, code] of [
      ["/registry/subjects", {}, 401, 40101],
      ["/registry", {}, 401, 40101],
      [
        "/registry/subjects/x/versions",
        { method: "POST", headers: { origin: "http://elsewhere.example" }, body: "{}" },
        403,
        40301,
      ],
    ] as const) {
      const res = await fetch(`${broker.httpUrl}${path}`, init);
      expect(res.status, path).toBe(status);
      expect(res.headers.get("content-type")).toBe("application/vnd.schemaregistry.v1+json");
      const body = (await res.json()) as { error_code: number; message: string };
      expect(body.error_code, path).toBe(code);
      expect(body.message.length).toBeGreaterThan(0);
      if (status === 401) expect(res.headers.get("www-authenticate")).toMatch(/^Bearer /);
    }
    // …and keeps the broker's own shape elsewhere.
    const topics = await fetch(`${broker.httpUrl}/v1/topics`);
    expect(topics.status).toBe(401);
    expect(((await topics.json()) as { error: { code: string } }).error.code).toBe(
      "unauthenticated",
    );
    const file = `${dir}/order-v2.avsc`;
    writeFileSync(file, JSON.stringify(orderV2));
    const cli = (keyFile: string | null, ...args: string[]) =>
      runCli([
        "schemas",
        ...args,
        "--registry",
        url,
        ...(keyFile === null ? [] : ["--api-key-file", keyFile]),
      ]);
    const refused = await cli(`${dir}/producer.key`, "register", "orders-value", file);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/may not register_schema.*\(error_code 40301\)/);
    expect((await cli(`${dir}/producer.key`, "list")).stdout.toString()).toBe("orders-value\n");
    const noKey = await cli(null, "list");
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toMatch(/Cannot authenticate.*\(error_code 40101\)/);
    expect(
      JSON.parse(
        (await cli(`${dir}/admin.key`, "register", "orders-value", file)).stdout.toString(),
      ),
    ).toEqual({ id: id + 1, version: 2 });
  });

  // Not runtime-specific (the registry's parsing): the node target is enough.
  it.runIf(target === "node")(
    "names what it does not take: lowercase schema types, PROTOBUF and references are 42201",
    async () => {
      const { dir } = tempDir();
      const broker = await start(`${dir}/data`);
      const url = `${broker.httpUrl}/registry`;
      const types = await fetch(`${url}/schemas/types`);
      expect(await types.json()).toEqual(["AVRO", "JSON"]);
      const register = async (body: unknown, subject = "s-value") => {
        const res = await fetch(`${url}/subjects/${subject}/versions`, {
          method: "POST",
          headers: { "content-type": "application/vnd.schemaregistry.v1+json" },
          body: JSON.stringify(body),
        });
        return {
          status: res.status,
          body: (await res.json()) as { error_code: number; message: string },
        };
      };
      const avro = JSON.stringify(orderV1);
      const json = JSON.stringify({ type: "object" });
      // Confluent looks schema types up by exact name: "avro" is not AVRO there, nor here.
      for (const [schemaType, schema, right] of [
        ["avro", avro, "AVRO"],
        ["json", json, "JSON"],
        ["Json", json, "JSON"],
      ]) {
        const r = await register({ schemaType, schema });
        expect(r.status, schemaType).toBe(422);
        expect(r.body.error_code).toBe(42201);
        expect(r.body.message).toContain(`case-sensitive: use "${right}"`);
      }
      const proto = await register({ schemaType: "PROTOBUF", schema: 'syntax = "proto3";' });
      expect(proto.status).toBe(422);
      expect(proto.body.message).toMatch(/PROTOBUF/);
      const referencing = await register({
        schema: avro,
        references: [{ name: "com.example.Other", subject: "other-value", version: 1 }],
      });
      expect(referencing.status).toBe(422);
      expect(referencing.body.error_code).toBe(42201);
      expect(referencing.body.message).toMatch(/references.*not supported/);
      // Nothing above registered anything; the proper spellings do.
      expect(await fetch(`${url}/subjects`).then((r) => r.json())).toEqual([]);
      expect((await register({ schemaType: "AVRO", schema: avro, references: [] })).status).toBe(
        200,
      );
      expect((await register({ schemaType: "JSON", schema: json }, "j-value")).status).toBe(200);
    },
  );
});
