/**
 * The runtime-neutral byte stream the TCP transport works on. `src/runtime/tcp.ts` implements it
 * over `node:net` (which runs unchanged on Node, Deno and Bun); tests implement it in memory.
 */

/** Events a {@link ByteSocket} delivers to its one owner. */
export interface ByteSocketHandlers {
  /**
   * Bytes arrived. The chunk belongs to the receiver from then on (the socket never reuses it);
   * it may be a view of a larger buffer that other chunks share (keep it only as long as needed).
   * Never called while the socket is paused, nor after `onClose`.
   */
  onData(chunk: Uint8Array): void;
  /** The write buffer has emptied after a {@link ByteSocket.write} returned false. */
  onDrain(): void;
  /** The connection is fully closed (by either side, cleanly or by an error). Called exactly once. */
  onClose(): void;
}

/**
 * One accepted connection.
 *
 * Contract: no handler is called before {@link ByteSocket.attach}; after `pause()` returns, no
 * `onData` is delivered until `resume()`; after `destroy()` or the peer's close, `onClose` follows
 * (possibly asynchronously) and nothing else does.
 */
export interface ByteSocket {
  /** The peer's address for logs, e.g. `"127.0.0.1:51234"`. */
  readonly remoteAddress: string;
  /**
   * The local address the peer reached, without the port (`"127.0.0.1"`, `"::1"`; an IPv4
   * address mapped into IPv6 given as IPv4), when the runtime says.
   */
  readonly localHost?: string;
  /** TLS only: the host name the peer asked for in its handshake (SNI), when it sent one. */
  readonly serverName?: string;
  /** Installs the handlers and starts delivering data. Called once. */
  attach(handlers: ByteSocketHandlers): void;
  /**
   * Queues the chunks as one gathered write, in order. Returns false once the socket's write
   * buffer is over its high-water mark: the writer should stop producing until `onDrain`.
   * Writes after `end()` or `destroy()` are dropped. `onWritten`, if given, is called once every
   * byte of these chunks has gone to the kernel (synchronously when it took them at once), so
   * that their buffers may be reused and the connection stops holding them against its in-flight
   * budget; never if the socket closes first (the owner releases everything on `onClose`).
   */
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean;
  /** Stops delivering `onData` until {@link ByteSocket.resume}. Idempotent. */
  pause(): void;
  /** Resumes delivering `onData`. Idempotent. */
  resume(): void;
  /** Flushes what was written, then closes the connection. */
  end(): void;
  /** Closes the connection now, dropping unwritten bytes. Idempotent. */
  destroy(): void;
}
