/**
 * End-to-end regressions for hostile input (issue 13), through the real process on every target:
 * pipelined requests ahead of a malformed one, JSON nested 5,000 levels deep over HTTP and TCP,
 * what the runtime's HTTP parser refuses, client values quoted without bound, and garbage that
 * used to log one line per connection. Where the runtimes differ, the expectations are the table
 * of docs/http-api.md ("Malformed requests and pipelining"): Node, Bun and the binary answer in
 * the JSON error shape; Deno's parser answers for itself.
 */
import * as net from "node:net";
import { gzipSync } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { startBroker, target, type BrokerProcess } from "./harness.ts";
import { exchangeRaw, type RawResponse } from "./raw-http.ts";
import { createTopicBody, openRawTcp, requestFrame, str16, u32 } from "./raw-tcp.ts";

/** Deno's parser answers what it refuses by itself (bodiless); Node's and Bun's `node:http` let the broker answer. */
const parserAnswersInJson = !target.includes("deno");

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function start(): Promise<BrokerProcess> {
  const { dir } = tempDir();
  const broker = await startBroker(`${dir}/data`);
  running.push(broker);
  return broker;
}

function hostPort(broker: BrokerProcess): { host: string; port: number } {
  const url = new URL(broker.httpUrl);
  return { host: url.hostname, port: Number(url.port) };
}

async function createTopic(broker: BrokerProcess, name: string): Promise<void> {
  const response = await fetch(`${broker.httpUrl}/v1/topics`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, partitions: 1 }),
  });
  expect(response.status, await response.text()).toBe(201);
}

async function highWatermark(broker: BrokerProcess, topic: string): Promise<number> {
  const described = (await (await fetch(`${broker.httpUrl}/v1/topics/${topic}`)).json()) as {
    partitions: { high_watermark: number }[];
  };
  return described.partitions[0].high_watermark;
}

function produceRequest(topic: string, value: string): string {
  const body = JSON.stringify({ records: [{ value }] });
  return `POST /v1/topics/${topic}/records HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** Asserts `response` is the documented JSON error with `code` (and returns its error). */
function expectJsonError(
  response: RawResponse,
  status: number,
  code: string,
): { code: string; message: string; details?: Record<string, unknown> } {
  expect(response.status, `[${target}] ${response.body}`).toBe(status);
  expect(response.headers["content-type"]).toMatch(/^application\/json/);
  const error = (JSON.parse(response.body) as { error: { code: string; message: string } }).error;
  expect(error.code).toBe(code);
  expect(typeof error.message).toBe("string");
  return error;
}

/** Asserts `response` is Deno's own answer to what its parser refuses: 400, no body, connection closed. */
function expectDenoParserAnswer(response: RawResponse): void {
  expect(response.status).toBe(400);
  expect(response.headers["content-length"]).toBe("0");
  expect(response.headers.connection).toBe("close");
  expect(response.body).toBe("");
}

describe(`[${target}] hostile input`, () => {
  it("answers five pipelined produces, in order, before the error about a malformed request that follows them", async () => {
    const broker = await start();
    const faults = {
      garbage: "GARBAGE\r\n\r\n",
      "two Content-Lengths":
        "POST /v1/topics/x/records HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
      "a bad chunk size in its body":
        'POST /v1/topics/x/records HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"r\r\nzz\r\n',
    };
    let n = 0;
    for (const [name, fault] of Object.entries(faults)) {
      const topic = `pipelined-${n++}`;
      await createTopic(broker, topic);
      let bytes = "";
      for (let i = 0; i < 5; i++) bytes += produceRequest(topic, `v${i}`);
      const exchange = await exchangeRaw({ ...hostPort(broker), bytes: bytes + fault });
      const what = `[${target}] ${name}: ${exchange.responses.map((r) => r.status).join(",")}`;
      expect(exchange.closed, what).toBe(true);
      // The five produces, each answered with its own offset, in order, first.
      for (let i = 0; i < 5; i++) {
        const answer = exchange.responses[i];
        expect(answer?.status, what).toBe(200);
        expect(JSON.parse(answer.body)).toEqual({ offsets: [{ partition: 0, offset: i }] });
      }
      const last = exchange.responses.slice(5);
      if (name === "a bad chunk size in its body") {
        if (parserAnswersInJson) {
          expect(last, what).toHaveLength(1);
          const error = expectJsonError(last[0], 400, "invalid_request");
          expect(error.message).toMatch(/could not be read/);
          expect(last[0].headers.connection).toBe("close");
        } else expect(last, what).toHaveLength(0); // Deno: the connection closes unanswered
      } else {
        expect(last, what).toHaveLength(1);
        if (parserAnswersInJson) {
          const error = expectJsonError(last[0], 400, "invalid_request");
          expect(error.details?.parser_error).toMatch(/^HPE_/);
          expect(last[0].headers.connection).toBe("close");
        } else expectDenoParserAnswer(last[0]);
      }
      expect(await highWatermark(broker, topic), what).toBe(5);
    }
  });

  it("acts on no pipelined produce it does not answer, when a request the parser framed is refused and the connection closes", async () => {
    const broker = await start();
    // Requests whose framing is sound but which the server refuses before the app (no Host in
    // HTTP/1.1; a request target that is not a URL path), each between pipelined produces.
    const refused = {
      "no Host": (topic: string) =>
        produceRequest(topic, "refused").replace("Host: localhost\r\n", ""),
      "two Host lines": (topic: string) =>
        produceRequest(topic, "refused").replace(
          "Host: localhost\r\n",
          "Host: localhost\r\nHost: evil.example\r\n",
        ),
      "OPTIONS *": () => "OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n",
      "a bad absolute URL": (topic: string) =>
        produceRequest(topic, "refused").replace("POST /v1/", "POST http://[::1/v1/"),
    };
    // Each case on its own topic and connection, all at once: where the connection stays open
    // (Deno), each exchange waits its full 3 s for answers that must not come.
    await Promise.all(
      Object.entries(refused).map(async ([name, request], n) => {
        const topic = `refused-${n}`;
        await createTopic(broker, topic);
        const bytes =
          produceRequest(topic, "before") +
          request(topic) +
          produceRequest(topic, "after-1") +
          produceRequest(topic, "after-2");
        const exchange = await exchangeRaw({ ...hostPort(broker), bytes, waitMs: 3_000 });
        const what = `[${target}] ${name}: ${exchange.responses.map((r) => `${r.status} ${r.body.slice(0, 80)}`).join(" | ")}`;
        expect(exchange.responses[0]?.status, what).toBe(200);
        // A client retries every produce it got no 200 for: each record appended must have had its 200.
        const answered = exchange.responses.filter((r) => r.status === 200).length;
        expect(await highWatermark(broker, topic), what).toBe(answered);
      }),
    );
  });

  it("serves a request that asks to upgrade the connection, closes the connection after its answer and acts on nothing pipelined behind it (Deno: as docs/http-api.md says)", async () => {
    const broker = await start();
    const upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\n";
    const get = (path: string, extra = "") =>
      `GET ${path} HTTP/1.1\r\nHost: localhost\r\n${extra}\r\n`;
    const withHeaders = (request: string, extra: string) =>
      request.replace("Host: localhost\r\n", `Host: localhost\r\n${extra}`);
    /** Answers as "status" or "status close"; `json` on Node, Bun and the binary, `deno` on Deno. */
    const cases: {
      name: string;
      requests: (topic: string) => string[];
      json: string[];
      deno: string[];
    }[] = [
      {
        // On Node: a produce on the raw path, the one asking to upgrade on node:http, a produce.
        name: "a produce asking to upgrade",
        requests: (topic) => [
          produceRequest(topic, "before"),
          withHeaders(produceRequest(topic, "upgrading"), upgrade),
          produceRequest(topic, "after"),
        ],
        json: ["200", "200 close"],
        // Deno's server refuses an upgrade request with a body itself (bodiless 400).
        deno: ["200", "400 close"],
      },
      {
        name: "a GET asking to upgrade",
        requests: (topic) => [
          get("/healthz"),
          get(`/v1/topics/${topic}`, upgrade),
          produceRequest(topic, "after"),
        ],
        json: ["200", "200 close"],
        // Deno serves one without a body, and what follows it.
        deno: ["200", "200", "200"],
      },
      {
        name: "an h2c upgrade",
        requests: (topic) => [
          get(
            "/healthz",
            "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n",
          ),
          produceRequest(topic, "after"),
        ],
        json: ["200 close"],
        deno: ["200", "200"],
      },
      {
        // Without the `upgrade` connection option nothing asks to upgrade: served as usual.
        name: "Upgrade without Connection: upgrade",
        requests: (topic) => [
          withHeaders(produceRequest(topic, "first"), "Upgrade: websocket\r\n"),
          produceRequest(topic, "second"),
        ],
        json: ["200", "200"],
        deno: ["200", "200"],
      },
    ];
    // Each case on its own topic and connection, all at once: a connection left open waits the
    // full 3 s.
    const results = await Promise.all(
      cases.map(async (c, n) => {
        const topic = `upgrade-${n}`;
        await createTopic(broker, topic);
        const requests = c.requests(topic);
        const exchange = await exchangeRaw({
          ...hostPort(broker),
          bytes: requests.join(""),
          waitMs: 3_000,
        });
        return {
          ...c,
          sent: requests.length,
          exchange,
          stored: await highWatermark(broker, topic),
        };
      }),
    );
    for (const { name, sent, exchange, stored, json, deno } of results) {
      const answers = exchange.responses.map(
        (r) => `${r.status}${r.headers.connection === "close" ? " close" : ""}`,
      );
      const what = `[${target}] ${name}: ${answers.join(", ")}; closed ${exchange.closed}; stored ${stored}`;
      // Never a request left unanswered on a connection left open (attack17 F3: Node's hang).
      expect(exchange.closed || answers.length === sent, what).toBe(true);
      expect(answers, what).toEqual(parserAnswersInJson ? json : deno);
      expect(exchange.closed, what).toBe(answers.length < sent);
      // Every record stored had its 200 (a client retries every produce it got none for).
      const produced = exchange.responses.filter((r) => r.body.startsWith('{"offsets"')).length;
      expect(stored, what).toBe(produced);
    }
    const upgraded = results[0].exchange.responses;
    expect(JSON.parse(upgraded[0].body)).toEqual({ offsets: [{ partition: 0, offset: 0 }] });
    if (parserAnswersInJson)
      expect(JSON.parse(upgraded[1].body)).toEqual({ offsets: [{ partition: 0, offset: 1 }] });
    else expectDenoParserAnswer(upgraded[1]);
  });

  it("acts on nothing pipelined behind a request with Connection: close, on every runtime (RFC 9112 §9.6)", async () => {
    const broker = await start();
    const withClose = (request: string) =>
      request.replace("Host: localhost\r\n", "Host: localhost\r\nConnection: close\r\n");
    const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: localhost\r\n\r\n`;
    const cases: { name: string; requests: (topic: string) => string[] }[] = [
      {
        name: "a produce with close, then produces",
        requests: (topic) => [
          produceRequest(topic, "a"),
          withClose(produceRequest(topic, "b")),
          produceRequest(topic, "c"),
          produceRequest(topic, "d"),
        ],
      },
      {
        name: "a GET with close, then a produce",
        requests: (topic) => [
          produceRequest(topic, "a"),
          withClose(get("/healthz")),
          produceRequest(topic, "c"),
        ],
      },
    ];
    for (const [n, c] of cases.entries()) {
      const topic = `close-${n}`;
      await createTopic(broker, topic);
      const exchange = await exchangeRaw({
        ...hostPort(broker),
        bytes: c.requests(topic).join(""),
        waitMs: 3_000,
      });
      const answers = exchange.responses.map(
        (r) => `${r.status}${r.headers.connection === "close" ? " close" : ""}`,
      );
      const what = `[${target}] ${c.name}: ${answers.join(", ")}; closed ${exchange.closed}`;
      expect(answers, what).toEqual(["200", "200 close"]);
      expect(exchange.closed, what).toBe(true);
      // Only the requests up to the close were acted on.
      expect(await highWatermark(broker, topic), what).toBe(n === 0 ? 2 : 1);
    }
  });

  it("refuses a TCP Produce and IdempotentProduce with no records as invalid_request naming record_count, as HTTP refuses an empty produce, and the connection goes on", async () => {
    const broker = await start();
    await createTopic(broker, "empty");
    const http = await fetch(`${broker.httpUrl}/v1/topics/empty/records`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"records":[]}',
    });
    const httpError = (await http.json()) as { error: { code: string; message: string } };
    expect(http.status).toBe(400);
    expect(httpError.error.code).toBe("invalid_request");

    const tcp = await openRawTcp(broker.tcp);
    const head = Buffer.concat([str16("empty"), u32(0)]);
    // timestamp_ms −1, key_len −1, value_len 1, "a".
    const entry = Buffer.concat([Buffer.alloc(12, 0xff), u32(1), Buffer.from("a")]);
    tcp.write(requestFrame(0, 1, Buffer.concat([head, u32(0)])));
    tcp.write(
      requestFrame(12, 2, Buffer.concat([head, str16("p1"), u32(0), Buffer.alloc(8), u32(0)])),
    );
    tcp.write(requestFrame(0, 3, Buffer.concat([head, u32(1), entry])));
    const answers = [await tcp.next(), await tcp.next(), await tcp.next()];
    tcp.destroy();
    for (const [i, answer] of answers.slice(0, 2).entries()) {
      if (typeof answer === "string") throw new Error(`answer ${i + 1}: ${answer}`);
      expect(answer.correlationId).toBe(i + 1);
      expect(answer.code, answer.message).toBe("invalid_request");
      expect(answer.message).toContain('field "record_count" is 0: the request holds no records');
    }
    const good = answers[2];
    if (typeof good === "string") throw new Error(`answer 3: ${good}`);
    expect(good.correlationId).toBe(3);
    expect(good.error, good.message).toBe(0);
    // span_count 1: partition 0, base_offset 0, count 1.
    expect(good.body.readUInt32BE(0)).toBe(1);
    expect(good.body.readUInt32BE(16)).toBe(1);
    expect(await highWatermark(broker, "empty")).toBe(1);
  });

  it("refuses a body with a Content-Encoding it does not decode with 415 naming the header, storing nothing, on every produce path and Durable Streams appends", async () => {
    const broker = await start();
    const topic = "coded";
    await createTopic(broker, topic);
    const gz = gzipSync(Buffer.from("event-1\nevent-2\n"));
    const head = (method: string, path: string, type: string, coding: string, length: number) =>
      `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: ${type}\r\nContent-Encoding: ${coding}\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`;
    const json = JSON.stringify({ records: [{ value: "plain" }] });
    const records = `/v1/topics/${topic}/records`;
    // Content-Length bodies whole in one read (Node's raw path), a chunked one (node:http), a JSON
    // body labelled gzip, several codings, and an identity one that is served. One connection
    // each: Deno's server closes a connection after answering a request whose body it did not
    // read, so requests pipelined behind a refused chunked one would go unanswered there.
    const requests = [
      Buffer.concat([
        Buffer.from(head("POST", records, "application/x-ndjson", "gzip", gz.length)),
        gz,
      ]),
      Buffer.from(head("POST", records, "application/json", "br", json.length) + json),
      Buffer.concat([
        Buffer.from(
          `POST ${records} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-ndjson\r\nContent-Encoding: GZIP\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${gz.length.toString(16)}\r\n`,
        ),
        gz,
        Buffer.from("\r\n0\r\n\r\n"),
      ]),
      Buffer.from(
        head("POST", records, "application/json", "identity, deflate", json.length) + json,
      ),
      Buffer.from(head("POST", records, "application/json", "identity", json.length) + json),
    ];
    const responses: RawResponse[] = [];
    for (const bytes of requests) {
      const exchange = await exchangeRaw({ ...hostPort(broker), bytes, waitMs: 3_000 });
      responses.push(...exchange.responses);
    }
    const exchange = { responses };
    const what = `[${target}] ${exchange.responses.map((r) => `${r.status} ${r.body.slice(0, 120)}`).join(" | ")}`;
    expect(
      exchange.responses.map((r) => r.status),
      what,
    ).toEqual([415, 415, 415, 415, 200]);
    const codings = ["gzip", "br", "GZIP", "deflate"];
    exchange.responses.slice(0, 4).forEach((response, i) => {
      const error = expectJsonError(response, 415, "unsupported_media_type");
      expect(error.message).toContain(`Content-Encoding "${codings[i]}" is not supported`);
      expect(error.details).toEqual({ header: "content-encoding" });
    });
    expect(await highWatermark(broker, topic), what).toBe(1);

    // A Durable Streams append (and a create with a body) of gzip bytes: 415, nothing stored.
    const stream = `${broker.httpUrl}/v1/stream/coded/s1`;
    const octets = { "content-type": "application/octet-stream" };
    const created = await fetch(stream, {
      method: "PUT",
      headers: { ...octets, "content-encoding": "gzip" },
      body: gz,
    });
    expectJsonError(
      {
        status: created.status,
        headers: { "content-type": created.headers.get("content-type") ?? "" },
        body: await created.text(),
      },
      415,
      "unsupported_media_type",
    );
    expect((await fetch(stream, { method: "PUT", headers: octets })).status).toBe(201);
    const appended = await fetch(stream, {
      method: "POST",
      headers: { ...octets, "content-encoding": "gzip" },
      body: gz,
    });
    expectJsonError(
      {
        status: appended.status,
        headers: { "content-type": appended.headers.get("content-type") ?? "" },
        body: await appended.text(),
      },
      415,
      "unsupported_media_type",
    );
    const read = await fetch(`${stream}?offset=-1`);
    expect(read.status).toBe(200);
    expect((await read.arrayBuffer()).byteLength).toBe(0);
  });

  it.skipIf(!parserAnswersInJson)(
    "refuses a request with two Host lines with 400 naming Host, and appends nothing (RFC 9112 §3.2)",
    async () => {
      const broker = await start();
      const topic = "two-hosts";
      await createTopic(broker, topic);
      const twoHosts = (request: string) =>
        request.replace("Host: localhost\r\n", "Host: localhost\r\nHost: evil.example\r\n");
      // Whole with a Content-Length (the raw path's shape on Node), and chunked (node:http).
      const body = JSON.stringify({ records: [{ value: "refused" }] });
      const chunked = `POST /v1/topics/${topic}/records HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
      for (const request of [twoHosts(produceRequest(topic, "refused")), twoHosts(chunked)]) {
        const exchange = await exchangeRaw({ ...hostPort(broker), bytes: request, waitMs: 3_000 });
        expect(exchange.responses.length, exchange.rest).toBe(1);
        const error = expectJsonError(exchange.responses[0], 400, "invalid_request");
        expect(error.message).toContain("2 Host header lines");
        expect(error.details).toEqual({ parameter: "Host" });
        expect(exchange.closed).toBe(true);
      }
      expect(await highWatermark(broker, topic)).toBe(0);
    },
  );

  it("refuses a topic config nested 5,000 levels deep with invalid_config naming the field, over HTTP and TCP", async () => {
    const broker = await start();
    const deep = `${"[".repeat(5000)}${"]".repeat(5000)}`;
    const create = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"name":"deep","config":{"retention_ms":${deep}}}`,
    });
    const created = (await create.json()) as { error: { code: string; message: string } };
    expect(create.status, JSON.stringify(created)).toBe(400);
    expect(created.error.code).toBe("invalid_config");
    expect(created.error.message).toContain("config.retention_ms");

    await createTopic(broker, "shallow");
    const patch = await fetch(`${broker.httpUrl}/v1/topics/shallow`, {
      method: "PATCH",
      headers: { "content-type": "application/json" },
      body: `{"config":{"segment_ms":${deep}}}`,
    });
    const patched = (await patch.json()) as { error: { code: string; message: string } };
    expect(patch.status, JSON.stringify(patched)).toBe(400);
    expect(patched.error.code).toBe("invalid_config");
    expect(patched.error.message).toContain("config.segment_ms");

    // Nested within the limit: the config check names the key and shows the value, bounded.
    const within = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"name":"deep2","config":{"retention_ms":${"[".repeat(20)}1${"]".repeat(20)}}}`,
    });
    const withinError = (await within.json()) as { error: { code: string; message: string } };
    expect(within.status).toBe(400);
    expect(withinError.error.code).toBe("invalid_config");
    expect(withinError.error.message).toMatch(/"retention_ms": \[\[\[\[…\]\]\]\] must be/);

    const tcp = await openRawTcp(broker.tcp);
    tcp.write(requestFrame(2, 7, createTopicBody("deep", 1, `{"retention_ms":${deep}}`)));
    const answer = await tcp.next();
    tcp.destroy();
    expect(answer).not.toBe("closed");
    if (typeof answer === "string") return;
    expect(answer.correlationId).toBe(7);
    expect(answer.code, answer.message).toBe("invalid_config");
    expect(answer.message).toContain("config.retention_ms");

    expect(broker.stderr()).not.toMatch(/internal_error|Maximum call stack/);
    expect((await fetch(`${broker.httpUrl}/v1/topics`)).status).toBe(200);
  });

  it("answers what the HTTP parser refuses in the documented shape, or as docs/http-api.md says Deno does", async () => {
    const broker = await start();
    const H = "Host: localhost\r\n";
    const cases: {
      name: string;
      bytes: string | Buffer;
      /** Node, Bun, binary: [status, code] of each answer. */
      json: [number, string][];
      /** Deno: "parser" for its bodiless 400, or [status, code] for an answer of the app; [] for none. */
      deno: ("parser" | [number, string])[];
    }[] = [
      {
        name: "a bad request line",
        bytes: "GARBAGE\r\n\r\n",
        json: [[400, "invalid_request"]],
        deno: ["parser"],
      },
      {
        name: "a raw space in the URL",
        bytes: `GET /v1/to pics HTTP/1.1\r\n${H}\r\n`,
        json: [[400, "invalid_request"]],
        deno: ["parser"],
      },
      {
        name: "non-ASCII bytes in the URL",
        bytes: Buffer.concat([
          Buffer.from("GET /v1/topics/\xff\xfe HTTP/1.1\r\n", "latin1"),
          Buffer.from(`${H}\r\n`),
        ]),
        json: [[400, "invalid_request"]],
        deno: ["parser"],
      },
      {
        name: "headers over 16 KiB",
        bytes: `GET /healthz HTTP/1.1\r\n${H}X-Big: ${"a".repeat(100_000)}\r\n\r\n`,
        json: [[431, "headers_too_large"]],
        deno: ["parser"],
      },
      {
        name: "two different Content-Lengths",
        bytes: `POST /v1/topics HTTP/1.1\r\n${H}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x`,
        json: [[400, "invalid_request"]],
        deno: ["parser"],
      },
      {
        name: "a bad chunk size",
        bytes: `POST /v1/topics HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n`,
        json: [[400, "invalid_request"]],
        deno: [],
      },
      {
        name: "a Content-Length shorter than the body",
        bytes: `POST /v1/topics HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{"name":"zz"}`,
        json: [
          [400, "invalid_request"],
          [400, "invalid_request"],
        ],
        // Deno waits for the rest of what it takes for the next request's head.
        deno: [[400, "invalid_request"]],
      },
      {
        name: "no Host in HTTP/1.1",
        bytes: "GET /healthz HTTP/1.1\r\n\r\n",
        json: [[400, "invalid_request"]],
        deno: [[200, ""]],
      },
      {
        name: "CONNECT",
        bytes: `CONNECT example.com:443 HTTP/1.1\r\n${H}\r\n`,
        json: [[404, "not_found"]],
        deno: [[404, "not_found"]],
      },
      {
        name: "Expect: bogus (ignored: the request is served)",
        bytes: `POST /v1/topics HTTP/1.1\r\n${H}Expect: bogus\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{"name":"expect"}`,
        json: [[201, ""]],
        deno: [[201, ""]],
      },
    ];
    // One connection per case, all at once: where a connection stays open (Deno), its exchange
    // waits the full 2 s for answers that must not come.
    const exchanges = await Promise.all(
      cases.map((c) => exchangeRaw({ ...hostPort(broker), bytes: c.bytes, waitMs: 2_000 })),
    );
    for (const [index, c] of cases.entries()) {
      const exchange = exchanges[index]!;
      const what = `[${target}] ${c.name}: ${exchange.responses.map((r) => `${r.status} ${r.body.slice(0, 120)}`).join(" | ")}`;
      const expected = parserAnswersInJson ? c.json : c.deno;
      expect(exchange.responses, what).toHaveLength(expected.length);
      expected.forEach((want, i) => {
        const got = exchange.responses[i];
        if (want === "parser") expectDenoParserAnswer(got);
        else if (want[1] === "") expect(got.status, what).toBe(want[0]);
        else expectJsonError(got, want[0], want[1]);
      });
      if (parserAnswersInJson && c.json.some(([status]) => status >= 400))
        expect(exchange.closed, `${what}: the connection closes after the error`).toBe(true);
    }
  });

  it("quotes at most a short prefix of a client's value in an error, over HTTP and TCP", async () => {
    const broker = await start();
    await createTopic(broker, "q");
    const big = "k".repeat(200_000);
    const bodies: [string, string, unknown][] = [
      ["POST", "/v1/topics", { name: "q2", config: { [big]: 1 } }],
      ["POST", "/v1/topics", { name: "q3", config: { cleanup_policy: big } }],
      ["POST", "/v1/topics", { name: big, partitions: "x" }],
      ["POST", "/v1/topics", { name: "q4", [big]: 1 }],
      ["POST", "/v1/topics/q/records", { records: [{ value: "v", [big]: 1 }] }],
      ["PATCH", "/v1/topics/q", { config: { retention_ms: big } }],
      ["POST", "/v1/groups/g/offsets", { member_id: big, generation: 1, offsets: [] }],
    ];
    for (const [method, path, body] of bodies) {
      const response = await fetch(`${broker.httpUrl}${path}`, {
        method,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const text = await response.text();
      expect(response.status, `${method} ${path}: ${text.slice(0, 300)}`).toBeGreaterThanOrEqual(
        400,
      );
      expect(response.status).toBeLessThan(500);
      expect(text.length, `${method} ${path}: ${text.slice(0, 300)}`).toBeLessThan(1024);
    }
    // Over TCP: a 60 KB topic name in Metadata and ListOffsets, a 60 KB config key in CreateTopic.
    const tcp = await openRawTcp(broker.tcp);
    const name = "t".repeat(60_000);
    tcp.write(requestFrame(3, 1, Buffer.concat([u32(1), str16(name)])));
    tcp.write(requestFrame(4, 2, Buffer.concat([str16(name), u32(0)])));
    tcp.write(requestFrame(2, 3, createTopicBody("q5", 1, JSON.stringify({ [name]: 1 }))));
    for (let i = 0; i < 3; i++) {
      const answer = await tcp.next();
      expect(typeof answer).toBe("object");
      if (typeof answer !== "object") return;
      expect(answer.error, answer.message).not.toBe(0);
      expect(answer.code).not.toBe("internal");
      expect(answer.frameBytes, answer.message).toBeLessThan(1024);
    }
    tcp.destroy();
  });

  it("counts garbage sent to both ports in the metrics and logs it at most once per kind every few seconds", async () => {
    const broker = await start();
    const connections = 100;
    await Promise.all(
      Array.from(
        { length: connections },
        () =>
          new Promise<void>((resolve) => {
            const socket = net.connect(broker.tcp.port, broker.tcp.host);
            socket.on("error", () => {});
            socket.on("close", () => resolve());
            socket.once("connect", () => socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
          }),
      ),
    );
    const httpConnections = 30;
    for (let i = 0; i < httpConnections; i++)
      await exchangeRaw({ ...hostPort(broker), bytes: "GARBAGE\r\n\r\n", waitMs: 2_000 });
    const metrics = (await (await fetch(`${broker.httpUrl}/v1/admin/metrics`)).json()) as {
      refused: Record<string, number>;
    };
    expect(metrics.refused["tcp.frame_refused"]).toBe(connections);
    // Deno's parser answers by itself: the broker never hears of what it refuses.
    expect(metrics.refused["http.parse_error"]).toBe(parserAnswersInJson ? httpConnections : 0);
    const lines = (event: string) =>
      broker
        .stderr()
        .split("\n")
        .filter((l) => l.includes(`"event":"${event}"`));
    // The first refusal of each kind is logged at once, the rest are summed into the next line (after 5 s).
    expect(lines("tcp.frame_refused").length).toBeGreaterThanOrEqual(1);
    expect(lines("tcp.frame_refused").length).toBeLessThanOrEqual(2);
    expect(lines("http.parse_error").length).toBeLessThanOrEqual(2);
    const first = JSON.parse(lines("tcp.frame_refused")[0]) as Record<string, unknown>;
    expect(first).toMatchObject({ level: "warn", refused: 1, refused_total: 1 });
    // Stopping flushes the rest into one summary line per kind: every refusal is in some line.
    expect(await broker.stop("SIGTERM")).toBe(0);
    running.splice(running.indexOf(broker), 1);
    const stderr = broker.proc.stderr!;
    if (!stderr.readableEnded) await new Promise((resolve) => stderr.once("end", resolve));
    const total = lines("tcp.frame_refused")
      .map((l) => (JSON.parse(l) as { refused: number }).refused)
      .reduce((a, b) => a + b, 0);
    expect(total).toBe(connections);
    expect(lines("tcp.frame_refused").length).toBeLessThanOrEqual(3);
  });
});
