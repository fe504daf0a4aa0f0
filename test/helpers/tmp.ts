/** Temporary directories for tests on the real file system, removed when the test finishes. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { onTestFinished } from "vitest";

/**
 * A fresh temporary directory, removed (recursively) when the current test finishes, after
 * whatever the test registered later (a broker opened on it is closed first). `cleanup` removes it
 * earlier; calling it twice is harmless. Call it inside a test, not in a hook or a describe block.
 */
export function tempDir(prefix = "es-broker-test-"): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  onTestFinished(cleanup);
  return { dir, cleanup };
}
