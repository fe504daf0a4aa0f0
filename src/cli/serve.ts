/**
 * `es-broker serve`: opens the data directory, starts the HTTP and TCP front doors (and the Kafka
 * listener with `--kafka-port`), prints one line saying where it listens, and shuts down
 * gracefully on SIGTERM or SIGINT (in a cluster, leave it first: docs/cluster.md "Leaving the
 * cluster"; then stop accepting, finish in-flight requests, fsync, close files, exit 0); a second
 * signal exits at once (130 / 143, `signals.ts`). SIGHUP reloads
 * the TLS certificate and key (and client CA, and in a cluster `--cluster-tls-ca`) and
 * `api_keys.json` without dropping connections;
 * a file that cannot be used is logged and the old material stays in force.
 */
import { resolve } from "node:path";
import { ensureDataDir } from "./data-dir.ts";
import { LocalBroker } from "../broker/broker.ts";
import { NodeFileSystem } from "../runtime/node-fs.ts";
import { acquireDataDirLock } from "../runtime/lock.ts";
import { systemClock } from "../runtime/clock.ts";
import { serveHttp } from "../runtime/http.ts";
import { listenTcp } from "../runtime/tcp.ts";
import { listenFailure } from "./listen-error.ts";
import { type EarlyListener, listenEarly } from "./early-listener.ts";
import {
  coldReadTimeoutMs,
  s3ColdStoreFromEnvironment,
  type S3ColdStore,
} from "../runtime/s3-cold-store.ts";
import { coldReclaimIntervalMs, isColdTierKey } from "../storage/cold-store.ts";
import { openFilesSoftLimit, runtimeDescription } from "../runtime/info.ts";
import { ConnectionLimit } from "../lib/connection-limit.ts";
import { createAuthenticatedHttpApp } from "../transport/http/auth.ts";
import { AccessControl } from "../auth/access.ts";
import { KeyStore, KeyStoreError, apiKeysFileName } from "../auth/key-store.ts";
import { systemKeyCrypto } from "../runtime/crypto.ts";
import {
  loadCaBundle,
  loadTlsOutgoing,
  loadTlsServerMaterial,
  tlsHandshakeTimeoutMs,
  type TlsServerFiles,
  type TlsServerMaterial,
  type TlsOutgoingFiles,
} from "../runtime/tls.ts";
import { createTcpTransport } from "../transport/tcp/transport.ts";
import { InFlightTotal } from "../transport/connection.ts";
import { startKafkaListener } from "./serve-kafka.ts";
import { guardMirrorGroup } from "../mirror/guard.ts";
import { BootstrapConnector } from "../mirror/bootstrap.ts";
import { jsonLineLogger, type Logger, type LogLevel } from "../lib/logger.ts";
import { RefusalLog } from "../lib/refusals.ts";
import {
  cleanupIntervalMsDefault,
  coldCacheBytesDefault,
  producerExpiryMsDefault,
  producerIdsMaxDefault,
  flushIntervalMsDefault,
  maxOpenSegmentsDefault,
  maxConnectionsDefault,
  maxConnectionsFallback,
  maxConnectionsMax,
  maxOpenSegmentsMax,
  maxOpenSegmentsMin,
  readTimeoutMsDefault,
  requestBytesDefault,
  requestBytesMax,
  requestBytesMin,
  inFlightBytesTotalDefault,
  inFlightBytesTotalMax,
  inFlightBytesTotalMin,
  tcpInFlightBytesMax,
  fetchWaitMsMax,
  streamLongPollMsDefault,
} from "../lib/limits.ts";
import { version } from "../version.ts";
import type { RecoveryProgress } from "../broker/topics.ts";
import { FrontDoorMetrics } from "../transport/metered-broker.ts";
import { renderMetrics } from "../transport/http/prometheus.ts";
import { recoveringApp } from "../transport/http/readiness.ts";
import { metricsPortApp } from "../transport/http/metrics-port.ts";
import type { FetchApp, HttpServer } from "../runtime/http.ts";
import {
  createMetricsRegistry,
  processSnapshot,
  startEventLoopProbe,
} from "../runtime/process-metrics.ts";
import { UsageError, intOption, isLoopback, parseCli } from "./args.ts";
import { errorMessage } from "../lib/errors.ts";
import { onStopSignals } from "./signals.ts";
import { Mirror, type MirrorRename, parseMirrorRenames } from "../mirror/mirror.ts";
import { edgeSchemas, parseMirrorRegistryUrl, upstreamRegistry } from "./mirror-registry.ts";
import { TcpClient } from "../client/client.ts";
import { parseHostPort } from "../client/cluster.ts";
import { clientTlsOptions, readApiKey } from "./connection.ts";
import type { ConnectionOptions } from "node:tls";
import { existsSync, readFileSync } from "node:fs";
import { hostPort } from "./args.ts";
import {
  type EtcdAuth,
  EtcdHttpClient,
  type EtcdTlsMaterial,
  parseEtcdUrl,
} from "../runtime/etcd.ts";
import { ClusterNode } from "../cluster/node.ts";
import { rebalanceMsDefault } from "../cluster/controller.ts";
import { type ClusterState, openClusterState } from "../cluster/cluster-state.ts";
import { ReplicaManager } from "../cluster/replica-manager.ts";
import { replicaConnector } from "../runtime/replica-connection.ts";
import { PeerLinks } from "../cluster/peer-links.ts";
import { type ClusterBroker, clusterBroker } from "../cluster/cluster-broker.ts";
import { defaultClusterPrefix } from "../cluster/membership.ts";
import { forgetReplicaDataInCluster } from "../cluster/fresh-replica.ts";
import { guardWatches } from "../cluster/watch-guard.ts";
import { Prng } from "../lib/prng.ts";
import type { Broker } from "../broker/types.ts";
import { writeFileAtomic } from "../storage/metadata.ts";
import { utf8 } from "../lib/bytes.ts";

/** Help text of `es-broker serve`. */
export const serveHelp = `Usage: es-broker serve [options]

Runs the broker. Data is fsynced before every acknowledgement unless --flush-every-records > 1.

Options:
  --data-dir DIR              data directory (default ./data)
  --host HOST                 address to listen on (default 127.0.0.1)
  --http-port PORT            HTTP port, 0 = any free port (default 8080)
  --tcp-port PORT             TCP protocol port, 0 = any free port (default 9092)
  --flush-every-records N     fsync once N records wait (default 1: fsync before every ack)
  --flush-interval MS         with N > 1, fsync at least this often (default ${flushIntervalMsDefault})
  --max-open-segments N       sealed segments whose files stay open, over every partition; others
                              are opened again when read, least recently used closed first
                              (default ${maxOpenSegmentsDefault}; the active segment of each partition
                              is always open: 2 descriptors per partition)
  --max-connections N         client connections open at once over the HTTP, TCP and Kafka ports;
                              one more is closed at once, counted and logged (connection.refused)
                              (default: half the open-files limit, ulimit -n, or ${maxConnectionsFallback}
                              where it cannot be read; the other half stays for storage)
  --max-request-bytes BYTES   largest HTTP body or TCP frame (default ${requestBytesDefault})
  --max-in-flight-bytes BYTES  bytes the TCP, Kafka and HTTP connections together may hold for
                              requests in flight (frames, each fetch's max_bytes) and answers the
                              clients have not read yet (over HTTP: fetches); past it a connection
                              starts a request only when it holds nothing, until the sum drops
                              (default ${inFlightBytesTotalDefault}; each TCP or Kafka connection also
                              holds at most ${tcpInFlightBytesMax})
  --read-timeout MS           close a TCP or Kafka connection stalled inside a frame, or (while the
                              broker has keys) not authenticated this long after opening (default ${readTimeoutMsDefault})
  --kafka-port PORT           also speak Kafka's protocol on this port, 0 = any free port
                              (off unless given; docs/kafka.md)
  --kafka-advertised-host H   the host Kafka clients are told to connect to (default --host; with
                              --host 0.0.0.0 or ::, the host each client reached: TLS name or address)
  --cold-storage-dir DIR      move segments that retention removes there (and serve them from there)
                              instead of deleting them; topic config cold_retention_ms says how long
  --cold-storage URL          the same, to S3-compatible object storage: s3://bucket[/prefix].
                              Credentials only from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
                              (and AWS_SESSION_TOKEN), never from arguments
  --cold-s3-endpoint URL      S3 endpoint (default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, or AWS's)
  --cold-s3-region REGION     signing region (default AWS_REGION, AWS_DEFAULT_REGION, us-east-1)
  --cold-read-timeout-ms MS   longest a read of offloaded records waits for S3, all retries included
                              (default ${coldReadTimeoutMs}); then the fetch fails cold_tier_unavailable
  --cold-cache-bytes BYTES    memory for cold reads (default ${coldCacheBytesDefault}; 0 = no cache)
  --cold-upload-bytes-per-sec BYTES  cap on upload bandwidth to the cold tier (default 0: none)
  --mirror-to HOST:PORT[,HOST:PORT…]  forward every record of the topics matching --mirror-topics
                              to the es-broker at HOST:PORT (its TCP port), exactly once, same
                              topic, partition, key, value and timestamp; several brokers of an
                              upstream cluster: the first that connects is used (docs/edge.md)
  --mirror-topics PATTERN     topics to forward (repeatable or comma-separated; * matches any run)
  --mirror-rename LOCAL=REMOTE  forward topic LOCAL to topic REMOTE upstream (repeatable; a pattern
                              with one * on each side maps many: 'sensors.*=site17.sensors.*';
                              the first rule that matches wins; default: the same name); the
                              subjects <LOCAL>-key/-value become <REMOTE>-key/-value upstream
  --mirror-name NAME          names the mirror's state: group mirror.NAME, DIR/mirror/NAME.json
                              (default upstream)
  --mirror-records-per-sec N  cap on the forwarding rate, e.g. while catching up (default 20000;
                              0 = none); catching up competes with the edge's own producers:
                              lower it on a small machine (docs/edge.md "What is forwarded")
  --mirror-timeout-ms MS      time limit for each request to the upstream (default 10000); a batch
                              with no answer by then is sent again, to its leader if it answers
                              (logged mirror.upstream_slow), see docs/edge.md "An upstream cluster"
  --mirror-skip-gaps          accept records retention deleted before they were forwarded: a
                              partition stopped by such a gap logs mirror.gap_skipped (error, with
                              the lost offsets) and goes on from the log start offset (default:
                              it stops; see docs/edge.md "Retention and the mirror")
  --mirror-registry-url URL   the upstream's schema registry (http(s)://HOST:HTTP_PORT/registry):
                              schema ids of Confluent-framed records (topics with a schema subject,
                              schema_format confluent) are translated to the upstream's; without it
                              such partitions stop (see docs/edge.md "Schema ids upstream"). Uses
                              the mirror's API key and TLS options
  --mirror-keep-schema-ids    forward schema ids unchanged instead: only when both registries give
                              every schema the same id (schemas registered in one order everywhere)
  --mirror-api-key-file FILE  the upstream's API key (default: $ES_BROKER_MIRROR_API_KEY); SIGHUP
                              re-reads it for the next connections (a rotated key)
  --mirror-tls                connect to the upstream with TLS (implied by the options below)
  --mirror-tls-ca FILE        check the upstream's certificate against this CA (PEM)
  --mirror-tls-insecure       TLS without checking the upstream's certificate
  --mirror-tls-cert FILE      client certificate (PEM) for an upstream that requires mutual TLS
  --mirror-tls-key FILE       its private key (PEM)
  --cleanup-interval-ms MS    run retention and compaction over every partition this often
                              (default ${cleanupIntervalMsDefault}; 0 = only on POST /v1/admin/topics/{topic}/cleanup)
  --producer-expiry-ms MS     forget an idempotent producer idle this long (default ${producerExpiryMsDefault}, 7 days)
  --producer-ids-max N        keep the state of at most N idempotent producer ids; past it the least
                              recently active idle one is forgotten (default ${producerIdsMaxDefault})
  --tls-cert FILE             serve HTTPS, and TLS on the TCP and Kafka ports, with this certificate
                              chain (PEM)
  --tls-key FILE              the certificate's private key (PEM, unencrypted); needs --tls-cert
  --tls-client-ca FILE        mutual TLS on every port: require client certificates issued by this
                              CA (PEM)
  --tls-handshake-timeout-ms MS  close a connection whose TLS handshake has not finished MS after
                              it was accepted (default ${tlsHandshakeTimeoutMs})
  --stream-long-poll-ms MS    how long a Durable Streams long-poll waits for data (default ${streamLongPollMsDefault})
  --metrics-port PORT         also serve GET /metrics (and /healthz, /readyz) without an API key on
                              127.0.0.1:PORT, for a Prometheus on this host (default: off; GET
                              /metrics on the HTTP port needs an admin key once keys exist)
  --allow-anonymous           allow listening on a non-loopback address while the data directory
                              has no API keys (no authentication); see es-broker keys --help
  --log-level LEVEL           debug | info | warn | error (default info); logs are JSON lines on stderr
  -h, --help                  show this help

Cluster mode (docs/cluster.md; off unless --cluster is given):
  --cluster etcd://H:P[,H:P]  join the cluster coordinated by this etcd (its client endpoints);
                              etcds://H:P[,H:P] for etcd's client port with TLS
  --cluster-etcd-ca FILE      with etcds://: the CA (PEM) etcd's certificates are checked against
                              (default: the system's CAs)
  --cluster-etcd-cert FILE    with etcds://: client certificate (PEM) for etcd started with
                              --client-cert-auth (with authentication on: no CN in its subject)
  --cluster-etcd-key FILE     its private key (PEM)
  --cluster-etcd-user NAME    authenticate to etcd as this user (etcd's auth enable)
  --cluster-etcd-password-file FILE  the user's password, never on the command line (etcds://
                              unless every etcd endpoint is loopback)
  --node-id N                 this broker's node id, 0 to 2147483647, unique in the cluster
  --advertise-tcp HOST:PORT   the TCP address other brokers and clients reach this broker at
  --advertise-http URL        the HTTP base URL clients are redirected to (http://HOST:PORT;
                              https:// with --tls-cert)
  --cluster-secret-file FILE  the broker credential brokers present to each other (replica
                              fetch); the same file on every broker, never on the command line
  --cluster-tls-ca FILE       with --tls-cert: the CA (PEM) the other brokers' certificates are
                              checked against (they must name the host of their --advertise-tcp)
  --leader-rebalance-ms MS    while this broker is the controller: every MS, move leaderships back
                              to each partition's preferred replica once it is in the ISR (default
                              30000; 0: off); give every broker the same value. To move them
                              now (also when off): etcdctl put /es-broker/elect_preferred
                              '{"topic":"NAME"}' (or {"topic":null} for every topic;
                              docs/cluster.md "Preferred leader election")
  With --tls-cert, brokers connect to each other with TLS only (never plain TCP), presenting
  their own --tls-cert (for peers with --tls-client-ca), and --cluster-tls-ca is required;
  every broker of a cluster serves TLS or none does (a mixed one is refused at start). With
  API keys, --cluster-secret-file is required. With --kafka-port N (not 0), Kafka clients
  learn every broker's Kafka listener and each partition's leader from Metadata (host:
  --kafka-advertised-host, else --advertise-tcp's host).
  The schema registry and the API keys are the cluster's, kept in etcd. At the start,
  DIR/schemas.json is imported into an empty cluster registry (else its ids must mean the same
  schemas there, or the start is refused) and the keys of DIR/${apiKeysFileName} are imported;
  neither file is used after that.

Authentication: once DIR/${apiKeysFileName} exists (es-broker keys create), every request on every
port needs an API key, except GET (or HEAD) /healthz, /readyz, /v1/openapi.json and the console's
page and assets (the console asks for a key itself); Kafka clients use SASL/PLAIN
(user = the key's name or id, password = the key). A key file that cannot be read refuses the start.
SIGHUP reloads the TLS files (also --cluster-etcd-*), ${apiKeysFileName} and --mirror-api-key-file;
open connections keep working.
SIGINT or SIGTERM: stop accepting, finish the requests in flight, fsync, close, exit 0 (with
--cluster it leaves the cluster first: no more produces as leader, its followers fetch what it
wrote for at most 3 s, then its departure moves its leaderships at once); a second
signal exits at once, with 130 (SIGINT) or 143 (SIGTERM). The same signal again within 1 s of the
first is the same request (one Ctrl-C under deno task serve arrives twice).
`;

/** Runs `serve` until a signal stops it. Resolves with the exit code. */
export async function serve(argv: string[]): Promise<number> {
  const { values } = parseCli({
    args: argv,
    options: {
      "data-dir": { type: "string", default: "./data" },
      host: { type: "string", default: "127.0.0.1" },
      "http-port": { type: "string" },
      "tcp-port": { type: "string" },
      "flush-every-records": { type: "string" },
      "max-open-segments": { type: "string" },
      "max-connections": { type: "string" },
      "flush-interval": { type: "string" },
      "max-request-bytes": { type: "string" },
      "max-in-flight-bytes": { type: "string" },
      "read-timeout": { type: "string" },
      "kafka-port": { type: "string" },
      "kafka-advertised-host": { type: "string" },
      "cold-storage-dir": { type: "string" },
      "cold-storage": { type: "string" },
      "cold-s3-endpoint": { type: "string" },
      "cold-read-timeout-ms": { type: "string" },
      "cold-s3-region": { type: "string" },
      "cold-cache-bytes": { type: "string" },
      "cold-upload-bytes-per-sec": { type: "string" },
      "mirror-to": { type: "string" },
      "mirror-topics": { type: "string", multiple: true },
      "mirror-name": { type: "string", default: "upstream" },
      "mirror-rename": { type: "string", multiple: true },
      "mirror-records-per-sec": { type: "string" },
      "mirror-timeout-ms": { type: "string" },
      "mirror-skip-gaps": { type: "boolean", default: false },
      "mirror-registry-url": { type: "string" },
      "mirror-keep-schema-ids": { type: "boolean", default: false },
      "mirror-api-key-file": { type: "string" },
      "mirror-tls": { type: "boolean", default: false },
      "mirror-tls-ca": { type: "string" },
      "mirror-tls-insecure": { type: "boolean", default: false },
      "mirror-tls-cert": { type: "string" },
      "mirror-tls-key": { type: "string" },
      "cleanup-interval-ms": { type: "string" },
      "producer-expiry-ms": { type: "string" },
      "producer-ids-max": { type: "string" },
      "stream-long-poll-ms": { type: "string" },
      "allow-anonymous": { type: "boolean", default: false },
      "tls-cert": { type: "string" },
      "tls-key": { type: "string" },
      "tls-client-ca": { type: "string" },
      "tls-handshake-timeout-ms": { type: "string" },
      "metrics-port": { type: "string" },
      "log-level": { type: "string", default: "info" },
      cluster: { type: "string" },
      "node-id": { type: "string" },
      "advertise-tcp": { type: "string" },
      "advertise-http": { type: "string" },
      "cluster-secret-file": { type: "string" },
      "cluster-tls-ca": { type: "string" },
      "leader-rebalance-ms": { type: "string" },
      "cluster-etcd-ca": { type: "string" },
      "cluster-etcd-cert": { type: "string" },
      "cluster-etcd-key": { type: "string" },
      "cluster-etcd-user": { type: "string" },
      "cluster-etcd-password-file": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    process.stdout.write(serveHelp);
    return 0;
  }
  const host = values.host!;
  const httpPort = intOption("http-port", values["http-port"], 8080, 0, 65535);
  const tcpPort = intOption("tcp-port", values["tcp-port"], 9092, 0, 65535);
  const kafkaPort =
    values["kafka-port"] === undefined
      ? null
      : intOption("kafka-port", values["kafka-port"], 0, 0, 65535);
  const metricsPort =
    values["metrics-port"] === undefined
      ? undefined
      : intOption("metrics-port", values["metrics-port"], 0, 0, 65535);
  refuseSharedPorts(host, { httpPort, tcpPort, kafkaPort, metricsPort });
  const flushEveryRecords = intOption(
    "flush-every-records",
    values["flush-every-records"],
    1,
    1,
    1_000_000,
  );
  const flushIntervalMs = intOption(
    "flush-interval",
    values["flush-interval"],
    flushIntervalMsDefault,
    1,
    3_600_000,
  );
  const maxOpenSegments = intOption(
    "max-open-segments",
    values["max-open-segments"],
    maxOpenSegmentsDefault,
    maxOpenSegmentsMin,
    maxOpenSegmentsMax,
  );
  const maxConnections = intOption(
    "max-connections",
    values["max-connections"],
    maxConnectionsDefault(await openFilesSoftLimit()),
    1,
    maxConnectionsMax,
  );
  const maxRequestBytes = intOption(
    "max-request-bytes",
    values["max-request-bytes"],
    requestBytesDefault,
    requestBytesMin,
    requestBytesMax,
  );
  const inFlightTotal = new InFlightTotal(
    intOption(
      "max-in-flight-bytes",
      values["max-in-flight-bytes"],
      inFlightBytesTotalDefault,
      inFlightBytesTotalMin,
      inFlightBytesTotalMax,
    ),
  );
  const readTimeoutMs = intOption(
    "read-timeout",
    values["read-timeout"],
    readTimeoutMsDefault,
    1,
    3_600_000,
  );
  const cleanupIntervalMs = intOption(
    "cleanup-interval-ms",
    values["cleanup-interval-ms"],
    cleanupIntervalMsDefault,
    0,
    86_400_000,
  );
  const producerExpiryMs = intOption(
    "producer-expiry-ms",
    values["producer-expiry-ms"],
    producerExpiryMsDefault,
    1000,
    365 * 86_400_000,
  );
  const producerIdsMax = intOption(
    "producer-ids-max",
    values["producer-ids-max"],
    producerIdsMaxDefault,
    1,
    10_000_000,
  );
  const streamLongPollMs = intOption(
    "stream-long-poll-ms",
    values["stream-long-poll-ms"],
    streamLongPollMsDefault,
    1,
    fetchWaitMsMax,
  );
  const coldStorageDir =
    values["cold-storage-dir"] === undefined ? undefined : resolve(values["cold-storage-dir"]);
  if (coldStorageDir !== undefined && values["cold-storage"] !== undefined)
    throw new UsageError(
      "--cold-storage-dir and --cold-storage exclude each other: pick one cold tier",
    );
  const coldCacheBytes = intOption(
    "cold-cache-bytes",
    values["cold-cache-bytes"],
    coldCacheBytesDefault,
    0,
    64 * 1024 ** 3,
  );
  const coldUploadBytesPerSec = intOption(
    "cold-upload-bytes-per-sec",
    values["cold-upload-bytes-per-sec"],
    0,
    0,
    Number.MAX_SAFE_INTEGER,
  );
  const mirror = mirrorSettings(values);
  const cluster = clusterSettings(values);
  if (
    cluster !== null &&
    values["tls-cert"] !== undefined &&
    values["cluster-tls-ca"] === undefined
  )
    throw new UsageError(
      "--cluster with --tls-cert needs --cluster-tls-ca FILE: the CA (PEM) the other brokers' certificates are checked against (brokers replicate over their TLS listeners, never over plain TCP)",
    );
  // Clients follow the redirect to the leader with their API key (curl --location-trusted): a
  // TLS broker must never send them to a plain-HTTP address.
  if (
    cluster !== null &&
    values["tls-cert"] !== undefined &&
    !cluster.advertiseHttp.startsWith("https://")
  )
    throw new UsageError(
      `--cluster with --tls-cert needs an https:// --advertise-http (got ${JSON.stringify(cluster.advertiseHttp)}): clients follow redirects to it with their API key`,
    );
  if (values["cluster-tls-ca"] !== undefined && values["tls-cert"] === undefined)
    throw new UsageError(
      "--cluster-tls-ca needs --tls-cert and --tls-key: brokers connect to each other with TLS exactly when their TCP listener serves it",
    );
  const level = values["log-level"] as LogLevel;
  if (!["debug", "info", "warn", "error"].includes(level))
    throw new UsageError(
      `--log-level must be debug, info, warn or error, got ${JSON.stringify(level)}`,
    );
  if ((values["tls-cert"] === undefined) !== (values["tls-key"] === undefined))
    throw new UsageError("--tls-cert and --tls-key go together");
  if (values["tls-client-ca"] !== undefined && values["tls-cert"] === undefined)
    throw new UsageError("--tls-client-ca needs --tls-cert and --tls-key");
  const handshakeTimeoutMs = intOption(
    "tls-handshake-timeout-ms",
    values["tls-handshake-timeout-ms"],
    tlsHandshakeTimeoutMs,
    1,
    600_000,
  );
  const tlsFiles: TlsServerFiles | undefined =
    values["tls-cert"] === undefined
      ? undefined
      : {
          certPath: resolve(values["tls-cert"]),
          keyPath: resolve(values["tls-key"]!),
          clientCaPath:
            values["tls-client-ca"] === undefined ? undefined : resolve(values["tls-client-ca"]),
          handshakeTimeoutMs,
        };
  let tlsMaterial: TlsServerMaterial | undefined =
    tlsFiles === undefined ? undefined : loadTlsServerMaterial(tlsFiles);
  // Cluster mode with TLS: the CA other brokers' certificates must chain to (re-read on SIGHUP).
  const clusterCaPath =
    values["cluster-tls-ca"] === undefined ? undefined : resolve(values["cluster-tls-ca"]);
  let clusterCa: Buffer | undefined =
    clusterCaPath === undefined ? undefined : loadCaBundle(clusterCaPath, "--cluster-tls-ca");
  // The connection to etcd (docs/cluster.md "etcd with TLS and authentication"): its files are
  // re-read on SIGHUP, like --cluster-tls-ca; the password stays in memory only.
  let etcdTls = cluster?.etcdTls === undefined ? undefined : loadEtcdTls(cluster.etcdTls);
  let etcdPassword =
    cluster?.etcdAuth === undefined ? undefined : readEtcdPassword(cluster.etcdAuth.passwordPath);
  const dataDir = resolve(values["data-dir"]!);
  const logger = jsonLineLogger(
    (line) => process.stderr.write(line),
    () => Date.now(),
    level,
  );
  let coldStore: S3ColdStore | undefined;
  try {
    coldStore =
      values["cold-storage"] === undefined
        ? undefined
        : s3ColdStoreFromEnvironment({
            url: values["cold-storage"],
            endpoint: values["cold-s3-endpoint"],
            region: values["cold-s3-region"],
            readTimeoutMs: intOption(
              "cold-read-timeout-ms",
              values["cold-read-timeout-ms"],
              coldReadTimeoutMs,
              100,
              600_000,
            ),
            env: process.env,
            logger,
          });
  } catch (err) {
    throw new UsageError(errorMessage(err));
  }

  // One broker per data directory: take its lock before recovery touches anything. The directory
  // chain is created durably first (each new directory's parent fsynced).
  const nodeFs = new NodeFileSystem();
  await ensureDataDir(nodeFs, dataDir);
  const lock = acquireDataDirLock(dataDir);
  // The JSON log's own record of what runs (the stdout "listening" line is not in it): which
  // version and runtime wrote the lines after it, and which process (newuser18 F8);
  // once the data directory is usable, so a start-up refusal stays the only line on stderr.
  logger.log("info", "broker.starting", {
    version,
    runtime: runtimeDescription(),
    pid: process.pid,
    data_dir: dataDir,
  });
  // A cluster member's logs hold records encoded with the cluster's schema ids and its keys are
  // the cluster's: served alone, its empty local registry would hand those ids to other schemas.
  if (cluster === null && existsSync(`${dataDir}/${clusterFileName}`)) {
    lock.release();
    throw new Error(
      `data directory ${dataDir} belongs to a cluster (${dataDir}/${clusterFileName}): start it with --cluster etcd://HOST:PORT and its --node-id, --advertise-tcp and --advertise-http; it cannot serve alone (its schema ids and API keys are the cluster's)`,
    );
  }

  // The key store first: a key file that cannot be used refuses the start before recovery runs.
  let keys: KeyStore;
  try {
    keys = await KeyStore.open({
      fs: nodeFs,
      path: `${dataDir}/${apiKeysFileName}`,
      crypto: systemKeyCrypto,
      clock: systemClock,
      logger,
    });
  } catch (err) {
    lock.release();
    throw err;
  }
  // In cluster mode the keys are the cluster's: checked again once they are read from etcd.
  try {
    checkAuthSettings(cluster, keys, host, values["allow-anonymous"] === true, dataDir);
  } catch (err) {
    lock.release();
    throw err;
  }

  // An unreachable or refusing bucket does not stop the start (an edge node runs offline): it
  // is reported here, and segments stay local until offloads succeed. Multipart uploads a crash
  // left open are aborted once it answers, and every hour after.
  let staleUploadsTimer: ReturnType<typeof setInterval> | undefined;
  if (coldStore !== undefined) {
    const abortStale = () => abortStaleColdUploads(coldStore, logger);
    staleUploadsTimer = setInterval(abortStale, coldReclaimIntervalMs);
    staleUploadsTimer.unref?.();
    void coldStore.probe().then((problem) => {
      if (problem === null) {
        logger.log("info", "cold.store_ready", { store: coldStore.location });
        return abortStale();
      }
      logger.log("error", "cold.store_unusable", {
        store: coldStore.location,
        kind: problem.kind,
        error: problem.message,
        action: "segments stay local; offloads retry with backoff",
      });
    });
  }

  // Counting starts before recovery (its fsyncs and cleanup passes count too).
  const metrics = createMetricsRegistry();
  // Certificates (docs/operations.md "Certificates"): expiry per listener, and whether the files
  // read at start or at the last SIGHUP were usable.
  const tlsListeners = kafkaPort === null ? ["http", "tcp"] : ["http", "tcp", "kafka"];
  const exportCertificate = (material: TlsServerMaterial) => {
    for (const listener of tlsListeners)
      metrics
        .gauge("esb_tls_certificate_expiry_timestamp_seconds", { listener })
        .set(material.certificate.notAfterSeconds);
  };
  const tlsReloaded = (material: "listeners" | "cluster_ca" | "etcd", ok: boolean) => {
    metrics.gauge("esb_tls_last_reload_successful", { material }).set(ok ? 1 : 0);
    metrics.counter("esb_tls_reload_failures_total", { material }).inc(ok ? 0 : 1);
  };
  if (tlsMaterial !== undefined) {
    exportCertificate(tlsMaterial);
    tlsReloaded("listeners", true);
  }
  if (clusterCaPath !== undefined) tlsReloaded("cluster_ca", true);
  if (etcdTls !== undefined) tlsReloaded("etcd", true);
  const stopEventLoopProbe = startEventLoopProbe(metrics);
  // One count of refused client input for both front doors, logged at most every few seconds per kind.
  const refusals = new RefusalLog({ logger, clock: systemClock });
  // One bound over every client listener, below the descriptors storage needs (docs/operations.md
  // "Descriptors and connections").
  const connectionLimit = new ConnectionLimit(maxConnections, refusals);

  // The HTTP port listens from before recovery: /healthz answers 200 and /readyz 503 with the
  // progress until the broker is open; every other request gets 503 unavailable meanwhile.
  const progress: RecoveryProgress = {
    phase: "starting",
    topicsTotal: 0,
    topicsDone: 0,
    partitionsDone: 0,
  };
  const recoveryStartedMs = Date.now();
  let httpApp: FetchApp = recoveringApp(progress, () => Date.now() - recoveryStartedMs);
  let ready = false;
  let metricsText: () => Promise<string> = async () => "";
  let http: HttpServer | undefined;
  let metricsServer: HttpServer | undefined;
  const closeEarly = async () => {
    stopEventLoopProbe();
    await http?.close().catch(() => {});
    await metricsServer?.close().catch(() => {});
  };
  try {
    http = await serveHttp(
      {
        fetch: (request, env) => httpApp.fetch(request, env),
        fastRoute: (request) => httpApp.fastRoute?.(request) ?? null,
      },
      {
        host,
        port: httpPort,
        maxRequestBytes,
        refusals,
        tls: tlsMaterial,
        logger,
        connectionLimit,
        inFlightTotal,
      },
    ).catch((err) => {
      throw listenFailure(err, { listener: "HTTP", option: "--http-port", host, port: httpPort });
    });
    if (metricsPort !== undefined)
      metricsServer = await serveHttp(
        metricsPortApp({ metricsText: () => metricsText(), ready: () => ready }),
        { host: "127.0.0.1", port: metricsPort, logger },
      ).catch((err) => {
        throw listenFailure(err, {
          listener: "metrics",
          option: "--metrics-port",
          host: "127.0.0.1",
          port: metricsPort,
        });
      });
  } catch (err) {
    await closeEarly();
    lock.release();
    throw err;
  }

  let broker: LocalBroker;
  try {
    broker = await LocalBroker.open({
      metrics,
      progress,
      fs: nodeFs,
      dataDir,
      clock: systemClock,
      logger,
      flushEveryRecords,
      flushIntervalMs,
      maxOpenSegments,
      coldStorageDir,
      coldStore,
      coldCacheBytes,
      coldUploadBytesPerSec,
      cleanupIntervalMs,
      producerExpiryMs,
      producerIdsMax,
      ...(cluster === null ? {} : { nodeId: cluster.nodeId }),
    });
  } catch (err) {
    await closeEarly();
    lock.release();
    throw err;
  }
  let node: ClusterNode | null = null;
  let clusterFront: ClusterBroker | null = null;
  // A refused registration (`ClusterNodeOptions.onRefused`) before the stop handler exists.
  let refusedEarly: Error | null = null;
  let onNodeRefused = (err: Error) => {
    refusedEarly = err;
  };
  let clusterState: ClusterState | null = null;
  let front: Broker = broker;
  // Cluster mode: every port is bound before the broker registers in etcd, so one that cannot
  // listen never leads a partition (connections wait until it serves, `early-listener.ts`).
  let earlyTcp: EarlyListener | undefined;
  let earlyKafka: EarlyListener | undefined;
  const closeEarlyListeners = async () => {
    await earlyTcp?.close().catch(() => {});
    await earlyKafka?.close().catch(() => {});
  };
  if (cluster !== null) {
    try {
      earlyTcp = await listenEarly({
        host,
        port: tcpPort,
        tls: tlsMaterial,
        logger,
        refusals,
        connectionLimit,
      }).catch((err) => {
        throw listenFailure(err, { listener: "TCP", option: "--tcp-port", host, port: tcpPort });
      });
      if (kafkaPort !== null)
        earlyKafka = await listenEarly({
          host,
          port: kafkaPort,
          tls: tlsMaterial,
          logger,
          refusals,
          listener: "kafka",
          connectionLimit,
        }).catch((err) => {
          throw listenFailure(err, {
            listener: "Kafka",
            option: "--kafka-port",
            host,
            port: kafkaPort,
          });
        });
    } catch (err) {
      await closeEarlyListeners();
      await closeEarly();
      await broker.close();
      lock.release();
      throw err;
    }
    try {
      // The Kafka listener's address, when its port is fixed (0 picks one only later).
      const kafkaHost =
        values["kafka-advertised-host"] ?? cluster.advertiseTcp.replace(/:\d+$/, "");
      const kafkaAddress =
        kafkaPort === null || kafkaPort === 0 ? undefined : `${kafkaHost}:${kafkaPort}`;
      progress.phase = "cluster";
      // Brokers talk TLS to each other exactly when this TCP listener serves it: checking the
      // peer against --cluster-tls-ca and the advertised host, presenting this broker's own
      // certificate (for peers that require one); never plain TCP (docs/cluster.md "TLS between
      // brokers"). The material is read at each connect, so SIGHUP's new files apply.
      const peerTls =
        clusterCa === undefined
          ? undefined
          : () => ({
              ca: clusterCa,
              cert: tlsMaterial!.context.cert,
              key: tlsMaterial!.context.key,
              rejectUnauthorized: true,
            });
      const etcdAuth = cluster.etcdAuth;
      node = await startClusterNode(
        cluster,
        broker,
        dataDir,
        nodeFs,
        logger,
        kafkaAddress,
        {
          tls: peerTls,
          onRefused: (err) => onNodeRefused(err),
          links: new PeerLinks({ clock: systemClock, logger, tls: peerTls !== undefined }),
          // The key store in use now: the cluster's (below) once it is open.
          authEnabled: () => keys.enabled,
        },
        {
          ...(etcdTls === undefined ? {} : { tls: () => etcdTls! }),
          ...(etcdAuth === undefined
            ? {}
            : { auth: { user: etcdAuth.user, password: () => etcdPassword! } }),
        },
      );
      clusterFront = clusterBroker(broker, node);
      front = clusterFront;
      // The schema registry and API keys of the cluster, in etcd (docs/cluster.md).
      clusterState = await openClusterState({
        etcd: node.etcd,
        prefix: defaultClusterPrefix,
        clock: systemClock,
        crypto: systemKeyCrypto,
        logger,
        randomToken: () => Buffer.from(systemKeyCrypto.randomBytes(8)).toString("hex"),
        local: { registry: broker.registry, registryPath: `${dataDir}/schemas.json`, keys },
      });
      await broker.useRegistry(clusterState.registry);
      await keys.close();
      keys = clusterState.keys;
      checkAuthSettings(cluster, keys, host, values["allow-anonymous"] === true);
    } catch (err) {
      await closeEarlyListeners();
      await closeEarly();
      await clusterState?.close();
      await node?.close();
      await broker.close();
      lock.release();
      throw err;
    }
  }
  let mirrorTask: Mirror | null = null;
  // Front doors may read the mirror's group but never change it (src/mirror/guard.ts).
  const guardGroups = <B extends Broker>(b: B): B =>
    mirror === null ? b : guardMirrorGroup(b, `mirror.${mirror.name}`);
  // The upstream key: re-read from --mirror-api-key-file on SIGHUP, used by the next connection.
  let mirrorApiKey = mirror?.apiKey;
  if (mirror !== null) {
    const upstreamBootstrap = new BootstrapConnector(mirror.bootstrap, (address) =>
      TcpClient.connect({
        ...parseHostPort(address),
        apiKey: mirrorApiKey,
        tls: mirror.tls,
        timeoutMs: mirror.timeoutMs,
      }),
    );
    mirrorTask = new Mirror({
      broker,
      fs: nodeFs,
      dataDir,
      clock: systemClock,
      logger,
      name: mirror.name,
      topics: mirror.topics,
      // The first of the --mirror-to brokers that connects (the last one that did first).
      connect: () => upstreamBootstrap.connect(),
      // A partition's leader in an upstream cluster, as its not_leader answer names it.
      connectTo: async (address) =>
        TcpClient.connect({
          ...parseHostPort(address),
          apiKey: mirrorApiKey,
          tls: mirror.tls,
          timeoutMs: mirror.timeoutMs,
        }),
      // Read at each log line: the bootstrap broker connected to (or the whole list).
      get upstreamAddress() {
        return upstreamBootstrap.address;
      },
      askLeaderMs: Math.min(3000, mirror.timeoutMs),
      randomHex: () => Buffer.from(systemKeyCrypto.randomBytes(8)).toString("hex"),
      recordsPerSecond: mirror.recordsPerSecond,
      renames: mirror.renames,
      skipGaps: mirror.skipGaps,
      schemaIds: mirror.keepSchemaIds
        ? "keep"
        : {
            edge: edgeSchemas(() => broker.registry),
            upstream:
              mirror.registryUrl === null
                ? null
                : upstreamRegistry(
                    mirror.registryUrl,
                    () => mirrorApiKey,
                    mirror.tls,
                    mirror.timeoutMs,
                  ),
          },
    });
    const task = mirrorTask;
    broker.setUnforwardedFrom((topic, partition) => task.unmirroredFrom(topic, partition));
    try {
      await mirrorTask.start();
    } catch (err) {
      await closeEarlyListeners();
      await closeEarly();
      await broker.close();
      lock.release();
      throw err;
    }
  }
  const access = new AccessControl({ broker: front, keys, logger, refusals });
  let kafka: Awaited<ReturnType<typeof startKafkaListener>> | null = null;
  const httpDoor = new FrontDoorMetrics(metrics, "http");
  const tcpDoor = new FrontDoorMetrics(metrics, "tcp");
  const kafkaDoor = new FrontDoorMetrics(metrics, "kafka");
  let tcp: ReturnType<typeof createTcpTransport> | undefined;
  let listener: Awaited<ReturnType<typeof listenTcp>> | undefined;
  const runtime = runtimeDescription();
  metricsText = () =>
    renderMetrics({
      registry: metrics,
      // Cluster mode: only the coordinator (the controller) exports group series; another
      // broker's group state is of an earlier tenure, frozen (docs/operations.md "Metrics").
      observe: async () => {
        // A new controller exports the groups etcd knows, member or not: wait (at most 1 s) for
        // their load, which starts when it becomes the controller.
        if (node?.controller.isController && clusterFront !== null) {
          let timer: { cancel(): void } | undefined;
          await Promise.race([
            clusterFront.storedGroupsLoaded(),
            new Promise<void>((resolve) => {
              timer = systemClock.setTimer(1000, resolve);
            }),
          ]);
          timer?.cancel();
        }
        const seen = await broker.observe();
        return node === null || node.controller.isController ? seen : { ...seen, groups: [] };
      },
      refusals: () => refusals.counts(),
      connections: () => ({
        http: http!.openConnections(),
        tcp: tcp?.connectionCount ?? 0,
        ...(kafka === null ? {} : { kafka: kafka.connectionCount }),
        ...(metricsServer === undefined ? {} : { metrics: metricsServer.openConnections() }),
      }),
      process: processSnapshot,
      inFlight: () => inFlightTotal,
      mirror: mirrorTask === null ? undefined : () => mirrorTask!.observe(),
      replication: node === null ? undefined : () => node!.observeReplication(),
      build: { version, runtime },
    });
  try {
    tcp = createTcpTransport({
      broker: front,
      access,
      clock: systemClock,
      logger,
      refusals,
      maxRequestBytes,
      readTimeoutMs,
      inFlightTotal,
      meter: (b) => tcpDoor.wrap(guardGroups(b)),
    });
    if (earlyTcp !== undefined) {
      earlyTcp.serve((socket) => tcp!.handleConnection(socket));
      listener = earlyTcp.listener;
    } else
      listener = await listenTcp(
        { host, port: tcpPort, tls: tlsMaterial, logger, refusals, connectionLimit },
        (socket) => tcp!.handleConnection(socket),
      ).catch((err) => {
        throw listenFailure(err, { listener: "TCP", option: "--tcp-port", host, port: tcpPort });
      });
    if (kafkaPort !== null)
      kafka = await startKafkaListener({
        broker: front,
        access,
        logger,
        refusals,
        connectionLimit,
        host,
        port: kafkaPort,
        // In a cluster every broker is named by its registration (--advertise-tcp's host), this
        // one too; a single broker on every address tells each client the host it reached.
        advertisedHost:
          values["kafka-advertised-host"] ??
          (cluster === null ? host : cluster.advertiseTcp.replace(/:\d+$/, "")),
        advertiseReachedHost:
          values["kafka-advertised-host"] === undefined &&
          cluster === null &&
          wildcardHosts.has(host),
        maxRequestBytes,
        readTimeoutMs,
        inFlightTotal,
        tls: tlsMaterial,
        meter: (b) => kafkaDoor.wrap(guardGroups(b)),
        bound: earlyKafka,
      }).catch((err) => {
        throw listenFailure(err, {
          listener: "Kafka",
          option: "--kafka-port",
          host,
          port: kafkaPort,
        });
      });
    // Every port serves now: the HTTP port leaves its recovery answers, /readyz says 200.
    httpApp = createAuthenticatedHttpApp({
      access,
      logger,
      maxRequestBytes,
      refusals,
      registry: broker.registry,
      streamLongPollMs,
      meter: (b) => httpDoor.wrap(guardGroups(b)),
      metricsText: () => metricsText(),
      checkHost: isLoopback(host),
    });
    ready = true;
    logger.log("info", "broker.ready", {
      recovery_ms: Date.now() - recoveryStartedMs,
      topics: progress.topicsTotal,
      partitions: progress.partitionsDone,
    });
  } catch (err) {
    await closeEarly();
    if (listener === undefined) await earlyTcp?.close().catch(() => {});
    if (kafka === null) await earlyKafka?.close().catch(() => {});
    await listener?.close().catch(() => {});
    await kafka?.close().catch(() => {});
    await mirrorTask?.stop();
    await node?.close();
    await broker.close();
    lock.release();
    throw err;
  }
  const shownHost = host.includes(":") ? `[${host}]` : host;
  const tlsShown = tlsMaterial === undefined ? "off" : tlsMaterial.mutual ? "mutual" : "on";
  const metricsShown =
    metricsServer === undefined ? "" : ` metrics=http://127.0.0.1:${metricsServer.port}/metrics`;
  // In a cluster the keys are the cluster's (etcd): with none yet, authentication turns on as
  // soon as any broker has one (another broker importing its api_keys.json at this moment, or
  // keys create), so "off" would be wrong a moment later; `auth.enabled` is logged then.
  const authShown = keys.enabled ? "on" : keys.clustered ? "cluster" : "off";
  if (!keys.enabled && keys.clustered) {
    const store = keys;
    const stop = store.onChange(() => {
      if (!store.enabled) return;
      stop();
      logger.log("info", "auth.enabled", {
        reason: "the cluster has an API key: every request needs one from now on",
      });
    });
  }
  // The mirror's target and patterns (never its key): a pattern typo is visible at once.
  const mirrorShown =
    mirror === null
      ? ""
      : ` mirror=${mirror.bootstrap.join(",")} mirror_topics=${mirror.topics.join(",")}`;
  const listening = `es-broker ${version} (${runtime}) listening: http=${tlsMaterial === undefined ? "http" : "https"}://${shownHost}:${http.port} tcp=${shownHost}:${listener.port}${kafka === null ? "" : ` kafka=${shownHost}:${kafka.port}`} data=${dataDir} tls=${tlsShown} auth=${authShown}${metricsShown}${mirrorShown}${node === null ? "" : ` cluster=${node.membership.clusterId} node=${node.membership.nodeId}`}\n`;

  // SIGHUP: new TLS material for new connections, api_keys.json again; failures keep the old.
  let reloading = Promise.resolve();
  const onHup = () => {
    reloading = reloading.then(async () => {
      if (tlsFiles !== undefined) {
        try {
          tlsMaterial = loadTlsServerMaterial(tlsFiles);
          http!.setTlsMaterial(tlsMaterial);
          listener!.setTlsMaterial(tlsMaterial);
          kafka?.setTlsMaterial(tlsMaterial);
          exportCertificate(tlsMaterial);
          tlsReloaded("listeners", true);
          logger.log("info", "tls.reloaded", {
            cert: tlsFiles.certPath,
            subject: tlsMaterial.certificate.subject,
            not_after: new Date(tlsMaterial.certificate.notAfterSeconds * 1000).toISOString(),
          });
        } catch (err) {
          tlsReloaded("listeners", false);
          logger.log("error", "tls.reload_failed", {
            material: "listeners",
            error: err instanceof Error ? err.message : String(err),
          });
        }
      }
      if (clusterCaPath !== undefined) {
        try {
          clusterCa = loadCaBundle(clusterCaPath, "--cluster-tls-ca");
          tlsReloaded("cluster_ca", true);
          logger.log("info", "tls.cluster_ca_reloaded", { ca: clusterCaPath });
        } catch (err) {
          tlsReloaded("cluster_ca", false);
          logger.log("error", "tls.reload_failed", {
            material: "cluster_ca",
            error: errorMessage(err),
          });
        }
      }
      if (cluster?.etcdTls !== undefined) {
        try {
          etcdTls = loadEtcdTls(cluster.etcdTls);
          tlsReloaded("etcd", true);
          logger.log("info", "tls.etcd_reloaded", { ...cluster.etcdTls });
        } catch (err) {
          tlsReloaded("etcd", false);
          logger.log("error", "tls.reload_failed", { material: "etcd", error: errorMessage(err) });
        }
      }
      if (cluster?.etcdAuth !== undefined) {
        try {
          etcdPassword = readEtcdPassword(cluster.etcdAuth.passwordPath);
          logger.log("info", "cluster.etcd_password_reloaded", {
            file: cluster.etcdAuth.passwordPath,
          });
        } catch (err) {
          logger.log("error", "cluster.etcd_password_reload_failed", { error: errorMessage(err) });
        }
      }
      if (mirror?.apiKeyFile !== undefined) {
        // The mirror's upstream key (a rotated or re-issued one): never logged, only its file.
        try {
          const key = readApiKey({ "api-key-file": mirror.apiKeyFile });
          const changed = key !== mirrorApiKey;
          mirrorApiKey = key;
          logger.log("info", "mirror.api_key_reloaded", {
            mirror: mirror.name,
            file: mirror.apiKeyFile,
            changed,
          });
          if (changed) mirrorTask?.retryRefused();
        } catch (err) {
          logger.log("error", "mirror.api_key_reload_failed", {
            mirror: mirror.name,
            file: mirror.apiKeyFile,
            error: errorMessage(err),
          });
        }
      }
      try {
        const result = await keys.reload();
        logger.log("info", "auth.keys_reloaded", {
          file: keys.path,
          keys: result.keys,
          invalidated: result.invalidated,
        });
      } catch (err) {
        logger.log("error", "auth.keys_reload_failed", {
          file: keys.path,
          error: err instanceof KeyStoreError || err instanceof Error ? err.message : String(err),
        });
      }
    });
  };
  process.on("SIGHUP", onHup);

  return await new Promise<number>((done) => {
    let stopping = false;
    const stop = (exitCode: number) => {
      if (stopping) return;
      stopping = true;
      const stopStartedMs = performance.now();
      void (async () => {
        let code = exitCode;
        // Cold-tier requests in flight (an offload's PUT, a listing) fail at once, not after their
        // tries against a store that does not answer: a SIGTERM ends well within systemd's
        // TimeoutStopSec (docs/operations.md "Cold tier unavailable"). An offload keeps its segment.
        coldStore?.abort();
        try {
          // A cluster broker leaves first, its ports still open (docs/cluster.md "Leaving the
          // cluster"): it admits no produce, its followers fetch what it wrote (so what is in
          // flight is acknowledged), then it departs and the controller moves its leaderships
          // from full ISRs; what is left is answered not_leader (retriable).
          await node?.leave();
          // Stop accepting on every port, let in-flight requests finish, then fsync and close files.
          const listenerClosed = listener!.close();
          stopEventLoopProbe();
          await Promise.all([http!.close(), tcp!.close(), kafka?.close(), metricsServer?.close()]);
          await listenerClosed;
          refusals.flush();
          await reloading;
          await keys.close();
          await clusterState?.close();
          await mirrorTask?.stop();
          // The node left above; this closes its etcd client.
          await node?.close();
          await broker.close();
          lock.release();
        } catch (err) {
          code = 1;
          process.stderr.write(`es-broker: shutdown failed: ${errorMessage(err)}\n`);
        }
        // The last line of a stop that got this far: a clean stop says so, with how long it took
        // (a kill that followed the signal leaves no such line).
        logger.log(code === 0 ? "info" : "error", "broker.stopped", {
          exit_code: code,
          duration_ms: Math.round(performance.now() - stopStartedMs),
          clean: code === 0,
        });
        signals.dispose();
        process.off("SIGHUP", onHup);
        clearInterval(staleUploadsTimer);
        warnIfExitHeld(logger);
        done(code);
      })();
    };
    const signals = onStopSignals((signal) => {
      logger.log("info", "broker.shutdown", { signal });
      stop(0);
    });
    // Another process registered this node id (this one was paused or cut off past its lease):
    // replication has stopped; shut down rather than serve as a node it no longer is.
    onNodeRefused = (err) => {
      logger.log("error", "broker.shutdown", { reason: err.message, exit_code: 1 });
      stop(1);
    };
    if (refusedEarly !== null) onNodeRefused(refusedEarly);
    // Only now: a supervisor may signal as soon as it reads this line, and a signal that comes
    // before the handlers exist kills the process without a graceful shutdown.
    process.stdout.write(listening);
  });
}

/** How long after the shutdown finished an exit still held is worth a warning, ms. */
const exitHeldWarnMs = 500;

/**
 * Once the shutdown has closed everything, the process should end at once; main.ts ends it after
 * its grace otherwise. If something still holds it (a request nothing abandoned, a timer) after
 * {@link exitHeldWarnMs}, says what (`broker.exit_held`, warn, with the runtime's list of open
 * resources where it has one): an exit that waits is a bug to fix, not a cost to time.
 */
function warnIfExitHeld(logger: Logger): void {
  const timer = setTimeout(() => {
    const info = (process as { getActiveResourcesInfo?: () => string[] }).getActiveResourcesInfo;
    const open: Record<string, number> = {};
    for (const kind of info?.() ?? []) open[kind] = (open[kind] ?? 0) + 1;
    logger.log("warn", "broker.exit_held", { ms: exitHeldWarnMs, open });
  }, exitHeldWarnMs);
  (timer as { unref?: () => void }).unref?.();
}

/** What `--mirror-*` asks for, checked. */
interface MirrorSettings {
  /** The first `--mirror-to` broker. */
  host: string;
  port: number;
  /** Every `--mirror-to` broker, "host:port" (IPv6 as "[v6]:port"), in the order given. */
  bootstrap: string[];
  topics: string[];
  name: string;
  recordsPerSecond: number;
  /** `--mirror-timeout-ms`: each upstream request's time limit, ms. */
  timeoutMs: number;
  /** `--mirror-skip-gaps`. */
  skipGaps: boolean;
  renames: MirrorRename[];
  /** `--mirror-registry-url`: the upstream's schema registry, or null. */
  registryUrl: URL | null;
  /** `--mirror-keep-schema-ids`. */
  keepSchemaIds: boolean;
  apiKey: string | undefined;
  /** `--mirror-api-key-file`: re-read on SIGHUP. */
  apiKeyFile: string | undefined;
  tls: ConnectionOptions | undefined;
}

/**
 * Reads the `--mirror-*` options (null without `--mirror-to`).
 * @throws UsageError naming the bad option.
 */
function mirrorSettings(values: Record<string, unknown>): MirrorSettings | null {
  const to = values["mirror-to"] as string | undefined;
  const topics = ((values["mirror-topics"] as string[] | undefined) ?? [])
    .flatMap((t) => t.split(","))
    .map((t) => t.trim())
    .filter((t) => t !== "");
  const renameSpecs = (values["mirror-rename"] as string[] | undefined) ?? [];
  if (to === undefined) {
    if (topics.length > 0) throw new UsageError("--mirror-topics needs --mirror-to HOST:PORT");
    if (renameSpecs.length > 0) throw new UsageError("--mirror-rename needs --mirror-to HOST:PORT");
    if (values["mirror-registry-url"] !== undefined)
      throw new UsageError("--mirror-registry-url needs --mirror-to HOST:PORT");
    if (values["mirror-keep-schema-ids"] === true)
      throw new UsageError("--mirror-keep-schema-ids needs --mirror-to HOST:PORT");
    return null;
  }
  let renames: MirrorRename[];
  try {
    renames = parseMirrorRenames(renameSpecs);
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  // HOST:PORT[,HOST:PORT…]: bootstrap brokers of an upstream cluster, as the client's --broker.
  const bootstrap: { host: string; port: number }[] = [];
  for (const entry of to.split(",").map((t) => t.trim())) {
    const m = /^(?:tcp:\/\/)?(\[[^\]]+\]|[^:/]+):(\d{1,5})$/.exec(entry);
    if (m === null || Number(m[2]) < 1 || Number(m[2]) > 65535)
      throw new UsageError(
        `--mirror-to must be HOST:PORT[,HOST:PORT…] (the upstream brokers' TCP ports), got ${JSON.stringify(entry)}${entry === to ? "" : ` in ${JSON.stringify(to)}`}`,
      );
    bootstrap.push({ host: m[1].replace(/^\[|\]$/g, ""), port: Number(m[2]) });
  }
  if (topics.length === 0)
    throw new UsageError("--mirror-to needs --mirror-topics PATTERN (which topics to forward)");
  for (const t of topics)
    if (!/^[A-Za-z0-9._*-]+$/.test(t))
      throw new UsageError(
        `--mirror-topics pattern ${JSON.stringify(t)} may hold only topic-name characters and *`,
      );
  const name = values["mirror-name"] as string;
  if (!/^[A-Za-z0-9._-]{1,100}$/.test(name))
    throw new UsageError(
      `--mirror-name must be 1 to 100 characters of A-Z a-z 0-9 . _ -, got ${JSON.stringify(name)}`,
    );
  const registryText = values["mirror-registry-url"] as string | undefined;
  const registryUrl = registryText === undefined ? null : parseMirrorRegistryUrl(registryText);
  const keepSchemaIds = values["mirror-keep-schema-ids"] === true;
  if (keepSchemaIds && registryUrl !== null)
    throw new UsageError(
      "--mirror-keep-schema-ids and --mirror-registry-url exclude each other: keep the ids, or translate them",
    );
  const recordsPerSecond = intOption(
    "mirror-records-per-sec",
    values["mirror-records-per-sec"] as string | undefined,
    20_000,
    0,
    100_000_000,
  );
  const timeoutMs = intOption(
    "mirror-timeout-ms",
    values["mirror-timeout-ms"] as string | undefined,
    10_000,
    100,
    600_000,
  );
  return {
    host: bootstrap[0].host,
    port: bootstrap[0].port,
    bootstrap: bootstrap.map((b) =>
      b.host.includes(":") ? `[${b.host}]:${b.port}` : `${b.host}:${b.port}`,
    ),
    topics,
    name,
    recordsPerSecond,
    timeoutMs,
    skipGaps: values["mirror-skip-gaps"] === true,
    renames,
    registryUrl,
    keepSchemaIds,
    apiKey: readApiKey(
      { "api-key-file": values["mirror-api-key-file"] as string | undefined },
      { ES_BROKER_API_KEY: process.env.ES_BROKER_MIRROR_API_KEY },
    ),
    apiKeyFile: values["mirror-api-key-file"] as string | undefined,
    tls: clientTlsOptions({
      tls: values["mirror-tls"] as boolean,
      "tls-ca": values["mirror-tls-ca"] as string | undefined,
      "tls-insecure": values["mirror-tls-insecure"] as boolean,
      "tls-cert": values["mirror-tls-cert"] as string | undefined,
      "tls-key": values["mirror-tls-key"] as string | undefined,
    }),
  };
}

/**
 * Refuses settings that would leave a broker open or its brokers unable to authenticate to each
 * other: `--cluster` with API keys but no `--cluster-secret-file`; a non-loopback address without
 * keys unless `--allow-anonymous`.
 * @throws UsageError naming the fix.
 */
function checkAuthSettings(
  cluster: ClusterSettings | null,
  keys: KeyStore,
  host: string,
  allowAnonymous: boolean,
  dataDir?: string,
): void {
  if (cluster !== null && keys.enabled && cluster.secret === undefined)
    throw new UsageError(
      "--cluster on a broker with API keys needs --cluster-secret-file FILE: the broker credential brokers present to each other instead of a key (the same file on every broker)",
    );
  // Before a cluster's keys are read (dataDir given), a cluster broker may have keys in etcd.
  if (cluster !== null && dataDir !== undefined) return;
  if (!isLoopback(host) && !keys.enabled && !allowAnonymous)
    throw new UsageError(
      `refusing to listen on non-loopback address ${host} without authentication: create an API key first (es-broker keys create ${dataDir === undefined ? "--url URL" : `--data-dir ${dataDir}`} --name admin --role admin), or pass --allow-anonymous to allow it`,
    );
}

/** What `--cluster` and its companions ask for, checked. */
interface ClusterSettings {
  endpoints: string[];
  nodeId: number;
  advertiseTcp: string;
  advertiseHttp: string;
  /** The broker credential's bytes (never logged, never in argv or the data directory). */
  secret: Uint8Array | undefined;
  /** With `etcds://`: the PEM files for etcd's client port (re-read on SIGHUP). */
  etcdTls: TlsOutgoingFiles | undefined;
  /** etcd user authentication: the user and the file its password is read from. */
  etcdAuth: { user: string; passwordPath: string } | undefined;
  /** `--leader-rebalance-ms`: the controller's preferred leader check period, ms (0: off). */
  rebalanceMs: number;
}

/**
 * Reads the cluster options (null without `--cluster`).
 * @throws UsageError naming the missing or bad option.
 */
function clusterSettings(values: Record<string, unknown>): ClusterSettings | null {
  const url = values.cluster as string | undefined;
  const companions = [
    "node-id",
    "advertise-tcp",
    "advertise-http",
    "cluster-secret-file",
    "cluster-tls-ca",
    "leader-rebalance-ms",
    "cluster-etcd-ca",
    "cluster-etcd-cert",
    "cluster-etcd-key",
    "cluster-etcd-user",
    "cluster-etcd-password-file",
  ];
  if (url === undefined) {
    const stray = companions.find((o) => values[o] !== undefined);
    if (stray !== undefined)
      throw new UsageError(`--${stray} needs --cluster etcd://HOST:PORT[,HOST:PORT...]`);
    return null;
  }
  let endpoints: string[];
  try {
    endpoints = parseEtcdUrl(url);
  } catch (err) {
    throw new UsageError(errorMessage(err));
  }
  for (const o of ["node-id", "advertise-tcp", "advertise-http"])
    if (values[o] === undefined)
      throw new UsageError(
        `--cluster needs --${o} (${o === "node-id" ? "this broker's unique node id" : o === "advertise-tcp" ? "the HOST:PORT other brokers and clients reach this broker's TCP port at" : "the http://HOST:PORT URL clients reach this broker's HTTP port at"})`,
      );
  const nodeId = intOption("node-id", values["node-id"] as string, 0, 0, 2_147_483_647);
  const tcp = hostPort("advertise-tcp", values["advertise-tcp"] as string);
  const http = values["advertise-http"] as string;
  let parsed: URL | null = null;
  try {
    parsed = new URL(http);
  } catch {}
  // Published to every client (GET /v1/cluster, the 307's Location): never a credential, and not
  // echoed in the message either.
  if (parsed !== null && (parsed.username !== "" || parsed.password !== ""))
    throw new UsageError(
      "--advertise-http must not carry a user name or password: every client sees it (GET /v1/cluster, the Location of a redirect to the leader)",
    );
  if (
    parsed === null ||
    !/^https?:$/.test(parsed.protocol) ||
    parsed.pathname !== "/" ||
    parsed.search !== "" ||
    parsed.hash !== "" ||
    !/^https?:\/\/[^/]+\/?$/.test(http)
  )
    throw new UsageError(
      `--advertise-http must be a base URL such as http://HOST:PORT, got ${JSON.stringify(http)}`,
    );
  let secret: Uint8Array | undefined;
  const secretFile = values["cluster-secret-file"] as string | undefined;
  if (secretFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(secretFile, "utf8").trim();
    } catch (err) {
      throw new UsageError(
        `--cluster-secret-file ${JSON.stringify(secretFile)} cannot be read: ${(err as { code?: string }).code ?? errorMessage(err)}`,
      );
    }
    if (text.length < 16)
      throw new UsageError(
        `--cluster-secret-file ${JSON.stringify(secretFile)} must hold at least 16 characters (e.g. openssl rand -hex 32)`,
      );
    secret = utf8(text);
  }
  const tlsEtcd = endpoints[0].startsWith("https:");
  const etcdFile = (o: string) => {
    const v = values[o] as string | undefined;
    if (v !== undefined && !tlsEtcd)
      throw new UsageError(
        `--${o} needs --cluster etcds://HOST:PORT[,...] (etcd's client port with TLS), got ${JSON.stringify(url)}`,
      );
    return v === undefined ? undefined : resolve(v);
  };
  const etcdTls: TlsOutgoingFiles = {
    caPath: etcdFile("cluster-etcd-ca"),
    certPath: etcdFile("cluster-etcd-cert"),
    keyPath: etcdFile("cluster-etcd-key"),
  };
  if ((etcdTls.certPath === undefined) !== (etcdTls.keyPath === undefined))
    throw new UsageError("--cluster-etcd-cert and --cluster-etcd-key go together");
  const user = values["cluster-etcd-user"] as string | undefined;
  const passwordFile = values["cluster-etcd-password-file"] as string | undefined;
  if ((user === undefined) !== (passwordFile === undefined))
    throw new UsageError(
      "--cluster-etcd-user and --cluster-etcd-password-file go together (the password is read from the file, never from the command line)",
    );
  if (user === "") throw new UsageError("--cluster-etcd-user must not be empty");
  // The password travels in the authenticate request: never in clear over a network.
  if (user !== undefined && !tlsEtcd) {
    const remote = endpoints.find((e) => !isLoopback(new URL(e).hostname.replace(/^\[|\]$/g, "")));
    if (remote !== undefined)
      throw new UsageError(
        `--cluster-etcd-user with plain-HTTP etcd at ${remote.replace(/^http:\/\//, "")} would send the password in clear: use --cluster etcds://... (etcd with TLS)`,
      );
  }
  return {
    etcdTls: tlsEtcd ? etcdTls : undefined,
    etcdAuth:
      user === undefined ? undefined : { user, passwordPath: resolve(passwordFile as string) },
    endpoints,
    nodeId,
    advertiseTcp: `${tcp.host.includes(":") ? `[${tcp.host}]` : tcp.host}:${tcp.port}`,
    advertiseHttp: http.replace(/\/$/, ""),
    secret,
    rebalanceMs: intOption(
      "leader-rebalance-ms",
      values["leader-rebalance-ms"] as string | undefined,
      rebalanceMsDefault,
      0,
      86_400_000,
    ),
  };
}

/**
 * Reads the PEM files of the connection to etcd (`--cluster-etcd-ca`, `-cert`, `-key`).
 * @throws Error naming the option and file that cannot be used.
 */
function loadEtcdTls(files: TlsOutgoingFiles): EtcdTlsMaterial {
  return loadTlsOutgoing(files, {
    ca: "--cluster-etcd-ca",
    cert: "--cluster-etcd-cert",
    key: "--cluster-etcd-key",
  });
}

/**
 * Reads the etcd user's password from `--cluster-etcd-password-file` (one trailing newline
 * dropped). @throws Error naming the file, never its content.
 */
function readEtcdPassword(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new Error(
      `--cluster-etcd-password-file ${JSON.stringify(path)} cannot be read: ${(err as { code?: string }).code ?? errorMessage(err)}`,
    );
  }
  const password = text.replace(/\r?\n$/, "");
  if (password === "")
    throw new Error(`--cluster-etcd-password-file ${JSON.stringify(path)} is empty`);
  return password;
}

/** `--host` values that listen on every address: never a host a client can be told to use. */
const wildcardHosts: ReadonlySet<string> = new Set(["0.0.0.0", "::", "[::]", ""]);

/**
 * Refuses two of the broker's own listeners given one port number (0, any free port, excepted):
 * the second bind would fail as "the address is in use" as if another program held it. The
 * metrics port listens on 127.0.0.1, so it counts only when `host` is loopback or a wildcard.
 * @throws UsageError naming both options.
 */
function refuseSharedPorts(
  host: string,
  ports: {
    httpPort: number;
    tcpPort: number;
    kafkaPort: number | null;
    metricsPort: number | undefined;
  },
): void {
  const listeners: [string, number | null | undefined][] = [
    ["--http-port", ports.httpPort],
    ["--tcp-port", ports.tcpPort],
    ["--kafka-port", ports.kafkaPort],
    ["--metrics-port", isLoopback(host) || wildcardHosts.has(host) ? ports.metricsPort : undefined],
  ];
  const seen = new Map<number, string>();
  for (const [option, port] of listeners) {
    if (port === null || port === undefined || port === 0) continue;
    const earlier = seen.get(port);
    if (earlier !== undefined)
      throw new UsageError(
        `${earlier} ${port} and ${option} ${port} name the same port: give each listener its own port (0 = any free port)`,
      );
    seen.set(port, option);
  }
}

/** The data directory's record of the cluster it belongs to (docs/cluster.md "Membership"). */
export const clusterFileName = "cluster.json";

/**
 * Joins the cluster: reads `cluster.json` (or makes a new data directory id), writes it before the
 * first registration, and starts the node (retrying while etcd cannot be reached).
 * @throws ClusterJoinError for a refusal (its message names the fix).
 */
async function startClusterNode(
  settings: ClusterSettings,
  broker: LocalBroker,
  dataDir: string,
  fs: NodeFileSystem,
  logger: ReturnType<typeof jsonLineLogger>,
  kafkaAddress: string | undefined,
  peers: {
    tls: (() => ConnectionOptions) | undefined;
    /** Registering again was refused: replication has stopped; shut down. */
    onRefused: (err: Error) => void;
    links: PeerLinks;
    authEnabled: () => boolean;
  },
  etcdConnection: { tls?: () => EtcdTlsMaterial; auth?: EtcdAuth },
): Promise<ClusterNode> {
  const path = `${dataDir}/${clusterFileName}`;
  let recorded: { cluster_id: string; node_id: number; data_dir_id: string } | null = null;
  try {
    recorded = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    if ((err as { code?: string }).code !== "ENOENT")
      throw new Error(`Cannot read ${path}: ${errorMessage(err)}`);
  }
  if (
    recorded !== null &&
    (typeof recorded.cluster_id !== "string" ||
      !Number.isSafeInteger(recorded.node_id) ||
      typeof recorded.data_dir_id !== "string")
  )
    throw new Error(`Cannot read ${path}: it must hold cluster_id, node_id and data_dir_id`);
  const randomHex = () => Buffer.from(systemKeyCrypto.randomBytes(16)).toString("hex");
  const dataDirId = recorded?.data_dir_id ?? randomHex();
  // Every watch checked against etcd each 10 s (docs/cluster.md "A watch that goes deaf").
  let deafWatches = 0;
  const etcd = guardWatches(new EtcdHttpClient(settings.endpoints, { logger, ...etcdConnection }), {
    clock: systemClock,
    logger,
    onDeaf: () => deafWatches++,
  });
  const seed = Buffer.from(systemKeyCrypto.randomBytes(6)).readUIntBE(0, 6);
  try {
    return await ClusterNode.start({
      etcd,
      clock: systemClock,
      prng: new Prng(seed),
      randomBytes: (count) => systemKeyCrypto.randomBytes(count),
      logger,
      prefix: defaultClusterPrefix,
      nodeId: settings.nodeId,
      rebalanceMs: settings.rebalanceMs,
      advertise: {
        tcp: settings.advertiseTcp,
        http: settings.advertiseHttp,
        ...(kafkaAddress === undefined ? {} : { kafka: kafkaAddress }),
        ...(peers.tls === undefined ? {} : { tls: true }),
      },
      peerLinks: () => peers.links.snapshot(),
      deafWatches: () => deafWatches,
      dataDirId,
      dataDir:
        recorded === null ? null : { clusterId: recorded.cluster_id, nodeId: recorded.node_id },
      newClusterId: randomHex(),
      broker,
      onRefused: peers.onRefused,
      // Replication (docs/cluster.md "Replication"): installs itself as the broker's seam.
      replicas: (membership) =>
        new ReplicaManager({
          broker,
          etcd,
          prefix: defaultClusterPrefix,
          nodeId: settings.nodeId,
          incarnation: membership.incarnation,
          clock: systemClock,
          prng: new Prng(seed + 1),
          logger,
          clusterSecret: settings.secret,
          connect: replicaConnector(
            { timeoutMs: 10_000 },
            { ...(peers.tls === undefined ? {} : { tls: peers.tls }), links: peers.links },
          ),
          leaseExpiresAtMs: () => membership.leaseExpiresAtMs,
          registeredRevision: () => membership.registeredRevision,
          authEnabled: peers.authEnabled,
        }),
      beforeRegister: async (clusterId) => {
        if (recorded?.cluster_id === clusterId && recorded.node_id === settings.nodeId) return;
        if (recorded === null) {
          // A directory that never joined: whatever the cluster says this node id holds, it does
          // not hold it (docs/cluster.md "Replacing a broker's disk, backing up etcd").
          const forgotten = await forgetReplicaDataInCluster(
            etcd,
            defaultClusterPrefix,
            settings.nodeId,
          );
          if (forgotten.length > 0)
            logger.log("warn", "cluster.replica_data_forgotten", {
              node_id: settings.nodeId,
              partitions: forgotten,
              reason:
                "a new data directory under a node id the cluster knows: out of every ISR and ELR until it catches up",
            });
        }
        const record = { cluster_id: clusterId, node_id: settings.nodeId, data_dir_id: dataDirId };
        await writeFileAtomic(fs, path, utf8(`${JSON.stringify(record, null, 2)}\n`));
        recorded = record;
      },
    });
  } catch (err) {
    await etcd.close();
    throw err;
  }
}

/**
 * Aborts the multipart uploads under the cold tier's prefix that no one finishes (a crash in the
 * middle of an upload leaves one open; docs/storage.md "Cold tier"), logging what it did; never
 * throws (a failure is logged and tried again at the next pass).
 */
async function abortStaleColdUploads(store: S3ColdStore, logger: Logger): Promise<void> {
  try {
    const { aborted, failed, foreign } = await store.abortStaleUploads(isColdTierKey);
    if (aborted.length > 0 || failed > 0)
      logger.log(failed > 0 ? "warn" : "info", "cold.stale_uploads_aborted", {
        store: store.location,
        aborted: aborted.length,
        keys: aborted.slice(0, 20),
        failed,
      });
    if (foreign > 0)
      logger.log("warn", "cold.foreign_uploads", {
        store: store.location,
        count: foreign,
        action: "left alone: not objects of this cold tier",
      });
  } catch (err) {
    logger.log("warn", "cold.stale_uploads_check_failed", {
      store: store.location,
      error: errorMessage(err),
      action: "tried again within the hour",
    });
  }
}
