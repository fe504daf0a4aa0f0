/**
 * End-to-end: one HTTP connection pipelines hundreds of fetches and reads nothing (attack17 F5).
 * `node:http` hands every request of a read to the handler at once, so each fetch built its
 * whole answer before the answers ahead of it were written: 1 000 such requests held 1.7 GB. A
 * connection is now served at most `httpServedAtOnceMax` requests at once and stops reading
 * meanwhile (docs/http-api.md "Malformed requests and pipelining"): the real process's memory
 * stays flat however many wait, and every answer arrives, in order, once the client reads.
 */
import * as net from "node:net";
import { afterEach, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";

const MiB = 1024 * 1024;
const records = 1200;
const valueBytes = 4096;
const perFetch = 100;
const pipelined = 200;

const running: BrokerProcess[] = [];
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function externalBytes(broker: BrokerProcess): Promise<number> {
  const text = await (await fetch(`${broker.httpUrl}/metrics`)).text();
  const m = /^esb_external_memory_bytes (\S+)$/m.exec(text);
  if (m === null) throw new Error("no esb_external_memory_bytes in /metrics");
  return Number(m[1]);
}

/** The offset fetch `i` asks for: spread over the topic. */
const offsetOf = (i: number) => (i * 37) % (records - perFetch);

/** Reads `count` HTTP responses (Content-Length or chunked) from `socket`, in order. */
function readResponses(
  socket: net.Socket,
  count: number,
): Promise<{ status: number; body: string }[]> {
  return new Promise((resolve, reject) => {
    const out: { status: number; body: string }[] = [];
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(
      () => reject(new Error(`only ${out.length} of ${count} answers within 60 s`)),
      60_000,
    );
    const parse = (): void => {
      for (;;) {
        const headEnd = buf.indexOf("\r\n\r\n");
        if (headEnd < 0) return;
        const head = buf.subarray(0, headEnd).toString("latin1").split("\r\n");
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0])?.[1] ?? Number.NaN);
        const fields = new Map<string, string>();
        for (const line of head.slice(1)) {
          const i = line.indexOf(":");
          fields.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
        }
        let at = headEnd + 4;
        const parts: Buffer[] = [];
        if (fields.get("transfer-encoding") === "chunked") {
          for (;;) {
            const lineEnd = buf.indexOf("\r\n", at);
            if (lineEnd < 0) return;
            const size = Number.parseInt(buf.subarray(at, lineEnd).toString("latin1"), 16);
            if (buf.length < lineEnd + 2 + size + 2) return;
            parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size));
            at = lineEnd + 2 + size + 2;
            if (size === 0) break;
          }
        } else {
          const length = Number(fields.get("content-length"));
          if (buf.length < at + length) return;
          parts.push(buf.subarray(at, at + length));
          at += length;
        }
        out.push({ status, body: Buffer.concat(parts).toString("utf8") });
        buf = buf.subarray(at);
        if (out.length === count) {
          clearTimeout(timer);
          resolve(out);
          return;
        }
      }
    };
    socket.on("data", (data: Buffer) => {
      buf = buf.length === 0 ? data : Buffer.concat([buf, data]);
      parse();
    });
    socket.on("error", reject);
    socket.resume();
  });
}

/** Starts a broker (with `extra` options) holding the topic `big`: {@link records} records. */
async function startWithTopic(extra: string[] = []): Promise<BrokerProcess> {
  const broker = await startBroker(`${tempDir("esb-http-pipeline-").dir}/data`, extra);
  running.push(broker);
  const client = await TcpClient.connect(broker.tcp);
  try {
    await client.createTopic({ name: "big", partitions: 1 });
    for (let at = 0; at < records; at += 100) {
      const b = new EntryBatchBuilder();
      for (let i = at; i < at + 100; i++) b.add(null, utf8(String(i).padEnd(valueBytes, "v")));
      await client.produce("big", b.build(), { partition: 0 });
    }
  } finally {
    await client.close();
  }
  return broker;
}

/** Opens a connection to the broker's HTTP port that sends `requests` and reads nothing (yet). */
async function pipelineUnread(broker: BrokerProcess, requests: string): Promise<net.Socket> {
  const url = new URL(broker.httpUrl);
  const socket = net.connect(Number(url.port), url.hostname);
  sockets.push(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  socket.pause();
  socket.write(requests);
  return socket;
}

/** `count` fetches of `perRequest` records (base64) from the offsets {@link offsetOf} spreads. */
function fetches(count: number, perRequest: number): string {
  let requests = "";
  for (let i = 0; i < count; i++)
    requests += `GET /v1/topics/big/partitions/0/records?offset=${offsetOf(i)}&max_records=${perRequest}&max_bytes=${MiB}&encoding=base64 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
  return requests;
}

/** Checks `answers` are the fetches {@link fetches} asked for, in order. */
function expectFetchAnswers(answers: { status: number; body: string }[], perRequest: number): void {
  answers.forEach((a, i) => {
    expect(a.status).toBe(200);
    const body = JSON.parse(a.body) as { records: { offset: number; value: string }[] };
    expect(body.records.length).toBe(perRequest);
    expect(body.records[0].offset).toBe(offsetOf(i));
    const first = Buffer.from(body.records[0].value, "base64").toString("utf8");
    expect(first.startsWith(`${offsetOf(i)}v`)).toBe(true);
  });
}

it("a connection pipelining fetches it does not read holds a few answers, not all of them; each comes back in order", async () => {
  const broker = await startWithTopic();
  const before = await externalBytes(broker);
  const socket = await pipelineUnread(broker, fetches(pipelined, perFetch));
  // Every answer is ~550 KB of JSON: 200 of them built at once would be ~110 MB.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const held = (await externalBytes(broker)) - before;
  expect(held).toBeLessThan(40 * MiB);

  expectFetchAnswers(await readResponses(socket, pipelined), perFetch);
}, 120_000);

/** The gauges and counters of one scrape, by series name (no labels). */
async function scrape(broker: BrokerProcess): Promise<Record<string, number>> {
  const text = await (await fetch(`${broker.httpUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = /^(esb_[a-z_]+) (\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

it("connections that pipeline fetches and do not read hold at most --max-in-flight-bytes together; every answer comes once they read", async () => {
  const capBytes = 4 * MiB;
  const connections = 6;
  const perConnection = 12;
  // ~250 records of 4 KiB in base64: ~1.4 MB an answer; 6 connections × 4 served at once held
  // ~33 MB, none of it counted, before HTTP answers were counted.
  const perRequest = 250;
  const broker = await startWithTopic(["--max-in-flight-bytes", String(capBytes)]);
  const opened: net.Socket[] = [];
  for (let c = 0; c < connections; c++)
    opened.push(await pipelineUnread(broker, fetches(perConnection, perRequest)));
  let peak = 0;
  let last = -1;
  for (let round = 0; round < 40; round++) {
    await new Promise((r) => setTimeout(r, 250));
    const m = await scrape(broker);
    peak = Math.max(peak, m.esb_in_flight_bytes);
    if (round >= 6 && m.esb_in_flight_bytes === last) break;
    last = m.esb_in_flight_bytes;
  }
  // The bound: the cap plus one request per connection (its max_bytes, then its answer, at most
  // twice max_bytes: docs/http-api.md "How requests are served").
  expect(peak).toBeLessThanOrEqual(capBytes + connections * 2 * MiB);
  // A fresh connection is still served meanwhile.
  const fresh = await fetch(
    `${broker.httpUrl}/v1/topics/big/partitions/0/records?offset=3&max_records=2`,
  );
  expect(fresh.status).toBe(200);
  if (!target.includes("deno")) {
    // `node:http` counts an answer until the kernel has it: the unread ones are held, and the
    // cap made connections wait. (`Deno.serve` counts one until it has the body, and serves a
    // connection's requests one at a time: nothing to wait for.)
    expect(peak).toBeGreaterThan(capBytes);
    expect((await scrape(broker)).esb_in_flight_waits_total).toBeGreaterThan(0);
  }
  for (const socket of opened)
    expectFetchAnswers(await readResponses(socket, perConnection), perRequest);
  let after = await scrape(broker);
  for (let i = 0; i < 40 && after.esb_in_flight_bytes !== 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await scrape(broker);
  }
  expect(after.esb_in_flight_bytes).toBe(0);
  expect(after.esb_queued_answer_bytes).toBe(0);
}, 120_000);
