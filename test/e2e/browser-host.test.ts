/**
 * DNS rebinding against a loopback broker without keys (docs/security.md "Web console and
 * browsers"): a page of `evil.example` whose name is pointed at 127.0.0.1 is same-origin with the
 * broker, so the Origin check alone let it create and delete topics and read records. Requests
 * addressed to any name but an IP address or localhost are refused, on the HTTP port and on
 * `--metrics-port`; liveness and readiness stay open to every name.
 */
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";
import { exchangeRaw, type RawResponse } from "./raw-http.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((b) => b.stop()));
});

/** One request over a bare socket, so the test chooses the Host header a browser would send. */
async function send(url: string, host: string, head: string, body = ""): Promise<RawResponse> {
  const { hostname, port } = new URL(url);
  const bytes =
    `${head}\r\nHost: ${host}\r\nConnection: close\r\n` +
    (body === ""
      ? ""
      : `Content-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`) +
    `\r\n${body}`;
  const { responses } = await exchangeRaw({ host: hostname, port: Number(port), bytes });
  expect(responses.length, `${head} Host: ${host}`).toBe(1);
  return responses[0];
}

describe(`[${target}] requests addressed to a rebound name`, () => {
  it("a loopback broker without keys refuses them and serves IP addresses and localhost", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(`${dir}/data`, ["--metrics-port", "0"]);
    running.push(broker);
    const port = new URL(broker.httpUrl).port;
    const evil = `evil.example:${port}`;
    const made = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"name":"orders"}',
    });
    expect(made.status).toBe(201);
    const create = await send(
      broker.httpUrl,
      evil,
      "POST /v1/topics HTTP/1.1\r\nOrigin: http://" + evil,
      '{"name":"planted"}',
    );
    expect(create.status).toBe(403);
    expect(create.headers["content-type"]).toBe("application/json");
    expect(JSON.parse(create.body).error).toMatchObject({
      code: "forbidden",
      details: { reason: "host_not_allowed" },
    });
    // Without Origin too (the produce route served in front of the router).
    const produce = await send(
      broker.httpUrl,
      evil,
      "POST /v1/topics/orders/records HTTP/1.1",
      '{"records":[{"value":"x"}]}',
    );
    expect(produce.status).toBe(403);
    for (const head of ["GET /v1/topics HTTP/1.1", "DELETE /v1/topics/orders HTTP/1.1"])
      expect((await send(broker.httpUrl, evil, head)).status, head).toBe(403);
    // Liveness, readiness and the console's own (data-free) page answer under any name.
    for (const path of ["/healthz", "/readyz", "/console"])
      expect((await send(broker.httpUrl, evil, `GET ${path} HTTP/1.1`)).status, path).toBe(200);
    for (const host of [
      `127.0.0.1:${port}`,
      `localhost:${port}`,
      `[::1]:${port}`,
      "app.localhost",
    ]) {
      const answer = await send(broker.httpUrl, host, "GET /v1/topics HTTP/1.1");
      expect(answer.status, host).toBe(200);
      const topics = JSON.parse(answer.body).topics;
      expect(topics.map((t: { name: string }) => t.name)).toEqual(["orders"]);
      expect(topics[0].partitions[0].high_watermark).toBe(0);
    }
    const metrics = broker.metricsUrl!;
    const scrape = await send(
      metrics,
      `evil.example:${new URL(metrics).port}`,
      "GET /metrics HTTP/1.1",
    );
    expect(scrape.status).toBe(403);
    expect(scrape.body).not.toContain("esb_");
    // It names the keyless metrics port, not "without API keys" (newuser report 9).
    expect(JSON.parse(scrape.body).error.message).toMatch(
      /^Cannot serve a request addressed to host "evil\.example": the metrics port \(--metrics-port\) serves without an API key/,
    );
    const own = await send(metrics, new URL(metrics).host, "GET /metrics HTTP/1.1");
    expect(own.status).toBe(200);
    expect(own.body).toContain("esb_build_info");
  });
});
