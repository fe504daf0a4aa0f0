/**
 * api 14 ReplicaFetch, versions 0, 1 and 2: a follower reads a partition's stored records from its leader
 * (cluster mode, `Broker.replicaFetch`; docs/cluster.md "Replica fetch"). Not a client api: it
 * carries the broker credential (the cluster secret), which API keys never match, and it is
 * served on a connection that has not authenticated with a key.
 *
 * ```
 * request        = topic str16
 *                  partition u32
 *                  replica_id u32            the follower's node id
 *                  leader_epoch u32          the epoch the follower believes current
 *                  fetch_offset u64          the follower's durable (fsynced) log end
 *                  last_fetched_epoch i32    epoch of the follower's last record, −1 if none
 *                  max_bytes u32             0 = broker default
 *                  wait_ms u32               long-poll when nothing is at fetch_offset
 *                  credential_len u16
 *                  credential [u8]           the broker credential, empty without one
 *                  incarnation str16         version 1: the follower's incarnation (the lease id
 *                                            its registration in etcd names); absent in version 0
 *                  topic_id str16            version 2: the topic id the follower's copy records
 *                                            ("" for none); absent in versions 0 and 1
 * response       = leader_epoch u32
 *                  high_watermark u64
 *                  log_start_offset u64
 *                  log_end_offset u64
 *                  diverging_epoch i32       −1 = the follower's log agrees with the leader's
 *                  diverging_end_offset u64  where the follower truncates to (0 if not diverging)
 *                  epoch_count u16
 *                  epochs [epoch_entry]
 *                  producer_count u32
 *                  producers [producer_batch]
 *                  record_count u32
 *                  records_bytes u32         must equal the bytes that follow
 *                  records [u8]              stored records verbatim, as Fetch answers them
 * epoch_entry    = epoch u32 | start_offset u64
 * producer_batch = producer_id str16 | epoch u32 | base_sequence u32 | batch_count u32
 *                  | first_index u32 | count u32 | base_offset u64 | fingerprint u32
 *                  | timestamp_ms u64
 * ```
 *
 * The answer goes out as chunks like a Fetch answer (a header, then the stored records: one
 * chunk read from the log, or the leader's kept recent writes), the stored records not copied.
 *
 * A leader credits a fetch (ISR membership, the follower's durable position, the high watermark)
 * only when its `incarnation` is the one node `replica_id` is registered with now, so an old
 * process of a replaced node cannot pose as its successor (docs/cluster.md "Replica fetch").
 * A version 0 request (an older es-broker) names none: decoded with an empty incarnation, which
 * no leader credits. A version 2 request names the topic id of the follower's copy: a leader whose
 * copy records another refuses it `inconsistent_topic_id` (docs/cluster.md "Topic ids"); versions
 * 0 and 1 (and an empty id) are not compared. Followers send version 2, and version 1 to a leader
 * that answers version 2 `unsupported_api` (an older es-broker, during a rolling upgrade).
 */
import type {
  LeaderEpochEntry,
  ReplicaFetchRequest,
  ReplicaFetchResult,
  ReplicatedProducerBatch,
} from "../../broker/types.ts";
import { BrokerError, Errors } from "../../broker/errors.ts";
import { concatBytes } from "../../lib/bytes.ts";
import { fetchBytesDefault } from "../../lib/limits.ts";
import { finishFrame, frameLengthBytes, startRequest, startResponse } from "../envelope.ts";
import { requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** ReplicaFetch: decode, `broker.replicaFetch` (aborted with the connection), encode as chunks. */
export const replicaFetchApi = defineApi({
  key: 14,
  name: "ReplicaFetch",
  versionMax: 2,
  serve(body, correlationId, { broker, signal }, version) {
    const request = decodeReplicaFetchRequest(body, version);
    const replicaFetch = broker.replicaFetch?.bind(broker);
    if (replicaFetch === undefined) {
      return {
        response: Promise.reject(
          new BrokerError(
            Errors.unsupportedApi,
            "Cannot serve a replica fetch: this broker does not run in cluster mode",
          ),
        ),
      };
    }
    return {
      response: replicaFetch({ ...request, signal }).then((result) =>
        encodeReplicaFetchResponseChunks(correlationId, result),
      ),
      answerBytes: request.maxBytes || fetchBytesDefault,
    };
  },
});

/** What a ReplicaFetch request carries (the broker's request without the abort signal). */
export type ReplicaFetchRequestFields = Omit<ReplicaFetchRequest, "signal">;

/** Largest credential a request may carry, in bytes. */
export const replicaCredentialBytesMax = 1024;

/**
 * Encodes a ReplicaFetch request frame: version 2 when `request.topicId` is given, else version
 * 1 (`maxBytes` 0 asks for the broker default).
 * @throws ProtocolError `invalid_request` for a value outside its field's range.
 */
export function encodeReplicaFetchRequest(
  correlationId: number,
  request: ReplicaFetchRequestFields,
): Uint8Array {
  const topic = strBytes(request.topic, "replica_fetch.topic");
  requireInt(request.partition, 0, 0xffff_ffff, "replica_fetch.partition");
  requireInt(request.replicaId, 0, 0xffff_ffff, "replica_fetch.replica_id");
  requireInt(request.leaderEpoch, 0, 0xffff_ffff, "replica_fetch.leader_epoch");
  requireInt(request.fetchOffset, 0, Number.MAX_SAFE_INTEGER, "replica_fetch.fetch_offset");
  requireInt(request.lastFetchedEpoch, -1, 0x7fff_ffff, "replica_fetch.last_fetched_epoch");
  requireInt(request.maxBytes, 0, 0xffff_ffff, "replica_fetch.max_bytes");
  requireInt(request.waitMs, 0, 0xffff_ffff, "replica_fetch.wait_ms");
  requireInt(
    request.credential.length,
    0,
    replicaCredentialBytesMax,
    "replica_fetch.credential_len",
  );
  const incarnation = strBytes(request.incarnation, "replica_fetch.incarnation");
  const topicId =
    request.topicId === undefined ? null : strBytes(request.topicId, "replica_fetch.topic_id");
  const w = startRequest(
    replicaFetchApi.key,
    correlationId,
    12 +
      2 +
      topic.length +
      36 +
      2 +
      request.credential.length +
      2 +
      incarnation.length +
      (topicId === null ? 0 : 2 + topicId.length),
    topicId === null ? 1 : 2,
  );
  w.u16(topic.length)
    .bytes(topic)
    .u32(request.partition)
    .u32(request.replicaId)
    .u32(request.leaderEpoch)
    .u64(request.fetchOffset)
    .i32(request.lastFetchedEpoch)
    .u32(request.maxBytes)
    .u32(request.waitMs)
    .u16(request.credential.length)
    .bytes(request.credential)
    .u16(incarnation.length)
    .bytes(incarnation);
  if (topicId !== null) w.u16(topicId.length).bytes(topicId);
  return finishFrame(w);
}

/**
 * Decodes a ReplicaFetch request body of `version` (0: no incarnation, decoded as ""; 0 and 1:
 * no topic id, left out).
 * @throws ProtocolError `invalid_request` naming the field, `unsupported` for an offset above 2^53 − 1.
 */
export function decodeReplicaFetchRequest(
  body: Uint8Array,
  version = 1,
): ReplicaFetchRequestFields {
  const r = new WireReader(body, "ReplicaFetch request");
  const topic = r.str16("topic");
  const partition = r.u32("partition");
  const replicaId = r.u32("replica_id");
  const leaderEpoch = r.u32("leader_epoch");
  const fetchOffset = r.u64("fetch_offset");
  const lastFetchedEpoch = r.i32("last_fetched_epoch");
  const maxBytes = r.u32("max_bytes");
  const waitMs = r.u32("wait_ms");
  const credentialLength = r.u16("credential_len");
  const credential = r.bytes("credential", credentialLength);
  const incarnation = version >= 1 ? r.str16("incarnation") : "";
  const topicId = version >= 2 ? r.str16("topic_id") : undefined;
  r.end(version >= 2 ? "topic_id" : version >= 1 ? "incarnation" : "credential");
  return {
    topic,
    partition,
    replicaId,
    leaderEpoch,
    fetchOffset,
    lastFetchedEpoch: Math.max(lastFetchedEpoch, -1),
    maxBytes,
    waitMs,
    credential,
    incarnation,
    ...(topicId === undefined ? {} : { topicId }),
  };
}

/**
 * Encodes a ReplicaFetch response as chunks: everything before `records` (its `length` counting
 * the records too), then the stored records, not copied: `result.recordChunks` when set, else
 * `result.records.bytes`.
 */
export function encodeReplicaFetchResponseChunks(
  correlationId: number,
  result: ReplicaFetchResult,
): [prefix: Uint8Array, ...records: Uint8Array[]] {
  const chunks = result.recordChunks ?? [result.records.bytes];
  let recordsBytes = 0;
  for (const c of chunks) recordsBytes += c.length;
  const w = startResponse(correlationId, 0, 128 + result.producers.length * 64);
  w.u32(result.leaderEpoch)
    .u64(result.highWatermark)
    .u64(result.logStartOffset)
    .u64(result.logEndOffset)
    .i32(result.diverging === null ? -1 : result.diverging.epoch)
    .u64(result.diverging === null ? 0 : result.diverging.endOffset)
    .u16(result.epochs.length);
  for (const e of result.epochs) w.u32(e.epoch).u64(e.startOffset);
  w.u32(result.producers.length);
  for (const p of result.producers) {
    w.str16(p.producerId)
      .u32(p.epoch)
      .u32(p.baseSequence)
      .u32(p.batchCount)
      .u32(p.firstIndex)
      .u32(p.count)
      .u64(p.baseOffset)
      .u32(p.fingerprint)
      .u64(p.timestampMs);
  }
  w.u32(result.records.count).u32(recordsBytes);
  w.patchU32(0, w.position - frameLengthBytes + recordsBytes);
  return [w.finish(), ...chunks];
}

/** Encodes a ReplicaFetch response frame in one buffer (tests; the server writes the chunks). */
export function encodeReplicaFetchResponse(
  correlationId: number,
  result: ReplicaFetchResult,
): Uint8Array {
  return concatBytes(encodeReplicaFetchResponseChunks(correlationId, result));
}

/**
 * Decodes a ReplicaFetch response body. The records are a view of `body`, not checked: the
 * follower checks every CRC before it appends (`cluster/follower.ts`).
 * @throws ProtocolError if malformed or `records_bytes` disagrees with the bytes present.
 */
export function decodeReplicaFetchResponse(body: Uint8Array): ReplicaFetchResult {
  const r = new WireReader(body, "ReplicaFetch response");
  const leaderEpoch = r.u32("leader_epoch");
  const highWatermark = r.u64("high_watermark");
  const logStartOffset = r.u64("log_start_offset");
  const logEndOffset = r.u64("log_end_offset");
  const divergingEpoch = r.i32("diverging_epoch");
  const divergingEnd = r.u64("diverging_end_offset");
  const epochCount = r.u16("epoch_count");
  const epochs: LeaderEpochEntry[] = [];
  for (let i = 0; i < epochCount; i++)
    epochs.push({ epoch: r.u32("epochs.epoch"), startOffset: r.u64("epochs.start_offset") });
  const producerCount = r.u32("producer_count");
  const producers: ReplicatedProducerBatch[] = [];
  for (let i = 0; i < producerCount; i++) {
    producers.push({
      producerId: r.str16("producers.producer_id"),
      epoch: r.u32("producers.epoch"),
      baseSequence: r.u32("producers.base_sequence"),
      batchCount: r.u32("producers.batch_count"),
      firstIndex: r.u32("producers.first_index"),
      count: r.u32("producers.count"),
      baseOffset: r.u64("producers.base_offset"),
      fingerprint: r.u32("producers.fingerprint"),
      timestampMs: r.u64("producers.timestamp_ms"),
    });
  }
  const count = r.u32("record_count");
  const recordsBytes = r.u32("records_bytes");
  const bytes = r.bytes("records", recordsBytes);
  r.end("records");
  return {
    leaderEpoch,
    highWatermark,
    logStartOffset,
    logEndOffset,
    diverging: divergingEpoch < 0 ? null : { epoch: divergingEpoch, endOffset: divergingEnd },
    epochs,
    producers,
    records: { bytes, count },
  };
}
