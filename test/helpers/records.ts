/**
 * The one record reader of the tests: decodes stored records (as a fetch or a partition read
 * serves them, back to back) and reads a whole partition back, through a broker or a
 * {@link PartitionLog}. Every record is checked as it is decoded (length and CRC, via
 * {@link RecordCursor}): one that does not decode fails the test, naming its byte position.
 */
import { expect } from "vitest";
import type { Broker } from "../../src/broker/types.ts";
import { fromUtf8 } from "../../src/lib/bytes.ts";
import type { PartitionLog } from "../../src/storage/partition.ts";
import { DecodeStatus, RecordCursor } from "../../src/storage/record.ts";

/** One record read back: decoded fields (key and value as UTF-8) and its stored bytes (a copy). */
export interface ReadRecord {
  offset: number;
  timestampMs: number;
  /** null = no key. */
  key: string | null;
  value: string;
  bytes: Uint8Array;
}

/** Decodes stored records back to back, checking each one's length and CRC. */
export function decodeRecords(bytes: Uint8Array): ReadRecord[] {
  const c = new RecordCursor().reset(bytes);
  const out: ReadRecord[] = [];
  let p = 0;
  while (p < bytes.length) {
    expect(c.decode(p), `record at byte ${p}: ${c.reason}`).toBe(DecodeStatus.Ok);
    const key = c.key();
    out.push({
      offset: c.offset,
      timestampMs: c.timestampMs,
      key: key === null ? null : fromUtf8(key),
      value: fromUtf8(c.value()),
      bytes: bytes.slice(p, p + c.sizeBytes),
    });
    p += c.sizeBytes;
  }
  return out;
}

/** The UTF-8 values of stored records, in order (each checked as {@link decodeRecords} does). */
export function recordValues(bytes: Uint8Array): string[] {
  return decodeRecords(bytes).map((r) => r.value);
}

/** Where {@link fetchAll} reads, beyond topic and start offset. */
export interface FetchAllOptions {
  /** Default 0. */
  partition?: number;
  /** Records per fetch (small values exercise paging). Default 1000. */
  maxRecords?: number;
}

/**
 * Fetches one partition of `topic` from offset `from` (default 0) up to the high watermark,
 * `maxRecords` at a time, checking every record and that offsets strictly increase.
 * @throws Error if 100 000 fetches do not reach the high watermark.
 */
export async function fetchAll(
  broker: Pick<Broker, "fetch">,
  topic: string,
  from = 0,
  options: FetchAllOptions | number = {},
): Promise<ReadRecord[]> {
  const { partition = 0, maxRecords = 1000 } =
    typeof options === "number" ? { maxRecords: options } : options;
  const out: ReadRecord[] = [];
  let offset = from;
  for (let guard = 0; guard < 100_000; guard++) {
    const r = await broker.fetch({ topic, partition, offset, maxRecords });
    for (const rec of decodeRecords(r.records.bytes)) {
      expect(rec.offset).toBeGreaterThanOrEqual(offset);
      if (out.length > 0) expect(rec.offset).toBeGreaterThan(out.at(-1)!.offset);
      out.push(rec);
    }
    if (r.nextOffset >= r.highWatermark && r.records.count === 0) return out;
    expect(r.nextOffset).toBeGreaterThan(offset);
    offset = r.nextOffset;
    if (offset >= r.highWatermark) return out;
  }
  throw new Error("fetchAll did not reach the high watermark");
}

/** The values of {@link fetchAll}'s records. */
export async function fetchValues(
  broker: Pick<Broker, "fetch">,
  topic: string,
  options: FetchAllOptions & { from?: number } = {},
): Promise<string[]> {
  return (await fetchAll(broker, topic, options.from ?? 0, options)).map((r) => r.value);
}

/**
 * Every record of `log` from its log start offset to its high watermark, in order, as offset and
 * UTF-8 value, read `maxBytes` (default 1 MiB) at a time.
 */
export async function readPartitionRecords(
  log: PartitionLog,
  maxBytes = 1 << 20,
): Promise<{ offset: number; value: string }[]> {
  const out: { offset: number; value: string }[] = [];
  let offset = log.logStartOffset;
  while (offset < log.highWatermark) {
    const r = await log.read({ offset, maxRecords: 1000, maxBytes });
    for (const rec of decodeRecords(r.bytes)) out.push({ offset: rec.offset, value: rec.value });
    if (r.nextOffset <= offset) break;
    offset = r.nextOffset;
  }
  return out;
}
