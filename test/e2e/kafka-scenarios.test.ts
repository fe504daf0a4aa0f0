/**
 * The Kafka listener's longer end-to-end scenarios (docs/kafka.md), on the node target only
 * (`nodeOnlyE2eFiles` in targets.ts; `ES_BROKER_E2E_ALL_TARGETS=1` runs them on every target):
 * they test the listener's and the coordinator's logic, the same code on every runtime, while
 * `kafka.test.ts` covers every target's sockets. kcat consumer groups with a member killed,
 * kafkajs producers and a rebalancing group, SASL/PLAIN keys, mutual TLS, the listener's
 * requests in `/metrics`, and fetches out of range with the clients' offset resets.
 */
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { Kafka, logLevel } from "kafkajs";
import { describe, expect, it } from "vitest";
import { decodeFetchResponse, writeFetchRequest } from "../../src/protocol/kafka/fetch.ts";
import { decodeResponseHeader, encodeRequest, KafkaApi } from "../../src/protocol/kafka/header.ts";
import { TcpClient } from "../../src/client/client.ts";
import { target } from "./harness.ts";
import { makePki } from "./pki.ts";
import { promtoolCheckMetrics } from "../helpers/system-tools.ts";
import {
  cleanUpKafkaTests,
  kafkaBroker,
  kcat,
  kcatFollow,
  http,
  waitFor,
  kafkajs,
  keyedKafkaBroker,
  kcatConfig,
} from "./kafka-clients.ts";

cleanUpKafkaTests();

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
});

describe(`[${target}] Kafka listener with kcat`, () => {
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

describe(`[${target}] Kafka listener requests in /metrics`, () => {
  it("counts produce and fetch per topic with transport=kafka; a topic a client names that does not exist makes no series", async () => {
    const { broker, bootstrap } = await kafkaBroker(["--metrics-port", "0"]);
    expect(broker.metricsUrl).toBeDefined();
    await http(broker, "POST", "/v1/topics", { name: "orders", partitions: 2 });
    const produced = await kcat(["-P", "-b", bootstrap, "-t", "orders", "-p", "1"], {
      stdin: new TextEncoder().encode("a\nb\nc\n"),
    });
    expect(produced.code, produced.stderr).toBe(0);
    const consumed = await kcat([
      "-C",
      "-b",
      bootstrap,
      "-t",
      "orders",
      "-p",
      "1",
      "-o",
      "beginning",
      "-e",
      "-q",
    ]);
    expect(consumed.stdout.toString()).toBe("a\nb\nc\n");
    // Names no topic has: a produce to one fails, metadata asking for one answers nothing.
    const unknown = `no-such-topic-${"x".repeat(40)}`;
    const lost = await kcat(
      ["-P", "-b", bootstrap, "-t", unknown, "-p", "0", "-X", "message.timeout.ms=1000"],
      { stdin: new TextEncoder().encode("lost\n"), timeoutMs: 15_000 },
    );
    expect(lost.code).not.toBe(0);
    await kcat(["-L", "-b", bootstrap, "-t", `${unknown}-m`], { timeoutMs: 15_000 });

    const text = await (await fetch(broker.metricsUrl!)).text();
    expect(promtoolCheckMetrics(text)).toEqual({ status: 0, output: "" });
    const sample = (series: string): number | undefined => {
      const line = text.split("\n").find((l) => l.startsWith(`${series} `));
      return line === undefined ? undefined : Number(line.slice(series.length + 1));
    };
    expect(sample('esb_produce_records_total{topic="orders",transport="kafka"}')).toBe(3);
    expect(
      sample('esb_produce_requests_total{topic="orders",transport="kafka"}'),
    ).toBeGreaterThanOrEqual(1);
    expect(sample('esb_fetch_records_total{topic="orders",transport="kafka"}')).toBe(3);
    expect(sample('esb_produce_duration_seconds_count{transport="kafka"}')).toBeGreaterThanOrEqual(
      1,
    );
    expect(sample('esb_fetch_duration_seconds_count{transport="kafka"}')).toBeGreaterThanOrEqual(1);
    // Any error counted carries the call and the code, never a name a client gave.
    for (const line of text.split("\n").filter((l) => l.startsWith("esb_request_errors_total{")))
      expect(line).toMatch(
        /^esb_request_errors_total\{transport="[a-z]+",operation="[a-z_]+",code="[a-z_]+"\} \d+$/,
      );
    expect(text).not.toContain("no-such-topic");
  }, 60_000);
});

/**
 * Sends Kafka request frames over one connection and returns the response frames' bodies (after
 * the size), in order.
 */
function kafkaExchange(bootstrap: string, frames: Uint8Array[]): Promise<Uint8Array[]> {
  const [host, port] = bootstrap.split(":");
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), host, () => {
      for (const f of frames) socket.write(f);
    });
    let received = Buffer.alloc(0);
    const out: Uint8Array[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`${out.length} of ${frames.length} Kafka responses before the timeout`));
    }, 10_000);
    socket.on("data", (d: Buffer) => {
      received = Buffer.concat([received, d]);
      while (received.length >= 4 && received.length >= 4 + received.readInt32BE(0)) {
        const size = received.readInt32BE(0);
        out.push(new Uint8Array(received.subarray(4, 4 + size)));
        received = received.subarray(4 + size);
      }
      if (out.length === frames.length) {
        clearTimeout(timer);
        socket.destroy();
        resolve(out);
      }
    });
    socket.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

describe(`[${target}] Kafka listener: fetches out of range`, () => {
  it("ListOffsets by timestamp: kafkajs fetchTopicOffsetsByTimestamp and kcat -o s@ find the first record at or after a time", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "by-time", partitions: 2 });
    // Partition 0: records stamped t0 + i s (i < 6), one 10 s late at offset 2; partition 1:
    // one record at t0.
    const t0 = Date.now() - 3_600_000;
    const stamps = [0, 1, 12, 3, 4, 5].map((s) => t0 + s * 1000);
    await http(broker, "POST", "/v1/topics/by-time/records", {
      records: [
        ...stamps.map((timestamp, i) => ({ value: `p0-${i}`, partition: 0, timestamp })),
        { value: "p1-0", partition: 1, timestamp: t0 },
      ],
    });
    const admin = kafkajs(bootstrap).admin();
    await admin.connect();
    try {
      const at = async (ms: number) =>
        (await admin.fetchTopicOffsetsByTimestamp("by-time", ms))
          .sort((a, b) => a.partition - b.partition)
          .map((o) => o.offset);
      expect(await at(t0)).toEqual(["0", "0"]);
      expect(await at(t0 + 2500)).toEqual(["2", "1"]);
      expect(await at(t0 + 3000)).toEqual(["2", "1"]);
      expect(await at(t0 + 12_000)).toEqual(["2", "1"]);
      // After every record the broker answers -1 (as Kafka's does); kafkajs then takes the
      // high watermark.
      expect(await at(t0 + 12_001)).toEqual(["6", "1"]);
    } finally {
      await admin.disconnect();
    }
    const read = await kcat([
      ...["-C", "-b", bootstrap, "-t", "by-time", "-p", "0"],
      ...["-o", `s@${t0 + 3000}`, "-e", "-f", "%o %T %s\\n"],
    ]);
    expect(read.code, read.stderr).toBe(0);
    expect(read.stdout.toString()).toBe(
      stamps
        .slice(2)
        .map((ms, i) => `${i + 2} ${ms} p0-${i + 2}\n`)
        .join(""),
    );
  });

  it("answers OFFSET_OUT_OF_RANGE with the real high watermark for offset -1 and past the end; kcat and kafkajs then reset as configured", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "oor", partitions: 1 });
    await http(broker, "POST", "/v1/topics/oor/records", {
      records: ["r0", "r1", "r2"].map((value) => ({ value, partition: 0 })),
    });
    const fetchAt = (correlationId: number, topic: string, fetchOffset: number) =>
      encodeRequest(
        { apiKey: KafkaApi.Fetch, apiVersion: 4, correlationId, clientId: "e2e-raw" },
        (w) =>
          writeFetchRequest(w, {
            maxWaitMs: 0,
            minBytes: 1,
            maxBytes: 1 << 20,
            isolationLevel: 0,
            topics: [
              { topic, partitions: [{ partition: 0, fetchOffset, partitionMaxBytes: 1 << 20 }] },
            ],
          }),
      );
    const cases = [
      { topic: "oor", offset: -1, errorCode: 1, highWatermark: 3 }, // OFFSET_OUT_OF_RANGE
      { topic: "oor", offset: 8, errorCode: 1, highWatermark: 3 },
      { topic: "oor", offset: 3, errorCode: 0, highWatermark: 3 }, // at the end: empty, no error
      { topic: "nope", offset: -1, errorCode: 3, highWatermark: -1 }, // UNKNOWN_TOPIC_OR_PARTITION first
    ];
    const answers = await kafkaExchange(
      bootstrap,
      cases.map((c, i) => fetchAt(i + 1, c.topic, c.offset)),
    );
    for (const [i, c] of cases.entries()) {
      const { correlationId, body } = decodeResponseHeader(answers[i]);
      expect(correlationId).toBe(i + 1);
      const [p] = decodeFetchResponse(body)[0].partitions;
      expect({ errorCode: p.errorCode, highWatermark: p.highWatermark }, JSON.stringify(c)).toEqual(
        {
          errorCode: c.errorCode,
          highWatermark: c.highWatermark,
        },
      );
      expect(p.records.length).toBe(0);
    }

    // librdkafka: a start past the end is out of range; auto.offset.reset=earliest reads it all.
    const reset = await kcat([
      "-C",
      "-b",
      bootstrap,
      "-t",
      "oor",
      "-p",
      "0",
      "-o",
      "8",
      "-e",
      "-f",
      "%o %s\n",
      "-X",
      "auto.offset.reset=earliest",
    ]);
    expect(reset.code, reset.stderr).toBe(0);
    expect(reset.stdout.toString()).toBe("0 r0\n1 r1\n2 r2\n");

    // kafkajs: a seek past the end is out of range; fromBeginning makes it reset to the start.
    const logged: string[] = [];
    const consumer = new Kafka({
      brokers: [bootstrap],
      clientId: "e2e-oor",
      logLevel: logLevel.ERROR,
      logCreator: () => (entry) => void logged.push(entry.log.message),
      retry: { retries: 3 },
    }).consumer({ groupId: "oor-g", sessionTimeout: 6000 });
    await consumer.connect();
    await consumer.subscribe({ topic: "oor", fromBeginning: true });
    const seen: string[] = [];
    // Without auto-commit: kafkajs would commit the sought offset, and es-broker refuses a commit
    // past the high watermark (docs/decisions.md §8), where Kafka would take it.
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => void seen.push(`${message.offset} ${message.value}`),
    });
    consumer.seek({ topic: "oor", partition: 0, offset: "8" });
    await waitFor(
      "kafkajs to reset after OFFSET_OUT_OF_RANGE and read from the start",
      () => seen.length >= 3,
    );
    await consumer.disconnect();
    expect(logged).toContain("Offset out of range, resetting to default offset");
    expect(seen.slice(-3)).toEqual(["0 r0", "1 r1", "2 r2"]);
  }, 60_000);
});

describe(`[${target}] timestamp_type (docs/storage.md "Retention")`, () => {
  it("log_append_time stamps the broker clock on records sent 8 days old over HTTP, TCP and Kafka, so retention keeps them; create_time (the default) deletes them", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    const day = 24 * 3600_000;
    const old = Date.now() - 8 * day;
    const value = "v".repeat(100);
    const started = Date.now();
    for (const [name, timestampType] of [
      ["appended", "log_append_time"],
      ["created", undefined],
    ] as const) {
      const config: Record<string, unknown> = { segment_bytes: 1024 };
      if (timestampType !== undefined) config.timestamp_type = timestampType;
      const created = await http(broker, "POST", "/v1/topics", { name, partitions: 1, config });
      expect(created.config.timestamp_type).toBe(timestampType ?? "create_time");
      // 3 × 10 records of ~130 bytes each: several sealed segments per front door.
      await http(broker, "POST", `/v1/topics/${name}/records`, {
        records: Array.from({ length: 10 }, () => ({ value, timestamp: old })),
      });
      const tcp = await TcpClient.connect(broker.tcp);
      await tcp.produce(
        name,
        Array.from({ length: 10 }, () => ({ value, timestampMs: old })),
      );
      await tcp.close();
      const producer = kafkajs(bootstrap).producer();
      await producer.connect();
      await producer.send({
        topic: name,
        messages: Array.from({ length: 10 }, () => ({ value, timestamp: String(old) })),
      });
      await producer.disconnect();
    }
    const appended = await http(broker, "POST", "/v1/admin/topics/appended/cleanup");
    expect(appended.partitions[0].retention.segments_deleted).toBe(0);
    // A fetch answers from one segment at a time: follow next_offset to the high watermark.
    const timestamps: number[] = [];
    for (let offset = 0; offset < 30; ) {
      const page = await http(
        broker,
        "GET",
        `/v1/topics/appended/partitions/0/records?offset=${offset}`,
      );
      for (const r of page.records as { timestamp: number }[]) timestamps.push(r.timestamp);
      offset = page.next_offset;
    }
    expect(timestamps).toHaveLength(30);
    for (const ts of timestamps) expect(ts).toBeGreaterThanOrEqual(started);
    // create_time: the producers' timestamps stay, and retention goes by them.
    const created = await http(broker, "POST", "/v1/admin/topics/created/cleanup");
    expect(created.partitions[0].retention.segments_deleted).toBeGreaterThan(0);
    expect(created.partitions[0].retention.log_start_offset_after).toBeGreaterThan(0);
  }, 60_000);
});

describe(`[${target}] Kafka produce refusals (docs/kafka.md "Records")`, () => {
  it("a kafkajs record with headers is refused INVALID_RECORD, and the broker logs why (kafka.produce_refused)", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "clicks", partitions: 1 });
    const producer = kafkajs(bootstrap).producer({ retry: { retries: 0 } });
    await producer.connect();
    const refused = await producer
      .send({
        topic: "clicks",
        messages: [{ value: "with-header", headers: { "trace-id": "abc" } }],
      })
      .then(
        () => null,
        (e: Error) => e,
      );
    await producer.disconnect();
    expect(refused?.message ?? "sent").toMatch(/validation on broker|INVALID_RECORD/i);
    await waitFor("the refusal's log line", () =>
      broker.stderr().includes('"kafka.produce_refused"'),
    );
    const line = broker
      .stderr()
      .split("\n")
      .find((l) => l.includes('"kafka.produce_refused"'))!;
    expect(line).toContain("headers; record headers cannot be stored");
    // The topic as other events log it: the plain name, not quoted inside the JSON string.
    expect(JSON.parse(line).topic).toBe("clicks");
  }, 30_000);

  it("a group id outside the broker's alphabet is INVALID_GROUP_ID, and the broker logs why (kafka.group_refused)", async () => {
    const { broker, bootstrap } = await kafkaBroker();
    await http(broker, "POST", "/v1/topics", { name: "sink", partitions: 1 });
    // Kafka Connect's default group id for a connector named "my sink:1".
    const consumer = kafkajs(bootstrap).consumer({
      groupId: "connect-my sink:1",
      retry: { retries: 0 },
    });
    let crash: { type?: string; message: string } | null = null;
    consumer.on(consumer.events.CRASH, (e) => {
      crash = e.payload.error as unknown as { type?: string; message: string };
    });
    await consumer.connect();
    await consumer.subscribe({ topic: "sink", fromBeginning: true });
    await consumer.run({ eachMessage: async () => {} });
    await waitFor("the consumer's crash", () => crash !== null);
    await consumer.disconnect();
    expect((crash as { type?: string } | null)?.type).toBe("INVALID_GROUP_ID");
    await waitFor("the refusal's log line", () =>
      broker.stderr().includes('"kafka.group_refused"'),
    );
    const line = broker
      .stderr()
      .split("\n")
      .find((l) => l.includes('"kafka.group_refused"'))!;
    expect(JSON.parse(line).kafka_code).toBe(24);
    expect(line).toContain("connect-my sink:1");
  }, 30_000);
});
