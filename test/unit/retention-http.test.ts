import { describe, expect, it } from "vitest";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import {
  ManualClock,
  MemoryFileSystem,
  openBroker,
  produce,
} from "../helpers/compaction-fixtures.ts";
import { FakeBroker } from "./http-fake-broker.ts";

async function setup() {
  const clock = new ManualClock();
  const { broker } = await openBroker(new MemoryFileSystem(), clock);
  const app = createHttpApp({ broker, logger: new MemoryLogger() });
  await broker.createTopic({ name: "t", partitions: 1, config: { segment_ms: 1000 } });
  await produce(broker, "t", [
    { key: "a", value: "1" },
    { key: "a", value: "2" },
  ]);
  clock.advance(1000);
  await produce(broker, "t", [{ key: "a", value: "3" }]);
  return { app, broker, clock };
}

const patch = (body: unknown) => ({
  method: "PATCH",
  headers: { "content-type": "application/json" },
  body: typeof body === "string" ? body : JSON.stringify(body),
});

describe("HTTP routes for retention and compaction", () => {
  it("PATCH /v1/topics/{topic} changes the config and answers the topic", async () => {
    const { app, broker } = await setup();
    const res = await app.request(
      "/v1/topics/t",
      patch({ config: { cleanup_policy: "compact", tombstone_retention_ms: 0 } }),
    );
    expect(res.status).toBe(200);
    const body = (await res.json()) as { name: string; config: Record<string, unknown> };
    expect(body.name).toBe("t");
    expect(body.config).toMatchObject({
      cleanup_policy: "compact",
      tombstone_retention_ms: 0,
      cold_retention_ms: -1,
    });
    expect((await broker.describeTopic("t")).config.cleanup_policy).toBe("compact");
    await broker.close();
  });

  it("PATCH refuses bad bodies and bad values with errors naming the field", async () => {
    const { app, broker } = await setup();
    const cases: [unknown, number, string, RegExp][] = [
      ["not json", 400, "invalid_request", /not valid JSON/],
      [[1], 400, "invalid_request", /must be a JSON object/],
      [{ config: { retention_ms: 1 }, extra: 1 }, 400, "invalid_request", /unknown field "extra"/],
      [{ config: 5 }, 400, "invalid_request", /"config" must be a JSON object/],
      [{ config: { retention_ms: "1d" } }, 400, "invalid_config", /"retention_ms"/],
      [{ config: { compaction: true } }, 400, "invalid_config", /unknown key "compaction"/],
    ];
    for (const [body, status, code, message] of cases) {
      const res = await app.request("/v1/topics/t", patch(body));
      expect(res.status, JSON.stringify(body)).toBe(status);
      const error = ((await res.json()) as { error: { code: string; message: string } }).error;
      expect(error.code).toBe(code);
      expect(error.message).toMatch(message);
    }
    const missing = await app.request("/v1/topics/nope", patch({ config: {} }));
    expect(missing.status).toBe(404);
    expect((await broker.describeTopic("t")).config.retention_ms).toBe(7 * 24 * 3600_000);
    await broker.close();
  });

  it("POST /v1/admin/topics/{topic}/cleanup runs both tasks now and answers what they did", async () => {
    const { app, broker } = await setup();
    await app.request("/v1/topics/t", patch({ config: { cleanup_policy: "compact" } }));
    const res = await app.request("/v1/admin/topics/t/cleanup", { method: "POST" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      topic: string;
      partitions: {
        partition: number;
        retention: Record<string, unknown>;
        compaction: Record<string, unknown>;
      }[];
    };
    expect(body.topic).toBe("t");
    expect(body.partitions).toHaveLength(1);
    expect(body.partitions[0].retention).toMatchObject({
      task: "retention",
      status: "nothing_to_do",
    });
    expect(body.partitions[0].compaction).toMatchObject({
      task: "compaction",
      status: "compacted",
      records_dropped: 1,
      segments_before: 1,
      segments_after: 1,
    });
    expect((await app.request("/v1/admin/topics/nope/cleanup", { method: "POST" })).status).toBe(
      404,
    );
    await broker.close();
  });

  it("GET /v1/admin/storage shows the last run of each task per partition", async () => {
    const { app, broker } = await setup();
    await app.request("/v1/admin/topics/t/cleanup", { method: "POST" });
    const res = await app.request("/v1/admin/storage");
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      cold_storage_dir: string | null;
      topics: {
        name: string;
        partitions: { cleanup: Record<string, unknown>; segments: unknown[] }[];
      }[];
    };
    expect(body.cold_storage_dir).toBeNull();
    const cleanup = body.topics[0].partitions[0].cleanup;
    expect(cleanup.last_retention).toMatchObject({ task: "retention", partition: "t/0" });
    expect(cleanup.last_compaction).toMatchObject({ task: "compaction", status: "skipped" });
    expect(cleanup).toMatchObject({ cold_offload_failures: 0, stopped_reason: null, cold: null });
    await broker.close();
  });

  it("answers 404 on these routes for a broker without cleanup", async () => {
    const app = createHttpApp({ broker: new FakeBroker(), logger: new MemoryLogger() });
    expect((await app.request("/v1/admin/storage")).status).toBe(404);
    expect((await app.request("/v1/admin/topics/t/cleanup", { method: "POST" })).status).toBe(404);
    expect((await app.request("/v1/topics/t", patch({ config: {} }))).status).toBe(404);
  });
});
