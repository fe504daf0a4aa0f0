/**
 * test/cluster/checker.ts: each anomaly is found in a history that holds exactly it, clean
 * histories report nothing, and a history produced by a correct in-memory log never reports an
 * anomaly (a property over random workloads), while dropping an acknowledged record from its
 * final read always does.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type AnomalyKind, anomalyKinds, checkHistory, formatCheckResult } from "./checker.ts";
import { History, type HistoryRecord, type Op } from "./history.ts";

const topic = "t";
const rec = (value: string, offset?: number, partition = 0): HistoryRecord => ({
  topic,
  partition,
  value,
  ...(offset === undefined ? {} : { offset }),
});

/** A history with a fake clock (1 ms per entry). */
function history(): History {
  let t = 0;
  return new History({ now: () => t++ });
}

/** Sends `values` from `process` and acknowledges them at consecutive offsets from `offset`. */
function ackedSend(
  h: History,
  process: string,
  values: string[],
  offset: number,
  idempotent = false,
) {
  h.invoke(process, "send", { records: values.map((v) => rec(v)), idempotent }).ok(
    values.map((v, i) => rec(v, offset + i)),
  );
}

function poll(h: History, process: string, reads: HistoryRecord[], extra: Partial<Op> = {}) {
  h.invoke(process, "poll", { records: [], ...extra }).ok(reads);
}

/** Kinds with at least one anomaly. */
function found(h: History): AnomalyKind[] {
  const result = checkHistory(h.ops);
  return anomalyKinds.filter((k) => result.anomalies[k].length > 0);
}

describe("checker: each anomaly alone is found", () => {
  it("reports nothing for a clean history of plain and idempotent producers, consumers and a group", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b"], 0);
    ackedSend(h, "i0", ["c"], 2, true);
    h.invoke("p0", "send", { records: [rec("d")] }).info(new Error("timeout"));
    h.invoke("p0", "send", { records: [rec("e")] }).fail(new Error("topic_not_found"));
    poll(h, "c0", [rec("a", 0), rec("b", 1)]);
    poll(h, "c0", [rec("c", 2)]);
    poll(h, "g0", [rec("a", 0)], { group: "g", session: "1" });
    // A new generation rewinds to the committed offset: allowed.
    poll(h, "g1", [rec("a", 0), rec("b", 1), rec("c", 2)], { group: "g", session: "2" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2), rec("d", 3)]);
    const result = checkHistory(h.ops);
    expect(result.valid, formatCheckResult(result)).toBe(true);
    expect(result.stats).toMatchObject({
      sends: { ok: 2, fail: 1, info: 1, outstanding: 0 },
      acknowledged: 3,
      unacknowledgedPresent: 1,
      polled: 3,
      finalRecords: 4,
    });
  });

  it("lost write: an acknowledged value missing below the final read's end", () => {
    const h = history();
    ackedSend(h, "p0", ["a"], 0);
    ackedSend(h, "p1", ["b"], 1);
    h.finalRead({ topic, partition: 0 }, [rec("b", 1)]);
    expect(found(h)).toEqual(["lostWrite"]);
    expect(checkHistory(h.ops).anomalies.lostWrite[0].message).toMatch(
      /Value "a" was acknowledged at offset 0 of "t\/0" but is missing from the final read, which reaches offset 1/,
    );
  });

  it("unseen: the final read ends before an acknowledged offset", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b"], 0);
    h.finalRead({ topic, partition: 0 }, [rec("a", 0)]);
    expect(found(h)).toEqual(["unseen"]);
  });

  it("unseen: an acknowledged partition was never read at the end", () => {
    const h = history();
    ackedSend(h, "p0", ["a"], 0);
    expect(found(h)).toEqual(["unseen"]);
  });

  it("poll skip: consecutive reads of one session jump over a stored record", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "c0", [rec("a", 0)]);
    poll(h, "c0", [rec("c", 2)]);
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    const result = checkHistory(h.ops);
    expect(found(h)).toEqual(["pollSkip"]);
    expect(result.anomalies.pollSkip).toHaveLength(1);
  });

  it("poll skip: a group never read a record below what it read (a commit ran ahead)", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "g0", [rec("a", 0)], { group: "g", session: "1" });
    poll(h, "g1", [rec("c", 2)], { group: "g", session: "2" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    expect(found(h)).toEqual(["pollSkip"]);
    expect(checkHistory(h.ops).anomalies.pollSkip[0].message).toMatch(
      /^Group g read "t\/0" up to offset 2 but never read 1 record\(s\) below it, at 1$/,
    );
  });

  it("non-monotonic poll: one session reads an offset again", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b"], 0);
    poll(h, "c0", [rec("a", 0), rec("b", 1)]);
    poll(h, "c0", [rec("b", 1)]);
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1)]);
    expect(found(h)).toEqual(["nonMonotonicPoll"]);
  });

  it("non-monotonic poll: a group's new session starts below a commit acknowledged before it", () => {
    // Seed 3060980001: the coordinator moved back to a broker holding older offsets of its own.
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "g0", [rec("a", 0), rec("b", 1)], { group: "g", session: "1.1" });
    h.invoke("g0", "commit", { group: "g", records: [rec("", 2)] }).ok(undefined, {
      session: "1.1",
    });
    poll(h, "g0", [rec("b", 1), rec("c", 2)], { group: "g", session: "1.2" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    expect(found(h)).toEqual(["nonMonotonicPoll"]);
    expect(checkHistory(h.ops).anomalies.nonMonotonicPoll[0].message).toMatch(
      /began reading "t\/0" at offset 1, below offset 2 the group had committed/,
    );
  });

  it("non-monotonic poll: another member's session begun after a commit starts below it", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "g0", [rec("a", 0)], { group: "g", session: "1.1" });
    h.invoke("g0", "commit", { group: "g", records: [rec("", 1)] }).ok(undefined, {
      session: "1.1",
    });
    // g1's last op of its old session completed after the commit: its new session is bound.
    poll(h, "g1", [], { group: "g", session: "2.1" });
    poll(h, "g1", [rec("a", 0)], { group: "g", session: "2.2" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    expect(found(h)).toEqual(["nonMonotonicPoll"]);
  });

  it("a session begun before a commit was acknowledged may read below it (seed 1037126804)", () => {
    // member-0 joined generation 4 in a poll that ended before member-1's commit of 2 (sent in
    // generation 2, acknowledged after its rejoin in generation 5) and read from 1 in its next
    // poll: a member of an older generation reads on until it learns of the newer one.
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "m0", [rec("a", 0)], { group: "g", session: "1.2" });
    h.invoke("m0", "commit", { group: "g", records: [rec("", 1)] }).ok(undefined, {
      session: "1.2",
    });
    const joining = h.invoke("m0", "poll", { records: [], group: "g" });
    const commit = h.invoke("m1", "commit", { group: "g", records: [rec("", 2)] });
    joining.ok([], { session: "1.3" });
    commit.ok(undefined, { session: "1.5" });
    poll(h, "m0", [rec("b", 1), rec("c", 2)], { group: "g", session: "1.3" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    expect(found(h)).toEqual([]);
  });

  it("a commit that rejoined begins the new session: commits acknowledged during it do not bind", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "g0", [rec("a", 0)], { group: "g", session: "1.1" });
    // g0's commit rejoined (generation 2, positions from the group's commit, 1) and was sent
    // again; g1's commit of 2 was acknowledged meanwhile, maybe after g0's join.
    const rejoining = h.invoke("g0", "commit", { group: "g", records: [rec("", 1)] });
    h.invoke("g1", "commit", { group: "g", records: [rec("", 2)] }).ok(undefined, {
      session: "2.1",
    });
    rejoining.ok(undefined, { session: "1.2" });
    poll(h, "g0", [rec("b", 1), rec("c", 2)], { group: "g", session: "1.2" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    expect(found(h)).toEqual([]);
  });

  it("a group's new session may start at its committed offset, or below a commit not acknowledged", () => {
    const h = history();
    ackedSend(h, "p0", ["a", "b", "c"], 0);
    poll(h, "g0", [rec("a", 0)], { group: "g", session: "1.1" });
    h.invoke("g0", "commit", { group: "g", records: [rec("", 1)] }).ok();
    poll(h, "g0", [rec("b", 1)], { group: "g", session: "1.1" });
    h.invoke("g0", "commit", { group: "g", records: [rec("", 2)] }).info(new Error("timeout"));
    h.invoke("g0", "commit", { group: "g", records: [rec("", 3)] }).fail(new Error("stale"));
    // Another member's new session starts at the acknowledged commit (1), not the unknown ones.
    poll(h, "g1", [rec("b", 1), rec("c", 2)], { group: "g", session: "2.1" });
    // A commit acknowledged only after a poll began does not bind that poll.
    const late = h.invoke("g2", "poll", { records: [], group: "g" });
    h.invoke("g1", "commit", { group: "g", records: [rec("", 3)] }).ok();
    late.ok([rec("b", 1), rec("c", 2)], { session: "3.1" });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("b", 1), rec("c", 2)]);
    expect(found(h)).toEqual([]);
  });

  it("non-monotonic send: a later send of one process got a lower offset", () => {
    const h = history();
    ackedSend(h, "p0", ["a"], 1);
    ackedSend(h, "p0", ["b"], 0);
    h.finalRead({ topic, partition: 0 }, [rec("b", 0), rec("a", 1)]);
    expect(found(h)).toEqual(["nonMonotonicSend"]);
  });

  it("duplicate: one value of an idempotent producer at two offsets", () => {
    const h = history();
    ackedSend(h, "i0", ["a"], 0, true);
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("a", 1)]);
    expect(found(h)).toEqual(["duplicate"]);
    expect(checkHistory(h.ops).anomalies.duplicate[0].message).toMatch(
      /of an idempotent producer is at 2 offsets of "t\/0": 0, 1/,
    );
  });

  it("duplicate of a plain producer's value is allowed only when the options say so", () => {
    const h = history();
    ackedSend(h, "p0", ["a"], 0);
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("a", 1)]);
    expect(found(h)).toEqual(["duplicate"]);
    const lenient = checkHistory(h.ops, { plainDuplicatesAllowed: true });
    expect(lenient.valid).toBe(true);
    expect(lenient.stats.plainDuplicates).toBe(1);
  });

  it("inconsistent offsets: two replicas hold different records at one offset", () => {
    const h = history();
    ackedSend(h, "p0", ["a"], 0);
    h.invoke("p1", "send", { records: [rec("c")] }).info(new Error("connection_closed"));
    h.invoke("p2", "send", { records: [rec("d")] }).info(new Error("connection_closed"));
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("c", 1)], { node: 1 });
    h.finalRead({ topic, partition: 0 }, [rec("a", 0), rec("d", 1)], { node: 2 });
    expect(found(h)).toEqual(["inconsistentOffsets"]);
  });

  it("vanished read: a consumer read an unacknowledged record that no final read holds", () => {
    const h = history();
    h.invoke("p0", "send", { records: [rec("c")] }).info(new Error("timeout"));
    poll(h, "c0", [rec("c", 0)]);
    h.finalRead({ topic, partition: 0 }, []);
    expect(found(h)).toEqual(["vanishedRead"]);
  });

  it("phantom read: a value nobody sent, or whose send definitely failed", () => {
    const h = history();
    h.invoke("p0", "send", { records: [rec("f")] }).fail(new Error("topic_not_found"));
    h.finalRead({ topic, partition: 0 }, [rec("z", 0), rec("f", 1)]);
    const result = checkHistory(h.ops);
    expect(found(h)).toEqual(["phantomRead"]);
    expect(result.anomalies.phantomRead.map((a) => a.values)).toEqual([["z"], ["f"]]);
  });

  it("refuses a history that breaks its own rules", () => {
    const h = history();
    ackedSend(h, "p0", ["a"], 0);
    ackedSend(h, "p1", ["a"], 1);
    expect(() => checkHistory(h.ops)).toThrow(/sends value "a" again/);
    expect(() => {
      const g = history();
      g.invoke("p0", "send", { records: [rec("a")] });
      g.invoke("p0", "send", { records: [rec("b")] });
    }).toThrow(/op 0 is still outstanding/);
  });
});

/**
 * A correct system in memory: partitions are arrays; sends append (or not, for `fail`; maybe
 * and maybe later, for `info`); plain consumers read on from where they were; a group's members
 * own partitions by turns and start from the group's committed offset after each rebalance.
 */
type Action =
  | {
      kind: "send";
      producer: number;
      idempotent: boolean;
      partition: number;
      count: number;
      outcome: "ok" | "fail" | "info-stored" | "info-lost" | "info-later";
    }
  | { kind: "flush-later" }
  | { kind: "poll"; consumer: number; partition: number; max: number }
  | { kind: "group-poll"; member: number; max: number }
  | { kind: "group-commit"; member: number }
  | { kind: "rebalance"; shift: number };

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  fc.record({
    kind: fc.constant("send" as const),
    producer: fc.nat(3),
    idempotent: fc.boolean(),
    partition: fc.nat(1),
    count: fc.integer({ min: 1, max: 3 }),
    outcome: fc.constantFrom("ok", "ok", "ok", "fail", "info-stored", "info-lost", "info-later"),
  }),
  fc.constant({ kind: "flush-later" as const }),
  fc.record({
    kind: fc.constant("poll" as const),
    consumer: fc.nat(1),
    partition: fc.nat(1),
    max: fc.integer({ min: 1, max: 4 }),
  }),
  fc.record({
    kind: fc.constant("group-poll" as const),
    member: fc.nat(1),
    max: fc.integer({ min: 1, max: 4 }),
  }),
  fc.record({ kind: fc.constant("group-commit" as const), member: fc.nat(1) }),
  fc.record({ kind: fc.constant("rebalance" as const), shift: fc.nat(1) }),
);

function runModel(actions: Action[], replicas: number): History {
  const h = history();
  const logs: string[][] = [[], []];
  const later: { partition: number; values: string[] }[] = [];
  let next = 0;
  const consumerPos = new Map<string, number>();
  const committed = [0, 0];
  let generation = 0;
  let shift = 0;
  const memberPos = new Map<string, number>(); // member/partition -> position, this generation
  const owner = (partition: number) => (partition + shift) % 2;
  const append = (partition: number, values: string[]) => {
    const base = logs[partition].length;
    logs[partition].push(...values);
    return values.map((v, i) => rec(v, base + i, partition));
  };
  for (const a of actions) {
    switch (a.kind) {
      case "send": {
        const process = `${a.idempotent ? "idem" : "producer"}-${a.producer}`;
        const values = Array.from({ length: a.count }, () => `v${next++}`);
        const op = h.invoke(process, "send", {
          records: values.map((v) => rec(v, undefined, a.partition)),
          idempotent: a.idempotent,
        });
        if (a.outcome === "ok") op.ok(append(a.partition, values));
        else if (a.outcome === "fail") op.fail(new Error("refused"));
        else {
          if (a.outcome === "info-stored") append(a.partition, values);
          if (a.outcome === "info-later") later.push({ partition: a.partition, values });
          op.info(new Error("timeout"));
        }
        break;
      }
      case "flush-later":
        for (const l of later.splice(0)) append(l.partition, l.values);
        break;
      case "poll": {
        const k = `${a.consumer}/${a.partition}`;
        const from = consumerPos.get(k) ?? 0;
        const to = Math.min(logs[a.partition].length, from + a.max);
        consumerPos.set(k, to);
        poll(
          h,
          `consumer-${a.consumer}`,
          logs[a.partition].slice(from, to).map((v, i) => rec(v, from + i, a.partition)),
        );
        break;
      }
      case "group-poll": {
        const reads: HistoryRecord[] = [];
        for (const partition of [0, 1]) {
          if (owner(partition) !== a.member) continue;
          const k = `${a.member}/${partition}`;
          const from = memberPos.get(k) ?? committed[partition];
          const to = Math.min(logs[partition].length, from + a.max);
          memberPos.set(k, to);
          reads.push(...logs[partition].slice(from, to).map((v, i) => rec(v, from + i, partition)));
        }
        poll(h, `member-${a.member}`, reads, { group: "g", session: String(generation) });
        break;
      }
      case "group-commit": {
        const moved: HistoryRecord[] = [];
        for (const partition of [0, 1]) {
          const pos = memberPos.get(`${a.member}/${partition}`);
          if (owner(partition) === a.member && pos !== undefined) {
            committed[partition] = pos;
            moved.push(rec("", pos, partition));
          }
        }
        if (moved.length > 0)
          h.invoke(`member-${a.member}`, "commit", { group: "g", records: moved }).ok();
        break;
      }
      case "rebalance":
        generation++;
        shift = (shift + a.shift) % 2;
        memberPos.clear();
        break;
    }
  }
  for (const partition of [0, 1]) {
    for (let node = 1; node <= replicas; node++) {
      h.finalRead(
        { topic, partition },
        logs[partition].map((v, i) => rec(v, i, partition)),
        replicas > 1 ? { node } : {},
      );
    }
  }
  return h;
}

describe("checker: a correct log never reports an anomaly", () => {
  it("holds for random workloads of producers, consumers and a group", () => {
    fc.assert(
      fc.property(
        fc.array(actionArb, { maxLength: 80 }),
        fc.integer({ min: 1, max: 3 }),
        (actions, replicas) => {
          const result = checkHistory(runModel(actions, replicas).ops);
          if (!result.valid) throw new Error(formatCheckResult(result));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("and dropping any acknowledged record from a final read is always reported", () => {
    fc.assert(
      fc.property(
        fc.array(actionArb, { minLength: 1, maxLength: 60 }),
        fc.nat(),
        (actions, pick) => {
          const h = runModel(actions, 1);
          const acked = h.ops
            .filter((o) => o.f === "send" && o.type === "ok")
            .flatMap((o) => o.records);
          fc.pre(acked.length > 0);
          const victim = acked[pick % acked.length];
          const ops = h.ops.map((o) =>
            o.f === "final-read" && o.partition === victim.partition
              ? { ...o, records: o.records.filter((r) => r.value !== victim.value) }
              : o,
          );
          const result = checkHistory(ops);
          const losses = [...result.anomalies.lostWrite, ...result.anomalies.unseen];
          expect(losses.map((a) => a.values)).toContainEqual([victim.value]);
        },
      ),
      { numRuns: 200 },
    );
  });
});
