/** The shared helpers of src/lib/errors.ts, src/lib/topic-partition.ts and src/lib/text.ts. */
import { describe, expect, it } from "vitest";
import { FsError } from "../../src/fs/types.ts";
import { errorMessage, errorStack } from "../../src/lib/errors.ts";
import {
  parseTopicPartitionKey,
  partitionName,
  topicPartitionKey,
} from "../../src/lib/topic-partition.ts";
import { snakeCase, snakeCaseKeys } from "../../src/lib/text.ts";

describe("errorMessage", () => {
  it("gives an Error's message, an FsError's with its code", () => {
    expect(errorMessage(new Error("boom"))).toBe("boom");
    expect(errorMessage(new FsError("ENOSPC", "/d/f", "ENOSPC: no space left"))).toBe(
      "ENOSPC: no space left",
    );
  });

  it("gives anything else as a string", () => {
    expect(errorMessage("plain")).toBe("plain");
    expect(errorMessage(42)).toBe("42");
    expect(errorMessage(undefined)).toBe("undefined");
  });

  it("gives a stack only for an Error", () => {
    expect(errorStack(new Error("x"))).toContain("Error: x");
    expect(errorStack("x")).toBeUndefined();
  });
});

describe("topicPartitionKey", () => {
  it("round-trips through parseTopicPartitionKey, topic names with dots and dashes included", () => {
    for (const [topic, partition] of [
      ["orders", 0],
      ["a.b-c_d", 12],
      ["1", 4294967295],
    ] as const) {
      expect(parseTopicPartitionKey(topicPartitionKey(topic, partition))).toEqual({
        topic,
        partition,
      });
    }
  });

  it("keeps (topic, partition) pairs apart that a plain join would not", () => {
    expect(topicPartitionKey("a1", 1)).not.toBe(topicPartitionKey("a", 11));
  });

  it("names a partition topic/partition for people", () => {
    expect(partitionName("orders", 3)).toBe("orders/3");
  });
});

describe("snakeCaseKeys", () => {
  it("renames every object key at every depth, keeping values, arrays and dotted names", () => {
    expect(snakeCase("recordsAppended")).toBe("records_appended");
    expect(snakeCase("fsyncs")).toBe("fsyncs");
    expect(
      snakeCaseKeys({
        segmentsChecked: 2,
        topics: [
          { metadataProblem: "", partitions: [{ corruption: { highestSkippedOffset: -1 } }] },
        ],
        refused: { "tcp.frame_refused": 1 },
        outcome: "torn_tail_cut",
        none: null,
      }),
    ).toEqual({
      segments_checked: 2,
      topics: [
        { metadata_problem: "", partitions: [{ corruption: { highest_skipped_offset: -1 } }] },
      ],
      refused: { "tcp.frame_refused": 1 },
      outcome: "torn_tail_cut",
      none: null,
    });
  });
});
