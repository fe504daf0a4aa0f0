/**
 * Serves the web console (docs/console.md): `GET /console` (an HTML page holding no data; `GET
 * /console/` redirects there with 308),
 * `GET /console/app.js`, `GET /console/app.css` and `GET /console/icon.svg`, all from the build
 * (`console-assets.ts`, made by scripts/build-console.mjs from src/console/): no CDN, nothing
 * fetched from elsewhere, inside the Node bundle and the compiled binary.
 *
 * These four need no key: they are the login page and the code that asks for a key; every piece of
 * data the console shows comes from the API, which does (docs/security.md). Every answer carries
 * a Content-Security-Policy without `unsafe-inline` or `unsafe-eval` (scripts and styles only from
 * this origin, requests only to it, no frames, no form posts elsewhere), `nosniff`, `DENY`
 * framing and no referrer.
 */
import type { Hono } from "hono";
import { consoleAssetsHash, consoleScript, consoleStyles } from "./console-assets.ts";

/** The policy of every console answer (module comment). */
export const consoleContentSecurityPolicy =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
  "form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/** The console's paths, which need no key (`/console/` only redirects to `/console`). */
export const consolePaths: readonly string[] = [
  "/console",
  "/console/",
  "/console/app.js",
  "/console/app.css",
  "/console/icon.svg",
];

const securityHeaders = {
  "content-security-policy": consoleContentSecurityPolicy,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
};

const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>es-broker console</title>
<link rel="icon" href="/console/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/console/app.css?v=${consoleAssetsHash}">
<script type="module" src="/console/app.js?v=${consoleAssetsHash}"></script>
</head>
<body><div id="app"><noscript>The es-broker console needs JavaScript.</noscript></div></body>
</html>
`;

const icon =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#2457c5"/><path d="M4 4h8v2H4zm0 3h6v2H4zm0 3h8v2H4z" fill="#fff"/></svg>';

/** Registers the console's routes on `app`. */
export function registerConsoleRoutes<E extends { Bindings: object }>(app: Hono<E>): void {
  const serve = (body: string, type: string, cache: string) => () =>
    new Response(body, {
      status: 200,
      headers: { "content-type": type, "cache-control": cache, ...securityHeaders },
    });
  // The page is small and names the assets by hash: it is never cached, they may be for ever.
  app.get("/console", serve(page, "text/html; charset=utf-8", "no-cache"));
  // Typed with a trailing slash, the address still finds the page (the query is kept).
  app.get("/console/", (c) => {
    const query = c.req.url.indexOf("?");
    return new Response(null, {
      status: 308,
      headers: {
        location: `/console${query < 0 ? "" : c.req.url.slice(query)}`,
        ...securityHeaders,
      },
    });
  });
  const immutable = "public, max-age=31536000, immutable";
  app.get("/console/app.js", serve(consoleScript, "text/javascript; charset=utf-8", immutable));
  app.get("/console/app.css", serve(consoleStyles, "text/css; charset=utf-8", immutable));
  app.get("/console/icon.svg", serve(icon, "image/svg+xml", "public, max-age=86400"));
}
