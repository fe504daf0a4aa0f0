/**
 * Reads a stopped broker's copy of a partition straight from its data directory
 * (docs/storage.md "Files on disk": `topics/<topic>/<partition>/<base offset>.log`), so the checker
 * can compare every replica's log with the others and with the acknowledgements, not only what the
 * leader serves. Each segment is decoded from its start with the storage's own record decoder,
 * which checks every record's length and CRC; a segment ends at its first position that does not
 * hold a valid record (the zeros past the last record). Only for a broker that has stopped cleanly
 * (recovery has already cut any torn tail).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DecodeStatus, RecordCursor } from "../../src/storage/record.ts";
import type { HistoryRecord } from "./history.ts";

const decoder = new TextDecoder();

/**
 * Every record of `topic`/`partition` in `dataDir`, in offset order; an empty list when the
 * partition's directory does not exist (the broker is not a replica of it).
 * @throws Error naming the segment if offsets do not increase across records.
 */
export function readReplicaLog(
  dataDir: string,
  tp: { topic: string; partition: number },
): HistoryRecord[] {
  const dir = join(dataDir, "topics", tp.topic, String(tp.partition));
  if (!existsSync(dir)) return [];
  const segments = readdirSync(dir)
    .filter((f) => /^\d{20}\.log$/.test(f))
    .sort();
  const out: HistoryRecord[] = [];
  const cursor = new RecordCursor();
  for (const name of segments) {
    const bytes = new Uint8Array(readFileSync(join(dir, name)));
    cursor.reset(bytes);
    for (let pos = 0; cursor.decode(pos) === DecodeStatus.Ok; pos += cursor.sizeBytes) {
      const last = out.at(-1);
      if (last !== undefined && cursor.offset <= last.offset!) {
        throw new Error(
          `${join(dir, name)}: offset ${cursor.offset} at position ${pos} does not follow offset ${last.offset}`,
        );
      }
      out.push({ ...tp, offset: cursor.offset, value: decoder.decode(cursor.value()) });
    }
  }
  return out;
}
