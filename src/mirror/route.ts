/**
 * Where the mirror sends a partition's batch next after the broker it went to gave no answer in
 * time or lost the connection (docs/edge.md "An upstream cluster"): the pure part of the decision,
 * from what the brokers the mirror knows said when asked who leads the partition (Metadata
 * version 1). A broker that does not answer is left out; its silence never moves a partition.
 */

/** One broker's view of an upstream partition's leader, from its Metadata version 1 answer. */
export interface LeaderView {
  /** Node id of the broker that answered. */
  nodeId: number;
  /** Node id of the partition's leader; −1 while it has none (an election). */
  leader: number;
  /** The leader epoch of that view: the higher, the newer. */
  leaderEpoch: number;
  /** `host:port` of the leader's TCP listener as the answer's broker list gives it, or null. */
  leaderTcp: string | null;
}

/** The broker a batch went to: its `host:port`, and its node id when known. */
export interface SentTo {
  address: string;
  node: number | null;
}

/**
 * What to do after no answer in time (or a lost connection) from `sentTo`:
 * - `follow`: a newer or other view names another leader: send there from now on.
 * - `slow`: the broker sent to answered Metadata and no one names another leader: it is alive and
 *   leads, the produce is waiting (for its ISR's acknowledgements, say) — resend to it, the answer
 *   comes as a duplicate once stored. Not an unreachable upstream.
 * - `unresponsive`: it answered nothing and no one names another leader: keep the route and retry
 *   it with backoff (its leadership moves, if at all, when its lease expires; the next ask sees it).
 */
export type NoAnswerDecision =
  | { action: "follow"; leader: number; address: string }
  | { action: "slow" }
  | { action: "unresponsive" };

/**
 * Decides after no answer from `sentTo` (see {@link NoAnswerDecision}). `sentToAnswered` says
 * whether that broker answered the Metadata request; `views` are the views of every broker that
 * answered, in any order. The view with the highest leader epoch naming a leader wins (ties: the
 * leader's own view); a view naming `sentTo` (by node id, else by address) is no move.
 */
export function decideAfterNoAnswer(
  sentTo: SentTo,
  sentToAnswered: boolean,
  views: readonly LeaderView[],
): NoAnswerDecision {
  let best: LeaderView | null = null;
  for (const v of views) {
    if (v.leader < 0) continue;
    if (
      best === null ||
      v.leaderEpoch > best.leaderEpoch ||
      (v.leaderEpoch === best.leaderEpoch && v.nodeId === v.leader && best.nodeId !== best.leader)
    )
      best = v;
  }
  if (best !== null && best.leaderTcp !== null) {
    const same =
      sentTo.node !== null ? best.leader === sentTo.node : best.leaderTcp === sentTo.address;
    if (!same) return { action: "follow", leader: best.leader, address: best.leaderTcp };
  }
  return sentToAnswered ? { action: "slow" } : { action: "unresponsive" };
}
