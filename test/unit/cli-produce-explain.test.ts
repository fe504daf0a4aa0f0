/**
 * What `es-broker produce` says when a batch failed (src/cli/client-commands.ts `ProducedLines`):
 * a batch refused after the leader appended it (`details.may_be_stored`, docs/cluster.md "What is
 * guaranteed, and what is not") is as uncertain as one whose answer was lost, and is named so;
 * one refused before the append stored nothing (newuser13: the CLI called stored lines "not
 * produced").
 */
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import { FailedBatch, ProducedLines } from "../../src/cli/client-commands.ts";
import { ClientError } from "../../src/client/errors.ts";

const refusal = (mayBeStored: boolean) =>
  new ClientError(
    Errors.notEnoughReplicas.code,
    Errors.notEnoughReplicas.tcp,
    true,
    'Cannot acknowledge writes to partition "pay/1": 1 in-sync replicas (1), below its min_insync_replicas 2',
    mayBeStored ? { details: { may_be_stored: true } } : undefined,
  );

describe("produce's failure message", () => {
  it("names a batch refused after the append as maybe stored, from its first line", () => {
    const produced = new ProducedLines();
    produced.add([1, 2, 3]);
    const err = produced.explain(new FailedBatch(refusal(true), [4, 5, 6]));
    expect(err.message).toBe(
      'line 4 of standard input: its batch (lines 4–6) was refused after the leader had appended it (Cannot acknowledge writes to partition "pay/1": 1 in-sync replicas (1), below its min_insync_replicas 2): that batch may or may not be stored, so it is not sent again; check the topic before sending from line 4 again (produce --producer-id resends without duplicates), and the rest of standard input was not read; 3 records (lines 1–3) were produced before it',
    );
    expect((err as ClientError).code).toBe("not_enough_replicas");
  });

  it("names a batch refused before the append as not produced", () => {
    const produced = new ProducedLines();
    produced.add([1, 2, 3]);
    const err = produced.explain(new FailedBatch(refusal(false), [4, 5, 6]));
    expect(err.message).toMatch(
      /^the batch of lines 4–6 of standard input: Cannot acknowledge .*; 3 records \(lines 1–3\) were produced before it, none from line 4 on$/,
    );
  });

  it("names the lines of other batches in flight that failed after they were sent (attack15b F1)", () => {
    const produced = new ProducedLines();
    produced.add([1, 2, 3, 7]);
    const err = produced.explain(new FailedBatch(refusal(true), [4]), [
      new FailedBatch(refusal(true), [5, 6]),
      new FailedBatch(refusal(false), [8]),
      new FailedBatch(refusal(true), [9], false),
    ]);
    expect(err.message).toMatch(
      /; 4 records were produced \(1–3, 7 of the input\), no other lines; 2 lines of other batches in flight \(5–6\) failed the same way and may be stored too$/,
    );
  });
});
