// The mirror's CPU cost on the edge (docs/edge.md "The edge node", docs/benchmarks.md "The
// mirror's CPU on the edge"): what forwarding costs the edge broker per record, beside what
// taking the records in costs. Two real brokers (`dist/es-broker.mjs`, or BENCH_BROKER_BUNDLE),
// an upstream and an edge, on loopback; per round and per shape of produce:
//   1. `produce`: a fresh edge without a mirror takes N records over HTTP (JSON, keep-alive);
//      its CPU over that phase / N.
//   2. `backlog`: the same edge restarted with --mirror-to the upstream forwards those N records;
//      its CPU from /readyz to the upstream holding all N / N (recovery is before /readyz).
//   3. `live`: then N more records are produced to it while it forwards, until the upstream
//      holds all 2N; its CPU over that phase / N (taking in plus forwarding, against 1.).
// CPU is user + system time from /proc/<pid>/stat (10 ms ticks); the machine may be shared, so
// compare phases within one run and note `uptime` beside the figures.
//   node bench/mirror-cpu.mjs [--records 20000] [--rounds 3] [--shapes 100x4,1x16]
//                             [--ports FIRST]
// A shape RxC: R records per request, C concurrent keep-alive connections. Ports: any free ones,
// or consecutive ones from FIRST. Each result is printed as one JSON line.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const records = Number(flag("--records", "20000"));
const rounds = Number(flag("--rounds", "3"));
const shapes = flag("--shapes", "100x4,1x16")
  .split(",")
  .map((s) => {
    const [perRequest, connections] = s.split("x").map(Number);
    return { name: s, perRequest, connections };
  });
let nextPort = Number(flag("--ports", "0"));
const bundle = process.env.BENCH_BROKER_BUNDLE ?? join(root, "dist/es-broker.mjs");
const partitions = 4;
const ticksPerSecond = 100;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** User + system CPU of `pid` so far, ms. */
function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
}

/** Starts a broker on `dataDir` (ports from --ports, or any free ones); resolves once /readyz answers 200. */
async function start(dataDir, extra) {
  const http = nextPort === 0 ? 0 : nextPort++;
  const tcp = nextPort === 0 ? 0 : nextPort++;
  const proc = spawn(
    process.execPath,
    [bundle, "serve", "--data-dir", dataDir, "--http-port", String(http)]
      .concat(["--tcp-port", String(tcp), "--log-level", "warn"])
      .concat(extra),
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stdout = "";
  let stderr = "";
  proc.stdout.on("data", (d) => {
    stdout += d;
  });
  proc.stderr.on("data", (d) => {
    stderr += d;
  });
  const t0 = Date.now();
  let listening = null;
  while (listening === null) {
    if (proc.exitCode !== null) throw new Error(`broker exited: ${stderr}`);
    if (Date.now() - t0 > 60_000) throw new Error(`broker did not listen in 60 s: ${stderr}`);
    listening = / http=http:\/\/([^ ]+) tcp=([^ ]+)/.exec(stdout);
    if (listening === null) await sleep(10);
  }
  const url = `http://${listening[1]}`;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`broker exited: ${stderr}`);
    try {
      const res = await fetch(`${url}/readyz`);
      await res.arrayBuffer();
      if (res.ok) break;
    } catch {}
    if (Date.now() - t0 > 60_000) throw new Error(`broker not ready in 60 s: ${stderr}`);
    await sleep(10);
  }
  return {
    url,
    tcp: listening[2],
    pid: proc.pid,
    async stop() {
      proc.kill("SIGTERM");
      if (proc.exitCode === null) await new Promise((r) => proc.once("exit", r));
    },
  };
}

async function call(url, method, body) {
  const res = await fetch(url, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${url}: ${res.status} ${text}`);
  return text === "" ? null : JSON.parse(text);
}

/** Sum of the topic's high watermarks, 0 while it does not exist. */
async function held(broker) {
  const res = await fetch(`${broker.url}/v1/topics/bench`);
  if (res.status === 404) {
    await res.arrayBuffer();
    return 0;
  }
  const t = await res.json();
  return t.partitions.reduce((n, p) => n + p.high_watermark, 0);
}

async function waitHeld(broker, count) {
  const t0 = Date.now();
  while ((await held(broker)) < count) {
    if (Date.now() - t0 > 300_000) throw new Error(`upstream holds fewer than ${count} records`);
    await sleep(50);
  }
}

/** Produces `count` records of ~100 bytes in `shape` to the edge's topic `bench`. */
async function produce(broker, shape, count, from) {
  let sent = 0;
  await Promise.all(
    Array.from({ length: shape.connections }, async () => {
      while (sent < count) {
        const n = Math.min(shape.perRequest, count - sent);
        const seq = from + sent;
        sent += n;
        const batch = Array.from({ length: n }, (_, i) => ({
          key: `sensor-${(seq + i) % 200}`,
          value: JSON.stringify({ seq: seq + i, temp_c: 21.5, pad: "x".repeat(48) }),
        }));
        await call(`${broker.url}/v1/topics/bench/records`, "POST", { records: batch });
      }
    }),
  );
}

const results = [];
console.log(
  `uptime before: load ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}`,
);
for (let round = 0; round < rounds; round++)
  for (const shape of shapes) {
    const dir = mkdtempSync(join(tmpdir(), "es-bench-mirror-cpu-"));
    const upstream = await start(join(dir, "upstream"), []);
    let edge = await start(join(dir, "edge"), []);
    try {
      await call(`${upstream.url}/v1/topics`, "POST", { name: "bench", partitions });
      await call(`${edge.url}/v1/topics`, "POST", { name: "bench", partitions });
      let c0 = cpuMs(edge.pid);
      let t0 = Date.now();
      await produce(edge, shape, records, 0);
      const produceUs = ((cpuMs(edge.pid) - c0) * 1000) / records;
      const produceRate = records / ((Date.now() - t0) / 1000);
      await edge.stop();
      edge = await start(join(dir, "edge"), [
        ...["--mirror-to", upstream.tcp, "--mirror-topics", "bench"],
      ]);
      c0 = cpuMs(edge.pid);
      t0 = Date.now();
      await waitHeld(upstream, records);
      const backlogUs = ((cpuMs(edge.pid) - c0) * 1000) / records;
      const backlogRate = records / ((Date.now() - t0) / 1000);
      c0 = cpuMs(edge.pid);
      t0 = Date.now();
      await produce(edge, shape, records, records);
      await waitHeld(upstream, 2 * records);
      const liveUs = ((cpuMs(edge.pid) - c0) * 1000) / records;
      const liveRate = records / ((Date.now() - t0) / 1000);
      const row = {
        round,
        shape: shape.name,
        produce_us: +produceUs.toFixed(1),
        backlog_us: +backlogUs.toFixed(1),
        live_us: +liveUs.toFixed(1),
        live_over_produce: +(liveUs / produceUs).toFixed(2),
        produce_per_s: Math.round(produceRate),
        backlog_per_s: Math.round(backlogRate),
        live_per_s: Math.round(liveRate),
        load1: +loadavg()[0].toFixed(2),
      };
      results.push(row);
      console.log(JSON.stringify(row));
    } finally {
      await edge.stop();
      await upstream.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }
console.log(
  `uptime after: load ${loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}`,
);
