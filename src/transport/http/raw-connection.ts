/**
 * HTTP/1.1 produce served on the runtime's raw socket (docs/http-api.md, "How requests are
 * served"; the socket side is `runtime/http-raw.ts`). One {@link RawHttpConnection} per plain-HTTP
 * connection reads requests with the strict parser of `request-head.ts` and serves those the app's
 * fast produce route takes (`FastRoute`, `app.ts`) itself: their answers are encoded here, in
 * request order, and the answers ready in one microtask turn leave in one write, as the TCP
 * transport does (`transport/connection.ts`).
 *
 * Everything else goes to `node:http`, at a request boundary, with the bytes read so far put back:
 * a head the parser refuses or that is not whole in what was read, a body not whole in what was
 * read, a request the fast route does not take (any other route, a key, a body over the cap, …).
 * The connection is handed over only once every answer it owes has been written, so answers stay
 * in request order; from then on `node:http` serves it to its end. So the raw path never waits for
 * a client inside a request — a slow head or body is `node:http`'s, with its timeouts — and never
 * holds more than the bytes of the read it is working on. While the socket's buffer is full (a
 * client that does not read its answers) it reads nothing more, as `node:http` does.
 */
import { concatBytes } from "../../lib/bytes.ts";
import type { RawAnswer, RawRequest } from "./raw-stream.ts";
import type { RequestHead } from "./request-head.ts";
import { parseRequestHead } from "./request-head.ts";

/** What a {@link RawHttpConnection} needs of its socket (`runtime/http-raw.ts`). */
export interface RawHttpSocket {
  /**
   * Writes `text` (whole answers) as UTF-8; false once the socket's buffer is full (then
   * `onDrain`). A string, not bytes: the runtime encodes it straight into the system call's buffer
   * (`node:net`), where bytes would need a buffer of their own per write.
   */
  write(text: string): boolean;
  /** Stops reading (bytes already delivered may still arrive). */
  pause(): void;
  /** Reads again. */
  resume(): void;
  /** Gives the connection to `node:http`, `rest` (maybe empty) being the first bytes it reads. */
  handOver(rest: Uint8Array): void;
  /** Closes the connection (after what was written). */
  end(): void;
  /** Closes at once (a bug: the fast route rejected, or an answer could not be encoded). */
  destroy(): void;
}

/** Settings shared by every {@link RawHttpConnection} of a server. */
export interface RawHttpOptions {
  /**
   * The fast route (with the server's own conditions: not shutting down, …): an answer promise
   * that never rejects, or null for a request it does not take.
   */
  take(request: RawRequest): Promise<RawAnswer> | null;
  /** The `Date` header's value now (an HTTP-date). */
  date(): string;
  /** The reason phrase of `status` (`OK`); `node:http`'s own table. */
  reason(status: number): string;
  /** The `Keep-Alive: timeout=` value, in seconds (`node:http`'s keep-alive timeout). */
  keepAliveSeconds: number;
  /** Most requests started and not yet answered; past it the rest is handed over. */
  maxInFlight: number;
}

/** A request being served: its answer's bytes once ready. */
interface Pending {
  done: boolean;
  text: string;
}

const resolved = Promise.resolve();
const encoder = new TextEncoder();

/** The end of every answer's head after the `Date` value, per keep-alive timeout in seconds. */
const headEnds = new Map<number, string>();
function headEnd(keepAliveSeconds: number): string {
  let end = headEnds.get(keepAliveSeconds);
  if (end === undefined) {
    end = `\r\nConnection: keep-alive\r\nKeep-Alive: timeout=${keepAliveSeconds}\r\n\r\n`;
    headEnds.set(keepAliveSeconds, end);
  }
  return end;
}

/** One connection (module comment). */
export class RawHttpConnection {
  readonly #socket: RawHttpSocket;
  readonly #options: RawHttpOptions;
  /** Requests started, oldest first (answers go out in this order). */
  #queue: Pending[] = [];
  /** Answers ready to write this turn, as one string. */
  #out = "";
  #flushScheduled = false;
  /** Bytes to give `node:http` once every owed answer is out; null while serving. */
  #handingOver: Uint8Array[] | null = null;
  /** Reading paused until the socket's buffer drains (a client that does not read its answers). */
  #writeBlocked = false;
  /** Reading stopped for good (shutdown): end once the owed answers are out. */
  #ending = false;
  #closed = false;
  /** Turns of the server's idle check since the last read ({@link idleTick}). */
  #idleTicks = 0;
  readonly #flushTurn = (): void => {
    this.#flushScheduled = false;
    this.#flush();
  };
  /**
   * The status line and header lines of the last answer encoded, kept while its `headers` object
   * is frozen (so cannot have changed): a connection's answers mostly share them.
   */
  #lastHeaders: Record<string, string> | null = null;
  #lastStatus = 0;
  #lastHead = "";
  readonly #headEnd: string;

  constructor(socket: RawHttpSocket, options: RawHttpOptions) {
    this.#socket = socket;
    this.#options = options;
    this.#headEnd = headEnd(options.keepAliveSeconds);
  }

  /** The connection still belongs to the raw path (not handed over, not closed). */
  get serving(): boolean {
    return this.#handingOver === null && !this.#closed && !this.#ending;
  }

  /** A read: serves every whole request it holds, hands the rest over (module comment). */
  onData(chunk: Uint8Array): void {
    if (this.#closed || this.#ending) return;
    this.#idleTicks = 0;
    if (this.#handingOver !== null) {
      this.#handingOver.push(chunk);
      return;
    }
    const end = chunk.length;
    let at = 0;
    while (at < end) {
      if (this.#queue.length >= this.#options.maxInFlight) break;
      const head = parseRequestHead(chunk, at, end);
      if (typeof head === "string") break;
      const bodyStart = at + head.headBytes;
      if (head.contentLength < 0 || bodyStart + head.contentLength > end) break;
      const bodyEnd = bodyStart + head.contentLength;
      const answer = this.#options.take(new HeadRequest(head, chunk.subarray(bodyStart, bodyEnd)));
      if (answer === null) break;
      const pending: Pending = { done: false, text: "" };
      this.#queue.push(pending);
      answer.then(
        (a) => this.#answered(pending, a),
        () => this.#fail(),
      );
      at = bodyEnd;
    }
    if (at < end) this.#handOver(chunk.subarray(at));
  }

  /** Shutdown: reads nothing more; ends once every owed answer is out. */
  shutdown(): void {
    if (this.#closed || this.#handingOver !== null || this.#ending) return;
    this.#ending = true;
    this.#socket.pause();
    this.#afterWrite();
  }

  /**
   * The client half-closed: what it sent is served, the owed answers are written, then the
   * connection ends. A hand-over still waiting is dropped (a socket past its end cannot be given
   * to `node:http`): the requests it held get no answer, and appended nothing.
   */
  onEnd(): void {
    if (this.#closed || this.#ending) return;
    this.#ending = true;
    this.#handingOver = null;
    this.#afterWrite();
  }

  /** The socket's buffer has room again: reading resumes if it was paused for it. */
  onDrain(): void {
    if (!this.#writeBlocked) return;
    this.#writeBlocked = false;
    if (this.serving) this.#socket.resume();
  }

  /** The socket closed. */
  onClose(): void {
    this.#closed = true;
    this.#queue = [];
    this.#out = "";
    this.#handingOver = null;
  }

  /**
   * One tick of the server's idle check: true once the connection has owed nothing, read nothing
   * and written nothing for more than `ticks` ticks, so for at least `ticks` tick periods (the
   * server then closes it, as `node:http` closes an idle keep-alive connection: never before the
   * `Keep-Alive: timeout` its answers announced).
   */
  idleTick(ticks: number): boolean {
    if (this.#queue.length > 0 || !this.serving) {
      this.#idleTicks = 0;
      return false;
    }
    return ++this.#idleTicks > ticks;
  }

  #handOver(rest: Uint8Array): void {
    this.#handingOver = [rest];
    this.#socket.pause();
    this.#afterWrite();
  }

  #answered(pending: Pending, answer: RawAnswer): void {
    if (this.#closed) return;
    let text: string;
    try {
      text = this.#encode(answer);
    } catch {
      return this.#fail();
    }
    pending.text = text;
    pending.done = true;
    const queue = this.#queue;
    let n = 0;
    while (n < queue.length && queue[n].done) this.#out += queue[n++].text;
    if (n === 0) return;
    if (n === queue.length) queue.length = 0;
    else queue.splice(0, n);
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    void resolved.then(this.#flushTurn);
  }

  #flush(): void {
    if (this.#closed) return;
    if (this.#out.length > 0) {
      this.#idleTicks = 0;
      const text = this.#out;
      this.#out = "";
      if (!this.#socket.write(text) && !this.#writeBlocked && this.serving) {
        this.#writeBlocked = true;
        this.#socket.pause();
      }
    }
    this.#afterWrite();
  }

  /** Hands over or ends once nothing is owed. */
  #afterWrite(): void {
    if (this.#closed || this.#queue.length > 0 || this.#out.length > 0) return;
    if (this.#ending) {
      this.#closed = true;
      this.#socket.end();
      return;
    }
    const held = this.#handingOver;
    if (held === null) return;
    this.#closed = true;
    this.#socket.handOver(held.length === 1 ? held[0] : concatBytes(held));
  }

  /** The answer as `node:http` writes a fast route's answer (`writeHead` + `end`). */
  #encode(answer: RawAnswer): string {
    const { body, headers, status } = answer;
    let head: string;
    if (headers === this.#lastHeaders && status === this.#lastStatus) head = this.#lastHead;
    else {
      head = `HTTP/1.1 ${status} ${this.#options.reason(status)}\r\n`;
      for (const name in headers) {
        const value = headers[name];
        if (!isFieldText(name) || !isFieldText(value)) throw new Error("bad header");
        head += `${name}: ${value}\r\n`;
      }
      if (Object.isFrozen(headers)) {
        this.#lastHeaders = headers;
        this.#lastStatus = status;
        this.#lastHead = head;
      }
    }
    const length = body.length === utf8Length(body) ? body.length : encoder.encode(body).length;
    return `${head}content-length: ${length}\r\nDate: ${this.#options.date()}${this.#headEnd}${body}`;
  }

  /** A bug (the route rejected, an answer that cannot be written): the connection is dropped. */
  #fail(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#queue = [];
    this.#out = "";
    this.#socket.destroy();
  }
}

/** The {@link RawRequest} of a parsed head and its whole body (a class: no closures per request). */
class HeadRequest implements RawRequest {
  readonly method: string;
  readonly url: string;
  readonly #names: string[];
  readonly #values: string[];
  readonly body: Uint8Array;

  constructor(head: RequestHead, body: Uint8Array) {
    this.method = head.method;
    this.url = head.target;
    this.#names = head.names;
    this.#values = head.values;
    this.body = body;
  }

  header(name: string): string | undefined {
    const i = this.#names.indexOf(name);
    return i < 0 ? undefined : this.#values[i];
  }

  /** The parser refuses repeated names: each is on one line or none. */
  headerLines(name: string): number {
    return this.#names.includes(name) ? 1 : 0;
  }

  readBody(maxBytes: number): Promise<Uint8Array | null> {
    return Promise.resolve(this.body.length > maxBytes ? null : this.body);
  }
}

/** Header text `node:http` would write unchanged: visible ASCII, spaces and tabs. */
function isFieldText(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c >= 0x7f) return false;
  }
  return true;
}

/** `text.length` if it is all ASCII (then its UTF-8 length), else something else. */
function utf8Length(text: string): number {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) >= 0x80) return -1;
  return text.length;
}
