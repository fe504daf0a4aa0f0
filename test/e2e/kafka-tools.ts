/**
 * Global setup of every vitest project (vitest.config.ts): the Kafka listener's end-to-end tests
 * and the Kafka benchmark cases of the quick bench run Debian's `kcat` (librdkafka). When it is
 * missing, it is installed with apt-get if this process is root (as on CI and the project's
 * machines); otherwise, or if the install fails, the run fails naming the package. Never skipped.
 */
import { execFileSync, spawnSync } from "node:child_process";

/** The Debian package that provides `kcat`. */
export const kcatPackage = "kcat";

/** What {@link ensureKcat} needs from the machine (real by default; tests pass their own). */
export interface KcatHost {
  /** True if `kcat -V` runs. */
  haveKcat(): boolean;
  /** True if this process may install packages (root). */
  isRoot(): boolean;
  /** Runs a command to completion, its output on this process's stderr; throws if it fails. */
  run(command: string, args: string[]): void;
  /** Says what is happening (stderr). */
  say(line: string): void;
}

/** The real machine. */
export const realKcatHost: KcatHost = {
  haveKcat: () => spawnSync("kcat", ["-V"], { stdio: "ignore" }).status === 0,
  isRoot: () => process.getuid?.() === 0,
  run: (command, args) =>
    void execFileSync(command, args, {
      stdio: ["ignore", 2, 2],
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    }),
  say: (line) => void process.stderr.write(`${line}\n`),
};

/**
 * Makes sure `kcat` runs: nothing if it does; else `apt-get update` and `apt-get install -y kcat`
 * when root.
 * @throws Error naming the package when kcat is missing and cannot be installed.
 */
export function ensureKcat(host: KcatHost = realKcatHost): void {
  if (host.haveKcat()) return;
  const how = `install the Debian package \`${kcatPackage}\` (apt-get install -y ${kcatPackage})`;
  if (!host.isRoot())
    throw new Error(
      `kcat is not installed and this run is not root: ${how}; the Kafka listener's tests and benchmark need it`,
    );
  host.say(
    `kcat is missing: installing the Debian package ${kcatPackage} (apt-get install -y ${kcatPackage})`,
  );
  try {
    host.run("apt-get", ["update"]);
    host.run("apt-get", ["install", "-y", kcatPackage]);
  } catch (err) {
    throw new Error(
      `kcat is not installed and installing it failed (${err instanceof Error ? err.message.split("\n")[0] : String(err)}): ${how}`,
    );
  }
  if (!host.haveKcat())
    throw new Error(`apt-get install -y ${kcatPackage} finished, but kcat still does not run`);
}

/** vitest's global setup entry point. */
export default function setup(): void {
  ensureKcat();
}
