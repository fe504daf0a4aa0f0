import { beforeEach, describe, expect, it, vi } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { encodeBase64 } from "../../src/lib/base64.ts";
import {
  fetchRecordsMax,
  fetchWaitMsMax,
  httpProduceMembersMax,
  httpProduceRecordsMax,
  recordPayloadBytesMax,
} from "../../src/lib/limits.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import type { HttpApp } from "../../src/transport/http/app.ts";
import { FakeBroker } from "./http-fake-broker.ts";

let broker: FakeBroker;
let logger: MemoryLogger;
let app: HttpApp;

beforeEach(() => {
  broker = new FakeBroker();
  logger = new MemoryLogger();
  app = createHttpApp({ broker, logger, maxRequestBytes: 64 * 1024 });
});

function postJson(
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> | Response {
  return app.request(path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

function postNdjson(path: string, body: string | Uint8Array): Promise<Response> | Response {
  return app.request(path, {
    method: "POST",
    headers: { "content-type": "application/x-ndjson" },
    body,
  });
}

async function createTopic(name = "orders", partitions = 1): Promise<void> {
  const res = await postJson("/v1/topics", { name, partitions });
  expect(res.status).toBe(201);
}

async function expectError(
  res: Response,
  status: number,
  code: string,
  message?: RegExp,
): Promise<{ code: string; message: string; details?: Record<string, unknown> }> {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  const body = (await res.json()) as {
    error: { code: string; message: string; details?: Record<string, unknown> };
  };
  expect(Object.keys(body)).toEqual(["error"]);
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe("string");
  if (message !== undefined) expect(body.error.message).toMatch(message);
  return body.error;
}

async function fetchRecords(query: string, partition = 0, topic = "orders") {
  const res = await app.request(`/v1/topics/${topic}/partitions/${partition}/records?${query}`);
  expect(res.status).toBe(200);
  return (await res.json()) as {
    records: { offset: number; timestamp: number; key: string | null; value: string }[];
    next_offset: number;
    high_watermark: number;
    log_start_offset: number;
  };
}

describe("createHttpApp: health and routing", () => {
  it("GET /healthz answers 200 with status ok", async () => {
    const res = await app.request("/healthz");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("unknown routes answer 404 not_found in the error shape", async () => {
    await expectError(await app.request("/v2/topics"), 404, "not_found", /GET \/v2\/topics/);
    await expectError(await app.request("/v1/topics/orders/records"), 404, "not_found");
    await expectError(await app.request("/v1/topics", { method: "PUT" }), 404, "not_found", /PUT/);
  });

  it("refuses a maxRequestBytes outside the limits", () => {
    expect(() => createHttpApp({ broker, logger, maxRequestBytes: 10 })).toThrow(RangeError);
    expect(() => createHttpApp({ broker, logger, sseHeartbeatMs: 0 })).toThrow(RangeError);
  });
});

describe("createHttpApp: topics", () => {
  it("POST /v1/topics creates a topic and answers 201 with its description", async () => {
    const res = await postJson("/v1/topics", {
      name: "orders",
      partitions: 2,
      config: { retention_ms: 1000 },
    });
    expect(res.status).toBe(201);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body.name).toBe("orders");
    expect(body.partitions).toEqual([
      {
        partition: 0,
        log_start_offset: 0,
        high_watermark: 0,
        size_bytes: 0,
        segments: 1,
        fenced: false,
      },
      {
        partition: 1,
        log_start_offset: 0,
        high_watermark: 0,
        size_bytes: 0,
        segments: 1,
        fenced: false,
      },
    ]);
    expect((body.config as Record<string, unknown>).retention_ms).toBe(1000);
  });

  it("POST /v1/topics defaults partitions to 1 and config to {}", async () => {
    const res = await postJson("/v1/topics", { name: "one" });
    expect(res.status).toBe(201);
    expect(((await res.json()) as { partitions: unknown[] }).partitions).toHaveLength(1);
  });

  it("POST /v1/topics answers 409 topic_exists for an existing name", async () => {
    await createTopic();
    await expectError(
      await postJson("/v1/topics", { name: "orders", partitions: 1 }),
      409,
      "topic_exists",
    );
  });

  it("POST /v1/topics maps the broker's refusal of a bad name or config to 400", async () => {
    await expectError(
      await postJson("/v1/topics", { name: "bad/name", partitions: 1 }),
      400,
      "invalid_topic_name",
    );
    await expectError(
      await postJson("/v1/topics", { name: "t", partitions: 0 }),
      400,
      "invalid_config",
    );
    const error = await expectError(
      await postJson("/v1/topics", { name: "t", partitions: 1, config: { colour: 1 } }),
      400,
      "invalid_config",
    );
    expect(error.details).toEqual({ config: "colour" });
  });

  it("POST /v1/topics answers 400 invalid_request for malformed or mistyped bodies", async () => {
    await expectError(
      await postJson("/v1/topics", "{not json"),
      400,
      "invalid_request",
      /not valid JSON/,
    );
    await expectError(await postJson("/v1/topics", "[1,2]"), 400, "invalid_request", /JSON object/);
    await expectError(
      await postJson("/v1/topics", { name: 7 }),
      400,
      "invalid_request",
      /"name" must be a string/,
    );
    await expectError(
      await postJson("/v1/topics", { name: "t", partitions: "3" }),
      400,
      "invalid_request",
      /"partitions" must be an integer/,
    );
    await expectError(
      await postJson("/v1/topics", { name: "t", config: [] }),
      400,
      "invalid_request",
      /"config" must be a JSON object/,
    );
    await expectError(
      await postJson("/v1/topics", { name: "t", partition: 3 }),
      400,
      "invalid_request",
      /unknown field "partition"/,
    );
    const notUtf8 = await app.request("/v1/topics", {
      method: "POST",
      body: new Uint8Array([0x7b, 0xff, 0x7d]),
    });
    await expectError(notUtf8, 400, "invalid_request", /UTF-8/);
    expect(broker.topics.size).toBe(0);
  });

  it("GET /v1/topics lists every topic description", async () => {
    await createTopic("b", 1);
    await createTopic("a", 2);
    const res = await app.request("/v1/topics");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { topics: { name: string; partitions: unknown[] }[] };
    expect(body.topics.map((t) => t.name)).toEqual(["a", "b"]);
    expect(body.topics[0].partitions).toHaveLength(2);
  });

  it("GET /v1/topics/{topic} describes one topic, 404 topic_not_found otherwise", async () => {
    await createTopic();
    const res = await app.request("/v1/topics/orders");
    expect(res.status).toBe(200);
    expect(((await res.json()) as { name: string }).name).toBe("orders");
    await expectError(await app.request("/v1/topics/nope"), 404, "topic_not_found");
  });

  it("DELETE /v1/topics/{topic} answers 204 with no body, then the topic is gone", async () => {
    await createTopic();
    const res = await app.request("/v1/topics/orders", { method: "DELETE" });
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    await expectError(await app.request("/v1/topics/orders"), 404, "topic_not_found");
    await expectError(
      await app.request("/v1/topics/orders", { method: "DELETE" }),
      404,
      "topic_not_found",
    );
  });
});

describe("createHttpApp: produce JSON", () => {
  beforeEach(() => createTopic("orders", 3));

  it("appends records and answers their offsets in request order", async () => {
    const res = await postJson("/v1/topics/orders/records", {
      records: [
        { value: "a", partition: 0 },
        { value: "b", partition: 2 },
        { value: "c", partition: 0 },
        { value: "d", partition: 0 },
      ],
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      offsets: [
        { partition: 0, offset: 0 },
        { partition: 2, offset: 0 },
        { partition: 0, offset: 1 },
        { partition: 0, offset: 2 },
      ],
    });
    const request = broker.produced[0];
    expect(request.partitions).toEqual(new Int32Array([0, 2, 0, 0]));
    expect((await fetchRecords("offset=0")).records.map((r) => r.value)).toEqual(["a", "c", "d"]);
  });

  it("sends one partition for all records when every record names the same one", async () => {
    await postJson("/v1/topics/orders/records", {
      records: [
        { value: "a", partition: 1 },
        { value: "b", partition: 1 },
      ],
    });
    expect(broker.produced[0].partition).toBe(1);
    expect(broker.produced[0].partitions).toBeUndefined();
  });

  it("leaves the choice to the broker (−1) for records without a partition", async () => {
    await postJson("/v1/topics/orders/records", {
      records: [{ value: "a" }, { value: "b", partition: 2 }],
    });
    expect(broker.produced[0].partitions).toEqual(new Int32Array([-1, 2]));
    await postJson("/v1/topics/orders/records", {
      records: [{ value: "a" }, { value: "b", partition: null }],
    });
    expect(broker.produced[1].partition).toBeUndefined();
    expect(broker.produced[1].partitions).toBeUndefined();
  });

  it("stores UTF-8 keys and values, no key for absent or null, and the empty key as a real key", async () => {
    await postJson("/v1/topics/orders/records", {
      records: [
        { key: "k€y", value: "välue", partition: 0 },
        { value: "no key", partition: 0 },
        { key: null, value: "null key", partition: 0 },
        { key: "", value: "", partition: 0 },
      ],
    });
    const { records } = await fetchRecords("offset=0");
    expect(records.map((r) => [r.key, r.value])).toEqual([
      ["k€y", "välue"],
      [null, "no key"],
      [null, "null key"],
      ["", ""],
    ]);
  });

  it("decodes key_b64 and value_b64 as bytes", async () => {
    const bytes = new Uint8Array([0, 255, 10, 13, 128]);
    await postJson("/v1/topics/orders/records", {
      records: [
        {
          key_b64: encodeBase64(new Uint8Array([1, 2])),
          value_b64: encodeBase64(bytes),
          partition: 1,
        },
      ],
    });
    const { records } = await fetchRecords("offset=0&encoding=base64", 1);
    expect(records[0].key).toBe("AQI=");
    expect(records[0].value).toBe(encodeBase64(bytes));
  });

  it("keeps a given timestamp and lets the broker stamp −1, null or absent", async () => {
    await postJson("/v1/topics/orders/records", {
      records: [
        { value: "a", partition: 0, timestamp: 1234 },
        { value: "b", partition: 0, timestamp: -1 },
        { value: "c", partition: 0, timestamp: null },
        { value: "d", partition: 0 },
      ],
    });
    const { records } = await fetchRecords("offset=0");
    expect(records.map((r) => r.timestamp)).toEqual([
      1234,
      broker.nowMs,
      broker.nowMs,
      broker.nowMs,
    ]);
  });

  const badRecords: [string, unknown, RegExp, string][] = [
    [
      "both value and value_b64",
      { value: "a", value_b64: "YQ==" },
      /records\[1\] has both value and value_b64/,
      "value_b64",
    ],
    [
      "both key and key_b64",
      { key: "a", key_b64: "YQ==", value: "x" },
      /records\[1\] has both key and key_b64/,
      "key_b64",
    ],
    ["no value", { key: "a" }, /records\[1\] has no value/, "value"],
    ["a null value", { value: null }, /records\[1\]\.value must be a string/, "value"],
    ["a numeric value", { value: 5 }, /records\[1\]\.value must be a string/, "value"],
    ["a numeric key", { key: 5, value: "x" }, /records\[1\]\.key must be a string or null/, "key"],
    [
      "URL-safe base64",
      { value_b64: "-_-_" },
      /records\[1\]\.value_b64 is not strict base64/,
      "value_b64",
    ],
    [
      "unpadded base64",
      { value_b64: "YQ" },
      /records\[1\]\.value_b64 is not strict base64/,
      "value_b64",
    ],
    [
      "base64 with whitespace",
      { value_b64: "YW Jj" },
      /records\[1\]\.value_b64 is not strict base64/,
      "value_b64",
    ],
    [
      "non-canonical base64",
      { value_b64: "YR==" },
      /records\[1\]\.value_b64 is not strict base64.*non-canonical/,
      "value_b64",
    ],
    [
      "bad key_b64",
      { key_b64: "a", value: "x" },
      /records\[1\]\.key_b64 is not strict base64/,
      "key_b64",
    ],
    [
      "a negative partition",
      { value: "x", partition: -1 },
      /records\[1\]\.partition must be an integer/,
      "partition",
    ],
    [
      "a fractional partition",
      { value: "x", partition: 1.5 },
      /records\[1\]\.partition/,
      "partition",
    ],
    ["a string partition", { value: "x", partition: "1" }, /records\[1\]\.partition/, "partition"],
    [
      "a timestamp below −1",
      { value: "x", timestamp: -2 },
      /records\[1\]\.timestamp must be an integer ≥ 0/,
      "timestamp",
    ],
    [
      "a timestamp above 2^53 - 1",
      { value: "x", timestamp: 2 ** 62 },
      /records\[1\]\.timestamp is above 2\^53 - 1 \(9007199254740991\), the largest/,
      "timestamp",
    ],
    [
      "a fractional timestamp",
      { value: "x", timestamp: 1.5 },
      /records\[1\]\.timestamp/,
      "timestamp",
    ],
    ["an unknown field", { value: "x", kye: "k" }, /records\[1\] has unknown field "kye"/, "kye"],
    [
      "a lone surrogate",
      { value: "a\ud800b" },
      /records\[1\]\.value is not valid Unicode/,
      "value",
    ],
  ];
  for (const [what, record, message, field] of badRecords) {
    it(`refuses a record with ${what} with 400 naming record and field, and appends none of the request`, async () => {
      const res = await postJson("/v1/topics/orders/records", {
        records: [{ value: "good", partition: 0 }, record, { value: "good too", partition: 0 }],
      });
      const error = await expectError(res, 400, "invalid_request", message);
      expect(error.details).toMatchObject({ record: 1, field });
      expect(broker.produced).toHaveLength(0);
      expect(broker.highWatermark("orders", 0)).toBe(0);
    });
  }

  it("refuses a record that is not an object", async () => {
    const error = await expectError(
      await postJson("/v1/topics/orders/records", { records: [{ value: "a" }, "b"] }),
      400,
      "invalid_request",
      /records\[1\] must be a JSON object/,
    );
    expect(error.details).toEqual({ record: 1 });
  });

  it("refuses bodies without a non-empty records array", async () => {
    await expectError(
      await postJson("/v1/topics/orders/records", { records: [] }),
      400,
      "invalid_request",
      /no records/,
    );
    await expectError(
      await postJson("/v1/topics/orders/records", { records: {} }),
      400,
      "invalid_request",
      /"records" array/,
    );
    await expectError(
      await postJson("/v1/topics/orders/records", [{ value: "a" }]),
      400,
      "invalid_request",
      /JSON object/,
    );
    await expectError(
      await postJson("/v1/topics/orders/records", { records: [{ value: "a" }], extra: 1 }),
      400,
      "invalid_request",
      /unknown field "extra"/,
    );
    await expectError(
      await postJson("/v1/topics/orders/records", '{"records": [{"value": "a"}'),
      400,
      "invalid_request",
      /not valid JSON/,
    );
    expect(broker.produced).toHaveLength(0);
  });

  it("refuses a record over the record size limit with 413 record_too_large", async () => {
    const big = createHttpApp({ broker, logger, maxRequestBytes: 2 * recordPayloadBytesMax });
    const res = await big.request("/v1/topics/orders/records", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        records: [{ value: "x" }, { key: "k", value: "v".repeat(recordPayloadBytesMax) }],
      }),
    });
    const error = await expectError(res, 413, "record_too_large", /records\[1\]/);
    expect(error.details).toMatchObject({ record: 1 });
    expect(broker.produced).toHaveLength(0);
  });

  it("answers 404 for an unknown topic and maps partition_not_found from the broker", async () => {
    await expectError(
      await postJson("/v1/topics/nope/records", { records: [{ value: "a" }] }),
      404,
      "topic_not_found",
    );
    await expectError(
      await postJson("/v1/topics/orders/records", { records: [{ value: "a", partition: 7 }] }),
      404,
      "partition_not_found",
    );
  });

  it("parses bodies of other content types as JSON, and refuses NDJSON-only query parameters on JSON", async () => {
    await expectError(
      await postJson("/v1/topics/orders/records", "a=b", {
        "content-type": "application/x-www-form-urlencoded",
      }),
      400,
      "invalid_request",
      /not valid JSON/,
    );
    await expectError(
      await postJson("/v1/topics/orders/records?partition=1", { records: [{ value: "a" }] }),
      400,
      "invalid_request",
      /NDJSON bodies only/,
    );
  });

  it("accepts JSON sent as text/plain or with no Content-Type", async () => {
    const plain = await app.request("/v1/topics/orders/records", {
      method: "POST",
      body: JSON.stringify({ records: [{ value: "a", partition: 0 }] }),
    });
    expect(plain.status).toBe(200);
    const none = await app.request("/v1/topics/orders/records", {
      method: "POST",
      body: new TextEncoder().encode('{"records":[{"value":"b","partition":0}]}'),
    });
    expect(none.status).toBe(200);
    expect((await fetchRecords("offset=0")).records.map((r) => r.value)).toEqual(["a", "b"]);
  });

  it("answers only after broker.produce resolves", async () => {
    let release!: () => void;
    broker.holdProduce = new Promise((resolve) => (release = resolve));
    let settled = false;
    const pending = Promise.resolve(
      postJson("/v1/topics/orders/records", { records: [{ value: "a", partition: 0 }] }),
    ).then((res) => {
      settled = true;
      return res;
    });
    while (broker.produced.length === 0) await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    release();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ offsets: [{ partition: 0, offset: 0 }] });
  });

  it("refuses a body of millions of records at the record cap without parsing it (docs/decisions.md §19)", async () => {
    const big = createHttpApp({ broker, logger, maxRequestBytes: 16 * 1024 * 1024 });
    const over = 1_000_000;
    // Bodies the fast decoder leaves to JSON.parse (an integer value), an array at the top, and
    // the cap hidden in a field the records do not have.
    const bodies = [
      `{"records":[${'{"value":1},'.repeat(over)}{"value":1}]}`,
      `[${"{},".repeat(over)}{}]`,
      `{"records":[{"value":"a","key":[${"0,".repeat(over)}0]}]}`,
    ];
    const parse = vi.spyOn(JSON, "parse");
    try {
      for (const [i, body] of bodies.entries()) {
        const res = await big.request("/v1/topics/orders/records", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
        });
        const error = await expectError(
          res,
          400,
          "invalid_request",
          i === 0
            ? /: the request holds more than 10000 records$/
            : /: (the body|field "records\[0\]\.key") is an array of more than 10000 elements: the body must be a JSON object with a "records" array of at most 10000 records$/,
        );
        expect(error.details?.limit_records).toBe(httpProduceRecordsMax);
        // Never handed to JSON.parse: nothing of the body's million elements was built.
        expect(parse.mock.calls.filter(([text]) => String(text).length > 1_000_000)).toEqual([]);
      }
    } finally {
      parse.mockRestore();
    }
    expect(broker.produced).toEqual([]);
  });
  it("refuses a body whose objects hold more than httpProduceMembersMax members without parsing it (docs/decisions.md §19)", async () => {
    const big = createHttpApp({ broker, logger, maxRequestBytes: 16 * 1024 * 1024 });
    const fields = (from: number, count: number) =>
      Array.from({ length: count }, (_, i) => `,"f${from + i}":1`).join("");
    // A million fields in one record, and fewer spread over ten thousand records (no object
    // anywhere near the limit on its own).
    const bodies: [string, string][] = [
      [`{"records":[{"value":"a"${fields(0, 1_000_000)}}]}`, "records[0]"],
      [
        `{"records":[${Array.from({ length: 10_000 }, (_, r) => `{"value":"a"${fields(r * 64, 64)}}`).join(",")}]}`,
        // Record r holds members 1 + 65r + 1 … 1 + 65r + 65; the first past the limit is max + 1.
        `records[${Math.floor((httpProduceMembersMax - 1) / 65)}]`,
      ],
    ];
    const parse = vi.spyOn(JSON, "parse");
    try {
      for (const [body, field] of bodies) {
        const res = await big.request("/v1/topics/orders/records", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
        });
        const error = await expectError(
          res,
          400,
          "invalid_request",
          /: the body's objects hold more than 60001 members \(passed in field "records\[\d+\]"\): the body must be a JSON object with a "records" array of at most 10000 records, each of at most 6 fields$/,
        );
        expect(error.details).toEqual({ field, limit_members: httpProduceMembersMax });
        expect(parse.mock.calls.filter(([text]) => String(text).length > 1_000_000)).toEqual([]);
      }
    } finally {
      parse.mockRestore();
    }
    expect(broker.produced).toEqual([]);
  });

  it("still decodes a body of httpProduceMembersMax members on the general path", async () => {
    // Every record names its partition twice (the fast decoder gives up on a repeated field):
    // 1 + 10 000 × 6 members, the most a body may hold.
    const big = createHttpApp({ broker, logger, maxRequestBytes: 16 * 1024 * 1024 });
    const record =
      '{"partition":0,"value":"a","key":"k","timestamp":5,"partition":1,"timestamp":6}';
    const res = await big.request("/v1/topics/orders/records", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"records":[${Array(httpProduceRecordsMax).fill(record).join(",")}]}`,
    });
    expect(res.status).toBe(200);
    const { offsets } = (await res.json()) as { offsets: { partition: number }[] };
    expect(offsets.length).toBe(httpProduceRecordsMax);
    expect(offsets.every((o) => o.partition === 1)).toBe(true);
  });
});

describe("createHttpApp: produce NDJSON", () => {
  beforeEach(() => createTopic("orders", 2));

  it("makes one record per line with the line's bytes as value and no key", async () => {
    const res = await postNdjson(
      "/v1/topics/orders/records?partition=1",
      '{"a":1}\nplain text\n  spaced  \n',
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      offsets: [
        { partition: 1, offset: 0 },
        { partition: 1, offset: 1 },
        { partition: 1, offset: 2 },
      ],
    });
    const { records } = await fetchRecords("offset=0", 1);
    expect(records.map((r) => [r.key, r.value])).toEqual([
      [null, '{"a":1}'],
      [null, "plain text"],
      [null, "  spaced  "],
    ]);
  });

  it("does not make an empty record from a final trailing newline, and accepts a last line without one", async () => {
    await postNdjson("/v1/topics/orders/records?partition=0", "a\nb\n");
    await postNdjson("/v1/topics/orders/records?partition=0", "c\nd");
    expect((await fetchRecords("offset=0")).records.map((r) => r.value)).toEqual([
      "a",
      "b",
      "c",
      "d",
    ]);
  });

  it("skips blank lines and drops one CR before each LF", async () => {
    await postNdjson("/v1/topics/orders/records?partition=0", "a\r\n\r\n\nb\r\n\n");
    expect((await fetchRecords("offset=0")).records.map((r) => r.value)).toEqual(["a", "b"]);
  });

  it("applies ?key to every record, with ?key= as the empty key", async () => {
    await postNdjson("/v1/topics/orders/records?partition=0&key=user-1", "a\nb\n");
    await postNdjson("/v1/topics/orders/records?partition=0&key=", "c\n");
    expect((await fetchRecords("offset=0")).records.map((r) => r.key)).toEqual([
      "user-1",
      "user-1",
      "",
    ]);
  });

  it("keeps arbitrary bytes of a line verbatim", async () => {
    const body = new Uint8Array([0xff, 0x00, 0xfe, 0x0a, 0x41]);
    await postNdjson("/v1/topics/orders/records?partition=0", body);
    const { records } = await fetchRecords("offset=0&encoding=base64");
    expect(records.map((r) => r.value)).toEqual([
      encodeBase64(new Uint8Array([0xff, 0x00, 0xfe])),
      "QQ==",
    ]);
  });

  it("refuses a body with no records and bad query parameters", async () => {
    await expectError(
      await postNdjson("/v1/topics/orders/records", "\n\n"),
      400,
      "invalid_request",
      /no records/,
    );
    await expectError(
      await postNdjson("/v1/topics/orders/records", ""),
      400,
      "invalid_request",
      /no records/,
    );
    await expectError(
      await postNdjson("/v1/topics/orders/records?partition=-1", "a"),
      400,
      "invalid_request",
      /query parameter "partition"/,
    );
    await expectError(
      await postNdjson("/v1/topics/orders/records?partition=x", "a"),
      400,
      "invalid_request",
      /query parameter "partition"/,
    );
    await expectError(
      await postNdjson("/v1/topics/orders/records?key=a&key=b", "a"),
      400,
      "invalid_request",
      /"key" is given 2 times/,
    );
    expect(broker.produced).toHaveLength(0);
  });
});

describe("createHttpApp: fetch", () => {
  beforeEach(async () => {
    await createTopic("orders", 2);
    await postJson("/v1/topics/orders/records", {
      records: [
        { key: "k0", value: "v0", partition: 0 },
        { value: "v1", partition: 0 },
        { key: "k2", value: "v2", partition: 0 },
      ],
    });
  });

  it("returns records with offsets, timestamps, keys, values and the partition's bounds", async () => {
    expect(await fetchRecords("offset=1")).toEqual({
      records: [
        { offset: 1, timestamp: broker.nowMs, key: null, value: "v1" },
        { offset: 2, timestamp: broker.nowMs, key: "k2", value: "v2" },
      ],
      next_offset: 3,
      high_watermark: 3,
      log_start_offset: 0,
    });
  });

  it("honours max_records and max_bytes", async () => {
    const one = await fetchRecords("offset=0&max_records=1");
    expect(one.records.map((r) => r.offset)).toEqual([0]);
    expect(one.next_offset).toBe(1);
    const small = await fetchRecords("offset=0&max_bytes=1");
    expect(small.records).toHaveLength(1);
  });

  it("resolves offset=earliest and offset=latest", async () => {
    expect((await fetchRecords("offset=earliest")).records).toHaveLength(3);
    const latest = await fetchRecords("offset=latest");
    expect(latest.records).toEqual([]);
    expect(latest.next_offset).toBe(3);
  });

  it("gives keys and values as base64 with encoding=base64", async () => {
    const { records } = await fetchRecords("offset=0&max_records=2&encoding=base64");
    expect(records.map((r) => [r.key, r.value])).toEqual([
      ["azA=", "djA="],
      [null, "djE="],
    ]);
  });

  it("answers 416 offset_out_of_range past the high watermark", async () => {
    const error = await expectError(
      await app.request("/v1/topics/orders/partitions/0/records?offset=4"),
      416,
      "offset_out_of_range",
    );
    expect(error.details).toEqual({ log_start_offset: 0, high_watermark: 3 });
  });

  it("answers 404 for an unknown topic or partition", async () => {
    await expectError(
      await app.request("/v1/topics/nope/partitions/0/records?offset=0"),
      404,
      "topic_not_found",
    );
    await expectError(
      await app.request("/v1/topics/orders/partitions/9/records?offset=0"),
      404,
      "partition_not_found",
    );
  });

  const badQueries: [string, RegExp][] = [
    ["", /query parameter "offset" is required/],
    ["offset=", /query parameter "offset" "" must be an integer/],
    ["offset=-1", /query parameter "offset" "-1"/],
    ["offset=1.5", /query parameter "offset"/],
    ["offset=1e3", /query parameter "offset"/],
    ["offset=0x10", /query parameter "offset"/],
    ["offset=%201", /query parameter "offset"/],
    ["offset=99999999999999999999", /query parameter "offset"/],
    ["offset=0&offset=1", /query parameter "offset" is given 2 times/],
    ["offset=0&max_records=0", /query parameter "max_records" "0" must be an integer from 1 to/],
    [`offset=0&max_records=${fetchRecordsMax + 1}`, /query parameter "max_records"/],
    ["offset=0&max_bytes=0", /query parameter "max_bytes"/],
    ["offset=0&max_bytes=abc", /query parameter "max_bytes"/],
    [`offset=0&wait_ms=${fetchWaitMsMax + 1}`, /query parameter "wait_ms"/],
    ["offset=0&wait_ms=-5", /query parameter "wait_ms"/],
    ["offset=0&encoding=hex", /query parameter "encoding" "hex" must be "utf8" or "base64"/],
  ];
  for (const [query, message] of badQueries) {
    it(`answers 400 naming the parameter for ?${query}`, async () => {
      const error = await expectError(
        await app.request(`/v1/topics/orders/partitions/0/records?${query}`),
        400,
        "invalid_request",
        message,
      );
      expect(error.details).toEqual({ parameter: /"(\w+)"/.exec(message.source)![1] });
    });
  }

  it("answers 400 naming the partition path parameter when it is not a non-negative integer", async () => {
    const error = await expectError(
      await app.request("/v1/topics/orders/partitions/x/records?offset=0"),
      400,
      "invalid_request",
      /path parameter "partition" "x"/,
    );
    expect(error.details).toEqual({ parameter: "partition" });
    await expectError(
      await app.request("/v1/topics/orders/partitions/-1/records?offset=0"),
      400,
      "invalid_request",
      /path parameter "partition"/,
    );
  });

  it("long-polls with wait_ms and wakes when a record arrives", async () => {
    const polling = Promise.resolve(
      app.request(`/v1/topics/orders/partitions/0/records?offset=3&wait_ms=${fetchWaitMsMax}`),
    );
    await broker.whenWaiting(1);
    await postJson("/v1/topics/orders/records", { records: [{ value: "late", partition: 0 }] });
    const res = await polling;
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      records: { offset: number; value: string }[];
      next_offset: number;
    };
    expect(body.records).toEqual([
      { offset: 3, timestamp: broker.nowMs, key: null, value: "late" },
    ]);
    expect(body.next_offset).toBe(4);
  });

  it("passes the request's abort signal, so a closed long-poll stops waiting", async () => {
    const controller = new AbortController();
    const polling = Promise.resolve(
      app.request(`/v1/topics/orders/partitions/0/records?offset=3&wait_ms=${fetchWaitMsMax}`, {
        signal: controller.signal,
      }),
    );
    await broker.whenWaiting(1);
    controller.abort();
    const res = await polling;
    expect(broker.waitingFetches).toBe(0);
    expect(((await res.json()) as { records: unknown[] }).records).toEqual([]);
  });

  it("ends a long-poll at once when the server's shutdown signal aborts", async () => {
    const shutdown = new AbortController();
    const polling = Promise.resolve(
      app.request(
        `/v1/topics/orders/partitions/0/records?offset=3&wait_ms=${fetchWaitMsMax}`,
        {},
        { shutdownSignal: shutdown.signal },
      ),
    );
    await broker.whenWaiting(1);
    shutdown.abort();
    const res = await polling;
    expect(res.status).toBe(200);
    expect(broker.waitingFetches).toBe(0);
  });
});

describe("createHttpApp: errors", () => {
  it("answers with the table's status and code, and includes details", async () => {
    await createTopic();
    broker.failNext = {
      method: "produce",
      error: new BrokerError(
        Errors.partitionFenced,
        'Cannot append to partition "orders/0": partition is fenced after a failed fsync, restart required',
        { partition: 0 },
      ),
    };
    const error = await expectError(
      await postJson("/v1/topics/orders/records", { records: [{ value: "a" }] }),
      503,
      "partition_fenced",
      /restart required/,
    );
    expect(error.details).toEqual({ partition: 0 });
    broker.failNext = {
      method: "produce",
      error: new BrokerError(Errors.storageError, "Cannot append: disk full"),
    };
    const plain = await expectError(
      await postJson("/v1/topics/orders/records", { records: [{ value: "a" }] }),
      507,
      "storage_error",
    );
    expect(plain.details).toBeUndefined();
  });

  it("answers 500 internal for an unexpected error and logs it through the Logger", async () => {
    broker.failNext = { method: "listTopics", error: new TypeError("boom") };
    const error = await expectError(await app.request("/v1/topics"), 500, "internal");
    expect(error.message).not.toMatch(/boom/);
    const logged = logger.named("http.internal_error");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ method: "GET", path: "/v1/topics", error: "boom" });
  });

  it("never answers 500 for garbage input on any route", async () => {
    await createTopic();
    const inputs: [string, RequestInit][] = [
      ["/v1/topics", { method: "POST", body: "\u0000\u0001" }],
      ["/v1/topics", { method: "POST", body: "null" }],
      ["/v1/topics/orders/records", { method: "POST", body: "null" }],
      ["/v1/topics/orders/records", { method: "POST", body: '{"records":[null]}' }],
      [
        "/v1/topics/orders/records",
        { method: "POST", body: '{"records":[{"value":"a","__proto__":{"x":1}}]}' },
      ],
      [
        "/v1/topics/orders/records",
        { method: "POST", body: '{"records":[{"value":"a","partition":1e400}]}' },
      ],
      [
        "/v1/topics/orders/records",
        { method: "POST", body: '{"records":[{"value":"a","timestamp":9007199254740993}]}' },
      ],
      ["/v1/topics/%E0%A4%A/partitions/0/records?offset=0", {}],
      ["/v1/topics/orders/partitions/0/records?offset=%ZZ", {}],
      ["/v1/topics/orders/partitions/99999999999999999999/records?offset=0", {}],
      ["/v1/topics/orders/partitions/0/stream?offset=abc", {}],
      ["/v1/topics/orders/partitions/0/stream", { headers: { "last-event-id": "x" } }],
    ];
    for (const [path, init] of inputs) {
      const res = await app.request(path, init);
      expect(res.status, path).toBeGreaterThanOrEqual(400);
      expect(res.status, path).toBeLessThan(500);
      const body = (await res.json()) as { error: { code: string } };
      expect(typeof body.error.code, path).toBe("string");
    }
    expect(logger.named("http.internal_error")).toEqual([]);
  });
});

describe("createHttpApp: request size", () => {
  it("answers 413 request_too_large from Content-Length without reading the body", async () => {
    await createTopic();
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled++;
        controller.enqueue(new Uint8Array(1024));
      },
    });
    const request = new Request("http://localhost/v1/topics/orders/records", {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": String(64 * 1024 + 1) },
      body,
      duplex: "half",
    } as RequestInit);
    const error = await expectError(
      await app.request(request),
      413,
      "request_too_large",
      /over the limit of 65536 bytes/,
    );
    expect(error.details).toEqual({ limit_bytes: 65536 });
    expect(pulled).toBeLessThanOrEqual(1);
    expect(broker.produced).toHaveLength(0);
  });

  it("answers 413 for a streamed body as soon as the bytes read pass the cap, without reading the rest", async () => {
    await createTopic();
    let pulledBytes = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulledBytes += 4096;
        controller.enqueue(new Uint8Array(4096).fill(0x61));
      },
    });
    const request = new Request("http://localhost/v1/topics/orders/records", {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: endless,
      duplex: "half",
    } as RequestInit);
    await expectError(await app.request(request), 413, "request_too_large");
    expect(pulledBytes).toBeLessThan(64 * 1024 + 3 * 4096);
    expect(broker.produced).toHaveLength(0);
  });

  it("accepts a body exactly at the cap", async () => {
    await createTopic();
    const line = `${"x".repeat(1023)}\n`;
    const res = await postNdjson("/v1/topics/orders/records", line.repeat(64));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { offsets: unknown[] }).offsets).toHaveLength(64);
  });
});
