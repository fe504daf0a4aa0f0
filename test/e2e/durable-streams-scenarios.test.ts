/**
 * The field failures of Durable Streams servers, against the real process (docs/durable-streams.md
 * "Closing, caching and SSE framing"):
 *
 * - closing never hides or drops the last data: readers at the tail in long-poll and SSE mode get
 *   the message appended with `Stream-Closed: true`, then EOF, whatever the timing;
 * - an append after close is 409 with `Stream-Closed`, a second close is idempotent;
 * - a cache that honours `Cache-Control` in front of the broker never makes readers miss an append
 *   or spin on a cached empty answer;
 * - the headers of each kind of answer (catch-up, live, errors, 404, 409);
 * - SSE framing cannot be forged by payload bytes, and resuming from any event id delivers exactly
 *   the remaining messages, also across a restart.
 */
import { createServer, type Server } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { Prng } from "../../src/lib/prng.ts";
import { tempDir } from "../helpers/tmp.ts";
import { scaled, startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function start(dataDir: string, extra: string[] = []): Promise<BrokerProcess> {
  const b = await startBroker(dataDir, extra);
  running.push(b);
  return b;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const enc = new TextEncoder();
const dec = new TextDecoder();

/** Reads a stream by long-poll as a client would, from `offset` to EOF; returns the data and what came after EOF. */
async function longPollToEof(url: string, offset: string, deadlineMs = 10_000): Promise<string> {
  let data = "";
  let cursor: string | null = null;
  const until = Date.now() + deadlineMs;
  while (Date.now() < until) {
    const q = `offset=${offset}&live=long-poll${cursor ? `&cursor=${cursor}` : ""}`;
    const res = await fetch(`${url}?${q}`);
    expect([200, 204]).toContain(res.status);
    data += await res.text();
    offset = res.headers.get("stream-next-offset") as string;
    cursor = res.headers.get("stream-cursor");
    if (res.headers.get("stream-closed") === "true") return data;
  }
  throw new Error(`no EOF within ${deadlineMs} ms; got ${JSON.stringify(data)}`);
}

/** An SSE connection parsed with eventsource-parser. */
interface SseRead {
  events: EventSourceMessage[];
  /** Resolves when the server ends the connection (or the deadline passes). */
  ended: Promise<void>;
  /** Resolves once an event satisfies `until`. */
  reached: Promise<void>;
  abort(): void;
}

function readSse(
  url: string,
  options: {
    headers?: Record<string, string>;
    until?: (e: EventSourceMessage) => boolean;
    deadlineMs?: number;
  } = {},
): SseRead {
  const events: EventSourceMessage[] = [];
  const controller = new AbortController();
  let reachedResolve!: () => void;
  const reached = new Promise<void>((r) => (reachedResolve = r));
  const parser = createParser({
    onEvent: (e) => {
      events.push(e);
      if (options.until?.(e)) reachedResolve();
    },
  });
  const timer = setTimeout(() => controller.abort(), options.deadlineMs ?? 10_000);
  const ended = (async () => {
    try {
      // A kept-alive connection the server closed as idle just as the request went out fails
      // with "other side closed" (Node's 5 s keep-alive race); a client sends it again.
      let res: Response | null = null;
      for (let attempt = 1; res === null; attempt++) {
        try {
          res = await fetch(url, { headers: options.headers, signal: controller.signal });
        } catch (err) {
          if (attempt === 3 || controller.signal.aborted) throw err;
        }
      }
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parser.feed(dec.decode(value, { stream: true }));
      }
    } catch (err) {
      if (!(err instanceof Error && err.name === "AbortError")) throw err;
    } finally {
      clearTimeout(timer);
      reachedResolve();
    }
  })();
  return { events, ended, reached, abort: () => controller.abort() };
}

function controls(events: EventSourceMessage[]): Record<string, unknown>[] {
  return events.filter((e) => e.event === "control").map((e) => JSON.parse(e.data));
}

describe(`[${target}] Durable Streams: closing, caching, SSE framing`, () => {
  it("gives readers at the tail the final message and then EOF, whatever the timing of the close", async () => {
    const { dir } = tempDir();
    // A short long-poll makes the reader reconnect every 20 ms, so closes land on reconnects too.
    const broker = await start(`${dir}/data`, ["--stream-long-poll-ms", "20"]);
    const prng = new Prng(37);
    const trials = scaled(200);
    for (let i = 0; i < trials; i++) {
      const url = `${broker.httpUrl}/v1/stream/close-race/${i}`;
      const put = await fetch(url, {
        method: "PUT",
        headers: { "content-type": "text/plain" },
        body: "initial",
      });
      const tail = put.headers.get("stream-next-offset") as string;
      const longPoll = longPollToEof(url, tail);
      const sse = readSse(`${url}?offset=${tail}&live=sse`);
      await sleep(prng.int(51));
      const close = await fetch(url, {
        method: "POST",
        headers: { "content-type": "text/plain", "stream-closed": "true" },
        body: `final-${i}`,
      });
      expect(close.status).toBe(204);
      expect(await longPoll, `trial ${i}: long-poll`).toBe(`final-${i}`);
      await sse.ended;
      const data = sse.events.filter((e) => e.event === "data").map((e) => e.data);
      expect(data.join(""), `trial ${i}: SSE data`).toBe(`final-${i}`);
      const last = sse.events.at(-1)!;
      expect(last.event, `trial ${i}: SSE ends with the closing control event`).toBe("control");
      expect(JSON.parse(last.data)).toMatchObject({ streamClosed: true });
      expect(controls(sse.events).filter((c) => c.streamClosed === true)).toHaveLength(1);
    }
  }, 120_000);

  it("refuses an append after close with 409 and Stream-Closed, and closes twice idempotently", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const url = `${broker.httpUrl}/v1/stream/closed-twice`;
    await fetch(url, { method: "PUT", headers: { "content-type": "text/plain" }, body: "x" });
    const first = await fetch(url, { method: "POST", headers: { "stream-closed": "true" } });
    const second = await fetch(url, { method: "POST", headers: { "stream-closed": "true" } });
    for (const r of [first, second]) {
      expect(r.status).toBe(204);
      expect(r.headers.get("stream-closed")).toBe("true");
      expect(r.headers.get("stream-next-offset")).toBe("0000000000000001_0000000000000000");
    }
    const late = await fetch(url, {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: "y",
    });
    expect(late.status).toBe(409);
    expect(late.headers.get("stream-closed")).toBe("true");
    expect(late.headers.get("stream-next-offset")).toBe("0000000000000001_0000000000000000");
    expect(late.headers.get("cache-control")).toBe("no-store");
    expect(await (await fetch(`${url}?offset=-1`)).text()).toBe("x");
  });

  it("behind a cache that honours Cache-Control, every append reaches every live reader and no reader spins on a cached empty answer", async () => {
    const { dir } = tempDir();
    const longPollMs = 1_000;
    const broker = await start(`${dir}/data`, ["--stream-long-poll-ms", String(longPollMs)]);
    const cache = await cachingProxy(broker.httpUrl);
    const url = `${cache.url}/v1/stream/cached`;
    const direct = `${broker.httpUrl}/v1/stream/cached`;
    await fetch(direct, { method: "PUT", headers: { "content-type": "text/plain" } });
    const durationMs = Number(process.env.ES_BROKER_STREAM_CACHE_SOAK_MS ?? scaled(15_000));
    const appendEveryMs = 3_000;
    const readers = 20;
    const appendedAt: number[] = [];
    const seen: number[][] = Array.from({ length: readers }, () => []);
    const stop = { done: false };
    const tasks = seen.map(async (arrivals) => {
      let offset = "-1";
      let cursor: string | null = null;
      while (!stop.done) {
        const res = await fetch(
          `${url}?offset=${offset}&live=long-poll${cursor ? `&cursor=${cursor}` : ""}`,
        );
        const body = await res.text();
        for (const m of body.match(/#\d+;/g) ?? []) arrivals[Number(m.slice(1, -1))] = Date.now();
        offset = res.headers.get("stream-next-offset") as string;
        cursor = res.headers.get("stream-cursor");
      }
    });
    const started = Date.now();
    for (let n = 0; Date.now() - started < durationMs; n++) {
      appendedAt[n] = Date.now();
      const r = await fetch(direct, {
        method: "POST",
        headers: { "content-type": "text/plain" },
        body: `#${n};`,
      });
      expect(r.status).toBe(204);
      await sleep(appendEveryMs);
    }
    stop.done = true;
    await Promise.all(tasks);
    const maxAgeMs = 60_000;
    let worst = 0;
    for (const arrivals of seen) {
      for (let n = 0; n < appendedAt.length; n++) {
        expect(arrivals[n], `append ${n} reached the reader`).toBeDefined();
        worst = Math.max(worst, arrivals[n] - appendedAt[n]);
      }
    }
    expect(worst).toBeLessThanOrEqual(longPollMs + maxAgeMs);
    expect(worst, "appends reach live readers at once").toBeLessThan(longPollMs + 1_000);
    // An empty answer (timeout, tail) is never cached: zero hits on empty bodies.
    expect(cache.emptyHits).toBe(0);
    expect(cache.storedEmpty).toBe(0);
    expect(cache.forwarded).toBeGreaterThan(readers * appendedAt.length);
  }, 600_000);

  it("marks catch-up answers cacheable and live, error, 404 and 409 answers short-lived or uncacheable", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`, ["--stream-long-poll-ms", "100"]);
    const url = `${broker.httpUrl}/v1/stream/headers`;
    await fetch(url, { method: "PUT", headers: { "content-type": "text/plain" }, body: "data" });
    const catchUp = await fetch(`${url}?offset=-1`);
    expect(catchUp.headers.get("cache-control")).toBe(
      "public, max-age=60, stale-while-revalidate=300",
    );
    expect(catchUp.headers.get("etag")).toMatch(/^".+:0:1"$/);
    // A cache keys it by Authorization: keyed reads are private (durable-streams.test.ts).
    expect(catchUp.headers.get("vary")).toBe("Authorization");
    const tailOffset = catchUp.headers.get("stream-next-offset") as string;
    const tail = await fetch(`${url}?offset=${tailOffset}`);
    expect(tail.headers.get("cache-control")).toBe("no-store");
    const now = await fetch(`${url}?offset=now`);
    expect(now.headers.get("cache-control")).toBe("no-store");
    expect(now.headers.get("etag")).toBeNull();
    const liveData = await fetch(`${url}?offset=-1&live=long-poll`);
    expect(liveData.status).toBe(200);
    expect(liveData.headers.get("stream-cursor")).toMatch(/^\d+$/);
    const liveEmpty = await fetch(`${url}?offset=${tailOffset}&live=long-poll`);
    expect(liveEmpty.status).toBe(204);
    expect(liveEmpty.headers.get("cache-control")).toBe("no-store");
    expect(liveEmpty.headers.get("stream-cursor")).toMatch(/^\d+$/);
    const sse = await fetch(`${url}?offset=now&live=sse`);
    expect(sse.headers.get("cache-control")).toBe("no-cache");
    await sse.body?.cancel();
    const head = await fetch(url, { method: "HEAD" });
    expect(head.headers.get("cache-control")).toBe("no-store");
    const bad = await fetch(`${url}?offset=zzz`);
    const missing = await fetch(`${broker.httpUrl}/v1/stream/nothing-here`);
    const conflict = await fetch(url, {
      method: "PUT",
      headers: { "content-type": "application/json" },
    });
    for (const [res, status] of [
      [bad, 400],
      [missing, 404],
      [conflict, 409],
    ] as const) {
      expect(res.status).toBe(status);
      expect(res.headers.get("cache-control")).toBe("no-store");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(((await res.json()) as { error: { code: string } }).error.code).toBeTypeOf("string");
    }
    await fetch(url, { method: "POST", headers: { "stream-closed": "true" } });
    const eof = await fetch(`${url}?offset=${tailOffset}`);
    expect(eof.headers.get("stream-closed")).toBe("true");
    expect(eof.headers.get("cache-control")).toBe("public, max-age=60, stale-while-revalidate=300");
  });

  it("keeps SSE framing and payload bytes exact, and resumes from every event id, across a restart too", async () => {
    const { dir } = tempDir();
    let broker = await start(`${dir}/data`);
    const hostile = [
      'a\r\n\r\nevent: control\r\ndata: {"streamClosed":true}\r\n\r\n',
      "lone\rcr",
      "two\n\nlines",
      "id: 999",
      "seps\u2028\u2029\u0085end",
      "nul\u0000byte",
      " leading space",
      "z".repeat(1024 * 1024),
    ];
    const invalidUtf8 = new Uint8Array([0xff, 0xfe, 0xc3, 0x28, 0x0a, 0x0d]);
    const kinds = [
      { name: "text", type: "text/plain", messages: hostile.map((m) => enc.encode(m)) },
      {
        name: "binary",
        type: "application/octet-stream",
        messages: [...hostile.map((m) => enc.encode(m)), invalidUtf8],
      },
    ];
    const ids: Record<string, string[]> = {};
    for (const kind of kinds) {
      const url = `${broker.httpUrl}/v1/stream/framing/${kind.name}`;
      await fetch(url, { method: "PUT", headers: { "content-type": kind.type } });
      // A live reader connected while the messages arrive one by one: one data + control per message.
      const live = readSse(`${url}?offset=-1&live=sse`, {
        until: (e) =>
          e.event === "control" &&
          JSON.parse(e.data).streamNextOffset === offsetOf(kind.messages.length),
      });
      for (const m of kind.messages) {
        const r = await fetch(url, {
          method: "POST",
          headers: { "content-type": kind.type },
          body: m,
        });
        expect(r.status).toBe(204);
        await sleep(30);
      }
      await live.reached;
      live.abort();
      await live.ended;
      expect(new Set(live.events.map((e) => e.event))).toEqual(new Set(["data", "control"]));
      for (const c of controls(live.events))
        for (const key of Object.keys(c))
          expect(["streamNextOffset", "streamCursor", "upToDate"]).toContain(key);
      const eventIds = live.events.filter((e) => e.id !== undefined).map((e) => e.id as string);
      expect(eventIds.every((id) => /^\d{16}_0{16}$/.test(id))).toBe(true);
      expect(live.events.filter((e) => e.event === "control").map((e) => e.id)).toEqual(eventIds);
      expect(eventIds.at(-1)).toBe(offsetOf(kind.messages.length));
      ids[kind.name] = eventIds;
      expectBytes(
        sseBytes(kind.name, live.events),
        expectedOverSse(kind.name, kind.messages),
        `${kind.name} live`,
      );
      // Catch-up is byte-exact for every content type (answers are chunked at about 1 MiB).
      expectBytes(await catchUp(url), concat(kind.messages), `${kind.name} catch-up`);
    }
    const resumeAll = async () => {
      for (const kind of kinds) {
        const url = `${broker.httpUrl}/v1/stream/framing/${kind.name}`;
        const from = ["-1", ...ids[kind.name]];
        for (const id of from) {
          const done = offsetOf(kind.messages.length);
          const headers: Record<string, string> = id === "-1" ? {} : { "last-event-id": id };
          const sse = readSse(`${url}?offset=-1&live=sse`, {
            headers,
            until: (e) => e.event === "control" && JSON.parse(e.data).streamNextOffset === done,
          });
          await sse.reached;
          sse.abort();
          await sse.ended;
          const position = id === "-1" ? 0 : Number(id.slice(0, 16));
          expectBytes(
            sseBytes(kind.name, sse.events),
            expectedOverSse(kind.name, kind.messages.slice(position)),
            `${kind.name} from ${id}`,
          );
        }
      }
    };
    await resumeAll();
    await broker.stop("SIGTERM");
    running.splice(0);
    // A new port: connections pooled to the old process would fail once each.
    broker = await start(`${dir}/data`);
    await resumeAll();
  }, 120_000);
});

/** Compares bytes without a megabyte-long diff: the lengths and the first difference. */
function expectBytes(actual: Uint8Array, expected: Uint8Array, label: string): void {
  let at = 0;
  while (at < actual.length && at < expected.length && actual[at] === expected[at]) at++;
  const same = at === actual.length && at === expected.length;
  expect(
    same ? "same" : `${actual.length} bytes against ${expected.length}, first difference at ${at}`,
    label,
  ).toBe("same");
}

/** Every byte of a stream by catch-up reads, following Stream-Next-Offset until Stream-Up-To-Date. */
async function catchUp(url: string): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let offset = "-1";
  for (;;) {
    const res = await fetch(`${url}?offset=${offset}`);
    parts.push(new Uint8Array(await res.arrayBuffer()));
    offset = res.headers.get("stream-next-offset") as string;
    if (res.headers.get("stream-up-to-date") === "true") return concat(parts);
  }
}

function offsetOf(position: number): string {
  return `${String(position).padStart(16, "0")}_0000000000000000`;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The bytes SSE data events carried: base64-decoded for binary streams, the text for text streams. */
function sseBytes(kind: string, events: EventSourceMessage[]): Uint8Array {
  const data = events.filter((e) => e.event === "data").map((e) => e.data);
  if (kind === "binary")
    return concat(data.map((d) => new Uint8Array(Buffer.from(d.replace(/[\r\n]/g, ""), "base64"))));
  return enc.encode(data.join(""));
}

/**
 * What SSE can carry of `messages`: binary exactly; text with CR and CRLF as LF (SSE has no
 * other line end; docs/durable-streams.md "SSE"). Each data event carries a run of the stream's
 * text; a client concatenates them.
 */
function expectedOverSse(kind: string, messages: Uint8Array[]): Uint8Array {
  if (kind === "binary") return concat(messages);
  return enc.encode(dec.decode(concat(messages)).replace(/\r\n|\r/g, "\n"));
}

/**
 * A shared cache in front of the broker that honours Cache-Control the way a CDN does: it
 * stores a GET answer for `max-age` seconds unless it says `no-store`, `no-cache` or `private`,
 * keyed by the whole URL, and serves it from the cache until then. It counts cache hits on empty
 * answers (what the cursor rule must prevent from looping).
 */
async function cachingProxy(origin: string): Promise<{
  url: string;
  emptyHits: number;
  storedEmpty: number;
  forwarded: number;
}> {
  const cache = new Map<
    string,
    { status: number; headers: Record<string, string>; body: Buffer; until: number }
  >();
  const stats = { url: "", emptyHits: 0, storedEmpty: 0, forwarded: 0 };
  const server = createServer(async (req, res) => {
    const key = req.url ?? "/";
    const hit = cache.get(key);
    if (req.method === "GET" && hit !== undefined && hit.until > Date.now()) {
      if (hit.body.length === 0) stats.emptyHits++;
      res.writeHead(hit.status, hit.headers).end(hit.body);
      return;
    }
    stats.forwarded++;
    const upstream = await fetch(`${origin}${key}`, { method: req.method });
    const body = Buffer.from(await upstream.arrayBuffer());
    const headers: Record<string, string> = {};
    upstream.headers.forEach((v, k) => {
      if (k !== "content-length" && k !== "transfer-encoding" && k !== "connection") headers[k] = v;
    });
    const cc = upstream.headers.get("cache-control") ?? "";
    const maxAge = /max-age=(\d+)/.exec(cc);
    if (req.method === "GET" && maxAge !== null && !/no-store|no-cache|private/.test(cc)) {
      cache.set(key, {
        status: upstream.status,
        headers,
        body,
        until: Date.now() + Number(maxAge[1]) * 1000,
      });
      if (body.length === 0) stats.storedEmpty++;
    }
    res.writeHead(upstream.status, headers).end(body);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no proxy address");
  stats.url = `http://127.0.0.1:${address.port}`;
  return stats;
}
