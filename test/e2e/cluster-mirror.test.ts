/**
 * An edge broker in front of a cluster (docs/edge.md "An upstream cluster"; README "Try it with
 * curl", docs/http-api.md on HTTP-only devices in a cluster): three brokers on one etcd, an edge
 * whose `--mirror-to` names one of them. Every partition reaches the cluster, each on its own
 * leader, once; the partitions the `--mirror-to` broker does not lead are sent where its
 * `not_leader` answers point (newuser14: before, they stayed on the edge with no log line). A
 * paused `--mirror-to` broker holds up only what it leads: the partitions of live leaders keep
 * flowing, and a slow answer is not called an unreachable upstream (attack14b F4, F5).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
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

  it("keeps partitions of live leaders flowing while the --mirror-to broker is paused, then all once", async () => {
    const name = "paused.a";
    const live = [...brokers.values()][0];
    const created = await fetch(`${live.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name, partitions: 3 }),
    });
    expect(created.status).toBe(201);
    const parts = await waitFor(
      `${name} led, every ISR full`,
      async () => {
        const res = await fetch(`${live.httpUrl}/v1/cluster?topic=${name}`);
        const m = (await res.json()) as { topics: { partitions: PartitionState[] }[] };
        const ps = m.topics[0]?.partitions ?? [];
        return ps.length === 3 && ps.every((p) => p.leader >= 1 && p.isr.length === 3)
          ? ps
          : undefined;
      },
      60_000,
    );
    // The broker to pause: --mirror-to names it, and it does not lead every partition (each
    // partition's ISR holds it, so their leaders wait for it until it leaves the ISR).
    const target = [1, 2, 3].find((id) => parts.some((p) => p.leader !== id))!;
    const otherLed = parts.filter((p) => p.leader !== target);
    expect(otherLed.length).toBeGreaterThan(0);
    const paused = brokers.get(target)!;
    const [metricsPort] = await freePorts(1);
    const edge = await startBroker(join(root, "edge-paused"), [
      ...["--mirror-to", `${paused.tcp.host}:${paused.tcp.port}`],
      ...["--mirror-topics", "paused*", "--mirror-name", "pause"],
      ...["--metrics-port", String(metricsPort)],
      // Shorter than a leader's wait for a paused follower to leave its ISR (lease 6 s + grace
      // 3 s), so that every live leader's batch also goes unanswered in time once.
      ...["--mirror-timeout-ms", "3000"],
    ]);
    started.push(edge);
    const made = await fetch(`${edge.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name, partitions: 3 }),
    });
    expect(made.status).toBe(201);
    let sent = 0;
    /** `count` more records to each partition of the edge, numbered on from `sent`. */
    const produce = async (count: number) => {
      for (const partition of [0, 1, 2]) {
        const res = await fetch(`${edge.httpUrl}/v1/topics/${name}/records`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            records: Array.from({ length: count }, (_, i) => ({
              partition,
              value: `p${partition}-${sent + i}`,
            })),
          }),
        });
        expect(res.status).toBe(200);
      }
      sent += count;
    };
    /** Each live leader's high watermark for the partitions it leads (asked of the leader itself). */
    const leaderHighWatermarks = async () => {
      const marks = new Map<number, number>();
      for (const p of otherLed) {
        const client = await TcpClient.connect({ ...brokers.get(p.leader)!.tcp, timeoutMs: 2000 });
        try {
          marks.set(
            p.partition,
            (await client.listOffsets({ topic: name, partition: p.partition })).highWatermark,
          );
        } finally {
          await client.close();
        }
      }
      return marks;
    };
    const lag = async (partition: number) => {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      const m = new RegExp(
        `^esb_mirror_lag_records\\{mirror="pause",topic="${name.replace(".", "\\.")}",partition="${partition}"\\} (\\d+)$`,
        "m",
      ).exec(text);
      return m === null ? undefined : Number(m[1]);
    };
    // Flowing first: each partition on its own leader (connections open, leaders known).
    await produce(10);
    await waitFor(
      "the first records on the live leaders",
      async () =>
        [...(await leaderHighWatermarks()).values()].every((hw) => hw === 10) || undefined,
      60_000,
    );

    const pid = paused.proc.pid!;
    process.kill(pid, "SIGSTOP");
    try {
      const pausedAt = Date.now();
      // Records keep coming to the edge, in several requests, for as long as the pause lasts.
      await produce(10);
      // The SIGCONT is in the finally below: this holds while the broker is paused.
      await waitFor(
        "the live leaders' partitions to catch up while the --mirror-to broker is paused",
        async () => {
          if (sent < 60 && Date.now() - pausedAt > (sent - 10) * 300) await produce(10);
          const marks = await leaderHighWatermarks();
          if (sent < 60 || ![...marks.values()].every((hw) => hw === sent)) return undefined;
          for (const p of otherLed) if ((await lag(p.partition)) !== 0) return undefined;
          return true;
        },
        60_000,
      );
    } finally {
      process.kill(pid, "SIGCONT");
    }

    // Everything, the paused broker's own partitions too, once and in order.
    const bootstrap = [...brokers.values()].filter((b) => b !== paused).map((b) => b.tcp);
    const cluster = await ClusterClient.connect({ bootstrap });
    try {
      await waitFor(
        "every record upstream after the pause",
        async () => {
          for (const partition of [0, 1, 2]) {
            const o = await cluster.listOffsets({ topic: name, partition });
            if (o.highWatermark !== sent) return undefined;
          }
          return true;
        },
        90_000,
      );
      for (const partition of [0, 1, 2]) {
        const f = await cluster.fetch({ topic: name, partition, offset: 0, maxRecords: 1000 });
        expect(f.records.map((r) => new TextDecoder().decode(r.value))).toEqual(
          Array.from({ length: sent }, (_, i) => `p${partition}-${i}`),
        );
      }
    } finally {
      await cluster.close();
    }
    // A slow answer is never an unreachable upstream, and the mirror's own closes are not logged.
    const log = edge.stderr();
    expect(log).not.toMatch(/"event":"mirror\.[^\n]*closed by the client/);
    expect(log).not.toMatch(/"event":"mirror\.partition_stopped"/);
    // Each live leader's batch waited past the limit for the ISR: said once, as slow, naming it.
    const slow = log
      .split("\n")
      .filter((l) => l.includes('"event":"mirror.upstream_slow"'))
      .map((l) => JSON.parse(l) as { partition: number; broker: string });
    for (const p of otherLed) {
      const { host, port } = brokers.get(p.leader)!.tcp;
      expect(slow.filter((l) => l.partition === p.partition)).toEqual([
        expect.objectContaining({ broker: `${host}:${port}` }),
      ]);
    }
    // Every problem said is taken back once its batches got through (attack15b F7): each slow
    // partition once, and the --mirror-to broker's unreachability (its partitions moved to other
    // leaders) by a later reachable line.
    const lines = log
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { event: string; partition?: number; after?: string });
    for (const { partition } of slow)
      expect(
        lines.filter((l) => l.event === "mirror.upstream_reachable" && l.partition === partition),
      ).toEqual([expect.objectContaining({ after: "mirror.upstream_slow" })]);
    const uplink = lines.filter(
      (l) =>
        l.partition === undefined &&
        (l.event === "mirror.upstream_unreachable" || l.event === "mirror.upstream_reachable"),
    );
    if (uplink.length > 0) expect(uplink.at(-1)?.event).toBe("mirror.upstream_reachable");
  }, 240_000);
});
