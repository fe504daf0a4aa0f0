/** Runs the FileSystem conformance suite against the real disk, in a fresh temp directory per test. */
import * as nodeFs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { fileSystemConformance } from "../fs/conformance.ts";

fileSystemConformance("NodeFileSystem", async () => {
  const root = nodeFs.mkdtempSync(path.join(os.tmpdir(), "es-broker-fs-"));
  return {
    fs: new NodeFileSystem(),
    root,
    async cleanup() {
      nodeFs.rmSync(root, { recursive: true, force: true });
    },
  };
});
