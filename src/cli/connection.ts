/**
 * How the client commands (`produce`, `consume`, `topics`, `groups`, `keys`, `schemas`) reach a
 * broker that wants an API key and/or TLS. The key comes from a file (`--api-key-file`) or the environment
 * (`ES_BROKER_API_KEY`), never from the command line, where any user could read it in a process
 * listing; `--api-key` is refused with a message saying so.
 */
import * as fs from "node:fs";
import type { ConnectionOptions } from "node:tls";
import { apiKeyTextBytesMax } from "../lib/limits.ts";
import { tlsClientOptions } from "../runtime/tls.ts";
import { UsageError } from "./args.ts";

/** Environment variable holding an API key for the client commands. */
export const apiKeyEnv = "ES_BROKER_API_KEY";

/** `parseCli` options shared by every client command. */
export const connectionOptions = {
  "api-key-file": { type: "string" },
  tls: { type: "boolean", default: false },
  "tls-ca": { type: "string" },
  "tls-insecure": { type: "boolean", default: false },
  "tls-cert": { type: "string" },
  "tls-key": { type: "string" },
} as const;

/** The values of {@link connectionOptions} after parsing. */
export interface ConnectionValues {
  "api-key-file"?: string;
  tls?: boolean;
  "tls-ca"?: string;
  "tls-insecure"?: boolean;
  "tls-cert"?: string;
  "tls-key"?: string;
}

/** Help lines for {@link connectionOptions} (indented like the commands' own options). */
export const connectionHelp = `  --api-key-file FILE      read the API key from FILE (default: $${apiKeyEnv}); the key is
                           never accepted on the command line; a FILE that group or others
                           may read gets a warning on stderr (make it mode 0600)
  --tls                    connect with TLS, checking the broker's certificate against the
                           system's CAs (implied by the options below)
  --tls-ca FILE            check the broker's certificate against this CA (PEM)
  --tls-insecure           connect with TLS without checking the broker's certificate (only
                           when named: anyone in the middle can read the key and the records)
  --tls-cert FILE          client certificate (PEM) for brokers that require mutual TLS
  --tls-key FILE           its private key (PEM)`;

/**
 * Refuses `--api-key` anywhere in `argv` (a key there would show in process listings).
 * @throws UsageError saying where to put the key instead.
 */
export function refuseKeyInArgv(argv: readonly string[]): void {
  for (const arg of argv) {
    if (arg === "--") return;
    if (
      arg === "--api-key" ||
      arg.startsWith("--api-key=") ||
      arg === "--key" ||
      arg.startsWith("--key=")
    )
      throw new UsageError(
        `${arg.split("=")[0]} is not accepted: a key on the command line shows in process listings; put it in a file (--api-key-file FILE, mode 0600) or in $${apiKeyEnv}`,
      );
  }
}

/** Key files already warned about in this process (a command may connect more than once). */
const warnedKeyFiles = new Set<string>();

/**
 * The API key from `--api-key-file` (surrounding whitespace dropped) or `$ES_BROKER_API_KEY`;
 * undefined when neither is given. Errors name the file, never its content. A key file that its
 * group or others may access (any of the mode bits 0077, e.g. 0644) is used, but `warn` gets one
 * line naming the file and its mode, once per file (`docs/security.md`; not on Windows, whose
 * files have no such bits).
 * @throws UsageError for a file that cannot be read, is empty, or is longer than a key can be.
 */
export function readApiKey(
  values: ConnectionValues,
  env: Record<string, string | undefined> = process.env,
  warn: (line: string) => void = (line) => process.stderr.write(line),
): string | undefined {
  const path = values["api-key-file"];
  if (path !== undefined) {
    let text: string;
    try {
      const stat = fs.statSync(path);
      if (stat.size > apiKeyTextBytesMax + 64)
        throw new Error(`it is ${stat.size} bytes, far longer than an API key`);
      text = fs.readFileSync(path, "utf8");
      const mode = stat.mode & 0o777;
      if ((mode & 0o077) !== 0 && process.platform !== "win32" && !warnedKeyFiles.has(path)) {
        warnedKeyFiles.add(path);
        warn(
          `es-broker: warning: --api-key-file ${path} has mode 0${mode.toString(8).padStart(3, "0")}: other users can ${(mode & 0o044) !== 0 ? "read" : "change"} the key; make it 0600 (chmod 600 ${path})\n`,
        );
      }
    } catch (err) {
      throw new UsageError(
        `cannot read --api-key-file ${path}: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    const key = text.trim();
    if (key === "") throw new UsageError(`--api-key-file ${path} is empty`);
    return key;
  }
  const fromEnv = env[apiKeyEnv]?.trim();
  return fromEnv === undefined || fromEnv === "" ? undefined : fromEnv;
}

/** True when any TLS option is given (`--tls`, `--tls-ca`, …): the broker serves TLS. */
export function tlsWanted(values: ConnectionValues): boolean {
  return (
    values.tls === true ||
    values["tls-ca"] !== undefined ||
    values["tls-insecure"] === true ||
    values["tls-cert"] !== undefined ||
    values["tls-key"] !== undefined
  );
}

/**
 * The HTTP address to give instead of `--broker HOST:PORT` (a TCP address) to a command that
 * speaks HTTP (`topics alter --url`, `schemas --registry`), for its usage error: the host of
 * `broker`, HTTP_PORT for its HTTP port, and `https://` when TLS options are given, else
 * `http(s)://` (a broker serving TLS serves it on its HTTP port too; newuser report 8: a user of
 * an https:// cluster was told "http://"). `path` is appended (e.g. "/registry").
 */
export function httpAddressHint(values: ConnectionValues, broker: string, path = ""): string {
  const host = /^(\[[^\]]+\]|[^:,]+):\d+(?:,|$)/.exec(broker)?.[1] ?? "HOST";
  return tlsWanted(values)
    ? `https://${host}:HTTP_PORT${path} (the broker's --http-port, default 8080)`
    : `http(s)://${host}:HTTP_PORT${path} (the broker's --http-port, default 8080; https:// when the broker serves TLS)`;
}

/**
 * `node:tls` options for the TLS options given, or undefined for plain TCP (none given).
 * @throws UsageError naming a PEM file that cannot be read, or a certificate without its key.
 */
export function clientTlsOptions(values: ConnectionValues): ConnectionOptions | undefined {
  if (!tlsWanted(values)) return undefined;
  try {
    return tlsClientOptions({
      caPath: values["tls-ca"],
      insecure: values["tls-insecure"] === true,
      certPath: values["tls-cert"],
      keyPath: values["tls-key"],
    });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
}
