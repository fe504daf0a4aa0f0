/**
 * Compaction (docs/storage.md "Compaction"; docs/storage.md "Replacing segments safely"): one pass
 * over one partition keeps, across its sealed segments, the newest record of each key and every
 * record without a key, at their original offsets and with their original bytes.
 *
 * What a record becomes (the active segment is never read or touched):
 *
 * | record                                                   | outcome |
 * |----------------------------------------------------------|---------|
 * | no key (`key_len` −1)                                     | kept    |
 * | keyed (the empty key too, docs/decisions.md §12), not the newest   | dropped |
 * |   of its key among the sealed segments                   |         |
 * | the newest of its key, value not empty                   | kept    |
 * | the newest of its key, empty value (a tombstone), with   | kept    |
 * |   now − timestamp < `tombstone_retention_ms`              |         |
 * | the same, with now − timestamp ≥ `tombstone_retention_ms` | dropped |
 *
 * Two streaming passes, memory by keys not data:
 * 1. Read every sealed segment and record, for each key's 128-bit digest (MurmurHash3 x86_128;
 *    the key itself is never stored), the offset of its newest record and whether that record is
 *    an expired tombstone ({@link KeyOffsetMap}). If the map fills (`compactionKeysMax`), the pass
 *    covers only the segments read whole before that point — still correct, since a newer record
 *    seen later only makes older ones droppable. From the map, count what would be dropped; a pass
 *    that would drop nothing is skipped.
 * 2. Find the first segment with a record to drop (segments before it stay as they are), then copy
 *    the survivors of it and every later sealed segment into new segments under temp names
 *    (`NNNN.log.cleaned`, `.index.cleaned`), each named after its first surviving record
 *    (docs/decisions.md §11) and at most `segment_bytes` long; fsync them and the directory.
 *
 * Then the swap (`segment-swap.ts`): under the partition's write lock, cancel if the sealed
 * segments are not exactly the ones read (a roll or a retention pass happened); persist the log
 * start offset if the first segment's base moves and none is persisted; write and fsync
 * `compaction.marker`; rename the outputs into place, delete the replaced files, fsync the
 * directory; publish the new list (readers already in progress keep the old files); remove the
 * marker. A record that fails its checks while reading aborts the pass before anything changes:
 * the temp files are removed and every original is left untouched. If a step after the marker
 * fails, the partition's cleanup stops until a restart, which finishes the swap from the marker.
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";
import { viewOf } from "../lib/bytes.ts";
import { murmur3x86_128 } from "../lib/murmur3.ts";
import { compactionKeysMax } from "../lib/limits.ts";
import { joinPath, type FileHandle, type FileSystem } from "../fs/types.ts";
import { KeyOffsetMap } from "./key-offset-map.ts";
import { OffsetIndex } from "./offset-index.ts";
import type { PartitionLog } from "./partition.ts";
import type { Segment } from "./segment.ts";
import { errorMessage } from "../lib/errors.ts";
import { scanSegment } from "./segment-scan.ts";
import { RecordHeader } from "./record.ts";
import {
  applySwap,
  removeSwapMarker,
  swapMarkerName,
  tempIndexName,
  tempLogName,
  writeSwapMarker,
} from "./segment-swap.ts";

/** Flag bit in the key map: the key's newest record is a tombstone past `tombstone_retention_ms`. */
const expiredTombstone = 1;

/** Bytes buffered before a write to an output log. */
const outputBufferBytes = 1024 * 1024;

/** What one compaction pass needs. */
export interface CompactionContext {
  fs: FileSystem;
  clock: Clock;
  logger: Logger;
  partition: PartitionLog;
  /** Persists the partition's current log start offset unless one is persisted already. @throws FsError. */
  ensureLogStartOffsetPersisted: () => Promise<void>;
  /** Polled between chunks; true cancels the pass (broker shutting down). */
  shouldStop?: () => boolean;
  /** Most distinct keys remembered (default `compactionKeysMax`). */
  keysMax?: number;
  /** Test hook: runs right before the swap takes the write lock. */
  beforeSwap?: () => Promise<void>;
}

/** The topic settings a pass uses. */
export interface CompactionSettings {
  /** `tombstone_retention_ms`: a tombstone older than this (by its timestamp) is dropped. */
  tombstoneRetentionMs: number;
  /** `segment_bytes`: the largest output segment, in bytes (a single larger record still fits). */
  segmentBytes: number;
}

/** What a compaction pass did (logged as `compaction.pass`, shown in `GET /v1/admin/storage`). */
export interface CompactionResult {
  task: "compaction";
  partition: string;
  /**
   * "compacted": segments were replaced; "skipped": nothing to drop, no sealed segment, or a closed
   * or fenced partition; "cancelled": the sealed segments changed before the swap, or shutdown;
   * "aborted": an unreadable record or a corrupt segment, nothing changed; "failed": an I/O error
   * (before the marker: nothing changed; after it: `swap_incomplete`, finished at the next start).
   */
  status: "compacted" | "skipped" | "cancelled" | "aborted" | "failed";
  reason: string;
  started_ms: number;
  duration_ms: number;
  /** Sealed segments read in pass 1, and the records and bytes in them. */
  segments_read: number;
  records_read: number;
  bytes_read: number;
  /** Distinct keys seen, and the bytes the key map took. */
  keys: number;
  map_bytes: number;
  /** The run replaced: segments and log bytes before, outputs and log bytes after. */
  segments_before: number;
  segments_after: number;
  bytes_before: number;
  bytes_after: number;
  /** Records dropped, of which tombstones past their retention. */
  records_dropped: number;
  tombstones_dropped: number;
  /** True if a failure after the marker left the swap for the next start to finish. */
  swap_incomplete: boolean;
  /**
   * When the earliest tombstone read that was not yet past its retention will be (ms since the
   * epoch), or −1 if there was none: until then, a pass over the same segments drops nothing.
   */
  next_tombstone_expiry_ms: number;
}

/** An output segment being written under temp names. */
interface Output {
  baseOffset: number;
  log: FileHandle;
  index: OffsetIndex;
  sizeBytes: number;
  lastIndexedPosition: number;
}

/** Writes survivors into output segments of at most `segmentBytes`, under temp names. */
class OutputWriter {
  readonly done: { baseOffset: number; sizeBytes: number }[] = [];
  #fs: FileSystem;
  #dir: string;
  #segmentBytes: number;
  #current: Output | null = null;
  #buffer = new Uint8Array(outputBufferBytes);
  #buffered = 0;
  #bufferedAt = 0;
  #created: string[] = [];

  constructor(fs: FileSystem, dir: string, segmentBytes: number) {
    this.#fs = fs;
    this.#dir = dir;
    this.#segmentBytes = segmentBytes;
  }

  /** Every temp path created, for cleanup. */
  get created(): readonly string[] {
    return this.#created;
  }

  /**
   * Appends one stored record, `source[range.start, range.end)` verbatim, with its offset. Returns
   * null when the record only went into the buffer, or a promise to await when it needed I/O (a
   * flush, or starting or finishing an output): the common case costs no await per record.
   */
  add(
    source: Uint8Array,
    range: { start: number; end: number },
    offset: number,
  ): Promise<void> | null {
    const length = range.end - range.start;
    const out = this.#current;
    if (
      out === null ||
      (out.sizeBytes > 0 && out.sizeBytes + length > this.#segmentBytes) ||
      this.#buffered + length > this.#buffer.length
    ) {
      return this.#addSlowly(source, { start: range.start, end: range.end }, offset);
    }
    this.#append(out, source, range, offset);
    return null;
  }

  async #addSlowly(
    source: Uint8Array,
    range: { start: number; end: number },
    offset: number,
  ): Promise<void> {
    const length = range.end - range.start;
    let out = this.#current;
    if (out !== null && out.sizeBytes > 0 && out.sizeBytes + length > this.#segmentBytes) {
      await this.#finishCurrent();
      out = null;
    }
    if (out === null) out = await this.#start(offset);
    if (this.#buffered + length > this.#buffer.length) await this.#flush();
    if (length <= this.#buffer.length) {
      this.#append(out, source, range, offset);
      return;
    }
    // Larger than the buffer: straight to the file (the buffer is empty after the flush).
    this.#index(out, offset);
    await out.log.write(source.subarray(range.start, range.end), out.sizeBytes);
    out.sizeBytes += length;
    this.#bufferedAt = out.sizeBytes;
  }

  #index(out: Output, offset: number): void {
    if (out.index.wants(out.sizeBytes, out.lastIndexedPosition)) {
      out.index.push(offset - out.baseOffset, out.sizeBytes);
      out.lastIndexedPosition = out.sizeBytes;
    }
  }

  #append(
    out: Output,
    source: Uint8Array,
    range: { start: number; end: number },
    offset: number,
  ): void {
    this.#index(out, offset);
    this.#buffer.set(source.subarray(range.start, range.end), this.#buffered);
    this.#buffered += range.end - range.start;
    out.sizeBytes += range.end - range.start;
  }

  async #start(baseOffset: number): Promise<Output> {
    const path = joinPath(this.#dir, tempLogName(baseOffset));
    this.#created.push(path);
    const log = await this.#fs.open(path, { create: true });
    await log.truncate(0);
    const out: Output = {
      baseOffset,
      log,
      index: new OffsetIndex(),
      sizeBytes: 0,
      lastIndexedPosition: -1,
    };
    this.#current = out;
    this.#buffered = 0;
    this.#bufferedAt = 0;
    return out;
  }

  async #flush(): Promise<void> {
    const out = this.#current;
    if (out === null || this.#buffered === 0) return;
    await out.log.write(this.#buffer.subarray(0, this.#buffered), this.#bufferedAt);
    this.#bufferedAt += this.#buffered;
    this.#buffered = 0;
  }

  /** Writes the rest of the current output and its index, fsyncs both, closes them. */
  async #finishCurrent(): Promise<void> {
    const out = this.#current;
    if (out === null) return;
    await this.#flush();
    this.#current = null;
    try {
      await out.log.sync();
    } finally {
      await out.log.close().catch(() => {});
    }
    const indexPath = joinPath(this.#dir, tempIndexName(out.baseOffset));
    this.#created.push(indexPath);
    const index = await this.#fs.open(indexPath, { create: true });
    try {
      await index.truncate(0);
      const bytes = out.index.encode();
      if (bytes.length > 0) await index.write(bytes, 0);
      await index.sync();
    } finally {
      await index.close().catch(() => {});
    }
    this.done.push({ baseOffset: out.baseOffset, sizeBytes: out.sizeBytes });
  }

  /** Finishes the last output; afterwards every output is durable under its temp names (once the directory is fsynced). */
  async finish(): Promise<void> {
    await this.#finishCurrent();
  }

  /** Closes what is open and unlinks every temp file created (best effort). */
  async discard(): Promise<void> {
    const out = this.#current;
    this.#current = null;
    await out?.log.close().catch(() => {});
    for (const path of this.#created) await this.#fs.unlink(path).catch(() => {});
  }
}

/** Thrown inside a pass to end it with a status. */
class PassEnd extends Error {
  constructor(
    readonly status: CompactionResult["status"],
    reason: string,
  ) {
    super(reason);
  }
}

/** A compaction result with nothing done yet (status "skipped"), for partition `name` at `startedMs`. */
export function newCompactionResult(name: string, startedMs: number): CompactionResult {
  return {
    task: "compaction",
    partition: name,
    status: "skipped",
    reason: "",
    started_ms: startedMs,
    duration_ms: 0,
    segments_read: 0,
    records_read: 0,
    bytes_read: 0,
    keys: 0,
    map_bytes: 0,
    segments_before: 0,
    segments_after: 0,
    bytes_before: 0,
    bytes_after: 0,
    records_dropped: 0,
    tombstones_dropped: 0,
    swap_incomplete: false,
    next_tombstone_expiry_ms: -1,
  };
}

/**
 * Runs one compaction pass over one partition (see the module comment). Never throws for operating
 * errors: they come back as a status and are logged as `compaction.pass`.
 */
export async function runCompaction(
  ctx: CompactionContext,
  settings: CompactionSettings,
): Promise<CompactionResult> {
  const { partition, clock, logger, fs } = ctx;
  const started = clock.nowMs();
  const result = newCompactionResult(partition.name, started);
  const finish = (status: CompactionResult["status"], reason: string): CompactionResult => {
    result.status = status;
    result.reason = reason;
    result.duration_ms = clock.nowMs() - started;
    const level =
      status === "failed" || status === "aborted"
        ? "error"
        : status === "compacted"
          ? "info"
          : "debug";
    logger.log(level, "compaction.pass", { ...result });
    return result;
  };
  if (partition.closed) return finish("skipped", "the partition is closed");
  if (partition.fenced) return finish("skipped", "the partition is fenced (restart required)");
  const sealed = partition.sealedSegments;
  if (sealed.length === 0) return finish("skipped", "no sealed segment");
  const corrupt = sealed.find((s) => s.corruption !== null);
  if (corrupt !== undefined)
    return finish(
      "aborted",
      `segment ${corrupt.logPath} is corrupt (${corrupt.corruption!.reason}); compaction would lose what follows it`,
    );

  const held: Segment[] = [];
  for (const s of sealed) {
    if (!s.acquire()) {
      for (const h of held) await h.release();
      return finish("cancelled", "a sealed segment was replaced before the pass started");
    }
    held.push(s);
  }
  const writer = new OutputWriter(fs, partition.dir, settings.segmentBytes);
  let committed = false;
  try {
    const now = clock.nowMs();
    const map = new KeyOffsetMap({ keysMax: ctx.keysMax ?? compactionKeysMax, capacity: 1024 });
    const digest = new Uint32Array(4);
    const header = new RecordHeader();
    // Reused for every record, so the hot loops allocate nothing per record.
    const keyRange = { start: 0, end: 0 };
    const recordRange = { start: 0, end: 0 };
    const digestKey = (chunk: Uint8Array): void => {
      keyRange.start = header.keyStart;
      keyRange.end = header.keyStart + header.keyLen;
      murmur3x86_128(chunk, keyRange, digest);
    };
    const stopCheck = () => {
      if (ctx.shouldStop?.())
        throw new PassEnd("cancelled", "the broker is shutting down or the partition closed");
    };

    // Pass 1: newest offset of every key; stops at the segment where the map fills.
    let runEnd = sealed.length;
    let keyedInRun = 0;
    for (let i = 0; i < sealed.length && runEnd === sealed.length; i++) {
      let keyed = 0;
      const scan = await scanSegment(fs, sealed[i], (chunk) => {
        stopCheck();
        const view = viewOf(chunk);
        for (let p = 0; p < chunk.length; p += header.sizeBytes) {
          header.parse(view, p);
          if (header.keyLen < 0) continue;
          digestKey(chunk);
          let flags = 0;
          if (header.valueLen === 0) {
            const expiresMs = header.timestampMs + settings.tombstoneRetentionMs;
            if (now >= expiresMs) flags = expiredTombstone;
            else if (
              result.next_tombstone_expiry_ms < 0 ||
              expiresMs < result.next_tombstone_expiry_ms
            )
              result.next_tombstone_expiry_ms = expiresMs;
          }
          if (!map.put(digest, header.offset, flags)) {
            runEnd = i;
            return false;
          }
          keyed++;
        }
      });
      if (scan.stopped) break;
      keyedInRun += keyed;
      result.segments_read++;
      result.records_read += scan.records;
      result.bytes_read += scan.bytes;
    }
    result.keys = map.size;
    result.map_bytes = map.memoryBytes;
    if (runEnd === 0)
      throw new PassEnd(
        "skipped",
        `the first sealed segment alone holds more than ${ctx.keysMax ?? compactionKeysMax} distinct keys`,
      );
    const runEndOffset =
      runEnd < sealed.length ? sealed[runEnd].baseOffset : Number.MAX_SAFE_INTEGER;
    const inRun = map.countBelow(runEndOffset, expiredTombstone);
    const droppable = keyedInRun - inRun.keys + inRun.flagged;
    if (droppable === 0) throw new PassEnd("skipped", "no record to drop");

    const keep = (chunk: Uint8Array): boolean => {
      if (header.keyLen < 0) return true;
      digestKey(chunk);
      const newest = map.offsetOf(digest);
      if (newest !== header.offset) return false;
      return (map.flagsOf(digest) & expiredTombstone) === 0;
    };

    // Pass 2a: the first segment with something to drop; the ones before it stay as they are.
    let first = -1;
    for (let i = 0; i < runEnd && first < 0; i++) {
      await scanSegment(fs, sealed[i], (chunk) => {
        stopCheck();
        const view = viewOf(chunk);
        for (let p = 0; p < chunk.length; p += header.sizeBytes) {
          header.parse(view, p);
          if (!keep(chunk)) {
            first = i;
            return false;
          }
        }
      });
    }
    if (first < 0) throw new PassEnd("skipped", "no record to drop");

    // Pass 2b: copy the survivors of the run [first, runEnd) into outputs under temp names.
    for (let i = first; i < runEnd; i++) {
      await scanSegment(fs, sealed[i], async (chunk) => {
        stopCheck();
        const view = viewOf(chunk);
        for (let p = 0; p < chunk.length; p += header.sizeBytes) {
          header.parse(view, p);
          if (keep(chunk)) {
            recordRange.start = p;
            recordRange.end = p + header.sizeBytes;
            const io = writer.add(chunk, recordRange, header.offset);
            if (io !== null) await io;
          } else {
            result.records_dropped++;
            if (
              header.keyLen >= 0 &&
              header.valueLen === 0 &&
              map.offsetOf(digest) === header.offset
            )
              result.tombstones_dropped++;
          }
        }
      });
      result.segments_before++;
      result.bytes_before += sealed[i].sizeBytes;
    }
    await writer.finish();
    await fs.syncDir(partition.dir);
    result.segments_after = writer.done.length;
    for (const o of writer.done) result.bytes_after += o.sizeBytes;

    // The swap (docs/storage.md "Replacing segments safely", steps 2-4).
    stopCheck();
    await ctx.beforeSwap?.();
    const replaced = sealed.slice(first, runEnd);
    const outcome = await partition.withWriteLock(async (): Promise<string> => {
      if (partition.closed) return "the partition closed";
      const current = partition.sealedSegments;
      if (current.length !== sealed.length || !current.every((s, i) => s === sealed[i]))
        return "the sealed segments changed (a roll or a retention pass)";
      const firstBaseMoves =
        first === 0 &&
        (writer.done.length === 0 || writer.done[0].baseOffset !== sealed[0].baseOffset);
      if (firstBaseMoves) await ctx.ensureLogStartOffsetPersisted();
      // The renames below may put an output under a replaced segment's name: readers already
      // using a replaced segment must keep its bytes, so its files are held open from here on,
      // whatever the cache of open segments would close (docs/storage.md "Index and reads"). A
      // pass that ends before the swap lets them go again.
      const letGo = () => {
        for (const s of replaced) s.unretainFiles();
      };
      try {
        for (const s of replaced) await s.retainFiles();
      } catch (err) {
        letGo();
        throw new PassEnd(
          "failed",
          `opening the replaced segments failed (${errorMessage(err)}); nothing was changed`,
        );
      }
      const plan = {
        replaced: replaced.map((s) => s.baseOffset),
        outputs: writer.done.map((o) => o.baseOffset),
      };
      try {
        await writeSwapMarker(fs, partition.dir, plan);
      } catch (err) {
        // Nothing was renamed in this process, whatever a restart then does with the marker.
        letGo();
        // Undecided: a marker may be on disk, whole or not. Take it back, or leave it to recovery.
        try {
          await removeSwapMarker(fs, partition.dir);
        } catch {
          committed = true;
          throw err;
        }
        throw new PassEnd(
          "failed",
          `writing ${swapMarkerName} failed (${errorMessage(err)}); nothing was changed`,
        );
      }
      committed = true;
      await applySwap(fs, partition.dir, plan);
      const fresh: Segment[] = [];
      for (const o of writer.done) {
        fresh.push(await partition.openSealedSegment(o.baseOffset));
      }
      await partition.replaceSealedSegments(replaced, fresh);
      await removeSwapMarker(fs, partition.dir);
      return "";
    });
    if (outcome !== "") throw new PassEnd("cancelled", outcome);
    return finish(
      "compacted",
      `${result.records_dropped} records dropped from the ${replaced.length} sealed segments from offset ${replaced[0].baseOffset}`,
    );
  } catch (err) {
    if (committed) {
      result.swap_incomplete = true;
      return finish(
        "failed",
        `the swap failed after its marker was written (${errorMessage(err)}); a restart finishes it`,
      );
    }
    await writer.discard();
    if (err instanceof PassEnd) return finish(err.status, err.message);
    const name = err instanceof Error ? err.name : "";
    if (name === "SegmentUnreadableError")
      return finish("aborted", `${errorMessage(err)}; nothing was changed`);
    return finish("failed", `${errorMessage(err)}; nothing was changed`);
  } finally {
    for (const h of held) await h.release();
  }
}
