/**
 * cluster/membership.ts against a real three-member etcd: the cluster's identity, registrations
 * on leases, the start-up refusals of issue #16 ("Bad input"), and retries while etcd is away.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  brokerKey,
  ClusterJoinError,
  type JoinOptions,
  joinCluster,
  type Membership,
  parseRegistration,
} from "../../src/cluster/membership.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";

let etcd: EtcdCluster;
let client: EtcdHttpClient;
let n = 0;
const joined: Membership[] = [];

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 1000 });
});

afterAll(async () => {
  await Promise.all(joined.map((m) => m.close()));
  await client?.close();
  await etcd?.stop();
});

/** Join options for node `nodeId` of a cluster of its own (a fresh prefix per test). */
function options(prefix: string, nodeId: number, patch: Partial<JoinOptions> = {}): JoinOptions {
  return {
    etcd: client,
    clock: systemClock,
    prng: new Prng(nodeId),
    logger: new MemoryLogger(),
    prefix,
    nodeId,
    advertise: { tcp: `127.0.0.1:${9000 + nodeId}`, http: `http://127.0.0.1:${8000 + nodeId}` },
    dataDirId: `dir-${nodeId}`,
    dataDir: null,
    newClusterId: `cluster-${prefix}`,
    leaseTtlSeconds: 2,
    ...patch,
  };
}

async function join(o: JoinOptions): Promise<Membership> {
  const m = await joinCluster(o);
  joined.push(m);
  return m;
}

const freshPrefix = () => `/es-broker-test-${process.pid}-${n++}`;

describe("membership: joining", () => {
  it("the first broker names the cluster; the others join it and register on their own leases", async () => {
    const prefix = freshPrefix();
    const a = await join(options(prefix, 1));
    const b = await join(options(prefix, 2, { newClusterId: "ignored" }));
    expect(a.clusterId).toBe(`cluster-${prefix}`);
    expect(b.clusterId).toBe(a.clusterId);
    const kvs = (await client.list(`${prefix}/brokers/`)).kvs;
    const regs = kvs.map(parseRegistration);
    expect(regs.map((r) => [r.node_id, r.tcp, r.http, r.incarnation])).toEqual([
      [1, "127.0.0.1:9001", "http://127.0.0.1:8001", a.leaseId],
      [2, "127.0.0.1:9002", "http://127.0.0.1:8002", b.leaseId],
    ]);
    expect(kvs.map((kv) => kv.lease)).toEqual([a.leaseId, b.leaseId]);
  });

  it("a registration outlives several lease TTLs while renewed, and goes at once on close", async () => {
    const prefix = freshPrefix();
    const m = await join(options(prefix, 1, { leaseTtlSeconds: 1 }));
    await new Promise((r) => setTimeout(r, 2500));
    expect(m.live).toBe(true);
    expect(await client.get(brokerKey(prefix, 1))).not.toBeNull();
    await m.close();
    expect(await client.get(brokerKey(prefix, 1))).toBeNull();
  });

  it("a broker whose lease was lost behind its back reports it and registers again, as the same incarnation", async () => {
    const prefix = freshPrefix();
    const m = await join(options(prefix, 1, { leaseTtlSeconds: 1 }));
    const changes: boolean[] = [];
    m.onLiveChange((live) => changes.push(live));
    const first = m.leaseId;
    await client.leaseRevoke(first);
    const deadline = Date.now() + 5000;
    while (changes.length < 2) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(changes).toEqual([false, true]);
    expect(m.leaseId).not.toBe(first);
    // Its process and logs never stopped: not a restart (docs/cluster.md "Riding out a lost lease").
    const kv = (await client.get(brokerKey(prefix, 1)))!;
    expect(kv.lease).toBe(m.leaseId);
    expect(parseRegistration(kv)).toMatchObject({
      incarnation: first,
      registered_revision: m.registeredRevision,
    });
  });

  it("a broker whose node id another process registered while its lease was lost is refused for good and never registers again (attack11 F4)", async () => {
    const prefix = freshPrefix();
    const old = await join(options(prefix, 1, { leaseTtlSeconds: 1 }));
    const refusals: Error[] = [];
    old.onRefused((err) => refusals.push(err));
    // Paused past its lease: etcd drops its registration and a replacement (an empty disk) joins.
    await client.leaseRevoke(old.leaseId);
    const replacement = await join(options(prefix, 1, { dataDirId: "dir-replacement" }));
    const deadline = Date.now() + 5000;
    while (refusals.length === 0) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(old.refused).toBe(refusals[0]);
    expect(refusals[0].message).toMatch(
      /^Node 1 was taken over by a broker on another data directory/,
    );
    expect(old.live).toBe(false);
    // It tries no more, and its close names no departure: node 1 is the replacement's.
    await new Promise((r) => setTimeout(r, 800));
    await old.close();
    const reg = parseRegistration((await client.get(brokerKey(prefix, 1)))!);
    expect(reg.incarnation).toBe(replacement.leaseId);
    expect(await client.get(`${prefix}/departed/1`)).toBeNull();
    expect(refusals).toHaveLength(1);
  });

  it("a restart on the same data directory takes over its old registration at once, as a new incarnation", async () => {
    const prefix = freshPrefix();
    const first = await join(options(prefix, 1, { leaseTtlSeconds: 30 }));
    // The old process died without revoking (SIGKILL): its lease would live 30 s more.
    const second = await join(
      options(prefix, 1, {
        leaseTtlSeconds: 30,
        dataDir: { clusterId: first.clusterId, nodeId: 1 },
      }),
    );
    expect(second.leaseId).not.toBe(first.leaseId);
    const reg = parseRegistration((await client.get(brokerKey(prefix, 1)))!);
    expect(reg.incarnation).toBe(second.leaseId);
    expect(await client.leaseKeepAlive(first.leaseId)).toBe(0);
  });
});

describe("membership: refusals (issue #16, bad input)", () => {
  const refused = async (o: JoinOptions) => {
    const err = await joinCluster(o).catch((e) => e);
    expect(err).toBeInstanceOf(ClusterJoinError);
    return (err as Error).message;
  };

  it("a TCP listener with TLS is refused while a live broker's is plain, and the reverse (never mixed)", async () => {
    const prefix = freshPrefix();
    const plain = await join(options(prefix, 1));
    const tls = (nodeId: number) =>
      options(prefix, nodeId, {
        advertise: { tcp: `127.0.0.1:${9000 + nodeId}`, http: `https://h:${nodeId}`, tls: true },
      });
    expect(await refused(tls(2))).toMatch(
      /^Cannot join the cluster as node 2: this broker's TCP listener serves TLS, but node 1 \(tcp 127\.0\.0\.1:9001\) serves plain TCP\./,
    );
    expect(await client.get(brokerKey(prefix, 2))).toBeNull();
    await plain.close();
    // Once the plain broker is gone, a TLS one joins; its registration says so, and a plain one is refused.
    await join(tls(2));
    expect(parseRegistration((await client.get(brokerKey(prefix, 2)))!).tls).toBe(true);
    expect(await refused(options(prefix, 3))).toMatch(
      /this broker's TCP listener serves plain TCP, but node 2 \(tcp 127\.0\.0\.1:9002\) serves TLS/,
    );
    await join(tls(3));
  });

  it("a duplicate node id with another data directory is refused, naming the running broker", async () => {
    const prefix = freshPrefix();
    await join(options(prefix, 1));
    const message = await refused(options(prefix, 1, { dataDirId: "other-dir" }));
    expect(message).toBe(
      "Cannot join the cluster as node 1: node 1 is registered by a broker with another data directory (tcp 127.0.0.1:9001, http http://127.0.0.1:8001): if that broker runs, give each broker its own --node-id; if it was killed or lost its disk, its registration lasts until its etcd lease expires (about 10 s with the default lease): start this one again after that, with the same --node-id",
    );
    // The refused attempt left no lease or registration of its own behind.
    const reg = parseRegistration((await client.get(brokerKey(prefix, 1)))!);
    expect(reg.data_dir_id).toBe("dir-1");
  });

  it("a copy of a live broker's data directory at other addresses is refused, and takes nothing (attack15 F1)", async () => {
    const prefix = freshPrefix();
    const live = await join(options(prefix, 2, { leaseTtlSeconds: 30 }));
    const copy = options(prefix, 2, {
      leaseTtlSeconds: 30,
      dataDir: { clusterId: live.clusterId, nodeId: 2 },
      advertise: { tcp: "10.0.0.9:9092", http: "http://10.0.0.9:8080" },
    });
    expect(await refused(copy)).toMatch(
      /^Cannot join the cluster as node 2: node 2 is registered with this data directory's id \(cluster\.json\) at other addresses \(tcp 127\.0\.0\.1:9002, http http:\/\/127\.0\.0\.1:8002; this broker advertises tcp 10\.0\.0\.9:9092, http http:\/\/10\.0\.0\.9:8080\): either a copy of this data directory runs there/,
    );
    // The live broker keeps its registration and its lease (before, the copy revoked it, and
    // the two took the registration from each other every ~2 s).
    const reg = parseRegistration((await client.get(brokerKey(prefix, 2)))!);
    expect(reg.incarnation).toBe(live.leaseId);
    expect(await client.leaseKeepAlive(live.leaseId)).toBeGreaterThan(0);
  });

  it("a data directory from another cluster is refused", async () => {
    const prefix = freshPrefix();
    const a = await join(options(prefix, 1));
    const message = await refused(
      options(prefix, 2, { dataDir: { clusterId: "elsewhere", nodeId: 2 } }),
    );
    expect(message).toBe(
      `Cannot join the cluster: the data directory belongs to cluster "elsewhere", but etcd under "${prefix}" holds cluster "${a.clusterId}"; give this broker an empty data directory or the etcd of its own cluster`,
    );
  });

  it("a data directory of another node id is refused", async () => {
    const prefix = freshPrefix();
    const a = await join(options(prefix, 1));
    const message = await refused(
      options(prefix, 2, { dataDir: { clusterId: a.clusterId, nodeId: 3 } }),
    );
    expect(message).toMatch(
      /^Cannot join the cluster as node 2: the data directory belongs to node 3 of cluster .*start it with --node-id 3/,
    );
  });

  it("a data directory of a cluster etcd does not know is refused (etcd wiped, or the wrong etcd)", async () => {
    const prefix = freshPrefix();
    const message = await refused(
      options(prefix, 1, { dataDir: { clusterId: "c-old", nodeId: 1 } }),
    );
    expect(message).toContain('etcd holds no es-broker cluster under "');
    expect(await client.get(`${prefix}/cluster_id`)).toBeNull();
  });
});

describe("membership: etcd unreachable at start-up", () => {
  it("retries with backoff, logging why, and joins once etcd is back", async () => {
    const prefix = freshPrefix();
    await Promise.all(etcd.members.map((m) => m.kill("SIGKILL")));
    const logger = new MemoryLogger();
    const joining = joinCluster(options(prefix, 1, { logger, retryMaxMs: 400 }));
    try {
      await new Promise((r) => setTimeout(r, 1500));
      const failures = logger.named("cluster.etcd_unreachable");
      expect(failures.length).toBeGreaterThanOrEqual(2);
      expect(String(failures[0].error)).toMatch(
        /^Cannot reach etcd to join the cluster: Cannot .*: no etcd endpoint answered .*; retrying in \d+ ms$/,
      );
      const delays = failures.map((f) => f.retry_in_ms as number);
      expect(delays[1]).toBeGreaterThan(delays[0]);
    } finally {
      await Promise.all(etcd.members.map((m) => m.restart()));
    }
    const m = await joining;
    joined.push(m);
    expect(m.live).toBe(true);
    expect(await client.get(brokerKey(prefix, 1))).not.toBeNull();
  });
});
