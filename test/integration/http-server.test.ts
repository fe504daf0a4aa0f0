import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalBroker } from "../../src/broker/broker.ts";
import { encodeBase64 } from "../../src/lib/base64.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { fetchWaitMsMax } from "../../src/lib/limits.ts";
import { partitionForKey } from "../../src/lib/murmur2.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { serveHttp } from "../../src/runtime/http.ts";
import type { HttpServer } from "../../src/runtime/http.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";

interface FetchBody {
  records: { offset: number; timestamp: number; key: string | null; value: string }[];
  next_offset: number;
  high_watermark: number;
  log_start_offset: number;
}

let dataDir: string;
let broker: LocalBroker;
let server: HttpServer;
let logger: MemoryLogger;
let base: string;

async function start(): Promise<void> {
  logger = new MemoryLogger();
  broker = await LocalBroker.open({
    fs: new NodeFileSystem(),
    dataDir,
    clock: systemClock,
    logger,
  });
  server = await serveHttp(createHttpApp({ broker, logger }), { host: "127.0.0.1", port: 0 });
  base = `http://127.0.0.1:${server.port}`;
}

async function stop(): Promise<void> {
  await server.close();
  await broker.close();
}

beforeEach(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "es-broker-http-"));
  await start();
});

afterEach(async () => {
  await stop();
  rmSync(dataDir, { recursive: true, force: true });
});

function post(path: string, body: unknown, contentType = "application/json"): Promise<Response> {
  return fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": contentType },
    body: typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
}

async function json<T>(res: Response, status: number): Promise<T> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return JSON.parse(text) as T;
}

async function fetchPartition(
  topic: string,
  partition: number,
  query = "offset=0",
): Promise<FetchBody> {
  return json<FetchBody>(
    await fetch(`${base}/v1/topics/${topic}/partitions/${partition}/records?${query}`),
    200,
  );
}

async function highWatermarks(topic: string): Promise<number[]> {
  const body = await json<{ partitions: { high_watermark: number }[] }>(
    await fetch(`${base}/v1/topics/${topic}`),
    200,
  );
  return body.partitions.map((p) => p.high_watermark);
}

describe("HTTP over serveHttp with LocalBroker on disk", () => {
  it("creates, lists, describes and deletes topics with the documented statuses", async () => {
    const created = await json<{
      name: string;
      partitions: unknown[];
      config: Record<string, unknown>;
    }>(
      await post("/v1/topics", { name: "orders", partitions: 3, config: { retention_ms: 60_000 } }),
      201,
    );
    expect(created.name).toBe("orders");
    expect(created.partitions).toEqual(
      [0, 1, 2].map((partition) => ({
        partition,
        log_start_offset: 0,
        high_watermark: 0,
        size_bytes: 0,
        segments: expect.any(Number),
        fenced: false,
      })),
    );
    expect(created.config.retention_ms).toBe(60_000);

    expect(
      (
        await json<{ error: { code: string } }>(
          await post("/v1/topics", { name: "orders", partitions: 1 }),
          409,
        )
      ).error.code,
    ).toBe("topic_exists");
    expect(
      (
        await json<{ error: { code: string } }>(
          await post("/v1/topics", { name: "no/slash", partitions: 1 }),
          400,
        )
      ).error.code,
    ).toBe("invalid_topic_name");
    expect(
      (
        await json<{ error: { code: string } }>(
          await post("/v1/topics", { name: "t", partitions: 1, config: { nope: 1 } }),
          400,
        )
      ).error.code,
    ).toBe("invalid_config");
    expect(
      (
        await json<{ error: { code: string } }>(
          await post("/v1/topics", { name: "t", partitions: 0 }),
          400,
        )
      ).error.code,
    ).toBe("invalid_config");

    const list = await json<{ topics: { name: string }[] }>(await fetch(`${base}/v1/topics`), 200);
    expect(list.topics.map((t) => t.name)).toEqual(["orders"]);

    const deleted = await fetch(`${base}/v1/topics/orders`, { method: "DELETE" });
    expect(deleted.status).toBe(204);
    expect(
      (await json<{ error: { code: string } }>(await fetch(`${base}/v1/topics/orders`), 404)).error
        .code,
    ).toBe("topic_not_found");
  });

  it("produces JSON records to the partitions they name, answers offsets in request order, and fetches them back", async () => {
    await post("/v1/topics", { name: "orders", partitions: 3 });
    const binary = new Uint8Array([0, 1, 2, 255]);
    const produced = await json<{ offsets: { partition: number; offset: number }[] }>(
      await post("/v1/topics/orders/records", {
        records: [
          { key: "a", value: "first", partition: 2 },
          { value: "second", partition: 0, timestamp: 1_000 },
          { key_b64: "AAE=", value_b64: encodeBase64(binary), partition: 2 },
          { key: "user-7", value: "by key" },
        ],
      }),
      200,
    );
    const keyed = partitionForKey(utf8("user-7"), 3);
    expect(produced.offsets.slice(0, 3)).toEqual([
      { partition: 2, offset: 0 },
      { partition: 0, offset: 0 },
      { partition: 2, offset: 1 },
    ]);
    expect(produced.offsets[3].partition).toBe(keyed);

    const p2 = await fetchPartition("orders", 2, "offset=0&encoding=base64");
    expect(p2.records.map((r) => [r.offset, r.key, r.value])).toEqual([
      [0, encodeBase64(utf8("a")), encodeBase64(utf8("first"))],
      [1, "AAE=", encodeBase64(binary)],
      ...(keyed === 2 ? [[2, encodeBase64(utf8("user-7")), encodeBase64(utf8("by key"))]] : []),
    ]);
    const p0 = await fetchPartition("orders", 0);
    expect(p0.records[0]).toEqual({ offset: 0, timestamp: 1_000, key: null, value: "second" });
    expect(p0.high_watermark).toBe(keyed === 0 ? 2 : 1);
    expect(p0.log_start_offset).toBe(0);
  });

  it("appends nothing when one record of the request is bad", async () => {
    await post("/v1/topics", { name: "orders", partitions: 2 });
    await post("/v1/topics/orders/records", {
      records: [
        { value: "x", partition: 0 },
        { value: "y", partition: 1 },
      ],
    });
    const before = await highWatermarks("orders");
    const res = await post("/v1/topics/orders/records", {
      records: [
        { value: "ok", partition: 0 },
        { value: "ok", partition: 1 },
        { value: "a", value_b64: "YQ==" },
      ],
    });
    const error = await json<{ error: { code: string; message: string; details: unknown } }>(
      res,
      400,
    );
    expect(error.error.code).toBe("invalid_request");
    expect(error.error.details).toEqual({ record: 2, field: "value_b64" });
    const partitionMissing = await post("/v1/topics/orders/records", {
      records: [
        { value: "ok", partition: 0 },
        { value: "no", partition: 9 },
      ],
    });
    expect((await json<{ error: { code: string } }>(partitionMissing, 404)).error.code).toBe(
      "partition_not_found",
    );
    const tooFarAhead = await post("/v1/topics/orders/records", {
      records: [
        { value: "ok", partition: 0 },
        { value: "late", partition: 1, timestamp: Date.now() + 10 * 3600_000 },
      ],
    });
    expect((await json<{ error: { code: string } }>(tooFarAhead, 400)).error.code).toBe(
      "invalid_timestamp",
    );
    expect(await highWatermarks("orders")).toEqual(before);
  });

  it("produces NDJSON from a file body, one record per line, trailing newline and blank lines making none", async () => {
    await post("/v1/topics", { name: "logs", partitions: 2 });
    const file = utf8('{"level":"info"}\n{"level":"warn"}\n\n{"level":"error"}\n');
    const produced = await json<{ offsets: { partition: number; offset: number }[] }>(
      await post("/v1/topics/logs/records?partition=1&key=host-1", file, "application/x-ndjson"),
      200,
    );
    expect(produced.offsets).toEqual([0, 1, 2].map((offset) => ({ partition: 1, offset })));
    const fetched = await fetchPartition("logs", 1);
    expect(fetched.records.map((r) => [r.key, r.value])).toEqual([
      ["host-1", '{"level":"info"}'],
      ["host-1", '{"level":"warn"}'],
      ["host-1", '{"level":"error"}'],
    ]);
  });

  it("takes a large NDJSON body in whole, byte for byte, with a Content-Length and chunked", async () => {
    await post("/v1/topics", { name: "big", partitions: 1 });
    const lines = Array.from(
      { length: 3000 },
      (_, i) => `${i}:${"abcdefghij".repeat(20)}:${i % 97}`,
    );
    const file = utf8(lines.join("\n"));
    expect(file.length).toBeGreaterThan(4 * 64 * 1024); // many socket reads, so the body is assembled from chunks
    const sized = await json<{ offsets: unknown[] }>(
      await post("/v1/topics/big/records", file, "application/x-ndjson"),
      200,
    );
    expect(sized.offsets).toHaveLength(3000);
    const pieces = [file.subarray(0, 1000), file.subarray(1000, 200_000), file.subarray(200_000)];
    const streamed = await fetch(`${base}/v1/topics/big/records`, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: new ReadableStream({
        pull(controller) {
          const piece = pieces.shift();
          if (piece === undefined) controller.close();
          else controller.enqueue(piece);
        },
      }),
      duplex: "half",
    } as RequestInit);
    expect((await json<{ offsets: unknown[] }>(streamed, 200)).offsets).toHaveLength(3000);
    const values: string[] = [];
    for (let offset = 0; offset < 6000; ) {
      const page = await fetchPartition("big", 0, `offset=${offset}&max_records=1000`);
      values.push(...page.records.map((r) => r.value));
      offset = page.next_offset;
    }
    expect(values).toEqual([...lines, ...lines]);
  });

  it("answers 416 for an offset past the high watermark and 400 for bad parameters", async () => {
    await post("/v1/topics", { name: "orders", partitions: 1 });
    const past = await fetch(`${base}/v1/topics/orders/partitions/0/records?offset=1`);
    expect((await json<{ error: { code: string } }>(past, 416)).error.code).toBe(
      "offset_out_of_range",
    );
    const bad = await fetch(
      `${base}/v1/topics/orders/partitions/0/records?offset=0&max_bytes=${2 ** 40}`,
    );
    expect((await json<{ error: { message: string } }>(bad, 400)).error.message).toMatch(
      /query parameter "max_bytes"/,
    );
  });

  it("a long-poll returns the record produced while it waits", async () => {
    await post("/v1/topics", { name: "orders", partitions: 1 });
    const polling = fetch(
      `${base}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=${fetchWaitMsMax}`,
    );
    await post("/v1/topics/orders/records", { records: [{ value: "woke", partition: 0 }] });
    const body = await json<FetchBody>(await polling, 200);
    expect(body.records.map((r) => r.value)).toEqual(["woke"]);
    expect(body.next_offset).toBe(1);
  });

  it("streams records as Server-Sent Events in order, and close() ends the stream cleanly", async () => {
    await post("/v1/topics", { name: "orders", partitions: 1 });
    await post("/v1/topics/orders/records", { records: [{ value: "old", partition: 0 }] });
    const res = await fetch(`${base}/v1/topics/orders/partitions/0/stream`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    const readUntil = async (pattern: RegExp): Promise<void> => {
      while (!pattern.test(text)) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`stream ended before ${pattern}: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
    };
    await readUntil(/from offset 1\n\n/);
    await post("/v1/topics/orders/records", {
      records: [
        { value: "a", partition: 0 },
        { value: "b", partition: 0 },
      ],
    });
    await post("/v1/topics/orders/records", { records: [{ key: "k", value: "c", partition: 0 }] });
    await readUntil(/id: 3\n/);
    const events = [...text.matchAll(/id: (\d+)\nevent: record\ndata: (.*)\n\n/g)].map((m) => ({
      id: Number(m[1]),
      data: JSON.parse(m[2]) as { offset: number; key: string | null; value: string },
    }));
    expect(events.map(({ id, data }) => [id, data.offset, data.key, data.value])).toEqual([
      [1, 1, null, "a"],
      [2, 2, null, "b"],
      [3, 3, "k", "c"],
    ]);
    const closing = server.close();
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
    }
    await closing;
  });

  it("keeps acknowledged records across a broker restart", async () => {
    await post("/v1/topics", { name: "orders", partitions: 1 });
    await post("/v1/topics/orders/records", { records: [{ value: "durable", partition: 0 }] });
    await stop();
    await start();
    const fetched = await fetchPartition("orders", 0);
    expect(fetched.records.map((r) => r.value)).toEqual(["durable"]);
  });

  it("never answers 500 to client input (no internal errors logged)", async () => {
    await post("/v1/topics", { name: "orders", partitions: 1 });
    await post("/v1/topics/orders/records", "{", "application/json");
    await post("/v1/topics/orders/records", {
      records: [{ value: "a", partition: 4_000_000_000 }],
    });
    await fetch(
      `${base}/v1/topics/orders/partitions/0/records?offset=0&wait_ms=0&max_records=100000`,
    );
    await fetch(`${base}/v1/topics/orders/partitions/2147483647/records?offset=0`);
    await fetch(`${base}/v1/topics/${"x".repeat(300)}`);
    expect(logger.named("http.internal_error")).toEqual([]);
  });
});
