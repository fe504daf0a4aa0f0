/**
 * Durable Streams over es-broker's storage (docs/durable-streams.md): {@link StreamService}
 * implements the {@link Streams} operations on one-partition topics whose `topic.json` holds a
 * `stream` section (`meta.ts`). One append is one record; a stream position is a record offset
 * (`offsets.ts`); a fork reads its source below its fork point.
 *
 * ## Guarantees and how they are kept
 *
 * - **An append is acknowledged after its fsync**, like every produce: it goes through
 *   `LocalBroker`'s produce (group commit, fencing, the producer journal).
 * - **Idempotent producers** are es-broker's own (`broker/producers/`), one per (stream
 *   incarnation, `Producer-Id`): the protocol's per-request `Producer-Seq` is the producer
 *   sequence of the request's one record, so the proven decision table applies, and its answers
 *   are mapped to the protocol's (below).
 * - **Closing is atomic for readers**: appends pass a gate; a close shuts it, waits for the
 *   appends already inside, appends its final record, then writes `closed` (with the position
 *   after that record) into `topic.json`. No record can land after the final one, and a reader
 *   reports EOF only at that position, which is durable before `closed` is visible. A crash
 *   between the final record's fsync and `topic.json` leaves the stream open with the record
 *   unacknowledged; an idempotent producer's retry is then a duplicate and closes it.
 * - **Creation is all or nothing**: `topic.json` records how many records the creation appends
 *   (`initial_records`); a start that finds fewer removes the stream (its creation was never
 *   acknowledged), and the stream is invisible to other requests until they are durable.
 * - **Structure changes** (create, delete, expire, close) run one at a time (one mutex), so a
 *   fork never references a stream being removed and reference counts stay exact.
 *
 * ## Producer answers (protocol §5.2.1 ← `broker/producers/sequence.ts` rows)
 *
 * | es-broker outcome                          | protocol answer                                   |
 * |--------------------------------------------|---------------------------------------------------|
 * | append (rows 1, 4, 6, 10)                   | 200, `Producer-Seq` = the request's               |
 * | duplicate (row 8), `duplicate_sequence` (9, 11) | 204: the protocol treats seq ≤ last as a retry |
 * | `producer_fenced` (row 3)                   | 403, `Producer-Epoch` = current epoch             |
 * | new epoch with seq > 0 (row 5)              | 400 (checked first, from the producer's state)    |
 * | `unknown_producer` (2), gaps (7, 12)        | 409, `Producer-Expected-Seq` / `-Received-Seq`    |
 *
 * Time comes from the {@link Clock}; nothing here touches `node:*`.
 */
import { onAbort } from "../../lib/abort.ts";
import type { Clock, Timer } from "../../lib/clock.ts";
import { errorMessage } from "../../lib/errors.ts";
import type { Logger } from "../../lib/logger.ts";
import {
  fetchBytesMax,
  fetchRecordsDefault,
  recordPayloadBytesMax,
  streamExpirySweepMs,
  streamProducerIdBytesMax,
  streamSeqBytesMax,
} from "../../lib/limits.ts";
import { murmur3x86_128 } from "../../lib/murmur3.ts";
import { Mutex } from "../../lib/mutex.ts";
import { Prng } from "../../lib/prng.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor } from "../../storage/record.ts";
import { BrokerError, Errors } from "../errors.ts";
import type { ProducerStates } from "../producers/state.ts";
import type { Topic, TopicRegistry } from "../topics.ts";
import type { FetchRequest, FetchResult, ProduceRequest, ProduceResult } from "../types.ts";
import { StreamCursors } from "./cursor.ts";
import { jsonAppendValue, jsonRecordMessages, jsonValuePrefix } from "./json.ts";
import { isJsonStream, isTextStream, mediaType, type StreamMeta } from "./meta.ts";
import { streamTopicName, validateStreamPath } from "./names.ts";
import { formatStreamOffset } from "./offsets.ts";
import type {
  StreamAppendRequest,
  StreamAppendResult,
  StreamCreateRequest,
  StreamInfo,
  StreamProducer,
  StreamReadRequest,
  StreamReadResult,
  Streams,
} from "./types.ts";

/** Options of {@link StreamService.open}. */
export interface StreamServiceOptions {
  topics: TopicRegistry;
  /** Read-only use: a producer's epoch and next sequence ({@link ProducerStates.peek}). */
  producers: Pick<ProducerStates, "peek">;
  /** The broker's produce without the stream gate (the service holds the gate itself). */
  produce: (request: ProduceRequest) => Promise<ProduceResult>;
  /** The broker's fetch (never asked to wait). */
  fetch: (request: FetchRequest) => Promise<FetchResult>;
  clock: Clock;
  logger: Logger;
}

/** What the service keeps per stream in memory; everything durable is in the topic. */
interface StreamState {
  name: string;
  topic: Topic;
  /** Broker clock at the last read or write (sliding TTL); a start counts as one. */
  lastAccessMs: number;
  /** Appends inside the gate. */
  inFlight: number;
  /** Set while a close waits for the gate to empty and writes; appends wait for it. */
  closing: Promise<void> | null;
  /** Called when `inFlight` drops to 0 while a close waits. */
  drained: (() => void) | null;
  /** Live readers of this stream, woken on close and delete. */
  listeners: Set<() => void>;
  /** Serializes appends that carry `Stream-Seq`. */
  seqLock: Mutex;
  /** The last `Stream-Seq` (null: none yet); undefined until read back from the log. */
  lastSeq: string | null | undefined;
  /** True once its topic is gone. */
  removed: boolean;
  /**
   * True while its topic is being deleted (delete or expiry): requests find no stream and live
   * readers end, so none keeps reading a closing partition while the delete runs.
   */
  removing: boolean;
}

const encoder = new TextEncoder();

/** Byte-wise comparison of two strings' UTF-8 forms (protocol §5.2: `Stream-Seq` order). */
function compareUtf8(a: string, b: string): number {
  const x = encoder.encode(a);
  const y = encoder.encode(b);
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/**
 * One append is one record: its value may be at most {@link recordPayloadBytesMax} bytes.
 * @throws BrokerError record_too_large (413).
 */
function checkRecordSize(value: Uint8Array, action: string): void {
  if (value.length > recordPayloadBytesMax - streamSeqBytesMax)
    throw new BrokerError(
      Errors.recordTooLarge,
      `${action}: the append is ${value.length} bytes; one append is one record, at most ${recordPayloadBytesMax - streamSeqBytesMax} bytes`,
      { limit_bytes: recordPayloadBytesMax - streamSeqBytesMax },
    );
}

function notFound(path: string): BrokerError {
  return new BrokerError(Errors.streamNotFound, `Cannot find stream ${JSON.stringify(path)}`);
}

function gone(path: string): BrokerError {
  return new BrokerError(
    Errors.streamGone,
    `Cannot use stream ${JSON.stringify(path)}: it was deleted and is kept only for the forks that read it`,
  );
}

/** The Durable Streams of one broker (module comment). */
export class StreamService implements Streams {
  #topics: TopicRegistry;
  #producers: Pick<ProducerStates, "peek">;
  #produceFn: (request: ProduceRequest) => Promise<ProduceResult>;
  #fetchFn: (request: FetchRequest) => Promise<FetchResult>;
  #clock: Clock;
  #logger: Logger;
  #cursors: StreamCursors;
  #prng: Prng;
  #streams = new Map<string, StreamState>();
  /** Topic name → names of the streams forked from it. */
  #forks = new Map<string, Set<string>>();
  /** Names whose creation is in progress (invisible until it is durable). */
  #creating = new Set<string>();
  /** Create, delete, expire and close run under it, one at a time. */
  #admin = new Mutex();
  #sweep: Timer | null = null;
  #closed = false;
  #ids = 0;

  private constructor(options: StreamServiceOptions) {
    this.#topics = options.topics;
    this.#producers = options.producers;
    this.#produceFn = options.produce;
    this.#fetchFn = options.fetch;
    this.#clock = options.clock;
    this.#logger = options.logger;
    const seed = options.clock.nowMs();
    this.#cursors = new StreamCursors(options.clock, seed);
    this.#prng = new Prng(seed + 1);
  }

  /**
   * Loads every stream topic the registry opened, removes those whose creation a crash
   * interrupted and soft-deleted ones no fork reads any more, and starts the expiry sweep.
   * @throws BrokerError storage_error / internal if removing one fails.
   */
  static async open(options: StreamServiceOptions): Promise<StreamService> {
    const service = new StreamService(options);
    await service.#load();
    service.#scheduleSweep();
    return service;
  }

  async #load(): Promise<void> {
    const now = this.#clock.nowMs();
    for (const topic of this.#topics.streams()) {
      this.#streams.set(topic.name, this.#newState(topic, now));
    }
    for (const s of this.#streams.values()) {
      const fork = this.#meta(s).fork;
      if (fork === undefined) continue;
      this.#forksOf(fork.source).add(s.name);
      if (!this.#streams.has(fork.source))
        this.#logger.log("error", "stream.fork_source_missing", {
          stream: this.#meta(s).path,
          source: fork.source,
        });
    }
    for (const s of [...this.#streams.values()]) {
      if (s.removed) continue;
      const meta = this.#meta(s);
      const records = s.topic.partitions[0].highWatermark;
      if (records < meta.initial_records) {
        this.#logger.log("warn", "stream.creation_interrupted", {
          stream: meta.path,
          topic: s.name,
          records,
          initial_records: meta.initial_records,
          action: "removed: the creation was never acknowledged",
        });
        await this.#remove(s);
      }
    }
    for (const s of [...this.#streams.values()])
      if (!s.removed && this.#meta(s).deleted === true && this.#forksOf(s.name).size === 0)
        await this.#remove(s);
  }

  #newState(topic: Topic, now: number): StreamState {
    return {
      name: topic.name,
      topic,
      lastAccessMs: now,
      inFlight: 0,
      closing: null,
      drained: null,
      listeners: new Set(),
      seqLock: new Mutex(),
      lastSeq: undefined,
      removed: false,
      removing: false,
    };
  }

  #meta(s: StreamState): StreamMeta {
    // The registry replaces topic.stream on every update; a stream topic always has one.
    return s.topic.stream as StreamMeta;
  }

  #forksOf(name: string): Set<string> {
    let set = this.#forks.get(name);
    if (set === undefined) {
      set = new Set();
      this.#forks.set(name, set);
    }
    return set;
  }

  #checkOpen(): void {
    if (this.#closed)
      throw new BrokerError(
        Errors.unavailable,
        "Cannot serve the request: the broker is shutting down",
      );
  }

  // ---------------------------------------------------------------------------------------------
  // Lookup, TTL and expiry

  #expired(s: StreamState, now: number): boolean {
    const meta = this.#meta(s);
    if (meta.expires_at_ms !== undefined && now >= meta.expires_at_ms) return true;
    return meta.ttl_seconds !== undefined && now - s.lastAccessMs >= meta.ttl_seconds * 1000;
  }

  /** The stream at `path` without judging it (null when there is none, or it is being created). */
  #find(path: string): StreamState | null {
    validateStreamPath(path);
    const name = streamTopicName(path);
    if (this.#creating.has(name)) return null;
    const s = this.#streams.get(name);
    if (s === undefined || s.removed || s.removing || this.#meta(s).path !== path) return null;
    return s;
  }

  /**
   * The live stream at `path` for a request: not found, soft-deleted (410) or expired (answered
   * as gone; its removal is queued) streams are refused. A read or write renews its TTL.
   */
  #use(path: string, options: { touch: boolean }): StreamState {
    this.#checkOpen();
    const s = this.#find(path);
    if (s === null) throw notFound(path);
    if (this.#meta(s).deleted === true) throw gone(path);
    const now = this.#clock.nowMs();
    if (this.#expired(s, now)) {
      const soft = this.#forksOf(s.name).size > 0;
      this.#queueExpiry(s);
      throw soft ? gone(path) : notFound(path);
    }
    if (options.touch) s.lastAccessMs = now;
    return s;
  }

  #queueExpiry(s: StreamState): void {
    void this.#admin
      .run(() => this.#expireLocked(s))
      .catch((err: unknown) =>
        this.#logger.log("error", "stream.expire_failed", {
          stream: this.#meta(s).path,
          error: errorMessage(err),
        }),
      );
  }

  async #expireLocked(s: StreamState): Promise<void> {
    if (s.removed || this.#meta(s).deleted === true || !this.#expired(s, this.#clock.nowMs()))
      return;
    this.#logger.log("info", "stream.expired", { stream: this.#meta(s).path, topic: s.name });
    await this.#deleteLocked(s);
  }

  #scheduleSweep(): void {
    if (this.#closed) return;
    this.#sweep = this.#clock.setTimer(streamExpirySweepMs, () => {
      const now = this.#clock.nowMs();
      for (const s of this.#streams.values())
        if (!s.removed && this.#meta(s).deleted !== true && this.#expired(s, now))
          this.#queueExpiry(s);
      this.#scheduleSweep();
    });
  }

  #base(s: StreamState): number {
    return this.#meta(s).fork?.offset ?? 0;
  }

  #tail(s: StreamState): number {
    return this.#base(s) + s.topic.partitions[0].highWatermark;
  }

  #info(s: StreamState): StreamInfo {
    const meta = this.#meta(s);
    return {
      path: meta.path,
      topic: s.name,
      id: meta.id,
      contentType: meta.content_type,
      json: isJsonStream(meta),
      text: isTextStream(meta),
      tail: this.#tail(s),
      ...(meta.closed === undefined ? {} : { closedAt: meta.closed.offset }),
      ...(meta.ttl_seconds === undefined ? {} : { ttlSeconds: meta.ttl_seconds }),
      ...(meta.expires_at === undefined ? {} : { expiresAt: meta.expires_at }),
    };
  }

  /** Wakes the live readers of `s` (close, delete). */
  #notify(s: StreamState): void {
    for (const l of [...s.listeners]) l();
  }

  // ---------------------------------------------------------------------------------------------
  // Create

  /**
   * Creates a stream, or confirms one with the same configuration ({@link Streams.create}): its
   * topic with the `stream` section, then its initial records, invisible until durable.
   */
  async create(request: StreamCreateRequest): Promise<{ created: boolean; info: StreamInfo }> {
    this.#checkOpen();
    const path = validateStreamPath(request.path);
    const name = streamTopicName(path);
    return this.#admin.run(async () => {
      let existing = this.#streams.get(name);
      if (
        existing !== undefined &&
        !existing.removed &&
        this.#expired(existing, this.#clock.nowMs())
      ) {
        await this.#expireLocked(existing);
        existing = this.#streams.get(name);
      }
      if (existing !== undefined && !existing.removed) {
        const meta = this.#meta(existing);
        if (meta.path !== path)
          throw new BrokerError(
            Errors.streamConflict,
            `Cannot create stream ${JSON.stringify(path)}: its topic name is taken by stream ${JSON.stringify(meta.path)}`,
          );
        if (meta.deleted === true)
          throw new BrokerError(
            Errors.streamConflict,
            `Cannot create stream ${JSON.stringify(path)}: it was deleted and forks still read it, so the path cannot be reused yet`,
          );
        const mismatch = this.#configMismatch(existing, request);
        if (mismatch !== null)
          throw new BrokerError(
            Errors.streamConflict,
            `Cannot create stream ${JSON.stringify(path)}: it exists with another configuration (${mismatch})`,
          );
        existing.lastAccessMs = this.#clock.nowMs();
        return { created: false, info: this.#info(existing) };
      }
      if (this.#topics.lookup(name, 0) !== "missing")
        throw new BrokerError(
          Errors.streamConflict,
          `Cannot create stream ${JSON.stringify(path)}: topic "${name}" exists and is not a stream`,
        );
      return { created: true, info: await this.#createLocked(path, name, request) };
    });
  }

  /** What differs between an existing stream and a creation request, or null (protocol §5.1). */
  #configMismatch(s: StreamState, request: StreamCreateRequest): string | null {
    const meta = this.#meta(s);
    const type =
      request.contentType ?? (request.fork ? meta.content_type : "application/octet-stream");
    if (mediaType(type) !== mediaType(meta.content_type))
      return `content type ${JSON.stringify(meta.content_type)}, not ${JSON.stringify(type)}`;
    // A fork created without TTL or expiry inherited its source's: only stated values are compared.
    const inherits =
      request.fork !== undefined &&
      request.ttlSeconds === undefined &&
      request.expiresAt === undefined;
    if (!inherits) {
      if (request.ttlSeconds !== meta.ttl_seconds)
        return `TTL ${meta.ttl_seconds ?? "none"}, not ${request.ttlSeconds ?? "none"}`;
      if (request.expiresAt?.ms !== meta.expires_at_ms)
        return `expiry ${meta.expires_at ?? "none"}, not ${request.expiresAt?.text ?? "none"}`;
    }
    if (request.closed !== (meta.closed !== undefined))
      return meta.closed !== undefined ? "it is closed" : "it is open";
    const fork = meta.fork;
    if ((request.fork?.sourcePath ?? null) !== (fork?.source_path ?? null))
      return fork === undefined
        ? "it is not a fork"
        : `it forks ${JSON.stringify(fork.source_path)}`;
    if (request.fork !== undefined && fork !== undefined) {
      const offset = request.fork.offset;
      if (typeof offset === "number" && offset !== fork.anchor)
        return `fork offset ${formatStreamOffset(fork.anchor)}`;
      if ((request.fork.subOffset ?? 0) !== fork.sub_offset)
        return `fork sub-offset ${fork.sub_offset}`;
    }
    return null;
  }

  async #createLocked(
    path: string,
    name: string,
    request: StreamCreateRequest,
  ): Promise<StreamInfo> {
    const action = `Cannot create stream ${JSON.stringify(path)}`;
    const values: Uint8Array[] = [];
    let contentType = request.contentType ?? "application/octet-stream";
    let ttlSeconds = request.ttlSeconds;
    let expiresAt = request.expiresAt;
    let fork: StreamMeta["fork"];
    let source: StreamState | undefined;
    if (request.fork !== undefined) {
      const resolved = await this.#resolveFork(request, action);
      source = resolved.source;
      fork = resolved.fork;
      if (resolved.copy !== null) values.push(resolved.copy);
      const sourceMeta = this.#meta(source);
      contentType = request.contentType ?? sourceMeta.content_type;
      if (ttlSeconds === undefined && expiresAt === undefined) {
        // The protocol's fork TTL table: no request of its own inherits the source's.
        ttlSeconds = sourceMeta.ttl_seconds;
        if (sourceMeta.expires_at !== undefined && sourceMeta.expires_at_ms !== undefined)
          expiresAt = { text: sourceMeta.expires_at, ms: sourceMeta.expires_at_ms };
      }
    }
    if (mediaType(contentType) === "application/json") {
      if (request.body.length > 0) {
        const json = jsonAppendValue(request.body, action);
        if (json.messages > 0) values.push(json.value);
      }
    } else if (request.body.length > 0) values.push(request.body);
    for (const value of values) checkRecordSize(value, action);
    const base = fork?.offset ?? 0;
    const now = this.#clock.nowMs();
    const meta: StreamMeta = {
      path,
      id: `${now.toString(16)}-${(++this.#ids).toString(16)}-${this.#prng.nextU32().toString(16)}`,
      content_type: contentType,
      created_ms: now,
      initial_records: values.length,
      ...(ttlSeconds === undefined ? {} : { ttl_seconds: ttlSeconds }),
      ...(expiresAt === undefined
        ? {}
        : { expires_at: expiresAt.text, expires_at_ms: expiresAt.ms }),
      ...(request.closed ? { closed: { offset: base + values.length } } : {}),
      ...(fork === undefined ? {} : { fork }),
    };
    this.#creating.add(name);
    try {
      await this.#topics.create(
        { name, partitions: 1, config: { retention_ms: -1 } },
        { stream: meta },
      );
      try {
        if (values.length > 0) {
          const builder = new EntryBatchBuilder();
          for (const v of values) builder.add(null, v);
          await this.#produceFn({ topic: name, partition: 0, batch: builder.build() });
        }
      } catch (err) {
        // Never acknowledged: take the half-made stream away again (a start would, too).
        await this.#topics.delete(name).catch((deleteErr: unknown) =>
          this.#logger.log("error", "stream.create_cleanup_failed", {
            stream: path,
            error: errorMessage(deleteErr),
          }),
        );
        throw err;
      }
    } finally {
      this.#creating.delete(name);
    }
    const topic = this.#topics.get(name);
    const s = this.#newState(topic, this.#clock.nowMs());
    s.lastSeq = null;
    this.#streams.set(name, s);
    if (source !== undefined) this.#forksOf(source.name).add(name);
    this.#logger.log("info", "stream.created", {
      stream: path,
      topic: name,
      fork: fork?.source_path,
    });
    return this.#info(s);
  }

  /** The source, fork point and the partial record to copy (a sub-offset inside a record) of a fork creation. */
  async #resolveFork(
    request: StreamCreateRequest,
    action: string,
  ): Promise<{
    source: StreamState;
    fork: NonNullable<StreamMeta["fork"]>;
    copy: Uint8Array | null;
  }> {
    const spec = request.fork as NonNullable<StreamCreateRequest["fork"]>;
    const sourcePath = validateStreamPath(spec.sourcePath);
    let source = this.#find(sourcePath);
    if (source !== null && this.#expired(source, this.#clock.nowMs())) {
      await this.#expireLocked(source);
      source = this.#find(sourcePath);
    }
    if (source === null)
      throw new BrokerError(
        Errors.streamNotFound,
        `${action}: the stream it forks, ${JSON.stringify(sourcePath)}, does not exist`,
      );
    const sourceMeta = this.#meta(source);
    if (sourceMeta.deleted === true)
      throw new BrokerError(
        Errors.streamConflict,
        `${action}: the stream it forks, ${JSON.stringify(sourcePath)}, was deleted`,
      );
    if (
      request.contentType !== undefined &&
      mediaType(request.contentType) !== mediaType(sourceMeta.content_type)
    )
      throw new BrokerError(
        Errors.streamConflict,
        `${action}: content type ${JSON.stringify(request.contentType)} differs from the source's ${JSON.stringify(sourceMeta.content_type)}`,
      );
    const tail = this.#tail(source);
    const anchor =
      spec.offset === undefined || spec.offset === "now"
        ? tail
        : spec.offset === "start"
          ? 0
          : spec.offset;
    if (anchor > tail)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: fork offset ${formatStreamOffset(anchor)} is past the source's tail ${formatStreamOffset(tail)}`,
        { parameter: "Stream-Fork-Offset" },
      );
    const sub = spec.subOffset ?? 0;
    let offset = anchor;
    let copy: Uint8Array | null = null;
    if (sub > 0) {
      const overshoot = (why: string): never => {
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: Stream-Fork-Sub-Offset ${sub} ${why}`,
          {
            parameter: "Stream-Fork-Sub-Offset",
          },
        );
      };
      if (anchor >= tail) overshoot("names data past the source's tail");
      const read = await this.#readRange(source, anchor, { maxBytes: 1, maxRecords: 1 });
      const value = read.values[0] ?? new Uint8Array(0);
      const json = isJsonStream(sourceMeta);
      const size = json ? jsonRecordMessages(value).length : value.length;
      if (sub > size)
        overshoot(
          `is past the end of the append at the fork offset (${size} ${json ? "messages" : "bytes"})`,
        );
      if (sub === size) offset = anchor + 1;
      else copy = json ? jsonValuePrefix(value, sub) : value.slice(0, sub);
    }
    return {
      source,
      copy,
      fork: { source: source.name, source_path: sourcePath, anchor, sub_offset: sub, offset },
    };
  }

  // ---------------------------------------------------------------------------------------------
  // Append and close

  /**
   * Appends, closes, or both ({@link Streams.append}); the checks in the protocol's order: closed,
   * empty body, content type, JSON, then the producer and `Stream-Seq` (module comment).
   */
  async append(request: StreamAppendRequest): Promise<StreamAppendResult> {
    const path = request.path;
    const s = this.#use(path, { touch: true });
    const action = `Cannot append to stream ${JSON.stringify(path)}`;
    const meta = this.#meta(s);
    const hasBody = request.body.length > 0;
    if (request.producer !== undefined) this.#checkProducer(request.producer, action);
    if (
      request.streamSeq !== undefined &&
      encoder.encode(request.streamSeq).length > streamSeqBytesMax
    )
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: Stream-Seq is over ${streamSeqBytesMax} bytes`,
        {
          parameter: "Stream-Seq",
        },
      );
    if (meta.closed !== undefined) return this.#answerClosed(s, request, action);
    if (!hasBody && !request.close)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: the body is empty (an empty POST is allowed only with Stream-Closed: true)`,
      );
    let value: Uint8Array | null = null;
    if (hasBody) {
      if (request.contentType === undefined || mediaType(request.contentType) === "")
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: Content-Type is required with a body`,
          {
            parameter: "Content-Type",
          },
        );
      if (mediaType(request.contentType) !== mediaType(meta.content_type))
        throw new BrokerError(
          Errors.contentTypeMismatch,
          `${action}: Content-Type ${JSON.stringify(request.contentType)} differs from the stream's ${JSON.stringify(meta.content_type)}`,
        );
      if (isJsonStream(meta)) {
        const json = jsonAppendValue(request.body, action);
        if (json.messages === 0)
          throw new BrokerError(
            Errors.invalidRequest,
            `${action}: an empty JSON array appends nothing`,
          );
        value = json.value;
      } else value = request.body;
    }
    if (request.close) return this.#admin.run(() => this.#closeLocked(s, value, request, action));
    await this.#enter(s, path);
    try {
      return await this.#appendChecked(s, value as Uint8Array, request, action);
    } finally {
      this.#leave(s);
    }
  }

  #checkProducer(producer: StreamProducer, action: string): void {
    const bytes = encoder.encode(producer.id).length;
    if (bytes === 0 || bytes > streamProducerIdBytesMax)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: Producer-Id must be 1 to ${streamProducerIdBytesMax} bytes`,
        { parameter: "Producer-Id" },
      );
  }

  /** Enters the append gate: waits out a close in progress, refuses closed and deleted streams. */
  async #enter(s: StreamState, path: string): Promise<void> {
    for (;;) {
      if (s.removed) throw notFound(path);
      const meta = this.#meta(s);
      if (meta.deleted === true) throw gone(path);
      if (meta.closed !== undefined)
        throw this.#closedError(s, `Cannot append to stream ${JSON.stringify(path)}`);
      if (s.closing === null) break;
      await s.closing;
    }
    s.inFlight++;
  }

  #leave(s: StreamState): void {
    s.inFlight--;
    if (s.inFlight === 0) s.drained?.();
  }

  #closedError(s: StreamState, action: string): BrokerError {
    const meta = this.#meta(s);
    const next = meta.closed?.offset ?? this.#tail(s);
    return new BrokerError(Errors.streamClosed, `${action}: the stream is closed`, {
      next_offset: next,
    });
  }

  /** An append that arrives when the stream is closed (protocol §5.2, §5.2.1). */
  #answerClosed(s: StreamState, request: StreamAppendRequest, action: string): StreamAppendResult {
    const closed = this.#meta(s).closed as NonNullable<StreamMeta["closed"]>;
    const p = request.producer;
    const by = closed.producer;
    if (
      p !== undefined &&
      by !== undefined &&
      p.id === by.id &&
      p.epoch === by.epoch &&
      p.seq === by.seq
    )
      return {
        outcome: "duplicate",
        nextOffset: closed.offset,
        closed: true,
        producer: { epoch: p.epoch, seq: p.seq },
      };
    if (request.close && request.body.length === 0)
      return { outcome: "closed", nextOffset: closed.offset, closed: true };
    throw this.#closedError(s, action);
  }

  /**
   * Closes `s` (module comment): shuts the gate, waits for the appends inside, appends the final
   * record if any, then records `closed` durably. Runs under the admin mutex.
   */
  async #closeLocked(
    s: StreamState,
    value: Uint8Array | null,
    request: StreamAppendRequest,
    action: string,
  ): Promise<StreamAppendResult> {
    if (s.removed) throw notFound(request.path);
    if (this.#meta(s).deleted === true) throw gone(request.path);
    if (this.#meta(s).closed !== undefined) return this.#answerClosed(s, request, action);
    let release!: () => void;
    s.closing = new Promise((resolve) => (release = resolve));
    try {
      if (s.inFlight > 0) await new Promise<void>((resolve) => (s.drained = resolve));
      s.drained = null;
      let result: StreamAppendResult | null = null;
      if (value !== null) result = await this.#appendChecked(s, value, request, action);
      else if (request.producer !== undefined) this.#checkEpoch(s, request.producer, action);
      const offset = this.#tail(s);
      const producer = request.producer;
      await this.#topics.updateStream(s.name, (meta) => ({
        ...meta,
        closed: {
          offset,
          ...(producer === undefined
            ? {}
            : { producer: { id: producer.id, epoch: producer.epoch, seq: producer.seq } }),
        },
      }));
      this.#notify(s);
      this.#logger.log("info", "stream.closed", { stream: request.path, offset });
      return {
        outcome: result?.outcome ?? "closed",
        nextOffset: offset,
        closed: true,
        ...(producer === undefined
          ? {}
          : { producer: result?.producer ?? { epoch: producer.epoch, seq: producer.seq } }),
      };
    } finally {
      s.closing = null;
      release();
    }
  }

  /** A close-only request with producer headers: a stale epoch is fenced (403) like an append. */
  #checkEpoch(s: StreamState, producer: StreamProducer, action: string): void {
    const state = this.#producers.peek(this.#producerId(s, producer.id), {
      topic: s.name,
      partition: 0,
    });
    if (state !== undefined && producer.epoch < state.epoch)
      throw new BrokerError(
        Errors.producerFenced,
        `${action}: producer ${JSON.stringify(producer.id)} epoch ${producer.epoch} is fenced by epoch ${state.epoch}`,
        { expected_epoch: state.epoch },
      );
  }

  /** Appends one record, checking `Stream-Seq` (after the producer's duplicate check, protocol §5.2.1). */
  async #appendChecked(
    s: StreamState,
    value: Uint8Array,
    request: StreamAppendRequest,
    action: string,
  ): Promise<StreamAppendResult> {
    const seq = request.streamSeq;
    if (seq === undefined) return this.#appendRecord(s, value, null, request.producer, action);
    return s.seqLock.run(async () => {
      const p = request.producer;
      if (p !== undefined) {
        const state = this.#producers.peek(this.#producerId(s, p.id), {
          topic: s.name,
          partition: 0,
        });
        if (state !== undefined && state.epoch === p.epoch && p.seq < state.nextSequence)
          return this.#appendRecord(s, value, encoder.encode(seq), p, action);
      }
      const last = await this.#lastSeq(s);
      if (last !== null && compareUtf8(seq, last) <= 0)
        throw new BrokerError(
          Errors.streamSeqConflict,
          `${action}: Stream-Seq ${JSON.stringify(seq)} is not above the last one, ${JSON.stringify(last)}`,
        );
      const result = await this.#appendRecord(s, value, encoder.encode(seq), p, action);
      if (result.outcome === "appended") s.lastSeq = seq;
      return result;
    });
  }

  /** The producer id es-broker keeps a stream's `Producer-Id` under: scoped to this incarnation of the stream. */
  #producerId(s: StreamState, id: string): string {
    const bytes = encoder.encode(`${this.#meta(s).id}\n${id}`);
    const digest = new Uint32Array(4);
    murmur3x86_128(bytes, { start: 0, end: bytes.length }, digest);
    let hex = "";
    for (const word of digest) hex += word.toString(16).padStart(8, "0");
    return `stream:${hex}`;
  }

  /** Appends one record (through the producer state with a producer) and maps the outcome (module comment). */
  async #appendRecord(
    s: StreamState,
    value: Uint8Array,
    key: Uint8Array | null,
    producer: StreamProducer | undefined,
    action: string,
  ): Promise<StreamAppendResult> {
    checkRecordSize(value, action);
    const batch = new EntryBatchBuilder(value.length + (key?.length ?? 0) + 32)
      .add(key, value)
      .build();
    const base = this.#base(s);
    if (producer === undefined) {
      const r = await this.#produceFn({ topic: s.name, partition: 0, batch });
      return { outcome: "appended", nextOffset: base + r.spans[0].baseOffset + 1, closed: false };
    }
    const id = this.#producerId(s, producer.id);
    const where = { topic: s.name, partition: 0 };
    const before = this.#producers.peek(id, where);
    if (before !== undefined && producer.epoch > before.epoch && producer.seq !== 0)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: producer ${JSON.stringify(producer.id)} starts epoch ${producer.epoch} at Producer-Seq ${producer.seq}; a new epoch starts at 0`,
        { parameter: "Producer-Seq" },
      );
    const duplicate = (): StreamAppendResult => {
      const now = this.#producers.peek(id, where);
      return {
        outcome: "duplicate",
        nextOffset: this.#tail(s),
        closed: false,
        producer: {
          epoch: producer.epoch,
          seq: Math.max(producer.seq, (now?.nextSequence ?? 1) - 1),
        },
      };
    };
    let result: ProduceResult;
    try {
      result = await this.#produceFn({
        topic: s.name,
        partition: 0,
        batch,
        producer: { id, epoch: producer.epoch, sequence: producer.seq },
      });
    } catch (err) {
      if (!(err instanceof BrokerError)) throw err;
      const who = `${action}: producer ${JSON.stringify(producer.id)} (epoch ${producer.epoch}, Producer-Seq ${producer.seq})`;
      switch (err.kind) {
        case Errors.producerFenced:
          throw new BrokerError(Errors.producerFenced, `${who} is fenced by a newer epoch`, {
            expected_epoch: err.details?.expected_epoch,
          });
        case Errors.duplicateSequence:
          return duplicate();
        case Errors.unknownProducer:
        case Errors.outOfOrderSequence: {
          const expected = Number(err.details?.expected_sequence ?? 0);
          throw new BrokerError(
            Errors.outOfOrderSequence,
            `${who}: sequence gap, expected ${expected}`,
            {
              expected_sequence: expected,
              received_sequence: producer.seq,
            },
          );
        }
        default:
          throw err;
      }
    }
    if (result.duplicate === true) {
      const d = duplicate();
      const span = result.spans[result.spans.length - 1];
      return span === undefined ? d : { ...d, nextOffset: base + span.baseOffset + span.count };
    }
    return {
      outcome: "appended",
      nextOffset: base + result.spans[0].baseOffset + 1,
      closed: false,
      producer: { epoch: producer.epoch, seq: producer.seq },
    };
  }

  /** The last `Stream-Seq` of `s`: the key of its last keyed record, read back from the log once per start. */
  async #lastSeq(s: StreamState): Promise<string | null> {
    if (s.lastSeq !== undefined) return s.lastSeq;
    const log = s.topic.partitions[0];
    const decoder = new TextDecoder();
    const cursor = new RecordCursor();
    let end = log.highWatermark;
    const window = fetchRecordsDefault;
    while (end > log.logStartOffset) {
      const start = Math.max(log.logStartOffset, end - window);
      let found: string | null = null;
      for (let at = start; at < end; ) {
        const r = await this.#fetchFn({
          topic: s.name,
          partition: 0,
          offset: at,
          maxRecords: end - at,
          maxBytes: fetchBytesMax,
        });
        cursor.reset(r.records.bytes);
        for (let pos = 0; pos < r.records.bytes.length; pos += cursor.sizeBytes) {
          if (cursor.decode(pos) !== DecodeStatus.Ok) break;
          const key = cursor.key();
          if (key !== null) found = decoder.decode(key);
        }
        if (r.nextOffset <= at) break;
        at = r.nextOffset;
      }
      if (found !== null) {
        s.lastSeq = found;
        return found;
      }
      end = start;
    }
    s.lastSeq = null;
    return null;
  }

  // ---------------------------------------------------------------------------------------------
  // Read

  /**
   * Reads from a position across fork boundaries, waiting up to `waitMs` when there is no data and
   * the stream is open ({@link Streams.read}). Closure is read before the data it is judged against.
   */
  async read(request: StreamReadRequest): Promise<StreamReadResult> {
    const s = this.#use(request.path, { touch: true });
    const tail = this.#tail(s);
    const position =
      request.position === "start" ? 0 : request.position === "now" ? tail : request.position;
    if (position > tail)
      throw new BrokerError(
        Errors.invalidRequest,
        `Cannot read stream ${JSON.stringify(request.path)} at ${formatStreamOffset(position)}: past its tail ${formatStreamOffset(tail)}`,
        { parameter: "offset" },
      );
    let closed = this.#meta(s).closed;
    let values: Uint8Array[] = [];
    let next = position;
    if (request.position !== "now") {
      const r = await this.#readRange(s, position, { maxBytes: request.maxBytes });
      values = r.values;
      next = r.next;
    }
    const atEnd = (at: number) => closed !== undefined && at >= closed.offset;
    if (values.length === 0 && request.waitMs > 0 && !atEnd(next) && !request.signal?.aborted) {
      await this.#wait(s, next, request.waitMs, request.signal);
      this.#checkStillThere(s, request.path);
      // Whether it is closed is read before the data, so EOF is never reported short of the final record.
      closed = this.#meta(s).closed;
      const r = await this.#readRange(s, next, { maxBytes: request.maxBytes });
      values = r.values;
      next = r.next;
      s.lastAccessMs = this.#clock.nowMs();
    }
    return {
      info: this.#info(s),
      values,
      start: position,
      next,
      upToDate: next >= this.#tail(s),
      closed: atEnd(next),
    };
  }

  /** Waits for data past `position`, closure, deletion, `waitMs` or abort ({@link Streams.waitForData}). */
  async waitForData(request: {
    path: string;
    position: number;
    waitMs: number;
    signal?: AbortSignal;
  }): Promise<void> {
    const s = this.#use(request.path, { touch: true });
    await this.#wait(s, request.position, request.waitMs, request.signal);
    this.#checkStillThere(s, request.path);
    s.lastAccessMs = this.#clock.nowMs();
  }

  /**
   * After a wait: a stream deleted or expired meanwhile ends the read as a new request would be
   * answered (404, or 410 when soft-deleted), instead of an empty answer a live reader repeats.
   */
  #checkStillThere(s: StreamState, path: string): void {
    if (s.removed || s.removing) throw notFound(path);
    if (this.#meta(s).deleted === true) throw gone(path);
  }

  /** The stream's description without renewing its TTL ({@link Streams.head}). */
  head(path: string): StreamInfo {
    return this.#info(this.#use(path, { touch: false }));
  }

  /** A cursor for a live answer (`cursor.ts`). */
  cursor(clientCursor: string | undefined): string {
    return this.#cursors.next(clientCursor);
  }

  /** Resolves when `s` has data past `position` (its own appends only), is closed or deleted, after `waitMs`, or on abort. */
  #wait(s: StreamState, position: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const log = s.topic.partitions[0];
      let done = false;
      let unsubscribeAbort: (() => void) | null = null;
      const finish = () => {
        if (done) return;
        done = true;
        unsubscribe();
        s.listeners.delete(check);
        timer.cancel();
        unsubscribeAbort?.();
        resolve();
      };
      const check = () => {
        const meta = this.#meta(s);
        if (
          s.removed ||
          s.removing ||
          log.closed ||
          meta.deleted === true ||
          meta.closed !== undefined ||
          this.#tail(s) > position
        )
          finish();
      };
      const unsubscribe = log.subscribe(check);
      s.listeners.add(check);
      const timer = this.#clock.setTimer(waitMs, finish);
      // One listener per signal (lib/abort.ts): waits in flight on a connection share its signal.
      if (signal !== undefined) unsubscribeAbort = onAbort(signal, finish);
      if (signal?.aborted) finish();
      check();
    });
  }

  /**
   * The values of the records of `s` from `position` on, across fork boundaries (a fork's
   * positions below its fork point come from its source, never past that point), up to about
   * `maxBytes` (at least one record).
   */
  async #readRange(
    s: StreamState,
    position: number,
    limits: { maxBytes: number; maxRecords?: number },
  ): Promise<{ values: Uint8Array[]; next: number }> {
    const { maxBytes } = limits;
    const values: Uint8Array[] = [];
    const cursor = new RecordCursor();
    let bytes = 0;
    let at = position;
    for (;;) {
      const { state, base, limit } = this.#locate(s, at, Number.POSITIVE_INFINITY);
      const end = Math.min(
        limit,
        base + state.topic.partitions[0].highWatermark,
        position + (limits.maxRecords ?? Number.POSITIVE_INFINITY),
      );
      if (at >= end) break;
      const recordOffset = at - base;
      let r: FetchResult;
      try {
        r = await this.#fetchFn({
          topic: state.name,
          partition: 0,
          offset: recordOffset,
          maxRecords: Math.min(fetchRecordsDefault, end - at),
          maxBytes: Math.max(1, Math.min(fetchBytesMax, maxBytes - bytes)),
        });
      } catch (err) {
        if (err instanceof BrokerError && err.kind === Errors.offsetOutOfRange)
          throw new BrokerError(
            Errors.streamGone,
            `Cannot read stream ${JSON.stringify(this.#meta(s).path)} at ${formatStreamOffset(at)}: the data there was removed by retention`,
          );
        throw err;
      }
      cursor.reset(r.records.bytes);
      for (let pos = 0; pos < r.records.bytes.length; pos += cursor.sizeBytes) {
        if (cursor.decode(pos) !== DecodeStatus.Ok) break;
        if (cursor.valueLen > 0) values.push(cursor.value());
        bytes += cursor.valueLen;
      }
      const next = base + r.nextOffset;
      if (next <= at) break;
      at = Math.min(next, end);
      if (bytes >= maxBytes) break;
    }
    return { values, next: at };
  }

  /** Which stream's own records hold `position`: follows forks below their fork points. */
  #locate(
    s: StreamState,
    position: number,
    limit: number,
  ): { state: StreamState; base: number; limit: number } {
    const meta = this.#meta(s);
    const base = meta.fork?.offset ?? 0;
    if (meta.fork !== undefined && position < base) {
      const source = this.#streams.get(meta.fork.source);
      if (source === undefined || source.removed)
        throw new BrokerError(
          Errors.unavailable,
          `Cannot read stream ${JSON.stringify(meta.path)} below ${formatStreamOffset(base)}: the stream it forks, ${JSON.stringify(meta.fork.source_path)}, is missing`,
        );
      return this.#locate(source, position, Math.min(limit, base));
    }
    return { state: s, base, limit };
  }

  // ---------------------------------------------------------------------------------------------
  // Delete

  /** Deletes a stream, softly while forks read it ({@link Streams.delete}). */
  async delete(path: string): Promise<void> {
    this.#checkOpen();
    validateStreamPath(path);
    await this.#admin.run(async () => {
      const s = this.#find(path);
      if (s === null) throw notFound(path);
      if (this.#meta(s).deleted === true) throw gone(path);
      if (this.#expired(s, this.#clock.nowMs())) {
        const soft = this.#forksOf(s.name).size > 0;
        await this.#expireLocked(s);
        throw soft ? gone(path) : notFound(path);
      }
      await this.#deleteLocked(s);
    });
  }

  /**
   * Deletes a stream's topic through the topic api (`DELETE /v1/topics/{topic}`): the same as
   * deleting the stream, so forks keep reading it.
   */
  async deleteTopic(name: string): Promise<void> {
    await this.#admin.run(async () => {
      const s = this.#streams.get(name);
      if (s === undefined || s.removed) return this.#topics.delete(name);
      if (this.#meta(s).deleted === true) throw gone(this.#meta(s).path);
      await this.#deleteLocked(s);
    });
  }

  /** Deletes `s`, softly while forks read it (protocol §4.2). Under the admin mutex. */
  async #deleteLocked(s: StreamState): Promise<void> {
    if (this.#forksOf(s.name).size > 0) {
      await this.#topics.updateStream(s.name, (meta) => ({ ...meta, deleted: true }));
      this.#notify(s);
      this.#logger.log("info", "stream.soft_deleted", {
        stream: this.#meta(s).path,
        forks: this.#forksOf(s.name).size,
      });
      return;
    }
    await this.#remove(s);
  }

  /** Removes `s` and its topic, then every soft-deleted source that no fork reads any more. */
  async #remove(s: StreamState): Promise<void> {
    const meta = this.#meta(s);
    // Live readers end now: the topic's delete closes its partition and must not wait for them.
    s.removing = true;
    this.#notify(s);
    try {
      await this.#topics.delete(s.name);
    } catch (err) {
      s.removing = false;
      throw err;
    }
    this.#forget(s);
    this.#logger.log("info", "stream.deleted", { stream: meta.path, topic: s.name });
    const fork = meta.fork;
    if (fork === undefined) return;
    const source = this.#streams.get(fork.source);
    if (
      source !== undefined &&
      !source.removed &&
      this.#meta(source).deleted === true &&
      this.#forksOf(source.name).size === 0
    )
      await this.#remove(source);
  }

  #forget(s: StreamState): void {
    if (s.removed) return;
    s.removed = true;
    this.#notify(s);
    this.#streams.delete(s.name);
    this.#forks.delete(s.name);
    const fork = this.#meta(s).fork;
    if (fork !== undefined) this.#forks.get(fork.source)?.delete(s.name);
  }

  /** The registry deleted topic `name` (its deletion hook): forget the stream if it was one. */
  forgetTopic(name: string): void {
    const s = this.#streams.get(name);
    if (s !== undefined) this.#forget(s);
  }

  // ---------------------------------------------------------------------------------------------
  // Other front doors

  /**
   * Runs a produce of another front door (TCP, the topic api) into a stream's topic through the
   * append gate: refused once the stream is closed (`stream_closed`) or soft-deleted, so no
   * record ever lands after a stream's final one. It renews the stream's TTL.
   */
  async guard<T>(name: string, produce: () => Promise<T>): Promise<T> {
    const s = this.#streams.get(name);
    if (s === undefined || s.removed) return produce();
    const path = this.#meta(s).path;
    await this.#enter(s, path);
    try {
      s.lastAccessMs = this.#clock.nowMs();
      return await produce();
    } finally {
      this.#leave(s);
    }
  }

  /** True if topic `name` holds a stream this service serves. */
  isStream(name: string): boolean {
    const s = this.#streams.get(name);
    return s !== undefined && !s.removed;
  }

  /** Number of streams (tests, reports). */
  get size(): number {
    return this.#streams.size;
  }

  /** Stops the expiry sweep and wakes every live reader; later requests are refused as unavailable. */
  close(): void {
    this.#closed = true;
    this.#sweep?.cancel();
    for (const s of this.#streams.values()) this.#notify(s);
  }
}
