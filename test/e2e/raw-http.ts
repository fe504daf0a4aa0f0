/**
 * HTTP/1.1 over a bare socket, for what `fetch` cannot do: send a body slowly in chunks, declare a
 * Content-Length and never send it, or keep sending after the server has answered.
 */
import * as net from "node:net";

/** A parsed HTTP response. */
export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** An open request whose body the test writes piece by piece. */
export interface RawRequest {
  /** Writes raw bytes (already framed: use {@link chunk} for a chunked body). False once the socket is gone. */
  write(data: string | Uint8Array): boolean;
  /** Resolves with the response once it is complete; rejects if the connection ends without one. */
  response: Promise<RawResponse>;
  /** Resolves when the connection is closed (by either side). */
  closed: Promise<void>;
  /** Closes the connection. */
  destroy(): void;
}

/** One chunk of a `Transfer-Encoding: chunked` body; `chunk("")` is the terminating one. */
export function chunk(data: string | Uint8Array): Buffer {
  const bytes = typeof data === "string" ? Buffer.from(data) : Buffer.from(data);
  if (bytes.length === 0) return Buffer.from("0\r\n\r\n");
  return Buffer.concat([
    Buffer.from(`${bytes.length.toString(16)}\r\n`),
    bytes,
    Buffer.from("\r\n"),
  ]);
}

/**
 * Connects, sends `head` (request line and headers, ending in an empty line) and returns the
 * open request. Rejects if the connection is refused.
 */
export function openRaw(options: {
  host: string;
  port: number;
  head: string;
}): Promise<RawRequest> {
  return new Promise((resolveOpen, rejectOpen) => {
    const socket = net.connect(options.port, options.host);
    let received = Buffer.alloc(0);
    let settle: ((r: RawResponse) => void) | null = null;
    let fail: ((e: Error) => void) | null = null;
    const response = new Promise<RawResponse>((res, rej) => {
      settle = res;
      fail = rej;
    });
    response.catch(() => {});
    const closed = new Promise<void>((res) => socket.once("close", () => res()));
    const tryParse = (ended: boolean): void => {
      const headEnd = received.indexOf("\r\n\r\n");
      if (headEnd < 0) return;
      const lines = received.subarray(0, headEnd).toString("latin1").split("\r\n");
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? NaN);
      const headers: Record<string, string> = {};
      for (const line of lines.slice(1)) {
        const i = line.indexOf(":");
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      const rest = received.subarray(headEnd + 4);
      let body: Buffer | null = null;
      if (headers["transfer-encoding"]?.toLowerCase() === "chunked") {
        const parts: Buffer[] = [];
        let at = 0;
        for (;;) {
          const lineEnd = rest.indexOf("\r\n", at);
          if (lineEnd < 0) break;
          const size = parseInt(rest.subarray(at, lineEnd).toString("latin1"), 16);
          if (size === 0) {
            body = Buffer.concat(parts);
            break;
          }
          if (rest.length < lineEnd + 2 + size + 2) break;
          parts.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
          at = lineEnd + 2 + size + 2;
        }
      } else if (headers["content-length"] !== undefined) {
        const length = Number(headers["content-length"]);
        if (rest.length >= length) body = rest.subarray(0, length);
      } else if (ended) {
        body = rest;
      }
      if (body !== null) settle?.({ status, headers, body: body.toString("utf8") });
    };
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
      tryParse(false);
    });
    socket.on("end", () => tryParse(true));
    socket.on("close", () => {
      tryParse(true);
      fail?.(
        new Error(
          `connection closed without a complete response; received ${JSON.stringify(received.toString("latin1").slice(0, 200))}`,
        ),
      );
    });
    let connected = false;
    socket.on("error", (error) => {
      if (!connected) rejectOpen(error);
    });
    socket.once("connect", () => {
      connected = true;
      socket.write(options.head);
      resolveOpen({
        write: (data) => {
          if (socket.destroyed || !socket.writable) return false;
          socket.write(data);
          return true;
        },
        response,
        closed,
        destroy: () => socket.destroy(),
      });
    });
  });
}

/** The request line and headers of a POST with a JSON body, chunked or with a Content-Length. */
export function postHead(
  path: string,
  body: { chunked: true } | { contentLength: number },
): string {
  const framing =
    "chunked" in body ? "Transfer-Encoding: chunked" : `Content-Length: ${body.contentLength}`;
  return `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`;
}

/** A kept-alive connection that sends one GET at a time. */
export interface KeepAliveConnection {
  /** Sends `GET path` and resolves with the response, or with "closed" if the server closed the connection first. */
  get(path: string): Promise<RawResponse | "closed">;
  destroy(): void;
}

/**
 * The body at the start of `rest` framed by `headers` (`Content-Length`, or chunked, as Bun's
 * `node:http` sends), and the bytes it took; null while incomplete.
 */
function framedBody(
  rest: Buffer,
  headers: Record<string, string>,
): { body: Buffer; usedBytes: number } | null {
  if (headers["transfer-encoding"]?.toLowerCase() === "chunked") {
    const parts: Buffer[] = [];
    let at = 0;
    for (;;) {
      const lineEnd = rest.indexOf("\r\n", at);
      if (lineEnd < 0) return null;
      const size = parseInt(rest.subarray(at, lineEnd).toString("latin1"), 16);
      if (size === 0) {
        if (rest.length < lineEnd + 4) return null;
        return { body: Buffer.concat(parts), usedBytes: lineEnd + 4 };
      }
      if (rest.length < lineEnd + 2 + size + 2) return null;
      parts.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
      at = lineEnd + 2 + size + 2;
    }
  }
  const length = Number(headers["content-length"] ?? NaN);
  if (!(rest.length >= length)) return null;
  return { body: rest.subarray(0, length), usedBytes: length };
}

/** Connects for a series of GET requests over one connection (responses framed by Content-Length or chunked). */
export function openKeepAlive(options: {
  host: string;
  port: number;
}): Promise<KeepAliveConnection> {
  return new Promise((resolveOpen, rejectOpen) => {
    const socket = net.connect(options.port, options.host);
    let received = Buffer.alloc(0);
    let closed = false;
    let waiter: ((r: RawResponse | "closed") => void) | null = null;
    const tryParse = (): void => {
      if (waiter === null) return;
      const headEnd = received.indexOf("\r\n\r\n");
      if (headEnd < 0) return;
      const lines = received.subarray(0, headEnd).toString("latin1").split("\r\n");
      const headers: Record<string, string> = {};
      for (const line of lines.slice(1)) {
        const i = line.indexOf(":");
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? NaN);
      const framed = framedBody(received.subarray(headEnd + 4), headers);
      if (framed === null) return;
      const body = framed.body.toString("utf8");
      received = received.subarray(headEnd + 4 + framed.usedBytes);
      const w = waiter;
      waiter = null;
      w({ status, headers, body });
    };
    let connected = false;
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
      tryParse();
    });
    socket.on("close", () => {
      closed = true;
      waiter?.("closed");
      waiter = null;
    });
    socket.on("error", (error) => {
      if (!connected) rejectOpen(error);
    });
    socket.once("connect", () => {
      connected = true;
      resolveOpen({
        get: (path) =>
          new Promise((res) => {
            if (closed) return res("closed");
            waiter = res;
            socket.write(
              `GET ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n`,
            );
          }),
        destroy: () => socket.destroy(),
      });
    });
  });
}

/** What {@link exchangeRaw} saw on the connection. */
export interface RawExchange {
  /** Every whole response, in the order they came. */
  responses: RawResponse[];
  /** True if the server closed the connection (false: still open when the wait ended). */
  closed: boolean;
  /** Bytes after the last whole response (a cut response, or none). */
  rest: string;
}

/**
 * Connects, writes `bytes` in one write (pipelined requests, garbage, …), and collects responses
 * until the server closes the connection or `waitMs` passes; then closes it.
 */
export function exchangeRaw(options: {
  host: string;
  port: number;
  bytes: string | Uint8Array;
  waitMs?: number;
}): Promise<RawExchange> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(options.port, options.host);
    let received = Buffer.alloc(0);
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const responses: RawResponse[] = [];
      for (;;) {
        const headEnd = received.indexOf("\r\n\r\n");
        if (headEnd < 0) break;
        const lines = received.subarray(0, headEnd).toString("latin1").split("\r\n");
        const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? NaN);
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const i = line.indexOf(":");
          if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
        }
        const rest = received.subarray(headEnd + 4);
        const framed =
          headers["transfer-encoding"] !== undefined || headers["content-length"] !== undefined
            ? framedBody(rest, headers)
            : closed
              ? { body: rest, usedBytes: rest.length }
              : null;
        if (framed === null) break;
        responses.push({ status, headers, body: framed.body.toString("utf8") });
        received = rest.subarray(framed.usedBytes);
      }
      resolve({ responses, closed, rest: received.toString("latin1") });
    };
    const timer = setTimeout(() => finish(false), options.waitMs ?? 5_000);
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
    });
    socket.on("close", () => finish(true));
    socket.on("error", (error) => {
      if (received.length === 0 && socket.connecting) {
        settled = true;
        clearTimeout(timer);
        reject(error);
      }
    });
    socket.once("connect", () => socket.write(options.bytes));
  });
}
