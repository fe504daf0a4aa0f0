/**
 * What the harness (`bench/harness.ts`) asks a load generator process (`bench/generator.ts`) to do,
 * and what the generator answers. The spec travels as JSON in the generator's first argument; the
 * result is the last line the generator prints on stdout, as JSON.
 */

/** The system a generator talks to. Every server listens on loopback. */
export type Target =
  /**
   * es-broker over its TCP protocol, with the project's client (`src/client/client.ts`); with
   * `apiKey` every connection authenticates first, with `caPem` it speaks TLS (checking the
   * broker's certificate against that CA).
   */
  | ({
      kind: "es-tcp";
      host: string;
      port: number;
      topic: string;
      /**
       * Send through the client's IdempotentProducer (one per load producer, a producer id each)
       * with `maxInFlight` this many; the generator then keeps this many requests of each
       * producer outstanding (`ProduceSpec.inFlight`). Omitted: plain `produce`, one at a time.
       */
      idempotentInFlight?: number;
    } & EsSecurity)
  /**
   * es-broker over HTTP: produce bodies as JSON (`{"records":[…]}`) or NDJSON (one value per
   * line); `https://` URLs with `caPem`, and `Authorization: Bearer` on every request with `apiKey`.
   */
  | ({ kind: "es-http"; url: string; topic: string; body: "json" | "ndjson" } & EsSecurity)
  /**
   * es-broker's Kafka listener with npm kafkajs: one kafkajs producer (its own connections) per
   * load producer, each request one `producer.send` of `batch` records to one partition, acks −1.
   */
  | { kind: "kafka-kafkajs"; host: string; port: number; topic: string }
  /** Redis streams: partition p is the key `${key}:${p}`; a request of n records is a pipeline of n XADD. */
  | { kind: "redis"; host: string; port: number; key: string }
  /** NATS JetStream: partition p is the stream `${stream}_${p}` (subject `${stream}.${p}`). */
  | { kind: "nats"; host: string; port: number; stream: string }
  /** Durable Streams server: partition p is the stream `/v1/stream/${stream}-${p}`, a request is one JSON array. */
  | { kind: "ds"; url: string; stream: string }
  /**
   * The loopback ceiling (`bench/loopback-server.mjs`): the Produce frames es-broker would get
   * (`topic` names them), over a bare socket to a server that answers each with a fixed
   * Produce response and stores nothing.
   */
  | { kind: "loopback"; host: string; port: number; topic: string }
  /** The disk limit: one in-process loop, one write + one fdatasync per batch, in `dir`. */
  | { kind: "limit"; dir: string };

/** The API key and CA certificate a generator uses against a broker that wants them (the `auth` cases). */
export interface EsSecurity {
  /** An API key with the rights the case needs; sent in Authenticate (TCP) or `Authorization` (HTTP). */
  apiKey?: string;
  /** PEM of the CA the broker's TLS certificate chains to; TLS only when given. */
  caPem?: string;
}

/** How long a measurement runs. */
export interface Timing {
  /** Load before the measured window, in ms (not counted). */
  warmupMs: number;
  /** Length of the measured window, in ms; it runs longer until `minRequests` requests completed. */
  measureMs: number;
  /** Requests that must complete inside the window (the window waits for them). */
  minRequests: number;
}

/** Produce load: `producers` closed loops, each sending one request of `batch` records at a time. */
export interface ProduceSpec extends Timing {
  mode: "produce";
  target: Target;
  /** Records per request. */
  batch: number;
  /** Concurrent producers (one connection each). */
  producers: number;
  /** Partitions the producers spread their requests over (round-robin per producer). */
  partitions: number;
  /** Bytes of each record's value (no key). */
  valueBytes: number;
  /** es-broker's `GET /v1/admin/metrics` URL: read at both ends of the window for fsync counts. */
  metricsUrl?: string;
  /**
   * Paces the producers to about this many records/s in total (each still has one request in
   * flight; a producer that falls behind catches up): what the Kafka cases' TCP counterparts use
   * to run at the pace a Kafka client reached. Default: as fast as answers come.
   */
  recordsPerSec?: number;
  /** The server's process id, for its resident memory (`/proc/<pid>/status`). */
  serverPid?: number;
  /** Also keep an RSS sample every this many ms (soak runs); default: only the peak. */
  rssSampleMs?: number;
  /**
   * Producer p writes only partition p % partitions (the growth cases: each partition written by
   * its own producer) instead of going round-robin over every partition.
   */
  partitionPerProducer?: boolean;
  /**
   * `es-tcp` only (the growth cases): before the producers start, open this many more connections,
   * each sending one produce of `batch` records (so the broker holds whatever a used connection
   * costs), and keep them open and idle until the window closes.
   */
  idleConnections?: number;
}

/** Fetch load: `consumers` sequential readers over `records` records preloaded into each partition. */
export interface FetchSpec extends Timing {
  mode: "fetch";
  /** `es-tcp`, `es-http` or `redis`. */
  target: Target;
  partitions: number;
  /** Consumers, consumer c reading partition c % partitions, one request in flight each. */
  consumers: number;
  /** Records preloaded into each partition before the window (not timed). */
  records: number;
  /** Records asked for per fetch request. */
  batch: number;
  valueBytes: number;
  serverPid?: number;
  /** es-broker's TCP address: an `es-http` fetch preloads through it. */
  tcp?: { host: string; port: number };
  /** `es-http` only: the `encoding` query parameter of every fetch (default utf8). */
  encoding?: "utf8" | "base64";
  /**
   * `es-http` only: ask for NDJSON answers and read them one fetch ahead without `JSON.parse`
   * (`bench/clients/ndjson-fetch.ts`); otherwise JSON answers through `node:http`, one `JSON.parse` each.
   */
  ndjson?: boolean;
}

/**
 * Fan-out: one closed-loop producer sends `batch` records per request to partition 0 of the
 * `es-tcp` target while `readers` readers tail that partition from offset 0, each on its own
 * connection: Server-Sent Events (`sse`, `GET …/partitions/0/stream`) or TCP long-poll fetches
 * (`long-poll`, the project's client, `waitMs` 1000). `none` runs the producer alone. The
 * readers connect (and SSE streams open) before the warm-up; the figure is the producer's.
 */
export interface FanoutSpec extends Timing {
  mode: "fanout";
  target: Extract<Target, { kind: "es-tcp" }>;
  /** es-broker's HTTP base URL, for the SSE readers. */
  httpUrl: string;
  readerKind: "none" | "sse" | "long-poll";
  readers: number;
  /** Paced: the producer sends at most this many requests a second (none: as fast as it can). */
  paceRequestsPerSec?: number;
  batch: number;
  valueBytes: number;
  metricsUrl?: string;
  serverPid?: number;
}

/** End-to-end latency: one producer sends one record at a time; one consumer long-polls for it. */
export interface E2eSpec extends Timing {
  mode: "e2e";
  /** `es-tcp`, `es-http` or `redis`. */
  target: Target;
  valueBytes: number;
  serverPid?: number;
}

/** Any generator job. */
export type GeneratorSpec = ProduceSpec | FetchSpec | E2eSpec | FanoutSpec;

/** Latency summary, in ms. */
export interface LatencySummary {
  p50: number;
  p99: number;
  max: number;
  /** Number of samples. */
  count: number;
}

/** What a generator reports for its window. */
export interface GeneratorResult {
  /** Records produced, fetched or seen inside the window. */
  records: number;
  /** Requests completed inside the window. */
  requests: number;
  /** Length of the window, in seconds. */
  seconds: number;
  /**
   * Per-request latency (produce: send → ack; fetch: send → response; e2e: produce sent →
   * consumer has the record).
   */
  latencyMs: LatencySummary;
  /** e2e only: produce send → ack, in ms. */
  ackLatencyMs?: LatencySummary;
  /** fsyncs inside the window: from the broker's metrics, or counted by the limit loop; null when unknown. */
  fsyncs: number | null;
  /** Records the broker appended inside the window (its own count), when it reports metrics. */
  recordsAppended: number | null;
  /** Largest resident set of the server process inside the window, in bytes; null when unknown. */
  rssPeakBytes: number | null;
  /** CPU time (user + system) the server process used inside the window, in ms; null when unknown. */
  serverCpuMs?: number | null;
  /** The user part of {@link serverCpuMs} (the rest is system time), in ms; null when unknown. */
  serverUserCpuMs?: number | null;
  /**
   * CPU time (user + system) the generator process used inside the window, in ms: the clients'
   * cost (one process holds every producer's connection; its measuring loop wakes every 20 ms).
   * Absent for the in-process limit, whose loop is the work itself.
   */
  generatorCpuMs?: number;
  /** The user part of {@link generatorCpuMs}, in ms. */
  generatorUserCpuMs?: number;
  /**
   * Fan-out only: records the readers received inside the window, summed over every reader, the
   * fewest one reader received (0 readers: both 0), and the answers they received in all (fetch
   * responses; SSE: data chunks).
   */
  readerRecords?: { total: number; min: number; answers: number };
  /**
   * Fan-out only, with readers: from the start of the produce request of each record sent inside
   * the window to each reader's receiving it, in ms (one sample per record per reader).
   */
  deliveryLatencyMs?: LatencySummary;
  /** RSS samples `[ms since window start, bytes]` when `rssSampleMs` was given. */
  rssSamples?: [number, number][];
  /** Open file descriptors of the server process when the window closed (`/proc/<pid>/fd`). */
  serverFds?: number | null;
}
