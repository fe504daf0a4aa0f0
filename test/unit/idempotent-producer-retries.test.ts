/**
 * The client's IdempotentProducer against a scripted broker that follows the broker's decision
 * table (src/broker/producers/sequence.ts, rows 3, 4, 8, 10, 12) per partition, with faults a
 * cluster produces: a leader that appends and is then deposed while the write waits for its ISR
 * answers `not_leader`, the records already on the next leader (attack8 F2). What is checked is
 * the client's retry logic (src/client/producer.ts): a batch the application sent once is stored
 * at most once, whatever the answers.
 */
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import type { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { IdempotentProducer } from "../../src/client/producer.ts";
import type { EntryBatch } from "../../src/storage/record.ts";

interface Stored {
  partition: number;
  value: string;
  epoch: number;
  sequence: number;
}

/** A broker of the decision table for one producer id, every partition on one log. */
class ScriptedBroker {
  epoch = -1;
  readonly stored: Stored[] = [];
  readonly #next = new Map<number, number>();
  readonly #remembered = new Map<string, number>();
  /** Per partition: answer the next tries this way after (or instead of) the table. */
  fault: (partition: number) => "append-then-not-leader" | "timeout" | null = () => null;

  produce(partition: number, value: string, epoch: number, sequence: number) {
    if (epoch < this.epoch)
      throw ClientError.fromKind(
        Errors.producerFenced,
        `epoch ${epoch} is fenced by ${this.epoch}`,
      );
    if (epoch > this.epoch) {
      if (sequence !== 0)
        throw ClientError.fromKind(Errors.outOfOrderSequence, "a new epoch starts at 0");
      this.epoch = epoch;
      this.#next.clear();
      this.#remembered.clear();
    }
    const key = `${partition}/${epoch}/${sequence}`;
    const at = this.#remembered.get(key);
    if (at !== undefined)
      return { spans: [{ partition, baseOffset: at, count: 1 }], duplicate: true };
    const expected = this.#next.get(partition) ?? 0;
    if (sequence !== expected)
      throw ClientError.fromKind(Errors.outOfOrderSequence, `expected ${expected}`);
    this.stored.push({ partition, value, epoch, sequence });
    this.#remembered.set(key, this.stored.length - 1);
    this.#next.set(partition, expected + 1);
    return {
      spans: [{ partition, baseOffset: this.stored.length - 1, count: 1 }],
      duplicate: false,
    };
  }

  client(): TcpClient {
    const decoder = new TextDecoder();
    const client = {
      closed: false,
      produceIdempotent: async (
        _topic: string,
        batch: EntryBatch,
        options: { partition: number; producer: { epoch: number; sequence: number } },
      ) => {
        // Every batch here is one record whose one-letter value ends the batch.
        const value = decoder.decode(batch.bytes.subarray(batch.bytes.length - 1));
        const { partition, producer } = options;
        const fault = this.fault(partition);
        if (fault === "timeout") throw ClientError.timeout("no answer: the leader is gone");
        if (fault === "append-then-not-leader") {
          try {
            this.produce(partition, value, producer.epoch, producer.sequence);
          } catch {}
          throw ClientError.fromKind(
            Errors.notLeader,
            "Cannot acknowledge the write: this broker no longer leads it",
          );
        }
        return this.produce(partition, value, producer.epoch, producer.sequence);
      },
      close: async () => {},
    };
    return client as unknown as TcpClient;
  }
}

describe("IdempotentProducer retries", () => {
  it("does not renumber a batch a deposed leader may have stored when its epoch moved on meanwhile (attack8 F2)", async () => {
    const broker = new ScriptedBroker();
    let phase: "failover" | "recovered" | "normal" = "failover";
    broker.fault = (partition) =>
      phase === "failover" && partition === 1
        ? "timeout"
        : phase !== "normal" && partition === 0
          ? "append-then-not-leader"
          : null;
    const client = broker.client();
    const producer = new IdempotentProducer({
      connect: async () => client,
      producerId: "app",
      epoch: 100,
      deliveryTimeoutMs: 300,
      retryBackoffMs: 20,
      retryBackoffMaxMs: 50,
    });
    // Y on partition 1 times out for good: the producer begins epoch 101.
    const y = producer.send("t", [{ value: "Y" }], { partition: 1 }).catch((e: ClientError) => e);
    await new Promise((resolve) => setTimeout(resolve, 200));
    // X on partition 0: appended under (100, 0) by a leader that is then deposed.
    const x = producer.send("t", [{ value: "X" }], { partition: 0 }).catch((e: ClientError) => e);
    expect(((await y) as ClientError).code).toBe("timeout");
    expect(producer.epoch).toBe(101);
    phase = "recovered";
    const z = await producer.send("t", [{ value: "Z" }], { partition: 1 });
    expect(z.duplicate).toBe(false);
    phase = "normal";
    const outcome = await x;
    // X is refused (it may be stored: it is, once), never stored a second time under (101, 0).
    expect(outcome).toBeInstanceOf(ClientError);
    expect((outcome as ClientError).code).toBe("producer_fenced");
    expect(broker.stored.filter((s) => s.value === "X")).toHaveLength(1);
  });

  it("renumbers a batch refused before any append when its epoch moved on", async () => {
    const broker = new ScriptedBroker();
    let phase: "failover" | "normal" = "failover";
    broker.fault = (partition) => (phase === "failover" && partition === 1 ? "timeout" : null);
    const client = broker.client();
    const producer = new IdempotentProducer({
      connect: async () => client,
      producerId: "app",
      epoch: 100,
      deliveryTimeoutMs: 300,
      retryBackoffMs: 20,
      retryBackoffMaxMs: 50,
    });
    await producer.send("t", [{ value: "A" }], { partition: 0 });
    const y = await producer.send("t", [{ value: "Y" }], { partition: 1 }).catch((e) => e);
    expect((y as ClientError).code).toBe("timeout");
    phase = "normal";
    // The new epoch's first batch, then one on partition 0: both stored once.
    expect((await producer.send("t", [{ value: "B" }], { partition: 1 })).duplicate).toBe(false);
    expect((await producer.send("t", [{ value: "C" }], { partition: 0 })).duplicate).toBe(false);
    expect(broker.stored.map((s) => `${s.value}@${s.epoch}/${s.sequence}`)).toEqual([
      "A@100/0",
      "B@101/0",
      "C@101/0",
    ]);
  });
});

describe("IdempotentProducer without a router", () => {
  it("fails at once, saying to pass a router, when another broker of a cluster leads the partition", async () => {
    let tries = 0;
    const client = {
      closed: false,
      // A broker without producer epochs: the producer takes the clock epoch.
      initProducerEpoch: async () => {
        throw ClientError.fromKind(Errors.unsupportedApi, "no producer epochs here");
      },
      produceIdempotent: async () => {
        tries++;
        throw ClientError.fromServer(
          Errors.notLeader.tcp,
          Errors.notLeader.code,
          "Cannot serve devices/1 on node 1: node 3 leads it",
          { leader: 3 },
        );
      },
      close: async () => {},
    } as unknown as TcpClient;
    const producer = new IdempotentProducer({
      connect: async () => client,
      producerId: "app",
      deliveryTimeoutMs: 60_000,
      retryBackoffMs: 20,
    });
    const started = Date.now();
    const error = await producer
      .send("devices", [{ value: "x" }], { partition: 1 })
      .catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error).toBeInstanceOf(ClientError);
    expect((error as ClientError).code).toBe("not_leader");
    expect((error as ClientError).message).toMatch(/node 3 leads it; this producer has no router/);
    expect(tries).toBe(1);
  });
});
