/**
 * Global setup of the end-to-end projects: the Kafka listener's tests run Debian's `kcat`
 * (librdkafka). When it is missing, it is installed with apt-get if this process is root (as on
 * CI and the project's machines); otherwise the run fails naming the package. Never skipped.
 */
import { execFileSync, spawnSync } from "node:child_process";

function haveKcat(): boolean {
  return spawnSync("kcat", ["-V"], { stdio: "ignore" }).status === 0;
}

export default function setup(): void {
  if (haveKcat()) return;
  if (process.getuid?.() !== 0) {
    throw new Error(
      "kcat is not installed and this run is not root: install the Debian package `kcat` (apt-get install -y kcat); the Kafka listener's end-to-end tests need it",
    );
  }
  process.stderr.write(
    "kcat is missing: installing the Debian package kcat (apt-get install -y kcat)\n",
  );
  execFileSync("apt-get", ["update"], { stdio: "inherit" });
  execFileSync("apt-get", ["install", "-y", "kcat"], {
    stdio: "inherit",
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
  if (!haveKcat()) throw new Error("apt-get install -y kcat finished, but kcat still does not run");
}
