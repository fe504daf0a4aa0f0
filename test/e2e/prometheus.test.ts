/**
 * End-to-end: the real process seen by the tools operators use (docs/operations.md).
 *
 * - A real Prometheus server (Debian's `prometheus`) scrapes the broker's `--metrics-port` every
 *   second while records are produced over TCP and HTTP and a consumer group consumes and
 *   commits; its HTTP API must then answer the lag of each partition and the fsync series.
 * - `GET /metrics` on the HTTP port follows the role table once keys exist: 401 without a key,
 *   403 for a producer key, 200 for an admin key; `/healthz` and `/readyz` need none.
 * - `GET /readyz` answers 503 with the recovery's progress while a large data directory is
 *   recovered (the HTTP port listens from before), and 200 once the broker serves.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { freePorts } from "../helpers/ports.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  ensureDebianTool,
  installHookTimeoutMs,
  prometheusServer,
  promtool,
  promtoolCheckMetrics,
} from "../helpers/system-tools.ts";
import { type BrokerProcess, brokerOrigins, startBroker, target } from "./harness.ts";
import { offlineAdminKey } from "./helpers.ts";

beforeAll(() => {
  ensureDebianTool(promtool);
  ensureDebianTool(prometheusServer);
}, installHookTimeoutMs);

const running: BrokerProcess[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      const exited = new Promise((r) => c.once("exit", r));
      c.kill("SIGKILL");
      await exited;
    }
  }
});

/** A free TCP port on 127.0.0.1, below the ephemeral range (`freePorts` of ports.ts says why). */
async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}

async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`[${target}] timed out waiting for ${what}${last ? `: ${last}` : ""}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function json(url: string, init?: RequestInit): Promise<any> {
  const res = await fetch(url, init);
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** Starts a Prometheus server scraping `targetAddress` every second; resolves with its base URL. */
async function startPrometheus(targetAddress: string): Promise<string> {
  const { dir } = tempDir("es-broker-prometheus-");
  const config = join(dir, "prometheus.yml");
  writeFileSync(
    config,
    [
      "global:",
      "  scrape_interval: 1s",
      "  evaluation_interval: 1s",
      "scrape_configs:",
      "  - job_name: es-broker",
      "    static_configs:",
      `      - targets: ["${targetAddress}"]`,
      "",
    ].join("\n"),
  );
  const port = await freePort();
  let log = "";
  const child = spawn(
    "prometheus",
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, "tsdb")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(child);
  child.stdout!.on("data", (d) => (log += d));
  child.stderr!.on("data", (d) => (log += d));
  const base = `http://127.0.0.1:${port}`;
  await waitFor("Prometheus to be ready", async () => {
    if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}: ${log}`);
    return (await fetch(`${base}/-/ready`)).ok ? true : undefined;
  });
  return base;
}

/** One instant-vector query; the samples as label sets with numeric values. */
async function query(
  base: string,
  promql: string,
): Promise<{ metric: Record<string, string>; value: number }[]> {
  const body = await json(`${base}/api/v1/query?query=${encodeURIComponent(promql)}`);
  expect(body.status).toBe("success");
  return body.data.result.map((r: { metric: Record<string, string>; value: [number, string] }) => ({
    metric: r.metric,
    value: Number(r.value[1]),
  }));
}

function batch(count: number, key: string): Uint8Array | any {
  const b = new EntryBatchBuilder();
  for (let i = 0; i < count; i++) b.add(utf8(key), utf8(`record-${i}`));
  return b.build();
}

describe(`[${target}] metrics, readiness and a real Prometheus`, () => {
  it("a real Prometheus scrapes --metrics-port and answers the lag and fsync series", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(join(dir, "data"), ["--metrics-port", "0"]);
    running.push(broker);
    expect(broker.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const metricsAddress = new URL(broker.metricsUrl!).host;

    // The exposition of the real process passes promtool before Prometheus ever sees it.
    const first = await (await fetch(broker.metricsUrl!)).text();
    expect(promtoolCheckMetrics(first)).toEqual({ status: 0, output: "" });
    // Replication families exist in cluster mode only (test/e2e/cluster.test.ts).
    expect(first).not.toMatch(/^esb_(cluster|replica)_/m);

    const prometheus = await startPrometheus(metricsAddress);
    const client = await TcpClient.connect({ host: broker.tcp.host, port: broker.tcp.port });
    try {
      await client.createTopic({ name: "orders", partitions: 2 });
      for (let i = 0; i < 10; i++)
        await client.produce("orders", batch(3, `k${i}`), { partition: i % 2 });
      const http = await fetch(`${broker.httpUrl}/v1/topics/orders/records`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          records: [
            { value: "a", partition: 0 },
            { value: "b", partition: 1 },
          ],
        }),
      });
      expect(http.status).toBe(200);
      // 16 records in each partition. The group reads partition 0 to offset 10, partition 1 to 4.
      const member = await client.joinGroup({ group: "billing", topics: ["orders"] });
      for (const [partition, upTo] of [
        [0, 10],
        [1, 4],
      ]) {
        const fetched = await client.fetch({
          topic: "orders",
          partition,
          offset: 0,
          maxRecords: upTo,
        });
        expect(fetched.nextOffset).toBe(upTo);
      }
      await client.commitOffsets({
        group: "billing",
        memberId: member.memberId,
        generation: member.generation,
        offsets: [
          { topic: "orders", partition: 0, offset: 10 },
          { topic: "orders", partition: 1, offset: 4 },
        ],
      });

      const lag = await waitFor("the lag series in Prometheus", async () => {
        const r = await query(prometheus, 'esb_consumer_group_lag_records{group="billing"}');
        return r.length === 2 ? r : undefined;
      });
      expect(lag.map((s) => [s.metric.topic, s.metric.partition, s.value]).sort()).toEqual([
        ["orders", "0", 6],
        ["orders", "1", 12],
      ]);
      const fsyncs = await waitFor("the fsync series in Prometheus", async () => {
        const r = await query(prometheus, "esb_storage_fsync_duration_seconds_count");
        return r.length === 1 && r[0].value >= 11 ? r : undefined;
      });
      expect(fsyncs[0].metric.job).toBe("es-broker");
      const p99 = await query(
        prometheus,
        "histogram_quantile(0.99, sum by (le) (esb_storage_fsync_duration_seconds_bucket))",
      );
      expect(p99[0].value).toBeGreaterThan(0);
      const records = await query(
        prometheus,
        'sum by (transport) (esb_produce_records_total{topic="orders"})',
      );
      expect(Object.fromEntries(records.map((r) => [r.metric.transport, r.value]))).toEqual({
        tcp: 30,
        http: 2,
      });
      const hw = await query(prometheus, 'esb_partition_high_watermark{topic="orders"}');
      expect(hw.map((s) => s.value).sort()).toEqual([16, 16]);
      // Prometheus scraped without a single failure.
      const targets = await json(`${prometheus}/api/v1/targets`);
      const active = targets.data.activeTargets as { health: string; lastError: string }[];
      expect(active.map((t) => [t.health, t.lastError])).toEqual([["up", ""]]);
    } finally {
      await client.close();
    }
  });

  it("the JSON log says which version, runtime and process start, and that a SIGTERM stop finished cleanly (newuser18 F8)", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(join(dir, "data"));
    running.push(broker);
    expect(await broker.stop("SIGTERM")).toBe(0);
    const events = broker
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const starting = events.find((e) => e.event === "broker.starting");
    // The same version and runtime as the stdout "listening" line, and the process's pid.
    const [, version, runtime] = /^es-broker (\S+) \((.+?)\) listening/.exec(broker.listening)!;
    expect(starting).toMatchObject({ level: "info", version, runtime, pid: broker.proc.pid });
    expect(events.indexOf(starting!)).toBe(0);
    const stopped = events.at(-1)!;
    expect(stopped).toMatchObject({
      level: "info",
      event: "broker.stopped",
      exit_code: 0,
      clean: true,
    });
    expect(typeof stopped.duration_ms).toBe("number");
  });

  it("GET /metrics on the HTTP port needs an admin key once keys exist; /healthz and /readyz need none", async () => {
    const { dir } = tempDir();
    const dataDir = join(dir, "data");
    const { key: admin } = await offlineAdminKey(dataDir, dir);
    const broker = await startBroker(dataDir);
    running.push(broker);
    const created = await json(`${broker.httpUrl}/v1/admin/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "ingest", role: "producer", topics: ["*"] }),
    });
    const get = (path: string, key?: string) =>
      fetch(`${broker.httpUrl}${path}`, {
        headers: key === undefined ? {} : { authorization: `Bearer ${key}` },
      });
    const anonymous = await get("/metrics");
    expect(anonymous.status).toBe(401);
    expect(((await anonymous.json()) as any).error.code).toBe("unauthenticated");
    const producer = await get("/metrics", created.key);
    expect(producer.status).toBe(403);
    expect(((await producer.json()) as any).error).toMatchObject({
      code: "forbidden",
      details: { operation: "metrics" },
    });
    const allowed = await get("/metrics", admin);
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await allowed.text();
    expect(promtoolCheckMetrics(text)).toEqual({ status: 0, output: "" });
    // The failed attempts are counted, and no key text is in the exposition.
    expect(text).toMatch(/esb_refusals_total\{kind="auth\.failed"\} 1\n/);
    expect(text).toMatch(
      /esb_request_errors_total\{transport="http",operation="metrics"|esb_build_info/,
    );
    expect(text.includes(admin) || text.includes(created.key)).toBe(false);
    for (const path of ["/healthz", "/readyz"]) expect((await get(path)).status).toBe(200);
  });

  it("GET /readyz answers 503 with progress while a large data directory recovers, then 200", async () => {
    const { dir } = tempDir();
    const dataDir = join(dir, "data");
    // Topics whose partition directories are empty: at start, recovery makes each one's first
    // segment (a file, a directory fsync), which takes a second or more on every runtime. Written
    // here in the layout of docs/storage.md "Files on disk".
    const topics = 2;
    const partitions = 300;
    for (let t = 0; t < topics; t++) {
      const topicDir = join(dataDir, "topics", `big-${t}`);
      mkdirSync(topicDir, { recursive: true, mode: 0o700 });
      writeFileSync(
        join(topicDir, "topic.json"),
        JSON.stringify({ name: `big-${t}`, partitions, config: { segment_bytes: 1024 } }),
        { mode: 0o600 },
      );
      for (let p = 0; p < partitions; p++) mkdirSync(join(topicDir, String(p)), { mode: 0o700 });
    }

    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    brokerOrigins.add(base); // its recovery answers are checked against the OpenAPI document too
    const starting = startBroker(dataDir, ["--http-port", String(port)]);
    const seen: { status: number; body: any; path: string; retryAfter: string | null }[] = [];
    let ready = false;
    const poll = (async () => {
      const deadline = Date.now() + 60_000;
      while (!ready && Date.now() < deadline) {
        try {
          const readyz = await fetch(`${base}/readyz`);
          seen.push({
            status: readyz.status,
            body: await readyz.json(),
            path: "/readyz",
            retryAfter: readyz.headers.get("retry-after"),
          });
          if (readyz.status === 200) ready = true;
          else {
            const other = await fetch(`${base}/v1/topics`);
            seen.push({
              status: other.status,
              body: await other.json(),
              path: "/v1/topics",
              retryAfter: other.headers.get("retry-after"),
            });
            const health = await fetch(`${base}/healthz`);
            seen.push({
              status: health.status,
              body: await health.json(),
              path: "/healthz",
              retryAfter: null,
            });
            // Gently: every request competes with the recovery it watches.
            await new Promise((r) => setTimeout(r, 25));
          }
        } catch {
          await new Promise((r) => setTimeout(r, 2)); // not listening yet
        }
      }
    })();
    const broker = await starting;
    running.push(broker);
    await poll;
    expect(broker.httpUrl).toBe(base);
    const recovering = seen.filter((s) => s.path === "/readyz" && s.status === 503);
    expect(recovering.length, JSON.stringify(seen.slice(0, 3))).toBeGreaterThan(0);
    for (const r of recovering) {
      expect(r.body.status).toBe("recovering");
      expect(r.retryAfter).toBe("1");
      expect(r.body.recovery).toMatchObject({
        phase: expect.stringMatching(/^(starting|topics|groups|producers|done)$/),
      });
      expect(r.body.recovery.partitions_done).toBeLessThanOrEqual(topics * partitions);
    }
    expect(
      recovering.some(
        (r) => r.body.recovery.phase === "topics" && r.body.recovery.topics_total === topics,
      ),
    ).toBe(true);
    // Progress never goes backwards.
    const done = recovering.map((r) => r.body.recovery.partitions_done);
    expect(done).toEqual([...done].sort((a, b) => a - b));
    for (const s of seen.filter((x) => x.path === "/v1/topics" && x.status !== 200)) {
      expect(s.status).toBe(503);
      expect(s.body.error.code).toBe("unavailable");
      expect(s.retryAfter).toBe("1");
    }
    for (const s of seen.filter((x) => x.path === "/healthz")) expect(s.status).toBe(200);
    expect(seen.at(-1)).toMatchObject({ path: "/readyz", status: 200, body: { status: "ready" } });
    expect(broker.stderr()).toMatch(/"event":"broker.ready".*"partitions":600/);
  });
});
