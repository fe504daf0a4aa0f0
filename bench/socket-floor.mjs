// The socket floor: what one small request costs in each runtime's socket layer alone, with no
// broker behind it. A C load generator (redis-benchmark, one request of a 256-byte value in
// flight per connection) drives a bare constant-answer server (bench/socket-floor-server.mjs) in
// each variant, the variants interleaved round by round; the figure is the server's CPU per
// request (user and system time from /proc/<pid>/stat over the run, 10 ms ticks) and its
// requests/s. Used to decide whether Bun.listen is worth a socket adapter (docs/benchmarks.md,
// "The socket floor").
//   node bench/socket-floor.mjs [--requests 200000] [--rounds 3] [--clients 64,1]
//                               [--variants node:node-net,node:node-onread,bun:node-net,bun:bun-listen,redis:memory]
// `node:node-direct` writes on the socket's handle (as src/runtime/tcp.ts on Node). A variant
// `runtime:kind:defer` writes its answers in one batch per event-loop turn
// (socket-floor-server.mjs).
import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const requests = Number(flag("--requests", "200000"));
const rounds = Number(flag("--rounds", "3"));
const clientCounts = flag("--clients", "64,1").split(",").map(Number);
const variants = flag(
  "--variants",
  "node:node-net,node:node-onread,bun:node-net,bun:bun-listen,redis:memory",
).split(",");
const runtimes = { node: process.execPath, bun: join(root, "tools/node_modules/.bin/bun") };

function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { user: Number(fields[11]), system: Number(fields[12]) };
}

async function freePort() {
  const { createServer } = await import("node:net");
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function start(variant) {
  const [runtime, kind, mode] = variant.split(":");
  if (runtime === "redis") {
    // The native reference: Redis without persistence (`redis:memory`), SET into memory.
    const port = await freePort();
    const child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    return new Promise((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (chunk) => {
        out += chunk;
        if (out.includes("Ready to accept connections")) resolve({ child, port });
      });
      child.once("exit", (code) => reject(new Error(`redis-server exited (${code}): ${out}`)));
    });
  }
  const child = spawn(
    runtimes[runtime],
    [join(here, "socket-floor-server.mjs"), kind, ...(mode ? [mode] : [])],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const m = /listening: (\d+)/.exec(out);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.once("exit", (code) => reject(new Error(`${variant} exited (${code}): ${out}`)));
  });
}

const value = "x".repeat(256);
const results = new Map();
for (let round = 1; round <= rounds; round++) {
  for (const clients of clientCounts) {
    const order = round % 2 === 1 ? variants : [...variants].reverse();
    for (const variant of order) {
      const { child, port } = await start(variant);
      const n = clients === 1 ? Math.max(1000, Math.floor(requests / 4)) : requests;
      const before = cpuTicks(child.pid);
      const run = spawnSync(
        "redis-benchmark",
        [
          "-h",
          "127.0.0.1",
          "-p",
          String(port),
          "-c",
          String(clients),
          "-n",
          String(n),
          "-P",
          "1",
          "-q",
          "SET",
          "k",
          value,
        ],
        { encoding: "utf8" },
      );
      const after = cpuTicks(child.pid);
      child.kill("SIGTERM");
      const m = /([\d.]+) requests per second/.exec(run.stdout);
      if (!m) throw new Error(`redis-benchmark: ${run.stdout} ${run.stderr}`);
      const user = ((after.user - before.user) * 10000) / n;
      const system = ((after.system - before.system) * 10000) / n;
      const key = `${variant} c=${clients}`;
      const row = { round, rps: Number(m[1]), user, system, cpu: user + system };
      if (!results.has(key)) results.set(key, []);
      results.get(key).push(row);
      console.log(
        `round ${round} ${key.padEnd(26)} ${row.rps.toFixed(0).padStart(7)} req/s  CPU ${row.cpu.toFixed(2)} µs/req (user ${user.toFixed(2)}, system ${system.toFixed(2)})`,
      );
    }
  }
}
console.log("\nmeans:");
console.log("| variant | clients | requests/s | CPU µs/request | user | system |");
console.log("|---|--:|--:|--:|--:|--:|");
for (const [key, rows] of results) {
  const mean = (f) => rows.reduce((s, r) => s + r[f], 0) / rows.length;
  const [variant, c] = key.split(" ");
  console.log(
    `| ${variant} | ${c.slice(2)} | ${mean("rps").toFixed(0)} | ${mean("cpu").toFixed(2)} | ${mean("user").toFixed(2)} | ${mean("system").toFixed(2)} |`,
  );
}
