/**
 * End to end: two real `es-broker consume --group` processes share a 4-partition topic. They
 * split it; when one is killed with SIGKILL, the other takes its partitions over from the offsets
 * the group had committed, and nothing is skipped. Three, then four consumers on 6 partitions:
 * rebalances are sticky (members that stay keep their partitions).
 *
 * Record n of partition p has the value `p{p}-{n}` and sits at offset n (each partition is
 * written in order from offset 0), so a printed value says where it came from.
 *
 * Node target only (targets.ts `nodeOnlyE2eFiles`): the group's logic is the broker's and the CLI
 * client's, the same on every runtime; cli.test.ts runs `consume --follow --group` on every target.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { GroupConsumer, TcpClient } from "../../src/client/client.ts";
import type { GroupDescription } from "../../src/broker/types.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  assertTargetRunnable,
  brokerCommand,
  startBroker,
  target,
  type BrokerProcess,
} from "./harness.ts";
import { waitFor } from "./helpers.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
const consumers: ChildProcess[] = [];
afterEach(async () => {
  for (const c of consumers.splice(0))
    if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** A running `es-broker consume` process and the lines it printed so far. */
interface Consumer {
  proc: ChildProcess;
  lines: string[];
  stderr: () => string;
}

function startConsumer(args: string[]): Consumer {
  assertTargetRunnable();
  const [cmd, ...pre] = brokerCommand();
  const proc = spawn(cmd, [...pre, "consume", ...args], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  consumers.push(proc);
  const lines: string[] = [];
  let partial = "";
  let err = "";
  proc.stdout!.on("data", (d: Buffer) => {
    partial += d.toString();
    const parts = partial.split("\n");
    partial = parts.pop()!;
    lines.push(...parts);
  });
  proc.stderr!.on("data", (d) => (err += d));
  return { proc, lines, stderr: () => err };
}

/** Appends `count` records to each partition, continuing each partition's numbering. */
async function produce(client: TcpClient, next: number[], count: number): Promise<void> {
  for (let p = 0; p < next.length; p++) {
    const b = new EntryBatchBuilder();
    for (let i = 0; i < count; i++) b.add(null, new TextEncoder().encode(`p${p}-${next[p] + i}`));
    await client.produce("shared", b.build(), { partition: p });
    next[p] += count;
  }
}

function parse(line: string): { partition: number; offset: number } {
  const m = /^p(\d+)-(\d+)$/.exec(line);
  if (!m) throw new Error(`unexpected output line ${JSON.stringify(line)}`);
  return { partition: Number(m[1]), offset: Number(m[2]) };
}

/** A broker on a fresh data directory (stopped and removed after the file) and a client connected to it. */
async function brokerWithClient(): Promise<{ broker: BrokerProcess; client: TcpClient }> {
  const { dir } = tempDir("es-broker-groups-");
  const broker = await startBroker(`${dir}/data`);
  running.push(broker);
  return { broker, client: await TcpClient.connect(broker.tcp) };
}

describe(`[${target}] es-broker consume --group`, () => {
  it("two consumer processes split a 4-partition topic; after one is killed the other resumes its partitions from the committed offsets, skipping nothing", async () => {
    const { broker, client } = await brokerWithClient();
    try {
      await client.createTopic({ name: "shared", partitions: 4 });
      const address = `${broker.tcp.host}:${broker.tcp.port}`;
      const args = [
        "shared",
        "--group",
        "workers",
        "--follow",
        "--from-beginning",
        "--session-timeout",
        "1500",
        "--broker",
        address,
      ];
      const a = startConsumer(args);
      await waitFor(
        "the first consumer to join",
        async () => (await client.describeGroup("workers").catch(() => null))?.members.length === 1,
      );
      const b = startConsumer(args);
      // Both members in one generation, two partitions each, and both settled into it.
      let settled: GroupDescription | null = null;
      await waitFor("the group to split the topic two and two", async () => {
        const d = await client.describeGroup("workers");
        const split = d.members.length === 2 && d.members.every((m) => m.assignments.length === 2);
        if (split && settled !== null && settled.generation === d.generation) return true;
        settled = split ? d : null;
        await new Promise((r) => setTimeout(r, 700)); // longer than a heartbeat interval
        return false;
      });
      const next = [0, 0, 0, 0];
      await produce(client, next, 50);
      const all = (upTo: number[]) =>
        upTo.flatMap((n, p) => Array.from({ length: n }, (_, i) => `p${p}-${i}`));
      await waitFor(
        "both consumers together to print the first 200 records",
        () => new Set([...a.lines, ...b.lines]).size >= 200,
      );
      // The split: each printed only its own partitions.
      const partitionsOf = (c: Consumer) => new Set(c.lines.map((l) => parse(l).partition));
      expect(partitionsOf(a).size).toBe(2);
      expect(partitionsOf(b).size).toBe(2);
      expect([...partitionsOf(a)].some((p) => partitionsOf(b).has(p))).toBe(false);
      // Let the last commits land, then kill a without warning.
      await waitFor("the group to commit the first 200 records", async () =>
        (await client.describeGroup("workers")).offsets.every((o) => o.committed === 50),
      );
      a.proc.kill("SIGKILL");
      await new Promise((r) => a.proc.once("exit", r));
      const orphaned = [...partitionsOf(a)].sort();
      const committedAtKill = new Map(
        (await client.describeGroup("workers")).offsets.map((o) => [o.partition, o.committed ?? 0]),
      );
      const printedByBBefore = b.lines.length;
      await produce(client, next, 50);
      await waitFor("the survivor to own all four partitions", async () => {
        const d = await client.describeGroup("workers");
        return d.members.length === 1 && d.members[0].assignments.length === 4;
      });
      await waitFor("the survivor to print every record of the second round", () => {
        const seen = new Set(b.lines);
        return all(next)
          .filter((v) => parse(v).offset >= 50)
          .every((v) => seen.has(v));
      });
      // The survivor started a's partitions exactly at the committed offsets: no gap, no rewind past them.
      for (const p of orphaned) {
        const mine = b.lines
          .slice(printedByBBefore)
          .map(parse)
          .filter((r) => r.partition === p)
          .map((r) => r.offset);
        expect(mine[0], `partition ${p} resumed at its committed offset`).toBe(
          committedAtKill.get(p),
        );
        expect(mine).toEqual(Array.from({ length: next[p] - mine[0] }, (_, i) => mine[0] + i));
      }
      // Nothing skipped: every record of every partition was printed by one of them.
      const printed = new Set([...a.lines, ...b.lines]);
      for (const v of all(next)) expect(printed.has(v), `${v} was printed`).toBe(true);
      await waitFor("the group's lag to reach 0", async () =>
        (await client.describeGroup("workers")).offsets.every((o) => o.lag === 0),
      );
      b.proc.kill("SIGTERM");
      const code = await new Promise((r) => b.proc.once("exit", (c) => r(c)));
      expect(code, b.stderr()).toBe(0);
      // A clean exit leaves the group.
      expect((await client.describeGroup("workers")).members).toEqual([]);
    } finally {
      await client.close();
    }
  });
  it("rebalances stickily: a joining consumer takes partitions only from the others, a leaving one's go to the others, and staying members keep theirs", async () => {
    const { broker, client } = await brokerWithClient();
    try {
      await client.createTopic({ name: "shared", partitions: 6 });
      const args = [
        ...["shared", "--group", "sticky", "--follow", "--from-beginning"],
        ...["--session-timeout", "10000", "--broker", `${broker.tcp.host}:${broker.tcp.port}`],
      ];
      /** Member id → its sorted "partition" list, once `count` members are in the group. */
      const owners = async (count: number): Promise<Map<string, number[]>> => {
        let out = new Map<string, number[]>();
        await waitFor(`the group to have ${count} members`, async () => {
          const d = await client.describeGroup("sticky").catch(() => null);
          if (d === null) return false;
          out = new Map(
            d.members.map((m) => [m.memberId, m.assignments.map((a) => a.partition).sort()]),
          );
          return d.members.length === count;
        });
        return out;
      };
      const procs = [startConsumer(args)];
      await owners(1);
      procs.push(startConsumer(args));
      await owners(2);
      procs.push(startConsumer(args));
      const three = await owners(3);
      expect([...three.values()].map((p) => p.length)).toEqual([2, 2, 2]);
      // A fourth joins: shares of 6 over 4 are 2, 2, 1, 1, so it takes one partition from one of
      // the three, and nothing else moves.
      procs.push(startConsumer(args));
      const four = await owners(4);
      expect([...four.values()].flat().sort()).toEqual([0, 1, 2, 3, 4, 5]);
      for (const [id, before] of three) {
        const after = four.get(id)!;
        for (const p of after) expect(before, `${id} was given partition ${p}`).toContain(p);
        expect(after.length).toBeGreaterThanOrEqual(1);
      }
      const joiner = [...four.keys()].find((id) => !three.has(id))!;
      expect(four.get(joiner)!.length).toBe(1);
      // The first consumer stops (SIGTERM: it leaves the group): its partitions go to the
      // others; everyone staying keeps what it had.
      procs[0].proc.kill("SIGTERM");
      expect(await new Promise((r) => procs[0].proc.once("exit", (c) => r(c)))).toBe(0);
      const left = await owners(3);
      expect([...left.values()].flat().sort()).toEqual([0, 1, 2, 3, 4, 5]);
      expect([...left.values()].map((p) => p.length).sort()).toEqual([2, 2, 2]);
      for (const [id, after] of left)
        for (const p of four.get(id)!) expect(after, `${id} lost partition ${p}`).toContain(p);
      for (const c of procs.slice(1)) c.proc.kill("SIGTERM");
    } finally {
      await client.close();
    }
  });

  it("a member that dies before its first commit does not make the next one skip: the starting position of a never-committed partition is committed at once", async () => {
    const { broker, client } = await brokerWithClient();
    try {
      await client.createTopic({ name: "shared", partitions: 1 });
      const next = [0];
      await produce(client, next, 3);
      const address = `${broker.tcp.host}:${broker.tcp.port}`;
      // Without --from-beginning: a partition the group never committed starts at the end.
      const args = [
        "shared",
        "--group",
        "late",
        "--follow",
        "--session-timeout",
        "1000",
        "--broker",
        address,
      ];
      const a = startConsumer(args);
      await waitFor("the first consumer to join and commit where it starts", async () => {
        const d = await client.describeGroup("late").catch(() => null);
        return d !== null && d.members.length === 1 && d.offsets[0]?.committed === 3;
      });
      // a freezes (it can neither print nor commit), records arrive, and a's session expires.
      a.proc.kill("SIGSTOP");
      await produce(client, next, 2);
      await waitFor(
        "a's session to expire",
        async () => (await client.describeGroup("late")).members.length === 0,
      );
      const b = startConsumer(args);
      await waitFor(
        "the second consumer to print the records produced while a was frozen",
        () => b.lines.length >= 2,
      );
      expect(b.lines).toEqual(["p0-3", "p0-4"]);
      expect(a.lines).toEqual([]);
      a.proc.kill("SIGKILL");
    } finally {
      await client.close();
    }
  });
  it("without --follow, partitions held by a member that died are waited for until its session ends and then read; those of a live member are left to it, saying so", async () => {
    const { broker, client } = await brokerWithClient();
    try {
      await client.createTopic({ name: "shared", partitions: 2 });
      await produce(client, [0, 0], 50);
      const address = `${broker.tcp.host}:${broker.tcp.port}`;
      const run = async (group: string) => {
        const c = startConsumer([
          "shared",
          "--group",
          group,
          "--from-beginning",
          // Heartbeats every 0.5 s: it hears of the rebalance soon after the dead member's end.
          "--session-timeout",
          "1500",
          "--broker",
          address,
        ]);
        const code = await new Promise<number | null>((r) => c.proc.once("close", r));
        return { code, lines: c.lines, stderr: c.stderr() };
      };
      // A member that joined (taking both partitions) and died: it stops heartbeating, never leaves.
      const dead = await GroupConsumer.join({
        client,
        group: "batch",
        topics: ["shared"],
        // Longer than the CLI's start-up, so that it finds the member still in the group.
        sessionTimeoutMs: 4000,
      });
      await dead.close({ leave: false });
      const started = Date.now();
      const after = await run("batch");
      expect(after.code, after.stderr).toBe(0);
      expect(after.stderr).toMatch(
        /^es-broker: waiting up to \d+ ms for 1 partition \d of "shared" \(50 records not consumed\), held by 1 other member of group "batch" .*session times out\n$/,
      );
      expect(
        after.lines.map(parse).sort((a, b) => a.partition - b.partition || a.offset - b.offset),
      ).toEqual(
        [0, 1].flatMap((partition) =>
          Array.from({ length: 50 }, (_, offset) => ({ partition, offset })),
        ),
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(3000);
      // A live member (heartbeating) keeps its partition: the run reads its own and then leaves.
      const liveClient = await TcpClient.connect(broker.tcp);
      const live = await GroupConsumer.join({
        client: liveClient,
        group: "shared-work",
        topics: ["shared"],
        sessionTimeoutMs: 1500,
      });
      // It polls as a live consumer does (a rebalance is joined on the next poll).
      let polling = true;
      const polls = (async () => {
        while (polling) await live.poll({ waitMs: 100 });
      })();
      try {
        const shared = await run("shared-work");
        expect(shared.code, shared.stderr).toBe(0);
        expect(shared.lines).toHaveLength(50);
        expect(shared.stderr).toMatch(
          /waiting up to \d+ ms .*\nes-broker: leaving 1 partition \d of "shared" \(50 records not consumed\) to 1 member still in group "shared-work" \(.*\): they heartbeat, so they are alive and consume them\n$/,
        );
      } finally {
        polling = false;
        await polls;
        await live.close();
        await liveClient.close();
      }
    } finally {
      await client.close();
    }
  });
});
