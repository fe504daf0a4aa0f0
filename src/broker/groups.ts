/**
 * Consumer groups: members join for a set of topics, the coordinator deals the topics' partitions
 * out among them, members keep their place with heartbeats, and commits are fenced by generation
 * and ownership. State lives in `groups/<group>.json` (docs/storage.md "Files on disk"), rewritten atomically
 * (`writeJsonAtomic`) on every commit and every rebalance, before the change takes effect.
 *
 * ## Assignment strategy: sticky
 *
 * Every partition of every topic that some member subscribes to is listed, sorted by topic name
 * then partition number; the members are sorted by member id. A rebalance starts from the
 * previous generation's owners, like Kafka's sticky assignor:
 *
 * 1. Each partition whose previous owner is still a member subscribed to its topic stays with it.
 * 2. Every other partition (its owner left, unsubscribed, or it is new), in list order, goes to
 *    the subscribed member that owns the fewest partitions (the first by member id on a tie).
 * 3. While some member owns at least two more partitions than a member subscribed to one of its
 *    partitions' topics, that partition moves to the least loaded such member (the most loaded
 *    member gives first).
 *
 * So a member that stays keeps its partitions unless it holds more than its share, and only what
 * balance needs moves: when a member joins, the others each give it a few; when one leaves, only
 * its partitions move. Members' shares differ by at most one when all subscribe to the same
 * topics. A group with no previous owners (its first generation) gets partition i of the list to
 * member i mod n when all subscribe to the same topics. The same previous owners, members and
 * topics always give the same assignment. Topics that no longer exist are left out.
 *
 * ## Transitions (each row rebalances: generation + 1, new assignment, file rewritten)
 *
 * | event                                   | members after          | rebalance |
 * |-----------------------------------------|------------------------|-----------|
 * | join without member id                  | + a new member         | yes       |
 * | join as an existing member, same topics and session timeout | same | no: its current assignment is returned |
 * | join as an existing member, other topics or timeout | member updated | yes       |
 * | join as an unknown member id            | (refused: unknown_member) | no     |
 * | leave                                   | − the member           | yes       |
 * | no heartbeat within session_timeout_ms  | − the member           | yes       |
 * | a subscribed topic is deleted           | same                   | yes       |
 * | heartbeat                               | same (session renewed) | no        |
 *
 * ## Commit fencing
 *
 * | group has members | member_id given | outcome                                              |
 * |-------------------|-----------------|------------------------------------------------------|
 * | no                | no              | accepted (a standalone consumer)                     |
 * | no                | yes             | unknown_member                                       |
 * | yes               | no              | unknown_member (a member must name itself)           |
 * | yes               | not a member    | unknown_member                                       |
 * | yes               | member, generation ≠ current | stale_generation                        |
 * | yes               | member, current generation, a partition owned by another (or none) | not_partition_owner |
 * | yes               | member, current generation, owns every partition | accepted            |
 *
 * Whatever the row, every offset is checked first: an integer, 0 ≤ offset ≤ the partition's high
 * watermark (`invalid_offset` otherwise, docs/decisions.md §8). A commit is all or nothing, and durable
 * when it returns.
 *
 * ## Client-assigned groups (Kafka's JoinGroup/SyncGroup; docs/kafka.md "Consumer groups")
 *
 * A group whose members assign partitions themselves: the coordinator only runs the rebalance.
 * Its members live in memory (never in the group file); offsets and the generation are shared
 * with the native machinery above. Native and client-assigned members never share a group
 * (`inconsistent_group_protocol`).
 *
 * | phase      | event                                   | outcome                                                 |
 * |------------|-----------------------------------------|---------------------------------------------------------|
 * | any        | join (new or known member)              | → preparing; the join waits; waiting syncs get rebalance_in_progress |
 * | preparing  | every member has a waiting join          | generation + 1, protocol and leader chosen, joins answered (the leader gets every member's metadata) → completing |
 * | preparing  | rebalance timeout (largest of members') | as above, without the members that did not rejoin        |
 * | preparing  | heartbeat                               | rebalance_in_progress (session renewed)                  |
 * | completing | sync from a follower                    | waits for the leader's                                  |
 * | completing | sync from the leader                    | assignments stored and handed out → stable              |
 * | completing | commit                                  | rebalance_in_progress                                   |
 * | stable     | sync                                    | the member's assignment                                 |
 * | any        | leave, or no heartbeat within session   | member removed; → preparing (or empty: generation + 1)  |
 *
 * A member's session timer does not run while its join or sync waits. Commits need a member and
 * the current generation, but no ownership: the leader's assignment may be opaque.
 *
 * ## Start-up
 *
 * Each `groups/<group>.json` is loaded; members come back with a fresh session (they have
 * `session_timeout_ms` from the start to heartbeat). A committed offset above its partition's log
 * end is clamped to the log end and reported (`group.offset_clamped`, docs/decisions.md §8; possible only
 * with `--flush-every-records` > 1); offsets of topics that no longer exist are dropped and
 * reported. An empty or unparseable file makes only that group unavailable (docs/decisions.md §9).
 */
import type { Clock, Timer } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { Mutex } from "../lib/mutex.ts";
import { plural } from "../lib/text.ts";
import { clip, quote } from "../lib/quote.ts";
import {
  groupCommitOffsetsMax,
  groupMembersMax,
  groupNameCharsMax,
  groupSessionTimeoutMsDefault,
  groupSessionTimeoutMsMax,
  groupSessionTimeoutMsMin,
  groupTopicsMax,
  offsetMax,
} from "../lib/limits.ts";
import { dirname, joinPath, type FileSystem } from "../fs/types.ts";
import { readJsonFile, writeJsonAtomic } from "../storage/metadata.ts";
import { classifyGroupsEntry, leftovers, removeMetadataTemps } from "../storage/leftovers.ts";
import { errorMessage } from "../lib/errors.ts";
import {
  parseTopicPartitionKey,
  partitionName,
  topicPartitionKey,
} from "../lib/topic-partition.ts";
import { BrokerError, Errors } from "./errors.ts";
import { storageFailure } from "./storage-failure.ts";
import type {
  AssignedJoinRequest,
  AssignedJoinResult,
  AssignedSyncRequest,
  CommitOffsetsRequest,
  GroupAssignment,
  GroupDescription,
  GroupOffsetDescription,
  HeartbeatResult,
  JoinGroupRequest,
  TopicPartition,
} from "./types.ts";

/**
 * What the coordinator needs to know of a partition. In a cluster, a coordinator that does not
 * lead the partition does not know its offsets: both are null (docs/cluster.md "Consumer
 * groups"), a commit is then checked for a negative offset only (as Kafka does), and its lag is
 * not shown.
 */
export interface GroupPartitionView {
  /** One past the last durable offset (lag is measured to it); null: unknown here. */
  readonly highWatermark: number | null;
  /**
   * The largest offset a commit may name: absent, `highWatermark`; null, no upper bound known
   * here (a cluster coordinator that does not lead the partition: its copy may be behind).
   */
  readonly commitLimit?: number | null;
  /** One past the last offset written (start-up clamps committed offsets to it); null: unknown. */
  readonly logEndOffset: number | null;
}

/**
 * The topics the coordinator may assign. `partitions` returns a topic's partitions, or throws
 * BrokerError topic_not_found / unavailable.
 */
export interface GroupTopics {
  partitions(topic: string): readonly GroupPartitionView[];
}

/** Options of {@link GroupCoordinator.open}. */
export interface GroupCoordinatorOptions {
  fs: FileSystem;
  /** The broker's data directory; groups live in `<dataDir>/groups/`. */
  dataDir: string;
  clock: Clock;
  logger: Logger;
  topics: GroupTopics;
}

interface MemberData {
  id: string;
  /** Sorted, unique. */
  topics: string[];
  sessionTimeoutMs: number;
  /** Set for a member of a client-assigned group (never persisted; see "Client-assigned groups"). */
  clientId?: string;
}

/** The persisted part of a group; replaced as a whole on every change. */
interface GroupData {
  generation: number;
  /** Sorted by id. */
  members: MemberData[];
  /** "topic\0partition" → owning member id. */
  owners: Map<string, string>;
  /** "topic\0partition" → committed offset (next to consume). */
  offsets: Map<string, number>;
}

interface Group {
  name: string;
  data: GroupData;
  lock: Mutex;
  /** Member id → session timer (armed from the last heartbeat). */
  timers: Map<string, Timer>;
  /** False until the group's file has been written once. */
  persisted: boolean;
  /** The join/sync state while the group's members assign partitions themselves, else null. */
  assigned: AssignedState | null;
}

/** A member of a client-assigned group, in memory only. */
interface AssignedMember {
  id: string;
  clientId: string;
  sessionTimeoutMs: number;
  rebalanceTimeoutMs: number;
  protocols: { name: string; metadata: Uint8Array }[];
  topics: string[];
  /** Its assignment in the current generation (empty until the leader's SyncGroup). */
  assignment: Uint8Array;
  /** Set while its JoinGroup waits for the rebalance to complete. */
  pendingJoin: Settle<AssignedJoinResult> | null;
  /** Set while its SyncGroup waits for the leader's assignment. */
  pendingSync: Settle<{ assignment: Uint8Array }> | null;
}

/** Resolves or rejects a waiting request. */
interface Settle<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

/** A client-assigned group's rebalance state (module comment, "Client-assigned groups"). */
interface AssignedState {
  phase: "preparing" | "completing" | "stable";
  protocolType: string;
  /** Chosen when a rebalance completes. */
  protocol: string;
  leader: string;
  /** In join order (the first becomes leader when none is left). */
  members: Map<string, AssignedMember>;
  /** Ends the preparing phase at the rebalance timeout. */
  rebalanceTimer: Timer | null;
}

const groupNamePattern = /^[A-Za-z0-9._-]+$/;

function compareTp(a: TopicPartition, b: TopicPartition): number {
  return a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition;
}

/**
 * Checks a group name: `[A-Za-z0-9._-]`, 1–249 characters, not "." or ".." (it names a file).
 * @throws BrokerError invalid_request naming it.
 */
export function validateGroupName(name: unknown): string {
  if (
    typeof name !== "string" ||
    name.length < 1 ||
    name.length > groupNameCharsMax ||
    name === "." ||
    name === ".." ||
    !groupNamePattern.test(name)
  ) {
    const shown = quote(name);
    throw new BrokerError(
      Errors.invalidRequest,
      `Invalid group name ${shown}: must be 1 to ${groupNameCharsMax} of letters, digits, ".", "_" and "-", not "." or ".."`,
      {
        field: "group",
      },
    );
  }
  return name;
}

/**
 * Deals partitions to members (the sticky strategy of the module comment, "Assignment strategy:
 * sticky").
 * @param members sorted by id.
 * @param partitionCount the partition count of a topic, or undefined if it does not exist.
 * @param previous the previous generation's owners, "topic\0partition" → member id (empty for a
 *   group's first generation); owners that are no longer members are ignored.
 * @returns "topic\0partition" → member id.
 */
export function assignSticky(
  members: readonly { id: string; topics: readonly string[] }[],
  partitionCount: (topic: string) => number | undefined,
  previous: ReadonlyMap<string, string> = new Map(),
): Map<string, string> {
  const owners = new Map<string, string>();
  if (members.length === 0) return owners;
  const indexOf = new Map(members.map((m, i) => [m.id, i]));
  /** Per member, the keys it owns (in the order it got them) and their topics. */
  const owned: { key: string; topic: string }[][] = members.map(() => []);
  /** Topic → indexes of the members subscribed to it, ascending. */
  const subscribers = new Map<string, number[]>();
  const free: { key: string; topic: string }[] = [];
  for (const topic of [...new Set(members.flatMap((m) => m.topics))].sort()) {
    const count = partitionCount(topic);
    if (count === undefined) continue;
    const subscribed: number[] = [];
    members.forEach((m, i) => {
      if (m.topics.includes(topic)) subscribed.push(i);
    });
    subscribers.set(topic, subscribed);
    for (let partition = 0; partition < count; partition++) {
      const key = topicPartitionKey(topic, partition);
      const before = previous.get(key);
      const i = before === undefined ? undefined : indexOf.get(before);
      if (i !== undefined && members[i].topics.includes(topic)) owned[i].push({ key, topic });
      else free.push({ key, topic });
    }
  }
  /** The subscriber of `topic` owning the fewest partitions (the first by id on a tie). */
  const leastLoaded = (topic: string): number => {
    let best = -1;
    for (const i of subscribers.get(topic)!)
      if (best < 0 || owned[i].length < owned[best].length) best = i;
    return best;
  };
  for (const p of free) owned[leastLoaded(p.topic)].push(p);
  // Each move lowers the sum of squared loads by at least 2, so this ends.
  for (;;) {
    const order = members
      .map((_, i) => i)
      .sort((a, b) => owned[b].length - owned[a].length || a - b);
    const fewest = owned[order[order.length - 1]].length;
    let moved = false;
    for (const donor of order) {
      if (owned[donor].length - fewest < 2) break;
      const list = owned[donor];
      for (let k = list.length - 1; k >= 0; k--) {
        const to = leastLoaded(list[k].topic);
        if (list.length - owned[to].length < 2) continue;
        owned[to].push(...list.splice(k, 1));
        moved = true;
        break;
      }
      if (moved) break;
    }
    if (!moved) break;
  }
  members.forEach((m, i) => {
    for (const p of owned[i]) owners.set(p.key, m.id);
  });
  return owners;
}

/** The coordinator of every consumer group on one data directory. */
export class GroupCoordinator {
  #fs: FileSystem;
  #dir: string;
  #clock: Clock;
  #logger: Logger;
  #topics: GroupTopics;
  #groups = new Map<string, Group>();
  /** Group → the generation it may not go below ({@link raiseGeneration}), even once forgotten. */
  #floors = new Map<string, number>();
  /** Groups whose file cannot be read, with the reason (docs/decisions.md §9). */
  #unavailable = new Map<string, string>();
  /** Makes member ids unique within this process (with the clock, across restarts). */
  #memberCounter = 0;
  /** Session expiries being applied (tests await them with {@link settled}). */
  #expiring = new Set<Promise<void>>();
  #closed = false;
  /** Told every generation a group is about to take ({@link onGeneration}). */
  #generationListener: ((group: string, generation: number) => void) | null = null;

  private constructor(options: GroupCoordinatorOptions) {
    this.#fs = options.fs;
    this.#dir = joinPath(options.dataDir, "groups");
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#topics = options.topics;
  }

  /**
   * Opens `<dataDir>/groups/` (created durably if missing) and loads every group (module comment,
   * Start-up). Call after the topics are open: clamping needs their log ends.
   * @throws FsError if the directory cannot be created or listed.
   */
  static async open(options: GroupCoordinatorOptions): Promise<GroupCoordinator> {
    const coordinator = new GroupCoordinator(options);
    await coordinator.#load();
    return coordinator;
  }

  async #load(): Promise<void> {
    const fs = this.#fs;
    if ((await fs.stat(this.#dir)) === null) {
      await fs.mkdir(this.#dir);
      await fs.syncDir(dirname(this.#dir));
    }
    for (const file of await fs.readdir(this.#dir)) {
      const path = joinPath(this.#dir, file);
      const entry = classifyGroupsEntry(file);
      if (entry === "metadata_temp") continue; // removed below, once every group is loaded
      if (entry === "not_a_group_file") {
        this.#logger.log("warn", "recovery.stray_file", {
          file: path,
          reason: leftovers.not_a_group_file.what,
        });
        continue;
      }
      await this.#loadGroup(entry.group, path);
    }
    // Temps of interrupted group writes (storage/leftovers.ts): removed, each reported once.
    await removeMetadataTemps(fs, this.#dir, this.#logger);
  }

  async #loadGroup(name: string, path: string): Promise<void> {
    const read = await readJsonFile(this.#fs, path);
    if ("missing" in read) return;
    let data: GroupData;
    try {
      if ("error" in read) throw new Error(read.error);
      data = parseGroupFile(name, read.value);
    } catch (err) {
      const reason = errorMessage(err);
      this.#unavailable.set(name, `${path}: ${reason}`);
      this.#logger.log("error", "recovery.group_unavailable", { group: name, file: path, reason });
      return;
    }
    let changed = false;
    for (const [key, committed] of [...data.offsets]) {
      const { topic, partition } = parseTopicPartitionKey(key);
      let partitions: readonly GroupPartitionView[];
      try {
        partitions = this.#topics.partitions(topic);
      } catch (err) {
        if (err instanceof BrokerError && err.kind === Errors.topicNotFound) {
          data.offsets.delete(key);
          changed = true;
          this.#logger.log("warn", "group.offset_dropped", {
            group: name,
            topic,
            partition,
            committed,
            reason: "the topic no longer exists",
          });
        }
        continue; // unavailable topic: keep the offset as it is
      }
      const view = partitions[partition];
      if (view === undefined) {
        data.offsets.delete(key);
        changed = true;
        this.#logger.log("warn", "group.offset_dropped", {
          group: name,
          topic,
          partition,
          committed,
          reason: "the topic has no such partition",
        });
      } else if (view.logEndOffset !== null && committed > view.logEndOffset) {
        data.offsets.set(key, view.logEndOffset);
        changed = true;
        this.#logger.log("warn", "group.offset_clamped", {
          group: name,
          topic,
          partition,
          committed,
          log_end_offset: view.logEndOffset,
        });
      }
    }
    const group: Group = {
      name,
      data,
      lock: new Mutex(),
      timers: new Map(),
      persisted: true,
      assigned: null,
    };
    this.#groups.set(name, group);
    for (const m of data.members) this.#armSession(group, m);
    if (changed) {
      try {
        await this.#persist(group, data);
      } catch (err) {
        this.#logger.log("error", "group.persist_failed", {
          group: name,
          error: errorMessage(err),
        });
      }
    }
  }

  #checkOpen(): void {
    if (this.#closed)
      throw new BrokerError(
        Errors.unavailable,
        "Cannot serve the request: the broker is shutting down",
      );
  }

  /** An existing group. @throws group_not_found, unavailable. */
  #existing(name: string, action: string): Group {
    this.#checkOpen();
    const group = this.#groups.get(name);
    if (group !== undefined) return group;
    const reason = this.#unavailable.get(name);
    if (reason !== undefined)
      throw new BrokerError(
        Errors.unavailable,
        `${action}: group "${name}" is unavailable: ${reason}`,
      );
    throw new BrokerError(Errors.groupNotFound, `${action}: group "${name}" does not exist`);
  }

  /** An existing group, or a new empty one (not yet on disk). @throws unavailable. */
  #getOrCreate(name: string, action: string): Group {
    this.#checkOpen();
    const reason = this.#unavailable.get(name);
    if (reason !== undefined)
      throw new BrokerError(
        Errors.unavailable,
        `${action}: group "${name}" is unavailable: ${reason}`,
      );
    let group = this.#groups.get(name);
    if (group === undefined) {
      group = {
        name,
        data: {
          generation: this.#floors.get(name) ?? 0,
          members: [],
          owners: new Map(),
          offsets: new Map(),
        },
        lock: new Mutex(),
        timers: new Map(),
        persisted: false,
        assigned: null,
      };
      this.#groups.set(name, group);
    }
    return group;
  }

  /** No members (of either kind), no session or rebalance timers, no committed offsets. */
  #isEmpty(group: Group): boolean {
    const a = group.assigned;
    return (
      group.data.members.length === 0 &&
      group.data.offsets.size === 0 &&
      group.timers.size === 0 &&
      (a === null || (a.members.size === 0 && a.rebalanceTimer === null))
    );
  }

  /**
   * Deletes an empty group's file, then forgets it — unless a call queued on its lock meanwhile
   * (it then finds the group in memory, not yet written, and writes it again). Called holding the
   * group's lock. @throws the file system's error (the group stays).
   */
  async #remove(group: Group): Promise<void> {
    if (group.persisted) {
      await this.#fs.unlink(joinPath(this.#dir, `${group.name}.json`));
      await this.#fs.syncDir(this.#dir);
      group.persisted = false;
    }
    if (group.lock.pending <= 1 && this.#groups.get(group.name) === group) {
      this.#groups.delete(group.name);
      this.#logger.log("info", "group.removed", {
        group: group.name,
        reason: "no members and no committed offsets after its last topic was deleted",
      });
    }
  }

  /** Drops a group that was created in memory but never written (its first write failed). */
  #forgetIfUnpersisted(group: Group): void {
    if (
      !group.persisted &&
      group.data.members.length === 0 &&
      group.data.offsets.size === 0 &&
      this.#groups.get(group.name) === group
    ) {
      this.#groups.delete(group.name);
    }
  }

  /**
   * Calls `listener` with a group's generation each time the group's file is about to be written
   * (every change of generation writes it: a join, a member leaving or expiring, the group
   * emptying, a raise), before the write. Cluster mode records in etcd the generations a
   * coordinator moves to without a join, so the next coordinator starts above them
   * (docs/cluster.md "Consumer groups"). One listener; a later call replaces it.
   */
  onGeneration(listener: (group: string, generation: number) => void): void {
    this.#generationListener = listener;
  }

  async #persist(group: Group, data: GroupData): Promise<void> {
    this.#generationListener?.(group.name, data.generation);
    const partitions = new Map<string, { committed: number | null; owner: string | null }>();
    for (const [key, committed] of data.offsets) partitions.set(key, { committed, owner: null });
    const persistedIds = new Set(
      data.members.filter((m) => m.clientId === undefined).map((m) => m.id),
    );
    for (const [key, owner] of data.owners)
      if (persistedIds.has(owner))
        partitions.set(key, { committed: partitions.get(key)?.committed ?? null, owner });
    const rows = [...partitions]
      .map(([key, v]) => ({ ...parseTopicPartitionKey(key), ...v }))
      .sort(compareTp);
    await writeJsonAtomic(this.#fs, joinPath(this.#dir, `${group.name}.json`), {
      group: group.name,
      generation: data.generation,
      members: data.members
        .filter((m) => persistedIds.has(m.id))
        .map((m) => ({
          member_id: m.id,
          topics: m.topics,
          session_timeout_ms: m.sessionTimeoutMs,
        })),
      partitions: rows,
    });
    group.persisted = true;
  }

  /** Writes `next` and installs it; on failure nothing changes. @throws BrokerError storage_error. */
  async #commitData(group: Group, next: GroupData, action: string): Promise<void> {
    try {
      await this.#persist(group, next);
    } catch (err) {
      throw storageFailure(`${action}: writing the group file failed`, err);
    }
    group.data = next;
  }

  #partitionCount = (topic: string): number | undefined => {
    try {
      return this.#topics.partitions(topic).length;
    } catch {
      return undefined;
    }
  };

  /** `data` with `members`, a new generation and an assignment kept as close to `data.owners` as balance allows. */
  #rebalanced(data: GroupData, members: MemberData[]): GroupData {
    const sorted = [...members].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return {
      generation: data.generation + 1,
      members: sorted,
      owners: assignSticky(sorted, this.#partitionCount, data.owners),
      offsets: data.offsets,
    };
  }

  #assignmentsOf(data: GroupData, memberId: string): TopicPartition[] {
    const out: TopicPartition[] = [];
    for (const [key, owner] of data.owners)
      if (owner === memberId) out.push(parseTopicPartitionKey(key));
    return out.sort(compareTp);
  }

  #newMemberId(group: Group, prefix = group.name): string {
    for (;;) {
      const id = `${prefix.slice(0, 32)}-${this.#clock.nowMs().toString(36)}-${(++this.#memberCounter).toString(36)}`;
      if (!group.data.members.some((m) => m.id === id) && !group.assigned?.members.has(id))
        return id;
    }
  }

  #armSession(group: Group, member: MemberData): void {
    group.timers.get(member.id)?.cancel();
    const timer = this.#clock.setTimer(member.sessionTimeoutMs, () => {
      const task = this.#expire(group, member.id, timer).finally(() => this.#expiring.delete(task));
      this.#expiring.add(task);
    });
    group.timers.set(member.id, timer);
  }

  async #expire(group: Group, memberId: string, timer: Timer): Promise<void> {
    await group.lock.run(async () => {
      // A heartbeat since the timer fired re-armed a new timer: this one no longer speaks for the member.
      if (this.#closed || group.timers.get(memberId) !== timer) return;
      const member = group.data.members.find((m) => m.id === memberId);
      if (member === undefined) return;
      group.timers.delete(memberId);
      if (member.clientId !== undefined) {
        this.#logger.log("info", "group.member_expired", {
          group: group.name,
          member_id: memberId,
          session_timeout_ms: member.sessionTimeoutMs,
        });
        await this.#assignedRemove(group, memberId, "expired");
        return;
      }
      const next = this.#rebalanced(
        group.data,
        group.data.members.filter((m) => m.id !== memberId),
      );
      this.#logger.log("info", "group.member_expired", {
        group: group.name,
        member_id: memberId,
        session_timeout_ms: member.sessionTimeoutMs,
        generation: next.generation,
      });
      // The member is gone whether or not the file can be written now; the next write records it.
      group.data = next;
      try {
        await this.#persist(group, next);
      } catch (err) {
        this.#logger.log("error", "group.persist_failed", {
          group: group.name,
          error: errorMessage(err),
        });
      }
    });
  }

  /** Resolves once every session expiry that has fired has been applied (for tests driving a ManualClock). */
  async settled(): Promise<void> {
    while (this.#expiring.size > 0) await Promise.all([...this.#expiring]);
  }

  /** See {@link Broker.joinGroup}. */
  async join(request: JoinGroupRequest): Promise<GroupAssignment> {
    const name = validateGroupName(request.group);
    const action = `Cannot join group "${name}"`;
    const topics = checkTopicList(request.topics, action);
    for (const topic of topics) this.#topics.partitions(topic); // topic_not_found / unavailable
    const sessionTimeoutMs = checkInteger(request.sessionTimeoutMs, {
      name: "session_timeout_ms",
      min: groupSessionTimeoutMsMin,
      max: groupSessionTimeoutMsMax,
      fallback: groupSessionTimeoutMsDefault,
      action,
    });
    if (
      request.memberId !== undefined &&
      (typeof request.memberId !== "string" || request.memberId.length === 0)
    ) {
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: "member_id" must be a non-empty string`,
        { field: "member_id" },
      );
    }
    const group = this.#getOrCreate(name, action);
    return group.lock.run(async () => {
      try {
        return await this.#joinLocked(group, request, topics, sessionTimeoutMs, action);
      } catch (err) {
        this.#forgetIfUnpersisted(group);
        throw err;
      }
    });
  }

  async #joinLocked(
    group: Group,
    request: JoinGroupRequest,
    topics: string[],
    sessionTimeoutMs: number,
    action: string,
  ): Promise<GroupAssignment> {
    this.#checkOpen();
    const name = group.name;
    const data = group.data;
    if (group.assigned !== null) {
      throw new BrokerError(
        Errors.inconsistentGroupProtocol,
        `${action}: its members assign partitions themselves (Kafka consumers); a native consumer cannot join it`,
      );
    }
    let memberId = request.memberId;
    let member: MemberData;
    if (memberId !== undefined) {
      const existing = data.members.find((m) => m.id === memberId);
      if (existing === undefined) {
        throw new BrokerError(
          Errors.unknownMember,
          `${action}: member ${quote(memberId)} is not in the group (it left or its session expired): join without a member id`,
        );
      }
      member = existing;
      if (sameTopics(existing.topics, topics) && existing.sessionTimeoutMs === sessionTimeoutMs) {
        this.#armSession(group, existing);
        return {
          memberId,
          generation: data.generation,
          assignments: this.#assignmentsOf(data, memberId),
          sessionTimeoutMs,
        };
      }
      member = { id: memberId, topics, sessionTimeoutMs };
    } else {
      if (data.members.length >= groupMembersMax) {
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: the group already has ${groupMembersMax} members, the most allowed`,
        );
      }
      memberId = this.#newMemberId(group);
      member = { id: memberId, topics, sessionTimeoutMs };
    }
    const next = this.#rebalanced(data, [...data.members.filter((m) => m.id !== memberId), member]);
    await this.#commitData(group, next, action);
    this.#armSession(group, member);
    this.#logger.log("info", "group.rebalanced", {
      group: name,
      generation: next.generation,
      members: next.members.length,
      reason: request.memberId === undefined ? "join" : "rejoin",
      member_id: memberId,
    });
    return {
      memberId,
      generation: next.generation,
      assignments: this.#assignmentsOf(next, memberId),
      sessionTimeoutMs,
    };
  }

  /** See {@link Broker.heartbeat}. */
  async heartbeat(request: {
    group: string;
    memberId: string;
    generation?: number;
  }): Promise<HeartbeatResult> {
    const name = validateGroupName(request.group);
    const action = `Cannot heartbeat in group "${name}"`;
    if (request.generation !== undefined)
      checkInteger(request.generation, {
        name: "generation",
        min: 0,
        max: offsetMax,
        fallback: 0,
        action,
      });
    const group = this.#existing(name, action);
    const data = group.data;
    const member = data.members.find((m) => m.id === request.memberId);
    if (member === undefined) {
      throw new BrokerError(
        Errors.unknownMember,
        `${action}: member ${quote(request.memberId)} is not in the group (it left or its session expired): join again`,
      );
    }
    this.#armSession(group, member);
    return {
      generation: data.generation,
      rejoin: request.generation !== undefined && request.generation !== data.generation,
      assignments: this.#assignmentsOf(data, member.id),
    };
  }

  /** See {@link Broker.leaveGroup}. */
  async leave(request: { group: string; memberId: string }): Promise<void> {
    const name = validateGroupName(request.group);
    const action = `Cannot leave group "${name}"`;
    const group = this.#existing(name, action);
    await group.lock.run(async () => {
      this.#checkOpen();
      const data = group.data;
      if (!data.members.some((m) => m.id === request.memberId)) {
        throw new BrokerError(
          Errors.unknownMember,
          `${action}: member ${quote(request.memberId)} is not in the group`,
        );
      }
      if (group.assigned?.members.has(request.memberId)) {
        this.#logger.log("info", "group.member_left", { group: name, member_id: request.memberId });
        await this.#assignedRemove(group, request.memberId, "left");
        return;
      }
      const next = this.#rebalanced(
        data,
        data.members.filter((m) => m.id !== request.memberId),
      );
      await this.#commitData(group, next, action);
      group.timers.get(request.memberId)?.cancel();
      group.timers.delete(request.memberId);
      this.#logger.log("info", "group.rebalanced", {
        group: name,
        generation: next.generation,
        members: next.members.length,
        reason: "leave",
        member_id: request.memberId,
      });
    });
  }

  /**
   * See {@link Broker.commitOffsets}. `beforeStore`, if given, runs once the commit passed every
   * check, holding the group's lock (no rebalance can come between), before the offsets are
   * stored: if it throws, nothing is stored and the commit fails with its error (cluster mode
   * writes etcd there; docs/cluster.md "Consumer groups").
   */
  async commit(
    request: CommitOffsetsRequest,
    beforeStore?: (
      offsets: readonly { topic: string; partition: number; offset: number }[],
    ) => Promise<void>,
  ): Promise<void> {
    const name = validateGroupName(request.group);
    const action = `Cannot commit offsets of group "${name}"`;
    const offsets = this.#checkOffsets(request.offsets, action);
    const memberId = request.memberId;
    if (memberId !== undefined && (typeof memberId !== "string" || memberId.length === 0)) {
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: "member_id" must be a non-empty string`,
        { field: "member_id" },
      );
    }
    if (request.generation !== undefined)
      checkInteger(request.generation, {
        name: "generation",
        min: 0,
        max: offsetMax,
        fallback: 0,
        action,
      });
    const group =
      memberId === undefined
        ? this.#getOrCreate(name, action)
        : this.#existingForMember(name, memberId, action);
    await group.lock.run(async () => {
      try {
        await this.#commitLocked(group, request, offsets, action, beforeStore);
      } catch (err) {
        this.#forgetIfUnpersisted(group);
        throw err;
      }
    });
  }

  async #commitLocked(
    group: Group,
    request: CommitOffsetsRequest,
    offsets: { topic: string; partition: number; offset: number }[],
    action: string,
    beforeStore?: (
      offsets: readonly { topic: string; partition: number; offset: number }[],
    ) => Promise<void>,
  ): Promise<void> {
    const memberId = request.memberId;
    this.#checkOpen();
    const data = group.data;
    if (data.members.length === 0 && memberId !== undefined) {
      throw new BrokerError(
        Errors.unknownMember,
        `${action}: member ${quote(memberId)} is not in the group (it has no members): join first, or commit without member_id`,
      );
    }
    if (data.members.length > 0) {
      if (memberId === undefined) {
        throw new BrokerError(
          Errors.unknownMember,
          `${action}: the group has ${plural(data.members.length, "member")}, so a commit must name its member_id and generation`,
        );
      }
      if (!data.members.some((m) => m.id === memberId)) {
        throw new BrokerError(
          Errors.unknownMember,
          `${action}: member ${quote(memberId)} is not in the group (it left or its session expired): join again`,
        );
      }
      if (request.generation !== data.generation) {
        throw new BrokerError(
          Errors.staleGeneration,
          `${action}: generation ${request.generation ?? "(none)"} is not the group's current generation ${data.generation}: rejoin, then commit`,
          { generation: data.generation },
        );
      }
      const assigned = group.assigned;
      if (assigned !== null && assigned.phase === "completing") {
        throw new BrokerError(
          Errors.rebalanceInProgress,
          `${action}: generation ${data.generation} is waiting for its assignment: sync, then commit`,
        );
      }
      // Members of a client-assigned group own what their leader gave them, which the broker
      // may not be able to read: only membership and generation fence their commits (as Kafka).
      for (const o of assigned === null ? offsets : []) {
        const owner = data.owners.get(topicPartitionKey(o.topic, o.partition));
        if (owner !== memberId) {
          throw new BrokerError(
            Errors.notPartitionOwner,
            `${action}: partition ${quote(partitionName(o.topic, o.partition))} is ${owner === undefined ? "assigned to no member" : `owned by member ${quote(owner)}`} in generation ${data.generation}, not by ${quote(memberId)}`,
            { topic: clip(o.topic), partition: o.partition, owner: owner ?? null },
          );
        }
      }
    }
    if (beforeStore !== undefined) {
      await beforeStore(offsets);
      this.#checkOpen();
    }
    const nextOffsets = new Map(group.data.offsets);
    for (const o of offsets) nextOffsets.set(topicPartitionKey(o.topic, o.partition), o.offset);
    await this.#commitData(group, { ...group.data, offsets: nextOffsets }, action);
  }

  #existingForMember(name: string, memberId: string, action: string): Group {
    try {
      return this.#existing(name, action);
    } catch (err) {
      if (err instanceof BrokerError && err.kind === Errors.groupNotFound) {
        throw new BrokerError(
          Errors.unknownMember,
          `${action}: member ${quote(memberId)} is not in the group (the group does not exist)`,
        );
      }
      throw err;
    }
  }

  /** Validates a commit's offsets against the partitions now. @throws invalid_request, invalid_offset, topic_not_found, partition_not_found. */
  #checkOffsets(
    raw: unknown,
    action: string,
  ): { topic: string; partition: number; offset: number }[] {
    if (!Array.isArray(raw) || raw.length === 0)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: "offsets" must be a non-empty array`,
        { field: "offsets" },
      );
    if (raw.length > groupCommitOffsetsMax)
      throw new BrokerError(
        Errors.invalidRequest,
        `${action}: more than ${groupCommitOffsetsMax} offsets in one commit`,
        { field: "offsets" },
      );
    const seen = new Set<string>();
    const out: { topic: string; partition: number; offset: number }[] = [];
    raw.forEach((o: unknown, i) => {
      const where = `offsets[${i}]`;
      if (typeof o !== "object" || o === null)
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: ${where} must be an object with topic, partition, offset`,
          { index: i },
        );
      const { topic, partition, offset } = o as {
        topic?: unknown;
        partition?: unknown;
        offset?: unknown;
      };
      if (typeof topic !== "string")
        throw new BrokerError(Errors.invalidRequest, `${action}: ${where}.topic must be a string`, {
          index: i,
          field: "topic",
        });
      if (typeof partition !== "number" || !Number.isInteger(partition) || partition < 0) {
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: ${where}.partition must be a non-negative integer`,
          { index: i, field: "partition" },
        );
      }
      if (typeof offset !== "number" || !Number.isSafeInteger(offset)) {
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: ${where}.offset must be an integer`,
          { index: i, field: "offset" },
        );
      }
      const partitions = this.#topics.partitions(topic);
      const view = partitions[partition];
      if (view === undefined) {
        throw new BrokerError(
          Errors.partitionNotFound,
          `${action}: ${where}: topic ${quote(topic)} has no partition ${partition} (it has ${partitions.length})`,
          { index: i },
        );
      }
      const limit = view.commitLimit === undefined ? view.highWatermark : view.commitLimit;
      if (offset < 0 || (limit !== null && offset > limit)) {
        throw new BrokerError(
          Errors.invalidOffset,
          `${action}: ${where}: offset ${offset} of partition "${partitionName(topic, partition)}" is outside [0, high watermark ${limit ?? "unknown here"}]`,
          { index: i, topic, partition, offset, high_watermark: limit },
        );
      }
      const key = topicPartitionKey(topic, partition);
      if (seen.has(key))
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: ${where}: partition "${partitionName(topic, partition)}" appears twice`,
          { index: i },
        );
      seen.add(key);
      out.push({ topic, partition, offset });
    });
    return out;
  }

  // ---------------------------------------------------------------------------------------------
  // Client-assigned groups (module comment)

  /** See {@link Broker.joinAssignedGroup}. */
  async joinAssigned(request: AssignedJoinRequest): Promise<AssignedJoinResult> {
    const name = validateGroupName(request.group);
    const action = `Cannot join group "${name}"`;
    const sessionTimeoutMs = checkInteger(request.sessionTimeoutMs, {
      name: "session_timeout_ms",
      min: groupSessionTimeoutMsMin,
      max: groupSessionTimeoutMsMax,
      fallback: groupSessionTimeoutMsDefault,
      action,
    });
    const rebalanceTimeoutMs = checkInteger(request.rebalanceTimeoutMs, {
      name: "rebalance_timeout_ms",
      min: 0,
      max: groupSessionTimeoutMsMax,
      fallback: sessionTimeoutMs,
      action,
    });
    if (request.protocolType.length === 0 || request.protocols.length === 0) {
      throw new BrokerError(
        Errors.inconsistentGroupProtocol,
        `${action}: a member must name its protocol type and at least one protocol`,
      );
    }
    const group = this.#getOrCreate(name, action);
    // The lock covers the state change only; the wait for the other members happens outside it.
    // Wrapped in an object: an async function returning the promise itself would hold the lock
    // until the rebalance completes, and no other member could join.
    const waiting = await group.lock.run(async () => {
      this.#checkOpen();
      const joined = this.#assignedJoinLocked(group, request, {
        sessionTimeoutMs,
        rebalanceTimeoutMs: Math.max(rebalanceTimeoutMs, 1),
        action,
      });
      await this.#assignedMaybeComplete(group);
      return { joined };
    });
    return waiting.joined;
  }

  #assignedJoinLocked(
    group: Group,
    request: AssignedJoinRequest,
    p: { sessionTimeoutMs: number; rebalanceTimeoutMs: number; action: string },
  ): Promise<AssignedJoinResult> {
    const data = group.data;
    if (group.assigned === null && data.members.length > 0) {
      throw new BrokerError(
        Errors.inconsistentGroupProtocol,
        `${p.action}: the group has ${plural(data.members.length, "native member")}, which the broker assigns; a Kafka consumer cannot join it`,
      );
    }
    const st: AssignedState = group.assigned ?? {
      phase: "stable",
      protocolType: request.protocolType,
      protocol: "",
      leader: "",
      members: new Map(),
      rebalanceTimer: null,
    };
    const others = [...st.members.values()].filter((m) => m.id !== request.memberId);
    if (others.length > 0) {
      if (st.protocolType !== request.protocolType)
        throw new BrokerError(
          Errors.inconsistentGroupProtocol,
          `${p.action}: protocol type ${quote(request.protocolType)} differs from the group's ${quote(st.protocolType)}`,
        );
      const common = commonProtocols([...others, { protocols: request.protocols }]);
      if (common.length === 0)
        throw new BrokerError(
          Errors.inconsistentGroupProtocol,
          `${p.action}: none of protocols ${quote(request.protocols.map((x) => x.name).join(","))} is supported by every member`,
        );
    }
    let member: AssignedMember | undefined;
    if (request.memberId !== undefined && request.memberId !== "") {
      member = st.members.get(request.memberId);
      if (member === undefined)
        throw new BrokerError(
          Errors.unknownMember,
          `${p.action}: member ${quote(request.memberId)} is not in the group (it left or its session expired): join without a member id`,
        );
      // A retried join replaces the one the client gave up on.
      member.pendingJoin?.reject(
        new BrokerError(Errors.rebalanceInProgress, `${p.action}: the member joined again`),
      );
      member.pendingJoin = null;
    } else {
      if (st.members.size >= groupMembersMax)
        throw new BrokerError(
          Errors.invalidRequest,
          `${p.action}: the group already has ${groupMembersMax} members, the most allowed`,
        );
      const id = this.#newMemberId(group, request.clientId);
      member = {
        id,
        clientId: request.clientId,
        sessionTimeoutMs: p.sessionTimeoutMs,
        rebalanceTimeoutMs: p.rebalanceTimeoutMs,
        protocols: [],
        topics: [],
        assignment: new Uint8Array(0),
        pendingJoin: null,
        pendingSync: null,
      };
      st.members.set(id, member);
    }
    member.sessionTimeoutMs = p.sessionTimeoutMs;
    member.rebalanceTimeoutMs = p.rebalanceTimeoutMs;
    // Copies: the request's bytes are views into a frame the transport reuses.
    member.protocols = request.protocols.map((x) => ({
      name: x.name,
      metadata: x.metadata.slice(),
    }));
    member.topics = [...new Set(request.topics)].sort();
    st.protocolType = request.protocolType;
    group.assigned = st;
    group.timers.get(member.id)?.cancel();
    group.timers.delete(member.id);
    const joined = new Promise<AssignedJoinResult>((resolve, reject) => {
      member.pendingJoin = { resolve, reject };
    });
    if (st.phase !== "preparing") this.#assignedPrepare(group);
    return joined;
  }

  /** Starts a rebalance: waiting syncs are told to rejoin, and the rebalance timer runs. */
  #assignedPrepare(group: Group): void {
    const st = group.assigned;
    if (st === null) return;
    st.phase = "preparing";
    for (const m of st.members.values()) {
      m.pendingSync?.reject(
        new BrokerError(
          Errors.rebalanceInProgress,
          `Cannot sync group "${group.name}": a rebalance started; join again`,
        ),
      );
      m.pendingSync = null;
      if (!group.timers.has(m.id) && m.pendingJoin === null) this.#armAssignedSession(group, m);
    }
    st.rebalanceTimer?.cancel();
    const timeoutMs = Math.max(...[...st.members.values()].map((m) => m.rebalanceTimeoutMs), 1);
    const timer = this.#clock.setTimer(timeoutMs, () => {
      const task = group.lock
        .run(async () => {
          if (this.#closed || group.assigned !== st || st.rebalanceTimer !== timer) return;
          await this.#assignedComplete(group, "rebalance_timeout");
        })
        .finally(() => this.#expiring.delete(task));
      this.#expiring.add(task);
    });
    st.rebalanceTimer = timer;
  }

  /** Completes the rebalance at once if every member has rejoined. */
  async #assignedMaybeComplete(group: Group): Promise<void> {
    const st = group.assigned;
    if (st === null || st.phase !== "preparing") return;
    for (const m of st.members.values()) if (m.pendingJoin === null) return;
    await this.#assignedComplete(group, "all_joined");
  }

  /**
   * Ends the preparing phase: members that did not rejoin are removed, the generation moves on,
   * a protocol and a leader are chosen, and every waiting join is answered. Runs under the lock.
   */
  async #assignedComplete(group: Group, reason: string): Promise<void> {
    const st = group.assigned;
    if (st === null || st.phase !== "preparing") return;
    st.rebalanceTimer?.cancel();
    st.rebalanceTimer = null;
    for (const m of [...st.members.values()]) {
      if (m.pendingJoin !== null) continue;
      st.members.delete(m.id);
      group.timers.get(m.id)?.cancel();
      group.timers.delete(m.id);
      this.#logger.log("info", "group.member_removed", {
        group: group.name,
        member_id: m.id,
        reason: "did not rejoin within the rebalance timeout",
      });
    }
    const members = [...st.members.values()];
    const protocol = members.length === 0 ? "" : chooseProtocol(members);
    if (!st.members.has(st.leader)) st.leader = members[0]?.id ?? "";
    st.protocol = protocol;
    st.phase = members.length === 0 ? "stable" : "completing";
    const data = group.data;
    const next: GroupData = {
      generation: data.generation + 1,
      members: members
        .map((m) => ({
          id: m.id,
          topics: m.topics,
          sessionTimeoutMs: m.sessionTimeoutMs,
          clientId: m.clientId,
        }))
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
      owners: new Map(),
      offsets: data.offsets,
    };
    group.data = next;
    if (members.length === 0) group.assigned = null;
    this.#logger.log("info", "group.rebalanced", {
      group: group.name,
      generation: next.generation,
      members: members.length,
      reason,
      protocol,
      leader: st.leader,
    });
    for (const m of members) {
      const settle = m.pendingJoin!;
      m.pendingJoin = null;
      m.assignment = new Uint8Array(0);
      this.#armAssignedSession(group, m);
      settle.resolve({
        memberId: m.id,
        generation: next.generation,
        protocol,
        leader: st.leader,
        members:
          m.id === st.leader
            ? members.map((x) => ({
                memberId: x.id,
                metadata:
                  x.protocols.find((q) => q.name === protocol)?.metadata ?? new Uint8Array(0),
              }))
            : [],
      });
    }
    try {
      await this.#persist(group, next);
    } catch (err) {
      this.#logger.log("error", "group.persist_failed", {
        group: group.name,
        error: errorMessage(err),
      });
    }
  }

  /** Removes a member (left or expired) and rebalances the rest, or empties the group. Under the lock. */
  async #assignedRemove(group: Group, memberId: string, why: "left" | "expired"): Promise<void> {
    const st = group.assigned;
    const m = st?.members.get(memberId);
    if (st === null || st === undefined || m === undefined) return;
    st.members.delete(memberId);
    group.timers.get(memberId)?.cancel();
    group.timers.delete(memberId);
    const gone = new BrokerError(
      Errors.unknownMember,
      `Cannot complete the request in group "${group.name}": member ${quote(memberId)} ${why === "left" ? "left" : "expired"}`,
    );
    m.pendingJoin?.reject(gone);
    m.pendingSync?.reject(gone);
    group.data = {
      ...group.data,
      members: group.data.members.filter((x) => x.id !== memberId),
      owners: new Map([...group.data.owners].filter(([, owner]) => owner !== memberId)),
    };
    if (st.members.size === 0) {
      st.rebalanceTimer?.cancel();
      group.assigned = null;
      group.data = { ...group.data, generation: group.data.generation + 1, owners: new Map() };
      this.#logger.log("info", "group.rebalanced", {
        group: group.name,
        generation: group.data.generation,
        members: 0,
        reason: why === "left" ? "leave" : "expired",
      });
      try {
        await this.#persist(group, group.data);
      } catch (err) {
        this.#logger.log("error", "group.persist_failed", {
          group: group.name,
          error: errorMessage(err),
        });
      }
      return;
    }
    if (st.phase !== "preparing") this.#assignedPrepare(group);
    await this.#assignedMaybeComplete(group);
  }

  #armAssignedSession(group: Group, member: AssignedMember): void {
    const data = group.data.members.find((m) => m.id === member.id) ?? {
      id: member.id,
      topics: member.topics,
      sessionTimeoutMs: member.sessionTimeoutMs,
      clientId: member.clientId,
    };
    if (!group.data.members.includes(data)) {
      group.data = { ...group.data, members: [...group.data.members, data] };
    }
    data.sessionTimeoutMs = member.sessionTimeoutMs;
    this.#armSession(group, data);
  }

  /** The member of a client-assigned group, checked against the generation. @throws unknown_member, stale_generation. */
  #assignedMember(
    group: Group,
    memberId: string,
    generation: number,
    action: string,
  ): AssignedMember {
    const m = group.assigned?.members.get(memberId);
    if (m === undefined)
      throw new BrokerError(
        Errors.unknownMember,
        `${action}: member ${quote(memberId)} is not in the group (it left or its session expired): join again`,
      );
    if (generation !== group.data.generation)
      throw new BrokerError(
        Errors.staleGeneration,
        `${action}: generation ${generation} is not the group's current generation ${group.data.generation}: join again`,
        { generation: group.data.generation },
      );
    return m;
  }

  /** See {@link Broker.syncAssignedGroup}. */
  async syncAssigned(request: AssignedSyncRequest): Promise<{ assignment: Uint8Array }> {
    const name = validateGroupName(request.group);
    const action = `Cannot sync group "${name}"`;
    const group = this.#existingForMember(name, request.memberId, action);
    // As in joinAssigned, the wait for the leader happens outside the lock.
    const waiting = await group.lock.run(async () => {
      this.#checkOpen();
      const m = this.#assignedMember(group, request.memberId, request.generation, action);
      const st = group.assigned!;
      if (st.phase === "preparing")
        throw new BrokerError(
          Errors.rebalanceInProgress,
          `${action}: a rebalance is in progress: join again`,
        );
      if (st.phase === "stable") return { synced: Promise.resolve({ assignment: m.assignment }) };
      if (m.id !== st.leader) {
        group.timers.get(m.id)?.cancel();
        group.timers.delete(m.id);
        m.pendingSync?.reject(
          new BrokerError(Errors.rebalanceInProgress, `${action}: the member synced again`),
        );
        return {
          synced: new Promise<{ assignment: Uint8Array }>((resolve, reject) => {
            m.pendingSync = { resolve, reject };
          }),
        };
      }
      const owners = new Map<string, string>();
      for (const a of request.assignments) {
        const target = st.members.get(a.memberId);
        if (target === undefined) continue;
        target.assignment = a.assignment.slice();
        for (const tp of a.partitions)
          owners.set(topicPartitionKey(tp.topic, tp.partition), a.memberId);
      }
      group.data = { ...group.data, owners };
      st.phase = "stable";
      for (const x of st.members.values()) {
        if (x.pendingSync === null) continue;
        const settle = x.pendingSync;
        x.pendingSync = null;
        this.#armAssignedSession(group, x);
        settle.resolve({ assignment: x.assignment });
      }
      this.#armAssignedSession(group, m);
      return { synced: Promise.resolve({ assignment: m.assignment }) };
    });
    return waiting.synced;
  }

  /** See {@link Broker.heartbeatAssignedGroup}. */
  async heartbeatAssigned(request: {
    group: string;
    memberId: string;
    generation: number;
  }): Promise<void> {
    const name = validateGroupName(request.group);
    const action = `Cannot heartbeat in group "${name}"`;
    const group = this.#existingForMember(name, request.memberId, action);
    this.#checkOpen();
    const m = this.#assignedMember(group, request.memberId, request.generation, action);
    if (m.pendingJoin === null && m.pendingSync === null) this.#armAssignedSession(group, m);
    if (group.assigned!.phase === "preparing")
      throw new BrokerError(
        Errors.rebalanceInProgress,
        `${action}: a rebalance is in progress: join again`,
      );
  }

  /**
   * Moves a group's generation up to at least `floor` (never down) and keeps it there, even if the
   * group empties and is forgotten: the next rebalance hands out `floor + 1` or more. Members of
   * an older generation get `stale_generation` on commit and are told to rejoin. Cluster mode calls
   * it when a broker becomes a group's coordinator (docs/cluster.md "Consumer groups"), so
   * generations never go backwards when the coordinator moves.
   * @returns the group's generation afterwards. @throws BrokerError invalid_request,
   *   unavailable, storage_error (nothing changed).
   */
  async raiseGeneration(name: string, floor: number): Promise<number> {
    validateGroupName(name);
    if (!Number.isSafeInteger(floor) || floor < 0)
      throw new BrokerError(
        Errors.invalidRequest,
        `Generation floor ${floor} is not an integer >= 0`,
      );
    const action = `Cannot raise the generation of group "${name}"`;
    this.#checkOpen();
    this.#floors.set(name, Math.max(floor, this.#floors.get(name) ?? 0));
    if (!this.#groups.has(name)) return this.#floors.get(name)!; // it starts there when made
    const group = this.#existing(name, action);
    return group.lock.run(async () => {
      if (group.data.generation >= floor) return group.data.generation;
      // The assignment stays: members learn the new generation by rejoining (heartbeat: rejoin).
      const next = { ...group.data, generation: floor };
      if (group.persisted) await this.#commitData(group, next, action);
      else group.data = next;
      this.#logger.log("info", "group.rebalanced", {
        group: name,
        generation: floor,
        members: next.members.length,
        reason: "generation raised by a new coordinator",
      });
      return floor;
    });
  }

  /**
   * Sets a group's committed offsets to `offsets` whatever its members and generation, making the
   * group if it has none here (durable when it returns). Cluster mode calls it when this broker
   * becomes a group's coordinator, with the offsets acknowledged in etcd: members restored from
   * this broker's own file belong to an earlier tenure and their offsets may be older than the
   * last acknowledged commit (docs/cluster.md "Consumer groups"). Offsets are checked as a
   * commit's are, except against the high watermark (a replica may not have caught up yet).
   * @throws BrokerError invalid_request, unavailable, storage_error (nothing changed).
   */
  async adoptOffsets(
    name: string,
    offsets: readonly { topic: string; partition: number; offset: number }[],
  ): Promise<void> {
    validateGroupName(name);
    const action = `Cannot adopt the committed offsets of group "${name}"`;
    for (const o of offsets) {
      if (
        typeof o.topic !== "string" ||
        !Number.isSafeInteger(o.partition) ||
        o.partition < 0 ||
        !Number.isSafeInteger(o.offset) ||
        o.offset < 0
      )
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: offset ${JSON.stringify(o)} needs a topic, a partition >= 0 and an offset >= 0`,
        );
    }
    this.#checkOpen();
    if (offsets.length === 0) return;
    const group = this.#getOrCreate(name, action);
    await group.lock.run(async () => {
      try {
        const nextOffsets = new Map(group.data.offsets);
        for (const o of offsets) nextOffsets.set(topicPartitionKey(o.topic, o.partition), o.offset);
        await this.#commitData(group, { ...group.data, offsets: nextOffsets }, action);
      } catch (err) {
        this.#forgetIfUnpersisted(group);
        throw err;
      }
    });
  }

  /** See {@link Broker.describeGroup}. */
  async describe(name: string): Promise<GroupDescription> {
    validateGroupName(name);
    return this.#describe(this.#existing(name, `Cannot describe group "${name}"`));
  }

  #describe(group: Group): GroupDescription {
    const data = group.data;
    const keys = new Set<string>([...data.offsets.keys(), ...data.owners.keys()]);
    for (const topic of new Set(data.members.flatMap((m) => m.topics))) {
      const count = this.#partitionCount(topic);
      for (let p = 0; p < (count ?? 0); p++) keys.add(topicPartitionKey(topic, p));
    }
    const offsets: GroupOffsetDescription[] = [...keys]
      .map((key) => {
        const { topic, partition } = parseTopicPartitionKey(key);
        let highWatermark: number | null = null;
        try {
          highWatermark = this.#topics.partitions(topic)[partition]?.highWatermark ?? null;
        } catch {
          highWatermark = null;
        }
        const committed = data.offsets.get(key) ?? null;
        const lag =
          committed !== null && highWatermark !== null
            ? Math.max(0, highWatermark - committed)
            : null;
        return {
          topic,
          partition,
          committed,
          highWatermark,
          lag,
          owner: data.owners.get(key) ?? null,
        };
      })
      .sort(compareTp);
    return {
      group: group.name,
      generation: data.generation,
      members: data.members.map((m) => ({
        memberId: m.id,
        topics: [...m.topics],
        sessionTimeoutMs: m.sessionTimeoutMs,
        assignments: this.#assignmentsOf(data, m.id),
      })),
      offsets,
    };
  }

  /** See {@link Broker.listGroups}: every available group that exists on disk, in name order. */
  async list(): Promise<GroupDescription[]> {
    this.#checkOpen();
    return [...this.#groups.values()]
      .filter((g) => g.persisted)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((g) => this.#describe(g));
  }

  /** Groups that could not be loaded, with the reason (for `GET /v1/admin/storage`-style reports). */
  get unavailable(): { group: string; reason: string }[] {
    return [...this.#unavailable].map(([group, reason]) => ({ group, reason }));
  }

  /**
   * Forgets a deleted topic: its committed offsets go, and every group that assigned any of its
   * partitions rebalances. A group left with no members and no offsets (the topic was all it
   * had) goes too, file and all, so groups do not pile up as topics come and go (docs/http-api.md
   * "Consumer groups"). Failures to write are logged (the start-up check drops offsets of
   * topics that no longer exist anyway).
   */
  async forgetTopic(topic: string): Promise<void> {
    for (const group of [...this.#groups.values()]) {
      await group.lock.run(async () => {
        const data = group.data;
        const hasOffsets = [...data.offsets.keys()].some(
          (k) => parseTopicPartitionKey(k).topic === topic,
        );
        const assigned = [...data.owners.keys()].some(
          (k) => parseTopicPartitionKey(k).topic === topic,
        );
        if (!hasOffsets && !assigned) return;
        const offsets = new Map(
          [...data.offsets].filter(([k]) => parseTopicPartitionKey(k).topic !== topic),
        );
        const clientAssigned = group.assigned !== null;
        const next =
          assigned && !clientAssigned
            ? this.#rebalanced({ ...data, offsets }, data.members)
            : { ...data, offsets };
        group.data = next;
        if (clientAssigned && assigned) this.#assignedPrepare(group);
        try {
          if (this.#isEmpty(group)) await this.#remove(group);
          else await this.#persist(group, next);
        } catch (err) {
          this.#logger.log("error", "group.persist_failed", {
            group: group.name,
            error: errorMessage(err),
          });
        }
        if (assigned)
          this.#logger.log("info", "group.rebalanced", {
            group: group.name,
            generation: next.generation,
            members: next.members.length,
            reason: "topic_deleted",
            topic,
          });
      });
    }
  }

  /** Cancels every session timer; later calls throw unavailable. Waits for writes in progress. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const group of this.#groups.values()) {
      for (const t of group.timers.values()) t.cancel();
      group.timers.clear();
      const assigned = group.assigned;
      if (assigned !== null) {
        assigned.rebalanceTimer?.cancel();
        const closing = new BrokerError(
          Errors.unavailable,
          "Cannot complete the rebalance: the broker is shutting down",
        );
        for (const m of assigned.members.values()) {
          m.pendingJoin?.reject(closing);
          m.pendingSync?.reject(closing);
          m.pendingJoin = null;
          m.pendingSync = null;
        }
      }
      await group.lock.run(async () => {});
    }
    await this.settled();
  }
}

function sameTopics(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((t, i) => t === b[i]);
}

function checkTopicList(raw: unknown, action: string): string[] {
  if (
    !Array.isArray(raw) ||
    raw.length === 0 ||
    raw.length > groupTopicsMax ||
    !raw.every((t) => typeof t === "string" && t.length > 0)
  ) {
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: "topics" must be an array of 1 to ${groupTopicsMax} topic names`,
      { field: "topics" },
    );
  }
  return [...new Set(raw as string[])].sort();
}

function checkInteger(
  value: unknown,
  p: { name: string; min: number; max: number; fallback: number; action: string },
): number {
  if (value === undefined) return p.fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < p.min || value > p.max) {
    throw new BrokerError(
      Errors.invalidRequest,
      `${p.action}: "${p.name}" ${quote(value)} must be an integer from ${p.min} to ${p.max}`,
      { field: p.name },
    );
  }
  return value;
}

/**
 * Parses and checks a group file (the shape {@link GroupCoordinator} writes); start-up and
 * `es-broker check` both judge `groups/<group>.json` with it.
 * @throws Error describing the first problem.
 */
export function parseGroupFile(name: string, value: unknown): GroupData {
  const fail = (why: string): never => {
    throw new Error(why);
  };
  if (typeof value !== "object" || value === null || Array.isArray(value))
    fail("not a JSON object");
  const v = value as {
    group?: unknown;
    generation?: unknown;
    members?: unknown;
    partitions?: unknown;
  };
  if (v.group !== name)
    fail(`names group ${JSON.stringify(v.group)}, but its file is "${name}.json"`);
  if (typeof v.generation !== "number" || !Number.isSafeInteger(v.generation) || v.generation < 0)
    fail('"generation" is not a non-negative integer');
  if (!Array.isArray(v.members)) fail('"members" is not an array');
  if (!Array.isArray(v.partitions)) fail('"partitions" is not an array');
  const members: MemberData[] = [];
  for (const m of v.members as unknown[]) {
    const mm = m as { member_id?: unknown; topics?: unknown; session_timeout_ms?: unknown };
    if (typeof mm?.member_id !== "string" || mm.member_id.length === 0)
      fail("a member has no member_id");
    if (!Array.isArray(mm.topics) || !mm.topics.every((t) => typeof t === "string"))
      fail(`member ${JSON.stringify(mm.member_id)} has no topics array`);
    const timeout = mm.session_timeout_ms;
    if (
      typeof timeout !== "number" ||
      !Number.isSafeInteger(timeout) ||
      timeout < groupSessionTimeoutMsMin ||
      timeout > groupSessionTimeoutMsMax
    ) {
      fail(`member ${JSON.stringify(mm.member_id)} has no valid session_timeout_ms`);
    }
    members.push({
      id: mm.member_id as string,
      topics: [...new Set(mm.topics as string[])].sort(),
      sessionTimeoutMs: timeout as number,
    });
  }
  members.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const ids = new Set(members.map((m) => m.id));
  if (ids.size !== members.length) fail("a member_id appears twice");
  const owners = new Map<string, string>();
  const offsets = new Map<string, number>();
  for (const p of v.partitions as unknown[]) {
    const pp = p as { topic?: unknown; partition?: unknown; committed?: unknown; owner?: unknown };
    if (
      typeof pp?.topic !== "string" ||
      typeof pp.partition !== "number" ||
      !Number.isInteger(pp.partition) ||
      pp.partition < 0
    )
      fail("a partition entry has no valid topic and partition");
    const key = topicPartitionKey(pp.topic as string, pp.partition as number);
    const name = partitionName(pp.topic as string, pp.partition as number);
    if (pp.committed !== null && pp.committed !== undefined) {
      if (
        typeof pp.committed !== "number" ||
        !Number.isSafeInteger(pp.committed) ||
        pp.committed < 0
      )
        fail(`partition "${name}" has an invalid committed offset`);
      offsets.set(key, pp.committed as number);
    }
    if (pp.owner !== null && pp.owner !== undefined) {
      if (typeof pp.owner !== "string" || !ids.has(pp.owner))
        fail(`partition "${name}" names an owner that is not a member`);
      owners.set(key, pp.owner as string);
    }
  }
  return { generation: v.generation as number, members, owners, offsets };
}

/** Protocol names every member supports. */
function commonProtocols(members: readonly { protocols: readonly { name: string }[] }[]): string[] {
  const [first, ...rest] = members;
  return first.protocols
    .map((p) => p.name)
    .filter((name) => rest.every((m) => m.protocols.some((p) => p.name === name)));
}

/**
 * The protocol of a completed rebalance, as Kafka chooses it: among those every member supports,
 * each member votes for the first in its own order of preference; most votes wins, ties go to
 * the candidate first in the first member's order.
 */
function chooseProtocol(members: readonly { protocols: readonly { name: string }[] }[]): string {
  const candidates = commonProtocols(members);
  const votes = new Map(candidates.map((c) => [c, 0]));
  for (const m of members) {
    const choice = m.protocols.find((p) => votes.has(p.name));
    if (choice !== undefined) votes.set(choice.name, votes.get(choice.name)! + 1);
  }
  let best = candidates[0] ?? "";
  for (const c of candidates) if (votes.get(c)! > votes.get(best)!) best = c;
  return best;
}
