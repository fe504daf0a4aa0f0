/**
 * Record shapes of the TCP client and the pure helpers behind them: building an entry batch from
 * records, checking fetched records end to end, expanding produce spans.
 */
import type { FetchResult, ProduceSpan } from "../broker/types.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor, RecordFormatError, type EntryBatch } from "../storage/record.ts";
import { Errors } from "../broker/errors.ts";
import { ClientError } from "./errors.ts";

/** A record to produce. Strings are sent as UTF-8. */
export interface ProduceRecord {
  /** Omitted or null: no key. The empty string / empty array is a real (empty) key (DECISIONS 12). */
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
    if (error instanceof RecordFormatError) throw ClientError.fromKind(Errors.invalidRequest, `Cannot produce: ${error.message}`);
    throw error;
  }
  return builder.build();
}

/**
 * Checks and decodes the records of a fetch response: every record whole and its CRC right,
 * `record_count` records exactly filling `records_bytes`, offsets strictly increasing, none below
 * the requested offset nor at or above `next_offset`.
 * @throws ClientError `invalid_response` naming the first record that fails.
 */
export function decodeFetchedRecords(result: FetchResult, requestedOffset: number): FetchedRecord[] {
  const bytes = result.records.bytes;
  const cursor = new RecordCursor().reset(bytes);
  const records: FetchedRecord[] = [];
  let pos = 0;
  let previous = requestedOffset - 1;
  for (let i = 0; i < result.records.count; i++) {
    const status = cursor.decode(pos);
    if (status !== DecodeStatus.Ok) throw ClientError.invalidResponse(`Cannot read fetched record ${i} at byte ${pos}: ${cursor.reason}`);
    if (cursor.offset <= previous) {
      throw ClientError.invalidResponse(`Cannot read fetched record ${i}: offset ${cursor.offset} does not follow ${previous} (requested from ${requestedOffset})`);
    }
    if (cursor.offset >= result.nextOffset) {
      throw ClientError.invalidResponse(`Cannot read fetched record ${i}: offset ${cursor.offset} is not below next_offset ${result.nextOffset}`);
    }
    records.push({ offset: cursor.offset, timestampMs: cursor.timestampMs, key: cursor.key(), value: cursor.value() });
    previous = cursor.offset;
    pos += cursor.sizeBytes;
  }
  if (pos !== bytes.length) {
    throw ClientError.invalidResponse(`Cannot read fetch response: ${bytes.length - pos} bytes follow the ${result.records.count} records it counts`);
  }
  if (result.nextOffset < requestedOffset) {
    throw ClientError.invalidResponse(`Cannot read fetch response: next_offset ${result.nextOffset} is below the requested offset ${requestedOffset}`);
  }
  return records;
}

/** Expands produce spans to one `{ partition, offset }` per record, in request order. */
export function expandSpans(spans: readonly ProduceSpan[]): RecordPosition[] {
  const out: RecordPosition[] = [];
  for (const span of spans) {
    for (let i = 0; i < span.count; i++) out.push({ partition: span.partition, offset: span.baseOffset + i });
  }
  return out;
}
