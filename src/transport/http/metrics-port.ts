/**
 * The app of `--metrics-port` (docs/operations.md "Metrics"): a second HTTP listener, on loopback
 * only, that serves the scrape without an API key, so Prometheus on the same host needs no admin
 * key in its configuration. It answers `GET /metrics`, `GET /healthz` and `GET /readyz`, and 404
 * `not_found` to everything else; it never reaches the broker's other routes. `/metrics` and
 * `/readyz` addressed to a name other than an IP address or `localhost` are refused (403
 * `host_not_allowed`, `auth.ts` `hostRefusal`: DNS rebinding).
 */
import { BrokerError, Errors } from "../../broker/errors.ts";
import { clip } from "../../lib/quote.ts";
import { hostRefusal } from "./auth.ts";
import { errorBody } from "./errors.ts";
import { prometheusContentType } from "./prometheus.ts";

/** What the listener answers from. */
export interface MetricsPortOptions {
  /** The exposition (`prometheus.ts` `renderMetrics`). */
  metricsText: () => Promise<string>;
  /** False while recovery runs: `/metrics` and `/readyz` answer 503 until then. */
  ready: () => boolean;
}

const headers = { "cache-control": "no-store", "x-content-type-options": "nosniff" };

function json(body: unknown, status: number): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

function errorResponse(error: BrokerError): Response {
  return json(errorBody(error), error.kind.http);
}

/** The metrics listener's app (module comment). */
export function metricsPortApp(options: MetricsPortOptions): {
  fetch(request: Request): Promise<Response>;
} {
  return {
    async fetch(request) {
      const url = new URL(request.url);
      const path = url.pathname;
      if (request.method !== "GET" || !["/metrics", "/healthz", "/readyz"].includes(path))
        return errorResponse(
          new BrokerError(
            Errors.notFound,
            `Cannot ${clip(request.method)} ${clip(path)}: the metrics port serves only GET /metrics, /healthz and /readyz`,
          ),
        );
      if (path === "/healthz") return json({ status: "ok" }, 200);
      // Loopback without a key: a page under a rebound name must not read the scrape (auth.ts).
      const foreignHost = hostRefusal(request, "metrics");
      if (foreignHost !== null) return foreignHost;
      if (!options.ready()) {
        if (path === "/readyz") return json({ status: "recovering" }, 503);
        return errorResponse(
          new BrokerError(
            Errors.unavailable,
            "Cannot GET /metrics: the broker is recovering its data directory",
          ),
        );
      }
      if (path === "/readyz") return json({ status: "ready" }, 200);
      return new Response(await options.metricsText(), {
        status: 200,
        headers: { "content-type": prometheusContentType, ...headers },
      });
    },
  };
}
