/**
 * Schema id translation by the edge mirror (docs/edge.md "Schema ids upstream"), end to end: an
 * edge and a central broker as real processes, each with its own registry, the schemas
 * registered in a different order on each side so that the same schema has different ids — and
 * the edge's id of the reading schema is the central id of another schema, the silent
 * mis-decoding case. Forwarded records must carry the central id of the same schema and decode
 * with it; a schema the central registry refuses, and a mirror with no upstream registry, stop
 * the partition and forward nothing; plain JSON topics are forwarded unchanged; against a TLS
 * upstream with API keys, a mirror key that may not register waits until an admin registers the
 * schema upstream, and the key never reaches a log line.
 */
import { readFileSync } from "node:fs";
import * as https from "node:https";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import avro from "avsc";
import { runCli, startBroker, target, type BrokerProcess } from "./harness.ts";
import { tempDir } from "../helpers/tmp.ts";
import { offlineAdminKey, waitFor } from "./helpers.ts";
import { makePki } from "./pki.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

const readingSchema = {
  type: "record",
  name: "Reading",
  fields: [
    { name: "seq", type: "int" },
    { name: "temp_c", type: "double" },
  ],
};
const alarmSchema = { type: "record", name: "Alarm", fields: [{ name: "code", type: "string" }] };
const keySchema = "string";
const reading = avro.Type.forSchema(readingSchema as avro.Schema);
const keyType = avro.Type.forSchema(keySchema as avro.Schema);

async function call(url: string, method: string, body?: unknown): Promise<any> {
  const res = await fetch(url, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  expect(res.status, `${method} ${url}: ${text}`).toBeLessThan(300);
  return JSON.parse(text);
}

/** Registers `schema` under `subject` in the broker's registry; resolves with its id there. */
async function register(broker: BrokerProcess, subject: string, schema: unknown): Promise<number> {
  const answer = await call(`${broker.httpUrl}/registry/subjects/${subject}/versions`, "POST", {
    schema: JSON.stringify(schema),
  });
  return answer.id;
}

/** Confluent framing: magic byte 0, the id (u32 big-endian), the payload. */
function frame(id: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(id, 1);
  return Buffer.concat([head, payload]);
}

async function createTopic(broker: BrokerProcess, name: string, config: object): Promise<void> {
  await call(`${broker.httpUrl}/v1/topics`, "POST", { name, partitions: 2, config });
}

interface Stored {
  key: Buffer | null;
  value: Buffer;
}

/** Every record of `topic` (2 partitions) as bytes, partition by partition. */
async function readAll(broker: BrokerProcess, topic: string): Promise<Stored[]> {
  const out: Stored[] = [];
  for (const partition of [0, 1]) {
    const page = await call(
      `${broker.httpUrl}/v1/topics/${topic}/partitions/${partition}/records?offset=0&max_records=1000&encoding=base64`,
      "GET",
    );
    for (const r of page.records)
      out.push({
        key: r.key === null ? null : Buffer.from(r.key, "base64"),
        value: Buffer.from(r.value, "base64"),
      });
  }
  return out;
}

/** Sum of the topic's high watermarks, or 0 while it does not exist. */
async function recordCount(broker: BrokerProcess, topic: string): Promise<number> {
  const res = await fetch(`${broker.httpUrl}/v1/topics/${topic}`);
  if (res.status === 404) return 0;
  const t: any = await res.json();
  return t.partitions.reduce((n: number, p: { high_watermark: number }) => n + p.high_watermark, 0);
}

describe(`[${target}] the edge mirror and schema ids`, () => {
  it("rewrites each record's schema ids to the upstream's ids of the same schemas", async () => {
    const { dir } = tempDir();
    const central = await startBroker(`${dir}/central`);
    running.push(central);
    // Central: Alarm first, so Reading gets id 2 there; the key schema is not registered: the
    // mirror registers it.
    const centralAlarm = await register(central, "alarms-value", alarmSchema);
    const centralReading = await register(central, "sensors.avro-value", readingSchema);
    const edge = await startBroker(`${dir}/edge`, [
      ...["--mirror-to", `${central.tcp.host}:${central.tcp.port}`],
      ...["--mirror-topics", "sensors*", "--mirror-records-per-sec", "0"],
      ...["--mirror-registry-url", `${central.httpUrl}/registry`],
    ]);
    running.push(edge);
    // Edge: Reading first — its edge id is Alarm's id upstream.
    const edgeReading = await register(edge, "sensors.avro-value", readingSchema);
    const edgeKey = await register(edge, "sensors.avro-key", keySchema);
    expect(edgeReading).toBe(centralAlarm);
    expect(edgeReading).not.toBe(centralReading);
    const subjects = {
      value_schema_subject: "sensors.avro-value",
      key_schema_subject: "sensors.avro-key",
    };
    // The upstream topic checks every record against its subjects: an untranslated id is refused.
    await createTopic(central, "sensors.avro", subjects);
    await createTopic(edge, "sensors.avro", subjects);
    // Plain JSON records are not framed: forwarded unchanged.
    const jsonSchemaId = await call(
      `${edge.httpUrl}/registry/subjects/sensors.json-value/versions`,
      "POST",
      {
        schema: JSON.stringify({ type: "object", required: ["n"] }),
        schemaType: "JSON",
      },
    );
    expect(jsonSchemaId.id).toBeGreaterThan(0);
    await createTopic(edge, "sensors.json", {
      value_schema_subject: "sensors.json-value",
      schema_format: "json",
    });

    const sent: { key: Buffer; value: Buffer }[] = [];
    for (let batch = 0; batch < 4; batch++) {
      const records = Array.from({ length: 25 }, (_, i) => {
        const seq = batch * 25 + i;
        const key = frame(edgeKey, keyType.toBuffer(`sensor-${seq % 5}`));
        const value = frame(edgeReading, reading.toBuffer({ seq, temp_c: seq / 4 }));
        sent.push({ key, value });
        return { key_b64: key.toString("base64"), value_b64: value.toString("base64") };
      });
      await call(`${edge.httpUrl}/v1/topics/sensors.avro/records`, "POST", { records });
    }
    await call(`${edge.httpUrl}/v1/topics/sensors.json/records`, "POST", {
      records: Array.from({ length: 10 }, (_, n) => ({
        key: `k${n}`,
        value: JSON.stringify({ n }),
      })),
    });

    await waitFor(
      "every record forwarded",
      async () =>
        (await recordCount(central, "sensors.avro")) === 100 &&
        (await recordCount(central, "sensors.json")) === 10,
      45_000,
      200,
    );
    // The central key id is the one the mirror registered there.
    const centralKey = (
      await call(`${central.httpUrl}/registry/subjects/sensors.avro-key/versions/latest`, "GET")
    ).id;
    expect(centralKey).not.toBe(edgeKey);
    const byValue = new Map(sent.map((s) => [s.value.subarray(5).toString("hex"), s]));
    const upstream = await readAll(central, "sensors.avro");
    expect(upstream).toHaveLength(100);
    const centralValueSchema = avro.Type.forSchema(
      JSON.parse(
        (await call(`${central.httpUrl}/registry/schemas/ids/${centralReading}`, "GET")).schema,
      ),
    );
    const seen = new Set<number>();
    for (const r of upstream) {
      expect(r.value[0]).toBe(0);
      expect(r.value.readUInt32BE(1)).toBe(centralReading);
      expect(r.key![0]).toBe(0);
      expect(r.key!.readUInt32BE(1)).toBe(centralKey);
      const original = byValue.get(r.value.subarray(5).toString("hex"));
      expect(original, "an upstream value that was never sent").toBeDefined();
      expect(r.key!.subarray(5)).toEqual(original!.key.subarray(5));
      // Decoded with the schema the central registry gives its id: the reading it was.
      const decoded = centralValueSchema.fromBuffer(r.value.subarray(5)) as {
        seq: number;
        temp_c: number;
      };
      expect(decoded.temp_c).toBe(decoded.seq / 4);
      seen.add(decoded.seq);
    }
    expect(seen.size).toBe(100);
    // JSON records: unchanged bytes.
    const json = await readAll(central, "sensors.json");
    expect(json.map((r) => JSON.parse(r.value.toString("utf8")).n).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 10 }, (_, n) => n),
    );
    // The edge log is untouched: its records still name the edge's ids.
    for (const r of await readAll(edge, "sensors.avro")) {
      expect(r.value.readUInt32BE(1)).toBe(edgeReading);
      expect(r.key!.readUInt32BE(1)).toBe(edgeKey);
    }
  }, 120_000);

  it("renames a topic-named subject with the topic under --mirror-rename", async () => {
    const { dir } = tempDir();
    const central = await startBroker(`${dir}/central`);
    running.push(central);
    // The renamed upstream topic checks its values against its own TopicNameStrategy subject,
    // which holds the reading schema; the edge's subject name is unknown upstream.
    const centralReading = await register(central, "site17.sensors.avro-value", readingSchema);
    await createTopic(central, "site17.sensors.avro", {
      value_schema_subject: "site17.sensors.avro-value",
    });
    const edge = await startBroker(`${dir}/edge`, [
      ...["--mirror-to", `${central.tcp.host}:${central.tcp.port}`],
      ...["--mirror-topics", "sensors*", "--mirror-records-per-sec", "0"],
      ...["--mirror-rename", "sensors*=site17.sensors*"],
      ...["--mirror-registry-url", `${central.httpUrl}/registry`],
    ]);
    running.push(edge);
    await register(edge, "alarms-value", alarmSchema);
    const edgeReading = await register(edge, "sensors.avro-value", readingSchema);
    // A key subject that names no topic (RecordNameStrategy-like) keeps its name upstream.
    const edgeKey = await register(edge, "sensor-id", keySchema);
    expect(edgeReading).not.toBe(centralReading);
    await createTopic(edge, "sensors.avro", {
      value_schema_subject: "sensors.avro-value",
      key_schema_subject: "sensor-id",
    });
    const records = Array.from({ length: 20 }, (_, seq) => ({
      key_b64: frame(edgeKey, keyType.toBuffer(`sensor-${seq % 3}`)).toString("base64"),
      value_b64: frame(edgeReading, reading.toBuffer({ seq, temp_c: seq / 2 })).toString("base64"),
    }));
    await call(`${edge.httpUrl}/v1/topics/sensors.avro/records`, "POST", { records });
    await waitFor(
      "every record forwarded to the renamed topic",
      async () => (await recordCount(central, "site17.sensors.avro")) === 20,
      45_000,
      200,
    );
    const subjects: string[] = await call(`${central.httpUrl}/registry/subjects`, "GET");
    expect(subjects.sort()).toEqual(["sensor-id", "site17.sensors.avro-value"]);
    const centralKey = (
      await call(`${central.httpUrl}/registry/subjects/sensor-id/versions/1`, "GET")
    ).id;
    const seqs: number[] = [];
    for (const r of await readAll(central, "site17.sensors.avro")) {
      expect(r.value.readUInt32BE(1)).toBe(centralReading);
      expect(r.key!.readUInt32BE(1)).toBe(centralKey);
      seqs.push((reading.fromBuffer(r.value.subarray(5)) as { seq: number }).seq);
    }
    expect(seqs.sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, n) => n));
  }, 120_000);

  it("stops the partition, forwarding nothing, when the upstream registry refuses the schema or there is none", async () => {
    const { dir } = tempDir();
    const central = await startBroker(`${dir}/central`);
    running.push(central);
    // Central: the subject holds a schema the edge's is not backward compatible with.
    await register(central, "sensors.bad-value", {
      type: "record",
      name: "Reading",
      fields: [{ name: "seq", type: "string" }],
    });
    const edge = await startBroker(`${dir}/edge`, [
      ...["--mirror-to", `${central.tcp.host}:${central.tcp.port}`],
      ...["--mirror-topics", "sensors*", "--mirror-records-per-sec", "0"],
      ...["--mirror-registry-url", `${central.httpUrl}/registry`],
    ]);
    running.push(edge);
    const edgeId = await register(edge, "sensors.bad-value", readingSchema);
    await createTopic(edge, "sensors.bad", { value_schema_subject: "sensors.bad-value" });
    const value = frame(edgeId, reading.toBuffer({ seq: 1, temp_c: 1 }));
    await call(`${edge.httpUrl}/v1/topics/sensors.bad/records`, "POST", {
      records: [{ value_b64: value.toString("base64"), partition: 0 }],
    });
    await waitFor(
      "the partition stopped with the refusal",
      async () => /mirror\.partition_stopped.*sensors\.bad/.test(edge.stderr()),
      45_000,
      200,
    );
    const line = edge
      .stderr()
      .split("\n")
      .find((l) => l.includes("mirror.partition_stopped") && l.includes("sensors.bad"))!;
    expect(line).toContain('subject \\"sensors.bad-value\\"');
    expect(line).toContain(`edge schema id ${edgeId}`);
    expect(line).toContain("error_code 409");
    expect(await recordCount(central, "sensors.bad")).toBe(0);

    // An edge without --mirror-registry-url: a framed topic stops (its ids would mean other
    // schemas upstream, here on a topic without a subject), a JSON topic flows.
    const edge2 = await startBroker(`${dir}/edge2`, [
      ...["--mirror-to", `${central.tcp.host}:${central.tcp.port}`],
      ...["--mirror-topics", "plant*", "--mirror-records-per-sec", "0"],
    ]);
    running.push(edge2);
    const id2 = await register(edge2, "plant.avro-value", readingSchema);
    await createTopic(edge2, "plant.avro", { value_schema_subject: "plant.avro-value" });
    await call(`${edge2.httpUrl}/registry/subjects/plant.json-value/versions`, "POST", {
      schema: JSON.stringify({ type: "object" }),
      schemaType: "JSON",
    });
    await createTopic(edge2, "plant.json", {
      value_schema_subject: "plant.json-value",
      schema_format: "json",
    });
    await call(`${edge2.httpUrl}/v1/topics/plant.avro/records`, "POST", {
      records: [
        {
          value_b64: frame(id2, reading.toBuffer({ seq: 2, temp_c: 2 })).toString("base64"),
          partition: 1,
        },
      ],
    });
    await call(`${edge2.httpUrl}/v1/topics/plant.json/records`, "POST", {
      records: [{ value: '{"a":1}' }, { value: '{"a":2}' }],
    });
    await waitFor(
      "the JSON topic forwarded and the framed one stopped",
      async () =>
        (await recordCount(central, "plant.json")) === 2 &&
        /mirror\.partition_stopped.*plant\.avro/.test(edge2.stderr()),
      45_000,
      200,
    );
    const stopped = edge2
      .stderr()
      .split("\n")
      .find((l) => l.includes("mirror.partition_stopped") && l.includes("plant.avro"))!;
    expect(stopped).toContain("--mirror-registry-url");
    expect(stopped).toContain(`edge schema id ${id2}`);
    expect(await recordCount(central, "plant.avro")).toBe(0);
  }, 120_000);

  it("over TLS with a producer key: waits for the schema to be registered upstream, then forwards", async () => {
    const pki = makePki();
    const { dir } = tempDir();
    const centralDir = join(dir, "central");
    const { key: adminKey } = await offlineAdminKey(centralDir, dir);
    const central = await startBroker(centralDir, [
      "--tls-cert",
      pki.server.cert,
      "--tls-key",
      pki.server.key,
    ]);
    running.push(central);
    const admin = (method: string, path: string, body?: unknown): Promise<any> =>
      new Promise((resolve, reject) => {
        const headers: Record<string, string> = { authorization: `Bearer ${adminKey}` };
        if (body !== undefined) headers["content-type"] = "application/json";
        const request = https.request(
          `${central.httpUrl}${path}`,
          { method, headers, ca: readFileSync(pki.ca) },
          (res) => {
            let text = "";
            res.on("data", (d) => (text += d));
            res.on("end", () =>
              (res.statusCode ?? 0) < 300
                ? resolve(JSON.parse(text))
                : reject(new Error(`${method} ${path}: ${res.statusCode} ${text}`)),
            );
          },
        );
        request.on("error", reject);
        request.end(body === undefined ? undefined : JSON.stringify(body));
      });
    const alarmId = await admin("POST", "/registry/subjects/alarms-value/versions", {
      schema: JSON.stringify(alarmSchema),
    });
    // A producer key: it may read the registry, not register in it.
    const mirrorKey: { key: string } = await admin("POST", "/v1/admin/keys", {
      name: "edge-9",
      role: "producer",
      topics: ["sensors*"],
    });
    await admin("POST", "/v1/topics", {
      name: "sensors.tls",
      partitions: 2,
      config: { value_schema_subject: "sensors.tls-value" },
    });
    const edge = await startBroker(
      join(dir, "edge"),
      [
        ...["--mirror-to", `${central.tcp.host}:${central.tcp.port}`],
        ...["--mirror-topics", "sensors*", "--mirror-records-per-sec", "0"],
        ...["--mirror-tls-ca", pki.ca, "--mirror-registry-url", `${central.httpUrl}/registry`],
      ],
      { ES_BROKER_MIRROR_API_KEY: mirrorKey.key },
    );
    running.push(edge);
    const edgeId = await register(edge, "sensors.tls-value", readingSchema);
    expect(edgeId).toBe(alarmId.id);
    await createTopic(edge, "sensors.tls", { value_schema_subject: "sensors.tls-value" });
    await call(`${edge.httpUrl}/v1/topics/sensors.tls/records`, "POST", {
      records: Array.from({ length: 6 }, (_, seq) => ({
        value_b64: frame(edgeId, reading.toBuffer({ seq, temp_c: seq })).toString("base64"),
      })),
    });
    await waitFor(
      "the refused registration in the log",
      async () =>
        /"event":"mirror.upstream_refused".*"operation":"register_schema".*"subject":"sensors.tls-value"/.test(
          edge.stderr(),
        ),
      45_000,
      200,
    );
    const upstreamCount = async () =>
      (await admin("GET", "/v1/topics/sensors.tls")).partitions.reduce(
        (n: number, p: { high_watermark: number }) => n + p.high_watermark,
        0,
      );
    expect(await upstreamCount()).toBe(0);
    expect(edge.stderr()).not.toContain("mirror.partition_stopped");
    // An admin registers it upstream: the mirror finds it there and goes on by itself.
    const centralId = (
      await admin("POST", "/registry/subjects/sensors.tls-value/versions", {
        schema: JSON.stringify(readingSchema),
      })
    ).id;
    expect(centralId).not.toBe(edgeId);
    await waitFor("the records forwarded", async () => (await upstreamCount()) === 6, 60_000, 200);
    for (const partition of [0, 1]) {
      const page = await admin(
        "GET",
        `/v1/topics/sensors.tls/partitions/${partition}/records?offset=0&encoding=base64`,
      );
      for (const r of page.records)
        expect(Buffer.from(r.value, "base64").readUInt32BE(1)).toBe(centralId);
    }
    // The refusal's end is said (mirror.partition_forwarding, at most every 10 s per partition).
    await waitFor(
      "the partition's forwarding line after the refusal",
      async () =>
        edge
          .stderr()
          .split("\n")
          .some(
            (l) =>
              l.includes('"event":"mirror.partition_forwarding"') &&
              l.includes('"topic":"sensors.tls"') &&
              l.includes('"after":"mirror.upstream_refused"'),
          ),
      30_000,
      200,
    );
    expect(edge.stderr()).not.toContain(mirrorKey.key);
    expect(edge.proc.spawnargs.join(" ")).not.toContain(mirrorKey.key);
  }, 150_000);

  it("refuses --mirror-registry-url with a password, with --mirror-keep-schema-ids, or without --mirror-to", async () => {
    const { dir } = tempDir();
    const mirror = ["--mirror-to", "127.0.0.1:1", "--mirror-topics", "sensors*"];
    const cases: [string[], string][] = [
      [
        [...mirror, "--mirror-registry-url", "http://edge:s3cret@127.0.0.1:1/registry"],
        "--mirror-registry-url must not carry a user or password",
      ],
      [
        [...mirror, "--mirror-registry-url", "ftp://127.0.0.1/registry"],
        "must start with http:// or https://",
      ],
      [
        [
          ...mirror,
          "--mirror-registry-url",
          "http://127.0.0.1:1/registry",
          "--mirror-keep-schema-ids",
        ],
        "exclude each other",
      ],
      [["--mirror-keep-schema-ids"], "--mirror-keep-schema-ids needs --mirror-to"],
    ];
    for (const [args, message] of cases) {
      const r = await runCli(["serve", "--data-dir", join(dir, "d"), ...args]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(message);
      expect(r.stderr).not.toContain("s3cret");
    }
  }, 60_000);
});
