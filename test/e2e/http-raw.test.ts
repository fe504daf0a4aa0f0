/**
 * HTTP/1.1 produce on the raw socket (docs/http-api.md, "How requests are served"), through the
 * real process: on one keep-alive connection produce and other requests mixed, one after another
 * and pipelined in one write; a body split across many writes; a head sent a few bytes at a time
 * (slowloris: handed to `node:http`, whose head timeout then applies — test/unit/http-raw.test.ts
 * shows the timeout itself); a Content-Length over the cap. Every answer must be what the
 * `node:http` path gives, in request order. With API keys: keyed produce on the raw path, and
 * every refusal (401 for a wrong, malformed or revoked key, 403 from the role table) the same as
 * the `node:http` path's answer to the same request. Node target only (`targets.ts`): the raw path is
 * Node's; run it elsewhere with ES_BROKER_E2E_ALL_TARGETS=1 (it passed on Bun before Bun was
 * left on `node:http`).
 */
import * as net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { httpProduceRecordsMax } from "../../src/lib/limits.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";
import { offlineAdminKey } from "./helpers.ts";
import type { RawResponse } from "./raw-http.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function start(extra: string[] = []): Promise<BrokerProcess> {
  const { dir } = tempDir();
  const broker = await startBroker(`${dir}/data`, extra);
  running.push(broker);
  return broker;
}

async function createTopic(broker: BrokerProcess, name: string): Promise<void> {
  const response = await fetch(`${broker.httpUrl}/v1/topics`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, partitions: 1 }),
  });
  expect(response.status, await response.text()).toBe(201);
}

/** The values stored in partition 0 of `topic`, in offset order. */
async function storedValues(broker: BrokerProcess, topic: string): Promise<string[]> {
  const answer = await fetch(
    `${broker.httpUrl}/v1/topics/${topic}/partitions/0/records?offset=0&max_records=1000`,
  );
  const body = (await answer.json()) as { records: { value: string }[] };
  return body.records.map((r) => r.value);
}

function produce(topic: string, value: string, extraHeaders = ""): string {
  const body = JSON.stringify({ records: [{ value }] });
  return `POST /v1/topics/${topic}/records HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${extraHeaders}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

function chunkedProduce(topic: string, value: string): string {
  const body = JSON.stringify({ records: [{ value }] });
  const half = Math.floor(body.length / 2);
  const chunk = (s: string) => `${s.length.toString(16)}\r\n${s}\r\n`;
  return `POST /v1/topics/${topic}/records HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunk(body.slice(0, half))}${chunk(body.slice(half))}0\r\n\r\n`;
}

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: localhost\r\n\r\n`;

/** An answer with its head as sent (status line and field lines, names as written). */
type Answer = RawResponse & { head: string };

/** One keep-alive connection: write bytes, then wait for a number of whole answers. */
interface Connection {
  write(bytes: string): Promise<void>;
  /** Resolves with the next `n` answers (rejects if the connection closes first). */
  answers(n: number, timeoutMs?: number): Promise<Answer[]>;
  readonly closed: boolean;
  destroy(): void;
}

function connect(broker: BrokerProcess): Promise<Connection> {
  const url = new URL(broker.httpUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    socket.setNoDelay(true);
    let received = Buffer.alloc(0);
    let closed = false;
    const parsed: Answer[] = [];
    let wake: (() => void) | null = null;
    const parse = () => {
      for (;;) {
        const headEnd = received.indexOf("\r\n\r\n");
        if (headEnd < 0) return;
        const lines = received.subarray(0, headEnd).toString("latin1").split("\r\n");
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const i = line.indexOf(":");
          headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
        }
        const length = Number(headers["content-length"]);
        if (received.length < headEnd + 4 + length) return;
        parsed.push({
          head: lines.join("\r\n"),
          status: Number(lines[0].slice(9, 12)),
          headers,
          body: received.subarray(headEnd + 4, headEnd + 4 + length).toString("utf8"),
        });
        received = received.subarray(headEnd + 4 + length);
      }
    };
    socket.on("data", (d: Buffer) => {
      received = Buffer.concat([received, d]);
      parse();
      wake?.();
    });
    socket.on("close", () => {
      closed = true;
      wake?.();
    });
    socket.on("error", reject);
    socket.once("connect", () =>
      resolve({
        write: (bytes) => new Promise((done) => socket.write(bytes, () => done())),
        answers: async (n, timeoutMs = 10_000) => {
          const deadline = Date.now() + timeoutMs;
          while (parsed.length < n) {
            if (closed)
              throw new Error(`[${target}] closed after ${parsed.length} of ${n} answers`);
            if (Date.now() > deadline)
              throw new Error(`[${target}] ${parsed.length} of ${n} answers in ${timeoutMs} ms`);
            await new Promise<void>((r) => {
              wake = r;
              setTimeout(r, 50);
            });
            wake = null;
          }
          return parsed.splice(0, n);
        },
        get closed() {
          return closed;
        },
        destroy: () => socket.destroy(),
      }),
    );
  });
}

const offsetOf = (answer: RawResponse) =>
  (JSON.parse(answer.body) as { offsets: { offset: number }[] }).offsets[0].offset;

describe(`[${target}] HTTP produce on the raw socket`, () => {
  it("serves produce and other requests mixed on one keep-alive connection, one by one and pipelined, in order", async () => {
    const broker = await start();
    await createTopic(broker, "mixed");
    const c = await connect(broker);

    // One by one: produce, a GET, produce, a chunked produce (node:http's), produce.
    const steps: [string, (a: RawResponse) => void][] = [
      [produce("mixed", "a"), (a) => expect(offsetOf(a)).toBe(0)],
      [get("/v1/topics/mixed"), (a) => expect(JSON.parse(a.body).name).toBe("mixed")],
      [produce("mixed", "b"), (a) => expect(offsetOf(a)).toBe(1)],
      [chunkedProduce("mixed", "c"), (a) => expect(offsetOf(a)).toBe(2)],
      [produce("mixed", "d"), (a) => expect(offsetOf(a)).toBe(3)],
    ];
    for (const [bytes, check] of steps) {
      await c.write(bytes);
      const [answer] = await c.answers(1);
      expect(answer.status, answer.body).toBe(200);
      check(answer);
    }

    // Pipelined in one write, on a fresh connection (the raw path's) and on this one (node:http's).
    for (const conn of [await connect(broker), c]) {
      await createTopic(broker, `piped-${conn === c ? "after" : "fresh"}`);
      const topic = `piped-${conn === c ? "after" : "fresh"}`;
      await conn.write(
        produce(topic, "p0") +
          produce(topic, "p1") +
          get("/healthz") +
          produce(topic, "p2") +
          get("/v1/topics/no-such-topic") +
          produce(topic, "p3") +
          // A query on a JSON body: the router's 400 (the fast route leaves it).
          produce(topic, "refused").replace("/records ", "/records?partition=0 ") +
          produce(topic, "p4") +
          produce("no-such-topic", "x") +
          produce(topic, "p5"),
      );
      const answers = await conn.answers(10);
      expect(answers.map((a) => a.status)).toEqual([
        200, 200, 200, 200, 404, 200, 400, 200, 404, 200,
      ]);
      expect(JSON.parse(answers[6].body).error.code).toBe("invalid_request");
      expect([0, 1, 3, 5, 7, 9].map((i) => offsetOf(answers[i]))).toEqual([0, 1, 2, 3, 4, 5]);
      expect(JSON.parse(answers[8].body).error.code).toBe("topic_not_found");
      expect(await storedValues(broker, topic)).toEqual(["p0", "p1", "p2", "p3", "p4", "p5"]);
      // Raw and node:http produce answers carry the same headers (but the date).
      const names = (a: RawResponse) =>
        Object.keys(a.headers)
          .filter((n) => n !== "date")
          .sort();
      expect(names(answers[0])).toEqual(names(answers[5]));
      expect(answers[0].headers["content-type"]).toBe("application/json");
      expect(answers[0].headers["x-content-type-options"]).toBe("nosniff");
      expect(conn.closed).toBe(false);
      conn.destroy();
    }
    expect(await storedValues(broker, "mixed")).toEqual(["a", "b", "c", "d"]);
  });

  it("stores pipelined produces in request order when some go through node:http (chunked, a slow body)", async () => {
    const broker = await start();
    await createTopic(broker, "order");
    const c = await connect(broker);

    // One write: the raw path serves a and b, hands over at c (chunked); node:http then serves
    // d, f (its fast route) and c, e (the router) side by side.
    await c.write(
      produce("order", "a") +
        produce("order", "b") +
        chunkedProduce("order", "c") +
        produce("order", "d") +
        chunkedProduce("order", "e") +
        produce("order", "f"),
    );
    const piped = await c.answers(6);
    expect(piped.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(piped.map(offsetOf)).toEqual([0, 1, 2, 3, 4, 5]);

    // A chunked body that arrives in two writes, the second with a produce pipelined behind it.
    const body = JSON.stringify({ records: [{ value: "g" }] });
    const chunk = (text: string) => `${text.length.toString(16)}\r\n${text}\r\n`;
    await c.write(
      `POST /v1/topics/order/records HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunk(body.slice(0, 5))}`,
    );
    await c.write(`${chunk(body.slice(5))}0\r\n\r\n${produce("order", "h")}`);
    const slow = await c.answers(2);
    expect(slow.map(offsetOf)).toEqual([6, 7]);

    // A long-poll pipelined before a produce does not hold the produce back: it gets its record.
    await c.write(
      get("/v1/topics/order/partitions/0/records?offset=8&wait_ms=30000") + produce("order", "i"),
    );
    const [poll, last] = await c.answers(2, 20_000);
    expect(poll.status, poll.body).toBe(200);
    expect(
      (JSON.parse(poll.body) as { records: { value: string }[] }).records.map((r) => r.value),
    ).toEqual(["i"]);
    expect(offsetOf(last)).toBe(8);

    expect(await storedValues(broker, "order")).toEqual([
      "a",
      "b",
      "c",
      "d",
      "e",
      "f",
      "g",
      "h",
      "i",
    ]);
    c.destroy();
  });

  it("takes a body split across many writes, and a head sent a few bytes at a time (slowloris), whole", async () => {
    const broker = await start();
    await createTopic(broker, "slow");
    const value = "v".repeat(300);
    const request = produce("slow", value);
    const headEnd = request.indexOf("\r\n\r\n") + 4;

    // The body in 20-byte pieces.
    const c = await connect(broker);
    await c.write(request.slice(0, headEnd));
    for (let at = headEnd; at < request.length; at += 20) {
      await c.write(request.slice(at, at + 20));
      await new Promise((r) => setTimeout(r, 5));
    }
    const [split] = await c.answers(1);
    expect(split.status, split.body).toBe(200);
    expect(offsetOf(split)).toBe(0);

    // The head 4 bytes at a time, 100 ms apart: nothing answered before it is whole.
    const s = await connect(broker);
    for (let at = 0; at < headEnd; at += 4) {
      await s.write(request.slice(at, Math.min(at + 4, headEnd)));
      if (at < 48) await new Promise((r) => setTimeout(r, 100));
    }
    await expect(s.answers(1, 300)).rejects.toThrow(/0 of 1 answers/);
    await s.write(request.slice(headEnd));
    const [slow] = await s.answers(1);
    expect(slow.status, slow.body).toBe(200);
    expect(offsetOf(slow)).toBe(1);

    // Both connections go on serving.
    await c.write(produce("slow", "after"));
    await s.write(produce("slow", "after"));
    expect(offsetOf((await c.answers(1))[0]) + offsetOf((await s.answers(1))[0])).toBe(2 + 3);
    expect(await storedValues(broker, "slow")).toEqual([value, value, "after", "after"]);
    c.destroy();
    s.destroy();
  });

  it("answers a Content-Length over the cap with the JSON 413, and appends nothing", async () => {
    const broker = await start(["--max-request-bytes", "65536"]);
    await createTopic(broker, "capped");
    const c = await connect(broker);
    await c.write(produce("capped", "ok"));
    expect((await c.answers(1))[0].status).toBe(200);
    await c.write(
      "POST /v1/topics/capped/records HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 65537\r\n\r\n",
    );
    const [refused] = await c.answers(1);
    expect(refused.status).toBe(413);
    expect(JSON.parse(refused.body).error.code).toBe("request_too_large");
    expect(await storedValues(broker, "capped")).toEqual(["ok"]);
    c.destroy();
  });

  it("serves keyed produce on the raw path, and refuses a wrong, malformed or revoked key and a forbidden topic as node:http does", async () => {
    const { dir } = tempDir();
    const admin = (await offlineAdminKey(`${dir}/data`, dir)).key;
    const broker = await startBroker(`${dir}/data`);
    running.push(broker);
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${broker.httpUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      expect(res.status, text).toBeLessThan(300);
      return text;
    };
    const makeKey = async (name: string, role: string) =>
      JSON.parse(await call("POST", "/v1/admin/keys", { name, role, topics: ["orders*"] }))
        .key as string;
    await call("POST", "/v1/topics", { name: "orders", partitions: 1 });
    await call("POST", "/v1/topics", { name: "secret", partitions: 1 });
    const producer = await makeKey("ingest", "producer");
    const consumer = await makeKey("reader", "consumer");
    const doomed = await makeKey("doomed", "producer");
    const bearer = (key: string) => `Authorization: Bearer ${key}\r\n`;
    const refusals = async () => {
      const res = await fetch(`${broker.httpUrl}/metrics`, {
        headers: { authorization: `Bearer ${admin}` },
      });
      const m = /^esb_refusals_total\{kind="auth\.failed"\} (\d+)$/m.exec(await res.text());
      return m === null ? 0 : Number(m[1]);
    };

    // Keyed produce on one keep-alive connection, one by one and pipelined: answered by the fast
    // route (its head writes `content-length`; the router's answers carry `Content-Length`), on
    // the raw path (a connection reaches node:http only at a request the fast route leaves).
    const c = await connect(broker);
    await c.write(produce("orders", "k0", bearer(producer)));
    const [first] = await c.answers(1);
    expect(first.status, first.body).toBe(200);
    expect(first.head).toContain("\r\ncontent-length: ");
    expect(first.headers["x-content-type-options"]).toBe("nosniff");
    await c.write(
      produce("orders", "k1", bearer(producer)) +
        produce("orders", "k2", bearer(admin)) +
        produce("orders", "k3", bearer(doomed)),
    );
    const piped = await c.answers(3);
    expect(piped.map((a) => [a.status, offsetOf(a)])).toEqual([
      [200, 1],
      [200, 2],
      [200, 3],
    ]);
    for (const a of piped) expect(a.head).toContain("\r\ncontent-length: ");

    // Each refusal on a fresh connection (raw), on the connection above (whose first refused
    // request hands it to node:http) and as a chunked request (always node:http's): the same
    // status, body and headers. The revoked key is refused on the next request of the
    // connection that used it. A key that authenticates is the raw path's to answer, the role
    // table's 403 included; any other goes to node:http untouched, which answers 401.
    await call("DELETE", "/v1/admin/keys/doomed");
    const refused: [string, string, number][] = [
      ["orders", bearer(doomed), 401],
      ["orders", bearer(`${producer.slice(0, -4)}AAAA`), 401],
      ["orders", "Authorization: Bearer not-a-key\r\n", 401],
      ["orders", `Authorization: Basic ${producer}\r\n`, 401],
      ["orders", "", 401],
      ["secret", bearer(producer), 403],
      ["orders", bearer(consumer), 403],
    ];
    const failedBefore = await refusals();
    const fresh = await connect(broker);
    for (const [topic, header, status] of refused) {
      const one = await connect(broker);
      await one.write(produce(topic, "no", header));
      await c.write(produce(topic, "no", header));
      await fresh.write(
        chunkedProduce(topic, "no").replace("Host: localhost\r\n", `Host: localhost\r\n${header}`),
      );
      const [a] = await one.answers(1);
      const [b] = await c.answers(1);
      const [slow] = await fresh.answers(1);
      one.destroy();
      expect(slow.status, `${header} ${slow.body}`).toBe(status);
      for (const x of [a, b]) {
        expect(x.status, x.body).toBe(status);
        expect(x.body).toBe(slow.body);
        expect(x.headers["www-authenticate"]).toBe(slow.headers["www-authenticate"]);
        expect(x.headers["content-type"]).toBe(slow.headers["content-type"]);
        expect(x.headers["x-content-type-options"]).toBe("nosniff");
      }
      expect(slow.head).toContain("\r\nContent-Length: ");
      expect(a.head).toContain(status === 403 ? "\r\ncontent-length: " : "\r\nContent-Length: ");
      const error = JSON.parse(slow.body).error;
      if (status === 403) {
        expect(error.code).toBe("forbidden");
        expect(error.details.operation).toBe("produce");
        expect(error.message).toContain(`"${topic}"`);
      } else expect(error.code).toBe("unauthenticated");
      for (const key of [admin, producer, consumer, doomed])
        expect(a.body + a.head).not.toContain(key.slice(21));
    }
    // Each failed authentication counted once per request (3 requests per 401 case).
    const unauthenticated = refused.filter(([, , s]) => s === 401).length;
    expect((await refusals()) - failedBefore).toBe(3 * unauthenticated);
    // Nothing refused was stored; the keyed records were, in order.
    const res = await fetch(
      `${broker.httpUrl}/v1/topics/orders/partitions/0/records?offset=0&max_records=100`,
      { headers: { authorization: `Bearer ${admin}` } },
    );
    const stored = ((await res.json()) as { records: { value: string }[] }).records;
    expect(stored.map((r) => r.value)).toEqual(["k0", "k1", "k2", "k3"]);
    c.destroy();
    fresh.destroy();
  });
});

/**
 * Sends `head` on a fresh connection and collects what arrives until a final (non-1xx) answer's
 * head is complete, or the connection closes; if `body` is given it is sent once `100 Continue`
 * has arrived. Resolves with every byte received, as text.
 */
function expectContinue(port: number, head: string, body?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    let received = "";
    let sent = false;
    const finalHead = () => {
      let at = 0;
      for (;;) {
        const end = received.indexOf("\r\n\r\n", at);
        if (end < 0) return false;
        if (!received.startsWith("HTTP/1.1 1", at)) return true;
        at = end + 4;
      }
    };
    socket.on("data", (d: Buffer) => {
      received += d.toString("latin1");
      if (body !== undefined && !sent && received.startsWith("HTTP/1.1 100 Continue\r\n\r\n")) {
        sent = true;
        socket.write(body);
      }
      const lengthMatch = /\r\ncontent-length: (\d+)\r\n/i.exec(received);
      const headEnd = received.lastIndexOf("\r\n\r\n");
      if (finalHead() && lengthMatch && received.length >= headEnd + 4 + Number(lengthMatch[1])) {
        socket.destroy();
        resolve(received);
      }
    });
    socket.on("close", () => resolve(received));
    socket.on("error", reject);
    socket.write(head);
  });
}

describe(`[${target}] Expect: 100-continue`, () => {
  const produceHead = (host: string, length: number, extra = "") =>
    `POST /v1/topics/t/records?partition=0 HTTP/1.1\r\nHost: ${host}\r\n` +
    `Content-Type: application/x-ndjson\r\nContent-Length: ${length}\r\n` +
    `Expect: 100-continue\r\n${extra}\r\n`;

  it("answers a refusal its head decides at once, without 100 Continue; a valid request gets 100 Continue then its answer", async () => {
    const broker = await start();
    await createTopic(broker, "t");
    const port = Number(new URL(broker.httpUrl).port);
    // 413 from Content-Length, 403 for a refused Host: no 100 Continue, and the connection closes.
    for (const [head, status] of [
      [produceHead("127.0.0.1", 500_000_000), 413],
      [produceHead("evil.example", 2), 403],
    ] as const) {
      const got = await expectContinue(port, head);
      expect(got).not.toContain("100 Continue");
      expect(got.startsWith(`HTTP/1.1 ${status} `), got).toBe(true);
      expect(got.toLowerCase()).toContain("\r\nconnection: close\r\n");
    }
    const ok = await expectContinue(port, produceHead("127.0.0.1", 3), "ok\n");
    expect(ok.startsWith("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "), ok).toBe(true);
    expect(JSON.parse(ok.slice(ok.lastIndexOf("\r\n\r\n") + 4)).offsets[0].offset).toBe(0);
    const res = await fetch(`${broker.httpUrl}/v1/topics/t/partitions/0/records?offset=0`);
    const stored = ((await res.json()) as { records: { value: string }[] }).records;
    expect(stored.map((r) => r.value)).toEqual(["ok"]);
  });

  it("answers 401 without 100 Continue to a request without a key; a keyed one gets 100 Continue", async () => {
    const { dir } = tempDir();
    const { key } = await offlineAdminKey(`${dir}/data`, dir);
    const broker = await startBroker(`${dir}/data`);
    running.push(broker);
    const created = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ name: "t", partitions: 1 }),
    });
    expect(created.status).toBe(201);
    const port = Number(new URL(broker.httpUrl).port);
    const refused = await expectContinue(port, produceHead("127.0.0.1", 500_000));
    expect(refused).not.toContain("100 Continue");
    expect(refused.startsWith("HTTP/1.1 401 "), refused).toBe(true);
    const keyed = await expectContinue(
      port,
      produceHead("127.0.0.1", 3, `Authorization: Bearer ${key}\r\n`),
      "ok\n",
    );
    expect(keyed.startsWith("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "), keyed).toBe(true);
  });
});

describe(`[${target}] records per HTTP produce request`, () => {
  it("stores a request of exactly httpProduceRecordsMax records whole and refuses one more, naming the limit and storing nothing", async () => {
    const broker = await start();
    await createTopic(broker, "t");
    // NDJSON takes the partition from the query, JSON from each record.
    const produce = (body: string, type: string) =>
      fetch(
        `${broker.httpUrl}/v1/topics/t/records${type === "application/json" ? "" : "?partition=0"}`,
        { method: "POST", headers: { "content-type": type }, body },
      );
    const highWatermark = async () => {
      const res = await fetch(`${broker.httpUrl}/v1/topics/t`);
      return ((await res.json()) as { partitions: { high_watermark: number }[] }).partitions[0]
        .high_watermark;
    };
    const ndjson = (n: number) => "a\n".repeat(n);
    const json = (n: number) =>
      JSON.stringify({ records: Array.from({ length: n }, () => ({ value: "", partition: 0 })) });
    let stored = 0;
    for (const [body, type] of [
      [ndjson, "application/x-ndjson"],
      [json, "application/json"],
    ] as const) {
      const over = await produce(body(httpProduceRecordsMax + 1), type);
      const error = (
        (await over.json()) as {
          error: { code: string; message: string; details: { limit_records: number } };
        }
      ).error;
      expect(over.status).toBe(400);
      expect(error.code).toBe("invalid_request");
      expect(error.details.limit_records).toBe(httpProduceRecordsMax);
      expect(error.message).toContain(`more than ${httpProduceRecordsMax} records`);
      expect(await highWatermark()).toBe(stored);
      const at = await produce(body(httpProduceRecordsMax), type);
      expect(at.status).toBe(200);
      const offsets = ((await at.json()) as { offsets: { offset: number }[] }).offsets;
      expect(offsets.length).toBe(httpProduceRecordsMax);
      expect(offsets[0].offset).toBe(stored);
      expect(offsets[httpProduceRecordsMax - 1].offset).toBe(stored + httpProduceRecordsMax - 1);
      stored += httpProduceRecordsMax;
      expect(await highWatermark()).toBe(stored);
    }
  });
});
