/**
 * Start-up benchmark (crash-safety issue): how long recovery takes on ~1 GiB of sealed segments
 * with valid indexes (the fast path: first record + records after the last index entry, O(segments))
 * against the same data with every index removed (a forced full scan and index rebuild, O(bytes)).
 *
 *   node bench/startup.mjs [--data-mb 1024] [--segment-mb 64] [--partitions 4] [--json out.json]
 *
 * The page cache is warm in both cases (dropping it needs root and a quiet machine), so the full
 * scan measures CRC and decode work rather than disk reads; on a cold cache the gap is larger.
 */
import { parseArgs } from "node:util";
import { readdirSync, rmSync, unlinkSync, writeFileSync, mkdirSync } from "node:fs";
import { LocalBroker } from "../src/broker/broker.ts";
import { NodeFileSystem } from "../src/runtime/node-fs.ts";
import { systemClock } from "../src/runtime/clock.ts";
import { silentLogger } from "../src/lib/logger.ts";
import { EntryBatchBuilder } from "../src/storage/record.ts";

/** Runs the benchmark; resolves with the exit code. */
export async function main(argv: string[], context: { dir: string }): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      "data-mb": { type: "string", default: "1024" },
      "segment-mb": { type: "string", default: "64" },
      partitions: { type: "string", default: "4" },
      json: { type: "string" },
    },
  });
  const dataBytes = Number(values["data-mb"]) * 1024 * 1024;
  const segmentBytes = Number(values["segment-mb"]) * 1024 * 1024;
  const partitions = Number(values.partitions);
  const dataDir = `${context.dir}/data`;
  mkdirSync(context.dir, { recursive: true });
  const open = () =>
    LocalBroker.open({
      fs: new NodeFileSystem(),
      dataDir,
      clock: systemClock,
      logger: silentLogger,
    });

  // Fill: 1 KiB values in 1 MiB requests, spread over the partitions.
  let broker = await open();
  await broker.createTopic({
    name: "startup",
    partitions,
    config: { segment_bytes: segmentBytes },
  });
  const value = new Uint8Array(1024).fill(120);
  const perRequest = 1000;
  const builder = new EntryBatchBuilder(perRequest * 1100);
  for (let i = 0; i < perRequest; i++) builder.add(null, value);
  const batch = builder.build();
  const requests = Math.ceil(dataBytes / (perRequest * 1060));
  const fillStart = performance.now();
  for (let i = 0; i < requests; i++)
    await broker.produce({ topic: "startup", partition: i % partitions, batch });
  const fillMs = performance.now() - fillStart;
  const described = await broker.describeTopic("startup");
  await broker.close();
  const sizeBytes = described.partitions.reduce((a, p) => a + p.sizeBytes, 0);
  const segments = described.partitions.reduce((a, p) => a + p.segmentCount, 0);

  const timeOpen = async () => {
    const t = performance.now();
    broker = await open();
    const ms = performance.now() - t;
    await broker.close();
    return ms;
  };
  // Warm once, then measure the fast path three times and take the median.
  await timeOpen();
  const fast = [await timeOpen(), await timeOpen(), await timeOpen()].sort((a, b) => a - b)[1];
  // Forced full scan: remove every index (each start rebuilds them, so remove before each run).
  const removeIndexes = () => {
    for (let p = 0; p < partitions; p++) {
      const dir = `${dataDir}/topics/startup/${p}`;
      for (const n of readdirSync(dir)) if (n.endsWith(".index")) unlinkSync(`${dir}/${n}`);
    }
  };
  const full: number[] = [];
  for (let i = 0; i < 3; i++) {
    removeIndexes();
    full.push(await timeOpen());
  }
  full.sort((a, b) => a - b);
  const result = {
    data_bytes: sizeBytes,
    segments,
    partitions,
    fill_ms: Math.round(fillMs),
    startup_trusted_ms: Math.round(fast),
    startup_full_scan_ms: Math.round(full[1]),
    full_scan_mb_per_s: Math.round(sizeBytes / 1048576 / (full[1] / 1000)),
    ratio: Number((full[1] / fast).toFixed(1)),
  };
  console.log(
    `start-up on ${(sizeBytes / 1048576).toFixed(0)} MiB in ${segments} sealed segments over ${partitions} partitions:`,
  );
  console.log(`  valid indexes (fast path): ${result.startup_trusted_ms} ms`);
  console.log(
    `  indexes removed (full scan + rebuild): ${result.startup_full_scan_ms} ms (${result.full_scan_mb_per_s} MiB/s), ${result.ratio}× slower`,
  );
  if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
  rmSync(dataDir, { recursive: true, force: true });
  return 0;
}
