/**
 * A minimal HTTP/1.1 client for the load generator: one keep-alive connection, one request in
 * flight, requests sent as prepared bytes, answers parsed only as far as the status line,
 * `Content-Length` and the body. What a C load generator (wrk, redis-benchmark) spends per
 * request, rather than what `node:http`'s client spends (its `ClientRequest`, agent and
 * `IncomingMessage` cost the generator about as much CPU per request as the broker's whole HTTP
 * path, on the same two cores). Answers must carry `Content-Length` (es-broker's produce answers
 * do); anything else fails the request.
 */
import * as net from "node:net";

/** An answer: its status and body. */
export interface Http1Answer {
  status: number;
  body: Buffer;
}

/** One connection; `send` must not be called again before its promise settles. */
export class Http1Connection {
  readonly #socket: net.Socket;
  #buffered: Buffer = Buffer.alloc(0);
  #waiting: { resolve(a: Http1Answer): void; reject(e: Error): void } | null = null;
  #closed: Error | null = null;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => {
      this.#buffered = this.#buffered.length === 0 ? chunk : Buffer.concat([this.#buffered, chunk]);
      this.#parse();
    });
    const fail = (err: Error) => {
      this.#closed ??= err;
      this.#waiting?.reject(err);
      this.#waiting = null;
    };
    socket.on("error", fail);
    socket.on("close", () => fail(new Error("the server closed the connection")));
  }

  /** Connects to `host:port`. */
  static connect(host: string, port: number): Promise<Http1Connection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host, port }, () => {
        socket.off("error", reject);
        resolve(new Http1Connection(socket));
      });
      socket.once("error", reject);
    });
  }

  /** Sends `request` (a whole HTTP/1.1 request, head and body) and resolves with the answer. */
  send(request: Buffer): Promise<Http1Answer> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject };
      this.#socket.write(request);
    });
  }

  #parse(): void {
    const buf = this.#buffered;
    const headEnd = buf.indexOf("\r\n\r\n");
    if (headEnd < 0) return;
    const head = buf.toString("latin1", 0, headEnd);
    const status = Number(head.slice(9, 12));
    const m = /\r\ncontent-length: *(\d+)/i.exec(head);
    if (m === null) {
      this.#socket.destroy(new Error(`an answer without Content-Length: ${head.slice(0, 200)}`));
      return;
    }
    const end = headEnd + 4 + Number(m[1]);
    if (buf.length < end) return;
    const body = buf.subarray(headEnd + 4, end);
    this.#buffered = buf.length === end ? Buffer.alloc(0) : buf.subarray(end);
    const waiting = this.#waiting;
    this.#waiting = null;
    waiting?.resolve({ status, body });
  }

  close(): void {
    this.#closed ??= new Error("closed");
    this.#socket.end();
  }
}

/** The bytes of a POST request with `body`, `Host` and `Content-Length` set. */
export function postRequest(url: URL, headers: Record<string, string>, body: Buffer): Buffer {
  let head = `POST ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  head += `content-length: ${body.length}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, "latin1"), body]);
}
