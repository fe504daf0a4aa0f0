/**
 * Authentication and authorization for the front doors (`docs/security.md`).
 *
 * A transport authenticates each HTTP request, or a TCP connection once, with
 * {@link AccessControl.authenticate}, and then calls the broker only through
 * {@link AccessControl.brokerFor}: a {@link Broker} that checks every call against the role table
 * (`auth/roles.ts`) before handing it to the real broker, so both front doors make the same
 * decision for the same principal. The view also checks, on every call, that its principal is
 * still current: a revoked key (or anonymous access, once the first key exists) is refused on
 * its next request, and its long-polls in flight end at once ({@link AccessControl.watch} lets a
 * transport close what it holds open: TCP connections, SSE streams).
 *
 * Failed authentications are logged (`auth.failed`, warn) with the remote address and the key's
 * id part only — never the key. Admin actions are logged (`audit.*`, info) with the key's name.
 */
import { BrokerError, Errors } from "../broker/errors.ts";
import { produceVia } from "../broker/produce-sink.ts";
import { validateProducerId } from "../broker/producers/sequence.ts";
import type {
  ClusterMetadata,
  AssignedJoinRequest,
  AssignedJoinResult,
  AssignedSyncRequest,
  Broker,
  CleanupReport,
  CommitOffsetsRequest,
  CreateTopicRequest,
  FetchRequest,
  FetchResult,
  GroupAssignment,
  GroupDescription,
  HeartbeatResult,
  JoinGroupRequest,
  ProduceRequest,
  ProduceResult,
  ProduceSink,
  ReplicaFetchRequest,
  ReplicaFetchResult,
  TopicDescription,
} from "../broker/types.ts";
import type { Logger } from "../lib/logger.ts";
import { clip, quote } from "../lib/quote.ts";
import type { RefusalLog } from "../lib/refusals.ts";
import { parseApiKeyId } from "./key-format.ts";
import type { ApiKeyInfo, ApiKeySpec, KeyStore } from "./key-store.ts";
import {
  anonymousPrincipal,
  type KeyPrincipal,
  type Principal,
  principalLabel,
} from "./principal.ts";
import { authorize, mayList, type Operation, type RequestNames } from "./roles.ts";
import { authorizedStreams } from "./streams.ts";
import type { Streams } from "../broker/streams/types.ts";
import { apiKeyTextBytesMax, producerIdCharsMax } from "../lib/limits.ts";

/** Which front door a request came through, for logs. */
export type Transport = "http" | "tcp" | "kafka";

/**
 * Why an authentication failed (the `reason` of `auth.failed` and of the error message); the TCP
 * and Kafka transports also log `timeout` for a connection that never authenticated.
 * `user_mismatch`: a SASL/PLAIN user that is neither the id nor the name of the (valid) key sent
 * as the password ({@link AccessControl.authenticateUser}).
 */
export type AuthFailure = "missing" | "malformed" | "unknown" | "user_mismatch";

/** `auth.failed`'s reason: an {@link AuthFailure}, or `revoked` for a key revoked since the start ({@link KeyStore.wasRevoked}). */
export type AuthFailureLogged = AuthFailure | "revoked";

/**
 * An `unauthenticated` error that also says why (HTTP picks its `WWW-Authenticate` from it); for
 * a key revoked while its connection or stream was open, `key_revoked` (reason `revoked`).
 */
export class AuthenticationError extends BrokerError {
  override name = "AuthenticationError";
  constructor(
    readonly reason: AuthFailure | "revoked",
    message: string,
    kind: typeof Errors.unauthenticated | typeof Errors.keyRevoked = Errors.unauthenticated,
  ) {
    super(kind, message);
  }
}

/** Options of {@link AccessControl}. */
export interface AccessControlOptions {
  /** The real broker. */
  broker: Broker;
  /** The key store; null means no keys can exist (authentication always off; tests). */
  keys: KeyStore | null;
  /** Receives `audit.*` events, and `auth.failed` without `refusals`. */
  logger: Logger;
  /**
   * Counts failed authentications and rate-limits their log lines (`auth.failed`, at most one a
   * kind every few seconds with a count: `lib/refusals.ts`); without it each is logged.
   */
  refusals?: RefusalLog;
}

interface Watch {
  principal: Principal;
  onInvalid: () => void;
}

/** See the module comment. */
export class AccessControl {
  readonly #broker: Broker;
  readonly #keys: KeyStore | null;
  readonly #logger: Logger;
  readonly #refusals: RefusalLog | null;
  readonly #views = new WeakMap<Principal, AuthorizedBroker>();
  readonly #watches = new Set<Watch>();
  /** Aborted (and dropped) when their principal stops being current: ends its long-polls. */
  readonly #signals = new Map<Principal, AbortController>();

  constructor(options: AccessControlOptions) {
    this.#broker = options.broker;
    this.#keys = options.keys;
    this.#logger = options.logger;
    this.#refusals = options.refusals ?? null;
    this.#keys?.onChange(() => this.#sweep());
  }

  /** True while every request needs a key (a key store file exists). */
  get required(): boolean {
    return this.#keys?.enabled ?? false;
  }

  /** The key store, or null (see {@link AccessControlOptions.keys}). */
  get keys(): KeyStore | null {
    return this.#keys;
  }

  /**
   * Authenticates one credential: `key` is the API key text the client sent, or undefined when
   * it sent none. Without a key, the anonymous principal while authentication is off.
   * @param remote the peer's address, for the log.
   * @throws AuthenticationError (`unauthenticated`) for no key while authentication is on, a
   *   malformed key, or an unknown, revoked or wrong one; logged as `auth.failed`. Its message
   *   never contains the key.
   */
  authenticate(key: string | undefined, remote: string, transport: Transport): Principal {
    if (key === undefined) {
      if (!this.required) return anonymousPrincipal;
      this.logFailure("missing", remote, transport, null);
      throw new AuthenticationError(
        "missing",
        "Cannot authenticate: an API key is required (send Authorization: Bearer <key>, or authenticate first over TCP)",
      );
    }
    const id = key.length <= apiKeyTextBytesMax ? parseApiKeyId(key) : null;
    if (id === null) {
      this.logFailure("malformed", remote, transport, null);
      throw new AuthenticationError(
        "malformed",
        "Cannot authenticate: the API key is malformed (expected esb_<16 hex digits>_<43 base64url characters>)",
      );
    }
    const principal = this.#verify(key, id, remote, transport);
    this.#keys!.noteUse(principal);
    return principal;
  }

  /**
   * The principal of `key` when {@link authenticate} would return one (a well-formed key the store
   * holds, not revoked), noting its use as `authenticate` does; null for any key `authenticate`
   * would refuse, with nothing logged or thrown. For the HTTP fast produce route
   * (`transport/http/auth.ts`): on null it leaves the request to the `fetch` path, which
   * authenticates again, so a failure is logged once and answered as every other 401.
   */
  principalOfKey(key: string): Principal | null {
    if (key.length > apiKeyTextBytesMax || parseApiKeyId(key) === null) return null;
    const principal = this.#keys?.verify(key) ?? null;
    if (principal !== null) this.#keys!.noteUse(principal);
    return principal;
  }

  /**
   * Authenticates a user name and a key (SASL/PLAIN on the Kafka listener: the user is the key's
   * id or its name, the password the whole key). The key is checked first, in constant time, so a
   * wrong user costs what a wrong key does.
   * @throws AuthenticationError (`unauthenticated`) for a malformed, unknown, revoked or wrong key,
   *   or a user that names another key (logged as `auth.failed`, reason `user_mismatch`, with the
   *   key's id only). Its message never contains the key or the user.
   */
  authenticateUser(user: string, key: string, remote: string, transport: Transport): Principal {
    const id = key.length <= apiKeyTextBytesMax ? parseApiKeyId(key) : null;
    if (id === null) {
      this.logFailure("malformed", remote, transport, null);
      throw new AuthenticationError("malformed", "Cannot authenticate: the API key is malformed");
    }
    const principal = this.#verify(key, id, remote, transport);
    if (user !== principal.id && user !== principal.name) {
      this.logFailure("user_mismatch", remote, transport, id);
      throw new AuthenticationError(
        "unknown",
        `Cannot authenticate: the user is neither the id nor the name of API key ${id}`,
      );
    }
    this.#keys!.noteUse(principal);
    return principal;
  }

  /** The principal of a well-formed key with id `id`. @throws AuthenticationError (logged) if the store does not hold it. */
  #verify(key: string, id: string, remote: string, transport: Transport): KeyPrincipal {
    const principal = this.#keys?.verify(key) ?? null;
    if (principal === null) {
      this.logFailure(this.#keys?.wasRevoked(id) ? "revoked" : "unknown", remote, transport, id);
      throw new AuthenticationError(
        "unknown",
        `Cannot authenticate: API key ${id} is not valid (unknown, revoked, or wrong secret)`,
      );
    }
    return principal;
  }

  /** True while `principal` may still make requests (its key is not revoked or changed; anonymous: authentication is off). */
  isCurrent(principal: Principal): boolean {
    if (principal.kind === "anonymous") return !this.required;
    return this.#keys?.isCurrent(principal) ?? false;
  }

  /**
   * Calls `onInvalid` once, when `principal` stops being current (module comment). Returns a
   * function that cancels the watch (call it when the connection or stream ends).
   */
  watch(principal: Principal, onInvalid: () => void): () => void {
    const watch: Watch = { principal, onInvalid };
    this.#watches.add(watch);
    return () => this.#watches.delete(watch);
  }

  /** The broker as `principal` may use it (the same object for the same principal). */
  brokerFor(principal: Principal): AuthorizedBroker {
    let view = this.#views.get(principal);
    if (view === undefined) {
      view = new AuthorizedBroker(this.#broker, principal, this);
      this.#views.set(principal, view);
    }
    return view;
  }

  /**
   * Throws unless `principal` is current and the role table allows `operation` on `names`.
   * @param describe the failed action for the message, e.g. `Cannot produce to topic "orders"`,
   *   or a function making it (called only for a refusal).
   * @throws AuthenticationError (revoked: {@link invalidError}) or BrokerError `forbidden` with
   *   details `operation` and `topic` / `group`.
   */
  check(
    principal: Principal,
    operation: Operation,
    names: RequestNames,
    describe: string | (() => string),
  ): void {
    const decision = this.isCurrent(principal) ? authorize(principal, operation, names) : null;
    if (decision?.allowed) return;
    // The message is built only for a refusal: the allowed path stays a table lookup.
    const action = typeof describe === "function" ? describe() : describe;
    if (decision === null) throw this.invalidError(principal, action);
    const who = principalLabel(principal);
    const role = principal.kind === "key" ? principal.role : "anonymous";
    if (decision.reason === "role") {
      throw new BrokerError(
        Errors.forbidden,
        `${action}: ${who} (role ${role}) may not ${operation}`,
        { operation },
      );
    }
    throw new BrokerError(
      Errors.forbidden,
      `${action}: ${who} (role ${role}) may not ${operation} on ${decision.reason} ${quote(decision.name)} (no ${decision.reason} pattern of the key matches it)`,
      { operation, [decision.reason]: clip(decision.name) },
    );
  }

  /**
   * The refusal of a request from `principal` once it is no longer current: `key_revoked` for a
   * key (revoked, or changed and reloaded), `unauthenticated` for anonymous access once the first
   * key exists. `action` names the refused request, e.g. `Cannot fetch from topic "orders"`.
   */
  invalidError(principal: Principal, action: string): AuthenticationError {
    return principal.kind === "anonymous"
      ? new AuthenticationError(
          "revoked",
          `${action}: an API key is required now (authentication was turned on)`,
        )
      : new AuthenticationError(
          "revoked",
          // Cluster mode keeps the keys in etcd (docs/cluster.md "Schema registry and API
          // keys in etcd"): no api_keys.json is read, and a revocation holds on every broker.
          this.#keys?.clustered === true
            ? `${action}: API key ${principal.id} was revoked (es-broker keys revoke; the cluster keeps its keys in etcd, so every broker refuses it now) while this connection was open`
            : `${action}: API key ${principal.id} was revoked (or changed in api_keys.json) while this connection was open`,
          Errors.keyRevoked,
        );
  }

  /** An abort signal that fires when `principal` stops being current (already aborted if it is not). */
  signalFor(principal: Principal): AbortSignal {
    const controller = this.#signals.get(principal);
    if (controller !== undefined) return controller.signal;
    if (!this.isCurrent(principal)) return AbortSignal.abort();
    const created = new AbortController();
    this.#signals.set(principal, created);
    return created.signal;
  }

  /** Logs an admin action with the acting key's name. */
  audit(principal: Principal, event: string, fields: Record<string, unknown>): void {
    this.#logger.log("info", event, {
      key: principal.kind === "key" ? principal.name : null,
      key_id: principal.kind === "key" ? principal.id : null,
      ...fields,
    });
  }

  /**
   * Logs a failed authentication (`auth.failed`), also for failures a transport finds itself (a
   * malformed `Authorization` header). Never given the key.
   */
  logFailure(
    reason: AuthFailureLogged | "timeout",
    remote: string,
    transport: Transport,
    keyId: string | null,
  ): void {
    const fields = { transport, remote, reason, key_id: keyId };
    if (this.#refusals !== null) this.#refusals.refuse("auth.failed", fields);
    else this.#logger.log("warn", "auth.failed", fields);
  }

  /** After a key store change: ends the long-polls and fires the watches of principals no longer current. */
  #sweep(): void {
    for (const watch of [...this.#watches]) {
      if (this.isCurrent(watch.principal)) continue;
      this.#watches.delete(watch);
      try {
        watch.onInvalid();
      } catch (err) {
        this.#logger.log("error", "auth.watch_failed", {
          error: err instanceof Error ? err.message : String(err),
        });
      }
    }
    for (const [principal, controller] of this.#signals) {
      if (this.isCurrent(principal)) continue;
      this.#signals.delete(principal);
      controller.abort();
    }
  }
}

/**
 * The broker as one principal may use it: every method checks the role table (and that the
 * principal is still current) and then calls the real broker. Long-polls end when the principal
 * stops being current. Also the key administration (admin only).
 */
export class AuthorizedBroker implements Broker {
  readonly #inner: Broker;
  readonly #principal: Principal;
  readonly #access: AccessControl;
  /** Changes a topic's config (admin); absent if the real broker cannot. */
  readonly updateTopicConfig?: (
    name: string,
    config: Record<string, unknown>,
  ) => Promise<TopicDescription>;
  /** Runs cleanup now (admin); absent if the real broker has no cleanup tasks. */
  readonly cleanup?: (topic: string) => Promise<CleanupReport>;
  /** Storage state (admin); absent if the real broker does not describe its storage. */
  readonly describeStorage?: () => object;
  /** Durable Streams under the same role table (`auth/streams.ts`); absent if the real broker has none. */
  readonly streams?: Streams;
  /**
   * Joins a client-assigned group (the Kafka listener's JoinGroup): the `join_group` row, with
   * the group and the topics the member subscribes to (when the transport could read them).
   * Absent if the real broker has no client-assigned groups.
   */
  readonly joinAssignedGroup?: (request: AssignedJoinRequest) => Promise<AssignedJoinResult>;
  /**
   * Hands out a client-assigned group's assignment (SyncGroup): the `join_group` row, with the
   * group only (as Kafka checks it: the topics a member reads are checked when it fetches and
   * commits). Absent as above.
   */
  readonly syncAssignedGroup?: (
    request: AssignedSyncRequest,
  ) => Promise<{ assignment: Uint8Array }>;
  /** Keeps a client-assigned member's session (Heartbeat): the `heartbeat` row. Absent as above. */
  readonly heartbeatAssignedGroup?: (request: {
    group: string;
    memberId: string;
    generation: number;
  }) => Promise<void>;
  /**
   * A new idempotent producer id (InitProducerId): the `produce` row without a topic (admin and
   * producer keys; each batch is then checked against its topic). Absent if the real broker
   * cannot hand out producer ids.
   */
  readonly initProducerId?: () => Promise<{ producerId: number; epoch: number }>;
  /**
   * The next epoch of a producer id (docs/decisions.md §20): the `produce` row without a topic
   * (admin and producer keys, as idempotent produce), for the id as this key's produce stores it
   * (`<key name>:<id>`, {@link keyProducerId}), so a key only moves its own producers' epochs.
   * Absent if the real broker cannot hand out epochs.
   */
  readonly initProducerEpoch?: (request: {
    producerId: string;
    atLeast?: number;
  }) => Promise<{ epoch: number }>;
  /**
   * Cluster metadata (cluster mode): the `list_topics` row, the answer holding only the topics
   * the key matches (or the `describe_topic` row for each named topic). Absent in single-node mode.
   */
  readonly clusterMetadata?: (topics?: readonly string[]) => Promise<ClusterMetadata>;
  /**
   * A follower's replica fetch (api 14): not a row of the role table. It carries the broker
   * credential, which the replication checks on every request; API keys never pass it.
   * Absent if the real broker does not replicate.
   */
  readonly replicaFetch?: (request: ReplicaFetchRequest) => Promise<ReplicaFetchResult>;

  constructor(inner: Broker, principal: Principal, access: AccessControl) {
    this.#inner = inner;
    this.#principal = principal;
    this.#access = access;
    this.replicaFetch = inner.replicaFetch?.bind(inner);
    const updateTopicConfig = inner.updateTopicConfig?.bind(inner);
    if (updateTopicConfig !== undefined) {
      this.updateTopicConfig = async (name, config) => {
        this.#check(
          "update_topic_config",
          {},
          () => `Cannot update the config of topic ${quote(name)}`,
        );
        const topic = await updateTopicConfig(name, config);
        this.#access.audit(principal, "audit.topic_config_updated", { topic: name, config });
        return topic;
      };
    }
    const clusterMetadata = inner.clusterMetadata?.bind(inner);
    if (clusterMetadata !== undefined) {
      this.clusterMetadata = async (topics) => {
        if (topics === undefined) this.#check("list_topics", {}, "Cannot read cluster metadata");
        else
          for (const name of topics)
            this.#check(
              "describe_topic",
              { topic: name },
              () => `Cannot describe topic ${quote(name)}`,
            );
        const metadata = await clusterMetadata(topics);
        return {
          ...metadata,
          topics: metadata.topics.filter(
            (t) => topics !== undefined || mayList(this.#principal, "list_topics", t.name),
          ),
        };
      };
    }
    const cleanup = inner.cleanup?.bind(inner);
    if (cleanup !== undefined) {
      this.cleanup = async (topic) => {
        this.#check("cleanup", {}, () => `Cannot clean up topic ${quote(topic)}`);
        const report = await cleanup(topic);
        this.#access.audit(principal, "audit.topic_cleanup", { topic });
        return report;
      };
    }
    if (inner.streams !== undefined) {
      this.streams = authorizedStreams(inner.streams, {
        principal,
        check: (operation, names, action) => this.#check(operation, names, action),
        signal: (signal) => this.#signal(signal),
        audit: (event, fields) => this.#access.audit(principal, event, fields),
      });
    }
    const joinAssigned = inner.joinAssignedGroup?.bind(inner);
    if (joinAssigned !== undefined) {
      this.joinAssignedGroup = async (request) => {
        this.#check(
          "join_group",
          { group: request.group, topics: Array.isArray(request.topics) ? request.topics : [] },
          () => `Cannot join group ${quote(request.group)}`,
        );
        return joinAssigned(request);
      };
    }
    const syncAssigned = inner.syncAssignedGroup?.bind(inner);
    if (syncAssigned !== undefined) {
      this.syncAssignedGroup = async (request) => {
        this.#check(
          "join_group",
          { group: request.group },
          () => `Cannot sync group ${quote(request.group)}`,
        );
        return syncAssigned(request);
      };
    }
    const heartbeatAssigned = inner.heartbeatAssignedGroup?.bind(inner);
    if (heartbeatAssigned !== undefined) {
      this.heartbeatAssignedGroup = async (request) => {
        this.#check(
          "heartbeat",
          { group: request.group },
          () => `Cannot heartbeat in group ${quote(request.group)}`,
        );
        return heartbeatAssigned(request);
      };
    }
    const initProducerId = inner.initProducerId?.bind(inner);
    if (initProducerId !== undefined) {
      this.initProducerId = async () => {
        this.#check("produce", {}, "Cannot get a producer id");
        return initProducerId();
      };
    }
    const initProducerEpoch = inner.initProducerEpoch?.bind(inner);
    if (initProducerEpoch !== undefined) {
      this.initProducerEpoch = async (request) => {
        const action = () => `Cannot allocate an epoch for producer ${quote(request.producerId)}`;
        this.#check("produce", {}, action);
        if (this.#principal.kind !== "key") return initProducerEpoch(request);
        // The client's own id is checked before the key's name goes in front of it.
        validateProducerId(request.producerId, action());
        return initProducerEpoch({
          ...request,
          producerId: keyProducerId(this.#principal.name, request.producerId),
        });
      };
    }
    const describeStorage = inner.describeStorage?.bind(inner);
    if (describeStorage !== undefined) {
      this.describeStorage = () => {
        this.#check("describe_storage", {}, "Cannot describe storage");
        return describeStorage();
      };
    }
  }

  /** Whose view this is. */
  get principal(): Principal {
    return this.#principal;
  }

  #check(operation: Operation, names: RequestNames, action: string | (() => string)): void {
    this.#access.check(this.#principal, operation, names, action);
  }

  /**
   * `signal` combined with the principal's revocation signal (only for calls that can wait). The
   * combination is kept per `signal` (`AbortSignal.any` is dear): an SSE stream's fetches and a
   * TCP connection's long-polls all pass the same one.
   */
  #signal(signal: AbortSignal | undefined): AbortSignal {
    const revoked = this.#access.signalFor(this.#principal);
    if (signal === undefined) return revoked;
    const cached = this.#combined.get(signal);
    if (cached !== undefined && cached.revoked === revoked) return cached.both;
    const both = AbortSignal.any([signal, revoked]);
    this.#combined.set(signal, { revoked, both });
    return both;
  }

  /** {@link #signal}'s combinations, by the caller's signal. */
  readonly #combined = new WeakMap<AbortSignal, { revoked: AbortSignal; both: AbortSignal }>();

  async createTopic(request: CreateTopicRequest): Promise<TopicDescription> {
    this.#check("create_topic", {}, () => `Cannot create topic ${quote(request.name)}`);
    const topic = await this.#inner.createTopic(request);
    this.#access.audit(this.#principal, "audit.topic_created", {
      topic: topic.name,
      partitions: topic.partitions.length,
    });
    return topic;
  }

  async listTopics(): Promise<TopicDescription[]> {
    this.#check("list_topics", {}, "Cannot list topics");
    const topics = await this.#inner.listTopics();
    return topics.filter((t) => mayList(this.#principal, "list_topics", t.name));
  }

  describeTopic(name: string): Promise<TopicDescription> {
    this.#check("describe_topic", { topic: name }, () => `Cannot describe topic ${quote(name)}`);
    return this.#inner.describeTopic(name);
  }

  async deleteTopic(name: string): Promise<void> {
    this.#check("delete_topic", {}, () => `Cannot delete topic ${quote(name)}`);
    await this.#inner.deleteTopic(name);
    this.#access.audit(this.#principal, "audit.topic_deleted", { topic: name });
  }

  produce(request: ProduceRequest): Promise<ProduceResult> {
    return this.#inner.produce(this.#produceRequest(request));
  }

  /** `Broker.produceTo`: {@link produce}'s check and producer id, answered through `sink`. */
  produceTo(request: ProduceRequest, sink: ProduceSink): void {
    let checked: ProduceRequest;
    try {
      checked = this.#produceRequest(request);
    } catch (err) {
      return sink.failed(err);
    }
    produceVia(this.#inner, checked, sink);
  }

  /**
   * `request` as this principal may send it on: checked (produce on its topic), and an
   * idempotent one's producer id scoped to the key's name.
   * @throws what `AccessControl.check` throws: BrokerError `forbidden`, or the revocation error.
   */
  #produceRequest(request: ProduceRequest): ProduceRequest {
    this.#check(
      "produce",
      { topic: request.topic },
      () => `Cannot produce to topic ${quote(request.topic)}`,
    );
    const producer = request.producer;
    if (producer === undefined || this.#principal.kind !== "key") return request;
    return {
      ...request,
      producer: { ...producer, id: keyProducerId(this.#principal.name, producer.id) },
    };
  }

  /**
   * A read answered after its principal stopped being current is refused (`key_revoked`), so a
   * long-poll that the revocation ends says why rather than answering empty.
   */
  async fetch(request: FetchRequest): Promise<FetchResult> {
    const action = () => `Cannot fetch from topic ${quote(request.topic)}`;
    this.#check("fetch", { topic: request.topic }, action);
    const result = await this.#inner.fetch(
      (request.waitMs ?? 0) <= 0 ? request : { ...request, signal: this.#signal(request.signal) },
    );
    if (!this.#access.isCurrent(this.#principal))
      throw this.#access.invalidError(this.#principal, action());
    return result;
  }

  listOffsets(request: { topic: string; partition: number; timestampMs?: number }): Promise<{
    logStartOffset: number;
    highWatermark: number;
    offset?: number;
    offsetTimestampMs?: number;
  }> {
    this.#check(
      "list_offsets",
      { topic: request.topic },
      () => `Cannot list offsets of topic ${quote(request.topic)}`,
    );
    return this.#inner.listOffsets(request);
  }

  joinGroup(request: JoinGroupRequest): Promise<GroupAssignment> {
    this.#check(
      "join_group",
      { group: request.group, topics: Array.isArray(request.topics) ? request.topics : [] },
      () => `Cannot join group ${quote(request.group)}`,
    );
    return this.#inner.joinGroup(request);
  }

  heartbeat(request: {
    group: string;
    memberId: string;
    generation?: number;
  }): Promise<HeartbeatResult> {
    this.#check(
      "heartbeat",
      { group: request.group },
      () => `Cannot heartbeat in group ${quote(request.group)}`,
    );
    return this.#inner.heartbeat(request);
  }

  leaveGroup(request: { group: string; memberId: string }): Promise<void> {
    this.#check(
      "leave_group",
      { group: request.group },
      () => `Cannot leave group ${quote(request.group)}`,
    );
    return this.#inner.leaveGroup(request);
  }

  commitOffsets(request: CommitOffsetsRequest): Promise<void> {
    const topics = Array.isArray(request.offsets)
      ? [
          ...new Set(
            request.offsets.map((o) => o?.topic).filter((t): t is string => typeof t === "string"),
          ),
        ]
      : [];
    this.#check(
      "commit_offsets",
      { group: request.group, topics },
      () => `Cannot commit offsets of group ${quote(request.group)}`,
    );
    return this.#inner.commitOffsets(request);
  }

  describeGroup(group: string): Promise<GroupDescription> {
    this.#check("describe_group", { group }, () => `Cannot describe group ${quote(group)}`);
    return this.#inner.describeGroup(group).then((g) => this.#visibleGroup(g));
  }

  async listGroups(): Promise<GroupDescription[]> {
    this.#check("list_groups", {}, "Cannot list groups");
    const groups = await this.#inner.listGroups();
    return groups
      .filter((g) => mayList(this.#principal, "list_groups", g.group))
      .map((g) => this.#visibleGroup(g));
  }

  /**
   * `group` as the principal may see it: a group its patterns match may also be used with topics
   * they do not (by an admin, or a key with other topics), and those topics' names, committed
   * offsets and high watermarks are not the principal's to read, so their entries are left out.
   */
  #visibleGroup(group: GroupDescription): GroupDescription {
    const principal = this.#principal;
    if (principal.kind === "anonymous" || principal.role === "admin") return group;
    const may = (topic: string) => mayList(principal, "list_topics", topic);
    return {
      ...group,
      members: group.members.map((m) => ({
        ...m,
        topics: m.topics.filter(may),
        assignments: m.assignments.filter((a) => may(a.topic)),
      })),
      offsets: group.offsets.filter((o) => may(o.topic)),
    };
  }

  /** Never closes the real broker: its owner does. Resolves at once. */
  async close(): Promise<void> {}

  /**
   * Storage counters of the real broker (`GET /v1/admin/metrics`; admin only).
   * @throws BrokerError forbidden; not_found if the real broker keeps no metrics.
   */
  metrics(): Record<string, number> {
    this.#check("metrics", {}, "Cannot GET /v1/admin/metrics");
    const source = this.#inner as Broker & { metrics?: () => Record<string, number> };
    if (typeof source.metrics !== "function")
      throw new BrokerError(
        Errors.notFound,
        "Cannot GET /v1/admin/metrics: this broker keeps no metrics",
      );
    return source.metrics();
  }

  /**
   * Makes an API key (admin only); the answer holds the key's text, the only time it is shown.
   * @throws BrokerError forbidden, invalid_request, key_exists, unavailable (no key store), storage_error.
   */
  async createKey(wanted: ApiKeySpec): Promise<{ key: string; info: ApiKeyInfo }> {
    const name = typeof wanted.name === "string" ? wanted.name : "";
    this.#check("create_key", {}, () => `Cannot create key ${quote(name)}`);
    const created = await this.#store("create keys").create(wanted, {
      anonymous: this.#principal.kind === "anonymous",
    });
    this.#access.audit(this.#principal, "audit.key_created", {
      name: created.info.name,
      id: created.info.id,
      role: created.info.role,
      topics: created.info.topics,
      groups: created.info.groups,
    });
    return created;
  }

  /** Every key's metadata (admin only; never a secret or a hash). @throws BrokerError forbidden. */
  listKeys(): ApiKeyInfo[] {
    this.#check("list_keys", {}, "Cannot list keys");
    return this.#access.keys?.list() ?? [];
  }

  /** Revokes a key by name (admin only). @throws BrokerError forbidden, key_not_found, storage_error. */
  async revokeKey(name: string): Promise<ApiKeyInfo> {
    this.#check("revoke_key", {}, () => `Cannot revoke key ${quote(name)}`);
    const revoked = await this.#store("revoke keys").revoke(name);
    this.#access.audit(this.#principal, "audit.key_revoked", {
      name: revoked.name,
      id: revoked.id,
    });
    return revoked;
  }

  #store(what: string): KeyStore {
    const keys = this.#access.keys;
    if (keys === null)
      throw new BrokerError(Errors.unavailable, `Cannot ${what}: this broker has no key store`);
    return keys;
  }
}

/**
 * The producer id an idempotent produce made with key `keyName` is stored under:
 * `<key name>:<client id>` (docs/security.md "Idempotent producers under keys"). Producer epochs
 * fence by id, so without this a key limited to one topic could fence another key's producer by
 * sending its id with a higher epoch. Key names have no `:`, so two keys never share a namespace;
 * anonymous requests (no key store) keep the client's id as it is.
 * @throws BrokerError invalid_request when the stored id would pass {@link producerIdCharsMax}
 *   (a client id of at most `producerIdCharsMax − name length − 1` characters fits).
 */
export function keyProducerId(keyName: string, clientId: string): string {
  const id = `${keyName}:${clientId}`;
  if (id.length > producerIdCharsMax) {
    throw new BrokerError(
      Errors.invalidRequest,
      `Cannot produce with producer id ${quote(clientId)}: with key ${quote(keyName)} a producer id is at most ${producerIdCharsMax - keyName.length - 1} characters`,
    );
  }
  return id;
}
