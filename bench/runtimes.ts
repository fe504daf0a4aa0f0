/**
 * Per-runtime benchmark (not a test): for each way of running es-broker — the Node bundle, Deno and
 * Bun from sources, the compiled binary — measures
 *
 * - start-up: ms from spawning `es-broker serve` (fresh data directory) to the first 200 of
 *   `GET /readyz` (recovery over, both ports serving), polled every 2 ms on a port chosen beforehand;
 * - idle RSS: resident memory (VmRSS of the runtime's own process) after 1 s of idling;
 * - produce throughput, one fixed case: 8 TCP connections, each sending batches of 100 records of
 *   100 bytes (no key) to a topic of 4 partitions, until 200 000 records are acknowledged;
 *   default `--flush-every-records 1` (every ack waits for an fsync; group commit shares them).
 *
 * Targets are interleaved round by round (machines here drift up to 2× between runs) and the median
 * of the rounds is reported, with each target's throughput relative to Node's in the same rounds.
 * The load generator (this process, on Node) shares the machine's CPUs with the broker.
 *
 *   node bench/runtimes.mjs [--rounds 3] [--quick] [--json out.json] [--targets node,bun]
 *
 * Prints a Markdown table (the one in docs/runtimes.md) and, with --json, writes the raw numbers.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TcpClient } from "../src/client/client.ts";
import { EntryBatchBuilder } from "../src/storage/record.ts";

interface Target {
  name: string;
  label: string;
  command: string[];
}

interface Sample {
  target: string;
  round: number;
  startupMs: number;
  idleRssMiB: number;
  recordsPerSecond: number;
  runtime: string;
}

function targets(root: string): Target[] {
  const src = join(root, "src/main.ts");
  return [
    {
      name: "node",
      label: "Node bundle (`node dist/es-broker.mjs`)",
      command: [process.execPath, join(root, "dist/es-broker.mjs")],
    },
    {
      name: "deno",
      label: "Deno, sources (`deno run -A src/main.ts`)",
      command: [
        join(root, "tools/node_modules/.bin/deno"),
        "run",
        "--allow-all",
        `--config=${join(root, "deno.json")}`,
        src,
      ],
    },
    {
      name: "bun",
      label: "Bun, sources (`bun src/main.ts`)",
      command: [join(root, "tools/node_modules/.bin/bun"), src],
    },
    {
      name: "binary",
      label: "compiled binary (`dist/es-broker`)",
      command: [join(root, "dist/es-broker")],
    },
  ];
}

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const server = net.createServer();
    server.once("error", rej);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => res(port));
    });
  });
}

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? NaN);
  return kib / 1024;
}

async function healthy(port: number): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/readyz`);
    await res.arrayBuffer();
    return res.ok;
  } catch {
    return false;
  }
}

async function measure(target: Target, round: number, records: number): Promise<Sample> {
  const dir = mkdtempSync(join(tmpdir(), `es-bench-runtimes-${target.name}-`));
  const [httpPort, tcpPort] = [await freePort(), await freePort()];
  const [cmd, ...args] = target.command;
  const started = performance.now();
  const proc = spawn(
    cmd,
    [
      ...args,
      "serve",
      "--data-dir",
      join(dir, "data"),
      "--http-port",
      String(httpPort),
      "--tcp-port",
      String(tcpPort),
      "--log-level",
      "warn",
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  proc.stdout.on("data", (d) => (stdout += d));
  proc.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise<number | string>((res) =>
    proc.on("exit", (code, signal) => res(code ?? signal ?? "?")),
  );
  try {
    let startupMs = NaN;
    while (performance.now() - started < 30_000) {
      if (proc.exitCode !== null)
        throw new Error(`[${target.name}] exited during start-up: ${stderr}`);
      if (await healthy(httpPort)) {
        startupMs = performance.now() - started;
        break;
      }
      await sleep(2);
    }
    if (Number.isNaN(startupMs))
      throw new Error(`[${target.name}] did not answer within 30 s: ${stderr}`);
    await sleep(1000);
    const idleRssMiB = rssMiB(proc.pid!);

    const admin = await TcpClient.connect({ host: "127.0.0.1", port: tcpPort });
    await admin.createTopic({ name: "bench", partitions: 4 });
    await admin.close();
    const connections = 8;
    const batchRecords = 100;
    const value = new Uint8Array(100).fill(120);
    const batch = (() => {
      const b = new EntryBatchBuilder();
      for (let i = 0; i < batchRecords; i++) b.add(null, value);
      return b.build();
    })();
    let acked = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: connections }, async (_, c) => {
        const client = await TcpClient.connect({ host: "127.0.0.1", port: tcpPort });
        let n = 0;
        while (acked < records) {
          await client.produce("bench", batch, { partition: (c + n++) % 4 });
          acked += batchRecords;
        }
        await client.close();
      }),
    );
    const recordsPerSecond = acked / ((performance.now() - t0) / 1000);
    proc.kill("SIGTERM");
    const code = await exited;
    if (code !== 0) throw new Error(`[${target.name}] exited ${code} on SIGTERM: ${stderr}`);
    const runtime = /\(([^)]*)\)/.exec(stdout)?.[1] ?? "?";
    return { target: target.name, round, startupMs, idleRssMiB, recordsPerSecond, runtime };
  } finally {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Runs the benchmark; resolves with the process exit code. */
export async function main(argv: string[], context: { root: string }): Promise<number> {
  const flag = (name: string) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const quick = argv.includes("--quick");
  const rounds = Number(flag("rounds") ?? (quick ? 1 : 3));
  const records = quick ? 20_000 : 200_000;
  const wanted = flag("targets")?.split(",");
  const list = targets(context.root).filter((t) => !wanted || wanted.includes(t.name));
  const samples: Sample[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const target of list) {
      const sample = await measure(target, round, records);
      samples.push(sample);
      console.error(JSON.stringify(sample));
    }
  }
  const nodeRate = (round: number) =>
    samples.find((s) => s.target === "node" && s.round === round)?.recordsPerSecond;
  const lines = [
    `| target | runtime | start-up to first answer, ms | idle RSS, MiB | produce, records/s | vs Node, same round |`,
    `|---|---|---:|---:|---:|---:|`,
  ];
  // "median (min–max)" over the rounds.
  const spread = (xs: number[], format: (x: number) => string) =>
    xs.length > 1
      ? `${format(median(xs))} (${format(Math.min(...xs))}–${format(Math.max(...xs))})`
      : format(xs[0]);
  const int = (x: number) => Math.round(x).toLocaleString("en-US");
  for (const target of list) {
    const mine = samples.filter((s) => s.target === target.name);
    const ratios = mine
      .map((s) => (nodeRate(s.round) ? s.recordsPerSecond / nodeRate(s.round)! : NaN))
      .filter((r) => !Number.isNaN(r));
    lines.push(
      `| ${target.label} | ${mine[0].runtime} | ${spread(
        mine.map((s) => s.startupMs),
        int,
      )} | ${spread(
        mine.map((s) => s.idleRssMiB),
        int,
      )} | ` +
        `${spread(
          mine.map((s) => s.recordsPerSecond),
          int,
        )} | ${target.name === "node" ? "1 (reference)" : ratios.length ? spread(ratios, (r) => `${r.toFixed(2)}×`) : "—"} |`,
    );
  }
  console.log(
    `${rounds} round(s), ${records.toLocaleString("en-US")} records per produce run; median (min–max) over the rounds:\n`,
  );
  console.log(lines.join("\n"));
  const out = flag("json");
  if (out) writeFileSync(out, JSON.stringify({ rounds, records, samples }, null, 2));
  return 0;
}
