/**
 * Reads back what a partition serves, for tests: every record from the log start offset to the
 * high watermark, in order, each checked to decode (a record that does not decode fails the test).
 */
import { expect } from "vitest";
import { fromUtf8 } from "../../src/lib/bytes.ts";
import type { PartitionLog } from "../../src/storage/partition.ts";
import { DecodeStatus, RecordCursor } from "../../src/storage/record.ts";

/**
 * Every record of `log` below its high watermark, as offset and UTF-8 value, read
 * `maxBytes` (default 1 MiB) at a time.
 */
export async function readPartitionRecords(
  log: PartitionLog,
  maxBytes = 1 << 20,
): Promise<{ offset: number; value: string }[]> {
  const out: { offset: number; value: string }[] = [];
  let offset = log.logStartOffset;
  while (offset < log.highWatermark) {
    const r = await log.read({ offset, maxRecords: 1000, maxBytes });
    const c = new RecordCursor().reset(r.bytes);
    for (let p = 0; p < r.bytes.length; p += c.sizeBytes) {
      expect(c.decode(p)).toBe(DecodeStatus.Ok);
      out.push({ offset: c.offset, value: fromUtf8(c.value()) });
    }
    if (r.nextOffset <= offset) break;
    offset = r.nextOffset;
  }
  return out;
}
