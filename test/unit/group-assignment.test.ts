/**
 * The consumer groups' sticky assignment (src/broker/groups.ts, module comment "Assignment
 * strategy: sticky"; docs/http-api.md "Consumer groups"): a first generation dealt in turn,
 * then every join, leave and change of subscriptions keeps each staying member's partitions as
 * far as balance allows, moving only what balance needs.
 */
import { describe, expect, it } from "vitest";
import { assignSticky } from "../../src/broker/groups.ts";

type Members = { id: string; topics: string[] }[];

function show(owners: Map<string, string>): Record<string, string> {
  return Object.fromEntries([...owners].map(([k, v]) => [k.replace("\u0000", "/"), v]));
}

/** Member id → the sorted "topic/partition"s it owns. */
function shares(owners: Map<string, string>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const [k, v] of [...owners].sort()) {
    const list = out.get(v) ?? [];
    list.push(k.replace("\u0000", "/"));
    out.set(v, list);
  }
  return out;
}

function members(ids: string[], topics = ["t"]): Members {
  return ids.map((id) => ({ id, topics }));
}

const ids = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => `m${String(from + i).padStart(2, "0")}`);

/** No member owns two more than a member subscribed to one of its partitions' topics. */
function expectBalanced(owners: Map<string, string>, ms: Members): void {
  const load = new Map(ms.map((m) => [m.id, 0]));
  for (const owner of owners.values()) load.set(owner, load.get(owner)! + 1);
  for (const [key, owner] of owners) {
    const topic = key.split("\u0000")[0];
    for (const m of ms)
      if (m.topics.includes(topic))
        expect(
          load.get(owner)! - load.get(m.id)!,
          `${owner} owns ${load.get(owner)}, ${m.id} (subscribed to ${topic}) ${load.get(m.id)}`,
        ).toBeLessThan(2);
  }
}

describe("sticky assignment", () => {
  it("deals a first generation in turn: partition i to member i mod n", () => {
    const owners = assignSticky(members(["x", "y", "z"], ["a", "b"]), (t) => (t === "a" ? 4 : 3));
    expect(show(owners)).toEqual({
      "a/0": "x",
      "a/1": "y",
      "a/2": "z",
      "a/3": "x",
      "b/0": "y",
      "b/1": "z",
      "b/2": "x",
    });
  });

  it("gives each partition to the least loaded subscriber, leaving out topics that are gone", () => {
    const counts: Record<string, number> = { a: 3, b: 2, gone: 4 };
    const ms = [
      { id: "m1", topics: ["a", "b"] },
      { id: "m2", topics: ["a"] },
      { id: "m3", topics: ["b", "gone"] },
    ];
    const owners = assignSticky(ms, (t) => (t === "gone" ? undefined : counts[t]));
    expect(show(owners)).toEqual({
      "a/0": "m1",
      "a/1": "m2",
      "a/2": "m1",
      "b/0": "m3",
      "b/1": "m3",
    });
    expectBalanced(owners, ms);
  });

  it("on a join, staying members only give partitions, and only what balance needs", () => {
    for (let partitions = 1; partitions <= 24; partitions++)
      for (let n = 1; n <= 6; n++) {
        const before = assignSticky(members(ids(n)), () => partitions);
        const joined = members([...ids(n), "m99"]);
        const after = assignSticky(joined, () => partitions, before);
        const old = shares(before);
        const now = shares(after);
        for (const id of ids(n))
          for (const tp of now.get(id) ?? [])
            expect(old.get(id), `${id} got ${tp} (${partitions} partitions, ${n}+1)`).toContain(tp);
        // What moved is exactly the newcomer's share: floor or ceil of partitions / (n + 1).
        const moved = [...after].filter(([k, v]) => before.get(k) !== v).length;
        expect(moved).toBe(now.get("m99")?.length ?? 0);
        expect(moved).toBeLessThanOrEqual(Math.ceil(partitions / (n + 1)));
        expectBalanced(after, joined);
      }
  });

  it("on a leave, staying members keep every partition and share out only the leaver's", () => {
    for (let partitions = 1; partitions <= 24; partitions++)
      for (let n = 2; n <= 6; n++)
        for (let leaver = 0; leaver < n; leaver++) {
          const all = members(ids(n));
          const before = assignSticky(all, () => partitions);
          const staying = all.filter((_, i) => i !== leaver);
          const after = assignSticky(staying, () => partitions, before);
          for (const [key, owner] of before)
            if (owner !== all[leaver].id) expect(after.get(key)).toBe(owner);
          expectBalanced(after, staying);
        }
  });

  it("keeps partitions through a chain of joins and leaves, moving far fewer than a fresh deal", () => {
    // 12 partitions; members come and go. A fresh (non-sticky) deal of each generation moves
    // partitions between members that stay; the sticky one moves only the leavers' and the
    // joiners' shares.
    let current = ids(3);
    let owners = assignSticky(members(current), () => 12);
    const steps: string[][] = [
      [...current, "m10"],
      current.filter((id) => id !== "m01").concat("m10"),
      ["m00", "m02", "m10", "m11", "m12"],
      ["m02", "m12"],
    ];
    for (const next of steps) {
      const after = assignSticky(members(next), () => 12, owners);
      for (const [key, owner] of after) {
        const before = owners.get(key)!;
        // A partition moves only away from a leaver, or to a joiner, or off an over-loaded member.
        if (before !== owner && next.includes(before) && current.includes(owner))
          expect.fail(`${key} moved from ${before} to ${owner}, both staying`);
      }
      expectBalanced(after, members(next));
      owners = after;
      current = next;
    }
  });

  it("moves a partition off a member that unsubscribed from its topic, and balances mixed subscriptions", () => {
    const before = assignSticky(members(["x", "y"], ["a", "b"]), () => 4);
    const ms = [
      { id: "x", topics: ["a"] },
      { id: "y", topics: ["a", "b"] },
    ];
    const after = assignSticky(ms, () => 4, before);
    for (const [key, owner] of after) if (key.startsWith("b\u0000")) expect(owner).toBe("y");
    // x keeps its partitions of a; y's extra b partitions are balanced by giving x some of a.
    for (const [key, owner] of before)
      if (owner === "x" && key.startsWith("a\u0000")) expect(after.get(key)).toBe("x");
    expectBalanced(after, ms);
    expect(after.size).toBe(8);
  });

  it("ignores previous owners that are not members, and gives the same answer to the same input", () => {
    const previous = new Map([
      ["t\u00000", "ghost"],
      ["t\u00001", "y"],
      ["gone\u00000", "x"],
    ]);
    const ms = members(["x", "y"]);
    const a = assignSticky(ms, () => 3, previous);
    expect(a.get("t\u00001")).toBe("y");
    expect(a.has("gone\u00000")).toBe(false);
    expect(show(assignSticky(ms, () => 3, previous))).toEqual(show(a));
    expectBalanced(a, ms);
    expect(assignSticky([], () => 3, previous).size).toBe(0);
  });
});
