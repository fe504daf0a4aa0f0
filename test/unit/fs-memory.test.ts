import { describe, expect, it } from "vitest";
import { MemoryFileSystem, type CrashOptions } from "../../src/fs/memory.ts";
import { FsError, type FileHandle } from "../../src/fs/types.ts";
import { fileSystemConformance } from "../fs/conformance.ts";

fileSystemConformance("MemoryFileSystem", async () => {
  const fs = new MemoryFileSystem({ seed: 1 });
  await fs.mkdir("/root");
  return {
    fs,
    root: "/root",
    async cleanup() {
      // Every conformance test closes what it opens; the simulated disk can check that.
      expect(fs.openHandleCount).toBe(0);
    },
  };
});

const utf8 = new TextEncoder();
const text = new TextDecoder();
const bytes = (s: string) => utf8.encode(s);

async function expectCode(promise: Promise<unknown>, code: string): Promise<void> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FsError);
  expect((err as FsError).code).toBe(code);
}

/** Creates `path` holding `content`, with its data synced; the entry is synced only if `syncEntry`. */
async function createFile(
  fs: MemoryFileSystem,
  path: string,
  content: string,
  syncEntry: boolean,
): Promise<void> {
  const file = await fs.open(path, { create: true });
  await file.write(bytes(content), 0);
  await file.sync();
  await file.close();
  if (syncEntry) await fs.syncDir(path.slice(0, path.lastIndexOf("/")) || "/");
}

function contentOf(fs: MemoryFileSystem, path: string): string | null {
  return fs.listTree().includes(path) ? text.decode(fs.readFileSync(path)) : null;
}

/** Every path and every file's bytes, for comparing whole disks. */
function snapshot(fs: MemoryFileSystem): string {
  return fs
    .listTree()
    .map((p) => (p.endsWith("/") ? p : `${p}=${Buffer.from(fs.readFileSync(p)).toString("hex")}`))
    .join("\n");
}

/** Runs `setup` on a fresh disk, crashes it with each seed in 1…`seeds`, and collects `observe`'s answers. */
async function outcomes<T>(
  seeds: number,
  setup: (fs: MemoryFileSystem) => Promise<void>,
  observe: (fs: MemoryFileSystem) => T,
  crash: Omit<CrashOptions, "seed"> = {},
): Promise<T[]> {
  const seen: T[] = [];
  for (let seed = 1; seed <= seeds; seed++) {
    const fs = new MemoryFileSystem();
    await setup(fs);
    fs.crash({ ...crash, seed });
    seen.push(observe(fs));
  }
  return seen;
}

describe("MemoryFileSystem crash", () => {
  async function syncedThenAppended(fs: MemoryFileSystem): Promise<void> {
    await fs.mkdir("/d");
    await fs.syncDir("/");
    await createFile(fs, "/d/f", "durable", true);
    const file = await fs.open("/d/f", { write: true });
    await file.write(bytes(" volatile"), 7);
    await file.close();
    await createFile(fs, "/d/unsynced-entry", "x", false);
  }

  it("dropAll keeps synced data and drops every unsynced write and entry", async () => {
    const fs = new MemoryFileSystem();
    await syncedThenAppended(fs);
    const report = fs.crash({ mode: "dropAll" });
    expect(fs.listTree()).toEqual(["/d/", "/d/f"]);
    expect(contentOf(fs, "/d/f")).toBe("durable");
    expect(report).toMatchObject({
      writesApplied: 0,
      writesDropped: 1,
      entriesReverted: 1,
      entriesKept: 0,
    });
  });

  it("keepAll keeps every unsynced write and entry, matching what reads saw", async () => {
    const fs = new MemoryFileSystem();
    await syncedThenAppended(fs);
    const before = snapshot(fs);
    fs.crash({ mode: "keepAll" });
    expect(snapshot(fs)).toBe(before);
    expect(contentOf(fs, "/d/f")).toBe("durable volatile");
  });

  it("applies, drops or tears each unsynced write, and some seed tears one at a byte inside it", async () => {
    const written = new Uint8Array(100).map((_, i) => i + 1);
    const lengths = await outcomes(
      200,
      async (fs) => {
        await createFile(fs, "/f", "", true);
        const file = await fs.open("/f", { write: true });
        await file.write(written, 0);
        await file.close();
      },
      (fs) => {
        const after = fs.readFileSync("/f");
        // Whatever survived is a prefix of the write, never other bytes.
        expect([...after]).toEqual([...written.subarray(0, after.length)]);
        return after.length;
      },
    );
    expect(lengths).toContain(0);
    expect(lengths).toContain(100);
    expect(lengths.some((n) => n > 0 && n < 100)).toBe(true);
  });

  it("a torn overwrite keeps the old synced bytes after the torn prefix", async () => {
    const results = await outcomes(
      100,
      async (fs) => {
        await createFile(fs, "/f", "aaaaaaaaaa", true);
        const file = await fs.open("/f", { write: true });
        await file.write(bytes("bbbbbbbbbb"), 0);
        await file.close();
      },
      (fs) => contentOf(fs, "/f")!,
    );
    for (const r of results) expect(r).toMatch(/^b*a*$/);
    expect(results.every((r) => r.length === 10)).toBe(true);
    expect(results.some((r) => r !== "aaaaaaaaaa" && r !== "bbbbbbbbbb")).toBe(true);
  });

  it("a dropped write followed by a kept one leaves a zero-filled hole", async () => {
    const results = await outcomes(
      100,
      async (fs) => {
        await createFile(fs, "/f", "", true);
        const file = await fs.open("/f", { write: true });
        await file.write(bytes("1111"), 0);
        await file.write(bytes("2222"), 4);
        await file.close();
      },
      (fs) => [...fs.readFileSync("/f")].join(","),
    );
    expect(results).toContain([0, 0, 0, 0, 50, 50, 50, 50].join(","));
  });

  it("an unsynced truncate is either applied or dropped", async () => {
    const results = await outcomes(
      50,
      async (fs) => {
        await createFile(fs, "/f", "abcdef", true);
        const file = await fs.open("/f", { write: true });
        await file.truncate(2);
        await file.close();
      },
      (fs) => contentOf(fs, "/f"),
    );
    expect(new Set(results)).toEqual(new Set(["ab", "abcdef"]));
  });

  it("a file created without a syncDir of its parent can vanish; after syncDir it never does", async () => {
    const unsynced = await outcomes(
      60,
      (fs) => createFile(fs, "/f", "x", false),
      (fs) => contentOf(fs, "/f"),
    );
    expect(new Set(unsynced)).toEqual(new Set([null, "x"]));
    const synced = await outcomes(
      60,
      (fs) => createFile(fs, "/f", "x", true),
      (fs) => contentOf(fs, "/f"),
    );
    expect(new Set(synced)).toEqual(new Set(["x"]));
  });

  it("a directory made without a syncDir of its parent vanishes with everything in it", async () => {
    const fs = new MemoryFileSystem();
    await fs.mkdir("/a/b");
    await fs.syncDir("/a");
    await createFile(fs, "/a/b/f", "x", true);
    fs.crash({ mode: "dropAll" });
    expect(fs.listTree()).toEqual([]);
  });

  it("a renamed-over file comes back as either the old or the new one, never neither", async () => {
    const replace = async (fs: MemoryFileSystem) => {
      await createFile(fs, "/meta", "v1", true);
      await createFile(fs, "/meta.tmp", "v2", false);
      await fs.rename("/meta.tmp", "/meta");
    };
    const unsynced = await outcomes(
      60,
      replace,
      (fs) => `${fs.listTree().join()}:${contentOf(fs, "/meta")}`,
    );
    expect(new Set(unsynced)).toEqual(new Set(["/meta:v1", "/meta:v2"]));
    const synced = await outcomes(
      30,
      async (fs) => {
        await replace(fs);
        await fs.syncDir("/");
      },
      (fs) => contentOf(fs, "/meta"),
    );
    expect(new Set(synced)).toEqual(new Set(["v2"]));
  });

  it("a durable file renamed without a syncDir ends up under exactly one of its names", async () => {
    const names = await outcomes(
      60,
      async (fs) => {
        await fs.mkdir("/x");
        await fs.mkdir("/y");
        await fs.syncDir("/");
        await createFile(fs, "/x/a", "data", true);
        await fs.rename("/x/a", "/x/b");
        await fs.rename("/x/b", "/y/c");
      },
      (fs) => fs.listTree().filter((p) => !p.endsWith("/")),
    );
    for (const n of names) expect(n.length).toBe(1);
    expect(new Set(names.map((n) => n[0]))).toEqual(new Set(["/x/a", "/y/c"]));
  });

  it("an unlink or a removeTree without a syncDir can be undone by a crash", async () => {
    const setup = async (fs: MemoryFileSystem) => {
      await fs.mkdir("/t");
      await fs.syncDir("/");
      await createFile(fs, "/t/f", "x", true);
      await createFile(fs, "/g", "y", true);
      await fs.unlink("/g");
      await fs.removeTree("/t");
    };
    const trees = await outcomes(60, setup, (fs) => fs.listTree().join());
    expect(trees).toContain("");
    expect(trees).toContain("/g,/t/,/t/f");
    const dropped = await outcomes(1, setup, (fs) => snapshot(fs), { mode: "dropAll" });
    expect(dropped[0]).toBe(
      `/g=${Buffer.from("y").toString("hex")}\n/t/\n/t/f=${Buffer.from("x").toString("hex")}`,
    );
  });

  it("handles opened before a crash reject with EIO, close cleanly, and are not counted as open", async () => {
    const fs = new MemoryFileSystem();
    await createFile(fs, "/f", "abc", true);
    const old = await fs.open("/f", { write: true });
    expect(fs.openHandleCount).toBe(1);
    fs.crash();
    expect(fs.openHandleCount).toBe(0);
    await expectCode(old.read(new Uint8Array(3), 0), "EIO");
    await expectCode(old.write(bytes("x"), 0), "EIO");
    await expectCode(old.sync(), "EIO");
    await expectCode(old.size(), "EIO");
    await old.close();
    const fresh = await fs.open("/f");
    expect(await fresh.size()).toBe(3);
    await fresh.close();
  });

  async function busyWorkload(fs: MemoryFileSystem): Promise<void> {
    await fs.mkdir("/data/p0");
    await fs.syncDir("/");
    const handles: FileHandle[] = [];
    for (let i = 0; i < 4; i++) handles.push(await fs.open(`/data/p0/${i}.log`, { create: true }));
    await fs.syncDir("/data");
    for (let round = 0; round < 6; round++) {
      for (const [i, h] of handles.entries()) {
        await h.write(new Uint8Array(7 + i).fill(round * 16 + i), round * (7 + i));
        if ((round + i) % 3 === 0) await h.sync();
      }
      if (round === 2) await fs.syncDir("/data/p0");
    }
    await fs.rename("/data/p0/3.log", "/data/p0/3.old");
    for (const h of handles) await h.close();
  }

  it("the same seed gives the same disk, and different seeds give different disks", async () => {
    const run = async (seed: number) => {
      const fs = new MemoryFileSystem();
      await busyWorkload(fs);
      const report = fs.crash({ seed });
      return `${JSON.stringify(report)}\n${snapshot(fs)}`;
    };
    expect(await run(42)).toBe(await run(42));
    const distinct = new Set<string>();
    for (let seed = 1; seed <= 10; seed++) distinct.add(await run(seed));
    expect(distinct.size).toBeGreaterThan(5);
  });

  it("a crash without a seed draws from the file system's own seed", async () => {
    const run = async (seed: number) => {
      const fs = new MemoryFileSystem({ seed });
      await busyWorkload(fs);
      fs.crash();
      await busyWorkload(fs).catch(() => undefined);
      fs.crash();
      return snapshot(fs);
    };
    expect(await run(7)).toBe(await run(7));
    expect(new Set([await run(1), await run(2), await run(3)]).size).toBeGreaterThan(1);
  });
});

describe("MemoryFileSystem faults", () => {
  it("ENOSPC after k bytes leaves exactly that prefix in the file, unsynced", async () => {
    const fs = new MemoryFileSystem();
    await createFile(fs, "/f", "head", true);
    const file = await fs.open("/f", { write: true });
    fs.faults.failNext({ op: "write", code: "ENOSPC", partialBytes: 3 });
    await expectCode(file.write(bytes("abcdef"), 4), "ENOSPC");
    expect(await file.size()).toBe(7);
    expect(contentOf(fs, "/f")).toBe("headabc");
    expect(fs.faults.fired).toEqual([
      { mutation: fs.mutationCount, op: "write", path: "/f", code: "ENOSPC" },
    ]);
    // One-shot: the next write lands whole.
    await file.write(bytes("XY"), 7);
    expect(contentOf(fs, "/f")).toBe("headabcXY");
    await file.close();
    fs.crash({ mode: "dropAll" });
    expect(contentOf(fs, "/f")).toBe("head");
  });

  it("failNext fails only the named operation on a matching path", async () => {
    const fs = new MemoryFileSystem();
    const log = await fs.open("/a.log", { create: true });
    const index = await fs.open("/a.index", { create: true });
    fs.faults.failNext({ op: "write", path: /\.log$/, code: "EIO" });
    await log.sync();
    await index.write(bytes("i"), 0);
    expect(fs.faults.armed).toBe(1);
    await expectCode(log.write(bytes("l"), 0), "EIO");
    expect(await log.size()).toBe(0);
    expect(fs.faults.armed).toBe(0);
    await log.write(bytes("l"), 0);
    fs.faults.failNext({ op: "rename", path: "/b", code: "EIO" });
    await expectCode(fs.rename("/a.log", "/b"), "EIO");
    expect(fs.listTree()).toEqual(["/a.index", "/a.log"]);
    await log.close();
    await index.close();
  });

  it("a lasting fault fails every match until cleared", async () => {
    const fs = new MemoryFileSystem();
    const file = await fs.open("/f", { create: true });
    fs.faults.failNext({ op: "write", code: "ENOSPC", times: Infinity });
    for (let i = 0; i < 3; i++) await expectCode(file.write(bytes("x"), 0), "ENOSPC");
    expect(fs.faults.armed).toBe(1);
    fs.faults.clear();
    await file.write(bytes("x"), 0);
    expect(fs.faults.fired.length).toBe(3);
    await file.close();
  });

  it("a failed fsync drops the dirty data: still readable, but lost at a crash even after a later good sync", async () => {
    const fs = new MemoryFileSystem();
    await createFile(fs, "/f", "abc", true);
    const file = await fs.open("/f", { write: true });
    await file.write(bytes("def"), 3);
    fs.faults.failNext({ op: "sync", code: "EIO" });
    await expectCode(file.sync(), "EIO");
    expect(contentOf(fs, "/f")).toBe("abcdef");
    await file.write(bytes("ghi"), 6);
    await file.sync();
    await file.close();
    fs.crash({ mode: "keepAll" });
    expect([...fs.readFileSync("/f")]).toEqual([...bytes("abc"), 0, 0, 0, ...bytes("ghi")]);
  });

  it("a failed fsync that keeps dirty data (per fault or per file system) leaves it for the next sync", async () => {
    for (const [options, fault] of [
      [{}, { dropDirtyData: false }],
      [{ failedSyncDropsDirtyData: false }, {}],
    ] as const) {
      const fs = new MemoryFileSystem(options);
      await createFile(fs, "/f", "abc", true);
      const file = await fs.open("/f", { write: true });
      await file.write(bytes("def"), 3);
      fs.faults.failNext({ op: "sync", code: "EIO", ...fault });
      await expectCode(file.sync(), "EIO");
      await file.sync();
      await file.close();
      fs.crash({ mode: "dropAll" });
      expect(contentOf(fs, "/f")).toBe("abcdef");
    }
  });

  it("a failed truncate, syncDir or create changes nothing", async () => {
    const fs = new MemoryFileSystem();
    await createFile(fs, "/f", "abcdef", false);
    const file = await fs.open("/f", { write: true });
    fs.faults.failNext({ op: "truncate", code: "EIO" });
    await expectCode(file.truncate(1), "EIO");
    expect(await file.size()).toBe(6);
    await file.close();
    fs.faults.failNext({ op: "create", code: "EIO" });
    await expectCode(fs.open("/g", { create: true }), "EIO");
    fs.faults.failNext({ op: "syncDir", code: "EIO" });
    await expectCode(fs.syncDir("/"), "EIO");
    expect(fs.listTree()).toEqual(["/f"]);
    fs.crash({ mode: "dropAll" });
    expect(fs.listTree()).toEqual([]);
  });

  it("mutationCount counts every mutating call, failed or not, and nothing else", async () => {
    const fs = new MemoryFileSystem();
    const file = await fs.open("/f", { create: true }); // 1
    await file.write(bytes("abc"), 0); // 2
    await file.read(new Uint8Array(3), 0);
    await file.size();
    await fs.stat("/f");
    await fs.readdir("/");
    const reader = await fs.open("/f");
    await reader.close();
    await file.sync(); // 3
    await expectCode(fs.unlink("/missing"), "ENOENT"); // 4
    await fs.mkdir("/d"); // 5
    await fs.syncDir("/"); // 6
    await file.close();
    expect(fs.mutationCount).toBe(6);
  });

  it("failNth fails exactly the nth mutation, swept over every step of a workload", async () => {
    const prepare = async () => {
      const fs = new MemoryFileSystem();
      fs.writeFileSync("/f", bytes("0123456789"));
      fs.writeFileSync("/r", bytes("r"));
      fs.writeFileSync("/u", bytes("u"));
      fs.writeFileSync("/t/deep/x", bytes("x"));
      const handle = await fs.open("/f", { write: true });
      return { fs, handle };
    };
    const steps: ((fs: MemoryFileSystem, h: FileHandle) => Promise<unknown>)[] = [
      (_, h) => h.write(bytes("ab"), 0),
      (_, h) => h.sync(),
      (_, h) => h.truncate(4),
      (fs) => fs.open("/g", { create: true }).then((g) => g.close()),
      (fs) => fs.mkdir("/d/e"),
      (fs) => fs.syncDir("/"),
      (fs) => fs.rename("/r", "/r2"),
      (fs) => fs.unlink("/u"),
      (fs) => fs.removeTree("/t"),
      (_, h) => h.write(bytes("cd"), 10),
    ];
    {
      const { fs, handle } = await prepare();
      for (const step of steps) await step(fs, handle);
      expect(fs.mutationCount).toBe(steps.length);
    }
    for (let n = 1; n <= steps.length; n++) {
      const { fs, handle } = await prepare();
      fs.faults.failNth({ n, code: "EIO" });
      const failed: number[] = [];
      for (const [i, step] of steps.entries()) {
        await step(fs, handle).catch((err: unknown) => {
          expect((err as FsError).code).toBe("EIO");
          failed.push(i + 1);
        });
      }
      expect(failed).toEqual([n]);
      expect(fs.faults.fired.map((f) => f.mutation)).toEqual([n]);
    }
  });

  it("failNth counts from the moment it is armed, and a crash disarms it", async () => {
    const fs = new MemoryFileSystem();
    await fs.mkdir("/a");
    await fs.mkdir("/b");
    fs.faults.failNth({ n: 2, code: "EIO" });
    await fs.mkdir("/c");
    await expectCode(fs.mkdir("/d"), "EIO");
    fs.faults.failNth({ n: 1, code: "EIO" });
    fs.faults.failNext({ op: "mkdir", code: "EIO" });
    fs.crash({ mode: "keepAll" });
    expect(fs.faults.armed).toBe(0);
    await fs.mkdir("/e");
    expect(fs.listTree()).toEqual(["/a/", "/b/", "/c/", "/e/"]);
  });
});

describe("MemoryFileSystem power cuts, boots and jitter", () => {
  it("powerCutAtMutation: the nth mutation never happens, and every later call fails with EIO", async () => {
    const disk = new MemoryFileSystem();
    const seen: string[] = [];
    const cuts: number[] = [];
    const fs = new MemoryFileSystem({
      disk,
      powerCutAtMutation: 3,
      onMutation: (m) => seen.push(`${m.op} ${m.path}${m.detail}`),
      onPowerCut: (e) => cuts.push(e.mutation),
    });
    await fs.mkdir("/a");
    const file = await fs.open("/a/f", { create: true });
    await expect(file.write(bytes("xy"), 0)).rejects.toThrow(/lost power/);
    expect(fs.poweredOff).toBe(true);
    expect(cuts).toEqual([3]);
    expect(seen).toEqual(["mkdir /a", "create /a/f", "write /a/f 2 bytes at 0"]);
    await expectCode(file.read(new Uint8Array(2), 0), "EIO");
    await expectCode(file.sync(), "EIO");
    await expectCode(fs.readdir("/a"), "EIO");
    await expectCode(fs.stat("/a"), "EIO");
    await expectCode(fs.open("/a/f"), "EIO");
    await expectCode(fs.mkdir("/b"), "EIO");
    await file.close(); // closing never fails
    expect(fs.bootMutationCount).toBe(3); // nothing is counted after the cut
    expect(disk.mutationCount).toBe(2); // the cut one never reached the disk
    // Without crashAtPowerCut the disk keeps its state until the test crashes it.
    expect(disk.listTree()).toEqual(["/a/", "/a/f"]);
    disk.crash({ mode: "dropAll" });
    expect(disk.listTree()).toEqual([]);
    expect(fs.poweredOff).toBe(true); // a dead boot stays dead
  });

  it("crashAtPowerCut crashes the disk at the cut; armPowerCut counts from now, and null disarms it", async () => {
    const disk = new MemoryFileSystem();
    await createFile(disk, "/old", "durable", true);
    const reports: (number | null)[] = [];
    const fs = new MemoryFileSystem({
      disk,
      onPowerCut: (e) => reports.push(e.report === null ? null : e.report.writesDropped),
    });
    await fs.mkdir("/x");
    fs.armPowerCut({ inMutations: 1 });
    fs.armPowerCut(null);
    await createFile(fs, "/x/f", "kept", false);
    fs.armPowerCut({ inMutations: 2, crash: { mode: "dropAll" } });
    const file = await fs.open("/x/g", { create: true });
    await expectCode(file.write(bytes("lost"), 0), "EIO");
    expect(reports).toEqual([0]);
    expect(disk.listTree()).toEqual(["/old"]); // the crash dropped every unsynced entry
    expect(fs.bootMutationCount).toBe(6); // mkdir; create, write, sync; create, write (cut)
  });

  it("cutPower cuts between calls; crash() brings the power of its own instance back", async () => {
    const fs = new MemoryFileSystem();
    await fs.mkdir("/a");
    expect(fs.cutPower()).toBeNull();
    await expectCode(fs.mkdir("/b"), "EIO");
    expect(fs.crash({ mode: "keepAll" }).entriesKept).toBe(1);
    expect(fs.poweredOff).toBe(false);
    await fs.mkdir("/b");
    expect(fs.listTree()).toEqual(["/a/", "/b/"]);
    const report = fs.cutPower({ mode: "dropAll" });
    expect(report?.entriesReverted).toBe(1); // /b; /a became durable at the first crash
    expect(fs.listTree()).toEqual(["/a/"]);
  });

  it("a boot shares the disk's files and crash generator but not its power", async () => {
    const disk = new MemoryFileSystem({ seed: 9 });
    const first = new MemoryFileSystem({ disk });
    await createFile(first, "/f", "abc", true);
    first.cutPower();
    expect(contentOf(disk, "/f")).toBe("abc");
    const second = new MemoryFileSystem({ disk });
    expect(await second.readdir("/")).toEqual(["f"]);
    await expectCode(first.readdir("/"), "EIO");
  });

  it("jitter delays calls by seeded microtask turns, so equal seeds give equal interleavings", async () => {
    async function order(seed: number): Promise<string> {
      const fs = new MemoryFileSystem({ jitter: { seed, maxTurns: 4 } });
      const done: string[] = [];
      await Promise.all(
        ["a", "b", "c", "d", "e", "f"].map((name) =>
          fs.mkdir(`/${name}`).then(() => done.push(name)),
        ),
      );
      expect(fs.listTree()).toHaveLength(6);
      return done.join("");
    }
    expect(await order(1)).toBe(await order(1));
    const orders = new Set<string>();
    for (let seed = 1; seed <= 20; seed++) orders.add(await order(seed));
    expect(orders.size).toBeGreaterThan(1);
    // Without jitter a call does not wait: the order is the call order.
    const fs = new MemoryFileSystem();
    const done: string[] = [];
    await Promise.all(["a", "b", "c"].map((n) => fs.mkdir(`/${n}`).then(() => done.push(n))));
    expect(done).toEqual(["a", "b", "c"]);
  });
});

describe("MemoryFileSystem helpers", () => {
  it("writeFileSync makes a durable fixture and readFileSync and listTree show it", async () => {
    const fs = new MemoryFileSystem();
    fs.writeFileSync("/data/topics/t/0/00000000000000000000.log", bytes("abc"));
    expect(fs.mutationCount).toBe(0);
    expect(fs.listTree()).toEqual([
      "/data/",
      "/data/topics/",
      "/data/topics/t/",
      "/data/topics/t/0/",
      "/data/topics/t/0/00000000000000000000.log",
    ]);
    expect(fs.listTree("/data/topics/t")).toEqual([
      "/data/topics/t/0/",
      "/data/topics/t/0/00000000000000000000.log",
    ]);
    fs.crash({ mode: "dropAll" });
    expect(contentOf(fs, "/data/topics/t/0/00000000000000000000.log")).toBe("abc");
    expect(() => fs.readFileSync("/data")).toThrow(FsError);
    expect(() => fs.readFileSync("/nope")).toThrow(/ENOENT/);
  });

  it("relative paths and dot segments name the same entries as absolute ones", async () => {
    const fs = new MemoryFileSystem();
    await fs.mkdir("a/b");
    await createFile(fs, "/a/./b/../b/f", "x", true);
    expect(await fs.readdir("a/b")).toEqual(["f"]);
    expect(fs.listTree()).toEqual(["/a/", "/a/b/", "/a/b/f"]);
  });
});
