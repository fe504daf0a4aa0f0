/**
 * test/cluster/replica-log.ts: what a broker stored, read back from its data directory after it
 * closed, across segment rolls, with the zeros past the last record ignored.
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { buildEntryBatch } from "../../src/client/records.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { tempDir } from "../helpers/tmp.ts";
import { readReplicaLog } from "./replica-log.ts";

describe("readReplicaLog", () => {
  it("reads every stored record of a partition in offset order, over several segments", async () => {
    const { dir } = tempDir("es-broker-replica-log-");
    const { broker } = await openTestBroker({
      fs: new NodeFileSystem(),
      dataDir: dir,
      clock: realClock,
    });
    await broker.createTopic({ name: "t", partitions: 2, config: { segment_bytes: 4096 } });
    const values = Array.from({ length: 300 }, (_, i) => `value-${i}-${"x".repeat(i % 40)}`);
    for (let i = 0; i < values.length; i += 30) {
      await broker.produce({
        topic: "t",
        partition: 1,
        batch: buildEntryBatch(values.slice(i, i + 30).map((value) => ({ value }))),
      });
    }
    await broker.close();
    const segments = readdirSync(join(dir, "topics/t/1")).filter((f) => f.endsWith(".log"));
    expect(segments.length).toBeGreaterThan(1);
    const read = readReplicaLog(dir, { topic: "t", partition: 1 });
    expect(read.map((r) => r.value)).toEqual(values);
    expect(read.map((r) => r.offset)).toEqual(values.map((_, i) => i));
    expect(readReplicaLog(dir, { topic: "t", partition: 0 })).toEqual([]);
    expect(readReplicaLog(dir, { topic: "absent", partition: 0 })).toEqual([]);
  });
});
