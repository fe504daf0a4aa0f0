/**
 * The NDJSON fetch answer (`Accept: application/x-ndjson`, docs/http-api.md "`GET /v1/topics/{topic}/partitions/{p}/records` — fetch") through the
 * real process: the same record objects as the JSON answer, one per line, in both encodings,
 * with the bounds in `Next-Offset`, `High-Watermark` and `Log-Start-Offset`; an empty body at the
 * end; a long-poll answered with the record that arrives; HEAD; a reader that follows
 * `Next-Offset` alone reads every record once; pipelined fetches read slowly each get their own
 * records whole (answer buffers reused only once written); bad input still gets its JSON error. Node target
 * only (`targets.ts`): the route is the same code on every runtime, and hostile-fuzz.test.ts
 * drives each runtime's HTTP server.
 */
import * as net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

const ndjson = { accept: "application/x-ndjson" };

async function start(): Promise<BrokerProcess> {
  const { dir } = tempDir();
  const broker = await startBroker(`${dir}/data`);
  running.push(broker);
  const created = await fetch(`${broker.httpUrl}/v1/topics`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name: "orders", partitions: 1 }),
  });
  expect(created.status, await created.text()).toBe(201);
  return broker;
}

async function produce(broker: BrokerProcess, records: unknown[]): Promise<void> {
  const res = await fetch(`${broker.httpUrl}/v1/topics/orders/records`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ records }),
  });
  expect(res.status, await res.text()).toBe(200);
}

/** The lines of an NDJSON body, each parsed; the body must end in a newline (or be empty). */
function lines(body: string): unknown[] {
  if (body === "") return [];
  expect(body.endsWith("\n"), JSON.stringify(body.slice(-40))).toBe(true);
  return body
    .slice(0, -1)
    .split("\n")
    .map((line) => JSON.parse(line));
}

function bounds(res: Response): Record<string, string | null> {
  return {
    next: res.headers.get("next-offset"),
    high: res.headers.get("high-watermark"),
    start: res.headers.get("log-start-offset"),
  };
}

describe("fetch as NDJSON", () => {
  it("answers the JSON answer's records one per line, with the bounds in headers", async () => {
    const broker = await start();
    await produce(broker, [
      { key: "customer-7", value: '{"total":12}' },
      { value: "line one\nline two\r\n" },
      { key: "", value: "ünïcødé → 🎉", timestamp: 1_700_000_000_000 },
      { key_b64: "AP8=", value_b64: "3q2+7w==" },
    ]);
    const records = `${broker.httpUrl}/v1/topics/orders/partitions/0/records`;
    for (const encoding of ["utf8", "base64"]) {
      const query = `?offset=1&encoding=${encoding}`;
      const json = (await (await fetch(`${records}${query}`)).json()) as { records: unknown[] };
      const res = await fetch(`${records}${query}`, { headers: ndjson });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("application/x-ndjson");
      expect(bounds(res)).toEqual({ next: "4", high: "4", start: "0" });
      const body = await res.text();
      // One line per record, split at raw newlines: a value's newline is escaped inside its string.
      expect(body.split("\n")).toHaveLength(4);
      expect(lines(body)).toEqual(json.records);
    }
    // application/ndjson too; a client preferring JSON, or sending */*, keeps the JSON answer.
    const alias = await fetch(`${records}?offset=0`, { headers: { accept: "application/ndjson" } });
    expect(alias.headers.get("content-type")).toBe("application/x-ndjson");
    // Both forms name Accept in Vary: a cache must not answer one with the other.
    expect(alias.headers.get("vary")).toMatch(/accept/i);
    expect(lines(await alias.text())).toHaveLength(4);
    for (const accept of ["*/*", "application/json, application/x-ndjson;q=0.5"]) {
      const res = await fetch(`${records}?offset=0`, { headers: { accept } });
      expect(res.headers.get("content-type"), accept).toBe("application/json");
      expect(res.headers.get("vary"), accept).toMatch(/accept/i);
      expect(res.headers.get("next-offset"), accept).toBeNull();
      expect(((await res.json()) as { records: unknown[] }).records).toHaveLength(4);
    }
    // HEAD: the GET's status and headers, no body.
    const head = await fetch(`${records}?offset=0`, { method: "HEAD", headers: ndjson });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("application/x-ndjson");
    expect(bounds(head)).toEqual({ next: "4", high: "4", start: "0" });
    expect(await head.text()).toBe("");
  });

  it("a reader following Next-Offset reads every record once; at the end the body is empty", async () => {
    const broker = await start();
    const values = Array.from({ length: 250 }, (_, i) => `v${i}`);
    await produce(
      broker,
      values.map((value) => ({ value })),
    );
    const seen: string[] = [];
    let offset = "earliest";
    for (let pages = 0; pages < 10; pages++) {
      const res = await fetch(
        `${broker.httpUrl}/v1/topics/orders/partitions/0/records?offset=${offset}&max_records=60`,
        { headers: ndjson },
      );
      expect(res.status).toBe(200);
      const page = lines(await res.text()) as { offset: number; value: string }[];
      for (const r of page) seen.push(r.value);
      const next = res.headers.get("next-offset");
      expect(next).not.toBeNull();
      if (page.length === 0) {
        expect(bounds(res)).toEqual({ next: "250", high: "250", start: "0" });
        break;
      }
      expect(Number(next)).toBe(page[page.length - 1].offset + 1);
      offset = next as string;
    }
    expect(seen).toEqual(values);
  });

  it("pipelined fetches read slowly each get their own records whole", async () => {
    const broker = await start();
    // Values that name their record, ~300 bytes each: answers of ~100–200 KB, larger than a
    // socket takes at once, so they wait in the broker while later answers are written.
    const value = (i: number) => `r${i}-${"x".repeat(290)}`;
    for (let from = 0; from < 2400; from += 800)
      await produce(
        broker,
        Array.from({ length: 800 }, (_, i) => ({ value: value(from + i) })),
      );
    const asks = Array.from({ length: 12 }, (_, k) => ({
      offset: (k * 397) % 2000,
      ndjson: k % 3 !== 2,
      base64: k % 4 === 3,
    }));
    const url = new URL(broker.httpUrl);
    const socket = net.connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    socket.pause();
    socket.write(
      asks
        .map(
          (a) =>
            `GET /v1/topics/orders/partitions/0/records?offset=${a.offset}&max_records=400${a.base64 ? "&encoding=base64" : ""} HTTP/1.1\r\nHost: ${url.host}\r\n${a.ndjson ? "Accept: application/x-ndjson\r\n" : ""}\r\n`,
        )
        .join(""),
    );
    // Read nothing for a while: the broker's answers pile up behind a full socket.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const bodies: string[] = [];
    let buffered = Buffer.alloc(0);
    await new Promise<void>((resolve, reject) => {
      socket.on("error", reject);
      socket.on("data", (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        for (;;) {
          const headEnd = buffered.indexOf("\r\n\r\n");
          if (headEnd < 0) return;
          const head = buffered.toString("latin1", 0, headEnd);
          if (!head.startsWith("HTTP/1.1 200 ")) return reject(new Error(head));
          const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]);
          if (buffered.length < headEnd + 4 + length) return;
          bodies.push(buffered.toString("utf8", headEnd + 4, headEnd + 4 + length));
          buffered = buffered.subarray(headEnd + 4 + length);
          if (bodies.length === asks.length) resolve();
        }
      });
      socket.resume();
    });
    socket.destroy();
    asks.forEach((a, k) => {
      const records = (
        a.ndjson ? lines(bodies[k]) : (JSON.parse(bodies[k]) as { records: unknown[] }).records
      ) as { offset: number; value: string }[];
      expect(records.length, `answer ${k}`).toBe(400);
      records.forEach((r, i) => {
        expect(r.offset).toBe(a.offset + i);
        const text = a.base64 ? Buffer.from(r.value, "base64").toString() : r.value;
        expect(text, `answer ${k}, record ${i}`).toBe(value(a.offset + i));
      });
    });
  });

  it("a long-poll at the end answers with the record that arrives", async () => {
    const broker = await start();
    const poll = fetch(
      `${broker.httpUrl}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=10000&encoding=base64`,
      { headers: ndjson },
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    await produce(broker, [{ value: "late" }]);
    const res = await poll;
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    expect(bounds(res)).toEqual({ next: "1", high: "1", start: "0" });
    expect(lines(await res.text())).toEqual([
      { offset: 0, timestamp: expect.any(Number), key: null, value: "bGF0ZQ==" },
    ]);
  });

  it("bad input gets the same JSON error as without NDJSON", async () => {
    const broker = await start();
    const records = `${broker.httpUrl}/v1/topics/orders/partitions/0/records`;
    const cases: [string, number, string, string | undefined][] = [
      ["?offset=0&encoding=hex", 400, "invalid_request", "encoding"],
      ["?offset=0&max_records=0", 400, "invalid_request", "max_records"],
      ["", 400, "invalid_request", "offset"],
      ["?offset=5", 416, "offset_out_of_range", undefined],
    ];
    for (const [query, status, code, parameter] of cases) {
      const res = await fetch(`${records}${query}`, { headers: ndjson });
      expect(res.status, query).toBe(status);
      expect(res.headers.get("content-type"), query).toMatch(/^application\/json/);
      expect(res.headers.get("next-offset"), query).toBeNull();
      const body = (await res.json()) as {
        error: { code: string; details?: { parameter?: string } };
      };
      expect(body.error.code, query).toBe(code);
      if (parameter !== undefined) expect(body.error.details?.parameter, query).toBe(parameter);
    }
    const missing = await fetch(`${broker.httpUrl}/v1/topics/nope/partitions/0/records?offset=0`, {
      headers: ndjson,
    });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe(
      "topic_not_found",
    );
  });
  it("a produce body of several JSON lines sent without the NDJSON content type is refused with a hint to send it as NDJSON", async () => {
    const broker = await start();
    const url = `${broker.httpUrl}/v1/topics/orders/records`;
    const lines = '{"value":"login"}\n{"value":"logout"}\n';
    const hint =
      "a body of several JSON objects, one a line, is NDJSON: send Content-Type: application/x-ndjson, with curl --data-binary @FILE (curl -d strips the newlines)";
    // curl -d @file: form content type, newlines stripped; fetch of a string: text/plain; and
    // the lines as they are under application/json.
    for (const [type, body] of [
      ["application/x-www-form-urlencoded", lines.replaceAll("\n", "")],
      ["text/plain;charset=UTF-8", lines],
      ["application/json", lines],
    ]) {
      const res = await fetch(url, { method: "POST", headers: { "content-type": type }, body });
      expect(res.status, type).toBe(400);
      const error = ((await res.json()) as { error: { code: string; message: string } }).error;
      expect(error.code, type).toBe("invalid_request");
      expect(error.message, type).toMatch(
        /^Cannot produce to topic "orders": the body is not valid JSON: /,
      );
      expect(error.message.endsWith(`; ${hint}`), error.message).toBe(true);
    }
    // Other bad JSON gets no such hint.
    const other = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"records": [',
    });
    expect(other.status).toBe(400);
    expect(((await other.json()) as { error: { message: string } }).error.message).not.toContain(
      "NDJSON",
    );
    // Sent as NDJSON, the same lines are two records.
    const ok = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: lines,
    });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { offsets: unknown[] }).offsets).toHaveLength(2);
  });
});
