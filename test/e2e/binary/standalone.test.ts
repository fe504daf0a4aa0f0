/**
 * The compiled binary on its own: copied into an empty temporary directory and started there with
 * an empty environment (no PATH, no HOME, no node_modules anywhere above it), it serves a produce
 * and a fetch and shuts down cleanly. Runs in the `e2e:binary` project only (vitest.config.ts).
 */
import { afterEach, describe, expect, it } from "vitest";
import { copyFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { TcpClient } from "../../../src/client/client.ts";
import { tempDir } from "../../helpers/tmp.ts";
import {
  assertTargetRunnable,
  runCli,
  startBroker,
  target,
  targetInfo,
  type BrokerProcess,
} from "../harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** An empty directory holding only a copy of the binary; returns the directory and the copy's path. */
function lonelyCopy(): { dir: string; binary: string } {
  assertTargetRunnable();
  const { dir } = tempDir();
  const binary = join(dir, "es-broker");
  copyFileSync(targetInfo.command[0], binary);
  statSync(binary); // exists
  return { dir, binary };
}

describe(`[${target}] the standalone binary`, () => {
  it("prints its version with an empty environment in an empty directory", async () => {
    const { dir, binary } = lonelyCopy();
    const { code, stdout, stderr } = await runCli(["--version"], undefined, {
      cwd: dir,
      env: {},
      command: [binary],
    });
    expect(code, stderr).toBe(0);
    expect(stdout.toString()).toMatch(
      /^es-broker \d+\.\d+\.\d+ \(bun \d+\.\d+\.\d+, standalone binary\)\n$/,
    );
    expect(readdirSync(dir)).toEqual(["es-broker"]);
  });

  it("serves a produce and a fetch with an empty environment in an empty directory, and exits 0 on SIGTERM", async () => {
    const { dir, binary } = lonelyCopy();
    const broker = await startBroker(
      "data",
      [],
      {},
      { cwd: dir, replaceEnv: true, command: [binary] },
    );
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "alone", partitions: 1 });
    const produced = await client.produce("alone", [{ key: "k", value: "from an empty room" }]);
    expect(produced.spans[0]).toMatchObject({ partition: 0, baseOffset: 0 });
    const fetched = await client.fetch({ topic: "alone", partition: 0, offset: 0 });
    expect(fetched.records.map((r) => Buffer.from(r.value).toString())).toEqual([
      "from an empty room",
    ]);
    await client.close();
    const overHttp = (await (
      await fetch(`${broker.httpUrl}/v1/topics/alone/partitions/0/records?offset=0`)
    ).json()) as { records: { value: string }[] };
    expect(overHttp.records.map((r) => r.value)).toEqual(["from an empty room"]);

    expect(await broker.stop("SIGTERM")).toBe(0);
    running.splice(running.indexOf(broker), 1);
    expect(broker.stderr()).not.toMatch(/"level":"error"|Uncaught|panic/i);
    // Only the binary and the data directory it made (relative to its working directory).
    expect(readdirSync(dir).sort()).toEqual(["data", "es-broker"]);
    expect(statSync(join(dir, "data")).mode & 0o777).toBe(0o700);
  });
});
