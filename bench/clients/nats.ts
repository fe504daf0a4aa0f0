/**
 * A minimal NATS JetStream publisher for the benchmark's load generators: one connection, many
 * publishes in flight, each acknowledged by the stream (the JetStream "publish with ack").
 *
 * Protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol), only what we need:
 * ```
 * server → INFO {json} CRLF | MSG subject sid [reply] len CRLF payload CRLF | PING CRLF
 *        | PONG CRLF | +OK CRLF | -ERR 'text' CRLF
 * client → CONNECT {json} CRLF | SUB subject sid CRLF | PUB subject reply len CRLF payload CRLF
 *        | PING CRLF | PONG CRLF
 * ```
 * Every connection subscribes once to `_INBOX.<id>.*`; a request of n publishes uses one reply
 * subject `_INBOX.<id>.<seq>` and resolves when n acks (`{"stream":…,"seq":…}`) arrived on it. An
 * ack carrying `"error"` rejects the request.
 *
 * NATS 2.9 JetStream does not fsync per publish (it syncs its files every 2 minutes by default):
 * its acks mean "in the server's page cache", so it is not a durable peer.
 */
import * as net from "node:net";

interface Request {
  remaining: number;
  resolve(): void;
  reject(error: Error): void;
}

let connectionCounter = 0;

/** One NATS connection. */
export class NatsConnection {
  readonly #socket: net.Socket;
  readonly #inbox: string;
  readonly #requests = new Map<number, Request>();
  readonly #replies = new Map<number, (payload: string) => void>();
  #nextSeq = 1;
  #buf: Buffer = Buffer.alloc(0);
  #error: Error | null = null;
  #onPong: (() => void) | null = null;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    this.#inbox = `_INBOX.${process.pid}_${++connectionCounter}`;
    socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    socket.on("error", (e) => this.#fail(e));
    socket.on("close", () => this.#fail(new Error("NATS connection closed")));
  }

  /** Connects, sends CONNECT and SUB, and waits for the server's PONG. */
  static async connect(options: { host: string; port: number }): Promise<NatsConnection> {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ host: options.host, port: options.port, noDelay: true });
      s.once("error", reject);
      s.once("connect", () => {
        s.off("error", reject);
        resolve(s);
      });
    });
    const conn = new NatsConnection(socket);
    const ready = new Promise<void>((resolve) => (conn.#onPong = resolve));
    socket.write(
      `CONNECT {"verbose":false,"pedantic":false,"headers":false,"protocol":1}\r\nSUB ${conn.#inbox}.* 1\r\nPING\r\n`,
    );
    await ready;
    return conn;
  }

  /** Publishes one JetStream API request and resolves with the JSON reply. */
  api(subject: string, body: object): Promise<Record<string, unknown>> {
    if (this.#error) return Promise.reject(this.#error);
    const seq = this.#nextSeq++;
    const payload = Buffer.from(JSON.stringify(body));
    return new Promise((resolve) => {
      this.#replies.set(seq, (text) => resolve(JSON.parse(text) as Record<string, unknown>));
      this.#socket.write(
        Buffer.concat([
          Buffer.from(`PUB ${subject} ${this.#inbox}.${seq} ${payload.length}\r\n`),
          payload,
          Buffer.from("\r\n"),
        ]),
      );
    });
  }

  /**
   * Publishes `count` copies of `payload` to `subject` in one write (a pipeline) and resolves once
   * the stream acknowledged all of them. @throws Error if any ack carries an error.
   */
  publish(subject: string, payload: Uint8Array, count: number): Promise<void> {
    if (this.#error) return Promise.reject(this.#error);
    const seq = this.#nextSeq++;
    const one = Buffer.concat([
      Buffer.from(`PUB ${subject} ${this.#inbox}.${seq} ${payload.length}\r\n`),
      payload,
      Buffer.from("\r\n"),
    ]);
    const frames = count === 1 ? one : Buffer.concat(Array.from({ length: count }, () => one));
    return new Promise((resolve, reject) => {
      this.#requests.set(seq, { remaining: count, resolve, reject });
      this.#socket.write(frames);
    });
  }

  close(): void {
    this.#socket.destroy();
  }

  #onData(chunk: Buffer): void {
    this.#buf = this.#buf.length > 0 ? Buffer.concat([this.#buf, chunk]) : chunk;
    let pos = 0;
    for (;;) {
      const end = this.#buf.indexOf("\r\n", pos);
      if (end < 0) break;
      const line = this.#buf.toString("latin1", pos, end);
      if (line.startsWith("MSG ")) {
        // MSG subject sid [reply] len
        const parts = line.split(" ");
        const len = Number(parts[parts.length - 1]);
        if (end + 2 + len + 2 > this.#buf.length) break;
        const payload = this.#buf.toString("utf8", end + 2, end + 2 + len);
        pos = end + 2 + len + 2;
        this.#onMessage(parts[1], payload);
        continue;
      }
      pos = end + 2;
      if (line === "PING") this.#socket.write("PONG\r\n");
      else if (line === "PONG") {
        const f = this.#onPong;
        this.#onPong = null;
        f?.();
      } else if (line.startsWith("-ERR")) this.#fail(new Error(`NATS error: ${line}`));
    }
    this.#buf = pos === this.#buf.length ? Buffer.alloc(0) : this.#buf.subarray(pos);
  }

  #onMessage(subject: string, payload: string): void {
    const seq = Number(subject.slice(subject.lastIndexOf(".") + 1));
    const reply = this.#replies.get(seq);
    if (reply) {
      this.#replies.delete(seq);
      reply(payload);
      return;
    }
    const request = this.#requests.get(seq);
    if (!request) return;
    if (payload.includes('"error"')) {
      this.#requests.delete(seq);
      request.reject(new Error(`JetStream refused a publish: ${payload}`));
      return;
    }
    if (--request.remaining === 0) {
      this.#requests.delete(seq);
      request.resolve();
    }
  }

  #fail(error: Error): void {
    if (this.#error) return;
    this.#error = error;
    for (const r of this.#requests.values()) r.reject(error);
    this.#requests.clear();
    this.#socket.destroy();
  }
}
