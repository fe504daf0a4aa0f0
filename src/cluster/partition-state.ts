/**
 * A replicated partition's state as etcd holds it, and the only ways it may change
 * (docs/cluster.md "Partition state"). Pure: no I/O, no clock. Every transition returns a new
 * state or a refusal, and {@link checkPartitionState} holds before and after each one.
 *
 * Stored at `<prefix>/partitions/<topic>/<partition>` as JSON:
 *
 * ```
 * { "replicas": [1,2,3],        assignment, preferred leader first; fixed after creation
 *   "leader": 1,                node id of the leader, -1 while the partition is offline
 *   "leader_epoch": 4,          bumped by every leader change, going offline included (the fencing token)
 *   "isr": [1,2],               in-sync replicas; always holds the leader while there is one
 *   "elr": [3],                 eligible replicas: left the ISR while it was below min ISR (see below)
 *   "committed_offset": 1000,   a lower bound of the high watermark, written with every ISR or leader change
 *   "min_insync_replicas": 2,
 *   "forgotten": [...] }        optional: replicas a new data directory took out ({@link forgetReplicaData})
 * ```
 *
 * Why `elr` and `committed_offset` (field failures #27c, KIP-966): a record is acknowledged only
 * when every ISR member has fsynced it and the ISR has at least `min_insync_replicas` members. So
 * while the ISR is below that size nothing new is committed, and a replica that left the ISR at
 * that time still holds every committed record: it stays eligible to lead. Once the ISR is back
 * at `min_insync_replicas` members, records are committed again without the ELR members, so
 * every state with an ISR that large has an empty ELR (a stale member elected later would make
 * the others truncate acknowledged records: the Jepsen run of 2026-12-02). And a replica whose
 * log ends below `committed_offset` (its disk lost fsynced data, or it is simply behind) must never
 * lead, or followers would truncate committed records away: the partition stays offline instead.
 *
 * The controller's update after brokers come and go ({@link controllerUpdate}), as a decision
 * table (rows in order; a later row runs only if no earlier one chose a leader):
 *
 * | condition                                                        | result                           |
 * |------------------------------------------------------------------|----------------------------------|
 * | a replica is gone (lease expired, or registered again: restarted) | leaves the ISR; all the gone     |
 * |                                                                  | join the ELR if the ISR is now   |
 * |                                                                  | below min ISR                    |
 * | a replica in `forgotten` is back on the recorded data directory,  | joins the ELR                    |
 * | the partition offline in the recorded epoch                      |                                  |
 * | the leader is alive (or lapsed) and not gone                     | stays leader                     |
 * | a live ISR member not leaving (in replica order)                 | leads: continuously in sync, it  |
 * |                                                                  | holds every committed record     |
 * | the state was already offline, every ELR member is alive (none on | the one with the largest (last   |
 * | a `superseded` directory) and has published its log end since,   | epoch, log end) leads, joins ISR |
 * | the chosen one's ≥ committed_offset and it is not leaving        |                                  |
 * | none of these                                                    | offline (leader -1)              |
 *
 * Replicas found gone in one update leave the ISR in one write: if the ISR ends below min ISR,
 * every one of them joins the ELR (nothing was committed without any of them), not only those
 * whose removal happened to come last. While no ISR member can lead and one is lapsed (its
 * registration missing within the controller's grace), nothing changes: when the grace ends,
 * the ones gone by then leave together.
 *
 * The leader epoch goes up by one exactly when the leader changes, going offline included, or
 * when a gone leader is elected again (docs/cluster.md "Partition state").
 * A restarted replica is always "gone" first: it comes back outside the ISR and must catch up to
 * the leader's log end to rejoin, or (if nobody leads) prove its log end from the ELR.
 */

/** The state of one replicated partition (see the module comment for the stored JSON). */
export interface PartitionState {
  replicas: number[];
  leader: number;
  leader_epoch: number;
  isr: number[];
  elr: number[];
  committed_offset: number;
  min_insync_replicas: number;
  /**
   * Replicas a start on a new data directory took out of the ISR/ELR ({@link forgetReplicaData}),
   * with the data directory they held: if that directory starts again while the partition has
   * stayed offline since, it is eligible again (docs/cluster.md "Replacing a broker's disk,
   * backing up etcd"). Absent: none.
   */
  forgotten?: ForgottenReplica[];
}

/** One entry of {@link PartitionState.forgotten}. */
export interface ForgottenReplica {
  node_id: number;
  /** The data directory id the node registered with before the new directory took its place. */
  data_dir_id: string;
  /**
   * The partition's leader epoch just after the forget: the entry holds only while it is
   * unchanged. For a `superseded` entry: the epoch of the unclean election that replaced it.
   */
  leader_epoch: number;
  /**
   * Set by an unclean election that elected another directory over this one: the partition went
   * on without its records, so this directory's log conflicts with what was acknowledged since
   * (attack16 F4). A registration of the node on it is never elected by the rules (only by an
   * unclean election that accepts the loss); the entry goes once the node is in the ISR on it
   * (it truncated by epoch and caught up) or leads. Absent: false.
   */
  superseded?: true;
  /**
   * For a `superseded` entry: the data directory id of the same node that the unclean election
   * elected instead (it holds what was acknowledged since). If an accepted unclean election
   * later elects this entry's directory after all, that one becomes superseded in turn. Absent:
   * another node led, or its directory was not known.
   */
  replaced_by?: string;
}

/** What the controller knows about one replica when it elects a leader. */
export interface ReplicaView {
  /** Whether the broker's membership lease is live (in the incarnation the controller knows). */
  alive: boolean;
  /**
   * Its registration vanished less than the controller's grace ago (a lease etcd revoked while
   * the broker ran on: docs/cluster.md "Riding out a lost lease"): it keeps its place, leader
   * included, but is never elected. Absent: false.
   */
  lapsed?: boolean;
  /**
   * It has begun to leave the cluster (`leaving/<node id>` names its incarnation: docs/cluster.md
   * "Leaving the cluster"): it keeps its place, leader included, until it departs, but is never
   * elected, as Kafka's controlled shutdown keeps a shutting-down broker from leading. Absent:
   * false.
   */
  leaving?: boolean;
  /**
   * The log end offset the replica published from its current incarnation **after the state
   * being updated was written** (the controller passes undefined for an older publication, or
   * none): only consulted for ELR members, and an unknown log end is never eligible. A later
   * publication covers every committed record the replica holds: nothing is committed while the
   * partition is offline.
   */
  logEndOffset: number | undefined;
  /**
   * The leader epoch of the last record below {@link logEndOffset} (-1: no record), published
   * with it; undefined when not published (a broker of an earlier version). With every ELR
   * member's, the election compares (last epoch, log end), as KIP-966 does.
   */
  lastEpoch?: number;
  /** The data directory id its registration names (for {@link PartitionState.forgotten}). */
  dataDirId?: string;
}

/** The leader to use while a partition has none. */
export const noLeader = -1;

/**
 * The ELR to store beside `isr`: `elr` in replica order, or empty once `isr` has at least
 * `min_insync_replicas` members (records are committed without the ELR from then on).
 */
function elrBeside(
  state: PartitionState,
  isr: readonly number[],
  elr: readonly number[],
): number[] {
  if (isr.length >= state.min_insync_replicas) return [];
  return state.replicas.filter((id) => elr.includes(id) && !isr.includes(id));
}

function isNodeId(n: unknown): n is number {
  return Number.isSafeInteger(n) && (n as number) >= 0;
}

/**
 * Returns the reasons `state` is not a valid partition state, empty when it is. Invariants: the
 * ISR and ELR are disjoint subsets of the replicas without duplicates; the ELR is empty while the
 * ISR has at least `min_insync_replicas` members (module comment); the leader, when there is
 * one, is in the ISR; epochs and offsets are non-negative safe integers.
 */
export function checkPartitionState(state: PartitionState): string[] {
  const problems: string[] = [];
  const { replicas, isr, elr } = state;
  if (!Array.isArray(replicas) || replicas.length === 0 || !replicas.every(isNodeId)) {
    problems.push("replicas must be a non-empty list of node ids");
    return problems;
  }
  if (new Set(replicas).size !== replicas.length) problems.push("replicas has a duplicate");
  for (const [name, list] of [
    ["isr", isr],
    ["elr", elr],
  ] as const) {
    if (!Array.isArray(list) || !list.every(isNodeId)) {
      problems.push(`${name} must be a list of node ids`);
      continue;
    }
    if (new Set(list).size !== list.length) problems.push(`${name} has a duplicate`);
    if (!list.every((id) => replicas.includes(id)))
      problems.push(`${name} holds a node that is not a replica`);
  }
  if (Array.isArray(isr) && Array.isArray(elr) && isr.some((id) => elr.includes(id))) {
    problems.push("isr and elr overlap");
  }
  if (
    Array.isArray(isr) &&
    Array.isArray(elr) &&
    elr.length > 0 &&
    isr.length >= state.min_insync_replicas
  ) {
    problems.push("elr must be empty while the isr has at least min_insync_replicas members");
  }
  if (state.leader !== noLeader) {
    if (!isNodeId(state.leader)) problems.push("leader must be a node id or -1");
    else if (!isr?.includes(state.leader)) problems.push("the leader is not in the isr");
  }
  if (!Number.isSafeInteger(state.leader_epoch) || state.leader_epoch < 0) {
    problems.push("leader_epoch must be a non-negative integer");
  }
  if (!Number.isSafeInteger(state.committed_offset) || state.committed_offset < 0) {
    problems.push("committed_offset must be a non-negative integer");
  }
  if (
    !Number.isSafeInteger(state.min_insync_replicas) ||
    state.min_insync_replicas < 1 ||
    state.min_insync_replicas > replicas.length
  ) {
    problems.push("min_insync_replicas must be between 1 and the number of replicas");
  }
  return problems;
}

/**
 * Parses the stored JSON of a partition state.
 * @throws Error naming the key and what is wrong, if it is not JSON or breaks an invariant.
 */
export function parsePartitionState(key: string, text: string): PartitionState {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error(`Cannot read partition state ${JSON.stringify(key)}: not JSON`);
  }
  const s = raw as PartitionState;
  const state: PartitionState = {
    replicas: s?.replicas,
    leader: s?.leader,
    leader_epoch: s?.leader_epoch,
    isr: s?.isr,
    elr: s?.elr ?? [],
    committed_offset: s?.committed_offset ?? 0,
    min_insync_replicas: s?.min_insync_replicas,
  };
  const forgotten = Array.isArray(s?.forgotten)
    ? s.forgotten
        .filter(
          (f) =>
            isNodeId(f?.node_id) &&
            typeof f.data_dir_id === "string" &&
            Number.isSafeInteger(f.leader_epoch),
        )
        .map((f) => ({
          node_id: f.node_id,
          data_dir_id: f.data_dir_id,
          leader_epoch: f.leader_epoch,
          ...(f.superseded === true ? { superseded: true as const } : {}),
          ...(f.superseded === true && typeof f.replaced_by === "string"
            ? { replaced_by: f.replaced_by }
            : {}),
        }))
    : [];
  if (forgotten.length > 0) state.forgotten = forgotten;
  // A state written before the ELR was cleared at min ISR may name stale members: they are not
  // eligible (module comment), so reading drops them.
  if (Array.isArray(state.isr) && state.isr.length >= state.min_insync_replicas) state.elr = [];
  const problems = checkPartitionState(state);
  if (problems.length > 0) {
    throw new Error(`Cannot read partition state ${JSON.stringify(key)}: ${problems.join("; ")}`);
  }
  return state;
}

/** The JSON stored for `state`, fields in a fixed order. */
export function formatPartitionState(state: PartitionState): string {
  const problems = checkPartitionState(state);
  if (problems.length > 0)
    throw new Error(`Refusing to store an invalid partition state: ${problems.join("; ")}`);
  return JSON.stringify({
    replicas: state.replicas,
    leader: state.leader,
    leader_epoch: state.leader_epoch,
    isr: state.isr,
    elr: state.elr,
    committed_offset: state.committed_offset,
    min_insync_replicas: state.min_insync_replicas,
    ...(state.forgotten === undefined || state.forgotten.length === 0
      ? {}
      : { forgotten: state.forgotten }),
  });
}

/** The state of a new partition: the first replica leads at epoch 0, every replica in sync. */
export function initialPartitionState(
  replicas: number[],
  minInsyncReplicas: number,
): PartitionState {
  const state: PartitionState = {
    replicas: [...replicas],
    leader: replicas[0],
    leader_epoch: 0,
    isr: [...replicas],
    elr: [],
    committed_offset: 0,
    min_insync_replicas: minInsyncReplicas,
  };
  const problems = checkPartitionState(state);
  if (problems.length > 0) throw new Error(`Cannot create a partition: ${problems.join("; ")}`);
  return state;
}

/**
 * The controller's update of one partition after brokers came or went (the decision table in the
 * module comment). `gone` lists replicas whose lease ended or who registered again (restarted);
 * a lapsed replica (its registration missing within the grace) is neither gone nor alive.
 * Returns null when nothing changes, else the new state.
 */
export function controllerUpdate(
  state: PartitionState,
  change: { gone: readonly number[]; view: (nodeId: number) => ReplicaView },
): PartitionState | null {
  // No ISR member can lead now (the leader is lapsed, or gone with no live ISR member to take
  // over) while one is lapsed: its fate is known once the grace ends, and if it is gone too, all
  // must leave in one write, or the ones found gone first leave the ISR while it still looks at
  // min ISR, and are in neither list when the rest are gone (attack13 F1, "Also seen": the first
  // broker back after a whole-cluster outage, holding every record, was not eligible). Until
  // then nothing changes; holding a gone replica in the ISR only holds acknowledgements back.
  const stays = (id: number) => !change.gone.includes(id);
  const canLead = state.isr.some((id) => stays(id) && electable(change.view(id)));
  const waitsForLapsed = state.isr.some((id) => stays(id) && change.view(id).lapsed === true);
  if (!canLead && waitsForLapsed) return null;
  let isr = state.isr;
  let elr = state.elr;
  let leader = state.leader;
  // Once the leader is gone, whoever leads next leads in a new epoch, even the same replica
  // elected again from the ELR (a restarted last ISR member): its new incarnation refuses to lead
  // by a state written before it registered, so an unchanged epoch would leave no working leader.
  let leaderRemoved = false;
  const removed: number[] = [];
  for (const id of change.gone) {
    if (leader === id) {
      leader = noLeader;
      leaderRemoved = true;
    }
    if (!isr.includes(id)) continue;
    isr = isr.filter((x) => x !== id);
    removed.push(id);
  }
  if (leader !== noLeader && !change.view(leader).alive && change.view(leader).lapsed !== true) {
    isr = isr.filter((x) => x !== leader);
    removed.push(leader);
    leader = noLeader;
    leaderRemoved = true;
  }
  // Every replica removed here leaves in this one write: until it, every record was committed
  // on all of them, and after it the ISR is below min ISR, so nothing more is. They all keep
  // every committed record, whatever order they were found gone in (attack13 F1, "Also seen").
  if (removed.length > 0 && isr.length < state.min_insync_replicas) elr = [...elr, ...removed];
  // A forgotten replica's own data directory is back while the partition has stayed offline in
  // the same epoch since the forget: nothing was committed without it, so it holds every
  // committed record its ISR or ELR place said it held (attack15 F2: a start on an empty
  // directory, the disk not mounted, then the real one).
  const returned = (state.forgotten ?? [])
    .filter(
      (f) =>
        f.superseded !== true &&
        state.leader === noLeader &&
        f.leader_epoch === state.leader_epoch &&
        change.view(f.node_id).alive &&
        change.view(f.node_id).lapsed !== true &&
        change.view(f.node_id).dataDirId === f.data_dir_id &&
        !isr.includes(f.node_id) &&
        !elr.includes(f.node_id),
    )
    .map((f) => f.node_id);
  if (returned.length > 0 && isr.length < state.min_insync_replicas) elr = [...elr, ...returned];
  if (leader === noLeader) {
    const fromIsr = state.replicas.find((id) => isr.includes(id) && electable(change.view(id)));
    const fromElr =
      state.leader === noLeader ? electFromElr(state, elr, change.view, state.forgotten) : noLeader;
    leader = fromIsr ?? fromElr;
    if (leader !== noLeader && !isr.includes(leader)) isr = [...isr, leader];
    elr = elr.filter((x) => x !== leader);
  }
  const next: PartitionState = {
    ...state,
    leader,
    leader_epoch:
      leader === state.leader && !leaderRemoved ? state.leader_epoch : state.leader_epoch + 1,
    isr: state.replicas.filter((id) => isr.includes(id)),
    elr: elrBeside(state, isr, elr),
  };
  if (state.forgotten !== undefined) {
    // A superseded entry stays until its node holds the partition's log on that directory again:
    // in the ISR (it truncated by epoch and caught up) or leading.
    const kept = state.forgotten.filter((f) =>
      f.superseded === true
        ? !(next.isr.includes(f.node_id) && change.view(f.node_id).dataDirId === f.data_dir_id)
        : !returned.includes(f.node_id) && f.leader_epoch === next.leader_epoch,
    );
    if (kept.length > 0) next.forgotten = kept;
    else delete next.forgotten;
  }
  const same =
    next.leader === state.leader &&
    next.leader_epoch === state.leader_epoch &&
    next.isr.join() === state.isr.join() &&
    next.elr.join() === state.elr.join() &&
    (next.forgotten ?? []).length === (state.forgotten ?? []).length;
  return same ? null : next;
}

/** Whether a replica may be elected leader: alive, not lapsed, not leaving. */
function electable(v: ReplicaView): boolean {
  return v.alive && v.lapsed !== true && v.leaving !== true;
}

/**
 * The ELR member to elect (docs/cluster.md "Partition state", the election table), or
 * {@link noLeader}: only once **every** member of `elr` is alive and has published a log end
 * after `state` was written, the one with the largest (last epoch, log end) — the largest log
 * end when some member published no last epoch — the first in replica order among equals, if
 * its log end reaches `committed_offset`. `committed_offset` is written at ISR changes, not at
 * every acknowledgement, so a member whose log lacks records acknowledged since (a data
 * directory restored from an older copy, attack13 F1 B) may still pass it; a member that holds
 * every committed record has a log at least as long, so the largest one lacks none of them.
 * Until every member is back the partition stays offline: unavailable, never truncated.
 * The last epoch first: a copy taken while its broker held records that were never acknowledged
 * and were later replaced by others in a newer epoch can be longer than the logs holding those
 * (Raft's "more up-to-date" rule; logs with the same last epoch agree up to the shorter end).
 */
function electFromElr(
  state: PartitionState,
  elr: readonly number[],
  view: (nodeId: number) => ReplicaView,
  forgotten: readonly ForgottenReplica[] = [],
): number {
  const members = state.replicas
    .filter((id) => elr.includes(id))
    .map((id) => ({ id, ...view(id) }));
  if (members.length === 0 || members.some((v) => !v.alive || v.logEndOffset === undefined))
    return noLeader;
  // A member registered on a directory an unclean election superseded holds an older log than
  // its ELR place: its records at the offsets acknowledged since would replace them (attack16 F4).
  if (members.some((v) => supersededDir(forgotten, v.id, v.dataDirId) !== undefined))
    return noLeader;
  const byEpoch = members.every((v) => v.lastEpoch !== undefined);
  let best = members[0];
  for (const v of members.slice(1)) {
    const epochs = byEpoch ? (v.lastEpoch as number) - (best.lastEpoch as number) : 0;
    if (epochs > 0 || (epochs === 0 && (v.logEndOffset as number) > (best.logEndOffset as number)))
      best = v;
  }
  // A leaving member with the longest log is not passed over for a shorter one (that would
  // truncate what only it holds): the partition waits for it to come back.
  if (best.leaving === true) return noLeader;
  return (best.logEndOffset as number) >= state.committed_offset ? best.id : noLeader;
}

/** The `superseded` entry of `forgotten` for node `nodeId` registered on `dataDirId`, if any. */
function supersededDir(
  forgotten: readonly ForgottenReplica[],
  nodeId: number,
  dataDirId: string | undefined,
): ForgottenReplica | undefined {
  return forgotten.find(
    (f) => f.superseded === true && f.node_id === nodeId && f.data_dir_id === dataDirId,
  );
}

/**
 * The leader removes followers from the ISR (they fell behind by more than `replica_lag_ms`, or
 * died). `highWatermark` is the leader's high watermark now; it becomes the recorded
 * `committed_offset`. A removed follower joins the ELR if the ISR it leaves behind is below
 * `min_insync_replicas` (nothing further can be committed without it).
 * @throws Error if `leader` is not the leader, or asks to remove itself.
 */
export function shrinkIsr(
  state: PartitionState,
  change: { leader: number; remove: number[]; highWatermark: number },
): PartitionState {
  if (state.leader !== change.leader)
    throw new Error(`Node ${change.leader} is not the leader of this partition`);
  if (change.remove.includes(change.leader))
    throw new Error("The leader cannot remove itself from the ISR");
  const removed = state.isr.filter((id) => change.remove.includes(id));
  const isr = state.isr.filter((id) => !change.remove.includes(id));
  return {
    ...state,
    isr,
    elr: elrBeside(state, isr, [...state.elr, ...removed]),
    committed_offset: Math.max(state.committed_offset, change.highWatermark),
  };
}

/**
 * The leader adds a follower back to the ISR. Allowed only once the follower has fsynced up to
 * the leader's log end offset (field failures #27a/#27b: a stale high watermark is not enough).
 * An ISR that reaches `min_insync_replicas` members empties the ELR (module comment).
 * @throws Error naming the reason if the follower may not join.
 */
export function expandIsr(
  state: PartitionState,
  change: {
    leader: number;
    add: number;
    followerDurableOffset: number;
    leaderLogEndOffset: number;
    highWatermark: number;
  },
): PartitionState {
  if (state.leader !== change.leader)
    throw new Error(`Node ${change.leader} is not the leader of this partition`);
  if (!state.replicas.includes(change.add))
    throw new Error(`Node ${change.add} is not a replica of this partition`);
  if (state.isr.includes(change.add)) return state;
  if (change.followerDurableOffset < change.leaderLogEndOffset) {
    throw new Error(
      `Node ${change.add} cannot rejoin the ISR: it has fsynced to offset ${change.followerDurableOffset}, the leader's log ends at ${change.leaderLogEndOffset}`,
    );
  }
  const isr = state.replicas.filter((id) => state.isr.includes(id) || id === change.add);
  return {
    ...state,
    isr,
    elr: elrBeside(state, isr, state.elr),
    committed_offset: Math.max(state.committed_offset, change.highWatermark),
  };
}

/**
 * The leader gives up a leadership it cannot take (its storage refused the leader-epoch record
 * or the partition's files, e.g. ENOSPC: docs/cluster.md "Partition state"): no leader, the epoch
 * bumped, and it leaves the ISR (joining the ELR if the ISR is then below min ISR, as a gone
 * replica does), so the controller's next pass elects another replica, or this one again from
 * the ELR later (a retry at the controller's pace). `eligible: false` keeps it out of the ELR too
 * (its log is not the partition's: a local topic of the same name). `gone` lists ISR members the
 * leader knows are gone (not registered, or registered after `state` was written: restarted,
 * perhaps on an older copy of their data): they leave the ISR in the same write and, like the
 * leader, join the ELR if the ISR is then below min ISR (the controller's rule for replicas gone
 * together, docs/cluster.md "Partition state"), so the leader is not left out of both while the
 * ISR looks at min ISR only thanks to them. Returns null if `leader` does not lead.
 */
export function resignLeadership(
  state: PartitionState,
  leader: number,
  options: { eligible?: boolean; gone?: readonly number[] } = {},
): PartitionState | null {
  if (state.leader !== leader || leader === noLeader) return null;
  const gone = state.isr.filter((id) => id !== leader && (options.gone ?? []).includes(id));
  const isr = state.isr.filter((id) => id !== leader && !gone.includes(id));
  const below = isr.length < state.min_insync_replicas;
  const elr =
    below && options.eligible !== false
      ? [...state.elr, leader, ...gone]
      : [...state.elr.filter((id) => id !== leader), ...(below ? gone : [])];
  return {
    ...state,
    leader: noLeader,
    leader_epoch: state.leader_epoch + 1,
    isr,
    elr: elrBeside(state, isr, elr),
  };
}

/**
 * Preferred leader election (docs/cluster.md "Preferred leader election"): moves the leadership
 * back to the preferred replica (`replicas[0]`), with the leader epoch bumped, when it is not the
 * leader, is in the ISR and alive (not lapsed), and the current leader is alive too. Returns null
 * when no move applies.
 *
 * Safe for the reason a failover to an ISR member is: a produce is acknowledged only once every
 * ISR member has fsynced it, so the preferred replica holds every acknowledged record; the epoch
 * bump fences the old leader, whose unacknowledged tail followers truncate by leader epoch.
 * The ISR and ELR do not change; `committed_offset` stays (the new leader starts its high
 * watermark from it, or higher).
 */
export function preferredLeaderMove(
  state: PartitionState,
  view: (nodeId: number) => ReplicaView,
): PartitionState | null {
  const preferred = state.replicas[0];
  if (state.leader === noLeader || state.leader === preferred) return null;
  if (!state.isr.includes(preferred)) return null;
  const p = view(preferred);
  const l = view(state.leader);
  if (!electable(p) || !l.alive || l.lapsed === true) return null;
  return { ...state, leader: preferred, leader_epoch: state.leader_epoch + 1 };
}

/**
 * A replica whose data directory is new (an empty disk given an existing node id:
 * docs/cluster.md "Replacing a broker's disk, backing up etcd") no longer holds what its ISR or
 * ELR place says it holds: it leaves the ISR and the ELR, and, if etcd still names it leader (a
 * leadership of its old disk), the leadership too, in a new epoch. It then rejoins the ISR only by catching up, as
 * any follower. Returns null when `nodeId` is in neither list and does not lead.
 * `oldDataDirId`, the data directory the node held before, is recorded in `forgotten` (replacing
 * an earlier entry of the node) with the epoch after this change: {@link controllerUpdate} puts
 * the node back into the ELR if that directory registers again while the partition is still
 * offline in that epoch.
 */
export function forgetReplicaData(
  state: PartitionState,
  nodeId: number,
  oldDataDirId?: string,
): PartitionState | null {
  if (!state.isr.includes(nodeId) && !state.elr.includes(nodeId) && state.leader !== nodeId)
    return null;
  const isr = state.isr.filter((id) => id !== nodeId);
  const leads = state.leader === nodeId;
  const next: PartitionState = {
    ...state,
    leader: leads ? noLeader : state.leader,
    leader_epoch: leads ? state.leader_epoch + 1 : state.leader_epoch,
    isr,
    elr: elrBeside(
      state,
      isr,
      state.elr.filter((id) => id !== nodeId),
    ),
  };
  const others = (state.forgotten ?? []).filter((f) => f.node_id !== nodeId);
  if (oldDataDirId !== undefined)
    next.forgotten = [
      ...others,
      { node_id: nodeId, data_dir_id: oldDataDirId, leader_epoch: next.leader_epoch },
    ];
  else if (others.length > 0) next.forgotten = others;
  else delete next.forgotten;
  return next;
}

/**
 * The newest leader epoch a replica's log holds, as `view` publishes it, when it is above the
 * state's `leader_epoch`; else null. A log's epochs all come from partition states this key
 * held, and a key's epoch never goes down, so a log ahead of the state means the state went back:
 * etcd was restored from an older snapshot (docs/cluster.md "Partition state older than the
 * replicas' logs").
 */
export function newestEpochAbove(
  state: PartitionState,
  view: (nodeId: number) => ReplicaView,
): number | null {
  let newest = -1;
  for (const id of state.replicas) {
    const v = view(id);
    if (v.alive && v.lapsed !== true && v.lastEpoch !== undefined)
      newest = Math.max(newest, v.lastEpoch);
  }
  return newest > state.leader_epoch ? newest : null;
}

/**
 * The controller's update of a partition state older than its replicas' logs (etcd restored from
 * an older snapshot: docs/cluster.md "Partition state older than the replicas' logs"), or null
 * when `state` is not older ({@link newestEpochAbove}) or nothing changes. It replaces
 * {@link controllerUpdate} for such a state: the ISR and ELR of a restored state are old news (a
 * replica they name may lack records acknowledged since the snapshot), so neither list says who
 * holds every acknowledged record.
 *
 * - Once **every** replica is alive (not lapsed) and has published its (last epoch, log end)
 *   since `state` was written, the one with the largest (last epoch, log end) leads (the first in
 *   replica order among equals), if its log end reaches `committed_offset`: every acknowledged
 *   record is on some replica's log, and the largest log holds every one of them (the rule of an
 *   ELR election, over all replicas). Its epoch is the newest published one plus one, above
 *   every epoch any log holds, so followers truncate by epoch against it as usual. The ISR is the
 *   leader and the replicas that published the same (last epoch, log end); the ELR is empty
 *   (the others may lack acknowledged records).
 * - Until then the partition is written offline, ISR and ELR empty, **with the same epoch**: the
 *   state stays older than the logs, so the next pass comes back here (a bump could bring the
 *   epoch up to the newest log's, and {@link controllerUpdate} would then elect from the
 *   restored lists). Going offline fences the old leader all the same: a broker applies states
 *   by their revision, and leads only by a state naming it.
 */
export function restoredStateUpdate(
  state: PartitionState,
  view: (nodeId: number) => ReplicaView,
): PartitionState | null {
  const newest = newestEpochAbove(state, view);
  if (newest === null) return null;
  const members = state.replicas.map((id) => ({ id, ...view(id) }));
  const ready = members.every(
    (v) =>
      v.alive && v.lapsed !== true && v.logEndOffset !== undefined && v.lastEpoch !== undefined,
  );
  if (ready) {
    let best = members[0];
    for (const v of members.slice(1)) {
      const epochs = (v.lastEpoch as number) - (best.lastEpoch as number);
      if (
        epochs > 0 ||
        (epochs === 0 && (v.logEndOffset as number) > (best.logEndOffset as number))
      )
        best = v;
    }
    if ((best.logEndOffset as number) >= state.committed_offset) {
      const isr = members
        .filter((v) => v.lastEpoch === best.lastEpoch && v.logEndOffset === best.logEndOffset)
        .map((v) => v.id);
      return {
        ...state,
        leader: best.id,
        leader_epoch: newest + 1,
        isr,
        elr: [],
      };
    }
  }
  if (state.leader === noLeader && state.isr.length === 0 && state.elr.length === 0) return null;
  return { ...state, leader: noLeader, isr: [], elr: [] };
}

/** The outcome of {@link uncleanElection}. */
export type UncleanElection =
  | {
      state: PartitionState;
      /** The elected replica's published log end and last epoch. */
      logEndOffset: number;
      lastEpoch: number | undefined;
      /** ISR and ELR members that are not alive: whatever they alone held is lost. */
      missing: number[];
      /** Records below `committed_offset` the new leader lacks (0 when it reaches it). */
      missingCommitted: number;
      /**
       * What is lost, in words: the count above, and what cannot be counted (records only the
       * missing replicas held, every record a forgotten directory held, every record acknowledged
       * since an earlier unclean election on another directory of the new leader's node).
       */
      lost: string;
      /** The uncounted losses of forgotten or superseded directories alone, in words (in `lost` too). */
      lostDirectories: string[];
    }
  | { refused: string };

/**
 * An unclean leader election (docs/cluster.md "Unclean leader election"), asked for by an
 * operator for an offline partition that the rules cannot elect for now: no live ISR member, and
 * no ELR election possible (an ELR member is not alive, or has not published, or runs on a
 * superseded directory). The live replica
 * (not lapsed) with the largest (last epoch, log end) published since `state` was written leads
 * (the first in replica order among equals), whatever its lists say, at an epoch above the
 * state's and every published one; it is the ISR alone, the ELR is empty. Records it lacks are
 * lost: those below `committed_offset` are counted; those acknowledged since (above it) that only
 * the missing replicas held cannot be.
 *
 * A `forgotten` directory (its node now runs on another one: a disk not mounted) holds records
 * no live replica may hold, and the new leader's node running on a `superseded` directory holds
 * an older log than the one acknowledged since that unclean election: both lose every such
 * record, which etcd cannot count (a log end is published on the broker's lease, gone by the
 * time a new directory starts). So the election is refused unless `options.acceptDataLoss`
 * (attack16 F4); when accepted, every `forgotten` entry becomes `superseded` with the new epoch
 * (its directory now conflicts with the partition), except the new leader's own directory's.
 * Returns `{ refused }`, naming why, when the partition has a leader, a live ISR member or an
 * ELR election possible (the rules elect), no live replica has published, or a loss above is not
 * accepted.
 */
export function uncleanElection(
  state: PartitionState,
  view: (nodeId: number) => ReplicaView,
  options: { acceptDataLoss?: boolean } = {},
): UncleanElection {
  if (state.leader !== noLeader)
    return { refused: `it is not offline: node ${state.leader} leads it` };
  const usable = (id: number) => view(id).alive && view(id).lapsed !== true;
  const liveIsr = state.isr.filter(usable);
  if (liveIsr.length > 0)
    return {
      refused: `in-sync replica ${liveIsr.join(", ")} is alive: the controller elects it`,
    };
  const forgotten = state.forgotten ?? [];
  if (state.elr.length > 0 && electFromElr(state, state.elr, view, forgotten) !== noLeader)
    return { refused: "every ELR member is back: the controller elects one of them" };
  const candidates = state.replicas
    .map((id) => ({ id, ...view(id) }))
    .filter((v) => usable(v.id) && v.logEndOffset !== undefined);
  if (candidates.length === 0)
    return {
      refused: `no replica is alive with a log end published since the partition went offline (replicas ${state.replicas.join(", ")})`,
    };
  const byEpoch = candidates.every((v) => v.lastEpoch !== undefined);
  let best = candidates[0];
  for (const v of candidates.slice(1)) {
    const epochs = byEpoch ? (v.lastEpoch as number) - (best.lastEpoch as number) : 0;
    if (epochs > 0 || (epochs === 0 && (v.logEndOffset as number) > (best.logEndOffset as number)))
      best = v;
  }
  let epoch = state.leader_epoch;
  for (const v of candidates) if (v.lastEpoch !== undefined) epoch = Math.max(epoch, v.lastEpoch);
  const end = best.logEndOffset as number;
  const missing = state.replicas.filter(
    (id) => (state.isr.includes(id) || state.elr.includes(id)) && !usable(id),
  );
  const missingCommitted = Math.max(0, state.committed_offset - end);
  // Directories whose records the election gives up, beyond what the lists say.
  const ownDir = (f: ForgottenReplica) => f.node_id === best.id && f.data_dir_id === best.dataDirId;
  // A plain entry of an earlier epoch is stale: the partition had a leader since, elected by the
  // rules, so that directory holds nothing the partition lacks.
  const current = (f: ForgottenReplica) =>
    f.superseded === true || f.leader_epoch === state.leader_epoch;
  const lostDirs = forgotten.filter((f) => f.superseded !== true && current(f) && !ownDir(f));
  const conflicting = forgotten.find((f) => f.superseded === true && ownDir(f));
  const uncounted = [
    ...lostDirs.map(
      (f) =>
        `every record node ${f.node_id}'s forgotten data directory ${f.data_dir_id} held (it held the partition until epoch ${f.leader_epoch}${state.committed_offset > 0 ? `, at least offsets 0 to ${state.committed_offset - 1}` : ""}; its log end was not published where etcd keeps it)`,
    ),
    ...(conflicting === undefined
      ? []
      : [
          `every record acknowledged since epoch ${conflicting.leader_epoch} on node ${best.id}'s other data directory${conflicting.replaced_by === undefined ? "" : ` ${conflicting.replaced_by}`}: node ${best.id} runs on ${conflicting.data_dir_id}, which an unclean election at epoch ${conflicting.leader_epoch} superseded, and its records replace those at the same offsets`,
        ]),
  ];
  if (uncounted.length > 0 && options.acceptDataLoss !== true)
    return {
      refused: `it would lose ${uncounted.join("; and ")}. Start ${
        conflicting === undefined
          ? lostDirs
              .map((f) => `node ${f.node_id} on data directory ${f.data_dir_id}`)
              .join(" and ")
          : `node ${best.id} on the data directory that led since epoch ${conflicting.leader_epoch}${conflicting.replaced_by === undefined ? "" : ` (${conflicting.replaced_by})`}`
      } instead, or accept the loss (--accept-data-loss)`,
    };
  const next: PartitionState = {
    ...state,
    leader: best.id,
    leader_epoch: epoch + 1,
    isr: [best.id],
    elr: [],
    // What the new leader holds is what is committed now: a committed_offset above it would
    // make it refuse to lead (it "lacks committed records").
    committed_offset: Math.min(state.committed_offset, end),
  };
  // The partition goes on without every other recorded directory: each conflicts with it now, and
  // must never be elected by the rules when it comes back (attack16 F4: the real disk, back after
  // the empty directory's unclean election, was elected from the ELR and replaced 71
  // acknowledged records at the same offsets). The new leader's own directory holds its log.
  // Electing a superseded directory after all supersedes the one of its node that led since.
  const superseded: ForgottenReplica[] = [
    ...forgotten.filter((f) => current(f) && !ownDir(f)),
    ...(conflicting?.replaced_by === undefined
      ? []
      : [{ node_id: best.id, data_dir_id: conflicting.replaced_by, leader_epoch: epoch + 1 }]),
  ]
    .filter(
      (f, i, all) =>
        all.findIndex((g) => g.node_id === f.node_id && g.data_dir_id === f.data_dir_id) === i,
    )
    .map((f) => ({
      node_id: f.node_id,
      data_dir_id: f.data_dir_id,
      leader_epoch: epoch + 1,
      superseded: true as const,
      ...(f.node_id === best.id && best.dataDirId !== undefined
        ? { replaced_by: best.dataDirId }
        : {}),
    }));
  if (superseded.length > 0) next.forgotten = superseded;
  else delete next.forgotten;
  const lost = [
    `${missingCommitted} records below committed_offset ${state.committed_offset} the new leader lacks`,
    ...(missing.length === 0
      ? []
      : [
          `any record acknowledged after committed_offset was written that only node ${missing.join(", ")} held; when those come back, they truncate to the new leader`,
        ]),
    ...uncounted,
  ].join(", and ");
  return {
    state: next,
    logEndOffset: end,
    lastEpoch: best.lastEpoch,
    missing,
    missingCommitted,
    lost,
    lostDirectories: uncounted,
  };
}

/**
 * Why `state` is offline and what would bring it back, in words (attack15b F3: `cluster status`
 * and the controller's `cluster.partition_offline` warn), or null when it has a leader. `live`
 * says whether a node is registered, `dataDirOf` the data directory id its registration names
 * (undefined: not known). `where` names the partition in the remedy.
 * A `forgotten` entry comes first (attack16 F4): its directory holds the records, so the remedy
 * is to start its node on it, and an unclean election loses every record it held; a node
 * registered on a `superseded` directory waits for the directory that led since.
 */
export function offlineReason(
  state: Pick<PartitionState, "leader" | "isr" | "elr" | "replicas"> &
    Partial<Pick<PartitionState, "leader_epoch" | "forgotten">>,
  live: (nodeId: number) => boolean,
  where: { topic: string; partition: number },
  dataDirOf: (nodeId: number) => string | undefined = () => undefined,
): string | null {
  if (state.leader !== noLeader) return null;
  const nodes = (ids: number[]) => `node${ids.length === 1 ? "" : "s"} ${ids.join(", ")}`;
  const unclean = `es-broker cluster elect --unclean --topic ${where.topic} --partition ${where.partition}`;
  const forgotten = state.forgotten ?? [];
  const away = forgotten.filter(
    (f) =>
      f.superseded !== true &&
      f.leader_epoch === state.leader_epoch &&
      dataDirOf(f.node_id) !== f.data_dir_id,
  );
  if (away.length > 0)
    return away
      .map(
        (f) =>
          `node ${f.node_id} ${live(f.node_id) ? "runs on another data directory than" : "is not running on"} the one that held this partition (forgotten directory ${f.data_dir_id}): start it on that data directory; an unclean election now loses every record that directory held (${unclean} --accept-data-loss)`,
      )
      .join("; ");
  const stale = forgotten.filter(
    (f) => f.superseded === true && live(f.node_id) && dataDirOf(f.node_id) === f.data_dir_id,
  );
  if (stale.length > 0)
    return stale
      .map(
        (f) =>
          `node ${f.node_id} runs on data directory ${f.data_dir_id}, which an unclean election at epoch ${f.leader_epoch} superseded (its records would replace those acknowledged since at the same offsets): start it on the data directory that led since${f.replaced_by === undefined ? "" : ` (${f.replaced_by})`}; an unclean election now loses every record acknowledged since epoch ${f.leader_epoch} (${unclean} --accept-data-loss)`,
      )
      .join("; ");
  const missingIsr = state.isr.filter((id) => !live(id));
  if (state.isr.length > 0 && missingIsr.length === state.isr.length)
    return `waiting for ${nodes(missingIsr)} of the ISR`;
  if (state.elr.length > 0) {
    const missing = state.elr.filter((id) => !live(id));
    if (missing.length > 0)
      return `waiting for ${nodes(missing)} of the ELR: start them; a node whose disk is lost, started on an empty data directory, leaves the ELR; or, losing what only they hold: ${unclean}`;
    return "every ELR member is back: waiting for their log ends (none reaching committed_offset keeps it offline)";
  }
  if (state.isr.length > 0) return "in-sync replicas back: an election is due";
  const liveReplicas = state.replicas.filter(live);
  if (liveReplicas.length === 0) return `no live replica: start ${nodes(state.replicas)}`;
  return `no eligible replica (unclean election needed, losing what the others held: ${unclean}; or, after an etcd restore, waiting for ${liveReplicas.length === state.replicas.length ? "their log ends" : nodes(state.replicas.filter((id) => !live(id)))})`;
}
