/** `es-broker check` on a stopped data directory: exit codes and output, on every runtime target. */
import { describe, expect, it } from "vitest";
import { appendFileSync, openSync, readdirSync, writeSync, closeSync } from "node:fs";
import { TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, startBroker, target } from "./harness.ts";

describe(`[${target}] es-broker check`, () => {
  it("exits 0 on a clean directory, 0 with a warning for a torn tail, and 1 for a corrupt sealed segment", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(`${dir}/data`);
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "c", partitions: 1, config: { segment_bytes: 2048 } });
    for (let i = 0; i < 20; i++)
      await client.produce("c", [{ key: `k${i}`, value: "v".repeat(300) }]);
    await client.close();
    expect(await broker.stop("SIGTERM")).toBe(0);

    const clean = await runCli(["check", "--data-dir", `${dir}/data`]);
    expect(clean.code, clean.stderr).toBe(0);
    expect(clean.stdout.toString()).toMatch(/segments checked: 0 corrupt, 0 warnings/);

    const pdir = `${dir}/data/topics/c/0`;
    const logs = readdirSync(pdir)
      .filter((n) => n.endsWith(".log"))
      .sort();
    expect(logs.length).toBeGreaterThan(2);
    appendFileSync(`${pdir}/${logs.at(-1)}`, Buffer.from([1, 2, 3]));
    const torn = await runCli(["check", "--data-dir", `${dir}/data`]);
    expect(torn.code).toBe(0);
    expect(torn.stdout.toString()).toMatch(/warning .*torn tail of 3 bytes/);

    const fd = openSync(`${pdir}/${logs[0]}`, "r+");
    writeSync(fd, Buffer.from([0xff]), 0, 1, 60);
    closeSync(fd);
    const corrupt = await runCli(["check", "--data-dir", `${dir}/data`, "--json"]);
    expect(corrupt.code).toBe(1);
    const report = JSON.parse(corrupt.stdout.toString()) as { corrupt: number };
    expect(report.corrupt).toBe(1);
  });
});
