/**
 * Store-and-forward end to end (docs/edge.md): an edge broker and a central broker as real
 * processes, the edge's `--mirror-to` going through a TCP proxy that cuts the uplink. Producers
 * write to the edge throughout; the uplink goes down, the edge is SIGKILLed while it cannot
 * forward and again while it catches up, and the central broker is SIGKILLed while the edge
 * forwards. At the end the central topic holds exactly the edge's records — same partition,
 * offset, key, value and timestamp, in order, none twice, none missing — checked record by record.
 */
import { afterEach, describe, expect, it } from "vitest";
import { runCli, startBroker, target, type BrokerProcess } from "./harness.ts";
import { tempDir } from "../helpers/tmp.ts";
import { TcpProxy } from "../helpers/tcp-proxy.ts";
import { waitFor } from "./helpers.ts";

const running: BrokerProcess[] = [];
let proxy: TcpProxy | null = null;
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
  await proxy?.close();
  proxy = null;
});

interface Rec {
  offset: number;
  timestamp: number;
  key: string | null;
  value: string;
}

async function json(res: Response): Promise<any> {
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return JSON.parse(text);
}

async function produce(url: string, from: number, count: number): Promise<void> {
  for (let i = from; i < from + count; i += 10) {
    const records = Array.from({ length: Math.min(10, from + count - i) }, (_, j) => ({
      key: `sensor-${(i + j) % 7}`,
      value: `reading-${i + j}`,
    }));
    await json(
      await fetch(`${url}/v1/topics/sensors/records`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ records }),
      }),
    );
  }
}

async function readAll(url: string, partition: number): Promise<Rec[]> {
  const out: Rec[] = [];
  for (let offset = 0, pages = 0; pages < 1000; pages++) {
    const page = await json(
      await fetch(
        `${url}/v1/topics/sensors/partitions/${partition}/records?offset=${offset}&max_records=500`,
      ),
    );
    out.push(
      ...page.records.map((r: Rec) => ({
        offset: r.offset,
        timestamp: r.timestamp,
        key: r.key,
        value: r.value,
      })),
    );
    if (page.next_offset >= page.high_watermark) break;
    offset = page.next_offset;
  }
  return out;
}

async function highWatermarks(url: string): Promise<number[]> {
  const t = await json(await fetch(`${url}/v1/topics/sensors`));
  return t.partitions.map((p: { high_watermark: number }) => p.high_watermark);
}

describe(`[${target}] the edge mirror`, () => {
  it("forwards every edge record exactly once through uplink outages and SIGKILLs of either side", async () => {
    const { dir } = tempDir();
    let central = await startBroker(`${dir}/central`);
    running.push(central);
    proxy = await TcpProxy.start(central.tcp);
    const edgeArgs = [
      "--mirror-to",
      `127.0.0.1:${proxy.port}`,
      "--mirror-topics",
      "sensor*",
      "--mirror-records-per-sec",
      "0",
    ];
    let edge = await startBroker(`${dir}/edge`, edgeArgs);
    running.push(edge);
    await json(
      await fetch(`${edge.httpUrl}/v1/topics`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "sensors", partitions: 3 }),
      }),
    );
    await produce(edge.httpUrl, 0, 150);
    // The mirror forwards before the uplink goes: its first commit makes its group at the edge
    // (on a loaded machine it may not have started when the produce above returns).
    await waitFor(
      "the mirror's first commit at the edge",
      async () =>
        (
          await runCli([
            ...["groups", "describe", "mirror.upstream"],
            ...["--broker", `${edge.tcp.host}:${edge.tcp.port}`],
          ])
        ).code === 0,
      30_000,
      200,
    );

    // The uplink goes down: the edge keeps taking writes.
    proxy.down(true);
    await produce(edge.httpUrl, 150, 150);
    // The edge dies while it cannot forward, and comes back still cut off.
    await edge.stop("SIGKILL");
    edge = await startBroker(`${dir}/edge`, edgeArgs);
    running.push(edge);
    await produce(edge.httpUrl, 300, 100);
    // While cut off, the mirror's group shows the backlog in records and in time.
    const during = await runCli([
      "groups",
      "describe",
      "mirror.upstream",
      "--lag-ms",
      "--broker",
      `${edge.tcp.host}:${edge.tcp.port}`,
    ]);
    expect(during.code, during.stderr).toBe(0);
    const lagging = JSON.parse(during.stdout.toString()).offsets.filter(
      (o: { lag: number }) => o.lag > 0,
    );
    expect(lagging.length).toBeGreaterThan(0);
    for (const o of lagging) expect(o.lag_ms).toBeGreaterThan(0);

    // The link returns; while the edge catches up, the central broker dies and comes back.
    proxy.down(false);
    await new Promise((r) => setTimeout(r, 300));
    await central.stop("SIGKILL");
    central = await startBroker(`${dir}/central`);
    running.push(central);
    proxy.setTarget(central.tcp);
    await produce(edge.httpUrl, 400, 100);
    // The edge dies mid catch-up and restarts.
    await new Promise((r) => setTimeout(r, 200));
    await edge.stop("SIGKILL");
    edge = await startBroker(`${dir}/edge`, edgeArgs);
    running.push(edge);
    await produce(edge.httpUrl, 500, 100);

    // Wait until the central partitions reach the edge's high watermarks.
    const want = await highWatermarks(edge.httpUrl);
    expect(want.reduce((a, b) => a + b, 0)).toBe(600);
    const deadline = Date.now() + 60_000;
    let have: number[] = [];
    while (Date.now() < deadline) {
      have = await highWatermarks(central.httpUrl).catch(() => []);
      if (have.length === want.length && have.every((h, i) => h >= want[i])) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(have).toEqual(want);

    for (let p = 0; p < want.length; p++) {
      const edgeRecords = await readAll(edge.httpUrl, p);
      const centralRecords = await readAll(central.httpUrl, p);
      expect(edgeRecords.length).toBe(want[p]);
      // Record by record: same offset, timestamp, key and value; none twice, none missing.
      expect(centralRecords).toEqual(edgeRecords);
    }
    const values = new Set<string>();
    for (let p = 0; p < want.length; p++)
      for (const r of await readAll(central.httpUrl, p)) values.add(r.value);
    expect(values.size).toBe(600);

    // The mirror's position is a consumer group on the edge: lag 0 once caught up.
    const group = await json(await fetch(`${edge.httpUrl}/v1/groups/mirror.upstream`));
    expect(group.offsets.map((o: { lag: number }) => o.lag)).toEqual([0, 0, 0]);
    const described = await runCli([
      "groups",
      "describe",
      "mirror.upstream",
      "--lag-ms",
      "--broker",
      `${edge.tcp.host}:${edge.tcp.port}`,
    ]);
    expect(described.code, described.stderr).toBe(0);
    const shown = JSON.parse(described.stdout.toString());
    expect(shown.offsets.map((o: { lag: number; lag_ms: number }) => [o.lag, o.lag_ms])).toEqual([
      [0, 0],
      [0, 0],
      [0, 0],
    ]);
  });
});
