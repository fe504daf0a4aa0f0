/**
 * Replacing segments safely (docs/storage.md "Replacing segments safely"): the protocol of names that lets a
 * crash at any point be finished at the next start, so that a replacement and the segments it
 * replaces never coexist.
 *
 * Names in a partition directory that belong to a swap:
 * ```
 * NNNNNNNNNNNNNNNNNNNN.log.cleaned     a replacement's log, being written (temp file)
 * NNNNNNNNNNNNNNNNNNNN.index.cleaned   its index
 * compaction.marker                    the plan, JSON: {"version":1,"replaced":[bases],"outputs":[bases]}
 * ```
 *
 * The steps (the caller — compaction — does 1 and 2; this module does the disk part of 3 and 4):
 * 1. Write every output under its temp names, fsync each file, then fsync the directory, so the
 *    temp names are durable before anything refers to them.
 * 2. Under the partition's write lock, check that the sealed segments are exactly the ones read.
 * 3. {@link writeSwapMarker}: create `compaction.marker`, write the plan, fsync it, fsync the
 *    directory. This is the commit point.
 * 4. {@link applySwap}: rename each output into place (index, then log), unlink the replaced
 *    segments' files that no output overwrote, fsync the directory; the caller publishes the new
 *    segment list; {@link removeSwapMarker} unlinks the marker and fsyncs the directory.
 *
 * Recovery at start ({@link recoverSegmentSwap}) follows this decision table:
 *
 * | compaction.marker                    | temp files       | action                                         | state   |
 * |--------------------------------------|------------------|------------------------------------------------|---------|
 * | absent                               | none             | nothing                                        | —       |
 * | absent                               | some             | unlink them (reported), fsync dir              | before  |
 * | present, unreadable or malformed     | any              | unlink temps and marker (reported), fsync dir  | before  |
 * | present, valid                       | any              | roll forward: rename the outputs' temps still  | after   |
 * |                                      |                  | there, unlink replaced files no output         |         |
 * |                                      |                  | overwrote and temps not in the plan, fsync     |         |
 * |                                      |                  | dir, unlink marker, fsync dir                  |         |
 *
 * An unreadable marker is one whose own fsync never completed (a torn or zero-filled write), and
 * nothing is renamed before that fsync, so rolling back is right. Rolling forward is idempotent:
 * an output's temp that is gone was renamed (a rename is atomic, and the temp names were durable
 * before the marker was written), and a replaced file that is gone was unlinked.
 */
import { assert } from "../lib/assert.ts";
import { fromUtf8, offsetFileStem, utf8 } from "../lib/bytes.ts";
import type { Logger } from "../lib/logger.ts";
import { joinPath, readWholeFile, type FileSystem } from "../fs/types.ts";
import { unlinkDurably } from "./metadata.ts";
import { indexFileName, logFileName } from "./segment-files.ts";
import { errorMessage } from "../lib/errors.ts";

/** Name of the swap marker in a partition directory. */
export const swapMarkerName = "compaction.marker";

/** Suffix of a replacement's files while they are written. */
export const swapTempSuffix = ".cleaned";

/** Largest marker file read back, in bytes (a plan names at most a few thousand segments). */
const markerBytesMax = 4 * 1024 * 1024;

/** The plan a marker records: base offsets of the segments replaced and of the outputs. */
export interface SwapPlan {
  replaced: number[];
  outputs: number[];
}

/** Temp file name of an output's log. */
export function tempLogName(baseOffset: number): string {
  return `${logFileName(baseOffset)}${swapTempSuffix}`;
}

/** Temp file name of an output's index. */
export function tempIndexName(baseOffset: number): string {
  return `${indexFileName(baseOffset)}${swapTempSuffix}`;
}

/** Parses a swap temp file name: the output's base offset, or null if `name` is not one. */
export function parseSwapTempName(
  name: string,
): { baseOffset: number; kind: "log" | "index" } | null {
  const m = /^(\d{20})\.(log|index)\.cleaned$/.exec(name);
  if (m === null) return null;
  return { baseOffset: Number(m[1]), kind: m[2] as "log" | "index" };
}

function encodePlan(plan: SwapPlan): Uint8Array {
  return utf8(JSON.stringify({ version: 1, replaced: plan.replaced, outputs: plan.outputs }));
}

function decodePlan(bytes: Uint8Array): SwapPlan | string {
  let value: unknown;
  try {
    value = JSON.parse(fromUtf8(bytes));
  } catch (err) {
    return `not valid JSON (${errorMessage(err)})`;
  }
  if (typeof value !== "object" || value === null) return "not a JSON object";
  const { version, replaced, outputs } = value as {
    version?: unknown;
    replaced?: unknown;
    outputs?: unknown;
  };
  if (version !== 1) return `unknown version ${JSON.stringify(version)}`;
  const isBases = (x: unknown): x is number[] =>
    Array.isArray(x) && x.every((b) => typeof b === "number" && Number.isSafeInteger(b) && b >= 0);
  if (!isBases(replaced) || replaced.length === 0)
    return '"replaced" is not a non-empty list of base offsets';
  if (!isBases(outputs)) return '"outputs" is not a list of base offsets';
  return { replaced, outputs };
}

/**
 * Step 3: writes the plan to `compaction.marker` and makes it durable (file fsync, then directory
 * fsync). Once it resolves, a crash is finished forward at the next start.
 * @throws FsError (EEXIST if a marker is already there); after a rejection the caller must treat
 * the swap as undecided until a restart runs {@link recoverSegmentSwap}.
 */
export async function writeSwapMarker(fs: FileSystem, dir: string, plan: SwapPlan): Promise<void> {
  assert(plan.replaced.length > 0, "a swap replaces at least one segment");
  const file = await fs.open(joinPath(dir, swapMarkerName), { create: true, exclusive: true });
  try {
    await file.write(encodePlan(plan), 0);
    await file.sync();
  } finally {
    await file.close().catch(() => {});
  }
  await fs.syncDir(dir);
}

/**
 * Step 4, on disk: renames every output into place (index first, then log), unlinks the files of
 * replaced segments that no output overwrote, and fsyncs the directory. Idempotent, so recovery
 * uses it too.
 * @throws FsError from any step (the marker then finishes the swap at the next start).
 */
export async function applySwap(
  fs: FileSystem,
  dir: string,
  plan: SwapPlan,
  report?: (event: string, fields: Record<string, unknown>) => void,
): Promise<void> {
  const names = new Set(await fs.readdir(dir));
  for (const base of plan.outputs) {
    if (names.has(tempIndexName(base)))
      await fs.rename(joinPath(dir, tempIndexName(base)), joinPath(dir, indexFileName(base)));
    if (names.has(tempLogName(base)))
      await fs.rename(joinPath(dir, tempLogName(base)), joinPath(dir, logFileName(base)));
    else if (!names.has(logFileName(base)))
      report?.("swap.output_missing", { segment: joinPath(dir, logFileName(base)) });
  }
  const kept = new Set(plan.outputs);
  const replaced = plan.replaced.filter((base) => !kept.has(base));
  await unlinkDurably(
    fs,
    dir,
    replaced.flatMap((base) => [
      joinPath(dir, logFileName(base)),
      joinPath(dir, indexFileName(base)),
    ]),
  );
}

/**
 * Step 4, last part: unlinks the marker and fsyncs the directory, so a later swap never meets it.
 * @throws FsError; the caller must then make no further swap in this partition before a restart.
 */
export async function removeSwapMarker(fs: FileSystem, dir: string): Promise<void> {
  await unlinkDurably(fs, dir, [joinPath(dir, swapMarkerName)]);
}

/** What {@link recoverSegmentSwap} did, for logs and tests. */
export interface SwapRecovery {
  /** "none": no marker and no temp file; "rolled_back": temps removed; "rolled_forward": a marker's swap finished. */
  outcome: "none" | "rolled_back" | "rolled_forward";
  /** Temp files unlinked. */
  removedTemps: string[];
  /** The plan finished, when rolled forward. */
  plan: SwapPlan | null;
}

/**
 * Finishes or undoes an interrupted swap in a partition directory, before its segments are
 * loaded (see the decision table in the module comment). Every action is logged.
 * @throws FsError if the directory cannot be read or a step fails (the partition cannot open).
 */
export async function recoverSegmentSwap(
  fs: FileSystem,
  options: { dir: string; logger: Logger; partition: string },
): Promise<SwapRecovery> {
  const { dir, logger, partition } = options;
  const names = await fs.readdir(dir);
  const temps = names.filter((n) => parseSwapTempName(n) !== null);
  const hasMarker = names.includes(swapMarkerName);
  if (!hasMarker && temps.length === 0) return { outcome: "none", removedTemps: [], plan: null };

  let plan: SwapPlan | null = null;
  if (hasMarker) {
    let problem: string;
    try {
      const decoded = decodePlan(
        await readWholeFile(fs, joinPath(dir, swapMarkerName), markerBytesMax),
      );
      if (typeof decoded === "string") problem = decoded;
      else {
        plan = decoded;
        problem = "";
      }
    } catch (err) {
      problem = errorMessage(err);
    }
    if (plan === null) {
      logger.log("error", "recovery.swap_marker_unreadable", {
        partition,
        file: joinPath(dir, swapMarkerName),
        reason: problem,
        action: "rolled back",
      });
    }
  }

  const removedTemps: string[] = [];
  if (plan !== null) {
    await applySwap(fs, dir, plan, (event, fields) =>
      logger.log("error", `recovery.${event}`, { partition, ...fields }),
    );
    // Every output's temp is renamed by now; what is left belongs to no plan.
    for (const name of await fs.readdir(dir)) {
      if (parseSwapTempName(name) === null) continue;
      await fs.unlink(joinPath(dir, name));
      removedTemps.push(name);
    }
    if (removedTemps.length > 0) await fs.syncDir(dir);
    await removeSwapMarker(fs, dir);
    logger.log("warn", "recovery.swap_rolled_forward", {
      partition,
      replaced: plan.replaced.map(offsetFileStem),
      outputs: plan.outputs.map(offsetFileStem),
      stray_temps_removed: removedTemps,
    });
    return { outcome: "rolled_forward", removedTemps, plan };
  }

  for (const name of temps) {
    await fs.unlink(joinPath(dir, name));
    removedTemps.push(name);
  }
  if (hasMarker) await fs.unlink(joinPath(dir, swapMarkerName));
  await fs.syncDir(dir);
  logger.log("warn", "recovery.swap_rolled_back", {
    partition,
    dir,
    temps_removed: removedTemps,
    marker_removed: hasMarker,
  });
  return { outcome: "rolled_back", removedTemps, plan: null };
}
