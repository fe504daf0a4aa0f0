/**
 * The test setup that provides `kcat` (test/e2e/kafka-tools.ts) and the one list of system
 * packages (scripts/install-system-deps.sh): kcat is on the list; a missing kcat is installed
 * through it, and otherwise the run fails naming the package; the Kafka tests never skip.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ensureKcat, type KcatHost, kcatPackage } from "../e2e/kafka-tools.ts";

function host(options: { have: boolean[]; installFails?: boolean }) {
  let installs = 0;
  const answers = [...options.have];
  const h: KcatHost = {
    haveKcat: () => answers.shift() ?? false,
    installSystemDeps: () => {
      installs++;
      if (options.installFails)
        throw new Error(
          "Command failed: bash scripts/install-system-deps.sh\nThe tests need these Debian packages",
        );
    },
  };
  return { h, installs: () => installs };
}

describe("kcat for the Kafka tests", () => {
  it("is on the list of system packages npm test installs", () => {
    const script = readFileSync(
      new URL("../../scripts/install-system-deps.sh", import.meta.url),
      "utf8",
    );
    expect(script).toMatch(new RegExp(`^\\s*"${kcatPackage} kcat"`, "m"));
  });

  it("does nothing when kcat runs", () => {
    const { h, installs } = host({ have: [true] });
    ensureKcat(h);
    expect(installs()).toBe(0);
  });

  it("installs it through the system-package script when it is missing", () => {
    const { h, installs } = host({ have: [false, true] });
    ensureKcat(h);
    expect(installs()).toBe(1);
  });

  it("fails naming the package when the script cannot install it, or kcat still does not run", () => {
    expect(() => ensureKcat(host({ have: [false], installFails: true }).h)).toThrow(
      /could not install it \(Command failed: bash scripts\/install-system-deps.sh\).*apt-get install -y kcat/,
    );
    expect(() => ensureKcat(host({ have: [false, false] }).h)).toThrow(
      /kcat still does not run .*apt-get install -y kcat/,
    );
  });
});
