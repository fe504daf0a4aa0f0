/**
 * A broker leaving the cluster is elected nowhere while it drains (docs/cluster.md "Leaving the
 * cluster"), through real processes and a real etcd (test/helpers/cluster.ts; node target only,
 * targets.ts): three brokers, a topic of three partitions with replication factor 3. Broker L's
 * advertised TCP address goes through a proxy, cut before L gets SIGTERM, so that its followers
 * cannot fetch a record it appended and its drain lasts its whole bound (3 s). Meanwhile the
 * leader V of a partition P whose replicas are [V, L, C] gets SIGTERM and departs: the
 * controller must elect P's leader while L is still registered, and the first in-sync replica
 * in replica order is L. Checked: L announced its leave (`leaving/<L>`, `cluster.leaving`), the
 * controller logged `cluster.broker_leaving`, P went to C before L's departure was recorded, and
 * no partition state written while L left named L leader in a new epoch.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { EtcdEvent, EtcdWatch } from "../../src/cluster/etcd.ts";
import { startCluster, type TestCluster } from "../helpers/cluster.ts";
import { freePorts } from "../helpers/etcd.ts";
import { waitFor } from "../helpers/poll.ts";
import { TcpProxy } from "../helpers/tcp-proxy.ts";

let cluster: TestCluster | undefined;
let proxy: TcpProxy | undefined;
let watch: EtcdWatch | undefined;

afterEach(async () => {
  await watch?.cancel();
  await cluster?.close();
  await proxy?.close();
  watch = cluster = proxy = undefined;
});

/** The JSON log lines of a broker's stderr. */
function events(stderr: string): Record<string, unknown>[] {
  return stderr
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

const L = 3;

describe("cluster: a broker leaving is elected nowhere while it drains", () => {
  it("a partition whose leader departs goes to the next in-sync replica, not to the broker leaving", async () => {
    const [proxyPort] = await freePorts(1);
    // The target is set once L's port is known; until then its peers' fetches are refused.
    proxy = await TcpProxy.start({ host: "127.0.0.1", port: 1 }, proxyPort);
    const c = await startCluster({
      name: "leaving",
      extraArgs: (id) => (id === L ? ["--advertise-tcp", `127.0.0.1:${proxyPort}`] : []),
    });
    cluster = c;
    const args = c.args(L);
    proxy.setTarget({
      host: "127.0.0.1",
      port: Number(args[args.indexOf("--tcp-port") + 1]),
    });
    const l = c.brokers.get(L)!;
    const created = await fetch(`${l.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "lv", partitions: 3, config: { replication_factor: 3 } }),
    });
    expect(created.status).toBe(201);
    const before = await waitFor(
      "every partition of lv led with its full ISR",
      async () => {
        const ps = await c.partitions("lv");
        return ps.every((p) => p.leader >= 1 && p.isr.length === 3) ? ps : undefined;
      },
      30_000,
    );
    // Replicas are rotations of the brokers: L is second in one partition and first in another.
    const p = before.find((x) => x.replicas[1] === L && x.leader === x.replicas[0]);
    const q = before.find((x) => x.leader === L);
    expect(p, JSON.stringify(before)).toBeDefined();
    expect(q, JSON.stringify(before)).toBeDefined();
    const [V, , C] = p!.replicas;
    const epochBefore = new Map(before.map((x) => [x.partition, x.leader_epoch]));

    // Every partition state written from here on.
    const written: { partition: number; leader: number; leader_epoch: number; rev: number }[] = [];
    const { revision } = await c.client.list("/es-broker/partitions/lv/");
    watch = c.client.watch(
      { key: "/es-broker/partitions/lv/", prefix: true, startRevision: revision + 1 },
      {
        onEvents: (es: EtcdEvent[]) => {
          for (const e of es) {
            if (e.type !== "put") continue;
            const s = JSON.parse(e.kv.value) as { leader: number; leader_epoch: number };
            const partition = Number(e.kv.key.slice(e.kv.key.lastIndexOf("/") + 1));
            written.push({ partition, ...s, rev: e.kv.modRevision });
          }
        },
      },
    );

    // L's followers can no longer fetch from it; a record appended on Q keeps its drain going.
    proxy.down(true);
    const pending = fetch(`${l.httpUrl}/v1/topics/lv/records`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ records: [{ value: "unreplicated", partition: q!.partition }] }),
    }).then(
      async (res) => res.status,
      () => 0,
    );
    await new Promise((r) => setTimeout(r, 300));
    const lExit = c.stop(L);
    const marker = await waitFor(
      "leaving/L in etcd",
      async () => (await c.client.get(`/es-broker/leaving/${L}`)) ?? undefined,
      5_000,
    );
    expect(await c.client.get(`/es-broker/departed/${L}`)).toBeNull();

    // V departs while L drains: the controller elects P's leader.
    const v = c.brokers.get(V)!;
    expect(await c.stop(V)).toBe(0);
    const electedKv = await waitFor(
      "P led by another broker than V",
      async () => {
        const kv = await c.client.get(`/es-broker/partitions/lv/${p!.partition}`);
        return kv !== null && (JSON.parse(kv.value) as { leader: number }).leader !== V
          ? kv
          : undefined;
      },
      10_000,
    );
    expect(JSON.parse(electedKv.value)).toMatchObject({
      leader: C,
      isr: p!.replicas.filter((id) => id !== V),
    });

    expect(await lExit).toBe(0);
    proxy.down(false);
    expect([0, 503]).toContain(await pending);
    // The election came before L's departure was recorded: L was still registered, and leaving.
    const departed = await c.client.get(`/es-broker/departed/${L}`);
    expect(departed).not.toBeNull();
    expect(electedKv.modRevision).toBeLessThan(departed!.modRevision);
    expect(marker.value).toBe(departed!.value); // the same incarnation

    const lEvents = events(l.stderr());
    expect(lEvents.find((e) => e.event === "cluster.leaving")).toMatchObject({
      node_id: L,
      incarnation: marker.value,
    });
    // Its drain ran to the bound on Q: the followers never got the record.
    expect(lEvents.find((e) => e.event === "cluster.left")).toMatchObject({
      not_caught_up: [`lv/${q!.partition}`],
    });
    // Whichever broker was the controller when L announced the leave logged it.
    const all = [...c.brokers.values(), l, v].flatMap((b) => events(b.stderr()));
    expect(all.some((e) => e.event === "cluster.broker_leaving" && e.node_id === L)).toBe(true);
    // No state written while L left named it leader in a new epoch.
    const elections = written.filter(
      (w) => w.leader === L && w.leader_epoch > (epochBefore.get(w.partition) ?? 0),
    );
    expect(elections).toEqual([]);
    expect(written.some((w) => w.partition === p!.partition && w.leader === C)).toBe(true);
  }, 90_000);
});
