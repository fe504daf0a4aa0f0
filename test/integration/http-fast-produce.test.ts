/**
 * The produce route served in front of the router (`fastRoute`, `src/transport/http/app.ts`,
 * through the authenticating wrapper of `auth.ts`): for every request it takes, its answer —
 * status, `Content-Type`, `X-Content-Type-Options`, `WWW-Authenticate`, body — is the one the
 * Hono route gives to the same request on a broker in the same state; and it takes nothing it
 * must not (queries, idempotent produce, chunked bodies, cross-site headers, odd paths). With
 * keys in force it takes a request whose key authenticates (the role table's 403 included, as the
 * router answers it) and leaves every other one — no key, a malformed, unknown or revoked key,
 * two Authorization lines — to the router untouched: nothing logged, nothing produced.
 */
import { describe, expect, it } from "vitest";
import { AccessControl } from "../../src/auth/access.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import {
  type AuthenticatedHttpApp,
  createAuthenticatedHttpApp,
} from "../../src/transport/http/auth.ts";
import type { RawRequest } from "../../src/transport/http/raw-stream.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { realClock } from "../helpers/clock.ts";
import { openTestKeyStore } from "../helpers/keys.ts";

interface Sent {
  method?: string;
  url: string;
  headers?: Record<string, string>;
  body?: string;
}

function raw(sent: Sent): RawRequest {
  const body = new TextEncoder().encode(sent.body ?? "");
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(sent.headers ?? {})) headers[k.toLowerCase()] = v;
  if (sent.body !== undefined && headers["transfer-encoding"] === undefined)
    headers["content-length"] ??= String(body.length);
  return {
    method: sent.method ?? "POST",
    url: sent.url,
    header: (name) => headers[name],
    headerLines: (name) => (headers[name] === undefined ? 0 : 1),
    readBody: async (maxBytes) => (body.length > maxBytes ? null : body),
  };
}

async function app(options: { withKey?: boolean } = {}): Promise<AuthenticatedHttpApp> {
  const logger = new MemoryLogger();
  const { broker, fs } = await openTestBroker({ clock: realClock, logger });
  const { keys } = await openTestKeyStore({ fs, logger });
  await broker.createTopic({ name: "orders", partitions: 2 });
  if (options.withKey) await keys.create({ name: "admin", role: "admin" });
  const access = new AccessControl({ broker, keys, logger });
  return createAuthenticatedHttpApp({ access, logger, maxRequestBytes: 4096 });
}

/** The answer of the router (the WHATWG path) to `sent`. */
async function viaRouter(a: AuthenticatedHttpApp, sent: Sent) {
  const res = await a.fetch(
    new Request(`http://broker${sent.url}`, {
      method: sent.method ?? "POST",
      headers: sent.headers,
      body: sent.body,
    }),
    { remoteAddress: () => "127.0.0.1:1" },
  );
  return {
    status: res.status,
    contentType: res.headers.get("content-type"),
    nosniff: res.headers.get("x-content-type-options"),
    challenge: res.headers.get("www-authenticate"),
    body: await res.text(),
  };
}

const json = { "content-type": "application/json" };
const ndjson = { "content-type": "application/x-ndjson" };

/** Requests the fast route takes; each must be answered as the router answers it. */
const taken: Sent[] = [
  { url: "/v1/topics/orders/records", headers: json, body: '{"records":[{"value":"a"}]}' },
  {
    url: "/v1/topics/orders/records",
    headers: { "content-type": "application/json; charset=utf-8" },
    body: '{"records":[{"value":"b","partition":1},{"key":"k","value":"c"}]}',
  },
  { url: "/v1/topics/orders/records", body: '{"records":[{"value_b64":"AAE="}]}' },
  { url: "/v1/topics/orders/records", headers: { "content-type": "text/plain" }, body: "{}" },
  { url: "/v1/topics/orders/records", headers: json, body: '{"records":[]}' },
  { url: "/v1/topics/orders/records", headers: json, body: "not json" },
  { url: "/v1/topics/orders/records", headers: json, body: `{"records":${"[".repeat(200)}` },
  { url: "/v1/topics/orders/records", headers: json, body: '{"records":[{"value":"x","kye":1}]}' },
  {
    url: "/v1/topics/orders/records",
    headers: json,
    body: '{"records":[{"value":"x","partition":7}]}',
  },
  { url: "/v1/topics/nope/records", headers: json, body: '{"records":[{"value":"a"}]}' },
  { url: "/v1/topics/orders/records", headers: json, body: "" },
  { url: "/v1/topics/orders/records", headers: ndjson, body: "one\ntwo\r\n\nthree" },
  { url: "/v1/topics/orders/records?partition=1", headers: ndjson, body: "p1\n" },
  { url: "/v1/topics/orders/records?partition=5", headers: ndjson, body: "p5\n" },
  { url: "/v1/topics/orders/records?partition=99999999999", headers: ndjson, body: "x\n" },
  {
    url: "/v1/topics/orders/records",
    headers: { "content-type": "application/ndjson" },
    body: "\n\n",
  },
  {
    url: "/v1/topics/orders/records",
    headers: json,
    body: `{"records":[{"value":"${"v".repeat(5000)}"}]}`.slice(0, 4000),
  },
];

describe("the fast produce route", () => {
  it("answers every request it takes exactly as the router does", async () => {
    const fast = await app();
    const routed = await app();
    for (const sent of taken) {
      const answer = fast.fastRoute(raw(sent));
      expect(answer, `${sent.url} ${sent.body?.slice(0, 40)} is taken`).not.toBeNull();
      const a = await answer!;
      const expected = await viaRouter(routed, sent);
      expect(
        {
          status: a.status,
          contentType: a.headers["content-type"] ?? null,
          nosniff: a.headers["x-content-type-options"] ?? null,
          challenge: a.headers["www-authenticate"] ?? null,
          body: a.body,
        },
        `${sent.url} ${sent.body?.slice(0, 40)}`,
      ).toEqual(expected);
    }
  });

  it("leaves to the router what it does not answer itself", async () => {
    const a = await app();
    const body = '{"records":[{"value":"a"}]}';
    const left: Sent[] = [
      { method: "GET", url: "/v1/topics/orders/records" },
      { method: "PUT", url: "/v1/topics/orders/records", body },
      { url: "/v1/topics/orders/records?partition=1", headers: json, body },
      { url: "/v1/topics/orders/records?key=k", headers: ndjson, body: "x\n" },
      { url: "/v1/topics/orders/records?partition=1&partition=0", headers: ndjson, body: "x\n" },
      { url: "/v1/topics/ord%65rs/records", headers: json, body },
      { url: "/v1/topics/../records", headers: json, body },
      { url: "/v1/topics/./records", headers: json, body },
      { url: "/v1/topics//records", headers: json, body },
      { url: "/v1/topics/orders/records/", headers: json, body },
      { url: "/v1/topics/orders/records2", headers: json, body },
      { url: "http://broker/v1/topics/orders/records", headers: json, body },
      {
        url: "/v1/topics/orders/records",
        headers: { ...json, "transfer-encoding": "chunked" },
        body,
      },
      { url: "/v1/topics/orders/records", headers: { ...json, "content-length": "99999" }, body },
      { url: "/v1/topics/orders/records", headers: { ...json, "content-length": "+5" }, body },
      { url: "/v1/topics/orders/records", headers: { ...json, authorization: "Bearer x" }, body },
      { url: "/v1/topics/orders/records", headers: { ...json, origin: "http://broker" }, body },
      {
        url: "/v1/topics/orders/records",
        headers: { ...json, "sec-fetch-site": "same-origin" },
        body,
      },
      ...["producer-id", "producer-epoch", "producer-seq"].map((h) => ({
        url: "/v1/topics/orders/records",
        headers: { ...json, [h]: "1" },
        body,
      })),
    ];
    for (const sent of left) expect(a.fastRoute(raw(sent)), JSON.stringify(sent)).toBeNull();
    // Two Content-Type lines: the runtime's parser and WHATWG Headers read them differently.
    const twoTypes = raw({ url: "/v1/topics/orders/records", headers: json, body });
    expect(a.fastRoute({ ...twoTypes, headerLines: () => 2 })).toBeNull();
  });

  it("takes nothing while keys are required", async () => {
    const a = await app({ withKey: true });
    const sent = {
      url: "/v1/topics/orders/records",
      headers: json,
      body: '{"records":[{"value":"a"}]}',
    };
    expect(a.fastRoute(raw(sent))).toBeNull();
    expect((await viaRouter(a, sent)).status).toBe(401);
  });

  it("takes a produce whose key authenticates, answering as the router does, 403 included", async () => {
    const keyed = await keyedApps();
    const sent = (key: string, topic = "orders", body = '{"records":[{"value":"k"}]}'): Sent => ({
      url: `/v1/topics/${topic}/records`,
      headers: { ...json, authorization: `Bearer ${key}` },
      body,
    });
    const cases: [Sent, number][] = [
      [sent(keyed.keys.admin), 200],
      [sent(keyed.keys.producer), 200],
      [
        {
          ...sent(keyed.keys.producer),
          headers: { ...json, authorization: `bearer   ${keyed.keys.producer}  ` },
        },
        200,
      ],
      [sent(keyed.keys.producer, "secret"), 403],
      [sent(keyed.keys.producer, "nope"), 403],
      [sent(keyed.keys.admin, "nope"), 404],
      [sent(keyed.keys.consumer), 403],
      [sent(keyed.keys.consumer, "orders", "not json"), 400],
      [sent(keyed.keys.producer, "orders", '{"records":[{"value":"x","partition":7}]}'), 404],
    ];
    for (const [request, status] of cases) {
      const answer = keyed.fast.fastRoute(raw(request));
      expect(answer, JSON.stringify(request)).not.toBeNull();
      const a = await answer!;
      const expected = await viaRouter(keyed.routed, request);
      expect(expected.status, expected.body).toBe(status);
      expect({
        status: a.status,
        contentType: a.headers["content-type"] ?? null,
        nosniff: a.headers["x-content-type-options"] ?? null,
        challenge: a.headers["www-authenticate"] ?? null,
        body: a.body,
      }).toEqual(expected);
    }
    const forbidden = await viaRouter(keyed.routed, sent(keyed.keys.consumer));
    expect(JSON.parse(forbidden.body).error).toMatchObject({
      code: "forbidden",
      details: { operation: "produce" },
    });
    expect(JSON.parse(forbidden.body).error.message).toContain('"orders"');
    // Both brokers hold the same records: the fast route produced what the router did.
    for (const b of [keyed.fastBroker, keyed.routedBroker]) {
      const d = await b.describeTopic("orders");
      expect(d.partitions.reduce((n, p) => n + p.highWatermark, 0)).toBe(3);
    }
    expect(keyed.fastLogger.named("auth.failed")).toEqual([]);
  });

  it("leaves to the router, before logging or producing anything, every produce whose key does not authenticate", async () => {
    const keyed = await keyedApps();
    const body = '{"records":[{"value":"a"}]}';
    const withAuth = (authorization: string): Sent => ({
      url: "/v1/topics/orders/records",
      headers: { ...json, authorization },
      body,
    });
    const revoked = keyed.keys.revoked;
    await keyed.fastKeys.revoke("gone");
    await keyed.routedKeys.revoke("gone");
    const wrongSecret = `${keyed.keys.producer.slice(0, -4)}AAAA`;
    const unknownId = `esb_0123456789abcdef_${keyed.keys.producer.slice(-43)}`;
    const left: Sent[] = [
      { url: "/v1/topics/orders/records", headers: json, body },
      withAuth(`Bearer ${revoked}`),
      withAuth(`Bearer ${wrongSecret}`),
      withAuth(`Bearer ${unknownId}`),
      withAuth("Bearer not-a-key"),
      withAuth(`Basic ${keyed.keys.admin}`),
      withAuth(`Bearer ${keyed.keys.admin} ${keyed.keys.admin}`),
      withAuth("Bearer"),
      withAuth(""),
    ];
    for (const sent of left) {
      expect(keyed.fast.fastRoute(raw(sent)), JSON.stringify(sent.headers)).toBeNull();
      const answer = await viaRouter(keyed.routed, sent);
      expect(answer.status, answer.body).toBe(401);
    }
    // Two Authorization lines (node:http keeps the first, WHATWG Headers joins them): the router's.
    const twoLines = raw(withAuth(`Bearer ${keyed.keys.admin}`));
    expect(keyed.fast.fastRoute({ ...twoLines, headerLines: () => 2 })).toBeNull();
    // The fast route logged nothing and produced nothing; the router logged each failure once.
    expect(keyed.fastLogger.named("auth.failed")).toEqual([]);
    expect(keyed.routedLogger.named("auth.failed")).toHaveLength(left.length);
    const d = await keyed.fastBroker.describeTopic("orders");
    expect(d.partitions.reduce((n, p) => n + p.highWatermark, 0)).toBe(0);
    // No log line or answer names a key.
    const logged = JSON.stringify(keyed.routedLogger.events);
    for (const key of Object.values(keyed.keys)) expect(logged).not.toContain(key.slice(21));
  });
});

/**
 * Two brokers in the same state with the same keys (admin; producer and consumer limited to
 * `orders*`; one more producer, `gone`, to revoke): one for the fast route, one for the router.
 */
async function keyedApps() {
  const made = async () => {
    const logger = new MemoryLogger();
    const { broker, fs } = await openTestBroker({ clock: realClock, logger });
    const { keys } = await openTestKeyStore({ fs, logger, seed: 7 });
    await broker.createTopic({ name: "orders", partitions: 2 });
    await broker.createTopic({ name: "secret", partitions: 1 });
    const texts = {
      admin: (await keys.create({ name: "admin", role: "admin" })).key,
      producer: (await keys.create({ name: "ingest", role: "producer", topics: ["orders*"] })).key,
      consumer: (await keys.create({ name: "reader", role: "consumer", topics: ["orders*"] })).key,
      revoked: (await keys.create({ name: "gone", role: "producer", topics: ["*"] })).key,
    };
    const access = new AccessControl({ broker, keys, logger });
    const app = createAuthenticatedHttpApp({ access, logger, maxRequestBytes: 4096 });
    return { app, broker, keys, logger, texts };
  };
  const [f, r] = [await made(), await made()];
  // The same seed makes the same keys on both.
  expect(f.texts).toEqual(r.texts);
  return {
    fast: f.app,
    routed: r.app,
    fastBroker: f.broker,
    routedBroker: r.broker,
    fastKeys: f.keys,
    routedKeys: r.keys,
    fastLogger: f.logger,
    routedLogger: r.logger,
    keys: f.texts,
  };
}
