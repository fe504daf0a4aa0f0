/**
 * End-to-end: API keys through the real process (docs/security.md), so on every runtime target.
 *
 * - The permission table: every role × every operation × names its patterns match and names they
 *   do not, over HTTP and over TCP, against an expectation written out here.
 * - The leak test: after every route and api (failures, malformed headers and a revoked key
 *   included), no secret — nor its base64 or hex form — is in any log line (at debug level), any
 *   response, any file of the data directory, or the CLI's output.
 * - The key CLI offline (before the first start) and online; keys never from argv.
 * - Revocation answers a TCP long-poll and an SSE stream `key_revoked`, then closes them (and
 *   `consume --follow` exits 1 saying so); SIGHUP reloads api_keys.json; a
 *   corrupt api_keys.json refuses the start naming the file.
 */
import { spawn } from "node:child_process";
import { chmodSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { ClientError, TcpClient } from "../../src/client/client.ts";
import { apiKeyChars, apiKeySecretChars } from "../../src/auth/key-format.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  assertTargetRunnable,
  brokerCommand,
  type BrokerProcess,
  runCli,
  startBroker,
  target,
} from "./harness.ts";
import { offlineAdminKey } from "./helpers.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

type Role = "admin" | "producer" | "consumer";

interface Setup {
  broker: BrokerProcess;
  dataDir: string;
  dir: string;
  keys: Record<Role, string>;
  /** Every response body seen, to grep for secrets (key-creation answers are kept apart). */
  seen: string[];
  http: (
    path: string,
    init?: { method?: string; key?: string; body?: unknown; headers?: Record<string, string> },
  ) => Promise<{ status: number; text: string; json: () => any; headers: Headers }>;
  connect: (key?: string) => Promise<TcpClient>;
}

/** Makes the admin key offline (the CLI, before the first start), starts the broker, makes the other keys over HTTP. */
async function setup(extra: string[] = []): Promise<Setup> {
  const { dir } = tempDir();
  const dataDir = join(dir, "data");
  const made = await offlineAdminKey(dataDir, dir);
  expect(made.stdout.length).toBe(0);
  expect(made.stderr).toMatch(/created key "root" \(role admin, id [0-9a-f]{16}\)/);
  expect(statSync(made.path).mode & 0o777).toBe(0o600);
  const admin = made.key;
  const broker = await startBroker(dataDir, ["--log-level", "debug", ...extra]);
  running.push(broker);
  const seen: string[] = [];
  const http: Setup["http"] = async (path, init = {}) => {
    const headers: Record<string, string> = { ...init.headers };
    if (init.key !== undefined) headers.authorization = `Bearer ${init.key}`;
    if (init.body !== undefined) headers["content-type"] ??= "application/json";
    const res = await fetch(`${broker.httpUrl}${path}`, {
      method: init.method ?? "GET",
      headers,
      body:
        init.body === undefined
          ? undefined
          : typeof init.body === "string"
            ? init.body
            : JSON.stringify(init.body),
    });
    const text = await res.text();
    return { status: res.status, text, json: () => JSON.parse(text), headers: res.headers };
  };
  const createKey = async (name: string, role: Role, topics?: string[], groups?: string[]) => {
    const res = await http("/v1/admin/keys", {
      method: "POST",
      key: admin,
      body: { name, role, topics, groups },
    });
    expect(res.status, res.text).toBe(201);
    return res.json().key as string;
  };
  const keys: Record<Role, string> = {
    admin,
    producer: await createKey("ingest", "producer", ["orders*"]),
    consumer: await createKey("reader", "consumer", ["orders*"], ["billing*"]),
  };
  const connect = async (key?: string) => {
    const client = await TcpClient.connect({ ...broker.tcp, apiKey: key });
    onTestFinished(() => client.close());
    return client;
  };
  return { broker, dataDir, dir, keys, seen, http, connect };
}

/** What each role may do, written out by hand (src/auth/roles.ts must agree). */
const may: Record<string, Record<Role, boolean>> = {
  create_topic: { admin: true, producer: false, consumer: false },
  delete_topic: { admin: true, producer: false, consumer: false },
  update_topic_config: { admin: true, producer: false, consumer: false },
  list_topics: { admin: true, producer: true, consumer: true },
  describe_topic: { admin: true, producer: true, consumer: true },
  produce: { admin: true, producer: true, consumer: false },
  fetch: { admin: true, producer: false, consumer: true },
  list_offsets: { admin: true, producer: false, consumer: true },
  join_group: { admin: true, producer: false, consumer: true },
  heartbeat: { admin: true, producer: false, consumer: true },
  leave_group: { admin: true, producer: false, consumer: true },
  commit_offsets: { admin: true, producer: false, consumer: true },
  describe_group: { admin: true, producer: false, consumer: true },
  list_groups: { admin: true, producer: false, consumer: true },
  cleanup: { admin: true, producer: false, consumer: false },
  describe_storage: { admin: true, producer: false, consumer: false },
  metrics: { admin: true, producer: false, consumer: false },
  create_key: { admin: true, producer: false, consumer: false },
  list_keys: { admin: true, producer: false, consumer: false },
  revoke_key: { admin: true, producer: false, consumer: false },
};

/** Names a request uses: ones the non-admin keys' patterns match, or one that is not matched (which). */
type Variant = "match" | "other-topic" | "other-group";
const names = {
  match: { topic: "orders", group: "billing" },
  "other-topic": { topic: "secret", group: "billing" },
  "other-group": { topic: "orders", group: "payroll" },
} as const;

/** A refusal or not: "allowed" is any answer but 401/403 (a group that does not exist is still allowed to be asked about). */
type Outcome = "allowed" | "forbidden" | "unauthenticated";

interface Cell {
  op: string;
  /** Which variants apply (names the operation checks). */
  variants: readonly Variant[];
  http?: (
    s: Setup,
    key: string,
    n: { topic: string; group: string },
    unique: string,
  ) => Promise<Outcome>;
  tcp?: (
    c: TcpClient,
    n: { topic: string; group: string },
    unique: string,
    s: Setup,
  ) => Promise<Outcome>;
}

function httpOutcome(
  s: Setup,
  res: { status: number; text: string },
  op: string,
  n?: Record<string, string>,
): Outcome {
  s.seen.push(res.text);
  if (res.status === 401) return "unauthenticated";
  if (res.status !== 403) return "allowed";
  const error = JSON.parse(res.text).error;
  expect(error.code).toBe("forbidden");
  // A stream (or fetch) from "earliest" asks list_offsets first: the same roles may do both.
  expect(op === "fetch" ? ["fetch", "list_offsets"] : [op]).toContain(error.details.operation);
  // A refusal by pattern names the topic or group refused; one by role names none.
  const named = error.details.topic ?? error.details.group;
  if (named !== undefined) expect(Object.values(n ?? {})).toContain(named);
  return "forbidden";
}

async function tcpOutcome(s: Setup, call: Promise<unknown>, op: string): Promise<Outcome> {
  try {
    await call;
    return "allowed";
  } catch (error) {
    if (!(error instanceof ClientError)) throw error;
    s.seen.push(error.message);
    if (error.code === "unauthenticated") return "unauthenticated";
    if (error.code !== "forbidden") return "allowed";
    expect(error.details?.operation).toBe(op);
    return "forbidden";
  }
}

const topicOnly = ["match", "other-topic"] as const;
const groupOnly = ["match", "other-group"] as const;
const both = ["match", "other-topic", "other-group"] as const;
const none = ["match"] as const;

const cells: Cell[] = [
  {
    op: "create_topic",
    variants: none,
    http: async (s, key, _n, u) =>
      httpOutcome(
        s,
        await s.http("/v1/topics", { method: "POST", key, body: { name: `made-${u}` } }),
        "create_topic",
      ),
    tcp: (c, _n, u, s) =>
      tcpOutcome(s, c.createTopic({ name: `made-${u}`, partitions: 1 }), "create_topic"),
  },
  {
    op: "delete_topic",
    variants: none,
    http: async (s, key, _n, u) => {
      await s.http("/v1/topics", {
        method: "POST",
        key: s.keys.admin,
        body: { name: `doomed-${u}` },
      });
      return httpOutcome(
        s,
        await s.http(`/v1/topics/doomed-${u}`, { method: "DELETE", key }),
        "delete_topic",
      );
    },
    tcp: async (c, _n, u, s) => {
      await s.http("/v1/topics", {
        method: "POST",
        key: s.keys.admin,
        body: { name: `doomed-${u}` },
      });
      return tcpOutcome(s, c.deleteTopic(`doomed-${u}`), "delete_topic");
    },
  },
  {
    op: "update_topic_config",
    variants: none,
    http: async (s, key) =>
      httpOutcome(
        s,
        await s.http("/v1/topics/orders", {
          method: "PATCH",
          key,
          body: { config: { retention_ms: 86_400_000 } },
        }),
        "update_topic_config",
      ),
  },
  {
    op: "list_topics",
    variants: none,
    http: async (s, key) => httpOutcome(s, await s.http("/v1/topics", { key }), "list_topics"),
    tcp: (c, _n, _u, s) => tcpOutcome(s, c.metadata(), "list_topics"),
  },
  {
    op: "describe_topic",
    variants: topicOnly,
    http: async (s, key, n) =>
      httpOutcome(s, await s.http(`/v1/topics/${n.topic}`, { key }), "describe_topic", n),
    tcp: (c, n, _u, s) => tcpOutcome(s, c.metadata([n.topic]), "describe_topic"),
  },
  {
    op: "produce",
    variants: topicOnly,
    http: async (s, key, n) =>
      httpOutcome(
        s,
        await s.http(`/v1/topics/${n.topic}/records`, {
          method: "POST",
          key,
          body: { records: [{ value: "x" }] },
        }),
        "produce",
        n,
      ),
    tcp: (c, n, _u, s) => tcpOutcome(s, c.produce(n.topic, [{ value: "x" }]), "produce"),
  },
  {
    op: "produce",
    variants: topicOnly,
    http: async (s, key, n, u) =>
      httpOutcome(
        s,
        await s.http(`/v1/topics/${n.topic}/records`, {
          method: "POST",
          key,
          headers: { "producer-id": `p-${u}`, "producer-epoch": "0", "producer-seq": "0" },
          body: { records: [{ value: "x", partition: 0 }] },
        }),
        "produce",
        n,
      ),
    tcp: (c, n, u, s) =>
      tcpOutcome(
        s,
        c.produceIdempotent(n.topic, [{ value: "x" }], {
          partition: 0,
          producer: { id: `p-${u}`, epoch: 0, sequence: 0 },
        }),
        "produce",
      ),
  },
  {
    op: "fetch",
    variants: topicOnly,
    http: async (s, key, n) =>
      httpOutcome(
        s,
        await s.http(`/v1/topics/${n.topic}/partitions/0/records?offset=0`, { key }),
        "fetch",
        n,
      ),
    tcp: (c, n, _u, s) =>
      tcpOutcome(s, c.fetch({ topic: n.topic, partition: 0, offset: 0 }), "fetch"),
  },
  {
    op: "fetch",
    variants: topicOnly,
    // The SSE stream: a refusal comes before the stream starts; an allowed stream is cut at once.
    http: async (s, key, n) => {
      const controller = new AbortController();
      const res = await fetch(
        `${s.broker.httpUrl}/v1/topics/${n.topic}/partitions/0/stream?offset=earliest`,
        {
          headers: { authorization: `Bearer ${key}` },
          signal: controller.signal,
        },
      );
      if (res.status === 200) {
        controller.abort();
        return "allowed";
      }
      return httpOutcome(s, { status: res.status, text: await res.text() }, "fetch", n);
    },
  },
  {
    op: "list_offsets",
    variants: topicOnly,
    tcp: (c, n, _u, s) =>
      tcpOutcome(s, c.listOffsets({ topic: n.topic, partition: 0 }), "list_offsets"),
  },
  {
    op: "join_group",
    variants: both,
    http: async (s, key, n) =>
      httpOutcome(
        s,
        await s.http(`/v1/groups/${n.group}/members`, {
          method: "POST",
          key,
          body: { topics: [n.topic] },
        }),
        "join_group",
        n,
      ),
    tcp: (c, n, _u, s) =>
      tcpOutcome(s, c.joinGroup({ group: n.group, topics: [n.topic] }), "join_group"),
  },
  {
    op: "heartbeat",
    variants: groupOnly,
    http: async (s, key, n) =>
      httpOutcome(
        s,
        await s.http(`/v1/groups/${n.group}/members/nobody/heartbeat`, { method: "POST", key }),
        "heartbeat",
        n,
      ),
    tcp: (c, n, _u, s) =>
      tcpOutcome(s, c.heartbeat({ group: n.group, memberId: "nobody" }), "heartbeat"),
  },
  {
    op: "leave_group",
    variants: groupOnly,
    http: async (s, key, n) =>
      httpOutcome(
        s,
        await s.http(`/v1/groups/${n.group}/members/nobody`, { method: "DELETE", key }),
        "leave_group",
        n,
      ),
    tcp: (c, n, _u, s) =>
      tcpOutcome(s, c.leaveGroup({ group: n.group, memberId: "nobody" }), "leave_group"),
  },
  {
    op: "commit_offsets",
    variants: both,
    http: async (s, key, n) =>
      httpOutcome(
        s,
        await s.http(`/v1/groups/${n.group}/offsets`, {
          method: "POST",
          key,
          body: { offsets: [{ topic: n.topic, partition: 0, offset: 0 }] },
        }),
        "commit_offsets",
        n,
      ),
    tcp: (c, n, _u, s) =>
      tcpOutcome(
        s,
        c.commitOffsets({ group: n.group, offsets: [{ topic: n.topic, partition: 0, offset: 0 }] }),
        "commit_offsets",
      ),
  },
  {
    op: "describe_group",
    variants: groupOnly,
    http: async (s, key, n) =>
      httpOutcome(s, await s.http(`/v1/groups/${n.group}`, { key }), "describe_group", n),
    tcp: (c, n, _u, s) => tcpOutcome(s, c.describeGroup(n.group), "describe_group"),
  },
  {
    op: "list_groups",
    variants: none,
    http: async (s, key) => httpOutcome(s, await s.http("/v1/groups", { key }), "list_groups"),
    tcp: (c, _n, _u, s) => tcpOutcome(s, c.listGroups(), "list_groups"),
  },
  {
    op: "cleanup",
    variants: none,
    http: async (s, key) =>
      httpOutcome(
        s,
        await s.http("/v1/admin/topics/orders/cleanup", { method: "POST", key }),
        "cleanup",
      ),
  },
  {
    op: "describe_storage",
    variants: none,
    http: async (s, key) =>
      httpOutcome(s, await s.http("/v1/admin/storage", { key }), "describe_storage"),
  },
  {
    op: "metrics",
    variants: none,
    http: async (s, key) => httpOutcome(s, await s.http("/v1/admin/metrics", { key }), "metrics"),
  },
  {
    op: "create_key",
    variants: none,
    http: async (s, key, _n, u) => {
      const res = await s.http("/v1/admin/keys", {
        method: "POST",
        key,
        body: { name: `made-${u}`, role: "admin" },
      });
      if (res.status === 201) return "allowed"; // its body holds a key: not a response to grep
      return httpOutcome(s, res, "create_key");
    },
  },
  {
    op: "list_keys",
    variants: none,
    http: async (s, key) => httpOutcome(s, await s.http("/v1/admin/keys", { key }), "list_keys"),
  },
  {
    op: "revoke_key",
    variants: none,
    http: async (s, key, _n, u) => {
      const res = await s.http("/v1/admin/keys", {
        method: "POST",
        key: s.keys.admin,
        body: { name: `spare-${u}`, role: "admin" },
      });
      expect(res.status).toBe(201);
      return httpOutcome(
        s,
        await s.http(`/v1/admin/keys/spare-${u}`, { method: "DELETE", key }),
        "revoke_key",
      );
    },
  },
];

function expected(role: Role, op: string, variant: Variant): Outcome {
  if (!may[op][role]) return "forbidden";
  if (role === "admin" || variant === "match") return "allowed";
  return "forbidden";
}

/** Every form of every secret that must never show up: the key, its secret part, each in base64 and hex. */
function secretForms(keys: string[]): string[] {
  return keys.flatMap((key) => {
    // The secret is base64url, which has "_" in its alphabet: take it by length, not by the last "_".
    expect(key).toHaveLength(apiKeyChars);
    const secret = key.slice(-apiKeySecretChars);
    return [
      key,
      secret,
      Buffer.from(key).toString("base64"),
      Buffer.from(secret).toString("base64"),
      Buffer.from(key).toString("hex"),
      Buffer.from(secret).toString("hex"),
      Buffer.from(key).toString("base64url"),
    ];
  });
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

describe(`[${target}] API keys end to end`, () => {
  it("applies the role table to every role, operation and name over HTTP and TCP, and leaks no secret anywhere", async () => {
    const s = await setup();
    // Topics and groups the cells use; a record in each topic so fetches find one.
    for (const topic of ["orders", "secret"]) {
      expect(
        (await s.http("/v1/topics", { method: "POST", key: s.keys.admin, body: { name: topic } }))
          .status,
      ).toBe(201);
      await s.http(`/v1/topics/${topic}/records`, {
        method: "POST",
        key: s.keys.admin,
        body: { records: [{ value: "seed" }] },
      });
    }
    const clients: Record<Role, TcpClient> = {
      admin: await s.connect(s.keys.admin),
      producer: await s.connect(s.keys.producer),
      consumer: await s.connect(s.keys.consumer),
    };
    const mismatches: string[] = [];
    let unique = 0;
    let ran = 0;
    for (const cell of cells) {
      for (const role of ["admin", "producer", "consumer"] as const) {
        for (const variant of cell.variants) {
          const want = expected(role, cell.op, variant);
          if (cell.http) {
            const got = await cell.http(s, s.keys[role], names[variant], `${++unique}`);
            ran++;
            if (got !== want)
              mismatches.push(`HTTP ${cell.op} by ${role} on ${variant}: ${got}, expected ${want}`);
          }
          if (cell.tcp) {
            const got = await cell.tcp(clients[role], names[variant], `${++unique}`, s);
            ran++;
            if (got !== want)
              mismatches.push(`TCP ${cell.op} by ${role} on ${variant}: ${got}, expected ${want}`);
          }
        }
      }
    }
    expect(mismatches).toEqual([]);
    expect(ran).toBeGreaterThan(150);
    // Listings show only the names a key's patterns match.
    for (const role of ["producer", "consumer"] as const) {
      const topics = (await s.http("/v1/topics", { key: s.keys[role] }))
        .json()
        .topics.map((t: { name: string }) => t.name);
      expect(topics, role).toEqual(["orders"]);
      expect((await clients[role].metadata()).map((t) => t.name)).toEqual(["orders"]);
    }
    await clients.admin.joinGroup({ group: "payroll", topics: ["secret"] });
    await clients.consumer.joinGroup({ group: "billing", topics: ["orders"] });
    expect((await clients.consumer.listGroups()).map((g) => g.group)).toEqual(["billing"]);
    expect((await clients.admin.listGroups()).map((g) => g.group).sort()).toEqual([
      "billing",
      "payroll",
    ]);
    // Wildcard-, case- and path-looking names are names, refused like any other.
    for (const topic of ["Orders", "ORDERS", "*", "orders%2F..%2Fsecret", "orders%00x"]) {
      const res = await s.http(`/v1/topics/${topic}/records`, {
        method: "POST",
        key: s.keys.producer,
        body: { records: [{ value: "x" }] },
      });
      s.seen.push(res.text);
      expect([403, 400, 404], `${topic}: ${res.text}`).toContain(res.status);
      if (res.status !== 403) expect(res.json().error.code).not.toBe("forbidden");
      expect(res.status === 200).toBe(false);
    }

    // Failures of every kind, malformed headers, and a revoked key, on both doors.
    const revokedKey = (
      await s.http("/v1/admin/keys", {
        method: "POST",
        key: s.keys.admin,
        body: { name: "gone", role: "consumer", topics: ["orders"] },
      })
    ).json().key as string;
    const revokedClient = await s.connect(revokedKey);
    expect(
      (await s.http("/v1/admin/keys/gone", { method: "DELETE", key: s.keys.admin })).status,
    ).toBe(204);
    await expect.poll(() => revokedClient.closed).toBe(true);
    const allKeys = [s.keys.admin, s.keys.producer, s.keys.consumer, revokedKey];
    for (const key of allKeys) {
      for (const header of [
        `Bearer ${key}x`,
        `Bearer x${key}`,
        `Basic ${key}`,
        `Bearer ${key} ${key}`,
        `bearer  ${key.slice(0, 30)}`,
        `Bearer ${key.toUpperCase()}`,
      ]) {
        const res = await s.http("/v1/topics", { headers: { authorization: header } });
        s.seen.push(res.text, JSON.stringify([...res.headers]));
        expect(res.status).toBe(401);
      }
    }
    const revoked = await s.http("/v1/topics", { key: revokedKey });
    s.seen.push(revoked.text);
    expect(revoked.status).toBe(401);
    try {
      await TcpClient.connect({ ...s.broker.tcp, apiKey: revokedKey });
      throw new Error("the revoked key authenticated");
    } catch (error) {
      expect(error).toBeInstanceOf(ClientError);
      s.seen.push((error as Error).message);
    }
    for (const bad of [`${s.keys.admin}x`, s.keys.admin.replace("esb_", "esc_")]) {
      const error = await TcpClient.connect({ ...s.broker.tcp, apiKey: bad }).then(
        () => null,
        (e: unknown) => e as ClientError,
      );
      expect(error?.code).toBe("unauthenticated");
      s.seen.push(error!.message);
    }
    const badBodies = await s.http("/v1/admin/keys", {
      method: "POST",
      key: s.keys.admin,
      body: "{not json",
    });
    s.seen.push(badBodies.text);
    const env = { ...process.env, ES_BROKER_API_KEY: s.keys.admin };
    const list = await runCli(["keys", "list", "--url", s.broker.httpUrl], undefined, { env });
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout.toString()).toMatch(/^root\tadmin\tid=/m);
    const help = await runCli(["keys", "--help"]);
    const cliOutput = [list.stdout.toString(), list.stderr, help.stdout.toString(), help.stderr];

    await s.broker.stop("SIGTERM");
    const logs = s.broker.stderr();
    expect(logs).toMatch(/"event":"auth.failed"/);
    expect(logs).toMatch(/"event":"audit.key_created","key":"root"/);
    const files = filesUnder(s.dataDir).map(
      (path) => [path, readFileSync(path).toString("latin1")] as const,
    );
    expect(files.map(([p]) => p)).toContain(join(s.dataDir, "api_keys.json"));
    expect(statSync(join(s.dataDir, "api_keys.json")).mode & 0o777).toBe(0o600);
    for (const form of secretForms(allKeys)) {
      expect(logs.includes(form), "a secret in the broker's log").toBe(false);
      for (const text of [...s.seen, ...cliOutput])
        expect(text.includes(form), "a secret in a response or the CLI's output").toBe(false);
      for (const [path, text] of files)
        expect(text.includes(form), `a secret in ${path}`).toBe(false);
    }
  });

  it("revoking a key answers its TCP long-polls and SSE streams key_revoked and closes them; consume --follow says so; SIGHUP reloads api_keys.json", async () => {
    const s = await setup();
    await s.http("/v1/topics", { method: "POST", key: s.keys.admin, body: { name: "orders" } });
    const consumer = await s.connect(s.keys.consumer);
    writeFileSync(join(s.dir, "reader.key"), `${s.keys.consumer}\n`, { mode: 0o600 });
    assertTargetRunnable();
    const [cmd, ...pre] = brokerCommand();
    const follower = spawn(
      cmd,
      [
        ...pre,
        ...[
          "consume",
          "orders",
          "--follow",
          "--broker",
          `${s.broker.tcp.host}:${s.broker.tcp.port}`,
        ],
        ...["--api-key-file", join(s.dir, "reader.key")],
      ],
      { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
    );
    onTestFinished(() => void follower.kill("SIGKILL"));
    let followerOut = "";
    let followerErr = "";
    follower.stdout!.on("data", (d) => (followerOut += d));
    follower.stderr!.on("data", (d) => (followerErr += d));
    const followerExit = new Promise<number | null>((resolve) =>
      follower.once("close", (code) => resolve(code)),
    );
    const stream = await fetch(
      `${s.broker.httpUrl}/v1/topics/orders/partitions/0/stream?offset=earliest`,
      {
        headers: { authorization: `Bearer ${s.keys.consumer}` },
      },
    );
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    let text = "";
    const readUntil = async (needle: string) => {
      while (!text.includes(needle)) {
        const { done, value } = await reader.read();
        if (done) return;
        text += new TextDecoder().decode(value);
      }
    };
    await readUntil("es-broker stream");
    // The follower reads from the end: once it has printed a record, it is long-polling again.
    for (let i = 0; !followerOut.includes("ping"); i++) {
      if (i > 100) throw new Error(`[${target}] consume --follow printed nothing: ${followerErr}`);
      await s.http("/v1/topics/orders/records", {
        method: "POST",
        key: s.keys.producer,
        body: { records: [{ value: "ping" }] },
      });
      await new Promise((r) => setTimeout(r, 200));
    }
    const { highWatermark } = await consumer.listOffsets({ topic: "orders", partition: 0 });
    const polling = consumer.fetch({
      topic: "orders",
      partition: 0,
      offset: highWatermark,
      waitMs: 30_000,
    });
    polling.catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    const revoke = await runCli([
      "keys",
      "revoke",
      "reader",
      "--url",
      s.broker.httpUrl,
      "--api-key-file",
      join(s.dir, "admin.key"),
    ]);
    expect(revoke.code, revoke.stderr).toBe(0);
    // The HTTP route answers 204 without the key's id: the line names only the key.
    expect(revoke.stderr).toBe('es-broker: revoked key "reader"\n');
    await readUntil("event: error");
    expect(text).toMatch(/event: error\ndata: \{"error":\{"code":"key_revoked"/);
    expect(
      (
        (await polling.then(
          () => null,
          (e: unknown) => e,
        )) as ClientError
      ).code,
    ).toBe("key_revoked");
    await expect.poll(() => consumer.closed).toBe(true);
    expect(await followerExit, followerErr).toBe(1);
    const keyId = s.keys.consumer.slice(4, 20);
    expect(followerErr).toBe(
      `es-broker: key_revoked: Cannot fetch from topic "orders": API key ${keyId} was revoked (or changed in api_keys.json) while this connection was open\n` +
        "es-broker: the API key was revoked (or changed) while this command ran: run it again with a current key (--api-key-file FILE or $ES_BROKER_API_KEY)\n",
    );

    // SIGHUP: the producer key removed from the file by hand is revoked; the admin key stays.
    const producer = await s.connect(s.keys.producer);
    const admin = await s.connect(s.keys.admin);
    const path = join(s.dataDir, "api_keys.json");
    const file = JSON.parse(readFileSync(path, "utf8"));
    file.keys = file.keys.filter((k: { name: string }) => k.name !== "ingest");
    writeFileSync(path, JSON.stringify(file));
    s.broker.proc.kill("SIGHUP");
    await expect.poll(() => producer.closed, { timeout: 10_000 }).toBe(true);
    expect((await admin.metadata()).map((t) => t.name)).toEqual(["orders"]);
    expect(s.broker.stderr()).toMatch(/"event":"auth.keys_reloaded".*"keys":1,"invalidated":1/);
    // A corrupt file on SIGHUP keeps the keys in force.
    writeFileSync(path, "{ torn");
    s.broker.proc.kill("SIGHUP");
    await expect
      .poll(() => s.broker.stderr().includes("auth.keys_reload_failed"), { timeout: 10_000 })
      .toBe(true);
    expect((await admin.metadata()).map((t) => t.name)).toEqual(["orders"]);
    expect((await s.http("/v1/topics", { key: s.keys.admin })).status).toBe(200);
  });

  it("a producer whose key is revoked mid-stream ends with key_revoked, not 'connection lost, reconnecting' (newuser18 F10)", async () => {
    const s = await setup();
    await s.http("/v1/topics", { method: "POST", key: s.keys.admin, body: { name: "orders" } });
    writeFileSync(join(s.dir, "ingest.key"), `${s.keys.producer}\n`, { mode: 0o600 });
    assertTargetRunnable();
    const [cmd, ...pre] = brokerCommand();
    const producer = spawn(
      cmd,
      [
        ...pre,
        ...["produce", "orders", "--broker", `${s.broker.tcp.host}:${s.broker.tcp.port}`],
        ...["--api-key-file", join(s.dir, "ingest.key")],
      ],
      { cwd: repoRoot, stdio: ["pipe", "pipe", "pipe"] },
    );
    onTestFinished(() => void producer.kill("SIGKILL"));
    let err = "";
    producer.stderr!.on("data", (d) => (err += d));
    const exit = new Promise<number | null>((resolve) =>
      producer.once("close", (code) => resolve(code)),
    );
    const stored = async () =>
      (await (await s.http("/v1/topics/orders", { key: s.keys.admin })).json()).partitions[0]
        .high_watermark as number;
    producer.stdin!.write("one\ntwo\n");
    await expect.poll(stored, { timeout: 10_000 }).toBe(2);
    const revoke = await runCli([
      "keys",
      "revoke",
      "ingest",
      "--url",
      s.broker.httpUrl,
      "--api-key-file",
      join(s.dir, "admin.key"),
    ]);
    expect(revoke.code, revoke.stderr).toBe(0);
    await new Promise((r) => setTimeout(r, 500));
    producer.stdin!.write("three\n");
    producer.stdin!.end();
    expect(await exit, err).toBe(1);
    expect(err).not.toMatch(/reconnecting/);
    expect(err).toMatch(/^es-broker: key_revoked: /);
    expect(err).toContain("run it again with a current key");
    expect(err).not.toContain(s.keys.producer.slice(21));
    expect(await stored()).toBe(2);
  });

  it("refuses to start on an api_keys.json it cannot read, naming the file; and on a non-loopback address without keys", async () => {
    const { dir } = tempDir();
    const dataDir = join(dir, "data");
    const made = await runCli([
      "keys",
      "create",
      "--data-dir",
      dataDir,
      "--name",
      "root",
      "--role",
      "admin",
    ]);
    expect(made.code, made.stderr).toBe(0);
    expect(made.stdout.toString()).toMatch(/^esb_[0-9a-f]{16}_[A-Za-z0-9_-]{43}\n$/);
    writeFileSync(join(dataDir, "api_keys.json"), '{"version":1,"keys":[{"id":');
    const error = await startBroker(dataDir).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(error?.message).toMatch(/exited \(1\) before listening/);
    expect(error?.message).toContain(
      `Cannot use the API key file ${join(dataDir, "api_keys.json")}: not valid JSON`,
    );

    const fresh = join(dir, "fresh");
    const refused = await startBroker(fresh, ["--host", "0.0.0.0"]).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(refused?.message).toMatch(
      /refusing to listen on non-loopback address 0\.0\.0\.0 without authentication: create an API key first/,
    );
  });

  it("over TCP, a first request that is not Authenticate, and an Authenticate frame claiming more than 1 KiB, are answered and the connection closed", async () => {
    const s = await setup();
    const exchange = (bytes: Uint8Array) =>
      new Promise<Buffer>((resolve, reject) => {
        const socket = net.connect(s.broker.tcp, () => socket.write(bytes));
        const chunks: Buffer[] = [];
        socket.on("data", (d) => chunks.push(d));
        socket.on("error", () => {});
        socket.on("close", () => resolve(Buffer.concat(chunks)));
        setTimeout(
          () => reject(new Error(`[${target}] the connection stayed open`)),
          10_000,
        ).unref();
      });
    /** Error number and code of the one response frame in `bytes`. */
    const answer = (bytes: Buffer) => {
      expect(bytes.readUInt32BE(0)).toBe(bytes.length - 4);
      const code = bytes.subarray(12, 12 + bytes.readUInt16BE(10)).toString();
      return { correlationId: bytes.readUInt32BE(4), error: bytes.readUInt16BE(8), code };
    };
    // Metadata (api 3) first: length 12, correlation id 9, topic_count 0.
    const metadata = Buffer.from([0, 0, 0, 12, 0, 3, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0]);
    expect(answer(await exchange(metadata))).toEqual({
      correlationId: 9,
      error: 28,
      code: "unauthenticated",
    });
    // An Authenticate header claiming 100 MiB: refused from its header, nothing more is read.
    const claim = Buffer.from([0x06, 0x40, 0, 0, 0, 13, 0, 0, 0, 0, 0, 7]);
    expect(answer(await exchange(claim))).toEqual({
      correlationId: 7,
      error: 6,
      code: "request_too_large",
    });
    await s.broker.stop("SIGTERM");
    expect(s.broker.stderr()).toMatch(
      /"event":"tcp.frame_refused".*"length":104857600,"max_request_bytes":1024/,
    );
  });

  it("the CLI takes keys from a file or the environment, never from argv, and offline key commands take the data directory's lock", async () => {
    const s = await setup();
    const viaArgv = await runCli([
      "topics",
      "list",
      "--broker",
      `${s.broker.tcp.host}:${s.broker.tcp.port}`,
      "--api-key",
      s.keys.admin,
    ]);
    expect(viaArgv.code).toBe(2);
    expect(viaArgv.stderr).toMatch(
      /--api-key is not accepted: a key on the command line shows in process listings/,
    );
    expect(viaArgv.stderr).not.toContain(s.keys.admin);
    const address = `${s.broker.tcp.host}:${s.broker.tcp.port}`;
    const noKey = await runCli(["topics", "list", "--broker", address], undefined, {
      env: { ...process.env, ES_BROKER_API_KEY: "" },
    });
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toMatch(/unauthenticated: Cannot authenticate: an API key is required/);
    // ... and says how the CLI takes one.
    expect(noKey.stderr).toMatch(
      /\nes-broker: give the API key with --api-key-file FILE or \$ES_BROKER_API_KEY\n$/,
    );
    const created = await runCli([
      "topics",
      "create",
      "orders",
      "--broker",
      address,
      "--api-key-file",
      join(s.dir, "admin.key"),
    ]);
    expect(created.code, created.stderr).toBe(0);
    writeFileSync(join(s.dir, "producer.key"), `${s.keys.producer}\n`, { mode: 0o600 });
    const produced = await runCli(
      ["produce", "orders", "--broker", address, "--api-key-file", join(s.dir, "producer.key")],
      Buffer.from("a\nb\n"),
    );
    expect(produced.code, produced.stderr).toBe(0);
    expect(produced.stderr).not.toContain("warning");
    // A key file others may read is used, with a warning naming it and its mode.
    const loose = join(s.dir, "loose.key");
    writeFileSync(loose, `${s.keys.producer}\n`);
    chmodSync(loose, 0o644);
    const looseRun = await runCli(
      ["produce", "orders", "--broker", address, "--api-key-file", loose, "--partition", "0"],
      Buffer.from(""),
    );
    expect(looseRun.code, looseRun.stderr).toBe(0);
    expect(looseRun.stderr).toBe(
      `es-broker: warning: --api-key-file ${loose} has mode 0644: other users can read the key; make it 0600 (chmod 600 ${loose})\nes-broker: produced 0 records to "orders"\n`,
    );
    const refusedProduce = await runCli(
      ["produce", "orders", "--broker", address],
      Buffer.from("c\n"),
      { env: { ...process.env, ES_BROKER_API_KEY: s.keys.consumer } },
    );
    expect(refusedProduce.code).toBe(1);
    expect(refusedProduce.stderr).toMatch(/forbidden/);
    const consumed = await runCli(
      ["consume", "orders", "--from-beginning", "--broker", address],
      undefined,
      { env: { ...process.env, ES_BROKER_API_KEY: s.keys.consumer } },
    );
    expect(consumed.code, consumed.stderr).toBe(0);
    expect(consumed.stdout.toString()).toBe("a\nb\n");
    const grouped = await runCli(
      ["consume", "orders", "--group", "billing", "--from-beginning", "--broker", address],
      undefined,
      { env: { ...process.env, ES_BROKER_API_KEY: s.keys.consumer } },
    );
    expect(grouped.code, grouped.stderr).toBe(0);
    expect(grouped.stdout.toString()).toBe("a\nb\n");
    const idempotent = await runCli(
      [
        "produce",
        "orders",
        "--producer-id",
        "p1",
        "--broker",
        address,
        "--api-key-file",
        join(s.dir, "producer.key"),
      ],
      Buffer.from("c\n"),
    );
    expect(idempotent.code, idempotent.stderr).toBe(0);
    // Online create and list; offline refused while the broker holds the lock.
    const online = await runCli([
      "keys",
      "create",
      "--url",
      s.broker.httpUrl,
      "--api-key-file",
      join(s.dir, "admin.key"),
      "--name",
      "late",
      "--role",
      "consumer",
      "--topics",
      "orders,logs.*",
      "--groups",
      "g",
    ]);
    expect(online.code, online.stderr).toBe(0);
    expect(online.stdout.toString()).toMatch(/^esb_/);
    const listed = await runCli([
      "keys",
      "list",
      "--json",
      "--url",
      s.broker.httpUrl,
      "--api-key-file",
      join(s.dir, "admin.key"),
    ]);
    expect(
      JSON.parse(listed.stdout.toString()).keys.find((k: { name: string }) => k.name === "late"),
    ).toMatchObject({ role: "consumer", topics: ["orders", "logs.*"], groups: ["g"] });
    const offline = await runCli(["keys", "list", "--data-dir", s.dataDir]);
    expect(offline.code).toBe(1);
    expect(offline.stderr).toMatch(/is in use by process/);
    const notAdmin = await runCli([
      "keys",
      "list",
      "--url",
      s.broker.httpUrl,
      "--api-key-file",
      join(s.dir, "producer.key"),
    ]);
    expect(notAdmin.code).toBe(1);
    expect(notAdmin.stderr).toMatch(
      /^es-broker: forbidden: Cannot list keys: key "ingest" \(role producer\) may not list_keys/,
    );
  });
});
