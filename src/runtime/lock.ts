/**
 * The data-directory lock: one broker per data directory. Two brokers appending to the same files
 * would overwrite each other's acknowledged records, so `serve` takes this lock before recovery
 * touches anything, and `check` refuses a directory a live broker holds.
 *
 * The lock is the file `<dataDir>/broker.lock` (mode 0600), created exclusively and holding the
 * owner's process id. A lock whose process no longer exists (the broker was SIGKILLed), or has
 * exited and waits only to be reaped (a zombie), is stale and is taken over. This works the same on Node, Deno and Bun (no native flock needed); the one
 * gap is a reused process id, which only makes a start refuse until the file is removed.
 */
import * as fs from "node:fs";

/** File name of the lock inside the data directory. */
export const lockFileName = "broker.lock";

/** A held lock. */
export interface DataDirLock {
  /** Removes the lock file (on shutdown). Safe to call twice. */
  release(): void;
}

/** Thrown when another live process holds the lock. */
export class DataDirInUseError extends Error {
  override name = "DataDirInUseError";
  constructor(
    readonly dataDir: string,
    readonly pid: number,
  ) {
    super(
      `data directory ${dataDir} is in use by process ${pid} (another broker?); stop it first, or remove ${dataDir}/${lockFileName} if that process is not a broker`,
    );
  }
}

/** The pid in a lock file if that process is alive, else null (missing, unreadable or stale lock). */
export function lockHolder(dataDir: string): number | null {
  let text: string;
  try {
    text = fs.readFileSync(`${dataDir}/${lockFileName}`, "utf8");
  } catch {
    return null;
  }
  const pid = Number(text.trim());
  if (!Number.isSafeInteger(pid) || pid <= 0) return null;
  if (pid === process.pid) return pid;
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM" ? pid : null;
  }
  return isZombie(pid) ? null : pid;
}

/**
 * Whether `pid` has exited and waits only to be reaped by its parent (Linux `/proc`; false where
 * there is no `/proc`). Such a process holds no files and writes nothing more: a broker SIGKILLed
 * a moment ago whose supervisor has not yet called wait() must not block its own restart.
 */
function isZombie(pid: number): boolean {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return false;
  }
  // "pid (comm) S ...": the command name may hold spaces and parentheses, the state follows the last ")".
  const state = stat.charAt(stat.lastIndexOf(")") + 2);
  return state === "Z" || state === "X";
}

/**
 * Takes the lock of `dataDir` (which must exist).
 * @throws DataDirInUseError if a live process holds it; FsError-like errors from node:fs otherwise.
 */
export function acquireDataDirLock(dataDir: string): DataDirLock {
  const path = `${dataDir}/${lockFileName}`;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = fs.openSync(
        path,
        fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL,
        0o600,
      );
      try {
        fs.fchmodSync(fd, 0o600);
        fs.writeSync(fd, `${process.pid}\n`);
      } finally {
        fs.closeSync(fd);
      }
      let released = false;
      return {
        release() {
          if (released) return;
          released = true;
          try {
            if (fs.readFileSync(path, "utf8").trim() === String(process.pid)) fs.unlinkSync(path);
          } catch {
            // Already gone: nothing to release.
          }
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = lockHolder(dataDir);
      if (holder !== null) throw new DataDirInUseError(dataDir, holder);
      // Stale: its process is gone. Remove it and try again.
      try {
        fs.unlinkSync(path);
      } catch (unlinkErr) {
        if ((unlinkErr as NodeJS.ErrnoException).code !== "ENOENT") throw unlinkErr;
      }
    }
  }
  throw new Error(`cannot take the lock ${path}: it keeps reappearing`);
}
