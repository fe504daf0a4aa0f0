/**
 * The strict request-head parser of the raw produce path (`src/transport/http/request-head.ts`)
 * and the connection that uses it (`raw-connection.ts`): what it accepts, that any split of a
 * valid request parses the same, that garbage never throws, and that it never accepts a head
 * `node:http` refuses or parses differently (checked against the real `node:http` parser, in
 * process).
 */
import * as http from "node:http";
import { Duplex } from "node:stream";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  RawHttpConnection,
  type RawHttpOptions,
  type RawHttpSocket,
} from "../../src/transport/http/raw-connection.ts";
import type { RawAnswer, RawRequest } from "../../src/transport/http/raw-stream.ts";
import {
  headBytesMax,
  parseRequestHead,
  type RequestHead,
} from "../../src/transport/http/request-head.ts";

const enc = (text: string) => new TextEncoder().encode(text);
const dec = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

const body = '{"records":[{"value":"v"}]}';
const valid = `POST /v1/topics/t/records HTTP/1.1\r\nHost: localhost:8080\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;

function parse(text: string | Uint8Array) {
  const bytes = typeof text === "string" ? enc(text) : text;
  return parseRequestHead(bytes, 0, bytes.length);
}

describe("parseRequestHead", () => {
  it("parses a produce head: target, lower-case names, trimmed values, Content-Length, head size", () => {
    const head = parse(`${valid}${body}`) as RequestHead;
    expect(head).toEqual({
      method: "POST",
      target: "/v1/topics/t/records",
      names: ["host", "content-type", "content-length"],
      values: ["localhost:8080", "application/json", String(body.length)],
      contentLength: body.length,
      headBytes: valid.length,
    });
    const spaced = parse(
      "POST /x?partition=1 HTTP/1.1\r\nHOST:  h \t\r\nX-Empty:\r\nConnection: Keep-Alive\r\n\r\n",
    ) as RequestHead;
    expect(spaced.target).toBe("/x?partition=1");
    expect(spaced.names).toEqual(["host", "x-empty", "connection"]);
    expect(spaced.values).toEqual(["h", "", "Keep-Alive"]);
    expect(spaced.contentLength).toBe(-1);
  });

  it("parses a head that starts inside the buffer and ignores what follows it", () => {
    const bytes = enc(`junk${valid}${body}POST`);
    const head = parseRequestHead(bytes, 4, bytes.length) as RequestHead;
    expect(head.headBytes).toBe(valid.length);
    expect(head.target).toBe("/v1/topics/t/records");
  });

  it("gives each head its own target and values when they change from one head to the next", () => {
    const head = (target: string, host: string, type: string) =>
      parse(
        `POST ${target} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: ${type}\r\nX-A: ${host}\r\nContent-Length: 0\r\n\r\n`,
      ) as RequestHead;
    const heads = [
      head("/a", "h1", "application/json"),
      head("/a", "h1", "application/json"),
      head("/b", "h2", "application/x-ndjson"),
      head("/a", "h1", "application/jsoN"),
    ];
    expect(heads.map((h) => [h.target, ...h.values])).toEqual([
      ["/a", "h1", "application/json", "h1", "0"],
      ["/a", "h1", "application/json", "h1", "0"],
      ["/b", "h2", "application/x-ndjson", "h2", "0"],
      ["/a", "h1", "application/jsoN", "h1", "0"],
    ]);
    expect(heads[3].names).toEqual(["host", "content-type", "x-a", "content-length"]);
  });

  it("refuses everything outside its subset, for node:http to answer", () => {
    const H = "Host: h\r\n";
    const refused = [
      `GET / HTTP/1.1\r\n${H}\r\n`,
      `post / HTTP/1.1\r\n${H}\r\n`,
      `POST / HTTP/1.0\r\n${H}\r\n`,
      `POST / HTTP/1.1\n${H}\r\n`,
      `\r\nPOST / HTTP/1.1\r\n${H}\r\n`,
      `POST  / HTTP/1.1\r\n${H}\r\n`,
      `POST http://h/ HTTP/1.1\r\n${H}\r\n`,
      `POST * HTTP/1.1\r\n${H}\r\n`,
      `POST /a b HTTP/1.1\r\n${H}\r\n`,
      `POST /\x7f HTTP/1.1\r\n${H}\r\n`,
      `POST / HTTP/1.1\r\n\r\n`, // no Host
      `POST / HTTP/1.1\r\n${H}Host: i\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: 1\r\ncontent-length: 1\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: 01\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: +1\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: 1,1\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: 1 1\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: 1234567890123456\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Expect: 100-continue\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Upgrade: websocket\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Connection: close\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}Connection: keep-alive, Upgrade\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A: 1\r\n folded\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A : 1\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}: 1\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A: 1\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A: 1\r\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A: \x00\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A: caf\u00e9\r\n\r\n`,
      `POST / HTTP/1.1\r\n${H}X-A: 1\r\n\n`,
      `POST / HTTP/1.1\r\n${H}${"X-Long: a\r\n".repeat(headBytesMax / 10)}\r\n`,
      `POST / HTTP/1.1\r\n${H}${Array.from({ length: 65 }, (_, i) => `X-${i}: 1\r\n`).join("")}\r\n`,
    ];
    for (const text of refused) expect(parse(text), JSON.stringify(text)).toBe("refused");
  });

  it("says incomplete for every proper prefix of a valid head, and refuses an endless one at the limit", () => {
    for (let n = 0; n < valid.length; n++)
      expect(parse(valid.slice(0, n)), JSON.stringify(valid.slice(0, n))).toBe("incomplete");
    const endless = `POST / HTTP/1.1\r\nHost: h\r\nX-A: ${"a".repeat(headBytesMax)}`;
    expect(parse(endless)).toBe("refused");
    expect(parse(endless.slice(0, headBytesMax - 1))).toBe("incomplete");
  });

  it("parses a valid request the same however its bytes are split (property)", () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[a-z0-9._-]{1,20}$/),
        fc.array(
          fc.tuple(
            fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/),
            fc.stringMatching(/^[ -~]{0,30}$/),
          ),
          { maxLength: 6 },
        ),
        fc.nat(400),
        fc.integer({ min: 0, max: 1000 }),
        (topic, extra, length, cutSeed) => {
          const seen = new Set(["host", "content-length"]);
          let head = `POST /v1/topics/${topic}/records HTTP/1.1\r\nHost: localhost\r\n`;
          for (const [name, value] of extra) {
            const lower = name.toLowerCase();
            if (
              seen.has(lower) ||
              ["transfer-encoding", "expect", "upgrade", "connection"].includes(lower)
            )
              continue;
            seen.add(lower);
            head += `${name}: ${value}\r\n`;
          }
          head += `Content-Length: ${length}\r\n\r\n`;
          const bytes = enc(head + "x".repeat(length));
          const whole = parseRequestHead(bytes, 0, bytes.length) as RequestHead;
          expect(typeof whole).toBe("object");
          expect(whole.headBytes).toBe(head.length);
          expect(whole.contentLength).toBe(length);
          // A cut anywhere: before the head's end, incomplete; the head whole, the same head.
          const cut = cutSeed % (bytes.length + 1);
          const part = parseRequestHead(bytes, 0, cut);
          if (cut < head.length) expect(part).toBe("incomplete");
          else expect(part).toEqual(whole);
          // And the same bytes inside a larger buffer, after a pipelined request.
          const twice = enc(head + "x".repeat(length) + head);
          expect(parseRequestHead(twice, head.length + length, twice.length)).toEqual(whole);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("never throws on garbage, and answers one of its three results (property)", () => {
    const interesting = fc.constantFrom(
      ...[0x0d, 0x0a, 0x20, 0x09, 0x3a, 0x00, 0x7f, 0x80, 0xff, 0x2f, 0x30, 0x61].map((b) => [b]),
    );
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 600 }),
          fc
            .tuple(fc.nat(valid.length), fc.array(interesting, { maxLength: 4 }))
            .map(([at, inserted]) =>
              enc(valid.slice(0, at) + String.fromCharCode(...inserted.flat()) + valid.slice(at)),
            ),
        ),
        fc.nat(),
        (bytes, startSeed) => {
          const start = bytes.length === 0 ? 0 : startSeed % bytes.length;
          const result = parseRequestHead(bytes, start, bytes.length);
          expect(
            result === "incomplete" || result === "refused" || typeof result === "object",
          ).toBe(true);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("accepts no head node:http refuses, and parses each it accepts as node:http does (property)", async () => {
    const mutation = fc.constantFrom(
      "\r",
      "\n",
      " ",
      "\t",
      ":",
      "\x00",
      "\x7f",
      "\x80",
      "\xff",
      "/",
      "0",
      "a",
      ",",
      "\r\n",
      "\r\n ",
      "\r\nContent-Length: 5",
      "\r\nTransfer-Encoding: chunked",
      "\r\nHost: other",
      "\r\nX:",
      "?",
      "%",
      "#",
      '"',
    );
    const sample = fc.tuple(
      fc.array(fc.tuple(fc.nat(valid.length), fc.nat(3), mutation), { minLength: 1, maxLength: 3 }),
    );
    const runs = fc.sample(sample, { numRuns: 400, seed: 22 });
    let accepted = 0;
    for (const [mutations] of runs) {
      let text = valid;
      for (const [at, cut, insert] of mutations) {
        const i = at % (text.length + 1);
        text = text.slice(0, i) + insert + text.slice(Math.min(text.length, i + (cut % 2)));
      }
      const bytes = Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff);
      const ours = parseRequestHead(bytes, 0, bytes.length);
      if (typeof ours !== "object") continue;
      accepted++;
      const theirs = await nodeParse(bytes);
      const what = JSON.stringify(text);
      expect(theirs.ok, `${what}: node:http refused it (${theirs.ok ? "" : theirs.code})`).toBe(
        true,
      );
      if (!theirs.ok) continue;
      expect(theirs.method, what).toBe(ours.method);
      expect(theirs.url, what).toBe(ours.target);
      expect(theirs.names, what).toEqual(ours.names);
      ours.names.forEach((name, i) => expect(theirs.headers[name], what).toBe(ours.values[i]));
    }
    // The mutations leave some heads whole: the comparison ran.
    expect(accepted).toBeGreaterThan(20);
  });
});

/** What the real `node:http` server parser makes of `bytes` (in process, no socket). */
function nodeParse(
  bytes: Uint8Array,
): Promise<
  | { ok: true; method: string; url: string; names: string[]; headers: http.IncomingHttpHeaders }
  | { ok: false; code: string }
> {
  return new Promise((resolve) => {
    const server = http.createServer();
    const socket = new Duplex({
      read() {},
      write(_chunk, _encoding, callback) {
        callback();
      },
    });
    server.on("request", (request: http.IncomingMessage) => {
      const names: string[] = [];
      for (let i = 0; i < request.rawHeaders.length; i += 2)
        names.push(request.rawHeaders[i].toLowerCase());
      resolve({
        ok: true,
        method: request.method ?? "",
        url: request.url ?? "",
        names,
        headers: request.headers,
      });
      socket.destroy();
    });
    server.on("clientError", (error: Error & { code?: string }) => {
      resolve({ ok: false, code: error.code ?? "?" });
      socket.destroy();
    });
    server.emit("connection", socket);
    socket.push(Buffer.from(bytes));
  });
}

/** A socket that records what the connection does. */
function fakeSocket() {
  const events: string[] = [];
  const socket: RawHttpSocket = {
    write: (text) => events.push(`write ${text}`) > 0,
    pause: () => events.push("pause"),
    resume: () => events.push("resume"),
    handOver: (rest) => events.push(`handOver ${dec(rest)}`),
    end: () => events.push("end"),
    destroy: () => events.push("destroy"),
  };
  return { socket, events };
}

function connection(
  socket: RawHttpSocket,
  take: (request: RawRequest) => Promise<RawAnswer> | null,
): RawHttpConnection {
  const options: RawHttpOptions = {
    take,
    date: () => "Thu, 01 Jan 1970 00:00:00 GMT",
    reason: (status) => (status === 200 ? "OK" : "Bad Request"),
    keepAliveSeconds: 5,
    maxInFlight: 128,
  };
  return new RawHttpConnection(socket, options);
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

describe("RawHttpConnection", () => {
  const produce = (n: number) =>
    `POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: ${String(n).length}\r\n\r\n${n}`;

  it("answers pipelined requests in order in one write, then hands over the first it does not take with the rest", async () => {
    const { socket, events } = fakeSocket();
    const resolvers: ((a: RawAnswer) => void)[] = [];
    const seen: string[] = [];
    const conn = connection(socket, (request) => {
      if (request.url !== "/p") return null;
      return new Promise((resolve) => {
        void request.readBody(100).then((b) => seen.push(dec(b!)));
        resolvers.push(resolve);
      });
    });
    const rest = `GET /other HTTP/1.1\r\nHost: h\r\n\r\n${produce(9)}`;
    conn.onData(enc(produce(1) + produce(2) + rest));
    expect(events).toEqual(["pause"]);
    // Answered out of order: written in request order, together.
    resolvers[1]({ status: 200, headers: { "content-type": "application/json" }, body: "b" });
    await tick();
    expect(events).toEqual(["pause"]);
    resolvers[0]({ status: 400, headers: {}, body: "a\u00e9" });
    await tick();
    expect(seen).toEqual(["1", "2"]);
    expect(events).toEqual([
      "pause",
      "write HTTP/1.1 400 Bad Request\r\ncontent-length: 3\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\na\u00e9" +
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\nb",
      `handOver ${rest}`,
    ]);
  });

  it("hands over a head or body not whole in the read, and what arrives while answers are owed", async () => {
    for (const cut of [5, produce(1).length - 1]) {
      const { socket, events } = fakeSocket();
      let resolve!: (a: RawAnswer) => void;
      const conn = connection(socket, () => new Promise((r) => (resolve = r)));
      const bytes = produce(7) + produce(1);
      conn.onData(enc(bytes.slice(0, produce(7).length + cut)));
      conn.onData(enc(bytes.slice(produce(7).length + cut)));
      expect(events).toEqual(["pause"]);
      resolve({ status: 200, headers: {}, body: "" });
      await tick();
      expect(events.slice(2)).toEqual([`handOver ${produce(1)}`]);
    }
  });

  it("writes each answer's own status line and headers when a frozen headers object comes again", async () => {
    const { socket, events } = fakeSocket();
    const headers = Object.freeze({ "content-type": "application/json", "x-b": "1" });
    const answers: RawAnswer[] = [
      { status: 200, headers, body: "a" },
      { status: 200, headers, body: "bb" },
      { status: 400, headers, body: "c" },
      { status: 200, headers: { "content-type": "text/plain" }, body: "d" },
    ];
    const conn = connection(socket, () => Promise.resolve(answers.shift()!));
    conn.onData(enc(produce(1) + produce(2) + produce(3) + produce(4)));
    await tick();
    const date =
      "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n";
    expect(events).toEqual([
      `write HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-b: 1\r\ncontent-length: 1\r\n${date}a` +
        `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-b: 1\r\ncontent-length: 2\r\n${date}bb` +
        `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nx-b: 1\r\ncontent-length: 1\r\n${date}c` +
        `HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1\r\n${date}d`,
    ]);
  });

  it("drops the connection if an answer cannot be written as it is", async () => {
    const { socket, events } = fakeSocket();
    const conn = connection(socket, () =>
      Promise.resolve({ status: 200, headers: { location: "a\r\nb" }, body: "" }),
    );
    conn.onData(enc(produce(1)));
    await tick();
    expect(events).toEqual(["destroy"]);
  });

  it("at shutdown reads nothing more and ends once the owed answers are out", async () => {
    const { socket, events } = fakeSocket();
    let resolve!: (a: RawAnswer) => void;
    const conn = connection(socket, () => new Promise((r) => (resolve = r)));
    conn.onData(enc(produce(1)));
    conn.shutdown();
    conn.onData(enc(produce(2)));
    expect(events).toEqual(["pause"]);
    resolve({ status: 200, headers: {}, body: "" });
    await tick();
    expect(events[1]).toMatch(/^write HTTP\/1.1 200 OK/);
    expect(events[2]).toBe("end");
  });
});
