/** The options of `groups reset-offsets` (`src/cli/reset-offsets.ts`), parsed before connecting. */
import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/cli/args.ts";
import {
  parseDateTime,
  parseDuration,
  parseOffsetsCsv,
  planReset,
  type ResetSources,
  resetOptions,
} from "../../src/cli/reset-offsets.ts";
import { ClientError } from "../../src/client/errors.ts";
import type { GroupDescription } from "../../src/broker/types.ts";

describe("--to-datetime", () => {
  it("reads ISO-8601 with Z or an offset as that instant, to the millisecond", () => {
    expect(parseDateTime("2026-12-03T09:30:00Z")).toBe(Date.UTC(2026, 11, 3, 9, 30));
    expect(parseDateTime("2026-12-03T09:30Z")).toBe(Date.UTC(2026, 11, 3, 9, 30));
    expect(parseDateTime("2026-12-03T10:30:00.250+01:00")).toBe(
      Date.UTC(2026, 11, 3, 9, 30, 0, 250),
    );
    expect(parseDateTime("2026-12-03T04:00:00-0530")).toBe(Date.UTC(2026, 11, 3, 9, 30));
    expect(parseDateTime("2026-12-03T11:30:00+02")).toBe(Date.UTC(2026, 11, 3, 9, 30));
    expect(parseDateTime("1970-01-01T00:00:00Z")).toBe(0);
    expect(parseDateTime("2024-02-29T00:00:00Z")).toBe(Date.UTC(2024, 1, 29));
  });

  it("rounds a fraction finer than a millisecond up (the first record at or after it)", () => {
    expect(parseDateTime("1970-01-01T00:00:01.0001Z")).toBe(1001);
    expect(parseDateTime("1970-01-01T00:00:01.000000000Z")).toBe(1000);
    expect(parseDateTime("1970-01-01T00:00:01.5Z")).toBe(1500);
  });

  it("reads a time without a zone as this machine's local time, as Kafka's tool does", () => {
    expect(parseDateTime("2026-07-01T12:00:00")).toBe(new Date(2026, 6, 1, 12).getTime());
    expect(parseDateTime("2026-01-15T08:05:09.007")).toBe(
      new Date(2026, 0, 15, 8, 5, 9, 7).getTime(),
    );
  });

  it("refuses anything else, naming the value and what is wrong", () => {
    const cases: [string, RegExp][] = [
      ["yesterday", /"yesterday": not a date and time; give an ISO-8601 date and time/],
      ["2026-12-03", /not a date and time/],
      ["2026-12-03 09:30:00Z", /not a date and time/],
      ["1700000000000", /not a date and time/],
      ["2026-13-01T00:00:00Z", /month 13 is not 01 … 12/],
      ["2026-02-29T00:00:00Z", /day 29 is not 01 … 28 of that month/],
      ["2026-04-31T00:00:00Z", /day 31 is not 01 … 30/],
      ["2026-12-03T24:00:00Z", /hour 24 is not 00 … 23/],
      ["2026-12-03T09:60:00Z", /minute 60/],
      ["2026-12-03T09:30:60Z", /second 60/],
      ["2026-12-03T09:30:00+19:00", /zone offset \+19:00 is not within ±18:00/],
      ["1969-12-31T23:59:59Z", /before 1970-01-01T00:00:00Z/],
    ];
    for (const [text, message] of cases) {
      expect(() => parseDateTime(text), text).toThrow(UsageError);
      expect(() => parseDateTime(text), text).toThrow(message);
    }
  });
});

describe("--by-duration", () => {
  it("reads ISO-8601 durations of days, hours, minutes and seconds, as Java's Duration.parse", () => {
    expect(parseDuration("PT1H")).toBe(3_600_000);
    expect(parseDuration("PT30M")).toBe(1_800_000);
    expect(parseDuration("P1D")).toBe(86_400_000);
    expect(parseDuration("P1DT12H")).toBe(129_600_000);
    expect(parseDuration("PT0H5M0S")).toBe(300_000);
    expect(parseDuration("PT1.5S")).toBe(1500);
    expect(parseDuration("pt2m")).toBe(120_000);
    expect(parseDuration("PT0S")).toBe(0);
  });

  it("refuses other forms, naming the value", () => {
    for (const text of [
      "1h",
      "P",
      "PT",
      "P1DT",
      "P1M",
      "P1Y",
      "P1W",
      "PT-1H",
      "PT1H30",
      "-PT1H",
      "",
    ]) {
      expect(() => parseDuration(text), text).toThrow(UsageError);
      expect(() => parseDuration(text), text).toThrow(
        `--by-duration ${JSON.stringify(text)}: give an ISO-8601 duration`,
      );
    }
  });
});

describe("--from-file", () => {
  it("reads topic,partition,offset lines, skipping blank lines, with their line numbers", () => {
    expect(parseOffsetsCsv("orders,0,42\r\n\n orders , 1 , 7\nclicks,0,0\n", "f.csv")).toEqual([
      { topic: "orders", partition: 0, offset: 42, line: 1 },
      { topic: "orders", partition: 1, offset: 7, line: 3 },
      { topic: "clicks", partition: 0, offset: 0, line: 4 },
    ]);
  });

  it("refuses a bad line, naming the file, the line and the value", () => {
    const cases: [string, string][] = [
      ["orders,0,1\norders,0", 'f.csv line 2: "orders,0" is not topic,partition,offset (2 fields)'],
      ["orders,0,1,2", 'line 1: "orders,0,1,2" is not topic,partition,offset (4 fields)'],
      [",0,1", "line 1: the topic is empty"],
      ["orders,-1,1", 'line 1: partition "-1" is not a whole number'],
      ["orders,x,1", 'line 1: partition "x" is not a whole number'],
      ["orders,2147483648,1", 'line 1: partition "2147483648" is not a whole number'],
      ["\norders,0,1.5", 'line 2: offset "1.5" is not a whole number'],
      ["orders,0,-3", 'line 1: offset "-3" is not a whole number'],
      ["orders,0,9007199254740992", 'line 1: offset "9007199254740992" is not a whole number'],
      ["orders,0,1\norders,0,2", "line 2: orders/0 again (first on line 1)"],
      ["\n\n", "f.csv: no topic,partition,offset line in it"],
    ];
    for (const [text, message] of cases) {
      expect(() => parseOffsetsCsv(text, "f.csv"), text).toThrow(UsageError);
      expect(() => parseOffsetsCsv(text, "f.csv"), text).toThrow(message);
    }
  });
});

describe("resetOptions", () => {
  const now = Date.UTC(2026, 11, 3, 10);
  const noFile = (path: string): string => {
    throw new Error(`ENOENT: no such file, open '${path}'`);
  };

  it("takes one way to pick offsets and one scope", () => {
    expect(resetOptions({ topic: "t", to: "-5" }, now)).toEqual({
      scope: { kind: "topic", topic: "t", partition: null },
      to: { kind: "last", records: 5 },
    });
    expect(resetOptions({ "all-topics": true, "by-duration": "PT1H" }, now)).toEqual({
      scope: { kind: "all-topics" },
      to: { kind: "time", timestampMs: now - 3_600_000 },
    });
    expect(
      resetOptions({ topic: "t", partition: "2", "to-datetime": "2026-12-03T09:00:00Z" }, now),
    ).toEqual({
      scope: { kind: "topic", topic: "t", partition: 2 },
      to: { kind: "time", timestampMs: now - 3_600_000 },
    });
    expect(resetOptions({ "from-file": "f.csv" }, now, () => "t,0,3\n")).toEqual({
      scope: { kind: "file" },
      to: {
        kind: "file",
        path: "f.csv",
        lines: [{ topic: "t", partition: 0, offset: 3, line: 1 }],
      },
    });
  });

  it("refuses missing, conflicting and bad options, naming them", () => {
    const cases: [Parameters<typeof resetOptions>[0], string][] = [
      [{ topic: "t" }, "needs one of --to earliest|latest|OFFSET|-N, --shift-by N, --to-datetime"],
      [
        { topic: "t", to: "latest", "by-duration": "PT1H" },
        "give one of --to, --by-duration, not several",
      ],
      [{ to: "latest" }, "needs --topic TOPIC, --all-topics or --from-file CSV"],
      [{ topic: "t", "all-topics": true, to: "latest" }, "give --topic or --all-topics, not both"],
      [{ "all-topics": true, partition: "0", to: "latest" }, "--partition goes with --topic"],
      [
        { "from-file": "f.csv", topic: "t" },
        "--from-file names its topics and partitions: drop --topic",
      ],
      [{ "from-file": "f.csv", "all-topics": true }, "drop --all-topics"],
      [{ "from-file": "f.csv" }, "--from-file f.csv: cannot read it: ENOENT"],
      [{ topic: "t", "by-duration": "P60000D" }, "reaches back before 1970-01-01T00:00:00Z"],
      [{ topic: "t", "to-datetime": "soon" }, '--to-datetime "soon": not a date and time'],
      [{ topic: "t", to: "yesterday" }, '--to "yesterday": give earliest, latest, an offset'],
      [{ topic: "t", "shift-by": "1.5" }, '--shift-by "1.5": give a whole number of records'],
    ];
    for (const [values, message] of cases) {
      expect(() => resetOptions(values, now, noFile), JSON.stringify(values)).toThrow(UsageError);
      expect(() => resetOptions(values, now, noFile), JSON.stringify(values)).toThrow(message);
    }
  });
});

describe("planReset", () => {
  /**
   * Two topics: a (2 partitions, bounds [2, 10] and [0, 5]) and b (1 partition, [0, 7]); the
   * group committed a/1 = 3 and b/0 = 6. Offsets by timestamp: the timestamp's thousands, capped
   * at the high watermark. Records which partitions were asked about.
   */
  function sources(options: { unsupported?: boolean } = {}) {
    const bounds: Record<string, { logStartOffset: number; highWatermark: number }> = {
      "a/0": { logStartOffset: 2, highWatermark: 10 },
      "a/1": { logStartOffset: 0, highWatermark: 5 },
      "b/0": { logStartOffset: 0, highWatermark: 7 },
    };
    const asked: string[] = [];
    const s: ResetSources = {
      coordinator: {
        describeGroup: async (group: string) => {
          if (group !== "g") throw new ClientError("group_not_found", 20, false, "no such group");
          return {
            group,
            offsets: [
              { topic: "a", partition: 0, committed: null },
              { topic: "a", partition: 1, committed: 3 },
              { topic: "b", partition: 0, committed: 6 },
            ],
          } as unknown as GroupDescription;
        },
      },
      data: {
        partitionCount: async (topic) => {
          if (topic === "a") return 2;
          if (topic === "b") return 1;
          throw new ClientError("topic_not_found", 3, false, `no topic ${topic}`);
        },
        listOffsets: async ({ topic, partition }) => {
          asked.push(`bounds ${topic}/${partition}`);
          return bounds[`${topic}/${partition}`];
        },
        offsetForTimestamp: async ({ topic, partition, timestampMs }) => {
          asked.push(`time ${topic}/${partition}`);
          if (options.unsupported)
            throw new ClientError("unsupported_api", 13, false, "unknown version");
          const b = bounds[`${topic}/${partition}`];
          return { ...b, offset: Math.min(Math.floor(timestampMs / 1000), b.highWatermark) };
        },
      },
    };
    return { s, asked };
  }

  it("--all-topics takes the partitions the group committed, by topic then partition", async () => {
    const { s, asked } = sources();
    expect(await planReset(s, "g", { kind: "all-topics" }, { kind: "shift", records: -4 })).toEqual(
      [
        { topic: "a", partition: 1, offset: 0 },
        { topic: "b", partition: 0, offset: 2 },
      ],
    );
    expect(
      await planReset(s, "g", { kind: "all-topics" }, { kind: "time", timestampMs: 6500 }),
    ).toEqual([
      { topic: "a", partition: 1, offset: 5 },
      { topic: "b", partition: 0, offset: 6 },
    ]);
    expect(asked).toEqual(["bounds a/1", "bounds b/0", "time a/1", "time b/0"]);
    await expect(planReset(s, "other", { kind: "all-topics" }, { kind: "latest" })).rejects.toThrow(
      "no such group",
    );
  });

  it("a time goes to each partition's leader; a broker without ListOffsets version 1 is named", async () => {
    const { s } = sources();
    const scope = { kind: "topic", topic: "a", partition: null } as const;
    expect(await planReset(s, "g", scope, { kind: "time", timestampMs: 4000 })).toEqual([
      { topic: "a", partition: 0, offset: 4 },
      { topic: "a", partition: 1, offset: 4 },
    ]);
    const old = sources({ unsupported: true }).s;
    await expect(planReset(old, "g", scope, { kind: "time", timestampMs: 0 })).rejects.toThrow(
      "the broker leading a/0 cannot find offsets by timestamp (ListOffsets version 1",
    );
  });

  it("--from-file checks each line's topic, partition and offset, naming the line", async () => {
    const { s } = sources();
    const file = (text: string) =>
      ({ kind: "file", path: "f.csv", lines: parseOffsetsCsv(text, "f.csv") }) as const;
    expect(await planReset(s, "g", { kind: "file" }, file("b,0,7\na,0,2\n"))).toEqual([
      { topic: "b", partition: 0, offset: 7 },
      { topic: "a", partition: 0, offset: 2 },
    ]);
    for (const [text, message] of [
      ["a,0,2\nc,0,1", 'f.csv line 2: topic "c" does not exist'],
      ["a,2,2", 'f.csv line 1: topic "a" has 2 partitions (0 … 1), not partition 2'],
      [
        "a,0,1",
        "f.csv line 1: offset 1 of a/0 is outside its log start offset 2 … high watermark 10",
      ],
      [
        "a,0,2\n\nb,0,8",
        "f.csv line 3: offset 8 of b/0 is outside its log start offset 0 … high watermark 7",
      ],
    ] as const) {
      const plan = planReset(s, "g", { kind: "file" }, file(text));
      await expect(plan, text).rejects.toThrow(UsageError);
      await expect(planReset(s, "g", { kind: "file" }, file(text)), text).rejects.toThrow(message);
    }
  });

  it("--shift-by names a partition the group never committed; --partition beyond the topic is refused", async () => {
    const { s } = sources();
    await expect(
      planReset(
        s,
        "g",
        { kind: "topic", topic: "a", partition: null },
        { kind: "shift", records: 1 },
      ),
    ).rejects.toThrow('--shift-by: group "g" has no committed offset for a/0 to shift from');
    await expect(
      planReset(s, "g", { kind: "topic", topic: "b", partition: 1 }, { kind: "latest" }),
    ).rejects.toThrow('--partition 1: topic "b" has 1 partition (0 … 0)');
  });
});
