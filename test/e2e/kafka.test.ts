/**
 * End to end: real Kafka clients against the real process's Kafka listener (`--kafka-port`,
 * docs/kafka.md): Debian's `kcat` (librdkafka 2.0.2; `test/e2e/kafka-tools.ts` installs it) and
 * npm `kafkajs` 2.2.4. Records cross between the Kafka listener, HTTP and the CLI.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import * as nodeHttp from "node:http";
import * as https from "node:https";
import { join } from "node:path";
import { Kafka, logLevel } from "kafkajs";
import { afterEach, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, startBroker, target, type BrokerProcess } from "./harness.ts";
import { certificateOf, makePki } from "./pki.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0))
    if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function kafkaBroker(
  extra: string[] = [],
): Promise<{ broker: BrokerProcess; bootstrap: string }> {
  const { dir } = tempDir("es-broker-kafka-");
  const broker = await startBroker(`${dir}/data`, ["--kafka-port", "0", ...extra]);
  running.push(broker);
  expect(broker.kafka, "the listening line names the Kafka port").toBeDefined();
  return { broker, bootstrap: `${broker.kafka!.host}:${broker.kafka!.port}` };
}

/** Runs kcat to completion (killed after `timeoutMs`). */
function kcat(
  args: string[],
  options: { stdin?: Uint8Array; timeoutMs?: number } = {},
): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn("kcat", args, { stdio: ["pipe", "pipe", "pipe"] });
    children.push(proc);
    const out: Buffer[] = [];
    let err = "";
    proc.stdout.on("data", (d: Buffer) => out.push(d));
    proc.stderr.on("data", (d) => (err += d));
    const timer = setTimeout(() => proc.kill("SIGKILL"), options.timeoutMs ?? 20_000);
    proc.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: Buffer.concat(out), stderr: err });
    });
    proc.stdin.end(options.stdin ?? new Uint8Array(0));
  });
}

/** A long-running kcat with its output lines so far. */
function kcatFollow(args: string[]): { proc: ChildProcess; lines: string[]; stderr: () => string } {
  const proc = spawn("kcat", args, { stdio: ["ignore", "pipe", "pipe"] });
  children.push(proc);
  const lines: string[] = [];
  let partial = "";
  let err = "";
  proc.stdout!.on("data", (d: Buffer) => {
    partial += d.toString();
    const parts = partial.split("\n");
    partial = parts.pop()!;
    lines.push(...parts);
  });
  proc.stderr!.on("data", (d) => (err += d));
  return { proc, lines, stderr: () => err };
}

async function http(
  broker: BrokerProcess,
  method: string,
  path: string,
  body?: unknown,
): Promise<any> {
  const res = await fetch(`${broker.httpUrl}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`[${target}] timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function kafkajs(bootstrap: string, clientId = "e2e"): Kafka {
  return new Kafka({
    brokers: [bootstrap],
    clientId,
    logLevel: logLevel.NOTHING,
    retry: { retries: 3 },
  });
}

describe(`[${target}] Kafka listener with kcat`, () => {
  it("kcat -L sees every topic with its partitions, all led by node 0 at the advertised address", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "orders", partitions: 3 });
    const r = await kcat(["-b", bootstrap, "-L"]);
    expect(r.code, r.stderr).toBe(0);
    const text = r.stdout.toString();
    expect(text).toContain(`broker 0 at ${bootstrap}`);
    expect(text).toContain('topic "orders" with 3 partitions:');
    for (let p = 0; p < 3; p++)
      expect(text).toContain(`partition ${p}, leader 0, replicas: 0, isrs: 0`);
  });

  it("a real file produced with kcat -P (none, gzip, snappy, lz4) comes back from kcat -C byte-identical", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "files", partitions: 1 });
    const file = join(repoRoot, "README.md");
    const original = readFileSync(file);
    const codecs = ["none", "gzip", "snappy", "lz4"];
    for (const codec of codecs) {
      const r = await kcat(["-P", "-b", bootstrap, "-t", "files", "-p", "0", "-z", codec, file]);
      expect(r.code, `${codec}: ${r.stderr}`).toBe(0);
    }
    for (let offset = 0; offset < codecs.length; offset++) {
      const r = await kcat([
        "-C",
        "-b",
        bootstrap,
        "-t",
        "files",
        "-p",
        "0",
        "-o",
        String(offset),
        "-c",
        "1",
        "-e",
        "-q",
        "-f",
        "%s",
      ]);
      expect(r.code, r.stderr).toBe(0);
      expect(Buffer.compare(r.stdout, original), `the ${codecs[offset]} record`).toBe(0);
    }
    const offsets = await http(
      broker,
      "GET",
      "/v1/topics/files/partitions/0/records?offset=0&encoding=base64",
    );
    expect(offsets.records.map((x: { offset: number }) => x.offset)).toEqual([0, 1, 2, 3]);
  });

  it("records produced over HTTP are read by kcat from the beginning and from an offset, with the same keys, values and timestamps", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "events", partitions: 1 });
    const records = Array.from({ length: 6 }, (_, i) => ({
      key: i === 2 ? null : `k${i}`,
      value: `value ${i}`,
      partition: 0,
      timestamp: 1_700_000_000_000 + i * 1000,
    }));
    await http(broker, "POST", "/v1/topics/events/records", {
      records: records.map(({ key, ...r }) => (key === null ? r : { key, ...r })),
    });
    const fmt = ["-f", "%o|%k|%s|%T\n", "-Z"];
    const all = await kcat([
      "-C",
      "-b",
      bootstrap,
      "-t",
      "events",
      "-o",
      "beginning",
      "-e",
      "-q",
      ...fmt,
    ]);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout.toString().trim().split("\n")).toEqual(
      records.map((r, i) => `${i}|${r.key ?? "NULL"}|${r.value}|${r.timestamp}`),
    );
    const from4 = await kcat([
      "-C",
      "-b",
      bootstrap,
      "-t",
      "events",
      "-p",
      "0",
      "-o",
      "4",
      "-e",
      "-q",
      ...fmt,
    ]);
    expect(
      from4.stdout
        .toString()
        .trim()
        .split("\n")
        .map((l) => l.split("|")[0]),
    ).toEqual(["4", "5"]);
  });

  it("records produced with kcat -K are read back through HTTP and the CLI with their keys", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "keyed", partitions: 1 });
    const input = "alpha:one\nbeta:two\n:empty-key\n";
    const r = await kcat(["-P", "-b", bootstrap, "-t", "keyed", "-p", "0", "-K:", "-l"], {
      stdin: new TextEncoder().encode(input),
    });
    expect(r.code, r.stderr).toBe(0);
    const got = await http(broker, "GET", "/v1/topics/keyed/partitions/0/records?offset=0");
    expect(got.records.map((x: { key: string | null; value: string }) => [x.key, x.value])).toEqual(
      [
        ["alpha", "one"],
        ["beta", "two"],
        ["", "empty-key"],
      ],
    );
    for (const x of got.records) expect(Math.abs(x.timestamp - Date.now())).toBeLessThan(60_000);
    const cli = await runCli([
      "consume",
      "keyed",
      "--from-beginning",
      "--key-separator",
      "=",
      "--broker",
      `${broker.tcp.host}:${broker.tcp.port}`,
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stdout.toString()).toBe("alpha=one\nbeta=two\n=empty-key\n");
  });

  it("kcat -G: two members share a 4-partition topic; when one is killed the other takes its partitions over from the committed offsets", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "shared", partitions: 4 });
    const next = [0, 0, 0, 0];
    const produce = async (count: number) => {
      const records = [];
      for (let p = 0; p < 4; p++)
        for (let i = 0; i < count; i++)
          records.push({ value: `p${p}-${next[p] + i}`, partition: p });
      await http(broker, "POST", "/v1/topics/shared/records", { records });
      for (let p = 0; p < 4; p++) next[p] += count;
    };
    const args = [
      "-b",
      bootstrap,
      "-G",
      "workers",
      "-X",
      "auto.offset.reset=earliest",
      "-X",
      "session.timeout.ms=6000",
      "-X",
      "heartbeat.interval.ms=300",
      "-X",
      "auto.commit.interval.ms=100",
      "-f",
      "%s\n",
      "-q",
      "-u",
      "shared",
    ];
    await produce(10);
    const a = kcatFollow(args);
    await waitFor("member A to print all 40 records", () => new Set(a.lines).size === 40);
    const b = kcatFollow(args);
    await waitFor("both members in one generation", async () => {
      const g = await http(broker, "GET", "/v1/groups/workers");
      return (
        g.members.length === 2 &&
        g.members.every((m: { assignments: unknown[] }) => m.assignments.length === 2)
      );
    });
    await produce(10);
    await waitFor(
      "the 80 records to be printed",
      () => new Set([...a.lines, ...b.lines]).size === 80,
    );
    const group = await http(broker, "GET", "/v1/groups/workers");
    const ownedByB = group.members
      .filter((m: { member_id: string }) => m.member_id !== undefined)
      .find((m: { assignments: { partition: number }[] }) =>
        m.assignments.every((x) => b.lines.some((l) => l.startsWith(`p${x.partition}-1`))),
      );
    expect(ownedByB, JSON.stringify(group)).toBeDefined();
    const bPartitions: number[] = ownedByB.assignments.map(
      (x: { partition: number }) => x.partition,
    );
    await waitFor("member B's commits to reach 20", async () => {
      const g = await http(broker, "GET", "/v1/groups/workers");
      return bPartitions.every(
        (p) => g.offsets.find((o: { partition: number }) => o.partition === p)?.committed === 20,
      );
    });
    b.proc.kill("SIGKILL");
    const aBefore = a.lines.length;
    await produce(10);
    await waitFor(
      "member A to take over and print all 120 records",
      () => new Set([...a.lines, ...b.lines]).size === 120,
      45_000,
    );
    const takenOver = a.lines
      .slice(aBefore)
      .filter((l) => bPartitions.some((p) => l.startsWith(`p${p}-`)));
    // A starts B's partitions at B's committed offset 20: records 20…29 of each, none skipped.
    for (const p of bPartitions)
      for (let n = 20; n < 30; n++) expect(takenOver, `p${p}-${n}`).toContain(`p${p}-${n}`);
    const g = await http(broker, "GET", "/v1/groups/workers");
    expect(g.members.length).toBe(1);
  }, 120_000);

  it("SASL on a broker without keys is refused: kcat with SASL/PLAIN fails instead of hanging", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "t", partitions: 1 });
    const r = await kcat(
      [
        "-b",
        bootstrap,
        "-L",
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=PLAIN",
        "-X",
        "sasl.username=u",
        "-X",
        "sasl.password=p",
        "-m",
        "5",
      ],
      { timeoutMs: 30_000 },
    );
    expect(r.code).not.toBe(0);
    expect(r.code).not.toBe(null);
  });
});

describe(`[${target}] Kafka listener with kafkajs`, () => {
  it("admin metadata, producers with and without idempotence, and a consumer group of two that rebalances", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "kjs", partitions: 4 });
    const kafka = kafkajs(bootstrap);
    const admin = kafka.admin();
    await admin.connect();
    const meta = await admin.fetchTopicMetadata({ topics: ["kjs"] });
    expect(meta.topics[0].partitions.map((p) => p.partitionId).sort()).toEqual([0, 1, 2, 3]);
    await admin.disconnect();

    const sent: string[] = [];
    for (const idempotent of [false, true]) {
      const producer = kafka.producer({ idempotent, allowAutoTopicCreation: false });
      await producer.connect();
      for (let batch = 0; batch < 3; batch++) {
        const messages = Array.from({ length: 10 }, (_, i) => ({
          key: `key-${i % 4}`,
          value: `${idempotent ? "idem" : "plain"}-${batch}-${i}`,
        }));
        await producer.send({ topic: "kjs", messages });
        sent.push(...messages.map((m) => m.value));
      }
      await producer.disconnect();
    }
    // Idempotent batches carry a producer id: the broker keeps its sequence state by that id.
    const storage = await http(broker, "GET", "/v1/topics/kjs");
    expect(
      storage.partitions.reduce(
        (n: number, p: { high_watermark: number }) => n + p.high_watermark,
        0,
      ),
    ).toBe(60);

    const seen = new Map<string, string>();
    const consumers = [
      kafka.consumer({ groupId: "kg", sessionTimeout: 6000, heartbeatInterval: 300 }),
      kafka.consumer({ groupId: "kg", sessionTimeout: 6000, heartbeatInterval: 300 }),
    ];
    const assigned: number[][] = [[], []];
    for (const [i, c] of consumers.entries()) {
      await c.connect();
      await c.subscribe({ topic: "kjs", fromBeginning: true });
      c.on(c.events.GROUP_JOIN, (e) => {
        assigned[i] = (e.payload.memberAssignment.kjs ?? []) as number[];
      });
      await c.run({
        eachMessage: async ({ message }) => void seen.set(message.value!.toString(), `c${i}`),
      });
      if (i === 0) await waitFor("the first consumer to read everything", () => seen.size === 60);
    }
    await waitFor(
      "a rebalance that splits the partitions two and two",
      () => assigned[0].length === 2 && assigned[1].length === 2,
      45_000,
    );
    expect([...assigned[0], ...assigned[1]].sort()).toEqual([0, 1, 2, 3]);
    const producer = kafka.producer({ idempotent: true });
    await producer.connect();
    const late = Array.from({ length: 20 }, (_, i) => ({ key: `late-${i}`, value: `late-${i}` }));
    await producer.send({ topic: "kjs", messages: late });
    await producer.disconnect();
    await waitFor("both consumers to read the late records", () =>
      late.every((m) => seen.has(m.value)),
    );
    expect(new Set(late.map((m) => seen.get(m.value))).size).toBe(2);
    for (const v of sent) expect(seen.has(v), v).toBe(true);
    for (const c of consumers) await c.disconnect();
    const g = await http(broker, "GET", "/v1/groups/kg");
    expect(g.members).toEqual([]);
    expect(
      g.offsets.reduce((n: number, o: { committed: number | null }) => n + (o.committed ?? 0), 0),
    ).toBe(80);
  }, 120_000);
});

/** A broker with API keys: admin made offline, a producer and a consumer key made over HTTP. */
async function keyedKafkaBroker(
  extra: string[] = [],
  /** With TLS on: the CA the HTTP calls trust and the client certificate they show (PEM files). */
  tlsClient?: { ca: string; cert: string; key: string },
): Promise<{
  broker: BrokerProcess;
  bootstrap: string;
  dir: string;
  keys: { admin: string; producer: string; consumer: string };
  producerId: string;
  admin: (method: string, path: string, body?: unknown) => Promise<any>;
}> {
  const { dir } = tempDir("es-broker-kafka-keys-");
  const made = await runCli([
    "keys",
    "create",
    "--data-dir",
    `${dir}/data`,
    "--name",
    "root",
    "--role",
    "admin",
    "--out",
    `${dir}/admin.key`,
  ]);
  expect(made.code, made.stderr).toBe(0);
  const adminKey = readFileSync(`${dir}/admin.key`, "utf8").trim();
  const broker = await startBroker(`${dir}/data`, [
    "--kafka-port",
    "0",
    "--log-level",
    "debug",
    ...extra,
  ]);
  running.push(broker);
  const admin = async (method: string, path: string, body?: unknown): Promise<any> => {
    const headers: Record<string, string> = { authorization: `Bearer ${adminKey}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const { status, text } = await new Promise<{ status: number; text: string }>(
      (resolve, reject) => {
        const request = (broker.httpUrl.startsWith("https:") ? https : nodeHttp).request(
          `${broker.httpUrl}${path}`,
          {
            method,
            headers,
            ...(tlsClient === undefined
              ? {}
              : {
                  ca: readFileSync(tlsClient.ca),
                  cert: readFileSync(tlsClient.cert),
                  key: readFileSync(tlsClient.key),
                }),
          },
          (res) => {
            let answer = "";
            res.on("data", (d) => (answer += d));
            res.on("end", () => resolve({ status: res.statusCode ?? 0, text: answer }));
          },
        );
        request.on("error", reject);
        request.end(body === undefined ? undefined : JSON.stringify(body));
      },
    );
    const json = text.length > 0 ? JSON.parse(text) : null;
    if (status >= 300) throw new Error(`${method} ${path}: ${status} ${text}`);
    return json;
  };
  const producer: { key: string; id: string } = await admin("POST", "/v1/admin/keys", {
    name: "ingest",
    role: "producer",
    topics: ["orders*"],
  });
  const consumer: { key: string } = await admin("POST", "/v1/admin/keys", {
    name: "reader",
    role: "consumer",
    topics: ["orders*"],
    groups: ["billing*"],
  });
  await admin("POST", "/v1/topics", { name: "orders", partitions: 2 });
  await admin("POST", "/v1/topics", { name: "secret", partitions: 1 });
  return {
    broker,
    bootstrap: `${broker.kafka!.host}:${broker.kafka!.port}`,
    dir,
    keys: { admin: adminKey, producer: producer.key, consumer: consumer.key },
    producerId: producer.id,
    admin,
  };
}

/**
 * A kcat configuration file (`-F`, mode 0600) with SASL/PLAIN credentials and `extra` settings:
 * the key stays off kcat's argv, where `ps` would show it.
 */
function kcatConfig(
  dir: string,
  name: string,
  user: string,
  password: string,
  extra: string[] = [],
  protocol: "SASL_PLAINTEXT" | "SASL_SSL" = "SASL_PLAINTEXT",
) {
  const path = join(dir, `${name}.conf`);
  writeFileSync(
    path,
    [
      `security.protocol=${protocol}`,
      "sasl.mechanisms=PLAIN",
      `sasl.username=${user}`,
      `sasl.password=${password}`,
      ...extra,
      "",
    ].join("\n"),
    { mode: 0o600 },
  );
  return path;
}

describe(`[${target}] Kafka listener with API keys (SASL/PLAIN)`, () => {
  it("kcat with a key's name or id authenticates and gets the key's rights; a wrong password fails with an auth error", async () => {
    const k = await keyedKafkaBroker();
    const consumerConf = kcatConfig(k.dir, "reader", "reader", k.keys.consumer);
    const producerConf = kcatConfig(k.dir, "ingest", k.producerId, k.keys.producer);
    // Metadata lists only the topics the key may see.
    const listed = await kcat(["-F", consumerConf, "-b", k.bootstrap, "-L"]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout.toString()).toContain('topic "orders" with 2 partitions');
    expect(listed.stdout.toString()).not.toContain("secret");
    const input = "one\ntwo\nthree\n";
    const produced = await kcat(
      ["-F", producerConf, "-b", k.bootstrap, "-P", "-t", "orders", "-p", "1"],
      { stdin: new TextEncoder().encode(input) },
    );
    expect(produced.code, produced.stderr).toBe(0);
    const consumed = await kcat([
      "-F",
      consumerConf,
      "-b",
      k.bootstrap,
      "-C",
      "-t",
      "orders",
      "-p",
      "1",
      "-o",
      "beginning",
      "-e",
      "-q",
    ]);
    expect(consumed.code, consumed.stderr).toBe(0);
    expect(consumed.stdout.toString()).toBe(input);
    // A producer key may not fetch: the offset lookup is refused, kcat says why and exits.
    const refused = await kcat([
      "-F",
      producerConf,
      "-b",
      k.bootstrap,
      "-C",
      "-t",
      "orders",
      "-o",
      "beginning",
      "-e",
    ]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("Topic authorization failed");
    // A consumer key may not produce: nothing is appended.
    const notProduced = await kcat(
      ["-F", consumerConf, "-b", k.bootstrap, "-P", "-t", "orders", "-p", "0"],
      { stdin: new TextEncoder().encode("nope\n") },
    );
    expect(notProduced.code).not.toBe(0);
    expect(notProduced.stderr).toContain("Topic authorization failed");
    // The wrong password: an authentication error, and kcat gives up instead of hanging.
    const wrongConf = kcatConfig(k.dir, "wrong", "ingest", `${k.keys.producer.slice(0, -4)}AAAA`);
    const wrong = await kcat(["-F", wrongConf, "-b", k.bootstrap, "-L", "-m", "5"], {
      timeoutMs: 30_000,
    });
    expect(wrong.code).not.toBe(0);
    expect(wrong.code).not.toBe(null);
    expect(wrong.stderr).toContain("SASL authentication error: Authentication failed");
    const topics = await k.admin("GET", "/v1/topics/orders");
    expect(topics.partitions.map((p: { high_watermark: number }) => p.high_watermark)).toEqual([
      0, 3,
    ]);
    const log = k.broker.stderr();
    expect(log).toMatch(/"event":"auth\.failed","transport":"kafka".*"reason":"unknown"/);
    for (const key of Object.values(k.keys)) expect(log).not.toContain(key.slice(-43));
  }, 90_000);

  it("kafkajs with sasl plain: an idempotent producer and a consumer group; a producer key cannot fetch or create topics; a wrong password fails", async () => {
    const k = await keyedKafkaBroker();
    const client = (username: string, password: string) =>
      new Kafka({
        brokers: [k.bootstrap],
        clientId: "e2e-sasl",
        logLevel: logLevel.NOTHING,
        retry: { retries: 2 },
        sasl: { mechanism: "plain", username, password },
      });
    const producing = client("ingest", k.keys.producer);
    const producer = producing.producer({ idempotent: true, allowAutoTopicCreation: false });
    await producer.connect();
    const messages = Array.from({ length: 20 }, (_, i) => ({ key: `k${i}`, value: `v${i}` }));
    await producer.send({ topic: "orders", messages });
    // Not its topic: refused, nothing appended.
    await expect(producer.send({ topic: "secret", messages: [{ value: "x" }] })).rejects.toThrow();
    await producer.disconnect();

    // A producer key trying to create a topic (no Kafka CreateTopics here) and to consume.
    const producerAdmin = producing.admin();
    await producerAdmin.connect();
    await expect(
      producerAdmin.createTopics({ topics: [{ topic: "orders-new", numPartitions: 1 }] }),
    ).rejects.toThrow();
    await producerAdmin.disconnect();
    const wrongConsumer = producing.consumer({ groupId: "billing-x" });
    await wrongConsumer.connect();
    await wrongConsumer.subscribe({ topic: "orders", fromBeginning: true });
    const crashed = new Promise<unknown>((resolve) =>
      wrongConsumer.on(wrongConsumer.events.CRASH, (e) => resolve(e.payload.error)),
    );
    let readByProducer = 0;
    await wrongConsumer.run({ eachMessage: async () => void readByProducer++ });
    const crash = (await crashed) as { type?: string; message?: string };
    expect(`${crash.type} ${crash.message}`).toMatch(/GROUP_AUTHORIZATION_FAILED|not authorized/i);
    await wrongConsumer.disconnect();
    expect(readByProducer).toBe(0);

    const seen: string[] = [];
    const consumer = client("reader", k.keys.consumer).consumer({ groupId: "billing-1" });
    await consumer.connect();
    await consumer.subscribe({ topic: "orders", fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => void seen.push(message.value!.toString()),
    });
    await waitFor("the consumer to read the 20 records", () => seen.length >= 20);
    expect(seen.sort()).toEqual(messages.map((m) => m.value).sort());
    await consumer.disconnect();
    const group = await k.admin("GET", "/v1/groups/billing-1");
    expect(
      group.offsets.reduce(
        (n: number, o: { committed: number | null }) => n + (o.committed ?? 0),
        0,
      ),
    ).toBe(20);

    const wrong = client("reader", `${k.keys.consumer.slice(0, -4)}AAAA`).producer();
    await expect(wrong.connect()).rejects.toThrow(/SASL PLAIN authentication failed/);
    const topics = await k.admin("GET", "/v1/topics");
    expect(topics.topics.map((t: { name: string }) => t.name).sort()).toEqual(["orders", "secret"]);
    const secret = await k.admin("GET", "/v1/topics/secret");
    expect(secret.partitions[0].high_watermark).toBe(0);
  }, 90_000);

  it("revoking a key closes its open Kafka connections; the key then fails to authenticate", async () => {
    const k = await keyedKafkaBroker();
    const kafka = new Kafka({
      brokers: [k.bootstrap],
      clientId: "e2e-revoke",
      logLevel: logLevel.NOTHING,
      retry: { retries: 1, initialRetryTime: 100 },
      sasl: { mechanism: "plain", username: "ingest", password: k.keys.producer },
    });
    const producer = kafka.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    await producer.send({ topic: "orders", messages: [{ value: "before" }] });
    await k.admin("DELETE", "/v1/admin/keys/ingest");
    await waitFor("the broker to close the key's Kafka connections", () =>
      /"event":"auth\.connection_closed","transport":"kafka"/.test(k.broker.stderr()),
    );
    const after = await producer.send({ topic: "orders", messages: [{ value: "after" }] }).then(
      () => null,
      (e: Error) => e,
    );
    expect(`${after?.name}: ${after?.message}`).toMatch(/SASL PLAIN authentication failed/);
    await producer.disconnect().catch(() => {});
    const orders = await k.admin("GET", "/v1/topics/orders");
    expect(
      orders.partitions.reduce(
        (n: number, p: { high_watermark: number }) => n + p.high_watermark,
        0,
      ),
    ).toBe(1);
  }, 60_000);
});

describe(`[${target}] Kafka listener over TLS`, () => {
  it("with mutual TLS and keys, kcat (SASL_SSL) and kafkajs (ssl, sasl) produce and consume; plaintext, another CA and a missing client certificate are refused", async () => {
    const pki = makePki();
    // Mutual TLS and keys: every client shows a certificate from the CA and authenticates.
    const k = await keyedKafkaBroker(
      ["--tls-cert", pki.server.cert, "--tls-key", pki.server.key, "--tls-client-ca", pki.ca],
      { ca: pki.ca, ...pki.client },
    );
    const clientCert = [
      `ssl.ca.location=${pki.ca}`,
      `ssl.certificate.location=${pki.client.cert}`,
      `ssl.key.location=${pki.client.key}`,
    ];
    const conf = kcatConfig(k.dir, "tls-ingest", "ingest", k.keys.producer, clientCert, "SASL_SSL");
    const produced = await kcat(["-F", conf, "-b", k.bootstrap, "-P", "-t", "orders", "-p", "0"], {
      stdin: new TextEncoder().encode("over tls 1\nover tls 2\n"),
    });
    expect(produced.code, produced.stderr).toBe(0);

    const kafka = new Kafka({
      brokers: [k.bootstrap],
      clientId: "e2e-tls",
      logLevel: logLevel.NOTHING,
      retry: { retries: 2 },
      ssl: {
        ca: [readFileSync(pki.ca)],
        cert: readFileSync(pki.client.cert),
        key: readFileSync(pki.client.key),
      },
      sasl: { mechanism: "plain", username: "reader", password: k.keys.consumer },
    });
    const seen: string[] = [];
    const consumer = kafka.consumer({ groupId: "billing-tls" });
    await consumer.connect();
    await consumer.subscribe({ topic: "orders", fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => void seen.push(message.value!.toString()),
    });
    await waitFor("kafkajs over TLS to read kcat's records", () => seen.length >= 2);
    await consumer.disconnect();
    expect(seen.sort()).toEqual(["over tls 1", "over tls 2"]);

    // Plaintext to the TLS port; a client trusting another CA; no client certificate.
    const plain = kcatConfig(k.dir, "plain", "ingest", k.keys.producer);
    const plaintext = await kcat(["-F", plain, "-b", k.bootstrap, "-L", "-m", "3"]);
    expect(plaintext.code).not.toBe(0);
    const otherCa = kcatConfig(
      k.dir,
      "other-ca",
      "ingest",
      k.keys.producer,
      [
        `ssl.ca.location=${pki.otherCa}`,
        `ssl.certificate.location=${pki.client.cert}`,
        `ssl.key.location=${pki.client.key}`,
      ],
      "SASL_SSL",
    );
    const wrongCa = await kcat(["-F", otherCa, "-b", k.bootstrap, "-L", "-m", "3"]);
    expect(wrongCa.code).not.toBe(0);
    expect(wrongCa.stderr).toMatch(/certificate verify failed/);
    const noCert = await kcat([
      "-b",
      k.bootstrap,
      "-L",
      "-m",
      "3",
      "-X",
      "security.protocol=SSL",
      "-X",
      `ssl.ca.location=${pki.ca}`,
    ]);
    expect(noCert.code).not.toBe(0);
    await expect
      .poll(() => k.broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.plaintext_client","listener":"kafka"/);
    expect(k.broker.stderr()).toMatch(/"event":"tls.handshake_failed","listener":"kafka"/);
    const orders = await k.admin("GET", "/v1/topics/orders");
    expect(orders.partitions[0].high_watermark).toBe(2);
  }, 90_000);

  it("SIGHUP serves a rotated certificate to new Kafka connections while an open kafkajs producer keeps working", async () => {
    const pki = makePki();
    const certPath = join(pki.dir, "live.pem");
    const keyPath = join(pki.dir, "live.key");
    copyFileSync(pki.server.cert, certPath);
    copyFileSync(pki.server.key, keyPath);
    const { broker, bootstrap } = await kafkaBroker(["--tls-cert", certPath, "--tls-key", keyPath]);
    const admin = await TcpClient.connect({ ...broker.tcp, tls: { ca: readFileSync(pki.ca) } });
    await admin.createTopic({ name: "rot", partitions: 1 });
    await admin.close();
    expect(await certificateOf(broker.kafka!.port, pki.ca)).toBe("server-one");
    const kafka = new Kafka({
      brokers: [bootstrap],
      clientId: "e2e-rotate",
      logLevel: logLevel.NOTHING,
      ssl: { ca: [readFileSync(pki.ca)] },
    });
    const producer = kafka.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    await producer.send({ topic: "rot", messages: [{ value: "before" }] });
    copyFileSync(pki.rotated.cert, certPath);
    copyFileSync(pki.rotated.key, keyPath);
    broker.proc.kill("SIGHUP");
    await expect.poll(() => broker.stderr(), { timeout: 10_000 }).toMatch(/"event":"tls.reloaded"/);
    expect(await certificateOf(broker.kafka!.port, pki.ca)).toBe("server-two");
    await producer.send({ topic: "rot", messages: [{ value: "after" }] });
    await producer.disconnect();
    const r = await kcat([
      "-b",
      bootstrap,
      "-X",
      "security.protocol=SSL",
      "-X",
      `ssl.ca.location=${pki.ca}`,
      "-C",
      "-t",
      "rot",
      "-o",
      "beginning",
      "-e",
      "-q",
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.toString()).toBe("before\nafter\n");
  }, 60_000);
});
