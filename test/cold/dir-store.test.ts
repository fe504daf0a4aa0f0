/** The ColdStore conformance suite on the directory store (real disk and simulated disk) and on the tests' memory store. */
import { NodeFileSystem } from "../../src/runtime/node-fs.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { DirectoryColdStore } from "../../src/storage/cold-dir-store.ts";
import { tempDir } from "../helpers/tmp.ts";
import { MemoryColdStore } from "../helpers/memory-cold-store.ts";
import { coldStoreConformance } from "./conformance.ts";

coldStoreConformance(
  "DirectoryColdStore on NodeFileSystem",
  async () => {
    const { dir, cleanup } = tempDir("es-broker-cold-");
    return {
      store: new DirectoryColdStore({
        fs: new NodeFileSystem(),
        root: `${dir}/cold`,
        logger: silentLogger,
      }),
      cleanup: async () => cleanup(),
    };
  },
  { largeObjectBytes: 3 * 1024 * 1024 + 17 },
);

coldStoreConformance("DirectoryColdStore on MemoryFileSystem", async () => ({
  store: new DirectoryColdStore({
    fs: new MemoryFileSystem({ seed: 1 }),
    root: "/cold",
    logger: silentLogger,
  }),
  cleanup: async () => {},
}));

coldStoreConformance("MemoryColdStore", async () => ({
  store: new MemoryColdStore(),
  cleanup: async () => {},
}));
