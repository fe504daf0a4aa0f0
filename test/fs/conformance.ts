/**
 * The one FileSystem conformance suite: every implementation of `FileSystem` (src/fs/types.ts) runs
 * these same tests, so the simulated disk cannot drift from the real one. Call
 * {@link fileSystemConformance} from a `*.test.ts` file with a factory for a fresh, empty root.
 *
 * It only checks behaviour both implementations must share; crash and fault behaviour of the
 * simulated disk is tested in test/unit/fs-memory.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FsError, readWholeFile, type FileSystem } from "../../src/fs/types.ts";

/** A fresh file system and an empty directory in it (absolute path, no trailing "/"). */
export interface ConformanceFixture {
  fs: FileSystem;
  root: string;
  cleanup(): Promise<void>;
}

const utf8 = new TextEncoder();
const text = new TextDecoder();

/** Expects `promise` to reject with an FsError carrying `code`. */
async function expectCode(promise: Promise<unknown>, code: string): Promise<void> {
  let caught: unknown;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  expect(caught, `expected a rejection with ${code}`).toBeInstanceOf(FsError);
  expect((caught as FsError).code).toBe(code);
}

/** Index of the first byte where `a` and `b` differ, or -1 if they are equal. */
function firstDifference(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/** Runs `fn` with the process umask set to `mask`, restoring it afterwards. */
async function withUmask(mask: number, fn: () => Promise<void>): Promise<void> {
  const previous = process.umask(mask);
  try {
    await fn();
  } finally {
    process.umask(previous);
  }
}

/** Registers the conformance tests for one implementation under `describe(name)`. */
export function fileSystemConformance(
  name: string,
  makeFs: () => Promise<ConformanceFixture>,
): void {
  describe(`FileSystem conformance: ${name}`, () => {
    let fixture: ConformanceFixture;
    let fs: FileSystem;
    let root: string;
    const at = (path: string) => `${root}/${path}`;

    async function writeFile(path: string, content: string): Promise<void> {
      const file = await fs.open(at(path), { create: true });
      try {
        await file.truncate(0);
        await file.write(utf8.encode(content), 0);
      } finally {
        await file.close();
      }
    }

    async function readFile(path: string): Promise<string> {
      return text.decode(await readWholeFile(fs, at(path), 1 << 20));
    }

    beforeEach(async () => {
      fixture = await makeFs();
      fs = fixture.fs;
      root = fixture.root;
    });

    afterEach(async () => {
      await fixture.cleanup();
    });

    describe("open", () => {
      it("rejects a missing file with ENOENT unless asked to create it", async () => {
        await expectCode(fs.open(at("missing")), "ENOENT");
        await expectCode(fs.open(at("missing"), { write: true }), "ENOENT");
        expect(await fs.stat(at("missing"))).toBeNull();
      });

      it("creates an empty file with mode 0600", async () => {
        const file = await fs.open(at("new"), { create: true });
        expect(await file.size()).toBe(0);
        await file.close();
        expect(await fs.stat(at("new"))).toEqual({ size: 0, isDirectory: false, mode: 0o600 });
      });

      it("with exclusive rejects an existing file with EEXIST and leaves it alone", async () => {
        await writeFile("x", "keep");
        await expectCode(fs.open(at("x"), { create: true, exclusive: true }), "EEXIST");
        expect(await readFile("x")).toBe("keep");
      });

      it("with create but not exclusive opens an existing file without truncating it", async () => {
        await writeFile("x", "keep");
        const file = await fs.open(at("x"), { create: true });
        expect(await file.size()).toBe(4);
        await file.close();
        expect(await readFile("x")).toBe("keep");
      });

      it("rejects a missing parent with ENOENT and a file as parent with ENOTDIR", async () => {
        await expectCode(fs.open(at("no/such"), { create: true }), "ENOENT");
        await writeFile("plain", "");
        await expectCode(fs.open(at("plain/child"), { create: true }), "ENOTDIR");
      });

      it("rejects opening a directory for writing with EISDIR", async () => {
        await fs.mkdir(at("d"));
        await expectCode(fs.open(at("d"), { write: true }), "EISDIR");
        await expectCode(fs.open(at("d"), { create: true }), "EISDIR");
      });

      it("gives a read-only handle that refuses writes with EBADF and keeps the content", async () => {
        await writeFile("ro", "abc");
        const file = await fs.open(at("ro"));
        await expectCode(file.write(utf8.encode("zzz"), 0), "EBADF");
        await expect(file.truncate(0)).rejects.toBeInstanceOf(FsError);
        await file.close();
        expect(await readFile("ro")).toBe("abc");
      });
    });

    describe("read and write", () => {
      it("writes at positions and reads back what was written", async () => {
        const file = await fs.open(at("f"), { create: true });
        await file.write(utf8.encode("hello world"), 0);
        await file.write(utf8.encode("W"), 6);
        const buf = new Uint8Array(5);
        expect(await file.read(buf, 6)).toBe(5);
        expect(text.decode(buf)).toBe("World");
        expect(await file.size()).toBe(11);
        await file.close();
        expect(await readFile("f")).toBe("hello World");
      });

      it("reads fewer bytes at the end of the file and none past it", async () => {
        await writeFile("f", "abcdef");
        const file = await fs.open(at("f"));
        const buf = new Uint8Array(4);
        expect(await file.read(buf, 4)).toBe(2);
        expect(text.decode(buf.subarray(0, 2))).toBe("ef");
        expect(await file.read(buf, 6)).toBe(0);
        expect(await file.read(buf, 100)).toBe(0);
        expect(await file.read(new Uint8Array(0), 0)).toBe(0);
        await file.close();
      });

      it("zero-fills the gap when writing past the end", async () => {
        const file = await fs.open(at("f"), { create: true });
        await file.write(utf8.encode("ab"), 0);
        await file.write(utf8.encode("cd"), 6);
        expect(await file.size()).toBe(8);
        const buf = new Uint8Array(8);
        expect(await file.read(buf, 0)).toBe(8);
        expect([...buf]).toEqual([97, 98, 0, 0, 0, 0, 99, 100]);
        await file.close();
      });

      it("zero-fills a gap over bytes that a truncate removed", async () => {
        const file = await fs.open(at("f"), { create: true });
        await file.write(utf8.encode("abcdef"), 0);
        await file.truncate(2);
        await file.write(utf8.encode("x"), 5);
        const buf = new Uint8Array(6);
        expect(await file.read(buf, 0)).toBe(6);
        expect([...buf]).toEqual([97, 98, 0, 0, 0, 120]);
        await file.close();
      });

      it("round-trips a megabyte written in one call", async () => {
        const big = new Uint8Array(1 << 20);
        for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 0xff;
        const file = await fs.open(at("big"), { create: true });
        await file.write(big, 0);
        await file.sync();
        await file.close();
        const back = await readWholeFile(fs, at("big"), big.length);
        expect(back.length).toBe(big.length);
        expect(firstDifference(back, big)).toBe(-1);
        expect((await fs.stat(at("big")))?.size).toBe(big.length);
      });

      it("shows a write through one handle to another handle on the same file", async () => {
        const a = await fs.open(at("shared"), { create: true });
        const b = await fs.open(at("shared"));
        await a.write(utf8.encode("xyz"), 0);
        const buf = new Uint8Array(3);
        expect(await b.read(buf, 0)).toBe(3);
        expect(text.decode(buf)).toBe("xyz");
        await a.close();
        await b.close();
      });
    });

    describe("truncate, size and sync", () => {
      it("truncate shrinks the file and extends it with zeros", async () => {
        const file = await fs.open(at("t"), { create: true });
        await file.write(utf8.encode("abcdef"), 0);
        await file.truncate(2);
        expect(await file.size()).toBe(2);
        await file.truncate(5);
        expect(await file.size()).toBe(5);
        const buf = new Uint8Array(5);
        expect(await file.read(buf, 0)).toBe(5);
        expect([...buf]).toEqual([97, 98, 0, 0, 0]);
        await file.close();
        expect((await fs.stat(at("t")))?.size).toBe(5);
      });

      it("sync resolves on a written file and keeps its content", async () => {
        const file = await fs.open(at("s"), { create: true });
        await file.write(utf8.encode("durable"), 0);
        await file.sync();
        await file.sync();
        await file.close();
        expect(await readFile("s")).toBe("durable");
      });
    });

    describe("close", () => {
      it("may be called twice, and every later call rejects with EBADF", async () => {
        const file = await fs.open(at("c"), { create: true });
        await file.close();
        await file.close();
        await expectCode(file.read(new Uint8Array(1), 0), "EBADF");
        await expectCode(file.write(new Uint8Array(1), 0), "EBADF");
        await expectCode(file.size(), "EBADF");
        await expectCode(file.sync(), "EBADF");
        await expectCode(file.truncate(0), "EBADF");
      });
    });

    describe("directories", () => {
      it("readdir lists names sorted, by code unit", async () => {
        for (const n of ["b", "a", "C", "10", "9", "a.log"]) await writeFile(n, "");
        await fs.mkdir(at("dir"));
        expect(await fs.readdir(root)).toEqual(["10", "9", "C", "a", "a.log", "b", "dir"]);
        expect(await fs.readdir(at("dir"))).toEqual([]);
      });

      it("readdir rejects a missing directory with ENOENT and a file with ENOTDIR", async () => {
        await expectCode(fs.readdir(at("missing")), "ENOENT");
        await writeFile("plain", "");
        await expectCode(fs.readdir(at("plain")), "ENOTDIR");
      });

      it("mkdir creates missing parents, each mode 0700, and succeeds if the directory exists", async () => {
        await fs.mkdir(at("a/b/c"));
        for (const p of ["a", "a/b", "a/b/c"]) {
          expect(await fs.stat(at(p))).toEqual({ size: 0, isDirectory: true, mode: 0o700 });
        }
        await writeFile("a/b/c/f", "x");
        await fs.mkdir(at("a/b/c"));
        await fs.mkdir(at("a"));
        expect(await fs.readdir(at("a/b/c"))).toEqual(["f"]);
      });

      it("mkdir rejects a path that is a file with EEXIST and one below a file with ENOTDIR", async () => {
        await writeFile("plain", "");
        await expectCode(fs.mkdir(at("plain")), "EEXIST");
        await expectCode(fs.mkdir(at("plain/sub")), "ENOTDIR");
      });

      // Umask 0 would widen a default 0666 / 0777; 0o077 is common; 0o277 would narrow 0700 to 0500.
      for (const mask of [0, 0o077, 0o277]) {
        it(`creates files 0600 and directories 0700 under umask ${mask.toString(8).padStart(3, "0")}`, async () => {
          await withUmask(mask, async () => {
            await fs.mkdir(at("m/n"));
            const file = await fs.open(at("m/n/f"), { create: true, exclusive: true });
            await file.close();
          });
          expect((await fs.stat(at("m")))?.mode).toBe(0o700);
          expect((await fs.stat(at("m/n")))?.mode).toBe(0o700);
          expect((await fs.stat(at("m/n/f")))?.mode).toBe(0o600);
        });
      }

      it("syncDir resolves on the root and on a new subdirectory, and rejects a missing one with ENOENT", async () => {
        await fs.mkdir(at("d"));
        await writeFile("d/f", "x");
        await fs.syncDir(at("d"));
        await fs.syncDir(root);
        await expectCode(fs.syncDir(at("missing")), "ENOENT");
        expect(await fs.readdir(at("d"))).toEqual(["f"]);
      });
    });

    describe("names", () => {
      it("accepts a name of 255 bytes and rejects one of 256 with ENAMETOOLONG, in open, mkdir and rename", async () => {
        const longest = "n".repeat(255);
        const over = "n".repeat(256);
        await (await fs.open(at(longest), { create: true })).close();
        await fs.mkdir(at(`d${longest.slice(1)}`));
        await expectCode(fs.open(at(over), { create: true }), "ENAMETOOLONG");
        await expectCode(fs.mkdir(at(over)), "ENAMETOOLONG");
        await expectCode(fs.rename(at(longest), at(over)), "ENAMETOOLONG");
        expect(await fs.readdir(root)).toEqual([`d${longest.slice(1)}`, longest]);
      });
    });

    describe("stat", () => {
      it("resolves null for a missing path and describes files and directories", async () => {
        expect(await fs.stat(at("missing"))).toBeNull();
        await writeFile("f", "12345");
        await fs.mkdir(at("d"));
        expect(await fs.stat(at("f"))).toEqual({ size: 5, isDirectory: false, mode: 0o600 });
        expect(await fs.stat(at("d"))).toEqual({ size: 0, isDirectory: true, mode: 0o700 });
      });

      it("rejects a path below a file with ENOTDIR", async () => {
        await writeFile("f", "");
        await expectCode(fs.stat(at("f/x")), "ENOTDIR");
      });
    });

    describe("rename", () => {
      it("moves a file to a new name", async () => {
        await writeFile("a", "A");
        await fs.rename(at("a"), at("b"));
        expect(await fs.stat(at("a"))).toBeNull();
        expect(await readFile("b")).toBe("A");
      });

      it("replaces an existing file, which stays readable through a handle opened before", async () => {
        await writeFile("old", "old content");
        await writeFile("tmp", "new");
        const held = await fs.open(at("old"));
        await fs.rename(at("tmp"), at("old"));
        expect(await fs.readdir(root)).toEqual(["old"]);
        expect(await readFile("old")).toBe("new");
        const buf = new Uint8Array(11);
        expect(await held.read(buf, 0)).toBe(11);
        expect(text.decode(buf)).toBe("old content");
        await held.close();
      });

      it("keeps a handle on the moved file working under its new name", async () => {
        const file = await fs.open(at("a"), { create: true });
        await fs.mkdir(at("d"));
        await fs.rename(at("a"), at("d/b"));
        await file.write(utf8.encode("moved"), 0);
        await file.close();
        expect(await readFile("d/b")).toBe("moved");
      });

      it("moves a directory with its contents, and may replace an empty directory", async () => {
        await fs.mkdir(at("src/inner"));
        await writeFile("src/inner/f", "x");
        await fs.mkdir(at("empty"));
        await fs.rename(at("src"), at("empty"));
        expect(await fs.stat(at("src"))).toBeNull();
        expect(await readFile("empty/inner/f")).toBe("x");
      });

      it("rejects with the right codes", async () => {
        await writeFile("f", "");
        await fs.mkdir(at("d/sub"));
        await fs.mkdir(at("e"));
        await expectCode(fs.rename(at("missing"), at("x")), "ENOENT");
        await expectCode(fs.rename(at("f"), at("nodir/x")), "ENOENT");
        await expectCode(fs.rename(at("f"), at("d")), "EISDIR");
        await expectCode(fs.rename(at("e"), at("f")), "ENOTDIR");
        await expectCode(fs.rename(at("e"), at("d")), "ENOTEMPTY");
        await expectCode(fs.rename(at("d"), at("d/sub/inside")), "EINVAL");
        expect(await fs.readdir(root)).toEqual(["d", "e", "f"]);
      });
    });

    describe("unlink", () => {
      it("removes a file, rejects a missing one with ENOENT and a directory with EISDIR", async () => {
        await writeFile("f", "x");
        await fs.unlink(at("f"));
        expect(await fs.stat(at("f"))).toBeNull();
        await expectCode(fs.unlink(at("f")), "ENOENT");
        await fs.mkdir(at("d"));
        await expectCode(fs.unlink(at("d")), "EISDIR");
      });

      it("leaves an unlinked file readable and writable through a handle opened before", async () => {
        await writeFile("gone", "still here");
        const held = await fs.open(at("gone"), { write: true });
        await fs.unlink(at("gone"));
        expect(await fs.readdir(root)).toEqual([]);
        const buf = new Uint8Array(10);
        expect(await held.read(buf, 0)).toBe(10);
        expect(text.decode(buf)).toBe("still here");
        await held.write(utf8.encode("S"), 0);
        expect(await held.size()).toBe(10);
        expect(await held.read(buf, 0)).toBe(10);
        expect(text.decode(buf)).toBe("Still here");
        await held.close();
        // A new file under the old name is a different file.
        await writeFile("gone", "new");
        expect(await readFile("gone")).toBe("new");
      });
    });

    describe("removeTree", () => {
      it("removes a directory and everything below it", async () => {
        await fs.mkdir(at("t/a/b"));
        await writeFile("t/a/b/f", "x");
        await writeFile("t/g", "y");
        await writeFile("keep", "z");
        await fs.removeTree(at("t"));
        expect(await fs.stat(at("t"))).toBeNull();
        expect(await fs.readdir(root)).toEqual(["keep"]);
      });

      it("succeeds when the path is missing", async () => {
        await fs.removeTree(at("missing"));
        await fs.removeTree(at("missing/deeper"));
        expect(await fs.readdir(root)).toEqual([]);
      });

      it("leaves a file below the tree readable through a handle opened before", async () => {
        await fs.mkdir(at("t"));
        await writeFile("t/f", "held");
        const held = await fs.open(at("t/f"));
        await fs.removeTree(at("t"));
        const buf = new Uint8Array(4);
        expect(await held.read(buf, 0)).toBe(4);
        expect(text.decode(buf)).toBe("held");
        await held.close();
      });
    });
  });
}
