/**
 * The Kafka front door (docs/kafka.md): reads Kafka request frames from {@link ByteSocket}s,
 * serves each through its api's handler (`handlers.ts`: decode, call the {@link Broker}, encode)
 * and writes the responses. It holds no broker logic.
 *
 * Rules, per connection:
 * - Framing: the 4-byte `size` is checked first (at least 10, at most `maxRequestBytes`); out of
 *   range, the connection is closed (Kafka cannot answer a request it cannot frame). Nothing of
 *   a claimed size is allocated up front (`protocol/frame.ts`).
 * - A frame that breaks Kafka's grammar, or names an api or version this listener does not
 *   serve, closes the connection (as Kafka does); ApiVersions of any version is answered.
 * - Read timeout: a frame must arrive whole within `readTimeoutMs` of its first byte.
 * - Ordering: requests start in frame order and their responses are written in request order
 *   (librdkafka pipelines and pairs responses by order as well as by correlation id): a
 *   long-polling Fetch holds back the answers behind it.
 * - Flow control: at most `maxInFlightRequests` unanswered requests and `maxInFlightBytes` held
 *   for them (frame bytes plus each Fetch's `max_bytes`, then its answer's bytes until the kernel
 *   has taken them), within the broker-wide `inFlightTotal`; past either reading pauses
 *   (`../connection.ts`).
 * - Errors: a BrokerError is answered with its Kafka code (`kafkaErrorCodes`) in the api's
 *   layout; anything else is logged and answered −1 UNKNOWN_SERVER_ERROR (or closes the
 *   connection where the layout has no error field).
 * - SASL (`sasl.ts`, which has the state table): while the broker has keys, only ApiVersions,
 *   SaslHandshake and SaslAuthenticate are served before SaslAuthenticate succeeds, frames are
 *   at most `kafkaSaslFrameBytesMax`, and authentication must succeed within `readTimeoutMs`;
 *   anything else closes the connection. Every later request goes through the key's broker view
 *   (the role table); once the key is revoked or changed (or, for a connection served without a
 *   key, once the first key exists) the connection is closed at once (`auth.connection_closed`).
 */
import type { Broker } from "../../broker/types.ts";
import type { Clock, Timer } from "../../lib/clock.ts";
import { errorMessage, errorStack } from "../../lib/errors.ts";
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
import type { FrameLengthError } from "../../protocol/frame.ts";
import type { Gunzip } from "../../protocol/kafka/compression.ts";
import { kafkaApiName, peekRequestHeader, requestSizeMin } from "../../protocol/kafka/header.ts";
import type { KafkaNode } from "../../protocol/kafka/metadata.ts";
import { KafkaDecodeError } from "../../protocol/kafka/wire.ts";
import {
  ConnectionSet,
  FramedConnection,
  type FramedConnectionHandler,
  InFlightTotal,
} from "../connection.ts";
import type { ByteSocket } from "../tcp/socket.ts";
import {
  CloseConnection,
  type KafkaConnectionState,
  type KafkaServed,
  serveKafkaRequest,
} from "./handlers.ts";
import { type KafkaAuthenticator, type KafkaSession, kafkaSaslFrameBytesMax } from "./sasl.ts";

/** Options of {@link createKafkaTransport}. */
export interface KafkaTransportOptions {
  broker: Broker;
  clock: Clock;
  logger: Logger;
  /** Counts and logs refused frames (`kafka.request_refused`, `kafka.read_timeout`). */
  refusals?: RefusalLog;
  /** The address Metadata and FindCoordinator give clients: this listener as they reach it. */
  advertised: { host: string; port: number };
  /**
   * Give each connection the host it reached instead of `advertised.host` (a listener on every
   * address, `--host 0.0.0.0`, and no `--kafka-advertised-host`): over TLS the name it asked for
   * (SNI), which its certificate check already accepted, else the local address it connected to.
   * docs/kafka.md "Advertised address".
   */
  advertiseReachedHost?: boolean;
  /** gzip inflation (`runtime/kafka-gzip.ts`). */
  gunzip: Gunzip;
  /**
   * Checks SASL/PLAIN credentials and says whether connections must present them (`sasl.ts`);
   * null: no authentication at all (tests), SASL refused with ILLEGAL_SASL_STATE.
   */
  authenticator?: KafkaAuthenticator | null;
  /** Largest request frame `size`, in bytes (default `requestBytesDefault`). */
  maxRequestBytes?: number;
  /** Time a frame may take to arrive whole once begun, in ms (default 30 s). */
  readTimeoutMs?: number;
  /** Unanswered requests per connection before reading pauses. */
  maxInFlightRequests?: number;
  /** Bytes per connection of unanswered requests (frames + fetch `max_bytes`) and of answers the kernel has not taken, before reading pauses. */
  maxInFlightBytes?: number;
  /**
   * The same bytes summed over connections, and their cap (`--max-in-flight-bytes`, shared with
   * the TCP front door). Default: one of this listener's own, capped at `inFlightBytesTotalDefault`.
   */
  inFlightTotal?: InFlightTotal;
  /**
   * Wraps each broker view a connection is served through, to count its calls
   * (`transport/metered-broker.ts`, `transport="kafka"`). Default: none.
   */
  meter?: <B extends Broker>(broker: B) => B;
}

/** The Kafka front door over any number of connections. */
export interface KafkaTransport {
  /** Takes ownership of an accepted connection and serves it until it closes. */
  handleConnection(socket: ByteSocket): void;
  /** Connections open now. */
  readonly connectionCount: number;
  /** Sets the advertised address once the listener knows its port. */
  setAdvertised(address: { host: string; port: number }): void;
  /**
   * Stops reading on every connection, aborts long-polls, gives in-flight requests `graceMs` to
   * be answered, then ends (or destroys) each connection. Resolves once all have closed.
   */
  close(options?: { graceMs?: number }): Promise<void>;
}

/** Settings every connection shares. */
export interface KafkaSettings {
  broker: Broker;
  clock: Clock;
  logger: Logger;
  refusals: RefusalLog;
  node: KafkaNode;
  gunzip: Gunzip;
  authenticator: KafkaAuthenticator | null;
  maxRequestBytes: number;
  readTimeoutMs: number;
  maxInFlightRequests: number;
  maxInFlightBytes: number;
  /** See {@link KafkaTransportOptions.inFlightTotal}. */
  inFlightTotal: InFlightTotal;
  /** See {@link KafkaTransportOptions.meter}. */
  meter: <B extends Broker>(broker: B) => B;
  /** See {@link KafkaTransportOptions.advertiseReachedHost}. */
  advertiseReachedHost: boolean;
}

/**
 * Creates the Kafka transport.
 * @throws RangeError for a `maxRequestBytes` below the smallest frame.
 */
export function createKafkaTransport(options: KafkaTransportOptions): KafkaTransport {
  const settings: KafkaSettings = {
    broker: options.broker,
    clock: options.clock,
    logger: options.logger,
    refusals: options.refusals ?? new RefusalLog({ logger: options.logger, clock: options.clock }),
    node: { nodeId: 0, host: options.advertised.host, port: options.advertised.port },
    gunzip: options.gunzip,
    authenticator: options.authenticator ?? null,
    maxRequestBytes: options.maxRequestBytes ?? requestBytesDefault,
    readTimeoutMs: options.readTimeoutMs ?? readTimeoutMsDefault,
    maxInFlightRequests: options.maxInFlightRequests ?? tcpRequestsInFlightMax,
    maxInFlightBytes: options.maxInFlightBytes ?? tcpInFlightBytesMax,
    inFlightTotal: options.inFlightTotal ?? new InFlightTotal(inFlightBytesTotalDefault),
    meter: options.meter ?? ((broker) => broker),
    advertiseReachedHost: options.advertiseReachedHost ?? false,
  };
  if (!(settings.maxRequestBytes >= requestSizeMin))
    throw new RangeError(`maxRequestBytes ${settings.maxRequestBytes} is below the smallest frame`);
  const connections = new ConnectionSet<KafkaConnection>(settings.clock);
  const onClosed = (c: KafkaConnection): void => connections.closed(c);
  return {
    handleConnection(socket) {
      if (!connections.admit(socket)) return;
      const connection = new KafkaConnection(socket, settings, onClosed);
      connections.add(connection);
      connection.start();
    },
    get connectionCount() {
      return connections.size;
    },
    setAdvertised(address) {
      settings.node = { nodeId: 0, host: address.host, port: address.port };
    },
    close(closeOptions = {}) {
      return connections.close(closeOptions.graceMs ?? tcpShutdownGraceMs);
    },
  };
}

/** One served connection: the Kafka protocol over the shared connection core. */
class KafkaConnection implements FramedConnectionHandler {
  readonly #core: FramedConnection;
  readonly #settings: KafkaSettings;
  readonly #onClosed: (c: KafkaConnection) => void;
  readonly #state: KafkaConnectionState;
  /** The connection's right to be served (SASL, or anonymous while the broker has no keys). */
  #session: KafkaSession | null = null;
  /** While authentication is required and has not succeeded: closes the connection after the read timeout. */
  #authTimer: Timer | null = null;

  constructor(socket: ByteSocket, settings: KafkaSettings, onClosed: (c: KafkaConnection) => void) {
    this.#settings = settings;
    this.#onClosed = onClosed;
    this.#core = new FramedConnection(socket, {
      name: "kafka",
      clock: settings.clock,
      logger: settings.logger,
      refusals: settings.refusals,
      lengthMin: requestSizeMin,
      lengthMax: settings.maxRequestBytes,
      readTimeoutMs: settings.readTimeoutMs,
      maxInFlightRequests: settings.maxInFlightRequests,
      maxInFlightBytes: settings.maxInFlightBytes,
      order: "request",
      total: settings.inFlightTotal,
    });
    const core = this.#core;
    this.#state = {
      settings,
      // Read when a fetch waits, not at set-up (FramedConnection.signal).
      get signal() {
        return core.signal;
      },
      remote: socket.remoteAddress,
      reachedHost: settings.advertiseReachedHost
        ? (socket.serverName ?? socket.localHost)
        : undefined,
      broker: settings.authenticator === null ? settings.meter(settings.broker) : null,
      sasl: "start",
      authenticated: (session) => this.#adopt(session),
      invalidated: () => this.#invalidated(),
    };
    const authenticator = settings.authenticator;
    if (authenticator !== null) {
      if (authenticator.required) {
        this.#core.decoder.lengthMax = Math.min(kafkaSaslFrameBytesMax, settings.maxRequestBytes);
        // A connection that never authenticates is not kept: it holds a socket and a file descriptor.
        this.#authTimer = settings.clock.setTimer(settings.readTimeoutMs, () => {
          this.#authTimer = null;
          if (this.#session !== null || this.#core.closed) return;
          authenticator.refused(socket.remoteAddress, "timeout");
          this.destroy("no SASL authentication within the read timeout");
        });
      } else {
        const session = authenticator.anonymous(socket.remoteAddress, () => this.#invalidated());
        this.#state.broker = settings.meter(session.broker);
        this.#adopt(session);
      }
    }
  }

  /** Keeps the connection's session: lifts the pre-authentication frame cap and timer. */
  #adopt(session: KafkaSession): void {
    this.#session?.release();
    this.#session = session;
    this.#authTimer?.cancel();
    this.#authTimer = null;
    this.#core.decoder.lengthMax = this.#settings.maxRequestBytes;
    if (this.#core.closed) session.release();
  }

  /** The session's principal is no longer valid (revoked or changed key; keys turned on): close at once. */
  #invalidated(): void {
    const keyId = this.#session?.keyId ?? null;
    this.#settings.logger.log("info", "auth.connection_closed", {
      transport: "kafka",
      remote: this.#core.remoteAddress,
      key_id: keyId,
      reason: keyId === null ? "authentication turned on" : "key revoked or changed",
    });
    this.destroy("principal no longer valid");
  }

  start(): void {
    this.#core.start(this);
  }

  drainAndEnd(): void {
    this.#core.drainAndEnd();
  }

  destroy(reason: string): void {
    this.#core.destroy(reason);
  }

  /** `FramedConnectionHandler.onClose`. */
  onClose(): void {
    this.#session?.release();
    this.#authTimer?.cancel();
    this.#authTimer = null;
    this.#onClosed(this);
  }

  /**
   * `FramedConnectionHandler.onFrameLengthError`: Kafka cannot answer what it cannot frame. A
   * Kafka size is a signed int32, so one with the top bit set is logged as the negative number
   * the client sent, not as the u32 the shared decoder read.
   */
  onFrameLengthError(error: FrameLengthError): void {
    const negative = error.length >= 0x8000_0000;
    const size = negative ? error.length - 0x1_0000_0000 : error.length;
    this.#refuse("frame size out of range", {
      size,
      max_request_bytes: this.#core.decoder.lengthMax,
      error: negative ? `Cannot read request: size ${size} is negative` : error.message,
    });
  }

  /** Stops serving: answers already started still go out in order, then the connection closes. */
  #refuse(reason: string, fields: Record<string, unknown>): void {
    const core = this.#core;
    this.#settings.refusals.refuse("kafka.request_refused", {
      remote: core.remoteAddress,
      reason,
      ...fields,
    });
    core.stopReading();
    this.#endOrDestroy(reason);
  }

  /** Once stopping: destroys the connection now if nothing is in flight (after writing what is ready), else ends it after the answers. */
  #endOrDestroy(reason: string): void {
    const core = this.#core;
    if (core.inFlight > 0) return core.endIfDrained();
    core.flush();
    core.destroy(reason);
  }

  /** `FramedConnectionHandler.onFrame`: starts the request the frame carries. */
  onFrame(frame: Uint8Array): void {
    const core = this.#core;
    let served: KafkaServed;
    try {
      served = serveKafkaRequest(frame, this.#state);
    } catch (error) {
      return this.#refuseError(frame, error);
    }
    const pending = core.begin(frame.length + served.answerBytes);
    if (served.closeAfter) core.stopAfterAnswers();
    served.response.then(
      (response) => core.finish(pending, response),
      (error: unknown) => {
        if (error instanceof CloseConnection || error instanceof KafkaDecodeError) {
          core.finish(pending, null);
          return this.#refuseError(frame, error);
        }
        this.#settings.logger.log("error", "kafka.internal_error", {
          remote: core.remoteAddress,
          api: kafkaApiName(peekRequestHeader(frame).apiKey),
          error: errorMessage(error),
          stack: errorStack(error),
        });
        core.finish(pending, null);
        core.flush();
        this.destroy("internal error");
      },
    );
  }

  #refuseError(frame: Uint8Array, error: unknown): void {
    const { apiKey, apiVersion } = peekRequestHeader(frame);
    if (!(error instanceof CloseConnection) && !(error instanceof KafkaDecodeError)) {
      this.#settings.logger.log("error", "kafka.internal_error", {
        remote: this.#core.remoteAddress,
        api: kafkaApiName(apiKey),
        error: errorMessage(error),
        stack: errorStack(error),
      });
      this.#core.stopReading();
      this.#endOrDestroy("internal error");
      return;
    }
    if (error instanceof CloseConnection && error.logged) {
      this.#core.stopAfterAnswers();
      this.#core.endIfDrained();
      return;
    }
    this.#refuse(error.message, { api: kafkaApiName(apiKey), api_version: apiVersion });
  }
}
