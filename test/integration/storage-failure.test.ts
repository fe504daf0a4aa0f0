/**
 * Which file-system failures reach a client as the retriable `storage_error` (a full disk, an I/O
 * error) and which as `internal` (a name too long, a permission: retrying fails the same way), and
 * how node:fs errors read once wrapped (the errno code once, not twice).
 */
import { describe, expect, it } from "vitest";
import { writeFileSync } from "node:fs";
import { FsError, type FileSystem } from "../../src/fs/types.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { storageFailure } from "../../src/broker/storage-failure.ts";
import { StorageError } from "../../src/storage/errors.ts";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { tempDir } from "../helpers/tmp.ts";
import { wrapFileSystem } from "../helpers/fs-wrap.ts";
import { openTestBroker } from "../helpers/broker.ts";

function fresh(): string {
  return tempDir().dir;
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => null,
    (e: unknown) => e,
  );
}

describe("storageFailure", () => {
  it.each([
    ["ENOSPC", "storage_error"],
    ["EIO", "storage_error"],
    ["EDQUOT", "storage_error"],
    ["EMFILE", "storage_error"],
    ["ENAMETOOLONG", "internal"],
    ["EACCES", "internal"],
    ["EROFS", "internal"],
    ["EEXIST", "internal"],
    ["ENOTDIR", "internal"],
  ])(
    "maps an FsError %s to %s, with the action first and the detail after a colon",
    (code, expected) => {
      const err = storageFailure(
        'Cannot delete topic "t"',
        new FsError(code, "/d/x", `${code}: something, open '/d/x'`),
      );
      expect(err.kind.code).toBe(expected);
      expect(err.message).toBe(`Cannot delete topic "t": ${code}: something, open '/d/x'`);
    },
  );

  it("looks through a StorageError's cause, passes a BrokerError through, and calls a plain Error internal", () => {
    const wrapped = new StorageError("write_failed", "Cannot append: write failed", {
      cause: new FsError("ENOSPC", "/x"),
    });
    expect(storageFailure("Cannot produce", wrapped).kind.code).toBe("storage_error");
    const named = new StorageError("write_failed", "Cannot roll", {
      cause: new FsError("ENAMETOOLONG", "/x"),
    });
    expect(storageFailure("Cannot produce", named).kind.code).toBe("internal");
    const broker = storageFailure(
      "x",
      new BrokerError({ code: "topic_exists", tcp: 4, http: 409, retriable: false }, "exists"),
    );
    expect(broker.kind.code).toBe("topic_exists");
    expect(storageFailure("x", new Error("bug")).kind.code).toBe("internal");
  });
});

describe("NodeFileSystem errors", () => {
  it("name the errno code once", async () => {
    const dir = fresh();
    const fs = new NodeFileSystem();
    const long = await failure(fs.open(`${dir}/${"n".repeat(256)}`, { create: true }));
    expect(long).toBeInstanceOf(FsError);
    expect((long as FsError).code).toBe("ENAMETOOLONG");
    expect((long as FsError).message).toMatch(/^ENAMETOOLONG: name too long, open '/);
    writeFileSync(`${dir}/file`, "x");
    const exists = await failure(fs.mkdir(`${dir}/file`));
    expect((exists as FsError).message).toMatch(/^EEXIST: file already exists, mkdir '/);
  });
});

describe("the broker", () => {
  /** NodeFileSystem whose next rename fails with `code` (null: none). */
  function failingRename(state: { code: string | null }): FileSystem {
    const inner = new NodeFileSystem();
    return wrapFileSystem(
      inner,
      {},
      {
        rename: async (from, to) => {
          const code = state.code;
          state.code = null;
          if (code !== null)
            throw new FsError(code, from, `${code}: injected, rename '${from}' -> '${to}'`);
          return inner.rename(from, to);
        },
      },
    );
  }

  it("answers storage_error for a full disk and internal for a name too long, in topic config updates and group commits", async () => {
    const state: { code: string | null } = { code: null };
    const { broker: b } = await openTestBroker({
      fs: failingRename(state),
      dataDir: `${fresh()}/data`,
      cleanupIntervalMs: 0,
      // Without a disk reserve: with one, an ENOSPC write is tried again in the space it frees
      // (test/integration/disk-full.test.ts).
      diskReserveBytes: 0,
    });
    await b.createTopic({ name: "t", partitions: 1 });
    const cases: [string, string][] = [
      ["ENOSPC", "storage_error"],
      ["ENAMETOOLONG", "internal"],
    ];
    for (const [code, expected] of cases) {
      state.code = code;
      const config = await failure(b.updateTopicConfig("t", { retention_ms: 1000 }));
      expect((config as BrokerError).kind.code).toBe(expected);
      expect((config as BrokerError).message).toMatch(
        new RegExp(
          `^Cannot update the config of topic "t": writing topic.json failed: ${code}: injected`,
        ),
      );
      state.code = code;
      const commit = await failure(
        b.commitOffsets({ group: "g", offsets: [{ topic: "t", partition: 0, offset: 0 }] }),
      );
      expect((commit as BrokerError).kind.code).toBe(expected);
      expect((commit as BrokerError).message).toMatch(
        new RegExp(`writing the group file failed: ${code}: injected`),
      );
    }
  });
});
