/**
 * Consumer groups through LocalBroker on the simulated disk, driven by a ManualClock: joins,
 * leaves and session expiries rebalancing, generation and ownership fencing, commit validation,
 * lag, offsets after a restart and after a power loss, clamping and unreadable files at start.
 */
import { describe, expect, it } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { abandonTestBroker, openTestBroker } from "../helpers/broker.ts";

async function start(fs: MemoryFileSystem, clock = new ManualClock(), logger = new MemoryLogger()) {
  const { broker } = await openTestBroker({ fs, clock, logger, cleanupIntervalMs: 0 });
  return { broker, clock, logger };
}

async function fill(broker: LocalBroker, topic: string, partition: number, count: number) {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) b.add(null, utf8(`r${i}`));
  await broker.produce({ topic, partition, batch: b.build() });
}

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof BrokerError) return err.kind.code;
    throw err;
  }
  return "ok";
}

function tps(list: { topic: string; partition: number }[]): string[] {
  return list.map((a) => `${a.topic}/${a.partition}`);
}

describe("consumer groups", () => {
  it("rebalances on join, leave and session expiry, bumping the generation each time", async () => {
    const { broker, clock } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 4 });
    const a = await broker.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 10_000 });
    expect(a.generation).toBe(1);
    expect(tps(a.assignments)).toEqual(["t/0", "t/1", "t/2", "t/3"]);
    const b = await broker.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 10_000 });
    expect(b.generation).toBe(2);
    // a learns of the rebalance through its heartbeat, with its new share.
    const hb = await broker.heartbeat({
      group: "g",
      memberId: a.memberId,
      generation: a.generation,
    });
    expect(hb.rejoin).toBe(true);
    expect(hb.generation).toBe(2);
    const shares = [tps(hb.assignments), tps(b.assignments)];
    expect(shares.flat().sort()).toEqual(["t/0", "t/1", "t/2", "t/3"]);
    expect(shares.map((s) => s.length)).toEqual([2, 2]);
    // Rejoining with its id and the same topics does not rebalance again.
    const again = await broker.joinGroup({
      group: "g",
      topics: ["t"],
      sessionTimeoutMs: 10_000,
      memberId: a.memberId,
    });
    expect(again.generation).toBe(2);
    expect(tps(again.assignments)).toEqual(shares[0]);
    // b leaves: a owns everything in generation 3.
    await broker.leaveGroup({ group: "g", memberId: b.memberId });
    let d = await broker.describeGroup("g");
    expect(d.generation).toBe(3);
    expect(d.members.map((m) => m.memberId)).toEqual([a.memberId]);
    expect(tps(d.members[0].assignments)).toEqual(["t/0", "t/1", "t/2", "t/3"]);
    // c joins; then a stops heartbeating while c keeps its session alive.
    const c = await broker.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 10_000 });
    expect(c.generation).toBe(4);
    for (let i = 0; i < 4; i++) {
      clock.advance(4_000);
      await broker.heartbeat({ group: "g", memberId: c.memberId });
    }
    await broker.groups.settled();
    d = await broker.describeGroup("g");
    expect(d.generation).toBe(5);
    expect(d.members.map((m) => m.memberId)).toEqual([c.memberId]);
    expect(d.offsets.every((o) => o.owner === c.memberId)).toBe(true);
    expect(await code(broker.heartbeat({ group: "g", memberId: a.memberId }))).toBe(
      "unknown_member",
    );
    // c's heartbeat reports no rejoin while its generation is current.
    expect(
      (await broker.heartbeat({ group: "g", memberId: c.memberId, generation: 5 })).rejoin,
    ).toBe(false);
  });

  it("fences commits from a stale generation and from members that do not own the partition", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 2 });
    await fill(broker, "t", 0, 5);
    await fill(broker, "t", 1, 5);
    const a = await broker.joinGroup({ group: "g", topics: ["t"] });
    const b = await broker.joinGroup({ group: "g", topics: ["t"] });
    const hbA = await broker.heartbeat({
      group: "g",
      memberId: a.memberId,
      generation: a.generation,
    });
    const ownA = hbA.assignments[0];
    const ownB = b.assignments[0];
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: a.generation,
          offsets: [{ ...ownA, offset: 1 }],
        }),
      ),
    ).toBe("stale_generation");
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: b.generation,
          offsets: [{ ...ownB, offset: 1 }],
        }),
      ),
    ).toBe("not_partition_owner");
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: "nobody",
          generation: b.generation,
          offsets: [{ ...ownA, offset: 1 }],
        }),
      ),
    ).toBe("unknown_member");
    expect(
      await code(broker.commitOffsets({ group: "g", offsets: [{ ...ownA, offset: 1 }] })),
    ).toBe("unknown_member");
    // One bad partition rejects the whole commit.
    expect(
      await code(
        broker.commitOffsets({
          group: "g",
          memberId: a.memberId,
          generation: b.generation,
          offsets: [
            { ...ownA, offset: 2 },
            { ...ownB, offset: 2 },
          ],
        }),
      ),
    ).toBe("not_partition_owner");
    expect((await broker.describeGroup("g")).offsets.every((o) => o.committed === null)).toBe(true);
    await broker.commitOffsets({
      group: "g",
      memberId: a.memberId,
      generation: b.generation,
      offsets: [{ ...ownA, offset: 3 }],
    });
    const row = (await broker.describeGroup("g")).offsets.find(
      (o) => o.partition === ownA.partition,
    )!;
    expect(row).toEqual({
      topic: "t",
      partition: ownA.partition,
      committed: 3,
      highWatermark: 5,
      lag: 2,
      owner: a.memberId,
    });
  });

  it("raises a generation to a floor, never lowers it, and keeps the floor for a group made later", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    await fill(broker, "t", 0, 3);
    const a = await broker.joinGroup({ group: "g", topics: ["t"] });
    expect(a.generation).toBe(1);
    expect(await broker.raiseGroupGeneration("g", 40)).toBe(40);
    expect(await broker.raiseGroupGeneration("g", 7)).toBe(40); // never down
    expect((await broker.describeGroup("g")).generation).toBe(40);
    const commit = (generation: number) =>
      broker.commitOffsets({
        group: "g",
        memberId: a.memberId,
        generation,
        offsets: [{ topic: "t", partition: 0, offset: 1 }],
      });
    expect(await code(commit(a.generation))).toBe("stale_generation");
    const again = await broker.joinGroup({ group: "g", topics: ["t"], memberId: a.memberId });
    expect(again.generation).toBe(40);
    expect(await code(commit(again.generation))).toBe("ok");
    // A group this broker does not have yet starts above the floor when it is made.
    expect(await broker.raiseGroupGeneration("later", 9)).toBe(9);
    expect(await code(broker.describeGroup("later"))).toBe("group_not_found");
    expect((await broker.joinGroup({ group: "later", topics: ["t"] })).generation).toBe(10);
    expect(await code(broker.raiseGroupGeneration("g", -1))).toBe("invalid_request");
  });

  it("counts members and partitions in the right number in its messages", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    await broker.joinGroup({ group: "g", topics: ["t"] });
    await expect(
      broker.commitOffsets({ group: "g", offsets: [{ topic: "t", partition: 0, offset: 0 }] }),
    ).rejects.toThrow(/: the group has 1 member, so a commit must name/);
    await expect(broker.fetch({ topic: "t", partition: 3, offset: 0 })).rejects.toThrow(
      /: it has 1 partition$/,
    );
  });

  it("validates commits: not above the high watermark, not negative, existing partitions, each partition once", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    await fill(broker, "t", 0, 3);
    expect(
      await code(
        broker.commitOffsets({ group: "solo", offsets: [{ topic: "t", partition: 0, offset: 4 }] }),
      ),
    ).toBe("invalid_offset");
    expect(
      await code(
        broker.commitOffsets({
          group: "solo",
          offsets: [{ topic: "t", partition: 0, offset: -1 }],
        }),
      ),
    ).toBe("invalid_offset");
    expect(
      await code(
        broker.commitOffsets({
          group: "solo",
          offsets: [{ topic: "t", partition: 0, offset: 1.5 }],
        }),
      ),
    ).toBe("invalid_request");
    expect(
      await code(
        broker.commitOffsets({ group: "solo", offsets: [{ topic: "t", partition: 1, offset: 0 }] }),
      ),
    ).toBe("partition_not_found");
    expect(
      await code(
        broker.commitOffsets({
          group: "solo",
          offsets: [{ topic: "nope", partition: 0, offset: 0 }],
        }),
      ),
    ).toBe("topic_not_found");
    expect(await code(broker.commitOffsets({ group: "solo", offsets: [] }))).toBe(
      "invalid_request",
    );
    expect(
      await code(
        broker.commitOffsets({
          group: "bad/name",
          offsets: [{ topic: "t", partition: 0, offset: 0 }],
        }),
      ),
    ).toBe("invalid_request");
    const twice = [
      { topic: "t", partition: 0, offset: 1 },
      { topic: "t", partition: 0, offset: 2 },
    ];
    expect(await code(broker.commitOffsets({ group: "solo", offsets: twice }))).toBe(
      "invalid_request",
    );
    // Nothing was created by the refused commits.
    expect(await code(broker.describeGroup("solo"))).toBe("group_not_found");
    // The high watermark itself is a valid commit (everything consumed).
    await broker.commitOffsets({
      group: "solo",
      offsets: [{ topic: "t", partition: 0, offset: 3 }],
    });
    expect((await broker.describeGroup("solo")).offsets).toEqual([
      { topic: "t", partition: 0, committed: 3, highWatermark: 3, lag: 0, owner: null },
    ]);
    expect((await broker.listGroups()).map((g) => g.group)).toEqual(["solo"]);
  });

  it("refuses joins for topics that do not exist and bad session timeouts", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "t", partitions: 1 });
    expect(await code(broker.joinGroup({ group: "g", topics: ["missing"] }))).toBe(
      "topic_not_found",
    );
    expect(await code(broker.joinGroup({ group: "g", topics: [] }))).toBe("invalid_request");
    expect(await code(broker.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 5 }))).toBe(
      "invalid_request",
    );
    expect(await code(broker.joinGroup({ group: "g", topics: ["t"], memberId: "ghost" }))).toBe(
      "unknown_member",
    );
    expect(await code(broker.leaveGroup({ group: "g", memberId: "ghost" }))).toBe(
      "group_not_found",
    );
  });

  it("keeps committed offsets, members and generation across a restart, and across a power loss", async () => {
    for (const crash of [false, true]) {
      const fs = new MemoryFileSystem({ seed: 9 });
      const first = await start(fs);
      await first.broker.createTopic({ name: "t", partitions: 2 });
      await fill(first.broker, "t", 0, 10);
      await fill(first.broker, "t", 1, 10);
      const m = await first.broker.joinGroup({
        group: "g",
        topics: ["t"],
        sessionTimeoutMs: 60_000,
      });
      await first.broker.commitOffsets({
        group: "g",
        memberId: m.memberId,
        generation: m.generation,
        offsets: [
          { topic: "t", partition: 0, offset: 7 },
          { topic: "t", partition: 1, offset: 4 },
        ],
      });
      await first.broker.commitOffsets({
        group: "standalone",
        offsets: [{ topic: "t", partition: 1, offset: 9 }],
      });
      if (crash) {
        fs.crash({ mode: "dropAll" });
        abandonTestBroker(first.broker);
      } else {
        await first.broker.close();
        abandonTestBroker(first.broker);
      }
      const { broker } = await start(fs);
      const d = await broker.describeGroup("g");
      expect(d.generation, `crash=${crash}`).toBe(m.generation);
      expect(d.members.map((x) => x.memberId)).toEqual([m.memberId]);
      expect(d.offsets.map((o) => [o.partition, o.committed, o.lag, o.owner])).toEqual([
        [0, 7, 3, m.memberId],
        [1, 4, 6, m.memberId],
      ]);
      expect((await broker.describeGroup("standalone")).offsets[0].committed).toBe(9);
      // The member kept its place: it commits in the same generation after the restart.
      await broker.commitOffsets({
        group: "g",
        memberId: m.memberId,
        generation: m.generation,
        offsets: [{ topic: "t", partition: 0, offset: 8 }],
      });
      await broker.close();
      abandonTestBroker(broker);
    }
  });

  it("names each partition's owner in the group file, written atomically", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 2 });
    const m = await broker.joinGroup({ group: "g", topics: ["t"] });
    const file = JSON.parse(fromUtf8(fs.readFileSync("/data/groups/g.json")));
    expect(file).toEqual({
      group: "g",
      generation: 1,
      members: [{ member_id: m.memberId, topics: ["t"], session_timeout_ms: 30_000 }],
      partitions: [
        { topic: "t", partition: 0, committed: null, owner: m.memberId },
        { topic: "t", partition: 1, committed: null, owner: m.memberId },
      ],
    });
    expect(fs.listTree("/data/groups").filter((p) => p.includes(".tmp-"))).toEqual([]);
  });

  it("leaves a group unchanged when its file cannot be written, and reports storage_error", async () => {
    const fs = new MemoryFileSystem();
    const { broker } = await start(fs);
    await broker.createTopic({ name: "t", partitions: 1 });
    await fill(broker, "t", 0, 4);
    await broker.commitOffsets({ group: "g", offsets: [{ topic: "t", partition: 0, offset: 1 }] });
    // Twice: the second try, in the space of the disk reserve it gave up, fails too.
    fs.faults.failNext({ op: "rename", path: /groups/, code: "ENOSPC", times: 2 });
    expect(
      await code(
        broker.commitOffsets({ group: "g", offsets: [{ topic: "t", partition: 0, offset: 3 }] }),
      ),
    ).toBe("storage_error");
    expect((await broker.describeGroup("g")).offsets[0].committed).toBe(1);
  });

  it("clamps a committed offset above the log end at start and reports it; drops offsets of deleted topics", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await fill(first.broker, "t", 0, 5);
    await first.broker.close();
    abandonTestBroker(first.broker);
    fs.writeFileSync(
      "/data/groups/g.json",
      utf8(
        JSON.stringify({
          group: "g",
          generation: 2,
          members: [],
          partitions: [
            { topic: "t", partition: 0, committed: 9, owner: null },
            { topic: "gone", partition: 0, committed: 3, owner: null },
          ],
        }),
      ),
    );
    const { broker, logger } = await start(fs);
    expect(logger.named("group.offset_clamped")).toEqual([
      { group: "g", topic: "t", partition: 0, committed: 9, log_end_offset: 5 },
    ]);
    expect(logger.named("group.offset_dropped")).toEqual([
      expect.objectContaining({ group: "g", topic: "gone" }),
    ]);
    expect((await broker.describeGroup("g")).offsets).toEqual([
      { topic: "t", partition: 0, committed: 5, highWatermark: 5, lag: 0, owner: null },
    ]);
    // The clamped value is what the file holds now.
    expect(JSON.parse(fromUtf8(fs.readFileSync("/data/groups/g.json"))).partitions).toEqual([
      { topic: "t", partition: 0, committed: 5, owner: null },
    ]);
  });

  it("makes only that group unavailable when its file is empty or unparseable", async () => {
    const fs = new MemoryFileSystem();
    const first = await start(fs);
    await first.broker.createTopic({ name: "t", partitions: 1 });
    await first.broker.commitOffsets({
      group: "good",
      offsets: [{ topic: "t", partition: 0, offset: 0 }],
    });
    await first.broker.close();
    abandonTestBroker(first.broker);
    fs.writeFileSync("/data/groups/broken.json", new Uint8Array(0));
    fs.writeFileSync("/data/groups/garbled.json", utf8('{"group":'));
    const { broker, logger } = await start(fs);
    expect(
      logger
        .named("recovery.group_unavailable")
        .map((f) => f.group)
        .sort(),
    ).toEqual(["broken", "garbled"]);
    expect(await code(broker.describeGroup("broken"))).toBe("unavailable");
    expect(
      await code(
        broker.commitOffsets({
          group: "garbled",
          offsets: [{ topic: "t", partition: 0, offset: 0 }],
        }),
      ),
    ).toBe("unavailable");
    expect(await code(broker.joinGroup({ group: "broken", topics: ["t"] }))).toBe("unavailable");
    expect((await broker.describeGroup("good")).offsets[0].committed).toBe(0);
    expect(fs.readFileSync("/data/groups/broken.json").length).toBe(0); // never reset
  });

  it("commits atomically at every step: a failure at any mutation of a commit, then a power loss, leaves the old offsets or the new ones, and an acknowledged commit always survives", async () => {
    const setup = async (fs: MemoryFileSystem) => {
      const { broker } = await start(fs);
      await broker.createTopic({ name: "t", partitions: 2 });
      await fill(broker, "t", 0, 9);
      await fill(broker, "t", 1, 9);
      const m = await broker.joinGroup({ group: "g", topics: ["t"] });
      await broker.commitOffsets({
        group: "g",
        memberId: m.memberId,
        generation: m.generation,
        offsets: [
          { topic: "t", partition: 0, offset: 1 },
          { topic: "t", partition: 1, offset: 2 },
        ],
      });
      return { broker, m };
    };
    const commit = (broker: LocalBroker, m: { memberId: string; generation: number }) =>
      broker.commitOffsets({
        group: "g",
        memberId: m.memberId,
        generation: m.generation,
        offsets: [
          { topic: "t", partition: 0, offset: 7 },
          { topic: "t", partition: 1, offset: 8 },
        ],
      });
    // Count the commit's mutations once.
    const probe = new MemoryFileSystem();
    const base = await setup(probe);
    const before = probe.mutationCount;
    await commit(base.broker, base.m);
    const mutations = probe.mutationCount - before;
    expect(mutations).toBeGreaterThanOrEqual(5); // create, write, fsync, rename, directory fsync
    for (let n = 1; n <= mutations; n++) {
      for (const mode of ["random", "dropAll", "keepAll"] as const) {
        const fs = new MemoryFileSystem({ seed: n });
        const { broker, m } = await setup(fs);
        fs.faults.failNth({ n, code: "EIO" });
        const acknowledged = await commit(broker, m).then(
          () => true,
          () => false,
        );
        fs.crash({ mode, seed: n * 7 });
        abandonTestBroker(broker);
        const { broker: again } = await start(fs);
        const committed = (await again.describeGroup("g")).offsets.map((o) => o.committed);
        const label = `fault at mutation ${n} of ${mutations}, ${mode} crash`;
        if (acknowledged) expect(committed, label).toEqual([7, 8]);
        else
          expect(
            [
              [1, 2],
              [7, 8],
            ],
            label,
          ).toContainEqual(committed);
        await again.close();
        abandonTestBroker(again);
      }
    }
  });

  it("rebalances groups that assigned a deleted topic and forgets its offsets", async () => {
    const { broker } = await start(new MemoryFileSystem());
    await broker.createTopic({ name: "a", partitions: 1 });
    await broker.createTopic({ name: "b", partitions: 1 });
    const m = await broker.joinGroup({ group: "g", topics: ["a", "b"] });
    await broker.commitOffsets({
      group: "g",
      memberId: m.memberId,
      generation: m.generation,
      offsets: [{ topic: "b", partition: 0, offset: 0 }],
    });
    await broker.deleteTopic("b");
    const d = await broker.describeGroup("g");
    expect(d.generation).toBe(m.generation + 1);
    expect(tps(d.members[0].assignments)).toEqual(["a/0"]);
    expect(d.offsets.map((o) => o.topic)).toEqual(["a"]);
  });
});

describe("groups and topic deletion", () => {
  it("removes a group, file and all, when its last topic is deleted and it has no members; keeps the others, also across a restart", async () => {
    const fs = new MemoryFileSystem();
    const { broker, logger } = await start(fs);
    await broker.createTopic({ name: "a", partitions: 1 });
    await broker.createTopic({ name: "b", partitions: 1 });
    await fill(broker, "a", 0, 3);
    await fill(broker, "b", 0, 3);
    const commit = (group: string, topic: string) =>
      broker.commitOffsets({ group, offsets: [{ topic, partition: 0, offset: 2 }] });
    await commit("only-a", "a");
    await commit("a-and-b", "a");
    await commit("a-and-b", "b");
    const member = await broker.joinGroup({ group: "with-member", topics: ["a"] });
    await commit("with-member", "a").catch(() => {});
    expect((await fs.readdir("/data/groups")).sort()).toEqual([
      "a-and-b.json",
      "only-a.json",
      "with-member.json",
    ]);

    await broker.deleteTopic("a");
    expect((await broker.listGroups()).map((g) => g.group).sort()).toEqual([
      "a-and-b",
      "with-member",
    ]);
    expect(await code(broker.describeGroup("only-a"))).toBe("group_not_found");
    expect((await fs.readdir("/data/groups")).sort()).toEqual(["a-and-b.json", "with-member.json"]);
    expect(logger.named("group.removed").map((f) => f.group)).toEqual(["only-a"]);
    const kept = await broker.describeGroup("a-and-b");
    expect(kept.offsets.map((o) => [o.topic, o.committed])).toEqual([["b", 2]]);
    expect((await broker.describeGroup("with-member")).members.map((m) => m.memberId)).toEqual([
      member.memberId,
    ]);

    // The same name later is a new group, from generation 0 (a commit without a member).
    await broker.createTopic({ name: "a", partitions: 1 });
    await fill(broker, "a", 0, 3);
    await commit("only-a", "a");
    expect((await broker.describeGroup("only-a")).generation).toBe(0);
    await broker.close();
    const again = await start(fs);
    expect((await again.broker.listGroups()).map((g) => g.group).sort()).toEqual([
      "a-and-b",
      "only-a",
      "with-member",
    ]);
    await again.broker.close();
  });
});
