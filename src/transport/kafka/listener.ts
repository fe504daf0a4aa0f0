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
 * - Flow control: at most `maxInFlightRequests` unanswered requests and `maxInFlightBytes` of them
 *   (frame bytes plus each Fetch's `max_bytes`); past either reading pauses.
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
  readTimeoutMsDefault,
  requestBytesDefault,
  tcpInFlightBytesMax,
  tcpRequestsInFlightMax,
  tcpShutdownGraceMs,
} from "../../lib/limits.ts";
import type { Logger } from "../../lib/logger.ts";
import { RefusalLog } from "../../lib/refusals.ts";
import { FrameDecoder, FrameLengthError } from "../../protocol/frame.ts";
import type { Gunzip } from "../../protocol/kafka/compression.ts";
import { kafkaApiName, peekRequestHeader, requestSizeMin } from "../../protocol/kafka/header.ts";
import type { KafkaNode } from "../../protocol/kafka/metadata.ts";
import { KafkaDecodeError } from "../../protocol/kafka/wire.ts";
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
  /** Bytes of unanswered requests per connection (frames + fetch `max_bytes`) before reading pauses. */
  maxInFlightBytes?: number;
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
  /** See {@link KafkaTransportOptions.meter}. */
  meter: <B extends Broker>(broker: B) => B;
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
    meter: options.meter ?? ((broker) => broker),
  };
  if (!(settings.maxRequestBytes >= requestSizeMin))
    throw new RangeError(`maxRequestBytes ${settings.maxRequestBytes} is below the smallest frame`);
  const connections = new Set<KafkaConnection>();
  let shutdown: Promise<void> | null = null;
  let allClosed: (() => void) | null = null;
  const onClosed = (c: KafkaConnection): void => {
    connections.delete(c);
    if (connections.size === 0) allClosed?.();
  };
  return {
    handleConnection(socket) {
      if (shutdown) {
        socket.attach({ onData() {}, onDrain() {}, onClose() {} });
        socket.destroy();
        return;
      }
      const c = new KafkaConnection(socket, settings, onClosed);
      connections.add(c);
      c.start();
    },
    get connectionCount() {
      return connections.size;
    },
    setAdvertised(address) {
      settings.node = { nodeId: 0, host: address.host, port: address.port };
    },
    close(closeOptions = {}) {
      if (shutdown) return shutdown;
      const graceMs = closeOptions.graceMs ?? tcpShutdownGraceMs;
      shutdown = new Promise<void>((resolve) => {
        let grace: Timer | null = null;
        allClosed = () => {
          grace?.cancel();
          resolve();
        };
        if (connections.size === 0) return allClosed();
        grace = settings.clock.setTimer(graceMs, () => {
          for (const c of [...connections]) c.destroy("shutdown grace period over");
        });
        for (const c of [...connections]) c.drainAndEnd();
      });
      return shutdown;
    },
  };
}

/** A response slot: filled when the request's answer is ready; written in slot order. */
interface Slot {
  done: boolean;
  /** Chunks of the response frame; empty for a request that gets no answer (acks 0). */
  chunks: readonly Uint8Array[];
  costBytes: number;
}

/** One served connection. */
class KafkaConnection {
  readonly #socket: ByteSocket;
  readonly #settings: KafkaSettings;
  readonly #onClosed: (c: KafkaConnection) => void;
  readonly #decoder: FrameDecoder;
  readonly #abort = new AbortController();
  readonly #state: KafkaConnectionState;
  /** Started requests, oldest first; answered from the front as they complete. */
  #slots: Slot[] = [];
  #inFlightBytes = 0;
  #writeBlocked = false;
  #paused = false;
  #stopping = false;
  #ended = false;
  #closed = false;
  #readTimer: Timer | null = null;
  /** The connection's right to be served (SASL, or anonymous while the broker has no keys). */
  #session: KafkaSession | null = null;
  /** While authentication is required and has not succeeded: closes the connection after the read timeout. */
  #authTimer: Timer | null = null;

  constructor(socket: ByteSocket, settings: KafkaSettings, onClosed: (c: KafkaConnection) => void) {
    this.#socket = socket;
    this.#settings = settings;
    this.#onClosed = onClosed;
    this.#decoder = new FrameDecoder({
      lengthMin: requestSizeMin,
      lengthMax: settings.maxRequestBytes,
    });
    this.#state = {
      settings,
      signal: this.#abort.signal,
      remote: socket.remoteAddress,
      broker: settings.authenticator === null ? settings.meter(settings.broker) : null,
      sasl: "start",
      authenticated: (session) => this.#adopt(session),
      invalidated: () => this.#invalidated(),
    };
    const authenticator = settings.authenticator;
    if (authenticator !== null) {
      if (authenticator.required) {
        this.#decoder.lengthMax = Math.min(kafkaSaslFrameBytesMax, settings.maxRequestBytes);
        // A connection that never authenticates is not kept: it holds a socket and a file descriptor.
        this.#authTimer = settings.clock.setTimer(settings.readTimeoutMs, () => {
          this.#authTimer = null;
          if (this.#session !== null || this.#closed) return;
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
    this.#decoder.lengthMax = this.#settings.maxRequestBytes;
    if (this.#closed) session.release();
  }

  /** The session's principal is no longer valid (revoked or changed key; keys turned on): close at once. */
  #invalidated(): void {
    const keyId = this.#session?.keyId ?? null;
    this.#settings.logger.log("info", "auth.connection_closed", {
      transport: "kafka",
      remote: this.#socket.remoteAddress,
      key_id: keyId,
      reason: keyId === null ? "authentication turned on" : "key revoked or changed",
    });
    this.destroy("principal no longer valid");
  }

  start(): void {
    this.#socket.attach({
      onData: (chunk) => {
        if (this.#stopping) return;
        this.#decoder.push(chunk);
        this.#pump();
      },
      onDrain: () => {
        this.#writeBlocked = false;
        this.#pump();
      },
      onClose: () => this.#onClose(),
    });
  }

  drainAndEnd(): void {
    this.#stopping = true;
    this.#abort.abort();
    this.#updateReading();
    this.#endIfDrained();
  }

  destroy(reason: string): void {
    if (this.#closed) return;
    this.#settings.logger.log("debug", "kafka.connection_destroyed", {
      remote: this.#socket.remoteAddress,
      reason,
    });
    this.#stopping = true;
    this.#ended = true;
    this.#decoder.clear();
    this.#cancelReadTimer();
    this.#abort.abort();
    this.#socket.destroy();
  }

  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#session?.release();
    this.#authTimer?.cancel();
    this.#authTimer = null;
    this.#ended = true;
    this.#stopping = true;
    this.#cancelReadTimer();
    this.#decoder.clear();
    this.#slots = [];
    this.#abort.abort();
    this.#onClosed(this);
  }

  #mayStart(): boolean {
    return (
      !this.#stopping &&
      !this.#writeBlocked &&
      this.#slots.length < this.#settings.maxInFlightRequests &&
      this.#inFlightBytes < this.#settings.maxInFlightBytes
    );
  }

  #pump(): void {
    while (this.#mayStart()) {
      let frame: Uint8Array | null;
      try {
        frame = this.#decoder.next();
      } catch (error) {
        if (error instanceof FrameLengthError) {
          this.#refuse("frame size out of range", {
            size: error.length,
            max_request_bytes: this.#decoder.lengthMax,
            error: error.message,
          });
          return;
        }
        throw error;
      }
      if (frame === null) break;
      this.#cancelReadTimer();
      this.#startRequest(frame);
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
    if (reading && this.#decoder.bufferedBytes > 0) {
      this.#readTimer ??= this.#settings.clock.setTimer(this.#settings.readTimeoutMs, () => {
        this.#readTimer = null;
        if (this.#closed) return;
        this.#settings.refusals.refuse("kafka.read_timeout", {
          remote: this.#socket.remoteAddress,
          buffered_bytes: this.#decoder.bufferedBytes,
          read_timeout_ms: this.#settings.readTimeoutMs,
        });
        this.destroy("read timeout inside a frame");
      });
    } else {
      this.#cancelReadTimer();
    }
  }

  #cancelReadTimer(): void {
    this.#readTimer?.cancel();
    this.#readTimer = null;
  }

  /** Stops serving: answers already started still go out in order, then the connection closes. */
  #refuse(reason: string, fields: Record<string, unknown>): void {
    this.#settings.refusals.refuse("kafka.request_refused", {
      remote: this.#socket.remoteAddress,
      reason,
      ...fields,
    });
    this.#decoder.clear();
    this.#stopping = true;
    this.#cancelReadTimer();
    this.#abort.abort();
    if (this.#slots.length === 0) this.destroy(reason);
    else this.#endIfDrained();
  }

  #startRequest(frame: Uint8Array): void {
    const slot: Slot = { done: false, chunks: [], costBytes: frame.length };
    let served: KafkaServed;
    try {
      served = serveKafkaRequest(frame, this.#state);
      slot.costBytes += served.answerBytes;
    } catch (error) {
      return this.#refuseError(frame, error);
    }
    this.#slots.push(slot);
    this.#inFlightBytes += slot.costBytes;
    if (served.closeAfter) this.#stopAfterAnswers();
    served.response.then(
      (response) => {
        slot.chunks =
          response === null ? [] : response instanceof Uint8Array ? [response] : response;
        this.#complete(slot);
      },
      (error: unknown) => {
        if (error instanceof CloseConnection || error instanceof KafkaDecodeError) {
          this.#complete(slot);
          return this.#refuseError(frame, error);
        }
        this.#settings.logger.log("error", "kafka.internal_error", {
          remote: this.#socket.remoteAddress,
          api: kafkaApiName(peekRequestHeader(frame).apiKey),
          error: errorMessage(error),
          stack: errorStack(error),
        });
        this.#complete(slot);
        this.destroy("internal error");
      },
    );
  }

  /** Starts no more frames and reads nothing more; the connection ends once what is in flight is answered. */
  #stopAfterAnswers(): void {
    this.#stopping = true;
    this.#decoder.clear();
    this.#cancelReadTimer();
    this.#updateReading();
  }

  #refuseError(frame: Uint8Array, error: unknown): void {
    const { apiKey, apiVersion } = peekRequestHeader(frame);
    if (!(error instanceof CloseConnection) && !(error instanceof KafkaDecodeError)) {
      this.#settings.logger.log("error", "kafka.internal_error", {
        remote: this.#socket.remoteAddress,
        api: kafkaApiName(apiKey),
        error: errorMessage(error),
        stack: errorStack(error),
      });
      this.#stopping = true;
      if (this.#slots.length === 0) this.destroy("internal error");
      else this.#endIfDrained();
      return;
    }
    if (error instanceof CloseConnection && error.logged) {
      this.#stopAfterAnswers();
      this.#endIfDrained();
      return;
    }
    this.#refuse(error.message, { api: kafkaApiName(apiKey), api_version: apiVersion });
  }

  #complete(slot: Slot): void {
    slot.done = true;
    if (this.#ended) return;
    const out: Uint8Array[] = [];
    while (this.#slots.length > 0 && this.#slots[0].done) {
      const s = this.#slots.shift()!;
      this.#inFlightBytes -= s.costBytes;
      for (const c of s.chunks) if (c.length > 0) out.push(c);
    }
    if (out.length > 0 && !this.#socket.write(out)) this.#writeBlocked = true;
    this.#pump();
    this.#endIfDrained();
  }

  #endIfDrained(): void {
    if (!this.#stopping || this.#ended || this.#slots.length > 0) return;
    this.#ended = true;
    this.#socket.end();
  }
}
