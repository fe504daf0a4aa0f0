/**
 * Riding out etcd leader changes (docs/cluster.md "Riding out a lost lease"; attack finding F6),
 * through the real processes (node target only: targets.ts): three brokers on a three-member
 * etcd. The etcd leader is SIGSTOPped a few times (two members up throughout), which etcd 3.4
 * answers by revoking leases (etcd-io/etcd#15247); then every broker's lease is revoked at once
 * through etcd's API, as that old leader does, so the lost-lease path runs on every run. Throughout:
 * no ISR shrinks and no leader moves (a watch on the partition keys sees no change), and
 * produces to min-ISR-2 partitions keep being acknowledged.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ClusterClient, mayBeStored } from "../../src/client/client.ts";
import type { EtcdEvent } from "../../src/cluster/etcd.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { waitFor } from "../helpers/poll.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

const prefix = "/es-broker";
let etcd: EtcdCluster;
let client: EtcdHttpClient;
let root: string;
const brokers = new Map<number, BrokerProcess>();

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 1000, watchCheckMs: 1000 });
  root = mkdtempSync(join(tmpdir(), "es-broker-cluster-lease-"));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "lease-test-broker-credential-0123456789\n", { mode: 0o600 });
  const ports = await freePorts(6);
  await Promise.all(
    [1, 2, 3].map(async (id) => {
      const http = ports[2 * id - 2];
      const tcp = ports[2 * id - 1];
      brokers.set(
        id,
        await startBroker(join(root, `node${id}`), [
          "--http-port",
          String(http),
          "--tcp-port",
          String(tcp),
          "--cluster",
          etcd.clusterUrl,
          "--node-id",
          String(id),
          "--advertise-tcp",
          `127.0.0.1:${tcp}`,
          "--advertise-http",
          `http://127.0.0.1:${http}`,
          "--cluster-secret-file",
          secretFile,
        ]),
      );
    }),
  );
}, 60_000);

afterAll(async () => {
  await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
  await client?.close();
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

/** The index of the member etcd's leader is, asking each running member. */
async function etcdLeader(): Promise<number> {
  return waitFor("an etcd leader", async () => {
    for (const [i, m] of etcd.members.entries()) {
      const one = new EtcdHttpClient([m.clientUrl], { requestTimeoutMs: 500 });
      try {
        const s = await one.status();
        if (s.leaderId !== "0" && s.leaderId === s.memberId) return i;
      } catch {
      } finally {
        await one.close();
      }
    }
    return undefined;
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `cluster.lease_lost` lines every broker has logged so far. */
const leasesLost = () =>
  [...brokers.values()].reduce(
    (n, b) => n + (b.stderr().match(/"cluster\.lease_lost"/g)?.length ?? 0),
    0,
  );

describe("cluster: a lost membership lease is not a restart", () => {
  it("etcd leader stalls and revoked leases shrink no ISR, move no leader, and produces keep being acknowledged", async () => {
    const res = await fetch(`${brokers.get(1)!.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "steady", partitions: 3 }),
    });
    expect(res.status).toBe(201);
    const created = await client.list(`${prefix}/partitions/steady/`);
    expect(created.kvs).toHaveLength(3);
    // Every change of a partition state from here on.
    const changes: EtcdEvent[] = [];
    const watch = client.watch(
      { key: `${prefix}/partitions/`, prefix: true, startRevision: created.revision + 1 },
      { onEvents: (events) => changes.push(...events) },
    );
    const producer = await ClusterClient.connect({
      bootstrap: [...brokers.values()].map((b) => b.tcp),
      retryTimeoutMs: 30_000,
    });
    // One producer per partition, each sending its next record once the last is acknowledged.
    let producing = true;
    const acked = [0, 0, 0];
    const failures: string[] = [];
    const uncertain = [0, 0, 0];
    let longestGapMs = 0;
    const loops = [0, 1, 2].map(async (partition) => {
      await waitFor("the partition's leader", async () =>
        producer
          .produce("steady", [{ value: "warm-up" }], { partition })
          .then(() => true)
          .catch(() => undefined),
      );
      let last = Date.now();
      for (let i = 0; producing; i++) {
        try {
          await producer.produce("steady", [{ value: `p${partition}-${i}` }], { partition });
          acked[partition]++;
          longestGapMs = Math.max(longestGapMs, Date.now() - last);
          last = Date.now();
        } catch (err) {
          // Appended, then refused while the leader's lease was not live: a plain produce is not
          // sent again (it may be stored: docs/cluster.md "What is guaranteed, and what is not").
          if (mayBeStored(err)) uncertain[partition]++;
          else failures.push(`partition ${partition}: ${(err as Error).message}`);
        }
        await sleep(20);
      }
    });
    try {
      await sleep(1000);
      // Phase 1: the etcd leader stalls twice for 5 s (quorum kept), as in F6.
      for (let round = 0; round < 2; round++) {
        const leader = etcd.members[await etcdLeader()];
        await leader.kill("SIGSTOP");
        await sleep(5000);
        leader.process?.kill("SIGCONT");
        await sleep(1500);
      }
      // Phase 2: every broker's lease revoked at once through etcd, as etcd's old leader does:
      // the brokers lose their registrations (and the controller its key) together.
      const registrations = await client.list(`${prefix}/brokers/`);
      expect(registrations.kvs).toHaveLength(3);
      const lostBefore = leasesLost();
      await Promise.all(registrations.kvs.map((kv) => client.leaseRevoke(kv.lease)));
      await waitFor("every broker registered again, on a new lease", async () => {
        const now = await client.list(`${prefix}/brokers/`);
        const old = new Set(registrations.kvs.map((kv) => kv.lease));
        return now.kvs.length === 3 && now.kvs.every((kv) => !old.has(kv.lease)) ? true : undefined;
      });
      expect(leasesLost()).toBeGreaterThanOrEqual(lostBefore + 3);
      // Each registered again as the same incarnation.
      const again = await client.list(`${prefix}/brokers/`);
      for (const kv of again.kvs) {
        const before = registrations.kvs.find((b) => b.key === kv.key)!;
        expect(JSON.parse(kv.value).incarnation).toBe(JSON.parse(before.value).incarnation);
      }
      // Past the controller's grace (3 s), with produces still going.
      await sleep(4000);
      const ackedBefore = [...acked];
      await sleep(1000);
      expect(acked.every((n, p) => n > ackedBefore[p])).toBe(true);
    } finally {
      producing = false;
      await Promise.all(loops);
      await producer.close();
      await watch.cancel();
    }
    const lost = leasesLost();
    console.log(
      `cluster-lease: ${lost} lease losses, ${acked.join("/")} records acknowledged, ${uncertain.join("/")} refused after the append, longest wait for an ack ${longestGapMs} ms`,
    );
    expect(failures).toEqual([]);
    expect(acked.every((n) => n > 20)).toBe(true);
    // No partition state changed: no ISR shrank, no leader moved, no epoch was bumped.
    expect(
      changes.map((e) => `${e.type} ${e.kv.key} ${e.kv.value}`),
      "partition state changes",
    ).toEqual([]);
    for (const kv of (await client.list(`${prefix}/partitions/steady/`)).kvs) {
      const s = JSON.parse(kv.value);
      expect(s.isr).toEqual(s.replicas);
      expect(s.leader_epoch).toBe(0);
    }
    for (const b of brokers.values()) expect(b.proc.exitCode).toBeNull();
  }, 90_000);
});
