/**
 * Durable Streams end to end, beside the public conformance suite
 * (durable-streams-conformance.test.ts): a stream's bytes are records that every other front door
 * reads and writes; the official `@durable-streams/client` keeps an idempotent producer's messages
 * exactly once through a SIGKILL and a restart; hostile input gets the protocol's 4xx, never a 5xx.
 */
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { DurableStream, IdempotentProducer } from "@durable-streams/client";
import { streamTopicName } from "../../src/broker/streams/names.ts";
import { TcpClient } from "../../src/client/client.ts";
import { streamAppendMessagesMax } from "../../src/lib/limits.ts";
import { tempDir } from "../helpers/tmp.ts";
import { openRaw } from "./raw-http.ts";
import { runCli, scaled, startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function start(dataDir: string, extra: string[] = []): Promise<BrokerProcess> {
  const b = await startBroker(dataDir, extra);
  running.push(b);
  return b;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const decoder = new TextDecoder();

/** A URL path for a stream path: each segment percent-encoded. */
function streamUrl(base: string, path: string): string {
  return `${base}/v1/stream/${path.split("/").map(encodeURIComponent).join("/")}`;
}

/**
 * A fetch that an application would hand the client to ride out a broker restart: a request the
 * broker never answered (connection refused or reset) or answered with a 5xx is sent again, the
 * same bytes with the same producer headers, so the broker's deduplication keeps it exactly once.
 */
function retryingFetch(deadlineMs: number, counts: { retries: number }): typeof fetch {
  return async (input, init) => {
    const until = Date.now() + deadlineMs;
    for (;;) {
      try {
        const res = await fetch(input, init);
        if (res.status < 500) return res;
        await res.arrayBuffer();
      } catch (err) {
        if (Date.now() > until) throw err;
      }
      counts.retries++;
      await sleep(25);
    }
  };
}

describe(`[${target}] Durable Streams end to end`, () => {
  it("serves a stream appended through the protocol to HTTP fetch, TCP fetch and the CLI", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const path = "interop/café au lait";
    const url = streamUrl(broker.httpUrl, path);
    const put = await fetch(url, {
      method: "PUT",
      headers: { "content-type": "text/plain" },
      body: "one\n",
    });
    expect(put.status).toBe(201);
    for (const line of ["two\n", "three\n"])
      expect(
        (
          await fetch(url, {
            method: "POST",
            headers: { "content-type": "text/plain" },
            body: line,
          })
        ).status,
      ).toBe(204);
    const topic = streamTopicName(path);
    expect(topic).toBe("interop.caf_C3_A9_20au_20lait");

    const http = await fetch(`${broker.httpUrl}/v1/topics/${topic}/partitions/0/records?offset=0`);
    const body = (await http.json()) as { records: { offset: number; value: string }[] };
    expect(body.records.map((r) => [r.offset, r.value])).toEqual([
      [0, "one\n"],
      [1, "two\n"],
      [2, "three\n"],
    ]);
    const tcp = await TcpClient.connect(broker.tcp);
    const fetched = await tcp.fetch({ topic, partition: 0, offset: 0 });
    expect(fetched.records.map((r) => decoder.decode(r.value))).toEqual([
      "one\n",
      "two\n",
      "three\n",
    ]);
    await tcp.close();
    const addr = `${broker.tcp.host}:${broker.tcp.port}`;
    const consumed = await runCli(["consume", topic, "--from-beginning", "--broker", addr]);
    expect(consumed.code, consumed.stderr).toBe(0);
    expect(consumed.stdout.toString()).toBe("one\n\ntwo\n\nthree\n\n");
    const described = await runCli(["topics", "describe", topic, "--broker", addr]);
    expect(described.code, described.stderr).toBe(0);
  });

  it("serves through the protocol what the CLI and TCP produce into a topic created as a stream, and closes it to them too", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const url = streamUrl(broker.httpUrl, "from/cli");
    expect(
      (await fetch(url, { method: "PUT", headers: { "content-type": "text/plain" } })).status,
    ).toBe(201);
    const topic = streamTopicName("from/cli");
    const addr = `${broker.tcp.host}:${broker.tcp.port}`;
    const produced = await runCli(
      ["produce", topic, "--broker", addr],
      new TextEncoder().encode("a\nb\n"),
    );
    expect(produced.code, produced.stderr).toBe(0);
    const tcp = await TcpClient.connect(broker.tcp);
    await tcp.produce(topic, [{ value: "c" }]);
    const read = await fetch(`${url}?offset=-1`);
    expect(await read.text()).toBe("abc");
    expect(read.headers.get("stream-next-offset")).toBe("0000000000000003_0000000000000000");
    expect(
      (await fetch(url, { method: "POST", headers: { "stream-closed": "true" } })).status,
    ).toBe(204);
    await expect(tcp.produce(topic, [{ value: "late" }])).rejects.toMatchObject({
      code: "stream_closed",
    });
    await tcp.close();
    const late = await runCli(
      ["produce", topic, "--broker", addr],
      new TextEncoder().encode("late\n"),
    );
    expect(late.code).not.toBe(0);
    const eof = await fetch(`${url}?offset=0000000000000003_0000000000000000`);
    expect(await eof.text()).toBe("");
    expect(eof.headers.get("stream-closed")).toBe("true");
  });

  it("keeps an official client's idempotent appends exactly once through a SIGKILL and a restart", async () => {
    const { dir } = tempDir();
    let broker = await start(`${dir}/data`);
    const port = new URL(broker.httpUrl).port;
    const url = `${broker.httpUrl}/v1/stream/client/orders`;
    const stream = await DurableStream.create({ url, contentType: "application/json" });
    const errors: Error[] = [];
    const counts = { retries: 0 };
    const producer = new IdempotentProducer(stream, "orders-writer", {
      epoch: 0,
      maxInFlight: 4,
      lingerMs: 1,
      fetch: retryingFetch(30_000, counts),
      onError: (e) => errors.push(e),
    });
    const total = scaled(1500);
    const killAt = Math.floor(total / 3);
    let restarted: Promise<void> | null = null;
    for (let n = 0; n < total; n++) {
      producer.append(JSON.stringify({ n }));
      if (n % 50 === 49) await sleep(2);
      if (n === killAt) {
        await sleep(5); // requests in flight when the process dies
        await broker.stop("SIGKILL");
        running.splice(running.indexOf(broker), 1);
        // Appends go on while the broker is down, so some requests surely meet the dead port and
        // are sent again (whether any was in flight at the kill itself depends on timing).
        restarted = sleep(300).then(async () => {
          broker = await start(`${dir}/data`, ["--http-port", port]);
        });
      }
    }
    await restarted;
    await producer.flush();
    await producer.close(JSON.stringify({ n: total }));
    expect(errors).toEqual([]);
    expect(counts.retries, "requests met the dead broker and were sent again").toBeGreaterThan(0);

    const reader = new DurableStream({ url, contentType: "application/json" });
    const res = await reader.stream<{ n: number }>({ live: false });
    const items = await res.json();
    expect(items.length).toBe(total + 1);
    expect(items.map((i) => i.n)).toEqual(Array.from({ length: total + 1 }, (_, i) => i));
    const head = await fetch(url, { method: "HEAD" });
    expect(head.headers.get("stream-closed")).toBe("true");
  });

  it("applies the topic api's role table to streams: admin creates and deletes, producers append, consumers read", async () => {
    const { dir } = tempDir();
    const made = await runCli([
      "keys",
      "create",
      "--data-dir",
      `${dir}/data`,
      "--name",
      "root",
      "--role",
      "admin",
      "--out",
      `${dir}/admin.key`,
    ]);
    expect(made.code, made.stderr).toBe(0);
    const admin = readFileSync(`${dir}/admin.key`, "utf8").trim();
    const broker = await start(`${dir}/data`);
    const call = async (
      method: string,
      path: string,
      key?: string,
      body?: string,
      extra: Record<string, string> = {},
    ) => {
      const headers: Record<string, string> = { ...extra };
      if (key !== undefined) headers.authorization = `Bearer ${key}`;
      if (body !== undefined) headers["content-type"] ??= "text/plain";
      const res = await fetch(`${broker.httpUrl}${path}`, { method, headers, body });
      await res.arrayBuffer();
      return res.status;
    };
    const keyOf = async (name: string, role: string) => {
      const res = await fetch(`${broker.httpUrl}/v1/admin/keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
        body: JSON.stringify({ name, role, topics: ["orders.*"] }),
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { key: string }).key;
    };
    const producer = await keyOf("writer", "producer");
    const consumer = await keyOf("reader", "consumer");
    expect(await call("PUT", "/v1/stream/orders/a", undefined)).toBe(401);
    expect(await call("PUT", "/v1/stream/orders/a", producer)).toBe(403);
    expect(await call("PUT", "/v1/stream/orders/a", admin, "first ")).toBe(201);
    expect(await call("PUT", "/v1/stream/billing/a", admin)).toBe(201);
    expect(await call("POST", "/v1/stream/orders/a", producer, "second")).toBe(204);
    // A key's Producer-Ids are its own: the same id under two keys is two producers.
    const as = (epoch: string) => ({
      "producer-id": "p",
      "producer-epoch": epoch,
      "producer-seq": "0",
    });
    expect(await call("POST", "/v1/stream/orders/a", producer, " x", as("5"))).toBe(200);
    expect(await call("POST", "/v1/stream/orders/a", admin, " y", as("0"))).toBe(200);
    expect(await call("POST", "/v1/stream/orders/a", producer, " z", as("4"))).toBe(403);
    expect(await call("POST", "/v1/stream/orders/a", consumer, "no")).toBe(403);
    expect(await call("POST", "/v1/stream/billing/a", producer, "no")).toBe(403);
    expect(await call("GET", "/v1/stream/orders/a?offset=-1", producer)).toBe(403);
    expect(await call("GET", "/v1/stream/billing/a?offset=-1", consumer)).toBe(403);
    const read = await fetch(`${broker.httpUrl}/v1/stream/orders/a?offset=-1`, {
      headers: { authorization: `Bearer ${consumer}` },
    });
    expect(await read.text()).toBe("first second x y");
    // Read with a key: never reusable by a shared cache for a request without one (RFC 9111 §3.5).
    expect(read.headers.get("cache-control")).toBe(
      "private, max-age=60, stale-while-revalidate=300",
    );
    expect(read.headers.get("vary")).toBe("Authorization");
    const poll = await fetch(`${broker.httpUrl}/v1/stream/orders/a?offset=-1&live=long-poll`, {
      headers: { authorization: `Bearer ${admin}` },
    });
    expect(await poll.text()).toBe("first second x y");
    expect(poll.headers.get("cache-control")).toMatch(/^private,/);
    expect(poll.headers.get("vary")).toBe("Authorization");
    expect(await call("HEAD", "/v1/stream/orders/a", producer)).toBe(200);
    expect(await call("HEAD", "/v1/stream/orders/a", consumer)).toBe(200);
    expect(await call("DELETE", "/v1/stream/orders/a", producer)).toBe(403);
    // Revoking the consumer's key ends its live SSE read.
    const sse = await fetch(`${broker.httpUrl}/v1/stream/orders/a?offset=now&live=sse`, {
      headers: { authorization: `Bearer ${consumer}` },
    });
    expect(sse.status).toBe(200);
    const reader = sse.body!.getReader();
    await reader.read();
    expect(await call("DELETE", "/v1/admin/keys/reader", admin)).toBe(204);
    const started = Date.now();
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
    }
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await call("GET", "/v1/stream/orders/a?offset=-1", consumer)).toBe(401);
    expect(await call("DELETE", "/v1/stream/orders/a", admin)).toBe(204);
  });

  it("ends SSE and long-poll readers at once when their stream is deleted or expires; DELETE never waits for them", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    /** Opens an SSE reader and waits for its first control event; `done` has every byte read after it. */
    const openSse = async (url: string) => {
      const res = await fetch(`${url}?offset=-1&live=sse`);
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let first = "";
      while (!first.includes("event: control")) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the SSE ended before its first control event: ${first}`);
        first += decoder.decode(value);
      }
      const done = (async () => {
        let after = 0;
        let controls = 0;
        for (;;) {
          const { value, done: end } = await reader.read();
          if (end) return { after, controls };
          after += value.length;
          controls += decoder.decode(value).split("event: control").length - 1;
        }
      })();
      return { done };
    };
    const within = <T>(ms: number, p: Promise<T>, what: string): Promise<T> =>
      Promise.race([
        p,
        sleep(ms).then(() => {
          throw new Error(`${what}: not within ${ms} ms`);
        }),
      ]);

    // A DELETE while an SSE and a long-poll reader wait at the tail.
    const url = streamUrl(broker.httpUrl, "gone/deleted");
    expect(
      (await fetch(url, { method: "PUT", headers: { "content-type": "text/plain" }, body: "a" }))
        .status,
    ).toBe(201);
    const sse = await openSse(url);
    const poll = fetch(`${url}?offset=${"0000000000000001_0000000000000000"}&live=long-poll`);
    await sleep(300);
    const del = await within(10_000, fetch(url, { method: "DELETE" }), "DELETE with live readers");
    expect(del.status).toBe(204);
    // Before the fix the SSE sent control events back to back (hundreds of MB) until its 60 s
    // limit and the DELETE waited for it; now it ends with nothing more.
    const ended = await within(10_000, sse.done, "the SSE reader's end after DELETE");
    expect(ended.controls).toBe(0);
    const polled = await within(10_000, poll, "the long-poll's answer after DELETE");
    expect(polled.status).toBe(404);
    expect(((await polled.json()) as { error: { code: string } }).error.code).toBe(
      "stream_not_found",
    );
    expect((await fetch(`${url}?offset=-1&live=sse`)).status).toBe(404);

    // A stream that expires (Stream-TTL) under a connected SSE reader: the request that finds it
    // expired (HEAD does not renew it) removes it, and the reader ends at once.
    const ttlUrl = streamUrl(broker.httpUrl, "gone/expired");
    expect(
      (
        await fetch(ttlUrl, {
          method: "PUT",
          headers: { "content-type": "text/plain", "stream-ttl": "1" },
          body: "a",
        })
      ).status,
    ).toBe(201);
    const ttlSse = await openSse(ttlUrl);
    await sleep(1500);
    expect((await fetch(ttlUrl, { method: "HEAD" })).status).toBe(404);
    const expired = await within(10_000, ttlSse.done, "the SSE reader's end after expiry");
    expect(expired.controls).toBe(0);
    expect(
      (await fetch(ttlUrl, { method: "PUT", headers: { "content-type": "text/plain" } })).status,
    ).toBe(201);
  });

  it("caps a JSON append at 10 000 messages: one more is 400 naming the limit and stores nothing, also at creation", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const url = streamUrl(broker.httpUrl, "capped");
    const json = { "content-type": "application/json" };
    const array = (n: number) => `[${"1,".repeat(n - 1)}1]`;
    const refusedAs = async (res: Response) => {
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as {
        error: { code: string; message: string; details: { limit_messages: number } };
      };
      expect(error.code).toBe("invalid_request");
      expect(error.message).toContain("the append holds more than 10000 messages");
      expect(error.details.limit_messages).toBe(streamAppendMessagesMax);
    };
    // At creation, the initial content: refused, and no stream is left behind.
    await refusedAs(
      await fetch(url, {
        method: "PUT",
        headers: json,
        body: array(streamAppendMessagesMax + 1),
      }),
    );
    expect((await fetch(url, { method: "HEAD" })).status).toBe(404);
    expect((await fetch(url, { method: "PUT", headers: json })).status).toBe(201);
    // Two million messages (4 MB) and one over the cap: both refused, nothing stored.
    for (const n of [2_000_000, streamAppendMessagesMax + 1])
      await refusedAs(await fetch(url, { method: "POST", headers: json, body: array(n) }));
    const empty = await fetch(`${url}?offset=-1`);
    expect(await empty.json()).toEqual([]);
    // Exactly the cap is one append of every message; arrays inside a message do not count.
    const at = await fetch(url, {
      method: "POST",
      headers: json,
      body: array(streamAppendMessagesMax),
    });
    expect(at.status).toBe(204);
    const nested = await fetch(url, {
      method: "POST",
      headers: json,
      body: `[${array(streamAppendMessagesMax + 1)}]`,
    });
    expect(nested.status).toBe(204);
    const read = (await (await fetch(`${url}?offset=-1`)).json()) as unknown[];
    expect(read.length).toBe(streamAppendMessagesMax + 1);
    expect((read.at(-1) as unknown[]).length).toBe(streamAppendMessagesMax + 1);
  });

  it("answers hostile stream paths, offsets and headers with the protocol's 4xx, never a 5xx", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`, ["--stream-long-poll-ms", "200"]);
    const base = broker.httpUrl;
    const { hostname, port } = new URL(base);
    const raw = async (head: string): Promise<number> => {
      const req = await openRaw({ host: hostname, port: Number(port), head });
      const res = await req.response;
      req.destroy();
      return res.status;
    };
    const statuses: [string, number][] = [];
    const note = (what: string, status: number) => statuses.push([what, status]);
    const call = async (what: string, path: string, init?: RequestInit) => {
      const res = await fetch(`${base}${path}`, init);
      await res.arrayBuffer();
      note(what, res.status);
      return res;
    };

    expect(
      (
        await call("create", "/v1/stream/safe", {
          method: "PUT",
          headers: { "content-type": "text/plain" },
          body: "x",
        })
      ).status,
    ).toBe(201);
    // Dot segments: Node and Bun resolve them while parsing the URL (what is left names no
    // stream: 404); Deno hands them over and es-broker refuses the segment (400).
    for (const path of ["safe/../other", "../../../etc/passwd", "%2E%2E/%2E%2E/etc"])
      expect([400, 404]).toContain(
        await raw(`GET /v1/stream/${path} HTTP/1.1\r\nHost: localhost\r\n\r\n`),
      );
    expect(await raw(`GET /v1/stream/a%2F..%2F..%2Fetc HTTP/1.1\r\nHost: localhost\r\n\r\n`)).toBe(
      400,
    );
    expect(
      await raw(`PUT /v1/stream/a%2Fb HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n`),
    ).toBe(400);
    expect(
      await raw(`PUT /v1/stream/%FF%FE HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n`),
    ).toBe(400);
    expect(
      await raw(`PUT /v1/stream/a//b HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n`),
    ).toBe(400);
    expect(
      await raw(`PUT /v1/stream/a%00b HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n`),
    ).toBe(400);

    // A 10 000-character name is a stream like any other (its topic name is hashed).
    const long = `long/${"n".repeat(10_000)}`;
    expect(
      (
        await call("10k create", `/v1/stream/${long}`, {
          method: "PUT",
          headers: { "content-type": "text/plain" },
          body: "long",
        })
      ).status,
    ).toBe(201);
    expect(await (await fetch(`${base}/v1/stream/${long}`)).text()).toBe("long");
    const topics = (await (await fetch(`${base}/v1/topics`)).json()) as {
      topics: { name: string }[];
    };
    expect(topics.topics.map((t) => t.name)).toContain(streamTopicName(long));
    // Past the path limit: refused by es-broker (400) or by the runtime's request-line limit (414/431).
    const tooLong = await call("20k", `/v1/stream/${"n".repeat(20_000)}`, { method: "PUT" });
    expect([400, 414, 431]).toContain(tooLong.status);

    for (const offset of [
      "abc",
      "0,1",
      "0%201",
      "",
      "0000000000000009_0000000000000000",
      "-2",
      "0000000000000000_0000000000000001",
    ])
      expect(
        (await call(`offset ${offset}`, `/v1/stream/safe?offset=${offset}`)).status,
        offset,
      ).toBe(400);
    expect((await call("live without offset", "/v1/stream/safe?live=long-poll")).status).toBe(400);
    expect((await call("bad live", "/v1/stream/safe?offset=-1&live=forever")).status).toBe(400);
    expect(
      (
        await call("ct mismatch", "/v1/stream/safe", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        })
      ).status,
    ).toBe(409);
    expect(
      (
        await call("no ct", "/v1/stream/safe", {
          method: "POST",
          body: new Blob(["x"], { type: "" }),
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call("empty body", "/v1/stream/safe", {
          method: "POST",
          headers: { "content-type": "text/plain" },
          body: "",
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call("partial producer", "/v1/stream/safe", {
          method: "POST",
          headers: { "content-type": "text/plain", "producer-id": "p" },
          body: "x",
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call("epoch 1e3", "/v1/stream/safe", {
          method: "POST",
          headers: {
            "content-type": "text/plain",
            "producer-id": "p",
            "producer-epoch": "1e3",
            "producer-seq": "0",
          },
          body: "x",
        })
      ).status,
    ).toBe(400);
    expect(
      (await call("ttl -1", "/v1/stream/t1", { method: "PUT", headers: { "stream-ttl": "-1" } }))
        .status,
    ).toBe(400);
    expect(
      (
        await call("ttl+expires", "/v1/stream/t2", {
          method: "PUT",
          headers: {
            "stream-ttl": "5",
            "stream-expires-at": new Date(Date.now() + 60_000).toISOString(),
          },
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call("fork of nothing", "/v1/stream/f1", {
          method: "PUT",
          headers: { "stream-forked-from": "/v1/stream/nothing" },
        })
      ).status,
    ).toBe(404);
    expect(
      (
        await call("fork past tail", "/v1/stream/f2", {
          method: "PUT",
          headers: {
            "stream-forked-from": "/v1/stream/safe",
            "stream-fork-offset": "0000000000000009_0000000000000000",
          },
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call("invalid json", "/v1/stream/j", {
          method: "PUT",
          headers: { "content-type": "application/json" },
          body: "{nope",
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call("10 MiB append", "/v1/stream/safe", {
          method: "POST",
          headers: { "content-type": "text/plain" },
          body: new Uint8Array(10 * 1024 * 1024),
        })
      ).status,
    ).toBe(413);

    expect(
      (
        await call("close", "/v1/stream/safe", {
          method: "POST",
          headers: { "stream-closed": "true" },
        })
      ).status,
    ).toBe(204);
    const closed = await call("append to closed", "/v1/stream/safe", {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: "late",
    });
    expect(closed.status).toBe(409);
    expect(closed.headers.get("stream-closed")).toBe("true");

    expect(
      (
        await call("ttl stream", "/v1/stream/brief", {
          method: "PUT",
          headers: { "content-type": "text/plain", "stream-ttl": "1" },
        })
      ).status,
    ).toBe(201);
    await sleep(1_200);
    expect(
      (
        await call("append to expired", "/v1/stream/brief", {
          method: "POST",
          headers: { "content-type": "text/plain" },
          body: "x",
        })
      ).status,
    ).toBe(404);
    expect((await call("read expired", "/v1/stream/brief?offset=-1")).status).toBe(404);

    const fiveXX = statuses.filter(([, s]) => s >= 500);
    expect(fiveXX, JSON.stringify(statuses)).toEqual([]);
    expect(broker.stderr()).not.toMatch(/internal_error/);
  });

  it("refuses lax protocol headers with a 400 naming the header: repeats, non-canonical integers, impossible dates, foreign forks, expiry in the past", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const base = broker.httpUrl;
    const { hostname, port } = new URL(base);
    /** One request over a bare socket: the only way to send a header twice. */
    const raw = async (method: string, path: string, headers: [string, string][], body = "") => {
      const head = [
        `${method} ${path} HTTP/1.1`,
        "Host: localhost",
        "Connection: close",
        `Content-Length: ${Buffer.byteLength(body)}`,
        ...headers.map(([k, v]) => `${k}: ${v}`),
      ].join("\r\n");
      const req = await openRaw({ host: hostname, port: Number(port), head: `${head}\r\n\r\n` });
      req.write(body);
      const res = await req.response;
      req.destroy();
      return res;
    };
    const put = (path: string, headers: Record<string, string>) =>
      fetch(`${base}/v1/stream/${path}`, { method: "PUT", headers });
    const post = (path: string, headers: Record<string, string>, body = "x") =>
      fetch(`${base}/v1/stream/${path}`, {
        method: "POST",
        headers: { "content-type": "text/plain", ...headers },
        body,
      });
    /** A 400 whose message names `headerName`. */
    const refused = async (
      res: Response | { status: number; body: string },
      headerName: string,
    ) => {
      const text = res instanceof Response ? await res.text() : res.body;
      expect(res.status, text).toBe(400);
      expect(JSON.parse(text).error.message).toContain(headerName);
    };
    const text = { "content-type": "text/plain" };
    expect((await put("s", text)).status).toBe(201);

    // A repeated single-valued header is refused, not joined into "a, b".
    const producer = (id: string, epoch: string, seq: string): [string, string][] => [
      ["Content-Type", "text/plain"],
      ["Producer-Id", id],
      ["Producer-Epoch", epoch],
      ["Producer-Seq", seq],
    ];
    await refused(
      await raw("POST", "/v1/stream/s", [...producer("a", "0", "0"), ["Producer-Id", "b"]], "x"),
      "Producer-Id",
    );
    await refused(
      await raw("POST", "/v1/stream/s", [...producer("a", "0", "0"), ["Producer-Seq", "1"]], "x"),
      "Producer-Seq",
    );
    await refused(
      await raw("POST", "/v1/stream/s", [...producer("a", "0", "0"), ["Producer-Epoch", "0"]], "x"),
      "Producer-Epoch",
    );
    await refused(
      await raw("POST", "/v1/stream/s", [
        ["Stream-Closed", "true"],
        ["Stream-Closed", "true"],
      ]),
      "Stream-Closed",
    );
    // Nothing of the refused requests was appended, and the stream is still open.
    const head = await fetch(`${base}/v1/stream/s`, { method: "HEAD" });
    expect(head.headers.get("stream-next-offset")).toBe(
      (await put("s", text)).headers.get("stream-next-offset"),
    );
    expect(head.headers.get("stream-closed")).toBeNull();

    // Producer-Epoch and Producer-Seq: canonical decimal only, at most 2^53 − 1.
    for (const seq of ["01", "+1", "1 0", "1e0", "1.0", "9007199254740992"])
      await refused(
        await post("s", { "producer-id": "p", "producer-epoch": "0", "producer-seq": seq }),
        "Producer-Seq",
      );
    await refused(
      await post("s", { "producer-id": "p", "producer-epoch": "00", "producer-seq": "0" }),
      "Producer-Epoch",
    );
    expect(
      (await post("s", { "producer-id": "p", "producer-epoch": "0", "producer-seq": "0" })).status,
    ).toBe(200);

    // Stream-Closed with a value other than "true" is as if absent (protocol §4.1): no error, no close.
    expect((await post("s", { "stream-closed": "maybe" })).status).toBe(204);
    expect(
      (await fetch(`${base}/v1/stream/s`, { method: "HEAD" })).headers.get("stream-closed"),
    ).toBeNull();

    // Impossible timestamps are refused, not rolled over into the next month or day.
    for (const at of [
      "2031-02-30T00:00:00Z",
      "2032-02-30T00:00:00Z",
      "2031-04-31T00:00:00Z",
      "2031-13-01T00:00:00Z",
      "2031-01-01T25:00:00Z",
      "2031-01-01T00:60:00Z",
      "2031-01-01T00:00:60Z",
      "2031-01-01T00:00:00+24:00",
    ])
      await refused(
        await put(`exp-${at.slice(5, 10)}`, { ...text, "stream-expires-at": at }),
        "Stream-Expires-At",
      );
    expect(
      (await put("leap", { ...text, "stream-expires-at": "2032-02-29T23:59:59Z" })).status,
    ).toBe(201);

    // Created already expired: refused, and nothing is created.
    await refused(await put("gone", { ...text, "stream-ttl": "0" }), "Stream-TTL");
    await refused(
      await put("gone", {
        ...text,
        "stream-expires-at": new Date(Date.now() - 1000).toISOString(),
      }),
      "Stream-Expires-At",
    );
    expect((await fetch(`${base}/v1/stream/gone`, { method: "HEAD" })).status).toBe(404);

    // A fork names a stream of this server: by path, or by a URL of this very origin.
    for (const from of [
      "http://elsewhere.example/v1/stream/s",
      "//elsewhere.example/v1/stream/s",
      "v1/stream/s",
      "/v1/stream/s?x=1",
    ])
      await refused(await put("fork-bad", { "stream-forked-from": from }), "Stream-Forked-From");
    expect((await fetch(`${base}/v1/stream/fork-bad`, { method: "HEAD" })).status).toBe(404);
    expect((await put("fork-path", { "stream-forked-from": "/v1/stream/s" })).status).toBe(201);
    expect((await put("fork-url", { "stream-forked-from": `${base}/v1/stream/s` })).status).toBe(
      201,
    );
    expect(await (await fetch(`${base}/v1/stream/fork-url`)).text()).toBe(
      await (await fetch(`${base}/v1/stream/s`)).text(),
    );
    expect(broker.stderr()).not.toMatch(/internal_error/);
  });
});
