/**
 * `es-broker check --data-dir DIR`: verifies a stopped data directory offline, segment by segment,
 * changing nothing (see `src/storage/check.ts` for what is checked and how severe each finding is).
 * Exit code 0 when nothing is corrupt (warnings allowed), 1 when anything is.
 */
import { resolve } from "node:path";
import { NodeFileSystem } from "../runtime/node-fs.ts";
import { lockHolder } from "../runtime/lock.ts";
import { checkDataDir, type CheckReport } from "../storage/check.ts";
import { classifyGroupsEntry, leftovers, type LeftoverKind } from "../storage/leftovers.ts";
import { readJsonFile } from "../storage/metadata.ts";
import { cleanStopFileName } from "../storage/clean-stop.ts";
import { joinPath, readWholeFile, type FileSystem } from "../fs/types.ts";
import { scanJournal } from "../storage/producer-journal.ts";
import { producerJournalBytesMax, producerSnapshotBytesMax } from "../lib/limits.ts";
import { KeyStore, KeyStoreError, apiKeysFileName } from "../auth/key-store.ts";
import { parseGroupFile } from "../broker/groups.ts";
import { parseTopicFile } from "../broker/topics.ts";
import { SchemaRegistry, schemasFileName } from "../registry/registry.ts";
import { parseSnapshot } from "../broker/producers/snapshot.ts";
import { producerJournalFileName, producerSnapshotFileName } from "../broker/producers/state.ts";
import { systemKeyCrypto } from "../runtime/crypto.ts";
import { systemClock } from "../runtime/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import { silentLogger } from "../lib/logger.ts";
import { UsageError, parseCli } from "./args.ts";
import { plural, snakeCaseKeys } from "../lib/text.ts";

/** Help text of `es-broker check`. */
export const checkHelp = `Usage: es-broker check [--data-dir DIR] [--json]

Verifies a stopped broker's data directory without changing it: every segment is scanned in full
(records, CRCs, offsets, index), and topic.json, log_start_offsets.json, api_keys.json, group
files, producers.json and schemas.json are parsed as a start parses them. Prints one line per segment and per finding, saying what a start
would do with it; exits 1 if anything is corrupt (including a key file that would refuse the start,
or a group or producer file that would be unavailable), 0 otherwise
(torn tails, indexes to rebuild, temporary files, stray files and topics whose creation was
interrupted are warnings: the next start handles them). After a clean stop (clean-stop.json in
the data directory) no write was in flight, so a bad tail of an active segment is corrupt, not torn.

Options:
  --data-dir DIR   data directory (default ./data)
  --json           print the whole report as JSON instead
  -h, --help       show this help
`;

/** Runs `check`; resolves with the exit code. */
export async function check(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      "data-dir": { type: "string", default: "./data" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(checkHelp);
    return 0;
  }
  if (positionals.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
  const dataDir = resolve(values["data-dir"]!);
  const fs = new NodeFileSystem();
  if ((await fs.stat(`${dataDir}/topics`)) === null)
    throw new Error(
      `cannot check ${dataDir}: it has no topics/ directory (is it a data directory?)`,
    );
  const holder = lockHolder(dataDir);
  if (holder !== null)
    throw new Error(
      `cannot check ${dataDir}: a broker (process ${holder}) is running on it; check a stopped data directory`,
    );
  let lastProgress = Date.now();
  const report = await checkDataDir(fs, dataDir, {
    nowMs: Date.now(),
    onProgress: ({ partitions, bytes }) => {
      if (Date.now() - lastProgress < 1000) return;
      lastProgress = Date.now();
      process.stderr.write(
        `es-broker: checked ${plural(partitions, "partition")}, ${(bytes / 1048576).toFixed(1)} MiB\n`,
      );
    },
  });
  await checkMetadataFiles(fs, dataDir, report);
  if (values.json) {
    // snake_case keys, like the HTTP API's JSON (`base_offset`, `metadata_problem`).
    process.stdout.write(`${JSON.stringify(snakeCaseKeys(report), null, 2)}\n`);
  } else {
    const label = { ok: "ok     ", warning: "warning", corrupt: "CORRUPT" } as const;
    if (report.cleanStopProblem) process.stdout.write(`warning ${report.cleanStopProblem}\n`);
    else if (report.cleanStopPartitions !== null)
      process.stdout.write(
        `ok      ${joinPath(dataDir, cleanStopFileName)}: the last stop was clean for ${plural(report.cleanStopPartitions, "partition")}; a bad tail of their active segments is corruption, not a torn write\n`,
      );

    for (const leftover of report.leftovers)
      process.stdout.write(`${label[leftover.severity]} ${leftover.path}: ${leftover.detail}\n`);
    for (const topic of report.topics) {
      if (topic.metadataProblem)
        process.stdout.write(`CORRUPT topic ${topic.name}: ${topic.metadataProblem}\n`);
      for (const p of topic.partitions) {
        for (const s of p.segments) {
          const range =
            s.nextOffset > s.baseOffset
              ? `offsets ${s.baseOffset}..${s.nextOffset - 1}`
              : "no records";
          process.stdout.write(
            `${label[s.severity]} ${s.file}  ${range}, ${s.sizeBytes} bytes${s.detail ? `: ${s.detail}` : ""}\n`,
          );
        }
        for (const stray of p.strays)
          process.stdout.write(`warning ${p.dir}/${stray.name}: ${stray.reason}\n`);
      }
    }
    process.stdout.write(
      `${plural(report.segmentsChecked, "segment")} checked: ${report.corrupt} corrupt, ${plural(report.warnings, "warning")}\n`,
    );
  }
  return report.corrupt > 0 ? 1 : 0;
}

/**
 * The metadata files start-up reads above `storage/` (the last rows of the table in
 * `storage/leftovers.ts`), judged with the functions start-up uses: the content of each
 * `topic.json` that parses (the topic is unavailable), `schemas.json` (the schema registry is
 * unavailable), `api_keys.json` (the key store
 * refuses the start), `groups/<group>.json` (the group is unavailable), `producers.json` (idempotent
 * produce is unavailable). Adds one finding per file that cannot be used to `report`.
 */
async function checkMetadataFiles(
  fs: FileSystem,
  dataDir: string,
  report: CheckReport,
): Promise<void> {
  const found = (path: string, kind: LeftoverKind, problem: string): void => {
    const rule = leftovers[kind];
    report.leftovers.push({
      path,
      kind,
      severity: rule.check,
      detail: `${rule.what} (${problem}); ${rule.startup}`,
    });
    if (rule.check === "corrupt") report.corrupt++;
    else report.warnings++;
  };
  for (const topic of report.topics) {
    if (topic.metadataProblem !== "") continue;
    const read = await readJsonFile(fs, joinPath(dataDir, "topics", topic.name, "topic.json"));
    if (!("value" in read)) continue; // storage/check.ts judged a missing or unreadable file
    try {
      parseTopicFile(topic.name, read.value);
    } catch (err) {
      topic.metadataProblem = `${leftovers.unreadable_topic_metadata.what}: ${errorMessage(err)}`;
      report.corrupt++;
    }
  }
  const keyFile = joinPath(dataDir, apiKeysFileName);
  try {
    await KeyStore.open({
      fs,
      path: keyFile,
      crypto: systemKeyCrypto,
      clock: systemClock,
      logger: silentLogger,
    });
  } catch (err) {
    if (!(err instanceof KeyStoreError)) throw err;
    found(keyFile, "unusable_key_file", err.message);
  }
  const groupsDir = joinPath(dataDir, "groups");
  if ((await fs.stat(groupsDir))?.isDirectory) {
    for (const name of await fs.readdir(groupsDir)) {
      const entry = classifyGroupsEntry(name);
      if (typeof entry === "string") continue; // temps and strays: storage/check.ts reports them
      const path = joinPath(groupsDir, name);
      const read = await readJsonFile(fs, path);
      if ("missing" in read) continue;
      try {
        if ("error" in read) throw new Error(read.error);
        parseGroupFile(entry.group, read.value);
      } catch (err) {
        found(path, "unreadable_group_file", errorMessage(err));
      }
    }
  }
  const registry = await SchemaRegistry.open({ fs, dataDir, logger: silentLogger });
  const registryProblem = registry.unavailableReason;
  await registry.close();
  if (registryProblem !== null)
    found(joinPath(dataDir, schemasFileName), "unreadable_schema_registry", registryProblem);
  const snapshot = joinPath(dataDir, producerSnapshotFileName);
  const read = await readJsonFile(fs, snapshot, producerSnapshotBytesMax);
  if (!("missing" in read)) {
    try {
      if ("error" in read) throw new Error(read.error);
      parseSnapshot(read.value);
    } catch (err) {
      found(snapshot, "unreadable_producer_state", errorMessage(err));
    }
  }
  await checkProducerJournal(fs, joinPath(dataDir, producerJournalFileName), found);
}

/**
 * `producers.journal`, judged by {@link scanJournal} as a start judges it: damage with valid entries
 * after it is corrupt (a start makes idempotent produce unavailable), a torn tail a warning (a
 * start cuts it). A file over the start's size limit is corrupt too.
 */
async function checkProducerJournal(
  fs: FileSystem,
  path: string,
  found: (path: string, kind: LeftoverKind, problem: string) => void,
): Promise<void> {
  const stat = await fs.stat(path);
  if (stat === null || stat.isDirectory) return;
  if (stat.size > producerJournalBytesMax) {
    found(
      path,
      "corrupt_producer_journal",
      `${stat.size} bytes, over the limit of ${producerJournalBytesMax} a start reads`,
    );
    return;
  }
  const bytes = await readWholeFile(fs, path, producerJournalBytesMax);
  const scan = scanJournal(bytes);
  if (scan.corruption !== null) found(path, "corrupt_producer_journal", scan.corruption.reason);
  else if (scan.generation !== null && scan.endPosition < bytes.length)
    found(
      path,
      "producer_journal_torn_tail",
      `${bytes.length - scan.endPosition} bytes from byte ${scan.endPosition}, after ${scan.entries.length} entries`,
    );
}
