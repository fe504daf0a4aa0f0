/** Opening a data directory from the CLI (`serve`, and `keys` offline). */
import { dirname } from "node:path";
import type { NodeFileSystem } from "../runtime/node-fs.ts";

/**
 * Creates `dataDir` and any missing parents durably (each new directory's parent fsynced), so a
 * crash right after cannot lose the directory the broker then writes into.
 * @throws Error if `dataDir` exists and is not a directory, or "Cannot create the data directory
 *   DIR: …" with the file system's error (its `cause`) if creating it fails.
 */
export async function ensureDataDir(nodeFs: NodeFileSystem, dataDir: string): Promise<void> {
  const existing = await nodeFs.stat(dataDir);
  if (existing !== null && !existing.isDirectory)
    throw new Error(`Cannot use data directory ${dataDir}: it is not a directory`);
  const missing: string[] = [];
  for (
    let dir = dataDir;
    (await nodeFs.stat(dir)) === null && dirname(dir) !== dir;
    dir = dirname(dir)
  )
    missing.push(dir);
  try {
    await nodeFs.mkdir(dataDir);
    for (const dir of missing.reverse()) await nodeFs.syncDir(dirname(dir));
  } catch (err) {
    // The file system's own message names the call and the path, not what the broker was doing.
    throw new Error(
      `Cannot create the data directory ${dataDir}: ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    );
  }
}
