/**
 * The growth cases of `npm run bench` (issue #22, "Growth"): how the broker's resident memory, its
 * open file descriptors, its records/s and its start-up time grow with partitions, connections and
 * segments. Each case runs against a broker of its own (started for it, stopped after it), so no
 * case inherits another's heap, segments or connections:
 *
 * - `growth parts=N`: a topic of N partitions (10, 100, 1,000), each written by its own producer
 *   (one TCP connection each, one 256-byte record per request, fsync before the answer). Reported:
 *   records/s, the broker's peak RSS in the window, its RSS with the topic made and no load (what
 *   the partitions cost at rest), its open file descriptors when the window closes, and how long
 *   a restart over those partitions takes (spawn → listening).
 * - `growth conns=10000`: 10,000 TCP connections that each sent one produce and then stay open and
 *   silent, while one producer runs; the same figures. The broker and the load generator each need
 *   ~10,100 descriptors: Node raises its soft `RLIMIT_NOFILE` to the hard limit at start, so the
 *   hard limit must allow it (`ulimit -Hn`; raise it with `prlimit --nofile` or limits.conf). The
 *   case checks the limit first and fails with that advice rather than measuring a refused run.
 * - `growth startup segments=10000`: 100 partitions × 100 sealed segments (16 KiB each, written
 *   directly in the storage format, with valid indexes) plus an active one each: the time from
 *   spawning `serve` to its "listening" line, less the same for a copy of the data directory made
 *   before the segments were written (the process start), medians of four and three, after one
 *   start to warm the page cache; then a reader touches every segment (one
 *   record at each segment's base offset, over HTTP) and the broker's descriptors are counted
 *   before and after: bounded by `--max-open-segments`, not by the 10,000 segments.
 *
 * `--quick` runs each at small scale (4 partitions, 20 connections, 4 × 5 segments, one start of
 * each kind): it checks that the cases measure, not how fast.
 */
import * as fs from "node:fs";
import * as http from "node:http";
import { join } from "node:path";
import { OffsetIndex } from "../src/storage/offset-index.ts";
import { EntryBatchBuilder, encodeEntries } from "../src/storage/record.ts";
import { indexFileName, logFileName } from "../src/storage/segment-files.ts";
import { startEsBroker, type EsBroker } from "./servers.ts";
import type { GeneratorResult, GeneratorSpec } from "./spec.ts";

/** What the growth cases need from the harness. */
export interface GrowthContext {
  quick: boolean;
  root: string;
  /** A directory the cases may fill (removed by the harness afterwards). */
  dataRoot: string;
  warmupMs: number;
  measureMs: number;
  /** Case ids to run; null = all. */
  only: RegExp | null;
  /** Runs one generator spec (a fresh process in full runs). */
  run(spec: GeneratorSpec): Promise<GeneratorResult>;
  /** Records a measured case (the harness turns it into a CaseResult and prints it). */
  measured(result: GrowthResult): void;
  failed(id: string, error: string): void;
}

/** One growth case's figures. */
export interface GrowthResult {
  /** e.g. `growth parts=100 P=100 b=1`. */
  key: string;
  kind: "partitions" | "connections" | "startup";
  partitions: number;
  producers: number;
  /** The generator's window (records/s, RSS peak, fds at the end); null for start-up. */
  result: GeneratorResult | null;
  /** RSS of the broker with the topic made, before any load (MiB). */
  rssIdleMiB: number | null;
  /** Partitions cases: spawn → listening of a restart over the partitions just written, ms. */
  restartMs?: number;
  /** Start-up only. */
  startup?: StartupFigures;
}

/** What the start-up case measured. */
export interface StartupFigures {
  sealedSegments: number;
  partitions: number;
  /** Spawn → "listening" over the segments, median of three, ms. */
  startMs: number;
  /** The same over empty partitions (the process start alone), ms. */
  emptyStartMs: number;
  /** startMs − emptyStartMs: what the segments cost. */
  segmentsMs: number;
  /** Open descriptors right after the start, and after a read touched every segment. */
  fdsAfterStart: number | null;
  fdsAfterReadingAll: number | null;
  /** RSS after reading every segment (MiB). */
  rssAfterReadingAllMiB: number | null;
  /** The broker's `--max-open-segments` in this run. */
  maxOpenSegments: number;
}

const valueBytes = 256;
/** The broker's default `--max-open-segments` (src/lib/limits.ts), as the cases run it. */
const maxOpenSegments = 256;

/** Runs every growth case. */
export async function growthCases(ctx: GrowthContext): Promise<void> {
  const partitionCounts = ctx.quick ? [4] : [10, 100, 1000];
  for (const n of partitionCounts) {
    await guarded(ctx, `growth parts=${n} P=${n} b=1`, () => partitionsCase(ctx, n));
  }
  const conns = ctx.quick ? 20 : 10_000;
  await guarded(ctx, `growth conns=${conns} P=1 b=1`, () => connectionsCase(ctx, conns));
  const layout = ctx.quick ? { partitions: 4, sealed: 5 } : { partitions: 100, sealed: 100 };
  await guarded(ctx, `growth startup segments=${layout.partitions * layout.sealed}`, () =>
    startupCase(ctx, layout),
  );
}

async function guarded(ctx: GrowthContext, key: string, fn: () => Promise<void>): Promise<void> {
  if (ctx.only && !ctx.only.test(key)) return;
  try {
    await fn();
  } catch (err) {
    ctx.failed(key, err instanceof Error ? err.message : String(err));
    process.stdout.write(`${key.padEnd(52)} FAILED: ${String(err).split("\n")[0]}\n`);
  }
}

let brokers = 0;

async function withBroker<T>(
  ctx: GrowthContext,
  fn: (es: EsBroker, dataDir: string) => Promise<T>,
  dataDir = join(ctx.dataRoot, `growth-${++brokers}`),
  extraArgs: string[] = [],
): Promise<T> {
  const es = await startEsBroker({ root: ctx.root, dataDir, extraArgs });
  try {
    return await fn(es, dataDir);
  } finally {
    await es.stop();
  }
}

function rssMiB(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : null;
  } catch {
    return null;
  }
}

function fdCount(pid: number): number | null {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return null;
  }
}

/** The hard limit on open files of this process (children inherit it), or null off Linux. */
function hardFileLimit(): number | null {
  try {
    const m = /^Max open files\s+\d+\s+(\d+|unlimited)/m.exec(
      fs.readFileSync("/proc/self/limits", "utf8"),
    );
    if (!m) return null;
    return m[1] === "unlimited" ? Number.POSITIVE_INFINITY : Number(m[1]);
  } catch {
    return null;
  }
}

function call(
  method: string,
  url: string,
  body?: unknown,
  agent?: http.Agent,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (payload) headers["content-length"] = String(payload.length);
    const req = http.request(url, { method, agent: agent ?? false, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(payload);
  });
}

async function createTopic(
  es: EsBroker,
  name: string,
  partitions: number,
  config?: Record<string, unknown>,
) {
  const res = await call("POST", `${es.httpUrl}/v1/topics`, {
    name,
    partitions,
    ...(config ? { config } : {}),
  });
  if (res.status !== 201 && res.status !== 200)
    throw new Error(`create topic: HTTP ${res.status} ${res.text}`);
}

const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function partitionsCase(ctx: GrowthContext, n: number): Promise<void> {
  const dataDir = join(ctx.dataRoot, `growth-parts-${n}`);
  const measured = await withBroker(
    ctx,
    async (es) => {
      await createTopic(es, "growth", n);
      await settle(ctx.quick ? 50 : 1000);
      const rssIdleMiB = rssMiB(es.pid);
      const result = await ctx.run({
        mode: "produce",
        target: { kind: "es-tcp", host: es.tcp.host, port: es.tcp.port, topic: "growth" },
        batch: 1,
        producers: n,
        partitions: n,
        partitionPerProducer: true,
        valueBytes,
        warmupMs: ctx.warmupMs,
        measureMs: ctx.measureMs,
        minRequests: 1,
        metricsUrl: `${es.httpUrl}/v1/admin/metrics`,
        serverPid: es.pid,
      });
      return { result, rssIdleMiB };
    },
    dataDir,
  );
  // How start-up grows with partitions: a restart over the N partitions just written.
  const restartMs = await timeStart(ctx, dataDir);
  ctx.measured({
    key: `growth parts=${n} P=${n} b=1`,
    kind: "partitions",
    partitions: n,
    producers: n,
    ...measured,
    restartMs,
  });
}

async function connectionsCase(ctx: GrowthContext, connections: number): Promise<void> {
  const limit = hardFileLimit();
  if (limit !== null && limit < connections + 200)
    throw new Error(
      `the hard limit on open files is ${limit}, and ${connections} connections need ~${connections + 200} in the broker and in the load generator: raise it (prlimit --nofile=${connections + 1000} --pid $$, or limits.conf) and run again`,
    );
  // The default bound is half the soft open-files limit (10,000 here); the case holds more
  // connections than that on purpose, as an operator serving that many would configure.
  const maxConnections = ["--max-connections", String(connections + 100)];
  await withBroker(
    ctx,
    async (es) => {
      await createTopic(es, "growth", 1);
      await settle(ctx.quick ? 50 : 1000);
      const rssIdleMiB = rssMiB(es.pid);
      const result = await ctx.run({
        mode: "produce",
        target: { kind: "es-tcp", host: es.tcp.host, port: es.tcp.port, topic: "growth" },
        batch: 1,
        producers: 1,
        partitions: 1,
        valueBytes,
        idleConnections: connections,
        warmupMs: ctx.warmupMs,
        measureMs: ctx.measureMs,
        minRequests: 1,
        metricsUrl: `${es.httpUrl}/v1/admin/metrics`,
        serverPid: es.pid,
      });
      ctx.measured({
        key: `growth conns=${connections} P=1 b=1`,
        kind: "connections",
        partitions: 1,
        producers: 1,
        result,
        rssIdleMiB,
      });
    },
    undefined,
    maxConnections,
  );
}

/** Records of `valueBytes` per sealed segment in the start-up case (~16 KiB of log each). */
const recordsPerSegment = 56;

/**
 * Fills partition directories with `sealed` sealed segments each, written in the storage format
 * (docs/storage.md "Records", "Index and reads") with their indexes, plus an empty active segment.
 */
export function writeSegments(topicDir: string, partitions: number, sealed: number): void {
  const value = new Uint8Array(valueBytes).fill(97);
  const builder = new EntryBatchBuilder(recordsPerSegment * (valueBytes + 32));
  const ts = Date.now() - 60_000;
  for (let i = 0; i < recordsPerSegment; i++) builder.add(null, value, ts);
  const batch = builder.build();
  const logBytes = batch.bytes.length + batch.count * 16;
  const log = new Uint8Array(logBytes);
  for (let p = 0; p < partitions; p++) {
    const dir = join(topicDir, String(p));
    for (const f of fs.readdirSync(dir)) fs.unlinkSync(join(dir, f));
    let base = 0;
    for (let s = 0; s <= sealed; s++) {
      const write = (name: string, bytes: Uint8Array) =>
        fs.writeFileSync(join(dir, name), bytes, { mode: 0o600 });
      if (s === sealed) {
        write(logFileName(base), new Uint8Array(0));
        write(indexFileName(base), new Uint8Array(0));
        break;
      }
      const index = new OffsetIndex();
      encodeEntries(batch, log, {
        outPos: 0,
        baseOffset: base,
        nowMs: ts,
        onRecord: (offset, position) => {
          if (index.wants(position)) index.push(offset - base, position);
        },
      });
      write(logFileName(base), log);
      write(indexFileName(base), index.encode());
      base += recordsPerSegment;
    }
  }
}

/** Spawn → listening, ms (the broker is stopped again). */
async function timeStart(ctx: GrowthContext, dataDir: string): Promise<number> {
  const t = performance.now();
  const es = await startEsBroker({ root: ctx.root, dataDir });
  const ms = performance.now() - t;
  await es.stop();
  return ms;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function startupCase(
  ctx: GrowthContext,
  layout: { partitions: number; sealed: number },
): Promise<void> {
  const key = `growth startup segments=${layout.partitions * layout.sealed}`;
  const dataDir = join(ctx.dataRoot, `growth-startup`);
  const emptyDir = join(ctx.dataRoot, `growth-startup-empty`);
  const config = { segment_bytes: 16 * 1024, retention_ms: -1 };
  await withBroker(ctx, (es) => createTopic(es, "startup", layout.partitions, config), dataDir);
  fs.cpSync(dataDir, emptyDir, { recursive: true });
  writeSegments(join(dataDir, "topics/startup"), layout.partitions, layout.sealed);
  const full: number[] = [];
  const empty: number[] = [];
  if (ctx.quick) {
    empty.push(await timeStart(ctx, emptyDir));
  } else {
    // Warm the page cache and the runtime's code cache once, then three of each, interleaved.
    await timeStart(ctx, dataDir);
    for (let i = 0; i < 3; i++) {
      empty.push(await timeStart(ctx, emptyDir));
      full.push(await timeStart(ctx, dataDir));
    }
  }
  const started = performance.now();
  const figures = await withBroker(
    ctx,
    async (es) => {
      full.push(performance.now() - started);
      const fdsAfterStart = fdCount(es.pid);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
      try {
        // One record at each segment's base offset: every sealed segment's files are opened.
        const reads: Promise<void>[] = [];
        for (let p = 0; p < layout.partitions; p++) {
          reads.push(
            (async () => {
              for (let s = 0; s < layout.sealed; s++) {
                const url = `${es.httpUrl}/v1/topics/startup/partitions/${p}/records?offset=${s * recordsPerSegment}&max_records=1`;
                const res = await call("GET", url, undefined, agent);
                if (res.status !== 200) throw new Error(`read: HTTP ${res.status} ${res.text}`);
              }
            })(),
          );
          if (reads.length >= 8) await Promise.all(reads.splice(0));
        }
        await Promise.all(reads);
      } finally {
        agent.destroy();
      }
      return {
        fdsAfterStart,
        fdsAfterReadingAll: fdCount(es.pid),
        rssAfterReadingAllMiB: rssMiB(es.pid),
      };
    },
    dataDir,
  );
  const startMs = median(full);
  const emptyStartMs = median(empty);
  ctx.measured({
    key,
    kind: "startup",
    partitions: layout.partitions,
    producers: 0,
    result: null,
    rssIdleMiB: null,
    startup: {
      sealedSegments: layout.partitions * layout.sealed,
      partitions: layout.partitions,
      startMs,
      emptyStartMs,
      segmentsMs: Math.max(0, startMs - emptyStartMs),
      ...figures,
      maxOpenSegments,
    },
  });
}

/** The parts of a harness case the growth table and targets read. */
interface GrowthCaseView {
  key: string;
  group: string;
  partitions: number;
  recordsPerSec: number;
  serverRssPeakMiB: number | null;
  serverCpuUsPerRecord?: number | null;
  serverFds?: number | null;
  rssIdleMiB?: number | null;
  restartMs?: number | null;
  latencyMs: { p99: number };
}

const f0 = (n: number | null | undefined, digits = 0) =>
  n === null || n === undefined || !Number.isFinite(n) ? "—" : n.toFixed(digits);

/** The markdown lines of the growth section (none when no growth case ran). */
export function growthTable(
  cases: readonly GrowthCaseView[],
  startup: StartupFigures | null,
): string[] {
  const growth = cases.filter((c) => c.group === "growth");
  if (growth.length === 0 && startup === null) return [];
  const lines = [
    "",
    "### Growth: partitions (one producer each, 1 × 256 B per request) and idle connections",
    "",
    "| case | records/s | p99 ms | broker CPU µs/record | RSS at rest MiB | peak RSS MiB | open fds | restart ms |",
    "|---|--:|--:|--:|--:|--:|--:|--:|",
  ];
  for (const c of growth)
    lines.push(
      `| ${c.key} | ${f0(c.recordsPerSec)} | ${f0(c.latencyMs.p99, 2)} | ${f0(c.serverCpuUsPerRecord, 1)} | ${f0(c.rssIdleMiB, 1)} | ${f0(c.serverRssPeakMiB, 1)} | ${f0(c.serverFds)} | ${f0(c.restartMs)} |`,
    );
  if (startup !== null) {
    lines.push(
      "",
      `### Growth: start-up over ${startup.sealedSegments} sealed segments (${startup.partitions} partitions, valid indexes)`,
      "",
      "| start ms | empty partitions ms | segments cost ms | fds after start | fds after reading every segment | --max-open-segments | RSS after MiB |",
      "|--:|--:|--:|--:|--:|--:|--:|",
      `| ${f0(startup.startMs)} | ${f0(startup.emptyStartMs)} | ${f0(startup.segmentsMs)} | ${f0(startup.fdsAfterStart)} | ${f0(startup.fdsAfterReadingAll)} | ${startup.maxOpenSegments} | ${f0(startup.rssAfterReadingAllMiB, 1)} |`,
    );
  }
  return lines;
}

/**
 * The growth targets of issue #22: RSS ≤ 250 MB at 1,000 partitions and at 10,000 connections;
 * descriptors bounded by `--max-open-segments` (after reading every one of 10,000 segments, at
 * most the descriptors after start plus the cache's size); start-up over 10,000 sealed segments
 * ≤ 1 s. A quick run evaluates the same rules on its small cases.
 */
export function growthTargets(
  cases: readonly GrowthCaseView[],
  startup: StartupFigures | null,
): { name: string; measured: string; met: boolean | null }[] {
  const growth = cases.filter((c) => c.group === "growth");
  const mb = (mib: number | null | undefined) =>
    mib === null || mib === undefined ? null : (mib * 1048576) / 1e6;
  const most = growth.filter((c) => c.key.startsWith("growth parts=")).at(-1);
  const conns = growth.find((c) => c.key.startsWith("growth conns="));
  const parts: { label: string; value: number | null; ok: (v: number) => boolean }[] = [
    {
      label: `${most?.key ?? "parts"} peak RSS MB`,
      value: mb(most?.serverRssPeakMiB),
      ok: (v) => v <= 250,
    },
    {
      label: `${conns?.key ?? "conns"} peak RSS MB`,
      value: mb(conns?.serverRssPeakMiB),
      ok: (v) => v <= 250,
    },
    {
      label: "fds after reading every segment − after start",
      value:
        startup?.fdsAfterReadingAll != null && startup.fdsAfterStart != null
          ? startup.fdsAfterReadingAll - startup.fdsAfterStart
          : null,
      ok: (v) => startup !== null && v <= startup.maxOpenSegments,
    },
    {
      label: `start-up over ${startup?.sealedSegments ?? "?"} segments ms`,
      value: startup?.segmentsMs ?? null,
      ok: (v) => v <= 1000,
    },
  ];
  const met = parts.some((p) => p.value === null) ? null : parts.every((p) => p.ok(p.value!));
  return [
    {
      name: "Growth: RSS ≤ 250 MB at 1,000 partitions and 10,000 connections; fds bounded by --max-open-segments; start-up over 10,000 sealed segments ≤ 1 s",
      measured: parts.map((p) => `${p.label} ${f0(p.value)}`).join(", "),
      met,
    },
  ];
}
