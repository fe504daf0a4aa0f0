/**
 * One handler per Kafka api (docs/kafka.md "Supported apis", "What is mapped how"): decode the
 * request (`protocol/kafka/`), call the {@link Broker}, encode the answer. The broker is called
 * synchronously, before any await, so requests of one connection reach it in frame order.
 */
import { BrokerError, Errors, kafkaErrorCode } from "../../broker/errors.ts";
import type {
  Broker,
  ClusterMetadata,
  FetchResult,
  ProduceResult,
  TopicDescription,
} from "../../broker/types.ts";
import { onAbort } from "../../lib/abort.ts";
import {
  fetchBytesMax,
  fetchRecordsMax,
  fetchWaitMsMax,
  produceRecordsMax,
  recordPayloadBytesMax,
} from "../../lib/limits.ts";
import {
  type FetchPartitionResponse,
  decodeFetchRequest,
  decodeListOffsetsRequest,
  encodeFetchResponse,
  encodeListOffsetsResponse,
} from "../../protocol/kafka/fetch.ts";
import {
  decodeConsumerAssignment,
  decodeConsumerSubscription,
  decodeHeartbeatRequest,
  decodeJoinGroupRequest,
  decodeLeaveGroupRequest,
  decodeOffsetCommitRequest,
  decodeOffsetFetchRequest,
  decodeSyncGroupRequest,
  encodeErrorCodeResponse,
  encodeJoinGroupResponse,
  encodeOffsetCommitResponse,
  encodeOffsetFetchResponse,
  encodeSyncGroupResponse,
} from "../../protocol/kafka/groups.ts";
import {
  KafkaApi,
  decodeRequestHeader,
  encodeApiVersionsResponse,
  isServedVersion,
  kafkaApiName,
  peekRequestHeader,
} from "../../protocol/kafka/header.ts";
import {
  decodeFindCoordinatorRequest,
  decodeMetadataRequest,
  encodeFindCoordinatorResponse,
  encodeMetadataResponse,
  type KafkaNode,
  type MetadataTopic,
} from "../../protocol/kafka/metadata.ts";
import {
  type ProducePartitionResponse,
  decodeInitProducerIdRequest,
  decodeProduceRequest,
  encodeInitProducerIdResponse,
  encodeProduceResponse,
} from "../../protocol/kafka/produce.ts";
import {
  RecordBatchError,
  decodeRecordBatch,
  encodeRecordBatch,
} from "../../protocol/kafka/record-batch.ts";
import {
  decodeSaslAuthenticateRequest,
  decodeSaslHandshakeRequest,
  encodeSaslAuthenticateResponse,
  encodeSaslHandshakeResponse,
  parsePlainToken,
} from "../../protocol/kafka/sasl.ts";
import type { KafkaSettings } from "./listener.ts";
import type { KafkaSession } from "./sasl.ts";

/** Kafka error codes the handlers use by name. */
const K = {
  none: 0,
  unknownServerError: -1,
  unknownTopicOrPartition: 3,
  coordinatorNotAvailable: 15,
  notCoordinator: 16,
  topicAuthorizationFailed: 29,
  invalidGroupId: 24,
  groupAuthorizationFailed: 30,
  clusterAuthorizationFailed: 31,
  notEnoughReplicasAfterAppend: 20,
  invalidRequiredAcks: 21,
  unsupportedSaslMechanism: 33,
  illegalSaslState: 34,
  unsupportedVersion: 35,
  invalidRequest: 42,
  saslAuthenticationFailed: 58,
} as const;

/** Thrown by a handler to close the connection (after the answers before it). */
export class CloseConnection extends Error {
  override name = "CloseConnection";
  /**
   * @param logged true if the refusal was already counted and logged elsewhere (`auth.failed`),
   *   so the listener does not count it again as `kafka.request_refused`.
   */
  constructor(
    message: string,
    readonly logged = false,
  ) {
    super(message);
  }
}

/** What a connection keeps between requests. */
export interface KafkaConnectionState {
  settings: KafkaSettings;
  /** Aborted when the connection closes: ends long-polling fetches. */
  signal: AbortSignal;
  remote: string;
  /**
   * The host this connection reached, advertised to it instead of the listener's
   * (`KafkaTransportOptions.advertiseReachedHost`); undefined: the listener's.
   */
  reachedHost: string | undefined;
  /** The broker to serve through: null until SASL succeeds when authentication is required. */
  broker: Broker | null;
  sasl: "start" | "handshaken" | "authenticated" | "failed";
  /** Takes the session a SaslAuthenticate made (the connection keeps it and releases it when it closes). */
  authenticated(session: KafkaSession): void;
  /** Closes the connection: its principal is no longer valid (a revoked or changed key). */
  invalidated(): void;
}

/** A started request. */
export interface KafkaServed {
  /** The response frame (or its chunks); null when the client expects none (Produce acks 0). */
  response: Promise<Uint8Array | readonly Uint8Array[] | null>;
  /** Bytes the answer may reach beyond the frame (a Fetch's max_bytes). */
  answerBytes: number;
  /** True if the connection closes after this answer (a failed SaslAuthenticate); nothing after it is read. */
  closeAfter?: boolean;
}

/**
 * The Kafka code of any error a broker call threw (non-BrokerErrors are −1 and rethrown by the
 * caller's log). From the group apis (`group`), `unavailable` is COORDINATOR_NOT_AVAILABLE (15),
 * `not_leader` (cluster mode: not the coordinator) NOT_COORDINATOR (16) and
 * a `forbidden` that names no topic (the role, or the group) is GROUP_AUTHORIZATION_FAILED (30);
 * a refused topic stays TOPIC_AUTHORIZATION_FAILED (29); `not_enough_replicas` after the records
 * were appended is NOT_ENOUGH_REPLICAS_AFTER_APPEND (20).
 */
function codeOf(error: unknown, group = false): number {
  if (!(error instanceof BrokerError)) return K.unknownServerError;
  if (group && error.kind === Errors.unavailable) return K.coordinatorNotAvailable;
  // Cluster mode: a broker other than the controller refuses group requests (cluster-broker.ts).
  if (group && error.kind === Errors.notLeader) return K.notCoordinator;
  if (group && error.kind === Errors.forbidden && error.details?.topic === undefined)
    return K.groupAuthorizationFailed;
  // Refused after the leader appended the records (broker.ts `afterAppend`): Kafka's own code.
  if (error.kind === Errors.notEnoughReplicas && error.details?.may_be_stored === true)
    return K.notEnoughReplicasAfterAppend;
  return kafkaErrorCode(error.kind);
}

/**
 * The Kafka code of an error a group api threw ({@link codeOf} with `group`); a group id the
 * broker cannot hold (`validateGroupName`: it names a file) is INVALID_GROUP_ID (24), logged as
 * `kafka.group_refused` with the reason, since the answer carries no message (docs/kafka.md
 * "Consumer groups").
 */
function groupCode(error: unknown, s: KafkaSettings): number {
  if (
    error instanceof BrokerError &&
    error.kind === Errors.invalidRequest &&
    error.details?.field === "group"
  ) {
    s.refusals.refuse("kafka.group_refused", {
      kafka_code: K.invalidGroupId,
      reason: error.message,
    });
    return K.invalidGroupId;
  }
  return codeOf(error, true);
}

/** Calls the broker now; a synchronous throw (the broker view's authorization) becomes a rejection. */
function call<T>(f: () => Promise<T>): Promise<T> {
  try {
    return f();
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Rethrows what is not a BrokerError (a bug: logged by the listener, connection closed). */
function brokerErrorOnly(error: unknown): void {
  if (!(error instanceof BrokerError)) throw error;
}

const answered = (bytes: Uint8Array): KafkaServed => ({
  response: Promise.resolve(bytes),
  answerBytes: 0,
});

/** What to use instead of an api es-broker does not serve, where there is something. */
const unservedApiHints: ReadonlyMap<number, string> = new Map([
  [19, ": create topics with es-broker topics create or POST /v1/topics"],
  [20, ": delete topics with es-broker topics delete or DELETE /v1/topics/{topic}"],
  [32, ": read a topic's config with es-broker topics describe or GET /v1/topics/{topic}"],
]);

/**
 * Starts serving one request frame (the bytes after `size`).
 * @throws CloseConnection or KafkaDecodeError when the connection must close.
 */
export function serveKafkaRequest(frame: Uint8Array, state: KafkaConnectionState): KafkaServed {
  const { apiKey, apiVersion, correlationId } = peekRequestHeader(frame);
  if (apiKey === KafkaApi.ApiVersions) {
    // Answered at any version from the fixed header alone: v3+ (flexible) get error 35 in the v0 layout.
    const served = isServedVersion(apiKey, apiVersion);
    return answered(
      encodeApiVersionsResponse(
        correlationId,
        served ? apiVersion : 0,
        served ? 0 : K.unsupportedVersion,
      ),
    );
  }
  if (!isServedVersion(apiKey, apiVersion))
    throw new CloseConnection(
      `${kafkaApiName(apiKey)} (api ${apiKey}) version ${apiVersion} is not served${unservedApiHints.get(apiKey) ?? ""}`,
    );
  const { header, body } = decodeRequestHeader(frame);
  if (apiKey === KafkaApi.SaslHandshake) return answered(saslHandshake(body, correlationId, state));
  if (apiKey === KafkaApi.SaslAuthenticate) return saslAuthenticate(body, correlationId, state);
  const broker = state.broker;
  if (broker === null) {
    state.settings.authenticator?.refused(state.remote, "missing");
    throw new CloseConnection("a request before SASL authentication", true);
  }
  const s = state.settings;
  switch (apiKey) {
    case KafkaApi.Metadata:
      return {
        response: metadata(body, correlationId, broker, advertising(state)),
        answerBytes: 0,
      };
    case KafkaApi.Produce:
      return produce(body, correlationId, broker, s);
    case KafkaApi.Fetch:
      return fetch(body, correlationId, broker, state.signal);
    case KafkaApi.ListOffsets:
      return { response: listOffsets(body, correlationId, broker), answerBytes: 0 };
    case KafkaApi.FindCoordinator: {
      decodeFindCoordinatorRequest(body);
      const as = advertising(state);
      if (broker.clusterMetadata !== undefined)
        return { response: findClusterCoordinator(correlationId, broker, as), answerBytes: 0 };
      return answered(
        encodeFindCoordinatorResponse(correlationId, { errorCode: 0, node: as.node }),
      );
    }
    case KafkaApi.JoinGroup:
      return {
        response: joinGroup(body, correlationId, broker, header.clientId ?? "", s),
        answerBytes: 0,
      };
    case KafkaApi.SyncGroup:
      return { response: syncGroup(body, correlationId, broker, s), answerBytes: 0 };
    case KafkaApi.Heartbeat:
      return { response: heartbeat(body, correlationId, broker, s), answerBytes: 0 };
    case KafkaApi.LeaveGroup:
      return { response: leaveGroup(body, correlationId, broker, s), answerBytes: 0 };
    case KafkaApi.OffsetCommit:
      return { response: offsetCommit(body, correlationId, broker, s), answerBytes: 0 };
    case KafkaApi.OffsetFetch:
      return { response: offsetFetch(body, correlationId, broker, s), answerBytes: 0 };
    case KafkaApi.InitProducerId:
      return { response: initProducerId(body, correlationId, broker), answerBytes: 0 };
    default:
      throw new CloseConnection(`api ${apiKey} is not served`);
  }
}

// ---------------------------------------------------------------------------------------------
// SASL (transport/kafka/sasl.ts has the state table)

function saslHandshake(
  body: Uint8Array,
  correlationId: number,
  state: KafkaConnectionState,
): Uint8Array {
  const { mechanism } = decodeSaslHandshakeRequest(body);
  const mechanisms = ["PLAIN"];
  // Without an authenticator, or once the connection is served (anonymously or authenticated):
  // as on a Kafka listener without SASL.
  if (state.settings.authenticator === null || state.broker !== null || state.sasl !== "start")
    return encodeSaslHandshakeResponse(correlationId, {
      errorCode: K.illegalSaslState,
      mechanisms,
    });
  if (mechanism !== "PLAIN")
    return encodeSaslHandshakeResponse(correlationId, {
      errorCode: K.unsupportedSaslMechanism,
      mechanisms,
    });
  state.sasl = "handshaken";
  return encodeSaslHandshakeResponse(correlationId, { errorCode: 0, mechanisms });
}

function saslAuthenticate(
  body: Uint8Array,
  correlationId: number,
  state: KafkaConnectionState,
): KafkaServed {
  const { authBytes } = decodeSaslAuthenticateRequest(body);
  const authenticator = state.settings.authenticator;
  if (authenticator === null || state.sasl !== "handshaken") {
    if (state.sasl === "start" && state.broker === null) {
      authenticator?.refused(state.remote, "missing");
      throw new CloseConnection("SaslAuthenticate before SaslHandshake", true);
    }
    return answered(
      encodeSaslAuthenticateResponse(correlationId, {
        errorCode: K.illegalSaslState,
        errorMessage: "SASL authentication is not expected now",
      }),
    );
  }
  const plain = parsePlainToken(authBytes);
  let session: KafkaSession | null = null;
  if (plain === null) authenticator.refused(state.remote, "missing");
  else
    session = authenticator.authenticate(
      { user: plain.user, password: plain.password, remote: state.remote },
      state.invalidated,
    );
  if (session === null) {
    // One message whatever was wrong: it must not tell whether the user exists.
    state.sasl = "failed";
    return {
      ...answered(
        encodeSaslAuthenticateResponse(correlationId, {
          errorCode: K.saslAuthenticationFailed,
          errorMessage: "Authentication failed: invalid user name or password",
        }),
      ),
      closeAfter: true,
    };
  }
  state.sasl = "authenticated";
  state.broker = state.settings.meter(session.broker);
  state.authenticated(session);
  return answered(
    encodeSaslAuthenticateResponse(correlationId, { errorCode: 0, errorMessage: null }),
  );
}

// ---------------------------------------------------------------------------------------------
// Metadata

/** The settings with the node this connection is told about (its reached host, if any). */
function advertising(state: KafkaConnectionState): KafkaSettings {
  const s = state.settings;
  if (state.reachedHost === undefined) return s;
  return { ...s, node: { ...s.node, host: state.reachedHost } };
}

async function metadata(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const { topics: names } = decodeMetadataRequest(body);
  if (broker.clusterMetadata !== undefined) return clusterMetadata(correlationId, broker, names, s);
  const described: MetadataTopic[] = [];
  const partitionsOf = (t: TopicDescription): number[] => t.partitions.map((p) => p.partition);
  if (names === null) {
    for (const t of await broker.listTopics())
      described.push({ errorCode: 0, name: t.name, partitions: partitionsOf(t) });
  } else {
    for (const name of names) {
      try {
        const t = await broker.describeTopic(name);
        described.push({ errorCode: 0, name, partitions: partitionsOf(t) });
      } catch (error) {
        brokerErrorOnly(error);
        described.push({ errorCode: codeOf(error), name, partitions: [] });
      }
    }
  }
  return encodeMetadataResponse(correlationId, { node: s.node, topics: described });
}

/** The Kafka address of each broker of `m` that has a Kafka listener. */
function kafkaNodes(m: ClusterMetadata): KafkaNode[] {
  const nodes: KafkaNode[] = [];
  for (const b of m.brokers) {
    const hp = b.kafka === undefined ? null : /^\[?([^\]]*?)\]?:(\d+)$/.exec(b.kafka);
    if (hp !== null) nodes.push({ nodeId: b.node_id, host: hp[1], port: Number(hp[2]) });
  }
  return nodes;
}

/**
 * Metadata in cluster mode (docs/cluster.md "Clients"): every live broker with a Kafka listener,
 * and every partition's leader (LEADER_NOT_AVAILABLE while it has none), replicas and ISR, so
 * Kafka clients send each partition's requests to its leader.
 */
async function clusterMetadata(
  correlationId: number,
  broker: Broker,
  names: string[] | null,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const all = await broker.clusterMetadata!();
  const byName = new Map(all.topics.map((t) => [t.name, t]));
  const wanted = names ?? all.topics.map((t) => t.name);
  const described: MetadataTopic[] = [];
  for (const name of wanted) {
    const t = byName.get(name);
    if (t === undefined) {
      // A topic of this broker alone (made before it joined), or none.
      try {
        const local = await broker.describeTopic(name);
        described.push({
          errorCode: 0,
          name,
          partitions: local.partitions.map((p) => ({
            errorCode: 0,
            partition: p.partition,
            leader: all.node_id,
            replicas: [all.node_id],
            isr: [all.node_id],
          })),
        });
      } catch (error) {
        brokerErrorOnly(error);
        described.push({ errorCode: codeOf(error), name, partitions: [] });
      }
      continue;
    }
    described.push({
      errorCode: 0,
      name,
      partitions: t.partitions.map((p) => ({
        errorCode: p.leader === -1 ? 5 : 0,
        partition: p.partition,
        leader: p.leader,
        replicas: p.replicas,
        isr: p.isr,
      })),
    });
  }
  const self = { ...s.node, nodeId: all.node_id };
  const brokers = kafkaNodes(all).map((n) => (n.nodeId === all.node_id ? self : n));
  if (!brokers.some((n) => n.nodeId === all.node_id)) brokers.push(self);
  return encodeMetadataResponse(correlationId, {
    node: self,
    topics: described,
    brokers,
    controllerId: all.controller,
  });
}

/**
 * FindCoordinator in cluster mode: the controller's Kafka listener (group state is kept by one
 * broker, not replicated: docs/cluster.md), else this broker; COORDINATOR_NOT_AVAILABLE (15)
 * while there is no controller with a Kafka listener.
 */
async function findClusterCoordinator(
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const all = await broker.clusterMetadata!([]);
  const node = kafkaNodes(all).find((n) => n.nodeId === all.controller);
  if (all.controller === all.node_id)
    return encodeFindCoordinatorResponse(correlationId, {
      errorCode: 0,
      node: { ...s.node, nodeId: all.node_id },
    });
  if (node === undefined)
    return encodeFindCoordinatorResponse(correlationId, { errorCode: 15, node: s.node });
  return encodeFindCoordinatorResponse(correlationId, { errorCode: 0, node });
}

// ---------------------------------------------------------------------------------------------
// Produce

function produce(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): KafkaServed {
  const request = decodeProduceRequest(body);
  const validAcks = request.acks === 0 || request.acks === 1 || request.acks === -1;
  const results: Promise<{ name: string; partitions: ProducePartitionResponse[] }>[] = [];
  for (const topic of request.topics) {
    const partitions: Promise<ProducePartitionResponse>[] = [];
    for (const p of topic.partitions) {
      const failed = (errorCode: number): Promise<ProducePartitionResponse> =>
        Promise.resolve({ index: p.index, errorCode, baseOffset: -1 });
      if (!validAcks) {
        partitions.push(failed(K.invalidRequiredAcks));
        continue;
      }
      if (request.transactionalId !== null || p.records === null) {
        partitions.push(failed(K.invalidRequest));
        continue;
      }
      let produced: Promise<ProduceResult>;
      try {
        const batch = decodeRecordBatch(p.records, {
          maxUncompressedBytes: s.maxRequestBytes,
          maxRecords: produceRecordsMax,
          maxRecordPayloadBytes: recordPayloadBytesMax,
          gunzip: s.gunzip,
        });
        produced = broker.produce({
          topic: topic.name,
          partition: p.index,
          batch: batch.entries,
          producer:
            batch.producerId >= 0
              ? {
                  id: String(batch.producerId),
                  epoch: batch.producerEpoch,
                  sequence: batch.baseSequence,
                }
              : undefined,
        });
      } catch (error) {
        if (error instanceof RecordBatchError) {
          s.refusals.refuse("kafka.produce_refused", {
            topic: topic.name,
            partition: p.index,
            kafka_code: error.kafkaCode,
            reason: error.message,
          });
          partitions.push(failed(error.kafkaCode));
          continue;
        }
        produced = Promise.reject(error);
      }
      partitions.push(
        produced.then(
          (r) => ({ index: p.index, errorCode: 0, baseOffset: r.spans[0]?.baseOffset ?? -1 }),
          (error: unknown) => {
            brokerErrorOnly(error);
            return { index: p.index, errorCode: codeOf(error), baseOffset: -1 };
          },
        ),
      );
    }
    results.push(Promise.all(partitions).then((ps) => ({ name: topic.name, partitions: ps })));
  }
  const response = Promise.all(results).then((topics) =>
    request.acks === 0 ? null : encodeProduceResponse(correlationId, topics),
  );
  return { response, answerBytes: 0 };
}

function initProducerId(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
): Promise<Uint8Array> {
  const request = decodeInitProducerIdRequest(body);
  const failed = (errorCode: number) =>
    encodeInitProducerIdResponse(correlationId, { errorCode, producerId: -1, producerEpoch: -1 });
  if (request.transactionalId !== null || broker.initProducerId === undefined)
    return Promise.resolve(failed(K.invalidRequest));
  return call(() => broker.initProducerId!()).then(
    (r) =>
      encodeInitProducerIdResponse(correlationId, {
        errorCode: 0,
        producerId: r.producerId,
        producerEpoch: r.epoch,
      }),
    (error: unknown) => {
      brokerErrorOnly(error);
      // A key that may not produce: Kafka's answer to an idempotent producer without the right.
      if (error instanceof BrokerError && error.kind === Errors.forbidden)
        return failed(K.clusterAuthorizationFailed);
      return failed(codeOf(error));
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Fetch and ListOffsets

interface PartitionFetch {
  topic: string;
  partition: number;
  offset: number;
  maxBytes: number;
}

function fetch(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  signal: AbortSignal,
): KafkaServed {
  const request = decodeFetchRequest(body);
  const wanted: PartitionFetch[] = [];
  for (const t of request.topics)
    for (const p of t.partitions)
      wanted.push({
        topic: t.topic,
        partition: p.partition,
        offset: p.fetchOffset,
        maxBytes: Math.min(Math.max(p.partitionMaxBytes, 1), fetchBytesMax),
      });
  const maxBytes = Math.min(Math.max(request.maxBytes, 1), fetchBytesMax);
  const waitMs = Math.min(Math.max(request.maxWaitMs, 0), fetchWaitMsMax);
  const minBytes = Math.max(request.minBytes, 1);
  const response = fetchAll(broker, wanted, { maxBytes, waitMs: 0, signal }).then(async (first) => {
    const got = first.reduce((n, r) => n + r.bytes, 0);
    const anyError = first.some((r) => r.answer.errorCode !== 0);
    if (got >= minBytes || anyError || waitMs === 0 || signal.aborted) return first;
    // Nothing (enough) yet: long-poll every partition; the first to see records ends the others.
    const early = new AbortController();
    const stop = () => early.abort();
    // One listener per signal (lib/abort.ts): the connection's fetches in flight share it.
    const unsubscribe = onAbort(signal, stop);
    try {
      return await fetchAll(broker, wanted, {
        maxBytes,
        waitMs,
        signal: early.signal,
        onRecords: stop,
      });
    } finally {
      unsubscribe();
    }
  });
  const encoded = response.then((results) => {
    const byTopic = new Map<string, FetchPartitionResponse[]>();
    for (const r of results) {
      let list = byTopic.get(r.topic);
      if (list === undefined) byTopic.set(r.topic, (list = []));
      list.push(r.answer);
    }
    return encodeFetchResponse(
      correlationId,
      [...byTopic].map(([topic, partitions]) => ({ topic, partitions })),
    );
  });
  return { response: encoded, answerBytes: maxBytes };
}

interface FetchedPartition {
  topic: string;
  answer: FetchPartitionResponse;
  bytes: number;
}

/** Fetches every partition (all started at once), within `maxBytes` in total, in request order. */
async function fetchAll(
  broker: Broker,
  wanted: PartitionFetch[],
  p: { maxBytes: number; waitMs: number; signal: AbortSignal; onRecords?: () => void },
): Promise<FetchedPartition[]> {
  // Each partition may take up to its own limit; the total is trimmed after (KIP-74: the first
  // partition with records always gets at least one batch).
  const started = wanted.map((w) =>
    w.offset < 0
      ? // Kafka answers a negative fetch offset OFFSET_OUT_OF_RANGE (the client then applies its
        // auto.offset.reset), not INVALID_REQUEST.
        Promise.resolve(
          new BrokerError(
            Errors.offsetOutOfRange,
            `Cannot fetch ${w.topic}/${w.partition} at offset ${w.offset}: offsets start at 0`,
          ),
        )
      : call(() =>
          broker.fetch({
            topic: w.topic,
            partition: w.partition,
            offset: w.offset,
            maxBytes: w.maxBytes,
            maxRecords: fetchRecordsMax,
            waitMs: p.waitMs,
            signal: p.signal,
          }),
        ).then(
          (r: FetchResult) => {
            if (r.records.count > 0) p.onRecords?.();
            return r;
          },
          (error: unknown) => {
            brokerErrorOnly(error);
            return error as BrokerError;
          },
        ),
  );
  const results = await Promise.all(
    (await Promise.all(started)).map(async (r, i) =>
      r instanceof BrokerError ? { failure: await fetchFailure(broker, wanted[i], r) } : r,
    ),
  );
  let budget = p.maxBytes;
  return results.map((r, i) => {
    const w = wanted[i];
    if ("failure" in r) return { topic: w.topic, answer: r.failure, bytes: 0 };
    let records: Uint8Array = new Uint8Array(0);
    if (r.records.count > 0 && (budget > 0 || budget === p.maxBytes)) {
      records = encodeRecordBatch(r.records);
      budget -= records.length;
    }
    return {
      topic: w.topic,
      answer: { partition: w.partition, errorCode: 0, highWatermark: r.highWatermark, records },
      bytes: records.length,
    };
  });
}

/**
 * The answer for a partition whose fetch failed with `error`. OFFSET_OUT_OF_RANGE carries the
 * partition's real high watermark (and last stable offset, the same here), as Kafka's own broker
 * answers it, so a client sees where the log ends; Fetch v4 has no log start offset field (v5+).
 * Other errors carry −1, as Kafka's. A negative offset on an unknown topic or partition is
 * answered with that error, which comes first in Kafka too.
 */
async function fetchFailure(
  broker: Broker,
  w: PartitionFetch,
  error: BrokerError,
): Promise<FetchPartitionResponse> {
  const answer = (errorCode: number, highWatermark: number): FetchPartitionResponse => ({
    partition: w.partition,
    errorCode,
    highWatermark,
    records: new Uint8Array(0),
  });
  if (error.kind !== Errors.offsetOutOfRange) return answer(codeOf(error), -1);
  try {
    const o = await broker.listOffsets({ topic: w.topic, partition: w.partition });
    return answer(codeOf(error), o.highWatermark);
  } catch (listError) {
    brokerErrorOnly(listError);
    return answer(codeOf(listError), -1);
  }
}

async function listOffsets(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
): Promise<Uint8Array> {
  const request = decodeListOffsetsRequest(body);
  const topics = [];
  for (const t of request.topics) {
    const partitions = [];
    for (const p of t.partitions) {
      try {
        if (p.timestamp < -2)
          throw new BrokerError(
            Errors.invalidRequest,
            `Cannot list offsets by timestamp ${p.timestamp}: give -2 (earliest), -1 (latest) or ms since the epoch`,
          );
        if (p.timestamp >= 0) {
          // Kafka's answer when no record is at or after the time: offset and timestamp -1.
          const o = await broker.listOffsets({
            topic: t.name,
            partition: p.partition,
            timestampMs: p.timestamp,
          });
          const found = (o.offsetTimestampMs ?? -1) >= 0;
          partitions.push({
            partition: p.partition,
            errorCode: 0,
            timestamp: found ? o.offsetTimestampMs! : -1,
            offset: found ? o.offset! : -1,
          });
          continue;
        }
        const o = await broker.listOffsets({ topic: t.name, partition: p.partition });
        partitions.push({
          partition: p.partition,
          errorCode: 0,
          timestamp: -1,
          offset: p.timestamp === -2 ? o.logStartOffset : o.highWatermark,
        });
      } catch (error) {
        brokerErrorOnly(error);
        partitions.push({
          partition: p.partition,
          errorCode: codeOf(error),
          timestamp: -1,
          offset: -1,
        });
      }
    }
    topics.push({ name: t.name, partitions });
  }
  return encodeListOffsetsResponse(correlationId, topics);
}

// ---------------------------------------------------------------------------------------------
// Consumer groups

function requireGroups<T>(method: T | undefined): T {
  if (method === undefined)
    throw new BrokerError(
      Errors.unavailable,
      "Cannot serve group requests: this broker has no client-assigned groups",
    );
  return method;
}

async function joinGroup(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  clientId: string,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const request = decodeJoinGroupRequest(body);
  let topics: string[] = [];
  if (request.protocolType === "consumer" && request.protocols.length > 0) {
    try {
      topics = decodeConsumerSubscription(request.protocols[0].metadata);
    } catch {
      topics = []; // opaque to us; the members still agree among themselves
    }
  }
  try {
    const join = requireGroups(broker.joinAssignedGroup?.bind(broker));
    const r = await join({
      group: request.groupId,
      memberId: request.memberId === "" ? undefined : request.memberId,
      clientId: clientId.length > 0 ? clientId : "kafka",
      sessionTimeoutMs: request.sessionTimeoutMs,
      rebalanceTimeoutMs: request.rebalanceTimeoutMs,
      protocolType: request.protocolType,
      protocols: request.protocols,
      topics,
    });
    return encodeJoinGroupResponse(correlationId, {
      errorCode: 0,
      generationId: r.generation,
      protocolName: r.protocol,
      leader: r.leader,
      memberId: r.memberId,
      members: r.members,
    });
  } catch (error) {
    brokerErrorOnly(error);
    return encodeJoinGroupResponse(correlationId, {
      errorCode: groupCode(error, s),
      generationId: -1,
      protocolName: "",
      leader: "",
      memberId: request.memberId,
      members: [],
    });
  }
}

async function syncGroup(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const request = decodeSyncGroupRequest(body);
  try {
    const sync = requireGroups(broker.syncAssignedGroup?.bind(broker));
    const r = await sync({
      group: request.groupId,
      memberId: request.memberId,
      generation: request.generationId,
      assignments: request.assignments.map((a) => {
        let partitions: { topic: string; partition: number }[] = [];
        try {
          partitions = decodeConsumerAssignment(a.assignment);
        } catch {
          partitions = [];
        }
        return { memberId: a.memberId, assignment: a.assignment, partitions };
      }),
    });
    return encodeSyncGroupResponse(correlationId, { errorCode: 0, assignment: r.assignment });
  } catch (error) {
    brokerErrorOnly(error);
    return encodeSyncGroupResponse(correlationId, {
      errorCode: groupCode(error, s),
      assignment: new Uint8Array(0),
    });
  }
}

async function heartbeat(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const request = decodeHeartbeatRequest(body);
  try {
    const beat = requireGroups(broker.heartbeatAssignedGroup?.bind(broker));
    await beat({
      group: request.groupId,
      memberId: request.memberId,
      generation: request.generationId,
    });
    return encodeErrorCodeResponse(correlationId, 0);
  } catch (error) {
    brokerErrorOnly(error);
    return encodeErrorCodeResponse(correlationId, groupCode(error, s));
  }
}

async function leaveGroup(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const request = decodeLeaveGroupRequest(body);
  try {
    await broker.leaveGroup({ group: request.groupId, memberId: request.memberId });
    return encodeErrorCodeResponse(correlationId, 0);
  } catch (error) {
    brokerErrorOnly(error);
    return encodeErrorCodeResponse(correlationId, groupCode(error, s));
  }
}

/** Kafka's logical offsets a client may commit: −2 EARLIEST, −1 LATEST. */
const earliestOffset = -2;
const latestOffset = -1;

/**
 * The offset to store for a Kafka commit of `o.offset`. Kafka stores −2 (EARLIEST) and −1
 * (LATEST) as given and hands them back, and a client reads a negative committed offset as "apply
 * the reset policy" — kafkajs commits its reset policy that way when a fetch is out of range.
 * es-broker's groups keep real offsets only (docs/decisions.md §8), so the policy is applied now:
 * −2 stores the log start offset, −1 the high watermark (docs/kafka.md "Consumer groups"). Any
 * other offset is passed on as is (a negative one is refused there).
 * @throws BrokerError from `listOffsets` (unknown topic or partition, …).
 */
async function resolveLogicalOffset(
  broker: Broker,
  o: { topic: string; partition: number; offset: number },
): Promise<number> {
  if (o.offset !== earliestOffset && o.offset !== latestOffset) return o.offset;
  const now = await broker.listOffsets({ topic: o.topic, partition: o.partition });
  return o.offset === earliestOffset ? now.logStartOffset : now.highWatermark;
}

async function offsetCommit(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const request = decodeOffsetCommitRequest(body);
  const standalone = request.generationId === -1 && request.memberId === "";
  let errorCode = 0;
  const offsets = request.topics.flatMap((t) =>
    t.partitions.map((p) => ({ topic: t.name, partition: p.partition, offset: p.offset })),
  );
  if (offsets.length > 0) {
    try {
      for (const o of offsets) o.offset = await resolveLogicalOffset(broker, o);
      await broker.commitOffsets({
        group: request.groupId,
        memberId: standalone ? undefined : request.memberId,
        generation: standalone ? undefined : request.generationId,
        offsets,
      });
    } catch (error) {
      brokerErrorOnly(error);
      errorCode = groupCode(error, s);
    }
  }
  return encodeOffsetCommitResponse(
    correlationId,
    request.topics.map((t) => ({
      name: t.name,
      partitions: t.partitions.map((p) => ({ partition: p.partition, errorCode })),
    })),
  );
}

async function offsetFetch(
  body: Uint8Array,
  correlationId: number,
  broker: Broker,
  s: KafkaSettings,
): Promise<Uint8Array> {
  const request = decodeOffsetFetchRequest(body);
  const committed = new Map<string, number>();
  let errorCode = 0;
  try {
    const d = await broker.describeGroup(request.groupId);
    for (const o of d.offsets)
      if (o.committed !== null) committed.set(`${o.topic}\0${o.partition}`, o.committed);
  } catch (error) {
    brokerErrorOnly(error);
    if (!(error instanceof BrokerError && error.kind === Errors.groupNotFound))
      errorCode = groupCode(error, s);
  }
  return encodeOffsetFetchResponse(
    correlationId,
    request.topics.map((t) => ({
      name: t.name,
      partitions: t.partitions.map((partition) => ({
        partition,
        offset: committed.get(`${t.name}\0${partition}`) ?? -1,
        errorCode,
      })),
    })),
  );
}
