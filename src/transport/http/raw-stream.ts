/**
 * What passes between the runtime's server (`runtime/http.ts`) and the app below the WHATWG
 * `Request`/`Response` pair, on the hot paths: response bodies written straight to the connection
 * (`HttpBindings.openStream`, the live tail) and requests answered in front of the router
 * ({@link FastRoute}, produce).
 */

/** A response body being written straight to the connection (`HttpBindings.openStream`). */
export interface RawStream {
  /** Queues `text` (UTF-8); false when the connection's buffer is full: wait for {@link drained}. */
  write(text: string): boolean;
  /** Resolves when the buffer has room again, or the connection closed. */
  drained(): Promise<void>;
  /** Aborted when the connection closes (the client went away, or the answer ended). */
  readonly closed: AbortSignal;
  /** Ends the answer. */
  end(): void;
  /** What the route returns: the server then writes nothing more for this request. */
  answered(): Response;
}

/**
 * A request as the runtime's server parsed it, before any `Request` is made of it: what a
 * {@link FastRoute} reads.
 */
export interface RawRequest {
  method: string;
  /** The request target as sent: a path and maybe a query (`/v1/topics/t/records?x=1`). */
  url: string;
  /** A header's value (`name` in lower case), undefined when absent. */
  header(name: string): string | undefined;
  /** How many field lines named `name` (lower case) the request carried. */
  headerLines(name: string): number;
  /** As `HttpBindings.readRawBody`. */
  readBody(maxBytes: number): Promise<Uint8Array | null>;
  /**
   * The whole body, when the server has already read it (the raw path, `raw-connection.ts`): the
   * route may then decode it at once, without {@link readBody}'s promise. Valid for as long as
   * the route keeps it.
   */
  readonly body?: Uint8Array;
  /**
   * As `HttpBindings.appendInOrder` (`node:http`); absent where the server already calls the
   * route in request order with the whole body (the raw path).
   */
  appendInOrder?: <T>(call: () => Promise<T>) => Promise<T>;
}

/** A whole answer of a {@link FastRoute}. */
export interface RawAnswer {
  status: number;
  /**
   * Header names in lower case; the server adds `content-length`. A frozen object is never
   * changed afterwards, so a server may keep what it encoded of it for the next answer.
   */
  headers: Record<string, string>;
  body: string;
}

/**
 * A route served in front of the app's router, without a `Request` or a `Response` (`app.ts`,
 * "fast produce"): returns null for any request it does not take, which then goes the usual way;
 * else the answer, which never rejects (errors are answers).
 */
export type FastRoute = (request: RawRequest) => Promise<RawAnswer> | null;
