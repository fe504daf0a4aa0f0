/**
 * Compaction benchmark (not a test): throughput and peak memory of one compaction pass over the
 * same amount of data with many distinct keys (1 M) and with few (10 k), on the real file system.
 * It shows that memory follows the number of keys, not the data: the key map costs 24 bytes a
 * slot whatever the record size, and the data streams through fixed buffers.
 *
 * Run in full: `node bench/compaction.mjs` (256 MiB per case; `--quick` for 16 MiB with 100 k and
 * 1 k keys; `--data-mb N`, `--keys 1000000,10000`, `--dir DIR`, `--json out.json`). The test suite runs it tiny (`test/integration/compaction-bench.test.ts`)
 * so it cannot rot.
 *
 * What it measures, per case:
 * - `input_mb_per_s`: MiB of sealed segments compacted per second of wall time (both passes, the
 *   writes, the fsyncs and the swap); `input_mb_per_cpu_s` the same per second of CPU time, which
 *   shared machines disturb less;
 * - `map_bytes`: the key map's arrays, exactly;
 * - `peak_memory_bytes`: the largest growth of V8 heap used + array buffers over the baseline before
 *   the pass, sampled every 10 ms (after a forced GC when one is available);
 * - `peak_rss_bytes`: the process's peak resident set size (each case runs in its own process; this
 *   includes generating the data, which needs only a few MiB).
 */
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import * as v8 from "node:v8";
import * as vm from "node:vm";
import { NodeFileSystem } from "../src/runtime/node-fs.ts";
import { PartitionLog } from "../src/storage/partition.ts";
import { EntryBatchBuilder } from "../src/storage/record.ts";
import { runCompaction } from "../src/storage/compaction.ts";
import { ManualClock } from "../src/lib/clock.ts";
import { silentLogger } from "../src/lib/logger.ts";

/** One benchmark case's result (snake_case, printed as JSON). */
export interface CompactionBenchResult {
  keys: number;
  records: number;
  data_bytes: number;
  duration_ms: number;
  input_mb_per_s: number;
  /** CPU time of the process during the pass (user + system), and MiB compacted per CPU second: steadier than wall time on a shared machine. */
  cpu_ms: number;
  input_mb_per_cpu_s: number;
  records_dropped: number;
  map_bytes: number;
  peak_memory_bytes: number;
  peak_rss_bytes: number;
  status: string;
}

/** Options of {@link runCompactionBench}. */
export interface CompactionBenchOptions {
  /** A directory to write partitions in (emptied per case, removed at the end). */
  dir: string;
  /** Bytes of sealed log per case. */
  dataBytes: number;
  /** Distinct keys per case. */
  keyCounts: number[];
  /** Bytes of each record's value (default 100). */
  valueBytes?: number;
  /** Bytes of each output segment and roll size (default 64 MiB). */
  segmentBytes?: number;
  /** Force a garbage collection before each pass, for a clean baseline (default true). */
  forceGc?: boolean;
}

let forceGc: (() => void) | null = null;
function gc(): void {
  if (forceGc === null) {
    try {
      v8.setFlagsFromString("--expose-gc");
      forceGc = vm.runInNewContext("gc") as () => void;
    } catch {
      forceGc = () => {};
    }
  }
  forceGc();
}

/** Runs one compaction pass per key count over `dataBytes` of records and reports what it measured. */
export async function runCompactionBench(
  options: CompactionBenchOptions,
): Promise<CompactionBenchResult[]> {
  const valueBytes = options.valueBytes ?? 100;
  const segmentBytes = options.segmentBytes ?? 64 * 1024 * 1024;
  const results: CompactionBenchResult[] = [];
  for (const keys of options.keyCounts) {
    const dir = join(options.dir, `keys-${keys}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const clock = new ManualClock();
    const log = await PartitionLog.open({
      fs: new NodeFileSystem(),
      dir,
      name: `bench/${keys}`,
      clock,
      logger: silentLogger,
      config: () => ({ segmentBytes, segmentMs: 1000 }),
    });
    // Same key length in every case, so the data size per record is identical.
    const recordBytes = 4 + 28 + 12 + valueBytes;
    const records = Math.max(keys, Math.floor(options.dataBytes / recordBytes));
    const value = new Uint8Array(valueBytes).map((_, i) => (i * 31) & 0xff);
    const key = new Uint8Array(12);
    const batchRecords = 20_000;
    for (let start = 0; start < records; start += batchRecords) {
      const b = new EntryBatchBuilder(batchRecords * (16 + 12 + valueBytes));
      for (let i = start; i < Math.min(records, start + batchRecords); i++) {
        const k = i % keys;
        for (let d = 11; d >= 1; d--) key[d] = 48 + (Math.floor(k / 10 ** (11 - d)) % 10);
        key[0] = 107; // "k"
        value[0] = i & 0xff;
        b.add(key, value, 1_700_000_000_000);
      }
      await log.append(b.build());
    }
    clock.advance(1000);
    await log.append(new EntryBatchBuilder().add(null, value).build()); // rolls: everything above is sealed
    const dataBytes = log.sealedSegments.reduce((n, s) => n + s.sizeBytes, 0);

    if (options.forceGc !== false) gc();
    const base = process.memoryUsage();
    const baseline = base.heapUsed + base.arrayBuffers;
    let peak = 0;
    let peakRss = base.rss;
    const sample = () => {
      const m = process.memoryUsage();
      peak = Math.max(peak, m.heapUsed + m.arrayBuffers - baseline);
      peakRss = Math.max(peakRss, m.rss);
    };
    const sampler = setInterval(sample, 10);
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    const result = await runCompaction(
      {
        fs: new NodeFileSystem(),
        clock,
        logger: silentLogger,
        partition: log,
        ensureLogStartOffsetPersisted: async () => {},
      },
      { tombstoneRetentionMs: 86_400_000, segmentBytes },
    );
    const durationMs = performance.now() - started;
    const cpu = process.cpuUsage(cpuBefore);
    const cpuMs = (cpu.user + cpu.system) / 1000;
    sample();
    clearInterval(sampler);
    await log.close();
    rmSync(dir, { recursive: true, force: true });
    results.push({
      keys,
      records,
      data_bytes: dataBytes,
      duration_ms: Math.round(durationMs),
      input_mb_per_s: Math.round((dataBytes / (1024 * 1024) / (durationMs / 1000)) * 10) / 10,
      cpu_ms: Math.round(cpuMs),
      input_mb_per_cpu_s: Math.round((dataBytes / (1024 * 1024) / (cpuMs / 1000)) * 10) / 10,
      records_dropped: result.records_dropped,
      map_bytes: result.map_bytes,
      peak_memory_bytes: peak,
      peak_rss_bytes: peakRss,
      status: result.status,
    });
  }
  return results;
}

/**
 * Command-line entry (`bench/compaction.mjs`): runs each key count in a child process of its own
 * (`--one KEYS`), so each case's peak resident set size is its own, then prints a table and JSON.
 */
export async function main(
  argv: string[],
  defaults: { dir: string; runner: string },
): Promise<number> {
  const flag = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const quick = argv.includes("--quick");
  const dataMb = Number(flag("--data-mb") ?? (quick ? 16 : 256));
  const dir = flag("--dir") ?? defaults.dir;
  const one = flag("--one");
  if (one !== undefined) {
    const [result] = await runCompactionBench({
      dir,
      dataBytes: dataMb * 1024 * 1024,
      keyCounts: [Number(one)],
    });
    const peakRss = process.resourceUsage().maxRSS * 1024;
    process.stdout.write(
      JSON.stringify({ ...result, peak_rss_bytes: Math.max(result.peak_rss_bytes, peakRss) }) +
        "\n",
    );
    return result.status === "compacted" ? 0 : 1;
  }
  const keyCounts = (flag("--keys") ?? (quick ? "100000,1000" : "1000000,10000"))
    .split(",")
    .map(Number);
  const { execFileSync } = await import("node:child_process");
  const results: CompactionBenchResult[] = [];
  for (const keys of keyCounts) {
    const out = execFileSync(
      process.execPath,
      [defaults.runner, "--one", String(keys), "--data-mb", String(dataMb), "--dir", dir],
      { encoding: "utf8", maxBuffer: 1 << 20 },
    );
    results.push(JSON.parse(out.trim().split("\n").at(-1)!) as CompactionBenchResult);
  }
  const mib = (n: number) => `${(n / (1024 * 1024)).toFixed(1)} MiB`;
  process.stdout.write(
    `compaction: ${dataMb} MiB of records per case, one pass each, real file system (Node ${process.version})\n`,
  );
  for (const r of results) {
    process.stdout.write(
      `  ${String(r.keys).padStart(8)} keys  ${String(r.records).padStart(9)} records  ${mib(r.data_bytes)} in ${r.duration_ms} ms = ${r.input_mb_per_s.toFixed(1)} MiB/s (${r.input_mb_per_cpu_s.toFixed(1)} per CPU s)  ` +
        `key map ${mib(r.map_bytes)}  heap+buffers +${mib(r.peak_memory_bytes)}  peak rss ${mib(r.peak_rss_bytes)}  dropped ${r.records_dropped}  ${r.status}\n`,
    );
  }
  const out = flag("--json");
  if (out !== undefined) {
    const { writeFileSync } = await import("node:fs");
    writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
  }
  return results.every((r) => r.status === "compacted") ? 0 : 1;
}
