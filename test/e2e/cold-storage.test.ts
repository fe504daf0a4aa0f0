/**
 * The real process with `--cold-storage-dir` and `--cleanup-interval-ms`: segments that retention
 * removes move to the cold directory (files 0600, directories 0700) and are still fetched over
 * HTTP after a restart; PATCH, POST cleanup and GET storage work end to end. The same with
 * `--cold-storage s3://…` against moto_server on loopback (credentials from `AWS_*` variables,
 * never in argv), and its bad input: malformed URLs and missing credentials refuse the start.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { runCli, startBroker, target, type BrokerProcess } from "./harness.ts";
import { tempDir } from "../helpers/tmp.ts";
import { motoCredentials, startMoto, type MotoServer } from "../helpers/moto.ts";
import { FaultProxy } from "../helpers/fault-proxy.ts";
import { parseS3Url, S3ColdStore } from "../../src/runtime/s3-cold-store.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";

let running: BrokerProcess | null = null;
afterEach(async () => {
  await running?.stop("SIGKILL");
  running = null;
});

async function json(res: Response): Promise<any> {
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return JSON.parse(text);
}

describe(`[${target}] cold storage and cleanup end to end`, () => {
  it("moves removed segments to the cold directory and still serves them after a restart", async () => {
    const { dir } = tempDir();
    const cold = `${dir}/cold`;
    const args = ["--cold-storage-dir", cold, "--cleanup-interval-ms", "0"];
    running = await startBroker(`${dir}/data`, args);
    const b = running.httpUrl;
    await json(
      await fetch(`${b}/v1/topics`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "t", partitions: 1, config: { segment_bytes: 1024 } }),
      }),
    );
    const values = Array.from({ length: 60 }, (_, i) => `record-${i}-${"x".repeat(60)}`);
    for (let i = 0; i < values.length; i += 6) {
      await json(
        await fetch(`${b}/v1/topics/t/records`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ records: values.slice(i, i + 6).map((value) => ({ value })) }),
        }),
      );
    }
    const patched = await json(
      await fetch(`${b}/v1/topics/t`, {
        method: "PATCH",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ config: { retention_bytes: 1 } }),
      }),
    );
    expect(patched.config.retention_bytes).toBe(1);
    const run = await json(await fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }));
    const retention = run.partitions[0].retention;
    expect(retention.status).toBe("ok");
    expect(retention.segments_offloaded).toBeGreaterThan(1);
    expect(retention.segments_offloaded).toBe(retention.segments_deleted);
    const storage = await json(await fetch(`${b}/v1/admin/storage`));
    expect(storage.cold_storage_dir).toBe(cold);
    expect(storage.topics[0].partitions[0].cleanup.cold.segments).toBe(
      retention.segments_offloaded,
    );

    const coldPartition = `${cold}/topics/t/0`;
    const names = readdirSync(coldPartition);
    expect(names.filter((n) => n.endsWith(".log")).length).toBe(retention.segments_offloaded);
    for (const n of names) expect(statSync(`${coldPartition}/${n}`).mode & 0o777).toBe(0o600);
    for (const d of [cold, `${cold}/topics`, `${cold}/topics/t`, coldPartition])
      expect(statSync(d).mode & 0o777).toBe(0o700);

    expect(await running.stop("SIGTERM")).toBe(0);
    running = await startBroker(`${dir}/data`, args);
    const read: { offset: number; value: string }[] = [];
    for (let offset = 0, pages = 0; offset < values.length && pages < 100; pages++) {
      const page = await json(
        await fetch(
          `${running.httpUrl}/v1/topics/t/partitions/0/records?offset=${offset}&max_records=100`,
        ),
      );
      expect(page.log_start_offset).toBe(0);
      read.push(...page.records);
      offset = page.next_offset;
    }
    expect(read.map((r) => r.offset)).toEqual(values.map((_, i) => i));
    expect(read.map((r) => r.value)).toEqual(values);
  });

  it("a cold object that fails its record checks is cold_data_corrupt (500, not retryable), never storage_error nor wrong data", async () => {
    const { dir } = tempDir();
    const cold = `${dir}/cold`;
    running = await startBroker(`${dir}/data`, [
      "--cold-storage-dir",
      cold,
      "--cleanup-interval-ms",
      "0",
    ]);
    const b = running.httpUrl;
    const post = (path: string, body?: unknown) =>
      fetch(`${b}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    await json(
      await post("/v1/topics", { name: "t", partitions: 1, config: { segment_bytes: 1024 } }),
    );
    for (let i = 0; i < 60; i += 6)
      await json(
        await post("/v1/topics/t/records", {
          records: Array.from({ length: 6 }, (_, j) => ({ value: `v-${i + j}-${"x".repeat(60)}` })),
        }),
      );
    await json(
      await fetch(`${b}/v1/topics/t`, {
        method: "PATCH",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ config: { retention_bytes: 1 } }),
      }),
    );
    const run = await json(await post("/v1/admin/topics/t/cleanup"));
    expect(run.partitions[0].retention.segments_offloaded).toBeGreaterThan(1);
    // Flip one byte inside the first record of the first offloaded segment.
    const first = readdirSync(`${cold}/topics/t/0`)
      .filter((n) => n.endsWith(".log"))
      .sort()[0];
    const file = `${cold}/topics/t/0/${first}`;
    const bytes = readFileSync(file);
    bytes[40] ^= 0xff;
    writeFileSync(file, bytes);
    const res = await fetch(`${b}/v1/topics/t/partitions/0/records?offset=0`);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(res.status, JSON.stringify(body)).toBe(500);
    expect(body.error.code).toBe("cold_data_corrupt");
    expect(body.error.message).toContain(first);
  });
});

describe(`[${target}] cold storage on S3 end to end`, () => {
  let moto: MotoServer;
  beforeAll(async () => {
    moto = await startMoto();
    await moto.createBucket("edge-e2e");
  });
  afterAll(async () => {
    await moto?.stop();
  });
  const env = () => ({
    AWS_ACCESS_KEY_ID: motoCredentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: motoCredentials.secretAccessKey,
    AWS_ENDPOINT_URL_S3: moto.endpoint,
  });

  it("offloads segments to the bucket and serves them from there after a restart", async () => {
    const { dir } = tempDir();
    const args = ["--cold-storage", "s3://edge-e2e/site-1", "--cleanup-interval-ms", "0"];
    running = await startBroker(`${dir}/data`, args, env());
    const b = running.httpUrl;
    await json(
      await fetch(`${b}/v1/topics`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          name: "t",
          partitions: 1,
          config: { segment_bytes: 1024, retention_bytes: 1 },
        }),
      }),
    );
    const values = Array.from({ length: 60 }, (_, i) => `record-${i}-${"x".repeat(60)}`);
    for (let i = 0; i < values.length; i += 6)
      await json(
        await fetch(`${b}/v1/topics/t/records`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ records: values.slice(i, i + 6).map((value) => ({ value })) }),
        }),
      );
    const run = await json(await fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }));
    expect(run.partitions[0].retention).toMatchObject({ status: "ok" });
    expect(run.partitions[0].retention.segments_offloaded).toBeGreaterThan(1);
    const storage = await json(await fetch(`${b}/v1/admin/storage`));
    expect(storage.cold_storage_dir).toBe("s3://edge-e2e/site-1/");
    expect(running.stderr()).not.toContain(motoCredentials.secretAccessKey);
    expect(await running.stop("SIGTERM")).toBe(0);

    running = await startBroker(`${dir}/data`, args, env());
    const read: { offset: number; value: string }[] = [];
    for (let offset = 0, pages = 0; offset < values.length && pages < 100; pages++) {
      const page = await json(
        await fetch(
          `${running.httpUrl}/v1/topics/t/partitions/0/records?offset=${offset}&max_records=7`,
        ),
      );
      read.push(...page.records);
      offset = page.next_offset;
    }
    expect(read.map((r) => r.value)).toEqual(values);
  });

  it("loses nothing when SIGKILLed between a segment's upload and its index entry, and leaves no garbage", async () => {
    const { dir } = tempDir();
    const proxy = await FaultProxy.start(moto.endpoint);
    try {
      const args = [
        "--cold-storage",
        "s3://edge-e2e/kill",
        "--cold-s3-endpoint",
        proxy.endpoint,
        "--cleanup-interval-ms",
        "0",
      ];
      running = await startBroker(`${dir}/data`, args, env());
      let b = running.httpUrl;
      await json(
        await fetch(`${b}/v1/topics`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ name: "t", partitions: 1, config: { segment_bytes: 1024 } }),
        }),
      );
      const values = Array.from({ length: 60 }, (_, i) => `record-${i}-${"y".repeat(60)}`);
      for (let i = 0; i < values.length; i += 6)
        await json(
          await fetch(`${b}/v1/topics/t/records`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ records: values.slice(i, i + 6).map((value) => ({ value })) }),
          }),
        );
      await json(
        await fetch(`${b}/v1/topics/t`, {
          method: "PATCH",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ config: { retention_bytes: 1 } }),
        }),
      );
      // Hold the check of the second segment's log object: its PUT is done, its index entry not.
      let logHeads = 0;
      proxy.add(
        { kind: "delay", ms: 10_000 },
        {
          times: 1,
          match: (r) => r.method === "HEAD" && r.path.endsWith(".log") && ++logHeads === 2,
        },
      );
      void fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }).catch(() => {});
      const deadline = Date.now() + 10_000;
      while (!proxy.log.some((e) => e.fault?.startsWith("delay")) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
      expect(proxy.log.some((e) => e.fault?.startsWith("delay"))).toBe(true);
      await running.stop("SIGKILL");
      proxy.clear();

      running = await startBroker(`${dir}/data`, args, env());
      b = running.httpUrl;
      const readAll = async () => {
        const read: string[] = [];
        for (let offset = 0, pages = 0; offset < values.length && pages < 100; pages++) {
          const page = await json(
            await fetch(`${b}/v1/topics/t/partitions/0/records?offset=${offset}&max_records=9`),
          );
          read.push(...page.records.map((r: { value: string }) => r.value));
          offset = page.next_offset;
        }
        return read;
      };
      expect(await readAll()).toEqual(values);
      const run = await json(await fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }));
      expect(run.partitions[0].retention.status).toBe("ok");
      expect(await readAll()).toEqual(values);
      const storage = await json(await fetch(`${b}/v1/admin/storage`));
      const cold = storage.topics[0].partitions[0].cleanup.cold;
      const bucket = new S3ColdStore({
        location: parseS3Url("s3://edge-e2e/kill"),
        credentials: motoCredentials,
        endpoint: moto.endpoint,
        logger: new MemoryLogger(),
      });
      const objects = (await bucket.list("topics/t/0/")).map((o) => o.key);
      expect(objects.filter((k) => k.endsWith(".log"))).toHaveLength(cold.segments);
      expect(objects.filter((k) => k.endsWith(".index"))).toHaveLength(cold.segments);
    } finally {
      await proxy.close();
    }
  });

  it("a read of offloaded records while S3 hangs fails within --cold-read-timeout-ms naming the cold tier, and the backlog gauges show the stuck pass (newuser18 F4)", {
    timeout: 120_000,
  }, async () => {
    // Its own moto: SIGSTOPping the shared one would hang the other tests.
    const hung = await startMoto();
    try {
      await hung.createBucket("hang");
      const { dir } = tempDir();
      const args = [
        "--cold-storage",
        "s3://hang/b1",
        "--cold-s3-endpoint",
        hung.endpoint,
        "--cleanup-interval-ms",
        "0",
        "--metrics-port",
        "0",
        "--cold-read-timeout-ms",
        "3000",
      ];
      running = await startBroker(`${dir}/data`, args, env());
      const b = running.httpUrl;
      await json(
        await fetch(`${b}/v1/topics`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            name: "t",
            partitions: 1,
            config: { segment_bytes: 1024, retention_bytes: 1 },
          }),
        }),
      );
      const produce = async (from: number) => {
        for (let i = from; i < from + 60; i += 6)
          await json(
            await fetch(`${b}/v1/topics/t/records`, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({
                records: Array.from({ length: 6 }, (_, j) => ({
                  value: `record-${i + j}-${"z".repeat(60)}`,
                })),
              }),
            }),
          );
      };
      await produce(0);
      const run = await json(await fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }));
      expect(run.partitions[0].retention.segments_offloaded).toBeGreaterThan(1);
      const metric = async (name: string) => {
        const text = await (await fetch(running!.metricsUrl!)).text();
        const line = text.split("\n").find((l) => l.startsWith(`${name}{topic="t",partition="0"}`));
        return line === undefined ? undefined : Number(line.split(" ").pop());
      };
      expect(await metric("esb_partition_cold_backlog_segments")).toBe(0);

      hung.pause();
      // HTTP: 503 cold_tier_unavailable within the deadline (3 s here), not a hang. Before, the
      // broker retried each request 6 × 30 s and curl -m 120 got nothing.
      const started = Date.now();
      const answer = await fetch(`${b}/v1/topics/t/partitions/0/records?offset=0`, {
        signal: AbortSignal.timeout(25_000),
      });
      const body = (await answer.json()) as { error: { code: string; message: string } };
      expect(answer.status, JSON.stringify(body)).toBe(503);
      expect(body.error.code).toBe("cold_tier_unavailable");
      expect(body.error.message).toMatch(/cold tier/);
      expect(body.error.message).toContain("s3://hang/b1");
      expect(Date.now() - started).toBeLessThan(15_000);
      // Records above the cold tier are still served.
      const hot = await json(
        await fetch(`${b}/v1/topics/t/partitions/0/records?offset=59`, {
          signal: AbortSignal.timeout(5_000),
        }),
      );
      expect(hot.records.map((r: { offset: number }) => r.offset)).toEqual([59]);

      // The CLI over TCP: the error code and the cold tier, not "connection lost, reconnecting".
      const cli = await runCli(
        [
          "consume",
          "t",
          "--partition",
          "0",
          "--offset",
          "0",
          "--broker",
          `127.0.0.1:${running.tcp.port}`,
        ],
        undefined,
        { env: { ...process.env, ...env() } as Record<string, string> },
      );
      expect(cli.stderr).toContain("cold_tier_unavailable");
      expect(cli.stderr).toMatch(/cold tier/);
      expect(cli.stderr).not.toMatch(/connection to the broker lost/);
      expect(cli.code).not.toBe(0);

      // A retention pass stuck on the hung store: the backlog gauge shows the segments it waits
      // to move while it hangs (it stayed 0 for the whole 246 s pass before).
      await produce(60);
      void fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }).catch(() => {});
      await expect
        .poll(() => metric("esb_partition_cold_backlog_segments"), { timeout: 10_000 })
        .toBeGreaterThan(0);
      expect(running.stderr()).not.toContain(motoCredentials.secretAccessKey);
    } finally {
      hung.resume();
      await running?.stop("SIGKILL");
      running = null;
      await hung.stop();
    }
  });

  it("with S3 hung, a topic create answers within --cold-read-timeout-ms and SIGTERM ends within seconds, an offload in flight abandoned (attack18 F8)", {
    timeout: 120_000,
  }, async () => {
    const hung = await startMoto();
    try {
      await hung.createBucket("stop");
      const { dir } = tempDir();
      running = await startBroker(
        `${dir}/data`,
        [
          "--cold-storage",
          "s3://stop/b1",
          "--cold-s3-endpoint",
          hung.endpoint,
          "--cleanup-interval-ms",
          "0",
          "--metrics-port",
          "0",
          "--cold-read-timeout-ms",
          "3000",
        ],
        env(),
      );
      const b = running.httpUrl;
      await json(
        await fetch(`${b}/v1/topics`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            name: "t",
            partitions: 1,
            config: { segment_bytes: 1024, retention_bytes: 1 },
          }),
        }),
      );
      for (let i = 0; i < 60; i += 6)
        await json(
          await fetch(`${b}/v1/topics/t/records`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              records: Array.from({ length: 6 }, (_, j) => ({
                value: `record-${i + j}-${"z".repeat(60)}`,
              })),
            }),
          }),
        );
      hung.pause();

      // A create lists its cold prefix first: bounded by the read deadline, answered 507
      // storage_error (retriable), nothing created. Before: 6 × 30 s.
      const createStarted = Date.now();
      const created = await fetch(`${b}/v1/topics`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "u", partitions: 1 }),
        signal: AbortSignal.timeout(30_000),
      });
      const createBody = await created.text();
      expect(created.status, createBody).toBe(507);
      expect(createBody).toContain("nothing was created");
      expect(createBody).toContain("--cold-read-timeout-ms");
      expect((await fetch(`${b}/v1/topics/u`)).status).toBe(404);
      expect(Date.now() - createStarted).toBeLessThan(15_000);

      // An offload whose PUT hangs.
      void fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }).catch(() => {});
      const metric = async (name: string) => {
        const text = await (await fetch(running!.metricsUrl!)).text();
        const line = text.split("\n").find((l) => l.startsWith(`${name}{topic="t",partition="0"}`));
        return line === undefined ? undefined : Number(line.split(" ").pop());
      };
      await expect
        .poll(() => metric("esb_partition_cold_backlog_segments"), { timeout: 10_000 })
        .toBeGreaterThan(0);
      await new Promise((r) => setTimeout(r, 500));

      // SIGTERM: the PUT in flight is abandoned (the segment stays local), the broker exits 0 well
      // below the shipped unit's TimeoutStopSec=60. Before: 175–182 s.
      const stopStarted = Date.now();
      const code = await running.stop("SIGTERM");
      const took = Date.now() - stopStarted;
      expect(code).toBe(0);
      expect(took).toBeLessThan(10_000);
      expect(running.stderr()).toContain("the broker is shutting down");
      running = null;

      // Nothing was lost: with S3 back, a restart still serves every record.
      hung.resume();
      running = await startBroker(
        `${dir}/data`,
        [
          "--cold-storage",
          "s3://stop/b1",
          "--cold-s3-endpoint",
          hung.endpoint,
          "--cleanup-interval-ms",
          "0",
        ],
        env(),
      );
      const all = await json(
        await fetch(`${running.httpUrl}/v1/topics/t/partitions/0/records?offset=0&max_records=100`),
      );
      expect(all.records.length).toBeGreaterThan(0);
      expect(all.records[0].offset).toBe(0);
    } finally {
      hung.resume();
      await running?.stop("SIGKILL");
      running = null;
      await hung.stop();
    }
  });

  it("refuses a malformed s3:// URL and missing credentials at start, naming what is wrong", async () => {
    const { dir } = tempDir();
    const bad = await runCli(
      ["serve", "--data-dir", `${dir}/data`, "--cold-storage", "s3://Bad_Bucket/x"],
      undefined,
      {
        env: { ...process.env, ...env() } as Record<string, string>,
      },
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("is not a bucket name");
    const noCreds = await runCli(
      ["serve", "--data-dir", `${dir}/data`, "--cold-storage", "s3://edge-e2e/x"],
      undefined,
      {
        env: { PATH: process.env.PATH ?? "" },
      },
    );
    expect(noCreds.code).toBe(2);
    expect(noCreds.stderr).toContain("AWS_ACCESS_KEY_ID");
    const both = await runCli(
      [
        "serve",
        "--data-dir",
        `${dir}/data`,
        "--cold-storage",
        "s3://edge-e2e/x",
        "--cold-storage-dir",
        dir,
      ],
      undefined,
      { env: { ...process.env, ...env() } as Record<string, string> },
    );
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("exclude each other");
  });
});
