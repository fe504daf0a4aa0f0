/**
 * TLS between brokers (docs/cluster.md "TLS between brokers") through the real processes (node
 * target only: targets.ts): three brokers on a three-member etcd, each serving mutual TLS on every
 * port, with API keys and the broker credential. Brokers replicate over their TLS listeners
 * (checking each other against `--cluster-tls-ca` and presenting their own certificate), a leader
 * SIGKILL fails over, `cluster status` and the TS `ClusterClient` work over TLS, a broker with a
 * plain TCP listener is refused, and a broker given a CA that does not trust the others never
 * replicates from them and says why (log, `GET /v1/cluster`, `cluster status`, `/metrics`)
 * until the right CA is put in place and SIGHUP re-reads it.
 * Every listener serves TLS only, so no broker can have fetched over plain TCP; none logged a
 * plain-text or failed handshake either.
 */
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ClusterMetadata } from "../../src/broker/types.ts";
import { requestJson } from "../../src/cli/keys.ts";
import { ClusterClient } from "../../src/client/client.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { type BrokerProcess, runCli, startBroker } from "./harness.ts";
import { offlineAdminKey, waitFor } from "./helpers.ts";
import { makePki, type Pki } from "./pki.ts";

let etcd: EtcdCluster;
let pki: Pki;
let root: string;
let ports: number[];
let secretFile: string;
let admin: { key: string; path: string };
let clientTls: { ca: Buffer; cert: Buffer; key: Buffer };
const brokers = new Map<number, BrokerProcess>();

/** `serve` options of broker `id` (HTTP and TCP ports at 2·id−2, 2·id−1): mutual TLS, peers checked against `ca`. */
function args(id: number, ca = pki.ca): string[] {
  const [http, tcp] = [ports[2 * id - 2], ports[2 * id - 1]];
  return [
    ...["--http-port", String(http), "--tcp-port", String(tcp)],
    ...["--tls-cert", pki.server.cert, "--tls-key", pki.server.key, "--tls-client-ca", pki.ca],
    ...["--cluster", etcd.clusterUrl, "--node-id", String(id), "--cluster-tls-ca", ca],
    ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `https://127.0.0.1:${http}`],
    ...["--cluster-secret-file", secretFile],
  ];
}

/** Starts broker `id` on its own data directory (the cluster's API keys are in etcd). */
async function start(id: number, extra: string[] = [], ca = pki.ca): Promise<BrokerProcess> {
  const b = await startBroker(join(root, `n${id}`), [...args(id, ca), ...extra]);
  brokers.set(id, b);
  return b;
}

/** Broker `id`'s own view of the cluster (`GET /v1/cluster` over HTTPS with a client certificate). */
async function view(id: number, topic?: string): Promise<ClusterMetadata> {
  return (await requestJson(new URL(brokers.get(id)!.httpUrl), {
    method: "GET",
    path: `/v1/cluster${topic === undefined ? "" : `?topic=${topic}`}`,
    key: admin.key,
    tls: clientTls,
    timeoutMs: 5000,
  })) as ClusterMetadata;
}

/** `cluster status` through the CLI, over TLS with the client certificate and the admin key. */
function status(id: number, more: string[] = []) {
  return runCli([
    ...["cluster", "status", "--broker", `127.0.0.1:${ports[2 * id - 1]}`],
    ...["--tls-ca", pki.ca, "--tls-cert", pki.client.cert, "--tls-key", pki.client.key],
    ...["--api-key-file", admin.path, ...more],
  ]);
}

const anyLive = () => [...brokers.keys()][0];

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  root = mkdtempSync(join(tmpdir(), "es-broker-cluster-tls-"));
  pki = makePki(join(root, "pki"));
  clientTls = {
    ca: readFileSync(pki.ca),
    cert: readFileSync(pki.client.cert),
    key: readFileSync(pki.client.key),
  };
  secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "tls-broker-credential-0123456789\n", { mode: 0o600 });
  admin = await offlineAdminKey(join(root, "n1"), root);
  ports = await freePorts(8);
  // Node 1's data directory holds the admin key: joining first, it imports it into etcd.
  await start(1);
  await Promise.all([2, 3].map((id) => start(id)));
}, 60_000);

afterAll(async () => {
  await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("cluster mode with TLS on every listener", () => {
  let cluster: ClusterClient;
  const values = Array.from({ length: 50 }, (_, i) => `secure-${i}`);

  it("replicates over TLS: an acknowledged produce is on every follower; links, cluster status and the TS client work", async () => {
    cluster = await ClusterClient.connect({
      bootstrap: [1, 2, 3].map((id) => brokers.get(id)!.tcp),
      tls: clientTls,
      apiKey: admin.key,
    });
    await cluster.createTopic({ name: "secure", partitions: 1, config: { replication_factor: 3 } });
    const produced = await cluster.produce(
      "secure",
      values.map((value) => ({ value })),
      { partition: 0 },
    );
    expect(produced.spans).toEqual([{ partition: 0, baseOffset: 0, count: 50 }]);
    const leader = (await view(1, "secure")).topics[0].partitions[0].leader;
    // The leader's view: both followers fsynced every record (the ack waited for the ISR).
    const p = (await view(leader, "secure")).topics[0].partitions[0];
    expect(p.isr.sort()).toEqual([1, 2, 3]);
    expect(p.followers!.map((f) => [f.node_id, f.durable_offset]).sort()).toEqual(
      [1, 2, 3].filter((id) => id !== leader).map((id) => [id, 50]),
    );
    for (const id of [1, 2, 3].filter((x) => x !== leader)) {
      const links = (await view(id)).peer_links!;
      expect(links.find((l) => l.node_id === leader)).toMatchObject({
        tls: true,
        ok: true,
        error: null,
        tls_failure: false,
      });
    }
    const shown = await status(2, ["--json"]);
    expect(shown.code, shown.stderr).toBe(0);
    const doc = JSON.parse(shown.stdout.toString()) as {
      topics: { name: string; partitions: { followers: { lag: number }[] | null }[] }[];
      links: { from: number; node_id: number; tls: boolean; ok: boolean }[];
    };
    // The leaders' views came over HTTPS: the followers' lag is known (0), not null.
    const secure = doc.topics.find((t) => t.name === "secure")!;
    expect(secure.partitions[0].followers!.map((f) => f.lag)).toEqual([0, 0]);
    expect(doc.links.length).toBeGreaterThanOrEqual(2);
    for (const l of doc.links) expect(l).toMatchObject({ tls: true, ok: true });
    for (const b of brokers.values())
      for (const event of ["tls.plaintext_client", "tls.handshake_failed", "peer_tls_failed"])
        expect(b.stderr()).not.toContain(event);
  });

  it("refuses a broker whose TCP listener is plain, and --cluster with --tls-cert without --cluster-tls-ca", async () => {
    const plain = await runCli([
      ...["serve", "--data-dir", join(root, "plain"), "--http-port", "0", "--tcp-port", "0"],
      ...["--cluster", etcd.clusterUrl, "--node-id", "9", "--advertise-tcp", "127.0.0.1:1"],
      ...["--advertise-http", "http://127.0.0.1:2"],
    ]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toMatch(
      /this broker's TCP listener serves plain TCP, but node \d \(tcp 127\.0\.0\.1:\d+\) serves TLS/,
    );
    const noCa = await runCli([
      ...["serve", "--data-dir", join(root, "no-ca"), "--http-port", "0", "--tcp-port", "0"],
      ...["--tls-cert", pki.server.cert, "--tls-key", pki.server.key],
      ...["--cluster", etcd.clusterUrl, "--node-id", "9", "--advertise-tcp", "127.0.0.1:1"],
      ...["--advertise-http", "https://127.0.0.1:2"],
    ]);
    expect(noCa.code).toBe(2);
    expect(noCa.stderr).toMatch(/--cluster with --tls-cert needs --cluster-tls-ca FILE/);
    // A redirect to the leader carries the client's key: never to plain HTTP (attack7 F3).
    const plainRedirect = await runCli([
      ...[
        "serve",
        "--data-dir",
        join(root, "plain-redirect"),
        "--http-port",
        "0",
        "--tcp-port",
        "0",
      ],
      ...["--tls-cert", pki.server.cert, "--tls-key", pki.server.key, "--cluster-tls-ca", pki.ca],
      ...["--cluster", etcd.clusterUrl, "--node-id", "9", "--advertise-tcp", "127.0.0.1:1"],
      ...["--advertise-http", "http://127.0.0.1:2"],
    ]);
    expect(plainRedirect.code).toBe(2);
    expect(plainRedirect.stderr).toMatch(
      /--cluster with --tls-cert needs an https:\/\/ --advertise-http/,
    );
  });

  it("a broker whose --cluster-tls-ca does not trust the others never replicates from them, and says why; the right CA on SIGHUP heals it", async () => {
    const ca4 = join(root, "ca4.pem");
    copyFileSync(pki.otherCa, ca4);
    const b4 = await start(4, ["--metrics-port", "0"], ca4);
    await waitFor("node 4 to be seen", async () => (await view(1)).brokers.length === 4);
    await cluster.refresh();
    await cluster.createTopic({
      name: "distrust",
      partitions: 4,
      config: { replication_factor: 4, replica_lag_ms: 1000 },
    });
    const parts = (await view(1, "distrust")).topics[0].partitions;
    const followed = parts.filter((p) => p.leader !== 4);
    expect(followed.length).toBe(3);
    // Acknowledged once node 4, which never fetches, has left each ISR (replica_lag_ms).
    for (const p of followed)
      await cluster.produce("distrust", [{ value: `d-${p.partition}` }], {
        partition: p.partition,
      });
    for (const p of followed) {
      const mine = async () => (await view(p.leader, "distrust")).topics[0].partitions[p.partition];
      await waitFor("node 4 out of the ISR", async () => !(await mine()).isr.includes(4));
      // Never fetched under this leadership: no position at all.
      expect((await mine()).followers!.find((f) => f.node_id === 4)!.durable_offset).toBe(-1);
    }
    const leaders = [...new Set(followed.map((p) => p.leader))];
    await waitFor("node 4 to report every failing link", async () => {
      const links = (await view(4)).peer_links!;
      return leaders.every((id) => links.some((l) => l.node_id === id && !l.ok));
    });
    for (const l of (await view(4)).peer_links!.filter((x) => leaders.includes(x.node_id)))
      expect(l).toMatchObject({ tls: true, ok: false, tls_failure: true });
    const logged = b4
      .stderr()
      .split("\n")
      .filter((line) => line.includes('"event":"cluster.peer_tls_failed"'));
    expect(logged.length).toBeGreaterThanOrEqual(1);
    expect(logged[0]).toMatch(/UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|UNABLE_TO_GET_ISSUER/);
    expect(logged[0]).toContain("--cluster-tls-ca");
    const metrics = await (await fetch(b4.metricsUrl!)).text();
    for (const id of leaders)
      expect(metrics).toContain(`esb_cluster_peer_tls_failing{peer="${id}"} 1`);
    const table = await status(1);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout.toString()).toMatch(/node 4 -> node \d \(127\.0\.0\.1:\d+, TLS\): TLS: /);
    // The others refused nothing in plain text: node 4 never tried without TLS.
    for (const [id, b] of brokers)
      if (id !== 4) expect(b.stderr()).not.toContain("tls.plaintext_client");
    // The right CA, re-read on SIGHUP: node 4 fetches, catches up and is back in every ISR.
    copyFileSync(pki.ca, ca4);
    b4.proc.kill("SIGHUP");
    for (const p of followed)
      await waitFor("node 4 back in the ISR", async () =>
        (await view(p.leader, "distrust")).topics[0].partitions[p.partition].isr.includes(4),
      );
    expect((await view(4)).peer_links!.every((l) => l.ok && l.tls)).toBe(true);
    expect(b4.stderr()).toContain('"event":"cluster.peer_connected"');
    await b4.stop("SIGTERM");
    brokers.delete(4);
  });

  it("a leader SIGKILL fails over to a follower over TLS, and every acknowledged record survives", async () => {
    const before = (await view(anyLive(), "secure")).topics[0].partitions[0];
    await brokers.get(before.leader)!.stop("SIGKILL");
    brokers.delete(before.leader);
    // Produced once another broker leads: a produce sent on the dead leader's connection before
    // the client has seen it close may have been stored, and is rightly not retried.
    await waitFor(
      "a new leader of secure/0",
      async () => {
        const p = (await view(anyLive(), "secure")).topics[0].partitions[0];
        return p.leader !== before.leader && p.leader >= 0;
      },
      30_000,
    );
    const more = Array.from({ length: 20 }, (_, i) => `after-${i}`);
    await cluster.produce(
      "secure",
      more.map((value) => ({ value })),
      { partition: 0 },
    );
    const after = (await view(anyLive(), "secure")).topics[0].partitions[0];
    expect(after.leader).not.toBe(before.leader);
    expect(after.leader_epoch).toBeGreaterThan(before.leader_epoch);
    const seen: string[] = [];
    for (let offset = 0; ; ) {
      const f = await cluster.fetch({ topic: "secure", partition: 0, offset, maxRecords: 1000 });
      if (f.records.length === 0) break;
      for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
      offset = f.nextOffset;
    }
    expect(seen).toEqual([...values, ...more]);
    await cluster.close();
  }, 60_000);
});
