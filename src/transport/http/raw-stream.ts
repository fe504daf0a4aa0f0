/**
 * Response bodies written straight to the connection (`HttpBindings.openStream`, `app.ts`): what
 * the runtime's server hands a route that streams.
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
