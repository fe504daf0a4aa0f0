/**
 * Streaming over every record of a sealed segment, for the background tasks (retention's newest
 * timestamp, compaction's two passes, the cold tier's retention): large sequential reads into one
 * reused buffer, each record checked (length, CRC, increasing offset) once as it is read, and the
 * chunks handed out are the stored bytes verbatim. {@link RecordHeader} then reads a record's
 * fields from a chunk without checking its CRC again (`viewOf(chunk)` for its view).
 */
import { recordLengthPrefixBytes, scanWindowBytes } from "../lib/limits.ts";
import { viewOf } from "../lib/bytes.ts";
import type { FileSystem } from "../fs/types.ts";
import { DecodeStatus, RecordCursor, RecordHeader } from "./record.ts";
import type { Segment } from "./segment.ts";

/** Thrown when a segment cannot be read whole: a record failed its checks where one should start. */
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
    const cursor = new RecordCursor();
    let buf = new Uint8Array(Math.min(scanWindowBytes, Math.max(limit, recordLengthPrefixBytes)));
    let filePos = 0; // file position of buf[0]
    let have = 0; // bytes of buf holding file data
    let minOffset = segment.baseOffset;
    let records = 0;
    let bytes = 0;
    const unreadable = (at: number, reason: string) =>
      new SegmentUnreadableError(`Cannot read segment ${segment.logPath} at byte ${at}: ${reason}`);
    while (filePos + have < limit || have > 0) {
      if (filePos + have < limit && have < buf.length) {
        const want = Math.min(buf.length - have, limit - filePos - have);
        const got = await file.read(buf.subarray(have, have + want), filePos + have);
        if (got === 0)
          throw unreadable(filePos + have, `the file ends before its ${limit} readable bytes`);
        have += got;
      }
      cursor.reset(buf.subarray(0, have));
      let p = 0;
      let n = 0;
      while (p < have) {
        const status = cursor.decode(p);
        if (status === DecodeStatus.Ok) {
          if (cursor.offset < minOffset)
            throw unreadable(
              filePos + p,
              `offset ${cursor.offset} does not increase past ${minOffset - 1}`,
            );
          minOffset = cursor.offset + 1;
          p += cursor.sizeBytes;
          n++;
          continue;
        }
        if (status === DecodeStatus.Incomplete && filePos + have < limit) break; // read more
        throw unreadable(filePos + p, cursor.reason);
      }
      if (n > 0) {
        records += n;
        bytes += p;
        if ((await onChunk(buf.subarray(0, p), n)) === false)
          return { records, bytes, stopped: true };
      } else if (have === buf.length) {
        // One record larger than the buffer (its length passed the plausibility check in decode).
        const claimed =
          recordLengthPrefixBytes + new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0);
        const bigger = new Uint8Array(Math.max(claimed, buf.length * 2));
        bigger.set(buf.subarray(0, have));
        buf = bigger;
        continue;
      }
      buf.copyWithin(0, p, have);
      filePos += p;
      have -= p;
    }
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
