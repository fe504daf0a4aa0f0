/**
 * The connection core both binary front doors share, the TCP protocol's (`tcp/transport.ts`) and
 * the Kafka listener's (`kafka/listener.ts`): everything about a framed connection that is not
 * its protocol. Each transport owns one {@link FramedConnection} per socket and adds its
 * protocol (what a frame means, authentication, how a refused frame is answered).
 *
 * What it does, per connection:
 * - Framing: bytes go through a {@link FrameDecoder} (its `length` checked before anything of it
 *   is allocated); every complete frame a read brings is handed to the owner at once, in order,
 *   while the limits allow (one read drains every complete frame). A `length` out of range goes to
 *   the owner (`onFrameLengthError`), which decides how the connection ends.
 * - Read timeout: a frame must arrive whole within `readTimeoutMs` of its first byte (or of the
 *   moment reading resumed); otherwise `<name>.read_timeout` is logged through the refusal log
 *   and the connection destroyed.
 * - Flow control: at most `maxInFlightRequests` started and unanswered requests, and at most
 *   `maxInFlightBytes` of them (whatever each request is charged: its frame plus the answer it may
 *   grow to); one request is always allowed. Past either, and while the socket's write buffer is
 *   full, no more frames are started and reading pauses (frames already buffered wait).
 * - Ordering (`order`): `"completion"` writes each answer as soon as it is ready (the correlation
 *   id pairs them: the TCP protocol); `"request"` writes answers in request order, an unfinished
 *   one holding back those behind it (Kafka clients pair answers by order).
 * - Writes: answers ready in the same microtask turn are gathered and written once (one system
 *   call for all of them); an answer given as several chunks (a fetch's stored records) is written
 *   as those chunks, never copied into one buffer.
 * - Close: {@link FramedConnection.drainAndEnd} (shutdown) reads nothing more, aborts `signal`
 *   (long-polls end) and ends the connection once every request in flight is answered;
 *   {@link FramedConnection.destroy} closes at once, dropping unwritten answers.
 */
import type { Clock, Timer } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import type { RefusalKind, RefusalLog } from "../lib/refusals.ts";
import { tcpShutdownLingerMs } from "../lib/limits.ts";
import { FrameDecoder, FrameLengthError } from "../protocol/frame.ts";
import type { ByteSocket } from "./tcp/socket.ts";

/** An answer: one buffer, or chunks that written in order make it. */
export type Answer = Uint8Array | readonly Uint8Array[];

/** What the owning transport does with a connection's events. */
export interface FramedConnectionHandler {
  /** A complete frame (the bytes after `length`, a view the owner may keep): start serving it, synchronously. */
  onFrame(frame: Uint8Array): void;
  /** The next frame's `length` is out of range: the stream cannot go on (`decoder` still holds what follows the prefix). */
  onFrameLengthError(error: FrameLengthError): void;
  /** The socket has closed (called once). */
  onClose(): void;
}

/** Settings of {@link FramedConnection}. */
export interface FramedConnectionOptions {
  /** The protocol's name in log events: `"tcp"` or `"kafka"` (`<name>.read_timeout`, `<name>.connection_destroyed`). */
  name: "tcp" | "kafka";
  clock: Clock;
  logger: Logger;
  refusals: RefusalLog;
  /** Smallest allowed frame `length`. */
  lengthMin: number;
  /** Largest allowed frame `length`, in bytes (the owner may change it later through `decoder`). */
  lengthMax: number;
  readTimeoutMs: number;
  maxInFlightRequests: number;
  maxInFlightBytes: number;
  /** When answers are written: as each is ready, or in request order (module comment). */
  order: "completion" | "request";
}

/** A started request, from {@link FramedConnection.begin} to {@link FramedConnection.finish}. */
export interface PendingRequest {
  /** Bytes charged to the connection's in-flight budget. */
  readonly costBytes: number;
  /** Answered (with request order: waiting for those before it). */
  done: boolean;
  /** Its answer once done (null: none is sent). */
  answer: Answer | null;
  /** Called once its answer has been written whole ({@link FramedConnection.finish}). */
  onWritten?: () => void;
}

const resolved = Promise.resolve();

/** One framed connection: see the module comment. */
export class FramedConnection {
  /** The frame splitter; owners read frames from it directly only after the connection stops starting requests. */
  readonly decoder: FrameDecoder;
  readonly #socket: ByteSocket;
  readonly #options: FramedConnectionOptions;
  readonly #readTimeoutKind: RefusalKind;
  #handler: FramedConnectionHandler | null = null;
  /** Aborted when the connection closes or shuts down: ends long-polling fetches. */
  readonly #abort = new AbortController();
  #inFlight = 0;
  #inFlightBytes = 0;
  /** With request order: the started requests, oldest first. */
  #queue: PendingRequest[] = [];
  #writeBlocked = false;
  #paused = false;
  /** No more frames are started (shutdown, refused frame). */
  #stopping = false;
  /** end() or destroy() was called: nothing more is written. */
  #ended = false;
  #closed = false;
  #readTimer: Timer | null = null;
  /** Set by {@link drainAndEnd}: the listener is shutting down. */
  #shuttingDown = false;
  /** On shutdown, cuts off a peer that does not close its side after the end. */
  #lingerTimer: Timer | null = null;
  #out: Uint8Array[] = [];
  /** Callbacks of the answers in #out, called once the write of #out completes. */
  #outWritten: (() => void)[] = [];
  #flushScheduled = false;
  /** {@link #pump} is starting frames (see there). */
  #pumping = false;
  readonly #flushTurn = (): void => {
    this.#flushScheduled = false;
    this.flush();
    this.#updateReading();
  };

  constructor(socket: ByteSocket, options: FramedConnectionOptions) {
    this.#socket = socket;
    this.#options = options;
    this.#readTimeoutKind = `${options.name}.read_timeout` as RefusalKind;
    this.decoder = new FrameDecoder({ lengthMin: options.lengthMin, lengthMax: options.lengthMax });
  }

  /** The peer's address, for logs. */
  get remoteAddress(): string {
    return this.#socket.remoteAddress;
  }

  /** Aborted when the connection closes or shuts down. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** The socket has closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Requests started and not yet answered. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Starts reading: installs `handler` and the socket's handlers. Called once. */
  start(handler: FramedConnectionHandler): void {
    this.#handler = handler;
    this.#socket.attach({
      onData: (chunk) => {
        if (this.#stopping) return;
        this.decoder.push(chunk);
        this.#pump();
        // What waits for the rest of its frame must not pin a socket layer's shared slab.
        if (this.decoder.bufferedBytes > 0) this.decoder.compact();
      },
      onDrain: () => {
        this.#writeBlocked = false;
        this.#pump();
      },
      onClose: () => this.#onClose(),
    });
  }

  /** Counts a request as started (owners call it from `onFrame`), charging `costBytes`. */
  begin(costBytes: number): PendingRequest {
    const pending: PendingRequest = { costBytes, done: false, answer: null };
    this.adopt(pending);
    return pending;
  }

  /**
   * {@link begin} with the owner's own object (not done, no answer yet): a request whose entry is
   * also what answers it, e.g. the TCP transport's Produce sink.
   */
  adopt(pending: PendingRequest): void {
    this.#inFlight++;
    this.#inFlightBytes += pending.costBytes;
    if (this.#options.order === "request") this.#queue.push(pending);
  }

  /**
   * A started request is answered (`answer` null: it gets none): queues what may now be written,
   * starts frames its end makes room for, and ends the connection if it was the last one awaited
   * while stopping. `onWritten` is called once the socket says every byte of the answer went to
   * the kernel (never, if the connection closes first or the socket cannot tell).
   */
  finish(pending: PendingRequest, answer: Answer | null, onWritten?: () => void): void {
    if (pending.done) return;
    pending.done = true;
    if (this.#options.order === "completion") {
      this.#inFlight--;
      this.#inFlightBytes -= pending.costBytes;
      if (answer !== null) this.send(answer, onWritten);
    } else {
      pending.answer = answer;
      pending.onWritten = onWritten;
      const queue = this.#queue;
      let n = 0;
      while (n < queue.length && queue[n].done) {
        const head = queue[n++];
        this.#inFlight--;
        this.#inFlightBytes -= head.costBytes;
        if (head.answer !== null) this.send(head.answer, head.onWritten);
        head.answer = null;
        head.onWritten = undefined;
      }
      if (n > 0) this.#queue = n === queue.length ? [] : queue.slice(n);
    }
    this.#pump();
    this.endIfDrained();
  }

  /**
   * Queues an answer outside the request count (e.g. a refusal); written with the others of this
   * turn. `onWritten` as in {@link finish}.
   */
  send(answer: Answer, onWritten?: () => void): void {
    if (this.#ended) return;
    const out = this.#out;
    if (answer instanceof Uint8Array) out.push(answer);
    else for (const chunk of answer) if (chunk.length > 0) out.push(chunk);
    if (onWritten !== undefined) this.#outWritten.push(onWritten);
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    // A resolved promise rather than queueMicrotask: Node wraps every queueMicrotask callback in an
    // async-hooks scope (`runInAsyncScope`), ~1 % of the broker's time at 64 producers.
    void resolved.then(this.#flushTurn);
  }

  /** Writes what is queued now. */
  flush(): void {
    if (this.#ended || this.#out.length === 0) return;
    const chunks = this.#out;
    this.#out = [];
    const written = this.#outWritten;
    let onWritten: (() => void) | undefined;
    if (written.length > 0) {
      this.#outWritten = [];
      onWritten = () => {
        for (const f of written) f();
      };
    }
    if (!this.#socket.write(chunks, onWritten)) this.#writeBlocked = true;
  }

  /**
   * Shutdown: read nothing more, abort `signal`, answer what is in flight, then end; a peer that
   * has not closed its side {@link tcpShutdownLingerMs} after the end is cut off.
   */
  drainAndEnd(): void {
    this.#shuttingDown = true;
    this.#stopping = true;
    this.#abort.abort();
    this.#updateReading();
    this.endIfDrained();
  }

  /** Starts no more frames and reads nothing more; the connection ends once what is in flight is answered (call {@link endIfDrained}). */
  stopAfterAnswers(): void {
    this.#stopping = true;
    this.decoder.clear();
    this.#cancelReadTimer();
    this.#updateReading();
  }

  /** Starts no more frames (the owner is refusing the stream): drops what is buffered, aborts `signal`. */
  stopReading(): void {
    this.decoder.clear();
    this.#stopping = true;
    this.#cancelReadTimer();
    this.#abort.abort();
  }

  /** While stopping, once nothing is in flight: flushes and ends. */
  endIfDrained(): void {
    if (!this.#stopping || this.#ended || this.#inFlight > 0) return;
    this.flush();
    this.end();
  }

  /** Flushes what was written, then closes (after the peer's FIN or a linger, `ByteSocket.end`). */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#socket.end();
    if (this.#shuttingDown && !this.#closed)
      this.#lingerTimer = this.#options.clock.setTimer(tcpShutdownLingerMs, () =>
        this.destroy(`the peer did not close within ${tcpShutdownLingerMs} ms of the shutdown`),
      );
  }

  /** Closes at once, dropping unwritten answers. */
  destroy(reason: string): void {
    if (this.#closed) return;
    this.#options.logger.log("debug", `${this.#options.name}.connection_destroyed`, {
      remote: this.#socket.remoteAddress,
      reason,
    });
    this.#stopping = true;
    this.#ended = true;
    this.decoder.clear();
    this.#cancelReadTimer();
    this.#abort.abort();
    this.#socket.destroy();
  }

  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#lingerTimer?.cancel();
    this.#ended = true;
    this.#stopping = true;
    this.#cancelReadTimer();
    this.decoder.clear();
    this.#out = [];
    this.#outWritten = [];
    this.#queue = [];
    this.#abort.abort();
    this.#handler?.onClose();
  }

  /** True if the next complete frame may be started now (and so reading may go on). */
  #mayStart(): boolean {
    return (
      !this.#stopping &&
      !this.#writeBlocked &&
      this.#inFlight < this.#options.maxInFlightRequests &&
      this.#inFlightBytes < this.#options.maxInFlightBytes
    );
  }

  /** Starts every complete buffered frame the limits allow, then sets reading and the timer. */
  #pump(): void {
    // A request answered while its frame is being started (a refusal answered synchronously)
    // calls back here from `finish`: the loop below goes on with the next frame instead, so a
    // read of many such frames does not nest a stack frame per request.
    if (this.#pumping) return;
    this.#pumping = true;
    const handler = this.#handler!;
    try {
      while (this.#mayStart()) {
        let frame: Uint8Array | null;
        try {
          frame = this.decoder.next();
        } catch (error) {
          if (error instanceof FrameLengthError) {
            this.#cancelReadTimer();
            return handler.onFrameLengthError(error);
          }
          throw error;
        }
        if (frame === null) break;
        if (this.#readTimer !== null) this.#cancelReadTimer();
        handler.onFrame(frame);
      }
    } finally {
      this.#pumping = false;
    }
    this.#updateReading();
  }

  #updateReading(): void {
    if (this.#closed) return;
    const reading = this.#mayStart();
    if (reading && this.#paused) {
      this.#paused = false;
      this.#socket.resume();
    } else if (!reading && !this.#paused) {
      this.#paused = true;
      this.#socket.pause();
    }
    if (reading && this.decoder.bufferedBytes > 0) {
      this.#readTimer ??= this.#options.clock.setTimer(this.#options.readTimeoutMs, () =>
        this.#onReadTimeout(),
      );
    } else if (this.#readTimer !== null) {
      this.#cancelReadTimer();
    }
  }

  #cancelReadTimer(): void {
    this.#readTimer?.cancel();
    this.#readTimer = null;
  }

  #onReadTimeout(): void {
    this.#readTimer = null;
    if (this.#closed) return;
    this.#options.refusals.refuse(this.#readTimeoutKind, {
      remote: this.#socket.remoteAddress,
      buffered_bytes: this.decoder.bufferedBytes,
      read_timeout_ms: this.#options.readTimeoutMs,
    });
    this.destroy("read timeout inside a frame");
  }
}

/** What {@link ConnectionSet} needs of a connection. */
export interface Closable {
  /** Reads nothing more, answers what is in flight, then ends. */
  drainAndEnd(): void;
  /** Closes at once. */
  destroy(reason: string): void;
}

/**
 * The open connections of one listener and its shutdown: {@link close} stops every connection
 * reading, gives what is in flight `graceMs` to be answered, then destroys what is left, and
 * resolves once every connection has closed.
 */
export class ConnectionSet<C extends Closable> {
  readonly #clock: Clock;
  readonly #open = new Set<C>();
  #shutdown: Promise<void> | null = null;
  #allClosed: (() => void) | null = null;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Connections open now. */
  get size(): number {
    return this.#open.size;
  }

  /** Whether a new socket may be served: false (and the socket destroyed) once shutting down. */
  admit(socket: ByteSocket): boolean {
    if (this.#shutdown === null) return true;
    socket.attach({ onData() {}, onDrain() {}, onClose() {} });
    socket.destroy();
    return false;
  }

  /** Counts an admitted connection as open until {@link closed}. */
  add(connection: C): void {
    this.#open.add(connection);
  }

  /** A connection has closed. */
  closed(connection: C): void {
    this.#open.delete(connection);
    if (this.#open.size === 0) this.#allClosed?.();
  }

  /** Shuts every connection (class comment). Idempotent. */
  close(graceMs: number): Promise<void> {
    if (this.#shutdown) return this.#shutdown;
    this.#shutdown = new Promise<void>((resolve) => {
      let grace: Timer | null = null;
      this.#allClosed = () => {
        grace?.cancel();
        resolve();
      };
      if (this.#open.size === 0) return this.#allClosed();
      grace = this.#clock.setTimer(graceMs, () => {
        for (const c of [...this.#open]) c.destroy("shutdown grace period over");
      });
      for (const c of [...this.#open]) c.drainAndEnd();
    });
    return this.#shutdown;
  }
}
