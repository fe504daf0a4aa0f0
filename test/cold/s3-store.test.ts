/**
 * The S3 cold store against a real S3-compatible server process (moto_server on loopback): the
 * ColdStore conformance suite, then faults injected by a proxy between the store and the server
 * (500s, throttling, resets mid-upload, a store that acknowledges half a body or keeps a corrupt
 * one, ETags that are not MD5s (SSE-KMS) verified by reading back, a 403 window,
 * truncated listings without a continuation token, multipart uploads a crash left open), and bad input (malformed URLs, an unreachable
 * endpoint, a missing bucket). Every object that `put` accepted is byte-identical in the server.
 */
import { createServer, type Socket } from "node:net";
import { AwsClient } from "aws4fetch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { bytesSource, isColdStoreError } from "../../src/storage/cold-objects.ts";
import { isColdTierKey } from "../../src/storage/cold-store.ts";
import {
  parseS3Url,
  S3ColdStore,
  type S3ColdStoreOptions,
} from "../../src/runtime/s3-cold-store.ts";
import { FaultProxy } from "../helpers/fault-proxy.ts";
import { freePort, motoCredentials, startMoto, type MotoServer } from "../helpers/moto.ts";
import { coldStoreConformance, patternBytes } from "./conformance.ts";

const MiB = 1024 * 1024;
let moto: MotoServer;
let bucketCounter = 0;

beforeAll(async () => {
  moto = await startMoto();
});
afterAll(async () => {
  await moto?.stop();
});

async function freshBucket(): Promise<string> {
  const name = `bucket-${++bucketCounter}`;
  await moto.createBucket(name);
  return name;
}

function store(
  bucket: string,
  extra: Partial<S3ColdStoreOptions> & { endpoint?: string; prefix?: string } = {},
): S3ColdStore {
  return new S3ColdStore({
    location: parseS3Url(`s3://${bucket}/${extra.prefix ?? "edge"}`),
    credentials: motoCredentials,
    endpoint: extra.endpoint ?? moto.endpoint,
    logger: extra.logger ?? new MemoryLogger(),
    retryBackoffMs: 5,
    retryBackoffMaxMs: 50,
    multipartThresholdBytes: 6 * MiB,
    partBytes: 5 * MiB,
    listPageKeys: 10,
    requestTimeoutMs: 3000,
    ...extra,
  });
}

coldStoreConformance(
  "S3ColdStore on moto_server",
  async () => ({ store: store(await freshBucket()), cleanup: async () => {} }),
  { largeObjectBytes: 12 * MiB + 5 },
);

describe("S3ColdStore under faults", () => {
  let proxy: FaultProxy;
  beforeAll(async () => {
    proxy = await FaultProxy.start(moto.endpoint);
  });
  afterAll(async () => {
    await proxy?.close();
  });

  it("retries 500s and SlowDown and stores the object byte for byte", async () => {
    const bucket = await freshBucket();
    const s = store(bucket, { endpoint: proxy.endpoint });
    proxy.add(
      { kind: "status", status: 500, code: "InternalError" },
      { times: 2, match: (r) => r.method === "PUT" },
    );
    proxy.add(
      { kind: "status", status: 503, code: "SlowDown" },
      { times: 2, match: (r) => r.method === "HEAD" },
    );
    const bytes = patternBytes(50_000, 4);
    await s.put("x/1", bytesSource(bytes));
    expect(await store(bucket).get("x/1")).toEqual(bytes);
    expect(proxy.log.filter((e) => e.fault !== null).length).toBe(4);
  });

  it("aborts open multipart uploads of its own keys but not one it is uploading now, nor a foreign one", async () => {
    const bucket = await freshBucket();
    const s = store(bucket, { endpoint: proxy.endpoint });
    const raw = new AwsClient({ ...motoCredentials, service: "s3", region: "us-east-1" });
    const open = async (key: string) => {
      const r = await raw.fetch(`${moto.endpoint}/${bucket}/edge/${key}?uploads`, {
        method: "POST",
      });
      expect(r.status, await r.text()).toBe(200);
    };
    // Left open by a crash: two of ours (one key twice); a foreign key; one outside the prefix.
    await open("topics/t/0/00000000000000000000.log");
    await open("topics/t/0/00000000000000000000.log");
    await open("topics/t/1/swap-2.json");
    await open("topics/t/0/notes.txt");
    const other = await raw.fetch(`${moto.endpoint}/${bucket}/elsewhere/x?uploads`, {
      method: "POST",
    });
    expect(other.status).toBe(200);
    // One of ours in flight now: its second part stalls while the pass runs.
    proxy.add(
      { kind: "delay", ms: 1500 },
      { times: 1, match: (r) => r.method === "PUT" && r.path.includes("partNumber=2&") },
    );
    const bytes = patternBytes(11 * MiB, 7);
    const uploading = s.put("topics/t/0/00000000000000000100.log", bytesSource(bytes));
    const deadline = Date.now() + 10_000;
    while (!proxy.log.some((e) => e.fault?.startsWith("delay")) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    const isOwn = (key: string) => isColdTierKey(key);
    const pass = await s.abortStaleUploads(isOwn);
    expect(pass.aborted.sort()).toEqual([
      "topics/t/0/00000000000000000000.log",
      "topics/t/0/00000000000000000000.log",
      "topics/t/1/swap-2.json",
    ]);
    expect(pass).toMatchObject({ failed: 0, foreign: 1 });
    await uploading;
    expect(bytesEqual(await store(bucket).get("topics/t/0/00000000000000000100.log"), bytes)).toBe(
      true,
    );
    expect((await s.listUploads()).map((u) => u.key)).toEqual(["topics/t/0/notes.txt"]);
    expect(await s.abortStaleUploads(isOwn)).toEqual({ aborted: [], failed: 0, foreign: 1 });
  });

  it("retries a connection reset in the middle of a multipart upload", async () => {
    const bucket = await freshBucket();
    const s = store(bucket, { endpoint: proxy.endpoint });
    proxy.add(
      { kind: "reset" },
      { times: 2, match: (r) => r.method === "PUT" && r.path.includes("partNumber=2") },
    );
    const bytes = patternBytes(13 * MiB, 5);
    await s.put("big/1", bytesSource(bytes));
    expect(bytesEqual(await store(bucket).get("big/1"), bytes)).toBe(true);
  });

  it("detects a store that acknowledges half a body, and uploads again until it holds the whole", async () => {
    const bucket = await freshBucket();
    const logger = new MemoryLogger();
    const s = store(bucket, { endpoint: proxy.endpoint, logger });
    proxy.add({ kind: "truncate_body" }, { times: 1, match: (r) => r.method === "PUT" });
    const bytes = patternBytes(40_000, 6);
    await s.put("half/1", bytesSource(bytes));
    expect(logger.named("cold.s3_verify_failed")[0]).toMatchObject({ key: "half/1" });
    expect(await store(bucket).get("half/1")).toEqual(bytes);
  });

  it("proves a put by its ETag alone when the ETag is the MD5 sent (no read-back)", async () => {
    const bucket = await freshBucket();
    const logger = new MemoryLogger();
    const s = store(bucket, { endpoint: proxy.endpoint, logger });
    const before = proxy.log.length;
    await s.put("etag/1", bytesSource(patternBytes(30_000, 8)));
    await s.put("etag/2", bytesSource(patternBytes(13 * MiB, 9)));
    const seen = proxy.log.slice(before);
    expect(seen.filter((e) => e.method === "GET")).toEqual([]);
    expect(seen.filter((e) => e.method === "HEAD")).toHaveLength(2);
    expect(logger.named("cold.s3_read_back_verification")).toEqual([]);
  });

  it("verifies by reading the object back when the ETag is not the MD5 (SSE-KMS), and uploads again what came back corrupt", async () => {
    const bucket = await freshBucket();
    const logger = new MemoryLogger();
    const s = store(bucket, { endpoint: proxy.endpoint, logger });
    proxy.sseKms(true);
    try {
      // A single PUT whose body the store keeps with one byte changed, its ETag no MD5.
      const small = patternBytes(40_000, 10);
      proxy.add({ kind: "corrupt_body" }, { times: 1, match: (r) => r.method === "PUT" });
      let before = proxy.log.length;
      await s.put("kms/1", bytesSource(small));
      expect(proxy.log.slice(before).filter((e) => e.fault === "corrupt_body")).toHaveLength(1);
      expect(proxy.log.slice(before).filter((e) => e.method === "PUT")).toHaveLength(2);
      expect(logger.named("cold.s3_verify_failed")[0]).toMatchObject({ key: "kms/1", attempt: 1 });
      expect(String(logger.named("cold.s3_verify_failed")[0].problem)).toContain("read back");
      expect(bytesEqual(await store(bucket).get("kms/1"), small)).toBe(true);
      expect(logger.named("cold.s3_read_back_verification")).toEqual([
        expect.objectContaining({ key: "kms/1", encryption: "aws:kms" }),
      ]);

      // A multipart upload whose second part the store keeps corrupt.
      const big = patternBytes(13 * MiB, 11);
      proxy.add(
        { kind: "corrupt_body" },
        { times: 1, match: (r) => r.method === "PUT" && r.path.includes("partNumber=2&") },
      );
      before = proxy.log.length;
      await s.put("kms/2", bytesSource(big));
      const seen = proxy.log.slice(before);
      expect(seen.filter((e) => e.fault === "corrupt_body")).toHaveLength(1);
      expect(seen.filter((e) => e.method === "POST" && e.path.includes("uploads"))).toHaveLength(2);
      expect(logger.named("cold.s3_verify_failed")[1]).toMatchObject({ key: "kms/2" });
      expect(String(logger.named("cold.s3_verify_failed")[1].problem)).toContain("(part 2)");
      expect(seen.filter((e) => e.method === "GET").length).toBeGreaterThan(2);
      expect(bytesEqual(await store(bucket).get("kms/2"), big)).toBe(true);

      // A store that never keeps the body whole: the put fails as corrupt after its attempts.
      proxy.add({ kind: "corrupt_body" }, { times: 3, match: (r) => r.method === "PUT" });
      let caught: unknown;
      try {
        await store(bucket, { endpoint: proxy.endpoint, attempts: 3 }).put(
          "kms/3",
          bytesSource(patternBytes(1000, 12)),
        );
      } catch (err) {
        caught = err;
      }
      expect(isColdStoreError(caught, "corrupt")).toBe(true);
      expect(String(caught)).toContain("read back");
    } finally {
      proxy.sseKms(false);
      proxy.clear();
    }
  });

  it("fails a 403 at once as access_denied, naming the code and the credentials to check, and works after the window", async () => {
    const bucket = await freshBucket();
    const s = store(bucket, { endpoint: proxy.endpoint });
    proxy.forbid(true);
    let caught: unknown;
    try {
      await s.put("f/1", bytesSource(patternBytes(10)));
    } catch (err) {
      caught = err;
    } finally {
      proxy.forbid(false);
    }
    expect(isColdStoreError(caught, "access_denied")).toBe(true);
    expect(String(caught)).toContain("AccessDenied");
    expect(String(caught)).toContain("AWS_ACCESS_KEY_ID");
    expect(String(caught)).not.toContain(motoCredentials.secretAccessKey);
    await s.put("f/1", bytesSource(patternBytes(10)));
  });

  it("refuses a listing page that says it is truncated but gives no continuation token", async () => {
    const bucket = await freshBucket();
    const s = store(bucket, { endpoint: proxy.endpoint });
    await s.put("l/1", bytesSource(patternBytes(3)));
    proxy.add(
      { kind: "truncated_listing" },
      { times: 1, match: (r) => r.path.includes("list-type=2") },
    );
    let caught: unknown;
    try {
      await s.list("l/");
    } catch (err) {
      caught = err;
    }
    expect(isColdStoreError(caught, "corrupt")).toBe(true);
    expect(String(caught)).toContain("no continuation token");
  });

  it("pages through a listing of more objects than a page holds", async () => {
    const bucket = await freshBucket();
    const s = store(bucket, { listPageKeys: 7 });
    const keys = Array.from({ length: 30 }, (_, i) => `pg/${String(i).padStart(2, "0")}`);
    for (const k of keys) await s.put(k, bytesSource(patternBytes(1)));
    expect((await s.list("pg/")).map((o) => o.key)).toEqual(keys);
  });
});

describe("S3ColdStore bad input", () => {
  it("refuses malformed s3:// URLs, naming what is wrong", () => {
    for (const [url, says] of [
      ["http://bucket/x", "expected s3://bucket"],
      ["s3://", "is not a bucket name"],
      ["s3://Upper/x", "is not a bucket name"],
      ["s3://ab/x", "is not a bucket name"],
      ["s3://bucket/a//b", "prefix"],
      ["s3://bucket/../x", "prefix"],
    ] as const)
      expect(() => parseS3Url(url), url).toThrow(says);
    expect(parseS3Url("s3://my-bucket")).toEqual({ bucket: "my-bucket", prefix: "" });
    expect(parseS3Url("s3://my-bucket/edge/a/")).toEqual({
      bucket: "my-bucket",
      prefix: "edge/a/",
    });
  });

  it("reports an unreachable endpoint as unavailable after its retries", async () => {
    const port = await freePort();
    const logger = new MemoryLogger();
    const s = store("nobody", { endpoint: `http://127.0.0.1:${port}`, attempts: 3, logger });
    let caught: unknown;
    try {
      await s.put("u/1", bytesSource(patternBytes(3)));
    } catch (err) {
      caught = err;
    }
    expect(isColdStoreError(caught, "unavailable")).toBe(true);
    expect(String(caught)).toContain("after 3 tries");
    // One line per retry: after every failed try but the last.
    expect(logger.named("cold.s3_retry")).toHaveLength(2);
    expect(await s.probe()).toMatchObject({ kind: "unavailable" });
  });

  it("abort() fails the requests in flight against a store that never answers at once, and later ones without trying (attack18 F8)", async () => {
    // Accepts connections and never answers: what a SIGSTOPped store looks like.
    const sockets: Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as { port: number }).port;
    try {
      const logger = new MemoryLogger();
      const s = store("hung", {
        endpoint: `http://127.0.0.1:${port}`,
        attempts: 6,
        requestTimeoutMs: 30_000,
        readTimeoutMs: 60_000,
        logger,
      });
      const outcome = (p: Promise<unknown>) =>
        p.then(
          () => null,
          (e: unknown) => e,
        );
      const put = outcome(s.put("u/1", bytesSource(patternBytes(3))));
      const list = outcome(s.list("u/"));
      await new Promise((r) => setTimeout(r, 300));
      const started = performance.now();
      s.abort();
      const [putError, listError] = await Promise.all([put, list]);
      expect(performance.now() - started).toBeLessThan(2_000);
      for (const err of [putError, listError]) {
        expect(isColdStoreError(err, "unavailable")).toBe(true);
        expect(String(err)).toContain("the broker is shutting down");
      }
      expect(logger.named("cold.s3_retry")).toHaveLength(0);
      const accepted = sockets.length;
      const later = await outcome(s.get("u/1"));
      expect(isColdStoreError(later, "unavailable")).toBe(true);
      expect(sockets.length).toBe(accepted); // not even a connection
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((r) => silent.close(r));
    }
  });

  it("reports a missing bucket as no_bucket, naming it", async () => {
    const s = store("no-such-bucket");
    let caught: unknown;
    try {
      await s.put("m/1", bytesSource(patternBytes(3)));
    } catch (err) {
      caught = err;
    }
    expect(isColdStoreError(caught, "no_bucket")).toBe(true);
    expect(String(caught)).toContain('bucket "no-such-bucket" does not exist');
  });
});
