/**
 * The Kafka listener's end-to-end helpers (docs/kafka.md), shared by `kafka.test.ts` (every
 * target) and `kafka-scenarios.test.ts` (the node target): a broker with `--kafka-port`, one with
 * API keys, kcat runs and kafkajs clients. Each test file calls {@link cleanUpKafkaTests} once.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import * as nodeHttp from "node:http";
import * as https from "node:https";
import { join } from "node:path";
import { Kafka, logLevel } from "kafkajs";
import { afterEach, expect } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { startBroker, type BrokerProcess } from "./harness.ts";
import { offlineAdminKey } from "./helpers.ts";

export { waitFor } from "./helpers.ts";

/** Brokers started by the helpers; SIGKILLed after each test. */
export const running: BrokerProcess[] = [];
/** Client processes started by the helpers; SIGKILLed after each test. */
export const children: ChildProcess[] = [];

/** Registers the after-each clean-up of {@link running} and {@link children} in the calling test file. */
export function cleanUpKafkaTests(): void {
  afterEach(async () => {
    for (const c of children.splice(0))
      if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
    for (const b of running.splice(0)) await b.stop("SIGKILL");
  });
}

/** A broker with `--kafka-port 0` (and `extra`), and its Kafka bootstrap address. */
export async function kafkaBroker(
  extra: string[] = [],
): Promise<{ broker: BrokerProcess; bootstrap: string }> {
  const { dir } = tempDir("es-broker-kafka-");
  const broker = await startBroker(`${dir}/data`, ["--kafka-port", "0", ...extra]);
  running.push(broker);
  expect(broker.kafka, "the listening line names the Kafka port").toBeDefined();
  return { broker, bootstrap: `${broker.kafka!.host}:${broker.kafka!.port}` };
}

/** Runs kcat to completion (killed after `timeoutMs`). */
export function kcat(
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
    // kcat in consume mode may exit before reading its stdin: EPIPE there is not a failure (the
    // exit code and output say how the run went); any other error goes with stderr.
    proc.stdin.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code !== "EPIPE") err += `\nstdin: ${e.message}`;
    });
    proc.stdin.end(options.stdin ?? new Uint8Array(0));
  });
}

/** A long-running kcat with its output lines so far. */
export function kcatFollow(args: string[]): {
  proc: ChildProcess;
  lines: string[];
  stderr: () => string;
} {
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

/** An HTTP call to `broker` answered with JSON. @throws Error naming the call on a status ≥ 300. */
export async function http(
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

/** A kafkajs client of `bootstrap`, quiet, with few retries. */
export function kafkajs(bootstrap: string, clientId = "e2e"): Kafka {
  return new Kafka({
    brokers: [bootstrap],
    clientId,
    logLevel: logLevel.NOTHING,
    retry: { retries: 3 },
  });
}

/** A broker with API keys: admin made offline, a producer and a consumer key made over HTTP. */
export async function keyedKafkaBroker(
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
  const { key: adminKey } = await offlineAdminKey(`${dir}/data`, dir);
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
export function kcatConfig(
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
