/**
 * Store-and-forward to an upstream that requires TLS and an API key (docs/edge.md), with a
 * topic-name mapping and the mirror's metrics, against real processes: the central broker serves
 * TLS (test/e2e/pki.ts) and has keys; the edge forwards `sensors*` as `site17.sensors*`
 * (`--mirror-rename`). The edge first trusts the wrong CA, then presents a wrong key (from
 * `--mirror-api-key-file`), then the right key (from `$ES_BROKER_MIRROR_API_KEY`): each problem
 * is logged clearly and shows in `/metrics`, the batches wait and are sent again, and at the end
 * the upstream topic holds every edge record exactly once — same partition, offset, key, value
 * and timestamp — across a SIGKILL of the edge too. The key never reaches argv or a log.
 *
 * Node target only (targets.ts `nodeOnlyE2eFiles`): the mirror is the broker's own logic over the
 * TCP client; mirror.test.ts runs its outage scenario on every target.
 */
import { readFileSync, writeFileSync } from "node:fs";
import * as https from "node:https";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { promtoolCheckMetrics } from "../helpers/system-tools.ts";
import { startBroker, target, type BrokerProcess } from "./harness.ts";
import { waitFor, offlineAdminKey } from "./helpers.ts";
import { makePki } from "./pki.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

interface Rec {
  offset: number;
  timestamp: number;
  key: string | null;
  value: string;
}

/** A JSON request to the TLS central broker with the admin key; throws on a status ≥ 300. */
function centralCall(
  url: string,
  ca: string,
  key: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<any> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const request = https.request(
      `${url}${path}`,
      { method, headers, ca: readFileSync(ca) },
      (res) => {
        let text = "";
        res.on("data", (d) => (text += d));
        res.on("end", () =>
          (res.statusCode ?? 0) < 300
            ? resolve(text === "" ? null : JSON.parse(text))
            : reject(new Error(`${method} ${path}: ${res.statusCode} ${text}`)),
        );
      },
    );
    request.on("error", reject);
    request.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** Every record of `topic` partition `partition`, read through `get`. */
async function readAll(
  get: (path: string) => Promise<any>,
  topic: string,
  partition: number,
): Promise<Rec[]> {
  const out: Rec[] = [];
  for (let offset = 0; ; ) {
    const page = await get(
      `/v1/topics/${topic}/partitions/${partition}/records?offset=${offset}&max_records=500`,
    );
    for (const r of page.records)
      out.push({ offset: r.offset, timestamp: r.timestamp, key: r.key, value: r.value });
    if (page.next_offset >= page.high_watermark) return out;
    offset = page.next_offset;
  }
}

async function edgeGet(edge: BrokerProcess, path: string): Promise<any> {
  const res = await fetch(`${edge.httpUrl}${path}`);
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return JSON.parse(text);
}

async function produce(edge: BrokerProcess, from: number, count: number): Promise<void> {
  const records = Array.from({ length: count }, (_, i) => ({
    key: `sensor-${(from + i) % 5}`,
    value: `reading-${from + i}`,
  }));
  const res = await fetch(`${edge.httpUrl}/v1/topics/sensors/records`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ records }),
  });
  expect(res.status, await res.text()).toBeLessThan(300);
}

/** The value of one series in an exposition, or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/**
 * The central broker: TLS with a fresh PKI's server certificate ({@link makePki}) and API keys
 * (an admin key made offline), its data directory `central` in a new temporary directory named
 * `prefix`…, SIGKILLed after the test. `admin` calls its HTTP API with the admin key.
 */
async function startCentral(prefix: string) {
  const pki = makePki();
  const { dir } = tempDir(prefix);
  const centralDir = join(dir, "central");
  const { key: adminKey } = await offlineAdminKey(centralDir, dir);
  const central = await startBroker(centralDir, [
    "--tls-cert",
    pki.server.cert,
    "--tls-key",
    pki.server.key,
  ]);
  running.push(central);
  const admin = (method: string, path: string, body?: unknown) =>
    centralCall(central.httpUrl, pki.ca, adminKey, method, path, body);
  return { pki, dir, central, admin };
}

describe(`[${target}] the edge mirror to a TLS upstream with API keys`, () => {
  it("reports an untrusted certificate and a wrong key, retries, and forwards every record once to the mapped topic", async () => {
    const { pki, dir, central, admin } = await startCentral("es-broker-mirror-up-");
    // The mirror's key may only produce to site17.*; the mapped topic exists upstream.
    const mirrorKey: { key: string } = await admin("POST", "/v1/admin/keys", {
      name: "edge-17",
      role: "producer",
      topics: ["site17.*"],
    });
    await admin("POST", "/v1/topics", { name: "site17.sensors", partitions: 2 });

    const edgeDir = join(dir, "edge");
    const wrongKeyFile = join(dir, "wrong.key");
    writeFileSync(wrongKeyFile, `${mirrorKey.key.slice(0, -4)}AAAA\n`, { mode: 0o600 });
    const mirrorArgs = (ca: string, keyFile?: string) => [
      "--metrics-port",
      "0",
      "--mirror-to",
      `${central.tcp.host}:${central.tcp.port}`,
      "--mirror-topics",
      "sensors*",
      "--mirror-rename",
      "sensors*=site17.sensors*",
      "--mirror-tls-ca",
      ca,
      "--mirror-records-per-sec",
      "0",
      ...(keyFile === undefined ? [] : ["--mirror-api-key-file", keyFile]),
    ];
    const started: BrokerProcess[] = [];
    const startEdge = async (args: string[], env: Record<string, string> = {}) => {
      const edge = await startBroker(edgeDir, args, env);
      running.push(edge);
      started.push(edge);
      expect(edge.proc.spawnargs.join(" ")).not.toContain(mirrorKey.key);
      return edge;
    };
    const metrics = async (edge: BrokerProcess) => (await fetch(edge.metricsUrl!)).text();

    // 1. The edge trusts another CA: the handshake fails, named, and retried; writes go on.
    let edge = await startEdge(mirrorArgs(pki.otherCa), {
      ES_BROKER_MIRROR_API_KEY: mirrorKey.key,
    });
    await edgeGet(edge, "/healthz");
    const created = await fetch(`${edge.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors", partitions: 2 }),
    });
    expect(created.status).toBe(201);
    await produce(edge, 0, 40);
    await waitFor("the untrusted certificate in the log", async () =>
      /"event":"mirror.upstream_unreachable".*certificate/.test(edge.stderr()),
    );
    let text = await metrics(edge);
    expect(promtoolCheckMetrics(text)).toEqual({ status: 0, output: "" });
    expect(sample(text, 'esb_mirror_upstream_up{mirror="upstream"}')).toBe(0);
    const lagged = [0, 1].map(
      (p) =>
        sample(
          text,
          `esb_mirror_lag_records{mirror="upstream",topic="sensors",partition="${p}"}`,
        ) ?? 0,
    );
    expect(lagged[0] + lagged[1]).toBe(40);
    expect(
      sample(text, 'esb_mirror_failures_total{mirror="upstream",topic="sensors",partition="0"}'),
    ).toBeGreaterThan(0);
    await edge.stop("SIGKILL");

    // 2. The right CA, a wrong key from a file: refused, named, retried; nothing forwarded.
    edge = await startEdge(mirrorArgs(pki.ca, wrongKeyFile));
    await produce(edge, 40, 40);
    await waitFor("the refused key in the log", async () =>
      /"event":"mirror.upstream_refused","mirror":"upstream","code":"unauthenticated"/.test(
        edge.stderr(),
      ),
    );
    const group = await edgeGet(edge, "/v1/groups/mirror.upstream");
    expect(group.offsets.reduce((n: number, o: { lag: number }) => n + o.lag, 0)).toBe(80);
    text = await metrics(edge);
    for (const p of [0, 1])
      expect(
        sample(text, `esb_mirror_lag_seconds{mirror="upstream",topic="sensors",partition="${p}"}`),
      ).toBeGreaterThan(0);
    await edge.stop("SIGTERM");

    // 3. The right key from the environment: everything goes, to the mapped topic.
    const edgeArgs = mirrorArgs(pki.ca);
    const keyEnv = { ES_BROKER_MIRROR_API_KEY: mirrorKey.key };
    edge = await startEdge(edgeArgs, keyEnv);
    await produce(edge, 80, 40);
    const caughtUp = async (want: number) => {
      const t = await admin("GET", "/v1/topics/site17.sensors");
      return (
        t.partitions.reduce(
          (n: number, p: { high_watermark: number }) => n + p.high_watermark,
          0,
        ) >= want
      );
    };
    await waitFor("the upstream to hold 120 records", () => caughtUp(120));
    // SIGKILL mid-stream and again: still once each.
    await produce(edge, 120, 40);
    await edge.stop("SIGKILL");
    edge = await startEdge(edgeArgs, keyEnv);
    await produce(edge, 160, 40);
    await waitFor("the upstream to hold 200 records", () => caughtUp(200));
    await waitFor("the mirror's lag to reach 0 in /metrics", async () => {
      const t = await metrics(edge);
      return [0, 1].every(
        (p) =>
          sample(
            t,
            `esb_mirror_lag_records{mirror="upstream",topic="sensors",partition="${p}"}`,
          ) === 0,
      );
    });

    const edgeRead = (path: string) => edgeGet(edge, path);
    const centralRead = (path: string) => admin("GET", path);
    const values = new Set<string>();
    for (const p of [0, 1]) {
      const local = await readAll(edgeRead, "sensors", p);
      const upstream = await readAll(centralRead, "site17.sensors", p);
      expect(upstream).toEqual(local);
      for (const r of upstream) values.add(r.value);
    }
    expect(values.size).toBe(200);
    await expect(admin("GET", "/v1/topics/sensors")).rejects.toThrow(/404/);

    text = await metrics(edge);
    expect(promtoolCheckMetrics(text)).toEqual({ status: 0, output: "" });
    expect(sample(text, 'esb_mirror_upstream_up{mirror="upstream"}')).toBe(1);
    const hw = (await edgeGet(edge, "/v1/topics/sensors")).partitions.map(
      (p: { high_watermark: number }) => p.high_watermark,
    );
    for (const p of [0, 1]) {
      const labels = `{mirror="upstream",topic="sensors",partition="${p}"}`;
      expect(sample(text, `esb_mirror_last_forwarded_offset${labels}`)).toBe(hw[p] - 1);
      expect(sample(text, `esb_mirror_lag_seconds${labels}`)).toBe(0);
      expect(sample(text, `esb_mirror_partition_stopped${labels}`)).toBe(0);
    }
    expect(
      [0, 1].reduce(
        (n, p) =>
          n +
          (sample(
            text,
            `esb_mirror_forwarded_records_total{mirror="upstream",topic="sensors",partition="${p}"}`,
          ) ?? 0),
        0,
      ),
    ).toBeGreaterThan(0);
    // The key is in no log line of any run.
    for (const e of started) expect(e.stderr()).not.toContain(mirrorKey.key.slice(-20));
    expect(central.stderr()).not.toContain(mirrorKey.key.slice(-20));
  }, 120_000);

  it("logs a key that may not create the upstream topic as upstream_refused, not a stop, and resumes once it exists", async () => {
    const { pki, dir, central, admin } = await startCentral("es-broker-mirror-create-");
    // A producer key: it may produce to sensors*, but not create topics.
    const mirrorKey: { key: string } = await admin("POST", "/v1/admin/keys", {
      name: "edge-18",
      role: "producer",
      topics: ["sensors*"],
    });
    const edge = await startBroker(
      join(dir, "edge"),
      [
        "--metrics-port",
        "0",
        "--mirror-to",
        `${central.tcp.host}:${central.tcp.port}`,
        "--mirror-topics",
        "sensors*",
        "--mirror-tls-ca",
        pki.ca,
        "--mirror-records-per-sec",
        "0",
      ],
      { ES_BROKER_MIRROR_API_KEY: mirrorKey.key },
    );
    running.push(edge);
    // The start-up line names the mirror's target and patterns (newuser17 F7), never its key.
    expect(edge.listening).toContain(
      ` mirror=${central.tcp.host}:${central.tcp.port} mirror_topics=sensors*`,
    );
    expect(edge.listening).not.toContain(mirrorKey.key.slice(-20));
    const created = await fetch(`${edge.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors", partitions: 2 }),
    });
    expect(created.status).toBe(201);
    await produce(edge, 0, 20);

    // The real cause, at warn, naming the topic, the refused operation and the fix.
    const refused = () =>
      edge
        .stderr()
        .split("\n")
        .filter((l) => l.includes('"event":"mirror.upstream_refused"'))
        .map((l) => JSON.parse(l.slice(l.indexOf("{"))));
    await waitFor("mirror.upstream_refused for the create", () => refused().length > 0);
    const line = refused()[0];
    expect(line).toMatchObject({
      level: "warn",
      topic: "sensors",
      upstream_topic: "sensors",
      operation: "create_topic",
      code: "forbidden",
    });
    expect(line.error).toMatch(/edge-18.*role producer.*may not create_topic/);
    expect(line.fix).toMatch(/create topic "sensors" upstream.*admin/);
    // Let it retry a few times: still one line per cause, and not a stopped partition.
    let text = "";
    await waitFor("a few retries", async () => {
      text = await (await fetch(edge.metricsUrl!)).text();
      return [0, 1].every(
        (p) =>
          (sample(
            text,
            `esb_mirror_failures_total{mirror="upstream",topic="sensors",partition="${p}"}`,
          ) ?? 0) >= 3,
      );
    });
    expect(refused()).toHaveLength(1);
    expect(edge.stderr()).not.toContain("mirror.partition_stopped");
    for (const p of [0, 1])
      expect(
        sample(
          text,
          `esb_mirror_partition_stopped{mirror="upstream",topic="sensors",partition="${p}"}`,
        ),
      ).toBe(0);

    // The operator creates it upstream: forwarding resumes by itself, every record once.
    await admin("POST", "/v1/topics", { name: "sensors", partitions: 2 });
    await waitFor("the upstream to hold 20 records", async () => {
      const t = await admin("GET", "/v1/topics/sensors");
      return (
        t.partitions.reduce(
          (n: number, p: { high_watermark: number }) => n + p.high_watermark,
          0,
        ) === 20
      );
    });
    await waitFor("the mirror's lag to reach 0", async () => {
      text = await (await fetch(edge.metricsUrl!)).text();
      return [0, 1].every(
        (p) =>
          sample(
            text,
            `esb_mirror_lag_records{mirror="upstream",topic="sensors",partition="${p}"}`,
          ) === 0,
      );
    });
    expect(edge.stderr()).not.toContain("mirror.partition_stopped");
    expect(edge.stderr()).not.toContain(mirrorKey.key.slice(-20));
    // Each partition said it forwards once the refusal was over (newuser17 F7).
    const forwarding = () =>
      edge
        .stderr()
        .split("\n")
        .filter((l) => l.includes('"event":"mirror.partition_forwarding"'))
        .map((l) => JSON.parse(l.slice(l.indexOf("{"))));
    await waitFor("mirror.partition_forwarding after the refusal", () =>
      [0, 1].every((p) =>
        forwarding().some((f) => f.partition === p && f.after === "mirror.upstream_refused"),
      ),
    );
    for (const p of [0, 1]) {
      const lines = forwarding().filter((f) => f.partition === p);
      expect(lines.at(-1)).toMatchObject({
        level: "info",
        mirror: "upstream",
        topic: "sensors",
        upstream_topic: "sensors",
        after: "mirror.upstream_refused",
      });
      // At most a first one (caught up before the records came) and the one after the refusal.
      expect(lines.length).toBeLessThanOrEqual(2);
    }
  }, 120_000);

  it("a revoked key: upstream_up 0, logged once; a new key in --mirror-api-key-file and SIGHUP resume it without a restart (newuser17 #4)", async () => {
    const { pki, dir, central, admin } = await startCentral("es-broker-mirror-rotate-");
    await admin("POST", "/v1/topics", { name: "sensors", partitions: 2 });
    const newKey = async (name: string): Promise<string> =>
      (
        (await admin("POST", "/v1/admin/keys", {
          name,
          role: "producer",
          topics: ["sensors"],
        })) as { key: string }
      ).key;
    const oldKey = await newKey("edge-old");
    const keyFile = join(dir, "mirror.key");
    writeFileSync(keyFile, `${oldKey}\n`, { mode: 0o600 });
    const edge = await startBroker(join(dir, "edge"), [
      ...["--metrics-port", "0", "--mirror-to", `${central.tcp.host}:${central.tcp.port}`],
      ...["--mirror-topics", "sensors", "--mirror-tls-ca", pki.ca],
      ...["--mirror-records-per-sec", "0", "--mirror-api-key-file", keyFile],
    ]);
    running.push(edge);
    const created = await fetch(`${edge.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "sensors", partitions: 2 }),
    });
    expect(created.status).toBe(201);
    const upstreamHolds = async (want: number) =>
      (await admin("GET", "/v1/topics/sensors")).partitions.reduce(
        (n: number, p: { high_watermark: number }) => n + p.high_watermark,
        0,
      ) === want;
    const up = async () =>
      sample(
        await (await fetch(edge.metricsUrl!)).text(),
        'esb_mirror_upstream_up{mirror="upstream"}',
      );
    const events = (event: string) =>
      edge
        .stderr()
        .split("\n")
        .filter((l) => l.includes(`"event":"${event}"`))
        .map((l) => JSON.parse(l.slice(l.indexOf("{"))));
    await produce(edge, 0, 20);
    await waitFor("20 records upstream with the first key", () => upstreamHolds(20));
    expect(await up()).toBe(1);

    // Revoked upstream: every batch refused, the upstream down for the alert, said once.
    await admin("DELETE", "/v1/admin/keys/edge-old");
    await produce(edge, 20, 20);
    await waitFor(
      "the revoked key in the log",
      async () => events("mirror.upstream_refused").length > 0,
    );
    await waitFor("esb_mirror_upstream_up 0", async () => (await up()) === 0);
    // Several retries later (backoff 100 ms doubling): still one line.
    await waitFor("retries", async () => {
      const t = await (await fetch(edge.metricsUrl!)).text();
      return [0, 1].every(
        (p) =>
          (sample(
            t,
            `esb_mirror_failures_total{mirror="upstream",topic="sensors",partition="${p}"}`,
          ) ?? 0) >= 5,
      );
    });
    expect(events("mirror.upstream_refused")).toHaveLength(1);
    expect(await upstreamHolds(20)).toBe(true);

    // A new key in the file and SIGHUP: reloaded (the file named, never the key), used at once.
    const rotated = await newKey("edge-new");
    writeFileSync(keyFile, `${rotated}\n`, { mode: 0o600 });
    edge.proc.kill("SIGHUP");
    await waitFor(
      "mirror.api_key_reloaded",
      async () => events("mirror.api_key_reloaded").length > 0,
    );
    expect(events("mirror.api_key_reloaded")[0]).toMatchObject({
      mirror: "upstream",
      file: keyFile,
      changed: true,
    });
    await waitFor("40 records upstream with the new key", () => upstreamHolds(40));
    await waitFor("esb_mirror_upstream_up 1", async () => (await up()) === 1);
    expect(events("mirror.upstream_refused")).toHaveLength(1);
    expect(events("mirror.upstream_reachable").length).toBeGreaterThan(0);
    // An unreadable file keeps the key in force, said as an error.
    writeFileSync(keyFile, "", { mode: 0o600 });
    edge.proc.kill("SIGHUP");
    await waitFor(
      "mirror.api_key_reload_failed",
      async () => events("mirror.api_key_reload_failed").length > 0,
    );
    await produce(edge, 40, 10);
    await waitFor("50 records upstream", () => upstreamHolds(50));
    for (const key of [oldKey, rotated]) {
      expect(edge.stderr()).not.toContain(key.slice(-20));
      expect(edge.proc.spawnargs.join(" ")).not.toContain(key);
    }
  }, 120_000);
});
