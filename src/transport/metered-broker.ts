/**
 * The broker as a front door calls it, counted (docs/operations.md "Metrics"): every call goes
 * through unchanged, and on its way back a successful produce adds to
 * `esb_produce_{requests,records,bytes}_total{topic,transport}`, a successful fetch to
 * `esb_fetch_*` (SSE streams read through fetch), both observe their duration, and a call that
 * fails with a {@link BrokerError} adds to `esb_request_errors_total{transport,operation,code}`.
 *
 * Label values stay bounded whatever clients send: a topic appears only once a call on it has
 * succeeded (so the topic exists), the operation is a method name of the broker, the code a row of
 * the error table (anything else counts as `internal`).
 *
 * The wrapper is a Proxy, so every method of the view it wraps — the {@link Broker} methods and the
 * extras of `auth/access.ts`'s `AuthorizedBroker` (key administration, metrics) — stays callable
 * with its own `this`. Its `produceTo` (the TCP transport's Produce) counts in the one object
 * it puts between the caller's sink and the broker's, with no promise per request
 * (docs/benchmarks.md "Small requests (issue #22)").
 */
import { BrokerError } from "../broker/errors.ts";
import { produceVia } from "../broker/produce-sink.ts";
import { toBrokerError } from "../broker/storage-failure.ts";
import type {
  Broker,
  FetchRequest,
  FetchResult,
  ProduceRequest,
  ProduceResult,
  ProduceSink,
} from "../broker/types.ts";
import type { Counter, Histogram, Metrics } from "../lib/metrics.ts";

/**
 * One produce counted on its way back ({@link FrontDoorMetrics.wrap}'s `produceTo`): the sink
 * the broker answers, which counts and then answers the caller's sink. A storage error is mapped
 * (`toBrokerError`) before it is counted and passed on.
 */
class ProduceCount implements ProduceSink {
  readonly #door: FrontDoorMetrics;
  readonly #topic: string;
  readonly #records: number;
  readonly #bytes: number;
  readonly #started: number;
  readonly #sink: ProduceSink;

  /** `records` and `bytes` are the request's, read before the broker saw it. */
  constructor(door: FrontDoorMetrics, request: ProduceRequest, sink: ProduceSink) {
    this.#door = door;
    this.#topic = request.topic;
    this.#records = request.batch.count;
    this.#bytes = request.batch.bytes.length;
    this.#started = door.seconds();
    this.#sink = sink;
  }

  appended(partition: number, baseOffset: number, count: number): void {
    this.#door.produceDone(this.#started, this.#topic, this.#records, this.#bytes, false);
    this.#sink.appended(partition, baseOffset, count);
  }

  produced(result: ProduceResult): void {
    this.#door.produceDone(
      this.#started,
      this.#topic,
      this.#records,
      this.#bytes,
      result.duplicate === true,
    );
    this.#sink.produced(result);
  }

  failed(err: unknown): void {
    const error = toBrokerError(err);
    this.#door.produceFailed(this.#started, error);
    this.#sink.failed(error);
  }
}

/** The series a front door updates per topic (kept per {@link Metrics.epoch}). */
interface TopicSeries {
  requests: Counter;
  records: Counter;
  bytes: Counter;
}

/** The counting state of one front door, shared by every broker view it wraps. */
export class FrontDoorMetrics {
  readonly transport: string;
  readonly #metrics: Metrics;
  readonly #produce = new Map<string, TopicSeries>();
  readonly #fetch = new Map<string, TopicSeries>();
  #epoch: number;
  readonly produceSeconds: Histogram;
  readonly fetchSeconds: Histogram;

  /** @param transport the `transport` label: "http", "tcp", … */
  constructor(metrics: Metrics, transport: string) {
    this.#metrics = metrics;
    this.transport = transport;
    this.#epoch = metrics.epoch();
    this.produceSeconds = metrics.histogram("esb_produce_duration_seconds", { transport });
    this.fetchSeconds = metrics.histogram("esb_fetch_duration_seconds", { transport });
  }

  /** A monotonic time in seconds. */
  seconds(): number {
    return this.#metrics.seconds();
  }

  #topic(kind: "produce" | "fetch", topic: string): TopicSeries {
    const epoch = this.#metrics.epoch();
    if (epoch !== this.#epoch) {
      // Series were dropped (a topic deleted): handles kept from before may be detached.
      this.#produce.clear();
      this.#fetch.clear();
      this.#epoch = epoch;
    }
    const cache = kind === "produce" ? this.#produce : this.#fetch;
    let series = cache.get(topic);
    if (series === undefined) {
      const labels = { topic, transport: this.transport };
      const m = this.#metrics;
      series =
        kind === "produce"
          ? {
              requests: m.counter("esb_produce_requests_total", labels),
              records: m.counter("esb_produce_records_total", labels),
              bytes: m.counter("esb_produce_bytes_total", labels),
            }
          : {
              requests: m.counter("esb_fetch_requests_total", labels),
              records: m.counter("esb_fetch_records_total", labels),
              bytes: m.counter("esb_fetch_bytes_total", labels),
            };
      cache.set(topic, series);
    }
    return series;
  }

  /** Counts a successful produce of `records` records and `bytes` bytes to `topic`. */
  produced(topic: string, records: number, bytes: number): void {
    const s = this.#topic("produce", topic);
    s.requests.inc();
    s.records.inc(records);
    s.bytes.inc(bytes);
  }

  /**
   * Counts a finished produce started at `started` ({@link seconds}): its duration, and its
   * records and bytes unless it was a `duplicate`.
   */
  produceDone(
    started: number,
    topic: string,
    records: number,
    bytes: number,
    duplicate: boolean,
  ): void {
    this.produceSeconds.observe(this.seconds() - started);
    if (!duplicate) this.produced(topic, records, bytes);
  }

  /** Counts a failed produce started at `started` ({@link seconds}): its duration and error. */
  produceFailed(started: number, err: unknown): void {
    this.produceSeconds.observe(this.seconds() - started);
    this.failed("produce", err);
  }

  /** Counts a successful fetch from `topic`. */
  fetched(topic: string, records: number, bytes: number): void {
    const s = this.#topic("fetch", topic);
    s.requests.inc();
    s.records.inc(records);
    s.bytes.inc(bytes);
  }

  /** Counts a failed broker call. */
  failed(operation: string, err: unknown): void {
    const code = err instanceof BrokerError ? err.kind.code : "internal";
    this.#metrics
      .counter("esb_request_errors_total", { transport: this.transport, operation, code })
      .inc();
  }

  /** `broker` counted by this front door (module comment). */
  wrap<B extends Broker>(broker: B): B {
    return meteredBroker(broker, this);
  }
}

/** camelCase method name → snake_case operation label (`createTopic` → `create_topic`). */
function operationName(method: string): string {
  return method.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function meteredBroker<B extends Broker>(broker: B, door: FrontDoorMetrics): B {
  const wrapped = new Map<PropertyKey, unknown>();
  const produce = (request: ProduceRequest): Promise<ProduceResult> => {
    const started = door.seconds();
    const records = request.batch.count;
    const bytes = request.batch.bytes.length;
    let call: Promise<ProduceResult>;
    try {
      call = broker.produce(request);
    } catch (err) {
      door.failed("produce", err);
      throw err;
    }
    return call.then(
      (result) => {
        door.produceDone(started, request.topic, records, bytes, result.duplicate === true);
        return result;
      },
      (err: unknown) => {
        door.produceFailed(started, err);
        throw err;
      },
    );
  };
  // The TCP transport's produce: counted in one sink object, no promise.
  const produceTo = (request: ProduceRequest, sink: ProduceSink): void =>
    produceVia(broker, request, new ProduceCount(door, request, sink));
  const fetch = (request: FetchRequest): Promise<FetchResult> => {
    const started = door.seconds();
    let call: Promise<FetchResult>;
    try {
      call = broker.fetch(request);
    } catch (err) {
      door.failed("fetch", err);
      throw err;
    }
    return call.then(
      (result) => {
        door.fetchSeconds.observe(door.seconds() - started);
        door.fetched(request.topic, result.records.count, result.records.bytes.length);
        return result;
      },
      (err: unknown) => {
        door.fetchSeconds.observe(door.seconds() - started);
        door.failed("fetch", err);
        throw err;
      },
    );
  };
  wrapped.set("produce", produce);
  wrapped.set("fetch", fetch);
  wrapped.set("produceTo", produceTo);
  return new Proxy(broker, {
    get(target, property) {
      const known = wrapped.get(property);
      if (known !== undefined) return known;
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function" || typeof property !== "string") return value;
      const operation = operationName(property);
      const method = value as (...args: unknown[]) => unknown;
      const counted = (...args: unknown[]): unknown => {
        let result: unknown;
        try {
          result = method.apply(target, args);
        } catch (err) {
          door.failed(operation, err);
          throw err;
        }
        if (result instanceof Promise)
          return result.catch((err: unknown) => {
            door.failed(operation, err);
            throw err;
          });
        return result;
      };
      wrapped.set(property, counted);
      return counted;
    },
  });
}
