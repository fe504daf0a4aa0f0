import { beforeEach, describe, expect, it } from "vitest";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import type { HttpApp } from "../../src/transport/http/app.ts";
import { FakeBroker } from "./http-fake-broker.ts";

/** One parsed SSE block: its comment lines and its fields. */
interface SseBlock {
  comments: string[];
  id?: string;
  event?: string;
  data?: string;
}

/** Reads an event stream block by block (blocks end with a blank line). */
class SseReader {
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #decoder = new TextDecoder();
  #buffer = "";

  constructor(body: ReadableStream<Uint8Array>) {
    this.#reader = body.getReader();
  }

  /** The next block, or null once the stream has ended. */
  async next(): Promise<SseBlock | null> {
    for (;;) {
      const end = this.#buffer.indexOf("\n\n");
      if (end >= 0) {
        const text = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end + 2);
        const block: SseBlock = { comments: [] };
        for (const line of text.split("\n")) {
          if (line.startsWith(":")) block.comments.push(line.slice(1).trim());
          else {
            const colon = line.indexOf(":");
            const field = line.slice(0, colon) as "id" | "event" | "data";
            block[field] = line.slice(colon + 1).replace(/^ /, "");
          }
        }
        return block;
      }
      const { done, value } = await this.#reader.read();
      if (done) return null;
      this.#buffer += this.#decoder.decode(value, { stream: true });
    }
  }

  /** The next block that is an event (skipping comments). */
  async nextEvent(): Promise<SseBlock | null> {
    for (;;) {
      const block = await this.next();
      if (block === null || block.event !== undefined) return block;
    }
  }

  cancel(): Promise<void> {
    return this.#reader.cancel();
  }
}

let broker: FakeBroker;
let logger: MemoryLogger;
let app: HttpApp;

beforeEach(async () => {
  broker = new FakeBroker();
  logger = new MemoryLogger();
  app = createHttpApp({ broker, logger, sseHeartbeatMs: 60_000 });
  await broker.createTopic({ name: "orders", partitions: 2 });
});

function produce(values: string[], partition = 0, key?: string): Promise<Response> | Response {
  return app.request("/v1/topics/orders/records", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      records: values.map((value) => ({ value, partition, ...(key === undefined ? {} : { key }) })),
    }),
  });
}

async function openStream(
  query = "",
  init: RequestInit = {},
  env?: { shutdownSignal: AbortSignal },
): Promise<SseReader> {
  const res = await app.request(`/v1/topics/orders/partitions/0/stream${query}`, init, env);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const reader = new SseReader(res.body!);
  const opening = await reader.next();
  expect(opening?.comments[0]).toMatch(
    /^es-broker stream of partition "orders\/0" from offset \d+$/,
  );
  return reader;
}

async function untilNoFetchWaits(): Promise<void> {
  while (broker.waitingFetches > 0) await new Promise((resolve) => setImmediate(resolve));
}

describe("GET /v1/topics/{topic}/partitions/{p}/stream", () => {
  it("delivers records produced after it opened, in order, one event per record", async () => {
    await produce(["before"]);
    const stream = await openStream();
    await broker.whenWaiting(1);
    await produce(["a", "b"]);
    await produce(["c"], 0, "k");
    const events = [await stream.nextEvent(), await stream.nextEvent(), await stream.nextEvent()];
    expect(events.map((e) => e?.event)).toEqual(["record", "record", "record"]);
    expect(events.map((e) => e?.id)).toEqual(["1", "2", "3"]);
    expect(events.map((e) => JSON.parse(e!.data!))).toEqual([
      { offset: 1, timestamp: broker.nowMs, key: null, value: "a" },
      { offset: 2, timestamp: broker.nowMs, key: null, value: "b" },
      { offset: 3, timestamp: broker.nowMs, key: "k", value: "c" },
    ]);
    await stream.cancel();
    await untilNoFetchWaits();
    expect(broker.waitingFetches).toBe(0);
  });

  it("replays from the log start with offset=earliest and from a given offset", async () => {
    await produce(["a", "b", "c"]);
    const earliest = await openStream("?offset=earliest");
    expect((await earliest.nextEvent())?.id).toBe("0");
    expect((await earliest.nextEvent())?.id).toBe("1");
    await earliest.cancel();
    const fromTwo = await openStream("?offset=2");
    const event = await fromTwo.nextEvent();
    expect(JSON.parse(event!.data!).value).toBe("c");
    await fromTwo.cancel();
  });

  it("resumes after Last-Event-ID, which wins over the offset parameter", async () => {
    await produce(["a", "b", "c"]);
    const stream = await openStream("?offset=0", { headers: { "last-event-id": "1" } });
    const event = await stream.nextEvent();
    expect(event?.id).toBe("2");
    await stream.cancel();
  });

  it("keeps values with newlines on one data line and honours encoding=base64", async () => {
    await produce(["line1\nline2\r\n"]);
    const text = await openStream("?offset=0");
    expect(JSON.parse((await text.nextEvent())!.data!).value).toBe("line1\nline2\r\n");
    await text.cancel();
    const b64 = await openStream("?offset=0&encoding=base64");
    expect(JSON.parse((await b64.nextEvent())!.data!).value).toBe(btoa("line1\nline2\r\n"));
    await b64.cancel();
  });

  it("sends a comment heartbeat after a long-poll that found nothing", async () => {
    app = createHttpApp({ broker, logger, sseHeartbeatMs: 1 });
    const stream = await openStream();
    const block = await stream.next();
    expect(block?.comments).toEqual(["heartbeat"]);
    expect(block?.event).toBeUndefined();
    await stream.cancel();
  });

  it("answers JSON errors before streaming: 416 outside the log, 404 unknown, 400 bad parameters", async () => {
    await produce(["a"]);
    const outOfRange = await app.request("/v1/topics/orders/partitions/0/stream?offset=5");
    expect(outOfRange.status).toBe(416);
    expect(((await outOfRange.json()) as { error: { code: string } }).error.code).toBe(
      "offset_out_of_range",
    );
    const resumedPast = await app.request("/v1/topics/orders/partitions/0/stream", {
      headers: { "last-event-id": "7" },
    });
    expect(resumedPast.status).toBe(416);
    expect((await app.request("/v1/topics/nope/partitions/0/stream")).status).toBe(404);
    expect((await app.request("/v1/topics/orders/partitions/5/stream")).status).toBe(404);
    const badId = await app.request("/v1/topics/orders/partitions/0/stream", {
      headers: { "last-event-id": "-1" },
    });
    expect(badId.status).toBe(400);
    expect(((await badId.json()) as { error: { message: string } }).error.message).toMatch(
      /header "Last-Event-ID"/,
    );
    const badOffset = await app.request("/v1/topics/orders/partitions/0/stream?offset=first");
    expect(badOffset.status).toBe(400);
    expect(((await badOffset.json()) as { error: { message: string } }).error.message).toMatch(
      /query parameter "offset"/,
    );
  });

  it("sends one error event and ends when the broker closes", async () => {
    const stream = await openStream();
    await broker.whenWaiting(1);
    await broker.close();
    const event = await stream.nextEvent();
    expect(event?.event).toBe("error");
    expect(JSON.parse(event!.data!)).toMatchObject({ error: { code: "unavailable" } });
    expect(await stream.next()).toBeNull();
  });

  it("ends cleanly when the server's shutdown signal aborts", async () => {
    const shutdown = new AbortController();
    const stream = await openStream("", {}, { shutdownSignal: shutdown.signal });
    await broker.whenWaiting(1);
    shutdown.abort();
    expect(await stream.next()).toBeNull();
    expect(broker.waitingFetches).toBe(0);
  });

  it("ends the broker long-poll when the client aborts the request", async () => {
    const controller = new AbortController();
    await openStream("", { signal: controller.signal });
    await broker.whenWaiting(1);
    controller.abort();
    await untilNoFetchWaits();
    expect(broker.waitingFetches).toBe(0);
  });
});
