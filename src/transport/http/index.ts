/**
 * The HTTP front door: {@link createHttpApp} builds the Hono app over a Broker; `serveHttp` in
 * `src/runtime/http.ts` runs it on Node, Deno or Bun. Contract: `docs/http-api.md`.
 */
export { createHttpApp } from "./app.ts";
export type { HttpApp, HttpAppOptions, HttpBindings } from "./app.ts";
export { sseHeartbeatMsDefault } from "./sse.ts";
