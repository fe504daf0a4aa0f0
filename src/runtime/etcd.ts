/**
 * An etcd v3 client over etcd's JSON gateway (`POST /v3/...` on the client port) (docs/cluster.md
 * "Coordination in etcd"). Plain HTTP (`etcd://`) goes over `fetch`; TLS (`etcds://`) over
 * `node:https`, the one HTTPS client that takes a CA and a client certificate the same way on
 * Node, Deno, Bun and the compiled binary (their `fetch` each need their own option: an undici
 * dispatcher, `Deno.createHttpClient`, Bun's `tls`). Both stream response bodies, so this needs
 * no dependency; the npm `etcd3` client would bring gRPC, protobuf and `.proto` files loaded at
 * run time.
 *
 * Gateway encoding: keys and values are base64 of their bytes; 64-bit numbers (revisions, lease ids)
 * are decimal strings; fields at their default (0, false, empty) are left out of responses. A
 * watch is one long POST whose response is a stream of JSON lines, `{"result": WatchResponse}`.
 *
 * Endpoints: requests go to the current endpoint and move on to the next when it cannot be
 * reached. Reads are retried on every endpoint; a write is retried only if its first try never
 * reached a server (connection refused, TLS handshake refused), otherwise it fails as
 * `indeterminate`. A watch keeps its own endpoint: it starts on the current one and, when its
 * stream breaks or goes mute, moves on to the next after the one that failed.
 *
 * etcd authentication (docs/cluster.md "etcd with TLS and authentication"): with a user, the
 * client asks `/v3/auth/authenticate` for a token and sends it in `Authorization`; a token etcd
 * no longer knows (simple tokens expire after `--auth-token-ttl` unused) is replaced and the
 * request sent once more (etcd refused it before applying anything). The password is held in
 * memory only and never appears in a message.
 */
import * as https from "node:https";
import { tlsFailure } from "./tls.ts";
import { deadline } from "./deadline.ts";
import {
  type Etcd,
  type EtcdChanges,
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
  /**
   * Longest wait for one lease renewal at one endpoint, in ms (default 1500): well under the
   * renewal period (TTL/3, 2 s by default), so a member that accepts connections and never
   * answers costs a renewal one endpoint's try, never the lease (attack9 F1).
   */
  leaseRequestTimeoutMs?: number;
  /**
   * Pause before a broken watch reconnects, in ms; doubled after each round in which every
   * endpoint failed, up to 2000 (or this, if longer). Default 250.
   */
  watchRetryMs?: number;
  /**
   * How often a watch checks that the member streaming it still answers, in ms, from the moment
   * the watch request is sent (a stopped member keeps the connection open and silent): a
   * `/v3/maintenance/status` probe not answered within max(1000, this) drops the stream, so a
   * hung member is left within this + max(1000, this). Default 2000.
   */
  watchCheckMs?: number;
  logger?: Logger;
  /**
   * TLS material for `https://` endpoints, asked for at each new connection (so new files after
   * SIGHUP apply to connections made from then on). Without it, the system's CAs and no client
   * certificate.
   */
  tls?: () => EtcdTlsMaterial;
  /** etcd user authentication; without it, no token is sent. */
  auth?: EtcdAuth;
}

/** PEM bytes for the TLS connection to etcd (`--cluster-etcd-ca`, `-cert`, `-key`). */
export interface EtcdTlsMaterial {
  /** CA bundle etcd's server certificates must chain to; default the system's CAs. */
  ca?: Buffer;
  /** Client certificate chain, for etcd started with `--client-cert-auth`. */
  cert?: Buffer;
  /** The client certificate's private key. */
  key?: Buffer;
}

/** An etcd user (`--cluster-etcd-user`) and its password (`--cluster-etcd-password-file`). */
export interface EtcdAuth {
  user: string;
  /** Asked for at each authentication (SIGHUP may have read a new file); never logged. */
  password: () => string;
}

/** One answer of etcd's gateway, whatever carried it. */
interface Answer {
  status: number;
  /** The whole body as text. */
  text(): Promise<string>;
  /** The body as decoded text chunks, null at its end. */
  chunks(): () => Promise<string | null>;
  /** Drops the rest of the body. */
  cancel(): void;
}

/** The gateway's messages that mean "authenticate again and resend" (the token is unknown or stale). */
const staleToken = /invalid auth token|revision of auth store is old/i;

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

/** Whether a failed request never reached a server (so a write it carried was not applied). */
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

/**
 * What a plain-HTTP connection closed before any answer usually means: etcd serves TLS there
 * (it closes plain connections to a TLS-only client port without a word).
 */
function closedHint(endpoint: string, err: unknown): string {
  if (!endpoint.startsWith("http:")) return "";
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  const text = `${cause?.code ?? ""} ${cause?.message ?? ""} ${errorMessage(err)}`;
  return /other side closed|UND_ERR_SOCKET|connection closed before/i.test(text)
    ? " (closed without an answer: if etcd serves TLS on that port, use --cluster etcds://)"
    : "";
}

/** What a non-JSON answer of the gateway usually means, from its text. */
function plainTextHint(text: string): string {
  if (/HTTP request to an HTTPS server/i.test(text))
    return ": that port serves TLS: use --cluster etcds://";
  if (/CommonName of client/i.test(text))
    return ": with authentication enabled, etcd 3.4's gateway refuses a client certificate that has a Common Name: issue --cluster-etcd-cert without a CN (e.g. -subj /O=es-broker)";
  return "";
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

/** Why a TLS handshake with etcd failed, and what to do, by {@link tlsFailure}'s kind. */
const tlsHints = {
  verify:
    "etcd's certificate is not trusted or does not name the host in --cluster: pass --cluster-etcd-ca FILE, the CA (PEM) that signed etcd's --cert-file, whose certificate must list that host",
  handshake:
    "etcd refused the TLS handshake: etcd started with --client-cert-auth needs a client certificate (--cluster-etcd-cert FILE and --cluster-etcd-key FILE, signed by a CA in etcd's --trusted-ca-file)",
  plain:
    "that port serves plain HTTP, not TLS: use --cluster etcd:// there (or start etcd with --cert-file and --key-file)",
} as const;

/**
 * Why a request to an https:// endpoint failed in TLS, as {@link tlsHints}' kind and a short
 * reason (OpenSSL's long text cut to its code), or null for any other failure.
 */
function etcdTlsFailure(err: unknown): { kind: keyof typeof tlsHints; reason: string } | null {
  const text = `${(err as { code?: string })?.code ?? ""} ${errorMessage(err)}`;
  if (/WRONG_VERSION_NUMBER|wrong version number/i.test(text))
    return { kind: "plain", reason: "TLS record of a plain-HTTP server (wrong version number)" };
  const tls = tlsFailure(err);
  if (tls === null) return null;
  const code = /^(ERR_SSL_\w+):/.exec(tls.reason)?.[1];
  return { kind: tls.kind, reason: code ?? tls.reason.split("\n")[0].trim() };
}

/** {@link Etcd} over the JSON gateway of one etcd cluster's client endpoints. */
export class EtcdHttpClient implements Etcd {
  readonly #endpoints: string[];
  #current = 0;
  readonly #timeoutMs: number;
  readonly #leaseTimeoutMs: number;
  readonly #watchRetryMs: number;
  readonly #watchCheckMs: number;
  readonly #logger: Logger;
  readonly #tls: (() => EtcdTlsMaterial) | undefined;
  readonly #auth: EtcdAuth | undefined;
  /** The keep-alive connections for short requests, and the TLS material they were made with. */
  #agent: { agent: https.Agent; material: EtcdTlsMaterial } | null = null;
  /** The current token, or the authentication in flight (one at a time). */
  #token: Promise<string> | null = null;
  readonly #watches = new Set<EtcdWatch>();
  #closed = false;
  /**
   * Aborted by {@link close}: every request still in flight is abandoned then, rather than
   * holding the process until its deadline (a member without quorum, or SIGSTOPped, answers
   * nothing for the whole request timeout).
   */
  readonly #closing = new AbortController();

  /**
   * @param endpoints client URLs such as `http://127.0.0.1:2379` or `https://etcd1:2379` (at least
   *   one; all of one scheme).
   * @throws EtcdError `invalid_argument` if the list is empty, an entry is not an http(s) URL, or
   *   the schemes differ.
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
    if (new Set(endpoints.map((e) => e.startsWith("https:"))).size > 1)
      throw new EtcdError(
        "invalid_argument",
        "Cannot connect to etcd: the endpoints mix http:// and https://",
      );
    this.#endpoints = [...endpoints];
    this.#timeoutMs = options.requestTimeoutMs ?? 5000;
    this.#leaseTimeoutMs = Math.min(this.#timeoutMs, options.leaseRequestTimeoutMs ?? 1500);
    this.#watchRetryMs = options.watchRetryMs ?? 250;
    this.#watchCheckMs = options.watchCheckMs ?? 2000;
    this.#logger = options.logger ?? silentLogger;
    this.#tls = options.tls;
    this.#auth = options.auth;
  }

  /** The client endpoints, in the order given. */
  get endpoints(): readonly string[] {
    return this.#endpoints;
  }

  /**
   * POSTs `body` to `endpoint` + `path`: over `fetch` for http://, over `node:https` for https://
   * (a streamed body, the watch, gets a connection of its own; others share keep-alive ones).
   */
  async #post(
    endpoint: string,
    path: string,
    body: string,
    headers: Record<string, string>,
    signal: AbortSignal,
    stream = false,
  ): Promise<Answer> {
    if (endpoint.startsWith("http:")) {
      const response = await fetch(`${endpoint}${path}`, { method: "POST", headers, body, signal });
      return {
        status: response.status,
        text: () => response.text(),
        chunks: () => {
          if (response.body === null) return async () => null;
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          return async () => {
            const { value, done } = await reader.read();
            return done ? null : value;
          };
        },
        cancel: () => void response.body?.cancel().catch(() => {}),
      };
    }
    const url = new URL(endpoint);
    const material = this.#tls?.() ?? {};
    let agent: https.Agent | false = false;
    if (!stream) {
      if (this.#agent === null || this.#agent.material !== material) {
        // New files (SIGHUP): new connections use them; the old ones close once their requests
        // have had their time.
        const old = this.#agent?.agent;
        if (old !== undefined) {
          const timer = setTimeout(() => old.destroy(), 2 * this.#timeoutMs);
          (timer as { unref?: () => void }).unref?.();
        }
        this.#agent = { agent: new https.Agent({ keepAlive: true, ...material }), material };
      }
      agent = this.#agent.agent;
    }
    const response = await new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
      const request = https.request(
        {
          host: url.hostname.replace(/^\[|\]$/g, ""),
          port: url.port === "" ? 443 : Number(url.port),
          path,
          method: "POST",
          headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
          agent,
          ...(agent === false ? material : {}),
          signal,
        },
        resolve,
      );
      request.on("error", reject);
      request.end(body);
    });
    const decoder = new TextDecoder();
    const iterator = response[Symbol.asyncIterator]() as AsyncIterator<Uint8Array>;
    return {
      status: response.statusCode ?? 0,
      text: async () => {
        let text = "";
        for await (const chunk of response as AsyncIterable<Uint8Array>)
          text += decoder.decode(chunk, { stream: true });
        return text + decoder.decode();
      },
      chunks: () => async () => {
        const { value, done } = await iterator.next();
        return done ? null : decoder.decode(value, { stream: true });
      },
      cancel: () => void response.destroy(),
    };
  }

  /** Headers of a request: JSON, and the token when etcd authentication is on. */
  async #headers(): Promise<Record<string, string>> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.#auth !== undefined) headers.authorization = await this.#currentToken();
    return headers;
  }

  /** The token, asking etcd for one when there is none (one request at a time). */
  #currentToken(): Promise<string> {
    if (this.#token === null) {
      const auth = this.#auth!;
      const pending = this.#callOnce(
        "/v3/auth/authenticate",
        { name: auth.user, password: auth.password() },
        "any",
        `authenticate to etcd as user ${JSON.stringify(auth.user)}`,
        { "content-type": "application/json" },
      ).then((json) => {
        if (typeof json.token !== "string" || json.token === "")
          throw new EtcdError(
            "bad_response",
            `Cannot authenticate to etcd as user ${JSON.stringify(auth.user)}: the answer has no token`,
          );
        return json.token;
      });
      this.#token = pending;
      pending.catch(() => {
        if (this.#token === pending) this.#token = null;
      });
    }
    return this.#token;
  }

  /** Forgets `token` (etcd no longer knows it), unless a newer one already replaced it. */
  async #dropToken(token: string | undefined): Promise<void> {
    const current = this.#token;
    if (current !== null && (await current.catch(() => null)) === token && this.#token === current)
      this.#token = null;
  }

  /**
   * Posts `body` to `path` with the token, authenticating again once if etcd no longer knows the
   * token. Resolves with the parsed JSON answer; rejects with {@link EtcdError}.
   */
  async #call(
    path: string,
    body: unknown,
    retry: Retry,
    what: string,
    timeoutMs = this.#timeoutMs,
  ): Promise<Record<string, unknown>> {
    for (let attempt = 1; ; attempt++) {
      const headers = await this.#headers();
      try {
        return await this.#callOnce(path, body, retry, what, headers, timeoutMs);
      } catch (err) {
        if (
          this.#auth === undefined ||
          attempt > 1 ||
          !(err instanceof EtcdError) ||
          !staleToken.test(err.message)
        )
          throw err;
        await this.#dropToken(headers.authorization);
      }
    }
  }

  /**
   * Posts `body` to `path`, moving through the endpoints as {@link Retry} allows. Resolves with
   * the parsed JSON answer; rejects with {@link EtcdError}.
   */
  async #callOnce(
    path: string,
    body: unknown,
    retry: Retry,
    what: string,
    headers: Record<string, string>,
    timeoutMs = this.#timeoutMs,
  ): Promise<Record<string, unknown>> {
    const failures: string[] = [];
    let tlsKind: keyof typeof tlsHints | null = null;
    for (let tried = 0; tried < this.#endpoints.length; tried++) {
      if (this.#closed)
        throw new EtcdError("unavailable", `Cannot ${what}: the etcd client is closed`);
      const endpoint = this.#endpoints[this.#current];
      let response: Answer;
      let text: string;
      const limit = deadline(timeoutMs, this.#closing.signal);
      try {
        response = await this.#post(endpoint, path, JSON.stringify(body), headers, limit.signal);
        text = await response.text();
        limit.clear();
      } catch (err) {
        limit.clear();
        // A refused handshake never let the request through: a write it carried was not applied.
        const tls = etcdTlsFailure(err);
        failures.push(
          `${endpoint}: ${tls?.reason ?? errorMessage(err)}${closedHint(endpoint, err)}`,
        );
        if (tls !== null) tlsKind ??= tls.kind;
        else if (retry === "refused" && !connectionRefused(err)) {
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
          `Cannot ${what}: ${endpoint} answered HTTP ${response.status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 200))}${plainTextHint(text)}`,
        );
      }
      if (response.status >= 200 && response.status < 300 && json.error === undefined) return json;
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
      throw new EtcdError(code, `Cannot ${what}: ${message}${this.#authHint(message)}`);
    }
    if (tlsKind !== null)
      throw new EtcdError("tls", `Cannot ${what}: ${tlsHints[tlsKind]} (${failures.join("; ")})`);
    throw new EtcdError(
      "unavailable",
      `Cannot ${what}: no etcd endpoint answered (${failures.join("; ")})`,
    );
  }

  /** What to do about an authentication refusal from etcd, naming the user (never the password). */
  #authHint(message: string): string {
    const user = this.#auth?.user;
    if (/user name is empty/i.test(message) && user === undefined)
      return ": etcd has authentication enabled: pass --cluster-etcd-user NAME and --cluster-etcd-password-file FILE";
    if (/authentication failed/i.test(message))
      return `: etcd refused user ${JSON.stringify(user)} with the password of --cluster-etcd-password-file (wrong password, or no such user)`;
    if (/authentication is not enabled/i.test(message))
      return `: --cluster-etcd-user ${JSON.stringify(user)} was given, but etcd has authentication off: enable it (etcdctl auth enable, docs/cluster.md) or leave out --cluster-etcd-user and --cluster-etcd-password-file`;
    if (/permission denied/i.test(message))
      return user === undefined
        ? ": if etcd has authentication enabled, pass --cluster-etcd-user NAME and --cluster-etcd-password-file FILE"
        : `: etcd user ${JSON.stringify(user)} may not do this: grant its role readwrite on the cluster's prefix (etcdctl role grant-permission ROLE --prefix=true readwrite /es-broker/)`;
    return "";
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
      this.#leaseTimeoutMs,
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

  async changedSince(request: {
    key: string;
    prefix?: boolean;
    after: number;
    atRevision?: number;
  }): Promise<EtcdChanges> {
    // etcd counts every key of the range before it filters on min_mod_revision, so one range
    // answers both; keys_only keeps the answer small (at rest: a header and a count).
    const json = await this.#call(
      "/v3/kv/range",
      {
        ...rangeFields(request.key, request.prefix),
        keys_only: true,
        min_mod_revision: String(request.after + 1),
        ...(request.atRevision === undefined ? {} : { revision: String(request.atRevision) }),
      },
      "any",
      `check ${JSON.stringify(request.key)} for changes in etcd`,
    );
    const header = json.header as { revision?: string } | undefined;
    return {
      count: num(json.count as string | undefined, "count"),
      changed: ((json.kvs as RawKv[] | undefined) ?? []).map(toKv),
      revision: request.atRevision ?? num(header?.revision, "revision"),
    };
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

  /**
   * Watches `request.key` (docs/cluster.md "Coordination in etcd", its paragraph on the client). Each stream has a
   * deadline on its connection, response headers and first message (the request timeout) and is
   * probed for liveness from the moment it is sent ({@link EtcdHttpClientOptions.watchCheckMs}); a
   * stream that breaks, ends or goes mute is opened again from the revision after the last event
   * delivered, on the watch's next endpoint (its own cursor, so the endpoint that just failed is
   * skipped whatever other requests do). One `etcd.watch_broken` per break, one
   * `etcd.watch_resumed` when a stream delivers again. `reopen` drops the stream the same way
   * (docs/cluster.md "A watch that goes deaf": the guard found it missed changes).
   */
  watch(
    request: { key: string; prefix?: boolean; startRevision: number },
    handlers: EtcdWatchHandlers,
  ): EtcdWatch {
    let nextRevision = request.startRevision;
    let stopped = false;
    let abort: AbortController | null = null;
    /** Drops the stream in progress, saying why; null between streams. */
    let failStream: ((reason: string) => void) | null = null;
    /** Ends the pause between two streams early (on cancel); null outside it. */
    let wake: (() => void) | null = null;
    const what = `watch ${JSON.stringify(request.key)}${request.prefix ? " (prefix)" : ""}`;
    const checkMs = this.#watchCheckMs;
    const probeMs = Math.max(1000, checkMs);

    /**
     * One stream from `endpoint`: resolves when etcd reports the start revision compacted, throws
     * (saying why) when the stream fails, ends or goes mute. `onLive` runs at its first message,
     * etcd's "created" answer.
     */
    const streamOnce = async (endpoint: string, onLive: () => void): Promise<void> => {
      const controller = new AbortController();
      abort = controller;
      const signal = controller.signal;
      let why: string | null = null;
      const fail = (reason: string) => {
        why ??= reason;
        controller.abort(new Error(reason));
      };
      failStream = fail;
      // A hung member (SIGSTOP, a frozen VM) accepts the TCP connection (its kernel does) and
      // then says nothing: neither a handshake, nor headers, nor events. Both checks run from
      // the moment the request is sent.
      const connectTimer = setTimeout(
        () => fail(`no answer to the watch request within ${this.#timeoutMs} ms`),
        this.#timeoutMs,
      );
      let probing = false;
      const checkTimer = setInterval(() => {
        if (probing) return;
        probing = true;
        const limit = deadline(probeMs, this.#closing.signal);
        this.#post(
          endpoint,
          "/v3/maintenance/status",
          "{}",
          { "content-type": "application/json" },
          limit.signal,
        )
          .then((r) => r.text())
          .catch(() => fail(`no answer to a status probe within ${probeMs} ms`))
          .finally(() => {
            limit.clear();
            probing = false;
          });
      }, checkMs);
      let live = false;
      try {
        const headers = await this.#headers();
        const body = {
          create_request: {
            ...rangeFields(request.key, request.prefix),
            start_revision: String(nextRevision),
          },
        };
        const response = await this.#post(
          endpoint,
          "/v3/watch",
          JSON.stringify(body),
          headers,
          signal,
          true,
        );
        if (response.status < 200 || response.status > 299) {
          response.cancel();
          throw new Error(`HTTP ${response.status}`);
        }
        const read = response.chunks();
        let buffered = "";
        for (;;) {
          const value = await read();
          if (value === null) throw new Error("the stream ended");
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
                return;
              }
              // A token etcd no longer knows: the next try authenticates again.
              if (staleToken.test(result.cancel_reason ?? ""))
                await this.#dropToken(headers.authorization);
              throw new Error(
                `etcd canceled the watch: ${result.cancel_reason ?? "no reason given"}`,
              );
            }
            if (!live) {
              live = true;
              clearTimeout(connectTimer);
              onLive();
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
      } catch (err) {
        // Our own abort surfaces as "The operation was aborted": say why instead.
        if (why !== null) throw new Error(why);
        throw err;
      } finally {
        if (failStream === fail) failStream = null;
        clearTimeout(connectTimer);
        clearInterval(checkTimer);
      }
    };

    const loop = (async () => {
      const count = this.#endpoints.length;
      // Starts where requests currently succeed; from then on the watch keeps its own cursor.
      let index = this.#current;
      /** The break being retried: when it began, and the failed attempts since. */
      let broken: { since: number; attempts: number } | null = null;
      while (!stopped && !this.#closed) {
        const endpoint = this.#endpoints[index];
        try {
          await streamOnce(endpoint, () => {
            if (broken === null) return;
            this.#logger.log("info", "etcd.watch_resumed", {
              endpoint,
              key: request.key,
              nextRevision,
              attempts: broken.attempts,
              brokenMs: Date.now() - broken.since,
            });
            broken = null;
          });
          return;
        } catch (err) {
          if (stopped || this.#closed) return;
          if (broken === null) {
            this.#logger.log("warn", "etcd.watch_broken", {
              endpoint,
              key: request.key,
              nextRevision,
              error: errorMessage(err),
            });
            broken = { since: Date.now(), attempts: 0 };
          }
          broken.attempts++;
        }
        if (stopped || this.#closed) return;
        index = (index + 1) % count;
        // Every endpoint failed in a row: back off (doubling per round, up to 2 s) until one answers.
        const rounds = broken === null ? 0 : Math.floor((broken.attempts - 1) / count);
        const pause = Math.min(
          this.#watchRetryMs * 2 ** Math.min(rounds, 10),
          Math.max(this.#watchRetryMs, 2000),
        );
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, pause);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = null;
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
        (wake as (() => void) | null)?.();
        this.#watches.delete(watch);
        await loop;
      },
      // The loop then logs the break and resumes from nextRevision on the next endpoint.
      reopen: (reason) => failStream?.(reason),
    };
    this.#watches.add(watch);
    return watch;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort(new Error("the etcd client was closed"));
    await Promise.all([...this.#watches].map((w) => w.cancel()));
    this.#agent?.agent.destroy();
  }
}

/**
 * Parses `--cluster etcd://host:port[,host:port…]` into client endpoints (`http://host:port`),
 * or `etcds://…` (etcd's client port with TLS) into `https://host:port`.
 * @throws EtcdError `invalid_argument` naming the part that is wrong.
 */
export function parseEtcdUrl(url: string): string[] {
  const m = /^(etcds?):\/\/([^/]+)\/?$/.exec(url);
  if (!m) {
    throw new EtcdError(
      "invalid_argument",
      `Cannot use --cluster ${JSON.stringify(url)}: expected etcd://host:port[,host:port...] (plain HTTP) or etcds://host:port[,host:port...] (TLS)`,
    );
  }
  const scheme = m[1] === "etcds" ? "https" : "http";
  return m[2].split(",").map((hostPort) => {
    if (
      !/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$/.test(hostPort) ||
      Number(hostPort.split(":").pop()) > 65535
    ) {
      throw new EtcdError(
        "invalid_argument",
        `Cannot use --cluster ${JSON.stringify(url)}: ${JSON.stringify(hostPort)} is not host:port`,
      );
    }
    return `${scheme}://${hostPort}`;
  });
}
