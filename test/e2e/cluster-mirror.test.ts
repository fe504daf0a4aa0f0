/**
 * An edge broker in front of a cluster (docs/edge.md "An upstream cluster"; README "Try it with
 * curl", docs/http-api.md on HTTP-only devices in a cluster): three brokers on one etcd, an edge
 * whose `--mirror-to` names one of them. Every partition reaches the cluster, each on its own
 * leader, once; the partitions the `--mirror-to` broker does not lead are sent where its
 * `not_leader` answers point (newuser14: before, they stayed on the edge with no log line).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ClusterClient } from "../../src/client/cluster.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { waitFor } from "../helpers/poll.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

let etcd: EtcdCluster;
let root: string;
const brokers = new Map<number, BrokerProcess>();
const started: BrokerProcess[] = [];

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 1 });
  root = mkdtempSync(join(tmpdir(), "es-broker-cluster-mirror-"));
  const secretFile = join(root, "cluster.secret");
  writeFileSync(secretFile, "mirror-broker-credential-0123456789\n", { mode: 0o600 });
  const ports = await freePorts(6);
  await Promise.all(
    [1, 2, 3].map(async (id) => {
      const [http, tcp] = [ports[2 * id - 2], ports[2 * id - 1]];
      const b = await startBroker(join(root, `n${id}`), [
        ...["--http-port", String(http), "--tcp-port", String(tcp)],
        ...["--cluster", etcd.clusterUrl, "--node-id", String(id)],
        ...["--advertise-tcp", `127.0.0.1:${tcp}`, "--advertise-http", `http://127.0.0.1:${http}`],
        ...["--cluster-secret-file", secretFile],
      ]);
      brokers.set(id, b);
      started.push(b);
    }),
  );
}, 60_000);

afterAll(async () => {
  await Promise.all(started.map((b) => b.stop("SIGKILL")));
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

interface PartitionState {
  partition: number;
  leader: number;
  isr: number[];
}

describe("an edge broker mirroring to a cluster", () => {
  it("forwards every partition to its own leader, once, whichever broker --mirror-to names", async () => {
    const one = brokers.get(1)!;
    // The upstream topic first, so that its leaders are known before the edge starts.
    const created = await fetch(`${one.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors.a", partitions: 3 }),
    });
    expect(created.status).toBe(201);
    const parts = await waitFor(
      "sensors.a led, every ISR full",
      async () => {
        const res = await fetch(`${one.httpUrl}/v1/cluster?topic=sensors.a`);
        const m = (await res.json()) as { topics: { partitions: PartitionState[] }[] };
        const ps = m.topics[0]?.partitions ?? [];
        return ps.length === 3 && ps.every((p) => p.leader >= 1 && p.isr.length === 3)
          ? ps
          : undefined;
      },
      60_000,
    );
    // Mirror to a broker that does not lead every partition (three partitions, three brokers).
    const target = [1, 2, 3].find((id) => parts.some((p) => p.leader !== id))!;
    const notLed = parts.filter((p) => p.leader !== target).map((p) => p.partition);
    expect(notLed.length).toBeGreaterThan(0);
    const upstream = brokers.get(target)!;
    const edge = await startBroker(join(root, "edge"), [
      ...["--mirror-to", `${upstream.tcp.host}:${upstream.tcp.port}`],
      ...["--mirror-topics", "sensors*", "--mirror-name", "central"],
    ]);
    started.push(edge);
    const made = await fetch(`${edge.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors.a", partitions: 3 }),
    });
    expect(made.status).toBe(201);
    // 20 records to each partition, named by partition, in one request each.
    for (const partition of [0, 1, 2]) {
      const res = await fetch(`${edge.httpUrl}/v1/topics/sensors.a/records`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          records: Array.from({ length: 20 }, (_, i) => ({
            partition,
            value: `p${partition}-${i}`,
          })),
        }),
      });
      expect(res.status).toBe(200);
    }

    const cluster = await ClusterClient.connect({ bootstrap: [one.tcp] });
    try {
      await waitFor(
        "every record upstream",
        async () => {
          for (const partition of [0, 1, 2]) {
            const o = await cluster.listOffsets({ topic: "sensors.a", partition });
            if (o.highWatermark !== 20) return undefined;
          }
          return true;
        },
        60_000,
      );
      for (const partition of [0, 1, 2]) {
        const f = await cluster.fetch({
          topic: "sensors.a",
          partition,
          offset: 0,
          maxRecords: 100,
        });
        expect(f.records.map((r) => new TextDecoder().decode(r.value))).toEqual(
          Array.from({ length: 20 }, (_, i) => `p${partition}-${i}`),
        );
      }
    } finally {
      await cluster.close();
    }
    const redirected = edge
      .stderr()
      .split("\n")
      .filter((l) => l.includes('"event":"mirror.upstream_leader"'))
      .map((l) => (JSON.parse(l) as { partition: number }).partition)
      .sort();
    expect(redirected).toEqual(notLed);
  }, 180_000);
});
