import { describe, expect, it } from "vitest";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import {
  applySwap,
  parseSwapTempName,
  recoverSegmentSwap,
  writeSwapMarker,
} from "../../src/storage/segment-swap.ts";

const dir = "/p";
const name = (base: number, ext: string) => `${String(base).padStart(20, "0")}.${ext}`;

/** A partition directory: segments 0 and 5 replaced by one output 2 (temps), segment 9 untouched. */
function fixture(): MemoryFileSystem {
  const fs = new MemoryFileSystem();
  for (const [base, tag] of [
    [0, "old0"],
    [5, "old5"],
    [9, "keep9"],
  ] as const) {
    fs.writeFileSync(`${dir}/${name(base, "log")}`, utf8(`${tag}.log`));
    fs.writeFileSync(`${dir}/${name(base, "index")}`, utf8(`${tag}.index`));
  }
  fs.writeFileSync(`${dir}/${name(2, "log")}.cleaned`, utf8("new2.log"));
  fs.writeFileSync(`${dir}/${name(2, "index")}.cleaned`, utf8("new2.index"));
  return fs;
}

const contents = (fs: MemoryFileSystem) =>
  Object.fromEntries(
    fs.listTree(dir).map((p) => [p.slice(dir.length + 1), fromUtf8(fs.readFileSync(p))]),
  );

const before = {
  [name(0, "index")]: "old0.index",
  [name(0, "log")]: "old0.log",
  [name(5, "index")]: "old5.index",
  [name(5, "log")]: "old5.log",
  [name(9, "index")]: "keep9.index",
  [name(9, "log")]: "keep9.log",
};
const after = {
  [name(2, "index")]: "new2.index",
  [name(2, "log")]: "new2.log",
  [name(9, "index")]: "keep9.index",
  [name(9, "log")]: "keep9.log",
};

describe("recoverSegmentSwap follows its decision table", () => {
  it("does nothing without a marker or temp file", async () => {
    const fs = new MemoryFileSystem();
    fs.writeFileSync(`${dir}/${name(0, "log")}`, utf8("x"));
    const mutations = fs.mutationCount;
    const r = await recoverSegmentSwap(fs, { dir, logger: new MemoryLogger(), partition: "t/0" });
    expect(r.outcome).toBe("none");
    expect(fs.mutationCount).toBe(mutations);
  });

  it("removes temp files left without a marker, and reports them", async () => {
    const fs = fixture();
    const logger = new MemoryLogger();
    const r = await recoverSegmentSwap(fs, { dir, logger, partition: "t/0" });
    expect(r).toMatchObject({
      outcome: "rolled_back",
      removedTemps: [`${name(2, "index")}.cleaned`, `${name(2, "log")}.cleaned`],
    });
    expect(contents(fs)).toEqual(before);
    expect(logger.named("recovery.swap_rolled_back")).toHaveLength(1);
  });

  it("rolls back past an unreadable marker, removing it and the temps", async () => {
    for (const garbage of [
      new Uint8Array(0),
      new Uint8Array(40),
      utf8('{"version":1,"replaced":[0,5],"out'),
      utf8('{"version":2,"replaced":[0],"outputs":[]}'),
    ]) {
      const fs = fixture();
      fs.writeFileSync(`${dir}/compaction.marker`, garbage);
      const logger = new MemoryLogger();
      const r = await recoverSegmentSwap(fs, { dir, logger, partition: "t/0" });
      expect(r.outcome).toBe("rolled_back");
      expect(contents(fs)).toEqual(before);
      expect(logger.named("recovery.swap_marker_unreadable")).toHaveLength(1);
    }
  });

  it("rolls a valid marker forward from any point, and doing it twice changes nothing more", async () => {
    // From before any rename, and from after the first rename and one delete.
    const fresh = fixture();
    await writeSwapMarker(fresh, dir, { replaced: [0, 5], outputs: [2] });
    const partway = fixture();
    await writeSwapMarker(partway, dir, { replaced: [0, 5], outputs: [2] });
    await partway.rename(`${dir}/${name(2, "index")}.cleaned`, `${dir}/${name(2, "index")}`);
    await partway.unlink(`${dir}/${name(0, "log")}`);
    for (const fs of [fresh, partway]) {
      const logger = new MemoryLogger();
      const r = await recoverSegmentSwap(fs, { dir, logger, partition: "t/0" });
      expect(r).toMatchObject({
        outcome: "rolled_forward",
        plan: { replaced: [0, 5], outputs: [2] },
      });
      expect(contents(fs)).toEqual(after);
      expect(logger.named("recovery.swap_rolled_forward")).toHaveLength(1);
      expect((await recoverSegmentSwap(fs, { dir, logger, partition: "t/0" })).outcome).toBe(
        "none",
      );
      fs.crash({ mode: "dropAll" }); // every step was made durable
      expect(contents(fs)).toEqual(after);
    }
  });

  it("keeps an output that took the name of a segment it replaces", async () => {
    const fs = fixture();
    fs.writeFileSync(`${dir}/${name(0, "log")}.cleaned`, utf8("new0.log"));
    fs.writeFileSync(`${dir}/${name(0, "index")}.cleaned`, utf8("new0.index"));
    await fs.unlink(`${dir}/${name(2, "log")}.cleaned`);
    await fs.unlink(`${dir}/${name(2, "index")}.cleaned`);
    await writeSwapMarker(fs, dir, { replaced: [0, 5], outputs: [0] });
    await applySwap(fs, dir, { replaced: [0, 5], outputs: [0] });
    expect(contents(fs)).toMatchObject({
      [name(0, "log")]: "new0.log",
      [name(0, "index")]: "new0.index",
    });
    expect(Object.keys(contents(fs))).not.toContain(name(5, "log"));
  });

  it("recognises only its own temp names", () => {
    expect(parseSwapTempName("00000000000000000042.log.cleaned")).toEqual({
      baseOffset: 42,
      kind: "log",
    });
    expect(parseSwapTempName("00000000000000000042.index.cleaned")).toEqual({
      baseOffset: 42,
      kind: "index",
    });
    for (const other of [
      "42.log.cleaned",
      "00000000000000000042.log",
      "00000000000000000042.log.partial",
      ".topic.json.tmp-1",
    ])
      expect(parseSwapTempName(other)).toBeNull();
  });
});
