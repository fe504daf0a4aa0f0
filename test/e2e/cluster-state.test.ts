/**
 * The schema registry and API keys of a cluster, kept in etcd (docs/cluster.md "Schema registry
 * and API keys in etcd"), through the real processes (node target only; targets.ts): three
 * brokers on a three-member etcd (test/helpers/etcd.ts).
 * - Field failures #33b: clients register schemas concurrently through all three brokers; after
 *   every broker and every etcd member restarted, each id names the same schema on every broker;
 *   the same schema through two brokers gets one id; soft and hard deletes never let an id name
 *   other content.
 * - etcd down: registry writes answer 503 (Confluent error 50001), reads are still served.
 * - #24c across brokers: a key made through broker 1 works on 2 and 3; revoked through 2, an open
 *   TCP connection of it on 3 is refused within the documented bound (5 s); etcd holds no key text.
 */
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { apiKeyIdChars, apiKeyPrefix } from "../../src/auth/key-format.ts";
import { waitFor } from "../helpers/poll.ts";
import { TcpClient } from "../../src/client/client.ts";
import { EtcdHttpClient, parseEtcdUrl } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { clusterRoot, tearDownCluster } from "../helpers/cluster.ts";
import { type BrokerProcess, runCli, startBroker } from "./harness.ts";

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

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  ({ root, secretFile } = clusterRoot("cluster-state", "state-broker-credential-0123456789"));
  ports = await freePorts(6);
  await Promise.all(
    [1, 2, 3].map(async (id) => brokers.set(id, await startBroker(join(root, `n${id}`), args(id)))),
  );
}, 60_000);

afterAll(() => tearDownCluster(brokers.values(), etcd, root));

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

describe("cluster API keys in etcd (#24c)", () => {
  it("a key made on broker 1 works on 2 and 3; revoked on 2, its open TCP connection on 3 is refused within 5 s", async () => {
    // No key in the cluster yet: the start-up line says authentication is the cluster's, not "off".
    for (const id of [1, 2, 3]) expect(broker(id).listening).toContain(" auth=cluster ");
    const made = await runCli([
      "keys",
      "create",
      "--url",
      broker(1).httpUrl,
      "--name",
      "admin",
      "--role",
      "admin",
    ]);
    expect(made.code, made.stderr).toBe(0);
    adminKey = made.stdout.toString("utf8").trim();
    for (const id of [2, 3]) {
      await waitFor(`the admin key on broker ${id}`, async () => {
        const res = await fetch(`${broker(id).httpUrl}/v1/topics`, { headers: headers() });
        return res.status === 200 ? true : undefined;
      });
      // ... and each logs the moment authentication turned on.
      expect(broker(id).stderr()).toContain('"event":"auth.enabled"');
      const anonymous = await fetch(`${broker(id).httpUrl}/v1/topics`);
      expect(anonymous.status).toBe(401);
    }
    const created = await call(1, "POST", "/v1/topics", { name: "orders", partitions: 1 });
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const producer = await call(1, "POST", "/v1/admin/keys", {
      name: "ingest",
      role: "producer",
      topics: ["orders"],
    });
    expect(producer.status).toBe(201);
    const producerKey = (producer.json as { key: string }).key;
    const onThree = await waitFor("the producer key on broker 3", () =>
      TcpClient.connect({ ...broker(3).tcp, apiKey: producerKey, timeoutMs: 5000 }),
    );
    try {
      expect((await onThree.metadata(["orders"]))[0].name).toBe("orders");
      const revoked = await call(2, "DELETE", "/v1/admin/keys/ingest");
      expect(revoked.status).toBe(204);
      const start = Date.now();
      await waitFor(
        "the connection on broker 3 to be refused",
        async () => {
          try {
            await onThree.metadata(["orders"]);
            return undefined;
          } catch (err) {
            return err;
          }
        },
        5000,
      );
      expect(Date.now() - start).toBeLessThan(5000);
      const again = await TcpClient.connect({
        ...broker(3).tcp,
        apiKey: producerKey,
        timeoutMs: 5000,
      }).catch((e: unknown) => e);
      expect(again).toBeInstanceOf(Error);
    } finally {
      await onThree.close().catch(() => {});
    }
  }, 60_000);

  it("etcd holds hashes only: no key text in etcd or in any broker's log", async () => {
    const client = new EtcdHttpClient(parseEtcdUrl(etcd.clusterUrl));
    try {
      const { kvs } = await client.list("/es-broker/auth/");
      expect(kvs.length).toBeGreaterThan(0);
      for (const kv of kvs) expect(kv.value).not.toContain(adminKey!);
      // esb_<id>_<secret>: the secret is base64url and may hold "_" itself.
      const secret = adminKey!.slice(apiKeyPrefix.length + apiKeyIdChars + 1);
      for (const kv of kvs) expect(kv.value).not.toContain(secret);
      for (const id of [1, 2, 3]) expect(broker(id).stderr()).not.toContain(secret);
    } finally {
      await client.close();
    }
  });
});
