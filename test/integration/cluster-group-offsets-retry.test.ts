/**
 * A group commit's etcd write that etcd failed is sent again, and applies once and in order
 * (docs/cluster.md "Consumer groups";
 * attack13 F2: the SIGKILL of etcd's leader answered commits `unavailable` for ~5 s): cluster/node.ts
 * on an in-memory etcd (test/helpers/fake-etcd.ts) whose transactions fail on demand, as a
 * member that dies after the write was sent (applied or not) or an election would.
 */
import { describe, expect, it } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { EtcdError } from "../../src/cluster/etcd.ts";
import { startTestNode } from "../helpers/cluster-node.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";

/**
 * A node on a fake etcd whose next transactions writing `group_offsets` fail as `failures`
 * says, one entry per transaction: the code thrown, and whether etcd applied it first.
 */
async function nodeWithFailingCommits(
  failures: { code: EtcdError["code"]; applied: boolean | "later" }[],
) {
  const etcd = new FakeEtcd();
  const txn = etcd.txn.bind(etcd);
  let offsetWrites = 0;
  // Copies held back, as by an etcd member paused with them ("later").
  const heldBack: Parameters<FakeEtcd["txn"]>[0][] = [];
  etcd.txn = async (request) => {
    const writesOffsets = request.success.some(
      (op) => "put" in op && op.put.key.includes("/group_offsets/"),
    );
    if (!writesOffsets) return txn(request);
    offsetWrites++;
    const failure = failures.shift();
    if (failure === undefined) return txn(request);
    if (failure.applied === true) await txn(request);
    if (failure.applied === "later") heldBack.push(request);
    throw new EtcdError(failure.code, `Cannot run an etcd transaction: ${failure.code}`);
  };
  const applyHeldBack = async () => {
    for (const request of heldBack.splice(0)) await txn(request);
  };
  const { node, logger } = await startTestNode({ etcd });
  const stored = async (topic: string, partition: number) =>
    (await etcd.get(`${prefix}/group_offsets/g/${topic}/${partition}`))?.value;
  return { node, logger, stored, writes: () => offsetWrites, applyHeldBack };
}

describe("a group commit's etcd write that etcd failed (attack13 F2)", () => {
  it("is sent again after a write that may have been applied, and after an election", async () => {
    const { node, logger, stored, writes } = await nodeWithFailingCommits([
      { code: "indeterminate", applied: true },
      { code: "unavailable", applied: false },
      { code: "indeterminate", applied: false },
    ]);
    const claimed = await node.claimGroupGeneration("g", 1);
    expect(claimed).not.toBeNull();
    const ok = await node.saveGroupOffsets(
      "g",
      [
        { topic: "t", partition: 0, offset: 42 },
        { topic: "t", partition: 1, offset: 7 },
      ],
      claimed!.claim,
    );
    expect(ok).toBe(true);
    expect(writes()).toBe(4);
    expect(await stored("t", 0)).toBe("42");
    expect(await stored("t", 1)).toBe("7");
    const retries = logger.events.filter((e) => e.event === "cluster.group_offsets_retry");
    expect(retries.map((e) => e.fields.retry_in_ms)).toEqual([100, 200, 400]);
    expect(retries.map((e) => e.level)).toEqual(["warn", "warn", "warn"]);
  });

  it("is still refused by a claim another broker took, and an error etcd gave is not retried", async () => {
    const { node, stored, writes } = await nodeWithFailingCommits([
      { code: "invalid_argument", applied: false },
    ]);
    const claimed = await node.claimGroupGeneration("g", 1);
    const refused = await node
      .saveGroupOffsets("g", [{ topic: "t", partition: 0, offset: 5 }], claimed!.claim)
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(BrokerError);
    expect((refused as BrokerError).kind).toBe(Errors.unavailable);
    expect((refused as Error).message).toMatch(
      /Cannot replicate the offsets of group "g": .*invalid_argument/,
    );
    expect(writes()).toBe(1);
    // Another broker claims the group: the retried write's compare fails, nothing is stored.
    await node.claimGroupGeneration("g", 2);
    expect(
      await node.saveGroupOffsets("g", [{ topic: "t", partition: 0, offset: 9 }], claimed!.claim),
    ).toBe(false);
    expect(await stored("t", 0)).toBeUndefined();
  });

  it("a copy etcd applies late, after later commits, changes nothing (attack15 F5)", async () => {
    const { node, stored, applyHeldBack } = await nodeWithFailingCommits([
      { code: "indeterminate", applied: "later" },
    ]);
    const claimed = await node.claimGroupGeneration("g", 1);
    // The first copy of offset 10 is held by a paused member; the resend is applied.
    expect(
      await node.saveGroupOffsets("g", [{ topic: "t", partition: 0, offset: 10 }], claimed!.claim),
    ).toBe(true);
    expect(
      await node.saveGroupOffsets("g", [{ topic: "t", partition: 0, offset: 25 }], claimed!.claim),
    ).toBe(true);
    expect(await stored("t", 0)).toBe("25");
    // The member resumes and applies the held copy: its compare fails, 25 stays.
    await applyHeldBack();
    expect(await stored("t", 0)).toBe("25");
    expect(
      await node.saveGroupOffsets("g", [{ topic: "t", partition: 0, offset: 30 }], claimed!.claim),
    ).toBe(true);
    expect(await stored("t", 0)).toBe("30");
  });

  it("lists every group etcd holds, with its generation and offsets, writing nothing", async () => {
    const { node, writes } = await nodeWithFailingCommits([]);
    const claimed = await node.claimGroupGeneration("g", 3);
    await node.saveGroupOffsets(
      "g",
      [
        { topic: "t", partition: 0, offset: 42 },
        { topic: "t.x", partition: 1, offset: 7 },
      ],
      claimed!.claim,
    );
    await node.claimGroupGeneration("only-gen", 2);
    const before = writes();
    const stored = await node.loadStoredGroups();
    expect([...stored.keys()].sort()).toEqual(["g", "only-gen"]);
    expect(stored.get("g")?.generation).toBe(3);
    const byPartition = [...(stored.get("g")?.offsets ?? [])].sort(
      (a, b) => a.partition - b.partition,
    );
    expect(byPartition).toEqual([
      { topic: "t", partition: 0, offset: 42 },
      { topic: "t.x", partition: 1, offset: 7 },
    ]);
    expect(stored.get("only-gen")).toEqual({ generation: 2, offsets: [] });
    expect(await node.loadGroupGeneration("g")).toBe(3);
    expect(await node.loadGroupGeneration("none")).toBe(0);
    expect(writes()).toBe(before);
    // Reading changed no claim: a write under the claim still succeeds.
    expect(
      await node.saveGroupOffsets("g", [{ topic: "t", partition: 0, offset: 43 }], claimed!.claim),
    ).toBe(true);
  });
});
