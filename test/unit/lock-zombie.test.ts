import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  acquireDataDirLock,
  DataDirInUseError,
  lockFileName,
  lockHolder,
} from "../../src/runtime/lock.ts";

// A broker SIGKILLed a moment ago stays a zombie until its parent reaps it: its lock must not
// block the restart (docs/operations.md, data-directory lock). The zombie is made with a shell
// whose background child is killed after the shell exec'd into a program that never wait()s.
describe("data-directory lock", () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });

  async function zombiePid(): Promise<number> {
    const sh = spawn("sh", ["-c", "sleep 100 & echo $!; exec sleep 30"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    cleanups.push(() => sh.kill("SIGKILL"));
    const pid = await new Promise<number>((resolve) =>
      sh.stdout.once("data", (d) => resolve(Number(String(d).trim()))),
    );
    // Kill the child only once the shell has exec'd into sleep: a shell still running would reap
    // it, and the zombie would never be seen (the test failed so, now and then).
    for (let i = 0; ; i++) {
      const cmdline = fs.readFileSync(`/proc/${sh.pid}/cmdline`, "utf8");
      if (cmdline.startsWith("sleep\0")) break;
      if (i >= 200) throw new Error(`the shell ${sh.pid} did not exec into sleep: ${cmdline}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    process.kill(pid, "SIGKILL");
    for (let i = 0; i < 100; i++) {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      if (stat.charAt(stat.lastIndexOf(")") + 2) === "Z") return pid;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`process ${pid} did not become a zombie`);
  }

  function dirWithLock(pid: number): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "es-lock-"));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    fs.writeFileSync(path.join(dir, lockFileName), `${pid}\n`);
    return dir;
  }

  it.runIf(process.platform === "linux")(
    "takes over the lock of a killed process not yet reaped (a zombie)",
    async () => {
      const pid = await zombiePid();
      process.kill(pid, 0); // the zombie still exists as a process id
      const dir = dirWithLock(pid);
      expect(lockHolder(dir)).toBeNull();
      const lock = acquireDataDirLock(dir);
      expect(fs.readFileSync(path.join(dir, lockFileName), "utf8").trim()).toBe(
        String(process.pid),
      );
      lock.release();
    },
  );

  it("refuses a lock held by a live process", () => {
    const sleeper = spawn("sleep", ["30"], { stdio: "ignore" });
    cleanups.push(() => sleeper.kill("SIGKILL"));
    const dir = dirWithLock(sleeper.pid as number);
    expect(lockHolder(dir)).toBe(sleeper.pid);
    expect(() => acquireDataDirLock(dir)).toThrow(DataDirInUseError);
  });
});
