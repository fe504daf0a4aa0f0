/**
 * `serve --kafka-port`: the Kafka listener's wiring (docs/kafka.md), apart from `serve.ts` so that
 * file stays about the front doors every broker has.
 */
import type { Broker } from "../broker/types.ts";
import type { Logger } from "../lib/logger.ts";
import type { RefusalLog } from "../lib/refusals.ts";
import type { ConnectionLimit } from "../lib/connection-limit.ts";
import type { EarlyListener } from "./early-listener.ts";
import { systemClock } from "../runtime/clock.ts";
import { nodeGunzip } from "../runtime/kafka-gzip.ts";
import { listenTcp } from "../runtime/tcp.ts";
import type { TlsServerMaterial } from "../runtime/tls.ts";
import { createKafkaTransport } from "../transport/kafka/listener.ts";
import type { AccessControl } from "../auth/access.ts";
import { accessAuthenticator } from "../transport/kafka/sasl.ts";
import type { InFlightTotal } from "../transport/connection.ts";

/** A running Kafka listener. */
export interface KafkaListener {
  /** The bound port. */
  port: number;
  /** Stops accepting, lets in-flight requests finish (as the TCP front door), closes connections. */
  close(): Promise<void>;
  /**
   * TLS listeners only: serves `material` to connections accepted from now on (SIGHUP); open
   * ones keep theirs. @throws Error on a plain listener.
   */
  setTlsMaterial(material: TlsServerMaterial): void;
  /** Connections open now (`esb_open_connections{listener="kafka"}`). */
  readonly connectionCount: number;
}

/** Starts the Kafka listener on `host:port`. @throws the listen error. */
export async function startKafkaListener(options: {
  broker: Broker;
  logger: Logger;
  refusals: RefusalLog;
  host: string;
  port: number;
  /** Host Metadata and FindCoordinator name (the port is the bound one). */
  advertisedHost: string;
  /** Name the host each connection reached instead (`KafkaTransportOptions.advertiseReachedHost`). */
  advertiseReachedHost?: boolean;
  maxRequestBytes: number;
  readTimeoutMs: number;
  /**
   * API keys and the role table (SASL/PLAIN, docs/kafka.md): while the broker has keys every
   * connection authenticates and is served through its key's broker view.
   */
  access: AccessControl;
  /** Serve TLS (`--tls-cert`, `--tls-key`, `--tls-client-ca`: the same as the other ports); plain without it. */
  tls?: TlsServerMaterial;
  /** Counts each connection's broker calls (`FrontDoorMetrics.wrap` with transport "kafka"). */
  meter?: <B extends Broker>(broker: B) => B;
  /** A listener bound already (`listenEarly`, cluster mode): serves its connections instead of binding. */
  bound?: EarlyListener;
  /** The broker-wide bound on open connections (`--max-connections`). */
  connectionLimit?: ConnectionLimit;
  /** The bytes held for requests and answers over every TCP and Kafka connection (`--max-in-flight-bytes`). */
  inFlightTotal?: InFlightTotal;
}): Promise<KafkaListener> {
  const transport = createKafkaTransport({
    broker: options.broker,
    clock: systemClock,
    logger: options.logger,
    refusals: options.refusals,
    advertised: { host: options.advertisedHost, port: options.port },
    advertiseReachedHost: options.advertiseReachedHost,
    gunzip: nodeGunzip,
    authenticator: accessAuthenticator(options.access),
    maxRequestBytes: options.maxRequestBytes,
    readTimeoutMs: options.readTimeoutMs,
    meter: options.meter,
    inFlightTotal: options.inFlightTotal,
  });
  const bound = options.bound;
  if (bound !== undefined) bound.serve((socket) => transport.handleConnection(socket));
  const listener =
    bound?.listener ??
    (await listenTcp(
      {
        host: options.host,
        port: options.port,
        tls: options.tls,
        logger: options.logger,
        refusals: options.refusals,
        listener: "kafka",
        connectionLimit: options.connectionLimit,
      },
      (socket) => transport.handleConnection(socket),
    ));
  transport.setAdvertised({ host: options.advertisedHost, port: listener.port });
  return {
    port: listener.port,
    async close() {
      const closed = listener.close();
      await transport.close();
      await closed;
    },
    setTlsMaterial: (material) => listener.setTlsMaterial(material),
    get connectionCount() {
      return transport.connectionCount;
    },
  };
}
