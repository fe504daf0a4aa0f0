/**
 * A consumer of es-broker's NDJSON fetch answer (`Accept: application/x-ndjson`, docs/http-api.md
 * "fetch") over one keep-alive HTTP/1.1 connection, the way docs/benchmarks.md "Fetch as NDJSON"
 * says a fast HTTP consumer reads:
 *
 * - **one fetch ahead**: the next GET (from the answer's `Next-Offset` header) is written as soon
 *   as an answer's head arrives, pipelined on the same connection, so the broker reads and
 *   encodes the next records while this process splits the current ones;
 * - **no `JSON.parse` of the answer**: the body is split at newline bytes and each line read in
 *   place — its offset from the digits after `{"offset":`, its value from the string after
 *   `,"value":"` (a raw `,"value":"` cannot occur inside an earlier JSON string, where every
 *   quote is escaped). A line whose value has an escape (`\`) is handed to `JSON.parse`.
 *
 * Requests are prepared text; answers must carry `Content-Length` (es-broker's do).
 */
import * as net from "node:net";

/** One answer: its records' bytes, as a consumer gets them. */
export interface NdjsonPage {
  /** The offset the fetch asked for. */
  offset: number;
  /** `Next-Offset`. */
  nextOffset: number;
  /** The body: one record per line. */
  body: Buffer;
}

const valueMarker = Buffer.from(',"value":"', "latin1");
const backslash = 0x5c;
const newline = 0x0a;

/**
 * Calls `onRecord(offset, value)` for every line of an NDJSON fetch answer; `value` is the record's
 * value as bytes: the UTF-8 bytes in place (utf8 answers), or decoded (base64 answers).
 * @returns the number of records.
 * @throws Error if a line is not a record of es-broker's shape.
 */
export function forEachNdjsonRecord(
  body: Buffer,
  base64: boolean,
  onRecord: (offset: number, value: Uint8Array) => void,
): number {
  let count = 0;
  let start = 0;
  while (start < body.length) {
    const end = body.indexOf(newline, start);
    if (end < 0) throw new Error("an NDJSON answer that does not end in a newline");
    // {"offset":N,
    let p = start + 10;
    let offset = 0;
    for (let c = body[p]; c >= 0x30 && c <= 0x39; c = body[++p]) offset = offset * 10 + c - 0x30;
    const valueStart = body.indexOf(valueMarker, p) + valueMarker.length;
    const valueEnd = end - 2; // "}
    if (valueStart < valueMarker.length || valueStart > valueEnd || body[valueEnd] !== 0x22)
      throw new Error(
        `not a record line: ${body.toString("utf8", start, Math.min(end, start + 120))}`,
      );
    let value: Uint8Array;
    // Search the value alone: a search to the end of the body per record would be quadratic.
    if (body.subarray(valueStart, valueEnd).includes(backslash)) {
      const record = JSON.parse(body.toString("utf8", start, end)) as { value: string };
      value = Buffer.from(record.value, base64 ? "base64" : "utf8");
    } else if (base64) {
      value = Buffer.from(body.toString("latin1", valueStart, valueEnd), "base64");
    } else {
      value = body.subarray(valueStart, valueEnd);
    }
    onRecord(offset, value);
    count++;
    start = end + 1;
  }
  return count;
}

/**
 * Reads one partition from `offset` on, one fetch ahead (module comment). `next()` must not be
 * called again before its promise settles.
 */
export class NdjsonFetchReader {
  readonly #socket: net.Socket;
  readonly #request: (offset: number) => string;
  readonly #wrapAt: number;
  #buffered: Buffer = Buffer.alloc(0);
  /** Reads of the body being received, not yet joined to `#buffered`. */
  #pending: Buffer[] = [];
  /** Bytes of `#buffered` and `#pending`. */
  #bufferedBytes = 0;
  /** Offsets asked for, oldest first, whose answers have not been taken by `next()`. */
  readonly #asked: number[] = [];
  /** Answers read and not yet taken. */
  readonly #pages: NdjsonPage[] = [];
  #waiting: { resolve(p: NdjsonPage): void; reject(e: Error): void } | null = null;
  /** The head of the answer being read, once parsed. */
  #head: { bodyStart: number; bodyEnd: number; nextOffset: number } | null = null;
  /** The `Next-Offset` of the latest head, while no fetch has been sent for it. */
  #unasked: number | null = null;
  #failed: Error | null = null;

  /**
   * @param request the GET request's bytes for an offset.
   * @param wrapAt a `Next-Offset` at or past this reads from 0 again (the preloaded records end).
   */
  private constructor(
    socket: net.Socket,
    request: (offset: number) => string,
    offset: number,
    wrapAt: number,
  ) {
    this.#socket = socket;
    this.#request = request;
    this.#wrapAt = wrapAt;
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => {
      // A body arrives in many reads: gather them and join once it is whole, not at every read.
      const head = this.#head;
      if (head !== null && this.#bufferedBytes + chunk.length < head.bodyEnd) {
        this.#pending.push(chunk);
        this.#bufferedBytes += chunk.length;
        return;
      }
      const parts = this.#pending;
      parts.push(chunk);
      this.#buffered =
        this.#buffered.length === 0 && parts.length === 1
          ? chunk
          : Buffer.concat([this.#buffered, ...parts]);
      this.#pending = [];
      this.#bufferedBytes = this.#buffered.length;
      this.#parse();
    });
    const fail = (err: Error) => {
      this.#failed ??= err;
      this.#waiting?.reject(err);
      this.#waiting = null;
    };
    socket.on("error", fail);
    socket.on("close", () => fail(new Error("the server closed the connection")));
    this.#ask(offset);
  }

  /** Connects and sends the first fetch. */
  static connect(
    url: URL,
    path: (offset: number) => string,
    offset: number,
    wrapAt: number,
  ): Promise<NdjsonFetchReader> {
    const request = (o: number) =>
      `GET ${path(o)} HTTP/1.1\r\nhost: ${url.host}\r\naccept: application/x-ndjson\r\n\r\n`;
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: url.hostname, port: Number(url.port) }, () => {
        socket.off("error", reject);
        resolve(new NdjsonFetchReader(socket, request, offset, wrapAt));
      });
      socket.once("error", reject);
    });
  }

  #ask(offset: number): void {
    this.#asked.push(offset);
    this.#socket.write(this.#request(offset));
  }

  /** Sends the fetch after the latest head's unless two answers are already owed or unread. */
  #askAhead(): void {
    if (this.#unasked === null || this.#asked.length + this.#pages.length >= 2) return;
    this.#ask(this.#unasked >= this.#wrapAt ? 0 : this.#unasked);
    this.#unasked = null;
  }

  /** The next answer, in offset order. */
  next(): Promise<NdjsonPage> {
    if (this.#failed) return Promise.reject(this.#failed);
    const page = this.#pages.shift();
    this.#askAhead();
    if (page !== undefined) return Promise.resolve(page);
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject };
    });
  }

  #parse(): void {
    for (;;) {
      const buf = this.#buffered;
      if (this.#head === null) {
        const headEnd = buf.indexOf("\r\n\r\n");
        if (headEnd < 0) return;
        const head = buf.toString("latin1", 0, headEnd);
        const status = Number(head.slice(9, 12));
        const length = /\r\ncontent-length: *(\d+)/i.exec(head);
        const next = /\r\nnext-offset: *(\d+)/i.exec(head);
        if (status !== 200 || length === null || next === null) {
          this.#socket.destroy(new Error(`an unexpected answer: ${buf.toString("utf8", 0, 300)}`));
          return;
        }
        const nextOffset = Number(next[1]);
        this.#head = {
          bodyStart: headEnd + 4,
          bodyEnd: headEnd + 4 + Number(length[1]),
          nextOffset,
        };
        // One ahead: the next fetch leaves before this answer's body is read.
        this.#unasked = nextOffset;
        this.#askAhead();
      }
      const head = this.#head;
      if (buf.length < head.bodyEnd) return;
      this.#head = null;
      this.#buffered = buf.length === head.bodyEnd ? Buffer.alloc(0) : buf.subarray(head.bodyEnd);
      this.#bufferedBytes = this.#buffered.length;
      const page = {
        offset: this.#asked.shift() as number,
        nextOffset: head.nextOffset,
        body: buf.subarray(head.bodyStart, head.bodyEnd),
      };
      const waiting = this.#waiting;
      this.#waiting = null;
      if (waiting !== null) waiting.resolve(page);
      else this.#pages.push(page);
      this.#askAhead();
    }
  }

  close(): void {
    this.#failed ??= new Error("closed");
    this.#socket.end();
  }
}
