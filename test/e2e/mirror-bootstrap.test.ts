/**
 * `--mirror-to` with several bootstrap brokers (docs/edge.md "An upstream cluster", newuser17
 * #5): an edge started while the first broker it lists is down still forwards every partition,
 * once, through the others (before, it took one broker and forwarded nothing until that one came
 * back, though the others led every partition). A list with a bad entry is refused at start,
 * naming the entry.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ClusterClient } from "../../src/client/cluster.ts";
import { startCluster, type TestCluster } from "../helpers/cluster.ts";
import { waitFor } from "../helpers/poll.ts";
import { type BrokerProcess, runCli, startBroker, target } from "./harness.ts";

let cluster: TestCluster | undefined;
let edge: BrokerProcess | undefined;
const dirs: string[] = [];

afterAll(async () => {
  await edge?.stop("SIGKILL");
  await cluster?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe(`[${target}] --mirror-to with a list of bootstrap brokers`, () => {
  it("refuses a list with an entry that is not HOST:PORT, naming it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "es-broker-mirror-boot-"));
    dirs.push(dir);
    const run = await runCli([
      ...["serve", "--data-dir", join(dir, "d"), "--http-port", "0", "--tcp-port", "0"],
      ...["--mirror-to", "127.0.0.1:9092,central-2", "--mirror-topics", "sensors"],
    ]);
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain(
      '--mirror-to must be HOST:PORT[,HOST:PORT…] (the upstream brokers\' TCP ports), got "central-2" in "127.0.0.1:9092,central-2"',
    );
  });

  it("forwards every partition once when the first listed broker is down at the edge's start", async () => {
    cluster = await startCluster({ name: "mirror-boot" });
    const c = cluster;
    const created = await fetch(`${c.brokers.get(2)!.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors", partitions: 3 }),
    });
    expect(created.status, await created.text()).toBe(201);
    await waitFor(
      "sensors led, every ISR full",
      async () => {
        const ps = await c.partitions("sensors");
        return (
          (ps.length === 3 && ps.every((p) => p.leader >= 1 && p.isr.length === 3)) || undefined
        );
      },
      60_000,
    );
    const tcp = (id: number) => {
      const b = c.brokers.get(id)!;
      return `${b.tcp.host}:${b.tcp.port}`;
    };
    const listed = [tcp(1), tcp(2), tcp(3)];
    // Broker 1 down (it leaves: its leaderships move to 2 and 3).
    await c.stop(1);
    await waitFor(
      "brokers 2 and 3 lead every partition",
      async () =>
        (await c.partitions("sensors")).every((p) => p.leader === 2 || p.leader === 3) || undefined,
      60_000,
    );

    const dir = mkdtempSync(join(tmpdir(), "es-broker-mirror-boot-edge-"));
    dirs.push(dir);
    edge = await startBroker(join(dir, "edge"), [
      ...["--metrics-port", "0", "--mirror-to", listed.join(","), "--mirror-topics", "sensors"],
      ...["--mirror-records-per-sec", "0"],
    ]);
    const e = edge;
    const made = await fetch(`${e.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors", partitions: 3 }),
    });
    expect(made.status).toBe(201);
    for (const partition of [0, 1, 2]) {
      const res = await fetch(`${e.httpUrl}/v1/topics/sensors/records`, {
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
    const upstream = await ClusterClient.connect({
      bootstrap: [2, 3].map((id) => c.brokers.get(id)!.tcp),
    });
    try {
      await waitFor(
        "every record upstream",
        async () => {
          for (const partition of [0, 1, 2])
            if ((await upstream.listOffsets({ topic: "sensors", partition })).highWatermark !== 20)
              return undefined;
          return true;
        },
        60_000,
      );
      for (const partition of [0, 1, 2]) {
        const f = await upstream.fetch({ topic: "sensors", partition, offset: 0, maxRecords: 100 });
        expect(f.records.map((r) => new TextDecoder().decode(r.value))).toEqual(
          Array.from({ length: 20 }, (_, i) => `p${partition}-${i}`),
        );
      }
    } finally {
      await upstream.close();
    }
    const metrics = await (await fetch(e.metricsUrl!)).text();
    expect(metrics).toMatch(/^esb_mirror_upstream_up\{mirror="upstream"\} 1$/m);
    // Broker 1 down is no outage: the others took over at once, nothing stopped.
    expect(e.stderr()).not.toMatch(/"event":"mirror\.(upstream_unreachable|partition_stopped)"/);
  }, 180_000);
});
