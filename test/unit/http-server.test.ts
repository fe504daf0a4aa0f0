import { afterEach, beforeEach, describe, expect, it } from "vitest";
import * as http from "node:http";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { fetchWaitMsMax } from "../../src/lib/limits.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { serveHttp } from "../../src/runtime/http.ts";
import type { HttpServer } from "../../src/runtime/http.ts";
import { FakeBroker } from "./http-fake-broker.ts";

const maxRequestBytes = 64 * 1024;
let broker: FakeBroker;
let logger: MemoryLogger;
let server: HttpServer;
let base: string;

beforeEach(async () => {
  broker = new FakeBroker();
  logger = new MemoryLogger();
  await broker.createTopic({ name: "orders", partitions: 1 });
  server = await serveHttp(createHttpApp({ broker, logger, maxRequestBytes }), { host: "127.0.0.1", port: 0, maxRequestBytes });
  base = `http://127.0.0.1:${server.port}`;
});

afterEach(async () => {
  await server.close();
});

/** Sends a raw request with node:http and reports the response, however the connection ends. */
function rawRequest(options: { path: string; headers: Record<string, string>; write: (req: http.ClientRequest, responded: () => boolean) => Promise<void> }) {
  return new Promise<{ status: number; body: string; bytesWritten: number }>((resolve, reject) => {
    let gotResponse = false;
    let bytesWritten = 0;
    const req = http.request({ host: "127.0.0.1", port: server.port, method: "POST", path: options.path, headers: options.headers }, (res) => {
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
    });
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
      error: { code: "request_too_large", message: `Cannot accept the request: the body is over the limit of ${maxRequestBytes} bytes`, details: { limit_bytes: maxRequestBytes } },
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
          if (!req.write(chunk)) await new Promise((resolve) => { req.once("drain", resolve); req.once("close", resolve); });
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
    expect(((await over.json()) as { error: { code: string } }).error.code).toBe("request_too_large");
    const at = await fetch(`${base}/v1/topics/orders/records`, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: "x".repeat(maxRequestBytes),
    });
    expect(at.status).toBe(200);
  });

  it("ends the broker long-poll when the client disconnects", async () => {
    const controller = new AbortController();
    const polling = fetch(`${base}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=${fetchWaitMsMax}`, { signal: controller.signal }).catch((e: unknown) => e);
    await broker.whenWaiting(1);
    controller.abort();
    await polling;
    while (broker.waitingFetches > 0) await new Promise((resolve) => setImmediate(resolve));
    expect(broker.waitingFetches).toBe(0);
  });

  it("close() ends long-polls and event streams cleanly and lets an in-flight produce finish", async () => {
    const poll = fetch(`${base}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=${fetchWaitMsMax}`);
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
    expect(await streamText).toMatch(/^: es-broker stream of partition "orders\/0" from offset 0\n\n$/);
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
