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
 *   `maxInFlightBytes` held for them (whatever each request is charged, its frame plus the answer
 *   it may grow to, until it is answered; from then its answer's bytes, until the socket says the
 *   kernel took them: `onWritten`); one request is always allowed. Past either, and while the
 *   socket's write buffer is full, no more frames are started and reading pauses (frames already
 *   buffered wait). The same bytes of every connection sharing an {@link InFlightTotal} are
 *   summed there: while the sum is at or over its `max`, a connection starts a frame only if it
 *   holds nothing, and resumes once the sum drops below (docs/protocol.md "Pipelining and ordering").
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
  /** The broker-wide sum and cap this connection's held bytes count towards (module comment). */
  total: InFlightTotal;
}

/** What {@link InFlightTotal} wakes once its sum drops below its cap. */
interface TotalWaiter {
  resumeStarting(): void;
}

/**
 * The bytes every {@link FramedConnection} sharing it holds (request frames and fetch `max_bytes`
 * in flight, answers not yet taken by the kernel) and the cap on their sum (`--max-in-flight-bytes`,
 * docs/protocol.md "Pipelining and ordering"). Connections update the counts themselves; a
 * connection that finds the sum at or over `max` waits here until it drops below.
 */
export class InFlightTotal {
  /** The cap, in bytes. */
  readonly max: number;
  /** Bytes held now, over every connection. */
  bytes = 0;
  /** The part of {@link bytes} that is answers queued and not yet taken by the kernel. */
  queuedAnswerBytes = 0;
  /** Times a connection stopped starting requests because the sum was at or over {@link max}. */
  waits = 0;
  readonly #waiting = new Set<TotalWaiter>();

  /** @throws RangeError unless `max` is a positive number. */
  constructor(max: number) {
    if (!(Number.isFinite(max) && max > 0))
      throw new RangeError(`the in-flight bytes cap must be a positive number, got ${max}`);
    this.max = max;
  }

  /** Connections waiting for the sum to drop below {@link max}. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** `connection` stops starting requests until the sum drops below {@link max}. */
  wait(connection: TotalWaiter): void {
    if (this.#waiting.has(connection)) return;
    this.#waiting.add(connection);
    this.waits++;
  }

  /** `connection` has closed: it waits no more. */
  forget(connection: TotalWaiter): void {
    this.#waiting.delete(connection);
  }

  /** Bytes were released: wakes the waiting connections once the sum is below {@link max}. */
  released(): void {
    if (this.#waiting.size === 0 || this.bytes >= this.max) return;
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    for (const connection of waiting) connection.resumeStarting();
  }
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

/**
 * Connections with answers queued this turn, flushed together by {@link flushTurns}: one
 * microtask per turn for every connection, not one each (a group commit's fsync answers the
 * requests of many connections at once).
 */
let flushing: FramedConnection[] = [];

/** Flushes every connection in {@link flushing}; answers queued meanwhile get a turn of their own. */
function flushTurns(): void {
  const connections = flushing;
  flushing = [];
  let i = 0;
  try {
    for (; i < connections.length; i++) connections[i].flushTurn();
  } finally {
    // A flush that threw: the connections after it still get theirs.
    if (++i < connections.length) {
      if (flushing.length === 0) void resolved.then(flushTurns);
      for (; i < connections.length; i++) flushing.push(connections[i]);
    }
  }
}

/** One framed connection: see the module comment. */
export class FramedConnection implements TotalWaiter {
  /** The frame splitter; owners read frames from it directly only after the connection stops starting requests. */
  readonly decoder: FrameDecoder;
  readonly #socket: ByteSocket;
  readonly #options: FramedConnectionOptions;
  readonly #readTimeoutKind: RefusalKind;
  #handler: FramedConnectionHandler | null = null;
  /**
   * Aborted when the connection closes or shuts down: ends long-polling fetches. Made when
   * {@link signal} is first read: most connections never long-poll, and under a reconnect storm
   * making one per connection and aborting it (a DOMException with a stack) cost ~15 % of a
   * connection's set-up and tear-down.
   */
  #abort: AbortController | null = null;
  /** {@link signal} is (or is to be, once made) aborted. */
  #aborted = false;
  #inFlight = 0;
  #inFlightBytes = 0;
  /** Bytes of answers queued (in {@link #out} or written) and not yet taken by the kernel. */
  #queuedBytes = 0;
  readonly #total: InFlightTotal;
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
  /** Bytes in #out. */
  #outBytes = 0;
  /** Callbacks of the answers in #out, called once the write of #out completes. */
  #outWritten: (() => void)[] = [];
  /** Writes the socket holds, not yet taken by the kernel, oldest first: their bytes. */
  #writeBytes: number[] = [];
  /** The same writes' answer callbacks (null: none). */
  #writeCallbacks: ((() => void)[] | null)[] = [];
  /**
   * The write being handed to the socket (−1: none): its bytes and answer callbacks, queued in
   * #writeBytes only if the kernel did not take it at once (the usual case queues nothing).
   */
  #writingBytes = -1;
  #writingCallbacks: (() => void)[] | null = null;
  /** Inside `socket.write` (whose `onWritten` may come synchronously): frames start after it returns. */
  #inWrite = false;
  /** A write completed inside `socket.write` while reading was paused: pump once it returns. */
  #pumpAfterWrite = false;
  /** The socket's `onWritten` of every write (one function per connection, none per write). */
  readonly #written = (): void => {
    let bytes: number;
    let callbacks: (() => void)[] | null;
    // Writes end in order: the one being made, if none waits before it, else the oldest waiting.
    if (this.#writingBytes >= 0 && this.#writeBytes.length === 0) {
      bytes = this.#writingBytes;
      callbacks = this.#writingCallbacks;
      this.#writingBytes = -1;
      this.#writingCallbacks = null;
    } else {
      const queued = this.#writeBytes.shift();
      if (queued === undefined) return;
      bytes = queued;
      callbacks = this.#writeCallbacks.shift() ?? null;
    }
    if (callbacks !== null) for (const f of callbacks) f();
    if (this.#closed) return;
    this.#queuedBytes -= bytes;
    const total = this.#total;
    total.bytes -= bytes;
    total.queuedAnswerBytes -= bytes;
    total.released();
    if (this.#paused) this.resumeStarting();
  };
  #flushScheduled = false;
  /** {@link #pump} is starting frames (see there). */
  #pumping = false;
  /** Writes the answers queued this turn ({@link flushTurns} calls it, once per turn). */
  flushTurn(): void {
    this.#flushScheduled = false;
    this.flush();
    this.#updateReading();
  }

  constructor(socket: ByteSocket, options: FramedConnectionOptions) {
    this.#socket = socket;
    this.#options = options;
    this.#readTimeoutKind = `${options.name}.read_timeout` as RefusalKind;
    this.#total = options.total;
    this.decoder = new FrameDecoder({ lengthMin: options.lengthMin, lengthMax: options.lengthMax });
  }

  /** The peer's address, for logs. */
  get remoteAddress(): string {
    return this.#socket.remoteAddress;
  }

  /** Aborted when the connection closes or shuts down. */
  get signal(): AbortSignal {
    if (this.#abort === null) {
      this.#abort = new AbortController();
      if (this.#aborted) this.#abortSignal();
    }
    return this.#abort.signal;
  }

  #abortSignal(): void {
    this.#aborted = true;
    this.#abort?.abort();
  }

  /** The socket has closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Requests started and not yet answered. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Bytes held against the connection's budget: requests in flight plus answers not yet taken by the kernel. */
  get heldBytes(): number {
    return this.#inFlightBytes + this.#queuedBytes;
  }

  /** {@link InFlightTotal} (or a write taken by the kernel) makes room: starts what the limits allow. */
  resumeStarting(): void {
    if (this.#inWrite) this.#pumpAfterWrite = true;
    else this.#pump();
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
    this.#total.bytes += pending.costBytes;
    if (this.#options.order === "request") this.#queue.push(pending);
  }

  /**
   * A started request is answered (`answer` null: it gets none): queues what may now be written,
   * starts frames its end makes room for, and ends the connection if it was the last one awaited
   * while stopping. The request's charge is exchanged for its answer's bytes, held until the
   * socket says the kernel took them; `onWritten` is called then (never, if the connection closes
   * first).
   */
  finish(pending: PendingRequest, answer: Answer | null, onWritten?: () => void): void {
    if (pending.done) return;
    pending.done = true;
    if (this.#options.order === "completion") {
      this.#answered(pending.costBytes);
      if (answer !== null) this.send(answer, onWritten);
    } else {
      pending.answer = answer;
      pending.onWritten = onWritten;
      const queue = this.#queue;
      let n = 0;
      while (n < queue.length && queue[n].done) {
        const head = queue[n++];
        this.#answered(head.costBytes);
        if (head.answer !== null) this.send(head.answer, head.onWritten);
        head.answer = null;
        head.onWritten = undefined;
      }
      if (n > 0) this.#queue = n === queue.length ? [] : queue.slice(n);
    }
    this.#total.released();
    this.#pump();
    this.endIfDrained();
  }

  /** A request's charge leaves the budget (a closed connection released everything already). */
  #answered(costBytes: number): void {
    this.#inFlight--;
    if (this.#closed) return;
    this.#inFlightBytes -= costBytes;
    this.#total.bytes -= costBytes;
  }

  /**
   * Queues an answer outside the request count (e.g. a refusal); written with the others of this
   * turn, its bytes held as in {@link finish}. `onWritten` as in {@link finish}.
   */
  send(answer: Answer, onWritten?: () => void): void {
    if (this.#ended) return;
    const out = this.#out;
    let bytes = 0;
    if (answer instanceof Uint8Array) {
      out.push(answer);
      bytes = answer.length;
    } else
      for (const chunk of answer)
        if (chunk.length > 0) {
          out.push(chunk);
          bytes += chunk.length;
        }
    this.#outBytes += bytes;
    this.#queuedBytes += bytes;
    this.#total.bytes += bytes;
    this.#total.queuedAnswerBytes += bytes;
    if (onWritten !== undefined) this.#outWritten.push(onWritten);
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    // A resolved promise rather than queueMicrotask: Node wraps every queueMicrotask callback in an
    // async-hooks scope (`runInAsyncScope`), ~1 % of the broker's time at 64 producers.
    if (flushing.length === 0) void resolved.then(flushTurns);
    flushing.push(this);
  }

  /** Writes what is queued now; its bytes stay held until the socket's `onWritten`. */
  flush(): void {
    if (this.#ended || this.#out.length === 0) return;
    const chunks = this.#out;
    this.#out = [];
    this.#writingBytes = this.#outBytes;
    this.#outBytes = 0;
    const written = this.#outWritten;
    if (written.length > 0) {
      this.#outWritten = [];
      this.#writingCallbacks = written;
    }
    this.#inWrite = true;
    let accepted: boolean;
    try {
      accepted = this.#socket.write(chunks, this.#written);
    } finally {
      this.#inWrite = false;
    }
    if (this.#writingBytes >= 0) {
      // Not taken at once: it waits in the socket, behind those before it.
      this.#writeBytes.push(this.#writingBytes);
      this.#writeCallbacks.push(this.#writingCallbacks);
      this.#writingBytes = -1;
      this.#writingCallbacks = null;
    }
    if (!accepted) this.#writeBlocked = true;
    if (this.#pumpAfterWrite) {
      this.#pumpAfterWrite = false;
      this.#pump();
    }
  }

  /**
   * Shutdown: read nothing more, abort `signal`, answer what is in flight, then end; a peer that
   * has not closed its side {@link tcpShutdownLingerMs} after the end is cut off.
   */
  drainAndEnd(): void {
    this.#shuttingDown = true;
    this.#stopping = true;
    this.#abortSignal();
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
    this.#abortSignal();
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
    this.#abortSignal();
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
    this.#writeBytes = [];
    this.#writeCallbacks = [];
    this.#writingBytes = -1;
    this.#writingCallbacks = null;
    this.#queue = [];
    // What it held leaves the broker-wide sum now; requests still in flight release nothing more.
    const total = this.#total;
    total.bytes -= this.#inFlightBytes + this.#queuedBytes;
    total.queuedAnswerBytes -= this.#queuedBytes;
    this.#inFlightBytes = 0;
    this.#queuedBytes = 0;
    this.#outBytes = 0;
    total.forget(this);
    total.released();
    this.#abortSignal();
    this.#handler?.onClose();
  }

  /**
   * True if the next complete frame may be started now (and so reading may go on). Over the
   * broker-wide cap only a connection holding nothing may start one; the others wait there.
   */
  #mayStart(): boolean {
    if (this.#stopping || this.#writeBlocked || this.#inFlight >= this.#options.maxInFlightRequests)
      return false;
    const held = this.#inFlightBytes + this.#queuedBytes;
    if (held >= this.#options.maxInFlightBytes) return false;
    const total = this.#total;
    if (total.bytes < total.max || held === 0) return true;
    total.wait(this);
    return false;
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
