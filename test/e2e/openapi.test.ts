/**
 * End-to-end: the OpenAPI document (`GET /v1/openapi.json`) against the real process, on the node
 * target only (targets.ts `nodeOnlyE2eFiles`: the app and the broker are the same code on every
 * runtime, and `openapi-setup.ts` checks every answer of every other e2e file against the
 * document on every target). Every answer below is also checked by `openapi-setup.ts` (status
 * listed, content type, body valid in ajv's strict mode); these tests add:
 *
 * - the served document is valid OpenAPI 3.1 (swagger-parser) and is the one in the source;
 * - a scripted session calls every operation of the document, provoking 400, 401, 403, 404, 409,
 *   413 and 416 along the way;
 * - offsets near 2^53 − 1 (a segment whose name says so) come back exact, as the int64 integers
 *   the document declares, and the first offset past 2^53 − 1 is refused, not rounded;
 * - a property-based fuzz (fast-check) drives every operation from the document with valid and
 *   invalid input: never a 5xx, every answer as documented (every 4xx in the one error shape).
 */
import SwaggerParser from "@apidevtools/swagger-parser";
import fc from "fast-check";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openApiDocument } from "../../src/transport/http/openapi.ts";
import {
  type DocumentedOperation,
  documentedOperations,
  findOperation,
  ResponseChecker,
} from "../helpers/openapi.ts";
import { type Components, invalidValue, validValue } from "../helpers/schema-arbitrary.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, runCli, startBroker, target } from "./harness.ts";

/** Requests per operation in the fuzz (fixed seed: a failure replays). */
const fuzzRuns = 25;

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** Starts a broker whose data directory has an admin key (authentication on); returns the key. */
async function brokerWithKeys(
  extra: string[] = [],
): Promise<{ broker: BrokerProcess; admin: string; dir: string }> {
  const { dir } = tempDir();
  const dataDir = join(dir, "data");
  const made = await runCli([
    "keys",
    "create",
    "--data-dir",
    dataDir,
    "--name",
    "openapi-admin-7f3a9c",
    "--role",
    "admin",
    "--out",
    join(dir, "admin.key"),
  ]);
  expect(made.code, made.stderr).toBe(0);
  const broker = await startBroker(dataDir, extra);
  running.push(broker);
  return { broker, admin: readFileSync(join(dir, "admin.key"), "utf8").trim(), dir };
}

interface Call {
  method?: string;
  key?: string;
  body?: unknown;
  raw?: string;
  contentType?: string;
  headers?: Record<string, string>;
}

/** A client that remembers which documented operations and statuses it saw. */
function session(base: string) {
  const operations = new Set<string>();
  const statuses = new Set<number>();
  const call = async (path: string, c: Call = {}) => {
    const method = c.method ?? "GET";
    const headers: Record<string, string> = { ...c.headers };
    if (c.key !== undefined) headers.authorization = `Bearer ${c.key}`;
    let body: string | undefined = c.raw;
    if (c.body !== undefined) body = JSON.stringify(c.body);
    if (body !== undefined) headers["content-type"] = c.contentType ?? "application/json";
    // Redirects are answers to check (GET /console/ → 308), not to follow.
    const res = await fetch(`${base}${path}`, { method, headers, body, redirect: "manual" });
    const op = findOperation(method, new URL(`${base}${path}`).pathname);
    if (op !== undefined) operations.add(op.operation.operationId);
    statuses.add(res.status);
    const streaming = (res.headers.get("content-type") ?? "").startsWith("text/event-stream");
    const text = streaming ? "" : await res.text();
    if (streaming) await res.body?.cancel();
    if (method === "GET" && !path.startsWith("/v1/stream/")) {
      // Every GET route answers HEAD alike: same status and content type, no body, at once.
      const head = await fetch(`${base}${path}`, {
        method: "HEAD",
        headers,
        redirect: "manual",
        signal: AbortSignal.timeout(10_000),
      });
      const headOp = findOperation("HEAD", new URL(`${base}${path}`).pathname);
      if (headOp !== undefined) operations.add(headOp.operation.operationId);
      expect(head.status, `HEAD ${path}`).toBe(res.status);
      expect(head.headers.get("content-type"), `HEAD ${path}`).toBe(
        res.headers.get("content-type"),
      );
      expect(await head.text(), `HEAD ${path}`).toBe("");
    }
    return { status: res.status, text, json: () => JSON.parse(text) };
  };
  return { call, operations, statuses };
}

describe(`[${target}] the OpenAPI document against the real process`, () => {
  it("serves a valid OpenAPI 3.1 document without a key, the one in the source", async () => {
    const { broker } = await brokerWithKeys();
    const res = await fetch(`${broker.httpUrl}/v1/openapi.json`);
    expect(res.status).toBe(200);
    const served = await res.json();
    expect(served).toEqual(JSON.parse(JSON.stringify(openApiDocument)));
    await SwaggerParser.validate(structuredClone(served) as never);
  });

  it("a scripted session calls every operation and gets only documented answers, 4xx included", async () => {
    const { broker, admin } = await brokerWithKeys(["--max-request-bytes", "4096"]);
    const { call, operations, statuses } = session(broker.httpUrl);
    const a = { key: admin };
    expect((await call("/healthz")).status).toBe(200);
    expect((await call("/readyz")).status).toBe(200);
    expect((await call("/v1/openapi.json")).status).toBe(200);
    // Single-node mode: the cluster view is absent (test/e2e/cluster.test.ts validates its 200).
    expect((await call("/v1/cluster", a)).status).toBe(404);
    for (const path of ["/console", "/console/app.js", "/console/app.css", "/console/icon.svg"])
      expect((await call(path)).status).toBe(200);
    expect((await call("/console/")).status).toBe(308);
    expect((await call("/metrics", a)).status).toBe(200);
    expect((await call("/metrics")).status).toBe(401);
    const producerKey = (
      await call("/v1/admin/keys", {
        ...a,
        method: "POST",
        body: { name: "ingest", role: "producer", topics: ["orders"] },
      })
    ).json().key;
    expect(
      (
        await call("/v1/admin/keys", {
          ...a,
          method: "POST",
          body: { name: "ingest", role: "producer", topics: ["orders"] },
        })
      ).status,
    ).toBe(409);
    expect((await call("/metrics", { key: producerKey })).status).toBe(403);
    expect((await call("/v1/admin/keys", a)).status).toBe(200);

    expect(
      (await call("/v1/topics", { ...a, method: "POST", body: { name: "orders", partitions: 2 } }))
        .status,
    ).toBe(201);
    expect(
      (await call("/v1/topics", { ...a, method: "POST", body: { name: "orders" } })).status,
    ).toBe(409);
    expect(
      (await call("/v1/topics", { ...a, method: "POST", body: { name: "bad/name" } })).status,
    ).toBe(400);
    expect(
      (await call("/v1/topics", { ...a, method: "POST", raw: `{"name":"${"x".repeat(5000)}"}` }))
        .status,
    ).toBe(413);
    expect((await call("/v1/topics", a)).status).toBe(200);
    expect((await call("/v1/topics/orders", a)).status).toBe(200);
    expect((await call("/v1/topics/missing", a)).status).toBe(404);
    expect(
      (
        await call("/v1/topics/orders", {
          ...a,
          method: "PATCH",
          body: { config: { retention_ms: 60000 } },
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await call("/v1/topics/orders", {
          ...a,
          method: "PATCH",
          body: { config: { retention_ms: "soon" } },
        })
      ).status,
    ).toBe(400);

    const produce = (c: Call) => call("/v1/topics/orders/records", { method: "POST", ...c });
    expect(
      (
        await produce({
          key: producerKey,
          body: {
            records: [
              { key: "k", value: "v" },
              { value: "w", partition: 1 },
            ],
          },
        })
      ).status,
    ).toBe(200);
    expect(
      (await produce({ key: producerKey, raw: "a\nb\n", contentType: "application/x-ndjson" }))
        .status,
    ).toBe(200);
    const idem = { "producer-id": "p1", "producer-epoch": "1", "producer-seq": "0" };
    const once = {
      key: producerKey,
      headers: idem,
      body: { records: [{ value: "x", partition: 0 }] },
    };
    expect((await produce(once)).json().duplicate).toBe(false);
    expect((await produce(once)).json().duplicate).toBe(true);
    expect((await produce({ ...once, headers: { ...idem, "producer-seq": "7" } })).status).toBe(
      409,
    );
    expect((await produce({ ...once, headers: { ...idem, "producer-epoch": "0" } })).status).toBe(
      403,
    );
    expect((await produce({ key: producerKey, raw: "{not json" })).status).toBe(400);
    const epochPath = "/v1/producers/p1/epoch";
    const epoch = await call(epochPath, { key: producerKey, method: "POST" });
    expect(epoch.status).toBe(200);
    expect(epoch.json().epoch).toBeGreaterThan(1);
    expect(
      (
        await call(epochPath, { key: producerKey, method: "POST", body: { at_least: 2 ** 31 - 1 } })
      ).json().epoch,
    ).toBe(2 ** 31 - 1);
    expect((await call(epochPath, { key: producerKey, method: "POST" })).status).toBe(409);
    expect(
      (await call(epochPath, { key: producerKey, method: "POST", body: { at_least: -1 } })).status,
    ).toBe(400);

    const fetchPath = "/v1/topics/orders/partitions/0/records";
    expect((await call(`${fetchPath}?offset=earliest&encoding=base64`, a)).status).toBe(200);
    expect((await call(`${fetchPath}?offset=999`, a)).status).toBe(416);
    expect((await call(`${fetchPath}?offset=0&max_records=0`, a)).status).toBe(400);
    expect((await call(`${fetchPath}?offset=latest&wait_ms=10`, a)).status).toBe(200);
    const streamAbort = new AbortController();
    const stream = await fetch(
      `${broker.httpUrl}/v1/topics/orders/partitions/0/stream?offset=earliest`,
      {
        headers: { authorization: `Bearer ${admin}` },
        signal: streamAbort.signal,
      },
    );
    operations.add("stream");
    expect(stream.status).toBe(200);
    expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const first = await stream.body!.getReader().read();
    expect(new TextDecoder().decode(first.value)).toMatch(/stream of partition/);
    streamAbort.abort();
    expect((await call("/v1/topics/orders/partitions/0/stream?offset=999", a)).status).toBe(416);

    const joined = (
      await call("/v1/groups/billing/members", {
        ...a,
        method: "POST",
        body: { topics: ["orders"] },
      })
    ).json();
    const member = `/v1/groups/billing/members/${joined.member_id}`;
    expect(
      (
        await call(`${member}/heartbeat`, {
          ...a,
          method: "POST",
          body: { generation: joined.generation },
        })
      ).status,
    ).toBe(200);
    const commit = (offset: number, generation = joined.generation) =>
      call("/v1/groups/billing/offsets", {
        ...a,
        method: "POST",
        body: {
          member_id: joined.member_id,
          generation,
          offsets: [{ topic: "orders", partition: 0, offset }],
        },
      });
    expect((await commit(1)).status).toBe(204);
    expect((await commit(10_000)).status).toBe(400);
    expect((await commit(1, joined.generation + 5)).status).toBe(409);
    expect((await call("/v1/groups/billing", a)).json().offsets[0]).toMatchObject({ committed: 1 });
    expect((await call("/v1/groups", a)).status).toBe(200);
    expect((await call(member, { ...a, method: "DELETE" })).status).toBe(204);
    expect((await call(member, { ...a, method: "DELETE" })).status).toBe(409);
    expect((await call("/v1/groups/nobody", a)).status).toBe(404);

    expect((await call("/v1/admin/metrics", a)).status).toBe(200);
    expect((await call("/v1/admin/storage", a)).status).toBe(200);
    expect((await call("/v1/admin/topics/orders/cleanup", { ...a, method: "POST" })).status).toBe(
      200,
    );
    expect((await call("/v1/admin/keys/ingest", { ...a, method: "DELETE" })).status).toBe(204);
    expect((await call("/v1/admin/keys/ingest", { ...a, method: "DELETE" })).status).toBe(404);
    expect((await call("/v1/topics/orders", { ...a, method: "DELETE" })).status).toBe(204);
    expect((await call("/nowhere", a)).status).toBe(404);

    // Durable Streams under /v1/stream/ (docs/durable-streams.md).
    const s = (path: string, c: Call = {}) => call(`/v1/stream/${path}`, { ...a, ...c });
    expect(
      (await s("logs/app", { method: "PUT", raw: "", contentType: "text/plain" })).status,
    ).toBe(201);
    expect(
      (await s("logs/app", { method: "POST", raw: "hello", contentType: "text/plain" })).status,
    ).toBe(204);
    expect((await s("logs/app?offset=-1")).status).toBe(200);
    expect((await s("logs/app", { method: "HEAD" })).status).toBe(200);
    expect((await s("logs/app", { method: "OPTIONS" })).status).toBe(204);
    expect(
      (await s("logs/app", { method: "POST", raw: "x", contentType: "application/json" })).status,
    ).toBe(409);
    expect((await s("logs/app", { method: "DELETE" })).status).toBe(204);
    expect((await s("logs/missing?offset=-1")).status).toBe(404);

    // A single node has no cluster metadata: 404, as documented.
    expect((await call("/v1/cluster", a)).status).toBe(404);

    // The schema registry (Confluent's API under /registry).
    const r = (path: string, c: Call = {}) =>
      call(`/registry${path}`, {
        ...a,
        contentType: "application/vnd.schemaregistry.v1+json",
        ...c,
      });
    const avro = {
      schema: '{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}',
    };
    expect((await r("")).status).toBe(200);
    expect((await r("/schemas/types")).status).toBe(200);
    expect((await r("/mode")).status).toBe(200);
    const registered = (
      await r("/subjects/orders-value/versions", { method: "POST", body: avro })
    ).json();
    expect(registered.id).toBeGreaterThan(0);
    expect(
      (await r("/subjects/orders-value/versions", { method: "POST", body: { schema: "{bad" } }))
        .status,
    ).toBe(422);
    expect(
      (
        await r("/subjects/orders-value/versions", {
          method: "POST",
          raw: "x",
          contentType: "text/csv",
        })
      ).status,
    ).toBe(415);
    expect((await r(`/schemas/ids/${registered.id}`)).status).toBe(200);
    expect((await r(`/schemas/ids/${registered.id}/schema`)).status).toBe(200);
    expect((await r(`/schemas/ids/${registered.id}/subjects`)).status).toBe(200);
    expect((await r(`/schemas/ids/${registered.id}/versions`)).status).toBe(200);
    expect((await r("/schemas/ids/999999")).status).toBe(404);
    expect((await r("/subjects")).status).toBe(200);
    expect((await r("/subjects/orders-value", { method: "POST", body: avro })).status).toBe(200);
    expect((await r("/subjects/orders-value/versions")).status).toBe(200);
    expect((await r("/subjects/orders-value/versions/latest")).status).toBe(200);
    expect((await r("/subjects/orders-value/versions/1/schema")).status).toBe(200);
    expect((await r("/subjects/orders-value/versions/1/referencedby")).status).toBe(200);
    expect((await r("/subjects/orders-value/versions/x")).status).toBe(422);
    expect(
      (await r("/compatibility/subjects/orders-value/versions", { method: "POST", body: avro }))
        .status,
    ).toBe(200);
    expect(
      (
        await r("/compatibility/subjects/orders-value/versions/latest?verbose=true", {
          method: "POST",
          body: avro,
        })
      ).status,
    ).toBe(200);
    expect((await r("/config")).status).toBe(200);
    expect((await r("/config", { method: "PUT", body: { compatibility: "FULL" } })).status).toBe(
      200,
    );
    expect(
      (await r("/config", { method: "PUT", body: { compatibility: "SOMETIMES" } })).status,
    ).toBe(422);
    expect((await r("/config", { method: "DELETE" })).status).toBe(200);
    expect(
      (await r("/config/orders-value", { method: "PUT", body: { compatibility: "NONE" } })).status,
    ).toBe(200);
    expect((await r("/config/orders-value")).status).toBe(200);
    expect((await r("/config/orders-value", { method: "DELETE" })).status).toBe(200);
    const reader = (
      await call("/v1/admin/keys", {
        ...a,
        method: "POST",
        body: { name: "reader", role: "consumer", topics: ["*"], groups: ["*"] },
      })
    ).json().key;
    expect((await r("/subjects", { key: reader })).status).toBe(200);
    expect(
      (await r("/subjects/orders-value/versions", { method: "POST", key: reader, body: avro }))
        .status,
    ).toBe(403);
    expect((await r("/subjects/orders-value/versions/1", { method: "DELETE" })).status).toBe(200);
    expect((await r("/subjects/orders-value", { method: "DELETE" })).status).toBe(404);
    expect((await r("/nowhere")).status).toBe(404);

    const all = documentedOperations.map((o) => o.operation.operationId);
    expect(
      all.filter((id) => !operations.has(id)),
      "operations the session never called",
    ).toEqual([]);
    for (const status of [200, 201, 204, 400, 401, 403, 404, 409, 413, 416])
      expect(statuses).toContain(status);
  });

  it("offsets next to 2^53 − 1 come back exact, and the one past it is refused", async () => {
    const { dir } = tempDir();
    const dataDir = join(dir, "data");
    const first = await startBroker(dataDir);
    running.push(first);
    const create = await fetch(`${first.httpUrl}/v1/topics`, {
      method: "POST",
      body: JSON.stringify({ name: "edge", partitions: 1 }),
    });
    expect(create.status).toBe(201);
    expect(await first.stop("SIGTERM")).toBe(0);
    running.splice(0);
    // The partition's only segment says, by its name, that it starts 11 offsets below 2^53 − 1.
    const partitionDir = join(dataDir, "topics", "edge", "0");
    for (const f of readdirSync(partitionDir)) rmSync(join(partitionDir, f));
    const base = Number.MAX_SAFE_INTEGER - 10;
    writeFileSync(join(partitionDir, `${String(base).padStart(20, "0")}.log`), "", { mode: 0o600 });
    mkdirSync(partitionDir, { recursive: true });
    const broker = await startBroker(dataDir);
    running.push(broker);
    const { call } = session(broker.httpUrl);
    const produced = await call("/v1/topics/edge/records", {
      method: "POST",
      body: { records: Array.from({ length: 10 }, (_, i) => ({ value: `v${i}` })) },
    });
    expect(produced.status).toBe(200);
    expect(produced.text).toContain(`"offset":${Number.MAX_SAFE_INTEGER - 1}`);
    const fetched = await call(`/v1/topics/edge/partitions/0/records?offset=${base}`);
    expect(fetched.status).toBe(200);
    expect(fetched.text).toContain(`"next_offset":${Number.MAX_SAFE_INTEGER}`);
    expect(fetched.json().records.map((r: { offset: number }) => r.offset)).toEqual(
      Array.from({ length: 10 }, (_, i) => base + i),
    );
    const commit = await call("/v1/groups/edge-readers/offsets", {
      method: "POST",
      body: { offsets: [{ topic: "edge", partition: 0, offset: Number.MAX_SAFE_INTEGER }] },
    });
    expect(commit.status).toBe(204);
    const group = await call("/v1/groups/edge-readers");
    expect(group.text).toContain(`"committed":${Number.MAX_SAFE_INTEGER}`);
    // One more fits (offset 2^53 − 1); two do not: nothing is appended, and nothing is rounded.
    const tooMany = await call("/v1/topics/edge/records", {
      method: "POST",
      body: { records: [{ value: "a" }, { value: "b" }] },
    });
    expect(tooMany.status).toBe(400);
    expect(tooMany.json().error.code).toBe("unsupported");
    const last = await call("/v1/topics/edge/records", {
      method: "POST",
      body: { records: [{ value: "z" }] },
    });
    expect(last.text).toBe(`{"offsets":[{"partition":0,"offset":${Number.MAX_SAFE_INTEGER}}]}`);
  });

  it("a property-based fuzz drives every operation from the document: no 5xx, every answer as documented", async () => {
    const { broker, admin } = await brokerWithKeys();
    const base = broker.httpUrl;
    const auth = { authorization: `Bearer ${admin}` };
    for (const name of ["orders", "fuzz.topic-1"])
      await fetch(`${base}/v1/topics`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ name, partitions: 2 }),
      });
    await fetch(`${base}/v1/topics/orders/records`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ records: [{ value: "a" }, { value: "b" }] }),
    });
    const components = openApiDocument.components.schemas as unknown as Components;
    const checker = new ResponseChecker();
    const names = fc.oneof(
      fc.constantFrom("orders", "fuzz.topic-1", "billing"),
      fc.stringMatching(/^[A-Za-z0-9._-]{1,30}$/),
      fc.string({ maxLength: 40 }),
    );
    // Biased towards what the broker accepts beyond the schema (existing topics, partitions, a
    // timestamp near now), so that valid requests reach deep into each operation.
    const existing = fc.oneof(
      { arbitrary: fc.constantFrom("orders", "fuzz.topic-1"), weight: 4 },
      { arbitrary: fc.stringMatching(/^[A-Za-z0-9._-]{1,20}$/), weight: 1 },
    );
    const overrides = {
      topic: existing,
      topics: fc.array(existing, { minLength: 1, maxLength: 2 }),
      partition: fc.constantFrom(0, 1, null, 9),
      // Thousands of partitions are valid, but each is a directory made durably: seconds.
      partitions: fc.constantFrom(1, 2, 0, 5000),
      timestamp: fc.constantFrom(-1, null, Date.now() - 1000, 1),
      offset: fc.constantFrom(0, 1, 2, 10_000),
      name: fc.stringMatching(/^[A-Za-z0-9._-]{1,20}$/),
      session_timeout_ms: fc.constantFrom(1000, 30000, null, 5),
      generation: fc.constantFrom(0, 1, null),
      member_id: fc.constantFrom(null, "nobody"),
      config: fc.record(
        {
          retention_ms: fc.constantFrom(-1, 60000, -5),
          cleanup_policy: fc.constantFrom("delete", "compact", "x"),
        },
        { requiredKeys: [] },
      ),
    };
    const likely = (valid: fc.Arbitrary<string>, junk: fc.Arbitrary<string>) =>
      fc.oneof({ arbitrary: valid, weight: 4 }, { arbitrary: junk, weight: 1 });
    const queryOverrides: Record<string, fc.Arbitrary<string>> = {
      offset: likely(
        fc.constantFrom("0", "1", "earliest", "latest", "99999"),
        fc.string({ maxLength: 6 }),
      ),
      max_records: likely(fc.constantFrom("1", "10", "1000"), fc.constantFrom("0", "x", "100001")),
      max_bytes: likely(fc.constantFrom("1", "65536"), fc.constantFrom("0", "-1")),
      partition: likely(fc.constantFrom("0", "1"), fc.constantFrom("x", "99")),
    };
    const pathValue = (name: string): fc.Arbitrary<string> =>
      name === "partition"
        ? likely(
            fc.constantFrom("0", "1"),
            fc.oneof(fc.constantFrom("7"), fc.string({ maxLength: 8 })),
          )
        : name === "topic"
          ? likely(fc.constantFrom("orders", "fuzz.topic-1"), names)
          : names;
    const queryValue = (p: {
      name: string;
      required?: boolean;
      schema: Record<string, unknown>;
    }): fc.Arbitrary<string | undefined> => {
      // A long-poll would make each run wait: keep waits short.
      if (p.name === "wait_ms")
        return fc.oneof(
          fc.constant(undefined),
          likely(fc.constantFrom("0", "5"), fc.constant("x")),
        );
      const valid =
        queryOverrides[p.name] ??
        likely(validValue(p.schema, components).map(String), fc.string({ maxLength: 12 }));
      // Optional parameters mostly absent (NDJSON's key and partition refuse a JSON body).
      return p.required === true
        ? valid
        : fc.oneof(
            { arbitrary: fc.constant(undefined), weight: 2 },
            { arbitrary: valid, weight: 1 },
          );
    };
    let requests = 0;
    const fuzzOne = async (op: DocumentedOperation) => {
      const params = (op.operation.parameters ?? []) as unknown as {
        name: string;
        in: string;
        schema: Record<string, unknown>;
      }[];
      const path = fc.record(
        Object.fromEntries(
          params.filter((p) => p.in === "path").map((p) => [p.name, pathValue(p.name)]),
        ),
      );
      const query = fc.record(
        Object.fromEntries(
          params.filter((p) => p.in === "query").map((p) => [p.name, queryValue(p)]),
        ),
      );
      const jsonSchema = op.operation.requestBody?.content["application/json"]?.schema as
        | Record<string, unknown>
        | undefined;
      const ndjson = op.operation.requestBody?.content["application/x-ndjson"] !== undefined;
      const json: fc.Arbitrary<string | undefined> =
        jsonSchema === undefined
          ? fc.constant(undefined)
          : fc.oneof(
              {
                arbitrary: validValue(jsonSchema, components, overrides).map((v) =>
                  JSON.stringify(v),
                ),
                weight: 3,
              },
              {
                arbitrary: invalidValue(jsonSchema, components, overrides).map((v) =>
                  JSON.stringify(v),
                ),
                weight: 1,
              },
              { arbitrary: fc.string({ maxLength: 30 }), weight: 1 },
            );
      // A body and its content type: JSON (valid, invalid, not JSON), or NDJSON lines where accepted.
      const body: fc.Arbitrary<{ text: string; type: string } | undefined> = fc.oneof(
        {
          arbitrary: json.map((text) =>
            text === undefined ? undefined : { text, type: "application/json" },
          ),
          weight: 3,
        },
        {
          arbitrary: ndjson
            ? fc
                .array(fc.string({ maxLength: 20 }), { maxLength: 4 })
                .map((lines) => ({ text: lines.join("\n"), type: "application/x-ndjson" }))
            : fc.constant(undefined),
          weight: ndjson ? 1 : 0,
        },
      );
      const producer = params.some((p) => p.name === "Producer-Id")
        ? fc.oneof(
            { arbitrary: fc.constant(undefined), weight: 3 },
            {
              arbitrary: fc.record({
                "producer-id": fc.stringMatching(/^[A-Za-z0-9._:-]{1,12}$/),
                "producer-epoch": likely(fc.constantFrom("0", "1"), fc.constantFrom("-1", "x")),
                "producer-seq": fc.constantFrom("0", "0", "1", "99"),
              }),
              weight: 1,
            },
          )
        : fc.constant(undefined);
      await fc.assert(
        fc.asyncProperty(path, query, body, producer, async (p, q, b, headers) => {
          const url = new URL(
            base +
              op.template.replace(/\{([^}]+)\}/g, (_, name: string) =>
                encodeURIComponent(String(p[name])),
              ),
          );
          for (const [k, v] of Object.entries(q))
            if (v !== undefined) url.searchParams.set(k, v as string);
          const abort = new AbortController();
          const timer = setTimeout(() => abort.abort(), 10_000);
          requests++;
          const res = await fetch(url, {
            method: op.method,
            headers: {
              ...auth,
              ...(b === undefined ? {} : { "content-type": b.type }),
              ...headers,
            },
            body: b?.text,
            signal: abort.signal,
            redirect: "manual",
          });
          const contentType = res.headers.get("content-type");
          const streaming = (contentType ?? "").startsWith("text/event-stream");
          const text = streaming ? undefined : await res.text();
          if (streaming) abort.abort();
          clearTimeout(timer);
          const where = `${op.method} ${url.pathname}${url.search} → ${res.status} ${text?.slice(0, 200)}`;
          expect(res.status, where).toBeLessThan(500);
          // The path the server saw (after the URL's dot segments) decides the operation; a path
          // the document does not name must be answered with the error shape.
          const answer = {
            method: op.method,
            path: url.pathname,
            status: res.status,
            contentType,
            body: text,
          };
          expect(checker.check(answer), where).toEqual([]);
        }),
        { numRuns: fuzzRuns, seed: 20261201 },
      );
    };
    // Destructive operations last; the topics the others lean on are made again before each.
    const destructive = (op: DocumentedOperation) => (op.method === "DELETE" ? 1 : 0);
    const ordered = [...documentedOperations].sort((x, y) => destructive(x) - destructive(y));
    for (const op of ordered) {
      for (const name of ["orders", "fuzz.topic-1"])
        await fetch(`${base}/v1/topics`, {
          method: "POST",
          headers: auth,
          body: JSON.stringify({ name, partitions: 2 }),
        });
      await fuzzOne(op);
    }
    expect(requests).toBeGreaterThanOrEqual(documentedOperations.length * fuzzRuns);
    // A fixed amount of work (about 10 s alone on 2 vCPUs), not a speed: room for a loaded machine.
  }, 180_000);
});
