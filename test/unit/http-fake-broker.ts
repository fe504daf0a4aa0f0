/**
 * An in-memory {@link Broker} for the HTTP tests: enough behaviour to exercise every route (topic
 * validation, per-record partitions, long-poll waits that end on produce, abort or close), plus
 * hooks to inject failures and to hold a produce open. Not a model of durability.
 */
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import type {
  Broker,
  CreateTopicRequest,
  FetchRequest,
  FetchResult,
  ProduceRequest,
  ProduceResult,
  TopicConfig,
  TopicDescription,
} from "../../src/broker/types.ts";
import { concatBytes, readI64, viewOf } from "../../src/lib/bytes.ts";
import { partitionForKey } from "../../src/lib/murmur2.ts";
import { encodeRecord, scanEntries } from "../../src/storage/record.ts";

const defaultConfig: TopicConfig = {
  segment_bytes: 128 * 1024 * 1024,
  segment_ms: 7 * 24 * 3600_000,
  retention_ms: 7 * 24 * 3600_000,
  retention_bytes: -1,
  cleanup_policy: "delete",
  tombstone_retention_ms: 24 * 3600_000,
  cold_retention_ms: -1,
  max_timestamp_skew_ms: 3600_000,
  timestamp_type: "create_time",
};

interface StoredRecord {
  offset: number;
  bytes: Uint8Array;
}

interface FakePartition {
  records: StoredRecord[];
  waiters: Set<() => void>;
}

interface FakeTopic {
  config: TopicConfig;
  partitions: FakePartition[];
  roundRobin: number;
}

/** In-memory broker with failure injection, for tests of the transport only. */
export class FakeBroker implements Broker {
  readonly topics = new Map<string, FakeTopic>();
  /** Every produce request received, in order. */
  readonly produced: ProduceRequest[] = [];
  /** The next call of this method throws this error (then the hook clears). */
  failNext: { method: keyof Broker; error: unknown } | null = null;
  /** When set, produce waits for this promise before appending. */
  holdProduce: Promise<void> | null = null;
  nowMs = 1_700_000_000_000;
  closed = false;
  #waitListeners: (() => void)[] = [];

  #check(method: keyof Broker): void {
    if (this.closed)
      throw new BrokerError(Errors.unavailable, `Cannot ${method}: the broker is closed`);
    if (this.failNext?.method === method) {
      const { error } = this.failNext;
      this.failNext = null;
      throw error;
    }
  }

  #topic(name: string): FakeTopic {
    const topic = this.topics.get(name);
    if (topic === undefined)
      throw new BrokerError(
        Errors.topicNotFound,
        `Cannot find topic ${JSON.stringify(name)}: it does not exist`,
      );
    return topic;
  }

  #partition(name: string, partition: number): FakePartition {
    const p = this.#topic(name).partitions[partition];
    if (p === undefined)
      throw new BrokerError(
        Errors.partitionNotFound,
        `Cannot find partition "${name}/${partition}": no such partition`,
      );
    return p;
  }

  #describe(name: string, topic: FakeTopic): TopicDescription {
    return {
      name,
      config: { ...topic.config },
      partitions: topic.partitions.map((p, i) => ({
        partition: i,
        logStartOffset: 0,
        highWatermark: p.records.length,
        sizeBytes: p.records.reduce((n, r) => n + r.bytes.length, 0),
        segmentCount: 1,
        fenced: false,
      })),
    };
  }

  /** Number of fetches currently waiting for records. */
  get waitingFetches(): number {
    let n = 0;
    for (const t of this.topics.values()) for (const p of t.partitions) n += p.waiters.size;
    return n;
  }

  /** Resolves once at least `count` fetches are waiting. */
  whenWaiting(count = 1): Promise<void> {
    if (this.waitingFetches >= count) return Promise.resolve();
    return new Promise((resolve) => {
      const check = () => {
        if (this.waitingFetches >= count) resolve();
        else this.#waitListeners.push(check);
      };
      this.#waitListeners.push(check);
    });
  }

  #notifyWaitListeners(): void {
    const listeners = this.#waitListeners.splice(0);
    for (const l of listeners) l();
  }

  /** High watermark of one partition. */
  highWatermark(topic: string, partition: number): number {
    return this.#partition(topic, partition).records.length;
  }

  async createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
    this.#check("createTopic");
    const { name } = request;
    if (!/^[A-Za-z0-9._-]{1,249}$/.test(name) || name === "." || name === "..") {
      throw new BrokerError(
        Errors.invalidTopicName,
        `Cannot create topic ${JSON.stringify(name)}: names are 1–249 of [A-Za-z0-9._-]`,
      );
    }
    if (
      !Number.isInteger(request.partitions) ||
      request.partitions < 1 ||
      request.partitions > 4096
    ) {
      throw new BrokerError(
        Errors.invalidConfig,
        `Cannot create topic ${JSON.stringify(name)}: partitions must be 1 … 4096`,
      );
    }
    const config: TopicConfig = { ...defaultConfig };
    for (const [key, value] of Object.entries(request.config ?? {})) {
      if (!(key in defaultConfig)) {
        throw new BrokerError(
          Errors.invalidConfig,
          `Cannot create topic ${JSON.stringify(name)}: unknown config ${JSON.stringify(key)}`,
          { config: key },
        );
      }
      (config as unknown as Record<string, unknown>)[key] = value;
    }
    if (this.topics.has(name))
      throw new BrokerError(
        Errors.topicExists,
        `Cannot create topic ${JSON.stringify(name)}: it already exists`,
      );
    const topic: FakeTopic = {
      config,
      partitions: Array.from({ length: request.partitions }, () => ({
        records: [],
        waiters: new Set<() => void>(),
      })),
      roundRobin: 0,
    };
    this.topics.set(name, topic);
    return this.#describe(name, topic);
  }

  async listTopics(): Promise<TopicDescription[]> {
    this.#check("listTopics");
    return [...this.topics.keys()]
      .sort()
      .map((name) => this.#describe(name, this.topics.get(name)!));
  }

  async describeTopic(name: string): Promise<TopicDescription> {
    this.#check("describeTopic");
    return this.#describe(name, this.#topic(name));
  }

  async deleteTopic(name: string): Promise<void> {
    this.#check("deleteTopic");
    const topic = this.#topic(name);
    this.topics.delete(name);
    for (const p of topic.partitions) for (const w of p.waiters) w();
  }

  async produce(request: ProduceRequest): Promise<ProduceResult> {
    this.#check("produce");
    this.produced.push(request);
    const topic = this.#topic(request.topic);
    const count = scanEntries(request.batch.bytes);
    if (count !== request.batch.count) throw new Error("fake: batch count mismatch");
    if (request.partitions !== undefined && request.partitions.length !== count)
      throw new Error("fake: partitions length mismatch");
    // Decode entries and choose partitions first: all or nothing.
    const view = viewOf(request.batch.bytes);
    const entries: { p: number; ts: number; key: Uint8Array | null; value: Uint8Array }[] = [];
    let pos = 0;
    let roundRobin = topic.roundRobin;
    for (let i = 0; i < count; i++) {
      const ts = readI64(view, pos);
      const keyLen = view.getInt32(pos + 8);
      const key = keyLen < 0 ? null : request.batch.bytes.slice(pos + 12, pos + 12 + keyLen);
      const valueLenPos = pos + 12 + Math.max(0, keyLen);
      const valueLen = view.getUint32(valueLenPos);
      const value = request.batch.bytes.slice(valueLenPos + 4, valueLenPos + 4 + valueLen);
      pos = valueLenPos + 4 + valueLen;
      let p = request.partitions?.[i] ?? request.partition ?? -1;
      if (p < 0)
        p =
          key === null
            ? roundRobin++ % topic.partitions.length
            : partitionForKey(key, topic.partitions.length);
      if (p >= topic.partitions.length) {
        throw new BrokerError(
          Errors.partitionNotFound,
          `Cannot produce to partition "${request.topic}/${p}": no such partition`,
        );
      }
      entries.push({ p, ts, key, value });
    }
    if (this.holdProduce !== null) await this.holdProduce;
    topic.roundRobin = roundRobin;
    const spans: ProduceResult["spans"] = [];
    const touched = new Set<FakePartition>();
    for (const e of entries) {
      const partition = topic.partitions[e.p];
      const offset = partition.records.length;
      const timestampMs = e.ts === -1 ? this.nowMs : e.ts;
      partition.records.push({
        offset,
        bytes: encodeRecord({ offset, timestampMs, key: e.key, value: e.value }),
      });
      touched.add(partition);
      const last = spans[spans.length - 1];
      if (last !== undefined && last.partition === e.p && last.baseOffset + last.count === offset)
        last.count++;
      else spans.push({ partition: e.p, baseOffset: offset, count: 1 });
    }
    for (const partition of touched) for (const w of [...partition.waiters]) w();
    return { spans };
  }

  async fetch(request: FetchRequest): Promise<FetchResult> {
    this.#check("fetch");
    const partition = this.#partition(request.topic, request.partition);
    const hw = partition.records.length;
    if (!Number.isSafeInteger(request.offset) || request.offset < 0 || request.offset > hw) {
      throw new BrokerError(
        Errors.offsetOutOfRange,
        `Cannot fetch from partition "${request.topic}/${request.partition}": offset ${request.offset} is outside [0, ${hw}]`,
        {
          log_start_offset: 0,
          high_watermark: hw,
        },
      );
    }
    const waitMs = request.waitMs ?? 0;
    if (request.offset === hw && waitMs > 0 && !request.signal?.aborted) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          partition.waiters.delete(done);
          request.signal?.removeEventListener("abort", done);
          resolve();
        };
        const timer = setTimeout(done, waitMs);
        request.signal?.addEventListener("abort", done);
        partition.waiters.add(done);
        this.#notifyWaitListeners();
      });
      if (this.closed)
        throw new BrokerError(Errors.unavailable, "Cannot fetch: the broker is closed");
    }
    const maxRecords = request.maxRecords ?? 1000;
    const maxBytes = request.maxBytes ?? 1024 * 1024;
    const chosen: Uint8Array[] = [];
    let bytes = 0;
    for (let o = request.offset; o < partition.records.length && chosen.length < maxRecords; o++) {
      const r = partition.records[o];
      if (chosen.length > 0 && bytes + r.bytes.length > maxBytes) break;
      chosen.push(r.bytes);
      bytes += r.bytes.length;
    }
    return {
      records: { bytes: concatBytes(chosen), count: chosen.length },
      nextOffset: request.offset + chosen.length,
      highWatermark: partition.records.length,
      logStartOffset: 0,
    };
  }

  async listOffsets(request: {
    topic: string;
    partition: number;
  }): Promise<{ logStartOffset: number; highWatermark: number }> {
    this.#check("listOffsets");
    return {
      logStartOffset: 0,
      highWatermark: this.#partition(request.topic, request.partition).records.length,
    };
  }

  // Consumer groups are tested over HTTP against the real broker (test/integration/groups-http.test.ts).
  async joinGroup(): Promise<never> {
    throw new BrokerError(
      Errors.unavailable,
      "Cannot join: the fake broker has no consumer groups",
    );
  }
  async heartbeat(): Promise<never> {
    throw new BrokerError(
      Errors.unavailable,
      "Cannot heartbeat: the fake broker has no consumer groups",
    );
  }
  async leaveGroup(): Promise<never> {
    throw new BrokerError(
      Errors.unavailable,
      "Cannot leave: the fake broker has no consumer groups",
    );
  }
  async commitOffsets(): Promise<never> {
    throw new BrokerError(
      Errors.unavailable,
      "Cannot commit: the fake broker has no consumer groups",
    );
  }
  async describeGroup(): Promise<never> {
    throw new BrokerError(
      Errors.unavailable,
      "Cannot describe: the fake broker has no consumer groups",
    );
  }
  async listGroups(): Promise<never> {
    throw new BrokerError(
      Errors.unavailable,
      "Cannot list: the fake broker has no consumer groups",
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.topics.values())
      for (const p of t.partitions) for (const w of [...p.waiters]) w();
  }
}
