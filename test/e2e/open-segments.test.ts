/**
 * End-to-end: `--max-open-segments` bounds the real broker's open file descriptors however many
 * segments its partitions hold (docs/storage.md "Index and reads", docs/decisions.md §15): after
 * writing dozens of small segments, after reading every one of them back, and after a restart
 * over them, the process's descriptors (counted in `/proc/<pid>/fd`) stay within the bound plus
 * the active segments, and every record reads back intact. Runs on the node target (the cache is
 * runtime-neutral storage code; `/proc` is Linux's).
 */
import { afterEach, describe, expect, it } from "vitest";
import { readdirSync } from "node:fs";
import { TcpClient } from "../../src/client/client.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { tempDir } from "../helpers/tmp.ts";
import { startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

const fds = (b: BrokerProcess) => readdirSync(`/proc/${b.proc.pid}/fd`).length;

/** Every value of partition `p` from offset 0 to `end`, 7 records a fetch (the client checks CRCs). */
async function readAll(client: TcpClient, p: number, end: number): Promise<string[]> {
  const values: string[] = [];
  let offset = 0;
  while (offset < end) {
    const r = await client.fetch({ topic: "segs", partition: p, offset, maxRecords: 7 });
    for (const rec of r.records) values.push(fromUtf8(rec.value));
    expect(r.nextOffset).toBeGreaterThan(offset);
    offset = r.nextOffset;
  }
  return values;
}

describe(`[${target}] open segment files`, () => {
  it.runIf(target === "node")(
    "stay within --max-open-segments while reads cross every segment, and after a restart",
    async () => {
      const { dir } = tempDir();
      const extra = ["--max-open-segments", "3"];
      let broker = await startBroker(`${dir}/data`, extra);
      running.push(broker);
      let client = await TcpClient.connect(broker.tcp);
      await client.createTopic({ name: "segs", partitions: 2, config: { segment_bytes: 2048 } });
      const atRest = fds(broker);
      const expected: string[][] = [[], []];
      for (let i = 0; i < 300; i++) {
        const p = i % 2;
        const v = `r${i}-${"x".repeat(200)}`;
        const b = new EntryBatchBuilder();
        b.add(null, utf8(v));
        await client.produce("segs", b.build(), { partition: p });
        expected[p].push(v);
      }
      const [described] = await client.metadata(["segs"]);
      const segments = described.partitions.reduce((n, p) => n + p.segmentCount, 0);
      expect(segments).toBeGreaterThan(30);
      // The active segments were open at rest; at most 3 sealed ones are open on top of them.
      expect(fds(broker) - atRest).toBeLessThanOrEqual(3);
      for (const p of [0, 1]) expect(await readAll(client, p, 150)).toEqual(expected[p]);
      expect(fds(broker) - atRest).toBeLessThanOrEqual(3);
      await client.close();
      expect(await broker.stop("SIGKILL")).toBe("SIGKILL");
      running.splice(0);

      broker = await startBroker(`${dir}/data`, extra);
      running.push(broker);
      client = await TcpClient.connect(broker.tcp);
      const afterStart = fds(broker);
      expect(afterStart - atRest).toBeLessThanOrEqual(3 + 1); // + the client's connection
      for (const p of [0, 1]) expect(await readAll(client, p, 150)).toEqual(expected[p]);
      expect(fds(broker) - atRest).toBeLessThanOrEqual(3 + 1);
      await client.close();
    },
  );
});
