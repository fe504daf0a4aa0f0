/**
 * attack13 F1, reproduction B, through the real processes (node target only; targets.ts): after
 * a SIGKILL of every broker, one broker is started first on an older copy of its own data
 * directory. Its log end still reaches `committed_offset` (written at ISR changes, not at every
 * acknowledgement), so before the fix it was elected from the ELR and the brokers holding the
 * newer acknowledged records truncated to it. Now the partition stays offline until every ELR
 * member is back, and the longest log leads: every acknowledged record survives
 * (docs/cluster.md "Partition state", "Replacing a broker's disk, backing up etcd").
 */
import { cpSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { waitFor } from "../helpers/poll.ts";
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

const start = async (id: number) =>
  brokers.set(id, await startBroker(join(root, `n${id}`), args(id)));

interface StoredState {
  leader: number;
  leader_epoch: number;
  isr: number[];
  elr: number[];
  committed_offset: number;
}

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  ({ root, secretFile } = clusterRoot("cluster-outage", "outage-broker-credential-0123456789"));
  ports = await freePorts(9);
  for (const id of [1, 2, 3]) await start(id);
}, 60_000);

afterAll(() => tearDownCluster(brokers.values(), etcd, root));

describe("cluster: a whole-cluster outage, one broker restored from an older copy (attack13 F1 B)", () => {
  it("the copy is never elected over the newer records; every acknowledged record survives", async () => {
    const etcdClient = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000 });
    const key = "/es-broker/partitions/b1/0";
    const stored = async (): Promise<StoredState | undefined> => {
      const kv = await etcdClient.get(key);
      return kv === null ? undefined : (JSON.parse(kv.value) as StoredState);
    };
    const created = await fetch(`${brokers.get(1)!.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "b1", partitions: 1 }),
    });
    expect(created.status).toBe(201);
    const fullIsr = () =>
      waitFor(
        "b1 led with its full ISR",
        async () => {
          const s = await stored();
          return s !== undefined && s.leader >= 1 && s.isr.length === 3 ? s : undefined;
        },
        30_000,
      );
    const first = await fullIsr();
    const L = first.leader;
    const X = [1, 2, 3].find((id) => id !== L)!; // the broker whose data directory is copied
    const produce = async (from: number, to: number) => {
      const tcp = await TcpClient.connect(brokers.get(L)!.tcp);
      try {
        for (let i = from; i < to; i += 25)
          await retrying(() =>
            tcp.produce(
              "b1",
              Array.from({ length: 25 }, (_, j) => ({ value: `v${i + j}` })),
              { partition: 0 },
            ),
          );
      } finally {
        await tcp.close();
      }
    };
    await produce(0, 100);
    // X stops cleanly; its data directory is copied; it comes back and catches up.
    expect(await brokers.get(X)!.stop("SIGTERM")).toBe(0);
    brokers.delete(X);
    cpSync(join(root, `n${X}`), join(root, `n${X}.copy`), { recursive: true });
    await start(X);
    const rejoined = await fullIsr();
    expect(rejoined.leader).toBe(L);
    // 100 more, acknowledged by all three; no ISR change, so committed_offset stays below 200.
    await produce(100, 200);
    const before = (await stored())!;
    expect(before.committed_offset).toBeLessThan(200);
    // Every broker is SIGKILLed; the registrations expire (6 s lease) with no controller alive.
    await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
    brokers.clear();
    await waitFor(
      "every registration and the controller key expired",
      async () =>
        (await etcdClient.list("/es-broker/brokers/")).kvs.length === 0 &&
        (await etcdClient.get("/es-broker/controller")) === null
          ? true
          : undefined,
      30_000,
    );
    // X's data directory goes back to the copy (100 records, which still reach committed_offset).
    rmSync(join(root, `n${X}`), { recursive: true, force: true });
    renameSync(join(root, `n${X}.copy`), join(root, `n${X}`));
    rmSync(join(root, `n${X}`, "broker.lock"), { force: true });
    // X is back first. Once the controller's grace for the others is over, all three are in the
    // ELR and the partition is offline: nobody may be elected while two members are missing.
    await start(X);
    const offline = await waitFor(
      "b1 offline with every replica eligible",
      async () => {
        const s = await stored();
        return s !== undefined && s.leader === -1 && s.elr.length === 3 ? s : undefined;
      },
      30_000,
    );
    expect(offline.isr).toEqual([]);
    // The other two come back one by one; with one still missing, the partition stays offline.
    const [Y, Z] = [1, 2, 3].filter((id) => id !== X);
    await start(Y);
    await new Promise((r) => setTimeout(r, 5000));
    expect((await stored())!.leader).toBe(-1);
    await start(Z);
    const elected = await waitFor(
      "b1 led again",
      async () => {
        const s = await stored();
        return s !== undefined && s.leader !== -1 ? s : undefined;
      },
      30_000,
    );
    expect(elected.leader).not.toBe(X);
    // What each broker published for the election: its log end and the leader epoch of its last
    // record (every record here was written in epoch 0, under leader L).
    for (const id of [1, 2, 3]) {
      const kv = await etcdClient.get(`/es-broker/log_ends/${id}`);
      const v = JSON.parse(kv!.value) as {
        log_end_offsets: Record<string, number>;
        last_epochs: Record<string, number>;
      };
      expect(v.log_end_offsets["b1/0"], `node ${id}`).toBe(id === X ? 100 : 200);
      expect(v.last_epochs["b1/0"], `node ${id}`).toBe(0);
    }
    // Every acknowledged record is there, in order, once the ISR is full again.
    await fullIsr();
    const leader = brokers.get((await stored())!.leader)!;
    const t = await TcpClient.connect(leader.tcp);
    const seen: string[] = [];
    let offset = 0;
    await retrying(async () => {
      for (;;) {
        const f = await t.fetch({ topic: "b1", partition: 0, offset, maxRecords: 1000 });
        if (f.records.length === 0) break;
        for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
        offset = f.nextOffset;
      }
    });
    await t.close();
    await etcdClient.close();
    expect(seen).toEqual(Array.from({ length: 200 }, (_, i) => `v${i}`));
    // No broker truncated an acknowledged record: X truncated nothing either (its copy is a
    // prefix of the log it fetched again).
    for (const b of brokers.values()) {
      const truncations = b
        .stderr()
        .split("\n")
        .filter((l) => l.includes('"event":"replication.truncating"'))
        .map((l) => JSON.parse(l) as { truncate_to: number });
      for (const tr of truncations) expect(tr.truncate_to).toBeGreaterThanOrEqual(200);
    }
  }, 180_000);
});

/** `op`, tried again while it fails with a retriable error, for up to 30 s. */
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
