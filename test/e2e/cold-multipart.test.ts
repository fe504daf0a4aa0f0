/**
 * A multipart upload that a crash leaves open (docs/storage.md "Cold tier"): the real process
 * offloads a segment above the 16 MiB multipart threshold to moto_server through the fault
 * proxy, which stalls one UploadPart; the broker is SIGKILLed while it waits. The store keeps the
 * open upload (and its parts) until someone aborts it: after the restart the broker finds it
 * (ListMultipartUploads under its prefix) and aborts it, a foreign upload under the prefix is left
 * alone, the segment reaches the cold tier exactly once, and every record is still served.
 *
 * Node target only (targets.ts `nodeOnlyE2eFiles`): the cold tier's logic over `fetch`, which
 * cold-storage.test.ts exercises on every target.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { AwsClient } from "aws4fetch";
import { startBroker, target, type BrokerProcess } from "./harness.ts";
import { waitFor } from "./helpers.ts";
import { tempDir } from "../helpers/tmp.ts";
import { motoCredentials, startMoto, type MotoServer } from "../helpers/moto.ts";
import { FaultProxy } from "../helpers/fault-proxy.ts";
import { parseS3Url, S3ColdStore } from "../../src/runtime/s3-cold-store.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";

let running: BrokerProcess | null = null;
let moto: MotoServer;
beforeAll(async () => {
  moto = await startMoto();
  await moto.createBucket("edge-mp");
});
afterEach(async () => {
  await running?.stop("SIGKILL");
  running = null;
});
afterAll(async () => {
  await moto?.stop();
});

async function json(res: Response): Promise<any> {
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return JSON.parse(text);
}

describe(`[${target}] cold storage: multipart uploads left open by a crash`, () => {
  it("aborts the upload a SIGKILL left open, leaves a foreign one, and stores the segment once", async () => {
    const { dir } = tempDir();
    const proxy = await FaultProxy.start(moto.endpoint);
    const bucket = new S3ColdStore({
      location: parseS3Url("s3://edge-mp/site"),
      credentials: motoCredentials,
      endpoint: moto.endpoint,
      logger: new MemoryLogger(),
    });
    try {
      const env = {
        AWS_ACCESS_KEY_ID: motoCredentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: motoCredentials.secretAccessKey,
      };
      const args = [
        "--cold-storage",
        "s3://edge-mp/site",
        "--cold-s3-endpoint",
        proxy.endpoint,
        "--cleanup-interval-ms",
        "0",
      ];
      running = await startBroker(`${dir}/data`, args, env);
      let b = running.httpUrl;
      // Segments of 17 MiB: each sealed one goes up in three parts (8 + 8 + 1 MiB).
      await json(
        await fetch(`${b}/v1/topics`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            name: "t",
            partitions: 1,
            config: { segment_bytes: 17 * 1024 * 1024 },
          }),
        }),
      );
      const value = (i: number) => `${String(i).padStart(6, "0")}-${"v".repeat(256 * 1024 - 7)}`;
      const total = 72; // 72 × 256 KiB = 18 MiB: one sealed segment and the active one
      for (let i = 0; i < total; i += 8)
        await json(
          await fetch(`${b}/v1/topics/t/records`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              records: Array.from({ length: 8 }, (_, j) => ({ value: value(i + j) })),
            }),
          }),
        );
      // A foreign upload under the prefix (not a name the cold tier writes): never aborted.
      const s3 = new AwsClient({ ...motoCredentials, service: "s3", region: "us-east-1" });
      const foreign = await s3.fetch(`${moto.endpoint}/edge-mp/site/notes/upload.bin?uploads`, {
        method: "POST",
      });
      expect(foreign.status, await foreign.text()).toBe(200);
      await json(
        await fetch(`${b}/v1/topics/t`, {
          method: "PATCH",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ config: { retention_bytes: 1 } }),
        }),
      );
      // Stall the second part: the upload is open, part 1 (and 3) stored, when the broker dies.
      proxy.add(
        { kind: "delay", ms: 20_000 },
        { times: 1, match: (r) => r.method === "PUT" && r.path.includes("partNumber=2&") },
      );
      void fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }).catch(() => {});
      await waitFor("the stalled part", () => proxy.log.some((e) => e.fault?.startsWith("delay")));
      await waitFor("the open upload in the bucket", async () =>
        (await bucket.listUploads()).some((u) => u.key.endsWith(".log")),
      );
      await running.stop("SIGKILL");
      proxy.clear();
      const open = await bucket.listUploads();
      expect(open.filter((u) => u.key.startsWith("topics/t/0/")).length).toBeGreaterThan(0);

      running = await startBroker(`${dir}/data`, args, env);
      b = running.httpUrl;
      await waitFor("the stale upload aborted", () =>
        /"event":"cold.stale_uploads_aborted"/.test(running!.stderr()),
      );
      const after = await bucket.listUploads();
      expect(
        after.filter((u) => u.key.startsWith("topics/")),
        JSON.stringify(after),
      ).toEqual([]);
      expect(after.map((u) => u.key)).toEqual(["notes/upload.bin"]);
      expect(running.stderr()).toMatch(/"event":"cold.foreign_uploads".*"count":1/);
      const run = await json(await fetch(`${b}/v1/admin/topics/t/cleanup`, { method: "POST" }));
      expect(run.partitions[0].retention.status).toBe("ok");
      expect(run.partitions[0].retention.segments_offloaded).toBe(1);
      // The segment is in the cold tier once: one log and one index object, no upload left open.
      const objects = (await bucket.list("topics/t/0/")).map((o) => o.key);
      expect(objects.filter((k) => k.endsWith(".log"))).toHaveLength(1);
      expect(objects.filter((k) => k.endsWith(".index"))).toHaveLength(1);
      expect((await bucket.listUploads()).filter((u) => u.key.startsWith("topics/"))).toEqual([]);
      const storage = await json(await fetch(`${b}/v1/admin/storage`));
      expect(storage.topics[0].partitions[0].cleanup.cold.segments).toBe(1);
      // Every record, from the cold segment and the local one, in order, once.
      const read: string[] = [];
      for (let offset = 0, pages = 0; offset < total && pages < 100; pages++) {
        const page = await json(
          await fetch(`${b}/v1/topics/t/partitions/0/records?offset=${offset}&max_records=16`),
        );
        read.push(...page.records.map((r: { value: string }) => r.value.slice(0, 6)));
        offset = page.next_offset;
      }
      expect(read).toEqual(Array.from({ length: total }, (_, i) => String(i).padStart(6, "0")));
      expect(running.stderr()).not.toContain(motoCredentials.secretAccessKey);
    } finally {
      await proxy.close();
    }
  }, 120_000);
});
