/**
 * Streaming over every record of a sealed segment, for the background tasks (retention's newest
 * timestamp, compaction's two passes, the cold tier's retention): large sequential reads into one
 * reused buffer, each record checked (length, CRC, increasing offset) once as it is read, and the
 * chunks handed out are the stored bytes verbatim. {@link RecordHeader} then reads a record's
 * fields from a chunk without checking its CRC again (`viewOf(chunk)` for its view).
 */
import { scanWindowBytes } from "../lib/limits.ts";
import { viewOf } from "../lib/bytes.ts";
import type { FileSystem } from "../fs/types.ts";
import { RecordHeader } from "./record.ts";
import { RecordScanner, ScanStatus } from "./record-scanner.ts";
import type { Segment } from "./segment.ts";

/**
 * Thrown when a segment cannot be read whole: a record failed its checks where one should start.
 */
export class SegmentUnreadableError extends Error {
  override name = "SegmentUnreadableError";
}

/** What {@link scanSegment} read. */
export interface SegmentScan {
  /** Records handed out. */
  records: number;
  /** Bytes handed out. */
  bytes: number;
  /** True when `onChunk` asked to stop early. */
  stopped: boolean;
}

/**
 * Reads every record of a sealed segment's readable part in order, through its own handle on the
 * segment's log file and one reused buffer (grown only for a record larger than it), checking each
 * record's length, CRC and increasing offset, and hands out runs of whole records, back to back and
 * verbatim, to `onChunk`; returning false from it stops the scan. A chunk is a view of the reused
 * buffer: it is valid until `onChunk` (awaited) returns. The caller keeps the segment from being
 * deleted meanwhile (the partition's cleaner runs one pass at a time).
 * @throws SegmentUnreadableError if a record fails its checks or the records do not end exactly at
 * the readable end; FsError from opening or reading.
 */
export async function scanSegment(
  fs: FileSystem,
  segment: Segment,
  onChunk: (
    chunk: Uint8Array,
    records: number,
  ) => boolean | undefined | Promise<boolean | undefined>,
): Promise<SegmentScan> {
  const limit = segment.readableEndBytes;
  const file = await fs.open(segment.logPath);
  try {
    const scanner = new RecordScanner(file, { end: limit, windowBytes: scanWindowBytes });
    const cursor = scanner.cursor;
    let pos = 0;
    let chunkStart = 0; // file position of the first record not handed out yet
    let n = 0; // records from chunkStart to pos
    let records = 0;
    let bytes = 0;
    let minOffset = segment.baseOffset;
    const unreadable = (at: number, reason: string) =>
      new SegmentUnreadableError(`Cannot read segment ${segment.logPath} at byte ${at}: ${reason}`);
    const fileEnds = () =>
      unreadable(scanner.dataEnd, `the file ends before its ${limit} readable bytes`);
    /** Hands out the records read since the last chunk; false if `onChunk` asked to stop. */
    const handOut = async (): Promise<boolean> => {
      if (n === 0) return true;
      records += n;
      bytes += pos - chunkStart;
      const more = (await onChunk(scanner.bytes(chunkStart, pos), n)) !== false;
      n = 0;
      chunkStart = pos;
      return more;
    };
    while (pos < scanner.dataEnd) {
      let status = scanner.decode(pos);
      if (status === ScanStatus.Cut) {
        // The next window replaces this one's bytes: hand out its whole records first.
        if (!(await handOut())) return { records, bytes, stopped: true };
        status = await scanner.readRecordAt(pos);
        chunkStart = pos;
        if (pos >= scanner.dataEnd) break;
      }
      if (status !== ScanStatus.Ok) {
        if (status === ScanStatus.Incomplete && scanner.dataEnd < limit) throw fileEnds();
        throw unreadable(pos, cursor.reason);
      }
      if (cursor.offset < minOffset)
        throw unreadable(pos, `offset ${cursor.offset} does not increase past ${minOffset - 1}`);
      minOffset = cursor.offset + 1;
      pos += cursor.sizeBytes;
      n++;
    }
    if (!(await handOut())) return { records, bytes, stopped: true };
    if (pos < limit) throw fileEnds();
    if (bytes !== limit)
      throw unreadable(bytes, `records add up to ${bytes} bytes, but ${limit} are readable`);
    return { records, bytes, stopped: false };
  } finally {
    await file.close().catch(() => {});
  }
}

/**
 * The largest record timestamp in a sealed segment's readable part (ms), or −1 if it holds none.
 * @throws SegmentUnreadableError, FsError.
 */
export async function newestTimestampMs(fs: FileSystem, segment: Segment): Promise<number> {
  let newest = -1;
  const header = new RecordHeader();
  await scanSegment(fs, segment, (chunk) => {
    const view = viewOf(chunk);
    for (let p = 0; p < chunk.length; p += header.sizeBytes) {
      header.parse(view, p);
      if (header.timestampMs > newest) newest = header.timestampMs;
    }
  });
  return newest;
}
