/**
 * The client for other projects (docs/client.md "Using it from another project"):
 * `dist/es-broker-client.mjs`, copied alone into a directory outside the repository (no
 * node_modules, no deno.json), imported by a script that Node, Deno and Bun each run against the
 * real broker process. Node target only: it runs the three runtimes itself.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { startBroker, target, type BrokerProcess } from "./harness.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

const script = (
  port: number,
  topic: string,
) => `import { TcpClient, ClientError } from "./es-broker-client.mjs";
const [port, topic] = [${port}, ${JSON.stringify(topic)}];
const client = await TcpClient.connect({ host: "127.0.0.1", port });
await client.createTopic({ name: topic, partitions: 1, config: {} });
const produced = await client.produce(topic, [{ key: "k", value: "hello" }]);
const fetched = await client.fetch({ topic, partition: 0, offset: 0 });
const missing = await client.fetch({ topic: "nope", partition: 0, offset: 0 }).catch((e) => e);
console.log(JSON.stringify({
  offset: produced.spans[0].baseOffset,
  records: fetched.records.map((r) => [r.offset, new TextDecoder().decode(r.value)]),
  error: missing instanceof ClientError ? missing.code : String(missing),
}));
await client.close();
`;

describe(`[${target}] the client bundle in another project`, () => {
  it("dist/es-broker-client.mjs alone, outside the repository, works on Node, Deno and Bun", async () => {
    const broker = await startBroker(`${tempDir().dir}/data`);
    running.push(broker);
    const { dir } = tempDir("es-broker-client-");
    copyFileSync(join(repoRoot, "dist/es-broker-client.mjs"), join(dir, "es-broker-client.mjs"));
    const runtimes: [string, string[]][] = [["node", [process.execPath, "svc.mjs"]]];
    for (const [name, bin, args] of [
      ["deno", join(repoRoot, "tools/node_modules/.bin/deno"), ["run", "-A", "svc.mjs"]],
      ["bun", join(repoRoot, "tools/node_modules/.bin/bun"), ["svc.mjs"]],
    ] as const)
      if (existsSync(bin)) runtimes.push([name, [bin, ...args]]);
    expect(runtimes.length, "node, and deno and bun from tools/").toBe(3);
    for (const [name, [bin, ...args]] of runtimes) {
      writeFileSync(join(dir, "svc.mjs"), script(broker.tcp.port, `from-${name}`));
      const r = spawnSync(bin, args, {
        cwd: dir,
        encoding: "utf8",
        timeout: 30_000,
        env: { PATH: process.env.PATH, HOME: process.env.HOME, DENO_DIR: join(dir, ".deno") },
      });
      expect(r.status, `${name}: ${r.stderr}`).toBe(0);
      expect(JSON.parse(r.stdout), name).toEqual({
        offset: 0,
        records: [[0, "hello"]],
        error: "topic_not_found",
      });
    }
  }, 90_000);
});
