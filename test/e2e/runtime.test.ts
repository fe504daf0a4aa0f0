/**
 * End-to-end scenarios that check what differs most between runtimes: the HTTP server each one
 * uses (Deno.serve, Bun.serve, @hono/node-server), its body limits, Server-Sent Events, signals and
 * graceful shutdown. Like core.test.ts, this file runs once per target (vitest.config.ts); every
 * title and failure names the target.
 */
import { existsSync } from "node:fs";
import * as net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { version } from "../../src/version.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  assertTargetRunnable,
  runCli,
  startBroker,
  target,
  targetInfo,
  type BrokerProcess,
} from "./harness.ts";
import { chunk, openKeepAlive, openRaw, postHead } from "./raw-http.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function start(
  extra: string[] = [],
  dataDir?: string,
): Promise<{ broker: BrokerProcess; dataDir: string }> {
  if (dataDir === undefined) {
    const { dir } = tempDir();
    dataDir = `${dir}/data`;
  }
  const broker = await startBroker(dataDir, extra);
  running.push(broker);
  return { broker, dataDir };
}

/** Resolves with the exit code once the process exits, without signalling it. */
function exitOf(broker: BrokerProcess): Promise<number | string> {
  const { proc } = broker;
  if (proc.exitCode !== null || proc.signalCode !== null)
    return Promise.resolve(proc.exitCode ?? proc.signalCode!);
  return new Promise((res) =>
    proc.once("exit", (code, signal) => res(code ?? signal ?? "unknown")),
  );
}

function isRunning(broker: BrokerProcess): boolean {
  return broker.proc.exitCode === null && broker.proc.signalCode === null;
}

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

async function postJson(url: string, body: unknown): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** Reads Server-Sent Events from a streaming response, one parsed event at a time. */
function sseReader(response: Response) {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  return {
    /** The next event with a `data:` line, or null when the stream ends. Comments are skipped. */
    async next(): Promise<{ id?: string; event?: string; data: string } | null> {
      for (;;) {
        const end = buffer.indexOf("\n\n");
        if (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields: Record<string, string> = {};
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) continue;
            const i = line.indexOf(":");
            if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).replace(/^ /, "");
          }
          if (fields.data !== undefined)
            return { id: fields.id, event: fields.event, data: fields.data };
          continue;
        }
        const { done, value } = await reader.read();
        if (done) return null;
        buffer += decoder.decode(value, { stream: true });
      }
    },
    /** Everything up to the end of the stream (resolves once the server ends it). */
    async rest(): Promise<string> {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return buffer;
        buffer += decoder.decode(value, { stream: true });
      }
    },
    cancel: () => reader.cancel().catch(() => {}),
  };
}

/** Opens a produce of one record to topic `topic` whose chunked body stops half way. */
async function slowProduce(broker: BrokerProcess, topic: string, value: string) {
  const [host, port] = broker.httpUrl.replace("http://", "").split(":");
  const body = JSON.stringify({ records: [{ value }] });
  const request = await openRaw({
    host,
    port: Number(port),
    head: postHead(`/v1/topics/${topic}/records`, { chunked: true }),
  });
  request.write(chunk(body.slice(0, 10)));
  return {
    request,
    finish: () => request.write(Buffer.concat([chunk(body.slice(10)), chunk("")])),
  };
}

/**
 * True when a request on a new connection is refused: the connection is refused, or the request
 * is answered 503 `unavailable`.
 */
async function newConnectionRefused(broker: BrokerProcess): Promise<boolean> {
  const [host, port] = broker.httpUrl.replace("http://", "").split(":");
  let request;
  try {
    request = await openRaw({
      host,
      port: Number(port),
      head: "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    });
  } catch {
    return true;
  }
  try {
    const response = await request.response;
    return response.status === 503 && response.body.includes('"unavailable"');
  } catch {
    return true; // closed without an answer
  } finally {
    request.destroy();
  }
}

describe(`[${target}] es-broker on its runtime`, () => {
  it("prints its version and names the runtime it runs on", async () => {
    assertTargetRunnable();
    const { code, stdout, stderr } = await runCli(["--version"]);
    expect(code, `[${target}] ${stderr}`).toBe(0);
    const line = stdout.toString().trim();
    expect(line).toMatch(
      new RegExp(
        `^es-broker ${version.replaceAll(".", "\\.")} \\((node|deno|bun) \\d+\\.\\d+\\.\\d+(, standalone binary)?\\)$`,
      ),
    );
    expect(line, `[${target}] version line`).toContain(targetInfo.versionMarker);
  });

  it("creates a topic over HTTP, produces over TCP and HTTP, consumes both ways and tails it over SSE", async () => {
    const { broker } = await start();
    const created = await postJson(`${broker.httpUrl}/v1/topics`, { name: "mixed", partitions: 1 });
    expect(created.status).toBe(201);

    const stream = await fetch(
      `${broker.httpUrl}/v1/topics/mixed/partitions/0/stream?offset=earliest`,
    );
    expect(stream.status).toBe(200);
    expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = sseReader(stream);

    const client = await TcpClient.connect(broker.tcp);
    const overTcp = await client.produce("mixed", [{ key: "k1", value: "over tcp" }]);
    expect(overTcp.spans).toHaveLength(1);
    expect(overTcp.spans[0]).toMatchObject({ partition: 0, baseOffset: 0 });
    const overHttp = await postJson(`${broker.httpUrl}/v1/topics/mixed/records`, {
      records: [{ key: "k2", value: "over http" }, { value: "no key" }],
    });
    expect(overHttp.status).toBe(200);
    expect(await overHttp.json()).toEqual({
      offsets: [
        { partition: 0, offset: 1 },
        { partition: 0, offset: 2 },
      ],
    });

    const expected = [
      { offset: 0, key: "k1", value: "over tcp" },
      { offset: 1, key: "k2", value: "over http" },
      { offset: 2, key: null, value: "no key" },
    ];
    const fetchedTcp = await client.fetch({ topic: "mixed", partition: 0, offset: 0 });
    const text = (b: Uint8Array | null) => (b === null ? null : Buffer.from(b).toString());
    expect(
      fetchedTcp.records.map((r) => ({ offset: r.offset, key: text(r.key), value: text(r.value) })),
    ).toEqual(expected);
    expect(fetchedTcp.highWatermark).toBe(3);

    const fetchedHttp = (await (
      await fetch(`${broker.httpUrl}/v1/topics/mixed/partitions/0/records?offset=earliest`)
    ).json()) as {
      records: { offset: number; key: string | null; value: string }[];
      next_offset: number;
      high_watermark: number;
    };
    expect(fetchedHttp.records.map(({ offset, key, value }) => ({ offset, key, value }))).toEqual(
      expected,
    );
    expect(fetchedHttp.next_offset).toBe(3);
    expect(fetchedHttp.high_watermark).toBe(3);

    for (const want of expected) {
      const event = await events.next();
      expect(event?.event).toBe("record");
      expect(event?.id).toBe(String(want.offset));
      expect(JSON.parse(event!.data)).toMatchObject(want);
    }
    // A live tail: a record produced now arrives on the open stream.
    await client.produce("mixed", [{ value: "live" }]);
    const live = await events.next();
    expect(live?.id).toBe("3");
    expect(JSON.parse(live!.data)).toMatchObject({ offset: 3, key: null, value: "live" });
    await events.cancel();

    const consumed = await runCli([
      "consume",
      "mixed",
      "--from-beginning",
      "--broker",
      `${broker.tcp.host}:${broker.tcp.port}`,
    ]);
    expect(consumed.code, consumed.stderr).toBe(0);
    expect(consumed.stdout.toString()).toBe("over tcp\nover http\nno key\nlive\n");
    await client.close();
  });

  it("refuses a body over --max-request-bytes with the JSON 413 however it is framed, and takes a chunked body under it", async () => {
    const capBytes = 65_536;
    const { broker } = await start(["--max-request-bytes", String(capBytes)]);
    expect(
      (await postJson(`${broker.httpUrl}/v1/topics`, { name: "cap", partitions: 1 })).status,
    ).toBe(201);
    const [host, portText] = broker.httpUrl.replace("http://", "").split(":");
    const port = Number(portText);
    const path = "/v1/topics/cap/records";
    const json = (valueBytes: number) =>
      JSON.stringify({ records: [{ value: "x".repeat(valueBytes) }] });

    // Chunked, under the cap: accepted.
    const small = await openRaw({ host, port, head: postHead(path, { chunked: true }) });
    const smallBody = json(20_000);
    for (let i = 0; i < smallBody.length; i += 4096)
      small.write(chunk(smallBody.slice(i, i + 4096)));
    small.write(chunk(""));
    const smallResponse = await small.response;
    small.destroy();
    expect(smallResponse.status, smallResponse.body).toBe(200);

    // Chunked, over the cap (no Content-Length to decide from): refused once the count passes it.
    const chunked = await openRaw({ host, port, head: postHead(path, { chunked: true }) });
    const bigBody = json(3 * capBytes);
    for (let i = 0; i < bigBody.length; i += 8192) chunked.write(chunk(bigBody.slice(i, i + 8192)));
    chunked.write(chunk(""));
    // A Content-Length far over the cap, with the body never sent: refused from the header alone
    // (Bun's own limit would answer this one with an empty 413 if it were on).
    const declared = await openRaw({
      host,
      port,
      head: postHead(path, { contentLength: 1 << 30 }),
    });
    declared.write("{");
    // A Content-Length over the cap, body sent in full.
    const sent = await openRaw({
      host,
      port,
      head: postHead(path, { contentLength: Buffer.byteLength(bigBody) }),
    });
    sent.write(bigBody);

    for (const [name, request] of [
      ["chunked", chunked],
      ["Content-Length 1 GiB, unsent", declared],
      ["Content-Length 3x the cap", sent],
    ] as const) {
      const response = await request.response;
      request.destroy();
      expect(response.status, `[${target}] ${name}: ${response.body}`).toBe(413);
      expect(response.headers["content-type"], name).toMatch(/^application\/json/);
      const error = (JSON.parse(response.body) as { error: { code: string; message: string } })
        .error;
      expect(error.code, name).toBe("request_too_large");
      expect(error.message, name).toContain(String(capBytes));
    }

    // Only the accepted request appended anything, and the broker still serves.
    const described = (await (await fetch(`${broker.httpUrl}/v1/topics/cap`)).json()) as {
      partitions: { high_watermark: number }[];
    };
    expect(described.partitions[0].high_watermark).toBe(1);
  });

  it("gives a TCP client that stopped reading every pipelined fetch answer whole once it reads, serving others meanwhile", async () => {
    // Each runtime's socket layer holds what the kernel will not take: Bun.listen's writes are not
    // buffered (src/runtime/bun-tcp.ts queues the rest until drain), node:net's are.
    const { broker } = await start();
    expect(
      (await postJson(`${broker.httpUrl}/v1/topics`, { name: "slow", partitions: 1 })).status,
    ).toBe(201);
    const writer = await TcpClient.connect(broker.tcp);
    const value = (i: number) => Buffer.alloc(1000, 97 + (i % 26));
    for (let batch = 0; batch < 4; batch++)
      await writer.produce(
        "slow",
        Array.from({ length: 1000 }, (_, i) => ({ value: value(batch * 1000 + i) })),
      );

    // 24 fetches of 1,000 records (~1 MB each) sent at once by a client that reads nothing.
    const fetches = 24;
    const frames: Buffer[] = [];
    for (let id = 1; id <= fetches; id++) {
      const body = Buffer.alloc(2 + 4 + 4 + 8 + 4 + 4 + 4);
      let at = body.writeUInt16BE(4, 0);
      at += body.write("slow", at);
      at = body.writeUInt32BE(0, at);
      at = body.writeBigUInt64BE(BigInt(((id - 1) % 4) * 1000), at);
      at = body.writeUInt32BE(1000, at);
      at = body.writeUInt32BE(1 << 20, at);
      body.writeUInt32BE(0, at);
      const head = Buffer.alloc(12);
      head.writeUInt32BE(8 + body.length, 0);
      head.writeUInt16BE(1, 4); // Fetch
      head.writeUInt16BE(0, 6);
      head.writeUInt32BE(id, 8);
      frames.push(head, body);
    }
    const reader = net.connect(broker.tcp.port, broker.tcp.host);
    reader.pause();
    await new Promise<void>((res, rej) => {
      reader.once("connect", () => res());
      reader.once("error", rej);
    });
    reader.write(Buffer.concat(frames));
    await sleep(1000);

    // The stalled connection holds up no one else.
    const other = await TcpClient.connect(broker.tcp);
    await other.produce("slow", [{ value: "meanwhile" }]);
    const tail = await other.fetch({ topic: "slow", partition: 0, offset: 4000 });
    expect(tail.records.map((r) => Buffer.from(r.value!).toString())).toEqual(["meanwhile"]);
    await other.close();

    // Now read: every answer arrives whole, with its records in order.
    const answers = new Map<number, Buffer>();
    await new Promise<void>((res, rej) => {
      let received = Buffer.alloc(0);
      reader.on("data", (data: Buffer) => {
        received = Buffer.concat([received, data]);
        while (received.length >= 4 && received.length >= 4 + received.readUInt32BE(0)) {
          const frame = received.subarray(0, 4 + received.readUInt32BE(0));
          answers.set(frame.readUInt32BE(4), frame);
          received = received.subarray(frame.length);
        }
        if (answers.size === fetches) res();
      });
      reader.once("close", () => rej(new Error(`closed after ${answers.size} answers`)));
      setTimeout(() => rej(new Error(`${answers.size} answers of ${fetches} in 20 s`)), 20_000);
      reader.resume();
    });
    reader.destroy();
    expect([...answers.keys()].sort((a, b) => a - b)).toEqual(
      Array.from({ length: fetches }, (_, i) => i + 1),
    );
    for (const [id, frame] of answers) {
      const from = ((id - 1) % 4) * 1000;
      expect(frame.readUInt16BE(8), `answer ${id}`).toBe(0);
      expect(Number(frame.readBigUInt64BE(26)), `answer ${id} next_offset`).toBe(from + 1000);
      expect(frame.readUInt32BE(34), `answer ${id} record_count`).toBe(1000);
      expect(frame.readUInt32BE(38), `answer ${id} records_bytes`).toBe(frame.length - 42);
      // Walk the records: each is where the one before it ends, at the next offset, whole.
      let at = 42;
      for (let n = 0; n < 1000; n++) {
        const length = frame.readUInt32BE(at);
        expect(Number(frame.readBigUInt64BE(at + 4))).toBe(from + n);
        expect(frame.subarray(at + 4 + 24, at + 4 + 24 + 1000).equals(value(from + n))).toBe(true);
        at += 4 + length;
      }
      expect(at).toBe(frame.length);
    }
    await writer.close();
  });

  it("on SIGTERM answers long-polls, ends SSE streams, finishes a produce still arriving, refuses new requests, then exits 0 with it on disk", async () => {
    const { broker, dataDir } = await start();
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "g", partitions: 1 });
    await client.produce("g", [{ value: "before" }]);

    // Waits as long as the test's time limit: only the shutdown can end them in time.
    const longPoll = fetch(
      `${broker.httpUrl}/v1/topics/g/partitions/0/records?offset=latest&wait_ms=60000`,
    );
    const tcpLongPoll = client.fetch({ topic: "g", partition: 0, offset: 1, waitMs: 60_000 });
    const stream = await fetch(`${broker.httpUrl}/v1/topics/g/partitions/0/stream?offset=earliest`);
    const events = sseReader(stream);
    expect(JSON.parse((await events.next())!.data)).toMatchObject({ offset: 0, value: "before" });
    const slow = await slowProduce(broker, "g", "arrived during shutdown");
    const [host, port] = broker.httpUrl.replace("http://", "").split(":");
    const keptAlive = await openKeepAlive({ host, port: Number(port) });
    expect(await keptAlive.get("/healthz")).toMatchObject({ status: 200 });
    await sleep(500); // the slow request is in the broker's hands, its body half read

    broker.proc.kill("SIGTERM");

    // Long-polls answer at once with what they have; the SSE stream ends cleanly.
    const polled = await longPoll;
    expect(polled.status).toBe(200);
    expect(((await polled.json()) as { records: unknown[] }).records).toEqual([]);
    expect((await tcpLongPoll).records).toEqual([]);
    await events.rest();

    // The produce still arriving keeps the broker up, and new connections are refused meanwhile.
    await sleep(300);
    expect(isRunning(broker), `[${target}] exited before finishing the in-flight produce`).toBe(
      true,
    );
    expect(
      await newConnectionRefused(broker),
      `[${target}] served a new connection while shutting down`,
    ).toBe(true);
    // A connection kept alive from before: closed by now, or its next request refused.
    const late = await keptAlive.get("/healthz");
    if (late !== "closed") {
      expect(late.status, `[${target}] ${late.body}`).toBe(503);
      expect(JSON.parse(late.body).error.code).toBe("unavailable");
    }
    keptAlive.destroy();

    slow.finish();
    const answered = await slow.request.response;
    expect(answered.status, `[${target}] ${answered.body}`).toBe(200);
    expect(JSON.parse(answered.body)).toEqual({ offsets: [{ partition: 0, offset: 1 }] });
    slow.request.destroy();
    await client.close().catch(() => {});

    expect(await exitOf(broker)).toBe(0);
    running.splice(running.indexOf(broker), 1);
    expect(broker.stderr()).not.toMatch(/Uncaught|panicked|unhandled/i);

    const { broker: again } = await start([], dataDir);
    const reader = await TcpClient.connect(again.tcp);
    const after = await reader.fetch({ topic: "g", partition: 0, offset: 0 });
    expect(after.records.map((r) => Buffer.from(r.value).toString())).toEqual([
      "before",
      "arrived during shutdown",
    ]);
    await reader.close();
  });

  it("exits 0 on a SIGTERM sent the moment it says it listens (its handlers come first)", async () => {
    for (let round = 0; round < 5; round++) {
      const { broker } = await start();
      expect(await broker.stop("SIGTERM"), `[${target}] round ${round}`).toBe(0);
      running.splice(running.indexOf(broker), 1);
    }
  });

  it("exits 0 on SIGINT with every acknowledged record on disk", async () => {
    const { broker, dataDir } = await start();
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "i", partitions: 2 });
    const acked = await Promise.all(
      Array.from({ length: 20 }, (_, i) => client.produce("i", [{ key: `k${i}`, value: `v${i}` }])),
    );
    await client.close();
    expect(await broker.stop("SIGINT")).toBe(0);
    running.splice(running.indexOf(broker), 1);

    const { broker: again } = await start([], dataDir);
    const reader = await TcpClient.connect(again.tcp);
    let total = 0;
    for (const partition of [0, 1])
      total += (await reader.fetch({ topic: "i", partition, offset: 0 })).records.length;
    expect(total).toBe(acked.length);
    await reader.close();
  });

  it("exits at once, non-zero, on a second signal while a request holds shutdown open", async () => {
    const { broker } = await start();
    expect(
      (await postJson(`${broker.httpUrl}/v1/topics`, { name: "s2", partitions: 1 })).status,
    ).toBe(201);
    const slow = await slowProduce(broker, "s2", "never finished");
    await sleep(500); // as above: the slow request is in the broker's hands
    broker.proc.kill("SIGTERM");
    // Past the 1 s in which a repeat is the same request (signals.ts REPEAT_WINDOW_MS).
    await sleep(2000);
    expect(isRunning(broker), `[${target}] the half-sent produce should hold shutdown open`).toBe(
      true,
    );
    // Without the second signal it would wait for that body forever (past the test's time limit).
    broker.proc.kill("SIGTERM");
    const code = await exitOf(broker);
    running.splice(running.indexOf(broker), 1);
    slow.request.destroy();
    expect(code).toBe(143);
    expect(broker.stderr()).toContain("second SIGTERM");
  });

  it("takes the same signal twice within milliseconds (Ctrl-C under a task runner) as one stop", async () => {
    const { broker, dataDir } = await start();
    expect(
      (await postJson(`${broker.httpUrl}/v1/topics`, { name: "s3", partitions: 1 })).status,
    ).toBe(201);
    // A half-sent produce holds shutdown open while both signals arrive.
    const slow = await slowProduce(broker, "s3", "finished after both signals");
    await sleep(500); // as above: the slow request is in the broker's hands
    broker.proc.kill("SIGINT");
    await sleep(10);
    broker.proc.kill("SIGINT");
    await sleep(300);
    expect(isRunning(broker), `[${target}] the repeat within 1 s ended the process`).toBe(true);
    slow.finish();
    const answered = await slow.request.response;
    expect(answered.status, `[${target}] ${answered.body}`).toBe(200);
    expect(await exitOf(broker)).toBe(0);
    running.splice(running.indexOf(broker), 1);
    // Two SIGINTs 10 ms apart may reach the process as one (a pending signal is not queued
    // twice: seen on Deno under load in CI, 2026-12-03); when both arrive, the second is named.
    const stderr = broker.stderr();
    const deliveries = stderr.match(/"event":"broker\.shutdown"/g)?.length ?? 0;
    expect(deliveries).toBe(1);
    if (!stderr.includes("SIGINT again within 1 s of the first"))
      console.log(`[${target}] the two SIGINTs arrived as one`);
    expect(stderr).not.toContain("second SIGINT");
    expect(existsSync(`${dataDir}/clean-stop.json`)).toBe(true);
  });
});
