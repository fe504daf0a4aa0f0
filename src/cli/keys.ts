/**
 * `es-broker keys`: create, list and revoke API keys (`docs/security.md`), either offline on a
 * stopped broker's data directory (`--data-dir`, taking its lock, so the first admin key can be
 * made before the first start) or against a running broker over its admin HTTP API (`--url`,
 * with an admin key from `--api-key-file` / `ES_BROKER_API_KEY`).
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import { resolve } from "node:path";
import type { ConnectionOptions } from "node:tls";
import {
  KeyStore,
  apiKeysFileName,
  validateKeySpec,
  type ApiKeyInfo,
  type ApiKeySpec,
} from "../auth/key-store.ts";
import { BrokerError } from "../broker/errors.ts";
import { systemClock } from "../runtime/clock.ts";
import { systemKeyCrypto } from "../runtime/crypto.ts";
import { acquireDataDirLock } from "../runtime/lock.ts";
import { NodeFileSystem } from "../runtime/node-fs.ts";
import { jsonLineLogger } from "../lib/logger.ts";
import { UsageError, parseCli } from "./args.ts";
import {
  clientTlsOptions,
  connectionHelp,
  connectionOptions,
  readApiKey,
  type ConnectionValues,
} from "./connection.ts";
import { ensureDataDir } from "./data-dir.ts";

const urlDefault = "http://127.0.0.1:8080";

/** Help text of `es-broker keys`. */
export const keysHelp = `Usage: es-broker keys <create|list|revoke> [options]

  create --name NAME --role ROLE [--topics PATTERNS] [--groups PATTERNS]
                           make a key and print it once on stdout (or into --out FILE):
                           store it now, it cannot be shown again
  list                     every key: name, role, patterns, id, created, last used (never a secret)
  revoke NAME              revoke a key: refused from its next request on; its open TCP
                           connections and event streams answer key_revoked and close

Roles: admin (everything: topics, config, keys, cleanup, storage, metrics), producer (produce to
and describe its topics), consumer (fetch, list offsets and describe its topics; use the groups
its group patterns match). A pattern is an exact name or a prefix ending in "*" ("*" alone is
every name); give several as --topics a,b.* or by repeating --topics. Admin keys take no patterns.

Where the keys are:
  --data-dir DIR           offline: a stopped broker's data directory (takes its lock; created
                           if missing, so the first admin key can be made before the first start;
                           with serve --cluster, its keys go into the cluster's at that start)
  --url URL                a running broker's HTTP address (default ${urlDefault}); needs an
                           admin key (or none while the broker has no keys, from loopback:
                           then only the first key, and it must be --role admin)
${connectionHelp}

Options:
  --name NAME              create: the key's name, unique, 1-64 characters of [A-Za-z0-9._-]
  --role ROLE              create: admin, producer or consumer
  --topics PATTERNS        create: topic patterns (producer, consumer: at least one)
  --groups PATTERNS        create: consumer group patterns (consumer)
  --out FILE               create: write the key to FILE (created with mode 0600, must not
                           exist) instead of stdout
  --json                   list: print JSON
  -h, --help               show this help
`;

/** `es-broker keys …`. Resolves with the exit code. */
export async function keys(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      "data-dir": { type: "string" },
      url: { type: "string" },
      ...connectionOptions,
      name: { type: "string" },
      role: { type: "string" },
      topics: { type: "string", multiple: true },
      groups: { type: "string", multiple: true },
      out: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(keysHelp);
    return 0;
  }
  const [action, ...rest] = positionals;
  if (action === undefined) throw new UsageError("keys needs create, list or revoke");
  if (values["data-dir"] !== undefined && values.url !== undefined)
    throw new UsageError("give --data-dir (offline) or --url (a running broker), not both");
  const store: KeyAdmin =
    values["data-dir"] !== undefined ? await offline(resolve(values["data-dir"])) : online(values);
  try {
    switch (action) {
      case "create": {
        if (rest.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
        if (values.name === undefined) throw new UsageError("keys create needs --name");
        if (values.role === undefined) throw new UsageError("keys create needs --role");
        const wanted: ApiKeySpec = { name: values.name, role: values.role };
        if (values.topics !== undefined) wanted.topics = splitPatterns(values.topics);
        if (values.groups !== undefined) wanted.groups = splitPatterns(values.groups);
        // A role and patterns that do not go together are a mistake in the command line (exit
        // 2), caught here with the broker's own check before the key is asked for.
        try {
          validateKeySpec(wanted);
        } catch (err) {
          if (err instanceof BrokerError) throw new UsageError(err.message);
          throw err;
        }
        // The output file is made first: a key is never created that could not be handed over.
        const out = values.out === undefined ? null : openExclusive(values.out);
        let created: { key: string; info: ApiKeyInfo };
        try {
          created = await store.create(wanted);
        } catch (err) {
          if (out !== null) {
            fs.closeSync(out);
            fs.unlinkSync(values.out!);
          }
          throw err;
        }
        if (out !== null) {
          fs.writeSync(out, `${created.key}\n`);
          fs.fsyncSync(out);
          fs.closeSync(out);
        } else process.stdout.write(`${created.key}\n`);
        const { info } = created;
        process.stderr.write(
          `es-broker: created key ${JSON.stringify(info.name)} (role ${info.role}, id ${info.id}); ${values.out === undefined ? "the key above is shown only this once" : `the key is in ${values.out} (mode 0600) and nowhere else`}: the broker keeps only its hash\n`,
        );
        return 0;
      }
      case "list": {
        if (rest.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
        const list = await store.list();
        if (values.json) process.stdout.write(`${JSON.stringify({ keys: list }, null, 2)}\n`);
        else for (const info of list) process.stdout.write(`${keyLine(info)}\n`);
        return 0;
      }
      case "revoke": {
        if (rest.length !== 1) throw new UsageError("keys revoke needs exactly one NAME");
        const revoked = await store.revoke(rest[0]);
        process.stderr.write(
          `es-broker: revoked key ${JSON.stringify(revoked.name)}${revoked.id === null ? "" : ` (id ${revoked.id})`}\n`,
        );
        return 0;
      }
      default:
        throw new UsageError(
          `unknown keys action ${JSON.stringify(action)} (create, list or revoke)`,
        );
    }
  } finally {
    await store.close();
  }
}

/** One line of `keys list`. */
function keyLine(info: ApiKeyInfo): string {
  const time = (ms: number | null) => (ms === null ? "never" : new Date(ms).toISOString());
  return [
    info.name,
    info.role,
    `id=${info.id}`,
    `topics=${info.topics.join(",") || "-"}`,
    `groups=${info.groups.join(",") || "-"}`,
    `created=${time(info.created_ms)}`,
    `last_used=${time(info.last_used_ms)}`,
  ].join("\t");
}

/** `--topics a,b --topics c` → `["a", "b", "c"]`. */
function splitPatterns(values: string[]): string[] {
  return values
    .flatMap((v) => v.split(","))
    .map((p) => p.trim())
    .filter((p) => p !== "");
}

/** Opens `path` for the new key: created exclusively, mode 0600. @throws UsageError. */
function openExclusive(path: string): number {
  try {
    return fs.openSync(
      path,
      fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL,
      0o600,
    );
  } catch (err) {
    throw new UsageError(
      `cannot create --out ${path}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

/** The three operations, offline or over HTTP. */
interface KeyAdmin {
  create(wanted: ApiKeySpec): Promise<{ key: string; info: ApiKeyInfo }>;
  list(): Promise<ApiKeyInfo[]>;
  /** The revoked key's name, and its id where known (the HTTP route answers 204 without it). */
  revoke(name: string): Promise<{ name: string; id: string | null }>;
  close(): Promise<void>;
}

/** The key store of a stopped broker's data directory, under its lock. */
async function offline(dataDir: string): Promise<KeyAdmin> {
  const nodeFs = new NodeFileSystem();
  await ensureDataDir(nodeFs, dataDir);
  const lock = acquireDataDirLock(dataDir);
  let store: KeyStore;
  try {
    store = await KeyStore.open({
      fs: nodeFs,
      path: `${dataDir}/${apiKeysFileName}`,
      crypto: systemKeyCrypto,
      clock: systemClock,
      logger: jsonLineLogger(
        (line) => process.stderr.write(line),
        () => Date.now(),
        "warn",
      ),
    });
  } catch (err) {
    lock.release();
    throw err;
  }
  return {
    create: (wanted) => store.create(wanted),
    list: async () => store.list(),
    revoke: (name) => store.revoke(name),
    close: async () => {
      await store.close();
      lock.release();
    },
  };
}

/** The admin HTTP API of a running broker (`docs/http-api.md`, "API keys"). */
function online(values: ConnectionValues & { url?: string }): KeyAdmin {
  const base = new URL(values.url ?? urlDefault);
  if (base.protocol !== "http:" && base.protocol !== "https:")
    throw new UsageError(`--url must be http:// or https://, got ${JSON.stringify(values.url)}`);
  const tls = clientTlsOptions(values) ?? {};
  if (base.protocol === "http:" && Object.keys(tls).length > 0)
    throw new UsageError("TLS options need an https:// --url");
  const key = readApiKey(values);
  const call = (method: string, path: string, body?: unknown) =>
    requestJson(base, { method, path, body, key, tls });
  return {
    create: async (wanted) => {
      const answer = (await call("POST", "/v1/admin/keys", wanted)) as ApiKeyInfo & { key: string };
      const { key: text, ...info } = answer;
      return { key: text, info };
    },
    list: async () => ((await call("GET", "/v1/admin/keys")) as { keys: ApiKeyInfo[] }).keys,
    revoke: async (name) => {
      await call("DELETE", `/v1/admin/keys/${encodeURIComponent(name)}`);
      return { name, id: null };
    },
    close: async () => {},
  };
}

/**
 * One JSON request to a broker's HTTP port (`https:` with `tls`: the CA, a client certificate).
 * Resolves with the parsed answer (null for 204). Also used by `cluster status`.
 * @param request.timeoutMs no answer within this long fails (default 30 000).
 * @throws Error `code: message` for an error answer (the broker's code and message); Error for a connection failure.
 */
export function requestJson(
  base: URL,
  request: {
    method: string;
    path: string;
    body?: unknown;
    key: string | undefined;
    tls: ConnectionOptions;
    timeoutMs?: number;
  },
): Promise<unknown> {
  const url = new URL(request.path, base);
  const body = request.body === undefined ? undefined : JSON.stringify(request.body);
  const headers: Record<string, string> = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (request.key !== undefined) headers.authorization = `Bearer ${request.key}`;
  const send = url.protocol === "https:" ? https.request : http.request;
  return new Promise((resolvePromise, reject) => {
    const req = send(
      url,
      { method: request.method, headers, ...(url.protocol === "https:" ? request.tls : {}) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          const status = res.statusCode ?? 0;
          let parsed: unknown = null;
          try {
            parsed = text === "" ? null : JSON.parse(text);
          } catch {
            return reject(
              new Error(
                `Cannot ${request.method} ${url.pathname}: the broker answered ${status} with a body that is not JSON`,
              ),
            );
          }
          if (status >= 200 && status < 300) return resolvePromise(parsed);
          const error = (parsed as { error?: { code?: string; message?: string } } | null)?.error;
          reject(
            new Error(
              `${error?.code ?? `http_${status}`}: ${error?.message ?? `the broker answered ${status}`}`,
            ),
          );
        });
      },
    );
    const timeoutMs = request.timeoutMs ?? 30_000;
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on("error", (err) =>
      reject(
        new Error(
          `Cannot reach ${base.origin}: ${err.message}${
            // An HTTPS port of es-broker on Deno (or of an older one) answers a plain HTTP
            // request with a TLS alert that is no HTTP response, or closes it without an answer;
            // on Node and Bun it answers 400 naming https://, shown as the broker's error.
            url.protocol === "http:" &&
            ["ECONNRESET", "HPE_INVALID_CONSTANT"].includes((err as { code?: string }).code ?? "")
              ? " (if the broker serves HTTPS, give an https:// --url)"
              : ""
          }`,
        ),
      ),
    );
    req.end(body);
  });
}
