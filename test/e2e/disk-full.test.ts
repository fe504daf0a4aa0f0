/**
 * A real full disk (docs/operations.md "Full disk"): the broker's data directory on a 16 MiB tmpfs,
 * filled by a file of our own. Needs root (it mounts the tmpfs), as `npm test` runs on CI and the
 * project's machines; not root, it fails saying so. Never skipped.
 */
import { afterEach, describe, expect, it } from "vitest";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdirSync, openSync, closeSync, writeSync, unlinkSync } from "node:fs";
import { TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import {
  assertTargetRunnable,
  brokerCommand,
  startBroker,
  target,
  type BrokerProcess,
} from "./harness.ts";
import { waitFor } from "./helpers.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
const children: ChildProcess[] = [];
const mounts: string[] = [];
afterEach(async () => {
  for (const c of children.splice(0))
    if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const b of running.splice(0)) await b.stop("SIGKILL");
  for (const m of mounts.splice(0)) execFileSync("umount", [m]);
});

/** A 16 MiB tmpfs mounted at a fresh directory (unmounted after the test). */
function smallDisk(): string {
  if (process.getuid?.() !== 0)
    throw new Error(
      "test/e2e/disk-full.test.ts mounts a tmpfs: run it as root (npm test on CI is)",
    );
  const dir = `${tempDir().dir}/small`;
  mkdirSync(dir);
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", dir]);
  mounts.push(dir);
  return dir;
}

/** Writes `path` until the file system is full; returns the bytes written. */
function fill(path: string): number {
  const fd = openSync(path, "w");
  const chunk = Buffer.alloc(64 * 1024, 7);
  let bytes = 0;
  try {
    for (;;) bytes += writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
  } finally {
    closeSync(fd);
  }
  return bytes;
}

describe(`[${target}] a full disk`, () => {
  it("plain produce retries a storage_error until space returns, and the broker logs when writes are refused and resumed", async () => {
    const disk = smallDisk();
    const broker = await startBroker(`${disk}/data`);
    running.push(broker);
    const admin = await TcpClient.connect(broker.tcp);
    await admin.createTopic({ name: "t", partitions: 1 });
    const filler = `${disk}/filler`;
    expect(fill(filler)).toBeGreaterThan(8 * 1024 * 1024);
    assertTargetRunnable();
    const [cmd, ...pre] = brokerCommand();
    const proc = spawn(
      cmd,
      [
        ...pre,
        "produce",
        "t",
        "--broker",
        `${broker.tcp.host}:${broker.tcp.port}`,
        "--linger-ms",
        "0",
      ],
      { cwd: repoRoot, stdio: ["pipe", "pipe", "pipe"] },
    );
    children.push(proc);
    let stderr = "";
    proc.stderr!.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => proc.once("close", resolve));
    const big = "x".repeat(100_000);
    for (let i = 1; i <= 3; i++) proc.stdin!.write(`line-${i}-${big}\n`);
    await waitFor("produce to say it retries a storage_error", () =>
      /es-broker: the broker refused the batch of lines? [\d–]+ with storage_error, which stored nothing \(.*ENOSPC.*\): retrying for up to 30000 ms \(--reconnect-timeout-ms\)\n/.test(
        stderr,
      ),
    );
    await waitFor("the broker to log the refusal", () =>
      broker.stderr().includes('"event":"partition.writes_refused"'),
    );
    unlinkSync(filler);
    proc.stdin!.end();
    expect(await exited, stderr).toBe(0);
    expect(stderr).toMatch(
      /es-broker: the batch of lines? [\d–]+ was accepted after \d+ ms of retries\n/,
    );
    expect(stderr).toContain('es-broker: produced 3 records to "t"\n');
    const r = await admin.fetch({ topic: "t", partition: 0, offset: 0 });
    expect(r.records.map((rec) => new TextDecoder().decode(rec.value).slice(0, 7))).toEqual([
      "line-1-",
      "line-2-",
      "line-3-",
    ]);
    await admin.close();
    await waitFor("the broker to log that writes resumed", () =>
      broker.stderr().includes('"event":"partition.writes_resumed"'),
    );
    expect(broker.stderr()).toMatch(/"event":"partition.writes_resumed".*"refused_requests":[1-9]/);
  });

  it("is relieved through the broker at 0 bytes free: lowering retention_bytes and cleanup give up the disk reserve, delete segments, and keep every acknowledged record above the new log start", async () => {
    const disk = smallDisk();
    const broker = await startBroker(`${disk}/data`, ["--cleanup-interval-ms", "0"]);
    running.push(broker);
    const admin = await TcpClient.connect(broker.tcp);
    await admin.createTopic({ name: "t", partitions: 1, config: { segment_bytes: 1024 * 1024 } });
    const value = "v".repeat(900);
    let acked = 0;
    for (;;) {
      try {
        await admin.produce(
          "t",
          Array.from({ length: 50 }, () => ({ value })),
          { partition: 0 },
        );
        acked += 50;
      } catch (err) {
        expect((err as { code?: string }).code).toBe("storage_error");
        break;
      }
    }
    fill(`${disk}/filler`); // the last pages too: no file can be written now
    const http = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${broker.httpUrl}${path}`, {
        method,
        headers: { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: r.status, json: (await r.json()) as Record<string, unknown> };
    };
    const patched = await http("PATCH", "/v1/topics/t", { config: { retention_bytes: 2_000_000 } });
    expect(patched.status, JSON.stringify(patched.json)).toBe(200);
    const cleaned = await http("POST", "/v1/admin/topics/t/cleanup");
    expect(cleaned.status).toBe(200);
    const [run] = cleaned.json.partitions as { retention: Record<string, unknown> }[];
    expect(run.retention).toMatchObject({ status: "ok" });
    expect(run.retention.segments_deleted as number).toBeGreaterThan(5);
    expect(broker.stderr()).toMatch(
      /"event":"storage.reserve_given_up".*"for_file":"[^"]*topic.json"/,
    );
    const { logStartOffset, highWatermark } = await admin.listOffsets({ topic: "t", partition: 0 });
    expect(highWatermark).toBe(acked);
    let offset = logStartOffset;
    while (offset < highWatermark) {
      const r = await admin.fetch({ topic: "t", partition: 0, offset });
      expect(r.records[0].offset).toBe(offset);
      offset = r.records.at(-1)!.offset + 1;
    }
    // Space is back: appends go on (once the reserve is whole again, at most 5 s).
    await waitFor("an append to succeed again", async () =>
      admin.produce("t", [{ value: "after" }], { partition: 0 }).then(
        () => true,
        () => false,
      ),
    );
    await admin.close();
  });
});
