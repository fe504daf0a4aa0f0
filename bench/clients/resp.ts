/**
 * A minimal Redis client for the benchmark's load generators: one connection, pipelined commands,
 * replies matched in order (RESP2, the protocol every Redis 7 connection starts in).
 *
 * Reply grammar (https://redis.io/docs/reference/protocol-spec/):
 * ```
 * reply   = "+" line | "-" line | ":" line | "$" len CRLF bytes CRLF | "$-1" CRLF
 *         | "*" count CRLF reply{count} | "*-1" CRLF
 * line    = text CRLF
 * ```
 * Only what the harness needs: `command()` encodes one command as an array of bulk strings,
 * `send()` writes many at once (a pipeline) and resolves with their replies in order. An error
 * reply (`-ERR …`) becomes a {@link RedisReplyError} value in the list, never a rejection, so a
 * pipeline always yields one value per command.
 */
import * as net from "node:net";

/** A decoded reply: status/bulk strings as strings, integers as numbers, arrays, null, or an error. */
export type RedisReply = string | number | null | RedisReplyError | RedisReply[];

/** An error reply (`-ERR …`). */
export class RedisReplyError extends Error {}

const crlf = Buffer.from("\r\n");

/** Encodes one command (`["XADD", "k", "*", "v", value]`) as a RESP array of bulk strings. */
export function command(args: readonly (string | Uint8Array)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes =
      typeof arg === "string"
        ? Buffer.from(arg)
        : Buffer.from(arg.buffer, arg.byteOffset, arg.byteLength);
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, crlf);
  }
  return Buffer.concat(parts);
}

/** Incremental RESP parser: push bytes, take whole replies. */
class ReplyParser {
  #buf: Buffer = Buffer.alloc(0);
  #pos = 0;

  push(chunk: Buffer): void {
    this.#buf =
      this.#pos < this.#buf.length ? Buffer.concat([this.#buf.subarray(this.#pos), chunk]) : chunk;
    this.#pos = 0;
  }

  /** The next whole reply, or undefined when more bytes are needed. */
  next(): RedisReply | undefined {
    const start = this.#pos;
    const value = this.#parse();
    if (value === undefined) this.#pos = start;
    return value;
  }

  #line(): string | undefined {
    const end = this.#buf.indexOf(crlf, this.#pos);
    if (end < 0) return undefined;
    const text = this.#buf.toString("latin1", this.#pos, end);
    this.#pos = end + 2;
    return text;
  }

  #parse(): RedisReply | undefined {
    if (this.#pos >= this.#buf.length) return undefined;
    const type = this.#buf[this.#pos++];
    const line = this.#line();
    if (line === undefined) return undefined;
    switch (type) {
      case 0x2b: // +
        return line;
      case 0x2d: // -
        return new RedisReplyError(line);
      case 0x3a: // :
        return Number(line);
      case 0x24: {
        // $
        const len = Number(line);
        if (len < 0) return null;
        if (this.#pos + len + 2 > this.#buf.length) return undefined;
        const text = this.#buf.toString("latin1", this.#pos, this.#pos + len);
        this.#pos += len + 2;
        return text;
      }
      case 0x2a: {
        // *
        const count = Number(line);
        if (count < 0) return null;
        const items: RedisReply[] = [];
        for (let i = 0; i < count; i++) {
          const item = this.#parse();
          if (item === undefined) return undefined;
          items.push(item);
        }
        return items;
      }
      default:
        throw new Error(`Cannot read Redis reply: unexpected type byte 0x${type.toString(16)}`);
    }
  }
}

interface Waiter {
  remaining: number;
  replies: RedisReply[];
  resolve(replies: RedisReply[]): void;
  reject(error: Error): void;
}

/** One Redis connection with pipelining. */
export class RedisConnection {
  readonly #socket: net.Socket;
  readonly #parser = new ReplyParser();
  readonly #waiters: Waiter[] = [];
  #error: Error | null = null;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    socket.on("error", (e) => this.#fail(e));
    socket.on("close", () => this.#fail(new Error("Redis connection closed")));
  }

  /** Connects to `host:port`. @throws Error if the connection fails. */
  static connect(options: { host: string; port: number }): Promise<RedisConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: options.host, port: options.port, noDelay: true });
      socket.once("error", reject);
      socket.once("connect", () => {
        socket.off("error", reject);
        resolve(new RedisConnection(socket));
      });
    });
  }

  /** Writes `count` already-encoded commands (one buffer) and resolves with their `count` replies. */
  send(commands: Buffer, count: number): Promise<RedisReply[]> {
    if (this.#error) return Promise.reject(this.#error);
    return new Promise((resolve, reject) => {
      this.#waiters.push({ remaining: count, replies: [], resolve, reject });
      this.#socket.write(commands);
    });
  }

  /** Sends one command and resolves with its reply (an error reply rejects). */
  async call(...args: (string | Uint8Array)[]): Promise<RedisReply> {
    const [reply] = await this.send(command(args), 1);
    if (reply instanceof RedisReplyError) throw reply;
    return reply;
  }

  close(): void {
    this.#socket.destroy();
  }

  #onData(chunk: Buffer): void {
    this.#parser.push(chunk);
    for (;;) {
      const reply = this.#parser.next();
      if (reply === undefined) return;
      const waiter = this.#waiters[0];
      if (waiter === undefined) return this.#fail(new Error("Redis sent a reply nobody asked for"));
      waiter.replies.push(reply);
      if (--waiter.remaining === 0) {
        this.#waiters.shift();
        waiter.resolve(waiter.replies);
      }
    }
  }

  #fail(error: Error): void {
    if (this.#error) return;
    this.#error = error;
    for (const w of this.#waiters.splice(0)) w.reject(error);
    this.#socket.destroy();
  }
}
