/**
 * Edge benchmark (not a test; docs/benchmarks.md "Edge"): in one run,
 * - the cold tier: upload throughput of retention's offload and cold-read throughput of fetches
 *   served from it, for a directory tier and for S3 (moto_server on loopback), same data;
 * - the mirror (docs/edge.md): records/s forwarded to an upstream broker under a steady edge load,
 *   and the catch-up rate after an outage — the backlog a 60 s outage leaves at that load,
 *   forwarded once the link returns, capped (the default `--mirror-records-per-sec`) and uncapped.
 *
 * Run in full: `node bench/edge.mjs` (64 MiB through each tier, 32 MiB segments; mirror at 2 000
 * records/s for 10 s and a 120 000-record backlog); `--quick` runs it tiny, which
 * `test/integration/edge-bench.test.ts` does so it cannot rot. `--json out.json` writes the figures.
 * Everything shares two vCPUs with moto_server (Python) and the load generator: compare the two
 * tiers within one run, not across machines.
 */
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { LocalBroker } from "../src/broker/broker.ts";
import { TcpClient } from "../src/client/client.ts";
import { MemoryLogger } from "../src/lib/logger.ts";
import { Mirror } from "../src/mirror/mirror.ts";
import { systemClock } from "../src/runtime/clock.ts";
import { NodeFileSystem } from "../src/runtime/node-fs.ts";
import { parseS3Url, S3ColdStore } from "../src/runtime/s3-cold-store.ts";
import { listenTcp } from "../src/runtime/tcp.ts";
import { EntryBatchBuilder } from "../src/storage/record.ts";
import { createTcpTransport } from "../src/transport/tcp/transport.ts";

const MiB = 1024 * 1024;

/** Options of {@link runEdgeBench}. */
export interface EdgeBenchOptions {
  dir: string;
  /** moto_server's endpoint (`http://127.0.0.1:PORT`), with a bucket `bench`. */
  s3Endpoint: string;
  /** Bytes written to each tier. */
  dataBytes: number;
  segmentBytes: number;
  /** Steady edge load while the mirror runs, records/s, and for how long (ms). */
  mirrorRate: number;
  mirrorMs: number;
  /** Backlog forwarded in the catch-up cases (records). */
  backlogRecords: number;
}

/** One cold tier's figures. */
export interface ColdTierFigures {
  tier: "directory" | "s3";
  data_bytes: number;
  segments_offloaded: number;
  upload_mb_per_s: number;
  cold_read_mb_per_s: number;
  /** Same bytes read from local segments before the offload, for scale. */
  local_read_mb_per_s: number;
}

/** The mirror's figures. */
export interface MirrorFigures {
  steady_rate_records_per_s: number;
  steady_forwarded_records_per_s: number;
  steady_lag_records_at_end: number;
  backlog_records: number;
  catch_up_capped_records_per_s: number;
  catch_up_uncapped_records_per_s: number;
}

const record = new Uint8Array(1000).fill(120);

async function fill(broker: LocalBroker, topic: string, bytes: number): Promise<number> {
  let written = 0;
  let count = 0;
  while (written < bytes) {
    const b = new EntryBatchBuilder();
    for (let i = 0; i < 256; i++) b.add(null, record);
    await broker.produce({ topic, partition: 0, batch: b.build() });
    written += 256 * (record.length + 28);
    count += 256;
  }
  return count;
}

async function readAll(broker: LocalBroker, topic: string): Promise<number> {
  let offset = 0;
  let bytes = 0;
  for (;;) {
    const r = await broker.fetch({
      topic,
      partition: 0,
      offset,
      maxRecords: 100_000,
      maxBytes: MiB,
    });
    bytes += r.records.bytes.length;
    if (r.nextOffset >= r.highWatermark) return bytes;
    offset = r.nextOffset;
  }
}

function mbps(bytes: number, ms: number): number {
  return Math.round((bytes / MiB / (ms / 1000)) * 10) / 10;
}

async function coldTier(o: EdgeBenchOptions, tier: "directory" | "s3"): Promise<ColdTierFigures> {
  const base = join(o.dir, tier);
  rmSync(base, { recursive: true, force: true });
  mkdirSync(base, { recursive: true });
  const logger = new MemoryLogger();
  const broker = await LocalBroker.open({
    fs: new NodeFileSystem(),
    dataDir: join(base, "data"),
    clock: systemClock,
    logger,
    cleanupIntervalMs: 0,
    ...(tier === "directory"
      ? { coldStorageDir: join(base, "cold") }
      : {
          coldStore: new S3ColdStore({
            location: parseS3Url(`s3://bench/run-${Date.now()}`),
            credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
            endpoint: o.s3Endpoint,
            logger,
          }),
        }),
  });
  try {
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_bytes: o.segmentBytes },
    });
    await fill(broker, "t", o.dataBytes);
    let t = performance.now();
    const local = await readAll(broker, "t");
    const localMs = performance.now() - t;
    await broker.updateTopicConfig("t", { retention_bytes: 1 });
    t = performance.now();
    const [run] = (await broker.cleanup("t")).partitions;
    const uploadMs = performance.now() - t;
    if (run.retention.status !== "ok")
      throw new Error(`offload failed: ${JSON.stringify(run.retention)}`);
    t = performance.now();
    const read = await readAll(broker, "t");
    const readMs = performance.now() - t;
    return {
      tier,
      data_bytes: read,
      segments_offloaded: run.retention.segments_offloaded,
      upload_mb_per_s: mbps(run.retention.bytes_offloaded, uploadMs),
      cold_read_mb_per_s: mbps(read, readMs),
      local_read_mb_per_s: mbps(local, localMs),
    };
  } finally {
    await broker.close();
  }
}

async function until(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error("the mirror did not catch up in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function mirrorFigures(o: EdgeBenchOptions): Promise<MirrorFigures> {
  const base = join(o.dir, "mirror");
  rmSync(base, { recursive: true, force: true });
  const fs = new NodeFileSystem();
  const logger = new MemoryLogger();
  const open = (name: string) =>
    LocalBroker.open({
      fs,
      dataDir: join(base, name),
      clock: systemClock,
      logger,
      cleanupIntervalMs: 0,
    });
  const edge = await open("edge");
  const central = await open("central");
  const transport = createTcpTransport({ broker: central, clock: systemClock, logger });
  const listener = await listenTcp({ host: "127.0.0.1", port: 0, logger }, (s) =>
    transport.handleConnection(s),
  );
  const mirror = (name: string, recordsPerSecond: number) =>
    new Mirror({
      broker: edge,
      fs,
      dataDir: join(base, "edge"),
      clock: systemClock,
      logger,
      name,
      topics: [name],
      connect: () => TcpClient.connect({ host: "127.0.0.1", port: listener.port }),
      randomHex: () => Math.random().toString(16).slice(2).padEnd(16, "0"),
      recordsPerSecond,
      rescanMs: 100,
    });
  const hw = async (broker: LocalBroker, topic: string) =>
    (await broker.listOffsets({ topic, partition: 0 }).catch(() => ({ highWatermark: 0 })))
      .highWatermark;
  const produce = async (topic: string, count: number) => {
    const b = new EntryBatchBuilder();
    for (let i = 0; i < count; i++) b.add(null, record.subarray(0, 200));
    await edge.produce({ topic, partition: 0, batch: b.build() });
  };
  try {
    // Steady load: batches of rate/10 every 100 ms.
    await edge.createTopic({ name: "steady", partitions: 1 });
    const steady = mirror("steady", 20_000);
    await steady.start();
    const perTick = Math.max(1, Math.round(o.mirrorRate / 10));
    const t0 = performance.now();
    const startCentral = await hw(central, "steady");
    let produced = 0;
    while (performance.now() - t0 < o.mirrorMs) {
      await produce("steady", perTick);
      produced += perTick;
      const next = t0 + (produced / o.mirrorRate) * 1000;
      await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
    }
    const steadyMs = performance.now() - t0;
    const forwarded = (await hw(central, "steady")) - startCentral;
    const lagAtEnd = (await hw(edge, "steady")) - (await hw(central, "steady"));
    await steady.stop();

    // Catch-up: a backlog written while the link was down, then forwarded.
    const catchUp = async (topic: string, cap: number): Promise<number> => {
      await edge.createTopic({ name: topic, partitions: 1 });
      for (let left = o.backlogRecords; left > 0; left -= 1000)
        await produce(topic, Math.min(1000, left));
      const m = mirror(topic, cap);
      const t = performance.now();
      await m.start();
      await until(async () => (await hw(central, topic)) >= o.backlogRecords, 600_000);
      const ms = performance.now() - t;
      await m.stop();
      return Math.round(o.backlogRecords / (ms / 1000));
    };
    return {
      steady_rate_records_per_s: o.mirrorRate,
      steady_forwarded_records_per_s: Math.round(forwarded / (steadyMs / 1000)),
      steady_lag_records_at_end: lagAtEnd,
      backlog_records: o.backlogRecords,
      catch_up_capped_records_per_s: await catchUp("capped", 20_000),
      catch_up_uncapped_records_per_s: await catchUp("uncapped", 0),
    };
  } finally {
    const closed = listener.close();
    await transport.close({ graceMs: 500 });
    await closed;
    await edge.close();
    await central.close();
  }
}

/** Runs every case (module comment). */
export async function runEdgeBench(
  o: EdgeBenchOptions,
): Promise<{ cold: ColdTierFigures[]; mirror: MirrorFigures }> {
  const cold: ColdTierFigures[] = [];
  for (const tier of ["directory", "s3"] as const) cold.push(await coldTier(o, tier));
  return { cold, mirror: await mirrorFigures(o) };
}

/** The command line of `bench/edge.mjs`; starts moto_server itself. */
export async function main(argv: string[], defaults: { dir: string }): Promise<number> {
  const flag = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const quick = argv.includes("--quick");
  const { startMoto } = await import("../test/helpers/moto.ts");
  const moto = await startMoto();
  try {
    await moto.createBucket("bench");
    const result = await runEdgeBench({
      dir: flag("--dir") ?? defaults.dir,
      s3Endpoint: moto.endpoint,
      dataBytes: (quick ? 4 : 64) * MiB,
      segmentBytes: (quick ? 1 : 32) * MiB,
      mirrorRate: quick ? 500 : 2000,
      mirrorMs: quick ? 1000 : 10_000,
      backlogRecords: quick ? 2000 : 120_000,
    });
    const lines = [
      "tier        upload MB/s  cold read MB/s  local read MB/s  segments",
      ...result.cold.map(
        (c) =>
          `${c.tier.padEnd(10)}  ${String(c.upload_mb_per_s).padStart(11)}  ${String(c.cold_read_mb_per_s).padStart(14)}  ${String(c.local_read_mb_per_s).padStart(15)}  ${String(c.segments_offloaded).padStart(8)}`,
      ),
      "",
      `mirror: steady load ${result.mirror.steady_rate_records_per_s} records/s -> forwarded ${result.mirror.steady_forwarded_records_per_s} records/s, lag at end ${result.mirror.steady_lag_records_at_end}`,
      `mirror: backlog of ${result.mirror.backlog_records} records caught up at ${result.mirror.catch_up_capped_records_per_s} records/s (cap 20000/s), ${result.mirror.catch_up_uncapped_records_per_s} records/s uncapped`,
    ];
    process.stdout.write(`${lines.join("\n")}\n`);
    const json = flag("--json");
    if (json !== undefined) {
      const { writeFileSync } = await import("node:fs");
      writeFileSync(json, `${JSON.stringify(result, null, 2)}\n`);
    }
    return 0;
  } finally {
    await moto.stop();
  }
}
