/**
 * Produce routing (src/broker/produce-routing.ts), row by row of its table, without a broker:
 * which partition each record goes to, the round-robin position it hands back, how a spread batch
 * is split, and how the appends' offsets become spans in request order.
 */
import { describe, expect, it } from "vitest";
import { utf8 } from "../../src/lib/bytes.ts";
import { partitionForKey } from "../../src/lib/murmur2.ts";
import {
  routeRecords,
  spansInRequestOrder,
  splitByPartition,
} from "../../src/broker/produce-routing.ts";
import { EntryBatchBuilder, EntryCursor, type EntryBatch } from "../../src/storage/record.ts";

/** A batch of records given as keys (null = keyless); each value is "v<index>". */
function batchOf(keys: (string | null)[]): EntryBatch {
  const b = new EntryBatchBuilder();
  keys.forEach((k, i) => b.add(k === null ? null : utf8(k), utf8(`v${i}`)));
  return b.build();
}

/** The keys of a batch's records, in order (the routed keys identify the records). */
function keysOf(batch: EntryBatch): (string | null)[] {
  const out: (string | null)[] = [];
  const c = new EntryCursor(batch);
  while (c.next()) {
    const key = c.key();
    out.push(key === null ? null : new TextDecoder().decode(key));
  }
  return out;
}

describe("routeRecords", () => {
  it("row 1: a per-record partition wins over the request's partition and the key", () => {
    const { route } = routeRecords(batchOf(["a", null]), {
      partitionCount: 4,
      partition: 1,
      partitions: Int32Array.of(3, 2),
      roundRobin: 0,
    });
    expect(route).toEqual({ kind: "spread", assignment: Int32Array.of(3, 2) });
  });

  it("row 2: the request's partition takes every record without a per-record one", () => {
    expect(
      routeRecords(batchOf(["a", null]), { partitionCount: 4, partition: 2, roundRobin: 7 }),
    ).toEqual({ route: { kind: "single", partition: 2 }, roundRobin: 7 });
    const { route } = routeRecords(batchOf(["a", "b"]), {
      partitionCount: 4,
      partition: 2,
      partitions: Int32Array.of(-1, 0),
      roundRobin: 0,
    });
    expect(route).toEqual({ kind: "spread", assignment: Int32Array.of(2, 0) });
  });

  it("row 3: a keyed record goes to murmur2(key) mod partitions", () => {
    const keys = ["user-1", "user-2", "user-3", "user-4", "user-5"];
    const { route, roundRobin } = routeRecords(batchOf(keys), { partitionCount: 3, roundRobin: 0 });
    const expected = keys.map((k) => partitionForKey(utf8(k), 3));
    expect(new Set(expected).size).toBeGreaterThan(1);
    expect(route).toEqual({ kind: "spread", assignment: Int32Array.from(expected) });
    expect(roundRobin).toBe(0);
  });

  it("row 4: an idempotent producer's keyless records go to the partition of its id", () => {
    const { route, roundRobin } = routeRecords(batchOf([null, null]), {
      partitionCount: 5,
      producerId: "p-1",
      roundRobin: 3,
    });
    expect(route).toEqual({ kind: "single", partition: partitionForKey(utf8("p-1"), 5) });
    expect(roundRobin).toBe(3);
  });

  it("row 5: keyless records of one request share the next round-robin partition", () => {
    let roundRobin = 0;
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) {
      const routed = routeRecords(batchOf([null, null, null]), { partitionCount: 3, roundRobin });
      expect(routed.route.kind).toBe("single");
      if (routed.route.kind === "single") seen.push(routed.route.partition);
      roundRobin = routed.roundRobin;
    }
    expect(seen).toEqual([0, 1, 2, 0]);
    expect(roundRobin).toBe(1);
  });

  it("routes to one partition when every record lands there, even through keys", () => {
    const key = "k";
    const p = partitionForKey(utf8(key), 4);
    const { route } = routeRecords(batchOf([key, key]), {
      partitionCount: 4,
      partitions: Int32Array.of(p, -1),
      roundRobin: 0,
    });
    expect(route).toEqual({ kind: "single", partition: p });
  });

  it("refuses (as a programmer error) a named partition the caller did not check", () => {
    expect(() =>
      routeRecords(batchOf(["a"]), {
        partitionCount: 2,
        partitions: Int32Array.of(5),
        roundRobin: 0,
      }),
    ).toThrow(/assertion failed/);
  });
});

describe("splitByPartition", () => {
  it("copies each partition's records in request order, null where a partition gets none", () => {
    const batch = batchOf(["a", "b", "c", "d"]);
    const parts = splitByPartition(batch, Int32Array.of(2, 0, 2, 0), 3);
    expect(parts[1]).toBeNull();
    expect(parts[0]?.count).toBe(2);
    expect(keysOf(parts[0] as EntryBatch)).toEqual(["b", "d"]);
    expect(keysOf(parts[2] as EntryBatch)).toEqual(["a", "c"]);
  });
});

describe("spansInRequestOrder", () => {
  it("merges consecutive records of one partition and keeps request order", () => {
    // Records 0, 1 → partition 1 (offsets 10, 11), record 2 → partition 0 (offset 5), record 3 → partition 1 (12).
    expect(spansInRequestOrder(Int32Array.of(1, 1, 0, 1), [5, 10])).toEqual([
      { partition: 1, baseOffset: 10, count: 2 },
      { partition: 0, baseOffset: 5, count: 1 },
      { partition: 1, baseOffset: 12, count: 1 },
    ]);
  });
});
