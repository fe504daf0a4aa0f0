/**
 * Where the mirror sends a partition after no answer in time (src/mirror/route.ts; docs/edge.md
 * "An upstream cluster"): a live leader keeps its partitions, a newer view moves them, silence
 * moves nothing.
 */
import { describe, expect, it } from "vitest";
import { decideAfterNoAnswer, type LeaderView } from "../../src/mirror/route.ts";

const addr = (node: number) => `127.0.0.1:2800${node}`;
const view = (nodeId: number, leader: number, leaderEpoch: number): LeaderView => ({
  nodeId,
  leader,
  leaderEpoch,
  leaderTcp: leader < 0 ? null : addr(leader),
});

describe("decideAfterNoAnswer", () => {
  it("keeps a leader that answers Metadata and still leads: slow, not unreachable", () => {
    // Node 3 leads; node 1 (the --mirror-to broker) is paused and said nothing.
    expect(decideAfterNoAnswer({ address: addr(3), node: 3 }, true, [view(3, 3, 4)])).toEqual({
      action: "slow",
    });
  });

  it("keeps the known leader when only others answer and still name it", () => {
    expect(
      decideAfterNoAnswer({ address: addr(1), node: 1 }, false, [view(3, 1, 2), view(2, 1, 2)]),
    ).toEqual({ action: "unresponsive" });
  });

  it("does not move a partition when no broker answers at all", () => {
    expect(decideAfterNoAnswer({ address: addr(1), node: 1 }, false, [])).toEqual({
      action: "unresponsive",
    });
    expect(decideAfterNoAnswer({ address: addr(1), node: null }, false, [])).toEqual({
      action: "unresponsive",
    });
  });

  it("follows the newest view (highest leader epoch) naming another leader", () => {
    // Node 3 still has the old view (node 1, epoch 2); node 2 was elected (epoch 3).
    expect(
      decideAfterNoAnswer({ address: addr(1), node: 1 }, false, [view(3, 1, 2), view(2, 2, 3)]),
    ).toEqual({ action: "follow", leader: 2, address: addr(2) });
    // The same whatever the order of the answers.
    expect(
      decideAfterNoAnswer({ address: addr(1), node: 1 }, false, [view(2, 2, 3), view(3, 1, 2)]),
    ).toEqual({ action: "follow", leader: 2, address: addr(2) });
  });

  it("follows another leader even when the broker sent to answers (it no longer leads)", () => {
    expect(decideAfterNoAnswer({ address: addr(3), node: 3 }, true, [view(3, 2, 5)])).toEqual({
      action: "follow",
      leader: 2,
      address: addr(2),
    });
  });

  it("ignores views with no leader (an election) and leaders with no address", () => {
    expect(decideAfterNoAnswer({ address: addr(1), node: 1 }, true, [view(3, -1, 9)])).toEqual({
      action: "slow",
    });
    expect(
      decideAfterNoAnswer({ address: addr(1), node: 1 }, false, [
        { nodeId: 3, leader: 2, leaderEpoch: 3, leaderTcp: null },
      ]),
    ).toEqual({ action: "unresponsive" });
  });

  it("at equal epochs prefers the leader's own view", () => {
    expect(
      decideAfterNoAnswer({ address: addr(1), node: 1 }, false, [
        { nodeId: 3, leader: 2, leaderEpoch: 3, leaderTcp: "stale:1" },
        view(2, 2, 3),
      ]),
    ).toEqual({ action: "follow", leader: 2, address: addr(2) });
  });

  it("compares by address when the node id of the broker sent to is unknown", () => {
    expect(decideAfterNoAnswer({ address: addr(1), node: null }, true, [view(1, 1, 2)])).toEqual({
      action: "slow",
    });
    expect(decideAfterNoAnswer({ address: addr(1), node: null }, false, [view(3, 3, 2)])).toEqual({
      action: "follow",
      leader: 3,
      address: addr(3),
    });
  });
});
