import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { validateTopicName } from "../../src/broker/config.ts";
import { validateGroupName } from "../../src/broker/groups.ts";
import {
  classifyGroupsEntry,
  classifyPartitionEntry,
  classifyTopicsEntry,
  classifyTopicWithoutMetadata,
  isObjectName,
  leftovers,
} from "../../src/storage/leftovers.ts";

const accepts = (validate: (name: string) => unknown, name: string): boolean => {
  try {
    validate(name);
    return true;
  } catch {
    return false;
  }
};

/** Names from an alphabet that hits every rule: dots, the temp form, bad characters, length. */
const names = fc.oneof(
  fc.string({ unit: fc.constantFrom("a", "Z", "0", ".", "_", "-", " ", "/", "é"), maxLength: 12 }),
  fc.tuple(fc.string({ minLength: 1, maxLength: 5 }), fc.nat(99)).map(([n, i]) => `.${n}.tmp-${i}`),
  fc.integer({ min: 240, max: 260 }).map((n) => "x".repeat(n)),
);

describe("storage/leftovers.ts", () => {
  it("takes an entry of topics/ for a topic exactly when createTopic accepts its name (property)", () => {
    fc.assert(
      fc.property(names, (name) => {
        expect(classifyTopicsEntry(name) === "topic").toBe(accepts(validateTopicName, name));
      }),
      { seed: 13, numRuns: 2000 },
    );
  });

  it("takes <name>.json in groups/ for a group exactly when joining accepts its name (property)", () => {
    fc.assert(
      fc.property(names, (name) => {
        expect(isObjectName(name)).toBe(accepts(validateGroupName, name));
        const entry = classifyGroupsEntry(`${name}.json`);
        if (accepts(validateGroupName, name)) expect(entry).toEqual({ group: name });
        else expect(entry).not.toHaveProperty("group");
      }),
      { seed: 13, numRuns: 2000 },
    );
  });

  it("calls a topic directory holding nothing but the writer's temps an interrupted create", () => {
    expect(classifyTopicWithoutMetadata([])).toBe("incomplete_topic");
    expect(classifyTopicWithoutMetadata([".topic.json.tmp-3"])).toBe("incomplete_topic");
    expect(classifyTopicWithoutMetadata([".topic.json.tmp-3", "0"])).toBe("topic_without_metadata");
    expect(classifyTopicWithoutMetadata(["notes"])).toBe("topic_without_metadata");
  });

  it("classifies partition entries", () => {
    const dir = new Set([
      "00000000000000000000.log",
      "00000000000000000000.index",
      "00000000000000000100.index",
      "99999999999999999999.log",
      "00000000000000000050.log.cleaned",
      "compaction.marker",
      "x.log.bak",
    ]);
    const kinds = Object.fromEntries([...dir].map((n) => [n, classifyPartitionEntry(n, dir)]));
    expect(kinds).toEqual({
      "00000000000000000000.log": null,
      "00000000000000000000.index": null,
      "00000000000000000100.index": "index_without_log",
      "99999999999999999999.log": "unsupported_base_offset",
      "00000000000000000050.log.cleaned": "swap_temp",
      "compaction.marker": "swap_marker",
      "x.log.bak": "not_a_segment_file",
    });
  });

  it("rates as corrupt only what makes an object unavailable", () => {
    const corrupt = Object.entries(leftovers)
      .filter(([, rule]) => rule.check === "corrupt")
      .map(([kind]) => kind);
    expect(corrupt.sort()).toEqual([
      "corrupt_producer_journal",
      "topic_without_metadata",
      "unreadable_group_file",
      "unreadable_log_start_offsets",
      "unreadable_producer_state",
      "unreadable_schema_registry",
      "unreadable_topic_metadata",
      "unusable_key_file",
    ]);
    for (const [kind, rule] of Object.entries(leftovers))
      expect(/unavailable/.test(rule.startup), kind).toBe(rule.check === "corrupt");
  });
});
