/**
 * End to end, on every target: real Kafka clients against the real process's Kafka listener
 * (`--kafka-port`, docs/kafka.md) — Debian's `kcat` (librdkafka 2.0.2; `test/e2e/kafka-tools.ts`
 * installs it) and npm `kafkajs` 2.2.4. Records cross between the Kafka listener, HTTP and the CLI;
 * key revocation and a TLS certificate rotation run here too, as they touch the runtime's sockets.
 * The longer scenarios (groups, rebalances, keys, mutual TLS, metrics) are in
 * `kafka-scenarios.test.ts`, on the node target (vitest.config.ts).
 */
import { copyFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Kafka, logLevel } from "kafkajs";
import { describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { runCli, target } from "./harness.ts";
import { certificateOf, makePki } from "./pki.ts";
import { repoRoot } from "./targets.ts";
import {
  cleanUpKafkaTests,
  kafkaBroker,
  kcat,
  http,
  waitFor,
  keyedKafkaBroker,
} from "./kafka-clients.ts";

cleanUpKafkaTests();

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
});

describe(`[${target}] Kafka listener with API keys (SASL/PLAIN)`, () => {
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

describe(`[${target}] Kafka advertised address`, () => {
  it("a broker on every address (--host 0.0.0.0) tells each client the host it reached, by address or TLS name, never 0.0.0.0", async () => {
    const plain = await kafkaBroker(["--host", "0.0.0.0", "--allow-anonymous"]);
    const plainAt = `127.0.0.1:${plain.broker.kafka!.port}`;
    const listed = await kcat(["-b", plainAt, "-L"]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout.toString()).toContain(`broker 0 at ${plainAt}`);
    // Over TLS the name the client asked for (SNI), which the certificate names: kcat checks it.
    const pki = makePki();
    const tls = await kafkaBroker([
      "--host",
      "0.0.0.0",
      "--allow-anonymous",
      "--tls-cert",
      pki.server.cert,
      "--tls-key",
      pki.server.key,
    ]);
    const tlsAt = `localhost:${tls.broker.kafka!.port}`;
    const ssl = ["-X", "security.protocol=SSL", "-X", `ssl.ca.location=${pki.ca}`];
    const secure = await kcat(["-b", tlsAt, ...ssl, "-L"]);
    expect(secure.code, secure.stderr).toBe(0);
    expect(secure.stdout.toString()).toContain(`broker 0 at ${tlsAt}`);
    expect(secure.stdout.toString()).not.toContain("0.0.0.0");
  });
});

describe(`[${target}] Kafka listener over TLS`, () => {
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
