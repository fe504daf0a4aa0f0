/**
 * attack13 F6 through the real processes (node target only; targets.ts): a cluster leader stopped
 * with SIGTERM under writes leaves at once (docs/cluster.md "Leaving the cluster"). Three brokers
 * on a three-member etcd; writers produce to a partition broker X leads; X gets SIGTERM. Checked:
 * X exits 0 within {@link exitBoundMs}; no partition it led has its ISR shrunk by X (X logs no
 * `replication.isr_changed`, and once the controller has moved them every other replica is still
 * in the ISR, none in the ELR); writes to X's partition are acknowledged again within
 * {@link writeGapBoundMs} of the signal; and every acknowledged record is readable afterwards.
 *
 * Then (attack15b F2) one of the two brokers left is paused and the other gets SIGTERM: after the
 * drain its leave does not wait for the paused broker to close their connections.
 *
 * Then (attack15b F4) two of the three etcd members are stopped (SIGSTOP: no quorum) and another
 * broker gets SIGTERM: each etcd step of its leave is given up after its bound, each logged as a
 * `cluster.leave_step_failed` warn, `cluster.left` is a warn saying the departure was not
 * recorded, and the broker exits 0 within seconds (before: 21 s of silence, then `cluster.left`
 * at info); since attack16 F7 it exits within moments of `cluster.left` (before: its requests to
 * the stopped members held the process until main.ts's grace ended it), with no
 * `broker.exit_held` warning.
 */
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { waitFor } from "../helpers/poll.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { clusterRoot, tearDownCluster } from "../helpers/cluster.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

/**
 * How long X may take from SIGTERM to exit: the drain (`leaveDrainMsDefault`, 3 s, taken only
 * while a follower has not caught up) plus the departure and the close, with room for a loaded
 * machine. Before the fix it took 15–17 s (the replica lag time, then the shrink).
 */
const exitBoundMs = 5_000;
/** How long after SIGTERM writes to X's partition may go unacknowledged (before: ~15 s). */
const writeGapBoundMs = 5_000;

let etcd: EtcdCluster;
let root: string;
let ports: number[];
let secretFile: string;
const brokers = new Map<number, BrokerProcess>();

function args(id: number): string[] {
  const [http, tcp] = [ports[2 * id - 2], ports[2 * id - 1]];
  return [
    ...["--http-port", String(http), "--tcp-port", String(tcp)],
    ...["--cluster", etcd.clusterUrl, "--node-id", String(id)],
    ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
    ...["--cluster-secret-file", secretFile],
  ];
}

interface Part {
  partition: number;
  leader: number;
  leader_epoch: number;
  replicas: number[];
  isr: number[];
  elr: number[];
}

async function partitions(b: BrokerProcess, topic: string): Promise<Part[]> {
  const res = await fetch(`${b.httpUrl}/v1/cluster?topic=${topic}`);
  const m = (await res.json()) as { topics: { partitions: Part[] }[] };
  return m.topics[0].partitions;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  ({ root, secretFile } = clusterRoot("cluster-sigterm", "sigterm-broker-credential-0123456789"));
  ports = await freePorts(6);
  await Promise.all(
    [1, 2, 3].map(async (id) => brokers.set(id, await startBroker(join(root, `n${id}`), args(id)))),
  );
}, 60_000);

afterAll(() => tearDownCluster(brokers.values(), etcd, root));

describe("cluster: SIGTERM of a leader under writes (attack13 F6)", () => {
  it("exits within seconds, shrinks no ISR, writes resume within seconds, nothing acknowledged is lost", async () => {
    const any = () => brokers.values().next().value!;
    const created = await fetch(`${any().httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "st", partitions: 3 }),
    });
    expect(created.status).toBe(201);
    const before = await waitFor(
      "every partition of st led with its full ISR",
      async () => {
        const ps = await partitions(any(), "st");
        return ps.every((p) => p.leader >= 1 && p.isr.length === 3) ? ps : undefined;
      },
      30_000,
    );
    const X = before[0].leader;
    const led = before.filter((p) => p.leader === X).map((p) => p.partition);
    const x = brokers.get(X)!;

    // Writers (two over HTTP, two over TCP): each produces one record at a time to st/0 on the
    // broker it believes leads it,
    // and on any error reads the leader again (from a broker other than X once X is stopping)
    // and retries the same value. A value counts as acknowledged only when produce resolved.
    const acked: { value: string; at: number; by: number }[] = [];
    let stopWriters = false;
    let signalledAt = Number.POSITIVE_INFINITY;
    const clients = new Map<number, TcpClient>();
    const client = async (id: number) => {
      let c = clients.get(id);
      if (c === undefined) {
        c = await TcpClient.connect(brokers.get(id)!.tcp);
        clients.set(id, c);
      }
      return c;
    };
    const leaderOf0 = async (): Promise<number> => {
      const asked = Date.now() >= signalledAt ? [...brokers.keys()].find((id) => id !== X)! : X;
      return (await partitions(brokers.get(asked)!, "st"))[0].leader;
    };
    const writer = async (w: number) => {
      let leader = X;
      for (let i = 0; !stopWriters; i++) {
        const value = `w${w}-${i}`;
        for (;;) {
          if (stopWriters) return;
          try {
            if (leader < 1 || !brokers.has(leader)) throw new Error(`no leader (${leader})`);
            if (w <= 2) {
              // Over HTTP, as attack13 did: shutdown waits for a request in flight to finish.
              const res = await fetch(`${brokers.get(leader)!.httpUrl}/v1/topics/st/records`, {
                method: "POST",
                headers: { "content-type": "application/json" },
                body: JSON.stringify({ records: [{ value, partition: 0 }] }),
                redirect: "manual",
              });
              await res.arrayBuffer();
              if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
            } else await (await client(leader)).produce("st", [{ value }], { partition: 0 });
            acked.push({ value, at: Date.now(), by: leader });
            break;
          } catch {
            const c = clients.get(leader);
            clients.delete(leader);
            await c?.close().catch(() => {});
            await sleep(50);
            leader = await leaderOf0().catch(() => -1);
          }
        }
      }
    };
    const writers = [1, 2, 3, 4].map((w) => writer(w));
    await waitFor("acknowledged writes on X", async () => (acked.length >= 50 ? true : undefined));

    signalledAt = Date.now();
    const code = await x.stop("SIGTERM");
    const exitMs = Date.now() - signalledAt;
    brokers.delete(X);
    expect(code).toBe(0);
    expect(exitMs).toBeLessThan(exitBoundMs);

    const resumed = await waitFor(
      "an acknowledged write to st/0 on another broker",
      async () => acked.find((a) => a.by !== X && a.at >= signalledAt),
      20_000,
    );
    const gapMs = resumed.at - signalledAt;
    expect(gapMs).toBeLessThan(writeGapBoundMs);
    await sleep(500);
    stopWriters = true;
    await Promise.all(writers);
    for (const c of clients.values()) await c.close().catch(() => {});

    // X shrank no ISR while stopping (before the fix: every ISR it led went to [X]).
    const events = x
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { event: string; partition?: string; isr?: number[] });
    const shutdownAt = events.findIndex((e) => e.event === "broker.shutdown");
    expect(shutdownAt).toBeGreaterThanOrEqual(0);
    expect(events.slice(shutdownAt).filter((e) => e.event === "replication.isr_changed")).toEqual(
      [],
    );
    expect(events.slice(shutdownAt).some((e) => e.event === "cluster.left")).toBe(true);
    // Nothing held the exit once the shutdown was done (main.ts's grace would have ended it).
    expect(events.filter((e) => e.event === "broker.exit_held")).toEqual([]);

    // The controller moved every partition X led to another replica, electing from the full
    // ISR: every replica but X is in it, none was pushed into the ELR.
    const survivor = any();
    const after = await waitFor(
      "X's partitions led elsewhere",
      async () => {
        const ps = await partitions(survivor, "st");
        return led.every((p) => ps[p].leader >= 1 && ps[p].leader !== X) ? ps : undefined;
      },
      10_000,
    );
    for (const p of led) {
      const others = before[p].replicas.filter((id) => id !== X).sort();
      expect({ partition: p, isr: [...after[p].isr].sort(), elr: after[p].elr }).toEqual({
        partition: p,
        isr: others,
        elr: [],
      });
    }

    // Every acknowledged record is readable from st/0's leader now.
    const leaderNow = after[0].leader;
    const reader = await TcpClient.connect(brokers.get(leaderNow)!.tcp);
    const seen = new Set<string>();
    const decoder = new TextDecoder();
    await waitFor("every acknowledged record readable", async () => {
      for (let offset = 0; ; ) {
        const f = await reader.fetch({ topic: "st", partition: 0, offset, maxRecords: 1000 });
        if (f.recordCount === 0) break;
        for (const r of f.records) seen.add(decoder.decode(r.value));
        offset = f.nextOffset;
      }
      return acked.every((a) => seen.has(a.value)) ? true : undefined;
    }).catch((err: unknown) => {
      const missing = acked.filter((a) => !seen.has(a.value)).map((a) => a.value);
      throw new Error(`${missing.length} acknowledged records missing: ${missing.slice(0, 10)}`, {
        cause: err,
      });
    });
    await reader.close();
    expect(acked.filter((a) => a.by === X).length).toBeGreaterThanOrEqual(50);
  }, 90_000);

  it("leaves without waiting for a paused broker's connections: the drain's bound, then on (attack15b F2)", async () => {
    // Two brokers are left: W leads a partition (so the other, Z, follows it) and is paused.
    const ps = await partitions(brokers.values().next().value!, "st");
    const W = ps.find((p) => brokers.has(p.leader))!.leader;
    const Z = [...brokers.keys()].find((id) => id !== W)!;
    const w = brokers.get(W)!;
    const z = brokers.get(Z)!;
    process.kill(w.proc.pid!, "SIGSTOP");
    let code: number | string;
    try {
      code = await z.stop("SIGTERM");
    } finally {
      process.kill(w.proc.pid!, "SIGCONT");
    }
    brokers.delete(Z);
    expect(code).toBe(0);
    const events = z
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const left = events.find((e) => e.event === "cluster.left") as
      | { ms: number; drain_ms: number }
      | undefined;
    expect(left).toBeDefined();
    // After the drain, closing replication no longer waits 2 s for the paused leader W to close
    // its side of Z's replica connection: the departure follows within the etcd round trips
    // (before: drain + 2 s and more).
    expect(left!.ms - left!.drain_ms).toBeLessThan(1500);
  }, 60_000);

  it("leaves within seconds while etcd has no quorum, saying what it could not record (attack15b F4)", async () => {
    // Another broker than the one the first test stopped (two are left).
    const [Y] = [...brokers.keys()];
    const y = brokers.get(Y)!;
    await Promise.all([etcd.members[1].kill("SIGSTOP"), etcd.members[2].kill("SIGSTOP")]);
    const signalledAt = Date.now();
    const code = await y.stop("SIGTERM");
    const exitMs = Date.now() - signalledAt;
    brokers.delete(Y);
    await Promise.all([etcd.members[1].kill("SIGCONT"), etcd.members[2].kill("SIGCONT")]);
    expect(code).toBe(0);
    const events = y
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const after = events.slice(events.findIndex((e) => e.event === "broker.shutdown"));
    const failed = after.filter((e) => e.event === "cluster.leave_step_failed");
    // The departure and the revocation each waited their bound (1.5 s) for an etcd without a
    // quorum (the member that still runs may answer with an error instead: "failed"); a
    // controller pass under way when the quorum went is given up the same way, and so is the
    // announcement of the leave when etcd refuses it before the departure is tried.
    const optional = ["stop_controlling", "mark_leaving"];
    expect(failed.map((e) => e.step).filter((s) => !optional.includes(s as string))).toEqual([
      "record_departure",
      "revoke_lease",
    ]);
    for (const e of failed) {
      expect(e.level).toBe("warn");
      expect(["timeout", "failed"]).toContain(e.outcome);
      // The bound, with room for a timer late on a loaded machine.
      expect(e.ms as number).toBeLessThan(1500 + 1000);
      if (!optional.includes(e.step as string)) expect(e.effect).toMatch(/lease expires/);
    }
    const left = after.find((e) => e.event === "cluster.left");
    expect(left).toMatchObject({ level: "warn", departure_recorded: false, lease_revoked: false });
    // Bounded by the drain (its followers fetch at once), a controller pass still waiting for
    // etcd, and the two etcd steps: 1.5 s each at most, with room for a loaded machine.
    expect(left?.ms as number).toBeLessThan(3 * 1500 + 3000);
    // Then the process exits within moments (attack16 F7: 3.2 s of silence after it). Requests
    // to the stopped etcd members were still pending, held the process, and main.ts's grace
    // ended it (1 s here); closing the etcd client now abandons them, and nothing else may hold
    // the exit (`broker.exit_held` would say what did). A controller pass abandoned by the leave
    // fails as the client closes, and is not reported after the leave.
    expect(after.filter((e) => e.event === "broker.exit_held")).toEqual([]);
    const leftToExitMs = signalledAt + exitMs - Date.parse(left?.time as string);
    expect(leftToExitMs).toBeLessThan(2000);
    const afterLeft = after.slice(after.findIndex((e) => e.event === "cluster.left"));
    expect(afterLeft.filter((e) => e.event === "cluster.controller_failed")).toEqual([]);
    expect(exitMs).toBeLessThan(15_000);
  }, 60_000);

  it("leaves as promptly once etcd has been without quorum past its lease: no registration reported failed after it (attack16 F7)", async () => {
    // Every broker is stopped by now: node 1 starts again on its data directory (registered
    // before it listens). Etcd then
    // answers nothing long enough for its lease to be lost (6 s TTL) before the signal, as an
    // operator may find it: it keeps trying to register again meanwhile. Every member is
    // stopped: one left running may lead and renew leases alone for a while (etcd 3.4 renews on
    // the leader without a quorum round), and the loss would not come.
    const z = await startBroker(join(root, "n1"), args(1));
    brokers.set(1, z);
    await Promise.all(etcd.members.map((m) => m.kill("SIGSTOP")));
    let code: number | string;
    let signalledAt: number;
    let exitMs: number;
    try {
      await waitFor(
        "the lease lost",
        async () => (z.stderr().includes('"event":"cluster.lease_lost"') ? true : undefined),
        20_000,
      );
      signalledAt = Date.now();
      code = await z.stop("SIGTERM");
      exitMs = Date.now() - signalledAt;
    } finally {
      await Promise.all(etcd.members.map((m) => m.kill("SIGCONT")));
    }
    brokers.delete(1);
    expect(code).toBe(0);
    const events = z
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const leftAt = events.findIndex((e) => e.event === "cluster.left");
    expect(leftAt).toBeGreaterThanOrEqual(0);
    const left = events[leftAt] as { time: string; level: string };
    expect(left.level).toBe("warn");
    // A registration attempt (or controller pass) the close cut short is no failure to report
    // after the broker left (before: cluster.register_failed "the etcd client was closed", or
    // its 5 s timeout, after cluster.left).
    expect(
      events
        .slice(leftAt)
        .filter((e) =>
          ["cluster.register_failed", "cluster.controller_failed", "broker.exit_held"].includes(
            e.event as string,
          ),
        ),
    ).toEqual([]);
    expect(signalledAt + exitMs - Date.parse(left.time)).toBeLessThan(2000);
  }, 60_000);
});
