/**
 * Record shapes of the TCP client and the pure helpers behind them: building an entry batch from
 * records, checking fetched records end to end, expanding produce spans.
 */
import type { FetchResult, ProduceSpan, RecordSet } from "../broker/types.ts";
import { viewOf } from "../lib/bytes.ts";
import { crc32IsNative } from "../lib/crc32.ts";
import { recordLengthPrefixBytes, recordLenMax, recordLenMin } from "../lib/limits.ts";
import {
  DecodeStatus,
  EntryBatchBuilder,
  RecordCursor,
  RecordFormatError,
  RecordHeader,
  recordCrcsMatch,
  type EntryBatch,
} from "../storage/record.ts";
import { Errors } from "../broker/errors.ts";
import { ClientError } from "./errors.ts";

/** A record to produce. Strings are sent as UTF-8. */
export interface ProduceRecord {
  /** Omitted or null: no key. The empty string / empty array is a real (empty) key (docs/decisions.md §12). */
  key?: Uint8Array | string | null;
  /** The value; empty is a tombstone. */
  value: Uint8Array | string;
  /** Milliseconds since the epoch; omitted (or −1) lets the broker stamp it. */
  timestampMs?: number;
}

/** A record as fetched, after its CRC and offset order were checked. */
export interface FetchedRecord {
  offset: number;
  timestampMs: number;
  /** null for no key. A view into the response buffer. */
  key: Uint8Array | null;
  /** A view into the response buffer. */
  value: Uint8Array;
}

/** Where one produced record went. */
export interface RecordPosition {
  partition: number;
  offset: number;
}

const encoder = new TextEncoder();

function toBytes(value: Uint8Array | string): Uint8Array {
  return typeof value === "string" ? encoder.encode(value) : value;
}

/**
 * Builds an entry batch from records.
 * @throws ClientError `invalid_request` for a record over the size limit or a bad timestamp.
 */
export function buildEntryBatch(records: readonly ProduceRecord[]): EntryBatch {
  let sizeBytes = 64;
  const encoded = records.map((r) => {
    const key = r.key === undefined || r.key === null ? null : toBytes(r.key);
    const value = toBytes(r.value);
    sizeBytes += 16 + (key?.length ?? 0) + value.length;
    return { key, value, timestampMs: r.timestampMs ?? -1 };
  });
  const builder = new EntryBatchBuilder(sizeBytes);
  try {
    for (const r of encoded) builder.add(r.key, r.value, r.timestampMs);
  } catch (error) {
    if (error instanceof RecordFormatError)
      throw ClientError.fromKind(Errors.invalidRequest, `Cannot produce: ${error.message}`);
    throw error;
  }
  return builder.build();
}

/**
 * Checks the records of a fetch response without creating anything per record: every record
 * whole and its CRC right, `record_count` records exactly filling `records_bytes`, offsets
 * strictly increasing, none below the requested offset nor at or above `next_offset`.
 * @throws ClientError `invalid_response` naming the first record that fails.
 */
export function checkFetchedRecords(result: FetchResult, requestedOffset: number): void {
  checkFetchedRecordChunks([result.records.bytes], result, requestedOffset);
}

/**
 * {@link checkFetchedRecords} for records that arrived in several chunks (`chunks`, in order,
 * together the `records` field of the response), without joining them. Returns the records as
 * runs of whole records that each lie in one buffer: views of the chunks, plus a copy of each
 * record that straddles two chunks (its length checked against the bytes present first).
 * @param response `record_count` (as `records.count`) and `next_offset` of the response.
 * @throws ClientError `invalid_response` naming the first record that fails.
 */
export function checkFetchedRecordChunks(
  chunks: readonly Uint8Array[],
  response: { records: { count: number }; nextOffset: number },
  requestedOffset: number,
): RecordSet[] {
  // With a native CRC-32, each run's CRCs are checked in one pass after the walk; if one fails,
  // the walk runs again checking record by record, which names the bad record.
  if (!crc32IsNative()) return walkFetchedRecords(chunks, response, requestedOffset, true);
  const runs = walkFetchedRecords(chunks, response, requestedOffset, false);
  for (const run of runs) {
    if (recordCrcsMatch(run.bytes, 0, run.bytes.length)) continue;
    walkFetchedRecords(chunks, response, requestedOffset, true);
    throw ClientError.invalidResponse("Cannot read fetch response: a record's CRC does not match");
  }
  return runs;
}

/** {@link checkFetchedRecordChunks}, checking each record's CRC on the way or not (`checkCrc`). */
function walkFetchedRecords(
  chunks: readonly Uint8Array[],
  response: { records: { count: number }; nextOffset: number },
  requestedOffset: number,
  checkCrc: boolean,
): RecordSet[] {
  const count = response.records.count;
  const nextOffset = response.nextOffset;
  let totalBytes = 0;
  for (const chunk of chunks) totalBytes += chunk.length;
  const runs: RecordSet[] = [];
  const cursor = new RecordCursor();
  cursor.checkCrc = checkCrc;
  let c = 0;
  let chunk = chunks.length > 0 ? chunks[0] : new Uint8Array(0);
  cursor.reset(chunk);
  /** Position in `chunk`; `before` is the bytes of the chunks before it. */
  let pos = 0;
  let before = 0;
  let runStart = 0;
  let runCount = 0;
  let previous = requestedOffset - 1;
  const closeRun = (): void => {
    if (runCount > 0) runs.push({ bytes: chunk.subarray(runStart, pos), count: runCount });
    runCount = 0;
  };
  const checkOffset = (i: number): void => {
    if (cursor.offset <= previous) {
      throw ClientError.invalidResponse(
        `Cannot read fetched record ${i}: offset ${cursor.offset} does not follow ${previous} (requested from ${requestedOffset})`,
      );
    }
    if (cursor.offset >= nextOffset) {
      throw ClientError.invalidResponse(
        `Cannot read fetched record ${i}: offset ${cursor.offset} is not below next_offset ${nextOffset}`,
      );
    }
    previous = cursor.offset;
  };
  for (let i = 0; i < count; i++) {
    if (pos === chunk.length && c + 1 < chunks.length) {
      closeRun();
      before += chunk.length;
      chunk = chunks[++c];
      cursor.reset(chunk);
      pos = runStart = 0;
    }
    const status = cursor.decode(pos);
    if (status === DecodeStatus.Ok) {
      checkOffset(i);
      pos += cursor.sizeBytes;
      runCount++;
      continue;
    }
    const at = before + pos;
    if (status === DecodeStatus.Invalid || c + 1 === chunks.length) {
      throw ClientError.invalidResponse(
        `Cannot read fetched record ${i} at byte ${at}: ${cursor.reason}`,
      );
    }
    // The record runs on into the next chunk: copy it out whole, once its length is known to be
    // plausible and present.
    closeRun();
    const lengthBytes = copyAcross(chunks, c, pos, new Uint8Array(recordLengthPrefixBytes));
    const recordLen =
      totalBytes - at < recordLengthPrefixBytes
        ? -1
        : new DataView(lengthBytes.buffer).getUint32(0);
    if (
      recordLen < recordLenMin ||
      recordLen > recordLenMax ||
      at + recordLengthPrefixBytes + recordLen > totalBytes
    ) {
      const reason =
        recordLen < 0
          ? "fewer than 4 bytes left for record_len"
          : `record_len ${recordLen} is outside [${recordLenMin}, ${recordLenMax}] or runs past the end of the data`;
      throw ClientError.invalidResponse(`Cannot read fetched record ${i} at byte ${at}: ${reason}`);
    }
    const record = copyAcross(chunks, c, pos, new Uint8Array(recordLengthPrefixBytes + recordLen));
    if (cursor.reset(record).decode(0) !== DecodeStatus.Ok) {
      throw ClientError.invalidResponse(
        `Cannot read fetched record ${i} at byte ${at}: ${cursor.reason}`,
      );
    }
    checkOffset(i);
    runs.push({ bytes: record, count: 1 });
    // Move past the record: into the chunk where it ends.
    let skip = pos + record.length;
    while (skip >= chunk.length && c + 1 < chunks.length) {
      skip -= chunk.length;
      before += chunk.length;
      chunk = chunks[++c];
    }
    cursor.reset(chunk);
    pos = runStart = skip;
  }
  closeRun();
  const consumed = before + pos;
  if (consumed !== totalBytes) {
    throw ClientError.invalidResponse(
      `Cannot read fetch response: ${totalBytes - consumed} bytes follow the ${count} records it counts`,
    );
  }
  if (nextOffset < requestedOffset) {
    throw ClientError.invalidResponse(
      `Cannot read fetch response: next_offset ${nextOffset} is below the requested offset ${requestedOffset}`,
    );
  }
  return runs;
}

/** Fills `out` with the bytes from `chunks[c]` at `pos` on, across chunks, as far as they go. */
function copyAcross(
  chunks: readonly Uint8Array[],
  c: number,
  pos: number,
  out: Uint8Array,
): Uint8Array {
  let filled = 0;
  for (let k = c, p = pos; k < chunks.length && filled < out.length; k++, p = 0) {
    const n = Math.min(chunks[k].length - p, out.length - filled);
    out.set(chunks[k].subarray(p, p + n), filled);
    filled += n;
  }
  return out;
}

/**
 * Walks records that {@link checkFetchedRecords} accepted, without creating an object per
 * record: after {@link FetchedRecordCursor.next} returns true, the fields describe the current
 * record, and {@link FetchedRecordCursor.key} / {@link FetchedRecordCursor.value} return views of
 * the response bytes. It does not check anything again, so build it only over checked records.
 */
export class FetchedRecordCursor {
  /** Absolute offset of the current record. */
  offset = -1;
  /** The current record's time stamp, ms since the epoch. */
  timestampMs = 0;
  /** The current record's `key_len`: −1 for no key, 0 for the empty key. */
  keyLength = -1;
  /** Length of the current record's value in bytes (0 = tombstone). */
  valueLength = 0;
  readonly #runs: readonly RecordSet[];
  #run = -1;
  #bytes: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(new ArrayBuffer(0));
  /** Records of the current run not yet visited. */
  #left = 0;
  /** Position of the next record's `record_len` in the current run. */
  #next = 0;
  /** The current record's fields (records were checked: read without checking again). */
  readonly #header = new RecordHeader();

  /**
   * @param records checked stored records (`bytes`, `count`), as in a fetch result, or several
   *   runs of them in order (as {@link checkFetchedRecordChunks} returns).
   */
  constructor(records: RecordSet | readonly RecordSet[]) {
    this.#runs = Array.isArray(records) ? records : [records as RecordSet];
  }

  /** Moves to the next record; false once every record was visited. */
  next(): boolean {
    while (this.#left === 0) {
      if (this.#run + 1 >= this.#runs.length) return false;
      const run = this.#runs[++this.#run];
      this.#bytes = run.bytes;
      this.#view = viewOf(run.bytes);
      this.#left = run.count;
      this.#next = 0;
    }
    const h = this.#header;
    h.parse(this.#view, this.#next);
    this.offset = h.offset;
    this.timestampMs = h.timestampMs;
    this.keyLength = h.keyLen;
    this.valueLength = h.valueLen;
    this.#next += h.sizeBytes;
    this.#left--;
    return true;
  }

  /** The current record's key (a view of the response bytes), or null for no key. */
  key(): Uint8Array | null {
    const h = this.#header;
    return h.keyLen < 0 ? null : this.#bytes.subarray(h.keyStart, h.keyStart + h.keyLen);
  }

  /** The current record's value (a view of the response bytes). */
  value(): Uint8Array {
    const h = this.#header;
    return this.#bytes.subarray(h.valueStart, h.valueStart + h.valueLen);
  }
}

/**
 * Checks and decodes the records of a fetch response into one object per record (see
 * {@link checkFetchedRecords} for the checks).
 * @throws ClientError `invalid_response` naming the first record that fails.
 */
export function decodeFetchedRecords(
  result: FetchResult,
  requestedOffset: number,
): FetchedRecord[] {
  checkFetchedRecords(result, requestedOffset);
  return recordObjects(result.records, result.records.count);
}

/** One {@link FetchedRecord} per record of checked records (one run or several, `count` in all). */
export function recordObjects(
  records: RecordSet | readonly RecordSet[],
  count: number,
): FetchedRecord[] {
  const out: FetchedRecord[] = new Array(count);
  const cursor = new FetchedRecordCursor(records);
  for (let i = 0; cursor.next(); i++)
    out[i] = {
      offset: cursor.offset,
      timestampMs: cursor.timestampMs,
      key: cursor.key(),
      value: cursor.value(),
    };
  return out;
}

/** Expands produce spans to one `{ partition, offset }` per record, in request order. */
export function expandSpans(spans: readonly ProduceSpan[]): RecordPosition[] {
  const out: RecordPosition[] = [];
  for (const span of spans) {
    for (let i = 0; i < span.count; i++)
      out.push({ partition: span.partition, offset: span.baseOffset + i });
  }
  return out;
}
