/**
 * Debian programs some tests drive (Prometheus's `promtool` and server, Chromium, systemd-analyze).
 * `npm test` installs them first (`scripts/install-system-deps.sh`, the one list of system
 * packages); a test run some other way (`npx vitest run …`) still gets them: when one is missing
 * it is installed with apt-get (after `apt-get update`) if this process is root, as on CI and the
 * project's machines; otherwise the test fails naming the package. Never skipped.
 */
import { execFileSync, spawnSync } from "node:child_process";

/** A program and the Debian package that ships it. */
export interface DebianTool {
  /** The command to run, e.g. "promtool". */
  command: string;
  /** Arguments that make it print its version and exit 0. */
  versionArgs: string[];
  /** The Debian package, e.g. "prometheus". */
  package: string;
  /** What needs it, for the failure message. */
  neededBy: string;
}

/** `promtool` (`check metrics`, `check rules`), from Debian's `prometheus`. */
export const promtool: DebianTool = {
  command: "promtool",
  versionArgs: ["--version"],
  package: "prometheus",
  neededBy: "the /metrics exposition and alert rules checks",
};

/** The Prometheus server, from Debian's `prometheus`. */
export const prometheusServer: DebianTool = {
  command: "prometheus",
  versionArgs: ["--version"],
  package: "prometheus",
  neededBy: "the end-to-end scrape by a real Prometheus",
};

/** Headless Chromium, from Debian's `chromium`. */
export const chromium: DebianTool = {
  command: "chromium",
  versionArgs: ["--version"],
  package: "chromium",
  neededBy: "the web console's browser tests",
};

function runs(tool: DebianTool): boolean {
  return spawnSync(tool.command, tool.versionArgs, { stdio: "ignore" }).status === 0;
}

/**
 * Makes sure `tool` runs, installing its package when missing and root (module comment).
 * Can take minutes on a fresh machine: call it from a hook with a long timeout.
 * @throws Error naming the package when it is missing and cannot be installed.
 */
export function ensureDebianTool(tool: DebianTool): void {
  if (runs(tool)) return;
  if (process.getuid?.() !== 0)
    throw new Error(
      `${tool.command} is not installed and this run is not root: install the Debian package \`${tool.package}\` (apt-get install -y ${tool.package}); ${tool.neededBy} need it`,
    );
  process.stderr.write(
    `${tool.command} is missing: installing the Debian package ${tool.package} (apt-get update; apt-get install -y ${tool.package})\n`,
  );
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  // Another test process may be installing at the same moment: wait for apt's locks.
  const wait = ["-o", "DPkg::Lock::Timeout=600"];
  execFileSync("apt-get", [...wait, "update"], { stdio: "inherit", env });
  execFileSync("apt-get", [...wait, "install", "-y", "--no-install-recommends", tool.package], {
    stdio: "inherit",
    env,
  });
  if (!runs(tool))
    throw new Error(
      `apt-get install -y ${tool.package} finished, but ${tool.command} still does not run`,
    );
}

/** `systemd-analyze` (`verify` of the unit file in ops/), from Debian's `systemd`. */
export const systemdAnalyze: DebianTool = {
  command: "systemd-analyze",
  versionArgs: ["--version"],
  package: "systemd",
  neededBy: "the check of ops/systemd/es-broker.service",
};

/** Timeout for a hook that may install a package (apt-get update + install), in ms. */
export const installHookTimeoutMs = 600_000;

/** Runs `promtool check metrics` on `text`; resolves with its exit status and output. */
export function promtoolCheckMetrics(text: string): { status: number | null; output: string } {
  const r = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}
