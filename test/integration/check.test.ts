import { describe, expect, it } from "vitest";
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  rmSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
  openSync,
  writeSync,
  closeSync,
} from "node:fs";
import { createHash } from "node:crypto";
import { LocalBroker } from "../../src/broker/broker.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger, silentLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { checkDataDir } from "../../src/storage/check.ts";
import { leftovers, type LeftoverKind } from "../../src/storage/leftovers.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { tempDir } from "../helpers/tmp.ts";

/** A stopped data dir with topic "t" (1 partition, several sealed segments) and topic "u". */
async function dataDir(): Promise<string> {
  const dir = `${tempDir().dir}/data`;
  const b = await LocalBroker.open({
    fs: new NodeFileSystem(),
    dataDir: dir,
    clock: new ManualClock(),
    logger: silentLogger,
  });
  await b.createTopic({ name: "t", partitions: 1, config: { segment_bytes: 4096 } });
  await b.createTopic({ name: "u", partitions: 2 });
  for (let i = 0; i < 60; i++)
    await b.produce({
      topic: "t",
      batch: new EntryBatchBuilder().add(utf8(`k${i}`), utf8("v".repeat(200))).build(),
    });
  await b.produce({
    topic: "u",
    partition: 1,
    batch: new EntryBatchBuilder().add(null, utf8("x")).build(),
  });
  await b.close();
  return dir;
}

function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (p: string) => {
    for (const n of readdirSync(p)) {
      const q = `${p}/${n}`;
      if (statSync(q).isDirectory()) walk(q);
      else out.set(q, createHash("sha256").update(readFileSync(q)).digest("hex"));
    }
  };
  walk(dir);
  return out;
}

const segs = (dir: string) =>
  readdirSync(`${dir}/topics/t/0`)
    .filter((n) => n.endsWith(".log"))
    .sort();

describe("checkDataDir (es-broker check)", () => {
  it("passes a clean data directory with every segment ok", async () => {
    const dir = await dataDir();
    const report = await checkDataDir(new NodeFileSystem(), dir);
    expect(report.corrupt).toBe(0);
    expect(report.warnings).toBe(0);
    expect(report.segmentsChecked).toBe(segs(dir).length + 2);
    expect(report.topics.map((t) => t.name).sort()).toEqual(["t", "u"]);
  });

  it("passes over the empty trash/ that a finished topic delete leaves, and warns once it holds a topic", async () => {
    const dir = await dataDir();
    const b = await LocalBroker.open({
      fs: new NodeFileSystem(),
      dataDir: dir,
      clock: new ManualClock(),
      logger: silentLogger,
    });
    await b.deleteTopic("u");
    await b.close();
    expect(readdirSync(`${dir}/trash`)).toEqual([]);
    const report = await checkDataDir(new NodeFileSystem(), dir);
    expect(report.leftovers).toEqual([]);
    expect(report.warnings).toBe(0);
    mkdirSync(`${dir}/trash/1-1`);
    const pending = await checkDataDir(new NodeFileSystem(), dir);
    expect(pending.leftovers.map((l) => l.kind)).toEqual(["deleted_topics"]);
  });

  it("finds a flipped byte in a sealed segment, a torn tail, a bad index and strays, and changes no file", async () => {
    const dir = await dataDir();
    const names = segs(dir);
    const sealed = `${dir}/topics/t/0/${names[1]}`;
    const fd = openSync(sealed, "r+");
    writeSync(fd, Buffer.from([0x5a]), 0, 1, 100);
    closeSync(fd);
    appendFileSync(`${dir}/topics/t/0/${names.at(-1)}`, Buffer.from([1, 2, 3, 4, 5, 6, 7]));
    // As a crash leaves it: no clean-stop record, so the active segment's tail may be torn.
    rmSync(`${dir}/clean-stop.json`);
    writeFileSync(`${dir}/topics/t/0/${names[0].replace(".log", ".index")}`, Buffer.alloc(9));
    writeFileSync(`${dir}/topics/t/0/x.log.bak`, "junk");
    writeFileSync(`${dir}/topics/u/topic.json`, "{");
    const before = snapshot(dir);
    const report = await checkDataDir(new NodeFileSystem(), dir);
    expect(snapshot(dir)).toEqual(before);
    const t = report.topics.find((x) => x.name === "t")!;
    const byFile = new Map(t.partitions[0].segments.map((s) => [s.file.split("/").pop()!, s]));
    expect(byFile.get(names[1])!.severity).toBe("corrupt");
    expect(byFile.get(names[1])!.corruption!.position).toBeLessThanOrEqual(100);
    expect(byFile.get(names.at(-1)!)!.severity).toBe("warning");
    expect(byFile.get(names.at(-1)!)!.detail).toMatch(/torn tail of 7 bytes/);
    expect(byFile.get(names[0])!.severity).toBe("warning");
    expect(byFile.get(names[0])!.detail).toMatch(/index/);
    expect(t.partitions[0].strays.map((s) => s.name)).toEqual(["x.log.bak"]);
    expect(report.topics.find((x) => x.name === "u")!.metadataProblem).toMatch(/topic.json/);
    expect(report.corrupt).toBe(2);
  });

  it("calls a bad tail of the active segment corrupt after a clean stop (docs/decisions.md §17)", async () => {
    const dir = await dataDir();
    const names = segs(dir);
    const active = `${dir}/topics/t/0/${names.at(-1)}`;
    const size = statSync(active).size;
    const fd = openSync(active, "r+");
    writeSync(fd, Buffer.from([0x01]), 0, 1, size - 5);
    closeSync(fd);
    const report = await checkDataDir(new NodeFileSystem(), dir);
    const p = report.topics.find((x) => x.name === "t")!.partitions[0];
    expect(p.cleanStop).toMatchObject({ logEndOffset: 60 });
    const s = p.segments.at(-1)!;
    expect(s.severity).toBe("corrupt");
    expect(s.detail).toMatch(/after a clean stop/);
    expect(report.corrupt).toBe(1);
    // The same bytes after a crash (no record): a torn tail, a warning.
    rmSync(`${dir}/clean-stop.json`);
    const crashed = await checkDataDir(new NodeFileSystem(), dir);
    expect(crashed.corrupt).toBe(0);
    expect(
      crashed.topics.find((x) => x.name === "t")!.partitions[0].segments.at(-1)!.detail,
    ).toMatch(/torn tail/);
  });

  it("calls a sealed segment whose tail does not decode corrupt, not torn", async () => {
    const dir = await dataDir();
    const names = segs(dir);
    appendFileSync(`${dir}/topics/t/0/${names[0]}`, Buffer.from([9, 9, 9]));
    const report = await checkDataDir(new NodeFileSystem(), dir);
    const s = report.topics.find((x) => x.name === "t")!.partitions[0].segments[0];
    expect(s.severity).toBe("corrupt");
    expect(s.detail).toMatch(/sealed segment ends in 3 bytes/);
  });
});

describe("checkDataDir and start-up judge every leftover alike (storage/leftovers.ts)", () => {
  /** Each case plants one leftover in a stopped data directory; `path` is what start-up acts on. */
  const cases: {
    kind: LeftoverKind;
    plant: (dir: string) => string;
  }[] = [
    {
      kind: "metadata_temp",
      plant: (dir) => {
        writeFileSync(`${dir}/topics/t/.topic.json.tmp-1`, '{"name":"t"');
        return `${dir}/topics/t/.topic.json.tmp-1`;
      },
    },
    {
      kind: "metadata_temp_kept",
      plant: (dir) => {
        writeFileSync(`${dir}/topics/u/topic.json`, "{");
        writeFileSync(`${dir}/topics/u/.topic.json.tmp-2`, '{"name":"u","partitions":2}');
        return `${dir}/topics/u/.topic.json.tmp-2`;
      },
    },
    {
      kind: "incomplete_topic",
      plant: (dir) => {
        mkdirSync(`${dir}/topics/half`);
        writeFileSync(`${dir}/topics/half/.topic.json.tmp-3`, "{");
        return `${dir}/topics/half`;
      },
    },
    {
      kind: "topic_without_metadata",
      plant: (dir) => {
        rmSync(`${dir}/topics/u/topic.json`);
        return `${dir}/topics/u`;
      },
    },
    {
      kind: "not_a_topic",
      plant: (dir) => {
        mkdirSync(`${dir}/topics/not a topic`);
        return `${dir}/topics/not a topic`;
      },
    },
    {
      kind: "not_a_group_file",
      plant: (dir) => {
        writeFileSync(`${dir}/groups/notes.txt`, "x");
        return `${dir}/groups/notes.txt`;
      },
    },
    {
      kind: "deleted_topics",
      plant: (dir) => {
        mkdirSync(`${dir}/trash/0`, { recursive: true });
        return `${dir}/trash`;
      },
    },
    {
      kind: "not_a_segment_file",
      plant: (dir) => {
        writeFileSync(`${dir}/topics/t/0/x.log.bak`, "junk");
        return `${dir}/topics/t/0/x.log.bak`;
      },
    },
    {
      kind: "swap_temp",
      plant: (dir) => {
        writeFileSync(`${dir}/topics/t/0/00000000000000000000.log.cleaned`, "partial output");
        return `${dir}/topics/t/0/00000000000000000000.log.cleaned`;
      },
    },
  ];

  for (const { kind, plant } of cases) {
    const rule = leftovers[kind];
    it(`${kind}: check says "${rule.check}; ${rule.startup}", and a start does so`, async () => {
      const dir = await dataDir();
      const path = plant(dir);
      const report = await checkDataDir(new NodeFileSystem(), dir);
      const findings = [
        ...report.leftovers.map((l) => ({ path: l.path, kind: l.kind, severity: l.severity })),
        ...report.topics.flatMap((t) =>
          t.partitions.flatMap((p) =>
            p.strays.map((s) => ({
              path: `${p.dir}/${s.name}`,
              kind: s.kind,
              severity: "warning",
            })),
          ),
        ),
        ...report.topics
          .filter((t) => t.metadataProblem === leftovers.topic_without_metadata.what)
          .map((t) => ({
            path: `${dir}/topics/${t.name}`,
            kind: "topic_without_metadata" as LeftoverKind,
            severity: "corrupt",
          })),
      ].filter((f) => f.kind !== "unreadable_topic_metadata");
      expect(findings).toContainEqual({ path, kind, severity: rule.check });
      expect(report.corrupt > 0).toBe(
        rule.check === "corrupt" || kind === "metadata_temp_kept", // its target is corrupt
      );

      const logger = new MemoryLogger();
      const broker = await LocalBroker.open({
        fs: new NodeFileSystem(),
        dataDir: dir,
        clock: new ManualClock(),
        logger,
      });
      const action = rule.startup;
      if (/removes|finishes deleting|renames it into place or removes/.test(action))
        expect(existsSync(path), `${path} after a start`).toBe(false);
      else expect(existsSync(path), `${path} after a start`).toBe(true);
      if (/unavailable/.test(action))
        await expect(broker.describeTopic("u")).rejects.toMatchObject({
          kind: { code: "unavailable" },
        });
      if (/reports and ignores|keeps/.test(action))
        expect(logger.named("recovery.stray_file").map((f) => f.file)).toContain(path);
      await broker.close();
    });
  }
});
