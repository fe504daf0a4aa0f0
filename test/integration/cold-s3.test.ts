/**
 * The broker's cold tier on a real S3-compatible server (moto_server on loopback) behind a fault
 * proxy: segments leave the local disk only once their objects are stored and verified, a 403
 * window, 500s and resets, or a store that keeps corrupt bodies behind ETags that are not MD5s
 * (SSE-KMS) never lose a segment, every record is still served (by ranged reads)
 * and the objects are byte-identical to the segments; foreign objects under the prefix are
 * reported and never deleted; a lost cold index is rebuilt from a listing, and a lost data
 * directory adopts the bucket's segments and continues after them, never at offset 0.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import { bytesSource } from "../../src/storage/cold-objects.ts";
import { parseS3Url, S3ColdStore } from "../../src/runtime/s3-cold-store.ts";
import { FaultProxy } from "../helpers/fault-proxy.ts";
import { motoCredentials, startMoto, type MotoServer } from "../helpers/moto.ts";
import {
  fetchAll,
  ManualClock,
  MemoryFileSystem,
  openBroker,
  produce,
  type ReadRecord,
  type Rec,
} from "../helpers/compaction-fixtures.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";

const startMs = 1_700_000_000_000;
const localDir = "/data/topics/t/0";
let moto: MotoServer;
let proxy: FaultProxy;

beforeAll(async () => {
  moto = await startMoto();
  proxy = await FaultProxy.start(moto.endpoint);
});
afterAll(async () => {
  await proxy?.close();
  await moto?.stop();
});

function s3(bucket: string, logger = new MemoryLogger(), attempts?: number): S3ColdStore {
  return new S3ColdStore({
    location: parseS3Url(`s3://${bucket}/edge`),
    credentials: motoCredentials,
    endpoint: proxy.endpoint,
    logger,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 40,
    attempts,
  });
}

function records(n: number, tag: string): Rec[] {
  return Array.from({ length: n }, (_, i) => ({
    key: `k${i % 3}`,
    value: `${tag}-${i}-${"v".repeat(60)}`,
  }));
}

function same(a: readonly ReadRecord[], b: readonly ReadRecord[]): boolean {
  return (
    a.length === b.length &&
    a.every((r, i) => r.offset === b[i].offset && bytesEqual(r.bytes, b[i].bytes))
  );
}

describe("cold storage on S3", () => {
  it("keeps segments local through a 403 window, offloads them through 500s and resets, and serves every record from the bucket", async () => {
    const bucket = "edge-a";
    await moto.createBucket(bucket);
    const fs = new MemoryFileSystem({ seed: 5 });
    const clock = new ManualClock(startMs);
    const logger = new MemoryLogger();
    const store = s3(bucket, logger);
    const { broker } = await openBroker(fs, clock, { coldStore: store, logger });
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_bytes: 1 },
    });
    for (const tag of ["a", "b", "c", "d"]) {
      await produce(broker, "t", records(5, tag));
      clock.advance(1000);
    }
    await produce(broker, "t", records(1, "e"));
    const original = await fetchAll(broker, "t", 0);
    const segments = new Map<string, Uint8Array>();
    for (const path of fs.listTree(localDir))
      if (path.endsWith(".log"))
        segments.set(path.slice(localDir.length + 1), fs.readFileSync(path));
    expect(segments.size).toBe(5);

    // A 403 window: nothing leaves the disk, the error says what to check.
    proxy.forbid(true);
    let [run] = (await broker.cleanup("t")).partitions;
    proxy.forbid(false);
    expect(run.retention.status).toBe("offload_failed");
    expect(run.retention.offload_error).toContain("AccessDenied");
    expect(fs.listTree(localDir).filter((p) => p.endsWith(".log"))).toHaveLength(5);
    expect(same(await fetchAll(broker, "t", 0), original)).toBe(true);

    // 500s, a reset in the middle of an upload, a slow answer: retried; every segment goes.
    proxy.add(
      { kind: "status", status: 500, code: "InternalError" },
      { times: 3, match: (r) => r.method === "PUT" },
    );
    proxy.add(
      { kind: "reset" },
      { times: 1, match: (r) => r.method === "PUT" && r.path.endsWith(".log") },
    );
    proxy.add({ kind: "delay", ms: 50 }, { times: 2, match: (r) => r.method === "HEAD" });
    [run] = (await broker.cleanup("t")).partitions;
    expect(run.retention).toMatchObject({
      status: "ok",
      segments_offloaded: 4,
      segments_deleted: 4,
    });
    expect(fs.listTree(localDir).filter((p) => p.endsWith(".log"))).toEqual([
      `${localDir}/00000000000000000020.log`,
    ]);
    expect(same(await fetchAll(broker, "t", 0), original)).toBe(true);
    const direct = new S3ColdStore({
      location: parseS3Url(`s3://${bucket}/edge`),
      credentials: motoCredentials,
      endpoint: moto.endpoint,
      logger: new MemoryLogger(),
    });
    for (const [name, bytes] of segments) {
      if (name === "00000000000000000020.log") continue;
      expect(bytesEqual(await direct.get(`topics/t/0/${name}`), bytes), name).toBe(true);
    }

    // Foreign objects under the prefix: reported, never deleted.
    await direct.put("topics/t/0/notes.txt", bytesSource(new Uint8Array([1, 2, 3])));
    await direct.put("topics/t/README", bytesSource(new Uint8Array([4])));
    await broker.close();

    // The cold index lost: rebuilt from a listing; every record still served.
    await fs.unlink("/data/topics/t/cold_index.json");
    const logger2 = new MemoryLogger();
    const { broker: again } = await openBroker(fs, new ManualClock(startMs + 60_000), {
      coldStore: s3(bucket, logger2),
      logger: logger2,
    });
    expect(logger2.named("cold.index_rebuilt")[0]).toMatchObject({
      segments: 4,
      first_offset: 0,
      end_offset: 20,
    });
    expect(logger2.named("cold.foreign_objects")[0]).toMatchObject({
      objects: ["topics/t/0/notes.txt"],
    });
    expect(same(await fetchAll(again, "t", 0), original)).toBe(true);
    await again.cleanup("t");
    expect((await direct.list("topics/t/")).map((o) => o.key)).toContain("topics/t/0/notes.txt");
    expect((await direct.list("topics/t/")).map((o) => o.key)).toContain("topics/t/README");
    await again.close();

    // The whole data directory lost: the topic created again adopts the bucket's segments and
    // continues after them.
    const empty = new MemoryFileSystem({ seed: 6 });
    const { broker: fresh } = await openBroker(empty, new ManualClock(startMs + 120_000), {
      coldStore: s3(bucket),
    });
    await fresh.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_bytes: 1 },
    });
    expect(await fresh.listOffsets({ topic: "t", partition: 0 })).toEqual({
      logStartOffset: 0,
      highWatermark: 20,
    });
    expect(same(await fetchAll(fresh, "t", 0), original.slice(0, 20))).toBe(true);
    expect(await produce(fresh, "t", records(1, "f"))).toBe(20);
    await fresh.close();
  });

  it("keeps a segment local while an SSE-KMS store keeps a corrupt copy, retries the upload, and offloads it once the copy reads back whole", async () => {
    const bucket = "edge-kms";
    await moto.createBucket(bucket);
    const fs = new MemoryFileSystem({ seed: 7 });
    const clock = new ManualClock(startMs);
    const logger = new MemoryLogger();
    const { broker } = await openBroker(fs, clock, { coldStore: s3(bucket, logger, 3), logger });
    await broker.createTopic({
      name: "t",
      partitions: 1,
      config: { segment_ms: 1000, retention_bytes: 1 },
    });
    for (const tag of ["a", "b"]) {
      await produce(broker, "t", records(5, tag));
      clock.advance(1000);
    }
    await produce(broker, "t", records(1, "c"));
    const original = await fetchAll(broker, "t", 0);
    const first = `${localDir}/00000000000000000000.log`;
    const firstBytes = fs.readFileSync(first);
    const logPuts = () =>
      proxy.log.filter(
        (e) =>
          e.method === "PUT" &&
          e.path.startsWith(`/${bucket}/`) &&
          e.path.endsWith("/00000000000000000000.log"),
      );

    proxy.sseKms(true);
    try {
      // Every copy of the first segment's log is kept with a byte changed: each verification
      // reads it back, finds it corrupt, and uploads again; after 3 tries the offload fails and
      // nothing leaves the disk.
      proxy.add(
        { kind: "corrupt_body" },
        { times: 3, match: (r) => r.method === "PUT" && r.path.endsWith(".log") },
      );
      let [run] = (await broker.cleanup("t")).partitions;
      expect(run.retention.status).toBe("offload_failed");
      expect(run.retention.offload_error).toContain("kept holding something else");
      expect(logPuts()).toHaveLength(3);
      expect(logger.named("cold.s3_verify_failed")).toHaveLength(3);
      expect(fs.listTree(localDir).filter((p) => p.endsWith(".log"))).toHaveLength(3);
      expect(bytesEqual(fs.readFileSync(first), firstBytes)).toBe(true);
      expect(same(await fetchAll(broker, "t", 0), original)).toBe(true);

      // The next pass uploads again; the copies read back whole, the segments go.
      [run] = (await broker.cleanup("t")).partitions;
      expect(run.retention).toMatchObject({
        status: "ok",
        segments_offloaded: 2,
        segments_deleted: 2,
      });
      expect(logPuts()).toHaveLength(4);
      expect(logger.named("cold.s3_read_back_verification")).toHaveLength(1);
    } finally {
      proxy.sseKms(false);
      proxy.clear();
    }
    expect(fs.listTree(localDir).filter((p) => p.endsWith(".log"))).toHaveLength(1);
    const direct = new S3ColdStore({
      location: parseS3Url(`s3://${bucket}/edge`),
      credentials: motoCredentials,
      endpoint: moto.endpoint,
      logger: new MemoryLogger(),
    });
    expect(bytesEqual(await direct.get("topics/t/0/00000000000000000000.log"), firstBytes)).toBe(
      true,
    );
    expect(same(await fetchAll(broker, "t", 0), original)).toBe(true);
    await broker.close();
  });
});
