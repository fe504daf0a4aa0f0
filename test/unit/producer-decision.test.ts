/**
 * The idempotent producer's decision table (src/broker/producers/sequence.ts), row by row: each test builds
 * the state the row names and checks the outcome, the error kind and the expected value.
 */
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import {
  decideSequence,
  type ProducerState,
  type SequenceDecision,
} from "../../src/broker/producers/sequence.ts";
import { topicPartitionKey as partitionKey } from "../../src/lib/topic-partition.ts";

const key = partitionKey("orders", 0);
const fp = 0x1234;

/** A producer at `epoch` that has stored, on orders/0, batches [sequence, count] in order. */
function producer(epoch: number, batches: [number, number][] | null): ProducerState {
  const p: ProducerState = { id: "p1", epoch, lastActiveMs: 0, partitions: new Map() };
  if (batches !== null) {
    let offset = 100;
    const remembered = batches.map(([baseSequence, count]) => {
      const b = {
        baseSequence,
        count,
        ranges: [{ offset, count, fingerprint: fp, verified: true }],
      };
      offset += count;
      return b;
    });
    const last = batches.at(-1);
    p.partitions.set(key, {
      topic: "orders",
      partition: 0,
      nextSequence: last === undefined ? 0 : last[0] + last[1],
      batches: remembered,
    });
  }
  return p;
}

function decide(
  state: ProducerState | undefined,
  epoch: number,
  sequence: number,
  count = 3,
  fingerprint = fp,
): SequenceDecision {
  return decideSequence(state, { epoch, partitionKey: key, sequence, count, fingerprint });
}

function refused(d: SequenceDecision): Extract<SequenceDecision, { outcome: "refuse" }> {
  if (d.outcome !== "refuse") throw new Error(`expected a refusal, got ${JSON.stringify(d)}`);
  return d;
}

describe("idempotent producer decision table", () => {
  it("row 1: an unknown producer starting at sequence 0 appends", () => {
    expect(decide(undefined, 0, 0)).toEqual({ row: 1, outcome: "append" });
    expect(decide(undefined, 7, 0)).toEqual({ row: 1, outcome: "append" });
  });

  it("row 2: an unknown producer mid-sequence is told to start a new epoch at sequence 0", () => {
    const d = refused(decide(undefined, 0, 5));
    expect(d.row).toBe(2);
    expect(d.kind).toBe(Errors.unknownProducer);
    expect(d.expected).toEqual({ sequence: 0 });
  });

  it("row 3: an epoch older than the producer's is fenced, naming the current epoch", () => {
    const d = refused(decide(producer(4, [[0, 3]]), 3, 3));
    expect(d.row).toBe(3);
    expect(d.kind).toBe(Errors.producerFenced);
    expect(d.expected).toEqual({ epoch: 4 });
    // Even a retry of a stored batch is fenced once a newer epoch exists.
    expect(refused(decide(producer(4, [[0, 3]]), 0, 0)).row).toBe(3);
  });

  it("row 4: a newer epoch starting at sequence 0 appends", () => {
    expect(
      decide(
        producer(1, [
          [0, 3],
          [3, 3],
        ]),
        2,
        0,
      ),
    ).toEqual({ row: 4, outcome: "append" });
  });

  it("row 5: a newer epoch not starting at sequence 0 is refused with expected sequence 0", () => {
    const d = refused(decide(producer(1, [[0, 3]]), 2, 3));
    expect(d.row).toBe(5);
    expect(d.kind).toBe(Errors.outOfOrderSequence);
    expect(d.expected).toEqual({ sequence: 0 });
  });

  it("row 6: the current epoch's first batch on a partition appends at sequence 0", () => {
    expect(decide(producer(1, null), 1, 0)).toEqual({ row: 6, outcome: "append" });
  });

  it("row 7: the current epoch's first batch on a partition must start at sequence 0", () => {
    const d = refused(decide(producer(1, null), 1, 9));
    expect(d.row).toBe(7);
    expect(d.kind).toBe(Errors.outOfOrderSequence);
    expect(d.expected).toEqual({ sequence: 0 });
  });

  it("row 8: a retry of a remembered batch is a duplicate carrying the original batch", () => {
    const state = producer(1, [
      [0, 3],
      [3, 2],
      [5, 4],
    ]);
    for (const [sequence, count] of [
      [0, 3],
      [3, 2],
      [5, 4],
    ]) {
      const d = decide(state, 1, sequence, count);
      expect(d.row).toBe(8);
      expect(d.outcome).toBe("duplicate");
      if (d.outcome === "duplicate") expect(d.batch.baseSequence).toBe(sequence);
    }
  });

  it("row 9: a batch with a remembered base sequence but other records is refused as duplicate_sequence", () => {
    const state = producer(1, [
      [0, 3],
      [3, 2],
    ]);
    const otherCount = refused(decide(state, 1, 3, 5));
    expect(otherCount.row).toBe(9);
    expect(otherCount.kind).toBe(Errors.duplicateSequence);
    expect(otherCount.expected).toEqual({ sequence: 5 });
    const otherRecords = refused(decide(state, 1, 3, 2, fp + 1));
    expect(otherRecords.row).toBe(9);
  });

  it("row 10: the next sequence appends", () => {
    expect(
      decide(
        producer(1, [
          [0, 3],
          [3, 2],
        ]),
        1,
        5,
      ),
    ).toEqual({ row: 10, outcome: "append" });
  });

  it("row 11: a sequence below the next one that is no longer remembered is refused, naming the next", () => {
    const state = producer(1, [
      [0, 3],
      [3, 2],
    ]);
    state.partitions.get(key)!.batches.shift(); // batch 0 forgotten (only the last five are kept)
    const d = refused(decide(state, 1, 0));
    expect(d.row).toBe(11);
    expect(d.kind).toBe(Errors.duplicateSequence);
    expect(d.expected).toEqual({ sequence: 5 });
    // A sequence inside a remembered batch (not its base) is no retry of it either.
    expect(refused(decide(state, 1, 4, 1)).row).toBe(11);
  });

  it("row 12: a sequence gap is refused, naming the expected sequence", () => {
    const d = refused(
      decide(
        producer(1, [
          [0, 3],
          [3, 2],
        ]),
        1,
        6,
      ),
    );
    expect(d.row).toBe(12);
    expect(d.kind).toBe(Errors.outOfOrderSequence);
    expect(d.expected).toEqual({ sequence: 5 });
  });

  it("maps every refusal to its HTTP status: 409 for sequences, 403 for a stale epoch", () => {
    expect(Errors.outOfOrderSequence.http).toBe(409);
    expect(Errors.duplicateSequence.http).toBe(409);
    expect(Errors.unknownProducer.http).toBe(409);
    expect(Errors.producerFenced.http).toBe(403);
  });
});
