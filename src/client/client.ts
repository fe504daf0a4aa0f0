/**
 * A TypeScript client for the es-broker TCP protocol (`docs/protocol.md`) over `node:net`.
 *
 * One connection, many requests in flight: every call queues its frame, the frames of one
 * microtask turn go out in one write, and each is matched to its response by correlation id, so answers may
 * arrive in any order. Two produce calls to one partition made in order are appended in order
 * (the server starts requests in frame order).
 *
 * With `apiKey`, `connect` authenticates the connection (api 13) before it resolves; with `tls`,
 * it speaks TLS (`docs/security.md`). {@link IdempotentProducer} and {@link GroupConsumer} use
 * clients made this way, so they carry the key and TLS settings of the `connect` they are given.
 *
 * Every failure rejects with a {@link ClientError}: server errors carry their error-table row;
 * a lost connection rejects every pending request with `connection_closed`; a response that
 * breaks the protocol (including a fetched record failing its CRC) rejects with
 * `invalid_response` — a bad record is an error, never data.
 */
import * as net from "node:net";
import * as tls from "node:tls";
import { BrokerError } from "../broker/errors.ts";
import type {
  CommitOffsetsRequest,
  CreateTopicRequest,
  FetchRequest,
  GroupAssignment,
  GroupDescription,
  HeartbeatResult,
  JoinGroupRequest,
  ProduceResult,
  ProducerIdentity,
  RecordSet,
  ReplicaFetchResult,
  TopicDescription,
} from "../broker/types.ts";
import { requestBytesMax, tcpEndLingerMs } from "../lib/limits.ts";
import { encodeCommitOffsetsRequest } from "../protocol/apis/commit-offsets.ts";
import {
  decodeCreateTopicResponse,
  encodeCreateTopicRequest,
} from "../protocol/apis/create-topic.ts";
import {
  decodeDeleteTopicResponse,
  encodeDeleteTopicRequest,
} from "../protocol/apis/delete-topic.ts";
import {
  decodeDescribeGroupResponse,
  encodeDescribeGroupRequest,
} from "../protocol/apis/describe-group.ts";
import {
  decodeFetchResponse,
  decodeFetchResponseHeader,
  encodeFetchRequest,
  fetchResponseHeaderBytes,
  type FetchResponseHeader,
} from "../protocol/apis/fetch.ts";
import { decodeHeartbeatResponse, encodeHeartbeatRequest } from "../protocol/apis/heartbeat.ts";
import {
  decodeIdempotentProduceResponse,
  encodeIdempotentProduceRequest,
} from "../protocol/apis/idempotent-produce.ts";
import {
  decodeInitProducerEpochResponse,
  encodeInitProducerEpochRequest,
} from "../protocol/apis/init-producer-epoch.ts";
import { decodeJoinGroupResponse, encodeJoinGroupRequest } from "../protocol/apis/join-group.ts";
import { encodeLeaveGroupRequest } from "../protocol/apis/leave-group.ts";
import { decodeListGroupsResponse, encodeListGroupsRequest } from "../protocol/apis/list-groups.ts";
import {
  decodeListOffsetsResponse,
  decodeListOffsetsResponseV1,
  encodeListOffsetsRequest,
  type ListOffsetsResult,
  type ListOffsetsResultV1,
} from "../protocol/apis/list-offsets.ts";
import {
  decodeMetadataResponse,
  decodeMetadataV1Response,
  encodeMetadataRequest,
  type MetadataV1,
} from "../protocol/apis/metadata.ts";
import { decodeProduceResponse, encodeProduceRequest } from "../protocol/apis/produce.ts";
import {
  decodeEmptyResponse,
  decodeErrorBody,
  decodeResponseHeader,
  responseLengthMin,
} from "../protocol/envelope.ts";
import { FrameDecoder } from "../protocol/frame.ts";
import {
  decodeReplicaFetchResponse,
  encodeReplicaFetchRequest,
  type ReplicaFetchRequestFields,
} from "../protocol/apis/replica-fetch.ts";
import {
  decodeAuthenticateResponse,
  encodeAuthenticateRequest,
  type AuthenticateResult,
} from "../protocol/apis/authenticate.ts";
import type { EntryBatch } from "../storage/record.ts";
import { ClientError } from "./errors.ts";
import {
  buildEntryBatch,
  checkFetchedRecordChunks,
  checkFetchedRecords,
  FetchedRecordCursor,
  recordObjects,
  type FetchedRecord,
  type ProduceRecord,
} from "./records.ts";
import { errorMessage } from "../lib/errors.ts";
import { copyRead, ownBytes, sharedReadBuffer } from "../lib/read-slab.ts";
import { HandleWrites, handleWritesAvailable } from "./handle-writes.ts";
import { crc32IsNative } from "../lib/crc32.ts";
import { installFastCrc32 } from "./crc.ts";

export { ClientError, ClientErrorCodes } from "./errors.ts";
export {
  IdempotentProducer,
  producerInFlightDefault,
  type IdempotentProducerOptions,
} from "./producer.ts";
export { GroupConsumer, type GroupConsumerOptions, type ConsumedBatch } from "./consumer.ts";
export {
  ClusterClient,
  type ClusterClientOptions,
  type LeaderRouter,
  isRoutingError,
  mayBeStored,
} from "./cluster.ts";
export {
  expandSpans,
  buildEntryBatch,
  checkFetchedRecordChunks,
  checkFetchedRecords,
  decodeFetchedRecords,
  FetchedRecordCursor,
} from "./records.ts";
export type { FetchedRecord, ProduceRecord, RecordPosition } from "./records.ts";

/** Options of {@link TcpClient.connect}. */
export interface TcpClientOptions {
  host: string;
  port: number;
  /**
   * Time limit for connecting and for each request, in ms (default 30 000). A fetch's limit is
   * this plus its `waitMs`. A request past its limit rejects with `timeout`; its late answer is
   * ignored.
   */
  timeoutMs?: number;
  /** Largest response frame accepted, in bytes (default `requestBytesMax`, 256 MiB). */
  maxResponseBytes?: number;
  /**
   * An API key (`esb_…`): the connection authenticates with it before `connect` resolves. Needed
   * once the broker has keys. It is sent only inside the Authenticate request and never appears
   * in an error message. Whitespace around it (the newline of a file written by `keys create
   * --out`) is ignored.
   */
  apiKey?: string;
  /**
   * Connect over TLS with these `node:tls` options: `ca` (the broker's CA, PEM), `cert` and `key`
   * (a client certificate, for mutual TLS), `rejectUnauthorized: false` only to skip checking the
   * broker's certificate (`--tls-insecure`), `servername`. Plain TCP without it.
   */
  tls?: tls.ConnectionOptions;
}

/**
 * `max_records` of a {@link TcpClient.reader}'s fetches unless the request gives one; with
 * {@link readerBytesDefault}, `max_bytes` bounds an answer first for records over ~100 B.
 */
export const readerRecordsDefault = 20_000;
/** `max_bytes` of a {@link TcpClient.reader}'s fetches unless the request gives one (2 MiB; two answers in memory at a time). */
export const readerBytesDefault = 2 * 1024 * 1024;

/** What {@link TcpClient.reader} returns: one partition read in order, one fetch ahead. */
export interface FetchReader {
  /**
   * The next answer (records checked). Call it again only once the previous call has resolved.
   * @throws ClientError as {@link TcpClient.fetch}.
   */
  next(): Promise<FetchResponse>;
  /** Sends no more fetches (one already in flight is answered and dropped). */
  close(): void;
}

/** Arguments of {@link TcpClient.fetch}: the broker's fetch request without the in-process abort signal. */
export type FetchOptions = Omit<FetchRequest, "signal">;

/**
 * What {@link TcpClient.fetch} resolves to. Every record in it was checked (CRC, increasing
 * offsets) before the fetch resolved. Read the records either as objects (`records`, built on
 * first access) or, without an object per record, with a cursor:
 *
 * ```ts
 * const res = await client.fetch({ topic, partition, offset });
 * for (const c = res.cursor(); c.next(); ) handle(c.offset, c.key(), c.value());
 * ```
 */
export interface FetchResponse {
  /** Checked records, in offset order; keys and values are views of the response. Built on first access, then the same array. */
  readonly records: FetchedRecord[];
  /** How many records came (`records.length`, without building them). */
  readonly recordCount: number;
  /** The offset to fetch next. */
  readonly nextOffset: number;
  /** One past the last durable offset of the partition. */
  readonly highWatermark: number;
  /** First offset still stored. */
  readonly logStartOffset: number;
  /** A new cursor over the checked records, from the first (no object per record). */
  cursor(): FetchedRecordCursor;
}

/** {@link FetchResponse} over checked records: one run, or the runs of a response that arrived in chunks. */
class CheckedFetchResponse implements FetchResponse {
  readonly recordCount: number;
  readonly nextOffset: number;
  readonly highWatermark: number;
  readonly logStartOffset: number;
  readonly #runs: RecordSet | readonly RecordSet[];
  #objects: FetchedRecord[] | null = null;

  /**
   * @param fields the fixed fields of the response.
   * @param runs records that passed {@link checkFetchedRecords} (or {@link checkFetchedRecordChunks}), `fields.recordCount` in all.
   */
  constructor(
    fields: Omit<FetchResponseHeader, "recordsBytes">,
    runs: RecordSet | readonly RecordSet[],
  ) {
    this.recordCount = fields.recordCount;
    this.nextOffset = fields.nextOffset;
    this.highWatermark = fields.highWatermark;
    this.logStartOffset = fields.logStartOffset;
    this.#runs = runs;
  }

  get records(): FetchedRecord[] {
    return (this.#objects ??= recordObjects(this.#runs, this.recordCount));
  }

  cursor(): FetchedRecordCursor {
    return new FetchedRecordCursor(this.#runs);
  }
}

/**
 * Decodes and checks a fetch response body that arrived in several chunks (`chunks`, in order),
 * reading the records where they lie instead of joining the chunks into one buffer.
 * @throws ProtocolError / ClientError as the one-buffer path: malformed header, `records_bytes`
 *   that disagrees with the bytes present, a record that fails its checks.
 */
function decodeFetchResponseChunks(
  chunks: readonly Uint8Array[],
  requestedOffset: number,
): FetchResponse {
  let totalBytes = 0;
  for (const chunk of chunks) totalBytes += chunk.length;
  const headerBytes =
    chunks.length > 0 && chunks[0].length >= fetchResponseHeaderBytes
      ? chunks[0]
      : joinChunks(chunks, Math.min(totalBytes, fetchResponseHeaderBytes));
  const header = decodeFetchResponseHeader(headerBytes);
  if (header.recordsBytes !== totalBytes - fetchResponseHeaderBytes) {
    // Let the one-buffer decoder name what is wrong.
    const result = decodeFetchResponse(joinChunks(chunks, totalBytes));
    checkFetchedRecords(result, requestedOffset);
    return new CheckedFetchResponse(
      { ...result, recordCount: result.records.count },
      result.records,
    );
  }
  const runs = checkFetchedRecordChunks(
    dropPrefix(chunks, fetchResponseHeaderBytes),
    { records: { count: header.recordCount }, nextOffset: header.nextOffset },
    requestedOffset,
  );
  return new CheckedFetchResponse(header, runs);
}

/**
 * The `next_offset` of a Fetch success frame given as the chunks it arrived in (after `length`),
 * or null if the frame is too short to hold it or it is above 2^53 − 1 (the full decode then
 * says what is wrong).
 */
function fetchNextOffset(chunks: readonly Uint8Array[]): number | null {
  const end = responseLengthMin + 24;
  let head = chunks[0];
  if (head.length < end) {
    let total = 0;
    for (const chunk of chunks) total += chunk.length;
    if (total < end) return null;
    head = joinChunks(chunks, end);
  }
  const at = responseLengthMin + 16;
  const hi = ((head[at] << 24) | (head[at + 1] << 16) | (head[at + 2] << 8) | head[at + 3]) >>> 0;
  const lo =
    ((head[at + 4] << 24) | (head[at + 5] << 16) | (head[at + 6] << 8) | head[at + 7]) >>> 0;
  return hi > 0x1f_ffff ? null : hi * 0x1_0000_0000 + lo;
}

/** `chunks` without their first `bytes` bytes (e.g. a frame's header), empty views left out. */
function dropPrefix(chunks: readonly Uint8Array[], bytes: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  let skip = bytes;
  for (const chunk of chunks) {
    if (skip >= chunk.length) skip -= chunk.length;
    else {
      out.push(skip === 0 ? chunk : chunk.subarray(skip));
      skip = 0;
    }
  }
  return out;
}

/** The first `length` bytes of `chunks`, joined into one new buffer. */
function joinChunks(chunks: readonly Uint8Array[], length: number): Uint8Array {
  const out = new Uint8Array(length);
  let filled = 0;
  for (const chunk of chunks) {
    if (filled >= length) break;
    const n = Math.min(chunk.length, length - filled);
    out.set(n === chunk.length ? chunk : chunk.subarray(0, n), filled);
    filled += n;
  }
  return out;
}

/** Default time limit of {@link TcpClientOptions.timeoutMs}, in ms. */
export const clientTimeoutMsDefault = 30_000;

/**
 * Timed-out correlation ids remembered so their late answers are dropped quietly. Past this many,
 * the oldest is forgotten; a late answer to a forgotten id is then a protocol error that closes
 * the connection.
 */
const abandonedIdsMax = 10_000;

interface Pending {
  /** Decodes a success body (may throw). */
  decode(body: Uint8Array): unknown;
  /** Decodes a success body that arrived in several chunks, without joining them (fetch only; may throw). */
  decodeChunks?: (body: readonly Uint8Array[]) => unknown;
  resolve(value: unknown): void;
  reject(error: ClientError): void;
  /**
   * Fetch only: called with the answer's `next_offset` as soon as a success frame has arrived,
   * before its records are checked (what {@link FetchReader} sends its next fetch from).
   */
  onNextOffset?: (nextOffset: number) => void;
  /** When it times out (`performance.now()`, ms). */
  deadline: number;
  /** Its time limit, in ms, for the message. */
  timeoutMs: number;
}

const resolved = Promise.resolve();

/** Node, where plain connections read through `onread` into the shared buffer (`lib/read-slab.ts`). */
const nodeSharedReads =
  (globalThis as { Deno?: unknown }).Deno === undefined &&
  (globalThis as { Bun?: unknown }).Bun === undefined;

/** Where a shared-read connection's chunks go: the client once it exists, `early` before. */
interface SharedReads {
  sink: ((chunk: Uint8Array) => void) | null;
  early: Uint8Array[];
}

/**
 * Said of a TLS connection the broker closed (during the handshake, or before answering
 * anything) when this client sent no certificate: a broker requiring client certificates does
 * that, though its `certificate_required` alert does not always arrive first (Deno's TLS server
 * closes before sending it). The CLI recognizes the words to name `--tls-cert`/`--tls-key`.
 */
export const closedWithoutCertificateNote =
  "the broker closed the TLS connection, and this client sent no certificate: the broker may require one (mutual TLS), or it closed the connection for another reason";

/**
 * Said of a TLS connection the broker closed before answering anything when this client sent a
 * certificate: a broker checking client certificates closes the connection after the handshake
 * when it refuses one (TLS 1.3 finishes the client's side of the handshake first).
 */
export const refusedCertificateNote =
  "the broker may have refused this client's certificate, or closed the connection for another reason (its log says which): a client certificate must be issued by the broker's --tls-client-ca and allow client authentication";

/**
 * The message of a TLS error without OpenSSL's raw error line: `80EC…:error:0A00045C:SSL
 * routines:ssl3_read_bytes:tlsv13 alert certificate required:…:SSL alert number 116` becomes
 * `the broker sent TLS alert "certificate required"`. Other messages are returned as they are.
 */
export function tlsErrorMessage(error: Error): string {
  const alert =
    /^[0-9A-F]+:error:[0-9A-F]+:SSL routines:[^:]*:(?:tlsv1[0-9]?|sslv3) alert ([a-z ]+):/i.exec(
      error.message,
    );
  return alert === null ? error.message : `the broker sent TLS alert "${alert[1]}"`;
}

/** Whether `options` connect over TLS with a client certificate. */
function tlsWithCertificate(options: TcpClientOptions): boolean {
  return options.tls !== undefined && !tlsWithoutCertificate(options);
}

/** Whether `options` connect over TLS without a client certificate. */
function tlsWithoutCertificate(options: TcpClientOptions): boolean {
  return (
    options.tls !== undefined && options.tls.cert === undefined && options.tls.pfx === undefined
  );
}

/**
 * Whether a failed TLS handshake reads as the peer closing the connection (a reset, a hang-up, an
 * end before the handshake finished), rather than an alert with a reason or this client refusing
 * the broker's certificate, each of which says what it is.
 */
function closedByPeer(error: Error): boolean {
  const e = error as { code?: string };
  if (typeof e.code === "string" && /^ERR_SSL_|CERT|ALTNAME|SELF_SIGNED|UNABLE_TO/.test(e.code))
    return false;
  return /ECONNRESET|EPIPE|socket hang up|disconnected before secure TLS connection|connection reset|closed|unexpected ?eof|end of file/i.test(
    `${e.code ?? ""} ${error.message}`,
  );
}

/** A connection to one broker's TCP port. Create with {@link TcpClient.connect}. */
export class TcpClient {
  readonly #socket: net.Socket;
  readonly #timeoutMs: number;
  readonly #decoder: FrameDecoder;
  readonly #pending = new Map<number, Pending>();
  /** Correlation ids given up on (timed out): their late answers are dropped quietly. */
  readonly #abandoned = new Set<number>();
  #nextCorrelationId = 1;
  #closedError: ClientError | null = null;
  #closed: Promise<void>;
  /** Whether any answer arrived on this connection. */
  #answered = false;
  /** True until the first bytes arrive on a connection made without TLS (see {@link #onData}). */
  #plainUnread: boolean;
  /** Frames of this turn not yet written (see {@link #write}). */
  #out: Uint8Array[] = [];
  readonly #flushTurn = (): void => this.#flush();
  /**
   * Plain connections on Node write on the socket's handle (`handle-writes.ts`): no `Writable`
   * bookkeeping per request, as the broker answers; null elsewhere (TLS, Deno, Bun).
   */
  readonly #direct: HandleWrites | null;
  /** One timer for every pending request's time limit, due at `#sweepAt` (see {@link #sweep}). */
  #sweepTimer: ReturnType<typeof setTimeout> | null = null;
  #sweepAt = 0;

  private constructor(socket: net.Socket, options: TcpClientOptions, reads: SharedReads | null) {
    this.#socket = socket;
    this.#timeoutMs = options.timeoutMs ?? clientTimeoutMsDefault;
    this.#decoder = new FrameDecoder({
      lengthMin: responseLengthMin,
      lengthMax: options.maxResponseBytes ?? requestBytesMax,
    });
    // Plain Uint8Array views of each chunk: a Buffer's subarray builds a Buffer, slower and larger,
    // for every view taken of it (each fetched key, value and CRC range).
    this.#direct = reads !== null && handleWritesAvailable() ? new HandleWrites(socket) : null;
    if (reads !== null) {
      reads.sink = (chunk) => this.#onData(chunk);
      for (const chunk of reads.early.splice(0)) this.#onData(chunk);
    } else {
      socket.on("data", (chunk: Buffer) =>
        this.#onData(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)),
      );
    }
    let error: Error | undefined;
    socket.on("error", (e) => (error = e));
    // A broker serving TLS closes a plain connection at its first bytes, unanswered: say so, since
    // from here that looks like any other closed connection.
    const plain = options.tls === undefined;
    const noCertificate = tlsWithoutCertificate(options);
    const withCertificate = tlsWithCertificate(options);
    this.#plainUnread = plain;
    this.#closed = new Promise((resolve) => {
      socket.once("close", () => {
        const unanswered = !this.#answered && this.#pending.size > 0;
        const hint =
          plain && unanswered
            ? " before answering anything (a broker serving TLS on this port closes plain connections: connect with TLS; a broker at its --max-connections bound closes new connections too: its log says which)"
            : noCertificate && unanswered && (error === undefined || closedByPeer(error))
              ? ` before answering anything: ${closedWithoutCertificateNote}`
              : withCertificate && unanswered
                ? ` before answering anything: ${refusedCertificateNote}`
                : "";
        this.#fail(
          ClientError.connectionClosed(
            `Connection to the broker closed${hint}${error ? `: ${tlsErrorMessage(error)}` : ""}`,
            error,
          ),
        );
        resolve();
      });
    });
  }

  /** Who the broker took the connection's key for (`apiKey`), or null without a key. */
  get principal(): AuthenticateResult | null {
    return this.#principal;
  }

  #principal: AuthenticateResult | null = null;

  /**
   * Connects to a broker (over TLS with `tls`) and, with `apiKey`, authenticates.
   * @throws ClientError `connection_closed` if the connection (or the TLS handshake) fails (the
   *   cause is attached), `timeout` if it takes longer than `timeoutMs`, `unauthenticated` if the
   *   broker refuses the key (the connection is then closed).
   */
  static async connect(options: TcpClientOptions): Promise<TcpClient> {
    const client = await TcpClient.#open(options);
    if (options.apiKey === undefined) return client;
    const key = options.apiKey.trim();
    try {
      client.#principal = await client.#call(
        (id) => encodeAuthenticateRequest(id, key),
        decodeAuthenticateResponse,
      );
    } catch (error) {
      await client.close();
      throw error;
    }
    return client;
  }

  static #open(options: TcpClientOptions): Promise<TcpClient> {
    // Fetched records are checked with the runtime's native CRC-32 where it has one: one call per
    // answer over combined CRCs (`checkFetchedRecordChunks`), in a user's process as in the CLI.
    if (!crc32IsNative()) installFastCrc32();
    const timeoutMs = options.timeoutMs ?? clientTimeoutMsDefault;
    return new Promise((resolve, reject) => {
      // Plain connections on Node read into the shared buffer (`lib/read-slab.ts`): no buffer of
      // their own per read. What arrives before the client exists waits in `reads.early`.
      const reads: SharedReads | null =
        options.tls === undefined && nodeSharedReads ? { sink: null, early: [] } : null;
      const socket =
        options.tls === undefined
          ? net.connect({
              host: options.host,
              port: options.port,
              noDelay: true,
              ...(reads === null
                ? {}
                : {
                    onread: {
                      buffer: sharedReadBuffer,
                      callback: (bytes: number, buffer: Uint8Array): boolean => {
                        const chunk = copyRead(buffer.subarray(0, bytes));
                        if (reads.sink !== null) reads.sink(chunk);
                        else reads.early.push(chunk);
                        return true;
                      },
                    },
                  }),
            })
          : tls.connect({ ...options.tls, host: options.host, port: options.port });
      socket.setNoDelay(true);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(
          ClientError.timeout(
            `Cannot connect to ${options.host}:${options.port}: no connection after ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      const onError = (error: Error): void => {
        clearTimeout(timer);
        const note =
          tlsWithoutCertificate(options) && closedByPeer(error)
            ? ` (${closedWithoutCertificateNote})`
            : "";
        reject(
          ClientError.connectionClosed(
            `Cannot connect to ${options.host}:${options.port}: ${tlsErrorMessage(error)}${note}`,
            error,
          ),
        );
      };
      socket.once("error", onError);
      socket.once(options.tls === undefined ? "connect" : "secureConnect", () => {
        clearTimeout(timer);
        socket.off("error", onError);
        resolve(new TcpClient(socket, options, reads));
      });
    });
  }

  /** Requests sent and not yet answered. */
  get pendingRequests(): number {
    return this.#pending.size;
  }

  /** True once the connection is closed (by either side); every call then rejects. */
  get closed(): boolean {
    return this.#closedError !== null;
  }

  /**
   * Appends records to a topic. Resolves once the broker has made them durable, with the runs of
   * consecutive offsets they got, in request order (see {@link expandSpans} for one position per
   * record).
   * @param records records, or a prebuilt entry batch (`EntryBatchBuilder`).
   * @param options.partition a partition, or omitted / −1 to let the broker pick per record.
   * @throws ClientError e.g. `topic_not_found`, `partition_not_found`, `invalid_timestamp`, `record_too_large`, `request_too_large`, `partition_fenced`, `storage_error`.
   */
  produce(
    topic: string,
    records: readonly ProduceRecord[] | EntryBatch,
    options: { partition?: number } = {},
  ): Promise<ProduceResult> {
    return this.#call((id) => {
      const batch = Array.isArray(records)
        ? buildEntryBatch(records as readonly ProduceRecord[])
        : (records as EntryBatch);
      return encodeProduceRequest(id, { topic, partition: options.partition, batch });
    }, decodeProduceResponse);
  }

  /**
   * Reads records from one partition. Every record's CRC is checked and offsets must increase
   * before this resolves; the answer hands the records out as objects or through a cursor.
   * @throws ClientError e.g. `offset_out_of_range`, `topic_not_found`, `invalid_response` for a record that fails its check.
   */
  fetch(request: FetchOptions): Promise<FetchResponse> {
    return this.#fetch(request);
  }

  /**
   * Reads one partition in order from `request.offset`, one fetch ahead: as soon as an answer has
   * arrived, before its records are checked and handed out, the reader sends the fetch that
   * follows it (from its `next_offset`), so the broker reads the next records while these are
   * checked and consumed. Each {@link FetchReader.next} resolves to the next answer, checked as
   * {@link fetch}'s are. `request.waitMs` applies to every fetch (a long-poll at the end of the
   * partition). Unless given, `maxRecords` is {@link readerRecordsDefault} and `maxBytes`
   * {@link readerBytesDefault}: a reader streams, and answers of the fetch defaults (1 000
   * records) made the round trips most of its time on a loaded machine.
   */
  reader(request: FetchOptions): FetchReader {
    let stopped = false;
    let ahead: Promise<FetchResponse> | null = null;
    const sized: FetchOptions = {
      ...request,
      maxRecords: request.maxRecords ?? readerRecordsDefault,
      maxBytes: request.maxBytes ?? readerBytesDefault,
    };
    const issue = (offset: number): Promise<FetchResponse> => {
      const answer = this.#fetch({ ...sized, offset }, (nextOffset) => {
        if (stopped || ahead !== null) return;
        ahead = issue(nextOffset);
        // Out now, not at the end of this turn: the records of this answer are checked next.
        this.#flush();
      });
      // A fetch ahead that nobody asks for (the reader was closed) must not be an unhandled rejection.
      answer.catch(() => {});
      return answer;
    };
    let current = issue(request.offset);
    return {
      next: () =>
        current.then((response) => {
          current = ahead ?? issue(response.nextOffset);
          ahead = null;
          return response;
        }),
      close: () => {
        stopped = true;
      },
    };
  }

  #fetch(
    request: FetchOptions,
    onNextOffset?: (nextOffset: number) => void,
  ): Promise<FetchResponse> {
    return this.#call(
      (id) => encodeFetchRequest(id, request),
      (body): FetchResponse => {
        const result = decodeFetchResponse(body);
        checkFetchedRecords(result, request.offset);
        return new CheckedFetchResponse(
          { ...result, recordCount: result.records.count },
          result.records,
        );
      },
      (request.waitMs ?? 0) + this.#timeoutMs,
      (chunks) => decodeFetchResponseChunks(chunks, request.offset),
      onNextOffset,
    );
  }

  /**
   * A follower's replica fetch (api 14, cluster mode; `cluster/follower.ts` calls it through the
   * runtime's connection). The records are not checked here: the follower checks every CRC
   * before it appends. Sent as version 2 when `request.topicId` is given, else version 1.
   * @throws ClientError `unauthenticated` (wrong broker credential), `not_leader`,
   *   `fenced_leader_epoch`, `inconsistent_topic_id` (the leader's copy records another topic id:
   *   docs/cluster.md "Topic ids"), `offset_out_of_range`, `topic_not_found`, `unsupported_api`
   *   (also a leader of an older version given version 2).
   */
  replicaFetch(request: ReplicaFetchRequestFields): Promise<ReplicaFetchResult> {
    return this.#call(
      (id) => encodeReplicaFetchRequest(id, request),
      decodeReplicaFetchResponse,
      request.waitMs + this.#timeoutMs,
    );
  }

  /**
   * Creates a topic. @throws ClientError `topic_exists`, `invalid_topic_name`, `invalid_config`.
   */
  createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
    return this.#call((id) => encodeCreateTopicRequest(id, request), decodeCreateTopicResponse);
  }

  /**
   * Describes topics: the named ones, or every topic when `topics` is empty or omitted.
   * @throws ClientError `topic_not_found` if any named topic does not exist.
   */
  metadata(topics: readonly string[] = []): Promise<TopicDescription[]> {
    return this.#call(
      (id) => encodeMetadataRequest(id, { topics: [...topics] }),
      decodeMetadataResponse,
    );
  }

  /**
   * Metadata version 1: the topics as {@link metadata} describes them, and the cluster (brokers,
   * controller, per-partition leader, epoch and ISR), or `cluster: null` from a single node.
   * @throws ClientError `topic_not_found`; `unsupported_api` from a broker older than version 1.
   */
  clusterMetadata(topics: readonly string[] = []): Promise<MetadataV1> {
    return this.#call(
      (id) => encodeMetadataRequest(id, { topics: [...topics] }, 1),
      decodeMetadataV1Response,
    );
  }

  /** Log start offset and high watermark of a partition. @throws ClientError `topic_not_found`, `partition_not_found`. */
  listOffsets(request: { topic: string; partition: number }): Promise<ListOffsetsResult> {
    const { topic, partition } = request;
    return this.#call(
      (id) => encodeListOffsetsRequest(id, { topic, partition }),
      decodeListOffsetsResponse,
    );
  }

  /**
   * ListOffsets version 1: the bounds of a partition and `offset`, the first offset whose record
   * timestamp is at or after `timestampMs` (ms since the epoch), or the high watermark when none
   * is (Kafka's offsetsForTimes).
   * @throws ClientError `topic_not_found`, `partition_not_found`, `not_leader`; `unsupported_api`
   *   from a broker older than version 1.
   */
  offsetForTimestamp(request: {
    topic: string;
    partition: number;
    timestampMs: number;
  }): Promise<ListOffsetsResultV1> {
    return this.#call((id) => encodeListOffsetsRequest(id, request), decodeListOffsetsResponseV1);
  }

  /** Deletes a topic and its data. @throws ClientError `topic_not_found`. */
  deleteTopic(topic: string): Promise<void> {
    return this.#call((id) => encodeDeleteTopicRequest(id, { topic }), decodeDeleteTopicResponse);
  }

  /**
   * One idempotent produce request (api 12): every record must land in one partition. A retry
   * with the same producer, epoch and sequence appends nothing and resolves with the original
   * offsets and `duplicate: true`. This call does not retry; {@link IdempotentProducer} does.
   * @throws ClientError `out_of_order_sequence` / `duplicate_sequence` / `unknown_producer`
   *   (`details.expected_sequence`), `producer_fenced` (`details.expected_epoch`), and the errors of {@link produce}.
   */
  produceIdempotent(
    topic: string,
    records: readonly ProduceRecord[] | EntryBatch,
    options: { partition?: number; producer: ProducerIdentity },
  ): Promise<ProduceResult> {
    return this.#call((id) => {
      const batch = Array.isArray(records)
        ? buildEntryBatch(records as readonly ProduceRecord[])
        : (records as EntryBatch);
      return encodeIdempotentProduceRequest(id, {
        topic,
        partition: options.partition,
        batch,
        producer: options.producer,
      });
    }, decodeIdempotentProduceResponse);
  }

  /**
   * Asks the broker for the next epoch of producer `producerId` (api 15, docs/decisions.md §20):
   * durable on the broker, and fencing the id's previous incarnation, before it resolves.
   * `atLeast` (default 0 = none) is the lowest epoch taken. In cluster mode only the controller
   * answers (`ClusterClient.coordinator()`).
   * @throws ClientError `unsupported_api` (a broker without producer epochs: use a clock epoch),
   *   `producer_epoch_exhausted`, `invalid_request`, `unavailable`, `not_leader` (not the controller).
   */
  initProducerEpoch(producerId: string, options: { atLeast?: number } = {}): Promise<number> {
    return this.#call(
      (id) => encodeInitProducerEpochRequest(id, { producerId, atLeast: options.atLeast ?? 0 }),
      decodeInitProducerEpochResponse,
    ).then((r) => r.epoch);
  }

  /** Joins a consumer group (or rejoins as `memberId`). @throws ClientError `topic_not_found`, `unknown_member`, `invalid_request`. */
  joinGroup(request: JoinGroupRequest): Promise<GroupAssignment> {
    return this.#call((id) => encodeJoinGroupRequest(id, request), decodeJoinGroupResponse);
  }

  /** Keeps a member's session alive; `rejoin` says the generation moved on. @throws ClientError `unknown_member`, `group_not_found`. */
  heartbeat(request: {
    group: string;
    memberId: string;
    generation?: number;
  }): Promise<HeartbeatResult> {
    return this.#call((id) => encodeHeartbeatRequest(id, request), decodeHeartbeatResponse);
  }

  /** Leaves a consumer group (its partitions go to the others). @throws ClientError `unknown_member`, `group_not_found`. */
  leaveGroup(request: { group: string; memberId: string }): Promise<void> {
    return this.#call((id) => encodeLeaveGroupRequest(id, request), decodeEmptyResponse);
  }

  /**
   * Commits offsets (the next offset to consume per partition), all or none, durably.
   * @throws ClientError `stale_generation`, `not_partition_owner`, `unknown_member`, `invalid_offset`.
   */
  commitOffsets(request: CommitOffsetsRequest): Promise<void> {
    return this.#call((id) => encodeCommitOffsetsRequest(id, request), decodeEmptyResponse);
  }

  /** A group's generation, members and per-partition committed offsets and lag. @throws ClientError `group_not_found`. */
  describeGroup(group: string): Promise<GroupDescription> {
    return this.#call(
      (id) => encodeDescribeGroupRequest(id, { group }),
      decodeDescribeGroupResponse,
    );
  }

  /** Every group, described. */
  listGroups(): Promise<GroupDescription[]> {
    return this.#call((id) => encodeListGroupsRequest(id), decodeListGroupsResponse);
  }

  /**
   * Closes the connection. Requests still pending reject with `connection_closed` (they may or may
   * not have been carried out). Resolves once the socket is closed. Idempotent.
   */
  close(): Promise<void> {
    if (!this.#closedError) {
      this.#fail(ClientError.connectionClosed("Connection to the broker closed by the client"));
      this.#socket.end();
      const socket = this.#socket;
      const linger = setTimeout(() => socket.destroy(), tcpEndLingerMs);
      linger.unref();
      void this.#closed.then(() => clearTimeout(linger));
    }
    return this.#closed;
  }

  /**
   * Closes the connection at once, without waiting for the broker to close its side (no linger):
   * requests still pending reject with `connection_closed`. For a connection whose answers no
   * longer matter (a broker's replica fetches when it shuts down: a stopped leader never closes
   * its side, and the linger would hold the shutdown up). Resolves once the socket is closed.
   * Idempotent.
   */
  destroy(): Promise<void> {
    if (!this.#closedError)
      this.#fail(ClientError.connectionClosed("Connection to the broker closed by the client"));
    this.#socket.destroy();
    return this.#closed;
  }

  #call<T>(
    encode: (correlationId: number) => Uint8Array,
    decode: (body: Uint8Array) => T,
    timeoutMs = this.#timeoutMs,
    decodeChunks?: (body: readonly Uint8Array[]) => T,
    onNextOffset?: (nextOffset: number) => void,
  ): Promise<T> {
    if (this.#closedError) return Promise.reject(this.#closedError);
    const id = this.#nextCorrelationId;
    this.#nextCorrelationId = id === 0xffff_ffff ? 1 : id + 1;
    let frame: Uint8Array;
    try {
      frame = encode(id);
    } catch (error) {
      if (error instanceof ClientError) return Promise.reject(error);
      if (error instanceof BrokerError)
        return Promise.reject(ClientError.fromKind(error.kind, error.message));
      return Promise.reject(error);
    }
    return new Promise<T>((resolve, reject) => {
      const deadline = performance.now() + timeoutMs;
      this.#pending.set(id, {
        decode,
        decodeChunks,
        onNextOffset,
        resolve: resolve as (value: unknown) => void,
        reject,
        deadline,
        timeoutMs,
      });
      if (this.#sweepTimer === null || deadline < this.#sweepAt) this.#armSweep(deadline);
      this.#write(frame);
    });
  }

  /** (Re)arms the one timer of the pending requests' time limits for `at` (`performance.now()`, ms). */
  #armSweep(at: number): void {
    if (this.#sweepTimer !== null) clearTimeout(this.#sweepTimer);
    this.#sweepAt = at;
    this.#sweepTimer = setTimeout(() => this.#sweep(), Math.max(0, at - performance.now()));
  }

  /**
   * Rejects every request past its time limit with `timeout` (their late answers are dropped),
   * then arms the timer for the next limit. One timer per connection rather than one per request:
   * a request costs no timer to start or to clear.
   */
  #sweep(): void {
    this.#sweepTimer = null;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    for (const [id, p] of this.#pending) {
      if (p.deadline > now) {
        if (p.deadline < next) next = p.deadline;
        continue;
      }
      this.#pending.delete(id);
      this.#abandoned.add(id);
      if (this.#abandoned.size > abandonedIdsMax)
        this.#abandoned.delete(this.#abandoned.values().next().value!);
      p.reject(ClientError.timeout(`Request ${id} got no answer within ${p.timeoutMs} ms`));
    }
    if (next !== Number.POSITIVE_INFINITY) this.#armSweep(next);
  }

  /** Queues a frame; the frames of one turn leave in one gathered write, in order. */
  #write(frame: Uint8Array): void {
    this.#out.push(frame);
    if (this.#out.length === 1) void resolved.then(this.#flushTurn);
  }

  #flush(): void {
    const out = this.#out;
    if (out.length === 0) return;
    this.#out = [];
    if (this.#closedError) return;
    const socket = this.#socket;
    if (this.#direct !== null) {
      // A request's backpressure is its time limit, as with `socket.write` before.
      if (!socket.destroyed) this.#direct.write(out);
      return;
    }
    if (out.length === 1) {
      socket.write(out[0]);
      return;
    }
    socket.cork();
    for (const frame of out) socket.write(frame);
    socket.uncork();
  }

  #onData(chunk: Uint8Array): void {
    if (this.#closedError) return;
    if (this.#plainUnread) {
      this.#plainUnread = false;
      // A TLS record (handshake 0x16 or alert 0x15, version 3.x) where a frame should start: some
      // TLS servers (Bun's, Deno's) answer a plain client with an alert before closing. Read as a
      // frame it would be a huge length; say what it is instead.
      if (chunk.length >= 2 && (chunk[0] === 0x15 || chunk[0] === 0x16) && chunk[1] === 0x03) {
        this.#fail(
          ClientError.connectionClosed(
            "Connection to the broker closed: the broker answered with TLS (a broker serving TLS on this port closes plain connections: connect with TLS)",
          ),
        );
        this.#socket.destroy();
        return;
      }
    }
    this.#decoder.push(chunk);
    for (;;) {
      let frame: Uint8Array[] | null;
      try {
        // A large answer (a fetch) arrives in many socket chunks: it is read where it lies
        // rather than joined into one new buffer.
        frame = this.#decoder.nextChunks();
      } catch (error) {
        this.#fail(
          ClientError.invalidResponse(`Cannot read response: ${errorMessage(error)}`, error),
        );
        this.#socket.destroy();
        return;
      }
      if (frame === null) {
        // Bytes waiting for the rest of their frame must not keep a shared read slab alive.
        if (this.#decoder.bufferedBytes > 0) this.#decoder.compact();
        return;
      }
      this.#onFrame(frame);
    }
  }

  /** Handles one response frame, given as the chunks it arrived in. */
  #onFrame(chunks: Uint8Array[]): void {
    this.#answered = true;
    const whole = chunks.length === 1 ? chunks[0] : null;
    // A frame is at least responseLengthMin long; its header may straddle two chunks.
    const head =
      whole ??
      (chunks[0].length >= responseLengthMin ? chunks[0] : joinChunks(chunks, responseLengthMin));
    const header = decodeResponseHeader(head);
    const pending = this.#pending.get(header.correlationId);
    if (!pending) {
      if (this.#abandoned.delete(header.correlationId)) return;
      this.#fail(
        ClientError.invalidResponse(
          `Cannot read response: correlation id ${header.correlationId} matches no request`,
        ),
      );
      this.#socket.destroy();
      return;
    }
    this.#pending.delete(header.correlationId);
    if (header.error === 0 && pending.onNextOffset !== undefined) {
      const nextOffset = fetchNextOffset(chunks);
      if (nextOffset !== null) pending.onNextOffset(nextOffset);
    }
    let body: Uint8Array | null = null;
    if (whole !== null)
      // A fetch answer's records are handed to the caller as views: never of a shared read slab.
      body = pending.decodeChunks !== undefined ? ownBytes(header.body) : header.body;
    else if (header.error !== 0 || pending.decodeChunks === undefined) {
      body = decodeResponseHeader(
        joinChunks(
          chunks,
          chunks.reduce((n, c) => n + c.length, 0),
        ),
      ).body;
    }
    if (header.error !== 0) {
      let errorBody;
      try {
        errorBody = decodeErrorBody(body!);
      } catch (error) {
        return pending.reject(
          ClientError.invalidResponse(
            `Cannot read error response ${header.error}: ${errorMessage(error)}`,
            error,
          ),
        );
      }
      return pending.reject(
        ClientError.fromServer(header.error, errorBody.code, errorBody.message, errorBody.details),
      );
    }
    let value: unknown;
    try {
      value =
        body !== null
          ? pending.decode(body)
          : pending.decodeChunks!(dropPrefix(chunks, responseLengthMin));
    } catch (error) {
      if (error instanceof ClientError) return pending.reject(error);
      return pending.reject(
        ClientError.invalidResponse(`Cannot read response: ${errorMessage(error)}`, error),
      );
    }
    pending.resolve(value);
  }

  /** Marks the client closed and rejects every pending request with `error`. */
  #fail(error: ClientError): void {
    if (this.#closedError) return;
    this.#closedError = error;
    this.#decoder.clear();
    if (this.#sweepTimer !== null) clearTimeout(this.#sweepTimer);
    this.#sweepTimer = null;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) p.reject(error);
  }
}
