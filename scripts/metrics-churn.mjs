// Field failure 29c at scale (docs/operations.md "Cardinality"): the real broker process
// (dist/es-broker.mjs; `node scripts/build.mjs --bundle-only` first) creates and deletes topics and
// consumer groups in a loop — per round a 2-partition topic, a produce, a fetch, a commit of a group
// on it, the topic deleted (its group goes with it) — while /metrics is scraped. It checks that
// series of deleted topics and groups are gone by the next scrape, that the series count returns
// to its baseline, that no group file is left, and that the resident set returns to within 10 % of
// the baseline (taken after a warm-up of `--warmup` rounds, once the JIT and the allocator have
// settled; measured after full garbage collections at once after the last round and again after
// `--idle-seconds` of idling). Exit 1 when one does not hold. It reports where the memory is:
// process.memoryUsage(), V8's heap spaces (used/size) and the resident anonymous mappings by kind
// (/proc/PID/smaps: glibc's brk heap, mappings ≤ 1 MiB — V8's heap pages —, the rest).
//
// `node scripts/metrics-churn.mjs [--rounds 5000] [--warmup 1000] [--every 500] [--idle-seconds 30]
//   [--json out.json] [--heap-snapshots DIR] [--node-flags=--max-semi-space-size=4] [--env K=V]...`
// (the integration test runs 300 rounds in process: test/integration/metrics-exposition.test.ts).
import { spawn } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "5000" },
    warmup: { type: "string", default: "1000" },
    every: { type: "string", default: "500" },
    json: { type: "string" },
    "malloc-arena-max": { type: "string" },
    env: { type: "string", multiple: true, default: [] },
    "node-flags": { type: "string", default: "" },
    "idle-seconds": { type: "string", default: "30" },
    "heap-snapshots": { type: "string" },
  },
});
// `--heap-snapshots DIR`: V8 heap snapshots at the baseline and at the end (DIR/baseline.heapsnapshot,
// DIR/end.heapsnapshot), for a diff by constructor in Chrome DevTools or any snapshot reader.
const snapshotDir = values["heap-snapshots"];
const rounds = Number(values.rounds);
// `--malloc-arena-max N`: run the broker with glibc's MALLOC_ARENA_MAX=N (fewer malloc arenas for
// libuv's threads, which otherwise keep freed pages resident).
// `--env NAME=VALUE` (repeatable): more environment for the broker (glibc's MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_, ...); `--node-flags "..."`: runtime flags for it (V8's
// --max-semi-space-size=MiB, ...).
const brokerEnv = {
  ...(values["malloc-arena-max"] === undefined
    ? {}
    : { MALLOC_ARENA_MAX: values["malloc-arena-max"] }),
  ...Object.fromEntries(
    values.env.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  ),
};
const nodeFlags = values["node-flags"].split(" ").filter((f) => f !== "");
// `--idle-seconds S`: after the last round, the broker idles S seconds (no requests but the
// scrapes) and the resident set is measured again: what V8's memory reducer gives back once the
// load is gone (it acts after seconds of low allocation).
const idleSeconds = Number(values["idle-seconds"]);
const warmup = Number(values.warmup);
const every = Number(values.every);

const dir = mkdtempSync(join(tmpdir(), "es-metrics-churn-"));
// A full garbage collection on SIGUSR2 (--expose-gc and a preloaded handler): baseline and end are
// measured after one, so they compare memory the broker still holds, not garbage V8 has not yet
// collected nor heap it keeps reserved after a burst. The handler then writes where the memory is
// (process.memoryUsage() and V8's heap spaces) to a file the script reads.
const memoryFile = join(dir, "memory.json");
const gcOnSignal = `data:text/javascript,${encodeURIComponent(
  `import v8 from "node:v8"; import fs from "node:fs";
process.on("SIGUSR2", () => {
  globalThis.gc(); globalThis.gc();
  const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((s) => [s.space_name, { size: s.space_size, used: s.space_used_size }]));
  fs.writeFileSync(${JSON.stringify(memoryFile)}, JSON.stringify({ usage: process.memoryUsage(), spaces, mallocedMemory: v8.getHeapStatistics().malloced_memory }));
});
process.on("SIGWINCH", () => {
  globalThis.gc();
  v8.writeHeapSnapshot(${JSON.stringify(join(dir, "snapshot.tmp"))});
  fs.renameSync(${JSON.stringify(join(dir, "snapshot.tmp"))}, ${JSON.stringify(join(dir, "snapshot.heapsnapshot"))});
});`,
)}`;
const proc = spawn(
  process.execPath,
  [
    ...nodeFlags,
    "--expose-gc",
    "--import",
    gcOnSignal,
    join(root, "dist/es-broker.mjs"),
    "serve",
    "--data-dir",
    join(dir, "data"),
    "--http-port",
    "0",
    "--tcp-port",
    "0",
    "--metrics-port",
    "0",
    "--cleanup-interval-ms",
    "0",
    "--log-level",
    "warn",
  ],
  { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, ...brokerEnv } },
);
const line = await new Promise((resolve, reject) => {
  let out = "";
  proc.stdout.on("data", (d) => {
    out += d;
    if (out.includes("\n")) resolve(out.slice(0, out.indexOf("\n")));
  });
  proc.on("exit", (code) => reject(new Error(`the broker exited (${code}) before listening`)));
});
const http = /http=(http:\/\/\S+)/.exec(line)[1];
const metricsUrl = / metrics=(http:\/\/\S+)/.exec(line)[1];

async function call(method, path, body) {
  const res = await fetch(`${http}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text;
}

/** Series of one scrape (sample lines), those naming churn objects, and RSS from /proc. */
async function scrape() {
  const text = await (await fetch(metricsUrl)).text();
  const series = text.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
  const leaked = series.filter((l) => l.includes("churn-") || l.includes("group-"));
  const status = readFileSync(`/proc/${proc.pid}/status`, "utf8");
  const kB = (field) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)[1]) * 1024;
  const rssBytes = kB("VmRSS");
  // Anonymous memory (heaps, buffers) apart from file-backed pages (the runtime's own binary and
  // libraries, paged in as more of their code runs): a leak shows in the first.
  const anonBytes = kB("RssAnon");
  const fileBytes = kB("RssFile");
  const heapLine = series.find((l) => l.startsWith("esb_heap_used_bytes "));
  const heapUsedBytes = heapLine === undefined ? 0 : Number(heapLine.split(" ")[1]);
  return {
    series: series.length,
    leaked: leaked.length,
    rssBytes,
    anonBytes,
    fileBytes,
    heapUsedBytes,
    text,
  };
}

/**
 * Resident anonymous memory by kind of mapping (/proc/PID/smaps): the brk heap (glibc's main
 * arena), mappings of 64 MiB reservations (glibc's per-thread arenas), V8's heap pages (256 KiB
 * aligned mappings) and the rest (other mmaps: large Buffers, code).
 */
function smapsBreakdown() {
  const out = { brkHeap: 0, threadArenas: 0, smallMaps: 0, otherAnon: 0 };
  let text;
  try {
    text = readFileSync(`/proc/${proc.pid}/smaps`, "utf8");
  } catch {
    return out;
  }
  let size = 0;
  let kind = "";
  for (const line of text.split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (head !== null) {
      size = Number.parseInt(head[2], 16) - Number.parseInt(head[1], 16);
      const path = head[4];
      kind =
        path === "[heap]"
          ? "brkHeap"
          : path !== ""
            ? ""
            : size >= 60 * 1048576 && size <= 64 * 1048576
              ? "threadArenas"
              : size <= 1048576
                ? "smallMaps"
                : "otherAnon";
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss !== null && kind !== "") out[kind] += Number(rss[1]) * 1024;
  }
  return out;
}

/** Writes a heap snapshot of the broker (SIGWINCH, see above) to `snapshotDir/name.heapsnapshot`. */
async function heapSnapshot(name) {
  if (snapshotDir === undefined) return;
  const file = join(dir, "snapshot.heapsnapshot");
  proc.kill("SIGWINCH");
  while (!existsSync(file)) await new Promise((r) => setTimeout(r, 200));
  mkdirSync(snapshotDir, { recursive: true });
  copyFileSync(file, join(snapshotDir, `${name}.heapsnapshot`));
  rmSync(file);
}

function readMemoryFile() {
  try {
    return JSON.parse(readFileSync(memoryFile, "utf8"));
  } catch {
    return null;
  }
}

/**
 * A scrape after full garbage collections (SIGUSR2, see above) and a moment for V8 to give pages
 * back: the lowest RSS of three rounds of collect, wait 1 s, scrape.
 */
async function settled() {
  let best = null;
  for (let i = 0; i < 3; i++) {
    proc.kill("SIGUSR2");
    await new Promise((r) => setTimeout(r, 1000));
    const now = { ...(await scrape()), memory: readMemoryFile(), smaps: smapsBreakdown() };
    if (best === null || now.rssBytes < best.rssBytes) best = now;
  }
  return best;
}

/** Where the memory is, in MiB, from a settled scrape. */
function breakdown(s) {
  const MiB = (n) => Math.round((n / 1048576) * 10) / 10;
  const u = s.memory?.usage ?? {};
  return {
    rss: MiB(s.rssBytes),
    anon: MiB(s.anonBytes),
    file: MiB(s.fileBytes),
    heapUsed: MiB(u.heapUsed ?? 0),
    heapTotal: MiB(u.heapTotal ?? 0),
    external: MiB(u.external ?? 0),
    arrayBuffers: MiB(u.arrayBuffers ?? 0),
    v8Malloced: MiB(s.memory?.mallocedMemory ?? 0),
    spaces: Object.fromEntries(
      Object.entries(s.memory?.spaces ?? {}).map(([k, v]) => [k, `${MiB(v.used)}/${MiB(v.size)}`]),
    ),
    smaps: Object.fromEntries(Object.entries(s.smaps ?? {}).map(([k, v]) => [k, MiB(v)])),
  };
}

async function round(i) {
  const topic = `churn-${i}`;
  await call("POST", "/v1/topics", { name: topic, partitions: 2 });
  await call("POST", `/v1/topics/${topic}/records`, {
    records: [
      { key: "k", value: `v-${i}`, partition: 1 },
      { key: "k", value: `w-${i}`, partition: 1 },
    ],
  });
  await call("GET", `/v1/topics/${topic}/partitions/1/records?offset=0`);
  const offsets = [{ topic, partition: 1, offset: 2 }];
  await call("POST", `/v1/groups/group-${i}/offsets`, { offsets });
  await call("DELETE", `/v1/topics/${topic}`);
}

const rows = [];
let failed = false;
try {
  await call("POST", "/v1/topics", { name: "stays", partitions: 1 });
  await call("POST", "/v1/topics/stays/records", { records: [{ value: "x" }] });
  const cold = await scrape();
  for (let i = 0; i < warmup; i++) await round(`w${i}`);
  const baseline = await settled();
  const started = Date.now();
  rows.push({ round: 0, ...baseline, text: undefined });
  console.log(`baseline after ${warmup} warm-up rounds: ${JSON.stringify(breakdown(baseline))}`);
  await heapSnapshot("baseline");
  for (let i = 0; i < rounds; i++) {
    await round(i);
    if ((i + 1) % every === 0 || i + 1 === rounds) {
      const s = await scrape();
      rows.push({ round: i + 1, ...s, text: undefined });
      if (s.leaked > 0 || s.series !== baseline.series) failed = true;
      console.log(
        `round ${String(i + 1).padStart(5)}: ${s.series} series (${s.leaked} of deleted objects), RSS ${(s.rssBytes / 1048576).toFixed(1)} MiB, heap used ${(s.heapUsedBytes / 1048576).toFixed(1)} MiB`,
      );
    }
  }
  const seconds = (Date.now() - started) / 1000;
  const end = await settled();
  await heapSnapshot("end");
  // Idle: scraped every 5 s as Prometheus would, then measured after GCs again.
  for (let waited = 0; waited < idleSeconds; waited += 5) {
    await new Promise((r) => setTimeout(r, 5000));
    await scrape();
  }
  const idle = idleSeconds > 0 ? await settled() : end;
  const groupFiles = readdirSync(join(dir, "data", "groups"));
  const rssRatio = end.rssBytes / baseline.rssBytes;
  const idleRssRatio = idle.rssBytes / baseline.rssBytes;
  const summary = {
    rounds,
    seconds,
    roundsPerSecond: rounds / seconds,
    coldRssMiB: cold.rssBytes / 1048576,
    baselineRssMiB: baseline.rssBytes / 1048576,
    endRssMiB: end.rssBytes / 1048576,
    peakRssMiB: Math.max(...rows.map((r) => r.rssBytes)) / 1048576,
    baselineAnonMiB: baseline.anonBytes / 1048576,
    endAnonMiB: end.anonBytes / 1048576,
    baselineFileMiB: baseline.fileBytes / 1048576,
    endFileMiB: end.fileBytes / 1048576,
    baselineHeapUsedMiB: baseline.heapUsedBytes / 1048576,
    endHeapUsedMiB: end.heapUsedBytes / 1048576,
    rssRatio,
    baselineMemoryMiB: breakdown(baseline),
    endMemoryMiB: breakdown(end),
    idleSeconds,
    idleRssMiB: idle.rssBytes / 1048576,
    idleRssRatio,
    idleMemoryMiB: breakdown(idle),
    baselineSeries: baseline.series,
    endSeries: end.series,
    leakedSeries: end.leaked,
    groupFilesLeft: groupFiles.length,
  };
  if (
    end.leaked > 0 ||
    end.series !== baseline.series ||
    groupFiles.length > 0 ||
    Math.min(rssRatio, idleRssRatio) > 1.1
  )
    failed = true;
  console.log(JSON.stringify(summary, null, 2));
  console.log(
    failed
      ? "FAILED"
      : `OK: series back to baseline, RSS within 10 % (${rssRatio > 1.1 ? `after ${idleSeconds} s idle` : "at once"})`,
  );
  if (values.json !== undefined)
    writeFileSync(values.json, `${JSON.stringify({ summary, rows }, null, 2)}\n`);
} finally {
  proc.kill("SIGTERM");
  await new Promise((r) => proc.once("exit", r));
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = failed ? 1 : 0;
