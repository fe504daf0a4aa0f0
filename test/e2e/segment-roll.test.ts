/**
 * End-to-end: `segment_bytes` holds under pipelined produce (docs/storage.md "Writes and
 * durability"). Produce requests that queue together are written as one group; the active
 * segment must still roll before each request that would take it past `segment_bytes`, so the
 * files on disk stay within it (a new operator found a 924 000-byte segment under
 * `segment_bytes=65536`). The command under test comes from ES_BROKER_CMD (see harness.ts).
 */
import { readdirSync, statSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

describe(`[${target}] segment rolls under pipelined produce`, () => {
  it("keeps every segment within segment_bytes when many pipelined requests share a write", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(`${dir}/data`);
    running.push(broker);
    const segmentBytes = 65_536;
    const admin = await TcpClient.connect(broker.tcp);
    await admin.createTopic({
      name: "roll",
      partitions: 1,
      config: { segment_bytes: segmentBytes },
    });
    await admin.close();

    // 8 connections × 8 requests in flight each, 100 records of ~100 B per request (~13 KB):
    // the requests queue together and groups hold several segments' worth.
    const connections = 8;
    const inFlight = 8;
    const requests = 5;
    const perRequest = 100;
    const requestBytes: number[] = [];
    let records = 0;
    await Promise.all(
      Array.from({ length: connections }, async (_, c) => {
        const client = await TcpClient.connect(broker.tcp);
        try {
          for (let round = 0; round < requests; round++) {
            const sends: Promise<unknown>[] = [];
            for (let i = 0; i < inFlight; i++) {
              const b = new EntryBatchBuilder();
              let bytes = 0;
              for (let r = 0; r < perRequest; r++) {
                const value = new TextEncoder().encode(
                  `c${c}-r${round}-i${i}-${r}-`.padEnd(90 + ((c + r) % 20), "v"),
                );
                b.add(null, value);
                bytes += 32 + value.length;
              }
              requestBytes.push(bytes);
              sends.push(client.produce("roll", b.build(), { partition: 0 }));
            }
            await Promise.all(sends);
            records += inFlight * perRequest;
          }
        } finally {
          await client.close();
        }
      }),
    );
    expect(await broker.stop("SIGTERM")).toBe(0);
    running.splice(0);

    // A clean stop cuts the zeros written ahead: each file holds exactly its records.
    const partitionDir = `${dir}/data/topics/roll/0`;
    const logs = readdirSync(partitionDir)
      .filter((f) => f.endsWith(".log"))
      .sort();
    const sizes = logs.map((f) => statSync(`${partitionDir}/${f}`).size);
    const total = sizes.reduce((a, b) => a + b, 0);
    expect(total).toBe(requestBytes.reduce((a, b) => a + b, 0));
    expect(Number(logs.at(-1)!.slice(0, 20))).toBeLessThan(records);
    const largest = Math.max(...requestBytes);
    for (let i = 0; i < sizes.length; i++) {
      expect(sizes[i], `${logs[i]}: ${sizes[i]} bytes`).toBeLessThanOrEqual(segmentBytes);
      // A sealed segment rolled only because the next request did not fit.
      if (i < sizes.length - 1)
        expect(sizes[i], `${logs[i]} rolled early`).toBeGreaterThan(segmentBytes - largest);
    }
    expect(logs.length).toBeGreaterThanOrEqual(Math.ceil(total / segmentBytes));
  }, 120_000);
});
