/**
 * The Durable Streams routes over a real LocalBroker on the simulated disk, through the Hono app
 * (no sockets): what a failed fsync, a restart, the clock and the other front doors do to a
 * stream. The protocol itself is covered by the public conformance suite
 * (test/e2e/durable-streams-conformance.test.ts) against the real process.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { createHttpApp, type HttpApp } from "../../src/transport/http/app.ts";
import { openTestBroker } from "../helpers/broker.ts";

const text = (s: string) => new TextEncoder().encode(s);

function appOf(broker: LocalBroker): HttpApp {
  return createHttpApp({ broker, logger: new MemoryLogger(), streamLongPollMs: 50 });
}

async function put(
  app: HttpApp,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
) {
  return app.request(`/v1/stream/${path}`, {
    method: "PUT",
    headers: { "content-type": "text/plain", ...headers },
    body,
  });
}

async function post(
  app: HttpApp,
  path: string,
  body: string,
  headers: Record<string, string> = {},
) {
  return app.request(`/v1/stream/${path}`, {
    method: "POST",
    headers: { "content-type": "text/plain", ...headers },
    body,
  });
}

async function readText(app: HttpApp, path: string): Promise<string> {
  const res = await app.request(`/v1/stream/${path}?offset=-1`);
  expect(res.status).toBe(200);
  return res.text();
}

describe("Durable Streams over LocalBroker", () => {
  it("answers a failed fsync with 503 partition_fenced (no-store) and keeps serving what was acknowledged", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await openTestBroker({ fs, cleanupIntervalMs: 0 });
    const app = appOf(broker);
    expect((await put(app, "fenced", {}, "kept")).status).toBe(201);
    fs.faults.failNext({ op: "sync", path: /fenced\/0\/\d+\.log$/, code: "EIO" });
    const failed = await post(app, "fenced", "lost");
    expect(failed.status).toBe(503);
    expect(failed.headers.get("cache-control")).toBe("no-store");
    expect(((await failed.json()) as { error: { code: string } }).error.code).toBe(
      "partition_fenced",
    );
    const again = await post(app, "fenced", "refused");
    expect(again.status).toBe(503);
    expect(await readText(app, "fenced")).toBe("kept");
    // Other streams keep taking appends.
    expect((await put(app, "other", {}, "a")).status).toBe(201);
    expect((await post(app, "other", "b")).status).toBe(204);
  });

  it("keeps closure, TTL, fork origin, soft deletion and the last Stream-Seq across a restart", async () => {
    const fs = new MemoryFileSystem();
    const clock = new ManualClock();
    let { broker } = await openTestBroker({ fs, clock, cleanupIntervalMs: 0 });
    let app = appOf(broker);
    expect((await put(app, "src", { "stream-ttl": "3600" }, "a")).status).toBe(201);
    expect((await post(app, "src", "b", { "stream-seq": "005" })).status).toBe(204);
    expect((await put(app, "fork", { "stream-forked-from": "/v1/stream/src" })).status).toBe(201);
    expect((await post(app, "src", "c", { "stream-closed": "true" })).status).toBe(204);
    expect((await app.request("/v1/stream/src", { method: "DELETE" })).status).toBe(204);
    await broker.close();

    ({ broker } = await openTestBroker({ fs, clock, cleanupIntervalMs: 0 }));
    app = appOf(broker);
    expect((await app.request("/v1/stream/src", { method: "HEAD" })).status).toBe(410);
    expect((await put(app, "src")).status).toBe(409);
    const fork = await app.request("/v1/stream/fork", { method: "HEAD" });
    expect(fork.status).toBe(200);
    expect(fork.headers.get("stream-ttl")).toBe("3600");
    expect(fork.headers.get("stream-closed")).toBeNull();
    expect(await readText(app, "fork")).toBe("ab");
    // Deleting the last fork removes the soft-deleted source with it.
    expect((await app.request("/v1/stream/fork", { method: "DELETE" })).status).toBe(204);
    expect((await app.request("/v1/stream/src", { method: "HEAD" })).status).toBe(404);
    expect((await broker.listTopics()).map((t) => t.name)).toEqual([]);

    expect((await put(app, "seq")).status).toBe(201);
    expect((await post(app, "seq", "x", { "stream-seq": "b" })).status).toBe(204);
    expect((await post(app, "seq", "y")).status).toBe(204);
    expect((await post(app, "seq", "z", { "stream-closed": "true" })).status).toBe(204);
    expect((await put(app, "seq2")).status).toBe(201);
    expect((await post(app, "seq2", "x", { "stream-seq": "b" })).status).toBe(204);
    await broker.close();
    ({ broker } = await openTestBroker({ fs, clock, cleanupIntervalMs: 0 }));
    app = appOf(broker);
    const closed = await post(app, "seq", "late");
    expect(closed.status).toBe(409);
    expect(closed.headers.get("stream-closed")).toBe("true");
    expect(closed.headers.get("stream-next-offset")).toBe("0000000000000003_0000000000000000");
    // The last Stream-Seq is read back from the log (the key of the last keyed record).
    expect((await post(app, "seq2", "y", { "stream-seq": "a" })).status).toBe(409);
    expect((await post(app, "seq2", "y", { "stream-seq": "b" })).status).toBe(409);
    expect((await post(app, "seq2", "y", { "stream-seq": "c" })).status).toBe(204);
  });

  it("expires streams by the broker clock: reads and writes renew a TTL, HEAD does not, Expires-At is absolute", async () => {
    const clock = new ManualClock(1_800_000_000_000);
    const { broker } = await openTestBroker({ clock, cleanupIntervalMs: 0 });
    const app = appOf(broker);
    expect((await put(app, "ttl", { "stream-ttl": "10" }, "a")).status).toBe(201);
    const at = new Date(clock.nowMs() + 15_000).toISOString();
    expect((await put(app, "abs", { "stream-expires-at": at }, "a")).status).toBe(201);
    clock.advance(9_000);
    expect(await readText(app, "ttl")).toBe("a");
    expect(await readText(app, "abs")).toBe("a");
    clock.advance(9_000);
    expect((await app.request("/v1/stream/ttl", { method: "HEAD" })).status).toBe(200);
    expect((await app.request("/v1/stream/abs", { method: "HEAD" })).status).toBe(404);
    clock.advance(2_000);
    expect((await app.request("/v1/stream/ttl", { method: "HEAD" })).status).toBe(404);
    expect((await post(app, "ttl", "b")).status).toBe(404);
    // The expired streams' topics are removed (queued behind the answer).
    await new Promise((r) => setTimeout(r, 20));
    expect((await broker.listTopics()).map((t) => t.name)).toEqual([]);
    expect((await put(app, "ttl", {}, "new")).status).toBe(201);
    expect(await readText(app, "ttl")).toBe("new");
  });

  it("lets other front doors write a stream's topic only through the stream's gate", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    const app = appOf(broker);
    expect((await put(app, "shared", {}, "from-put ")).status).toBe(201);
    const batch = new EntryBatchBuilder().add(null, text("from-tcp ")).build();
    await broker.produce({ topic: "shared", partition: 0, batch });
    expect((await post(app, "shared", "from-post")).status).toBe(204);
    expect(await readText(app, "shared")).toBe("from-put from-tcp from-post");
    const topic = await app.request("/v1/topics/shared/partitions/0/records?offset=0");
    const body = (await topic.json()) as { records: { value: string }[] };
    expect(body.records.map((r) => r.value)).toEqual(["from-put ", "from-tcp ", "from-post"]);
    const described = (await (await app.request("/v1/topics/shared")).json()) as {
      stream?: { path: string; content_type: string };
    };
    expect(described.stream).toMatchObject({ path: "shared", content_type: "text/plain" });
    expect((await post(app, "shared", "", { "stream-closed": "true" })).status).toBe(204);
    await expect(broker.produce({ topic: "shared", partition: 0, batch })).rejects.toMatchObject({
      kind: { code: "stream_closed" },
    });
    // Deleting the topic through the topic api deletes the stream.
    expect((await app.request("/v1/topics/shared", { method: "DELETE" })).status).toBe(204);
    expect((await app.request("/v1/stream/shared", { method: "HEAD" })).status).toBe(404);
  });
});

describe("Durable Streams and topic configs", () => {
  it("refuse a schema subject on a stream's topic, whose records hold several messages each, and keep the other keys", async () => {
    const { broker } = await openTestBroker({ cleanupIntervalMs: 0 });
    const app = appOf(broker);
    expect((await put(app, "vs", { "content-type": "application/json" })).status).toBe(201);
    const [topic] = (await broker.listTopics()).map((t) => t.name);
    for (const key of ["value_schema_subject", "key_schema_subject"]) {
      const res = await app.request(`/v1/topics/${topic}`, {
        method: "PATCH",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ config: { [key]: "s", schema_format: "json" } }),
      });
      expect(res.status, key).toBe(400);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code, body.error.message).toBe("invalid_config");
      expect(body.error.message).toContain(key);
    }
    const ok = await app.request(`/v1/topics/${topic}`, {
      method: "PATCH",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ config: { retention_ms: 60_000 } }),
    });
    expect(ok.status).toBe(200);
    // Multi-message appends go on working.
    const appended = await app.request("/v1/stream/vs", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '[{"n":2},{"n":3}]',
    });
    expect(appended.status).toBe(204);
  });
});
