/**
 * Global setup of every vitest project (vitest.config.ts): the Kafka listener's end-to-end tests
 * and the Kafka cases of the quick bench run Debian's `kcat` (librdkafka). `npm test` installs it
 * first through `scripts/install-system-deps.sh`, the one list of the system packages the tests
 * need; a run started with `npx vitest` directly runs that script here when kcat is missing. If kcat
 * still does not run, the run fails naming the package. Never skipped.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { join } from "node:path";
import { repoRoot } from "./targets.ts";

/** The Debian package that provides `kcat` (listed in scripts/install-system-deps.sh). */
export const kcatPackage = "kcat";

/** What {@link ensureKcat} needs from the machine (real by default; tests pass their own). */
export interface KcatHost {
  /** True if `kcat -V` runs. */
  haveKcat(): boolean;
  /** Runs `scripts/install-system-deps.sh` (output on stderr); throws if it fails. */
  installSystemDeps(): void;
}

/** The real machine. */
export const realKcatHost: KcatHost = {
  haveKcat: () => spawnSync("kcat", ["-V"], { stdio: "ignore" }).status === 0,
  installSystemDeps: () =>
    void execFileSync("bash", [join(repoRoot, "scripts/install-system-deps.sh")], {
      stdio: ["ignore", 2, 2],
    }),
};

/**
 * Makes sure `kcat` runs: nothing if it does; else the system-package script (apt-get, as root or
 * with sudo), then a second look.
 * @throws Error naming the package when kcat is missing and was not installed.
 */
export function ensureKcat(host: KcatHost = realKcatHost): void {
  if (host.haveKcat()) return;
  const how = `install the Debian package \`${kcatPackage}\` (apt-get install -y ${kcatPackage}, or run scripts/install-system-deps.sh as root)`;
  try {
    host.installSystemDeps();
  } catch (err) {
    throw new Error(
      `kcat is not installed and scripts/install-system-deps.sh could not install it (${err instanceof Error ? err.message.split("\n")[0] : String(err)}): ${how}; the Kafka listener's tests and benchmark need it`,
    );
  }
  if (!host.haveKcat())
    throw new Error(`kcat still does not run after scripts/install-system-deps.sh: ${how}`);
}

/** vitest's global setup entry point. */
export default function setup(): void {
  ensureKcat();
}
