/**
 * Authentication in front of the HTTP app (`docs/http-api.md`, "Authentication";
 * `docs/security.md`). Every request but `GET /healthz`, `GET /readyz` and `GET /v1/openapi.json` is authenticated before any route runs
 * (and before its body is read):
 *
 * - `Authorization: Bearer <key>` (scheme case-insensitive, one key) names the principal; no
 *   header is the anonymous principal, valid only while the broker has no `api_keys.json`.
 * - A missing (while authentication is on), malformed or unknown key is answered 401
 *   `unauthenticated` with `WWW-Authenticate: Bearer realm="es-broker"` (plus
 *   `error="invalid_token"` when a key was sent). The message never repeats the header. Under
 *   `/registry` the body is Confluent's `{"error_code": 40101, "message"}` (its clients read it),
 *   as is the cross-site refusal's (403, 40301).
 * - The request then runs in an app built over the principal's broker view
 *   (`auth/access.ts`), so each route's broker call applies the role table: 403 `forbidden`
 *   names the operation and the topic or group refused. Apps are made once per principal.
 * - Produce in front of the router (`fastRoute`, the raw socket's: docs/http-api.md "How requests
 *   are served") runs the same way, as the key's principal; a request whose key does not
 *   authenticate is left to `fetch` untouched, so it is answered, logged and counted there once.
 *
 * A revoked key's SSE streams end with an `event: error` (`key_revoked`): the view ends their
 * long-poll and refuses the read it answers.
 */
import type { AccessControl } from "../../auth/access.ts";
import { AuthenticationError } from "../../auth/access.ts";
import { anonymousPrincipal, type Principal } from "../../auth/principal.ts";
import { BrokerError, Errors } from "../../broker/errors.ts";
import { clip, quote } from "../../lib/quote.ts";
import type { Broker } from "../../broker/types.ts";
import { apiKeyTextBytesMax } from "../../lib/limits.ts";
import {
  createHttpApp,
  type HttpApp,
  type HttpAppOptions,
  type HttpBindings,
  redirectedMarker,
} from "./app.ts";
import { errorBody } from "./errors.ts";
import { registerKeyRoutes } from "./keys.ts";
import { consolePaths } from "./console.ts";
import type { RawAnswer, RawRequest } from "./raw-stream.ts";
import { isRegistryPath, registryErrorResponse } from "./registry/routes.ts";

/** Options of {@link createAuthenticatedHttpApp}: the app's, with access control instead of a broker. */
export interface AuthenticatedHttpAppOptions
  extends Omit<HttpAppOptions, "broker" | "routes" | "metricsText"> {
  access: AccessControl;
  /**
   * Wraps each principal's broker view before the app calls it (the front door's counting,
   * `transport/metered-broker.ts`).
   */
  meter?: <B extends Broker>(broker: B) => B;
  /** The `GET /metrics` exposition; the app serves it to principals the role table lets read metrics. */
  metricsText?: () => Promise<string>;
  /**
   * While the broker has no keys, refuse requests addressed to a name other than an IP address or
   * `localhost` ({@link hostRefusal}); `serve` sets it when it listens on loopback.
   */
  checkHost?: boolean;
}

/** What `serveHttp` runs: Hono's `fetch` shape, and the produce route in front of it. */
export interface AuthenticatedHttpApp {
  fetch(request: Request, env?: HttpBindings): Response | Promise<Response>;
  /**
   * The app's `fastRoute` (produce without a `Request`/`Response` pair), for requests without the
   * `Origin` / `Sec-Fetch-Site` headers the cross-site check reads, addressed to a `Host` that
   * {@link hostRefusal} passes, that either carry no `Authorization` header while no key is
   * required (the anonymous app's route) or carry one `Authorization: Bearer <key>` line whose key
   * authenticates (the key's principal's app's route, so the role table applies: 403 `forbidden`
   * as {@link fetch} answers). Null for any other request — a missing, malformed, unknown or
   * revoked key included, before anything is logged or read — which then goes through
   * {@link fetch} and gets its answer there (401, logged once).
   */
  fastRoute(request: RawRequest): Promise<RawAnswer> | null;
}

/** The `realm` of every `WWW-Authenticate` challenge. */
export const authRealm = "es-broker";

/** Longest `Authorization` header looked at: `Bearer ` and the longest key, with room for spaces. */
const authorizationBytesMax = apiKeyTextBytesMax + 32;

/**
 * The key in an `Authorization` header: undefined for no header. `lines` is how many
 * `Authorization` field lines the request had, where the server can count them (`node:http`);
 * elsewhere (`Deno.serve`, WHATWG `Headers`) several lines arrive joined with ", ", and a comma,
 * which no key holds, is taken for more than one.
 * @throws AuthenticationError (malformed) for more than one header, any other scheme, a missing or
 *   extra token, or an over-long header.
 */
export function bearerKey(header: string | null, lines?: number): string | undefined {
  if (header === null) return undefined;
  if ((lines ?? (header.includes(",") ? 2 : 1)) > 1)
    throw new AuthenticationError(
      "malformed",
      'Cannot authenticate: the request has more than one Authorization header: send exactly one, "Bearer <key>"',
    );
  const m =
    header.length <= authorizationBytesMax
      ? /^[Bb][Ee][Aa][Rr][Ee][Rr] +([^\s]+) *$/.exec(header)
      : null;
  if (m === null)
    throw new AuthenticationError(
      "malformed",
      'Cannot authenticate: the Authorization header must be "Bearer <key>"',
    );
  return m[1];
}

/**
 * Paths a GET (or its HEAD) may take without a key: liveness, readiness and the API's OpenAPI document (none
 * says anything about topics or records).
 */
const unauthenticatedPaths = new Set(["/healthz", "/readyz", "/v1/openapi.json", ...consolePaths]);

/** The path of a request URL, without the query (`http://h:1/v1/x?y` → `/v1/x`). */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const query = url.indexOf("?", start);
  return query < 0 ? url.slice(start) : url.slice(start, query);
}

/** Builds the authenticating app (module comment). */
export function createAuthenticatedHttpApp(
  options: AuthenticatedHttpAppOptions,
): AuthenticatedHttpApp {
  const { access, meter, metricsText, checkHost = false, ...appOptions } = options;
  const apps = new WeakMap<Principal, HttpApp>();
  const appFor = (principal: Principal): HttpApp => {
    let app = apps.get(principal);
    if (app === undefined) {
      const view = access.brokerFor(principal);
      const broker = meter === undefined ? view : meter(view);
      app = createHttpApp({
        ...appOptions,
        broker,
        keysRequired: () => access.required,
        metricsText:
          metricsText === undefined
            ? undefined
            : () => {
                access.check(principal, "metrics", {}, "Cannot GET /metrics");
                return metricsText();
              },
        routes: (built, helpers) => registerKeyRoutes(built, { broker, ...helpers }),
        // The schema registry's routes ask the role table per operation (registry/routes.ts).
        authorizeRegistry: (operation) =>
          access.check(principal, operation, {}, "Cannot use the schema registry"),
      });
      apps.set(principal, app);
    }
    return app;
  };
  // Built at once: it also answers /healthz while authentication is on (that route calls no broker method).
  const anonymousApp = appFor(anonymousPrincipal);
  const anonymousFast = anonymousApp.fastRoute;
  const nosniffHeader = Object.freeze({ "x-content-type-options": "nosniff" });
  // The last `Host` checked and the check's result (a client sends the same one every time).
  let lastHost: string | undefined | null = null;
  let lastHostPasses = false;
  const hostPasses = (host: string | undefined): boolean => {
    if (host !== lastHost) {
      lastHost = host;
      lastHostPasses = isLiteralOrLocalhost(hostnameOf(host ?? ""));
    }
    return lastHostPasses;
  };
  return {
    fastRoute(request) {
      if (
        anonymousFast === undefined ||
        request.header("origin") !== undefined ||
        request.header("sec-fetch-site") !== undefined ||
        (checkHost && !hostPasses(request.header("host")))
      )
        return null;
      const authorization = request.header("authorization");
      if (authorization === undefined)
        return access.required ? null : anonymousFast(request, nosniffHeader);
      // Two lines: `node:http` keeps the first, WHATWG `Headers` joins them; `fetch` decides.
      if (request.headerLines("authorization") !== 1) return null;
      let key: string | undefined;
      try {
        key = bearerKey(authorization);
      } catch {
        return null;
      }
      const principal = key === undefined ? null : access.principalOfKey(key);
      if (principal === null) return null;
      return appFor(principal).fastRoute?.(request, nosniffHeader) ?? null;
    },
    fetch(request, env) {
      const crossSite = crossSiteRefusal(request);
      if (crossSite !== null) return crossSite;
      const open =
        (request.method === "GET" || request.method === "HEAD") &&
        unauthenticatedPaths.has(pathOf(request.url));
      if (!access.required && request.headers.get("authorization") === null) {
        const foreignHost = checkHost && !open ? hostRefusal(request) : null;
        return foreignHost ?? nosniff(anonymousApp.fetch(request, env));
      }
      if (open) return nosniff(anonymousApp.fetch(request, env));
      let principal: Principal;
      const remote = env?.remoteAddress?.() ?? "unknown";
      try {
        let key: string | undefined;
        try {
          key = bearerKey(
            request.headers.get("authorization"),
            env?.headerLines?.("authorization"),
          );
        } catch (error) {
          access.logFailure("malformed", remote, "http", null);
          throw error;
        }
        principal = access.authenticate(key, remote, "http");
      } catch (error) {
        if (error instanceof BrokerError)
          return unauthenticatedResponse(
            droppedByRedirect(error, request.url),
            isRegistryPath(pathOf(request.url)),
          );
        throw error;
      }
      return nosniff(appFor(principal).fetch(request, env));
    },
  };
}

/**
 * A request without a key that another broker redirected here (cluster mode: the 307's Location
 * carries `redirected=1`, app.ts) most likely had one: curl and fetch drop Authorization on a
 * redirect to another port. The 401 says so, and how to keep it (docs/cluster.md).
 */
function droppedByRedirect(error: BrokerError, url: string): BrokerError {
  if (!(error instanceof AuthenticationError) || error.reason !== "missing") return error;
  let redirected = false;
  try {
    redirected = new URL(url).searchParams.get(redirectedMarker) === "1";
  } catch {}
  if (!redirected) return error;
  return new AuthenticationError(
    "missing",
    `${error.message}. This request was redirected here by another broker (307 to the partition's leader or the group coordinator), and the redirect dropped your key: curl needs --location-trusted (not just -L) to send it again after a redirect`,
  );
}

/** Methods that change nothing, which a cross-site page may send (their answers it cannot read). */
const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Refuses (403 `forbidden`) a request a browser sends for another site (docs/security.md, "Web
 * console and browsers"): a method that changes something whose `Origin` is not this broker's own
 * origin (or is `null`), or that the browser marks `Sec-Fetch-Site: cross-site`. Such a request
 * is a form or a script on some other page acting with whatever the browser would send — on a
 * broker without keys, enough to create or write topics. A request with an `Authorization` header
 * is never refused: its sender holds the key. Clients that are not browsers (curl, the CLI, SDKs)
 * send neither header and are not affected; the console runs on the broker's own origin.
 * @returns the refusal, or null to serve the request.
 */
export function crossSiteRefusal(request: Request): Response | null {
  if (safeMethods.has(request.method)) return null;
  // A sender that holds a key put it there itself: browsers never add an Authorization header
  // on their own, so such a request is no forgery (the Durable Streams routes serve keyed
  // clients on other origins through CORS).
  if (request.headers.has("authorization")) return null;
  const origin = request.headers.get("origin");
  const site = request.headers.get("sec-fetch-site");
  let own: boolean;
  try {
    own = origin === null || new URL(origin).host === new URL(request.url).host;
  } catch {
    own = false;
  }
  if (own && site !== "cross-site") return null;
  const error = new BrokerError(
    Errors.forbidden,
    `Cannot accept a cross-site request: it comes from ${origin === null ? "another site (Sec-Fetch-Site: cross-site)" : `a page of ${clip(origin)}`}, not from this broker's origin`,
    { reason: "cross_site" },
  );
  if (isRegistryPath(pathOf(request.url)))
    return registryErrorResponse(error.kind.http, error.message, {
      "x-content-type-options": "nosniff",
      "cache-control": "no-store",
    });
  return new Response(JSON.stringify(errorBody(error)), {
    status: error.kind.http,
    headers: {
      "content-type": "application/json",
      "x-content-type-options": "nosniff",
      "cache-control": "no-store",
    },
  });
}

/** The name part of a `Host` header (`h:1` → `h`, `[::1]:1` → `[::1]`). */
function hostnameOf(host: string): string {
  return /^(\[[^\]]*\]|[^:]*)/.exec(host)?.[1] ?? "";
}

/** A host name only this machine can be: an IP address, `localhost` or a `*.localhost` name. */
function isLiteralOrLocalhost(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, "");
  return (
    /^\d{1,3}(\.\d{1,3}){3}$/.test(name) ||
    /^\[[0-9a-f:.]+\]$/.test(name) ||
    name === "localhost" ||
    name.endsWith(".localhost")
  );
}

/**
 * Refuses (403 `forbidden`, `details.reason` `host_not_allowed`; docs/security.md "Web console and
 * browsers") a request whose `Host` is a name other than an IP address, `localhost` or
 * `*.localhost`. A browser reaches a loopback broker under another name only through DNS
 * rebinding: a page of `evil.example` whose name the attacker points at 127.0.0.1 is then
 * same-origin with the broker, and on a broker without keys could read records and delete topics.
 * Names that browsers resolve to loopback themselves (`localhost`) and IP addresses cannot be
 * rebound. Used while the broker has no keys and listens on loopback, and on `--metrics-port`.
 * @param listener which listener refuses, for the message's reason: the broker's HTTP port
 *   (without API keys) or the `--metrics-port` one, which serves without a key whether or not the
 *   broker has keys (newuser report 9: it said "without API keys" to a broker with keys).
 * @returns the refusal, or null to serve the request.
 */
export function hostRefusal(
  request: Request,
  listener: "http" | "metrics" = "http",
): Response | null {
  // The Host header is what a browser sends (and what rebinding abuses); Deno builds a CONNECT
  // request's URL from its target instead, which is not the name the client addressed.
  const header = request.headers.get("host");
  let hostname: string;
  try {
    hostname = new URL(header !== null ? `http://${header}/` : request.url).hostname;
  } catch {
    hostname = "";
  }
  if (isLiteralOrLocalhost(hostname)) return null;
  const error = new BrokerError(
    Errors.forbidden,
    `Cannot serve a request addressed to host ${quote(hostname)}: ${listener === "metrics" ? "the metrics port (--metrics-port) serves without an API key, so it" : "without API keys this broker"} answers only requests addressed to an IP address or localhost (another name reaching it from a browser is DNS rebinding)`,
    { reason: "host_not_allowed" },
  );
  if (isRegistryPath(pathOf(request.url)))
    return registryErrorResponse(error.kind.http, error.message, {
      "x-content-type-options": "nosniff",
      "cache-control": "no-store",
    });
  return new Response(JSON.stringify(errorBody(error)), {
    status: error.kind.http,
    headers: {
      "content-type": "application/json",
      "x-content-type-options": "nosniff",
      "cache-control": "no-store",
    },
  });
}

/** Adds `X-Content-Type-Options: nosniff` to an answer (browsers then never guess another type). */
function nosniff(response: Response | Promise<Response>): Response | Promise<Response> {
  const set = (r: Response) => {
    try {
      r.headers.set("x-content-type-options", "nosniff");
    } catch {
      // A response whose headers are immutable (none here today) keeps its own.
    }
    return r;
  };
  return response instanceof Response ? set(response) : response.then(set);
}

/**
 * 401 with the `WWW-Authenticate` challenge of RFC 6750 (module comment); under `/registry`
 * (`confluentShape`) in Confluent's error shape with `error_code` 40101, which its clients read.
 */
export function unauthenticatedResponse(error: BrokerError, confluentShape = false): Response {
  const keySent = error instanceof AuthenticationError && error.reason !== "missing";
  const challenge = keySent
    ? `Bearer realm="${authRealm}", error="invalid_token"`
    : `Bearer realm="${authRealm}"`;
  const headers = {
    "x-content-type-options": "nosniff",
    "www-authenticate": challenge,
    "cache-control": "no-store",
  };
  if (confluentShape) return registryErrorResponse(error.kind.http, error.message, headers);
  return new Response(JSON.stringify(errorBody(error)), {
    status: error.kind.http,
    headers: { ...headers, "content-type": "application/json" },
  });
}
