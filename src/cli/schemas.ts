/**
 * `es-broker schemas`: the schema registry from the command line. It talks HTTP(S) to a running
 * broker's registry (`--registry URL`, default `http://127.0.0.1:8080/registry`), the same
 * Confluent API any registry client uses (docs/registry.md), with the API key and TLS options
 * of the other client commands (`cli/connection.ts`).
 */
import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import type { ConnectionOptions } from "node:tls";
import { UsageError, parseCli } from "./args.ts";
import {
  type ConnectionValues,
  clientTlsOptions,
  connectionHelp,
  connectionOptions,
  httpAddressHint,
  readApiKey,
} from "./connection.ts";
import { errorMessage } from "../lib/errors.ts";

const registryDefault = "http://127.0.0.1:8080/registry";
const mediaType = "application/vnd.schemaregistry.v1+json";

/** Help text of `es-broker schemas`. */
export const schemasHelp = `Usage: es-broker schemas <register|list|get|check> [ARGS] [options]

  register SUBJECT FILE      register the schema in FILE under SUBJECT; prints {"id","version"}
  list                       subjects, one per line
  list SUBJECT               versions of SUBJECT, one per line
  get SUBJECT [VERSION]      a version (default: latest) as JSON: subject, version, id, schema
  get --id ID                the schema with id ID as JSON
  check SUBJECT FILE         would FILE be accepted under SUBJECT? prints "compatible" (exit 0)
                             or "incompatible" and the reasons (exit 1); --version V checks
                             against version V only

The schema type is --type, else AVRO for a .avsc file, JSON for a file whose JSON has a
"$schema" key, AVRO otherwise.

Options:
  --registry URL           the broker's registry (default ${registryDefault}): the
                           broker's HTTP port (--http-port) and /registry; schemas does not
                           take --broker, the TCP address of the other commands
  --type AVRO|JSON         the schema type of FILE
  --version V              with check: compare with version V only (a number or "latest")
  --id ID                  with get: the schema id
  --deleted                with list and get: include soft-deleted subjects and versions
${connectionHelp}
  -h, --help               show this help

Registering needs an admin key once the broker has keys; the other subcommands any key.
`;

/** A registry answer that is not 2xx: its Confluent error code and message. */
class RegistryCallError extends Error {
  override name = "RegistryCallError";
}

/** How {@link call} reaches the registry. */
interface Target {
  base: URL;
  key: string | undefined;
  tls: ConnectionOptions;
  /** Whether `--registry` named it (else it is the default). */
  explicit: boolean;
}

/**
 * One request to the registry. Resolves with the parsed answer.
 * @throws RegistryCallError naming the Confluent error code and message, or the connection failure.
 */
function call(target: Target, method: string, path: string, body?: unknown): Promise<unknown> {
  const url = new URL(`${target.base.pathname.replace(/\/+$/, "")}${path}`, target.base);
  const text = body === undefined ? undefined : JSON.stringify(body);
  const headers: Record<string, string> = { accept: mediaType };
  if (text !== undefined) headers["content-type"] = mediaType;
  if (target.key !== undefined) headers.authorization = `Bearer ${target.key}`;
  const send = url.protocol === "https:" ? https.request : http.request;
  return new Promise((resolve, reject) => {
    const req = send(
      url,
      { method, headers, ...(url.protocol === "https:" ? target.tls : {}) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", (err) => reject(new RegistryCallError(errorMessage(err))));
        res.on("end", () => {
          const answer = Buffer.concat(chunks).toString("utf8");
          const status = res.statusCode ?? 0;
          let value: unknown;
          try {
            value = answer === "" ? null : JSON.parse(answer);
          } catch {
            return reject(
              new RegistryCallError(
                `${method} ${url.pathname}: HTTP ${status}, not JSON: ${answer.slice(0, 200)}`,
              ),
            );
          }
          if (status >= 200 && status < 300) return resolve(value);
          // Confluent's shape; the broker's own (a 401 before the registry) as a fallback.
          const e = value as {
            error_code?: unknown;
            message?: unknown;
            error?: { code?: unknown; message?: unknown };
          } | null;
          const message = e?.message ?? e?.error?.message ?? `HTTP ${status}`;
          const code = e?.error_code ?? e?.error?.code ?? status;
          reject(new RegistryCallError(`${String(message)} (error_code ${String(code)})`));
        });
      },
    );
    req.on("error", (err) =>
      reject(
        new RegistryCallError(
          `cannot reach the registry at ${target.base.href}: ${errorMessage(err)}${
            target.explicit
              ? " (check --registry: the broker serves its registry at /registry on its HTTP port)"
              : " (the default: name the broker's registry with --registry http://HOST:HTTP_PORT/registry, HTTP_PORT being its --http-port)"
          }`,
        ),
      ),
    );
    req.end(text);
  });
}

/** The schema of FILE and its type (see the help). @throws UsageError if unreadable or the type is unknown. */
function readSchemaFile(
  file: string,
  type: string | undefined,
): { schema: string; schemaType: string } {
  let schema: string;
  try {
    schema = readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read ${JSON.stringify(file)}: ${errorMessage(err)}`);
  }
  if (type !== undefined) {
    const upper = type.toUpperCase();
    if (upper !== "AVRO" && upper !== "JSON")
      throw new UsageError(`--type must be AVRO or JSON, got ${JSON.stringify(type)}`);
    return { schema, schemaType: upper };
  }
  if (file.endsWith(".avsc")) return { schema, schemaType: "AVRO" };
  let json: unknown;
  try {
    json = JSON.parse(schema);
  } catch {
    return { schema, schemaType: "AVRO" }; // the registry names the parse error
  }
  const isJsonSchema = typeof json === "object" && json !== null && "$schema" in json;
  return { schema, schemaType: isJsonSchema ? "JSON" : "AVRO" };
}

/** `es-broker schemas …`. Resolves with the exit code. */
export async function schemas(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      registry: { type: "string" },
      // Known only to say what to give instead (the other client commands take --broker).
      broker: { type: "string" },
      type: { type: "string" },
      version: { type: "string" },
      id: { type: "string" },
      deleted: { type: "boolean", default: false },
      ...connectionOptions,
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(schemasHelp);
    return 0;
  }
  // The registry is served on the broker's HTTP port; --broker names its TCP port, and nothing
  // on a single broker says which HTTP port goes with it, so the command cannot derive one.
  if (values.broker !== undefined)
    throw new UsageError(
      `schemas talks to the broker's schema registry over HTTP, not to its TCP port: give --registry ${httpAddressHint(values, values.broker, "/registry")} instead of --broker ${values.broker}`,
    );
  const explicit = values.registry !== undefined;
  let base: URL;
  try {
    base = new URL(values.registry ?? registryDefault);
  } catch {
    throw new UsageError(`--registry must be a URL, got ${JSON.stringify(values.registry)}`);
  }
  if (base.protocol !== "http:" && base.protocol !== "https:")
    throw new UsageError(
      `--registry must be http:// or https://, got ${JSON.stringify(values.registry)}`,
    );
  const tls = clientTlsOptions(values as ConnectionValues) ?? {};
  if (base.protocol === "http:" && Object.keys(tls).length > 0)
    throw new UsageError("TLS options need an https:// --registry");
  const target: Target = { base, key: readApiKey(values as ConnectionValues), tls, explicit };
  const [command, ...args] = positionals;
  const deleted = values.deleted ? "?deleted=true" : "";
  const subjectPath = (s: string) => `/subjects/${encodeURIComponent(s)}`;
  const need = (count: number, usage: string) => {
    if (args.length !== count) throw new UsageError(`usage: es-broker schemas ${usage}`);
  };
  try {
    switch (command) {
      case "register": {
        need(2, "register SUBJECT FILE");
        const [subject, file] = args;
        const input = readSchemaFile(file, values.type);
        const { id } = (await call(target, "POST", `${subjectPath(subject)}/versions`, input)) as {
          id: number;
        };
        const found = (await call(target, "POST", subjectPath(subject), input)) as {
          version: number;
        };
        process.stdout.write(`${JSON.stringify({ id, version: found.version })}\n`);
        return 0;
      }
      case "list": {
        if (args.length > 1) throw new UsageError("usage: es-broker schemas list [SUBJECT]");
        const path =
          args.length === 0 ? `/subjects${deleted}` : `${subjectPath(args[0])}/versions${deleted}`;
        for (const item of (await call(target, "GET", path)) as unknown[])
          process.stdout.write(`${String(item)}\n`);
        return 0;
      }
      case "get": {
        if (values.id !== undefined) {
          need(0, "get --id ID");
          if (!/^\d+$/.test(values.id))
            throw new UsageError(`--id must be a schema id, got ${JSON.stringify(values.id)}`);
          process.stdout.write(
            `${JSON.stringify(await call(target, "GET", `/schemas/ids/${values.id}`))}\n`,
          );
          return 0;
        }
        if (args.length < 1 || args.length > 2)
          throw new UsageError("usage: es-broker schemas get SUBJECT [VERSION]");
        const version = encodeURIComponent(args[1] ?? "latest");
        process.stdout.write(
          `${JSON.stringify(await call(target, "GET", `${subjectPath(args[0])}/versions/${version}${deleted}`))}\n`,
        );
        return 0;
      }
      case "check": {
        need(2, "check SUBJECT FILE [--version V]");
        const [subject, file] = args;
        const input = readSchemaFile(file, values.type);
        const version =
          values.version === undefined ? "" : `/${encodeURIComponent(values.version)}`;
        const result = (await call(
          target,
          "POST",
          `/compatibility${subjectPath(subject)}/versions${version}?verbose=true`,
          input,
        )) as { is_compatible: boolean; messages?: string[] };
        if (result.is_compatible) {
          process.stdout.write("compatible\n");
          return 0;
        }
        process.stdout.write(
          `incompatible\n${(result.messages ?? []).map((m) => `  ${m}\n`).join("")}`,
        );
        return 1;
      }
      default:
        throw new UsageError(
          command === undefined
            ? "a subcommand is required: register, list, get or check"
            : `unknown subcommand ${JSON.stringify(command)} (register, list, get, check)`,
        );
    }
  } catch (err) {
    if (err instanceof RegistryCallError) {
      process.stderr.write(`es-broker: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
