import { describe, expect, it } from "vitest";
import {
  appendFileSync,
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
import { silentLogger } from "../../src/lib/logger.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { checkDataDir } from "../../src/storage/check.ts";
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

  it("finds a flipped byte in a sealed segment, a torn tail, a bad index and strays, and changes no file", async () => {
    const dir = await dataDir();
    const names = segs(dir);
    const sealed = `${dir}/topics/t/0/${names[1]}`;
    const fd = openSync(sealed, "r+");
    writeSync(fd, Buffer.from([0x5a]), 0, 1, 100);
    closeSync(fd);
    appendFileSync(`${dir}/topics/t/0/${names.at(-1)}`, Buffer.from([1, 2, 3, 4, 5, 6, 7]));
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
