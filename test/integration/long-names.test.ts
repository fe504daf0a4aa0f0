/**
 * Every path the broker derives from a name (topic directories, `topic.json` and
 * `log_start_offsets.json`, cold-tier directories, `groups/<group>.json`, and the temp files of
 * each atomic rewrite) with the longest valid names, 249 characters: on the real file system and
 * on the simulated one, which refuses names over 255 bytes the same way.
 */
import { describe, expect, it } from "vitest";
import { readdirSync } from "node:fs";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { readJsonFile, writeFileAtomic } from "../../src/storage/metadata.ts";
import { tempDir } from "../helpers/tmp.ts";
import { openTestBroker } from "../helpers/broker.ts";

const longTopic = "t".repeat(249);
const longCompacted = "k".repeat(249);
const longGroup = "g".repeat(249);

const backends: { name: string; make: () => { fs: FileSystem; root: string } }[] = [
  {
    name: "NodeFileSystem",
    make: () => ({ fs: new NodeFileSystem(), root: tempDir().dir }),
  },
  { name: "MemoryFileSystem", make: () => ({ fs: new MemoryFileSystem(), root: "/r" }) },
];

for (const backend of backends) {
  describe(`249-character names on ${backend.name}`, () => {
    async function start(fs: FileSystem, root: string) {
      const { broker } = await openTestBroker({
        fs,
        dataDir: `${root}/data`,
        coldStorageDir: `${root}/cold`,
        cleanupIntervalMs: 0,
      });
      return broker;
    }

    it("writeFileAtomic replaces a file whose name is 255 bytes, the longest a file system allows", async () => {
      const { fs, root } = backend.make();
      await fs.mkdir(`${root}/m`);
      const path = `${root}/m/${"f".repeat(250)}.json`;
      await writeFileAtomic(fs, path, utf8('{"a":1}'));
      await writeFileAtomic(fs, path, utf8('{"a":2}'));
      expect(await readJsonFile(fs, path)).toEqual({
        value: { a: 2 },
        bytes: expect.any(Uint8Array),
      });
      expect(await fs.readdir(`${root}/m`)).toEqual([`${"f".repeat(250)}.json`]);
    });

    it("a group joins, commits and comes back after a restart; topics get config updates, retention to the cold tier, compaction, idempotent produce and deletion", async () => {
      const { fs, root } = backend.make();
      let b = await start(fs, root);
      await b.createTopic({
        name: longTopic,
        partitions: 1,
        config: { segment_bytes: 1024, retention_bytes: 1 },
      });
      await b.createTopic({
        name: longCompacted,
        partitions: 1,
        config: { segment_bytes: 1024, cleanup_policy: "compact" },
      });
      for (let i = 0; i < 12; i++) {
        await b.produce({
          topic: longTopic,
          partition: 0,
          batch: new EntryBatchBuilder().add(null, utf8("v".repeat(200))).build(),
        });
        await b.produce({
          topic: longCompacted,
          partition: 0,
          batch: new EntryBatchBuilder().add(utf8(`key${i % 2}`), utf8("v".repeat(200))).build(),
        });
      }
      await b.produce({
        topic: longTopic,
        batch: new EntryBatchBuilder().add(null, utf8("idem")).build(),
        producer: { id: "p".repeat(249), epoch: 1, sequence: 0 },
      });
      await b.updateTopicConfig(longTopic, { retention_ms: 3_600_000 });

      const retention = await b.cleanup(longTopic);
      expect(retention.partitions[0].retention.segments_offloaded).toBeGreaterThan(0);
      const compaction = await b.cleanup(longCompacted);
      expect(compaction.partitions[0].compaction.status).toBe("compacted");

      const joined = await b.joinGroup({ group: longGroup, topics: [longTopic] });
      await b.commitOffsets({
        group: longGroup,
        memberId: joined.memberId,
        generation: joined.generation,
        offsets: [{ topic: longTopic, partition: 0, offset: 5 }],
      });
      await b.leaveGroup({ group: longGroup, memberId: joined.memberId });
      await b.close();

      b = await start(fs, root);
      expect((await b.listTopics()).map((t) => t.name)).toEqual([longCompacted, longTopic]);
      expect((await b.describeTopic(longTopic)).config.retention_ms).toBe(3_600_000);
      const group = await b.describeGroup(longGroup);
      expect(group.offsets.map((o) => o.committed)).toEqual([5]);
      const fetched = await b.fetch({ topic: longTopic, partition: 0, offset: 0 });
      expect(fetched.records.count).toBeGreaterThan(0);
      await b.deleteTopic(longTopic);
      await b.deleteTopic(longCompacted);
      expect(await b.listTopics()).toEqual([]);
      expect(await fs.readdir(`${root}/cold/topics`)).toEqual([]);
      if (backend.name === "NodeFileSystem") expect(readdirSync(`${root}/data/topics`)).toEqual([]);
    });
  });
}
