/**
 * Compaction of the cold tier (docs/storage.md "Cold compaction"): for a topic whose cleanup
 * policy includes "compact", the newest record of each key survives wherever it lives — in a cold
 * segment or a local one — every keyless record survives, and a tombstone past
 * `tombstone_retention_ms` is dropped with every older record of its key. Records keep their
 * offsets and bytes.
 *
 * One pass over one partition:
 * 1. Key map (`KeyOffsetMap`, 128-bit digests, memory by keys) over every cold segment, oldest
 *    first, then every sealed local segment: each key's newest offset and whether it is an expired
 *    tombstone. A map that fills skips the pass (the cold run must be covered whole).
 * 2. For each cold segment holding a record to drop, its survivors (in memory, at most the
 *    segment's size) become an output with the next generation G: objects `NNNN.G.log` and
 *    `NNNN.G.index`, covering the same offsets as the segment it replaces, put and verified.
 * 3. The plan `swap-G.json` is put in the store (so a listing rebuild knows G committed).
 * 4. Commit point: the topic's `cold_index.json` names the outputs in place of the replaced
 *    segments, with the replaced ones under `swap` (atomic, fsynced).
 * 5. The replaced objects are deleted; the index is written again without `swap`; the plan object
 *    is deleted.
 *
 * A crash before 4 leaves the index naming the old objects: the outputs and plan are garbage, which
 * the next reclaim pass deletes. A crash after 4 leaves the index naming the outputs with a swap in
 * progress, which the next pass (or reclaim) finishes by deleting what it names — idempotently. So
 * a reader sees the old objects or the new, never a mix; one already reading a replaced object that
 * is deleted under it gets `not_found` and looks the offset up again (`cold-store.ts`).
 *
 * The cold pass runs before local compaction in the same task, and a local pass runs only if the
 * cold one did not fail: a local pass alone could drop an expired tombstone whose older values
 * still sit in the cold tier, and bring them back.
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { utf8, viewOf } from "../lib/bytes.ts";
import { errorMessage } from "../lib/errors.ts";
import { compactionKeysMax } from "../lib/limits.ts";
import { murmur3x86_128 } from "../lib/murmur3.ts";
import type { FileSystem } from "../fs/types.ts";
import { bytesSource } from "./cold-objects.ts";
import type { ColdSegmentEntry } from "./cold-index.ts";
import type { ColdPartition } from "./cold-store.ts";
import type { CompactionSettings } from "./compaction.ts";
import { KeyOffsetMap } from "./key-offset-map.ts";
import { OffsetIndex } from "./offset-index.ts";
import type { PartitionLog } from "./partition.ts";
import { RecordHeader } from "./record.ts";
import type { Segment } from "./segment.ts";
import { scanSegment } from "./segment-scan.ts";

const expiredTombstone = 1;

/** What one cold compaction pass needs. */
export interface ColdCompactionContext {
  fs: FileSystem;
  clock: Clock;
  logger: Logger;
  partition: PartitionLog;
  cold: ColdPartition;
  /** Most distinct keys (default `compactionKeysMax`). */
  keysMax?: number;
  /** Polled between chunks; true cancels the pass. */
  shouldStop?: () => boolean;
  /** Test hook: runs after each step of the swap (1 outputs put, 2 plan put, 3 committed, 4 deleted). */
  afterStep?: (step: number) => Promise<void>;
}

/** What a cold compaction pass did (logged as `cold_compaction.pass`). */
export interface ColdCompactionResult {
  task: "cold_compaction";
  partition: string;
  /** "compacted"; "skipped" (nothing to drop, no cold segment, too many keys); "cancelled"; "failed" (nothing changed before the commit point; after it the swap finishes later). */
  status: "compacted" | "skipped" | "cancelled" | "failed";
  reason: string;
  started_ms: number;
  duration_ms: number;
  /** Cold and local segments read for the key map, and the keys. */
  cold_segments_read: number;
  local_segments_read: number;
  keys: number;
  /** Cold segments replaced, and their log bytes before and after. */
  segments_replaced: number;
  bytes_before: number;
  bytes_after: number;
  records_dropped: number;
  tombstones_dropped: number;
  /** The generation written (0 if none). */
  gen: number;
}

class PassEnd extends Error {
  constructor(
    readonly status: ColdCompactionResult["status"],
    reason: string,
  ) {
    super(reason);
  }
}

/** Runs one cold compaction pass (module comment). Never throws for operating errors. */
export async function runColdCompaction(
  ctx: ColdCompactionContext,
  settings: CompactionSettings,
): Promise<ColdCompactionResult> {
  const { cold, partition, clock, logger } = ctx;
  const started = clock.nowMs();
  const result: ColdCompactionResult = {
    task: "cold_compaction",
    partition: partition.name,
    status: "skipped",
    reason: "",
    started_ms: started,
    duration_ms: 0,
    cold_segments_read: 0,
    local_segments_read: 0,
    keys: 0,
    segments_replaced: 0,
    bytes_before: 0,
    bytes_after: 0,
    records_dropped: 0,
    tombstones_dropped: 0,
    gen: 0,
  };
  const finish = (status: ColdCompactionResult["status"], reason: string) => {
    result.status = status;
    result.reason = reason;
    result.duration_ms = clock.nowMs() - started;
    logger.log(
      status === "failed" ? "error" : status === "compacted" ? "info" : "debug",
      "cold_compaction.pass",
      {
        ...result,
      },
    );
    return result;
  };
  if (partition.closed) return finish("skipped", "the partition is closed");
  const held: Segment[] = [];
  try {
    if (cold.swap !== undefined) await cold.finishSwap();
    const entries = cold.entries;
    if (entries.length === 0) throw new PassEnd("skipped", "no cold segment");
    const sealed = partition.sealedSegments;
    for (const s of sealed) {
      if (!s.acquire())
        throw new PassEnd("cancelled", "a sealed segment was replaced before the pass started");
      held.push(s);
    }
    const now = clock.nowMs();
    const keysMax = ctx.keysMax ?? compactionKeysMax;
    const map = new KeyOffsetMap({ keysMax, capacity: 1024 });
    const digest = new Uint32Array(4);
    const header = new RecordHeader();
    const keyRange = { start: 0, end: 0 };
    const stopCheck = () => {
      if (ctx.shouldStop?.())
        throw new PassEnd("cancelled", "the broker is shutting down or the partition closed");
    };
    const remember = (chunk: Uint8Array): void => {
      stopCheck();
      const view = viewOf(chunk);
      for (let p = 0; p < chunk.length; p += header.sizeBytes) {
        header.parse(view, p);
        if (header.keyLen < 0) continue;
        keyRange.start = header.keyStart;
        keyRange.end = header.keyStart + header.keyLen;
        murmur3x86_128(chunk, keyRange, digest);
        const flags =
          header.valueLen === 0 && now >= header.timestampMs + settings.tombstoneRetentionMs
            ? expiredTombstone
            : 0;
        if (!map.put(digest, header.offset, flags))
          throw new PassEnd(
            "skipped",
            `more than ${keysMax} distinct keys: the cold tier is compacted only whole`,
          );
      }
    };
    // 1. The key map: cold segments (oldest), then the local sealed ones.
    for (const e of entries) {
      await cold.scan(e, remember);
      result.cold_segments_read++;
    }
    for (const s of sealed) {
      await scanSegment(ctx.fs, s, (chunk) => {
        remember(chunk);
      });
      result.local_segments_read++;
    }
    result.keys = map.size;
    const keep = (chunk: Uint8Array): boolean => {
      if (header.keyLen < 0) return true;
      keyRange.start = header.keyStart;
      keyRange.end = header.keyStart + header.keyLen;
      murmur3x86_128(chunk, keyRange, digest);
      if (map.offsetOf(digest) !== header.offset) return false;
      return (map.flagsOf(digest) & expiredTombstone) === 0;
    };

    // 2. Outputs for the cold segments that lose a record.
    const gen = cold.genMax + 1;
    const replaced: ColdSegmentEntry[] = [];
    const outputs = new Map<number, ColdSegmentEntry>();
    for (const e of entries) {
      const parts: Uint8Array[] = [];
      const index = new OffsetIndex();
      let size = 0;
      let lastIndexed = -1;
      let dropped = 0;
      let tombstones = 0;
      let newest = -1;
      await cold.scan(e, (chunk) => {
        stopCheck();
        const view = viewOf(chunk);
        let runStart = -1;
        for (let p = 0; p < chunk.length; p += header.sizeBytes) {
          header.parse(view, p);
          if (keep(chunk)) {
            if (index.wants(size, lastIndexed)) {
              index.push(header.offset - e.base, size);
              lastIndexed = size;
            }
            if (runStart < 0) runStart = p;
            size += header.sizeBytes;
            newest = Math.max(newest, header.timestampMs);
          } else {
            if (runStart >= 0) parts.push(chunk.slice(runStart, p));
            runStart = -1;
            dropped++;
            if (header.keyLen >= 0 && header.valueLen === 0) tombstones++;
          }
        }
        if (runStart >= 0) parts.push(chunk.slice(runStart));
      });
      if (dropped === 0) continue;
      const log = new Uint8Array(size);
      let at = 0;
      for (const part of parts) {
        log.set(part, at);
        at += part.length;
      }
      const indexBytes = index.encode();
      const out: ColdSegmentEntry = {
        base: e.base,
        next: e.next,
        log_bytes: log.length,
        index_bytes: indexBytes.length,
        newest_ms: newest,
        gen,
      };
      await cold.store.put(cold.key(out, "index"), bytesSource(indexBytes));
      await cold.store.put(cold.key(out, "log"), bytesSource(log));
      replaced.push(e);
      outputs.set(e.base, out);
      result.records_dropped += dropped;
      result.tombstones_dropped += tombstones;
      result.bytes_before += e.log_bytes;
      result.bytes_after += log.length;
    }
    if (replaced.length === 0) throw new PassEnd("skipped", "no record to drop");
    result.segments_replaced = replaced.length;
    result.gen = gen;
    await ctx.afterStep?.(1);
    // 3. The plan, in the store.
    const plan = {
      version: 1,
      gen,
      replaced: replaced.map((e) => cold.key(e, "log")),
      outputs: [...outputs.values()].map((e) => cold.key(e, "log")),
    };
    await cold.store.put(`${cold.prefix}swap-${gen}.json`, bytesSource(utf8(JSON.stringify(plan))));
    await ctx.afterStep?.(2);
    stopCheck();
    // 4. Commit: the index names the outputs, with the replaced segments under `swap`.
    const next = entries.map((e) => outputs.get(e.base) ?? e);
    await cold.publish(next, { swap: { replaced }, genMax: gen });
    await ctx.afterStep?.(3);
    // 5. Delete what was replaced, then the swap record.
    await cold.finishSwap();
    await ctx.afterStep?.(4);
    return finish("compacted", "");
  } catch (err) {
    if (err instanceof PassEnd) return finish(err.status, err.message);
    return finish("failed", errorMessage(err));
  } finally {
    for (const s of held) await s.release();
  }
}
