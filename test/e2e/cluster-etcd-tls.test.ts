/**
 * Three brokers on a three-member etcd that serves TLS only, requires client certificates and has
 * authentication on, with tokens that expire after 1 s unused (so every lease renewal, every 2 s,
 * finds its token gone and authenticates again) (docs/cluster.md "etcd with TLS and
 * authentication"; node target only: `etcd-tls.test.ts` covers the etcd client on every target).
 * A replicated topic takes acknowledged records, a SIGKILLed leader is replaced, and no
 * acknowledged record is lost; the etcd password appears in no broker's output. The etcd options'
 * usage errors.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ClusterMetadata } from "../../src/broker/types.ts";
import { ClusterClient, IdempotentProducer, TcpClient } from "../../src/client/client.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { waitFor } from "../helpers/poll.ts";
import { type BrokerProcess, runCli, startBroker } from "./harness.ts";
import { makeClientLeaf, makePki } from "./pki.ts";

const password = "cluster-etcd-pw-0c4e7a91";
let etcd: EtcdCluster;
let root: string;
let ports: number[];
let etcdArgs: string[];
const brokers = new Map<number, BrokerProcess>();

async function start(id: number): Promise<void> {
  const [http, tcp] = [ports[2 * id - 2], ports[2 * id - 1]];
  brokers.set(
    id,
    await startBroker(join(root, `n${id}`), [
      ...["--http-port", String(http), "--tcp-port", String(tcp)],
      ...["--cluster", etcd.clusterUrl, "--node-id", String(id), ...etcdArgs],
      ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
    ]),
  );
}

async function metadata(b: BrokerProcess, topic: string): Promise<ClusterMetadata> {
  const res = await fetch(`${b.httpUrl}/v1/cluster?topic=${topic}`);
  expect(res.status).toBe(200);
  return (await res.json()) as ClusterMetadata;
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "es-broker-cluster-etcd-tls-"));
  const pki = makePki(join(root, "pki"));
  const client = makeClientLeaf(pki, "etcd-client", "/O=es-broker");
  const passwordFile = join(root, "etcd.password");
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  etcd = await startEtcdCluster({
    size: 3,
    tls: { ...pki.server, ca: pki.ca, clientCertAuth: true, client },
    auth: {
      rootPassword: "root-pw-cluster",
      users: [{ name: "es-broker", password, prefix: "/es-broker/" }],
      tokenTtlSeconds: 1,
    },
  });
  etcdArgs = [
    ...["--cluster-etcd-ca", pki.ca, "--cluster-etcd-cert", client.cert],
    ...["--cluster-etcd-key", client.key, "--cluster-etcd-user", "es-broker"],
    ...["--cluster-etcd-password-file", passwordFile],
  ];
  ports = await freePorts(6);
  await Promise.all([1, 2, 3].map(start));
}, 60_000);

afterAll(async () => {
  await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("cluster mode with etcd over TLS and authentication", () => {
  it("replicates, fails over once when the leader is SIGKILLed, and loses no acknowledged record", async () => {
    const router = await ClusterClient.connect({
      bootstrap: [...brokers.values()].map((b) => b.tcp),
      retryTimeoutMs: 30_000,
    });
    await router.createTopic({ name: "guarded", partitions: 1, config: { replication_factor: 3 } });
    const first = brokers.get(1)!;
    const before = await waitFor("the partition's ISR is full", async () => {
      const m = await metadata(first, "guarded");
      return m.topics[0]?.partitions[0]?.isr.length === 3 ? m : undefined;
    });
    const p0 = before.topics[0].partitions[0];
    const victim = p0.leader;
    const other = [1, 2, 3].find((id) => id !== victim)!;
    const producer = new IdempotentProducer({
      connect: () => TcpClient.connect(brokers.get(other)!.tcp),
      router,
      producerId: "etcd-tls-failover",
    });
    const acked: string[] = [];
    const send = async (value: string) => {
      await producer.send("guarded", [{ value }], { partition: 0 });
      acked.push(value);
    };
    try {
      // Past a token's 1 s: the brokers have authenticated again meanwhile.
      for (let i = 0; i < 20; i++) await send(`before-${i}`);
      await new Promise((r) => setTimeout(r, 1500));
      await brokers.get(victim)!.stop("SIGKILL");
      brokers.delete(victim);
      await send("after-0");
      for (let i = 1; i < 10; i++) await send(`after-${i}`);
      const survivor = brokers.get(other)!;
      const after = await waitFor("the victim left the ISR", async () => {
        const m = await metadata(survivor, "guarded");
        return m.topics[0].partitions[0].isr.includes(victim) ? undefined : m;
      });
      const p = after.topics[0].partitions[0];
      expect(p.leader).not.toBe(victim);
      expect(p.leader_epoch).toBe(p0.leader_epoch + 1);
      const seen: string[] = [];
      let offset = 0;
      for (;;) {
        const f = await router.fetch({ topic: "guarded", partition: 0, offset, maxRecords: 100 });
        if (f.records.length === 0) break;
        for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
        offset = f.nextOffset;
      }
      expect(seen).toEqual(acked);
    } finally {
      await producer.close();
      await router.close();
    }
    for (const b of brokers.values()) {
      expect(b.stderr()).not.toContain(password);
      // Re-authentication is silent: no etcd request failed for a stale token.
      expect(b.stderr()).not.toMatch(/invalid auth token/);
    }
  }, 60_000);

  it("refuses etcd options that do not go together, before touching anything", async () => {
    const serve = ["serve", "--data-dir", join(root, "usage")];
    const node = ["--node-id", "9", "--advertise-tcp", "127.0.0.1:1"];
    const cases: [string[], RegExp][] = [
      [
        ["--cluster", "etcd://127.0.0.1:1", "--cluster-etcd-ca", "ca.pem"],
        /--cluster-etcd-ca needs --cluster etcds:\/\//,
      ],
      [
        ["--cluster", "etcds://127.0.0.1:1", "--cluster-etcd-cert", "c.pem"],
        /--cluster-etcd-cert and --cluster-etcd-key go together/,
      ],
      [
        ["--cluster", "etcds://127.0.0.1:1", "--cluster-etcd-user", "u"],
        /--cluster-etcd-user and --cluster-etcd-password-file go together/,
      ],
      [
        [
          ...["--cluster", "etcd://10.1.2.3:2379", "--cluster-etcd-user", "u"],
          ...["--cluster-etcd-password-file", "pw"],
        ],
        /would send the password in clear: use --cluster etcds:\/\//,
      ],
      [["--cluster-etcd-user", "u"], /--cluster-etcd-user needs --cluster/],
    ];
    const results = await Promise.all(
      cases.map(([extra]) =>
        runCli([
          ...serve,
          ...extra,
          ...(extra.includes("--cluster")
            ? [...node, "--advertise-http", "http://127.0.0.1:2"]
            : []),
        ]),
      ),
    );
    results.forEach((r, i) => {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(cases[i][1]);
    });
  });
});
