/**
 * End to end: idempotent producers retrying through SIGKILLs of the real broker process. For 100
 * rounds (on the Node target; 25 on Deno, Bun and the binary, which run the same code — each round
 * is a process start, the costly part) the broker is started on the same data directory, the producers (the client's
 * IdempotentProducer, each with a request always in flight) get a few batches acknowledged, and
 * the broker is killed with SIGKILL — often with requests half-way. The producers resend what was
 * not answered, with the same sequence numbers, over new connections to the next incarnation.
 * Then every (producer, sequence) must be stored exactly once, at the offsets it was acknowledged
 * at, and every acknowledged record must be present.
 */
import { afterEach, describe, expect, it } from "vitest";
import { IdempotentProducer, TcpClient } from "../../src/client/client.ts";
import type { ProduceResult } from "../../src/broker/types.ts";
import { tempDir } from "../helpers/tmp.ts";
import { startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** Rounds per target: the full 100 on Node; a shorter parity run elsewhere. `ES_BROKER_KILL_ROUNDS` overrides. */
const rounds = Number(process.env.ES_BROKER_KILL_ROUNDS ?? (target === "node" ? 100 : 25));

describe(`[${target}] idempotent producers through SIGKILL`, () => {
  // Each round is one start of the real process (≈ 0.1–0.3 s on an idle machine); the limit is
  // generous so a loaded machine does not fail it.
  it(`store every (producer, sequence) exactly once across ${rounds} kills of the broker`, {
    timeout: 300_000,
  }, async () => {
    const { dir } = tempDir("es-broker-idem-");
    const dataDir = `${dir}/data`;
    let broker = await startBroker(dataDir);
    running.push(broker);
    const admin = await TcpClient.connect(broker.tcp);
    await admin.createTopic({ name: "idem", partitions: 3 });
    await admin.close();

    // The producers connect to whichever broker is running now.
    const connect = () =>
      TcpClient.connect({ host: broker.tcp.host, port: broker.tcp.port, timeoutMs: 5000 });
    const specs = [
      { id: "alpha", partitionOf: (_: number) => 0 },
      { id: "beta", partitionOf: (_: number) => 1 },
      { id: "gamma", partitionOf: (b: number) => (b % 2 === 0 ? 1 : 2) },
    ];
    let stop = false;
    let acks = 0;
    let duplicates = 0;
    /** `${producer}/${partition}/${sequence}` → where the batch was acknowledged, and its values. */
    const acked = new Map<string, { result: ProduceResult; values: string[] }>();
    const producers = specs.map((spec) => {
      const producer = new IdempotentProducer({
        connect,
        producerId: spec.id,
        epoch: 1,
        retryBackoffMs: 5,
        retryBackoffMaxMs: 40,
        deliveryTimeoutMs: 60_000,
      });
      const done = (async () => {
        for (let b = 0; !stop; b++) {
          const partition = spec.partitionOf(b);
          const sequence = producer.nextSequence("idem", partition);
          const count = 1 + (b % 3);
          const values = Array.from(
            { length: count },
            (_, i) => `${spec.id}/${partition}/${sequence + i}`,
          );
          const result = await producer.send(
            "idem",
            values.map((value) => ({ value })),
            { partition },
          );
          acked.set(`${spec.id}/${partition}/${sequence}`, { result, values });
          acks++;
          if (result.duplicate) duplicates++;
        }
      })();
      return { producer, done };
    });

    const started = Date.now();
    for (let round = 0; round < rounds; round++) {
      const wanted = acks + 1 + (round % 2);
      const deadline = Date.now() + 2000;
      while (acks < wanted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
      await broker.stop("SIGKILL");
      running.splice(running.indexOf(broker), 1);
      broker = await startBroker(dataDir);
      running.push(broker);
    }
    stop = true;
    await Promise.all(producers.map((p) => p.done));
    for (const p of producers) await p.producer.close();

    const reader = await TcpClient.connect(broker.tcp);
    const stored = new Map<string, { partition: number; offsets: number[] }>();
    for (let partition = 0; partition < 3; partition++) {
      let offset = 0;
      for (;;) {
        const r = await reader.fetch({ topic: "idem", partition, offset, maxRecords: 10_000 });
        if (r.records.length === 0) break;
        for (const rec of r.records) {
          const v = Buffer.from(rec.value).toString();
          const entry = stored.get(v) ?? { partition, offsets: [] };
          entry.offsets.push(rec.offset);
          stored.set(v, entry);
        }
        offset = r.nextOffset;
      }
    }
    await reader.close();

    expect(acked.size).toBeGreaterThan(rounds);
    let records = 0;
    for (const [key, { result, values }] of acked) {
      const offsets = result.spans.flatMap((s) =>
        Array.from({ length: s.count }, (_, i) => s.baseOffset + i),
      );
      values.forEach((v, i) => {
        const where = stored.get(v);
        expect(where, `${v} (batch ${key}) is stored`).toBeDefined();
        expect(where!.offsets, `${v} is stored exactly once`).toHaveLength(1);
        expect(where!.offsets[0], `${v} is where it was acknowledged`).toBe(offsets[i]);
        records++;
      });
    }
    // Nothing else was stored: no record of a (producer, sequence) twice, no stray records.
    expect(stored.size).toBe(records);
    for (const [v, { offsets }] of stored) expect(offsets, v).toHaveLength(1);
    console.log(
      `[${target}] ${rounds} SIGKILLs in ${Date.now() - started} ms: ${acked.size} batches, ${records} records, each stored once; ${duplicates} retries answered as duplicates`,
    );
  });
});
