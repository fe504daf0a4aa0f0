/**
 * Store-and-forward (docs/edge.md): every record of the edge's topics that match `--mirror-topics`
 * goes to the same topic (or the one `--mirror-rename` maps it to) and partition of an upstream
 * es-broker, with the same key, value and timestamp, exactly once across restarts of either side and outages of the link between them.
 * The edge keeps accepting writes while the link is down; the mirror catches up oldest first at a
 * bounded rate when it returns.
 *
 * How exactly-once holds, per partition:
 * - **Position** — the next edge offset to forward — is the committed offset of the edge's
 *   consumer group `mirror.<name>` (so `groups describe` shows the mirror's lag), committed after
 *   each batch the upstream acknowledged. One batch is in flight at a time.
 * - **Sending** uses the idempotent produce API with producer id
 *   `mirror:<edge id>:<partition>:<topic>` (one per partition, as epochs are per producer) and
 *   sequence = edge offset − *base*, where *base* is the edge offset the current epoch began at.
 *   The epoch and base live in `<dataDir>/mirror/<name>.json` and change only when the edge log
 *   has a hole (compaction removed records, so offsets no longer map to consecutive sequences):
 *   the new epoch, beginning at the record after the hole, is made durable before its first batch.
 * - **Resuming** after any restart sends the batch at the committed position again with the same
 *   epoch and sequence. The upstream answers it as new (it never arrived), as a duplicate (it was
 *   stored; same batch), or refuses it naming the sequence it expects (it was stored, cut
 *   differently): `expected_sequence` Q means the upstream holds edge offsets [base, base + Q), so
 *   the position moves to base + Q — derived from the upstream's own durable producer state,
 *   never guessed. `producer_fenced` naming a newer epoch means the run before that epoch is
 *   stored; the mirror adopts it.
 *
 * Decision table for one send (epoch E, sequence S = position − base):
 *
 * | answer                                      | meaning                                      | action |
 * |---------------------------------------------|----------------------------------------------|--------|
 * | appended, or duplicate with offsets          | the upstream holds the batch                 | commit position after it, go on |
 * | `duplicate_sequence` / `out_of_order_sequence` with expected Q > S | upstream holds [base, base + Q) | position = base + Q (commit), go on |
 * | the same with Q ≤ S, or no Q                 | upstream lost records it acknowledged        | stop the partition with an error |
 * | `producer_fenced`, expected epoch P > E       | a later epoch exists: all of E's run is stored | epoch = P, base = P's start is unknown: stop with an error unless P's state is ours (see code) |
 * | `unknown_producer`                            | the upstream forgot the producer (expiry)    | new epoch at the position |
 * | `not_leader` naming the leader (`leader_tcp`) | an upstream cluster: another broker leads it | send this partition to that broker from now on (docs/edge.md "An upstream cluster"), resend at once |
 * | no answer in time (`timeout`), connection lost | unknown: slow, paused, gone or moved       | ask every broker the mirror knows who leads (Metadata version 1, `./route.ts`): the newest view naming another leader → send there; the broker sent to answers and still leads → `mirror.upstream_slow` once, resend to it after a backoff on the same connection (answered as a duplicate once stored); it answers nothing → keep sending to it with backoff on a fresh connection (`mirror.upstream_unreachable` for the `--mirror-to` broker, `mirror.upstream_leader_unreachable` for a leader); the other partitions' batches on a connection the mirror closed are resent without a log line |
 * | other retriable error                         | unknown                                      | resend the same batch after a backoff; a `not_leader` without a leader is logged once per partition (`mirror.upstream_not_leader`) |
 * | `topic_not_found`                             | upstream topic missing                       | create it with the edge's partition count, resend; a refused create is logged once (`mirror.upstream_refused`, operation `create_topic`) and tried again with backoff up to 30 s |
 * | `unauthenticated`, `key_revoked`, `forbidden` | wrong or revoked key, or a missing role      | upstream down; log once for the whole upstream (`mirror.upstream_refused`), resend after a backoff up to 30 s (at once after {@link Mirror.retryRefused}) |
 * | other refusal                                 | configuration problem                        | stop the partition with the error |
 *
 * Confluent-framed keys and values (topics with a schema subject, `schema_format` confluent) get
 * the upstream registry's id of the same schema before a batch is built (`./schemas.ts`,
 * docs/edge.md "Schema ids upstream"); one that cannot be translated stops the partition, or
 * waits while the upstream registry does not answer or refuses the key — never forwarded as is.
 *
 * A position below the edge partition's log start offset means retention deleted records before
 * they were forwarded: the partition stops with an explicit gap error (status and log), never
 * skipping. Retention can be told to hold such segments (`mirror_hold_retention`, via
 * {@link Mirror.unmirroredFrom}).
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { errorMessage } from "../lib/errors.ts";
import { crc32 } from "../lib/crc32.ts";
import { utf8 } from "../lib/bytes.ts";
import { joinPath, type FileSystem } from "../fs/types.ts";
import { readJsonFile, writeJsonAtomic } from "../storage/metadata.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor } from "../storage/record.ts";
import type { Broker } from "../broker/types.ts";
import { BrokerError } from "../broker/errors.ts";
import type { TcpClient } from "../client/client.ts";
import { ClientError } from "../client/errors.ts";
import { validateTopicName } from "../broker/config.ts";
import type { MetadataV1 } from "../protocol/apis/metadata.ts";
import { decideAfterNoAnswer, type LeaderView } from "./route.ts";
import {
  type EdgeSchemas,
  type FramedParts,
  framedId,
  framedParts,
  SchemaIdTranslator,
  SchemaTranslationError,
  type UpstreamRegistry,
  upstreamSubject,
  withId,
} from "./schemas.ts";

/**
 * One `--mirror-rename LOCAL=REMOTE` rule (docs/edge.md "Topic names upstream"): an exact name,
 * or a pattern with one `*` on each side whose match on the local name fills the remote's `*`
 * (`sensors.*=site17.sensors.*`).
 */
export interface MirrorRename {
  local: string;
  remote: string;
}

/**
 * Parses `LOCAL=REMOTE` rules. @throws Error naming the rule when it is not two topic names (or
 * patterns with exactly one `*` on both sides).
 */
export function parseMirrorRenames(specs: readonly string[]): MirrorRename[] {
  return specs.map((spec) => {
    const eq = spec.indexOf("=");
    const local = eq < 0 ? "" : spec.slice(0, eq);
    const remote = eq < 0 ? "" : spec.slice(eq + 1);
    const stars = (s: string) => s.split("*").length - 1;
    const plain = (s: string) => s.replaceAll("*", "x");
    let problem: string | null = null;
    if (eq < 0 || local === "" || remote === "") problem = "must be LOCAL=REMOTE";
    else if (stars(local) !== stars(remote) || stars(local) > 1)
      problem = "a pattern takes one * on each side (or none on either)";
    else
      try {
        validateTopicName(plain(local));
        validateTopicName(plain(remote));
      } catch (err) {
        problem = errorMessage(err);
      }
    if (problem !== null) throw new Error(`--mirror-rename ${JSON.stringify(spec)}: ${problem}`);
    return { local, remote };
  });
}

/**
 * The upstream topic of `topic` under `renames`: the first rule that matches, else the same name.
 * @throws BrokerError invalid_topic_name when a pattern makes a name that is not one (too long).
 */
export function upstreamTopicName(renames: readonly MirrorRename[], topic: string): string {
  for (const r of renames) {
    const star = r.local.indexOf("*");
    if (star < 0) {
      if (r.local === topic) return r.remote;
      continue;
    }
    const prefix = r.local.slice(0, star);
    const suffix = r.local.slice(star + 1);
    if (
      topic.length >= prefix.length + suffix.length &&
      topic.startsWith(prefix) &&
      topic.endsWith(suffix)
    )
      return validateTopicName(
        r.remote.replace("*", topic.slice(prefix.length, topic.length - suffix.length)),
      );
  }
  return topic;
}

/** Options of {@link Mirror}. */
export interface MirrorOptions {
  /** The edge broker (in process). */
  broker: Broker;
  fs: FileSystem;
  dataDir: string;
  clock: Clock;
  logger: Logger;
  /** Name of this mirror: its group is `mirror.<name>`, its state `mirror/<name>.json`. */
  name: string;
  /** Topic patterns (`*` matches any run of characters). */
  topics: readonly string[];
  /** Opens a connection to the upstream broker (key and TLS options inside). */
  connect: () => Promise<TcpClient>;
  /**
   * Opens a connection, with the same key and TLS options, to another broker of an upstream
   * cluster: the partition's leader its `not_leader` answer names (`leader_tcp`, "host:port";
   * docs/edge.md "An upstream cluster"). Without it, such a partition waits as after any retriable
   * error.
   */
  connectTo?: (address: string) => Promise<TcpClient>;
  /**
   * `host:port` of the `--mirror-to` broker, for log lines (default "the --mirror-to broker"); read
   * at each use, so a getter may name the bootstrap broker `connect` reached last.
   */
  upstreamAddress?: string;
  /**
   * How long the brokers the mirror knows are given to say who leads a partition after a batch got
   * no answer in time or lost its connection, in ms (default 3 000).
   */
  askLeaderMs?: number;
  /** Random hex for the edge id, called once ever (the id is then kept in the state file). */
  randomHex: () => string;
  /** Records per batch (default 500). */
  batchRecords?: number;
  /** Bytes per batch, about (default 1 MiB). */
  batchBytes?: number;
  /** Forwarding rate cap, records per second over all partitions (default 20 000; 0 = none). */
  recordsPerSecond?: number;
  /** How often topics are looked up for new matches, in ms (default 5 000). */
  rescanMs?: number;
  /** Upstream names of local topics (`--mirror-rename`; default: the same names). */
  renames?: readonly MirrorRename[];
  /**
   * `--mirror-skip-gaps`: a partition whose unforwarded records retention deleted moves on to the
   * log start offset (logged as `mirror.gap_skipped` with the lost offsets, a new epoch from
   * there) instead of stopping (docs/edge.md "Retention and the mirror"). Default false.
   */
  skipGaps?: boolean;
  /**
   * How often `mirror.partition_stopped` is logged again while a partition stays stopped for the
   * same cause, in ms (default 600 000: docs/edge.md "A partition stopped by a gap"); the partition
   * is retried every `rescanMs` meanwhile.
   */
  stoppedLogEveryMs?: number;
  /**
   * Schema id translation (docs/edge.md "Schema ids upstream"): the edge's registry and the
   * upstream's (`--mirror-registry-url`; null without it, so Confluent-framed records stop their
   * partition), or "keep" (`--mirror-keep-schema-ids`: ids are forwarded unchanged). Absent: as
   * with no upstream registry.
   */
  schemaIds?: { edge: EdgeSchemas; upstream: UpstreamRegistry | null } | "keep";
}

/** One partition's state, for status and tests. */
export interface MirrorPartitionStatus {
  topic: string;
  /** The topic it is forwarded to upstream (`--mirror-rename`; else `topic`). */
  upstreamTopic: string;
  partition: number;
  /** Next edge offset to forward. */
  position: number;
  highWatermark: number;
  /** Records not yet forwarded. */
  lagRecords: number;
  /** Age of the oldest record not yet forwarded, ms (0 when caught up). */
  lagMs: number;
  state:
    | "starting"
    | "forwarding"
    | "caught_up"
    | "uplink_down"
    | "upstream_slow"
    | "upstream_refused"
    | "stopped";
  /** Why it stopped, or the last transient problem. */
  error: string | null;
  /** Records forwarded since this process started. */
  forwarded: number;
  /** Failed attempts to forward (connection lost or refused, refusals, edge read errors) since start. */
  failures: number;
  /** Timestamp of the record at `position` when the task last read it (ms since the epoch), or null. */
  oldestUnforwardedMs: number | null;
}

/** The mirror's state for `/metrics`: per partition, lag read now. */
export interface MirrorObservation {
  name: string;
  /** Whether the last attempt to reach the upstream succeeded; null before any. */
  upstreamReachable: boolean | null;
  partitions: MirrorPartitionStatus[];
}

/** A record of a batch held for schema id translation (key and value are views, then copies). */
interface HeldRecord {
  offset: number;
  key: Uint8Array | null;
  value: Uint8Array;
  timestampMs: number;
}

interface PartitionState {
  epoch: number;
  base: number;
}

/** What a partition's log lines last said ({@link Mirror} `#told`). */
interface Told {
  /** The last line said it forwards (`mirror.partition_forwarding`). */
  forwarding: boolean;
  /** The cause the last `mirror.partition_stopped` line gave (null before one), and when. */
  stopped: string | null;
  stoppedAtMs: number;
  forwardingAtMs: number;
  /** The event the next `mirror.partition_forwarding` ends, if any. */
  after: "mirror.partition_stopped" | "mirror.upstream_refused" | null;
}

/** At most one `mirror.partition_forwarding` line per partition per this many ms (flapping). */
const forwardingLogEveryMs = 10_000;

/** One broker's answer to "who leads?" ({@link Mirror} `#askLeaders`): null if none in time. */
interface LeaderAnswer {
  /** The `--mirror-to` broker, or the `host:port` of a leader connection. */
  broker: "mirror-to" | string;
  metadata: MetadataV1 | null;
}

interface StateFile {
  version: 1;
  edge_id: string;
  partitions: Record<string, PartitionState>;
}

/**
 * Whether two error messages tell the same problem: equal once request numbers are left out
 * ("Request 1050 got no answer within 10000 ms"), so a problem is logged once, not per retry.
 */
function sameProblem(a: string, b: string): boolean {
  const plain = (m: string) => m.replace(/\bRequest \d+ /g, "Request ");
  return plain(a) === plain(b);
}

/** Compiles `*` patterns. */
function matcher(patterns: readonly string[]): (topic: string) => boolean {
  const res = patterns.map(
    (p) =>
      new RegExp(
        `^${p
          .split("*")
          .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
          .join(".*")}$`,
      ),
  );
  return (topic) => res.some((re) => re.test(topic));
}

/** See the module comment. */
export class Mirror {
  readonly group: string;
  #o: MirrorOptions;
  #match: (topic: string) => boolean;
  #statePath: string;
  #state!: StateFile;
  #stateWrites: Promise<void> = Promise.resolve();
  #client: TcpClient | null = null;
  #connecting: Promise<TcpClient> | null = null;
  /** Connections to other brokers of an upstream cluster, by "host:port" (`connectTo`). */
  #peers = new Map<string, Promise<TcpClient>>();
  /** Upstream "topic/partition" → the "host:port" of its leader, where a `not_leader` sent it. */
  #leaders = new Map<string, string>();
  /** "host:port" → the node id the `not_leader` that named it gave (checked on connecting). */
  #leaderNodes = new Map<string, number>();
  /** Upstream "topic/partition" → the leader address last logged for it (logged once each). */
  #leaderLogged = new Map<string, string>();
  #running = new Map<string, Promise<void>>();
  #status = new Map<string, MirrorPartitionStatus>();
  #stopping = false;
  #wake: (() => void)[] = [];
  #rescan: { cancel(): void } | null = null;
  #rateFreeAtMs = 0;
  /** Upstream topic → the last refusal to create it that was logged (logged once per change). */
  #createRefusals = new Map<string, string>();
  /** Upstream topic → the local topic forwarded to it (two local topics may not share one). */
  #upstreamOwners = new Map<string, string>();
  #upstreamReachable: boolean | null = null;
  /** The upstream problem last logged (logged again only when it changes), or null. */
  #uplinkReport: string | null = null;
  /** The broker `#uplinkReport` is about: "mirror-to", or a leader's `host:port`. */
  #uplinkReportBroker: string | null = null;
  /** The event `#uplinkReport` was logged as. */
  #uplinkReportEvent: string | null = null;
  /**
   * The `--mirror-to` broker's cluster and node id, from its last Metadata answer (null before
   * one): leaders' identities are checked against it without asking it again, so a paused
   * `--mirror-to` broker does not hold up connecting to a live leader.
   */
  #home: { cluster_id: string; node_id: number } | null = null;
  /** Connections the mirror closed itself (no answer at all): their failures are not the upstream's. */
  #selfClosed = new WeakSet<TcpClient>();
  /** Upstream topic → the ask for its leaders under way (one at a time per topic, shared). */
  #asks = new Map<string, Promise<LeaderAnswer[]>>();
  /**
   * Partition key → what its lines last said: a stop is logged when it begins and then at most
   * every `stoppedLogEveryMs` per cause (a stopped partition is retried every `rescanMs`, and one
   * that flaps between stopped and forwarding says so no more often); forwarding when it begins
   * and after a logged stop or a refusal, at most every 10 s (newuser17 F7, F9).
   */
  #told = new Map<string, Told>();
  /** Edge schema ids → the upstream's; null with `schemaIds: "keep"`. */
  #translator: SchemaIdTranslator | null;
  /** Partitions waiting after a refusal of the key ({@link Mirror.retryRefused} wakes them). */
  #refusedWake = new Set<() => void>();

  constructor(options: MirrorOptions) {
    this.#o = options;
    const ids = options.schemaIds ?? { edge: { schemaById: () => null }, upstream: null };
    this.#translator = ids === "keep" ? null : new SchemaIdTranslator(ids.edge, ids.upstream);
    this.group = `mirror.${options.name}`;
    this.#match = matcher(options.topics);
    this.#statePath = joinPath(options.dataDir, "mirror", `${options.name}.json`);
  }

  /**
   * Loads (or creates) the state file and starts a task per matching partition; rescans topics
   * every `rescanMs`. @throws Error if the state file is unreadable (never reset silently).
   */
  async start(): Promise<void> {
    const read = await readJsonFile(this.#o.fs, this.#statePath);
    if ("error" in read)
      throw new Error(`Cannot start mirror "${this.#o.name}": ${this.#statePath}: ${read.error}`);
    if ("missing" in read) {
      this.#state = { version: 1, edge_id: this.#o.randomHex().slice(0, 16), partitions: {} };
      await this.#o.fs.mkdir(joinPath(this.#o.dataDir, "mirror"));
      await this.#o.fs.syncDir(this.#o.dataDir);
      await this.#saveState();
    } else {
      const v = read.value as StateFile;
      if (
        v?.version !== 1 ||
        typeof v.edge_id !== "string" ||
        typeof v.partitions !== "object" ||
        v.partitions === null
      )
        throw new Error(
          `Cannot start mirror "${this.#o.name}": ${this.#statePath} is not a mirror state file`,
        );
      this.#state = v;
    }
    this.#scan();
  }

  /** Lowest edge offset not yet forwarded of a partition this mirror covers, or null. For retention's hold. */
  unmirroredFrom(topic: string, partition: number): number | null {
    const s = this.#status.get(`${partition}:${topic}`);
    return s === undefined ? null : s.position;
  }

  /**
   * Every partition's status with its lag read now from the edge (the tasks update theirs only as
   * they read, and one waiting for the upstream reads nothing): records from the high watermark,
   * seconds from the timestamp of the record at the position. For `/metrics`.
   */
  async observe(): Promise<MirrorObservation> {
    const now = this.#o.clock.nowMs();
    const partitions = await Promise.all(
      this.describe().map(async (s) => {
        const offsets = await this.#o.broker
          .listOffsets({ topic: s.topic, partition: s.partition })
          .catch(() => null);
        if (offsets === null) return s;
        const lagRecords = Math.max(0, offsets.highWatermark - s.position);
        const lagMs =
          lagRecords === 0 || s.oldestUnforwardedMs === null
            ? 0
            : Math.max(0, now - s.oldestUnforwardedMs);
        return { ...s, highWatermark: offsets.highWatermark, lagRecords, lagMs };
      }),
    );
    return { name: this.#o.name, upstreamReachable: this.#upstreamReachable, partitions };
  }

  /** Status of every partition (topic, then partition order). */
  describe(): MirrorPartitionStatus[] {
    return [...this.#status.values()]
      .map((s) => ({ ...s }))
      .sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
  }

  /**
   * Sends the batches the upstream refused (`unauthenticated`, `forbidden`, `key_revoked`) again
   * now, instead of after their backoff (up to 30 s): for a key reloaded on SIGHUP
   * (`--mirror-api-key-file`, docs/edge.md "Exactly once"), which the next connection uses.
   * Connections already open keep the key they authenticated with.
   */
  retryRefused(): void {
    for (const wake of [...this.#refusedWake]) wake();
  }

  /** Stops every task (waits for them) and closes the upstream connection. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#rescan?.cancel();
    for (const w of this.#wake.splice(0)) w();
    await Promise.allSettled([...this.#running.values()]);
    await this.#stateWrites.catch(() => {});
    await this.#client?.close().catch(() => {});
    for (const peer of this.#peers.values()) await peer.then((c) => c.close()).catch(() => {});
    this.#peers.clear();
  }

  /**
   * The connection `remote`/`partition` is sent on: to its leader where a `not_leader` named one
   * (`#leaders`), else to the `--mirror-to` broker.
   */
  async #clientFor(route: string): Promise<TcpClient> {
    const address = this.#leaders.get(route);
    if (address === undefined || this.#o.connectTo === undefined) return this.#upstream();
    return this.#peer(address);
  }

  /** The checked connection to the leader at `address` (opened if none is open or opening). */
  async #peer(address: string): Promise<TcpClient> {
    const connectTo = this.#o.connectTo;
    if (connectTo === undefined) throw new Error("no connectTo");
    let peer = this.#peers.get(address);
    if (peer === undefined) {
      const opening = this.#connectLeader(connectTo, address);
      peer = opening;
      this.#peers.set(address, opening);
      opening.catch(() => {
        if (this.#peers.get(address) === opening) this.#peers.delete(address);
      });
    }
    const client = await peer;
    if (!client.closed) return client;
    if (this.#peers.get(address) === peer) this.#peers.delete(address);
    return this.#peer(address);
  }

  /**
   * Closes `client` on the mirror's own decision (its broker answered nothing in time, not even
   * Metadata; or it refused the key): its pending requests fail with `connection_closed`, which the
   * partitions that sent them resend without logging it as an upstream problem; the next request
   * opens a fresh connection.
   */
  #closeOwn(client: TcpClient): void {
    this.#selfClosed.add(client);
    if (this.#client === client) this.#client = null;
    for (const [address, peer] of this.#peers)
      void peer.then(
        (c) => {
          if (c === client && this.#peers.get(address) === peer) this.#peers.delete(address);
        },
        () => {},
      );
    void client.close().catch(() => {});
  }

  /**
   * Asks every broker the mirror knows — the `--mirror-to` broker and the leaders it sends to — who
   * leads the partitions of upstream topic `remote` (Metadata version 1), each given `askLeaderMs`;
   * one ask per topic at a time, shared by its partitions. Never throws: a broker that fails or
   * does not answer in time has `metadata` null. A `--mirror-to` answer refreshes `#home`.
   */
  #askLeaders(remote: string): Promise<LeaderAnswer[]> {
    let ask = this.#asks.get(remote);
    if (ask !== undefined) return ask;
    const limitMs = this.#o.askLeaderMs ?? 3000;
    const within = <T>(work: Promise<T>): Promise<T | null> =>
      new Promise((resolve) => {
        const timer = this.#o.clock.setTimer(limitMs, () => resolve(null));
        work.then(
          (value) => {
            timer.cancel();
            resolve(value);
          },
          () => {
            timer.cancel();
            resolve(null);
          },
        );
      });
    const brokers: [LeaderAnswer["broker"], () => Promise<TcpClient>][] = [
      ["mirror-to", () => this.#upstream()],
    ];
    const addresses = new Set([...this.#peers.keys(), ...this.#leaders.values()]);
    if (this.#o.connectTo !== undefined)
      for (const address of addresses) brokers.push([address, () => this.#peer(address)]);
    ask = Promise.all(
      brokers.map(async ([broker, open]): Promise<LeaderAnswer> => {
        const metadata = await within(open().then((c) => c.clusterMetadata([remote])));
        if (broker === "mirror-to" && metadata !== null) {
          this.#upstreamReachable = true;
          // Answering at all ends "unreachable" (not a refusal of the key: that needs a batch).
          if (this.#uplinkReportEvent === "mirror.upstream_unreachable")
            this.#reachedAgain("mirror-to");
          if (metadata.cluster !== null)
            this.#home = {
              cluster_id: metadata.cluster.cluster_id,
              node_id: metadata.cluster.node_id,
            };
        }
        return { broker, metadata };
      }),
    ).finally(() => this.#asks.delete(remote));
    this.#asks.set(remote, ask);
    return ask;
  }

  /**
   * Opens a connection to the leader at `address` and checks that it is the node the `not_leader`
   * named, of the `--mirror-to` broker's cluster (Metadata version 1): an advertised address that
   * points at another broker must not take records the mirror then counts as forwarded.
   * @throws ClientError `invalid_response` naming both identities when they differ.
   */
  async #connectLeader(
    connectTo: (address: string) => Promise<TcpClient>,
    address: string,
  ): Promise<TcpClient> {
    const home = this.#home ?? (await (await this.#upstream()).clusterMetadata()).cluster;
    if (home !== null) this.#home ??= { cluster_id: home.cluster_id, node_id: home.node_id };
    const client = await connectTo(address);
    try {
      const there = (await client.clusterMetadata()).cluster;
      const node = this.#leaderNodes.get(address);
      if (
        home === null ||
        there === null ||
        there.cluster_id !== home.cluster_id ||
        (node !== undefined && there.node_id !== node)
      )
        throw ClientError.invalidResponse(
          `Cannot send to the leader at ${address}: it answers as ${there === null ? "a single broker" : `node ${there.node_id} of cluster ${there.cluster_id}`}, not as node ${node ?? "?"} of the --mirror-to broker's cluster ${home?.cluster_id ?? "(none)"}; check that node's --advertise-tcp`,
        );
      return client;
    } catch (err) {
      await client.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Forgets where `route` was sent (its leader's connection failed, or it has no leader now):
   * back to `--mirror-to`. The connection is closed once no other partition is sent on it.
   */
  #forgetLeader(route: string): void {
    const address = this.#leaders.get(route);
    if (address === undefined) return;
    this.#leaders.delete(route);
    for (const other of this.#leaders.values()) if (other === address) return;
    const peer = this.#peers.get(address);
    if (peer === undefined) return;
    this.#peers.delete(address);
    peer.then((c) => c.close()).catch(() => {});
  }

  #scan(): void {
    if (this.#stopping) return;
    void this.#scanOnce().finally(() => {
      if (!this.#stopping)
        this.#rescan = this.#o.clock.setTimer(this.#o.rescanMs ?? 5000, () => this.#scan());
    });
  }

  /** Starts a task for every matching partition without one. */
  async #scanOnce(): Promise<void> {
    try {
      for (const t of await this.#o.broker.listTopics()) {
        if (!this.#match(t.name)) continue;
        for (const p of t.partitions) {
          const key = `${p.partition}:${t.name}`;
          if (this.#running.has(key)) continue;
          const task = this.#run(t.name, p.partition, t.partitions.length).finally(() => {
            if (this.#running.get(key) === task) this.#running.delete(key);
          });
          this.#running.set(key, task);
        }
      }
    } catch (err) {
      this.#o.logger.log("warn", "mirror.scan_failed", {
        mirror: this.#o.name,
        error: errorMessage(err),
      });
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.#stopping) return resolve();
      const timer = this.#o.clock.setTimer(ms, () => {
        this.#wake = this.#wake.filter((w) => w !== done);
        resolve();
      });
      const done = () => {
        timer.cancel();
        resolve();
      };
      this.#wake.push(done);
    });
  }

  /**
   * {@link Mirror.retryRefused} ends this wait early: a partition refused by the upstream waits
   * `ms` (its backoff, up to 30 s) before sending its batch again.
   */
  #sleepRefused(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        this.#refusedWake.delete(wake);
        resolve();
      };
      this.#refusedWake.add(wake);
      void this.#sleep(ms).then(wake);
    });
  }

  async #upstream(): Promise<TcpClient> {
    if (this.#client !== null && !this.#client.closed) return this.#client;
    this.#connecting ??= this.#o.connect().finally(() => (this.#connecting = null));
    try {
      this.#client = await this.#connecting;
    } catch (err) {
      this.#upstreamReachable = false;
      throw err;
    }
    this.#upstreamReachable = true;
    return this.#client;
  }

  #saveState(): Promise<void> {
    const write = this.#stateWrites.then(() =>
      writeJsonAtomic(this.#o.fs, this.#statePath, this.#state),
    );
    this.#stateWrites = write.catch(() => {});
    return write;
  }

  /** The producer id of a partition (at most 249 characters: long topic names are cut and hashed). */
  #producerId(topic: string, partition: number): string {
    const id = `mirror:${this.#state.edge_id}:${partition}:${topic}`;
    if (id.length <= 249) return id;
    const hash = crc32(utf8(topic)).toString(16).padStart(8, "0");
    return `${id.slice(0, 240)}:${hash}`;
  }

  /** Waits until `count` more records may be forwarded (the catch-up rate cap). */
  /**
   * Records per batch: `batchRecords` (default 500), but at most a tenth of a second of the rate
   * cap, so that the cap holds over any second to within one small batch rather than one of 500.
   */
  #batchRecords(): number {
    const records = this.#o.batchRecords ?? 500;
    const rate = this.#o.recordsPerSecond ?? 20_000;
    return rate > 0 ? Math.max(1, Math.min(records, Math.floor(rate / 10))) : records;
  }

  async #pace(count: number): Promise<void> {
    const rate = this.#o.recordsPerSecond ?? 20_000;
    if (rate <= 0) return;
    const now = this.#o.clock.nowMs();
    const start = Math.max(now, this.#rateFreeAtMs);
    this.#rateFreeAtMs = start + (count * 1000) / rate;
    if (start > now) await this.#sleep(start - now);
  }

  async #committed(topic: string, partition: number): Promise<number | null> {
    try {
      const d = await this.#o.broker.describeGroup(this.group);
      return (
        d.offsets.find((o) => o.topic === topic && o.partition === partition)?.committed ?? null
      );
    } catch (err) {
      if (err instanceof BrokerError && err.kind.code === "group_not_found") return null;
      throw err;
    }
  }

  /**
   * The message of a failure to reach the upstream or be accepted by it, with its cause (a TLS
   * error names the certificate problem); logged once per distinct problem, not per retry.
   */
  #reportUplink(event: string, err: ClientError, broker: string): string {
    const cause = (err as { cause?: unknown }).cause;
    const message =
      cause instanceof Error && !err.message.includes(cause.message)
        ? `${err.message}: ${cause.message}`
        : err.message;
    // A refused key is the same problem whichever broker of the cluster refuses it (each
    // partition's leader does): logged once, not once per leader connection and retry.
    const sameBroker =
      this.#uplinkReportBroker === broker ||
      (event === "mirror.upstream_refused" && this.#uplinkReportEvent === event);
    if (this.#uplinkReport === null || !sameBroker || !sameProblem(this.#uplinkReport, message)) {
      this.#uplinkReport = message;
      this.#uplinkReportBroker = broker;
      this.#uplinkReportEvent = event;
      this.#o.logger.log("warn", event, {
        mirror: this.#o.name,
        code: err.code,
        error: message,
        broker: this.#brokerName(broker),
        retry: "the batch is sent again with backoff; nothing is skipped",
      });
    }
    return message;
  }

  /** `host:port` of `broker` ("mirror-to" or a leader's address) for log lines. */
  #brokerName(broker: string): string {
    return broker === "mirror-to" ? (this.#o.upstreamAddress ?? "the --mirror-to broker") : broker;
  }

  /**
   * `broker` answered again: `mirror.upstream_reachable` (info) if the problem last logged was
   * about it — not when another broker of the cluster answers while it is still silent, unless
   * `anyBroker` (a partition whose batch met the problem got one through `broker`, the leader it
   * moved to: the upstream takes its records again). Then `unreachable` names the broker that
   * did not answer, when it is another.
   */
  #reachedAgain(broker: string, options: { anyBroker?: boolean } = {}): void {
    const silent = this.#uplinkReportBroker;
    if (this.#uplinkReport === null || silent === null) return;
    // A refused key is the cluster's answer, not one broker's: any batch through ends it.
    const refused = this.#uplinkReportEvent === "mirror.upstream_refused";
    if (silent !== broker && options.anyBroker !== true && !refused) return;
    this.#o.logger.log("info", "mirror.upstream_reachable", {
      mirror: this.#o.name,
      broker: this.#brokerName(broker),
      ...(silent === broker || refused ? {} : { unreachable: this.#brokerName(silent) }),
    });
    this.#uplinkReport = null;
    this.#uplinkReportBroker = null;
  }

  /**
   * Logs `mirror.upstream_leader_unreachable` for a partition whose leader (`leader`, the address
   * it was routed to) does not answer, once per partition and cause (a message that differs only
   * in its request number is the same cause), and keeps `error` on its status.
   */
  #leaderUnreachable(
    status: MirrorPartitionStatus,
    remote: string,
    partition: number,
    leader: string,
    error: string,
  ): void {
    if (status.error === null || !sameProblem(status.error, error))
      this.#o.logger.log("warn", "mirror.upstream_leader_unreachable", {
        mirror: this.#o.name,
        topic: remote,
        partition,
        leader,
        error,
      });
    status.error = error;
  }

  /**
   * Creates the missing upstream topic `remote` with the edge's partition count (docs/edge.md
   * "Exactly once"): true once it exists (created here or by anyone else). A refusal of the
   * key (`forbidden`, `unauthenticated`) is logged once per topic and cause as
   * `mirror.upstream_refused` (warn) naming the topic, the operation and the fix, and puts the
   * partition in state `upstream_refused`; any other failure is kept in its status. Never throws.
   */
  async #createUpstream(
    topic: string,
    remote: string,
    partitions: number,
    status: MirrorPartitionStatus,
  ): Promise<boolean> {
    const o = this.#o;
    try {
      await (await this.#upstream()).createTopic({ name: remote, partitions });
      o.logger.log("info", "mirror.upstream_topic_created", {
        mirror: o.name,
        topic,
        upstream_topic: remote,
        partitions,
      });
    } catch (caught) {
      if (!(caught instanceof ClientError && caught.code === "topic_exists")) {
        const message = errorMessage(caught);
        if (
          caught instanceof ClientError &&
          (caught.code === "forbidden" || caught.code === "unauthenticated")
        ) {
          status.state = "upstream_refused";
          this.#refused(`${status.partition}:${topic}`);
          status.error = `cannot create topic "${remote}" upstream: ${message}`;
          if (this.#createRefusals.get(remote) !== message) {
            this.#createRefusals.set(remote, message);
            o.logger.log("warn", "mirror.upstream_refused", {
              mirror: o.name,
              topic,
              upstream_topic: remote,
              operation: "create_topic",
              code: caught.code,
              error: status.error,
              fix: `create topic "${remote}" upstream (${partitions} partitions), or give the mirror's key the admin role there`,
              retry:
                "the create is tried again with backoff up to 30 s; forwarding resumes by itself once the topic exists",
            });
          }
        } else {
          status.error = `cannot create topic "${remote}" upstream: ${message}`;
        }
        return false;
      }
    }
    this.#createRefusals.delete(remote);
    return true;
  }

  #newStatus(topic: string, upstreamTopic: string, partition: number): MirrorPartitionStatus {
    return {
      topic,
      upstreamTopic,
      partition,
      position: 0,
      highWatermark: 0,
      lagRecords: 0,
      lagMs: 0,
      state: "starting",
      error: null,
      forwarded: 0,
      failures: 0,
      oldestUnforwardedMs: null,
    };
  }

  /**
   * Stops partition `key`'s task with `error` (status and log). The log line is left out while
   * the same stop was logged less than `stoppedLogEveryMs` ago.
   */
  #stopped(key: string, error: string): void {
    const status = this.#status.get(key)!;
    status.state = "stopped";
    status.error = error;
    status.failures++;
    const now = this.#o.clock.nowMs();
    const told = this.#told.get(key);
    const everyMs = this.#o.stoppedLogEveryMs ?? 600_000;
    if (
      told?.stopped != null &&
      sameProblem(told.stopped, error) &&
      now - told.stoppedAtMs < everyMs
    )
      return;
    this.#told.set(key, {
      forwarding: false,
      stopped: error,
      stoppedAtMs: now,
      forwardingAtMs: told?.forwardingAtMs ?? -Infinity,
      after: "mirror.partition_stopped",
    });
    this.#o.logger.log("error", "mirror.partition_stopped", {
      mirror: this.#o.name,
      topic: status.topic,
      ...(status.upstreamTopic === status.topic ? {} : { upstream_topic: status.upstreamTopic }),
      partition: status.partition,
      error,
      retry: `tried again every ${(this.#o.rescanMs ?? 5000) / 1000} s, forwarding again (mirror.partition_forwarding) once the cause is gone; logged again every ${everyMs / 60_000} min while it stays stopped`,
    });
  }

  /** Partition `key` met an upstream refusal: its next forwarding line says it ended. */
  #refused(key: string): void {
    const told = this.#told.get(key);
    if (told === undefined || told.forwarding)
      this.#told.set(key, {
        forwarding: false,
        stopped: told?.stopped ?? null,
        stoppedAtMs: told?.stoppedAtMs ?? -Infinity,
        forwardingAtMs: told?.forwardingAtMs ?? -Infinity,
        after: "mirror.upstream_refused",
      });
  }

  /**
   * Partition `key` forwards (a batch got through, or it is caught up): `mirror.partition_forwarding`
   * (info) when it begins, and after a logged stop or a refusal, at most every 10 s per partition.
   */
  #forwarding(key: string, status: MirrorPartitionStatus): void {
    const told = this.#told.get(key);
    if (told?.forwarding === true) return;
    const now = this.#o.clock.nowMs();
    if (told !== undefined && now - told.forwardingAtMs < forwardingLogEveryMs) return;
    this.#told.set(key, {
      forwarding: true,
      stopped: told?.stopped ?? null,
      stoppedAtMs: told?.stoppedAtMs ?? -Infinity,
      forwardingAtMs: now,
      after: null,
    });
    this.#o.logger.log("info", "mirror.partition_forwarding", {
      mirror: this.#o.name,
      topic: status.topic,
      upstream_topic: status.upstreamTopic,
      partition: status.partition,
      position: status.position,
      state: status.state,
      ...(told?.after == null ? {} : { after: told.after }),
    });
  }

  /**
   * Rewrites the schema id of every Confluent-framed key and value of `held` (in place: each
   * rewritten part is a copy, the edge log is never changed) to the upstream's id of the same
   * schema under the same subject, renamed with the topic under TopicNameStrategy
   * ({@link upstreamSubject}; docs/edge.md "Schema ids upstream"). While the upstream's
   * registry cannot be reached, or refuses the mirror's key, it waits with backoff (logged once
   * per partition and cause) and tries again. A key or value that is not framed (shorter than 5
   * bytes, another first byte: a tombstone, no key) is left as it is.
   * @returns null once every id is translated (or the mirror is stopping), else why the
   *   partition stops (an incompatible schema upstream, no upstream registry, an unknown edge id).
   */
  async #translateIds(
    topic: string,
    partition: number,
    parts: FramedParts,
    held: HeldRecord[],
    status: MirrorPartitionStatus,
  ): Promise<string | null> {
    const translator = this.#translator!;
    let backoffMs = 500;
    let reported: string | null = null;
    for (const part of ["key", "value"] as const) {
      const edgeSubject = parts[part];
      if (edgeSubject === undefined) continue;
      const subject = upstreamSubject(edgeSubject, topic, status.upstreamTopic);
      const where = `topic "${topic}" partition ${partition} (record ${part}s)`;
      const ids = new Map<number, number>();
      for (const r of held) {
        const edgeId = framedId(r[part]);
        if (edgeId === null || ids.has(edgeId)) continue;
        for (;;) {
          if (this.#stopping) return null;
          try {
            ids.set(edgeId, await translator.upstreamId(subject, edgeId, where));
            break;
          } catch (err) {
            if (!(err instanceof SchemaTranslationError) || err.kind === "stop")
              return `cannot translate the schema id of the edge record at offset ${r.offset}: ${errorMessage(err)}`;
            status.state = err.kind === "refused" ? "upstream_refused" : "uplink_down";
            if (err.kind === "refused") this.#refused(`${partition}:${topic}`);
            status.error = err.message;
            status.failures++;
            if (reported === null || !sameProblem(reported, err.message)) {
              reported = err.message;
              this.#o.logger.log(
                "warn",
                err.kind === "refused" ? "mirror.upstream_refused" : "mirror.registry_unreachable",
                {
                  mirror: this.#o.name,
                  topic,
                  partition,
                  operation: "register_schema",
                  subject,
                  edge_schema_id: edgeId,
                  error: err.message,
                  retry:
                    "tried again with backoff up to 30 s; nothing of this partition is forwarded until its schema ids are translated",
                },
              );
            }
            await this.#sleep(backoffMs);
            backoffMs = Math.min(30_000, backoffMs * 2);
          }
        }
      }
      for (const r of held) {
        const bytes = r[part];
        const edgeId = framedId(bytes);
        if (bytes !== null && edgeId !== null) r[part] = withId(bytes, ids.get(edgeId)!);
      }
    }
    return null;
  }

  /** One partition's task (module comment). */
  async #run(topic: string, partition: number, partitionCount: number): Promise<void> {
    const o = this.#o;
    const key = `${partition}:${topic}`;
    let remote: string;
    try {
      remote = upstreamTopicName(o.renames ?? [], topic);
    } catch (err) {
      remote = topic;
      this.#status.set(key, this.#newStatus(topic, remote, partition));
      return this.#stopped(key, `--mirror-rename makes no topic name of it: ${errorMessage(err)}`);
    }
    const status = this.#newStatus(topic, remote, partition);
    // A stopped partition tried again stays "stopped" (and keeps its counts and position, which
    // retention reads) until it forwards.
    const before = this.#status.get(key);
    if (before !== undefined) {
      status.position = before.position;
      status.forwarded = before.forwarded;
      status.failures = before.failures;
      if (before.state === "stopped") {
        status.state = "stopped";
        status.error = before.error;
      }
    }
    this.#status.set(key, status);
    const owner = this.#upstreamOwners.get(remote);
    if (owner !== undefined && owner !== topic)
      return this.#stopped(
        key,
        `the upstream topic "${remote}" is already forwarded from "${owner}" (--mirror-rename maps two topics to one)`,
      );
    this.#upstreamOwners.set(remote, topic);
    const stop = (error: string) => this.#stopped(key, error);
    /** Saves the state, then commits `at` as the mirror's position: the error text if that failed. */
    const recordPosition = async (at: number): Promise<string | null> => {
      await this.#saveState();
      try {
        await o.broker.commitOffsets({
          group: this.group,
          offsets: [{ topic, partition, offset: at }],
        });
        return null;
      } catch (err) {
        return `cannot record the mirror's position: ${errorMessage(err)}`;
      }
    };
    const producerId = this.#producerId(topic, partition);
    let position: number;
    let committed: number | null;
    try {
      committed = await this.#committed(topic, partition);
      const offsets = await o.broker.listOffsets({ topic, partition });
      position = committed ?? offsets.logStartOffset;
    } catch (err) {
      return stop(`cannot read the mirror's position: ${errorMessage(err)}`);
    }
    status.position = position;
    let ps = this.#state.partitions[key];
    if (ps === undefined) {
      ps = { epoch: 0, base: position };
      this.#state.partitions[key] = ps;
      // The position exists before the first send, so "no position" later always means lost.
      const failed = await recordPosition(position);
      if (failed !== null) return stop(failed);
    } else if (committed === null || position < ps.base) {
      // Forwarded before, but no position now (the topic was deleted and created again, or the
      // group lost): these are other records than the upstream holds under this epoch, so a new
      // epoch begins here — never resumed from the upstream's old sequence, which would skip them.
      ps.epoch++;
      ps.base = position;
      await this.#saveState();
      o.logger.log("warn", "mirror.partition_restarted", {
        mirror: o.name,
        topic,
        partition,
        from: position,
        epoch: ps.epoch,
        reason:
          "no mirror position on the edge for a partition forwarded before (topic created again, or group lost)",
      });
    }
    let backoffMs = 100;
    // Creates of the upstream topic since the last batch got through (only the first is immediate).
    let createTries = 0;
    // `mirror.upstream_not_leader` was logged since the last batch got through.
    let notLeaderReported = false;
    // `mirror.upstream_slow` was logged since the last batch got through.
    let slowReported = false;
    // This partition's batch met `mirror.upstream_unreachable` (the --mirror-to broker) or
    // `mirror.upstream_leader_unreachable` since the last batch got through: once one does, from
    // whichever broker leads it by then, `mirror.upstream_reachable` ends the episode.
    let unreachableMet: "mirror-to" | "leader" | null = null;
    // The upstream partition, as `#leaders` keys it.
    const route = `${remote}/${partition}`;
    // Where the next fetch starts: past holes with nothing after them yet, ahead of `position`.
    let readFrom = position;
    const cursor = new RecordCursor();
    while (!this.#stopping) {
      // Read the edge.
      let fetched;
      try {
        fetched = await o.broker.fetch({
          topic,
          partition,
          offset: readFrom,
          maxRecords: this.#batchRecords(),
          maxBytes: o.batchBytes ?? 1024 * 1024,
          waitMs: 500,
        });
      } catch (err) {
        if (err instanceof BrokerError && err.kind.code === "offset_out_of_range") {
          const offsets = await o.broker.listOffsets({ topic, partition }).catch(() => null);
          if (offsets !== null && position < offsets.logStartOffset && o.skipGaps === true) {
            // The operator accepted the loss: as at a hole, a new epoch begins at the first record
            // kept (durable before the position moves and anything is sent in it).
            const from = position;
            position = offsets.logStartOffset;
            readFrom = position;
            ps.epoch++;
            ps.base = position;
            const failed = await recordPosition(position);
            if (failed !== null) return stop(failed);
            status.position = position;
            o.logger.log("error", "mirror.gap_skipped", {
              mirror: o.name,
              topic,
              partition,
              lost_from: from,
              lost_to: position,
              lost_records: position - from,
              epoch: ps.epoch,
              reason: `--mirror-skip-gaps: edge records [${from}, ${position}) were deleted by retention before they were forwarded; forwarding goes on from ${position}`,
            });
            continue;
          }
          if (offsets !== null && position < offsets.logStartOffset)
            return stop(
              `gap: edge records [${position}, ${offsets.logStartOffset}) were deleted by retention before they were forwarded; nothing after them is forwarded (restart with --mirror-skip-gaps to accept the loss and go on from ${offsets.logStartOffset}; set mirror_hold_retention on the topic to hold such segments: docs/edge.md "A partition stopped by a gap")`,
            );
        }
        if (
          err instanceof BrokerError &&
          ["topic_not_found", "partition_not_found"].includes(err.kind.code)
        )
          return stop(`the edge topic is gone: ${errorMessage(err)}`);
        status.error = errorMessage(err);
        status.failures++;
        await this.#sleep(1000);
        continue;
      }
      status.highWatermark = fetched.highWatermark;
      status.lagRecords = Math.max(0, fetched.highWatermark - position);
      if (fetched.records.count === 0) {
        status.state = "caught_up";
        status.lagMs = 0;
        status.oldestUnforwardedMs = null;
        this.#forwarding(key, status);
        // Past a hole with nothing after it yet: read on from there; the epoch changes only when
        // a record follows the hole.
        readFrom = Math.max(readFrom, fetched.nextOffset);
        continue;
      }
      // Confluent-framed keys or values get the upstream's schema ids (docs/edge.md "Schema ids
      // upstream"): read from the topic's config at each batch, so a change applies at once.
      let parts: FramedParts | null = null;
      if (this.#translator !== null)
        try {
          parts = framedParts((await o.broker.describeTopic(topic)).config);
        } catch (err) {
          status.error = errorMessage(err);
          status.failures++;
          await this.#sleep(1000);
          continue;
        }
      const held: HeldRecord[] | null = parts === null ? null : [];
      // Decode the contiguous run that starts the answer.
      const bytes = fetched.records.bytes;
      cursor.reset(bytes);
      const builder = new EntryBatchBuilder();
      let first = -1;
      let last = -1;
      let oldestTs = -1;
      for (let p = 0; p < bytes.length; p += cursor.sizeBytes) {
        if (cursor.decode(p) !== DecodeStatus.Ok)
          return stop(`an edge record failed its checks: ${cursor.reason}`);
        if (first >= 0 && cursor.offset !== last + 1) break;
        if (first < 0) first = cursor.offset;
        last = cursor.offset;
        if (oldestTs < 0) oldestTs = cursor.timestampMs;
        if (held === null) builder.add(cursor.key(), cursor.value(), cursor.timestampMs);
        else
          held.push({
            offset: cursor.offset,
            key: cursor.key(),
            value: cursor.value(),
            timestampMs: cursor.timestampMs,
          });
      }
      status.lagMs = Math.max(0, o.clock.nowMs() - oldestTs);
      status.oldestUnforwardedMs = oldestTs;
      if (first !== position) {
        // A hole (compaction removed records): sequences must stay consecutive, so a new epoch
        // begins at the next record, made durable before anything is sent in it. After a restart
        // the state may already say so (the epoch began there): then it is kept, so a batch of
        // it that reached the upstream is answered as a duplicate, not stored again.
        if (ps.base !== first) {
          ps.epoch++;
          ps.base = first;
          await this.#saveState();
          o.logger.log("info", "mirror.new_epoch", {
            mirror: o.name,
            topic,
            partition,
            epoch: ps.epoch,
            base: first,
          });
        }
        position = first;
      }
      if (held !== null && parts !== null) {
        const problem = await this.#translateIds(topic, partition, parts, held, status);
        if (this.#stopping) break;
        if (problem !== null) return stop(problem);
        for (const r of held) builder.add(r.key, r.value, r.timestampMs);
      }
      const batch = builder.build();
      await this.#pace(batch.count);
      if (this.#stopping) break;
      // Send until the upstream answers for this batch.
      let sent = false;
      // Redirects to a named leader for this batch (see below).
      let redirects = 0;
      while (!sent && !this.#stopping) {
        const routedTo = this.#leaders.get(route);
        let client: TcpClient | null = null;
        try {
          client = await this.#clientFor(route);
          await client.produceIdempotent(remote, batch, {
            partition,
            producer: { id: producerId, epoch: ps.epoch, sequence: position - ps.base },
          });
          position = last + 1;
          status.forwarded += batch.count;
          this.#upstreamReachable = true;
          sent = true;
        } catch (caught) {
          if (this.#stopping) break;
          status.failures++;
          // A connection that cannot even be opened is the uplink being down, like a lost one.
          const err =
            caught instanceof ClientError
              ? caught
              : ClientError.connectionClosed(`Cannot reach the upstream: ${errorMessage(caught)}`);
          // The mirror closed that connection itself (its broker answered nothing in time, see
          // below): not an upstream problem of its own; resend on a fresh connection.
          if (err.code === "connection_closed" && client !== null && this.#selfClosed.has(client))
            continue;
          const expectedSeq = (err.details as { expected_sequence?: unknown } | undefined)
            ?.expected_sequence;
          const expectedEpoch = (err.details as { expected_epoch?: unknown } | undefined)
            ?.expected_epoch;
          if (err.code === "duplicate_sequence" || err.code === "out_of_order_sequence") {
            const s = position - ps.base;
            if (
              typeof expectedSeq === "number" &&
              expectedSeq > s &&
              ps.base + expectedSeq <= fetched.highWatermark
            ) {
              o.logger.log("info", "mirror.resumed", {
                mirror: o.name,
                topic,
                partition,
                from: position,
                to: ps.base + expectedSeq,
                reason: "the upstream already holds these records",
              });
              position = ps.base + expectedSeq;
              sent = true;
              continue;
            }
            if (
              err.code === "out_of_order_sequence" &&
              expectedSeq === 0 &&
              ps.epoch === 0 &&
              s > 0 &&
              status.forwarded === 0
            ) {
              // A fresh upstream partition for this producer while the edge starts mid-log: begin an
              // epoch at the position (nothing of this producer is there to duplicate).
              ps.epoch++;
              ps.base = position;
              await this.#saveState();
              continue;
            }
            return stop(
              `the upstream's state for producer "${producerId}" does not match the edge (sent epoch ${ps.epoch} sequence ${s}, it expects ${String(expectedSeq)}): ${err.message}`,
            );
          }
          if (err.code === "unknown_producer") {
            // Forgotten upstream (idle past its expiry): a new epoch at the position.
            ps.epoch++;
            ps.base = position;
            await this.#saveState();
            continue;
          }
          if (err.code === "producer_fenced")
            return stop(
              `producer "${producerId}" is fenced upstream by epoch ${String(expectedEpoch)} (another edge with this id?): ${err.message}`,
            );
          if (err.code === "topic_not_found") {
            // Create it (the key needs admin upstream). A refusal is logged with its cause and
            // retried with backoff, never a stopped partition: it heals once the topic exists.
            const created = await this.#createUpstream(topic, remote, partitionCount, status);
            if (created && createTries++ === 0) continue;
            await this.#sleep(backoffMs);
            backoffMs = Math.min(30_000, backoffMs * 2);
            continue;
          }
          if (
            err.code === "unauthenticated" ||
            err.code === "forbidden" ||
            err.code === "key_revoked"
          ) {
            // A wrong or revoked key, or one without the producer role upstream: an operator
            // fixes it there or here, so the batch waits and is sent again — never dropped. The
            // upstream is down for the mirror until a batch gets through (docs/operations.md
            // "Metrics": `esb_mirror_upstream_up` 0, so `EsBrokerMirrorUpstreamDown` can fire).
            this.#upstreamReachable = false;
            status.state = "upstream_refused";
            this.#refused(key);
            status.error = this.#reportUplink(
              "mirror.upstream_refused",
              err,
              routedTo ?? "mirror-to",
            );
            if (client !== null) this.#closeOwn(client);
            await this.#sleepRefused(backoffMs);
            backoffMs = Math.min(30_000, backoffMs * 2);
            continue;
          }
          if (err.code === "not_leader") {
            const details = err.details as { leader_tcp?: unknown; leader?: unknown } | undefined;
            const leader = details?.leader_tcp;
            if (typeof leader === "string" && o.connectTo !== undefined && leader !== routedTo) {
              // An upstream cluster: this partition's leader is another broker; send there.
              this.#leaders.set(route, leader);
              if (typeof details?.leader === "number")
                this.#leaderNodes.set(leader, details.leader);
              // The first redirect of a batch goes at once; more (brokers that name each other
              // with stale views) back off as any retry does.
              if (redirects++ > 0) {
                await this.#sleep(backoffMs);
                backoffMs = Math.min(5000, backoffMs * 2);
              }
              if (this.#leaderLogged.get(route) !== leader) {
                this.#leaderLogged.set(route, leader);
                o.logger.log("info", "mirror.upstream_leader", {
                  mirror: o.name,
                  topic: remote,
                  partition,
                  leader,
                });
              }
              continue;
            }
            // No leader now (an election), or the one named sent it back: wait, then ask the
            // --mirror-to broker again. Said once per partition until a batch goes through.
            this.#forgetLeader(route);
            if (!notLeaderReported) {
              notLeaderReported = true;
              o.logger.log("warn", "mirror.upstream_not_leader", {
                mirror: o.name,
                topic: remote,
                partition,
                error: err.message,
              });
            }
          }
          if (err.code === "timeout" || err.code === "connection_closed") {
            // No answer in time, or the connection lost: ask the brokers the mirror knows who
            // leads now, rather than going back to the --mirror-to broker (which may be the one
            // paused) — a partition whose leader did not move keeps flowing (docs/edge.md "An
            // upstream cluster").
            const sentTo = routedTo ?? "mirror-to";
            const address = routedTo ?? this.#o.upstreamAddress ?? "the --mirror-to broker";
            const answers = await this.#askLeaders(remote);
            if (this.#stopping) break;
            const views: LeaderView[] = [];
            for (const a of answers) {
              const cluster = a.metadata?.cluster;
              const p = cluster?.topics
                .find((t) => t.name === remote)
                ?.partitions.find((x) => x.partition === partition);
              if (cluster == null || p === undefined) continue;
              views.push({
                nodeId: cluster.node_id,
                leader: p.leader,
                leaderEpoch: p.leader_epoch,
                leaderTcp: cluster.brokers.find((b) => b.node_id === p.leader)?.tcp ?? null,
              });
            }
            const decision = decideAfterNoAnswer(
              {
                address,
                node:
                  routedTo !== undefined
                    ? (this.#leaderNodes.get(routedTo) ?? null)
                    : (this.#home?.node_id ?? null),
              },
              answers.some((a) => a.broker === sentTo && a.metadata !== null),
              o.connectTo === undefined ? [] : views,
            );
            if (decision.action === "follow") {
              // Another broker leads it now (the newest view says so): send there.
              this.#forgetLeader(route);
              const leader =
                decision.leader === this.#home?.node_id
                  ? this.#o.upstreamAddress
                  : decision.address;
              if (decision.leader !== this.#home?.node_id) {
                this.#leaders.set(route, decision.address);
                this.#leaderNodes.set(decision.address, decision.leader);
              }
              if (leader !== undefined && this.#leaderLogged.get(route) !== leader) {
                this.#leaderLogged.set(route, leader);
                o.logger.log("info", "mirror.upstream_leader", {
                  mirror: o.name,
                  topic: remote,
                  partition,
                  leader,
                  reason: `${address}: ${err.message}`,
                });
              }
              if (redirects++ > 0) {
                await this.#sleep(backoffMs);
                backoffMs = Math.min(5000, backoffMs * 2);
              }
              continue;
            }
            // A connect that failed (`client` null) never carried the batch: however the broker
            // answers now, that is unreachable, not slow (newuser17 #10).
            if (decision.action === "slow" && client !== null) {
              // It answers, and still leads: the batch waits there (for its in-sync replicas'
              // acknowledgements, say). Resent to it; answered as a duplicate once stored.
              if (err.code === "timeout") {
                status.state = "upstream_slow";
                if (!slowReported) {
                  slowReported = true;
                  o.logger.log("warn", "mirror.upstream_slow", {
                    mirror: o.name,
                    topic: remote,
                    partition,
                    broker: address,
                    error: err.message,
                    retry:
                      "the broker answers other requests but not this batch yet (waiting for its in-sync replicas?): the batch is sent to it again, and stored once",
                  });
                }
              } else status.state = "uplink_down";
              status.error = err.message;
              await this.#sleep(backoffMs);
              backoffMs = Math.min(5000, backoffMs * 2);
              continue;
            }
            // Nothing from that broker, and no one names another leader: keep sending there, with
            // backoff, on a fresh connection (a lease that expires moves it; the next ask sees it).
            if (err.code === "timeout" && client !== null) this.#closeOwn(client);
            status.state = "uplink_down";
            if (routedTo !== undefined) {
              this.#leaderUnreachable(status, remote, partition, routedTo, err.message);
              unreachableMet ??= "leader";
            } else {
              this.#upstreamReachable = false;
              status.error = this.#reportUplink("mirror.upstream_unreachable", err, "mirror-to");
              unreachableMet = "mirror-to";
            }
            await this.#sleep(backoffMs);
            backoffMs = Math.min(5000, backoffMs * 2);
            continue;
          }
          if (routedTo !== undefined && err.code === "invalid_response") {
            // The leader's connection failed (or it is not who it was said to be): the
            // --mirror-to broker names the next one. Said once per partition and cause.
            this.#forgetLeader(route);
            status.state = "uplink_down";
            this.#leaderUnreachable(status, remote, partition, routedTo, err.message);
            unreachableMet ??= "leader";
            await this.#sleep(backoffMs);
            backoffMs = Math.min(5000, backoffMs * 2);
            continue;
          }
          if (err.retriable) {
            status.state = "uplink_down";
            status.error = err.message;
            await this.#sleep(backoffMs);
            backoffMs = Math.min(5000, backoffMs * 2);
            continue;
          }
          return stop(`the upstream refused a batch: ${err.message}`);
        }
      }
      if (!sent) break;
      // The batch got through: from the --mirror-to broker, or from the leader the partition
      // moved to (attack15b F7: the mirror said unreachable and never took it back).
      const acceptedBy = this.#leaders.get(route) ?? "mirror-to";
      if (unreachableMet === "mirror-to") this.#reachedAgain(acceptedBy, { anyBroker: true });
      else this.#reachedAgain(acceptedBy);
      if (slowReported || unreachableMet === "leader")
        o.logger.log("info", "mirror.upstream_reachable", {
          mirror: o.name,
          topic: remote,
          partition,
          broker: this.#brokerName(acceptedBy),
          after: slowReported ? "mirror.upstream_slow" : "mirror.upstream_leader_unreachable",
        });
      notLeaderReported = false;
      slowReported = false;
      unreachableMet = null;
      readFrom = position;
      backoffMs = 100;
      createTries = 0;
      status.state = "forwarding";
      status.error = null;
      status.position = position;
      this.#forwarding(key, status);
      try {
        await o.broker.commitOffsets({
          group: this.group,
          offsets: [{ topic, partition, offset: position }],
        });
      } catch (err) {
        // The position is re-derived from the upstream after a restart; a failed commit costs a resend.
        o.logger.log("warn", "mirror.commit_failed", {
          mirror: o.name,
          topic,
          partition,
          error: errorMessage(err),
        });
      }
    }
  }
}
