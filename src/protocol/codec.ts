/**
 * The es-broker TCP wire format, version 0 of every api (full prose, limits and a worked example:
 * `docs/protocol.md`). All integers are big-endian. `str16` = u16 byte length | that many bytes of
 * UTF-8 (strict: invalid UTF-8 is invalid_request). `u64` values above 2^53 − 1 are refused with
 * `unsupported` (DECISIONS 6). A body shorter or longer than its grammar is `invalid_request`
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
 * api 6 and up    reserved for consumer groups and idempotent producers (not yet defined)
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
  CreateTopicRequest,
  FetchRequest,
  FetchResult,
  PartitionInfo,
  ProduceRequest,
  ProduceResult,
  TopicConfig,
  TopicDescription,
} from "../broker/types.ts";
import { produceRecordsMax } from "../lib/limits.ts";
import { RecordFormatError, scanEntries, type EntryBatch } from "../storage/record.ts";
import { ProtocolError, str16BytesMax, WireReader, WireWriter } from "./wire.ts";

export { ProtocolError } from "./wire.ts";

/** Api numbers. 6 and up are reserved for consumer groups and idempotent producers. */
export const ApiKey = Object.freeze({
  Produce: 0,
  Fetch: 1,
  CreateTopic: 2,
  Metadata: 3,
  ListOffsets: 4,
  DeleteTopic: 5,
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
});

/** Human names of the apis, for messages and logs. */
export const apiNames: Readonly<Record<ApiKey, string>> = Object.freeze({
  [ApiKey.Produce]: "Produce",
  [ApiKey.Fetch]: "Fetch",
  [ApiKey.CreateTopic]: "CreateTopic",
  [ApiKey.Metadata]: "Metadata",
  [ApiKey.ListOffsets]: "ListOffsets",
  [ApiKey.DeleteTopic]: "DeleteTopic",
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
  return Object.hasOwn(apiVersionMax, api) && version >= 0 && version <= apiVersionMax[api as ApiKey];
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
}

/** Encodes a response frame carrying an error-table row and a message. */
export function encodeErrorResponse(correlationId: number, kind: ErrorKind, message: string): Uint8Array {
  if (kind.tcp === 0) throw new RangeError("error number 0 means success");
  return finishFrame(startResponse(correlationId, kind.tcp, 64 + message.length * 3).str16(kind.code).str32(message));
}

/** Decodes an `error_body`. @throws ProtocolError `invalid_request` if malformed. */
export function decodeErrorBody(body: Uint8Array): ErrorBody {
  const r = new WireReader(body, "error response");
  const code = r.str16("code");
  const message = r.str32("message", "message_len");
  r.end("message");
  return { code, message };
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
export function encodeProduceRequest(correlationId: number, request: ProduceRequestFields): Uint8Array {
  const topic = topicBytes(request.topic, "produce.topic");
  const partition = request.partition ?? -1;
  requireInt(partition, -1, 0x7fff_ffff, "produce.partition");
  requireInt(request.batch.count, 0, 0xffff_ffff, "produce.record_count");
  const w = startRequest(ApiKey.Produce, correlationId, 12 + 2 + topic.length + 8 + request.batch.bytes.length);
  w.u16(topic.length).bytes(topic).i32(partition).u32(request.batch.count).bytes(request.batch.bytes);
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
    throw new ProtocolError(Errors.invalidRequest, "partition", `Cannot decode Produce request: field "partition" is ${partition}, must be ≥ 0 or −1`);
  }
  const recordCount = r.u32("record_count");
  const entries = r.rest();
  let scanned: number;
  try {
    scanned = scanEntries(entries, { maxCount: produceRecordsMax });
  } catch (error) {
    if (error instanceof RecordFormatError) {
      throw new ProtocolError(Errors.invalidRequest, "entries", `Cannot decode Produce request: field "entries": ${error.message}`);
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
  w.u16(topic.length).bytes(topic).u32(request.partition).u64(request.offset).u32(maxRecords).u32(maxBytes).u32(waitMs);
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

/** Encodes a Fetch response frame; the records are copied verbatim. */
export function encodeFetchResponse(correlationId: number, result: FetchResult): Uint8Array {
  const records = result.records.bytes;
  const w = startResponse(correlationId, 0, 10 + fetchResponseHeaderBytes + records.length);
  w.u64(result.highWatermark).u64(result.logStartOffset).u64(result.nextOffset);
  w.u32(result.records.count).u32(records.length).bytes(records);
  return finishFrame(w);
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
export function encodeCreateTopicRequest(correlationId: number, request: CreateTopicRequest): Uint8Array {
  const topic = topicBytes(request.name, "create_topic.topic");
  requireInt(request.partitions, 0, 0xffff_ffff, "create_topic.partitions");
  const config = request.config === undefined ? new Uint8Array(0) : encoder.encode(JSON.stringify(request.config));
  const w = startRequest(ApiKey.CreateTopic, correlationId, 12 + 2 + topic.length + 8 + config.length);
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
  if (configText.length > 0) request.config = parseJsonObject(configText, "CreateTopic request", "config");
  return request;
}

/** Encodes a CreateTopic response frame: one topic_entry. */
export function encodeCreateTopicResponse(correlationId: number, topic: TopicDescription): Uint8Array {
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
export function encodeMetadataRequest(correlationId: number, request: MetadataRequestFields): Uint8Array {
  const topics = request.topics.map((t, i) => topicBytes(t, `metadata.topics[${i}]`));
  const w = startRequest(ApiKey.Metadata, correlationId, 16 + topics.reduce((n, t) => n + 2 + t.length, 0));
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
export function encodeMetadataResponse(correlationId: number, topics: readonly TopicDescription[]): Uint8Array {
  const w = startResponse(correlationId, 0, 14 + topics.reduce((n, t) => n + topicEntryBytesEstimate(t), 0));
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
    w.u32(p.partition).u64(p.logStartOffset).u64(p.highWatermark).u64(p.sizeBytes).u32(p.segmentCount).u8(p.fenced ? 1 : 0);
  }
}

function readTopicEntry(r: WireReader, field: string): TopicDescription {
  const name = r.str16(`${field}.name`);
  const configText = r.str32(`${field}.config`, `${field}.config_len`);
  const config = parseJsonObject(configText, r.context, `${field}.config`) as unknown as TopicConfig;
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
      throw new ProtocolError(Errors.invalidRequest, `${at}.fenced`, `Cannot decode ${r.context}: field "${at}.fenced" is ${fenced}, must be 0 or 1`);
    }
    partitions.push({ partition, logStartOffset, highWatermark, sizeBytes, segmentCount, fenced: fenced === 1 });
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
export function encodeListOffsetsRequest(correlationId: number, request: ListOffsetsRequestFields): Uint8Array {
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
export function encodeListOffsetsResponse(correlationId: number, result: ListOffsetsResult): Uint8Array {
  return finishFrame(startResponse(correlationId, 0, 26).u64(result.logStartOffset).u64(result.highWatermark));
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
export function encodeDeleteTopicRequest(correlationId: number, request: { topic: string }): Uint8Array {
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
  if (typeof topic !== "string") throw new ProtocolError(Errors.invalidRequest, field, `Cannot encode request: field "${field}" must be a string`);
  const bytes = encoder.encode(topic);
  if (bytes.length > str16BytesMax) {
    throw new ProtocolError(Errors.invalidRequest, field, `Cannot encode request: field "${field}" is ${bytes.length} UTF-8 bytes, over ${str16BytesMax}`);
  }
  return bytes;
}

/** Checks a caller's value for an integer field before it is written. */
function requireInt(value: number, min: number, max: number, field: string): void {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ProtocolError(Errors.invalidRequest, field, `Cannot encode request: field "${field}" is ${value}, must be an integer in [${min}, ${max}]`);
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
    throw new ProtocolError(Errors.invalidRequest, field, `Cannot decode ${context}: field "${field}" is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ProtocolError(Errors.invalidRequest, field, `Cannot decode ${context}: field "${field}" must be a JSON object`);
  }
  return value as Record<string, unknown>;
}
