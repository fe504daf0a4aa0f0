/**
 * One scenario for compaction over the cold tier, shared by the integration table and the crash
 * simulation: a `compact,delete` topic whose first two segments are offloaded to the cold tier,
 * then two more sealed local segments and an active one, with overwrites, tombstones (one past
 * `tombstone_retention_ms`, one not), keyless records and the empty key.
 *
 * | segment        | records (key=value; "∅" = tombstone; null = no key)   | after compaction        |
 * |----------------|-------------------------------------------------------|-------------------------|
 * | 0 (cold)       | k1=a1, k2=b1, null=x1, ""=e1, k5=f1                  | x1, f1                  |
 * | 1 (cold)       | k1=a2, k3=c1, k4=d1                                   | d1                      |
 * | 2 (local)      | k1=a3, k2=∅ (expired), k3=∅ (not expired)             | a3, k3=∅                |
 * | 3 (local)      | ""=e2, k6=g1                                          | e2, g1                  |
 * | active         | k7=h1                                                 | h1                      |
 */
import type { LocalBroker, LocalBrokerOptions } from "../../src/broker/broker.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { ManualClock, openBroker, produce, type Rec } from "./compaction-fixtures.ts";

export const startMs = 1_700_000_000_000;
/** When the compacting cleanup runs: the k2 tombstone is past its retention, the k3 one is not. */
export const compactAtMs = startMs + 20_000;

const segments: Rec[][] = [
  [
    { key: "k1", value: "a1", ts: startMs },
    { key: "k2", value: "b1", ts: startMs },
    { key: null, value: "x1", ts: startMs },
    { key: "", value: "e1", ts: startMs },
    { key: "k5", value: "f1", ts: startMs },
  ],
  [
    { key: "k1", value: "a2", ts: startMs + 1000 },
    { key: "k3", value: "c1", ts: startMs + 1000 },
    { key: "k4", value: "d1", ts: startMs + 1000 },
  ],
  [
    { key: "k1", value: "a3", ts: startMs + 2000 },
    { key: "k2", value: "", ts: startMs + 2000 },
    { key: "k3", value: "", ts: startMs + 15_000 },
  ],
  [
    { key: "", value: "e2", ts: startMs + 3000 },
    { key: "k6", value: "g1", ts: startMs + 3000 },
  ],
  [{ key: "k7", value: "h1", ts: startMs + 4000 }],
];

/** Values of the records that survive, in offset order. */
export const survivors = ["x1", "f1", "d1", "a3", "", "e2", "g1", "h1"];
/** Values before compaction, in offset order. */
export const before = segments.flat().map((r) => r.value);

/**
 * Opens a broker on `fs` with `extra` (the cold tier), creates topic "t" and writes the scenario:
 * segments 0 and 1 offloaded (under the "delete" policy, so nothing is compacted yet), then the
 * policy becomes "compact,delete" with no size limit and the rest is written. The clock is left at
 * {@link compactAtMs}; nothing has been compacted.
 */
export async function coldCompactionScenario(
  fs: FileSystem,
  extra: Partial<LocalBrokerOptions>,
): Promise<{ broker: LocalBroker; clock: ManualClock }> {
  const clock = new ManualClock(startMs);
  const { broker } = await openBroker(fs, clock, extra);
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: {
      cleanup_policy: "delete",
      segment_ms: 1000,
      retention_bytes: 1,
      tombstone_retention_ms: 10_000,
    },
  });
  for (const [i, records] of segments.entries()) {
    if (i === 3) {
      // Segments 0 and 1 are sealed (2 is active): move them to the cold tier, then compact.
      const [run] = (await broker.cleanup("t")).partitions;
      if (run.retention.segments_offloaded !== 2)
        throw new Error(
          `scenario: expected 2 segments offloaded, got ${JSON.stringify(run.retention)}`,
        );
      await broker.updateTopicConfig("t", {
        cleanup_policy: "compact,delete",
        retention_bytes: -1,
      });
    }
    await produce(broker, "t", records);
    clock.advance(1000);
  }
  clock.advance(compactAtMs - clock.nowMs());
  return { broker, clock };
}
