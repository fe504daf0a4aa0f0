/**
 * Field failure #27c through the real processes (node target only; targets.ts): the last replica
 * standing, restarted with a log cut short, must not lead below `committed_offset`, not even by
 * the partition state its previous incarnation left in etcd; the partition stays offline until a
 * replica holding every committed record is back, and no acknowledged record is lost.
 * And attack11 F4: an old process of a replaced node, resumed, is refused and exits; it never
 * replicates as the node its successor now is. And issue #16 window 2: a replica the controller
 * elects from an ISR although its log lacks the committed records refuses to lead; another ISR
 * member leads and no acknowledged record is lost.
 */
import { readdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { waitFor } from "../helpers/poll.ts";
import { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { clusterRoot, tearDownCluster } from "../helpers/cluster.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

let etcd: EtcdCluster;
let root: string;
let ports: number[];
let secretFile: string;
const brokers = new Map<number, BrokerProcess>();

function args(id: number): string[] {
  const [http, tcp, kafka] = [ports[3 * id - 3], ports[3 * id - 2], ports[3 * id - 1]];
  return [
    ...["--http-port", String(http), "--tcp-port", String(tcp), "--kafka-port", String(kafka)],
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
}
async function partitionState(b: BrokerProcess, topic: string): Promise<Part> {
  const res = await fetch(`${b.httpUrl}/v1/cluster?topic=${topic}`);
  const m = (await res.json()) as { topics: { partitions: Part[] }[] };
  return m.topics[0].partitions[0];
}

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  ({ root, secretFile } = clusterRoot("cluster-attack", "attack-broker-credential-0123456789"));
  ports = await freePorts(9);
  await Promise.all(
    [1, 2, 3].map(async (id) => brokers.set(id, await startBroker(join(root, `n${id}`), args(id)))),
  );
}, 60_000);

/**
 * Before each test: any of brokers 1–3 that an earlier test left stopped (it failed midway) is
 * started again, so one failure does not fail every test after it.
 */
beforeEach(async () => {
  for (const id of [1, 2, 3])
    if (!brokers.has(id)) brokers.set(id, await startBroker(join(root, `n${id}`), args(id)));
}, 60_000);

afterAll(() => tearDownCluster(brokers.values(), etcd, root));

describe("cluster attack: last replica standing with a log cut short (#27c)", () => {
  it("A may not lead below committed_offset; B leads when back; every acked record survives", async () => {
    const any = () => brokers.values().next().value!;
    const created = await fetch(`${any().httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "c27", partitions: 1, config: { replica_lag_ms: 1000 } }),
    });
    expect(created.status).toBe(201);
    const p0 = await waitFor(
      "c27 led with full ISR",
      async () => {
        const s = await partitionState(any(), "c27");
        return s.leader >= 1 && s.isr.length === 3 ? s : undefined;
      },
      30_000,
    );
    const A = p0.leader;
    const [B, C] = [1, 2, 3].filter((id) => id !== A);
    brokers.get(C)!.proc.kill("SIGSTOP");
    await waitFor("ISR {A,B}", async () => {
      const s = await partitionState(brokers.get(A)!, "c27");
      return s.isr.length === 2 && !s.isr.includes(C) ? s : undefined;
    });
    const tcp = await TcpClient.connect(brokers.get(A)!.tcp);
    for (let i = 0; i < 10; i++)
      await retrying(() =>
        tcp.produce(
          "c27",
          Array.from({ length: 100 }, (_, j) => ({ value: `c-${i * 100 + j}` })),
          { partition: 0 },
        ),
      );
    await tcp.close();
    brokers.get(B)!.proc.kill("SIGSTOP");
    await waitFor("ISR {A}", async () => {
      const s = await partitionState(brokers.get(A)!, "c27");
      return s.isr.length === 1 ? s : undefined;
    });
    await brokers.get(A)!.stop("SIGKILL");
    brokers.delete(A);
    // Cut A's log back by its last 50 records (lost page cache).
    const dir = join(root, `n${A}`, "topics", "c27", "0");
    const seg = readdirSync(dir)
      .filter((f) => f.endsWith(".log"))
      .sort()
      .at(-1)!;
    const buf = readFileSync(join(dir, seg));
    const starts: number[] = [];
    for (let pos = 0; pos + 4 <= buf.length; ) {
      const len = buf.readUInt32BE(pos);
      if (len === 0) break;
      starts.push(pos);
      pos += 4 + len;
    }
    truncateSync(join(dir, seg), starts[starts.length - 50]);
    brokers.set(A, await startBroker(join(root, `n${A}`), args(A)));
    await waitFor("the partition offline", async () => {
      const s = await partitionState(brokers.get(A)!, "c27");
      return s.leader === -1 ? s : undefined;
    });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await partitionState(brokers.get(A)!, "c27")).leader).toBe(-1);
    // Not even for a moment did the restarted A lead by the state of its previous incarnation.
    const roles = brokers
      .get(A)!
      .stderr()
      .split("\n")
      .filter((l) => l.includes('"event":"replication.role"'));
    expect(roles.filter((l) => l.includes('"role":"leader"'))).toEqual([]);
    // Heal B, then C. B was paused, not restarted: whether its lease outlived the pause or not,
    // it holds every committed record and must lead (its log end is published for the election).
    brokers.get(B)!.proc.kill("SIGCONT");
    await waitFor(
      "B leads",
      async () => {
        const s = await partitionState(brokers.get(A)!, "c27");
        return s.leader === B ? s : undefined;
      },
      20_000,
    );
    brokers.get(C)!.proc.kill("SIGCONT");
    await waitFor(
      "full ISR again",
      async () => {
        const s = await partitionState(brokers.get(A)!, "c27");
        return s.isr.length === 3 ? s : undefined;
      },
      30_000,
    );
    const t = await TcpClient.connect(brokers.get(B)!.tcp);
    const seen: string[] = [];
    let offset = 0;
    for (;;) {
      const f = await t.fetch({ topic: "c27", partition: 0, offset, maxRecords: 1000 });
      if (f.records.length === 0) break;
      for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
      offset = f.nextOffset;
    }
    await t.close();
    expect(seen).toEqual(Array.from({ length: 1000 }, (_, i) => `c-${i}`));
  }, 150_000);
});

/**
 * `op`, tried again while it fails with a retriable error, for up to 30 s: a broker still
 * settling a topic it just created or a partition it just came to lead answers "retry" (seen
 * on a loaded machine).
 */
async function retrying<T>(op: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      return await op();
    } catch (err) {
      if (!(err instanceof ClientError) || !err.retriable || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

describe("cluster attack: a corrupt sealed segment on a follower (#27d)", () => {
  it("the follower cuts its log at the corrupt segment and fetches it again; led by it, nothing is missing", async () => {
    const any = () => brokers.values().next().value!;
    const created = await fetch(`${any().httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "d27", partitions: 1, config: { segment_bytes: 1024 } }),
    });
    expect(created.status).toBe(201);
    const full = (leader: number) =>
      waitFor(
        "a full ISR",
        async () => {
          const s = await partitionState(brokers.get(leader)!, "d27");
          return s.leader === leader && s.isr.length === 3 ? s : undefined;
        },
        30_000,
      );
    const A = (
      await waitFor("d27 led", async () => {
        const s = await partitionState(any(), "d27");
        return s.leader >= 1 ? s : undefined;
      })
    ).leader;
    const [B, C] = [1, 2, 3].filter((id) => id !== A);
    await full(A);
    const values = Array.from({ length: 200 }, (_, i) => `d-${String(i).padStart(4, "0")}`);
    const tcp = await TcpClient.connect(brokers.get(A)!.tcp);
    for (let i = 0; i < 200; i += 10)
      await retrying(() =>
        tcp.produce(
          "d27",
          values.slice(i, i + 10).map((value) => ({ value })),
          { partition: 0 },
        ),
      );
    await tcp.close();
    await full(A);
    // Flip the first value byte of C's second (sealed) segment; recovery skips the rest of it.
    await brokers.get(C)!.stop("SIGKILL");
    const dir = join(root, `n${C}`, "topics", "d27", "0");
    const sealed = join(
      dir,
      readdirSync(dir)
        .filter((f) => f.endsWith(".log"))
        .sort()[1],
    );
    const bytes = readFileSync(sealed);
    bytes[28] ^= 0x01;
    writeFileSync(sealed, bytes);
    brokers.set(C, await startBroker(join(root, `n${C}`), args(C)));
    await full(A);
    // Force C to lead: the other two die.
    for (const id of [A, B]) {
      await brokers.get(id)!.stop("SIGKILL");
      brokers.delete(id);
    }
    // Two leases (6 s each) run out before the controller on C elects it; under the full
    // suite's load that has taken over 20 s. On a timeout, say what C last reported.
    let last: Part | string = "no answer";
    await waitFor(
      "C leads",
      async () => {
        const s = await partitionState(brokers.get(C)!, "d27");
        last = s;
        return s.leader === C ? s : undefined;
      },
      60_000,
    ).catch((err: unknown) => {
      const events = brokers
        .get(C)!
        .stderr()
        .split("\n")
        .filter((l) => /cluster\.|replication\./.test(l))
        .slice(-15);
      throw new Error(
        `${String(err)}; C's state: ${JSON.stringify(last)}; C's log:\n${events.join("\n")}`,
      );
    });
    const t = await TcpClient.connect(brokers.get(C)!.tcp);
    const seen: string[] = [];
    for (let offset = 0; ; ) {
      const f = await retrying(() =>
        t.fetch({ topic: "d27", partition: 0, offset, maxRecords: 1000 }),
      );
      if (f.records.length === 0) break;
      for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
      offset = f.nextOffset;
    }
    await t.close();
    expect(seen).toEqual(values);
    expect(brokers.get(C)!.stderr()).toContain('"event":"replication.truncating_corrupt"');
    // The good replicas come back as followers of C and are not cut.
    for (const id of [A, B]) brokers.set(id, await startBroker(join(root, `n${id}`), args(id)));
    const back = await full(C);
    expect(back.isr.length).toBe(3);
    for (const id of [A, B]) {
      const cuts = brokers
        .get(id)!
        .stderr()
        .split("\n")
        .filter((l) => l.includes("replication.truncating") && l.includes('"d27/0"'));
      expect(cuts).toEqual([]);
    }
  }, 150_000);
});

describe("cluster attack: a paused broker whose node id a replacement took (attack11 F4)", () => {
  it("resumed, it is refused, stops replicating and exits 1; its successor rejoins the ISR by its own fetches", async () => {
    const any = () => brokers.values().next().value!;
    const created = await fetch(`${any().httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "f4", partitions: 1, config: { replica_lag_ms: 1000 } }),
    });
    expect(created.status).toBe(201);
    const p0 = await waitFor(
      "f4 led with full ISR",
      async () => {
        const s = await partitionState(any(), "f4");
        return s.leader >= 1 && s.isr.length === 3 ? s : undefined;
      },
      30_000,
    );
    const leader = p0.leader;
    const X = [1, 2, 3].find((id) => id !== leader)!;
    const tcp = await TcpClient.connect(brokers.get(leader)!.tcp);
    await retrying(() =>
      tcp.produce(
        "f4",
        Array.from({ length: 100 }, (_, j) => ({ value: `f4-${j}` })),
        { partition: 0 },
      ),
    );
    // Old X paused; etcd drops its registration (as when its lease runs out, without the wait).
    const old = brokers.get(X)!;
    old.proc.kill("SIGSTOP");
    const etcdClient = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 1000 });
    const reg = (await etcdClient.get(`/es-broker/brokers/${X}`))!;
    await etcdClient.leaseRevoke(reg.lease);
    // A replacement on an empty data directory takes node id X.
    const [http, port] = await freePorts(2);
    const replacement = await startBroker(join(root, `n${X}-replacement`), [
      ...["--http-port", String(http), "--tcp-port", String(port)],
      ...["--cluster", etcd.clusterUrl, "--node-id", String(X)],
      ...["--advertise-tcp", `127.0.0.1:${port}`, "--advertise-http", `http://127.0.0.1:${http}`],
      ...["--cluster-secret-file", secretFile],
    ]);
    brokers.set(X, replacement);
    old.proc.kill("SIGCONT");
    const code = await Promise.race([
      old.stop("SIGCONT"),
      new Promise((r) => setTimeout(() => r("still running"), 15_000)),
    ]);
    expect(code).toBe(1);
    expect(old.stderr()).toContain('"event":"cluster.registration_refused"');
    // Its own message, not a starting broker's advice (attack15 F7).
    expect(old.stderr()).toContain(
      `Node ${X} was taken over by a broker on another data directory`,
    );
    // The successor joins the ISR only once it holds every record itself.
    const back = await waitFor(
      "full ISR with the replacement",
      async () => {
        const s = await partitionState(brokers.get(leader)!, "f4");
        return s.isr.length === 3 ? s : undefined;
      },
      30_000,
    );
    expect(back.isr).toContain(X);
    await tcp.close();
    await etcdClient.close();
  }, 60_000);
});

describe("cluster attack: an ISR member without the committed records is elected (issue #16, window 2)", () => {
  it("it refuses to lead; another ISR member leads at once; every acked record is there", async () => {
    const any = () => brokers.values().next().value!;
    const created = await fetch(`${any().httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      // A long replica_lag_ms: the leader keeps a member that does not fetch in the ISR.
      body: JSON.stringify({ name: "w2", partitions: 1, config: { replica_lag_ms: 600_000 } }),
    });
    expect(created.status).toBe(201);
    const p0 = await waitFor(
      "w2 led with full ISR",
      async () => {
        const s = await partitionState(any(), "w2");
        return s.leader >= 1 && s.isr.length === 3 ? s : undefined;
      },
      30_000,
    );
    const L = p0.leader;
    // X comes before Y in replica order: the controller elects X first from an ISR of both.
    const [X, Y] = p0.replicas.filter((id) => id !== L);
    const tcp = await TcpClient.connect(brokers.get(L)!.tcp);
    const values = Array.from({ length: 100 }, (_, j) => `w2-${j}`);
    await retrying(() =>
      tcp.produce(
        "w2",
        values.map((value) => ({ value })),
        { partition: 0 },
      ),
    );
    await tcp.close();
    // X's disk is replaced: a clean stop, an empty data directory, and a credential its leader
    // refuses, so its log stays empty while it is registered live.
    expect(await brokers.get(X)!.stop("SIGTERM")).toBe(0);
    const wrongSecret = join(root, "w2-wrong.secret");
    writeFileSync(wrongSecret, "not-the-cluster-credential-0123456789\n", { mode: 0o600 });
    brokers.set(
      X,
      await startBroker(
        join(root, `w2-n${X}`),
        args(X).map((a) => (a === secretFile ? wrongSecret : a)),
      ),
    );
    const etcdClient = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000 });
    const key = "/es-broker/partitions/w2/0";
    // The controller has recorded X's new incarnation (and so took X out of the ISR).
    await waitFor(
      "the controller to record X's new incarnation",
      async () => {
        const reg = await etcdClient.get(`/es-broker/brokers/${X}`);
        const inc = await etcdClient.get("/es-broker/incarnations");
        const state = await etcdClient.get(key);
        if (reg === null || inc === null || state === null) return undefined;
        const incarnation = (JSON.parse(reg.value) as { incarnation: string }).incarnation;
        const recorded = (JSON.parse(inc.value) as Record<string, string>)[String(X)];
        const isr = (JSON.parse(state.value) as { isr: number[] }).isr;
        return recorded === incarnation && !isr.includes(X) ? true : undefined;
      },
      30_000,
    );
    // What a stale credit (window 1) would leave: X in the ISR, committed_offset at the high
    // watermark it never held.
    const kv = (await etcdClient.get(key))!;
    const state = JSON.parse(kv.value) as { isr: number[]; committed_offset: number };
    const stale = {
      ...state,
      isr: p0.replicas.filter((id) => id === X || state.isr.includes(id)),
      committed_offset: values.length,
    };
    const written = await etcdClient.txn({
      compare: [{ key, target: "mod_revision", result: "equal", number: kv.modRevision }],
      success: [{ put: { key, value: JSON.stringify(stale) } }],
    });
    expect(written.succeeded).toBe(true);
    await etcdClient.close();
    // The leader dies. The controller counts it gone and elects X, the first ISR member.
    await brokers.get(L)!.stop("SIGKILL");
    brokers.delete(L);
    const xLed = () =>
      brokers
        .get(X)!
        .stderr()
        .split("\n")
        .some(
          (l) =>
            l.includes('"event":"replication.role"') &&
            l.includes('"role":"leader"') &&
            l.includes('"partition":"w2/0"'),
        );
    await waitFor(
      "Y to lead w2, or X to lead it",
      async () =>
        xLed() || (await partitionState(brokers.get(Y)!, "w2")).leader === Y ? true : undefined,
      40_000,
    );
    expect(xLed()).toBe(false);
    expect(brokers.get(X)!.stderr()).toContain('"event":"replication.leadership_refused"');
    const after = await partitionState(brokers.get(Y)!, "w2");
    expect(after.leader).toBe(Y);
    expect(after.isr).not.toContain(X);
    // Every acknowledged record is there, at its offset.
    const t = await TcpClient.connect(brokers.get(Y)!.tcp);
    const seen: string[] = [];
    let offset = 0;
    await retrying(async () => {
      for (;;) {
        const f = await t.fetch({ topic: "w2", partition: 0, offset, maxRecords: 1000 });
        if (f.records.length === 0) break;
        for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
        offset = f.nextOffset;
      }
    });
    await t.close();
    expect(seen).toEqual(values);
  }, 120_000);
});
