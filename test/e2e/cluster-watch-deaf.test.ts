/**
 * attack15 F6 through the real processes (docs/cluster.md "A watch that goes deaf"): two brokers
 * on a three-member etcd; broker 1 reaches the first member through a TCP proxy
 * (test/helpers/tcp-proxy.ts), so its watches stream from there. The proxy then drops everything
 * etcd sends on those watch streams and keeps them open, while the member, through the same
 * proxy, answers broker 1's status probes and every other request: every watch of broker 1 is
 * deaf, as after the attack's SIGSTOP/SIGCONT of a member. A topic created through broker 2
 * afterwards still reaches broker 1 within the guard's period (10 s) and grace, with one
 * `etcd.watch_deaf` per deaf watch (and `esb_cluster_etcd_watches_deaf_total` counting them).
 * Broker 2, whose watches never went deaf, logs and counts none. Then the attack's own trigger,
 * which makes a deaf stream only sometimes (1 in ~17): the first member stopped for 8 s (past
 * the 6 s lease) and resumed; a later topic reaches both brokers and both name the controller
 * etcd holds. Runs on every target: the reopen aborts a streamed `fetch` body,
 * which each runtime does its own way.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { waitFor } from "../helpers/poll.ts";
import { TcpProxy } from "../helpers/tcp-proxy.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

let etcd: EtcdCluster;
let proxy: TcpProxy;
let root: string;
const brokers = new Map<number, BrokerProcess>();

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  root = mkdtempSync(join(tmpdir(), "es-broker-cluster-watch-deaf-"));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "watch-deaf-broker-credential-0123456789\n", { mode: 0o600 });
  const ports = await freePorts(5);
  const first = new URL(etcd.endpoints[0]);
  proxy = await TcpProxy.start({ host: first.hostname, port: Number(first.port) }, ports[4]);
  const rest = etcd.endpoints.slice(1).map((e) => new URL(e).host);
  const clusterUrl = {
    1: `etcd://127.0.0.1:${proxy.port},${rest.join(",")}`,
    2: etcd.clusterUrl,
  };
  for (const id of [1, 2] as const) {
    const http = ports[2 * id - 2];
    const tcp = ports[2 * id - 1];
    brokers.set(
      id,
      await startBroker(join(root, `node${id}`), [
        ...["--http-port", String(http), "--tcp-port", String(tcp)],
        ...["--cluster", clusterUrl[id], "--node-id", String(id)],
        ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
        ...["--cluster-secret-file", secretFile],
      ]),
    );
  }
}, 60_000);

afterAll(async () => {
  await Promise.all([...brokers.values()].map((b) => b.stop("SIGKILL")));
  await proxy?.close();
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

/** Creates `name` (two replicas) through broker `via`, retrying while the cluster forms. */
async function createTopic(via: number, name: string): Promise<void> {
  await waitFor(`topic ${name} created`, async () => {
    const r = await fetch(`${brokers.get(via)!.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name, partitions: 1, config: { replication_factor: 2 } }),
    });
    await r.body?.cancel();
    return r.status === 201 ? true : undefined;
  });
}

/** Whether broker `id` knows topic `name` (its view of etcd, from its watch). */
async function knows(id: number, name: string): Promise<boolean> {
  const r = await fetch(`${brokers.get(id)!.httpUrl}/v1/topics/${name}`);
  await r.body?.cancel();
  return r.status === 200;
}

/** Broker `id`'s `esb_cluster_etcd_watches_deaf_total`. */
async function deafCounter(id: number): Promise<number | undefined> {
  const text = await (await fetch(`${brokers.get(id)!.httpUrl}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("esb_cluster_etcd_watches_deaf_total "));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
}

const deafLines = (id: number) =>
  brokers
    .get(id)!
    .stderr()
    .split("\n")
    .filter((l) => l.includes('"etcd.watch_deaf"'));

describe("cluster: a broker whose etcd watches all went deaf (attack15 F6)", () => {
  it("still learns of a topic created elsewhere within the guard's period, and says so", async () => {
    await createTopic(2, "before");
    await waitFor(
      "broker 1 to know topic before",
      async () => (await knows(1, "before")) || undefined,
    );
    // Every watch broker 1 has open streams through the proxy (its first endpoint).
    const muted = proxy.muteWatches();
    expect(muted).toBeGreaterThanOrEqual(3);
    const mutedAt = Date.now();
    await createTopic(2, "after");
    // Nothing else brings it: the node's view changes only through its watch (or a restart).
    await waitFor(
      "broker 1 to know topic after",
      async () => (await knows(1, "after")) || undefined,
      30_000,
    );
    const tookMs = Date.now() - mutedAt;
    // The guard checks every 10 s and waits 1 s for changes in flight.
    expect(tookMs).toBeLessThan(25_000);
    const lines = deafLines(1).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.some((l) => l.key === "/es-broker/" && l.prefix === true)).toBe(true);
    expect(lines.every((l) => l.level === "warn")).toBe(true);
    expect(deafLines(2)).toEqual([]);
    // The same count in /metrics.
    expect(await deafCounter(1)).toBe(lines.length);
    expect(await deafCounter(2)).toBe(0);
  }, 90_000);

  it("after the attack's trigger (the first member stopped past the lease TTL, then resumed), later changes reach both brokers and a controller is named", async () => {
    // Both brokers' first endpoint (broker 1's through the proxy): their leases' renewals and
    // their watches hang on it; 8 s is past the 6 s lease.
    await etcd.members[0].kill("SIGSTOP");
    await new Promise((r) => setTimeout(r, 8000));
    await etcd.members[0].kill("SIGCONT");
    await createTopic(2, "later");
    for (const id of [1, 2])
      await waitFor(
        `broker ${id} to know topic later`,
        async () => (await knows(id, "later")) || undefined,
        30_000,
      );
    // The controller key exists again and both brokers name its holder (attack15 F6 left it
    // deleted for good, every broker naming the old one).
    const named = await waitFor(
      "both brokers to name the controller etcd holds",
      async () => {
        const kv = await fetch(`${etcd.endpoints[1]}/v3/kv/range`, {
          method: "POST",
          body: JSON.stringify({ key: Buffer.from("/es-broker/controller").toString("base64") }),
        }).then((r) => r.json() as Promise<{ kvs?: { value: string }[] }>);
        const value = kv.kvs?.[0]?.value;
        if (value === undefined) return undefined;
        const holder = (JSON.parse(Buffer.from(value, "base64").toString()) as { node_id: number })
          .node_id;
        for (const id of [1, 2]) {
          const view = (await (await fetch(`${brokers.get(id)!.httpUrl}/v1/cluster`)).json()) as {
            controller?: number;
          };
          if (view.controller !== holder) return undefined;
        }
        return holder;
      },
      30_000,
    );
    expect([1, 2]).toContain(named);
  }, 120_000);
});
