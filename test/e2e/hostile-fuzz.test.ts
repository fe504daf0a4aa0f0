/**
 * A property-based fuzz of both front doors of the real broker process, on every target (issue
 * 13): hostile HTTP requests over every route (bodies, headers, framing, paths, query strings)
 * and hostile TCP frames over every api (fields, lengths, counts, JSON, random bytes, mutations of
 * valid frames), each on its own connection. It holds the broker to:
 *
 * - no 5xx, no `internal`: every error is the documented JSON shape with a code of the error table
 *   and that code's status (HTTP) or number (TCP), or one of the runtime parser answers that
 *   docs/http-api.md lists (Deno's bodiless 400), or a closed connection where docs/protocol.md
 *   says so (a TCP `length` out of range);
 * - bounded answers: no error over 4 KiB, whatever the request quoted;
 * - the log end equal to what was acknowledged: every offset of topic `fz` below its high
 *   watermark was acknowledged to exactly one produce (HTTP or TCP), and none above;
 * - bounded memory: the broker's RSS grows by less than 200 MiB over the run.
 *
 * Bounded and seeded: `ES_FUZZ_SEED` (default 13) and fixed run counts (`ES_FUZZ_SCALE` multiplies
 * them for a deeper search); a failure prints the seed and path that replay it. Each target takes
 * a few seconds.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import { encodeCommitOffsetsRequest } from "../../src/protocol/apis/commit-offsets.ts";
import { encodeCreateTopicRequest } from "../../src/protocol/apis/create-topic.ts";
import { encodeDeleteTopicRequest } from "../../src/protocol/apis/delete-topic.ts";
import { encodeDescribeGroupRequest } from "../../src/protocol/apis/describe-group.ts";
import { encodeFetchRequest } from "../../src/protocol/apis/fetch.ts";
import { encodeHeartbeatRequest } from "../../src/protocol/apis/heartbeat.ts";
import { encodeIdempotentProduceRequest } from "../../src/protocol/apis/idempotent-produce.ts";
import { encodeJoinGroupRequest } from "../../src/protocol/apis/join-group.ts";
import { encodeLeaveGroupRequest } from "../../src/protocol/apis/leave-group.ts";
import { encodeListGroupsRequest } from "../../src/protocol/apis/list-groups.ts";
import { encodeListOffsetsRequest } from "../../src/protocol/apis/list-offsets.ts";
import { encodeMetadataRequest } from "../../src/protocol/apis/metadata.ts";
import { encodeProduceRequest } from "../../src/protocol/apis/produce.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { startBroker, target, type BrokerProcess } from "./harness.ts";
import { exchangeRaw, type RawResponse } from "./raw-http.ts";
import { openRawTcp, requestFrame, str16, u32 } from "./raw-tcp.ts";

const seed = Number(process.env.ES_FUZZ_SEED ?? 13);
/** `ES_FUZZ_SCALE` multiplies the run counts for a deeper search on demand (default 1). */
const scale = Number(process.env.ES_FUZZ_SCALE ?? 1);
const httpRuns = Math.round(160 * scale);
const tcpRuns = Math.round(240 * scale);
/** The topic whose log end is held to what was acknowledged (never deleted by the fuzz). */
const topic = "fz";
const partitions = 2;
/** Largest error body or frame accepted, in bytes. */
const errorBytesMax = 4096;
const maxRequestBytes = 1 << 20;
const parserAnswersInJson = !target.includes("deno");

const byCode = new Map(Object.values(Errors).map((k) => [k.code, k]));
const byTcp = new Map(Object.values(Errors).map((k) => [k.tcp, k]));

/**
 * fast-check's parameters with a short failure report: the seed and path that replay the case
 * (`ES_FUZZ_SEED`, and `path` in `fc.assert`) and the assertion's message, instead of the whole
 * counterexample (bodies of 100 KB).
 */
function fuzzParameters<T>(numRuns: number): fc.Parameters<T> {
  return {
    seed,
    numRuns,
    endOnFailure: true,
    asyncReporter: async (details) => {
      if (!details.failed) return;
      const error =
        details.errorInstance instanceof Error
          ? details.errorInstance.message
          : String(details.errorInstance);
      throw new Error(
        `fuzz failed (seed ${details.seed}, path "${details.counterexamplePath}", after ${details.numRuns} runs): ${error.slice(0, 3000)}`,
      );
    },
  };
}

let broker: BrokerProcess;
/** The data directory's parent; one broker serves the whole file, so it outlives each test. */
let dir = "";
let rssBeforeBytes = 0;
/** Offsets of `fz` acknowledged so far: partition → offset → how many answers gave it. */
const acknowledged = new Map<number, Map<number, string>>();

function acknowledge(partition: number, offset: number, by: string): void {
  let offsets = acknowledged.get(partition);
  if (offsets === undefined) acknowledged.set(partition, (offsets = new Map()));
  const earlier = offsets.get(offset);
  // Only an idempotent retry may be answered with offsets already given (as a duplicate).
  if (earlier !== undefined && !(earlier.includes("idempotent") && by.includes("idempotent")))
    throw new Error(`offset ${partition}/${offset} acknowledged twice: ${earlier} and ${by}`);
  offsets.set(offset, by);
}

function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "es-broker-fuzz-"));
  broker = await startBroker(`${dir}/data`, ["--max-request-bytes", String(maxRequestBytes)]);
  const created = await fetch(`${broker.httpUrl}/v1/topics`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name: topic, partitions }),
  });
  expect(created.status).toBe(201);
  rssBeforeBytes = rssBytes(broker.proc.pid!);
});

afterAll(async () => {
  await broker?.stop("SIGKILL");
  if (dir !== "") rmSync(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// HTTP

const text = (maxLength: number) =>
  fc.string({
    maxLength,
    unit: fc.constantFrom("a", "Z", "0", " ", '"', "\\", "{", "[", "é", "\u0000", "😀"),
  });
/** Header values: anything but CR and LF (which would frame requests of the fuzz's own making). */
const headerValue = fc.oneof(
  fc.string({ maxLength: 40 }).map((s) => s.replace(/[\r\n]/g, "")),
  fc.integer({ min: 1000, max: 30_000 }).map((n) => "h".repeat(n)),
);
const topicSegment = fc.oneof(
  { weight: 6, arbitrary: fc.constant(topic) },
  {
    weight: 2,
    arbitrary: fc.constantFrom("nope", "a.b", "..", "%2e%2e", "x%00y", "%FF%FE", "t%2Fq", "é", "*"),
  },
  { weight: 1, arbitrary: fc.integer({ min: 250, max: 5000 }).map((n) => "t".repeat(n)) },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z0-9._-]{1,12}$/) },
);
/** Topics the fuzz may delete or recreate: anything but `fz`. */
const otherTopic = topicSegment.filter((t) => t !== topic);
const partitionSegment = fc.constantFrom(
  "0",
  "1",
  "2",
  "-1",
  "01",
  "99999999999999999999",
  "x",
  "",
);
const queryValue = fc.constantFrom(
  "0",
  "1",
  "earliest",
  "latest",
  "-1",
  "abc",
  "1e3",
  "0x10",
  "99999999999999999999",
  "",
  "%00",
  "base64",
  "utf8",
);
/** Query strings of up to 4 parameters (never `wait_ms`, which {@link fetchQuery} sets). */
const queryString = fc
  .array(
    fc.tuple(
      fc.constantFrom("offset", "max_records", "max_bytes", "encoding", "key", "partition", "x"),
      queryValue,
    ),
    { maxLength: 4 },
  )
  .map((pairs) => pairs.map(([k, v]) => `${k}=${v}`));
/** A fetch never long-polls for long: `wait_ms` is absent, 0, 5 or refused. */
const fetchQuery = fc
  .tuple(
    queryValue,
    fc.constantFrom([], ["wait_ms=5"], ["wait_ms=0"], ["wait_ms=70000"], ["wait_ms=x"]),
    queryString,
  )
  .map(([offset, wait, rest]) => `?${[`offset=${offset}`, ...wait, ...rest].join("&")}`);
/** Stream requests only with values the route refuses at once (a valid one would stream forever). */
const badStreamQuery = fc.constantFrom(
  "?offset=abc",
  "?offset=-1",
  "?encoding=x",
  "?offset=1&offset=2",
);

const route: fc.Arbitrary<{ method: string; path: string }> = fc.oneof(
  fc.constantFrom(
    { method: "GET", path: "/healthz" },
    { method: "GET", path: "/v1/admin/metrics" },
    { method: "GET", path: "/v1/admin/storage" },
    { method: "GET", path: "/v1/topics" },
    { method: "POST", path: "/v1/topics" },
    { method: "GET", path: "/v1/groups" },
    { method: "PUT", path: "/v1/topics" },
    { method: "FOO", path: "/healthz" },
    { method: "GET", path: "/nope" },
  ),
  fc
    .tuple(fc.constantFrom("GET", "PATCH", "POST"), topicSegment)
    .map(([method, t]) => ({ method, path: `/v1/topics/${t}` })),
  otherTopic.map((t) => ({ method: "DELETE", path: `/v1/topics/${t}` })),
  fc.tuple(topicSegment, queryString).map(([t, q]) => ({
    method: "POST",
    path: `/v1/topics/${t}/records${q.length === 0 ? "" : `?${q.join("&")}`}`,
  })),
  fc.tuple(topicSegment, partitionSegment, fetchQuery).map(([t, p, q]) => ({
    method: "GET",
    path: `/v1/topics/${t}/partitions/${p}/records${q}`,
  })),
  fc.tuple(topicSegment, partitionSegment, badStreamQuery).map(([t, p, q]) => ({
    method: "GET",
    path: `/v1/topics/${t}/partitions/${p}/stream${q}`,
  })),
  topicSegment.map((t) => ({ method: "POST", path: `/v1/admin/topics/${t}/cleanup` })),
  fc
    .tuple(
      fc.constantFrom("g", "g2", "..", "x".repeat(300)),
      fc.constantFrom("m", "", "x".repeat(300)),
    )
    .chain(([g, m]) =>
      fc.constantFrom(
        { method: "POST", path: `/v1/groups/${g}/members` },
        { method: "POST", path: `/v1/groups/${g}/members/${m}/heartbeat` },
        { method: "DELETE", path: `/v1/groups/${g}/members/${m}` },
        { method: "POST", path: `/v1/groups/${g}/offsets` },
        { method: "GET", path: `/v1/groups/${g}` },
      ),
    ),
);

const configKey = fc.constantFrom(
  "segment_bytes",
  "segment_ms",
  "retention_ms",
  "retention_bytes",
  "cleanup_policy",
  "tombstone_retention_ms",
  "cold_retention_ms",
  "max_timestamp_skew_ms",
  "bogus",
  "k".repeat(100_000),
);
const configValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(-1, 0, 1, 1024, 2 ** 53, 1e300, "compact", "delete,compact", "x".repeat(100_000)),
);
const record = fc.record(
  {
    key: fc.option(text(20), { nil: null }),
    value: text(60),
    partition: fc.constantFrom(0, 1, 2, -1, 1.5, "0"),
    timestamp: fc.constantFrom(-1, 0, 1_700_000_000_000, 9e15, -5, "now"),
    value_b64: fc.constantFrom("aGk=", "a", "!!!!"),
    extra: fc.constant(1),
  },
  { requiredKeys: ["value"] },
);
const nested = (depth: number, inner = "1") => `${"[".repeat(depth)}${inner}${"]".repeat(depth)}`;
/** A body as text or bytes. */
const body: fc.Arbitrary<string | Uint8Array> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .array(record, { minLength: 1, maxLength: 4 })
      .map((records) => JSON.stringify({ records })),
  },
  {
    weight: 2,
    arbitrary: fc.array(text(30), { minLength: 1, maxLength: 5 }).map((lines) => lines.join("\n")),
  },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(
        otherTopic,
        fc.dictionary(configKey, configValue, { maxKeys: 3 }),
        fc.constantFrom(1, 0, 4097, "2"),
      )
      .map(([name, config, partitions]) => JSON.stringify({ name, partitions, config })),
  },
  {
    weight: 1,
    arbitrary: fc
      .dictionary(configKey, configValue, { maxKeys: 3 })
      .map((config) => JSON.stringify({ config })),
  },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 1, max: 20_000 })
      .map((depth) => `{"config":{"retention_ms":${nested(depth)}}}`),
  },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 50_000 }).map((depth) => nested(depth, "")) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      `{"records":[{"value":"v","${"f".repeat(100_000)}":1}]}`,
      `{"name":"${"n".repeat(100_000)}","partitions":"x"}`,
      `{"topics":["${topic}"],"session_timeout_ms":"x"}`,
      `{"topics":[${nested(40, `"${topic}"`)}]}`,
      `{"member_id":"${"m".repeat(100_000)}","offsets":[{"topic":"${topic}","partition":0,"offset":1}]}`,
      `{"offsets":[{"topic":"${topic}","partition":0,"offset":-1}]}`,
      '{"records":[{"value":"v"}]',
      "{",
      "",
    ),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }) },
);
const framing = fc.constantFrom(
  "length",
  "length",
  "length",
  "chunked",
  "bad-chunk",
  "short-length",
);
const contentType = fc.constantFrom(
  undefined,
  "application/json",
  "application/x-ndjson",
  "text/plain",
  "application/json; charset=utf-8",
  "\u0001",
);
const producer = fc.option(
  fc.tuple(
    fc.constantFrom("p-1", "p-2", "", "bad id!", "x".repeat(300)),
    fc.constantFrom("0", "1", "-1", "x", "99999999999"),
    fc.constantFrom("0", "1", "2", "abc", "9007199254740993"),
  ),
  { nil: undefined },
);

interface HttpCase {
  method: string;
  path: string;
  body: string | Uint8Array;
  framing: string;
  contentType: string | undefined;
  producer: [string, string, string] | undefined;
  extraHeader: string | undefined;
}

const hostileHttpCase: fc.Arbitrary<HttpCase> = fc
  .record({
    method: fc.constant(""),
    path: fc.constant(""),
    body,
    framing,
    contentType,
    producer,
    extraHeader: fc.option(headerValue, { nil: undefined }),
  })
  .chain((c) => route.map((r) => ({ ...c, method: r.method, path: r.path })));
/** A valid produce to `fz` (JSON or NDJSON, maybe chunked, maybe idempotent): the log must grow by exactly these. */
const validProduceCase: fc.Arbitrary<HttpCase> = fc
  .record({
    method: fc.constant("POST"),
    path: fc.constantFrom(`/v1/topics/${topic}/records`, `/v1/topics/${topic}/records?partition=1`),
    body: fc.oneof(
      fc
        .array(
          fc.record(
            {
              value: text(40),
              key: fc.option(text(8), { nil: null }),
              partition: fc.constantFrom(0, 1),
            },
            { requiredKeys: ["value"] },
          ),
          { minLength: 1, maxLength: 5 },
        )
        .map((records) => JSON.stringify({ records })),
      fc
        .array(
          fc.string({ minLength: 1, maxLength: 30 }).map((l) => l.replace(/[\r\n]/g, "") || "x"),
          { minLength: 1, maxLength: 5 },
        )
        .map((lines) => lines.join("\n")),
    ),
    framing: fc.constantFrom("length", "length", "chunked"),
    contentType: fc.constant("application/json"),
    producer: fc.option(
      fc.tuple(fc.constant("p-ok"), fc.constant("0"), fc.integer({ min: 0, max: 8 }).map(String)),
      { nil: undefined },
    ),
    extraHeader: fc.constant(undefined),
  })
  .map((c) => ({
    ...c,
    // An NDJSON body goes as NDJSON; `?partition=` applies to NDJSON only.
    contentType:
      typeof c.body === "string" && c.body.startsWith('{"records"')
        ? "application/json"
        : "application/x-ndjson",
    path:
      typeof c.body === "string" && c.body.startsWith('{"records"')
        ? `/v1/topics/${topic}/records`
        : c.path,
  }));
const httpCase: fc.Arbitrary<HttpCase> = fc.oneof(
  { weight: 3, arbitrary: hostileHttpCase },
  { weight: 1, arbitrary: validProduceCase },
);

function requestBytes(c: HttpCase): Buffer {
  const payload = typeof c.body === "string" ? Buffer.from(c.body) : Buffer.from(c.body);
  const headers = ["Host: localhost", "Connection: close"];
  if (c.contentType !== undefined) headers.push(`Content-Type: ${c.contentType}`);
  if (c.producer !== undefined)
    headers.push(
      `Producer-Id: ${c.producer[0]}`,
      `Producer-Epoch: ${c.producer[1]}`,
      `Producer-Seq: ${c.producer[2]}`,
    );
  if (c.extraHeader !== undefined) headers.push(`X-Fuzz: ${c.extraHeader}`);
  let framed: Buffer;
  if (c.framing === "chunked" || c.framing === "bad-chunk") {
    headers.push("Transfer-Encoding: chunked");
    const half = Math.floor(payload.length / 2);
    const pieces = [payload.subarray(0, half), payload.subarray(half)].filter((p) => p.length > 0);
    framed = Buffer.concat([
      ...pieces.flatMap((p, i) => [
        Buffer.from(
          c.framing === "bad-chunk" && i === pieces.length - 1
            ? "zz\r\n"
            : `${p.length.toString(16)}\r\n`,
        ),
        p,
        Buffer.from("\r\n"),
      ]),
      Buffer.from("0\r\n\r\n"),
    ]);
  } else {
    const declared = c.framing === "short-length" ? Math.floor(payload.length / 2) : payload.length;
    headers.push(`Content-Length: ${declared}`);
    framed = payload;
  }
  return Buffer.concat([
    Buffer.from(`${c.method} ${c.path} HTTP/1.1\r\n${headers.join("\r\n")}\r\n\r\n`),
    framed,
  ]);
}

/** Holds one HTTP answer to the documented shapes (module comment). */
function checkHttpAnswer(c: HttpCase, answer: RawResponse): void {
  const what = `[${target}] ${c.method} ${c.path.slice(0, 80)} → ${answer.status} ${answer.body.slice(0, 200)}`;
  expect(answer.status, what).toBeGreaterThanOrEqual(200);
  expect(answer.status, what).toBeLessThan(500);
  if (answer.status < 400) return;
  if (!parserAnswersInJson && answer.body === "" && answer.status === 400) {
    // Deno's own answer to what its parser refuses (docs/http-api.md).
    expect(answer.headers["content-length"], what).toBe("0");
    return;
  }
  expect(answer.headers["content-type"], what).toMatch(/^application\/json/);
  expect(answer.body.length, what).toBeLessThan(errorBytesMax);
  const parsed = JSON.parse(answer.body) as {
    error: { code: string; message: string; details?: unknown };
  };
  expect(Object.keys(parsed), what).toEqual(["error"]);
  const kind = byCode.get(parsed.error.code);
  expect(kind, what).toBeDefined();
  expect(kind!.http, what).toBe(answer.status);
  expect(parsed.error.code, what).not.toBe("internal");
  expect(typeof parsed.error.message, what).toBe("string");
  if (parsed.error.details !== undefined) expect(typeof parsed.error.details, what).toBe("object");
}

// ---------------------------------------------------------------------------------------------
// TCP

const enc = new TextEncoder();
const tcpTopic = fc.oneof(
  { weight: 5, arbitrary: fc.constant(topic) },
  {
    weight: 2,
    arbitrary: fc.constantFrom("nope", "..", "", "é", "t".repeat(300), "t".repeat(60_000)),
  },
);
const batch = fc
  .array(
    fc.tuple(
      fc.option(text(10), { nil: null }),
      text(40),
      fc.constantFrom(-1, 0, 1_700_000_000_000, 9e15),
    ),
    {
      minLength: 0,
      maxLength: 4,
    },
  )
  .map((records) => {
    const builder = new EntryBatchBuilder();
    for (const [key, value, timestamp] of records)
      builder.add(key === null ? null : enc.encode(key), enc.encode(value), timestamp);
    return builder.build();
  });
const groupName = fc.constantFrom("g", "g2", "..", "", "x".repeat(300));
/** A frame from the encoders, with hostile but encodable values. */
const encodedFrame: fc.Arbitrary<{ frame: Uint8Array; idempotent: boolean; api: number }> =
  fc.oneof(
    fc.tuple(tcpTopic, fc.constantFrom(-1, 0, 1, 2, 7), batch).map(([t, partition, b]) => ({
      frame: encodeProduceRequest(1, { topic: t, partition, batch: b }),
      idempotent: false,
      api: 0,
    })),
    fc
      .tuple(
        tcpTopic,
        fc.constantFrom(-1, 0, 1),
        batch,
        fc.constantFrom("p1", "p2", "bad id!", "x".repeat(300)),
        fc.nat(3),
        fc.nat(6),
      )
      .map(([t, partition, b, id, epoch, sequence]) => ({
        frame: encodeIdempotentProduceRequest(1, {
          topic: t,
          partition,
          batch: b,
          producer: { id, epoch, sequence },
        }),
        idempotent: true,
        api: 12,
      })),
    fc
      .tuple(
        tcpTopic,
        fc.constantFrom(0, 1, 2, 7),
        fc.constantFrom(0, 1, 9e15),
        fc.constantFrom(0, 70_000),
      )
      .map(([t, partition, offset, waitMs]) => ({
        frame: encodeFetchRequest(1, { topic: t, partition, offset, maxRecords: 5, waitMs }),
        idempotent: false,
        api: 1,
      })),
    fc.array(tcpTopic, { maxLength: 3 }).map((topics) => ({
      frame: encodeMetadataRequest(1, { topics }),
      idempotent: false,
      api: 3,
    })),
    fc.tuple(tcpTopic, fc.constantFrom(0, 1, 5)).map(([t, partition]) => ({
      frame: encodeListOffsetsRequest(1, { topic: t, partition }),
      idempotent: false,
      api: 4,
    })),
    tcpTopic
      .filter((t) => t !== topic)
      .map((t) => ({
        frame: encodeDeleteTopicRequest(1, { topic: t }),
        idempotent: false,
        api: 5,
      })),
    fc
      .tuple(groupName, fc.array(tcpTopic, { maxLength: 2 }), fc.constantFrom(0, 50, 100_000))
      .map(([group, topics, sessionTimeoutMs]) => ({
        frame: encodeJoinGroupRequest(1, { group, topics, sessionTimeoutMs }),
        idempotent: false,
        api: 6,
      })),
    fc.tuple(groupName, fc.constantFrom("m", "x".repeat(300))).map(([group, memberId]) => ({
      frame: encodeHeartbeatRequest(1, { group, memberId, generation: 1 }),
      idempotent: false,
      api: 7,
    })),
    fc.tuple(groupName, fc.constantFrom("m", "")).map(([group, memberId]) => ({
      frame: encodeLeaveGroupRequest(1, { group, memberId }),
      idempotent: false,
      api: 8,
    })),
    fc.tuple(groupName, tcpTopic, fc.constantFrom(0, 1, 9e15)).map(([group, t, offset]) => ({
      frame: encodeCommitOffsetsRequest(1, {
        group,
        offsets: [{ topic: t, partition: 0, offset }],
      }),
      idempotent: false,
      api: 9,
    })),
    groupName.map((group) => ({
      frame: encodeDescribeGroupRequest(1, { group }),
      idempotent: false,
      api: 10,
    })),
    fc.constant({ frame: encodeListGroupsRequest(1), idempotent: false, api: 11 }),
    fc
      .tuple(
        tcpTopic.filter((t) => t !== topic),
        fc.constantFrom(0, 1, 5000),
      )
      .map(([t, p]) => ({
        frame: encodeCreateTopicRequest(1, { name: t, partitions: p }),
        idempotent: false,
        api: 2,
      })),
  );
/** CreateTopic with a config sent as raw JSON text, hostile. */
const rawConfigFrame = fc
  .tuple(
    fc.oneof(
      fc.dictionary(configKey, configValue, { maxKeys: 3 }).map((c) => JSON.stringify(c)),
      fc.integer({ min: 1, max: 20_000 }).map((d) => `{"retention_ms":${nested(d)}}`),
      fc.constantFrom("{", "[]", "null", '"x"', "\u0000"),
    ),
    fc.stringMatching(/^[a-z]{1,8}$/),
  )
  .map(([config, name]) => {
    const bytes = Buffer.from(config);
    return requestFrame(
      2,
      1,
      Buffer.concat([str16(`c-${name}`), u32(1), u32(bytes.length), bytes]),
    );
  });

type TcpCase =
  | { kind: "frame"; frame: Uint8Array; idempotent: boolean }
  | { kind: "length-too-small"; length: number }
  | { kind: "length-too-large" }
  | { kind: "cut"; frame: Uint8Array };

/** Rewrites a frame's correlation id (bytes 8–11) and, after a body change, its length. */
function withCorrelation(frame: Uint8Array, correlationId: number): Buffer {
  const out = Buffer.from(frame);
  out.writeUInt32BE(out.length - 4, 0);
  out.writeUInt32BE(correlationId >>> 0, 8);
  return out;
}

/** A valid Produce or IdempotentProduce to `fz`: the log must grow by exactly these. */
const validProduceFrame = fc
  .tuple(
    fc.constantFrom(-1, 0, 1),
    fc.array(fc.tuple(fc.option(text(8), { nil: null }), text(40)), { minLength: 1, maxLength: 5 }),
    fc.option(fc.integer({ min: 0, max: 8 }), { nil: undefined }),
  )
  .map(([partition, records, sequence]) => {
    const builder = new EntryBatchBuilder();
    for (const [key, value] of records)
      builder.add(key === null ? null : enc.encode(key), enc.encode(value));
    const b = builder.build();
    return sequence === undefined
      ? { frame: encodeProduceRequest(1, { topic, partition, batch: b }), idempotent: false }
      : {
          // One producer per partition choice: -1 may spread its records, which idempotence refuses.
          frame: encodeIdempotentProduceRequest(1, {
            topic,
            partition: Math.max(partition, 0),
            batch: b,
            producer: { id: `tcp-p${Math.max(partition, 0)}`, epoch: 0, sequence },
          }),
          idempotent: true,
        };
  });

const tcpCase: fc.Arbitrary<TcpCase> = fc.oneof(
  { weight: 4, arbitrary: validProduceFrame.map((f) => ({ kind: "frame" as const, ...f })) },
  { weight: 6, arbitrary: encodedFrame.map((f) => ({ kind: "frame" as const, ...f })) },
  {
    weight: 1,
    arbitrary: rawConfigFrame.map((frame) => ({
      kind: "frame" as const,
      frame,
      idempotent: false,
    })),
  },
  {
    weight: 3,
    // A valid frame with its body mutated: bytes flipped, cut short or extended.
    arbitrary: fc
      .tuple(
        encodedFrame.filter((f) => f.api !== 1),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
        fc.integer({ min: -20, max: 20 }),
      )
      .map(([f, flips, resize]) => {
        let bytes = Buffer.from(f.frame);
        for (const [at, value] of flips)
          if (bytes.length > 12) bytes[12 + (at % (bytes.length - 12))] = value;
        if (resize < 0) bytes = bytes.subarray(0, Math.max(12, bytes.length + resize));
        else bytes = Buffer.concat([bytes, Buffer.alloc(resize, 0xab)]);
        return { kind: "frame" as const, frame: bytes, idempotent: f.api === 12 };
      }),
  },
  {
    weight: 2,
    arbitrary: fc
      .tuple(
        fc.integer({ min: 0, max: 20 }),
        fc.integer({ min: 0, max: 3 }),
        fc.uint8Array({ maxLength: 200 }),
      )
      .map(([api, version, bytes]) => ({
        kind: "frame" as const,
        frame: requestFrame(api, 1, bytes, version),
        idempotent: false,
      })),
  },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 0, max: 7 })
      .map((length) => ({ kind: "length-too-small" as const, length })),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "length-too-large" as const }) },
  { weight: 1, arbitrary: encodedFrame.map((f) => ({ kind: "cut" as const, frame: f.frame })) },
);

/** Reads the spans of a Produce (or, after its `duplicate` byte, an IdempotentProduce) answer. */
function spansOf(
  body: Buffer,
  idempotent: boolean,
): { partition: number; baseOffset: number; count: number }[] {
  let at = idempotent ? 1 : 0;
  const n = body.readUInt32BE(at);
  at += 4;
  const spans = [];
  for (let i = 0; i < n; i++) {
    spans.push({
      partition: body.readUInt32BE(at),
      baseOffset: Number(body.readBigUInt64BE(at + 4)),
      count: body.readUInt32BE(at + 12),
    });
    at += 16;
  }
  return spans;
}

describe(`[${target}] hostile input, fuzzed (seed ${seed})`, () => {
  it(`answers ${httpRuns} hostile HTTP requests over every route in the documented shapes, never 5xx`, async () => {
    const { hostname, port } = new URL(broker.httpUrl);
    let n = 0;
    await fc.assert(
      fc.asyncProperty(httpCase, async (c) => {
        const bytes = requestBytes(c);
        const exchange = await exchangeRaw({
          host: hostname,
          port: Number(port),
          bytes,
          waitMs: 10_000,
        });
        const what = `[${target}] ${c.method} ${c.path.slice(0, 80)} (${c.framing}): ${exchange.responses.map((r) => r.status).join(",")} ${exchange.rest.slice(0, 100)}`;
        // The fuzz's requests are whole and ask to close, so the broker answers and closes.
        expect(exchange.closed, what).toBe(true);
        for (const answer of exchange.responses) checkHttpAnswer(c, answer);
        const produced = exchange.responses[0];
        if (
          c.method === "POST" &&
          c.path.startsWith(`/v1/topics/${topic}/records`) &&
          produced?.status === 200
        ) {
          const answer = JSON.parse(produced.body) as {
            offsets: { partition: number; offset: number }[];
            duplicate?: boolean;
          };
          for (const { partition, offset } of answer.offsets)
            acknowledge(
              partition,
              offset,
              `http #${n}${c.producer === undefined ? "" : " idempotent"}`,
            );
        }
        n++;
      }),
      fuzzParameters(httpRuns),
    );
  });

  it(`answers ${tcpRuns} hostile TCP frames over every api with error-table codes, never internal`, async () => {
    let correlationId = 1000;
    await fc.assert(
      fc.asyncProperty(tcpCase, async (c) => {
        const connection = await openRawTcp(broker.tcp);
        try {
          const id = correlationId++;
          if (c.kind === "length-too-small") {
            connection.write(Buffer.concat([u32(c.length), Buffer.alloc(8)]));
            expect(await connection.next(), `[${target}] length ${c.length}`).toBe("closed");
            return;
          }
          if (c.kind === "length-too-large") {
            const header = Buffer.alloc(12);
            header.writeUInt32BE(maxRequestBytes + 1, 0);
            header.writeUInt16BE(3, 4);
            header.writeUInt32BE(id, 8);
            connection.write(header);
            const answer = await connection.next();
            expect(typeof answer, `[${target}] length over the cap`).toBe("object");
            if (typeof answer === "object") {
              expect(answer.correlationId).toBe(id);
              expect(answer.code).toBe("request_too_large");
            }
            expect(await connection.next(), "then the connection closes").toBe("closed");
            return;
          }
          if (c.kind === "cut") {
            // Part of a frame, then the client goes away: nothing must be applied.
            const frame = withCorrelation(c.frame, id);
            connection.write(frame.subarray(0, Math.max(4, frame.length - 3)));
            expect(await connection.next(200), `[${target}] a cut frame`).toBe("timeout");
            return;
          }
          const frame = withCorrelation(c.frame, id);
          connection.write(frame);
          const answer = await connection.next();
          const what = `[${target}] api ${frame.readUInt16BE(4)} v${frame.readUInt16BE(6)} (${frame.length} bytes)`;
          expect(typeof answer, `${what}: ${String(answer)}`).toBe("object");
          if (typeof answer !== "object") return;
          expect(answer.correlationId, what).toBe(id);
          expect(answer.frameBytes, `${what}: ${answer.message?.slice(0, 200)}`).toBeLessThan(
            answer.error === 0 ? Number.POSITIVE_INFINITY : errorBytesMax,
          );
          if (answer.error !== 0) {
            const kind = byTcp.get(answer.error);
            expect(kind, `${what}: error ${answer.error}`).toBeDefined();
            expect(answer.code, what).toBe(kind!.code);
            expect(answer.code, `${what}: ${answer.message}`).not.toBe("internal");
            return;
          }
          const api = frame.readUInt16BE(4);
          const produceTopic =
            api === 0 || api === 12
              ? frame.subarray(14, 14 + frame.readUInt16BE(12)).toString()
              : "";
          if (produceTopic === topic)
            for (const span of spansOf(answer.body, api === 12))
              for (let i = 0; i < span.count; i++)
                acknowledge(
                  span.partition,
                  span.baseOffset + i,
                  `tcp ${id}${api === 12 ? " idempotent" : ""}`,
                );
        } finally {
          connection.destroy();
        }
      }),
      fuzzParameters(tcpRuns),
    );
  });

  it("leaves the log end equal to what was acknowledged, memory bounded, nothing internal logged", async () => {
    // The fuzz did produce: some of its requests are valid produces to the topic.
    const total = [...acknowledged.values()].reduce((n, offsets) => n + offsets.size, 0);
    expect(total, `[${target}] records acknowledged`).toBeGreaterThan(20);
    for (let partition = 0; partition < partitions; partition++) {
      const bounds = (await (
        await fetch(
          `${broker.httpUrl}/v1/topics/${topic}/partitions/${partition}/records?offset=latest`,
        )
      ).json()) as { high_watermark: number };
      const offsets = acknowledged.get(partition) ?? new Map();
      expect(
        offsets.size,
        `[${target}] ${topic}/${partition}: offsets acknowledged vs high watermark`,
      ).toBe(bounds.high_watermark);
      for (let offset = 0; offset < bounds.high_watermark; offset++)
        expect(
          offsets.has(offset),
          `[${target}] ${topic}/${partition} offset ${offset} was never acknowledged`,
        ).toBe(true);
    }
    const grownBytes = rssBytes(broker.proc.pid!) - rssBeforeBytes;
    expect(
      grownBytes,
      `[${target}] RSS grew by ${(grownBytes / 2 ** 20).toFixed(1)} MiB`,
    ).toBeLessThan(200 * 2 ** 20);
    expect(broker.stderr()).not.toMatch(/internal_error|Maximum call stack|Uncaught|panicked/);
    expect((await fetch(`${broker.httpUrl}/healthz`)).status).toBe(200);
  });
});
