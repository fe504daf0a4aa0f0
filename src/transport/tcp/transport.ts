/**
 * The TCP front door: reads request frames from {@link ByteSocket}s, calls the {@link Broker},
 * writes response frames (wire format: `src/protocol/envelope.ts` and one file per api under
 * `src/protocol/apis/`, `docs/protocol.md`). It holds no broker logic: each request is served by
 * its api's row of the dispatch table (`protocol/apis/index.ts`: decode, call, encode).
 *
 * Rules, per connection (framing, read timeout, flow control, gathered writes and close are the
 * connection core's, shared with the Kafka listener: `../connection.ts`):
 * - Framing: the 4-byte `length` is checked first; below 8 the connection is destroyed; above
 *   `maxRequestBytes` the client gets `request_too_large` (when the rest of the header is already
 *   at hand and names a known api) and the connection is closed. Nothing of the claimed length is ever allocated up front.
 * - Read timeout: a frame must arrive whole within `readTimeoutMs` of its first byte (or of the
 *   moment the transport resumed reading); otherwise the connection is destroyed.
 * - Ordering: requests are *started* (the broker method called) synchronously, in frame order,
 *   as each frame completes (every complete frame of a read at once). Responses are written as
 *   each finishes and may overtake one another; the correlation id pairs them.
 * - Flow control: at most `maxInFlightRequests` started and unanswered requests, and at most
 *   `maxInFlightBytes` held for them (request frame bytes plus each fetch's `max_bytes`, the size
 *   of its answer, until answered; then the answer's bytes until the kernel has taken them; one
 *   request is always allowed). Past either, while the socket's write buffer is full, and while
 *   the sum over every connection is at or over `inFlightTotal.max` (for a connection holding
 *   anything), no more frames are started and reading pauses (frames already buffered wait).
 * - Writes: responses finishing in the same microtask turn go out as one gathered write. A fetch
 *   answer is two chunks, its header and the stored record bytes as the broker read them, so the
 *   records are never copied into a frame buffer (the broker hands out fresh bytes per fetch; a
 *   replica fetch's records may be several chunks, the leader's kept copies of its latest writes,
 *   which are never written to again).
 * - Errors: a `BrokerError` (including protocol errors) is answered with its error-table row; any
 *   other exception is logged and answered with `internal` and a generic message.
 *   An unknown api or version gets `unsupported_api`, and the connection keeps working.
 * - Authentication (with `access`, `docs/protocol.md`): while the broker has keys, the first
 *   request must be Authenticate (api 13, `protocol/apis/authenticate.ts`) and frames before it
 *   may be at most `authenticateFrameBytesMax`; any other first request, or a refused key, is
 *   answered `unauthenticated` and the connection is closed. Every later request goes through the
 *   broker view of the connection's principal (`auth/access.ts`), which applies the role table.
 *   When the key is revoked (or, for a connection that did not authenticate, once the first key
 *   exists; `auth.connection_closed`) the connection reads nothing more: frames already received
 *   are answered `key_revoked` (`unauthenticated` for the anonymous connection), a long-poll in
 *   flight ends with the same answer (the broker view refuses reads answered after the
 *   revocation), other requests in flight get their own answers, and then the connection is
 *   ended; what is still unanswered after `tcpShutdownGraceMs` is dropped with the connection.
 *   A connection that has not authenticated within `readTimeoutMs` of opening is destroyed
 *   (`auth.failed`, timeout). The exception: ReplicaFetch (api 14, cluster mode) carries the
 *   broker credential itself and is served without a key; one refused `unauthenticated` closes
 *   the connection.
 */
import { BrokerError, Errors } from "../../broker/errors.ts";
import type { Broker } from "../../broker/types.ts";
import type { Clock, Timer } from "../../lib/clock.ts";
import {
  inFlightBytesTotalDefault,
  readTimeoutMsDefault,
  requestBytesDefault,
  tcpInFlightBytesMax,
  tcpRequestsInFlightMax,
  tcpShutdownGraceMs,
} from "../../lib/limits.ts";
import type { Logger } from "../../lib/logger.ts";
import { RefusalLog } from "../../lib/refusals.ts";
import {
  type ApiConnection,
  type ApiSpec,
  isSupportedApi,
  supportedApi,
} from "../../protocol/apis/index.ts";
import {
  decodeRequestHeader,
  encodeErrorResponse,
  frameLengthBytes,
  requestLengthMin,
} from "../../protocol/envelope.ts";
import { FrameLengthError } from "../../protocol/frame.ts";
import {
  type Answer,
  ConnectionSet,
  FramedConnection,
  type FramedConnectionHandler,
  InFlightTotal,
  type PendingRequest,
} from "../connection.ts";
import type { ByteSocket } from "./socket.ts";
import type { AccessControl } from "../../auth/access.ts";
import type { Principal } from "../../auth/principal.ts";
import { authenticateApi } from "../../protocol/apis/authenticate.ts";
import { replicaFetchApi } from "../../protocol/apis/replica-fetch.ts";
import { authenticateFrameBytesMax } from "../../lib/limits.ts";
import { errorMessage, errorStack } from "../../lib/errors.ts";
import type { ProduceRequest, ProduceResult, ProduceSink } from "../../broker/types.ts";
import { produceVia } from "../../broker/produce-sink.ts";
import { toBrokerError } from "../../broker/storage-failure.ts";
import {
  encodeProduceAppended,
  encodeProduceResponse,
  produceApi,
} from "../../protocol/apis/produce.ts";

export type { ByteSocket, ByteSocketHandlers } from "./socket.ts";

/** Options of {@link createTcpTransport}. */
export interface TcpTransportOptions {
  broker: Broker;
  /** Timers for the read timeout and the shutdown grace period. */
  clock: Clock;
  /** Receives `tcp.*` events (internal errors; refusals through `refusals`). */
  logger: Logger;
  /**
   * Counts and logs refused frames and read timeouts (`tcp.frame_refused`, `tcp.read_timeout`),
   * at most one line per kind every few seconds; default: a new one over `logger` and `clock`.
   */
  refusals?: RefusalLog;
  /** Largest request frame `length`, in bytes (default `requestBytesDefault`, 16 MiB). */
  maxRequestBytes?: number;
  /** Time a frame may take to arrive whole once begun, in ms (default `readTimeoutMsDefault`, 30 s). */
  readTimeoutMs?: number;
  /** Started, unanswered requests per connection before reading pauses (default `tcpRequestsInFlightMax`). */
  maxInFlightRequests?: number;
  /** Bytes per connection of started, unanswered requests (frames + fetch `max_bytes`) and of answers the kernel has not taken, before reading pauses (default `tcpInFlightBytesMax`). */
  maxInFlightBytes?: number;
  /**
   * The same bytes summed over connections, and their cap (`--max-in-flight-bytes`, shared with
   * the Kafka listener). Default: one of this transport's own, capped at `inFlightBytesTotalDefault`.
   */
  inFlightTotal?: InFlightTotal;
  /**
   * Authentication and authorization (module comment). Without it every connection uses
   * `broker` directly, as before keys existed.
   */
  access?: AccessControl;
  /**
   * Wraps the broker (or principal's view) a connection calls: the front door's counting
   * (`transport/metered-broker.ts`). Default: none.
   */
  meter?: <B extends Broker>(broker: B) => B;
}

/** The TCP front door over any number of connections. */
export interface TcpTransport {
  /** Takes ownership of an accepted connection and serves it until it closes. */
  handleConnection(socket: ByteSocket): void;
  /** Connections currently open. */
  readonly connectionCount: number;
  /**
   * Shuts the front door: new connections are destroyed at once; open ones stop reading, their
   * long-polling fetches are aborted, in-flight requests get `graceMs` (default
   * `tcpShutdownGraceMs`) to be answered, then each connection is ended (or destroyed when the
   * grace period runs out). Resolves once every connection has closed. Idempotent.
   */
  close(options?: { graceMs?: number }): Promise<void>;
}

/**
 * Creates the TCP transport.
 * @throws RangeError for a non-positive `maxRequestBytes`, `readTimeoutMs`, `maxInFlightRequests` or `maxInFlightBytes`.
 */
export function createTcpTransport(options: TcpTransportOptions): TcpTransport {
  const settings: Settings = {
    broker: options.broker,
    clock: options.clock,
    logger: options.logger,
    refusals: options.refusals ?? new RefusalLog({ logger: options.logger, clock: options.clock }),
    maxRequestBytes: options.maxRequestBytes ?? requestBytesDefault,
    readTimeoutMs: options.readTimeoutMs ?? readTimeoutMsDefault,
    maxInFlightRequests: options.maxInFlightRequests ?? tcpRequestsInFlightMax,
    maxInFlightBytes: options.maxInFlightBytes ?? tcpInFlightBytesMax,
    inFlightTotal: options.inFlightTotal ?? new InFlightTotal(inFlightBytesTotalDefault),
    access: options.access ?? null,
    meter: options.meter ?? ((broker) => broker),
  };
  positive(settings.maxRequestBytes, "maxRequestBytes");
  positive(settings.readTimeoutMs, "readTimeoutMs");
  positive(settings.maxInFlightRequests, "maxInFlightRequests");
  positive(settings.maxInFlightBytes, "maxInFlightBytes");
  if (settings.maxRequestBytes < requestLengthMin)
    throw new RangeError(`maxRequestBytes ${settings.maxRequestBytes} is below the smallest frame`);

  const connections = new ConnectionSet<Connection>(settings.clock);
  const onConnectionClosed = (connection: Connection): void => connections.closed(connection);

  return {
    handleConnection(socket) {
      if (!connections.admit(socket)) return;
      const connection = new Connection(socket, settings, onConnectionClosed);
      connections.add(connection);
      connection.start();
    },
    get connectionCount() {
      return connections.size;
    },
    close(closeOptions = {}) {
      return connections.close(closeOptions.graceMs ?? tcpShutdownGraceMs);
    },
  };
}

interface Settings {
  broker: Broker;
  clock: Clock;
  logger: Logger;
  refusals: RefusalLog;
  maxRequestBytes: number;
  readTimeoutMs: number;
  maxInFlightRequests: number;
  maxInFlightBytes: number;
  inFlightTotal: InFlightTotal;
  access: AccessControl | null;
  meter: <B extends Broker>(broker: B) => B;
}

function positive(value: number, name: string): void {
  if (!(Number.isFinite(value) && value > 0))
    throw new RangeError(`${name} must be a positive number, got ${value}`);
}

/** Generic message for `internal` errors; details go to the log only. */
const internalMessage = "Cannot handle request: internal error in the broker, see the broker log";

/**
 * What a TLS client on the plain TCP port gets before the close (docs/security.md "TLS"): not a
 * TLS record, so its TLS layer fails with "wrong version number" (OpenSSL, BoringSSL) or an
 * invalid content type (rustls), which the CLI maps to "the port may be plain TCP".
 */
const plainPortAnswer = new TextEncoder().encode(
  "es-broker: this port is plain TCP, not TLS: connect without TLS\n",
);

/**
 * A Produce started through `Broker.produceTo`: both the connection's entry for the request in
 * flight and the sink the broker answers, which encodes the answer and hands it to the
 * connection core (docs/benchmarks.md "Small requests (issue #22)").
 */
class ProduceAnswer implements PendingRequest, ProduceSink {
  done = false;
  answer: Answer | null = null;
  onWritten: (() => void) | undefined = undefined;
  readonly costBytes: number;
  readonly #core: FramedConnection;
  readonly #correlationId: number;
  readonly #errorAnswer: (correlationId: number, error: unknown) => Uint8Array;

  constructor(
    core: FramedConnection,
    correlationId: number,
    costBytes: number,
    errorAnswer: (correlationId: number, error: unknown) => Uint8Array,
  ) {
    this.#core = core;
    this.#correlationId = correlationId;
    this.costBytes = costBytes;
    this.#errorAnswer = errorAnswer;
  }

  appended(partition: number, baseOffset: number, count: number): void {
    let bytes: Uint8Array;
    try {
      bytes = encodeProduceAppended(this.#correlationId, partition, baseOffset, count);
    } catch (error) {
      return this.failed(error);
    }
    this.#core.finish(this, bytes);
  }

  produced(result: ProduceResult): void {
    let bytes: Uint8Array;
    try {
      bytes = encodeProduceResponse(this.#correlationId, result);
    } catch (error) {
      return this.failed(error);
    }
    this.#core.finish(this, bytes);
  }

  failed(error: unknown): void {
    this.#core.finish(this, this.#errorAnswer(this.#correlationId, error));
  }
}

/** One served connection: the TCP protocol over the shared connection core. */
class Connection implements FramedConnectionHandler {
  readonly #core: FramedConnection;
  readonly #settings: Settings;
  readonly #onClosed: (connection: Connection) => void;
  /** What every api's `serve` gets from this connection. */
  readonly #api: ApiConnection;
  /** The broker this connection calls: its principal's view (or the broker itself without access control). */
  #broker: Broker;
  /** The answer of a Produce that failed with `error` (see {@link ProduceAnswer}). */
  readonly #produceError: (correlationId: number, error: unknown) => Uint8Array;
  /** Who the connection acts for; null until it authenticates while authentication is on. */
  #principal: Principal | null = null;
  /** Cancels the watch on the principal (revocation). */
  #unwatch: (() => void) | null = null;
  /** While authentication is on and the connection has not authenticated: closes it after the read timeout. */
  #authTimer: Timer | null = null;
  /** After a revocation: destroys the connection if its requests in flight are not answered in time. */
  #revocationTimer: Timer | null = null;

  constructor(socket: ByteSocket, settings: Settings, onClosed: (connection: Connection) => void) {
    this.#settings = settings;
    this.#onClosed = onClosed;
    this.#broker = settings.meter(settings.broker);
    this.#produceError = (correlationId, error) =>
      this.#errorResponse(produceApi, correlationId, toBrokerError(error));
    this.#core = new FramedConnection(socket, {
      name: "tcp",
      clock: settings.clock,
      logger: settings.logger,
      refusals: settings.refusals,
      lengthMin: requestLengthMin,
      lengthMax: settings.maxRequestBytes,
      readTimeoutMs: settings.readTimeoutMs,
      maxInFlightRequests: settings.maxInFlightRequests,
      maxInFlightBytes: settings.maxInFlightBytes,
      order: "completion",
      total: settings.inFlightTotal,
    });
    const connection = this;
    this.#api = {
      get broker() {
        return connection.#broker;
      },
      // Read when a fetch long-polls, not at set-up (FramedConnection.signal).
      get signal() {
        return connection.#core.signal;
      },
      authenticate: (key) => this.#authenticate(key),
    };
    const access = settings.access;
    if (access !== null) {
      if (access.required) {
        this.#core.decoder.lengthMax = authenticateFrameBytesMax;
        // A connection that never authenticates is not kept: it holds a socket and a file descriptor.
        this.#authTimer = settings.clock.setTimer(settings.readTimeoutMs, () => {
          this.#authTimer = null;
          if (this.#principal !== null || this.#core.closed) return;
          access.logFailure("timeout", this.#core.remoteAddress, "tcp", null);
          this.destroy("no Authenticate within the read timeout");
        });
      } else this.#adopt(access.authenticate(undefined, socket.remoteAddress, "tcp"));
    }
  }

  /**
   * `ApiConnection.authenticate` (Authenticate, api 13).
   * @throws BrokerError `invalid_request` once authenticated with a key; `unauthenticated` for a refused key.
   */
  #authenticate(key: string): { keyId: string; name: string; role: string } {
    const access = this.#settings.access;
    if (access === null)
      throw new BrokerError(
        Errors.unauthenticated,
        "Cannot authenticate: this broker has no API keys",
      );
    if (this.#principal?.kind === "key")
      throw new BrokerError(
        Errors.invalidRequest,
        "Cannot authenticate: this connection has already authenticated (open a new connection for another key)",
      );
    const principal = access.authenticate(key, this.#core.remoteAddress, "tcp");
    this.#adopt(principal);
    return principal.kind === "key"
      ? { keyId: principal.id, name: principal.name, role: principal.role }
      : { keyId: "", name: "", role: "anonymous" };
  }

  /** Makes `principal` the connection's, and closes the connection once it is no longer current. */
  #adopt(principal: Principal): void {
    const access = this.#settings.access!;
    this.#unwatch?.();
    this.#authTimer?.cancel();
    this.#authTimer = null;
    this.#principal = principal;
    this.#broker = this.#settings.meter(access.brokerFor(principal));
    this.#core.decoder.lengthMax = this.#settings.maxRequestBytes;
    this.#unwatch = access.watch(principal, () => {
      this.#settings.logger.log("info", "auth.connection_closed", {
        transport: "tcp",
        remote: this.#core.remoteAddress,
        key_id: principal.kind === "key" ? principal.id : null,
        reason: principal.kind === "key" ? "key revoked or changed" : "authentication turned on",
      });
      this.#refuseAll(access.invalidError(principal, "Cannot handle request"));
    });
  }

  /**
   * After a revocation (module comment): answers every frame already received with `refusal`,
   * reads nothing more, and ends the connection once the requests in flight are answered (or
   * destroys it after the shutdown grace period).
   */
  #refuseAll(refusal: BrokerError): void {
    const decoder = this.#core.decoder;
    for (;;) {
      let frame: Uint8Array | null;
      try {
        frame = decoder.next();
      } catch (error) {
        if (error instanceof FrameLengthError) break; // dropped with the rest of the stream
        throw error;
      }
      if (frame === null) break;
      const { correlationId } = decodeRequestHeader(frame);
      this.#core.send(encodeErrorResponse(correlationId, refusal.kind, refusal.message));
    }
    this.#core.stopAfterAnswers();
    this.#revocationTimer = this.#settings.clock.setTimer(tcpShutdownGraceMs, () => {
      this.#revocationTimer = null;
      this.destroy("requests of a revoked key unanswered after the grace period");
    });
    this.#core.endIfDrained();
  }

  start(): void {
    this.#core.start(this);
  }

  /** Shutdown: read nothing more, answer what is in flight, then end. */
  drainAndEnd(): void {
    this.#core.drainAndEnd();
  }

  /** Closes at once, dropping unwritten responses. */
  destroy(reason: string): void {
    this.#core.destroy(reason);
  }

  /** `FramedConnectionHandler.onClose`. */
  onClose(): void {
    this.#unwatch?.();
    this.#unwatch = null;
    this.#authTimer?.cancel();
    this.#authTimer = null;
    this.#revocationTimer?.cancel();
    this.#revocationTimer = null;
    this.#onClosed(this);
  }

  /**
   * `FramedConnectionHandler.onFrameLengthError`: the stream cannot be resynchronised, so the
   * connection closes. If the length is too large and the rest of the header is already here,
   * the client is told why (`request_too_large` with its correlation id) before the close.
   */
  onFrameLengthError(error: FrameLengthError): void {
    const core = this.#core;
    this.#settings.refusals.refuse("tcp.frame_refused", {
      remote: core.remoteAddress,
      length: error.length,
      max_request_bytes: core.decoder.lengthMax,
      error: error.message,
    });
    // A TLS ClientHello on this plain port (content type 22, version 3.x): answer with a line of
    // plain text, so the client's TLS layer reports a non-TLS answer ("wrong version number")
    // rather than a bare close, and the CLI can say the port is plain TCP.
    const first = core.decoder.peekBytes(3);
    if (first !== null && first[0] === 0x16 && first[1] === 0x03 && first[2] <= 0x04) {
      core.stopReading();
      core.send(plainPortAnswer);
      core.flush();
      core.end();
      return;
    }
    const header = error.tooLarge
      ? core.decoder.peekBytes(frameLengthBytes + requestLengthMin)
      : null;
    const view =
      header === null ? null : new DataView(header.buffer, header.byteOffset, header.byteLength);
    // Only a header naming one of our apis is answered: bytes of HTTP get a plain close.
    if (view === null || !isSupportedApi(view.getUint16(4), view.getUint16(6))) {
      core.stopReading();
      return this.destroy("frame length out of range");
    }
    const correlationId = view.getUint32(8);
    core.stopReading();
    core.send(encodeErrorResponse(correlationId, Errors.requestTooLarge, error.message));
    core.flush();
    core.end();
  }

  /** `FramedConnectionHandler.onFrame`: starts the request the frame carries. */
  onFrame(frame: Uint8Array): void {
    // The header is read in place (no header object per request); a frame is at least 8 bytes.
    const api = (frame[0] << 8) | frame[1];
    const version = (frame[2] << 8) | frame[3];
    const correlationId = ((frame[4] << 24) | (frame[5] << 16) | (frame[6] << 8) | frame[7]) >>> 0;
    const spec = supportedApi(api, version);
    // A replica fetch (cluster mode) carries the broker credential, checked per request; the
    // connection keeps no principal. A refused one is answered and closes the connection.
    const replica = spec === replicaFetchApi && this.#principal === null;
    if (
      this.#principal === null &&
      this.#settings.access !== null &&
      spec !== authenticateApi &&
      !replica
    )
      return this.#refuseUnauthenticated(correlationId);
    if (replica && this.#authTimer !== null) {
      this.#authTimer.cancel();
      this.#authTimer = null;
      this.#core.decoder.lengthMax = this.#settings.maxRequestBytes;
    }
    if (spec === undefined) {
      this.#core.send(
        encodeErrorResponse(
          correlationId,
          Errors.unsupportedApi,
          `Cannot handle request: api ${api} version ${version} is not supported`,
        ),
      );
      return;
    }
    const decodeProduce = spec.decodeProduce;
    if (decodeProduce !== undefined) return this.#serveProduce(decodeProduce, frame, correlationId);
    let response: Promise<unknown>;
    let encode: ((correlationId: number, result: unknown) => Answer) | undefined;
    let written: ((result: unknown) => void) | undefined;
    let costBytes = frame.length;
    try {
      // The api's row decodes the body and calls the broker synchronously; `answerBytes` is the
      // size its answer may reach beyond the request (a fetch's `max_bytes`).
      const served = spec.serve(
        frame.subarray(requestLengthMin),
        correlationId,
        this.#api,
        version,
      );
      response = served.response;
      encode = served.encode;
      written = served.written;
      costBytes += served.answerBytes ?? 0;
    } catch (error) {
      response = Promise.reject(error);
    }
    // A refused Authenticate: its answer is the last thing this connection sends.
    if (spec === authenticateApi && this.#principal?.kind !== "key") this.#core.stopAfterAnswers();
    const core = this.#core;
    const pending = core.begin(costBytes);
    const fail = (error: unknown): void => {
      if (replica && error instanceof BrokerError && error.kind === Errors.unauthenticated)
        core.stopAfterAnswers();
      core.finish(pending, this.#errorResponse(spec, correlationId, error));
    };
    // With `encode` (`answerBy`), the result is encoded in this one reaction: an encoding that
    // throws is answered as a rejection would be.
    response.then(
      encode === undefined
        ? (bytes) => core.finish(pending, bytes as Answer)
        : (result) => {
            let answer: Answer;
            try {
              answer = encode(correlationId, result);
            } catch (error) {
              return fail(error);
            }
            core.finish(pending, answer, written === undefined ? undefined : () => written(result));
          },
      fail,
    );
  }

  /**
   * A Produce on the small-request path: decoded by its row (`decode`), started with
   * `Broker.produceTo` (through the front door's counting view), answered by a
   * {@link ProduceAnswer} — no promise, no closure per request.
   */
  #serveProduce(
    decode: (body: Uint8Array) => ProduceRequest,
    frame: Uint8Array,
    correlationId: number,
  ): void {
    const answer = new ProduceAnswer(this.#core, correlationId, frame.length, this.#produceError);
    this.#core.adopt(answer);
    let request: ProduceRequest;
    try {
      request = decode(frame.subarray(requestLengthMin));
    } catch (error) {
      return answer.failed(error);
    }
    produceVia(this.#broker, request, answer);
  }

  /**
   * A request other than Authenticate on a connection that has not authenticated while the
   * broker has keys: answered `unauthenticated` (logged as `auth.failed`), then the connection
   * closes.
   */
  #refuseUnauthenticated(correlationId: number): void {
    let error: unknown;
    try {
      this.#settings.access!.authenticate(undefined, this.#core.remoteAddress, "tcp");
    } catch (refused) {
      error = refused;
    }
    if (!(error instanceof BrokerError)) {
      // Authentication was turned off meanwhile (it never is): treat it as the bug it would be.
      error = new BrokerError(Errors.internal, internalMessage);
    }
    const refusal = error as BrokerError;
    this.#core.send(encodeErrorResponse(correlationId, refusal.kind, refusal.message));
    this.#core.stopAfterAnswers();
    this.#core.endIfDrained();
  }

  #errorResponse(api: ApiSpec, correlationId: number, error: unknown): Uint8Array {
    if (error instanceof BrokerError)
      return encodeErrorResponse(correlationId, error.kind, error.message, error.details);
    this.#settings.logger.log("error", "tcp.internal_error", {
      remote: this.#core.remoteAddress,
      api: api.name,
      error: errorMessage(error),
      stack: errorStack(error),
    });
    return encodeErrorResponse(correlationId, Errors.internal, internalMessage);
  }
}
