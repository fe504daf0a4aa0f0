/**
 * The console's calls to the broker's HTTP API (docs/http-api.md), on the same origin. The API
 * key, when the broker has keys, is kept in `sessionStorage` only (this tab, until it closes) and
 * sent as `Authorization: Bearer` — never in a cookie, so no other site can make the browser send
 * it (docs/console.md "Security").
 */

const keyStorage = "es-broker.api-key";

/** An error answer of the API: its status and `{code, message}`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The key this tab uses, or null. */
export function storedKey(): string | null {
  return sessionStorage.getItem(keyStorage);
}

/** Keeps `key` for this tab (null forgets it). */
export function storeKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(keyStorage);
  else sessionStorage.setItem(keyStorage, key);
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const key = storedKey();
  return key === null ? extra : { ...extra, authorization: `Bearer ${key}` };
}

async function failure(res: Response): Promise<ApiError> {
  try {
    const body = (await res.json()) as { error?: { code?: string; message?: string } };
    return new ApiError(
      res.status,
      body.error?.code ?? "error",
      body.error?.message ?? res.statusText,
    );
  } catch {
    return new ApiError(res.status, "error", `${res.status} ${res.statusText}`);
  }
}

/** Calls the API: JSON in, JSON out (undefined for 204). @throws ApiError on an error answer. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
    // A cluster broker answers 307 to another broker (a group's coordinator, a partition's
    // leader): another origin, which this page may not reach (connect-src 'self').
    redirect: "manual",
  });
  if (res.type === "opaqueredirect" || (res.status >= 300 && res.status < 400))
    throw new ApiError(
      307,
      "redirect",
      "another broker answers this (cluster mode): open its console",
    );
  if (!res.ok) throw await failure(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** One record of a fetch or a stream. */
export interface RecordJson {
  offset: number;
  timestamp: number;
  key: string | null;
  value: string;
}

/**
 * Follows a partition's live tail (`GET …/stream`, Server-Sent Events) with `fetch`, which, unlike
 * `EventSource`, can send the key. Calls `onRecord` per record until `signal` aborts or the stream
 * ends. @throws ApiError if the stream cannot start.
 */
export async function tail(
  path: string,
  onRecord: (record: RecordJson) => void,
  signal: AbortSignal,
): Promise<void> {
  // A cluster broker that does not lead the partition answers 307 to the leader, another
  // origin: the page's policy (connect-src 'self') forbids following it, so say so instead.
  const res = await fetch(path, {
    headers: headers(),
    credentials: "omit",
    signal,
    redirect: "manual",
  });
  if (res.type === "opaqueredirect" || (res.status >= 300 && res.status < 400))
    throw new ApiError(307, "not_leader", "another broker leads this partition");
  if (!res.ok || res.body === null) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let type = "message";
      let data = "";
      for (const line of event.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trimStart();
      }
      if (type === "record") onRecord(JSON.parse(data) as RecordJson);
      else if (type === "error") {
        const e = (JSON.parse(data) as { error: { code: string; message: string } }).error;
        throw new ApiError(0, e.code, e.message);
      }
      end = buffer.indexOf("\n\n");
    }
  }
}

/**
 * Cluster mode: the address of the live tail of `topic`/`partition` in its leader's console
 * (docs/console.md "In a cluster"), from `GET /v1/cluster`, with the leader's node id; null on a
 * single broker, or when the partition has no leader now.
 */
export async function leaderTail(
  topic: string,
  partition: number,
): Promise<{ node: number; url: string } | null> {
  let cluster: {
    brokers: { node_id: number; http: string }[];
    topics: { partitions: { partition: number; leader: number }[] }[];
  };
  try {
    cluster = await call("GET", `/v1/cluster?topic=${encodeURIComponent(topic)}`);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
  const leader = cluster.topics[0]?.partitions.find((p) => p.partition === partition)?.leader;
  const broker = cluster.brokers.find((b) => b.node_id === leader);
  if (leader === undefined || broker === undefined) return null;
  const url = `${broker.http.replace(/\/+$/, "")}/console#/tail/${encodeURIComponent(topic)}/${partition}`;
  return { node: leader, url };
}

/**
 * Cluster mode: the address of the consumer groups view in the console of the controller, which
 * coordinates every group (docs/console.md "In a cluster"), with its node id; null on a single
 * broker or while there is no controller.
 */
export async function coordinatorGroups(): Promise<{ node: number; url: string } | null> {
  let cluster: { controller: number; brokers: { node_id: number; http: string }[] };
  try {
    cluster = await call("GET", "/v1/cluster");
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
  const broker = cluster.brokers.find((b) => b.node_id === cluster.controller);
  if (broker === undefined) return null;
  return { node: broker.node_id, url: `${broker.http.replace(/\/+$/, "")}/console#/groups` };
}
