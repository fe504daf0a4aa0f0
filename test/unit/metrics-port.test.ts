/**
 * The `--metrics-port` listener's refusal of a request addressed to another name
 * (src/transport/http/metrics-port.ts, docs/operations.md "Metrics"): it names the keyless
 * metrics port, not "without API keys", which read as wrong on a broker that has keys (newuser
 * report 9); the broker's own HTTP port keeps its reason.
 */
import { describe, expect, it } from "vitest";
import { hostRefusal } from "../../src/transport/http/auth.ts";
import { metricsPortApp } from "../../src/transport/http/metrics-port.ts";

const app = metricsPortApp({ metricsText: async () => "esb_build_info 1\n", ready: () => true });

const get = (path: string, host: string) =>
  app.fetch(new Request(`http://127.0.0.1:9100${path}`, { headers: { host } }));

describe("the metrics port's refusal of another host name", () => {
  it("says the metrics port serves without a key, for /metrics and /readyz", async () => {
    for (const path of ["/metrics", "/readyz"]) {
      const answer = await get(path, "broker1.internal:9100");
      expect(answer.status, path).toBe(403);
      const { error } = (await answer.json()) as {
        error: { code: string; message: string; details: unknown };
      };
      expect(error.code).toBe("forbidden");
      expect(error.details).toEqual({ reason: "host_not_allowed" });
      expect(error.message).toBe(
        'Cannot serve a request addressed to host "broker1.internal": the metrics port (--metrics-port) serves without an API key, so it answers only requests addressed to an IP address or localhost (another name reaching it from a browser is DNS rebinding)',
      );
      expect(error.message).not.toMatch(/without API keys this broker/);
    }
    const own = await get("/metrics", "127.0.0.1:9100");
    expect(own.status).toBe(200);
    expect(await own.text()).toBe("esb_build_info 1\n");
    expect((await get("/healthz", "broker1.internal:9100")).status).toBe(200);
  });

  it("keeps the HTTP port's reason (a broker without keys)", async () => {
    const refused = hostRefusal(
      new Request("http://127.0.0.1:8080/v1/topics", { headers: { host: "evil.example:8080" } }),
    );
    expect(refused?.status).toBe(403);
    const { error } = (await refused!.json()) as { error: { message: string } };
    expect(error.message).toMatch(
      /^Cannot serve a request addressed to host "evil\.example": without API keys this broker answers only/,
    );
  });
});
