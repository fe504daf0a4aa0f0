/**
 * Streaming over every record of a sealed segment, for the background tasks (retention's newest
 * timestamp, compaction's two passes, the cold tier's retention): large windows through
 * {@link Segment.read}, so each record is CRC-checked once as it is read, and the chunks handed
 * out are the stored bytes verbatim. {@link RecordHeader} then reads a record's fields from a
 * chunk without checking its CRC again.
 */
import { readI64, readU64 } from "../lib/bytes.ts";
import { recordLengthPrefixBytes } from "../lib/limits.ts";
import type { Segment } from "./segment.ts";

/** Bytes asked of a segment per read while scanning. */
export const scanChunkBytes = 1024 * 1024;

/** Thrown when a segment cannot be read whole: a record failed its checks where one should start. */
export class SegmentUnreadableError extends Error {
  override name = "SegmentUnreadableError";
}

/**
 * The fields of one stored record inside a chunk that {@link scanSegment} produced (records there
 * already passed their length and CRC checks). Call {@link RecordHeader.parse} per record.
 */
export class RecordHeader {
  offset = 0;
  timestampMs = 0;
  /** −1 for no key (DECISIONS 12: 0 is the empty key, a real key). */
  keyLen = -1;
  /** Position of the key within the chunk. */
  keyStart = 0;
  /** 0 = a tombstone when the record has a key. */
  valueLen = 0;
  /** Bytes of the whole record, `record_len` and CRC included. */
  sizeBytes = 0;

  /** Reads the record at `pos` of `chunk` (a view made with {@link chunkView}). */
  parse(view: DataView, pos: number): void {
    const len = view.getUint32(pos);
    const body = pos + recordLengthPrefixBytes;
    this.offset = readU64(view, body);
    this.timestampMs = readI64(view, body + 8);
    this.keyLen = view.getInt32(body + 16);
    this.keyStart = body + 20;
    this.valueLen = view.getUint32(body + 20 + (this.keyLen < 0 ? 0 : this.keyLen));
    this.sizeBytes = recordLengthPrefixBytes + len;
  }
}

/** A DataView over exactly a chunk's bytes. */
export function chunkView(chunk: Uint8Array): DataView {
  return new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
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
 * Reads every record of `segment` (which the caller has acquired) in order, handing out runs of
 * stored records, back to back and verbatim, to `onChunk`; returning false from it stops the scan.
 * Checks that the chunks cover the readable part of the segment exactly, so nothing is skipped
 * silently.
 * @throws SegmentUnreadableError if a record fails its checks or the chunks do not add up;
 * FsError from reads.
 */
export async function scanSegment(
  segment: Segment,
  onChunk: (chunk: Uint8Array, records: number) => boolean | void | Promise<boolean | void>,
): Promise<SegmentScan> {
  const limitBytes = segment.readableEndBytes;
  let offset = segment.baseOffset;
  let records = 0;
  let bytes = 0;
  for (;;) {
    const r = await segment.read({ offset, maxRecords: 1_000_000, maxBytes: scanChunkBytes, limitBytes });
    if (r.status === "bad_position") {
      throw new SegmentUnreadableError(`Cannot read segment ${segment.logPath}: a record at or after offset ${offset} fails its checks`);
    }
    if (r.count === 0) break;
    records += r.count;
    bytes += r.bytes.length;
    offset = r.lastOffset + 1;
    if ((await onChunk(r.bytes, r.count)) === false) return { records, bytes, stopped: true };
  }
  if (bytes !== limitBytes) {
    throw new SegmentUnreadableError(`Cannot read segment ${segment.logPath}: its records add up to ${bytes} bytes, but ${limitBytes} are readable`);
  }
  return { records, bytes, stopped: false };
}

/**
 * The largest record timestamp in a segment's readable part (ms), or −1 if it holds no record.
 * The segment must be acquired by the caller.
 * @throws SegmentUnreadableError, FsError.
 */
export async function newestTimestampMs(segment: Segment): Promise<number> {
  let newest = -1;
  const header = new RecordHeader();
  await scanSegment(segment, (chunk) => {
    const view = chunkView(chunk);
    for (let p = 0; p < chunk.length; p += header.sizeBytes) {
      header.parse(view, p);
      if (header.timestampMs > newest) newest = header.timestampMs;
    }
  });
  return newest;
}
