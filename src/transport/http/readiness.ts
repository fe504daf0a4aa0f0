/**
 * What the HTTP port answers while the broker recovers its data directory at start
 * (docs/http-api.md "`GET /readyz`", docs/operations.md): the port listens from before recovery so
 * that a supervisor can tell "recovering" from "down".
 *
 * | request                    | answer while recovering                                       |
 * |----------------------------|---------------------------------------------------------------|
 * | `GET /healthz`             | 200 `{"status":"ok"}`: the process is up                      |
 * | `GET /readyz`              | 503 `{"status":"recovering","recovery":{…progress…}}`         |
 * | anything else              | 503 `unavailable` (retriable) with `Retry-After: 1`           |
 *
 * Nothing here reads a key or names a topic: the progress is counts only. Once recovery is over
 * `cli/serve.ts` hands the port to the full app, whose `/readyz` answers 200.
 */
import type { RecoveryProgress } from "../../broker/topics.ts";
import { BrokerError, Errors } from "../../broker/errors.ts";
import { errorBody } from "./errors.ts";

/** The JSON of a recovery's progress, as `/readyz` shows it. */
export function recoveryJson(
  progress: RecoveryProgress,
  elapsedMs: number,
): {
  phase: RecoveryProgress["phase"];
  topics_total: number;
  topics_done: number;
  partitions_done: number;
  elapsed_ms: number;
} {
  return {
    phase: progress.phase,
    topics_total: progress.topicsTotal,
    topics_done: progress.topicsDone,
    partitions_done: progress.partitionsDone,
    elapsed_ms: elapsedMs,
  };
}

/** The path of a request URL, without the query. */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const query = url.indexOf("?", start);
  return query < 0 ? url.slice(start) : url.slice(start, query);
}

const json = (body: unknown, status: number, extra: Record<string, string> = {}): Response =>
  new Response(JSON.stringify(body), {
    status,
    headers: {
      "content-type": "application/json",
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
      ...extra,
    },
  });

/**
 * The app of the port while recovering (module comment).
 * @param elapsedMs time since recovery began, in ms.
 */
export function recoveringApp(
  progress: RecoveryProgress,
  elapsedMs: () => number,
): { fetch(request: Request): Response } {
  return {
    fetch(request) {
      const path = pathOf(request.url);
      if (request.method === "GET" && path === "/healthz") return json({ status: "ok" }, 200);
      const recovery = recoveryJson(progress, elapsedMs());
      if (request.method === "GET" && path === "/readyz")
        return json({ status: "recovering", recovery }, 503, { "retry-after": "1" });
      const error = new BrokerError(
        Errors.unavailable,
        progress.phase === "cluster"
          ? "Cannot serve the request yet: the broker has recovered its data directory and is joining its cluster (it waits until etcd answers at the --cluster address; the log says cluster.etcd_unreachable while it cannot reach it)"
          : `Cannot serve the request: the broker is recovering its data directory (${recovery.topics_done} of ${recovery.topics_total} topics, ${recovery.partitions_done} partitions done)`,
        { recovery },
      );
      return json(errorBody(error), error.kind.http, { "retry-after": "1" });
    },
  };
}
