/** The CLI's API key file (`src/cli/connection.ts`): read, and a warning for a file others may access. */
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/cli/args.ts";
import { readApiKey } from "../../src/cli/connection.ts";
import { tempDir } from "../helpers/tmp.ts";

const key = `esb_0123456789abcdef_${"A".repeat(43)}`;

/** Writes `key` into a new file of `mode`; reads it back with readApiKey, collecting warnings. */
function readWithMode(
  mode: number,
  name = "k.key",
): { key: string | undefined; warnings: string[]; path: string } {
  const path = join(tempDir().dir, name);
  writeFileSync(path, `${key}\n`);
  chmodSync(path, mode); // whatever the umask
  const warnings: string[] = [];
  const read = readApiKey({ "api-key-file": path }, {}, (line) => warnings.push(line));
  return { key: read, warnings, path };
}

describe.skipIf(process.platform === "win32")("readApiKey", () => {
  it("reads a 0600 or 0400 key file without a word", () => {
    for (const mode of [0o600, 0o400]) {
      const r = readWithMode(mode);
      expect(r.key).toBe(key);
      expect(r.warnings).toEqual([]);
    }
  });

  it("uses a key file that group or others may access, warning once with the file and its mode", () => {
    const r = readWithMode(0o644);
    expect(r.key).toBe(key);
    expect(r.warnings).toEqual([
      `es-broker: warning: --api-key-file ${r.path} has mode 0644: other users can read the key; make it 0600 (chmod 600 ${r.path})\n`,
    ]);
    // A second read of the same file (a reconnect) does not repeat it.
    const again: string[] = [];
    expect(readApiKey({ "api-key-file": r.path }, {}, (line) => again.push(line))).toBe(key);
    expect(again).toEqual([]);
    expect(readWithMode(0o640).warnings[0]).toMatch(/ has mode 0640: other users can read the key/);
    expect(readWithMode(0o620).warnings[0]).toMatch(
      / has mode 0620: other users can change the key/,
    );
    // The key itself is never in the warning.
    expect(r.warnings.join("")).not.toContain(key.slice(21));
  });

  it("refuses an empty or unreadable file, naming it", () => {
    const { dir } = tempDir();
    const empty = join(dir, "empty.key");
    writeFileSync(empty, "\n", { mode: 0o600 });
    expect(() => readApiKey({ "api-key-file": empty }, {})).toThrow(UsageError);
    expect(() => readApiKey({ "api-key-file": join(dir, "missing.key") }, {})).toThrow(
      /cannot read --api-key-file .*missing\.key/,
    );
  });
});
