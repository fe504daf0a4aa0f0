/**
 * Kafka framing, the request header, the api table and ApiVersions (docs/kafka.md "Framing",
 * "Supported apis"). Grammar (non-flexible; Kafka's `RequestHeader.json` v1 and
 * `ResponseHeader.json` v0):
 *
 * ```
 * request  = size int32 | api_key int16 | api_version int16 | correlation_id int32
 *            | client_id nullable string | body
 * response = size int32 | correlation_id int32 | body
 * ```
 *
 * `size` counts the bytes after itself. ApiVersions v3 (flexible, request header v2) is answered
 * without parsing past the fixed 8 bytes: error 35 UNSUPPORTED_VERSION in the v0 layout, as Kafka
 * does, and librdkafka then asks again with v0.
 *
 * ApiVersions (`ApiVersionsRequest.json` / `ApiVersionsResponse.json`, v0–2):
 * ```
 * request v0–2  = (empty)
 * response v0   = error_code int16 | api_keys [api_key int16 | min_version int16 | max_version int16]
 * response v1–2 = the same | throttle_time_ms int32
 * ```
 */
import { KafkaReader, KafkaWriter } from "./wire.ts";

/** Kafka api keys this listener knows. */
export const KafkaApi = {
  Produce: 0,
  Fetch: 1,
  ListOffsets: 2,
  Metadata: 3,
  OffsetCommit: 8,
  OffsetFetch: 9,
  FindCoordinator: 10,
  JoinGroup: 11,
  Heartbeat: 12,
  LeaveGroup: 13,
  SyncGroup: 14,
  SaslHandshake: 17,
  ApiVersions: 18,
  InitProducerId: 22,
  SaslAuthenticate: 36,
} as const;

/**
 * Names of Kafka apis es-broker does not serve that clients (admin tools above all) send, so a
 * refusal names them (docs/kafka.md "Not supported").
 */
const unservedApiNames: ReadonlyMap<number, string> = new Map([
  [15, "DescribeGroups"],
  [16, "ListGroups"],
  [19, "CreateTopics"],
  [20, "DeleteTopics"],
  [21, "DeleteRecords"],
  [24, "AddPartitionsToTxn"],
  [25, "AddOffsetsToTxn"],
  [26, "EndTxn"],
  [28, "TxnOffsetCommit"],
  [32, "DescribeConfigs"],
  [33, "AlterConfigs"],
  [37, "CreatePartitions"],
  [42, "DeleteGroups"],
  [47, "OffsetDelete"],
  [60, "DescribeCluster"],
]);

/** The name of an api key, for logs and messages (`api N` for one without a name here). */
export function kafkaApiName(key: number): string {
  for (const [name, k] of Object.entries(KafkaApi)) if (k === key) return name;
  return unservedApiNames.get(key) ?? `api ${key}`;
}

/**
 * The advertised version ranges (docs/kafka.md "Supported apis"). Every range is below the api's
 * first flexible version. Produce is advertised from 0 because librdkafka compresses only when
 * Produce v0 is in range, but only v3 is served (neither client sends less once 3 is in range);
 * FindCoordinator must include v0 and SaslHandshake must be 0–1 for librdkafka to use them.
 */
export const advertisedVersions: readonly { key: number; min: number; max: number }[] = [
  { key: KafkaApi.Produce, min: 0, max: 3 },
  { key: KafkaApi.Fetch, min: 4, max: 4 },
  { key: KafkaApi.ListOffsets, min: 1, max: 1 },
  { key: KafkaApi.Metadata, min: 1, max: 1 },
  { key: KafkaApi.OffsetCommit, min: 2, max: 2 },
  { key: KafkaApi.OffsetFetch, min: 1, max: 1 },
  { key: KafkaApi.FindCoordinator, min: 0, max: 0 },
  { key: KafkaApi.JoinGroup, min: 1, max: 1 },
  { key: KafkaApi.Heartbeat, min: 0, max: 0 },
  { key: KafkaApi.LeaveGroup, min: 0, max: 0 },
  { key: KafkaApi.SyncGroup, min: 0, max: 0 },
  { key: KafkaApi.SaslHandshake, min: 0, max: 1 },
  { key: KafkaApi.ApiVersions, min: 0, max: 2 },
  { key: KafkaApi.InitProducerId, min: 0, max: 0 },
  { key: KafkaApi.SaslAuthenticate, min: 0, max: 0 },
];

/** The versions actually served per api (Produce: only 3). */
const servedVersions = new Map<number, { min: number; max: number }>(
  advertisedVersions.map((a) => [a.key, a.key === KafkaApi.Produce ? { min: 3, max: 3 } : a]),
);

/** True if this listener serves `version` of api `key`. */
export function isServedVersion(key: number, version: number): boolean {
  const range = servedVersions.get(key);
  return range !== undefined && version >= range.min && version <= range.max;
}

/** Bytes of a request after `size` before client_id: api_key, api_version, correlation_id. */
export const requestFixedHeaderBytes = 8;
/** Smallest request `size`: the fixed header and a client_id length. */
export const requestSizeMin = requestFixedHeaderBytes + 2;

/** A request header. */
export interface KafkaRequestHeader {
  apiKey: number;
  apiVersion: number;
  correlationId: number;
  clientId: string | null;
}

/**
 * Reads the 8 fixed header bytes of a request frame (the bytes after `size`): always present,
 * whatever the version. The caller has checked the frame is at least {@link requestSizeMin}.
 */
export function peekRequestHeader(frame: Uint8Array): {
  apiKey: number;
  apiVersion: number;
  correlationId: number;
} {
  const v = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  return { apiKey: v.getInt16(0), apiVersion: v.getInt16(2), correlationId: v.getInt32(4) };
}

/**
 * Decodes a non-flexible request header (v1); returns it and the body.
 * @throws KafkaDecodeError if the client_id is malformed.
 */
export function decodeRequestHeader(frame: Uint8Array): {
  header: KafkaRequestHeader;
  body: Uint8Array;
} {
  const r = new KafkaReader(frame, "request header");
  const apiKey = r.int16("api_key");
  const apiVersion = r.int16("api_version");
  const correlationId = r.int32("correlation_id");
  const clientId = r.nullableString("client_id");
  return {
    header: { apiKey, apiVersion, correlationId, clientId },
    body: frame.subarray(frame.length - r.remainingBytes),
  };
}

/** Encodes a request frame (clients, tests, the benchmark): size, header v1, body. */
export function encodeRequest(
  header: KafkaRequestHeader,
  writeBody: (w: KafkaWriter) => void,
): Uint8Array {
  const w = new KafkaWriter(64);
  w.int32(0).int16(header.apiKey).int16(header.apiVersion).int32(header.correlationId);
  w.string(header.clientId);
  writeBody(w);
  return finishFrame(w);
}

/** Starts a response frame: a size placeholder and the correlation id. */
export function startResponse(correlationId: number, capacityBytes = 64): KafkaWriter {
  return new KafkaWriter(capacityBytes).int32(0).int32(correlationId);
}

/** Patches the size of a frame started with {@link startResponse} or {@link encodeRequest}. */
export function finishFrame(w: KafkaWriter): Uint8Array {
  w.patchInt32(0, w.length - 4);
  return w.finish();
}

/**
 * Splits a response frame (the bytes after `size`) into correlation id and body (clients, tests).
 * @throws KafkaDecodeError if shorter than 4 bytes.
 */
export function decodeResponseHeader(frame: Uint8Array): {
  correlationId: number;
  body: Uint8Array;
} {
  const r = new KafkaReader(frame, "response header");
  const correlationId = r.int32("correlation_id");
  return { correlationId, body: frame.subarray(4) };
}

/** Encodes an ApiVersions response of `version` 0–2; error 35 sends an empty api list. */
export function encodeApiVersionsResponse(
  correlationId: number,
  version: number,
  errorCode = 0,
): Uint8Array {
  const w = startResponse(correlationId, 16 + advertisedVersions.length * 6);
  w.int16(errorCode);
  // On UNSUPPORTED_VERSION Kafka still lists its versions, so the client can pick one.
  w.array(advertisedVersions, (a) => w.int16(a.key).int16(a.min).int16(a.max));
  if (version >= 1) w.int32(0);
  return finishFrame(w);
}

/** Decodes an ApiVersions response body (tests). */
export function decodeApiVersionsResponse(
  body: Uint8Array,
  version: number,
): { errorCode: number; apis: { key: number; min: number; max: number }[] } {
  const r = new KafkaReader(body, `ApiVersions v${version} response`);
  const errorCode = r.int16("error_code");
  const apis = r.array("api_keys", 6, () => ({
    key: r.int16("api_key"),
    min: r.int16("min_version"),
    max: r.int16("max_version"),
  }));
  if (version >= 1) r.int32("throttle_time_ms");
  r.end();
  return { errorCode, apis };
}
