/** Helpers for the Kafka listener's tests. */
import { utf8 } from "../../src/lib/bytes.ts";
import { encodeRecord } from "../../src/storage/record.ts";

/** Stored records (docs/storage.md "Records") back to back, as a fetch returns them. */
export function storedRecords(
  records: { offset: number; ts: number; key: string | null; value: string }[],
): { bytes: Uint8Array; count: number } {
  const parts = records.map((r) =>
    encodeRecord({
      offset: r.offset,
      timestampMs: r.ts,
      key: r.key === null ? null : utf8(r.key),
      value: utf8(r.value),
    }),
  );
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return { bytes, count: records.length };
}
