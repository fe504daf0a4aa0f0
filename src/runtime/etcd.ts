/**
 * An etcd v3 client over etcd's JSON gateway (`POST /v3/...` on the client port) and `fetch`
 * (docs/cluster.md "Coordination in etcd"). `fetch` and streaming response bodies work the same on
 * Node, Deno, Bun and the compiled binary, so this needs no dependency; the npm `etcd3` client
 * would bring gRPC, protobuf and `.proto` files loaded at run time.
 *
 * Gateway encoding: keys and values are base64 of their bytes; 64-bit numbers (revisions, lease ids)
 * are decimal strings; fields at their default (0, false, empty) are left out of responses. A
 * watch is one long POST whose response is a stream of JSON lines, `{"result": WatchResponse}`.
 *
 * Endpoints: requests go to the current endpoint and move on to the next when it cannot be
 * reached. Reads are retried on every endpoint; a write is retried only if its first try never
 * reached a server (connection refused), otherwise it fails as `indeterminate`.
 */
import { deadline } from "./deadline.ts";
import {
  type Etcd,
  type EtcdCompare,
  EtcdError,
  type EtcdErrorCode,
  type EtcdEvent,
  type EtcdKeyValue,
  type EtcdOp,
  type EtcdStatus,
  type EtcdTxnResult,
  type EtcdWatch,
  type EtcdWatchHandlers,
  prefixRangeEnd,
} from "../cluster/etcd.ts";
import { decodeBase64, encodeBase64 } from "../lib/base64.ts";
import { fromUtf8, utf8 } from "../lib/bytes.ts";
import { errorMessage } from "../lib/errors.ts";
import { type Logger, silentLogger } from "../lib/logger.ts";

/** Options of {@link EtcdHttpClient}. */
export interface EtcdHttpClientOptions {
  /** Longest wait for one request to one endpoint, in ms. Default 5000. */
  requestTimeoutMs?: number;
  /** Pause before a broken watch reconnects, in ms. Default 250. */
  watchRetryMs?: number;
  /**
   * How often a watch checks that the member streaming it still answers, in ms (a stopped member
   * keeps the connection open and silent). Default 3000.
   */
  watchCheckMs?: number;
  logger?: Logger;
}

/** gRPC status codes by number, as etcd's gateway reports them in `code`. */
const grpcCodes: Record<number, EtcdErrorCode> = {
  3: "invalid_argument",
  5: "not_found",
  7: "permission_denied",
  8: "resource_exhausted",
  9: "failed_precondition",
  11: "out_of_range",
  13: "internal",
  14: "unavailable",
  16: "unauthenticated",
};

/** Whether a failed `fetch` never reached a server (so a write it carried was not applied). */
function connectionRefused(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string }; message?: string };
  const text = `${e?.code ?? ""} ${e?.cause?.code ?? ""} ${e?.message ?? ""} ${errorMessage(e?.cause ?? "")}`;
  return /ECONNREFUSED|ConnectionRefused|Connection refused/i.test(text);
}

function b64(text: string): string {
  return encodeBase64(utf8(text));
}

function unb64(text: string | undefined): string {
  return text === undefined ? "" : fromUtf8(decodeBase64(text));
}

/** A decimal string from the gateway (or its absence, meaning 0) as a safe JS number. */
function num(text: string | number | undefined, what: string): number {
  const n = text === undefined ? 0 : Number(text);
  if (!Number.isSafeInteger(n)) {
    throw new EtcdError(
      "bad_response",
      `Cannot read etcd's answer: ${what} ${JSON.stringify(text)} is not a safe integer`,
    );
  }
  return n;
}

interface RawKv {
  key?: string;
  value?: string;
  create_revision?: string;
  mod_revision?: string;
  version?: string;
  lease?: string;
}

function toKv(raw: RawKv): EtcdKeyValue {
  return {
    key: unb64(raw.key),
    value: unb64(raw.value),
    createRevision: num(raw.create_revision, "create_revision"),
    modRevision: num(raw.mod_revision, "mod_revision"),
    version: num(raw.version, "version"),
    lease: raw.lease ?? "0",
  };
}

function rangeFields(key: string, prefix: boolean | undefined): Record<string, string> {
  return prefix
    ? { key: b64(key), range_end: encodeBase64(prefixRangeEnd(utf8(key))) }
    : { key: b64(key) };
}

function compareToJson(c: EtcdCompare): Record<string, unknown> {
  const result = c.result.toUpperCase();
  switch (c.target) {
    case "value":
      return { key: b64(c.key), target: "VALUE", result, value: b64(c.value) };
    case "version":
      return { key: b64(c.key), target: "VERSION", result, version: String(c.number) };
    case "create_revision":
      return { key: b64(c.key), target: "CREATE", result, create_revision: String(c.number) };
    case "mod_revision":
      return { key: b64(c.key), target: "MOD", result, mod_revision: String(c.number) };
  }
}

function opToJson(op: EtcdOp): Record<string, unknown> {
  if ("put" in op) {
    const { key, value, lease } = op.put;
    return { request_put: { key: b64(key), value: b64(value), ...(lease ? { lease } : {}) } };
  }
  if ("delete" in op) return { request_delete_range: rangeFields(op.delete.key, op.delete.prefix) };
  return { request_range: rangeFields(op.get.key, op.get.prefix) };
}

type Retry = "any" | "refused";

/** {@link Etcd} over the JSON gateway of one etcd cluster's client endpoints. */
export class EtcdHttpClient implements Etcd {
  readonly #endpoints: string[];
  #current = 0;
  readonly #timeoutMs: number;
  readonly #watchRetryMs: number;
  readonly #watchCheckMs: number;
  readonly #logger: Logger;
  readonly #watches = new Set<EtcdWatch>();
  #closed = false;

  /**
   * @param endpoints client URLs such as `http://127.0.0.1:2379` (at least one).
   * @throws EtcdError `invalid_argument` if the list is empty or an entry is not an http(s) URL.
   */
  constructor(endpoints: readonly string[], options: EtcdHttpClientOptions = {}) {
    if (endpoints.length === 0)
      throw new EtcdError("invalid_argument", "Cannot connect to etcd: no endpoint given");
    for (const e of endpoints) {
      if (!/^https?:\/\/[^/]+$/.test(e)) {
        throw new EtcdError(
          "invalid_argument",
          `Cannot connect to etcd: endpoint ${JSON.stringify(e)} is not http://host:port`,
        );
      }
    }
    this.#endpoints = [...endpoints];
    this.#timeoutMs = options.requestTimeoutMs ?? 5000;
    this.#watchRetryMs = options.watchRetryMs ?? 250;
    this.#watchCheckMs = options.watchCheckMs ?? 3000;
    this.#logger = options.logger ?? silentLogger;
  }

  /** The client endpoints, in the order given. */
  get endpoints(): readonly string[] {
    return this.#endpoints;
  }

  /**
   * Posts `body` to `path`, moving through the endpoints as {@link Retry} allows. Resolves with
   * the parsed JSON answer; rejects with {@link EtcdError}.
   */
  async #call(
    path: string,
    body: unknown,
    retry: Retry,
    what: string,
  ): Promise<Record<string, unknown>> {
    const failures: string[] = [];
    for (let tried = 0; tried < this.#endpoints.length; tried++) {
      if (this.#closed)
        throw new EtcdError("unavailable", `Cannot ${what}: the etcd client is closed`);
      const endpoint = this.#endpoints[this.#current];
      let response: Response;
      let text: string;
      const limit = deadline(this.#timeoutMs);
      try {
        response = await fetch(`${endpoint}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
          signal: limit.signal,
        });
        text = await response.text();
        limit.clear();
      } catch (err) {
        limit.clear();
        failures.push(`${endpoint}: ${errorMessage(err)}`);
        if (retry === "refused" && !connectionRefused(err)) {
          throw new EtcdError(
            "indeterminate",
            `Cannot ${what}: ${endpoint} failed after the request was sent (it may have been applied): ${errorMessage(err)}`,
          );
        }
        this.#current = (this.#current + 1) % this.#endpoints.length;
        continue;
      }
      let json: Record<string, unknown>;
      try {
        json = JSON.parse(text) as Record<string, unknown>;
      } catch {
        throw new EtcdError(
          "bad_response",
          `Cannot ${what}: ${endpoint} answered HTTP ${response.status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 200))}`,
        );
      }
      if (response.ok && json.error === undefined) return json;
      const code = grpcCodes[Number(json.code)] ?? "internal";
      const message = String(json.message ?? json.error ?? `HTTP ${response.status}`);
      if (code === "unavailable") {
        // "no leader" and "not capable" mean the member refused before proposing anything.
        failures.push(`${endpoint}: ${message}`);
        if (retry === "refused" && !/no leader|not capable|too many requests/i.test(message)) {
          throw new EtcdError(
            "indeterminate",
            `Cannot ${what}: ${endpoint}: ${message} (it may have been applied)`,
          );
        }
        this.#current = (this.#current + 1) % this.#endpoints.length;
        continue;
      }
      throw new EtcdError(code, `Cannot ${what}: ${message}`);
    }
    throw new EtcdError(
      "unavailable",
      `Cannot ${what}: no etcd endpoint answered (${failures.join("; ")})`,
    );
  }

  async get(key: string): Promise<EtcdKeyValue | null> {
    const json = await this.#call(
      "/v3/kv/range",
      { key: b64(key) },
      "any",
      `read ${JSON.stringify(key)} from etcd`,
    );
    const kvs = (json.kvs as RawKv[] | undefined) ?? [];
    return kvs.length === 0 ? null : toKv(kvs[0]);
  }

  async list(prefix: string): Promise<{ kvs: EtcdKeyValue[]; revision: number }> {
    const json = await this.#call(
      "/v3/kv/range",
      rangeFields(prefix, true),
      "any",
      `list ${JSON.stringify(prefix)} in etcd`,
    );
    const header = json.header as { revision?: string } | undefined;
    return {
      kvs: ((json.kvs as RawKv[] | undefined) ?? []).map(toKv),
      revision: num(header?.revision, "revision"),
    };
  }

  async put(key: string, value: string, options: { lease?: string } = {}): Promise<number> {
    const body = {
      key: b64(key),
      value: b64(value),
      ...(options.lease ? { lease: options.lease } : {}),
    };
    const json = await this.#call(
      "/v3/kv/put",
      body,
      "refused",
      `write ${JSON.stringify(key)} to etcd`,
    );
    return num((json.header as { revision?: string } | undefined)?.revision, "revision");
  }

  async delete(key: string, options: { prefix?: boolean } = {}): Promise<number> {
    const json = await this.#call(
      "/v3/kv/deleterange",
      rangeFields(key, options.prefix),
      "refused",
      `delete ${JSON.stringify(key)} from etcd`,
    );
    return num(json.deleted as string | undefined, "deleted");
  }

  async txn(request: {
    compare: EtcdCompare[];
    success: EtcdOp[];
    failure?: EtcdOp[];
  }): Promise<EtcdTxnResult> {
    const body = {
      compare: request.compare.map(compareToJson),
      success: request.success.map(opToJson),
      failure: (request.failure ?? []).map(opToJson),
    };
    const keys = request.compare.map((c) => c.key).join(", ");
    const json = await this.#call(
      "/v3/kv/txn",
      body,
      "refused",
      `run an etcd transaction on ${keys || "no key"}`,
    );
    const responses = (json.responses as Record<string, { kvs?: RawKv[] }>[] | undefined) ?? [];
    return {
      succeeded: json.succeeded === true,
      revision: num((json.header as { revision?: string } | undefined)?.revision, "revision"),
      reads: responses
        .filter((r) => r.response_range !== undefined)
        .map((r) => (r.response_range.kvs ?? []).map(toKv)),
    };
  }

  async leaseGrant(ttlSeconds: number): Promise<{ id: string; ttlSeconds: number }> {
    const json = await this.#call(
      "/v3/lease/grant",
      { TTL: String(ttlSeconds) },
      "refused",
      `grant an etcd lease of ${ttlSeconds} s`,
    );
    if (typeof json.ID !== "string" || !/^[0-9]+$/.test(json.ID)) {
      throw new EtcdError(
        "bad_response",
        `Cannot grant an etcd lease: the answer has no lease id: ${JSON.stringify(json)}`,
      );
    }
    return { id: json.ID, ttlSeconds: num(json.TTL as string | undefined, "TTL") };
  }

  async leaseKeepAlive(id: string): Promise<number> {
    // The gateway maps the keep-alive stream to one request and one answer line.
    const json = await this.#call(
      "/v3/lease/keepalive",
      { ID: id },
      "any",
      `renew etcd lease ${id}`,
    );
    const result = json.result as { TTL?: string } | undefined;
    return num(result?.TTL, "TTL");
  }

  async leaseRevoke(id: string): Promise<void> {
    try {
      await this.#call("/v3/lease/revoke", { ID: id }, "any", `revoke etcd lease ${id}`);
    } catch (err) {
      if (err instanceof EtcdError && err.code === "not_found") return;
      throw err;
    }
  }

  async status(): Promise<EtcdStatus> {
    const json = await this.#call("/v3/maintenance/status", {}, "any", "read etcd's status");
    const header = json.header as { cluster_id?: string; member_id?: string; revision?: string };
    return {
      clusterId: header?.cluster_id ?? "0",
      memberId: header?.member_id ?? "0",
      leaderId: String(json.leader ?? "0"),
      version: String(json.version ?? ""),
      revision: num(header?.revision, "revision"),
    };
  }

  watch(
    request: { key: string; prefix?: boolean; startRevision: number },
    handlers: EtcdWatchHandlers,
  ): EtcdWatch {
    let nextRevision = request.startRevision;
    let stopped = false;
    let abort: AbortController | null = null;
    let checkTimer: ReturnType<typeof setInterval> | null = null;
    const what = `watch ${JSON.stringify(request.key)}${request.prefix ? " (prefix)" : ""}`;

    const streamOnce = async (endpoint: string): Promise<"again" | "stop"> => {
      abort = new AbortController();
      const signal = abort.signal;
      const body = {
        create_request: {
          ...rangeFields(request.key, request.prefix),
          start_revision: String(nextRevision),
        },
      };
      const response = await fetch(`${endpoint}/v3/watch`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal,
      });
      if (!response.ok || response.body === null) {
        await response.body?.cancel();
        throw new Error(`HTTP ${response.status}`);
      }
      // A stopped (SIGSTOP) member keeps the stream open and silent: probe it, and drop it if mute.
      checkTimer = setInterval(() => {
        const limit = deadline(Math.max(1000, this.#watchCheckMs));
        fetch(`${endpoint}/v3/maintenance/status`, {
          method: "POST",
          body: "{}",
          signal: limit.signal,
        })
          .then((r) => r.body?.cancel())
          .catch(() => abort?.abort())
          .finally(() => limit.clear());
      }, this.#watchCheckMs);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffered = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return "again";
        buffered += value;
        let newline = buffered.indexOf("\n");
        while (newline >= 0) {
          const line = buffered.slice(0, newline).trim();
          buffered = buffered.slice(newline + 1);
          newline = buffered.indexOf("\n");
          if (line === "" || stopped) continue;
          const message = JSON.parse(line) as {
            result?: {
              events?: { type?: string; kv?: RawKv }[];
              canceled?: boolean;
              compact_revision?: string;
              cancel_reason?: string;
            };
            error?: { message?: string };
          };
          if (message.error)
            throw new Error(message.error.message ?? JSON.stringify(message.error));
          const result = message.result ?? {};
          const compactRevision = num(result.compact_revision, "compact_revision");
          if (result.canceled || compactRevision > 0) {
            if (compactRevision > 0) {
              handlers.onCompacted?.(compactRevision);
              return "stop";
            }
            throw new Error(
              `etcd canceled the watch: ${result.cancel_reason ?? "no reason given"}`,
            );
          }
          const events: EtcdEvent[] = (result.events ?? []).map((e) => ({
            type: e.type === "DELETE" ? "delete" : "put",
            kv: toKv(e.kv ?? {}),
          }));
          if (events.length === 0) continue;
          nextRevision = events[events.length - 1].kv.modRevision + 1;
          handlers.onEvents(events);
        }
      }
    };

    const loop = (async () => {
      while (!stopped && !this.#closed) {
        const endpoint = this.#endpoints[this.#current];
        try {
          if ((await streamOnce(endpoint)) === "stop") return;
        } catch (err) {
          if (stopped || this.#closed) return;
          this.#logger.log("warn", "etcd.watch_broken", {
            endpoint,
            key: request.key,
            nextRevision,
            error: errorMessage(err),
          });
          this.#current = (this.#current + 1) % this.#endpoints.length;
        } finally {
          if (checkTimer !== null) clearInterval(checkTimer);
          checkTimer = null;
        }
        if (stopped || this.#closed) return;
        await new Promise((resolve) => setTimeout(resolve, this.#watchRetryMs));
      }
    })().catch((err) => {
      this.#logger.log("error", "etcd.watch_failed", {
        key: request.key,
        what,
        error: errorMessage(err),
      });
    });

    const watch: EtcdWatch = {
      cancel: async () => {
        stopped = true;
        (abort as AbortController | null)?.abort();
        this.#watches.delete(watch);
        await loop;
      },
    };
    this.#watches.add(watch);
    return watch;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#watches].map((w) => w.cancel()));
  }
}

/**
 * Parses `--cluster etcd://host:port[,host:port…]` into client endpoints (`http://host:port`).
 * @throws EtcdError `invalid_argument` naming the part that is wrong.
 */
export function parseEtcdUrl(url: string): string[] {
  const m = /^etcd:\/\/([^/]+)\/?$/.exec(url);
  if (!m) {
    throw new EtcdError(
      "invalid_argument",
      `Cannot use --cluster ${JSON.stringify(url)}: expected etcd://host:port[,host:port...]`,
    );
  }
  return m[1].split(",").map((hostPort) => {
    if (
      !/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$/.test(hostPort) ||
      Number(hostPort.split(":").pop()) > 65535
    ) {
      throw new EtcdError(
        "invalid_argument",
        `Cannot use --cluster ${JSON.stringify(url)}: ${JSON.stringify(hostPort)} is not host:port`,
      );
    }
    return `http://${hostPort}`;
  });
}
