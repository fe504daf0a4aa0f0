/**
 * The operations files in ops/ (docs/operations.md) are checked by the tools that read them: the
 * alert rules by `promtool check rules` and by their own `promtool test rules` cases, the example
 * Prometheus configuration by `promtool check config`, the systemd unit by `systemd-analyze
 * verify`; and the unit's `serve` options are options `serve` has.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { serveHelp } from "../../src/cli/serve.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  ensureDebianTool,
  installHookTimeoutMs,
  promtool,
  systemdAnalyze,
} from "../helpers/system-tools.ts";

const root = new URL("../..", import.meta.url).pathname;
const prometheusDir = join(root, "ops/prometheus");
const unitPath = join(root, "ops/systemd/es-broker.service");

beforeAll(() => {
  ensureDebianTool(promtool);
  ensureDebianTool(systemdAnalyze);
}, installHookTimeoutMs);

function run(command: string, args: string[], cwd: string) {
  const r = spawnSync(command, args, { cwd, encoding: "utf8" });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

describe("ops/prometheus", () => {
  it("es-broker-alerts.yml passes promtool check rules", () => {
    const r = run("promtool", ["check", "rules", "es-broker-alerts.yml"], prometheusDir);
    expect(r.output).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.status).toBe(0);
  });

  it("the alert rules raise what their promtool test cases expect", () => {
    const r = run("promtool", ["test", "rules", "es-broker-alerts.test.yml"], prometheusDir);
    expect(r.output).toMatch(/SUCCESS/);
    expect(r.status).toBe(0);
  });

  it("every metric an alert reads is one the broker exports", () => {
    const rules = readFileSync(join(prometheusDir, "es-broker-alerts.yml"), "utf8");
    const names = new Set(rules.match(/\b(?:esb|process)_[a-z_]+/g) ?? []);
    const exported =
      readFileSync(join(root, "src/lib/metrics.ts"), "utf8") +
      readFileSync(join(root, "src/transport/http/prometheus.ts"), "utf8");
    for (const name of names) {
      const family = name.replace(/_(bucket|sum|count)$/, "");
      expect(exported.includes(`"${family}"`) || exported.includes(`${family}:`), name).toBe(true);
    }
    expect(names.size).toBeGreaterThan(10);
  });

  it("every alert rule is in docs/operations.md's table of alerts, and the table names no other", () => {
    const rules = readFileSync(join(prometheusDir, "es-broker-alerts.yml"), "utf8");
    const alerts = [...rules.matchAll(/^\s*- alert: (\w+)$/gm)].map((m) => m[1]).sort();
    const doc = readFileSync(join(root, "docs/operations.md"), "utf8");
    const section = doc.slice(doc.indexOf("\n## Alerts\n"));
    const rows = [...section.matchAll(/^\| `(EsBroker\w+)` \|/gm)].map((m) => m[1]).sort();
    expect(alerts.length).toBeGreaterThan(20);
    expect(rows).toEqual(alerts);
  });

  it("prometheus.yml passes promtool check config", () => {
    const r = run("promtool", ["check", "config", "prometheus.yml"], prometheusDir);
    expect(r.output).toMatch(/is valid prometheus config file/);
    expect(r.status).toBe(0);
  });
});

describe("ops/systemd/es-broker.service", () => {
  it("passes systemd-analyze verify without a warning", () => {
    // verify wants ExecStart's program to exist: point it at one that does.
    const { dir } = tempDir();
    const unit = join(dir, "es-broker.service");
    copyFileSync(unitPath, unit);
    writeFileSync(
      unit,
      readFileSync(unit, "utf8").replaceAll("/usr/local/bin/es-broker", "/bin/true"),
    );
    const r = run("systemd-analyze", ["verify", unit], dir);
    expect(r.output).toBe("");
    expect(r.status).toBe(0);
  });

  it("runs serve with options serve has", () => {
    const unit = readFileSync(unitPath, "utf8").replace(/\\\n/g, " ");
    const execStart = unit.split("\n").find((l) => l.startsWith("ExecStart="))!;
    expect(execStart).toMatch(/es-broker serve /);
    const options = execStart.match(/--[a-z-]+/g) ?? [];
    expect(options.length).toBeGreaterThan(3);
    for (const option of options) expect(serveHelp, option).toContain(`${option} `);
  });
});
