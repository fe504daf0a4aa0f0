/**
 * The schema registry and API keys of a cluster, kept in etcd (docs/cluster.md "Schema registry
 * and API keys in etcd"), through the real processes (node target only; targets.ts): three
 * brokers on a three-member etcd (test/helpers/etcd.ts).
 * - Field failures #33b: clients register schemas concurrently through all three brokers; after
 *   every broker and every etcd member restarted, each id names the same schema on every broker;
 *   the same schema through two brokers gets one id; soft and hard deletes never let an id name
 *   other content.
 * - etcd down: registry writes answer 503 (Confluent error 50001), reads are still served.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

let etcd: EtcdCluster;
let root: string;
let ports: number[];
let secretFile: string;
const brokers = new Map<number, BrokerProcess>();
const registryType = "application/vnd.schemaregistry.v1+json";
/** The admin key, once made (every request carries it from then on). */
let adminKey: string | undefined;

function args(id: number): string[] {
  const [http, tcp] = [ports[2 * id - 2], ports[2 * id - 1]];
  return [
    ...["--http-port", String(http), "--tcp-port", String(tcp)],
    ...["--cluster", etcd.clusterUrl, "--node-id", String(id)],
    ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
    ...["--cluster-secret-file", secretFile],
  ];
}

function broker(id: number): BrokerProcess {
  return brokers.get(id)!;
}

function headers(key = adminKey, type = "application/json"): Record<string, string> {
  return {
    "content-type": type,
    ...(key === undefined ? {} : { authorization: `Bearer ${key}` }),
  };
}

async function call(
  id: number,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${broker(id).httpUrl}${path}`, {
    method,
    headers: headers(adminKey, path.startsWith("/registry") ? registryType : "application/json"),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === "" ? null : JSON.parse(text) };
}

async function register(id: number, subject: string, schema: string): Promise<number> {
  const res = await call(id, "POST", `/registry/subjects/${subject}/versions`, { schema });
  expect(res.status, JSON.stringify(res.json)).toBe(200);
  return (res.json as { id: number }).id;
}

function record(name: string): string {
  return JSON.stringify({ type: "record", name, fields: [{ name: "f", type: "string" }] });
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  root = mkdtempSync(join(tmpdir(), "es-broker-cluster-state-"));
  secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "state-broker-credential-0123456789\n", { mode: 0o600 });
  ports = await freePorts(6);
  await Promise.all(
    [1, 2, 3].map(async (id) => brokers.set(id, await startBroker(join(root, `n${id}`), args(id)))),
  );
}, 60_000);

afterAll(async () => {
  await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("cluster schema registry in etcd (#33b)", () => {
  const registered = new Map<number, string>();

  it("ids of concurrent registrations through all brokers are one per schema, identical after every broker and etcd restart", async () => {
    expect((await call(1, "PUT", "/registry/config", { compatibility: "NONE" })).status).toBe(200);
    const clients = 8;
    const each = 25;
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let i = 0; i < each; i++) {
          const schema = record(`C${c}S${i}`);
          const id = await register(1 + (c % 3), `client${c}-value`, schema);
          expect(registered.get(id), `id ${id} given twice`).toBeUndefined();
          registered.set(id, schema);
        }
      }),
    );
    expect(registered.size).toBe(clients * each);
    // The same schema through two brokers at once, under two subjects: one id.
    const shared = record("Shared");
    const [x, y] = await Promise.all([register(2, "a", shared), register(3, "b", shared)]);
    expect(x).toBe(y);
    registered.set(x, shared);

    await Promise.all([1, 2, 3].map((id) => broker(id).stop("SIGTERM")));
    for (const m of etcd.members) await m.kill("SIGKILL");
    await Promise.all(etcd.members.map((m) => m.restart()));
    await Promise.all(
      [1, 2, 3].map(async (id) =>
        brokers.set(id, await startBroker(join(root, `n${id}`), args(id))),
      ),
    );
    // Every broker answers each id with the same text (the canonical form), of the schema registered.
    for (const [schemaId, schema] of registered) {
      const texts = await Promise.all(
        [1, 2, 3].map(async (id) => {
          const res = await call(id, "GET", `/registry/schemas/ids/${schemaId}`);
          expect(res.status).toBe(200);
          return (res.json as { schema: string }).schema;
        }),
      );
      expect(new Set(texts).size).toBe(1);
      expect(JSON.parse(texts[0])).toEqual(JSON.parse(schema));
    }
  }, 120_000);

  it("soft and hard deletes, then registering again, never give an id other content", async () => {
    const schema = record("Deleted");
    const id = await register(1, "del", schema);
    expect((await call(2, "DELETE", "/registry/subjects/del")).status).toBe(200);
    expect(await register(3, "del", schema)).toBe(id);
    expect((await call(3, "DELETE", "/registry/subjects/del")).status).toBe(200);
    expect((await call(1, "DELETE", "/registry/subjects/del?permanent=true")).status).toBe(200);
    const fresh = await register(2, "del", record("Newer"));
    expect(fresh).not.toBe(id);
    expect(registered.has(fresh)).toBe(false);
    expect(await register(3, "del", schema)).toBe(id);
    const res = await call(1, "GET", `/registry/schemas/ids/${id}`);
    expect(JSON.parse((res.json as { schema: string }).schema)).toEqual(JSON.parse(schema));
  });

  it("with etcd down, a registry write answers 503 (50001) and reads are served", async () => {
    for (const m of etcd.members) await m.kill("SIGKILL");
    try {
      const write = await call(2, "POST", "/registry/subjects/down/versions", {
        schema: record("Down"),
      });
      expect(write.status).toBe(503);
      expect(write.json).toMatchObject({ error_code: 50001 });
      expect((write.json as { message: string }).message).toMatch(/etcd/);
      const [someId, schema] = registered.entries().next().value!;
      const read = await call(3, "GET", `/registry/schemas/ids/${someId}`);
      expect(read.status).toBe(200);
      expect(JSON.parse((read.json as { schema: string }).schema)).toEqual(JSON.parse(schema));
    } finally {
      await Promise.all(etcd.members.map((m) => m.restart()));
    }
    await waitFor("registry writes to work again", async () => {
      const res = await call(2, "POST", "/registry/subjects/down/versions", {
        schema: record("Down"),
      });
      return res.status === 200 ? true : undefined;
    });
  }, 60_000);
});
