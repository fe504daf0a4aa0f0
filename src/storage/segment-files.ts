/**
 * Names of a segment's files (docs/storage.md "Files on disk"): `NNNNNNNNNNNNNNNNNNNN.log`
 * (records) and `.index` (its offset index), named after the offset of the segment's first record
 * padded to 20 digits, and how such a name is parsed back. Which leftover any other name in a
 * partition directory is, and what a start and `es-broker check` do with it, is `leftovers.ts`.
 */
import { offsetFileStem } from "../lib/bytes.ts";
import { offsetMax } from "../lib/limits.ts";

/** File name of a segment's log for a base offset. */
export function logFileName(baseOffset: number): string {
  return `${offsetFileStem(baseOffset)}.log`;
}

/** File name of a segment's index for a base offset. */
export function indexFileName(baseOffset: number): string {
  return `${offsetFileStem(baseOffset)}.index`;
}

/** Parses a segment file name: the base offset for `NNNNNNNNNNNNNNNNNNNN.log|.index`, else null. */
export function parseSegmentFileName(
  name: string,
): { baseOffset: number; kind: "log" | "index" } | null {
  const m = /^(\d{20})\.(log|index)$/.exec(name);
  if (!m) return null;
  const baseOffset = Number(m[1]);
  return { baseOffset, kind: m[2] as "log" | "index" };
}

/** True if a base offset parsed from a name is usable (docs/decisions.md §6). */
export function isSupportedBaseOffset(baseOffset: number): boolean {
  return Number.isSafeInteger(baseOffset) && baseOffset <= offsetMax;
}

/**
 * A file in a partition directory that recovery reports and ignores, never deletes
 * (docs/decisions.md §11).
 */
export interface StrayFile {
  name: string;
  reason: string;
}
