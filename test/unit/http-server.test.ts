import { afterEach, beforeEach, describe, expect, it } from "vitest";
import * as http from "node:http";
import * as net from "node:net";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { fetchWaitMsMax } from "../../src/lib/limits.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { asksToUpgrade, serveHttp } from "../../src/runtime/http.ts";
import type { HttpServer } from "../../src/runtime/http.ts";
import { FakeBroker } from "./http-fake-broker.ts";
import { EntryCursor } from "../../src/storage/record.ts";
import { exchangeRaw } from "../e2e/raw-http.ts";

const maxRequestBytes = 64 * 1024;
let broker: FakeBroker;
let logger: MemoryLogger;
let server: HttpServer;
let base: string;

beforeEach(async () => {
  broker = new FakeBroker();
  logger = new MemoryLogger();
  await broker.createTopic({ name: "orders", partitions: 1 });
  server = await serveHttp(createHttpApp({ broker, logger, maxRequestBytes }), {
    host: "127.0.0.1",
    port: 0,
    maxRequestBytes,
  });
  base = `http://127.0.0.1:${server.port}`;
});

afterEach(async () => {
  await server.close();
});

/** Sends a raw request with node:http and reports the response, however the connection ends. */
function rawRequest(options: {
  path: string;
  headers: Record<string, string>;
  write: (req: http.ClientRequest, responded: () => boolean) => Promise<void>;
}) {
  return new Promise<{ status: number; body: string; bytesWritten: number }>((resolve, reject) => {
    let gotResponse = false;
    let bytesWritten = 0;
    const req = http.request(
      {
        host: "127.0.0.1",
        port: server.port,
        method: "POST",
        path: options.path,
        headers: options.headers,
      },
      (res) => {
        gotResponse = true;
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => {
          // Like a real client: having its answer, it stops sending and lets go of the connection.
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body, bytesWritten });
        });
        res.on("error", reject);
      },
    );
    req.on("error", (error) => {
      if (!gotResponse) reject(error);
    });
    const originalWrite = req.write.bind(req);
    req.write = ((chunk: Uint8Array, ...rest: never[]) => {
      bytesWritten += chunk.length;
      return originalWrite(chunk, ...rest);
    }) as typeof req.write;
    options.write(req, () => gotResponse).catch(() => {});
  });
}

describe("serveHttp", () => {
  it("binds a free port for port 0 and serves the app", async () => {
    expect(server.port).toBeGreaterThan(0);
    const res = await fetch(`${base}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("answers 413 from Content-Length before the body is sent", async () => {
    const result = await rawRequest({
      path: "/v1/topics/orders/records",
      headers: { "content-type": "application/json", "content-length": String(100 * 1024 * 1024) },
      // Send only the headers and a few bytes: the answer must not wait for the other 100 MiB.
      write: async (req) => {
        req.write(new TextEncoder().encode('{"records":['));
      },
    });
    expect(result.status).toBe(413);
    expect(JSON.parse(result.body)).toEqual({
      error: {
        code: "request_too_large",
        message: `Cannot accept the request: the body is over the limit of ${maxRequestBytes} bytes (the broker's --max-request-bytes)`,
        details: { limit_bytes: maxRequestBytes },
      },
    });
    expect(broker.produced).toHaveLength(0);
  });

  it("answers 413 to an endless chunked body once the cap is passed, without waiting for its end", async () => {
    const chunk = new Uint8Array(16 * 1024).fill(0x61);
    const result = await rawRequest({
      path: "/v1/topics/orders/records",
      headers: { "content-type": "application/x-ndjson", "transfer-encoding": "chunked" },
      write: async (req, responded) => {
        // Never ends the body; stops only once the server has answered or the socket is gone.
        let sent = 0;
        while (!responded() && !req.destroyed && sent < 1024 * 1024 * 1024) {
          sent += chunk.length;
          if (!req.write(chunk))
            await new Promise((resolve) => {
              req.once("drain", resolve);
              req.once("close", resolve);
            });
        }
      },
    });
    expect(result.status).toBe(413);
    expect(JSON.parse(result.body).error.code).toBe("request_too_large");
    expect(broker.produced).toHaveLength(0);
  });

  it("answers 413 via fetch() for a body over the cap, and 200 for one at the cap", async () => {
    const over = await fetch(`${base}/v1/topics/orders/records`, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: "x".repeat(maxRequestBytes + 1),
    });
    expect(over.status).toBe(413);
    expect(((await over.json()) as { error: { code: string } }).error.code).toBe(
      "request_too_large",
    );
    const at = await fetch(`${base}/v1/topics/orders/records`, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: "x".repeat(maxRequestBytes),
    });
    expect(at.status).toBe(200);
  });

  it("ends the broker long-poll when the client disconnects", async () => {
    const controller = new AbortController();
    const polling = fetch(
      `${base}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=${fetchWaitMsMax}`,
      { signal: controller.signal },
    ).catch((e: unknown) => e);
    await broker.whenWaiting(1);
    controller.abort();
    await polling;
    while (broker.waitingFetches > 0) await new Promise((resolve) => setImmediate(resolve));
    expect(broker.waitingFetches).toBe(0);
  });

  it("close() ends long-polls and event streams cleanly and lets an in-flight produce finish", async () => {
    const poll = fetch(
      `${base}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=${fetchWaitMsMax}`,
    );
    const stream = await fetch(`${base}/v1/topics/orders/partitions/0/stream`);
    expect(stream.status).toBe(200);
    const streamText = stream.text();
    await broker.whenWaiting(2);

    let release!: () => void;
    broker.holdProduce = new Promise((resolve) => (release = resolve));
    const produce = fetch(`${base}/v1/topics/orders/records`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ records: [{ value: "in flight" }] }),
    });
    while (broker.produced.length === 0) await new Promise((resolve) => setImmediate(resolve));

    let closed = false;
    const closing = server.close().then(() => (closed = true));
    const polled = await poll;
    expect(polled.status).toBe(200);
    expect(((await polled.json()) as { records: unknown[] }).records).toEqual([]);
    expect(await streamText).toMatch(
      /^: es-broker stream of partition "orders\/0" from offset 0\n\n$/,
    );
    expect(closed).toBe(false);

    release();
    const produced = await produce;
    expect(produced.status).toBe(200);
    expect(await produced.json()).toEqual({ offsets: [{ partition: 0, offset: 0 }] });
    await closing;
    expect(closed).toBe(true);
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
  });

  it("close() called twice returns the same promise", async () => {
    const a = server.close();
    const b = server.close();
    expect(a).toBe(b);
    await a;
  });
});

/** The values of every record the broker was asked to produce, in order. */
function producedValues(): string[] {
  const values: string[] = [];
  for (const request of broker.produced) {
    const cursor = new EntryCursor(request.batch);
    while (cursor.next()) {
      const keyBytes = Math.max(cursor.keyLen, 0);
      values.push(
        Buffer.from(
          request.batch.bytes.subarray(cursor.start + 16 + keyBytes, cursor.end),
        ).toString(),
      );
    }
  }
  return values;
}

/**
 * Opens a raw TCP connection, sends `head` and then each of `pieces` (each once the previous one
 * was handed to the kernel), optionally half-closes, and resolves with everything the server sent
 * once it closes the connection (or `untilResponses` responses have begun).
 */
function rawExchange(options: {
  head: string;
  pieces: Uint8Array[];
  end: boolean;
  untilResponses?: number;
}): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, "127.0.0.1");
    let received = "";
    const done = () => {
      socket.destroy();
      resolve(received);
    };
    socket.on("data", (d) => {
      received += d.toString("latin1");
      const responses = received.split("HTTP/1.1 ").length - 1;
      if (
        options.untilResponses !== undefined &&
        responses >= options.untilResponses &&
        /\r\n\r\n[\s\S]*\}\s*$/.test(received)
      )
        done();
    });
    socket.on("close", done);
    socket.on("error", (e) => (received === "" ? reject(e) : done()));
    socket.on("connect", async () => {
      const write = (bytes: Uint8Array | string) =>
        new Promise<void>((r) => socket.write(bytes, () => r()));
      await write(options.head);
      for (const piece of options.pieces) await write(piece);
      if (options.end) socket.end();
    });
  });
}

/** NDJSON lines `prefix-0` … padded so that the body is exactly `bytes` long. */
function ndjsonBody(bytes: number, prefix: string): { body: Uint8Array; lines: string[] } {
  const lines: string[] = [];
  let size = 0;
  while (size + 40 < bytes) {
    const line = `${prefix}-${lines.length}-${"x".repeat(20)}`;
    lines.push(line);
    size += line.length + 1;
  }
  const last = `${prefix}-last-`.padEnd(bytes - size - 1, "y");
  lines.push(last);
  const body = new TextEncoder().encode(`${lines.join("\n")}\n`);
  expect(body.length).toBe(bytes);
  return { body, lines };
}

/** `bytes` cut into pieces of `size` bytes. */
function piecesOf(bytes: Uint8Array, size: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
  return out;
}

describe("serveHttp request bodies with a Content-Length (assembled in one buffer from halfway)", () => {
  const head = (length: number) =>
    `POST /v1/topics/orders/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: ${length}\r\n\r\n`;

  it("takes a body of exactly the cap, sent in many small pieces, byte for byte", async () => {
    const { body, lines } = ndjsonBody(maxRequestBytes, "cap");
    const reply = await rawExchange({
      head: head(body.length),
      pieces: piecesOf(body, 1000),
      end: false,
      untilResponses: 1,
    });
    expect(reply).toMatch(/^HTTP\/1.1 200 /);
    expect(producedValues()).toEqual(lines);
  });

  it("answers 413 naming the limit to a Content-Length of the cap + 1, and appends nothing", async () => {
    const { body } = ndjsonBody(maxRequestBytes + 1, "over");
    const reply = await rawExchange({
      head: head(body.length),
      pieces: piecesOf(body, 1000),
      end: false,
      untilResponses: 1,
    });
    expect(reply).toMatch(/^HTTP\/1.1 413 /);
    const json = JSON.parse(reply.slice(reply.indexOf("\r\n\r\n") + 4)) as {
      error: { code: string; message: string; details: unknown };
    };
    expect(json.error).toEqual({
      code: "request_too_large",
      message: `Cannot accept the request: the body is over the limit of ${maxRequestBytes} bytes (the broker's --max-request-bytes)`,
      details: { limit_bytes: maxRequestBytes },
    });
    expect(broker.produced).toHaveLength(0);
  });

  it("appends nothing when the client stops before its Content-Length, even with whole lines and more than half sent", async () => {
    // Whole lines up to the cut: were the short body taken as complete, it would be a valid smaller produce.
    for (const fraction of [0.25, 0.5, 0.75, 0.99]) {
      const { body } = ndjsonBody(20_000, "short");
      const cut = body.subarray(0, Math.floor(body.length * fraction)).lastIndexOf(0x0a) + 1;
      await rawExchange({
        head: head(body.length),
        pieces: piecesOf(body.subarray(0, cut), 700),
        end: true,
      });
      // A later request on another connection is served (the server did not stall), and the broker saw no produce.
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect(broker.produced, `cut at ${cut} of ${body.length}`).toHaveLength(0);
    }
  });

  it("appends nothing when the client resets the connection mid-body, after more than half", async () => {
    const { body } = ndjsonBody(30_000, "reset");
    await new Promise<void>((resolve) => {
      const socket = net.connect(server.port, "127.0.0.1", async () => {
        const write = (bytes: Uint8Array | string) =>
          new Promise<void>((r) => socket.write(bytes, () => r()));
        await write(head(body.length));
        for (const piece of piecesOf(body.subarray(0, 20_000), 1000)) await write(piece);
        socket.resetAndDestroy();
      });
      socket.on("close", () => resolve());
      socket.on("error", () => {});
    });
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect(broker.produced).toHaveLength(0);
  });

  it("takes exactly the Content-Length's bytes as the body when the client sends more, and refuses the rest as a broken next request", async () => {
    const { body, lines } = ndjsonBody(10_000, "more");
    // Content-Length covers the first two lines only; the rest follows at once on the same
    // connection, where Node's parser reads it as the next request and answers 400 (closing the
    // connection, so the 200 of the first may never be sent: a client that lies gets no answer).
    const firstTwo = lines[0].length + 1 + lines[1].length + 1;
    const reply = await rawExchange({
      head: head(firstTwo),
      pieces: piecesOf(body, 3000),
      end: false,
    });
    expect(reply).toMatch(/HTTP\/1.1 400 /);
    expect(producedValues()).toEqual(lines.slice(0, 2));
  });

  it("takes a chunked body of exactly the cap, and answers 413 to one byte more", async () => {
    const { body, lines } = ndjsonBody(maxRequestBytes, "chunked");
    const chunkedHead = `POST /v1/topics/orders/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n`;
    const encode = (bytes: Uint8Array) => {
      const pieces: Uint8Array[] = [];
      for (const piece of piecesOf(bytes, 5000))
        pieces.push(
          new TextEncoder().encode(`${piece.length.toString(16)}\r\n`),
          piece,
          new TextEncoder().encode("\r\n"),
        );
      pieces.push(new TextEncoder().encode("0\r\n\r\n"));
      return pieces;
    };
    const ok = await rawExchange({
      head: chunkedHead,
      pieces: encode(body),
      end: false,
      untilResponses: 1,
    });
    expect(ok).toMatch(/^HTTP\/1.1 200 /);
    expect(producedValues()).toEqual(lines);
    const over = ndjsonBody(maxRequestBytes + 1, "chunked-over");
    const refused = await rawExchange({
      head: chunkedHead,
      pieces: encode(over.body),
      end: false,
      untilResponses: 1,
    });
    expect(refused).toMatch(/^HTTP\/1.1 413 /);
    expect(refused).toContain(`over the limit of ${maxRequestBytes} bytes`);
    expect(broker.produced).toHaveLength(1);
  });
});

describe("asksToUpgrade", () => {
  it("is true only for an Upgrade field with the upgrade option among Connection's, in any case", () => {
    expect(asksToUpgrade("websocket", "Upgrade")).toBe(true);
    expect(asksToUpgrade("h2c", "keep-alive, UPGRADE ,HTTP2-Settings")).toBe(true);
    expect(asksToUpgrade("websocket", ["keep-alive", "upgrade"])).toBe(true);
    expect(asksToUpgrade("websocket", undefined)).toBe(false);
    expect(asksToUpgrade("websocket", "keep-alive")).toBe(false);
    expect(asksToUpgrade("websocket", "upgrades")).toBe(false);
    expect(asksToUpgrade(undefined, "upgrade")).toBe(false);
    expect(asksToUpgrade(null, null)).toBe(false);
  });
});

describe("serveHttp on a connection whose parser fails (node:http)", () => {
  const healthz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

  it("answers the requests pipelined before a malformed one, in order, then the JSON 400, then closes", async () => {
    const exchange = await exchangeRaw({
      host: "127.0.0.1",
      port: server.port,
      bytes: `${healthz}${healthz}${healthz}GARBAGE\r\n\r\n`,
    });
    expect(exchange.closed).toBe(true);
    expect(exchange.responses.map((r) => r.status)).toEqual([200, 200, 200, 400]);
    const last = exchange.responses[3];
    expect(last.headers.connection).toBe("close");
    expect(JSON.parse(last.body)).toEqual({
      error: {
        code: "invalid_request",
        message: expect.stringMatching(/^Cannot parse the request: .*; the connection is closed$/),
        details: { parser_error: "HPE_INVALID_METHOD" },
      },
    });
  });

  it("waits for a slow answer ahead of the fault before answering the fault", async () => {
    // A long-poll of 300 ms on a topic with nothing new, then garbage in the same write.
    const poll =
      "GET /v1/topics/orders/partitions/0/records?offset=0&wait_ms=300 HTTP/1.1\r\nHost: x\r\n\r\n";
    const exchange = await exchangeRaw({
      host: "127.0.0.1",
      port: server.port,
      bytes: `${poll}GARBAGE\r\n\r\n`,
    });
    expect(exchange.responses.map((r) => r.status)).toEqual([200, 400]);
    expect(JSON.parse(exchange.responses[0].body)).toMatchObject({ records: [] });
  });

  it("answers a request whose chunked body the parser refuses with that request's own JSON 400", async () => {
    const exchange = await exchangeRaw({
      host: "127.0.0.1",
      port: server.port,
      bytes: `${healthz}POST /v1/topics/orders/records HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"r\r\nzz\r\n`,
    });
    expect(exchange.closed).toBe(true);
    expect(exchange.responses.map((r) => r.status)).toEqual([200, 400]);
    expect(exchange.responses[1].headers.connection).toBe("close");
    expect(JSON.parse(exchange.responses[1].body).error.message).toMatch(
      /the request body could not be read: .*HPE_INVALID_CHUNK_SIZE/,
    );
    expect(broker.produced).toHaveLength(0);
  });

  it("answers headers over the limit with 431 headers_too_large", async () => {
    const exchange = await exchangeRaw({
      host: "127.0.0.1",
      port: server.port,
      bytes: `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(40_000)}\r\n\r\n`,
    });
    expect(exchange.responses.map((r) => r.status)).toEqual([431]);
    expect(JSON.parse(exchange.responses[0].body).error.code).toBe("headers_too_large");
  });
});
