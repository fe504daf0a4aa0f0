/**
 * The es-broker TCP wire format, version 0 of every api (full prose, limits and a worked example:
 * `docs/protocol.md`). All integers are big-endian. `str16` = u16 byte length | that many bytes of
 * UTF-8 (strict: invalid UTF-8 is invalid_request). `u64` values above 2^53 − 1 are refused with
 * `unsupported` (docs/decisions.md §6). A body shorter or longer than its grammar is `invalid_request`
 * naming the field.
 *
 * ```
 * request_frame   = length u32            bytes after this field (≥ 8, ≤ max request bytes)
 *                   api u16
 *                   version u16
 *                   correlation_id u32    echoed in the response
 *                   body                  length − 8 bytes, per api below
 *
 * response_frame  = length u32            bytes after this field (≥ 6)
 *                   correlation_id u32
 *                   error u16             0 = success, else the TCP number of an error-table row
 *                   body                  success: per api below; error: error_body
 *
 * error_body      = code str16            the row's code, e.g. "topic_not_found"
 *                   message_len u32
 *                   message [u8]          UTF-8, message_len bytes
 *                   [details_len u32      optional, present only when the error has
 *                    details [u8]]        machine-readable details: a JSON object, e.g.
 *                                         {"expected_sequence":4}
 *
 * api 0 Produce
 *   request       = topic str16
 *                   partition i32         −1 = the broker picks (murmur2 of key / round robin)
 *                   record_count u32      must equal the entries that follow
 *                   entries [u8]          to the end of the frame: the entry-batch format of
 *                                         storage/record.ts (timestamp_ms i64 | key_len i32 | key |
 *                                         value_len u32 | value), repeated
 *   response      = span_count u32
 *                   span × span_count     partition u32 | base_offset u64 | count u32
 *
 * api 1 Fetch
 *   request       = topic str16
 *                   partition u32
 *                   offset u64
 *                   max_records u32       0 = broker default
 *                   max_bytes u32         0 = broker default
 *                   wait_ms u32           long-poll wait when nothing is available at offset
 *   response      = high_watermark u64
 *                   log_start_offset u64
 *                   next_offset u64
 *                   record_count u32
 *                   records_bytes u32     must equal the bytes that follow
 *                   records [u8]          stored records verbatim (record_len | offset | timestamp |
 *                                         key_len | key | value_len | value | crc32)
 *
 * api 2 CreateTopic
 *   request       = topic str16
 *                   partitions u32
 *                   config_len u32        0 = no config (all defaults)
 *                   config [u8]           a JSON object, UTF-8
 *   response      = topic_entry           as in Metadata
 *
 * api 3 Metadata
 *   request       = topic_count u32       0 = every topic
 *                   topic str16 × topic_count
 *   response      = topic_count u32
 *                   topic_entry × topic_count
 *   topic_entry   = name str16
 *                   config_len u32
 *                   config [u8]           JSON object (TopicConfig, snake_case keys)
 *                   partition_count u32
 *                   partition_entry × partition_count
 *   partition_entry = partition u32 | log_start_offset u64 | high_watermark u64 | size_bytes u64 |
 *                     segment_count u32 | fenced u8 (0 or 1)
 *
 * api 4 ListOffsets
 *   request       = topic str16 | partition u32
 *   response      = log_start_offset u64 | high_watermark u64
 *
 * api 5 DeleteTopic
 *   request       = topic str16
 *   response      = (empty)
 *
 * api 6 JoinGroup
 *   request       = group str16
 *                   member_id str16       "" = join as a new member
 *                   session_timeout_ms u32  0 = broker default (30 000)
 *                   topic_count u32
 *                   topic str16 × topic_count
 *   response      = member_id str16 | generation u64 | session_timeout_ms u32 | assignments
 *   assignments   = assignment_count u32 | (topic str16 | partition u32) × assignment_count
 *
 * api 7 Heartbeat
 *   request       = group str16 | member_id str16 | has_generation u8 (0/1) | generation u64
 *   response      = generation u64 | rejoin u8 (0/1) | assignments
 *
 * api 8 LeaveGroup
 *   request       = group str16 | member_id str16
 *   response      = (empty)
 *
 * api 9 CommitOffsets
 *   request       = group str16
 *                   member_id str16       "" = none (a standalone consumer)
 *                   has_generation u8 | generation u64
 *                   offset_count u32
 *                   (topic str16 | partition u32 | offset u64) × offset_count
 *   response      = (empty)
 *
 * api 10 DescribeGroup
 *   request       = group str16
 *   response      = group_entry
 *   group_entry   = group str16 | generation u64
 *                   member_count u32
 *                   (member_id str16 | session_timeout_ms u32 | topic_count u32 | topic str16 × n |
 *                    assignments) × member_count
 *                   offset_count u32
 *                   offset_entry × offset_count
 *   offset_entry  = topic str16 | partition u32
 *                   present u8            bit 0: committed, bit 1: high_watermark, bit 2: owner
 *                   committed u64 | high_watermark u64   (0 when absent)
 *                   owner str16           ("" when absent)
 *
 * api 11 ListGroups
 *   request       = (empty)
 *   response      = group_count u32 | group_entry × group_count
 *
 * api 12 IdempotentProduce
 *   request       = topic str16
 *                   partition i32         −1 = the broker picks (every record must land in one partition)
 *                   producer_id str16
 *                   producer_epoch u32
 *                   base_sequence u64
 *                   record_count u32
 *                   entries [u8]          as in Produce
 *   response      = duplicate u8 (0/1) | span_count u32 | span × span_count   (span as in Produce)
 * ```
 *
 * An unknown api or version is answered with `unsupported_api`; the connection stays open.
 *
 * Request encoders return a whole frame (length prefix included) and check the caller's values,
 * throwing {@link ProtocolError} `invalid_request` naming the field. Request decoders take the
 * body only (see {@link decodeRequestHeader}). Response encoders return a whole frame; response
 * decoders take the body (see {@link decodeResponseHeader}). Decoders return views into the bytes
 * they were given where a field is a byte range (entries, records), never copies.
 */
import { Errors, type ErrorKind } from "../broker/errors.ts";
import type {
  CommitOffsetsRequest,
  CreateTopicRequest,
  FetchRequest,
  FetchResult,
  GroupAssignment,
  GroupDescription,
  HeartbeatResult,
  JoinGroupRequest,
  PartitionInfo,
  ProduceRequest,
  ProduceResult,
  TopicConfig,
  TopicDescription,
  TopicPartition,
} from "../broker/types.ts";
import { produceRecordsMax } from "../lib/limits.ts";
import { RecordFormatError, scanEntries, type EntryBatch } from "../storage/record.ts";
import { ProtocolError, str16BytesMax, WireReader, WireWriter } from "./wire.ts";

export { ProtocolError } from "./wire.ts";

/** Api numbers. */
export const ApiKey = Object.freeze({
  Produce: 0,
  Fetch: 1,
  CreateTopic: 2,
  Metadata: 3,
  ListOffsets: 4,
  DeleteTopic: 5,
  JoinGroup: 6,
  Heartbeat: 7,
  LeaveGroup: 8,
  CommitOffsets: 9,
  DescribeGroup: 10,
  ListGroups: 11,
  IdempotentProduce: 12,
} as const);
/** One of the {@link ApiKey} numbers. */
export type ApiKey = (typeof ApiKey)[keyof typeof ApiKey];

/** Highest version of each api this codec speaks (every api is at version 0). */
export const apiVersionMax: Readonly<Record<ApiKey, number>> = Object.freeze({
  [ApiKey.Produce]: 0,
  [ApiKey.Fetch]: 0,
  [ApiKey.CreateTopic]: 0,
  [ApiKey.Metadata]: 0,
  [ApiKey.ListOffsets]: 0,
  [ApiKey.DeleteTopic]: 0,
  [ApiKey.JoinGroup]: 0,
  [ApiKey.Heartbeat]: 0,
  [ApiKey.LeaveGroup]: 0,
  [ApiKey.CommitOffsets]: 0,
  [ApiKey.DescribeGroup]: 0,
  [ApiKey.ListGroups]: 0,
  [ApiKey.IdempotentProduce]: 0,
});

/** Human names of the apis, for messages and logs. */
export const apiNames: Readonly<Record<ApiKey, string>> = Object.freeze({
  [ApiKey.Produce]: "Produce",
  [ApiKey.Fetch]: "Fetch",
  [ApiKey.CreateTopic]: "CreateTopic",
  [ApiKey.Metadata]: "Metadata",
  [ApiKey.ListOffsets]: "ListOffsets",
  [ApiKey.DeleteTopic]: "DeleteTopic",
  [ApiKey.JoinGroup]: "JoinGroup",
  [ApiKey.Heartbeat]: "Heartbeat",
  [ApiKey.LeaveGroup]: "LeaveGroup",
  [ApiKey.CommitOffsets]: "CommitOffsets",
  [ApiKey.DescribeGroup]: "DescribeGroup",
  [ApiKey.ListGroups]: "ListGroups",
  [ApiKey.IdempotentProduce]: "IdempotentProduce",
});

/** Bytes of the `length` prefix of every frame. */
export const frameLengthBytes = 4;
/** Smallest request `length`: api u16 + version u16 + correlation_id u32. */
export const requestLengthMin = 8;
/** Smallest response `length`: correlation_id u32 + error u16. */
export const responseLengthMin = 6;
/** Bytes of one partition_entry in a topic_entry. */
export const partitionEntryBytes = 33;
/** Bytes of one span in a Produce response. */
export const produceSpanBytes = 16;
/** Bytes of the fixed part of a Fetch response before `records`. */
export const fetchResponseHeaderBytes = 32;
/** Bytes of a Fetch response frame before `records`: `length`, `correlation_id`, `error` and the fixed part. */
export const fetchResponsePrefixBytes =
  frameLengthBytes + responseLengthMin + fetchResponseHeaderBytes;

/** The header of a request frame, with its body as a view. */
export interface RequestHeader {
  api: number;
  version: number;
  correlationId: number;
  /** The bytes after the header (a view of the frame). */
  body: Uint8Array;
}

/** The header of a response frame, with its body as a view. */
export interface ResponseHeader {
  correlationId: number;
  /** 0 for success, otherwise the TCP number of an error-table row. */
  error: number;
  /** The bytes after the header (a view of the frame). */
  body: Uint8Array;
}

/** True if `api`/`version` names an api and version this codec speaks. */
export function isSupportedApi(api: number, version: number): api is ApiKey {
  return (
    Object.hasOwn(apiVersionMax, api) && version >= 0 && version <= apiVersionMax[api as ApiKey]
  );
}

// ---------------------------------------------------------------------------------------------
// Frame headers

/**
 * Splits a request frame (the bytes after `length`) into header and body.
 * @throws ProtocolError `invalid_request` if it is shorter than {@link requestLengthMin}.
 */
export function decodeRequestHeader(frame: Uint8Array): RequestHeader {
  const r = new WireReader(frame, "request header");
  const api = r.u16("api");
  const version = r.u16("version");
  const correlationId = r.u32("correlation_id");
  return { api, version, correlationId, body: r.rest() };
}

/**
 * Splits a response frame (the bytes after `length`) into header and body.
 * @throws ProtocolError `invalid_request` if it is shorter than {@link responseLengthMin}.
 */
export function decodeResponseHeader(frame: Uint8Array): ResponseHeader {
  const r = new WireReader(frame, "response header");
  const correlationId = r.u32("correlation_id");
  const error = r.u16("error");
  return { correlationId, error, body: r.rest() };
}

/** Starts a request frame: reserves `length`, writes api, version 0, correlation id. */
function startRequest(api: ApiKey, correlationId: number, capacityBytes: number): WireWriter {
  requireInt(correlationId, 0, 0xffff_ffff, "correlation_id");
  return new WireWriter(capacityBytes).u32(0).u16(api).u16(0).u32(correlationId);
}

/** Starts a response frame: reserves `length`, writes correlation id and error. */
function startResponse(correlationId: number, error: number, capacityBytes: number): WireWriter {
  return new WireWriter(capacityBytes).u32(0).u32(correlationId).u16(error);
}

/** Fills in `length` and returns the frame. */
function finishFrame(w: WireWriter): Uint8Array {
  w.patchU32(0, w.position - frameLengthBytes);
  return w.finish();
}

// ---------------------------------------------------------------------------------------------
// Errors

/** The decoded `error_body` of a failed response. */
export interface ErrorBody {
  /** The error-table code, e.g. `"topic_not_found"`. */
  code: string;
  /** The server's message. */
  message: string;
  /** Machine-readable details (e.g. `{ expected_sequence: 4 }`), when the error has any. */
  details?: Record<string, unknown>;
}

/**
 * Encodes a response frame carrying an error-table row and a message, and `details` (a JSON
 * object) when given and not empty.
 */
export function encodeErrorResponse(
  correlationId: number,
  kind: ErrorKind,
  message: string,
  details?: Record<string, unknown>,
): Uint8Array {
  if (kind.tcp === 0) throw new RangeError("error number 0 means success");
  const w = startResponse(correlationId, kind.tcp, 64 + message.length * 3)
    .str16(kind.code)
    .str32(message);
  if (details !== undefined && Object.keys(details).length > 0) w.str32(JSON.stringify(details));
  return finishFrame(w);
}

/** Decodes an `error_body` (details optional). @throws ProtocolError `invalid_request` if malformed. */
export function decodeErrorBody(body: Uint8Array): ErrorBody {
  const r = new WireReader(body, "error response");
  const code = r.str16("code");
  const message = r.str32("message", "message_len");
  if (r.remainingBytes === 0) return { code, message };
  const details = parseJsonObject(r.str32("details", "details_len"), "error response", "details");
  r.end("details");
  return { code, message, details };
}

// ---------------------------------------------------------------------------------------------
// Produce (api 0)

/** What a Produce request carries: the broker's {@link ProduceRequest} without per-record partitions. */
export interface ProduceRequestFields {
  topic: string;
  /** A partition ≥ 0, or −1 / omitted to let the broker pick. */
  partition?: number;
  batch: EntryBatch;
}

/**
 * Encodes a Produce request frame. The batch bytes are copied once.
 * @throws ProtocolError `invalid_request` for a topic over 65 535 UTF-8 bytes or a partition outside [−1, 2^31 − 1].
 */
export function encodeProduceRequest(
  correlationId: number,
  request: ProduceRequestFields,
): Uint8Array {
  const topic = topicBytes(request.topic, "produce.topic");
  const partition = request.partition ?? -1;
  requireInt(partition, -1, 0x7fff_ffff, "produce.partition");
  requireInt(request.batch.count, 0, 0xffff_ffff, "produce.record_count");
  const w = startRequest(
    ApiKey.Produce,
    correlationId,
    12 + 2 + topic.length + 8 + request.batch.bytes.length,
  );
  w.u16(topic.length)
    .bytes(topic)
    .i32(partition)
    .u32(request.batch.count)
    .bytes(request.batch.bytes);
  return finishFrame(w);
}

/**
 * Decodes a Produce request body. The entries are validated with `scanEntries` and their number
 * must equal `record_count`; the batch is a view of `body`.
 * @throws ProtocolError `invalid_request` naming the field (or the record index for a bad entry).
 */
export function decodeProduceRequest(body: Uint8Array): ProduceRequest {
  const r = new WireReader(body, "Produce request");
  const topic = r.str16("topic");
  const partition = r.i32("partition");
  if (partition < -1) {
    throw new ProtocolError(
      Errors.invalidRequest,
      "partition",
      `Cannot decode Produce request: field "partition" is ${partition}, must be ≥ 0 or −1`,
    );
  }
  const recordCount = r.u32("record_count");
  const entries = r.rest();
  let scanned: number;
  try {
    scanned = scanEntries(entries, { maxCount: produceRecordsMax });
  } catch (error) {
    if (error instanceof RecordFormatError) {
      throw new ProtocolError(
        Errors.invalidRequest,
        "entries",
        `Cannot decode Produce request: field "entries": ${error.message}`,
      );
    }
    throw error;
  }
  if (scanned !== recordCount) {
    throw new ProtocolError(
      Errors.invalidRequest,
      "record_count",
      `Cannot decode Produce request: field "record_count" is ${recordCount} but the entries hold ${scanned} records`,
    );
  }
  const request: ProduceRequest = { topic, batch: { bytes: entries, count: scanned } };
  if (partition >= 0) request.partition = partition;
  return request;
}

/** Encodes a Produce response frame. */
export function encodeProduceResponse(correlationId: number, result: ProduceResult): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + 4 + result.spans.length * produceSpanBytes);
  w.u32(result.spans.length);
  for (const span of result.spans) w.u32(span.partition).u64(span.baseOffset).u32(span.count);
  return finishFrame(w);
}

/** Decodes a Produce response body. @throws ProtocolError if malformed. */
export function decodeProduceResponse(body: Uint8Array): ProduceResult {
  const r = new WireReader(body, "Produce response");
  const spanCount = r.u32("span_count");
  checkRepeat(r, spanCount, produceSpanBytes, "span_count");
  const spans: ProduceResult["spans"] = [];
  for (let i = 0; i < spanCount; i++) {
    const partition = r.u32(`spans[${i}].partition`);
    const baseOffset = r.u64(`spans[${i}].base_offset`);
    const count = r.u32(`spans[${i}].count`);
    spans.push({ partition, baseOffset, count });
  }
  r.end("spans");
  return { spans };
}

// ---------------------------------------------------------------------------------------------
// Fetch (api 1)

/** What a Fetch request carries (the broker's {@link FetchRequest} without the abort signal). */
export type FetchRequestFields = Omit<FetchRequest, "signal">;

/**
 * Encodes a Fetch request frame. Omitted `maxRecords`, `maxBytes` encode as 0 (broker default);
 * omitted `waitMs` as 0 (no wait).
 * @throws ProtocolError `invalid_request` for a value outside its field's range.
 */
export function encodeFetchRequest(correlationId: number, request: FetchRequestFields): Uint8Array {
  const topic = topicBytes(request.topic, "fetch.topic");
  requireInt(request.partition, 0, 0xffff_ffff, "fetch.partition");
  requireInt(request.offset, 0, Number.MAX_SAFE_INTEGER, "fetch.offset");
  const maxRecords = request.maxRecords ?? 0;
  const maxBytes = request.maxBytes ?? 0;
  const waitMs = request.waitMs ?? 0;
  requireInt(maxRecords, 0, 0xffff_ffff, "fetch.max_records");
  requireInt(maxBytes, 0, 0xffff_ffff, "fetch.max_bytes");
  requireInt(waitMs, 0, 0xffff_ffff, "fetch.wait_ms");
  const w = startRequest(ApiKey.Fetch, correlationId, 12 + 2 + topic.length + 24);
  w.u16(topic.length)
    .bytes(topic)
    .u32(request.partition)
    .u64(request.offset)
    .u32(maxRecords)
    .u32(maxBytes)
    .u32(waitMs);
  return finishFrame(w);
}

/**
 * Decodes a Fetch request body. `max_records` / `max_bytes` of 0 are left out (broker default);
 * `wait_ms` is passed as is (the broker checks its range).
 * @throws ProtocolError `invalid_request` naming the field, `unsupported` for an offset above 2^53 − 1.
 */
export function decodeFetchRequest(body: Uint8Array): FetchRequestFields {
  const r = new WireReader(body, "Fetch request");
  const topic = r.str16("topic");
  const partition = r.u32("partition");
  const offset = r.u64("offset");
  const maxRecords = r.u32("max_records");
  const maxBytes = r.u32("max_bytes");
  const waitMs = r.u32("wait_ms");
  r.end("wait_ms");
  const request: FetchRequestFields = { topic, partition, offset, waitMs };
  if (maxRecords !== 0) request.maxRecords = maxRecords;
  if (maxBytes !== 0) request.maxBytes = maxBytes;
  return request;
}

/**
 * Encodes a Fetch response frame as two chunks: the frame header and the fixed fields (`length`
 * through `records_bytes`, {@link fetchResponsePrefixBytes} bytes, its `length` counting the records
 * too) and the stored records themselves, not copied. Writing the two back to back gives exactly
 * the frame {@link encodeFetchResponse} builds; the transport writes them as one gathered write so
 * the stored bytes are never copied into a frame buffer. The records view must stay unchanged
 * until it is written.
 */
export function encodeFetchResponseChunks(
  correlationId: number,
  result: FetchResult,
): [prefix: Uint8Array, records: Uint8Array] {
  const records = result.records.bytes;
  const w = startResponse(correlationId, 0, fetchResponsePrefixBytes);
  w.u64(result.highWatermark).u64(result.logStartOffset).u64(result.nextOffset);
  w.u32(result.records.count).u32(records.length);
  w.patchU32(0, w.position - frameLengthBytes + records.length);
  return [w.finish(), records];
}

/** Encodes a Fetch response frame in one buffer; the records are copied verbatim (see {@link encodeFetchResponseChunks}). */
export function encodeFetchResponse(correlationId: number, result: FetchResult): Uint8Array {
  const [prefix, records] = encodeFetchResponseChunks(correlationId, result);
  const frame = new Uint8Array(prefix.length + records.length);
  frame.set(prefix);
  frame.set(records, prefix.length);
  return frame;
}

/** The fixed fields of a Fetch response body, before `records`. */
export interface FetchResponseHeader {
  highWatermark: number;
  logStartOffset: number;
  nextOffset: number;
  /** `record_count`. */
  recordCount: number;
  /** `records_bytes`: the bytes of records that must follow. */
  recordsBytes: number;
}

/**
 * Decodes the fixed fields of a Fetch response body (its first {@link fetchResponseHeaderBytes}
 * bytes; what follows is not looked at), for a reader that takes the records from elsewhere
 * (e.g. the chunks they arrived in). It checks nothing about the records: compare `recordsBytes`
 * with the bytes that follow.
 * @throws ProtocolError if fewer than {@link fetchResponseHeaderBytes} bytes are given, or an offset is above 2^53 − 1.
 */
export function decodeFetchResponseHeader(bytes: Uint8Array): FetchResponseHeader {
  const r = new WireReader(bytes, "Fetch response");
  const highWatermark = r.u64("high_watermark");
  const logStartOffset = r.u64("log_start_offset");
  const nextOffset = r.u64("next_offset");
  const recordCount = r.u32("record_count");
  const recordsBytes = r.u32("records_bytes");
  return { highWatermark, logStartOffset, nextOffset, recordCount, recordsBytes };
}

/**
 * Decodes a Fetch response body. The records are a view of `body`, not yet checked: decode them
 * with `RecordCursor` (the client does, CRC by CRC).
 * @throws ProtocolError if malformed or `records_bytes` disagrees with the bytes present.
 */
export function decodeFetchResponse(body: Uint8Array): FetchResult {
  const r = new WireReader(body, "Fetch response");
  const highWatermark = r.u64("high_watermark");
  const logStartOffset = r.u64("log_start_offset");
  const nextOffset = r.u64("next_offset");
  const count = r.u32("record_count");
  const recordsBytes = r.u32("records_bytes");
  const bytes = r.bytes("records", recordsBytes);
  r.end("records");
  return { records: { bytes, count }, nextOffset, highWatermark, logStartOffset };
}

// ---------------------------------------------------------------------------------------------
// CreateTopic (api 2)

/**
 * Encodes a CreateTopic request frame. An omitted config is sent as `config_len` 0.
 * @throws ProtocolError `invalid_request` for a bad topic or partition count.
 */
export function encodeCreateTopicRequest(
  correlationId: number,
  request: CreateTopicRequest,
): Uint8Array {
  const topic = topicBytes(request.name, "create_topic.topic");
  requireInt(request.partitions, 0, 0xffff_ffff, "create_topic.partitions");
  const config =
    request.config === undefined
      ? new Uint8Array(0)
      : encoder.encode(JSON.stringify(request.config));
  const w = startRequest(
    ApiKey.CreateTopic,
    correlationId,
    12 + 2 + topic.length + 8 + config.length,
  );
  w.u16(topic.length).bytes(topic).u32(request.partitions).u32(config.length).bytes(config);
  return finishFrame(w);
}

/**
 * Decodes a CreateTopic request body. `config_len` 0 means no config.
 * @throws ProtocolError `invalid_request` naming the field, e.g. a config that is not a JSON object.
 */
export function decodeCreateTopicRequest(body: Uint8Array): CreateTopicRequest {
  const r = new WireReader(body, "CreateTopic request");
  const name = r.str16("topic");
  const partitions = r.u32("partitions");
  const configText = r.str32("config", "config_len");
  r.end("config");
  const request: CreateTopicRequest = { name, partitions };
  if (configText.length > 0)
    request.config = parseJsonObject(configText, "CreateTopic request", "config");
  return request;
}

/** Encodes a CreateTopic response frame: one topic_entry. */
export function encodeCreateTopicResponse(
  correlationId: number,
  topic: TopicDescription,
): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + topicEntryBytesEstimate(topic));
  writeTopicEntry(w, topic);
  return finishFrame(w);
}

/** Decodes a CreateTopic response body. @throws ProtocolError if malformed. */
export function decodeCreateTopicResponse(body: Uint8Array): TopicDescription {
  const r = new WireReader(body, "CreateTopic response");
  const topic = readTopicEntry(r, "topic");
  r.end("topic");
  return topic;
}

// ---------------------------------------------------------------------------------------------
// Metadata (api 3)

/** What a Metadata request carries: the topics wanted, empty for every topic. */
export interface MetadataRequestFields {
  topics: string[];
}

/** Encodes a Metadata request frame. @throws ProtocolError `invalid_request` for a topic over 65 535 bytes. */
export function encodeMetadataRequest(
  correlationId: number,
  request: MetadataRequestFields,
): Uint8Array {
  const topics = request.topics.map((t, i) => topicBytes(t, `metadata.topics[${i}]`));
  const w = startRequest(
    ApiKey.Metadata,
    correlationId,
    16 + topics.reduce((n, t) => n + 2 + t.length, 0),
  );
  w.u32(topics.length);
  for (const t of topics) w.u16(t.length).bytes(t);
  return finishFrame(w);
}

/** Decodes a Metadata request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeMetadataRequest(body: Uint8Array): MetadataRequestFields {
  const r = new WireReader(body, "Metadata request");
  const count = r.u32("topic_count");
  checkRepeat(r, count, 2, "topic_count");
  const topics: string[] = [];
  for (let i = 0; i < count; i++) topics.push(r.str16(`topics[${i}]`));
  r.end(count === 0 ? "topic_count" : `topics[${count - 1}]`);
  return { topics };
}

/** Encodes a Metadata response frame. */
export function encodeMetadataResponse(
  correlationId: number,
  topics: readonly TopicDescription[],
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    14 + topics.reduce((n, t) => n + topicEntryBytesEstimate(t), 0),
  );
  w.u32(topics.length);
  for (const topic of topics) writeTopicEntry(w, topic);
  return finishFrame(w);
}

/** Decodes a Metadata response body. @throws ProtocolError if malformed. */
export function decodeMetadataResponse(body: Uint8Array): TopicDescription[] {
  const r = new WireReader(body, "Metadata response");
  const count = r.u32("topic_count");
  // A topic_entry is at least 2 + 4 + 4 bytes.
  checkRepeat(r, count, 10, "topic_count");
  const topics: TopicDescription[] = [];
  for (let i = 0; i < count; i++) topics.push(readTopicEntry(r, `topics[${i}]`));
  r.end(count === 0 ? "topic_count" : `topics[${count - 1}]`);
  return topics;
}

function topicEntryBytesEstimate(topic: TopicDescription): number {
  return 2 + topic.name.length * 3 + 4 + 512 + 4 + topic.partitions.length * partitionEntryBytes;
}

function writeTopicEntry(w: WireWriter, topic: TopicDescription): void {
  w.str16(topic.name).str32(JSON.stringify(topic.config)).u32(topic.partitions.length);
  for (const p of topic.partitions) {
    w.u32(p.partition)
      .u64(p.logStartOffset)
      .u64(p.highWatermark)
      .u64(p.sizeBytes)
      .u32(p.segmentCount)
      .u8(p.fenced ? 1 : 0);
  }
}

function readTopicEntry(r: WireReader, field: string): TopicDescription {
  const name = r.str16(`${field}.name`);
  const configText = r.str32(`${field}.config`, `${field}.config_len`);
  const config = parseJsonObject(
    configText,
    r.context,
    `${field}.config`,
  ) as unknown as TopicConfig;
  const partitionCount = r.u32(`${field}.partition_count`);
  checkRepeat(r, partitionCount, partitionEntryBytes, `${field}.partition_count`);
  const partitions: PartitionInfo[] = [];
  for (let i = 0; i < partitionCount; i++) {
    const at = `${field}.partitions[${i}]`;
    const partition = r.u32(`${at}.partition`);
    const logStartOffset = r.u64(`${at}.log_start_offset`);
    const highWatermark = r.u64(`${at}.high_watermark`);
    const sizeBytes = r.u64(`${at}.size_bytes`);
    const segmentCount = r.u32(`${at}.segment_count`);
    const fenced = r.u8(`${at}.fenced`);
    if (fenced > 1) {
      throw new ProtocolError(
        Errors.invalidRequest,
        `${at}.fenced`,
        `Cannot decode ${r.context}: field "${at}.fenced" is ${fenced}, must be 0 or 1`,
      );
    }
    partitions.push({
      partition,
      logStartOffset,
      highWatermark,
      sizeBytes,
      segmentCount,
      fenced: fenced === 1,
    });
  }
  return { name, config, partitions };
}

// ---------------------------------------------------------------------------------------------
// ListOffsets (api 4)

/** What a ListOffsets request carries. */
export interface ListOffsetsRequestFields {
  topic: string;
  partition: number;
}

/** Bounds of one partition, as ListOffsets answers. */
export interface ListOffsetsResult {
  logStartOffset: number;
  highWatermark: number;
}

/** Encodes a ListOffsets request frame. @throws ProtocolError `invalid_request` for a bad field. */
export function encodeListOffsetsRequest(
  correlationId: number,
  request: ListOffsetsRequestFields,
): Uint8Array {
  const topic = topicBytes(request.topic, "list_offsets.topic");
  requireInt(request.partition, 0, 0xffff_ffff, "list_offsets.partition");
  const w = startRequest(ApiKey.ListOffsets, correlationId, 12 + 2 + topic.length + 4);
  w.u16(topic.length).bytes(topic).u32(request.partition);
  return finishFrame(w);
}

/** Decodes a ListOffsets request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeListOffsetsRequest(body: Uint8Array): ListOffsetsRequestFields {
  const r = new WireReader(body, "ListOffsets request");
  const topic = r.str16("topic");
  const partition = r.u32("partition");
  r.end("partition");
  return { topic, partition };
}

/** Encodes a ListOffsets response frame. */
export function encodeListOffsetsResponse(
  correlationId: number,
  result: ListOffsetsResult,
): Uint8Array {
  return finishFrame(
    startResponse(correlationId, 0, 26).u64(result.logStartOffset).u64(result.highWatermark),
  );
}

/** Decodes a ListOffsets response body. @throws ProtocolError if malformed. */
export function decodeListOffsetsResponse(body: Uint8Array): ListOffsetsResult {
  const r = new WireReader(body, "ListOffsets response");
  const logStartOffset = r.u64("log_start_offset");
  const highWatermark = r.u64("high_watermark");
  r.end("high_watermark");
  return { logStartOffset, highWatermark };
}

// ---------------------------------------------------------------------------------------------
// DeleteTopic (api 5)

/** Encodes a DeleteTopic request frame. @throws ProtocolError `invalid_request` for a topic over 65 535 bytes. */
export function encodeDeleteTopicRequest(
  correlationId: number,
  request: { topic: string },
): Uint8Array {
  const topic = topicBytes(request.topic, "delete_topic.topic");
  const w = startRequest(ApiKey.DeleteTopic, correlationId, 12 + 2 + topic.length);
  w.u16(topic.length).bytes(topic);
  return finishFrame(w);
}

/** Decodes a DeleteTopic request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeDeleteTopicRequest(body: Uint8Array): { topic: string } {
  const r = new WireReader(body, "DeleteTopic request");
  const topic = r.str16("topic");
  r.end("topic");
  return { topic };
}

/** Encodes a DeleteTopic response frame (empty body). */
export function encodeDeleteTopicResponse(correlationId: number): Uint8Array {
  return finishFrame(startResponse(correlationId, 0, 10));
}

/** Decodes a DeleteTopic response body (must be empty). @throws ProtocolError if not. */
export function decodeDeleteTopicResponse(body: Uint8Array): void {
  new WireReader(body, "DeleteTopic response").end("error");
}

// ---------------------------------------------------------------------------------------------
// Helpers

const encoder = new TextEncoder();

/** UTF-8 of a topic name, checked to fit a str16. */
function topicBytes(topic: string, field: string): Uint8Array {
  if (typeof topic !== "string")
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot encode request: field "${field}" must be a string`,
    );
  const bytes = encoder.encode(topic);
  if (bytes.length > str16BytesMax) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot encode request: field "${field}" is ${bytes.length} UTF-8 bytes, over ${str16BytesMax}`,
    );
  }
  return bytes;
}

/** Checks a caller's value for an integer field before it is written. */
function requireInt(value: number, min: number, max: number, field: string): void {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot encode request: field "${field}" is ${value}, must be an integer in [${min}, ${max}]`,
    );
  }
}

/**
 * Refuses a repeat count that cannot fit the bytes left (each element needs at least
 * `elementBytesMin`), before any loop or array grows on the peer's word.
 */
function checkRepeat(r: WireReader, count: number, elementBytesMin: number, field: string): void {
  if (count * elementBytesMin > r.remainingBytes) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${r.context}: field "${field}" is ${count}, but only ${r.remainingBytes} bytes remain (at least ${elementBytesMin} per element)`,
    );
  }
}

function parseJsonObject(text: string, context: string, field: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${context}: field "${field}" is not valid JSON: ${(error as Error).message}`,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${context}: field "${field}" must be a JSON object`,
    );
  }
  return value as Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------
// Consumer groups (apis 6–11) and IdempotentProduce (api 12)

/** Bytes of the smallest `assignments`/`topic partition` element: str16 (2) + partition (4). */
const topicPartitionBytesMin = 6;

function writeAssignments(w: WireWriter, assignments: readonly TopicPartition[]): void {
  w.u32(assignments.length);
  for (const a of assignments) w.str16(a.topic).u32(a.partition);
}

function readAssignments(r: WireReader, field: string): TopicPartition[] {
  const count = r.u32(`${field}.assignment_count`);
  checkRepeat(r, count, topicPartitionBytesMin, `${field}.assignment_count`);
  const out: TopicPartition[] = [];
  for (let i = 0; i < count; i++)
    out.push({
      topic: r.str16(`${field}[${i}].topic`),
      partition: r.u32(`${field}[${i}].partition`),
    });
  return out;
}

function readFlag(r: WireReader, field: string): boolean {
  const v = r.u8(field);
  if (v > 1)
    throw new ProtocolError(
      Errors.invalidRequest,
      field,
      `Cannot decode ${r.context}: field "${field}" is ${v}, must be 0 or 1`,
    );
  return v === 1;
}

/** UTF-8 of a group name or member id, checked to fit a str16. */
function nameBytes(name: string, field: string): Uint8Array {
  return topicBytes(name, field);
}

/**
 * Encodes a JoinGroup request frame. An omitted `memberId` joins as a new member; an omitted
 * `sessionTimeoutMs` sends 0 (broker default).
 * @throws ProtocolError `invalid_request` for a field that does not fit.
 */
export function encodeJoinGroupRequest(
  correlationId: number,
  request: JoinGroupRequest,
): Uint8Array {
  const group = nameBytes(request.group, "join_group.group");
  const member = nameBytes(request.memberId ?? "", "join_group.member_id");
  const timeout = request.sessionTimeoutMs ?? 0;
  requireInt(timeout, 0, 0xffff_ffff, "join_group.session_timeout_ms");
  const topics = request.topics.map((t, i) => topicBytes(t, `join_group.topics[${i}]`));
  const w = startRequest(
    ApiKey.JoinGroup,
    correlationId,
    32 + group.length + member.length + topics.reduce((n, t) => n + 2 + t.length, 0),
  );
  w.u16(group.length).bytes(group).u16(member.length).bytes(member).u32(timeout).u32(topics.length);
  for (const t of topics) w.u16(t.length).bytes(t);
  return finishFrame(w);
}

/** Decodes a JoinGroup request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeJoinGroupRequest(body: Uint8Array): JoinGroupRequest {
  const r = new WireReader(body, "JoinGroup request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  const timeout = r.u32("session_timeout_ms");
  const count = r.u32("topic_count");
  checkRepeat(r, count, 2, "topic_count");
  const topics: string[] = [];
  for (let i = 0; i < count; i++) topics.push(r.str16(`topics[${i}]`));
  r.end(count === 0 ? "topic_count" : `topics[${count - 1}]`);
  const request: JoinGroupRequest = { group, topics };
  if (memberId !== "") request.memberId = memberId;
  if (timeout !== 0) request.sessionTimeoutMs = timeout;
  return request;
}

/** Encodes a JoinGroup response frame. */
export function encodeJoinGroupResponse(
  correlationId: number,
  result: GroupAssignment,
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    64 + result.assignments.reduce((n, a) => n + 6 + a.topic.length * 3, 0),
  );
  w.str16(result.memberId).u64(result.generation).u32(result.sessionTimeoutMs);
  writeAssignments(w, result.assignments);
  return finishFrame(w);
}

/** Decodes a JoinGroup response body. @throws ProtocolError if malformed. */
export function decodeJoinGroupResponse(body: Uint8Array): GroupAssignment {
  const r = new WireReader(body, "JoinGroup response");
  const memberId = r.str16("member_id");
  const generation = r.u64("generation");
  const sessionTimeoutMs = r.u32("session_timeout_ms");
  const assignments = readAssignments(r, "assignments");
  r.end("assignments");
  return { memberId, generation, sessionTimeoutMs, assignments };
}

/** What a Heartbeat request carries. */
export interface HeartbeatRequestFields {
  group: string;
  memberId: string;
  /** The generation the member holds; omitted = not reported (then `rejoin` is false). */
  generation?: number;
}

/** Encodes a Heartbeat request frame. @throws ProtocolError `invalid_request` for a field that does not fit. */
export function encodeHeartbeatRequest(
  correlationId: number,
  request: HeartbeatRequestFields,
): Uint8Array {
  const group = nameBytes(request.group, "heartbeat.group");
  const member = nameBytes(request.memberId, "heartbeat.member_id");
  if (request.generation !== undefined)
    requireInt(request.generation, 0, Number.MAX_SAFE_INTEGER, "heartbeat.generation");
  const w = startRequest(ApiKey.Heartbeat, correlationId, 32 + group.length + member.length);
  w.u16(group.length)
    .bytes(group)
    .u16(member.length)
    .bytes(member)
    .u8(request.generation === undefined ? 0 : 1)
    .u64(request.generation ?? 0);
  return finishFrame(w);
}

/** Decodes a Heartbeat request body. @throws ProtocolError naming the field. */
export function decodeHeartbeatRequest(body: Uint8Array): HeartbeatRequestFields {
  const r = new WireReader(body, "Heartbeat request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  const has = readFlag(r, "has_generation");
  const generation = r.u64("generation");
  r.end("generation");
  return has ? { group, memberId, generation } : { group, memberId };
}

/** Encodes a Heartbeat response frame. */
export function encodeHeartbeatResponse(
  correlationId: number,
  result: HeartbeatResult,
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    32 + result.assignments.reduce((n, a) => n + 6 + a.topic.length * 3, 0),
  );
  w.u64(result.generation).u8(result.rejoin ? 1 : 0);
  writeAssignments(w, result.assignments);
  return finishFrame(w);
}

/** Decodes a Heartbeat response body. @throws ProtocolError if malformed. */
export function decodeHeartbeatResponse(body: Uint8Array): HeartbeatResult {
  const r = new WireReader(body, "Heartbeat response");
  const generation = r.u64("generation");
  const rejoin = readFlag(r, "rejoin");
  const assignments = readAssignments(r, "assignments");
  r.end("assignments");
  return { generation, rejoin, assignments };
}

/** Encodes a LeaveGroup request frame. */
export function encodeLeaveGroupRequest(
  correlationId: number,
  request: { group: string; memberId: string },
): Uint8Array {
  const group = nameBytes(request.group, "leave_group.group");
  const member = nameBytes(request.memberId, "leave_group.member_id");
  const w = startRequest(ApiKey.LeaveGroup, correlationId, 16 + group.length + member.length);
  w.u16(group.length).bytes(group).u16(member.length).bytes(member);
  return finishFrame(w);
}

/** Decodes a LeaveGroup request body. @throws ProtocolError naming the field. */
export function decodeLeaveGroupRequest(body: Uint8Array): { group: string; memberId: string } {
  const r = new WireReader(body, "LeaveGroup request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  r.end("member_id");
  return { group, memberId };
}

/** Encodes an empty success response (LeaveGroup, CommitOffsets). */
export function encodeEmptyResponse(correlationId: number): Uint8Array {
  return finishFrame(startResponse(correlationId, 0, 10));
}

/** Decodes an empty success body. @throws ProtocolError if bytes follow. */
export function decodeEmptyResponse(body: Uint8Array): void {
  new WireReader(body, "response").end("error");
}

/** Bytes of the smallest offset element of a CommitOffsets request: str16 (2) + partition (4) + offset (8). */
const commitOffsetBytesMin = 14;

/** Encodes a CommitOffsets request frame. @throws ProtocolError `invalid_request` for a field that does not fit (e.g. a negative offset). */
export function encodeCommitOffsetsRequest(
  correlationId: number,
  request: CommitOffsetsRequest,
): Uint8Array {
  const group = nameBytes(request.group, "commit_offsets.group");
  const member = nameBytes(request.memberId ?? "", "commit_offsets.member_id");
  if (request.generation !== undefined)
    requireInt(request.generation, 0, Number.MAX_SAFE_INTEGER, "commit_offsets.generation");
  const offsets = request.offsets.map((o, i) => {
    requireInt(o.partition, 0, 0xffff_ffff, `commit_offsets.offsets[${i}].partition`);
    requireInt(o.offset, 0, Number.MAX_SAFE_INTEGER, `commit_offsets.offsets[${i}].offset`);
    return {
      topic: topicBytes(o.topic, `commit_offsets.offsets[${i}].topic`),
      partition: o.partition,
      offset: o.offset,
    };
  });
  const w = startRequest(
    ApiKey.CommitOffsets,
    correlationId,
    32 +
      group.length +
      member.length +
      offsets.reduce((n, o) => n + commitOffsetBytesMin + o.topic.length, 0),
  );
  w.u16(group.length)
    .bytes(group)
    .u16(member.length)
    .bytes(member)
    .u8(request.generation === undefined ? 0 : 1)
    .u64(request.generation ?? 0)
    .u32(offsets.length);
  for (const o of offsets) w.u16(o.topic.length).bytes(o.topic).u32(o.partition).u64(o.offset);
  return finishFrame(w);
}

/** Decodes a CommitOffsets request body. @throws ProtocolError naming the field. */
export function decodeCommitOffsetsRequest(body: Uint8Array): CommitOffsetsRequest {
  const r = new WireReader(body, "CommitOffsets request");
  const group = r.str16("group");
  const memberId = r.str16("member_id");
  const has = readFlag(r, "has_generation");
  const generation = r.u64("generation");
  const count = r.u32("offset_count");
  checkRepeat(r, count, commitOffsetBytesMin, "offset_count");
  const offsets: CommitOffsetsRequest["offsets"] = [];
  for (let i = 0; i < count; i++) {
    offsets.push({
      topic: r.str16(`offsets[${i}].topic`),
      partition: r.u32(`offsets[${i}].partition`),
      offset: r.u64(`offsets[${i}].offset`),
    });
  }
  r.end(count === 0 ? "offset_count" : `offsets[${count - 1}]`);
  const request: CommitOffsetsRequest = { group, offsets };
  if (memberId !== "") request.memberId = memberId;
  if (has) request.generation = generation;
  return request;
}

/** Encodes a DescribeGroup request frame. */
export function encodeDescribeGroupRequest(
  correlationId: number,
  request: { group: string },
): Uint8Array {
  const group = nameBytes(request.group, "describe_group.group");
  const w = startRequest(ApiKey.DescribeGroup, correlationId, 16 + group.length);
  w.u16(group.length).bytes(group);
  return finishFrame(w);
}

/** Decodes a DescribeGroup request body. */
export function decodeDescribeGroupRequest(body: Uint8Array): { group: string } {
  const r = new WireReader(body, "DescribeGroup request");
  const group = r.str16("group");
  r.end("group");
  return { group };
}

function writeGroupEntry(w: WireWriter, g: GroupDescription): void {
  w.str16(g.group).u64(g.generation).u32(g.members.length);
  for (const m of g.members) {
    w.str16(m.memberId).u32(m.sessionTimeoutMs).u32(m.topics.length);
    for (const t of m.topics) w.str16(t);
    writeAssignments(w, m.assignments);
  }
  w.u32(g.offsets.length);
  for (const o of g.offsets) {
    const present =
      (o.committed !== null ? 1 : 0) |
      (o.highWatermark !== null ? 2 : 0) |
      (o.owner !== null ? 4 : 0);
    w.str16(o.topic)
      .u32(o.partition)
      .u8(present)
      .u64(o.committed ?? 0)
      .u64(o.highWatermark ?? 0)
      .str16(o.owner ?? "");
  }
}

function readGroupEntry(r: WireReader, field: string): GroupDescription {
  const group = r.str16(`${field}.group`);
  const generation = r.u64(`${field}.generation`);
  const memberCount = r.u32(`${field}.member_count`);
  // A member is at least 2 + 4 + 4 + 4 bytes.
  checkRepeat(r, memberCount, 14, `${field}.member_count`);
  const members: GroupDescription["members"] = [];
  for (let i = 0; i < memberCount; i++) {
    const at = `${field}.members[${i}]`;
    const memberId = r.str16(`${at}.member_id`);
    const sessionTimeoutMs = r.u32(`${at}.session_timeout_ms`);
    const topicCount = r.u32(`${at}.topic_count`);
    checkRepeat(r, topicCount, 2, `${at}.topic_count`);
    const topics: string[] = [];
    for (let j = 0; j < topicCount; j++) topics.push(r.str16(`${at}.topics[${j}]`));
    members.push({
      memberId,
      sessionTimeoutMs,
      topics,
      assignments: readAssignments(r, `${at}.assignments`),
    });
  }
  const offsetCount = r.u32(`${field}.offset_count`);
  // An offset entry is at least 2 + 4 + 1 + 8 + 8 + 2 bytes.
  checkRepeat(r, offsetCount, 25, `${field}.offset_count`);
  const offsets: GroupDescription["offsets"] = [];
  for (let i = 0; i < offsetCount; i++) {
    const at = `${field}.offsets[${i}]`;
    const topic = r.str16(`${at}.topic`);
    const partition = r.u32(`${at}.partition`);
    const present = r.u8(`${at}.present`);
    if (present > 7)
      throw new ProtocolError(
        Errors.invalidRequest,
        `${at}.present`,
        `Cannot decode ${r.context}: field "${at}.present" is ${present}, only bits 0–2 are defined`,
      );
    const committedRaw = r.u64(`${at}.committed`);
    const highWatermarkRaw = r.u64(`${at}.high_watermark`);
    const ownerRaw = r.str16(`${at}.owner`);
    const committed = present & 1 ? committedRaw : null;
    const highWatermark = present & 2 ? highWatermarkRaw : null;
    const lag =
      committed !== null && highWatermark !== null ? Math.max(0, highWatermark - committed) : null;
    offsets.push({
      topic,
      partition,
      committed,
      highWatermark,
      lag,
      owner: present & 4 ? ownerRaw : null,
    });
  }
  return { group, generation, members, offsets };
}

function groupEntryBytesEstimate(g: GroupDescription): number {
  let n = 64 + g.group.length * 3;
  for (const m of g.members)
    n +=
      32 +
      m.memberId.length * 3 +
      m.topics.reduce((a, t) => a + 2 + t.length * 3, 0) +
      m.assignments.reduce((a, x) => a + 6 + x.topic.length * 3, 0);
  for (const o of g.offsets) n += 32 + o.topic.length * 3 + (o.owner?.length ?? 0) * 3;
  return n;
}

/** Encodes a DescribeGroup response frame. */
export function encodeDescribeGroupResponse(
  correlationId: number,
  group: GroupDescription,
): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + groupEntryBytesEstimate(group));
  writeGroupEntry(w, group);
  return finishFrame(w);
}

/** Decodes a DescribeGroup response body (lag is derived: high watermark − committed). @throws ProtocolError if malformed. */
export function decodeDescribeGroupResponse(body: Uint8Array): GroupDescription {
  const r = new WireReader(body, "DescribeGroup response");
  const group = readGroupEntry(r, "group");
  r.end("group");
  return group;
}

/** Encodes a ListGroups request frame (empty body). */
export function encodeListGroupsRequest(correlationId: number): Uint8Array {
  return finishFrame(startRequest(ApiKey.ListGroups, correlationId, 12));
}

/** Decodes a ListGroups request body (must be empty). */
export function decodeListGroupsRequest(body: Uint8Array): void {
  new WireReader(body, "ListGroups request").end("correlation_id");
}

/** Encodes a ListGroups response frame. */
export function encodeListGroupsResponse(
  correlationId: number,
  groups: readonly GroupDescription[],
): Uint8Array {
  const w = startResponse(
    correlationId,
    0,
    14 + groups.reduce((n, g) => n + groupEntryBytesEstimate(g), 0),
  );
  w.u32(groups.length);
  for (const g of groups) writeGroupEntry(w, g);
  return finishFrame(w);
}

/** Decodes a ListGroups response body. @throws ProtocolError if malformed. */
export function decodeListGroupsResponse(body: Uint8Array): GroupDescription[] {
  const r = new WireReader(body, "ListGroups response");
  const count = r.u32("group_count");
  // A group_entry is at least 2 + 8 + 4 + 4 bytes.
  checkRepeat(r, count, 18, "group_count");
  const groups: GroupDescription[] = [];
  for (let i = 0; i < count; i++) groups.push(readGroupEntry(r, `groups[${i}]`));
  r.end(count === 0 ? "group_count" : `groups[${count - 1}]`);
  return groups;
}

/** What an IdempotentProduce request carries. */
export interface IdempotentProduceRequestFields extends ProduceRequestFields {
  producer: { id: string; epoch: number; sequence: number };
}

/**
 * Encodes an IdempotentProduce request frame. The batch bytes are copied once.
 * @throws ProtocolError `invalid_request` for a field that does not fit.
 */
export function encodeIdempotentProduceRequest(
  correlationId: number,
  request: IdempotentProduceRequestFields,
): Uint8Array {
  const topic = topicBytes(request.topic, "idempotent_produce.topic");
  const id = nameBytes(request.producer.id, "idempotent_produce.producer_id");
  const partition = request.partition ?? -1;
  requireInt(partition, -1, 0x7fff_ffff, "idempotent_produce.partition");
  requireInt(request.producer.epoch, 0, 0xffff_ffff, "idempotent_produce.producer_epoch");
  requireInt(
    request.producer.sequence,
    0,
    Number.MAX_SAFE_INTEGER,
    "idempotent_produce.base_sequence",
  );
  requireInt(request.batch.count, 0, 0xffff_ffff, "idempotent_produce.record_count");
  const w = startRequest(
    ApiKey.IdempotentProduce,
    correlationId,
    12 + 2 + topic.length + 4 + 2 + id.length + 16 + request.batch.bytes.length,
  );
  w.u16(topic.length)
    .bytes(topic)
    .i32(partition)
    .u16(id.length)
    .bytes(id)
    .u32(request.producer.epoch)
    .u64(request.producer.sequence);
  w.u32(request.batch.count).bytes(request.batch.bytes);
  return finishFrame(w);
}

/**
 * Decodes an IdempotentProduce request body; the entries are checked as in Produce.
 * @throws ProtocolError `invalid_request` naming the field.
 */
export function decodeIdempotentProduceRequest(
  body: Uint8Array,
): ProduceRequest & { producer: NonNullable<ProduceRequest["producer"]> } {
  const r = new WireReader(body, "IdempotentProduce request");
  const topic = r.str16("topic");
  const partition = r.i32("partition");
  if (partition < -1) {
    throw new ProtocolError(
      Errors.invalidRequest,
      "partition",
      `Cannot decode IdempotentProduce request: field "partition" is ${partition}, must be ≥ 0 or −1`,
    );
  }
  const id = r.str16("producer_id");
  const epoch = r.u32("producer_epoch");
  const sequence = r.u64("base_sequence");
  const recordCount = r.u32("record_count");
  const entries = r.rest();
  let scanned: number;
  try {
    scanned = scanEntries(entries, { maxCount: produceRecordsMax });
  } catch (error) {
    if (error instanceof RecordFormatError) {
      throw new ProtocolError(
        Errors.invalidRequest,
        "entries",
        `Cannot decode IdempotentProduce request: field "entries": ${error.message}`,
      );
    }
    throw error;
  }
  if (scanned !== recordCount) {
    throw new ProtocolError(
      Errors.invalidRequest,
      "record_count",
      `Cannot decode IdempotentProduce request: field "record_count" is ${recordCount} but the entries hold ${scanned} records`,
    );
  }
  const request: ProduceRequest & { producer: NonNullable<ProduceRequest["producer"]> } = {
    topic,
    batch: { bytes: entries, count: scanned },
    producer: { id, epoch, sequence },
  };
  if (partition >= 0) request.partition = partition;
  return request;
}

/** Encodes an IdempotentProduce response frame. */
export function encodeIdempotentProduceResponse(
  correlationId: number,
  result: ProduceResult,
): Uint8Array {
  const w = startResponse(correlationId, 0, 11 + 4 + result.spans.length * produceSpanBytes);
  w.u8(result.duplicate === true ? 1 : 0).u32(result.spans.length);
  for (const span of result.spans) w.u32(span.partition).u64(span.baseOffset).u32(span.count);
  return finishFrame(w);
}

/** Decodes an IdempotentProduce response body. @throws ProtocolError if malformed. */
export function decodeIdempotentProduceResponse(body: Uint8Array): ProduceResult {
  const r = new WireReader(body, "IdempotentProduce response");
  const duplicate = readFlag(r, "duplicate");
  const spanCount = r.u32("span_count");
  checkRepeat(r, spanCount, produceSpanBytes, "span_count");
  const spans: ProduceResult["spans"] = [];
  for (let i = 0; i < spanCount; i++) {
    spans.push({
      partition: r.u32(`spans[${i}].partition`),
      baseOffset: r.u64(`spans[${i}].base_offset`),
      count: r.u32(`spans[${i}].count`),
    });
  }
  r.end("spans");
  return { spans, duplicate };
}
