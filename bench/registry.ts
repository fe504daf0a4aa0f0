/**
 * Schema validation at produce time, against the same produce without it (docs/registry.md
 * "Cost"): `producers` TCP clients each send `records` records in requests of `batch`, all at
 * once, to a topic with no subject, one checked as Avro (Confluent wire format) and one checked
 * as JSON Schema (wire format, JSON payload). The cases are interleaved, `rounds` times, in one
 * run of one broker process, so drift between runs cancels out; it prints records/s and the
 * broker's CPU time per record (from /proc), and each validated case as a share of the
 * unvalidated one. The machine is shared: read the ratios, not the digits.
 */
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { TcpClient } from "../src/client/client.ts";

interface Options {
  producers: number;
  records: number;
  batch: number;
  rounds: number;
  json?: string;
}

function parse(argv: string[]): Options {
  const o: Options = { producers: 64, records: 100, batch: 10, rounds: 3 };
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i].replace(/^--/, ""), argv[i + 1]];
    if (name === "json") o.json = value;
    else if (name in o) (o as unknown as Record<string, number>)[name] = Number(value);
    else throw new Error(`unknown option ${argv[i]}`);
  }
  return o;
}

/** utime + stime of a process, in µs (Linux /proc; clock ticks of 10 ms). */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

const avroSchema = {
  type: "record",
  name: "Order",
  fields: [
    { name: "id", type: "long" },
    { name: "customer", type: "string" },
    { name: "total", type: "double" },
    { name: "currency", type: { type: "enum", name: "Currency", symbols: ["EUR", "USD", "GBP"] } },
    { name: "items", type: { type: "array", items: "string" } },
    { name: "note", type: ["null", "string"], default: null },
  ],
};
const jsonSchema = {
  type: "object",
  properties: {
    id: { type: "integer" },
    customer: { type: "string" },
    total: { type: "number" },
    currency: { enum: ["EUR", "USD", "GBP"] },
    items: { type: "array", items: { type: "string" } },
    note: { type: ["null", "string"] },
  },
  required: ["id", "customer", "total", "currency", "items"],
  additionalProperties: false,
};

/** Minimal Avro binary encoding of the bench's Order (zig-zag varints). */
function encodeOrder(i: number): Uint8Array {
  const out: number[] = [];
  const long = (n: number) => {
    let z = n >= 0 ? n * 2 : -n * 2 - 1;
    while (z >= 0x80) {
      out.push((z & 0x7f) | 0x80);
      z = Math.floor(z / 128);
    }
    out.push(z);
  };
  const str = (s: string) => {
    const b = new TextEncoder().encode(s);
    long(b.length);
    out.push(...b);
  };
  long(i);
  str(`customer-${i % 97}`);
  const d = new Uint8Array(new Float64Array([i * 1.25]).buffer);
  out.push(...d);
  long(i % 3);
  long(2);
  str("apple");
  str("pear");
  long(0);
  long(0); // note: null (branch 0)
  return Uint8Array.from(out);
}

function wire(id: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(1, id);
  out.set(payload, 5);
  return out;
}

/** Runs the benchmark; resolves with the exit code. */
export async function main(argv: string[], env: { dir: string; broker: string }): Promise<number> {
  const o = parse(argv);
  const proc = spawn(
    process.execPath,
    [
      env.broker,
      "serve",
      "--data-dir",
      env.dir,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
      "--log-level",
      "warn",
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const line = await new Promise<string>((resolve) =>
    proc.stdout!.once("data", (d) => resolve(String(d))),
  );
  const http = /http=(\S+)/.exec(line)![1];
  const [host, port] = /tcp=(\S+):(\d+)/.exec(line)!.slice(1);
  try {
    const register = async (subject: string, body: object) => {
      const res = await fetch(`${http}/registry/subjects/${subject}/versions`, {
        method: "POST",
        headers: { "content-type": "application/vnd.schemaregistry.v1+json" },
        body: JSON.stringify(body),
      });
      return ((await res.json()) as { id: number }).id;
    };
    const avroId = await register("avro-value", { schema: JSON.stringify(avroSchema) });
    const jsonId = await register("json-value", {
      schemaType: "JSON",
      schema: JSON.stringify(jsonSchema),
    });
    const clients = await Promise.all(
      Array.from({ length: o.producers }, () => TcpClient.connect({ host, port: Number(port) })),
    );
    await clients[0].createTopic({ name: "none", partitions: 4 });
    await clients[0].createTopic({
      name: "avro",
      partitions: 4,
      config: { value_schema_subject: "avro-value" },
    });
    await clients[0].createTopic({
      name: "json",
      partitions: 4,
      config: { value_schema_subject: "json-value" },
    });
    const values = {
      none: (i: number) => wire(avroId, encodeOrder(i)),
      avro: (i: number) => wire(avroId, encodeOrder(i)),
      json: (i: number) =>
        wire(
          jsonId,
          new TextEncoder().encode(
            JSON.stringify({
              id: i,
              customer: `customer-${i % 97}`,
              total: i * 1.25,
              currency: ["EUR", "USD", "GBP"][i % 3],
              items: ["apple", "pear"],
              note: null,
            }),
          ),
        ),
    };
    const cases = ["none", "avro", "json"] as const;
    const totals = Object.fromEntries(cases.map((c) => [c, { records: 0, ms: 0, cpuUs: 0 }]));
    for (let round = 0; round < o.rounds; round++) {
      for (const topic of cases) {
        const cpu0 = cpuMicros(proc.pid!);
        const t0 = performance.now();
        await Promise.all(
          clients.map(async (client, p) => {
            for (let sent = 0; sent < o.records; sent += o.batch) {
              const n = Math.min(o.batch, o.records - sent);
              const records = Array.from({ length: n }, (_, k) => ({
                value: values[topic](p * o.records + sent + k),
              }));
              await client.produce(topic, records);
            }
          }),
        );
        const ms = performance.now() - t0;
        const t = totals[topic];
        t.records += o.producers * o.records;
        t.ms += ms;
        t.cpuUs += cpuMicros(proc.pid!) - cpu0;
      }
    }
    const result: Record<string, number> = {};
    for (const c of cases) {
      const t = totals[c];
      result[`${c}_records_per_s`] = Math.round((t.records / t.ms) * 1000);
      result[`${c}_cpu_us_per_record`] = Math.round((t.cpuUs / t.records) * 10) / 10;
    }
    result.avro_share =
      Math.round((result.avro_records_per_s / result.none_records_per_s) * 100) / 100;
    result.json_share =
      Math.round((result.json_records_per_s / result.none_records_per_s) * 100) / 100;
    console.log(
      `${o.producers} producers × ${o.records} records (batches of ${o.batch}), ${o.rounds} rounds interleaved`,
    );
    for (const c of cases)
      console.log(
        `${c.padEnd(5)} ${String(result[`${c}_records_per_s`]).padStart(8)} records/s  ${String(result[`${c}_cpu_us_per_record`]).padStart(6)} µs CPU/record${c === "none" ? "" : `  (${result[`${c}_share`]}× of none)`}`,
      );
    if (o.json !== undefined) writeFileSync(o.json, `${JSON.stringify(result, null, 2)}\n`);
    for (const c of clients) await c.close();
    return 0;
  } finally {
    proc.kill("SIGTERM");
    await new Promise((r) => proc.once("exit", r));
  }
}
