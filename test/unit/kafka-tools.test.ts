/**
 * The test setup that provides `kcat` (test/e2e/kafka-tools.ts): on a fresh machine it installs
 * the Debian package when it runs as root, and otherwise fails naming the package; it never lets
 * the Kafka tests skip.
 */
import { describe, expect, it } from "vitest";
import { ensureKcat, type KcatHost, kcatPackage } from "../e2e/kafka-tools.ts";

function host(options: { have: boolean[]; root: boolean; failOn?: string }) {
  const ran: string[] = [];
  const said: string[] = [];
  const answers = [...options.have];
  const h: KcatHost = {
    haveKcat: () => answers.shift() ?? false,
    isRoot: () => options.root,
    run: (command, args) => {
      const line = [command, ...args].join(" ");
      ran.push(line);
      if (line === options.failOn) throw new Error(`Command failed: ${line}\nE: no network`);
    },
    say: (line) => void said.push(line),
  };
  return { h, ran, said };
}

describe("kcat for the Kafka tests", () => {
  it("does nothing when kcat runs", () => {
    const { h, ran } = host({ have: [true], root: true });
    ensureKcat(h);
    expect(ran).toEqual([]);
  });

  it("installs the Debian package with apt-get when it is missing and the run is root", () => {
    const { h, ran, said } = host({ have: [false, true], root: true });
    ensureKcat(h);
    expect(ran).toEqual(["apt-get update", `apt-get install -y ${kcatPackage}`]);
    expect(said.join("\n")).toContain("installing the Debian package kcat");
  });

  it("fails naming the package when it is missing and the run is not root", () => {
    const { h, ran } = host({ have: [false], root: false });
    expect(() => ensureKcat(h)).toThrow(/apt-get install -y kcat/);
    expect(ran).toEqual([]);
  });

  it("fails naming the package when apt-get fails, or installs something that does not run", () => {
    const failing = host({ have: [false], root: true, failOn: "apt-get install -y kcat" });
    expect(() => ensureKcat(failing.h)).toThrow(
      /installing it failed \(Command failed: apt-get install -y kcat\).*apt-get install -y kcat/,
    );
    const broken = host({ have: [false, false], root: true });
    expect(() => ensureKcat(broken.h)).toThrow(/kcat still does not run/);
  });
});
