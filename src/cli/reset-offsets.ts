/**
 * `es-broker groups reset-offsets`: its options, checked before connecting, and the offsets it
 * plans for each partition (Kafka's `kafka-consumer-groups --reset-offsets`; README.md and
 * docs/http-api.md "Consumer groups"). `client-commands.ts` prints and commits the plan.
 */
import { readFileSync } from "node:fs";
import { ClientError } from "../client/errors.ts";
import type { TcpClient } from "../client/client.ts";
import type { ListOffsetsResult, ListOffsetsResultV1 } from "../protocol/apis/list-offsets.ts";
import { errorMessage } from "../lib/errors.ts";
import { plural } from "../lib/text.ts";
import { UsageError, intOption } from "./args.ts";

/** Where each partition's new offset comes from. */
export type ResetTo =
  | { kind: "earliest" }
  | { kind: "latest" }
  /** This offset. */
  | { kind: "offset"; offset: number }
  /** N records before the high watermark (as `consume --offset -N`). */
  | { kind: "last"; records: number }
  /** The committed offset moved by `records` (negative: back). */
  | { kind: "shift"; records: number }
  /** The first offset whose record timestamp (ms since the epoch) is at or after `timestampMs`. */
  | { kind: "time"; timestampMs: number }
  /** Each line's offset of a `--from-file` CSV. */
  | { kind: "file"; path: string; lines: ResetLine[] };

/** Which partitions: of one topic (one partition, or all), every committed one, or the file's. */
export type ResetScope =
  | { kind: "topic"; topic: string; partition: number | null }
  | { kind: "all-topics" }
  | { kind: "file" };

/** One line of a `--from-file` CSV: `topic,partition,offset`, with its line number (from 1). */
export interface ResetLine {
  topic: string;
  partition: number;
  offset: number;
  line: number;
}

/** The options `groups reset-offsets` takes (as `parseCli` gives them). */
export interface ResetValues {
  topic?: string;
  partition?: string;
  "all-topics"?: boolean;
  to?: string;
  "shift-by"?: string;
  "to-datetime"?: string;
  "by-duration"?: string;
  "from-file"?: string;
}

/** One offset to commit. */
export interface ResetOffset {
  topic: string;
  partition: number;
  offset: number;
}

/**
 * The options of `groups reset-offsets`, checked before connecting: exactly one of `--to`
 * (earliest, latest, an offset, or `-N`: N records before the high watermark), `--shift-by ±N`,
 * `--to-datetime`, `--by-duration` (measured back from `nowMs`) and `--from-file`; and, except
 * with `--from-file`, exactly one of `--topic` (with `--partition`) and `--all-topics`.
 * `readFile` reads the `--from-file` CSV (UTF-8).
 * @throws UsageError naming the missing, conflicting or bad option (a CSV's line).
 */
export function resetOptions(
  values: ResetValues,
  nowMs: number,
  readFile: (path: string) => string = (path) => readFileSync(path, "utf8"),
): { scope: ResetScope; to: ResetTo } {
  const given = (["to", "shift-by", "to-datetime", "by-duration", "from-file"] as const).filter(
    (o) => values[o] !== undefined,
  );
  if (given.length === 0)
    throw new UsageError(
      "groups reset-offsets needs one of --to earliest|latest|OFFSET|-N, --shift-by N, --to-datetime TIME, --by-duration DURATION, --from-file CSV",
    );
  if (given.length > 1)
    throw new UsageError(`give one of ${given.map((o) => `--${o}`).join(", ")}, not several`);
  const allTopics = values["all-topics"] === true;
  const partition =
    values.partition === undefined
      ? null
      : intOption("partition", values.partition, 0, 0, 2_147_483_647);
  if (given[0] === "from-file") {
    const path = values["from-file"]!;
    for (const o of ["topic", "partition"] as const)
      if (values[o] !== undefined)
        throw new UsageError(`--from-file names its topics and partitions: drop --${o}`);
    if (allTopics)
      throw new UsageError("--from-file names its topics and partitions: drop --all-topics");
    let text: string;
    try {
      text = readFile(path);
    } catch (err) {
      throw new UsageError(`--from-file ${path}: cannot read it: ${errorMessage(err)}`);
    }
    return {
      scope: { kind: "file" },
      to: { kind: "file", path, lines: parseOffsetsCsv(text, path) },
    };
  }
  let scope: ResetScope;
  if (allTopics) {
    if (values.topic !== undefined) throw new UsageError("give --topic or --all-topics, not both");
    if (partition !== null)
      throw new UsageError(
        "--partition goes with --topic (--all-topics takes every partition the group committed)",
      );
    scope = { kind: "all-topics" };
  } else {
    if (values.topic === undefined)
      throw new UsageError(
        "groups reset-offsets needs --topic TOPIC, --all-topics or --from-file CSV",
      );
    scope = { kind: "topic", topic: values.topic, partition };
  }
  return { scope, to: resetTo(given[0], values, nowMs) };
}

/** The `to` of one option other than `--from-file`. @throws UsageError naming a bad value. */
function resetTo(
  option: "to" | "shift-by" | "to-datetime" | "by-duration",
  values: ResetValues,
  nowMs: number,
): ResetTo {
  switch (option) {
    case "shift-by": {
      const shift = values["shift-by"]!;
      const n = /^[-+]?\d+$/.test(shift) ? Number(shift) : Number.NaN;
      if (!Number.isSafeInteger(n))
        throw new UsageError(
          `--shift-by ${JSON.stringify(shift)}: give a whole number of records, negative to go back (e.g. -100)`,
        );
      return { kind: "shift", records: n };
    }
    case "to-datetime":
      return { kind: "time", timestampMs: parseDateTime(values["to-datetime"]!) };
    case "by-duration": {
      const text = values["by-duration"]!;
      const timestampMs = nowMs - parseDuration(text);
      if (timestampMs < 0)
        throw new UsageError(
          `--by-duration ${JSON.stringify(text)} reaches back before 1970-01-01T00:00:00Z (record timestamps are ms since then)`,
        );
      return { kind: "time", timestampMs };
    }
    default: {
      const to = values.to!;
      if (to === "earliest" || to === "latest") return { kind: to };
      const m = /^(-?)(\d+)$/.exec(to);
      const n = m === null ? Number.NaN : Number(m[2]);
      if (m === null || !Number.isSafeInteger(n) || to === "-0")
        throw new UsageError(
          `--to ${JSON.stringify(to)}: give earliest, latest, an offset (a whole number ≥ 0) or -N (N records before the high watermark); to move back from the committed offset, use --shift-by -N; for a time, --to-datetime`,
        );
      return m[1] === "-" ? { kind: "last", records: n } : { kind: "offset", offset: n };
    }
  }
}

const dateTimePattern =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/;

/**
 * Parses `--to-datetime`: ISO-8601 `YYYY-MM-DDTHH:mm[:ss[.fraction]]` with `Z` or an offset
 * (`+01:00`, `+0100`, `+01`); without one it is the local time of this machine, as in Kafka's
 * tool. A fraction finer than a millisecond rounds up (a record's timestamp is whole ms, and the
 * reset goes to the first one at or after the time).
 * @returns ms since the epoch, ≥ 0.
 * @throws UsageError naming the value and the expected form, or the field out of range.
 */
export function parseDateTime(text: string, option = "--to-datetime"): number {
  const bad = (why: string) =>
    new UsageError(
      `${option} ${JSON.stringify(text)}: ${why}; give an ISO-8601 date and time, e.g. 2026-12-03T09:30:00Z, 2026-12-03T10:30:00.000+01:00 (no zone: this machine's local time)`,
    );
  const m = dateTimePattern.exec(text);
  if (m === null) throw bad("not a date and time");
  const [year, month, day, hour, minute] = [m[1], m[2], m[3], m[4], m[5]].map(Number);
  const second = m[6] === undefined ? 0 : Number(m[6]);
  const fraction = m[7] ?? "";
  const ms = fraction === "" ? 0 : Math.ceil(Number(`0.${fraction}`) * 1000);
  if (month < 1 || month > 12) throw bad(`month ${m[2]} is not 01 … 12`);
  const days = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (day < 1 || day > days) throw bad(`day ${m[3]} is not 01 … ${days} of that month`);
  if (hour > 23) throw bad(`hour ${m[4]} is not 00 … 23`);
  if (minute > 59) throw bad(`minute ${m[5]} is not 00 … 59`);
  if (second > 59) throw bad(`second ${m[6]} is not 00 … 59`);
  let timestampMs: number;
  const zone = m[8];
  if (zone === undefined) {
    const local = new Date(year, month - 1, day, hour, minute, second, 0);
    local.setFullYear(year); // years below 100 would otherwise mean 19xx
    timestampMs = local.getTime() + ms;
  } else {
    let offsetMinutes = 0;
    if (zone !== "Z") {
      const z = /^([+-])(\d{2}):?(\d{2})?$/.exec(zone)!;
      const hours = Number(z[2]);
      const minutes = z[3] === undefined ? 0 : Number(z[3]);
      if (hours > 18 || minutes > 59) throw bad(`zone offset ${zone} is not within ±18:00`);
      offsetMinutes = (z[1] === "-" ? -1 : 1) * (hours * 60 + minutes);
    }
    const utc = new Date(0);
    utc.setUTCFullYear(year, month - 1, day);
    utc.setUTCHours(hour, minute, second, 0);
    timestampMs = utc.getTime() + ms - offsetMinutes * 60_000;
  }
  if (!(timestampMs >= 0))
    throw bad("it is before 1970-01-01T00:00:00Z (record timestamps are ms since then)");
  return timestampMs;
}

const durationPattern = /^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{1,9}))?S)?)?$/i;

/**
 * Parses `--by-duration`: an ISO-8601 duration of days, hours, minutes and seconds, as Java's
 * `Duration.parse` (and so Kafka's tool) takes it: `PT1H`, `PT30M`, `P1D`, `P1DT12H`, `PT0.5S`.
 * Years, months and weeks are refused (no fixed length in Java's `Duration`: use days).
 * @returns the duration in ms, rounded down.
 * @throws UsageError naming the value and the expected form.
 */
export function parseDuration(text: string, option = "--by-duration"): number {
  const m = durationPattern.exec(text);
  const hasPart = m !== null && [m[1], m[2], m[3], m[4]].some((p) => p !== undefined);
  if (m === null || !hasPart || /T$/i.test(text))
    throw new UsageError(
      `${option} ${JSON.stringify(text)}: give an ISO-8601 duration of days, hours, minutes and seconds, e.g. PT1H, PT30M, P1D, P1DT12H (years, months and weeks: in days, e.g. P7D)`,
    );
  const n = (p: string | undefined) => (p === undefined ? 0 : Number(p));
  const fractionMs = m[5] === undefined ? 0 : Math.floor(Number(`0.${m[5]}`) * 1000);
  const ms = ((n(m[1]) * 24 + n(m[2])) * 60 + n(m[3])) * 60_000 + n(m[4]) * 1000 + fractionMs;
  if (!Number.isSafeInteger(ms))
    throw new UsageError(`${option} ${JSON.stringify(text)}: too long a duration`);
  return ms;
}

/**
 * Parses a `--from-file` CSV as Kafka's tool writes and reads it: one `topic,partition,offset`
 * a line (spaces around fields ignored; blank lines skipped; no header).
 * @throws UsageError naming the file and line: a line without three fields, an empty topic, a
 *   partition or offset that is not a whole number in range, a partition given twice, or a file
 *   with no line at all.
 */
export function parseOffsetsCsv(text: string, path: string): ResetLine[] {
  const lines: ResetLine[] = [];
  const seen = new Map<string, number>();
  const rows = text.split("\n");
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i].replace(/\r$/, "");
    if (row.trim() === "") continue;
    const line = i + 1;
    const at = `--from-file ${path} line ${line}`;
    const fields = row.split(",").map((f) => f.trim());
    if (fields.length !== 3)
      throw new UsageError(
        `${at}: ${JSON.stringify(row)} is not topic,partition,offset (${plural(fields.length, "field")})`,
      );
    const [topic, partitionText, offsetText] = fields;
    if (topic === "") throw new UsageError(`${at}: the topic is empty`);
    const partition = /^\d+$/.test(partitionText) ? Number(partitionText) : Number.NaN;
    if (!(partition <= 2_147_483_647))
      throw new UsageError(
        `${at}: partition ${JSON.stringify(partitionText)} is not a whole number from 0 to 2147483647`,
      );
    const offset = /^\d+$/.test(offsetText) ? Number(offsetText) : Number.NaN;
    if (!Number.isSafeInteger(offset))
      throw new UsageError(
        `${at}: offset ${JSON.stringify(offsetText)} is not a whole number from 0 to 2^53 - 1`,
      );
    const key = `${topic}/${partition}`;
    const first = seen.get(key);
    if (first !== undefined)
      throw new UsageError(
        `${at}: ${key} again (first on line ${first}): give each partition once`,
      );
    seen.set(key, line);
    lines.push({ topic, partition, offset, line });
  }
  if (lines.length === 0)
    throw new UsageError(`--from-file ${path}: no topic,partition,offset line in it`);
  return lines;
}

/** What {@link planReset} asks the brokers: each partition's bounds from its leader. */
export interface ResetSources {
  /** The group coordinator: the group's committed offsets. */
  coordinator: Pick<TcpClient, "describeGroup">;
  /** Routed by partition to its leader (a `ClusterClient`). */
  data: {
    partitionCount(topic: string): Promise<number>;
    listOffsets(request: { topic: string; partition: number }): Promise<ListOffsetsResult>;
    offsetForTimestamp(request: {
      topic: string;
      partition: number;
      timestampMs: number;
    }): Promise<ListOffsetsResultV1>;
  };
}

/**
 * The offsets `groups reset-offsets` commits for `group`, partition by partition in the order
 * printed: each partition's bounds and any offset by timestamp come from its leader (in a cluster
 * the coordinator may lead none of them), the committed offsets from the coordinator.
 * @throws UsageError for a `--partition` or CSV line naming a partition the topic does not have,
 *   a topic that does not exist (CSV), or a CSV offset outside [log start offset, high watermark];
 *   Error when `--shift-by` finds a partition with no committed offset or `--all-topics` a group
 *   with none; ClientError `group_not_found` (`--shift-by`, `--all-topics`), `topic_not_found`,
 *   `unsupported_api` (a broker that cannot find offsets by timestamp) and the brokers' others.
 */
export async function planReset(
  sources: ResetSources,
  group: string,
  scope: ResetScope,
  to: ResetTo,
): Promise<ResetOffset[]> {
  const { coordinator, data } = sources;
  const committed =
    to.kind === "shift" || scope.kind === "all-topics"
      ? await committedOffsets(coordinator, group)
      : null;
  let targets: { topic: string; partition: number; line?: ResetLine }[];
  if (scope.kind === "topic") {
    const count = await data.partitionCount(scope.topic);
    if (scope.partition !== null && scope.partition >= count)
      throw new UsageError(
        `--partition ${scope.partition}: topic ${JSON.stringify(scope.topic)} has ${plural(count, "partition")} (0 … ${count - 1})`,
      );
    targets =
      scope.partition === null
        ? Array.from({ length: count }, (_, partition) => ({ topic: scope.topic, partition }))
        : [{ topic: scope.topic, partition: scope.partition }];
  } else if (scope.kind === "all-topics") {
    targets = [...committed!.keys()].map((key) => {
      const slash = key.lastIndexOf("/");
      return { topic: key.slice(0, slash), partition: Number(key.slice(slash + 1)) };
    });
    if (targets.length === 0)
      throw new Error(
        `--all-topics: group ${JSON.stringify(group)} has no committed offsets to reset: name the topic with --topic TOPIC`,
      );
  } else {
    if (to.kind !== "file") throw new Error("a --from-file scope goes with the file's offsets");
    const at = (line: ResetLine) => `--from-file ${to.path} line ${line.line}`;
    const counts = new Map<string, number>();
    targets = [];
    for (const line of to.lines) {
      let count = counts.get(line.topic);
      if (count === undefined) {
        try {
          count = await data.partitionCount(line.topic);
        } catch (err) {
          if (err instanceof ClientError && err.code === "topic_not_found")
            throw new UsageError(`${at(line)}: topic ${JSON.stringify(line.topic)} does not exist`);
          throw err;
        }
        counts.set(line.topic, count);
      }
      if (line.partition >= count)
        throw new UsageError(
          `${at(line)}: topic ${JSON.stringify(line.topic)} has ${plural(count, "partition")} (0 … ${count - 1}), not partition ${line.partition}`,
        );
      targets.push({ topic: line.topic, partition: line.partition, line });
    }
  }
  const offsets: ResetOffset[] = [];
  for (const { topic, partition, line } of targets) {
    const where = { topic, partition };
    if (to.kind === "time") {
      let found: ListOffsetsResultV1;
      try {
        found = await data.offsetForTimestamp({ ...where, timestampMs: to.timestampMs });
      } catch (err) {
        if (err instanceof ClientError && err.code === "unsupported_api")
          throw new Error(
            `the broker leading ${topic}/${partition} cannot find offsets by timestamp (ListOffsets version 1, es-broker's newer versions): upgrade it, or give --to OFFSET`,
            { cause: err },
          );
        throw err;
      }
      offsets.push({ ...where, offset: found.offset });
      continue;
    }
    const bounds = await data.listOffsets(where);
    const clamp = (o: number) => Math.min(Math.max(o, bounds.logStartOffset), bounds.highWatermark);
    let offset: number;
    switch (to.kind) {
      case "earliest":
        offset = bounds.logStartOffset;
        break;
      case "latest":
        offset = bounds.highWatermark;
        break;
      case "offset":
        offset = to.offset;
        break;
      case "last":
        offset = clamp(bounds.highWatermark - to.records);
        break;
      case "shift": {
        const from = committed!.get(`${topic}/${partition}`);
        if (from === undefined)
          throw new Error(
            `--shift-by: group ${JSON.stringify(group)} has no committed offset for ${topic}/${partition} to shift from: give --to earliest|latest|OFFSET for it (with --partition ${partition})`,
          );
        offset = clamp(from + to.records);
        break;
      }
      default: {
        offset = line!.offset;
        if (offset < bounds.logStartOffset || offset > bounds.highWatermark)
          throw new UsageError(
            `--from-file ${to.path} line ${line!.line}: offset ${offset} of ${topic}/${partition} is outside its log start offset ${bounds.logStartOffset} … high watermark ${bounds.highWatermark}`,
          );
      }
    }
    offsets.push({ ...where, offset });
  }
  return offsets;
}

/**
 * The group's committed offsets by `topic/partition` (partitions never committed absent), in
 * the order the broker lists them (by topic, then partition).
 * @throws ClientError `group_not_found` when the group does not exist.
 */
async function committedOffsets(
  coordinator: Pick<TcpClient, "describeGroup">,
  group: string,
): Promise<Map<string, number>> {
  const committed = new Map<string, number>();
  for (const o of (await coordinator.describeGroup(group)).offsets)
    if (o.committed !== null) committed.set(`${o.topic}/${o.partition}`, o.committed);
  return committed;
}
